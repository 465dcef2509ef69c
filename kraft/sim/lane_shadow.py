"""The native lane's rules (`kraft.lane.rules`) run beside every simulated core.

The rules against the core (docs/native-lane.md, "How it is checked"). Before each event, a
replica's lane (armed from the lease its core gives, `RaftCore.leader_lease` /
`follower_lease`) decides whether the event is its own and what it makes of it:
- on a leader: a voter's fetch, a client's append, the leader's own sync;
- on a follower: the leader's answer to the fetch in flight.

The core then handles the event as always, and the shadow checks that it did the same:
- the same high watermark;
- the same acknowledged offset for the voter, and an answer from the same offset (or
  parked), with no error, divergence or snapshot id;
- the same log end;
- the same records appended.

After an event the lane hands over, or any other event, the lane is armed again from the
core's state before the next event of its kinds. A disagreement is an invariant violation
(`lane`), so every simulated seed also checks the lane's rules under the simulator's faults.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import cast

from kraft.lane import FollowerLane, LaneAnswer, LaneFetch, LeaderLane, to_native
from kraft.raft.core import RaftCore
from kraft.raft.effects import (
    AppendFetched,
    AppendRecords,
    Effect,
    SendFetchResponse,
    SendRequest,
)
from kraft.raft.events import Append, Event, Persisted, RequestReceived, ResponseReceived
from kraft.raft.leader import LeaderState
from kraft.raft.messages import FetchRequest, FetchResponse, ReplicaKey
from kraft.raft.state import FollowerState

_LANE_EVENTS = frozenset((RequestReceived, ResponseReceived, Append, Persisted))
"""The kinds of event a lane may take (a fetch or its answer among the first two)."""
_APPEND = "append"
_PERSISTED = "persisted"


class LaneShadow:
    """The lanes of one simulated cluster, one per replica, and their check against the
    cores. `fail(rule, message)` reports a disagreement. With `native` (`kraft.lane.rules.
    native()`), the lanes are the C implementation of the rules instead of the Python one."""

    def __init__(self, fail: Callable[[str, str], None], native: ModuleType | None = None) -> None:
        self._fail = fail
        self._native = native
        # (core, lane, leads): the lane is kraft.lane.rules's or the C one, the same interface
        self._lanes: dict[int, tuple[RaftCore, object | None, bool]] = {}
        self.handled = 0
        """Events a lane took (each one checked against its core)."""
        self.handed_over = 0
        """Events of a lane's kinds (a fetch, an append, a sync, an answer) that it handed
        over, with a lane armed."""

    def before(self, node_id: int, core: RaftCore, event: Event) -> object | None:
        """The lane's decision on `event`, made before the core sees it (None: not the lane's)."""
        t = type(event)
        if t not in _LANE_EVENTS:
            return None
        entry = self._lanes.get(node_id)
        if entry is None or entry[0] is not core:
            # armed when it is needed, from the core's state just before the event (the same
            # lease as arming right after the event before it)
            entry = self._arm(core)
            self._lanes[node_id] = entry
        lane, leads = entry[1], entry[2]
        if lane is None:
            return None
        decision: object | None = None
        if leads:
            lead = cast(LeaderLane, lane)
            if t is RequestReceived:
                assert isinstance(event, RequestReceived)
                req = event.request
                if type(req) is not FetchRequest:
                    return None
                assert isinstance(req, FetchRequest)
                decision = lead.fetch(req.replica_id, req.replica_directory_id, req.fetch_offset,
                                      req.last_fetched_epoch, req.current_leader_epoch,
                                      req.max_wait_ms)
            elif t is Append:
                return _APPEND
            elif t is Persisted:
                assert isinstance(event, Persisted)
                lead.persisted(event.end_offset)
                return _PERSISTED
            else:
                return None
        elif t is ResponseReceived:
            assert isinstance(event, ResponseReceived)
            resp = event.response
            if type(resp) is not FetchResponse:
                return None
            assert isinstance(resp, FetchResponse)
            follow = cast(FollowerLane, lane)
            decision = follow.answer(event.correlation_id, int(resp.error_code), resp.leader_id,
                                     resp.leader_epoch, resp.high_watermark,
                                     resp.diverging_epoch is not None,
                                     resp.snapshot_id is not None, resp.batches)
        else:
            return None
        if decision is None:
            self.handed_over += 1
        return decision

    def _arm(self, core: RaftCore) -> tuple[RaftCore, object | None, bool]:
        """The lane of the lease `core` gives now (None: it gives none), and whether it leads."""
        lane: LeaderLane | FollowerLane | None = None
        leader = core.leader_lease()
        if leader is not None:
            lane = LeaderLane.from_lease(leader)
        else:
            follower = core.follower_lease()
            if follower is not None:
                lane = FollowerLane.from_lease(follower)
        leads = leader is not None
        if lane is None or self._native is None:
            return core, lane, leads
        return core, to_native(lane, self._native), leads

    def after(self, node_id: int, core: RaftCore, event: Event, decision: object | None,
              effects: list[Effect]) -> None:
        """Check the core's handling of `event` against the lane's `decision`, then keep the
        lane (it handled the event and the core stayed in its lease) or re-arm it."""
        entry = self._lanes.get(node_id)
        lane = entry[1] if entry is not None and entry[0] is core else None
        leads = entry is not None and entry[2]
        if decision is None or lane is None or not _same_lease(core, lane, leads):
            self._lanes.pop(node_id, None)  # re-armed before the next event of its kinds
            return
        self.handled += 1
        if leads:
            self._check_leader(node_id, core, event, decision, effects, cast(LeaderLane, lane))
        else:
            self._check_follower(node_id, core, decision, effects, cast(FollowerLane, lane))

    def _check_leader(self, node_id: int, core: RaftCore, event: Event, decision: object,
                      effects: list[Effect], lane: LeaderLane) -> None:
        where = f"node {node_id} epoch {lane.epoch}"
        s = core.state
        assert isinstance(s, LeaderState)
        if decision == _APPEND:
            for e in effects:
                if type(e) is AppendRecords:
                    assert isinstance(e, AppendRecords)
                    last = e.base_offset + len(e.values) - 1
                    if not lane.appended(e.base_offset, last, e.epoch):
                        self._fail("lane", f"{where}: the core appended {e.base_offset}-"
                                   f"{last} in epoch {e.epoch}; the lane's tail is at "
                                   f"{lane.log_end}")
                        return
        elif isinstance(decision, LaneFetch):
            assert isinstance(event, RequestReceived)
            req = event.request
            assert isinstance(req, FetchRequest)
            self._check_fetch(where, s, event.source, event.correlation_id, req, decision,
                              effects)
        if s.high_watermark != lane.high_watermark:
            self._fail("lane", f"{where}: after {type(event).__name__} the core's high "
                       f"watermark is {s.high_watermark}, the lane's {lane.high_watermark}")
        if core.log.end_offset != lane.log_end or core.log.persisted_end != lane.durable:
            self._fail("lane", f"{where}: the core's log ends at {core.log.end_offset} "
                       f"(durable {core.log.persisted_end}), the lane's at {lane.log_end} "
                       f"(durable {lane.durable})")

    def _check_follower(self, node_id: int, core: RaftCore, decision: object,
                        effects: list[Effect], lane: FollowerLane) -> None:
        where = f"node {node_id} epoch {lane.epoch}"
        assert isinstance(decision, LaneAnswer)
        appended = [b for e in effects if type(e) is AppendFetched
                    for b in e.batches]
        got = (appended[0].base_offset, appended[-1].last_offset) if appended else None
        if got != decision.appended:
            self._fail("lane", f"{where}: the core appended {got} from the leader's answer, "
                       f"the lane {decision.appended}")
        if core.high_watermark != lane.high_watermark or core.log.end_offset != lane.log_end:
            self._fail("lane", f"{where}: after the leader's answer the core has high watermark "
                       f"{core.high_watermark} and log end {core.log.end_offset}, the lane "
                       f"{lane.high_watermark} and {lane.log_end}")
        for e in effects:
            # the next fetch, when the core sends it at once (nothing to sync): the lane would
            # have sent it itself, and takes its answer next
            if type(e) is SendRequest and type(e.request) is FetchRequest:
                assert isinstance(e, SendRequest)
                lane.fetch_correlation = e.correlation_id

    def _check_fetch(self, where: str, s: LeaderState, source: int, corr: int,
                     req: FetchRequest, decision: LaneFetch, effects: list[Effect]) -> None:
        row = s.progress.get(ReplicaKey(req.replica_id, req.replica_directory_id))
        if row is None or row.end_offset != req.fetch_offset:
            self._fail("lane", f"{where}: the lane counted replica {req.replica_id} at "
                       f"{req.fetch_offset}; the core has "
                       f"{row.end_offset if row is not None else 'no row'}")
        for e in effects:
            if (type(e) is SendFetchResponse and e.correlation_id == corr
                    and e.destination == source):  # correlation ids are the sender's own
                assert isinstance(e, SendFetchResponse)
                r = e.response
                if (r.error_code != 0 or r.diverging_epoch is not None
                        or r.snapshot_id is not None):
                    self._fail("lane", f"{where}: the lane took replica {req.replica_id}'s "
                               f"fetch at {req.fetch_offset}; the core answered {r}")
                if e.read_offset != decision.read_offset:
                    self._fail("lane", f"{where}: the lane would answer replica "
                               f"{req.replica_id} from {decision.read_offset}, the core from "
                               f"{e.read_offset}")
                return
        if not any(p.correlation_id == corr and p.source == source for p in s.parked):
            self._fail("lane", f"{where}: the lane took replica {req.replica_id}'s fetch; the "
                       f"core neither answered nor parked it")


def _same_lease(core: RaftCore, lane: object, leads: bool) -> bool:
    """The core is still in the role and epoch of the lane's lease (a timer may have ended it
    while the core handled the event; that is the core's, not the lane's)."""
    s = core.state
    if leads:
        return isinstance(s, LeaderState) and s.epoch == cast(LeaderLane, lane).epoch
    f = cast(FollowerLane, lane)
    return isinstance(s, FollowerState) and s.epoch == f.epoch and s.leader_id == f.leader_id
