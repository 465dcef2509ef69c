"""SegmentedLog: append, read, roll, indexes, truncation, log start, flush from a thread."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.records.batch import RecordBatch, build_batch
from kraft.storage import durability
from kraft.storage.epoch_cache import EpochEntry
from kraft.storage.errors import InvalidAppendError, OffsetOutOfRangeError, StorageError
from kraft.storage.log import SegmentedLog
from kraft.storage.log_segments import RECENT_APPENDS
from tests.support.segments import rebuilt_index

Batches = Callable[..., list[bytes]]


def fill(log: SegmentedLog, batches: Batches, count: int, epoch: int = 1) -> list[bytes]:
    made = batches(log.log_end_offset, count, epoch=epoch)
    for b in made:
        log.append(b)
    return made


def test_append_read_and_reopen(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    made = fill(log, batches, 10)
    assert log.log_end_offset == 20
    assert log.read(0, 1) == made[0]  # at least one batch, even above max_bytes
    assert log.read(5, 1 << 20) == b"".join(made[2:])  # batch containing offset 5
    assert log.read(20) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21)
    assert log.flush() == 20
    log.close()
    again = SegmentedLog.open(tmp_path)
    assert again.log_end_offset == 20
    assert again.read(0, 1 << 20) == b"".join(made)
    assert again.recovery.truncated_bytes == 0
    assert again.durable_end_offset == 20
    again.close()


def test_append_rejects_gaps_lower_epochs_and_bad_crc(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path)
    fill(log, batches, 1, epoch=3)
    with pytest.raises(InvalidAppendError, match="does not continue the log at 2"):
        log.append(batches(5, 1)[0])
    with pytest.raises(InvalidAppendError, match="epoch 2 below the log's last epoch 3"):
        log.append(batches(2, 1, epoch=2)[0])
    bad = bytearray(batches(2, 1, epoch=3)[0])
    bad[-1] ^= 1
    with pytest.raises(InvalidAppendError, match="CRC"):
        log.append(bytes(bad))
    with pytest.raises(InvalidAppendError):
        log.append(b"\x00" * 30)
    assert log.log_end_offset == 2
    # Several batches in one append call are fine.
    two = batches(2, 2, epoch=4)
    assert log.append(b"".join(two)) == 6
    log.close()


def test_roll_at_segment_bytes_and_segment_names(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, segment_bytes=2000)
    made = fill(log, batches, 30)
    names = sorted(p.name for p in tmp_path.glob("*.log"))
    assert names[0] == "00000000000000000000.log" and len(names) > 3
    for seg in log.segments[:-1]:
        assert seg.size <= 2000
        assert (tmp_path / f"{seg.base_offset:020d}.log").stat().st_size == seg.size
    assert b"".join(log.read(s.base_offset, 1 << 20) for s in log.segments) == b"".join(made)
    assert [b.base_offset for b in log.batches()] == list(range(0, 60, 2))
    log.close()


def test_sparse_index_matches_a_rebuild(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, index_interval_bytes=500)
    made = fill(log, batches, 40)
    log.close()
    rebuilt = rebuilt_index((tmp_path / "00000000000000000000.log").read_bytes(), 0, 500)
    assert (tmp_path / "00000000000000000000.index").read_bytes() == rebuilt.offset_index_bytes()
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == rebuilt.time_index_bytes()
    assert len(rebuilt) > 5
    # Every offset is found through the index.
    log = SegmentedLog.open(tmp_path, index_interval_bytes=500)
    for off in range(0, 80):
        got = RecordBatch.parse(log.read(off, 1))
        assert got.base_offset <= off <= got.last_offset
    assert log.read(0, 1 << 20) == b"".join(made)
    log.close()


def test_missing_or_damaged_index_and_epoch_checkpoint_are_rebuilt(
    tmp_path: Path, batches: Batches
) -> None:
    log = SegmentedLog.open(tmp_path, segment_bytes=3000, index_interval_bytes=300)
    fill(log, batches, 10, epoch=1)
    fill(log, batches, 10, epoch=4)
    log.close()
    good_index = (tmp_path / "00000000000000000000.index").read_bytes()
    (tmp_path / "00000000000000000000.index").unlink()
    (tmp_path / "00000000000000000000.timeindex").write_bytes(b"junk")
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n7 99\n")
    log = SegmentedLog.open(tmp_path, segment_bytes=3000, index_interval_bytes=300)
    assert log.recovery.epoch_cache_rebuilt
    assert tmp_path / "00000000000000000000.index" in log.recovery.indexes_rebuilt
    assert (tmp_path / "00000000000000000000.index").read_bytes() == good_index
    assert log.epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(4, 20))
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n4 20\n"
    log.close()


def test_truncate_to_across_segments(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, segment_bytes=1500)
    fill(log, batches, 10, epoch=1)
    fill(log, batches, 10, epoch=2)
    log.flush()
    assert log.epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(2, 20))
    # Offset 13 lies inside the batch [12, 13]: the whole batch goes.
    assert log.truncate_to(13) == 12
    assert log.log_end_offset == 12 and log.durable_end_offset == 12
    assert log.epoch_cache.entries == (EpochEntry(1, 0),)
    assert all(s.base_offset < 12 for s in log.segments)
    assert not any(int(p.stem) >= 12 for p in tmp_path.glob("*.log") if p.stat().st_size == 0
                   and int(p.stem) != log.segments[-1].base_offset)
    more = batches(12, 3, epoch=5)
    for b in more:
        log.append(b)
    assert log.flush() == 18
    log.close()
    log = SegmentedLog.open(tmp_path, segment_bytes=1500)
    assert log.log_end_offset == 18
    assert log.epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(5, 12))
    assert log.read(12, 1 << 20) == b"".join(more)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(-1)
    log.close()


def test_advance_log_start_deletes_old_segments(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, segment_bytes=1500)
    fill(log, batches, 30)
    before = len(log.segments)
    second_base = log.segments[1].base_offset
    deleted = log.advance_log_start_offset(second_base + 1)
    assert deleted == 1 and len(log.segments) == before - 1
    assert not (tmp_path / "00000000000000000000.log").exists()
    assert not (tmp_path / "00000000000000000000.index").exists()
    assert log.log_start_offset == second_base + 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(second_base)
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(log.log_end_offset + 1)
    assert log.advance_log_start_offset(log.log_end_offset) == before - 2  # active kept
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert [p.name for p in tmp_path.glob("*.log")] == ["00000000000000000500.log"]
    log.append(batches(500, 1, epoch=9)[0])
    log.close()
    log = SegmentedLog.open(tmp_path)
    assert (log.log_start_offset, log.log_end_offset) == (500, 502)
    log.close()


def test_flush_from_another_thread_while_appending(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, segment_bytes=4000)
    stop = threading.Event()
    reported: list[int] = []
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                reported.append(log.flush())
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    ends = [log.append(b) for b in batches(0, 300)]
    stop.set()
    t.join()
    assert not errors
    final = log.flush()
    assert final == ends[-1] == log.log_end_offset
    assert reported == sorted(reported)  # durable offsets never go backwards
    assert all(r in ends or r == 0 for r in reported)  # always a batch boundary
    log.close()


def test_failed_fsync_poisons_the_log(tmp_path: Path, batches: Batches, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SegmentedLog.open(tmp_path)
    log.append(batches(0, 1)[0])

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    monkeypatch.setattr(durability, "_fdatasync", broken)
    with pytest.raises(StorageError, match="fsync failed"):
        log.flush()
    monkeypatch.undo()
    with pytest.raises(StorageError, match="failed earlier"):
        log.append(batches(2, 1)[0])
    assert log.durable_end_offset == 0


def test_control_batches_and_epochs(tmp_path: Path) -> None:
    log = SegmentedLog.open(tmp_path)
    log.append(build_batch(0, 1, [b"a"], 5, control=True))
    log.append(build_batch(1, 1, [b"b", b"c"], 6))
    log.append(build_batch(3, 2, [b"d"], 7, control=True))
    assert [b.is_control for b in log.batches()] == [True, False, True]
    assert log.last_epoch == 2
    log.close()


def test_reads_of_the_latest_appends_come_from_memory_and_equal_the_file(
        tmp_path: Path, batches: Batches, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SegmentedLog.open(tmp_path, segment_bytes=1 << 20)
    fill(log, batches, RECENT_APPENDS)  # offsets 0..15, one append each
    last = batches(log.log_end_offset, 3, records=3)
    log.append(b"".join(last))  # one append of three batches (offsets 16..24)
    preads: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, pos: int) -> bytes:
        preads.append(pos)
        return real_pread(fd, n, pos)

    monkeypatch.setattr(os, "pread", counting_pread)
    # every offset of the latest RECENT_APPENDS appends and every cut, from memory (reads
    # that span several appends included) ...
    from_memory = {(o, m): log.read(o, m)
                   for o in range(2, 25) for m in (1, 150, 300, 700, 1 << 20)}
    assert preads == []
    assert from_memory[(16, 1 << 20)] == b"".join(last)
    assert from_memory[(19, 1)] == last[1]  # a whole batch even above max_bytes
    assert [bytes(b.raw) for b in log.batches(16)] == last
    assert preads == []
    # ... is what the file holds
    log._recent.clear()
    for (o, m), got in from_memory.items():
        assert log.read(o, m) == got, (o, m)
    assert preads
    # the oldest append fell out: it comes from the file
    preads.clear()
    fill(log, batches, 1)
    assert log.read(0, 1) == real_pread(log.segments[0].fd, len(log.read(0, 1)), 0)
    assert preads
    log.close()


def test_a_read_after_truncation_and_a_different_append_sees_the_new_bytes(
        tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, segment_bytes=2000)
    made = fill(log, batches, 4)
    assert log.read(6) == made[3]
    log.truncate_to(6)
    other = batches(6, 1, epoch=2, records=1, size=7)[0]  # same offset, other bytes
    log.append(other)
    assert log.read(6) == other
    log.truncate_to(6)
    assert log.read(6) == b""
    # a roll: the next append starts a new segment at the same file position 0
    while len(log.segments) < 2:
        fill(log, batches, 1)
    for seg in log.segments:  # both start at file position 0, only one is the last append's
        assert log.read(seg.base_offset, 1 << 20) == os.pread(seg.fd, seg.size, 0)
    log.close()


def test_each_flush_that_writes_reports_its_time(tmp_path: Path, batches: Batches) -> None:
    """`on_flush_time` hears of every flush that wrote to disk (appends, a new segment's
    directory entry, a changed leader-epoch checkpoint), with its duration, and of no flush
    that had nothing to write."""
    times: list[float] = []
    log = SegmentedLog.open(tmp_path, segment_bytes=1000)
    log.on_flush_time = times.append
    try:
        assert log.flush() == 0
        assert times == []  # nothing appended: nothing written
        log.append(batches(0, 1)[0])
        log.flush()
        assert len(times) == 1 and times[0] > 0
        assert log.flush() == 2 and len(times) == 1  # nothing new
        for b in batches(2, 6):  # rolls into a second segment: a directory entry to sync
            log.append(b)
        assert len(log.segments) > 1
        log.flush()
        assert len(times) == 2
        log.on_flush_time = None  # no listener: flushes go on as before
        log.append(batches(log.log_end_offset, 1)[0])
        assert log.flush() == log.log_end_offset and len(times) == 2
    finally:
        log.close()
