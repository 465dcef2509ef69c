"""State of a leader: replica progress, high watermark, parked fetches, voter changes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar

from kraft.raft.messages import (
    Endpoint,
    FetchRequest,
    KRaftVersionRange,
    OffsetAndEpoch,
    ReplicaKey,
)
from kraft.raft.quorum import majority_offset, next_high_watermark
from kraft.raft.state import Role
from kraft.raft.voters import VoterNode, VoterSet

OBSERVER_SESSION_TIMEOUT_MS = 300_000
"""Observers are listed by DescribeQuorum for this long after their last fetch."""

VOTER_CHANGE_TIMEOUT_MS = 30_000
"""How long Remove/kraft.version changes wait for their record to commit before answering
REQUEST_TIMED_OUT (AddRaftVoter uses its request's TimeoutMs)."""

CAUGHT_UP_WINDOW_MS = 3_600_000
"""A replica counts as caught up for AddRaftVoter if it reached the log end this recently."""


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows about one replica (voter or observer), keyed by replica key."""

    key: ReplicaKey
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    prev_fetch_ms: int = -1
    prev_fetch_leader_end: int = -1
    reported_range: KRaftVersionRange | None = None
    reported_endpoints: tuple[Endpoint, ...] = ()

    def record_fetch(self, fetch_offset: int, leader_end: int, now_ms: int) -> None:
        """Update after a valid Fetch at `fetch_offset` while the leader's log ends at
        `leader_end`; a replica is caught up when it reached the leader's end as of this or the
        previous fetch."""
        self.end_offset = fetch_offset
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = now_ms
        elif fetch_offset >= self.prev_fetch_leader_end and self.prev_fetch_ms >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.prev_fetch_ms)
        self.prev_fetch_ms = now_ms
        self.prev_fetch_leader_end = leader_end
        self.last_fetch_ms = now_ms


_SELF = ReplicaProgress(ReplicaKey(-1))
"""Stands for the leader itself among `LeaderState._rows` (its own offset is its persisted end)."""


@dataclass(slots=True)
class ParkedFetch:
    """A Fetch held back (long poll) until data, a high-watermark move or `deadline`."""

    source: int
    correlation_id: int
    request: FetchRequest
    deadline: int


class ChangeKind(enum.Enum):
    """Kinds of membership change; at most one is pending at a time."""

    ADD = "add"
    REMOVE = "remove"
    UPGRADE = "upgrade"


@dataclass(slots=True)
class PendingChange:
    """An AddRaftVoter / RemoveRaftVoter / kraft.version upgrade in progress."""

    kind: ChangeKind
    source: int
    correlation_id: int
    deadline: int
    key: ReplicaKey
    node: VoterNode | None = None
    record_offset: int | None = None  # None while waiting for ApiVersions
    timeout_ms: int = 30_000
    ack_when_committed: bool = True
    """False (AddRaftVoter v1): the request is answered when the record is appended; the
    change stays pending (no other change starts) until it commits."""
    answered: bool = False


@dataclass(slots=True)
class LeaderState:
    """The leader of `epoch`. Only this object holds replica progress."""

    role: ClassVar[Role] = Role.LEADER
    epoch: int
    node_key: ReplicaKey
    epoch_start_offset: int
    granting: frozenset[int]
    check_quorum_deadline: int
    begin_quorum_resend_at: int
    high_watermark: int | None = None
    progress: dict[ReplicaKey, ReplicaProgress] = field(default_factory=dict)
    latest_key_by_id: dict[int, ReplicaKey] = field(default_factory=dict)
    fetched_since_check: set[int] = field(default_factory=set)
    parked: list[ParkedFetch] = field(default_factory=list)
    pending_appends: dict[int, int] = field(default_factory=dict)
    pending_change: PendingChange | None = None
    registered_ranges: dict[int, KRaftVersionRange] = field(default_factory=dict)
    """Observer id -> the kraft.version range its ControllerRegistration reported."""
    resign_when_committed: int | None = None
    voted: ReplicaKey | None = None
    hw_advanced_at: int = -(1 << 62)
    """When the high watermark last moved (ms)."""
    snapshot_reads: dict[ReplicaKey, tuple[OffsetAndEpoch, int]] = field(default_factory=dict)
    """The snapshot each replica last read with FetchSnapshot, and when (ms): the retention
    rule keeps a snapshot read within the fetch timeout (a download in progress)."""
    writes_streaming: bool = False
    """The latest append came within `hw_linger_ms` of the high watermark's last move: the
    next move's answers to parked fetches wait for the next append (`kraft.raft.replication.hold_for_records`)."""
    _rows_of: tuple[VoterSet, tuple[ReplicaProgress | None, ...]] | None = field(
        default=None, repr=False, compare=False)

    @property
    def leader_id(self) -> int:
        """The leader itself."""
        return self.node_key.id

    def progress_for(self, key: ReplicaKey) -> ReplicaProgress:
        """The progress row of `key`, created on first sight."""
        p = self.progress.get(key)
        if p is None:
            p = ReplicaProgress(key)
            self.progress[key] = p
        if self.latest_key_by_id.get(key.id) is not p.key:
            self.latest_key_by_id[key.id] = p.key
            self._rows_of = None  # a voter's row may now be another one
        return p

    def voter_progress(self, voter: VoterNode) -> ReplicaProgress | None:
        """The progress row matching a voter (by id when the set has no directory ids)."""
        if voter.key.directory_id is not None:
            return self.progress.get(voter.key)
        latest = self.latest_key_by_id.get(voter.id)
        return self.progress.get(latest) if latest is not None else None

    def voter_offsets(self, voters: VoterSet, own_persisted_end: int) -> list[int]:
        """Each voter's durable end offset (the leader's own persisted end for itself)."""
        rows = self._rows(voters)
        return [own_persisted_end if p is _SELF else p.end_offset if p is not None else -1
                for p in rows]

    def compute_high_watermark(self, voters: VoterSet, own_persisted_end: int) -> int | None:
        """The new high watermark under `voters` (unchanged if it may not move)."""
        majority = majority_offset(self.voter_offsets(voters, own_persisted_end))
        return next_high_watermark(self.high_watermark, majority, self.epoch_start_offset)

    def _rows(self, voters: VoterSet) -> tuple[ReplicaProgress | None, ...]:
        """The progress row of each voter of `voters`, in order (`_SELF` for the leader, None
        for a voter not heard from). Rows are updated in place, so the tuple is kept until
        the voters set or a voter's row changes (the high watermark is computed on every
        acknowledgement)."""
        rows = self._rows_of
        if rows is not None and rows[0] is voters:
            return rows[1]
        own = self.node_key
        out: list[ReplicaProgress | None] = []
        for v in voters.voters:
            # the leader itself: same id, and the same directory id unless the set has none
            if v.id == own.id and (v.key.directory_id is None or v.key == own):
                out.append(_SELF)
            else:
                out.append(self.voter_progress(v))
        self._rows_of = (voters, tuple(out))
        return self._rows_of[1]
