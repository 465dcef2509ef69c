"""Inputs of the consensus core. Every event is handed to `RaftCore.handle(event, now_ms)`."""

from __future__ import annotations

from dataclasses import dataclass

from kraft.frozen import fast_init
from kraft.raft.leader import ParkedFetch
from kraft.raft.messages import (
    ApiVersionsResult,
    FetchRequest,
    OffsetAndEpoch,
    ReplicaKey,
    Request,
    Response,
)
from kraft.raft.voters import VoterSet


@fast_init
@dataclass(frozen=True, slots=True)
class Tick:
    """Time advanced; the core fires whatever timers are due at `now_ms`."""


@fast_init
@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A request arrived from `source` (a node id; admin clients may use -1)."""

    source: int
    correlation_id: int
    request: Request


@fast_init
@dataclass(frozen=True, slots=True)
class ResponseReceived:
    """A response arrived for the request the core sent with `correlation_id`."""

    source: int
    correlation_id: int
    response: Response


@fast_init
@dataclass(frozen=True, slots=True)
class RequestFailed:
    """The runtime gave up on a request the core sent (disconnect, timeout, no route).

    `unreachable`: the destination actively refused the connection (ECONNREFUSED, or reset
    while connecting): nothing listens at its address, its process is gone. A follower whose
    leader is unreachable starts a pre-vote without waiting for the fetch timeout.

    `disconnected`: an established connection closed while the request was in flight (the
    destination closed it, or its process died and the kernel did). A follower whose fetch to
    its leader fails so no longer protects that leader from pre-votes until a fetch succeeds
    again; it does not start a pre-vote of its own for it.
    """

    destination: int
    correlation_id: int
    unreachable: bool = False
    disconnected: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class Append:
    """A client wants `values` appended as one data batch (leader only).

    The answer is an `AppendAccepted`/`AppendRejected` effect right away and a
    `AppendCommitted` effect once the batch is committed.
    """

    append_id: int
    values: tuple[object, ...]
    size_bytes: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class Persisted:
    """The log is durable (fsynced) up to `end_offset` (exclusive)."""

    end_offset: int


@fast_init
@dataclass(frozen=True, slots=True)
class SnapshotRequested:
    """The state machine asks for a snapshot: at `end_offset` (<= the high watermark, e.g. the
    offset it has applied) or, when None, at the current high watermark."""

    end_offset: int | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class SnapshotCreated:
    """The runtime finished writing the snapshot asked for by `CreateSnapshot`."""

    snapshot_id: OffsetAndEpoch
    size_bytes: int


@fast_init
@dataclass(frozen=True, slots=True)
class RetentionMeasured:
    """The runtime's answer to `MeasureRetention`.

    `log_segments`: (base offset, bytes) of each log segment, oldest first;
    `snapshot_timestamps`: (snapshot id, its SnapshotHeader's LastContainedLogTimestamp) for
    the snapshots the runtime could read (one missing here is never deleted for its age).
    """

    log_segments: tuple[tuple[int, int], ...]
    snapshot_timestamps: tuple[tuple[OffsetAndEpoch, int], ...] = ()


@fast_init
@dataclass(frozen=True, slots=True)
class SnapshotInstalled:
    """A downloaded snapshot was validated and installed; the log now starts at its end.

    `voters` and `kraft_version` are what the snapshot's control records hold (None/0 when it
    has none).
    """

    snapshot_id: OffsetAndEpoch
    size_bytes: int
    voters: VoterSet | None
    kraft_version: int


@fast_init
@dataclass(frozen=True, slots=True)
class SnapshotInstallFailed:
    """A downloaded snapshot failed validation; the core goes back to fetching the log."""

    snapshot_id: OffsetAndEpoch
    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class ApiVersionsReceived:
    """Result of an ApiVersions exchange asked for by `SendApiVersions`."""

    node_id: int
    result: ApiVersionsResult


@fast_init
@dataclass(frozen=True, slots=True)
class FollowerLaneReport:
    """What a follower's native lane did under the lease `RaftCore.follower_lease()` gave it
    (docs/native-lane.md), since it was armed or last reported.

    The lane took the leader's plain answers to its fetches: it appended their records (all
    of `epoch`, the lease's), made them durable, learned the high watermark, and sent the next
    fetch. The core takes this as if it had handled each of those answers and syncs itself.
    The runtime hands a report over before any other event of this core, so the core is still
    in the lease's epoch, following `leader_id`, with the lease's fetch (or the last report's)
    in flight.

    - `appended`: the (base, last) offsets of each batch appended, in order;
    - `appended_bytes`: their records' size, for the snapshot trigger;
    - `durable_end`: the log is durable below this offset;
    - `high_watermark`: the leader's high watermark as the lane last took it (None: none);
    - `answered_ms`: when the lane took its last answer (None: none since the last report);
    - `fetch`: the lane's fetch in flight to the leader, sent at `fetch_sent_ms` (None: it has
      none); the core takes it as its own, and says under which correlation id with a
      `FetchAdopted` effect;
    - `armed`: the lane goes on under the same lease (a progress report), or it has stopped.
      The core runs no timer and sends nothing on a progress report: that waits for the next
      event, before which the runtime stops the lane.
    """

    epoch: int
    leader_id: int
    appended: tuple[tuple[int, int], ...]
    appended_bytes: int
    durable_end: int
    high_watermark: int | None
    answered_ms: int | None
    fetch: FetchRequest | None
    fetch_sent_ms: int
    armed: bool


@fast_init
@dataclass(frozen=True, slots=True)
class VoterFetched:
    """A voter's progress row as a leader's lane left it: its fetches since the lane was armed
    or last reported, the last at `last_fetch_ms` from `end_offset` (the fields of
    `kraft.raft.leader.ReplicaProgress`, which the lane keeps by its rules)."""

    key: ReplicaKey
    end_offset: int
    last_fetch_ms: int
    last_caught_up_ms: int
    prev_fetch_leader_end: int


@fast_init
@dataclass(frozen=True, slots=True)
class LeaderLaneReport:
    """What a leader's native lane did under the lease `RaftCore.leader_lease()` gave it
    (docs/native-lane.md), since it was armed or last reported.

    The lane took the voters' plain fetches (each an acknowledgement), the clients' appends
    (one batch each, all of `epoch`, the lease's) and its own syncs; it moved the high
    watermark by the rules, answered the fetches and the committed appends. The core takes
    this as if it had handled each of those itself. The runtime hands a report over before
    any other event of this core, so the core still leads `epoch`.

    - `appended`: the (base, last) offsets of each batch the lane appended, in order;
    - `appended_bytes`: their records' size, for the snapshot trigger;
    - `durable_end`: the leader's log is durable below this offset;
    - `high_watermark`: the lane's; the core's, from the same rows, must reach it;
    - `voters`: the progress row of each voter that fetched since the last report;
    - `hw_advanced_ms`, `writes_streaming`: when the high watermark last moved, and whether
      the last append came within `hw_linger_ms` of it (`LeaderState`'s fields of those names);
    - `pending`: (append id, last offset) of each append the lane hands over unanswered: the
      core answers it (`AppendCommitted`) once committed;
    - `parked`: the fetches the lane holds, handed over; the core answers each by its rules, at
      the latest at its deadline;
    - `armed`: the lane goes on under the same lease (a progress report: `pending` and
      `parked` empty), or it has stopped. The core runs no timer and sends nothing on a
      progress report.
    """

    epoch: int
    appended: tuple[tuple[int, int], ...]
    appended_bytes: int
    durable_end: int
    high_watermark: int | None
    voters: tuple[VoterFetched, ...]
    hw_advanced_ms: int
    writes_streaming: bool
    pending: tuple[tuple[int, int], ...]
    parked: tuple[ParkedFetch, ...]
    armed: bool


@fast_init
@dataclass(frozen=True, slots=True)
class Shutdown:
    """Graceful shutdown: a leader resigns (EndQuorumEpoch) before the process stops."""


Event = (
    Tick
    | RequestReceived
    | ResponseReceived
    | RequestFailed
    | Append
    | Persisted
    | SnapshotRequested
    | SnapshotCreated
    | RetentionMeasured
    | SnapshotInstalled
    | SnapshotInstallFailed
    | ApiVersionsReceived
    | FollowerLaneReport
    | LeaderLaneReport
    | Shutdown
)
"""Every input of the core."""
