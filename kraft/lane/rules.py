"""The native lane's rules, executable (docs/native-lane.md).

The lane serves the steady state of one epoch under a lease from the core. A leader's lane
counts the voters' acknowledgements (their fetches) and its own syncs, and moves the high
watermark. A follower's lane takes the leader's plain answers: it appends their records and
learns the high watermark. Anything outside the lease is handed over to the core. The methods
below say this by returning None, and they then change nothing.

These classes are the rules in plain Python, with no I/O, like the consensus core
(`kraft.raft`) whose lease (`kraft.raft.lease`) they are built from. They are not on the node's
path. The simulator runs them next to every core (`kraft.sim.lane_shadow`), and after each
event checks that whatever the lane claimed to handle, the core handled the same way. `native()` gives the same rules in C (`kraft.lane._native`),
which the tests check against these input for input, and the simulator can run in their
place.

What the lane leaves to the core, even while armed:
- timers (the fetch timeout, check-quorum, the parked fetches' deadlines);
- whether a fetch with nothing to read is parked or answered at once (KIP-1166's linger);
- everything in docs/native-lane.md's list of handovers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import cast

from kraft.protocol.uuid import Uuid
from kraft.raft.epochs import MAX_EPOCH
from kraft.raft.lease import FollowerLease, LeaderLease, LeaseVoter
from kraft.raft.messages import FetchedBatch, ReplicaKey
from kraft.raft.quorum import majority_offset, next_high_watermark
from kraft.storage.log import AppendScan


def lease_epoch(epoch: int) -> int:
    """`epoch`, when a lease may be of it (0 to `MAX_EPOCH`); ValueError otherwise. A frame
    naming an epoch at the limit is then never of the lease's epoch: the lane hands it over."""
    if not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"a lease's epoch must be 0 to {MAX_EPOCH} (below the epoch limit), "
                         f"got {epoch}")
    return epoch


@dataclass(frozen=True, slots=True)
class LaneFetch:
    """What the leader's lane made of a voter's fetch: the high watermark after it, and where
    the answer's records start (None: nothing to read yet)."""

    high_watermark: int | None
    read_offset: int | None


class LeaderLane:
    """A leader's lane: the lease's fields, and the rules the lane may apply under it.

    `voters` are the lease's rows (`kraft.raft.lease.LeaseVoter`), in the lease's order; the
    lane moves a voter's `matched` by putting a new row in its place, so the lease it was
    built from is left as the core gave it.
    """

    __slots__ = ("_index", "durable", "epoch", "epoch_start", "high_watermark", "log_end",
                 "log_start", "voters")

    def __init__(self, epoch: int, epoch_start: int, log_start: int, log_end: int, durable: int,
                 high_watermark: int | None, voters: Sequence[LeaseVoter]) -> None:
        self.epoch = lease_epoch(epoch)
        self.epoch_start = epoch_start
        self.log_start = log_start
        self.log_end = log_end
        self.durable = durable
        self.high_watermark = high_watermark
        self.voters = list(voters)
        self._index = {v.id: i for i, v in enumerate(self.voters) if not v.is_leader}

    @classmethod
    def from_lease(cls, lease: LeaderLease) -> LeaderLane:
        """The lane a leader's lease arms."""
        return cls(lease.epoch, lease.epoch_start, lease.log_start, lease.log_end,
                   lease.durable, lease.high_watermark, lease.voters)

    def fetch(self, replica_id: int, directory_id: Uuid | None, fetch_offset: int,
              last_fetched_epoch: int, current_leader_epoch: int,
              max_wait_ms: int) -> LaneFetch | None:
        """A Fetch from `replica_id`: its acknowledgement counted and the answer's start, or
        None (hand over) unless it is a voter's plain fetch at the lease's tail."""
        if current_leader_epoch != self.epoch or last_fetched_epoch != self.epoch:
            return None  # another epoch: fencing, or a fetcher that may diverge
        if max_wait_ms < 0:
            return None  # malformed: the core answers INVALID_REQUEST
        if not max(self.epoch_start, self.log_start) < fetch_offset <= self.log_end:
            return None  # before this epoch's records, or past the log: the core decides
        i = self._index.get(replica_id)
        if i is None:
            return None  # an observer
        v = self.voters[i]
        if v.key is None or v.key != ReplicaKey(replica_id, directory_id):
            return None  # a replica of this id that the lease does not count
        if fetch_offset < v.matched:
            return None  # a voter going back: not the steady state
        self.voters[i] = LeaseVoter(v.id, v.key, v.is_leader, fetch_offset)
        self._advance()
        return LaneFetch(self.high_watermark,
                         fetch_offset if fetch_offset < self.log_end else None)

    def appended(self, base_offset: int, last_offset: int, epoch: int) -> bool:
        """Records appended at the tail in this epoch; False (hand over) for anything else."""
        if base_offset != self.log_end or epoch != self.epoch or last_offset < base_offset:
            return False
        self.log_end = last_offset + 1
        return True

    def persisted(self, end_offset: int) -> None:
        """The leader's own log is durable up to `end_offset`."""
        end = min(end_offset, self.log_end)
        if end > self.durable:
            self.durable = end
            self._advance()

    def _advance(self) -> None:
        offsets = [self.durable if v.is_leader else v.matched for v in self.voters]
        self.high_watermark = next_high_watermark(self.high_watermark, majority_offset(offsets),
                                                  self.epoch_start)


@dataclass(frozen=True, slots=True)
class LaneAnswer:
    """What the follower's lane made of a leader's answer: the records appended (None when it
    carried none) and the high watermark after it."""

    appended: tuple[int, int] | None
    high_watermark: int | None


class FollowerLane:
    """A follower's lane: the lease's fields, and the rules the lane may apply under it."""

    __slots__ = ("epoch", "fetch_correlation", "high_watermark", "leader_high_watermark",
                 "leader_id", "log_end")

    def __init__(self, epoch: int, leader_id: int, fetch_correlation: int, log_end: int,
                 high_watermark: int | None) -> None:
        self.epoch = lease_epoch(epoch)
        self.leader_id = leader_id
        self.fetch_correlation = fetch_correlation
        """The correlation id of the fetch in flight: only its answer is taken."""
        self.log_end = log_end
        self.high_watermark = high_watermark
        """This follower's high watermark: the leader's, capped at the log's end."""
        self.leader_high_watermark: int | None = None
        """The leader's high watermark as its last taken answer sent it (None before any):
        what a follower's readiness compares its applied state with."""

    @classmethod
    def from_lease(cls, lease: FollowerLease) -> FollowerLane:
        """The lane a follower's lease arms."""
        return cls(lease.epoch, lease.leader_id, lease.fetch_correlation, lease.log_end,
                   lease.high_watermark)

    def answer(self, correlation_id: int, error: int, leader_id: int, leader_epoch: int,
               high_watermark: int, diverging: bool, snapshot: bool,
               batches: Sequence[FetchedBatch]) -> LaneAnswer | None:
        """The leader's answer to this follower's fetch: its records appended and its high
        watermark taken, or None (hand over) unless it is a plain answer of the lease's leader,
        to the fetch in flight, whose records continue the log in the lease's epoch."""
        if correlation_id != self.fetch_correlation:
            return None  # a late or duplicated answer: the core drops it
        if error != 0 or leader_id != self.leader_id or leader_epoch != self.epoch:
            return None
        if diverging or snapshot:
            return None
        appended = None
        if batches:
            next_offset = self.log_end
            for b in batches:
                if (b.base_offset != next_offset or b.last_offset < b.base_offset
                        or b.epoch != self.epoch or b.is_control):
                    return None  # a gap, another epoch's records, or a control record
                next_offset = b.last_offset + 1
            appended = (self.log_end, next_offset - 1)
            self.log_end = next_offset
        if high_watermark >= 0:
            self.leader_high_watermark = high_watermark
            new = min(high_watermark, self.log_end)
            if self.high_watermark is None or new > self.high_watermark:
                self.high_watermark = new
        self.fetch_correlation = -1  # answered: the next fetch is a new one
        return LaneAnswer(appended, self.high_watermark)


def native() -> ModuleType | None:
    """The C implementation of these rules (`kraft.lane._native`: `LeaderLane`, `FollowerLane`),
    or None where it was not built (the install builds it when a C compiler is there)."""
    try:
        # the extension module itself, not the package: `kraft.lane` imports this module
        import kraft.lane._native as compiled
    except ImportError:
        return None
    return compiled


def append_scan() -> AppendScan | None:
    """The C scan of an append at a log's end (`kraft.lane._native.scan_appended`: the same
    checks as the log's own scan, in C), for `SegmentedLog.use_native_scan`; None where the
    extension was not built."""
    module = native()
    return None if module is None else cast(AppendScan, module.scan_appended)


def to_native(lane: LeaderLane | FollowerLane | LeaderLease | FollowerLease,
              module: ModuleType) -> object:
    """The same lease (or the lane's state under it), armed in the C implementation `module`
    (see `native()`)."""
    if isinstance(lane, LeaderLane | LeaderLease):
        return module.LeaderLane(lane.epoch, lane.epoch_start, lane.log_start, lane.log_end,
                                 lane.durable, lane.high_watermark, lane.voters)
    return module.FollowerLane(lane.epoch, lane.leader_id, lane.fetch_correlation,
                               lane.log_end, lane.high_watermark)
