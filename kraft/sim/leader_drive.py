"""The leaders' native lanes drive their replicas in the simulator (docs/native-lane.md,
"How it is checked").

As `kraft.sim.lane_drive` does for followers, a leader's lane does the steady state's work
here, as it does in the node (`kraft.lane.leader`):
- the core arms it (`RaftCore.leader_lease()`) and lends it the fetches it holds parked
  (`RaftCore.lend_parked()`);
- the lane takes the voters' plain fetches (each one an acknowledgement), the clients'
  appends and its own syncs. It moves the high watermark by the rules, answers the fetches
  (at once, or parked until records come, the high watermark moves, or the deadline
  passes, as the core does) and answers each append once it is committed;
- the core sees none of this until the lane reports (`LeaderLaneReport`): every
  `tick_actions` fetches and appends it took (a progress report; the lane goes on), and
  before any other event reaches the core. Stopping finishes a sync under way, and hands the
  parked fetches and the unanswered appends to the core.

Each time the lane's high watermark moves, and each time it answers an append, the drive
tells the simulator's invariants what the lane claims committed, as a core's `Committed`
does. So log matching, leader completeness, no committed record truncated or lost, and one
applied history hold the lane's claims to what the cores guarantee. After each report the
drive also checks that the core's log end, durable end and high watermark are the lane's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import cast

from kraft.lane import LeaderLane, to_native
from kraft.protocol.errors import ErrorCode
from kraft.raft.effects import SendFetchResponse
from kraft.raft.events import (
    Append,
    Event,
    LeaderLaneReport,
    Persisted,
    RequestReceived,
    VoterFetched,
)
from kraft.raft.leader import LeaderState, ParkedFetch, ReplicaProgress
from kraft.raft.messages import FetchRequest, FetchResponse, ReplicaKey
from kraft.sim.host import SimHost
from kraft.sim.node import SimNode

TICK_ACTIONS = 8
"""Fetches and appends a lane takes between two progress reports."""


@dataclass(slots=True)
class _Armed:
    """One leader's lane while it is armed."""

    lane: object
    """`kraft.lane.rules.LeaderLane`, or the C one: the same interface."""
    epoch: int
    leader_id: int
    token: int
    linger_ms: int
    hw_advanced_ms: int
    writes_streaming: bool
    rows: dict[ReplicaKey, ReplicaProgress]
    """The voters' progress rows, copied from the core's at arming, kept by the core's rule."""
    parked: list[ParkedFetch]
    durable: int
    fetched: set[ReplicaKey] = field(default_factory=set)
    """Voters whose rows changed since the last report."""
    pending: dict[int, int] = field(default_factory=dict)
    """Appends not yet answered: append id -> last offset."""
    appended: list[tuple[int, int]] = field(default_factory=list)
    appended_bytes: int = 0
    sync_pending: bool = False
    timer_at: int | None = None
    taken: int = 0


class LeaderDrive:
    """The leaders' lanes of one simulated cluster. `native` (`kraft.lane.native()`)
    runs the rules' C implementation; `fail(rule, message)` reports a violation."""

    def __init__(self, sim: SimHost, fail: Callable[[str, str], None],
                 native: ModuleType | None = None, tick_actions: int = TICK_ACTIONS) -> None:
        self._sim = sim
        self._fail = fail
        self._native = native
        self.tick_actions = tick_actions
        self._armed: dict[int, _Armed] = {}
        self._tokens = 0
        self.stats: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

    # ------------------------------------------------------------------ arming

    def arm(self, n: SimNode) -> None:
        """Arm `n`'s lane if its core gives a lease and it has none armed."""
        core = n.core
        if core is None or n.node_id in self._armed:
            return
        lease = core.leader_lease()
        if lease is None:
            return
        s = core.state
        assert isinstance(s, LeaderState)
        rows: dict[ReplicaKey, ReplicaProgress] = {}
        for v in lease.voters:
            if v.key is None:
                continue
            row = s.progress.get(v.key)
            rows[v.key] = ReplicaProgress(v.key) if row is None else ReplicaProgress(
                row.key, row.end_offset, row.last_fetch_ms, row.last_caught_up_ms,
                row.prev_fetch_ms, row.prev_fetch_leader_end)
        lane: object = LeaderLane.from_lease(lease)
        if self._native is not None:
            lane = to_native(lease, self._native)
        self._tokens += 1
        a = _Armed(lane, lease.epoch, s.leader_id, self._tokens, core.config.hw_linger_ms,
                   s.hw_advanced_at, s.writes_streaming, rows, core.lend_parked(),
                   lease.durable)
        self._armed[n.node_id] = a
        if n.disk.end_offset != lease.log_end:
            self._fail("runtime", f"node {n.node_id}: armed with the log at {lease.log_end}, "
                       f"the disk at {n.disk.end_offset}")
        # a sync the core started (its `Persisted` to come) is the lane's to take
        self._rearm_timer(n, a)
        self._count("leader_drive_armed")

    def crashed(self, n: SimNode) -> None:
        """`n`'s process died: its lane, its parked fetches and its unanswered appends go with
        it; what it synced stays on the disk."""
        self._armed.pop(n.node_id, None)

    # ------------------------------------------------------------------ the lane's work

    def take(self, n: SimNode, event: Event) -> bool:
        """An event for `n`: True when its armed lane took it; otherwise the lane (if armed)
        has stopped and reported, and the event is the core's."""
        a = self._armed.get(n.node_id)
        if a is None:
            return False
        t = type(event)
        if t is RequestReceived:
            assert isinstance(event, RequestReceived)
            req = event.request
            if type(req) is FetchRequest:
                assert isinstance(req, FetchRequest)
                if self._fetch(n, a, event.source, event.correlation_id, req):
                    self._after_action(n, a)
                    return True
        elif t is Append:
            assert isinstance(event, Append)
            if event.values and self._append(n, a, event):
                self._after_action(n, a)
                return True
        elif t is Persisted:
            assert isinstance(event, Persisted)
            self._persisted(n, a, event.end_offset)
            return True
        self.disarm(n, "fetch" if t is RequestReceived else "append" if t is Append
                    else "message")
        return False

    def _after_action(self, n: SimNode, a: _Armed) -> None:
        a.taken += 1
        if a.taken >= self.tick_actions:
            self._report(n, a, armed=True)

    def _fetch(self, n: SimNode, a: _Armed, source: int, corr: int, req: FetchRequest) -> bool:
        lane = cast(LeaderLane, a.lane)
        hw_before = lane.high_watermark
        decision = lane.fetch(req.replica_id, req.replica_directory_id, req.fetch_offset,
                              req.last_fetched_epoch, req.current_leader_epoch,
                              req.max_wait_ms)
        if decision is None:
            return False
        now = self._sim.now
        key = ReplicaKey(req.replica_id, req.replica_directory_id)
        row = a.rows.get(key)
        if row is None:  # a voter of a set without directory ids, first counted now
            row = a.rows[key] = ReplicaProgress(key)
        row.record_fetch(req.fetch_offset, lane.log_end, now)
        a.fetched.add(key)
        self._count("leader_drive_fetches")
        if lane.high_watermark != hw_before:
            self._hw_moved(n, a)
        hw = lane.high_watermark
        behind = req.high_watermark is not None and hw is not None and req.high_watermark < hw
        if decision.read_offset is None and req.max_wait_ms > 0 and (
                not behind or a.writes_streaming):
            wait = min(req.max_wait_ms, a.linger_ms) if behind else req.max_wait_ms
            a.parked.append(ParkedFetch(source, corr, req, now + wait))
            self._rearm_timer(n, a)
        else:
            self._answer(n, a, source, corr, req)
        return True

    def _append(self, n: SimNode, a: _Armed, ev: Append) -> bool:
        lane = cast(LeaderLane, a.lane)
        base = lane.log_end
        last = base + len(ev.values) - 1
        if not lane.appended(base, last, a.epoch):
            return False
        sim = self._sim
        disk = n.disk
        if disk.end_offset != base:
            self._fail("runtime", f"node {n.node_id}: the lane appends {base} but the disk "
                       f"ends at {disk.end_offset}")
        for v in ev.values:
            off, h = disk.append(a.epoch, v, False)
            sim.inv.on_record(n.node_id, off, a.epoch, h)
        sim.note(n.node_id, "lane took append", f"#{ev.append_id} {base}-{last}")
        self._count("leader_drive_appends")
        a.appended.append((base, last))
        a.appended_bytes += ev.size_bytes or len(ev.values)
        a.pending[ev.append_id] = last
        a.writes_streaming = a.linger_ms > 0 and sim.now - a.hw_advanced_ms <= a.linger_ms
        parked, a.parked = a.parked, []
        for p in parked:  # the new records go to every fetch waiting for them
            self._answer(n, a, p.source, p.correlation_id, p.request)
        if not a.sync_pending:
            a.sync_pending = True
            # a sync takes 1-8 ms, and one in four stalls for up to 40: a voter's
            # acknowledgement then often comes before the leader's own sync is done
            took = sim.rng.randint(1, 8) if sim.rng.random() < 0.75 else sim.rng.randint(9, 40)
            sim.leader_lane_later(n, "sync", a.token, sim.now + took)
        return True

    def synced(self, n: SimNode, token: int) -> None:
        """The lane's sync is done (its `token` names the arming)."""
        a = self._armed.get(n.node_id)
        if a is None or a.token != token or not a.sync_pending:
            return  # stopped meanwhile: the stop finished the sync
        self._finish_sync(n, a)

    def _finish_sync(self, n: SimNode, a: _Armed) -> None:
        a.sync_pending = False
        self._persisted(n, a, n.disk.flush())

    def _persisted(self, n: SimNode, a: _Armed, end: int) -> None:
        """The leader's log is durable below `end` (the lane's sync, or one the core started
        before the lane was armed)."""
        lane = cast(LeaderLane, a.lane)
        hw_before = lane.high_watermark
        lane.persisted(end)
        a.durable = lane.durable
        if lane.high_watermark != hw_before:
            self._hw_moved(n, a)

    def _hw_moved(self, n: SimNode, a: _Armed) -> None:
        """The lane's high watermark moved: it is claimed committed, the appends below it are
        answered, and the parked fetches that asked for it get it (or wait for the next
        records while writes stream in), as the core's `replication.maybe_advance_hw` does."""
        sim = self._sim
        lane = cast(LeaderLane, a.lane)
        hw = lane.high_watermark
        assert hw is not None
        a.hw_advanced_ms = sim.now
        sim.check_durable_majority(n, hw)
        sim.inv.on_commit(n.node_id, hw, n.disk.chain_at(hw), a.epoch)
        for append_id in sorted(i for i, last in a.pending.items() if last < hw):
            del a.pending[append_id]
            sim.append_committed(append_id)
            self._count("leader_drive_committed")
        if a.writes_streaming:
            due = sim.now + a.linger_ms
            for p in a.parked:
                if p.request.high_watermark is not None and p.deadline > due:
                    p.deadline = due
            self._rearm_timer(n, a)
        else:
            done = [p for p in a.parked if p.request.high_watermark is not None]
            a.parked = [p for p in a.parked if p.request.high_watermark is None]
            for p in done:
                self._answer(n, a, p.source, p.correlation_id, p.request)

    def timer(self, n: SimNode, token: int) -> None:
        """A parked fetch's deadline may have come."""
        a = self._armed.get(n.node_id)
        if a is None or a.token != token:
            return
        now = self._sim.now
        if a.timer_at is not None and a.timer_at <= now:
            a.timer_at = None
        due = [p for p in a.parked if p.deadline <= now]
        if due:
            a.parked = [p for p in a.parked if p.deadline > now]
            for p in due:
                self._answer(n, a, p.source, p.correlation_id, p.request)
        self._rearm_timer(n, a)

    def _rearm_timer(self, n: SimNode, a: _Armed) -> None:
        if not a.parked:
            return
        first = min(p.deadline for p in a.parked)
        if a.timer_at is None or first < a.timer_at or a.timer_at < self._sim.now:
            a.timer_at = max(first, self._sim.now)
            self._sim.leader_lane_later(n, "timer", a.token, a.timer_at)

    def _answer(self, n: SimNode, a: _Armed, source: int, corr: int, req: FetchRequest) -> None:
        """Answer a voter's fetch: the records from its offset, if any, and the high
        watermark, as the core's `replication.answer_fetch` would."""
        lane = cast(LeaderLane, a.lane)
        hw = lane.high_watermark
        resp = FetchResponse(ErrorCode.NONE, a.leader_id, a.epoch, hw if hw is not None else -1,
                             lane.log_start)
        read = req.fetch_offset if req.fetch_offset < lane.log_end else None
        self._sim.execute(n, [SendFetchResponse(source, corr, resp, read, req.max_bytes)])

    # ------------------------------------------------------------------ reports

    def disarm(self, n: SimNode, cause: str) -> None:
        """Stop `n`'s lane, if armed: finish a sync under way, then report to the core."""
        a = self._armed.get(n.node_id)
        if a is None:
            return
        self._count(f"leader_drive_stop_{cause}")
        if a.sync_pending:
            self._finish_sync(n, a)
        self._report(n, a, armed=False)

    def _report(self, n: SimNode, a: _Armed, armed: bool) -> None:
        lane = cast(LeaderLane, a.lane)
        voters = tuple(
            VoterFetched(k, r.end_offset, r.last_fetch_ms, r.last_caught_up_ms,
                         r.prev_fetch_leader_end)
            for k, r in a.rows.items() if k in a.fetched)
        pending: tuple[tuple[int, int], ...] = ()
        parked: tuple[ParkedFetch, ...] = ()
        if not armed:
            del self._armed[n.node_id]
            pending = tuple(sorted(a.pending.items()))
            parked = tuple(a.parked)
        report = LeaderLaneReport(
            a.epoch, tuple(a.appended), a.appended_bytes, a.durable, lane.high_watermark,
            voters, a.hw_advanced_ms, a.writes_streaming, pending, parked, armed)
        self._count("leader_drive_reports" if not armed else "leader_drive_progress")
        a.appended.clear()
        a.appended_bytes = 0
        a.fetched.clear()
        a.taken = 0
        self._sim.deliver_core(n, report)
        core = n.core
        if core is None:
            return
        if (core.log.end_offset != n.disk.end_offset or core.log.persisted_end != a.durable
                or core.high_watermark != lane.high_watermark):
            self._fail("leader-drive", f"node {n.node_id}: after the lane's report the core's "
                       f"log ends at {core.log.end_offset} (durable {core.log.persisted_end}, "
                       f"high watermark {core.high_watermark}), the disk at "
                       f"{n.disk.end_offset}, and the lane's durable end is {a.durable} "
                       f"(high watermark {lane.high_watermark})")
        if armed and core.leader_lease() is None:
            self._report(n, a, armed=False)  # the lease ended: hand the rest over
            self._count("leader_drive_stop_after_report")
