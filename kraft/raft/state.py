"""The epoch states of a replica (KIP-595, KIP-996), one class per state.

Legal transitions (anything else is a bug):

| from \\ to    | Unattached | Prospective | Candidate | Leader | Follower | Resigned |
|--------------|------------|-------------|-----------|--------|----------|----------|
| Unattached   | higher ep. | timeout (v) |           |        | leader   |          |
| Prospective  | lost, or higher epoch |   | pre-vote majority |  | leader known | |
| Candidate    | higher ep. | backoff over |          | majority | leader  |          |
| Leader       | higher ep. |             |           |        | higher ep. | resign |
| Follower     | higher ep.; observer timeout | fetch timeout (v) | | | higher ep. | |
| Resigned     | higher ep. | timeout (v) |           |        | leader   |          |

(v) = voters only; observers never leave Unattached/Follower except to follow a leader.
Each state holds only the data it needs; the leader's replica progress lives in
`kraft.raft.leader.LeaderState`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar

from kraft.raft.messages import Endpoint, OffsetAndEpoch, ReplicaKey, Request


class Role(enum.Enum):
    """Which epoch state a replica is in."""

    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


@dataclass(slots=True)
class UnattachedState:
    """No leader known in `epoch`; may have voted. Voters run an election timer."""

    role: ClassVar[Role] = Role.UNATTACHED
    epoch: int
    voted: ReplicaKey | None = None
    election_deadline: int | None = None

    @property
    def leader_id(self) -> int:
        """No leader is known."""
        return -1


@dataclass(slots=True)
class ProspectiveState:
    """KIP-996 pre-vote round at the current epoch (the epoch is not bumped yet).

    A leader known from a previous Follower state is retained so the replica can go back to
    following it if the pre-vote fails.
    """

    role: ClassVar[Role] = Role.PROSPECTIVE
    epoch: int
    voted: ReplicaKey | None
    retained_leader: int
    retained_endpoints: tuple[Endpoint, ...]
    election_deadline: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)

    @property
    def leader_id(self) -> int:
        """Prospective replicas report no leader."""
        return -1


@dataclass(slots=True)
class CandidateState:
    """Asking for votes at `epoch` (already bumped, voted for itself)."""

    role: ClassVar[Role] = Role.CANDIDATE
    epoch: int
    election_deadline: int
    retries: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until: int | None = None
    vote_retry: dict[int, int] = field(default_factory=dict)
    """Voters whose vote request failed (no answer): when to ask them again."""

    @property
    def leader_id(self) -> int:
        """No leader is known."""
        return -1


@dataclass(slots=True)
class SnapshotDownload:
    """A snapshot being pulled with FetchSnapshot."""

    snapshot_id: OffsetAndEpoch
    position: int = 0
    complete: bool = False


@dataclass(slots=True)
class FollowerState:
    """Following `leader_id` in `epoch` (voters and observers)."""

    role: ClassVar[Role] = Role.FOLLOWER
    epoch: int
    leader_id: int
    leader_endpoints: tuple[Endpoint, ...]
    voted: ReplicaKey | None
    fetch_deadline: int
    has_fetched: bool = False
    heard_at: int | None = None
    """When the leader last answered a Fetch or FetchSnapshot of this epoch without an error
    (ms): while that is less than the fetch timeout ago, and the leader is still protected
    (`has_fetched`, not `disconnected`), it is live (`kraft.raft.elections.live_leader`)."""
    disconnected: bool = False
    """The connection to the leader broke with a fetch in flight: pre-votes are granted (the
    leader is not protected) until a fetch succeeds again."""
    leader_gone_at: int | None = None
    """Set when the leader refused a connection (its process is gone): the time to start a
    pre-vote without waiting for the fetch timeout."""
    waiting_turn: bool = False
    """The fetch timed out and this replica waits its turn among the survivors before its
    pre-vote (`fetch_deadline` is when)."""
    refused_prevote_at: int | None = None
    """When this replica refused a pre-vote that could not win without its grant once the
    leader is gone (3 or 4 voters): that replica is not going ahead of this one, so a fetch
    timeout within an election timeout of it skips the turn among the survivors. Cleared by a
    successful fetch."""
    refused_shorter_log: bool = False
    """The same, refused because the asker's log is shorter than this replica's: it skips
    its turn after a refused connection as well, and ends a turn already being waited."""
    download: SnapshotDownload | None = None
    leader_log_start: int = 0
    """The LogStartOffset of the leader's latest answer: this replica's log start follows it
    (KIP-630, `kraft.raft.retention.follower_log_start`)."""
    update_voter_done: bool = False
    registered: bool = False
    """An observer: this leader took its ControllerRegistration (its kraft.version range)."""
    next_admin_at: int = 0


@dataclass(slots=True)
class ResignedState:
    """A former leader of `epoch` that stepped down and waits for a successor."""

    role: ClassVar[Role] = Role.RESIGNED
    epoch: int
    election_deadline: int
    preferred: tuple[ReplicaKey, ...]
    node_id: int
    voted: ReplicaKey | None = None

    @property
    def leader_id(self) -> int:
        """A resigned replica still names itself as the epoch's leader."""
        return self.node_id


@dataclass(slots=True)
class InFlight:
    """A request the core sent and still awaits an answer to: where it went, what it was, and
    when it times out (`RequestFailed`)."""

    destination: int
    request: Request
    deadline: int
