"""The follower's native lane in the node (docs/native-lane.md; `kraft.lane.follower`).

While a follower is in the steady state of an epoch, `FollowerLaneRunner` hands its fetch
connection to the leader and the active segment to `kraft.lane._native.FollowerShell`, a loop on
its own thread without the GIL. The loop takes the leader's plain answers, writes and
fdatasyncs their batches, and sends the next fetch, which acknowledges them.

The core learns what the loop did from `FollowerLaneReport`s:
- a progress report while the loop has taken answers since the last one (the loop goes on):
  at the bookkeeping tick (`kraft.lane.tick.ms`, backing off while the loop is quiet:
  `kraft.lane.ticker`), before a local read, before the core loop sleeps, and when the
  loop's `news_fd` wakes the node (a new high watermark, or records written while the core
  loop slept). The segment's new batches are adopted by the log (`adopt_written`), and the
  core moves its log end, durable end, high watermark and fetch deadline, so the node applies
  what committed;
- a last report when the lane stops, before the core handles any other event.

The lane stops when:
- an event other than its own reaches the core (an inbound request, a timer that is due, a
  client's write): the node stops it first;
- the loop meets an answer it does not take (an error, a new epoch, a divergence, a control
  batch, records past the segment's room): it keeps that answer unread, and the connection
  gets it back with the fetch in flight, whose answer reaches the core under the id the core
  adopted it with (`FetchAdopted`);
- the leader closes the connection, or the loop fails. A failed write or fdatasync stops the
  node, as a failed fsync does.

The lane arms only when the core gives a lease (`RaftCore.follower_lease()`), the log's last
epoch is the lease's, everything appended is durable with no flush in flight, and the fetch in
flight was sent on an open connection that holds nothing else.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kraft.lane.host import FetchConnection, LaneHost
from kraft.lane.ticker import LaneTicker, stop_loop
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.storage.errors import StorageError

log = logging.getLogger("kraft.server.follower_lane")



@dataclass(slots=True)
class _Armed:
    """One armed lane: its loop, the lease it serves, and what was reported so far."""

    shell: Any
    conn: FetchConnection
    epoch: int
    leader: int
    template: m.FetchRequest
    version: int
    reported_end: int
    """The log end offset the core was last told of."""
    reported_pos: int
    """The segment's write position the log last adopted."""
    reported_answers: int = 0


def next_fetch(template: m.FetchRequest, log_end: int, last_epoch: int,
               hw: int | None) -> m.FetchRequest:
    """The lane's fetch in flight, as a report gives it to the core: the lease's fetch from
    the lane's log end, its last epoch and its high watermark. (Built field by field: with the
    caches cold, after a quiet spell, `dataclasses.replace` cost twice as much.)"""
    return m.FetchRequest(template.replica_id, template.replica_directory_id,
                          template.current_leader_epoch, log_end, last_epoch,
                          template.max_wait_ms, template.max_bytes,
                          hw if hw is not None else -1, template.cluster_id)


class FollowerLaneRunner:
    """Arms, ticks and stops one node's follower lane (`module` is `kraft.lane._native`)."""

    def __init__(self, host: LaneHost, module: ModuleType) -> None:
        self._host = host
        self._module = module
        self._armed: _Armed | None = None
        self._ticker: LaneTicker | None = None
        self._tick_s = host.lane_tick_ms / 1000
        self._give_back: tuple[FetchConnection, int, int, bytes, str, m.FetchRequest, int,
                               int] | None = None
        """After a stop, until the core adopts the fetch: (connection, its wire correlation id,
        the next correlation id, the unread bytes, why the connection is to be closed ("closed"
        by the leader, an "error", or "" to keep it), the fetch, its version, the leader)."""
        self.ended = False
        """The loop ended on its own: the core loop takes its last report next."""
        self.arms = 0
        self.reports = 0
        self.stops: dict[str, int] = {}

    def stats(self) -> dict[str, Any]:
        """What the lane has done (for the status page): times armed, reports taken by the
        core, stops by cause, and whether it runs now."""
        return {"armed": self._armed is not None, "arms": self.arms, "reports": self.reports,
                "stops": dict(self.stops)}

    @property
    def armed(self) -> bool:
        """The loop runs (the core must take its report before any other event)."""
        return self._armed is not None

    def waiting(self, flag: bool) -> bool:
        """The node's core loop is about to sleep (True) or has woken (False). While it
        sleeps, the loop's next write of records wakes it, once: the core adopts them while
        the acknowledgement travels, and the answer that commits them finds it ready (a write
        after a quiet spell shows on this follower sooner after its commit). Under load the
        core loop rarely sleeps, and the reports keep the tick's pace.

        With True, returns whether the loop has progress the core was not told of (made
        while the core loop ran): the core loop takes it instead of sleeping. The flag is set
        before the check and the loop publishes before it reads the flag, so progress is
        either seen here or wakes the sleep."""
        a = self._armed
        if a is None:
            return False
        a.shell.waiting(flag)
        return flag and self.has_progress()

    # ------------------------------------------------------------------ arming

    def try_arm(self, fetch_sent: tuple[int, FetchConnection, int, int] | None) -> None:
        """Arm the lane if the core gives a lease and the fetch in flight is the one sent on
        an open connection as `fetch_sent` = (core correlation id, connection, wire
        correlation id, version)."""
        host = self._host
        core, dlog = host.core, host.log
        if self._armed is not None or core is None or dlog is None or fetch_sent is None:
            return
        lease = core.follower_lease()
        if lease is None or core.log.last_epoch() != lease.epoch:
            return
        core_corr, conn, wire, version = fetch_sent
        if core_corr != lease.fetch_correlation or version not in (17, 18):
            return
        if (dlog.flush_in_flight or dlog.durable_end_offset != dlog.log_end_offset
                or dlog.log_end_offset != lease.log_end):
            return
        template = core.lane_fetch()
        assert template is not None
        active = dlog.segments[-1]
        lent = conn.lend()
        if lent is None:
            return
        fd, next_corr = lent
        C = self._module
        lane = C.FollowerLane(lease.epoch, lease.leader_id, wire, lease.log_end,
                              lease.high_watermark)
        limit = max(dlog.segment_bytes, active.size)
        try:
            shell = C.FollowerShell(
                fd, active.fd, active.size, lane, lease.epoch, next_corr, version,
                conn.client_id, host.cluster_id, template.replica_id,
                template.replica_directory_id, template.max_wait_ms, template.max_bytes,
                write_limit=limit)
            shell.start()
        except (OSError, ValueError, RuntimeError) as exc:
            log.warning("event=lane_not_armed replica=%d error=%r", host.node_id, str(exc))
            host.give_back_fetch(conn, next_corr, b"", version, wire, lease.leader_id,
                                 core_corr, template)
            return
        self._armed = _Armed(shell, conn, lease.epoch, lease.leader_id, template, version,
                             lease.log_end, active.size)
        loop = host.loop
        assert loop is not None
        loop.add_reader(shell.done_fd, self._ended)
        loop.add_reader(shell.news_fd, self._news)
        self._ticker = LaneTicker(loop, self._tick_s, self._tick)
        self.arms += 1
        log.debug("event=lane_armed replica=%d epoch=%d leader=%d log_end=%d",
                  host.node_id, lease.epoch, lease.leader_id, lease.log_end)

    # ------------------------------------------------------------------ ticks

    def _tick(self) -> bool:
        """The bookkeeping tick: hands the loop's progress on, if any (True)."""
        if not self.has_progress():
            return False
        self._host.wake_for_lane()
        return True

    def _news(self) -> None:
        """The loop took an answer that moved the high watermark with no records (KIP-1166's
        answer to an acknowledgement), or wrote records while the core loop slept
        (`waiting`): the core takes it now, and the node applies the commit, rather than at
        the next tick."""
        a = self._armed
        if a is None:
            return
        try:  # noqa: SIM105 - (contextlib.suppress is a context manager's cost on each wake)
            os.read(a.shell.news_fd, 4096)
        except (BlockingIOError, InterruptedError):
            pass
        if self.has_progress():
            self._host.wake_for_lane()

    def _ended(self) -> None:
        """The loop ended on its own (a handover, the leader closing, a failure)."""
        if self._armed is not None:
            loop = self._host.loop
            assert loop is not None
            loop.remove_reader(self._armed.shell.done_fd)
            self.ended = True
            self._host.wake_for_lane()

    def has_progress(self) -> bool:
        """The running loop took answers that the core has not been told of."""
        a = self._armed
        return a is not None and a.shell.progress()[0] != a.reported_answers

    def progress_report(self) -> ev.FollowerLaneReport | None:
        """What the running loop did since the last report (None: nothing new), or its last
        report when it has ended meanwhile."""
        a = self._armed
        if a is None:
            return None
        answers, log_end, write_pos, hw, last_epoch, _corr, leader_hw = a.shell.progress()
        if answers == a.reported_answers:
            return None
        return self._report(a, answers, log_end, write_pos, hw, leader_hw, last_epoch,
                            armed=True)

    def stop_report(self, cause: str) -> ev.FollowerLaneReport | None:
        """Stop the loop, if armed, and return its last report (the core must handle it
        before anything else); the connection goes back once the core adopts the fetch."""
        a = self._armed
        if a is None:
            return None
        self._armed = None
        self.ended = False
        host = self._host
        r = stop_loop(host.loop, a.shell, (a.shell.done_fd, a.shell.news_fd), self._ticker, self.stops, cause)
        self._ticker = None
        reason = str(r["reason"])
        if reason == "error" and r["error_at"] in ("write", "fdatasync"):
            self._adopt(a, int(r["write_pos"]), int(r["log_end"]), strict=False)
            raise StorageError(f"the follower lane's {r['error_at']} failed: error {r['error']}"
                               " (the log can no longer be trusted; stopping)")
        report = self._report(a, int(r["answers"]), int(r["log_end"]), int(r["write_pos"]),
                              r["high_watermark"], r["leader_high_watermark"],
                              int(r["last_epoch"]), armed=False)
        close = reason if reason in ("closed", "error") else ""
        if reason == "error":
            log.warning("event=lane_stopped replica=%d reason=error at=%s error=%s",
                        host.node_id, r["error_at"], r["error"])
        fetch = report.fetch
        assert fetch is not None
        self._give_back = (a.conn, int(r["fetch_correlation"]), int(r["next_correlation"]),
                           bytes(r["unread"]), close, fetch, a.version,
                           a.leader)
        log.debug("event=lane_stopped replica=%d reason=%s cause=%s answers=%s",
                  host.node_id, reason, cause, r["answers"])
        return report

    def _report(self, a: _Armed, answers: int, log_end: int, write_pos: int, hw: int | None,
                leader_hw: int | None, last_epoch: int, armed: bool) -> ev.FollowerLaneReport:
        self._adopt(a, write_pos, log_end, strict=True)
        appended = ((a.reported_end, log_end - 1),) if log_end > a.reported_end else ()
        grown = write_pos - a.reported_pos
        took = answers != a.reported_answers
        a.reported_answers, a.reported_end, a.reported_pos = answers, log_end, write_pos
        now = int(time.time() * 1000)
        fetch = next_fetch(a.template, log_end, last_epoch, hw)
        if leader_hw is not None and took:
            # the leader's own high watermark, not this follower's (which is capped at its
            # log's end): a follower still fetching its way up must not look caught up
            self._host.leader_high_watermark(leader_hw, a.epoch)
        self.reports += 1
        return ev.FollowerLaneReport(a.epoch, a.leader, appended, grown, log_end, hw,
                                     now if took else None, fetch, now, armed)

    def _adopt(self, a: _Armed, write_pos: int, log_end: int, strict: bool) -> None:
        dlog = self._host.log
        assert dlog is not None
        end = dlog.adopt_written(write_pos)
        if strict and end != log_end:
            raise StorageError(f"the follower lane wrote up to offset {log_end}, but its bytes "
                               f"in the segment end at {end}")

    def adopted(self, correlation_id: int) -> None:
        """The core adopted the stopped lane's fetch in flight as `correlation_id`: the
        connection goes back, and the fetch's answer will reach the core under that id."""
        back, self._give_back = self._give_back, None
        if back is None:
            return  # a progress report: the loop goes on with the connection
        conn, wire, next_corr, unread, close, fetch, version, leader = back
        self._host.give_back_fetch(conn, next_corr, unread, version, wire, leader,
                                   correlation_id, fetch)
        if close == "closed":  # the fetch fails as disconnected: the leader's process is gone
            conn.peer_closed()
        elif close:
            conn.close()

    def close(self) -> None:
        """The node stops: end the loop and keep what it wrote (no report: the core is gone)."""
        a = self._armed
        if a is None:
            return
        self._armed = None
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        loop = self._host.loop
        if loop is not None:
            loop.remove_reader(a.shell.done_fd)
            loop.remove_reader(a.shell.news_fd)
        r = a.shell.stop()
        try:
            self._adopt(a, int(r["write_pos"]), int(r["log_end"]), strict=False)
        except StorageError as exc:
            log.warning("event=lane_close_failed replica=%d error=%r", self._host.node_id,
                        str(exc))

