"""Construction inputs of the consensus core: static configuration and the loaded log state."""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft.protocol.uuid import Uuid
from kraft.raft.messages import Endpoint, KRaftVersionRange, OffsetAndEpoch
from kraft.raft.voters import VoterSet


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Configuration of one replica (Kafka's `controller.quorum.*` and snapshot settings).

    Exactly one of `static_voters` (controller.quorum.voters, kraft.version 0) and
    `bootstrap_servers` (controller.quorum.bootstrap.servers, dynamic quorum whose voters come
    from the log / bootstrap snapshot) is normally set; a dynamic quorum may set both empty when
    the voters are in the loaded `LogState`.

    Fields: `listeners` are this replica's endpoints (published in Begin/EndQuorumEpoch, Add/
    UpdateRaftVoter); the timeouts are Kafka's `controller.quorum.*` settings (election timeout
    randomized in [T, 2T), check-quorum = 1.5 x fetch timeout); `max_fetch_wait_ms` is the
    Fetch MaxWaitMs; `fetch_snapshot_max_bytes` is FetchSnapshot's MaxBytes (Kafka 4.2's
    controller.quorum.fetch.snapshot.max.bytes, KIP-1219); `auto_join` is controller.quorum.auto.join.enable;
    `snapshot_max_bytes_between` / `snapshot_interval_ms` are
    metadata.log.max.record.bytes.between.snapshots / metadata.log.max.snapshot.interval.ms (0
    disables the time trigger); `retention_max_bytes` / `retention_max_ms` are
    metadata.max.retention.bytes / metadata.max.retention.ms (negative: no limit), the
    leader's rule for deleting old snapshots and the log below them (`kraft.raft.retention`),
    checked every `retention_check_interval_ms` (Kafka's fixed 60 s); `update_voter_period_ms` paces
    UpdateRaftVoter / auto-join retries (Kafka: 3 x fetch timeout); `hw_linger_ms` (0: off)
    lets a leader whose writes stream in (each within that long of the last commit) hold a
    parked fetch that only a new high watermark would complete (KIP-1166) for up to that long,
    so the high watermark rides on the next records instead of costing an answer and a refetch.
    """

    node_id: int
    directory_id: Uuid
    listeners: tuple[Endpoint, ...] = ()
    static_voters: VoterSet | None = None
    bootstrap_servers: tuple[Endpoint, ...] = ()
    election_timeout_ms: int = 1000
    election_backoff_max_ms: int = 1000
    fetch_timeout_ms: int = 2000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    max_fetch_wait_ms: int = 500
    max_fetch_bytes: int = 8 * 1024 * 1024
    fetch_snapshot_max_bytes: int = 8 * 1024 * 1024
    auto_join: bool = False
    kraft_version_range: KRaftVersionRange = field(default_factory=lambda: KRaftVersionRange(0, 1))
    snapshot_max_bytes_between: int = 20 * 1024 * 1024
    snapshot_interval_ms: int = 3_600_000
    retention_max_bytes: int = 104_857_600
    retention_max_ms: int = 604_800_000
    retention_check_interval_ms: int = 60_000
    update_voter_period_ms: int = 6000
    hw_linger_ms: int = 0


@dataclass(frozen=True, slots=True)
class QuorumStateData:
    """Contents of the `quorum-state` file."""

    leader_epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1
    voted_directory_id: Uuid | None = None


@dataclass(frozen=True, slots=True)
class LogState:
    """What the runtime loaded from disk before starting the core.

    `epoch_cache` is the leader-epoch checkpoint ((epoch, start offset), ascending);
    `voters_history` holds (offset, voters) for each VotersRecord in the log, preceded by the
    set of the snapshot the log starts from, at offset (snapshot end offset - 1), or by the
    bootstrap checkpoint's (0-0) set at offset -1; `kraft_version_history` likewise for
    KRaftVersion records;
    `snapshots` lists every complete snapshot id with its size in bytes.
    """

    quorum_state: QuorumStateData = field(default_factory=QuorumStateData)
    log_start_offset: int = 0
    log_end_offset: int = 0
    epoch_cache: tuple[tuple[int, int], ...] = ()
    voters_history: tuple[tuple[int, VoterSet], ...] = ()
    kraft_version_history: tuple[tuple[int, int], ...] = ()
    snapshots: tuple[tuple[OffsetAndEpoch, int], ...] = ()
