"""The native lanes' turns on the node's core loop: `LaneArbiter`, and `ArbiterHost`, what it
uses of the node.

A node runs at most one lane at a time (it leads or follows). While one runs, the core takes
its report before any other event, so the core's state is what it would be had it handled
every message itself (docs/native-lane.md, "Handing over to the Python path"). The core loop
calls the arbiter at each point where the lanes take part, and knows nothing else of them:

- `before_event(item)`, before the core handles an event: a running lane stops and reports
  everything it did first; a wake-up with nothing due is dropped while a lane runs;
- `take()`, for a turn of the lane its runner queued (`LaneHost.wake_for_lane`): the running
  lane's progress, or its last report when its loop ended on its own;
- `after_event()`, after the core handled an event: the local reads waiting for a take read,
  and a lane that does not run arms if it can;
- `after_apply()`, after a step of applying: the leader's lane arms if it can (a writer was
  answered: the next may come);
- `before_sleep()` and `woken()`, around the core loop's sleep: the follower's lane wakes the
  node for the records it writes meanwhile.

A local read waits for `catch_up()` first (docs/native-lane.md, "Reads").
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Literal, Protocol

from kraft.lane.follower import FollowerLaneRunner
from kraft.lane.host import FetchConnection, LaneHost
from kraft.lane.leader import LeaderLaneRunner
from kraft.lane.rules import native
from kraft.raft import events as ev

log = logging.getLogger("kraft.lane.arbiter")


class ArbiterHost(LaneHost, Protocol):
    """What the arbiter uses of the node besides what its runners use (`LaneHost`): the
    follower's fetch in flight, a turn of the lane ahead of the queue, and the apply."""

    @property
    def fetch_sent(self) -> tuple[int, FetchConnection, int, int] | None:
        """The core's fetch in flight as it was sent: (its correlation id for the core, the
        connection, its wire correlation id, its version), None when none is."""

    def take_lane_first(self) -> None:
        """Queue a turn of the lane ahead of whatever else is queued (a read waits for it)."""

    def apply_behind(self) -> bool:
        """Committed records wait to be applied."""

    def apply_committed(self) -> None:
        """Apply every committed record not applied yet."""


class LaneArbiter:
    """A node's lanes on its core loop (see the module docstring): the follower's and the
    leader's runners, each there when switched on and built (`start`)."""

    __slots__ = ("_follower", "_host", "_leader", "_readers", "_takes")

    _host: ArbiterHost

    def __init__(self) -> None:
        self._follower: FollowerLaneRunner | None = None
        """The follower's native lane (`kraft.lane.follower`), when on and built."""
        self._leader: LeaderLaneRunner | None = None
        """The leader's native lane (`kraft.lane.leader`), when on and built."""
        self._readers: list[tuple[int, asyncio.Future[None]]] = []
        """Stale reads waiting for the core loop to take the lane's progress and apply it:
        (the count of takes that serves each, its future)."""
        self._takes = 0
        """How often the core loop took the lane's progress for the readers (`catch_up`)."""

    def start(self, host: ArbiterHost, follower: bool, leader: bool, fsync: bool) -> None:
        """Build the runners of the lanes switched on (`follower`, `leader`) over `host`, where
        they can run (`fsync`: `kraft.log.fsync`)."""
        self._host = host
        module = self._module("lane", host.node_id, fsync) if follower else None
        if module is not None:
            self._follower = FollowerLaneRunner(host, module)
        module = self._module("leader_lane", host.node_id, fsync) if leader else None
        if module is not None:
            self._leader = LeaderLaneRunner(host, module)

    @staticmethod
    def _module(which: str, node_id: int, fsync: bool) -> Any:
        """The native lane's module for a lane that is switched on, or None (logged) where it
        cannot run: the extension was not built, or nothing is synced
        (`kraft.log.fsync=false`)."""
        module = native()
        if module is None or not fsync:
            log.warning("event=%s_unavailable replica=%d reason=%s", which, node_id,
                        "kraft.log.fsync=false" if fsync is False else
                        "the native extension kraft.lane._native was not built")
            return None
        return module

    def _active(self) -> FollowerLaneRunner | LeaderLaneRunner | None:
        """The lane that runs or ended unreported (at most one: a node leads or follows), else
        the follower's runner, if any."""
        lead = self._leader
        if lead is not None and (lead.armed or lead.ended):
            return lead
        return self._follower if self._follower is not None else lead

    # ------------------------------------------------------------------ the core loop's turns

    def before_event(self, item: object
                     ) -> ev.FollowerLaneReport | ev.LeaderLaneReport | Literal[True] | None:
        """Before the core handles `item`: the running lane's last report, which the core
        handles first (the lane reports everything it did before the core sees anything
        else); True when `item` is a wake-up with nothing due while a lane runs (dropped: the
        lane goes on); None when no lane runs or `item` is a lane's own report."""
        lane: FollowerLaneRunner | LeaderLaneRunner | None = self._leader
        if lane is None or not lane.armed:
            lane = self._follower
            if lane is None or not lane.armed:
                return None
        kind = type(item)
        if kind is ev.FollowerLaneReport or kind is ev.LeaderLaneReport:
            return None
        if kind is ev.Tick:
            core = self._host.core
            assert core is not None
            due = core.next_deadline()
            if due is None or due > int(time.time() * 1000):
                return True  # an early wake-up: nothing is due, the lane goes on
        return lane.stop_report("event")

    def take(self) -> ev.FollowerLaneReport | ev.LeaderLaneReport | None:
        """A turn of the lane: what the running lane did since its last report, or its last
        report when its loop ended; None when there is nothing new (the readers served by
        this take then read)."""
        lane = self._active()
        if lane is None:
            return None
        self._takes += 1  # covers every answer the lane has taken now
        report = lane.stop_report("ended") if lane.ended else lane.progress_report()
        if report is None and self._readers:
            self._read_done()
        return report

    def after_event(self) -> None:
        """After the core handled an event: the readers whose take has happened read, and a
        lane that does not run arms if it can."""
        if self._readers:
            self._read_done()
        follow = self._follower
        if follow is not None and not follow.armed:
            follow.try_arm(self._host.fetch_sent)
        lead = self._leader
        if lead is not None and not lead.armed:
            lead.try_arm()

    def after_apply(self) -> None:
        """After a step of applying: the leader's lane arms if it can (a writer was answered:
        the next may come)."""
        lead = self._leader
        if lead is not None and not lead.armed:
            lead.try_arm()

    def before_sleep(self) -> bool:
        """The core loop is about to sleep: True when the follower's lane made progress while
        the loop ran (the core takes it now, as a turn of the lane, rather than at the lane's
        next tick); else the lane wakes the sleep for the records it writes, until `woken`."""
        follow = self._follower
        if follow is not None and follow.waiting(True):
            follow.waiting(False)
            return True
        return False

    def woken(self) -> None:
        """The core loop woke from the sleep `before_sleep` let it take."""
        follow = self._follower
        if follow is not None:
            follow.waiting(False)

    # ------------------------------------------------------------------ reads

    def catch_up(self) -> asyncio.Future[None] | None:
        """What a local read waits for first on a node whose native lane runs and has taken
        answers the core was not told of: the core loop takes the lane's progress next and
        applies what it committed (docs/native-lane.md: every read drains the lane). None when
        there is nothing to wait for."""
        lane = self._active()
        if lane is None:
            return None
        host = self._host
        loop = host.loop
        if loop is None:
            return None
        if not lane.has_progress() and not (lane is self._leader and host.apply_behind()):
            # (a leader's lane answers a write at its commit, before it is applied: a local
            # read waits for that apply, so a writer reads what it was told is written)
            return None
        fut: asyncio.Future[None] = loop.create_future()
        if not self._readers or self._readers[-1][0] <= self._takes:
            host.take_lane_first()
        self._readers.append((self._takes + 1, fut))
        return fut

    def _read_done(self) -> None:
        """After a turn of the core loop: the readers whose take has happened read now, with
        what it committed applied."""
        takes = self._takes
        if self._readers[0][0] > takes:
            return
        self._host.apply_committed()
        waiting = []
        for needed, fut in self._readers:
            if needed > takes:
                waiting.append((needed, fut))
            elif not fut.done():
                fut.set_result(None)
        self._readers = waiting

    # ------------------------------------------------------------------ the node's other calls

    def fetch_adopted(self, correlation_id: int) -> None:
        """The core adopted the follower lane's fetch in flight as `correlation_id`."""
        assert self._follower is not None
        self._follower.adopted(correlation_id)

    def stats(self) -> dict[str, Any]:
        """Each lane's statistics under its status key ("lane": the follower's, "leader_lane"),
        for the lanes there are."""
        out: dict[str, Any] = {}
        if self._follower is not None:
            out["lane"] = self._follower.stats()
        if self._leader is not None:
            out["leader_lane"] = self._leader.stats()
        return out

    def close(self) -> None:
        """The node stops: end the loops, keeping what they wrote (before their connections
        and segments are closed)."""
        if self._follower is not None:
            self._follower.close()
        if self._leader is not None:
            self._leader.close()
