"""The followers' native lanes drive their replicas in the simulator (docs/native-lane.md,
"How it is checked").

`kraft.sim.lane_shadow` runs a lane beside each core and checks that the two decide alike;
the core still does all the work. Here a follower's lane does the work, as it does in the
node (`kraft.lane.follower`):
- the core arms it (`RaftCore.follower_lease()`), with the fetch in flight to its leader;
- the lane takes the leader's answers to its fetch, appends their records to the disk, syncs
  it, and sends the next fetch itself, with a correlation id of its own;
- the core sees none of this until the lane reports (`FollowerLaneReport`): every
  `tick_answers` answers it took (a progress report; the lane goes on), and before any other
  event reaches the core (the lane stops first, and is armed again afterwards when the core
  gives a lease).

An answer the lane does not take stops it: the core gets the report, then the answer, under
the correlation id it adopted the lane's fetch with (`FetchAdopted`). Stopping finishes the
message in hand first, as the C loop does: a sync under way completes, and the next fetch
leaves. A crash loses the lane with the process; what it synced stays on the disk.

The simulator's invariants (log matching, leader completeness, no acknowledged record lost in
a crash, a monotonic high watermark, one applied history) then hold the lanes to what the
cores guarantee. After each report the drive also checks that the core's log end and durable
end are the disk's and the lane's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import cast

from kraft.lane import FollowerLane, LaneAnswer, to_native
from kraft.raft.effects import SendRequest
from kraft.raft.events import Event, FollowerLaneReport, RequestFailed, ResponseReceived
from kraft.raft.messages import Endpoint, FetchedBatch, FetchRequest, FetchResponse
from kraft.sim.host import SimHost
from kraft.sim.node import SimNode

WIRE_CORRELATION_BASE = 1_000_000_000
"""The lanes' correlation ids start here, far above any a simulated core reaches: an answer
to a lane's fetch is never mistaken for one to a core's request."""

TICK_ANSWERS = 8
"""Answers a lane takes between two progress reports (`kraft.lane.tick.writes`' default)."""


@dataclass(slots=True)
class _Armed:
    """One follower's lane while it is armed."""

    lane: object
    """`kraft.lane.rules.FollowerLane`, or the C one: the same interface."""
    epoch: int
    leader: int
    endpoints: tuple[Endpoint, ...]
    template: FetchRequest
    last_epoch: int
    """The epoch of the log's last record (the next fetch's LastFetchedEpoch)."""
    wire: int
    """The correlation id of the lane's fetch in flight, as sent."""
    fetch: FetchRequest
    sent_ms: int
    token: int
    sync_pending: bool = False
    appended: list[tuple[int, int]] = field(default_factory=list)
    appended_bytes: int = 0
    durable: int = 0
    answered_ms: int | None = None
    taken: int = 0


class FollowerDrive:
    """The followers' lanes of one simulated cluster. `native` (`kraft.lane.native()`)
    runs the rules' C implementation; `fail(rule, message)` reports a violation."""

    def __init__(self, sim: SimHost, fail: Callable[[str, str], None],
                 native: ModuleType | None = None, tick_answers: int = TICK_ANSWERS) -> None:
        self._sim = sim
        self._fail = fail
        self._native = native
        self.tick_answers = tick_answers
        self._armed: dict[int, _Armed] = {}
        self._wire_of: dict[int, tuple[int, int]] = {}
        """Per node: (the core's correlation id, the lane's) of the last adopted fetch."""
        self._reporting: dict[int, int] = {}
        """Per node, while its report is with the core: the lane's fetch in flight."""
        self._next_wire = WIRE_CORRELATION_BASE
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
        lease = core.follower_lease()
        if lease is None:
            return
        template = core.lane_fetch()
        assert template is not None  # a lease is given only while following
        s = core.state
        endpoints: tuple[Endpoint, ...] = getattr(s, "leader_endpoints", ())
        adopted = self._wire_of.get(n.node_id)
        wire = adopted[1] if adopted is not None and adopted[0] == lease.fetch_correlation \
            else lease.fetch_correlation
        lane: object = FollowerLane.from_lease(lease)
        if wire != lease.fetch_correlation:
            lane = FollowerLane(lease.epoch, lease.leader_id, wire, lease.log_end,
                                lease.high_watermark)
        if self._native is not None:
            lane = to_native(cast(FollowerLane, lane), self._native)
        self._tokens += 1
        self._armed[n.node_id] = _Armed(
            lane, lease.epoch, lease.leader_id, endpoints, template,
            template.last_fetched_epoch, wire, template, self._sim.now, self._tokens,
            durable=core.log.persisted_end,
        )
        self._count("lane_drive_armed")

    def crashed(self, n: SimNode) -> None:
        """`n`'s process died: its lane and what it remembered go with it."""
        self._armed.pop(n.node_id, None)
        self._wire_of.pop(n.node_id, None)

    # ------------------------------------------------------------------ the lane's work

    def take(self, n: SimNode, event: Event) -> bool:
        """An event for `n` from the network: True when its armed lane took it; otherwise the
        lane (if armed) has stopped and reported, and the event is the core's."""
        a = self._armed.get(n.node_id)
        if a is None:
            return False
        if type(event) is ResponseReceived and not a.sync_pending:
            assert isinstance(event, ResponseReceived)
            resp = event.response
            if type(resp) is FetchResponse:
                assert isinstance(resp, FetchResponse)
                lane = cast(FollowerLane, a.lane)
                decision = lane.answer(event.correlation_id, int(resp.error_code),
                                       resp.leader_id, resp.leader_epoch, resp.high_watermark,
                                       resp.diverging_epoch is not None,
                                       resp.snapshot_id is not None, resp.batches)
                if decision is not None:
                    self._took(n, a, decision, resp.batches)
                    return True
        self.disarm(n, "answer" if type(event) is ResponseReceived else "message")
        return False

    def _took(self, n: SimNode, a: _Armed, decision: LaneAnswer,
              batches: tuple[FetchedBatch, ...]) -> None:
        sim = self._sim
        sim.note(n.node_id, "lane took answer", f"#{a.wire} appended={decision.appended} "
                 f"hw={decision.high_watermark}")
        self._count("lane_drive_taken")
        a.answered_ms = sim.now
        a.taken += 1
        disk = n.disk
        if decision.appended is not None:
            for b in batches:
                if disk.end_offset != b.base_offset:
                    self._fail("runtime", f"node {n.node_id}: the lane appends {b.base_offset} "
                               f"but the disk ends at {disk.end_offset}")
                off, h = disk.append(b.epoch, b.payload, False)
                sim.inv.on_record(n.node_id, off, b.epoch, h)
                a.appended.append((b.base_offset, b.last_offset))
                a.appended_bytes += _size(b)
            a.last_epoch = a.epoch
            a.sync_pending = True
            sim.lane_sync_later(n, a.token)
        else:
            self._next_fetch(n, a)

    def synced(self, n: SimNode, token: int) -> None:
        """The lane's sync of what it appended is done (its `token` names the arming)."""
        a = self._armed.get(n.node_id)
        if a is None or a.token != token or not a.sync_pending:
            return  # stopped meanwhile: the stop finished the sync
        self._finish_sync(n, a)
        if a.taken >= self.tick_answers:
            self._report(n, a, armed=True)

    def _finish_sync(self, n: SimNode, a: _Armed) -> None:
        a.durable = n.disk.flush()
        a.sync_pending = False
        self._next_fetch(n, a)

    def _next_fetch(self, n: SimNode, a: _Armed) -> None:
        """Send the next fetch: the acknowledgement of everything appended, now durable."""
        lane = cast(FollowerLane, a.lane)
        hw = lane.high_watermark
        a.fetch = replace(a.template, fetch_offset=lane.log_end, last_fetched_epoch=a.last_epoch,
                          high_watermark=hw if hw is not None else -1)
        self._next_wire += 1
        a.wire = self._next_wire
        a.sent_ms = self._sim.now
        lane.fetch_correlation = a.wire
        self._sim.execute(n, [SendRequest(a.leader, a.endpoints, a.wire, a.fetch)])

    # ------------------------------------------------------------------ reports

    def disarm(self, n: SimNode, cause: str) -> None:
        """Stop `n`'s lane, if armed: finish the message in hand, then report to the core."""
        a = self._armed.get(n.node_id)
        if a is None:
            return
        self._count(f"lane_drive_stop_{cause}")
        if a.sync_pending:
            self._finish_sync(n, a)
        self._report(n, a, armed=False)

    def _report(self, n: SimNode, a: _Armed, armed: bool) -> None:
        lane = cast(FollowerLane, a.lane)
        report = FollowerLaneReport(
            a.epoch, a.leader, tuple(a.appended), a.appended_bytes, a.durable,
            lane.high_watermark, a.answered_ms, a.fetch, a.sent_ms, armed,
        )
        self._count("lane_drive_reports" if not armed else "lane_drive_progress")
        if not armed:
            del self._armed[n.node_id]
        a.appended.clear()
        a.appended_bytes = 0
        a.answered_ms = None
        a.taken = 0
        self._reporting[n.node_id] = a.wire
        try:
            self._sim.deliver_core(n, report)
        finally:
            del self._reporting[n.node_id]
        core = n.core
        if core is None:
            return
        disk = n.disk
        if core.log.end_offset != disk.end_offset or core.log.persisted_end != a.durable:
            self._fail("lane-drive", f"node {n.node_id}: after the lane's report the core's log "
                       f"ends at {core.log.end_offset} (durable {core.log.persisted_end}), the "
                       f"disk at {disk.end_offset} and the lane's durable end is {a.durable}")
        if armed:
            lease = core.follower_lease()
            if (lease is None or lease.epoch != a.epoch or lease.leader_id != a.leader
                    or self._wire_of.get(n.node_id, (None, None))[0] != lease.fetch_correlation):
                # the report ended the lease (e.g. a snapshot due): the lane stops, with
                # nothing more to report
                self._armed.pop(n.node_id, None)
                self._count("lane_drive_stop_after_report")

    def adopted(self, n: SimNode, correlation_id: int) -> None:
        """The core took the lane's fetch in flight (the one the report being handed over
        names) as its request `correlation_id`."""
        wire = self._reporting.get(n.node_id)
        if wire is None:
            self._fail("runtime", f"node {n.node_id}: FetchAdopted({correlation_id}) outside a "
                       "lane's report")
            return
        self._wire_of[n.node_id] = (correlation_id, wire)

    def translate(self, n: SimNode, event: Event) -> Event:
        """An answer to (or the failure of) a lane's fetch that the core adopted, under the
        core's correlation id; any other event as it is."""
        adopted = self._wire_of.get(n.node_id)
        if adopted is None:
            return event
        core_corr, wire = adopted
        if type(event) is ResponseReceived:
            assert isinstance(event, ResponseReceived)
            if event.correlation_id == wire:
                return ResponseReceived(event.source, core_corr, event.response)
        elif type(event) is RequestFailed:
            assert isinstance(event, RequestFailed)
            if event.correlation_id == wire:
                return RequestFailed(event.destination, core_corr, event.unreachable,
                                     event.disconnected)
        return event


def _size(b: FetchedBatch) -> int:
    """A batch's size as the core counts it toward the next snapshot."""
    if isinstance(b.payload, bytes | bytearray | memoryview):
        return len(b.payload)
    return b.last_offset - b.base_offset + 1
