"""The voters set (KIP-853) and its history along the log.

The active voters set is the latest one in the log, committed or not; it falls back to the
latest snapshot's set and then to the static `controller.quorum.voters` set. Truncating the log
reverts the history, so an uncommitted change that the leader of a later epoch does not have
disappears with the truncated records.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kraft.raft.messages import Endpoint, KRaftVersionRange, ReplicaKey

_DEFAULT_RANGE = KRaftVersionRange(0, 1)


@dataclass(frozen=True, slots=True)
class VoterNode:
    """One voter: its key, listener endpoints and supported kraft.version range."""

    key: ReplicaKey
    endpoints: tuple[Endpoint, ...] = ()
    kraft_version: KRaftVersionRange = _DEFAULT_RANGE

    @property
    def id(self) -> int:
        """The voter's node id."""
        return self.key.id


@dataclass(frozen=True, slots=True)
class VoterSet:
    """An immutable set of voters, at most one per node id."""

    voters: tuple[VoterNode, ...]
    _by_id: dict[int, VoterNode] = field(init=False, repr=False, compare=False, hash=False)
    _ids: frozenset[int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Looked up on every fetch and timer: index the (small, immutable) set once.
        object.__setattr__(self, "_by_id", {n.id: n for n in self.voters})
        object.__setattr__(self, "_ids", frozenset(self._by_id))

    @staticmethod
    def of(nodes: list[VoterNode] | tuple[VoterNode, ...]) -> VoterSet:
        """Build a set sorted by node id; raises ValueError on a duplicate id."""
        ordered = tuple(sorted(nodes, key=lambda n: n.id))
        ids = [n.id for n in ordered]
        if len(set(ids)) != len(ids):
            raise ValueError(f"voters set has a duplicate node id: {ids}")
        return VoterSet(ordered)

    def ids(self) -> frozenset[int]:
        """The voters' node ids."""
        return self._ids

    def get(self, node_id: int) -> VoterNode | None:
        """The voter with this node id, if any."""
        return self._by_id.get(node_id)

    def is_voter(self, key: ReplicaKey) -> bool:
        """True when `key` is a voter: same id and, if the set records one, same directory id."""
        n = self._by_id.get(key.id)
        if n is None:
            return False
        return n.key.directory_id is None or n.key.directory_id == key.directory_id

    def is_voter_id(self, node_id: int) -> bool:
        """True when some voter has this node id (used where only ids are known)."""
        return node_id in self._by_id

    def has_exact(self, key: ReplicaKey) -> bool:
        """True when a voter has exactly this key (id and directory id)."""
        return any(n.key == key for n in self.voters)

    def keys(self) -> tuple[ReplicaKey, ...]:
        """The voters' replica keys."""
        return tuple(n.key for n in self.voters)

    def with_voter(self, node: VoterNode) -> VoterSet:
        """A copy with `node` added (replacing nothing: the id must be new)."""
        return VoterSet.of([*self.voters, node])

    def without(self, key: ReplicaKey) -> VoterSet:
        """A copy without the voter matching `key`."""
        return VoterSet(tuple(n for n in self.voters if n.key != key))

    def replaced(self, node: VoterNode) -> VoterSet:
        """A copy where the voter with `node`'s id is replaced by `node`."""
        return VoterSet(tuple(node if n.id == node.id else n for n in self.voters))

    def differs_by_at_most_one(self, other: VoterSet) -> bool:
        """KIP-853 safety: two consecutive sets differ by at most one voter key.

        A voter without a directory id (kraft.version 0) matches the same id with any
        directory id, so the kraft.version upgrade (which adds directory ids) is no change.
        """
        if any(k.directory_id is None for k in (*self.keys(), *other.keys())):
            return len(self.ids().symmetric_difference(other.ids())) <= 1
        return len(set(self.keys()).symmetric_difference(other.keys())) <= 1

    def __len__(self) -> int:
        return len(self.voters)

    def __str__(self) -> str:
        return "[" + ",".join(str(n.key) for n in self.voters) + "]"


def static_voter_set(voters: dict[int, tuple[str, int]], listener: str) -> VoterSet:
    """The kraft.version 0 set from `controller.quorum.voters` (no directory ids)."""
    return VoterSet.of(
        [
            VoterNode(ReplicaKey(i, None), (Endpoint(listener, h, p),), KRaftVersionRange(0, 0))
            for i, (h, p) in voters.items()
        ]
    )


T = TypeVar("T")


class OffsetHistory(Generic[T]):
    """Values keyed by the log offset at which they were written, revertible on truncation.

    An entry at offset -1 is the base (static config or bootstrap snapshot) and survives
    truncation.
    """

    __slots__ = ("_offsets", "_values")

    def __init__(self, base: T | None = None) -> None:
        self._offsets: list[int] = []
        self._values: list[T] = []
        if base is not None:
            self._offsets.append(-1)
            self._values.append(base)

    def add(self, offset: int, value: T) -> None:
        """Record `value` as written at `offset` (offsets only grow)."""
        if self._offsets and offset < self._offsets[-1]:
            raise ValueError(f"history offset {offset} is behind {self._offsets[-1]}")
        if self._offsets and offset == self._offsets[-1]:
            self._values[-1] = value
            return
        self._offsets.append(offset)
        self._values.append(value)

    def latest(self) -> T | None:
        """The newest value, committed or not."""
        return self._values[-1] if self._values else None

    def latest_offset(self) -> int:
        """Offset of the newest value (-1 for the base or when empty)."""
        return self._offsets[-1] if self._offsets else -1

    def value_at(self, offset: int) -> T | None:
        """The value in force for the log prefix ending before `offset` (exclusive end)."""
        i = bisect.bisect_left(self._offsets, offset)
        return self._values[i - 1] if i > 0 else None

    def truncate_to(self, end_offset: int) -> None:
        """Forget values written at offsets >= `end_offset` (the base at -1 is kept)."""
        i = bisect.bisect_left(self._offsets, end_offset)
        if end_offset <= -1:
            i = min(1, len(self._offsets)) if self._offsets and self._offsets[0] == -1 else 0
        del self._offsets[i:]
        del self._values[i:]

    def reset(self, offset: int, value: T | None) -> None:
        """Replace the whole history by one value (snapshot install)."""
        self._offsets = [offset] if value is not None else []
        self._values = [value] if value is not None else []

    def entries(self) -> list[tuple[int, T]]:
        """All (offset, value) pairs, oldest first."""
        return list(zip(self._offsets, self._values))

    def has_log_entry(self) -> bool:
        """True when some value came from the log itself (offset >= 0)."""
        return any(o >= 0 for o in self._offsets)

