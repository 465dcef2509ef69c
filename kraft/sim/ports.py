"""The simulated ports of one replica's effect executor (`SimPorts`).

`kraft.server.executor.EffectExecutor` carries out a core's effects over ports; here they
are the replica's simulated disk (`kraft.sim.disk`), the simulated network and clock of the
simulation that hosts them (`kraft.sim.host.SimHost`), and the invariants checked as each
effect is carried out (`kraft.sim.invariants`).
"""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import QuorumStateData
from kraft.raft.effects import (
    AbortSnapshotDownload,
    AppendAccepted,
    AppendCommitted,
    AppendControl,
    AppendFetched,
    AppendRecords,
    AppendRejected,
    CreateSnapshot,
    DeleteSnapshot,
    FetchAdopted,
    InstallSnapshot,
    PersistQuorumState,
    SendApiVersions,
    SendFetchResponse,
    SendFetchSnapshotResponse,
    SendRequest,
    SendResponse,
    StateChanged,
    TruncateTo,
    WriteSnapshotChunk,
)
from kraft.raft.events import (
    RequestReceived,
    ResponseReceived,
    RetentionMeasured,
    SnapshotCreated,
    SnapshotInstalled,
    SnapshotInstallFailed,
)
from kraft.raft.messages import (
    FetchedBatch,
    FetchRequest,
    FetchResponse,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import Role
from kraft.sim.brief import brief
from kraft.sim.disk import SimSnapshot
from kraft.sim.host import SimHost
from kraft.sim.node import SimNode


class SimPorts:
    """The ports of `kraft.server.executor.EffectExecutor` over one simulated replica: its
    disk (`kraft.sim.disk`), the simulated network and clock of `Simulation`, and the
    invariants checked as each effect is carried out. None of them suspends. They take the
    simulation through its host protocol (`kraft.sim.host.SimHost`)."""

    __slots__ = ("n", "sim")

    def __init__(self, sim: SimHost, n: SimNode) -> None:
        self.sim = sim
        self.n = n

    # ---------------------------------------------------------------- LogPort

    def append_records(self, e: AppendRecords) -> bool:
        """Append a leader's values, one record each; the flush is scheduled at once."""
        n, inv, disk = self.n, self.sim.inv, self.n.disk
        if disk.end_offset != e.base_offset:
            inv.fail("runtime", f"node {n.node_id} append at {e.base_offset} != {disk.end_offset}")
        for v in e.values:
            off, h = disk.append(e.epoch, v, False)
            inv.on_record(n.node_id, off, e.epoch, h)
        self.sim.schedule_flush(n)
        return False

    def append_control(self, e: AppendControl) -> None:
        """Append a leader's control records."""
        n, inv, disk = self.n, self.sim.inv, self.n.disk
        if disk.end_offset != e.base_offset:
            inv.fail("runtime", f"node {n.node_id} control at {e.base_offset} != {disk.end_offset}")
        for r in e.control_records:
            off, h = disk.append(e.epoch, r, True)
            inv.on_record(n.node_id, off, e.epoch, h)
        self.sim.schedule_flush(n)

    def append_fetched(self, e: AppendFetched) -> None:
        """Append a follower's fetched batches."""
        n, inv, disk = self.n, self.sim.inv, self.n.disk
        for b in e.batches:
            if disk.end_offset != b.base_offset:
                inv.fail("runtime", f"node {n.node_id} fetched {b.base_offset} != {disk.end_offset}")
            value = b.control_records[0] if b.is_control else b.payload
            off, h = disk.append(b.epoch, value, b.is_control)
            inv.on_record(n.node_id, off, b.epoch, h)
        self.sim.schedule_flush(n)

    def truncate_to(self, e: TruncateTo) -> None:
        """Truncate, checking no committed record of the current history goes."""
        n, sim, disk = self.n, self.sim, self.n.disk
        sim.note(n.node_id, "truncate", e.end_offset)
        sim.count("truncations")
        sim.inv.check_truncation(n.node_id, e.end_offset, disk.chain_at,
                                 n.core.epoch if n.core is not None else None)
        disk.truncate(e.end_offset)
        n.acked_end = min(n.acked_end, e.end_offset)

    def advance_log_start(self, offset: int) -> None:
        """Drop the records below `offset`."""
        self.n.disk.advance_start(offset)

    async def persist_quorum_state(self, e: PersistQuorumState) -> None:
        """The simulated quorum-state file is durable as soon as written."""
        self.n.disk.quorum_state = QuorumStateData(
            e.leader_epoch, e.leader_id, e.voted_id, e.voted_directory_id
        )

    def effects_done(self, appended: bool, flush_later: bool) -> None:
        """Nothing: every append scheduled its flush when it was made."""

    # ---------------------------------------------------------------- NetworkPort

    def send_request(self, e: SendRequest) -> None:
        """Send a request over the simulated network (refused when the target is down)."""
        n, sim = self.n, self.sim
        nid = n.node_id
        dst = sim.route(e.destination, e.endpoints)
        request = e.request
        if type(request) is FetchRequest:
            n.acked_end = max(n.acked_end, request.fetch_offset)
        elif type(request) is VoteRequest and not request.pre_vote:
            qs = n.disk.quorum_state
            sim.inv.check_quorum_state_durable(
                nid, "vote request", request.replica_epoch, nid, qs.leader_epoch, qs.voted_id)
        if sim.trace is not None:
            sim.note(nid, f"-> n{dst} {type(request).__name__}",
                     f"#{e.correlation_id} {brief(request, named=False)}")
        if not sim.connections or sim.connect(n, dst, e):
            sim.send(nid, dst, RequestReceived(nid, e.correlation_id, request))

    def send_response(self, e: SendResponse) -> None:
        """Answer a request; a vote granted must already be in the durable quorum state."""
        n, sim = self.n, self.sim
        nid = n.node_id
        resp = e.response
        if type(resp) is VoteResponse and resp.vote_granted and n.core is not None:
            state = n.core.state
            voted = getattr(state, "voted", None)
            if state.epoch == resp.leader_epoch and voted is not None \
                    and voted.id == e.destination:
                qs = n.disk.quorum_state
                sim.inv.check_quorum_state_durable(
                    nid, "vote granted", resp.leader_epoch, e.destination, qs.leader_epoch,
                    qs.voted_id)
        if sim.trace is not None:
            sim.note(nid, f"-> n{e.destination} {type(resp).__name__}",
                     f"#{e.correlation_id} {brief(resp, named=False)}")
        sim.send(nid, e.destination, ResponseReceived(nid, e.correlation_id, resp))

    def send_fetch_response(self, e: SendFetchResponse) -> None:
        """Answer a Fetch with up to `fetch_batch_entries` records of the disk."""
        n, sim = self.n, self.sim
        resp = e.response
        if e.read_offset is not None:
            resp = self._with_batches(resp, e.read_offset)
        if sim.trace is not None:
            sim.note(n.node_id, f"-> n{e.destination} FetchResponse",
                     f"#{e.correlation_id} {brief(resp, named=False)}")
        sim.send(n.node_id, e.destination, ResponseReceived(n.node_id, e.correlation_id, resp))

    def _with_batches(self, resp: FetchResponse, read_offset: int) -> FetchResponse:
        """`resp` with up to `fetch_batch_entries` records of the disk from `read_offset`."""
        disk = self.n.disk
        start = read_offset - disk.start_offset
        if start < 0:
            return resp
        chunk = disk.entries[start : start + self.sim.params.fetch_batch_entries]
        batches = tuple(
            FetchedBatch(read_offset + i, read_offset + i, ep, ctl, (v,) if ctl else (), v)
            for i, (ep, v, _h, ctl) in enumerate(chunk)
        )
        return FetchResponse(
            resp.error_code, resp.leader_id, resp.leader_epoch, resp.high_watermark,
            resp.log_start_offset, resp.diverging_epoch, resp.snapshot_id,
            resp.leader_endpoints, batches,
        )

    def send_fetch_snapshot_response(self, e: SendFetchSnapshotResponse) -> None:
        """Answer a FetchSnapshot with the bytes of the simulated snapshot file."""
        n, sim = self.n, self.sim
        nid = n.node_id
        r = e.response
        if r.error_code == ErrorCode.NONE:
            snap = n.disk.snapshots.get(r.snapshot_id)
            if snap is None:
                sim.inv.fail("runtime", f"node {nid} has no snapshot {r.snapshot_id}")
            assert snap is not None
            data = snap.to_bytes()[r.position : r.position + e.max_bytes]
            r = FetchSnapshotResponse(
                r.error_code, r.leader_id, r.leader_epoch, r.snapshot_id,
                len(snap.to_bytes()), r.position, data, r.leader_endpoints,
            )
        sim.send(nid, e.destination, ResponseReceived(nid, e.correlation_id, r))

    def send_api_versions(self, e: SendApiVersions) -> None:
        """Ask a replica for its kraft.version range."""
        self.sim.api_versions(self.n, e.node_id)

    # ---------------------------------------------------------------- ApplyPort

    def behind(self) -> bool:
        """Never: the simulated state machine applies at each `Committed`."""
        return False

    def apply_committed(self) -> None:
        """Nothing waits to be applied (`committed` applies at once)."""

    def apply_to(self, offset: int) -> None:
        """Nothing waits to be applied (`committed` applies at once)."""

    def committed(self, high_watermark: int) -> None:
        """Apply up to the high watermark, checking the commit invariants."""
        n, hw, sim = self.n, high_watermark, self.sim
        inv = sim.inv
        inv.check_hw_monotonic(n.node_id, n.last_hw, hw)
        if hw > n.last_hw and n.core is not None and n.core.role is Role.LEADER:
            sim.check_durable_majority(n, hw)
        n.last_hw = hw
        disk = n.disk
        for o in range(max(n.applied_to, disk.start_offset), hw):
            h = disk.chain_at(o + 1)
            if h is None:
                inv.fail("runtime", f"node {n.node_id} commits {hw} beyond its log {disk.end_offset}")
            assert h is not None
            inv.on_applied(n.node_id, o, h)
        n.applied_to = max(n.applied_to, hw)
        core = n.core
        inv.on_commit(n.node_id, hw, disk.chain_at(hw), core.epoch if core is not None else -1)
        if core is not None and core.role is Role.LEADER:
            for off, vs in core.voters_history.entries():
                if 0 <= off < hw:
                    inv.on_committed_voters(off, vs)

    # ---------------------------------------------------------------- SnapshotPort

    def create_snapshot(self, e: CreateSnapshot) -> None:
        """Write a simulated snapshot of the applied prefix; `SnapshotCreated` comes later."""
        n, sim = self.n, self.sim
        nid, disk = n.node_id, n.disk
        sid = e.snapshot_id
        chain = disk.chain_at(sid.offset)
        if n.applied_to != sid.offset or chain is None:
            sim.inv.fail("runtime", f"node {nid} snapshot {sid} but applied {n.applied_to}")
        assert chain is not None
        snap = SimSnapshot(sid, chain, e.voters, e.kraft_version,
                           pad=sim.params.snapshot_pad_bytes)
        disk.snapshots[sid] = snap
        sim.note(nid, "snapshot", sid)
        sim.count("snapshots")
        sim.deliver_later(n, sim.now + sim.rng.randint(1, 20),
                          SnapshotCreated(sid, len(snap.to_bytes())))

    def delete_snapshot(self, e: DeleteSnapshot) -> None:
        """Delete a simulated snapshot."""
        self.sim.note(self.n.node_id, "delete-snapshot", e.snapshot_id)
        self.n.disk.snapshots.pop(e.snapshot_id, None)

    def measure_retention(self) -> None:
        """The log's bytes counted as one per record (the clients' records are one value
        each); no timestamps: metadata.max.retention.ms is off here."""
        disk = self.n.disk
        self.n.immediate.append(RetentionMeasured(((disk.start_offset, len(disk.entries)),)))

    def write_snapshot_chunk(self, e: WriteSnapshotChunk) -> None:
        """Append a chunk to the partial snapshot (in order, or a violation)."""
        n = self.n
        part = n.partials.setdefault(e.snapshot_id, bytearray())
        if len(part) != e.position:
            self.sim.inv.fail("runtime", f"node {n.node_id} chunk at {e.position} != {len(part)}")
        assert isinstance(e.data, bytes)
        part += e.data

    async def install_snapshot(self, e: InstallSnapshot) -> None:
        """Install the downloaded snapshot; its answer is the core's next event."""
        n, sim, sid = self.n, self.sim, e.snapshot_id
        data = n.partials.pop(sid, None)
        if data is None:
            sim.inv.fail("runtime", f"node {n.node_id} installs {sid} without data")
        assert data is not None
        snap = SimSnapshot.from_bytes(bytes(data))
        if snap.snapshot_id != sid:
            n.immediate.append(SnapshotInstallFailed(snap.snapshot_id, "id"))
            return
        want = sim.inv.committed_chain.get(snap.snapshot_id.offset - 1)
        if want is not None and want != snap.chain:
            sim.inv.fail("snapshot", f"node {n.node_id} installs a snapshot of another history")
        sim.note(n.node_id, "install", sid)
        sim.count("snapshot_installs")
        n.disk.install(snap)
        n.applied_to = snap.snapshot_id.offset
        n.acked_end = snap.snapshot_id.offset
        # The runtime contract: the answer to InstallSnapshot is the core's very next event.
        n.immediate.append(
            SnapshotInstalled(snap.snapshot_id, len(data), snap.voters, snap.kraft_version)
        )

    def abort_snapshot_download(self, e: AbortSnapshotDownload) -> None:
        """Drop the partial snapshot."""
        self.n.partials.pop(e.snapshot_id, None)

    # ---------------------------------------------------------------- ClientPort and NodePort

    def append_accepted(self, e: AppendAccepted) -> None:
        """Nothing: the simulated client waits for the commit only."""

    def append_rejected(self, e: AppendRejected) -> None:
        """Nothing: the simulated client sends its next append elsewhere."""

    def append_committed(self, e: AppendCommitted) -> None:
        """Count a committed client append (liveness after healing)."""
        if e.error_code == ErrorCode.NONE:
            self.sim.append_committed(e.append_id)

    def state_changed(self, e: StateChanged) -> None:
        """Trace it; a new leader must hold every committed record."""
        n, sim = self.n, self.sim
        nid = n.node_id
        sim.note(nid, "state", f"{e.state} epoch={e.epoch} leader={e.leader_id}")
        if e.state == Role.LEADER.value:
            sim.elections += 1
            sim.inv.on_leader(nid, e.epoch)
            sim.inv.check_leader_complete(nid, e.epoch, n.disk.end_offset, n.disk.chain_at)

    def fetch_adopted(self, e: FetchAdopted) -> None:
        """The follower lane's fetch is now the core's (`kraft.sim.lane_drive`)."""
        self.sim.fetch_adopted(self.n, e.correlation_id)

    def answers_out(self) -> None:
        """Nothing: every answer was sent as it was made."""
