"""The consensus core's own message dataclasses (not the wire format).

`kraft/server/` translates Kafka wire messages (`kraft.protocol`) to and from these. Field
names follow the Kafka JSON schemas in snake_case; only the single `__cluster_metadata`
partition exists, so the topic/partition nesting of the wire format is flattened away. Top-level
checks that need no consensus state (cluster id, topic id, partition index) are the server's job;
the `error_code` of a response here is the partition-level error.

Replica keys carry a node id and a metadata directory id (`Uuid`); `None` stands for "no
directory id" (kraft.version 0 voters, or a pre-KIP-853 peer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft.frozen import fast_init
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.records.control import Endpoint as Endpoint  # listeners use the record type

NO_LEADER = -1
"""Leader id meaning "leader unknown" (Kafka's -1)."""


@fast_init
@dataclass(frozen=True, slots=True)
class ReplicaKey:
    """A replica identity: node id plus metadata directory id (None when unknown/unused)."""

    id: int
    directory_id: Uuid | None = None

    def __str__(self) -> str:
        return f"{self.id}:{self.directory_id}" if self.directory_id else str(self.id)


@fast_init
@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """A log position: an end offset (exclusive) and the epoch of the record before it.

    Ordered by epoch first, then offset, which is exactly the "log is at least as up to date"
    comparison of the vote rule (hence `epoch` is the first field).
    """

    epoch: int
    offset: int

    def __str__(self) -> str:
        return f"{self.offset}@{self.epoch}"


@fast_init
@dataclass(frozen=True, slots=True)
class KRaftVersionRange:
    """The kraft.version feature range a replica supports."""

    min_supported: int = 0
    max_supported: int = 1

    def supports(self, version: int) -> bool:
        """True when `version` is inside the range."""
        return self.min_supported <= version <= self.max_supported


@fast_init
@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """Metadata of one record batch received by a follower, parsed by the runtime.

    `control_records` holds the decoded control records (LeaderChange, KRaftVersion, Voters)
    only for control batches; `payload` is the batch's bytes, moved as is to the log. The
    simulator may put its own opaque value in `payload`.
    """

    base_offset: int
    last_offset: int
    epoch: int
    is_control: bool = False
    control_records: tuple[object, ...] = ()
    payload: object = b""


# ---------------------------------------------------------------- Vote (KIP-595, KIP-996)


@fast_init
@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Vote / PreVote request from a prospective or candidate replica."""

    replica_epoch: int
    replica_id: int
    replica_directory_id: Uuid | None
    voter_id: int
    voter_directory_id: Uuid | None
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False
    cluster_id: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class VoteResponse:
    """Vote answer; `leader_id`/`leader_epoch` tell the sender what the receiver knows."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    leader_endpoints: tuple[Endpoint, ...] = ()


# ---------------------------------------------------------------- Begin/EndQuorumEpoch


@fast_init
@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """Sent by a new leader to every voter (and resent to voters that do not fetch)."""

    leader_id: int
    leader_epoch: int
    voter_id: int
    voter_directory_id: Uuid | None
    leader_endpoints: tuple[Endpoint, ...] = ()
    cluster_id: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    """Answer to BeginQuorumEpoch."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@fast_init
@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """Sent by a resigning leader; preferred candidates are ordered best first."""

    leader_id: int
    leader_epoch: int
    preferred_candidates: tuple[ReplicaKey, ...] = ()
    leader_endpoints: tuple[Endpoint, ...] = ()
    cluster_id: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    """Answer to EndQuorumEpoch."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


# ---------------------------------------------------------------- Fetch (KIP-595/320/1166)


@fast_init
@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's or observer's Fetch.

    `high_watermark` is the KIP-1166 field: the fetcher's known high watermark, -1 when it
    knows none, and None when the field was not sent (a pre-v18 peer).
    """

    replica_id: int
    replica_directory_id: Uuid | None
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int = 500
    max_bytes: int = 8 * 1024 * 1024
    high_watermark: int | None = -1
    cluster_id: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class FetchResponse:
    """Fetch answer.

    When the leader's core emits it, `batches` is empty: the runtime reads the records named
    by `SendFetchResponse.read_offset`/`max_bytes` from its log and attaches them. When the
    follower's core receives it, `batches` holds the parsed batch metadata.
    """

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None
    leader_endpoints: tuple[Endpoint, ...] = ()
    batches: tuple[FetchedBatch, ...] = ()


# ---------------------------------------------------------------- FetchSnapshot (KIP-630)


@fast_init
@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """Pull one chunk of a snapshot, starting at byte `position`."""

    replica_id: int
    replica_directory_id: Uuid | None
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int = 8 * 1024 * 1024
    cluster_id: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """A chunk of a snapshot; `unaligned_records` is raw file bytes (attached by the runtime)."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    snapshot_id: OffsetAndEpoch
    size: int = 0
    position: int = 0
    unaligned_records: object = b""
    leader_endpoints: tuple[Endpoint, ...] = ()


# ---------------------------------------------------------------- DescribeQuorum


@fast_init
@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    """Ask the leader for the state of the quorum."""


@fast_init
@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One row of DescribeQuorum: -1 marks an unknown offset or timestamp."""

    replica_id: int
    replica_directory_id: Uuid | None
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int


@fast_init
@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    """The leader's view of voters and observers."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: tuple[ReplicaDescription, ...] = ()
    observers: tuple[ReplicaDescription, ...] = ()
    nodes: tuple[tuple[int, tuple[Endpoint, ...]], ...] = ()
    error_message: str | None = None


# ---------------------------------------------------------------- voter changes (KIP-853)


@fast_init
@dataclass(frozen=True, slots=True)
class AddRaftVoterRequest:
    """Admin request: make an (already caught-up) observer a voter."""

    voter_id: int
    voter_directory_id: Uuid | None
    listeners: tuple[Endpoint, ...]
    timeout_ms: int = 30_000
    cluster_id: str | None = None
    ack_when_committed: bool = True
    """False (AddRaftVoter v1, KIP-1186): answer once the voters record is appended."""


@fast_init
@dataclass(frozen=True, slots=True)
class RemoveRaftVoterRequest:
    """Admin request: remove a voter (id + directory id)."""

    voter_id: int
    voter_directory_id: Uuid | None
    cluster_id: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class VoterChangeResponse:
    """Answer to AddRaftVoter / RemoveRaftVoter."""

    error_code: ErrorCode
    error_message: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class UpdateRaftVoterRequest:
    """Sent by a voter to the leader to publish its endpoints and kraft.version range."""

    current_leader_epoch: int
    voter_id: int
    voter_directory_id: Uuid | None
    listeners: tuple[Endpoint, ...]
    kraft_version_feature: KRaftVersionRange
    cluster_id: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class UpdateRaftVoterResponse:
    """Answer to UpdateRaftVoter, with what the receiver knows of the leader."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@fast_init
@dataclass(frozen=True, slots=True)
class ControllerRegistrationRequest:
    """Sent by an observer to the leader (Kafka's ControllerRegistration, api 70): its id,
    endpoints and supported kraft.version range, which a kraft.version upgrade checks."""

    controller_id: int
    incarnation_id: Uuid | None
    listeners: tuple[Endpoint, ...]
    kraft_version_feature: KRaftVersionRange


@fast_init
@dataclass(frozen=True, slots=True)
class ControllerRegistrationResponse:
    """Answer to ControllerRegistration."""

    error_code: ErrorCode
    error_message: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class UpdateKRaftVersionRequest:
    """UpdateFeatures for kraft.version (the only feature the consensus core owns)."""

    kraft_version: int
    validate_only: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class UpdateKRaftVersionResponse:
    """Answer to an UpdateFeatures(kraft.version) request."""

    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ApiVersionsResult:
    """What the leader learnt from ApiVersions of a replica it wants to add as a voter.

    `error_code` NONE with the replica's supported kraft.version range, or an error when the
    replica was unreachable.
    """

    error_code: ErrorCode
    kraft_version: KRaftVersionRange = field(default_factory=KRaftVersionRange)


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | DescribeQuorumRequest
    | AddRaftVoterRequest
    | RemoveRaftVoterRequest
    | UpdateRaftVoterRequest
    | UpdateKRaftVersionRequest
    | ControllerRegistrationRequest
)
"""Every request the core receives."""

Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | DescribeQuorumResponse
    | VoterChangeResponse
    | UpdateRaftVoterResponse
    | UpdateKRaftVersionResponse
    | ControllerRegistrationResponse
)
"""Every response the core produces or receives."""
