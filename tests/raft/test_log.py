"""The core's log metadata: epoch cache lookups, truncation and the voters history."""

from __future__ import annotations

from kraft.raft.log import LogMeta
from kraft.raft.messages import OffsetAndEpoch
from kraft.raft.voters import OffsetHistory
from kraft.sim.harness import voter_set


def test_end_offset_for_epoch_uses_next_epoch_start() -> None:
    log = LogMeta(0, 20, ((1, 0), (3, 5), (4, 12)))
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(1, 5)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(1, 5)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(3, 12)
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(4, 20)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(4, 20)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)


def test_end_offset_for_epoch_below_cache_answers_snapshot_boundary() -> None:
    log = LogMeta(10, 20, ((5, 10),), ((OffsetAndEpoch(4, 10), 100),))
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(4, 10)


def test_truncate_drops_epochs_starting_after_end() -> None:
    log = LogMeta(0, 20, ((1, 0), (3, 5), (4, 12)))
    log.persisted_end = 20
    log.truncate_to(12)
    assert log.epoch_entries() == [(1, 0), (3, 5)]
    assert log.last_epoch() == 3
    assert log.persisted_end == 12


def test_last_epoch_of_empty_log_is_snapshot_epoch() -> None:
    log = LogMeta(0, 0)
    assert log.last_epoch() == 0
    log.reset_to_snapshot(OffsetAndEpoch(7, 30), 10)
    assert log.last_epoch() == 7
    assert log.end_position() == OffsetAndEpoch(7, 30)


def test_offset_history_reverts_on_truncation_and_keeps_base() -> None:
    base, a, b = voter_set([1]), voter_set([1, 2]), voter_set([1, 2, 3])
    h = OffsetHistory(base)
    h.add(5, a)
    h.add(9, b)
    assert h.latest() == b
    assert h.value_at(9) == a and h.value_at(10) == b and h.value_at(5) == base
    h.truncate_to(9)
    assert h.latest() == a
    h.truncate_to(0)
    assert h.latest() == base
    assert not h.has_log_entry()
