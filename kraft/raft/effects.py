"""Outputs of the consensus core, executed by the runtime (`kraft/server`) or the simulator.

Execution contract (the runtime must keep it):

1. Effects are executed in list order.
2. `PersistQuorumState` is durable (written and fsynced) before any later `Send*` effect of the
   same list is executed: a vote or an epoch change is on disk before anyone hears of it.
3. Log writes (`AppendRecords`, `AppendControl`, `AppendFetched`, `TruncateTo`,
   `InstallSnapshot`, `AdvanceLogStart`) are applied to the log in order when executed; they
   may be fsynced later, and the runtime reports `Persisted(end)` after each fsync. The leader
   counts itself, and a follower fetches again, only up to what was reported persisted.
4. `Committed(hw)`: the state machine may apply records below `hw` and nothing else.
   `CreateSnapshot(id)` always follows the `Committed` that covers it: the snapshot is of the
   state machine after applying exactly the records below `id.offset`.
5. `SendFetchResponse` / `SendFetchSnapshotResponse`: the runtime reads the bytes named by the
   effect from its log or snapshot file when it executes the effect and attaches them.
6. `InstallSnapshot` is executed synchronously and its answer (`SnapshotInstalled` or
   `SnapshotInstallFailed`) is the core's very next event: the log was replaced underneath it.
7. `CreateSnapshot` may run in the background; `SnapshotCreated` is reported when the file is
   complete and durable.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraft.frozen import fast_init
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft.messages import (
    Endpoint,
    FetchedBatch,
    FetchResponse,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    Request,
    Response,
)
from kraft.raft.voters import VoterSet


@fast_init
@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    """Write the quorum-state file (and fsync) before any later send."""

    leader_id: int
    leader_epoch: int
    voted_id: int
    voted_directory_id: Uuid | None


@fast_init
@dataclass(frozen=True, slots=True)
class AppendRecords:
    """Leader: append one data batch of `values` at `base_offset` in `epoch`."""

    base_offset: int
    epoch: int
    values: tuple[object, ...]
    timestamp_ms: int


@fast_init
@dataclass(frozen=True, slots=True)
class AppendControl:
    """Leader: append one control batch (`kraft.records.control` records)."""

    base_offset: int
    epoch: int
    control_records: tuple[object, ...]
    timestamp_ms: int


@fast_init
@dataclass(frozen=True, slots=True)
class AppendFetched:
    """Follower: append fetched batches as they are (bytes moved, never re-encoded)."""

    batches: tuple[FetchedBatch, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Remove every record at or after `end_offset` (never below the high watermark)."""

    end_offset: int


@fast_init
@dataclass(frozen=True, slots=True)
class SendRequest:
    """Send `request` to node `destination`; answer via `ResponseReceived`/`RequestFailed`.

    `endpoints` are where the core knows the destination listens (may be empty for a voter
    the runtime already knows; a negative destination is a bootstrap server).
    """

    destination: int
    endpoints: tuple[Endpoint, ...]
    correlation_id: int
    request: Request


@fast_init
@dataclass(frozen=True, slots=True)
class SendResponse:
    """Answer the request that arrived with (`destination`, `correlation_id`)."""

    destination: int
    correlation_id: int
    response: Response


@fast_init
@dataclass(frozen=True, slots=True)
class SendFetchResponse:
    """Answer a Fetch; if `read_offset` is set, attach log bytes from it, at most `max_bytes`."""

    destination: int
    correlation_id: int
    response: FetchResponse
    read_offset: int | None
    max_bytes: int


@fast_init
@dataclass(frozen=True, slots=True)
class SendFetchSnapshotResponse:
    """Answer a FetchSnapshot; on success attach up to `max_bytes` of the snapshot file
    `response.snapshot_id` starting at `response.position`."""

    destination: int
    correlation_id: int
    response: FetchSnapshotResponse
    max_bytes: int


@fast_init
@dataclass(frozen=True, slots=True)
class SendApiVersions:
    """Ask node `node_id` (at `endpoints`) for its ApiVersions; answer `ApiVersionsReceived`."""

    node_id: int
    endpoints: tuple[Endpoint, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class Committed:
    """The high watermark moved to `high_watermark`: records below it may be applied."""

    high_watermark: int


@fast_init
@dataclass(frozen=True, slots=True)
class AppendAccepted:
    """A client append was written at [base_offset, last_offset] in `epoch`."""

    append_id: int
    base_offset: int
    last_offset: int
    epoch: int


@fast_init
@dataclass(frozen=True, slots=True)
class AppendRejected:
    """A client append was refused (not the leader, or shutting down)."""

    append_id: int
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@fast_init
@dataclass(frozen=True, slots=True)
class AppendCommitted:
    """A client append is committed (or lost: `error_code` != NONE when the leader moved on
    before it was committed; the batch may then still be committed by a later leader)."""

    append_id: int
    error_code: ErrorCode


@fast_init
@dataclass(frozen=True, slots=True)
class CreateSnapshot:
    """Write a snapshot of the state machine at `snapshot_id`; answer `SnapshotCreated`.

    `voters` and `kraft_version` are the values in force at the snapshot's end offset, for the
    snapshot's KRaftVersion / Voters control records.
    """

    snapshot_id: OffsetAndEpoch
    voters: VoterSet | None
    kraft_version: int


@fast_init
@dataclass(frozen=True, slots=True)
class AdvanceLogStart:
    """Delete log records below `offset` (a snapshot boundary at or below the HW)."""

    offset: int


@fast_init
@dataclass(frozen=True, slots=True)
class DeleteSnapshot:
    """Delete the snapshot file `snapshot_id` (older than the log start). The core no longer
    serves it; the runtime may keep the file, renamed `.checkpoint.deleted`, for a while
    (Kafka: file.delete.delay.ms, 60 s) before removing it."""

    snapshot_id: OffsetAndEpoch


@fast_init
@dataclass(frozen=True, slots=True)
class MeasureRetention:
    """Measure what the retention rule needs and answer `RetentionMeasured`: the log's
    segment sizes and each snapshot's LastContainedLogTimestamp."""


@fast_init
@dataclass(frozen=True, slots=True)
class WriteSnapshotChunk:
    """Follower: write `data` at `position` of the partial snapshot `snapshot_id`."""

    snapshot_id: OffsetAndEpoch
    position: int
    data: object


@fast_init
@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """Follower: the partial snapshot is complete; validate it, make it the log's start
    (truncating the whole log), load the state machine from it and answer
    `SnapshotInstalled` or `SnapshotInstallFailed`."""

    snapshot_id: OffsetAndEpoch


@fast_init
@dataclass(frozen=True, slots=True)
class AbortSnapshotDownload:
    """Follower: drop the partial snapshot `snapshot_id`."""

    snapshot_id: OffsetAndEpoch


@fast_init
@dataclass(frozen=True, slots=True)
class FetchAdopted:
    """The follower lane's fetch in flight, reported by `FollowerLaneReport`, is now this
    core's request `correlation_id`: its answer, or its failure, is to reach the core under
    that id (the runtime maps the id the lane sent it with to this one)."""

    correlation_id: int


@fast_init
@dataclass(frozen=True, slots=True)
class StateChanged:
    """Informational: the replica entered `state` (a `RaftRole` value) in `epoch`."""

    state: str
    epoch: int
    leader_id: int


Effect = (
    PersistQuorumState
    | AppendRecords
    | AppendControl
    | AppendFetched
    | TruncateTo
    | SendRequest
    | SendResponse
    | SendFetchResponse
    | SendFetchSnapshotResponse
    | SendApiVersions
    | Committed
    | AppendAccepted
    | AppendRejected
    | AppendCommitted
    | CreateSnapshot
    | AdvanceLogStart
    | DeleteSnapshot
    | MeasureRetention
    | WriteSnapshotChunk
    | InstallSnapshot
    | AbortSnapshotDownload
    | FetchAdopted
    | StateChanged
)
"""Every output of the core."""
