"""Pure quorum arithmetic: the majority high watermark and vote counting.

Kept free of any state so that it can be tested exhaustively over small sets.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping


def majority_size(voter_count: int) -> int:
    """Smallest number of voters that forms a majority of `voter_count` voters."""
    return voter_count // 2 + 1


def majority_offset(offsets: Iterable[int]) -> int:
    """The largest offset that a majority of the given per-voter offsets reach.

    Each element is one voter's durable end offset (-1 or 0 when unknown). Sorting descending
    and taking index floor(n/2) gives the value that at least n//2+1 voters have reached.
    Returns -1 for an empty voter list, which never forms a majority.
    """
    ordered = sorted(offsets, reverse=True)
    if not ordered:
        return -1
    return ordered[len(ordered) // 2]


def next_high_watermark(
    current: int | None, majority: int, epoch_start_offset: int
) -> int | None:
    """Apply the leader's acceptance rules to a majority offset.

    The high watermark moves only when the majority covers a record of the leader's own epoch
    (`majority > epoch_start_offset`) and only forwards. Returns the new value, or `current`
    unchanged.
    """
    if majority <= epoch_start_offset:
        return current
    if current is not None and majority <= current:
        return current
    return majority


class VoteResult(enum.Enum):
    """Outcome of an election given the answers so far."""

    WON = "won"
    LOST = "lost"
    PENDING = "pending"


def vote_result(voters: Iterable[int], granted: Iterable[int], rejected: Iterable[int]) -> VoteResult:
    """Count an election over `voters` (ids); answers from non-voters are ignored.

    WON once a majority granted, LOST once a majority can no longer be reached.
    """
    voter_set = set(voters)
    yes = len(voter_set.intersection(granted))
    no = len(voter_set.intersection(rejected))
    need = majority_size(len(voter_set))
    if voter_set and yes >= need:
        return VoteResult.WON
    if not voter_set or len(voter_set) - no < need:
        return VoteResult.LOST
    return VoteResult.PENDING


def quorum_reached_since(
    last_contact: Mapping[int, int], voters: Iterable[int], since_ms: int
) -> bool:
    """Check-quorum: did a majority of `voters` contact the leader at or after `since_ms`?

    `last_contact` maps voter id to its last fetch time; the leader itself should be present
    with the current time when it is a voter.
    """
    voter_list = list(voters)
    fresh = sum(1 for v in voter_list if last_contact.get(v, -1) >= since_ms)
    return bool(voter_list) and fresh >= majority_size(len(voter_list))
