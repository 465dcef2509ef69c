"""The effect executor: the one place that carries out the core's effects, in the node and in
the simulator alike.

`EffectExecutor.execute` takes the list of effects of one `RaftCore.handle` call
(`kraft.raft.effects`) and carries each out through a port: the log and quorum-state store
(`LogPort`), the network (`NetworkPort`), the state machine (`ApplyPort`), the snapshot files
(`SnapshotPort`), the writers waiting on the node (`ClientPort`) and the node's own
bookkeeping of leadership and lanes (`NodePort`). The node (`kraft.server.node`) passes ports over its files, sockets and thread;
the simulator (`kraft.sim.ports`) passes ports over its simulated disk, network and clock.
Both therefore run the ordering rules below, and a change to them shows in the simulator's
invariants.

The ordering rules (the contract of `kraft.raft.effects`, as the node keeps it):

1. List order. Effects are carried out one after the other, in the order the core gave them.
2. Quorum state before what depends on it. `PersistQuorumState` is awaited until the file is
   durable before the next effect starts: a vote granted, a candidacy or a new epoch is on
   disk before any message that tells of it is sent.
3. Log writes go to the log at once, in order (`AppendRecords`, `AppendControl`,
   `AppendFetched`, `TruncateTo`, `AdvanceLogStart`); their fsync comes later (the port
   starts it when the list is done, or at once for a small leader write) and is reported to
   the core as `Persisted(end)`. What depends on durability (a follower's next FetchOffset,
   the leader counting itself towards the high watermark) waits in the core for `Persisted`,
   so a message may leave before the fsync of the records it carries.
4. Apply only what is committed. `Committed(hw)` only raises the apply target; records below
   it are applied by the apply port (in the node, in steps of the core loop). What is applied
   before an effect is decided in one place, before the effect is carried out: nothing more
   for the effects of `APPLY_LATER_OK`; exactly up to their offset for those of `APPLY_UP_TO`
   (`CreateSnapshot`, `AdvanceLogStart`); everything committed before any other (a state
   change, a truncation, the quorum state written, a snapshot installed).
5. Snapshot load. `InstallSnapshot` is awaited: the log is replaced and the state machine
   loaded before the next effect, and its answer is the core's next event.
6. Timers are not effects: after the list, the runtime sleeps until the core's
   `next_deadline()` or the next event, whichever comes first (the node's core loop, the
   simulator's event queue).
7. After the list: the clients' answers go out (after the followers', which carry the new high
   watermark) and then the log port is told what was appended (`LogPort.effects_done`), which
   starts the fsync the appends wait for.

`execute` is a coroutine. The simulator's ports never suspend, and `run_now` drives the
coroutine to its end in one step; a port that suspends there is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol

from kraft.raft import effects as fx


class LogPort(Protocol):
    """The metadata log and the quorum-state file."""

    def append_records(self, e: fx.AppendRecords) -> bool:
        """Write a leader's data batch; True when its fsync waits for the end of the list
        (False: the port started it already)."""
        ...

    def append_control(self, e: fx.AppendControl) -> None:
        """Write a leader's control batch."""
        ...

    def append_fetched(self, e: fx.AppendFetched) -> None:
        """Write a follower's fetched batches as they are."""
        ...

    def truncate_to(self, e: fx.TruncateTo) -> None:
        """Remove the records at and after `e.end_offset`."""
        ...

    def advance_log_start(self, offset: int) -> None:
        """Delete the records below `offset` (already applied)."""
        ...

    async def persist_quorum_state(self, e: fx.PersistQuorumState) -> None:
        """Write the quorum-state file; return once it is durable."""
        ...

    def effects_done(self, appended: bool, flush_later: bool) -> None:
        """The list is done: `appended` when the log grew, `flush_later` when an append waits
        for a flush not started yet."""
        ...


class NetworkPort(Protocol):
    """Messages to other replicas (and answers to the requests that came in)."""

    def send_request(self, e: fx.SendRequest) -> None:
        """Send a request; its answer or failure comes back as an event."""
        ...

    def send_response(self, e: fx.SendResponse) -> None:
        """Answer a request."""
        ...

    def send_fetch_response(self, e: fx.SendFetchResponse) -> None:
        """Answer a Fetch, with the log bytes the effect names."""
        ...

    def send_fetch_snapshot_response(self, e: fx.SendFetchSnapshotResponse) -> None:
        """Answer a FetchSnapshot, with the snapshot bytes the effect names."""
        ...

    def send_api_versions(self, e: fx.SendApiVersions) -> None:
        """Ask a node for its ApiVersions; the answer comes back as an event."""
        ...


class ApplyPort(Protocol):
    """The state machine, fed with committed records only."""

    def behind(self) -> bool:
        """True while committed records wait to be applied."""
        ...

    def apply_committed(self) -> None:
        """Apply every committed record not applied yet."""
        ...

    def apply_to(self, offset: int) -> None:
        """Apply the committed records below `offset` not applied yet."""
        ...

    def committed(self, high_watermark: int) -> None:
        """The high watermark moved: records below it may be applied (now or later)."""
        ...


class SnapshotPort(Protocol):
    """Snapshot files: created from the state machine, served, downloaded, installed."""

    def create_snapshot(self, e: fx.CreateSnapshot) -> None:
        """Write a snapshot of the state machine (applied exactly to its offset)."""
        ...

    def delete_snapshot(self, e: fx.DeleteSnapshot) -> None:
        """Delete a snapshot older than the log start."""
        ...

    def measure_retention(self) -> None:
        """Measure what the retention rule needs; answered with `RetentionMeasured`."""
        ...

    def write_snapshot_chunk(self, e: fx.WriteSnapshotChunk) -> None:
        """Write one chunk of a snapshot being downloaded."""
        ...

    async def install_snapshot(self, e: fx.InstallSnapshot) -> None:
        """Make the downloaded snapshot the log's start and load the state machine from it;
        return once done (its answer is the core's next event)."""
        ...

    def abort_snapshot_download(self, e: fx.AbortSnapshotDownload) -> None:
        """Drop a partial snapshot."""
        ...


class ClientPort(Protocol):
    """The writers waiting on this node (its KV front end)."""

    def append_accepted(self, e: fx.AppendAccepted) -> None:
        """A client append got its offsets."""
        ...

    def append_rejected(self, e: fx.AppendRejected) -> None:
        """A client append was refused."""
        ...

    def append_committed(self, e: fx.AppendCommitted) -> None:
        """A client append is committed (or lost)."""
        ...

    def answers_out(self) -> None:
        """Send the clients' answers completed so far."""
        ...


class NodePort(Protocol):
    """The node's own bookkeeping: its leadership and its lanes."""

    def state_changed(self, e: fx.StateChanged) -> None:
        """The replica's role or epoch changed."""
        ...

    def fetch_adopted(self, e: fx.FetchAdopted) -> None:
        """The follower lane's fetch in flight is now the core's request."""
        ...


APPLY_LATER_OK: Final = frozenset({
    fx.SendRequest, fx.SendResponse, fx.SendFetchResponse, fx.SendFetchSnapshotResponse,
    fx.AppendRecords, fx.AppendControl, fx.AppendFetched, fx.Committed, fx.AppendAccepted,
    fx.AppendCommitted, fx.DeleteSnapshot, fx.WriteSnapshotChunk, fx.SendApiVersions,
    fx.FetchAdopted, fx.MeasureRetention,
})
"""Effects carried out while committed records still wait to be applied. Before an effect of
`APPLY_UP_TO`, the committed records are applied exactly up to the offset it names; before any
other (a state change, a truncation, a snapshot installed, the quorum state written, a client
append refused), every committed record is applied first: a writer whose record committed gets
its result, not "outcome unknown"."""

APPLY_UP_TO: Final[dict[type, Callable[[Any], int]]] = {
    fx.CreateSnapshot: lambda e: e.snapshot_id.offset,  # the state exactly at its offset
    fx.AdvanceLogStart: lambda e: e.offset,  # nothing below the log's start left unapplied
}
"""Effects preceded by applying the committed records up to an offset of theirs, and not past
it: the offset a snapshot captures the state at, the new start of the log."""


class EffectExecutor:
    """Carries out the core's effects through ports, under the ordering rules of the module
    docstring."""

    __slots__ = ("apply", "clients", "log", "network", "node", "snapshots")

    def __init__(self, log: LogPort, network: NetworkPort, apply: ApplyPort,
                 snapshots: SnapshotPort, clients: ClientPort, node: NodePort) -> None:
        self.log = log
        self.network = network
        self.apply = apply
        self.snapshots = snapshots
        self.clients = clients
        self.node = node

    async def execute(self, effects: list[fx.Effect]) -> None:
        """Carry out `effects` in order (see the module docstring)."""
        log = self.log
        network = self.network
        apply = self.apply
        appended = False  # the log grew
        flush_later = False  # and something appended waits for the flush after the effects
        for e in effects:
            t = type(e)
            if t not in APPLY_LATER_OK:  # what is applied before it (rule 4)
                up_to = APPLY_UP_TO.get(t)
                if up_to is not None:
                    apply.apply_to(up_to(e))
                elif apply.behind():
                    apply.apply_committed()
            if t is fx.SendRequest:
                assert isinstance(e, fx.SendRequest)
                network.send_request(e)
            elif t is fx.SendResponse:
                assert isinstance(e, fx.SendResponse)
                network.send_response(e)
            elif t is fx.SendFetchResponse:
                assert isinstance(e, fx.SendFetchResponse)
                network.send_fetch_response(e)
            elif t is fx.SendFetchSnapshotResponse:
                assert isinstance(e, fx.SendFetchSnapshotResponse)
                network.send_fetch_snapshot_response(e)
            elif t is fx.AppendRecords:
                assert isinstance(e, fx.AppendRecords)
                if log.append_records(e):
                    flush_later = True
                appended = True
            elif t is fx.AppendControl:
                assert isinstance(e, fx.AppendControl)
                log.append_control(e)
                appended = flush_later = True
            elif t is fx.AppendFetched:
                assert isinstance(e, fx.AppendFetched)
                log.append_fetched(e)
                appended = flush_later = True
            elif t is fx.TruncateTo:
                assert isinstance(e, fx.TruncateTo)
                log.truncate_to(e)
            elif t is fx.PersistQuorumState:
                assert isinstance(e, fx.PersistQuorumState)
                await log.persist_quorum_state(e)  # durable before anything after it
            elif t is fx.Committed:
                assert isinstance(e, fx.Committed)
                apply.committed(e.high_watermark)
            elif t is fx.AppendAccepted:
                assert isinstance(e, fx.AppendAccepted)
                self.clients.append_accepted(e)
            elif t is fx.AppendRejected:
                assert isinstance(e, fx.AppendRejected)
                self.clients.append_rejected(e)
            elif t is fx.AppendCommitted:
                assert isinstance(e, fx.AppendCommitted)
                self.clients.append_committed(e)
            elif t is fx.CreateSnapshot:
                assert isinstance(e, fx.CreateSnapshot)
                self.snapshots.create_snapshot(e)
            elif t is fx.AdvanceLogStart:
                assert isinstance(e, fx.AdvanceLogStart)
                log.advance_log_start(e.offset)
            elif t is fx.DeleteSnapshot:
                assert isinstance(e, fx.DeleteSnapshot)
                self.snapshots.delete_snapshot(e)
            elif t is fx.MeasureRetention:
                self.snapshots.measure_retention()
            elif t is fx.WriteSnapshotChunk:
                assert isinstance(e, fx.WriteSnapshotChunk)
                self.snapshots.write_snapshot_chunk(e)
            elif t is fx.InstallSnapshot:
                assert isinstance(e, fx.InstallSnapshot)
                await self.snapshots.install_snapshot(e)
            elif t is fx.AbortSnapshotDownload:
                assert isinstance(e, fx.AbortSnapshotDownload)
                self.snapshots.abort_snapshot_download(e)
            elif t is fx.SendApiVersions:
                assert isinstance(e, fx.SendApiVersions)
                network.send_api_versions(e)
            elif t is fx.StateChanged:
                assert isinstance(e, fx.StateChanged)
                self.node.state_changed(e)
            elif t is fx.FetchAdopted:
                assert isinstance(e, fx.FetchAdopted)
                self.node.fetch_adopted(e)
        # Client answers go out after the followers' (their fetches learn the new high
        # watermark first) and before the flush the appends wait for.
        self.clients.answers_out()
        log.effects_done(appended, flush_later)


def run_now(step: Coroutine[Any, Any, None]) -> None:
    """Run `step` (an `EffectExecutor.execute` over ports that never suspend) to its end at
    once; a RuntimeError if a port suspended."""
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()
    raise RuntimeError("an effect port suspended where the executor must finish at once")
