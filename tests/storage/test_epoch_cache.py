"""Leader-epoch cache: Kafka's endOffsetFor semantics, truncation from both ends, the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.storage.epoch_cache import (
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
    end_offset_for_epoch,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)
from kraft.storage.errors import CorruptLogError
from kraft.storage.layout import SnapshotId


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def test_end_offset_for_matches_kafka_cases() -> None:
    c = cache_of((1, 0), (3, 10), (6, 25))
    leo = 40
    assert c.end_offset_for(-1, leo) == EpochEndOffset(-1, -1)
    assert c.end_offset_for(6, leo) == EpochEndOffset(6, 40)  # latest -> LEO
    assert c.end_offset_for(1, leo) == EpochEndOffset(1, 10)
    assert c.end_offset_for(2, leo) == EpochEndOffset(1, 10)  # unknown epoch: floor epoch
    assert c.end_offset_for(3, leo) == EpochEndOffset(3, 25)
    assert c.end_offset_for(5, leo) == EpochEndOffset(3, 25)
    assert c.end_offset_for(0, leo) == EpochEndOffset(0, 0)  # below every epoch
    assert c.end_offset_for(7, leo) == EpochEndOffset(-1, -1)  # above every epoch
    assert LeaderEpochCache().end_offset_for(3, leo) == EpochEndOffset(-1, -1)


def test_metadata_log_variant_uses_oldest_snapshot() -> None:
    c = cache_of((2, 90), (4, 100), (5, 120))
    snap = SnapshotId(100, 3)
    # Epoch 3 is unknown; its floor (2) ends exactly at the snapshot: answer the snapshot.
    assert end_offset_for_epoch(c, 3, 150, snap) == EpochEndOffset(3, 100)
    assert end_offset_for_epoch(c, 2, 150, snap) == EpochEndOffset(2, 100)
    assert end_offset_for_epoch(c, 4, 150, snap) == EpochEndOffset(4, 120)
    assert end_offset_for_epoch(c, 9, 150, snap) == EpochEndOffset(9, 150)


def test_assign_rules() -> None:
    c = LeaderEpochCache()
    assert c.assign(1, 0)
    assert not c.assign(1, 5)
    assert c.assign(2, 5)
    assert c.assign(3, 5)  # epoch 2 wrote nothing: replaced
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 5))
    with pytest.raises(ValueError, match="backwards"):
        c.assign(2, 9)
    with pytest.raises(ValueError, match="backwards"):
        c.assign(4, 4)


def test_truncate_from_end_and_start() -> None:
    c = cache_of((1, 0), (3, 10), (6, 25))
    assert c.truncate_from_end(25)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 10))
    assert not c.truncate_from_end(30)
    c = cache_of((1, 0), (3, 10), (6, 25))
    assert c.truncate_from_start(12)
    assert c.entries == (EpochEntry(3, 12), EpochEntry(6, 25))
    assert c.truncate_from_start(25)
    assert c.entries == (EpochEntry(6, 25),)
    assert not c.truncate_from_start(3)


def test_checkpoint_file_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_epoch_checkpoint(path, [EpochEntry(0, 0), EpochEntry(3, 57)])
    assert path.read_text() == "0\n2\n0 0\n3 57\n"
    assert read_epoch_checkpoint(path) == [EpochEntry(0, 0), EpochEntry(3, 57)]
    assert read_epoch_checkpoint(tmp_path / "missing") is None
    path.write_text("0\n3\n0 0\n")
    with pytest.raises(CorruptLogError, match="header says 3 entries"):
        read_epoch_checkpoint(path)
    path.write_text("1\n0\n")
    with pytest.raises(CorruptLogError, match="version"):
        read_epoch_checkpoint(path)


@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(1, 5)), min_size=1, max_size=12),
    st.integers(0, 30),
)
def test_end_offset_for_agrees_with_a_scan_of_the_log(
    runs: list[tuple[int, int]], requested: int
) -> None:
    # Build a log as (epoch per offset), derive the cache, compare with a direct scan.
    epochs_per_offset: list[int] = []
    epoch = 0
    for bump, length in runs:
        epoch += bump
        epochs_per_offset += [epoch] * length
    cache = LeaderEpochCache()
    for off, e in enumerate(epochs_per_offset):
        cache.assign(e, off)
    leo = len(epochs_per_offset)
    got = cache.end_offset_for(requested, leo)
    known = sorted(set(epochs_per_offset))
    if requested > known[-1]:
        assert got == EpochEndOffset(-1, -1)
        return
    floor = [e for e in known if e <= requested]
    end = next((o for o, e in enumerate(epochs_per_offset) if e > requested), leo)
    expected_epoch = floor[-1] if floor else requested
    assert got == EpochEndOffset(expected_epoch, end)
