"""The core's log metadata: epoch cache lookups, truncation and the voters history."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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


@st.composite
def _logs(draw: st.DrawFn) -> LogMeta:
    """A log metadata built the way a replica's log evolves: appends in non-decreasing
    epochs, snapshots of what it holds, the start advanced to a snapshot, truncations above
    the newest snapshot, and a snapshot installed in place of the whole log."""
    log = LogMeta()
    epoch = draw(st.integers(0, 3))
    for _ in range(draw(st.integers(0, 12))):
        op = draw(st.sampled_from(["append", "append", "append", "snapshot", "start",
                                   "truncate", "install"]))
        newest = max((s.offset for s in log.snapshots), default=0)
        if op == "append":
            epoch += draw(st.integers(0, 2))
            n = draw(st.integers(1, 5))
            log.append(log.end_offset, log.end_offset + n - 1, epoch)
        elif op == "snapshot" and log.end_offset > log.start_offset:
            at = draw(st.integers(log.start_offset + 1, log.end_offset))
            log.snapshots[OffsetAndEpoch(log.epoch_at(at), at)] = 1
        elif op == "start" and log.snapshots:
            log.advance_start(draw(st.sampled_from(sorted(s.offset for s in log.snapshots))))
        elif op == "truncate" and log.end_offset > max(newest, log.start_offset):
            log.truncate_to(draw(st.integers(max(newest, log.start_offset), log.end_offset)))
        elif op == "install":
            epoch += draw(st.integers(0, 2))
            log.reset_to_snapshot(
                OffsetAndEpoch(epoch, log.end_offset + draw(st.integers(0, 5))), 1)
    return log


@given(_logs(), st.data())
def test_a_fetch_inside_the_latest_epoch_needs_no_snapshot_and_does_not_diverge(
        log: LogMeta, data: st.DataObject) -> None:
    """What the leader's steady-state shortcut (`inside_latest_epoch`) skips: the snapshot
    and divergence checks of a Fetch, which for such a fetch find nothing."""
    fetch_offset = data.draw(st.integers(0, log.end_offset + 2))
    last_epoch = data.draw(st.integers(0, log.last_epoch() + 1))
    if not log.inside_latest_epoch(fetch_offset, last_epoch):
        return
    assert fetch_offset > log.start_offset  # so not the "fetch from 0" snapshot case
    oldest = log.oldest_snapshot()
    assert oldest is None or last_epoch >= oldest.epoch
    end = log.end_offset_for_epoch(last_epoch)
    assert end.epoch == last_epoch and end.offset >= fetch_offset
