"""The simulator's invariant checks themselves, on hand-made situations."""

from __future__ import annotations

import pytest

from kraft.sim.invariants import Invariants, InvariantViolation


def _chain(offset: int) -> int:
    return 1000 + offset


def test_truncating_a_record_committed_in_the_epoch_followed_is_a_violation() -> None:
    inv = Invariants()
    for o in range(10):
        inv.on_applied(1, o, _chain(o + 1))
    inv.on_commit(1, 10, _chain(10), epoch=3)
    inv.check_truncation(2, 10, _chain, epoch=3)  # removes nothing committed
    with pytest.raises(InvariantViolation, match="committed_never_truncated"):
        inv.check_truncation(2, 8, _chain, epoch=3)


def test_a_follower_of_a_stale_leader_may_truncate_records_committed_later() -> None:
    inv = Invariants()
    for o in range(5):
        inv.on_applied(1, o, _chain(o + 1))
    inv.on_commit(1, 5, _chain(5), epoch=8)
    for o in range(5, 12):
        inv.on_applied(3, o, _chain(o + 1))
    inv.on_commit(3, 12, _chain(12), epoch=10)  # offsets 5-11 committed by the leader of 10
    inv.check_truncation(4, 6, _chain, epoch=9)  # it follows the deposed leader of 9: allowed
    with pytest.raises(InvariantViolation, match="committed_never_truncated"):
        inv.check_truncation(4, 6, _chain, epoch=10)
    with pytest.raises(InvariantViolation, match="committed_never_truncated"):
        inv.check_truncation(4, 3, _chain, epoch=9)  # 3 was committed in epoch 8
