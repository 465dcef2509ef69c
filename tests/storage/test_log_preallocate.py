"""SegmentedLog with preallocation: write-through appends (`O_DIRECT | O_DSYNC` into zero-filled
space ahead of the end), the zeros after the last batch, and what roll, truncation, close and
recovery do with them."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.records.batch import build_batch
from kraft.storage.log import DIRECT_BLOCK, DIRECT_MAX_BYTES, SegmentedLog
from tests.support.direct_io import o_direct_supported

Batches = Callable[..., list[bytes]]
PREALLOCATE = 64 * 1024


@pytest.fixture
def direct_dir(tmp_path: Path) -> Path:
    if not o_direct_supported(tmp_path):
        pytest.skip("the test directory's filesystem refuses O_DIRECT")
    return tmp_path


def whole_log(log: SegmentedLog) -> bytes:
    """Every batch of the log, in order, as stored."""
    return b"".join(bytes(b.raw) for b in log.batches())


def opened(directory: Path, **kwargs: int) -> SegmentedLog:
    """A log with no recovery-checkpoint timer: a test drops it without closing, as a crash
    would, and no timer of the dropped one may write a checkpoint behind the next open."""
    return SegmentedLog.open(directory, recovery_checkpoint_interval_s=None, **kwargs)


def written_through(directory: Path, made: list[bytes]) -> SegmentedLog:
    """A preallocating log holding `made`, every batch written through."""
    log = opened(directory, preallocate_bytes=PREALLOCATE)
    for b in made:
        log.append(b, write_through=True)
    return log


def reopened(directory: Path, caplog: pytest.LogCaptureFixture) -> SegmentedLog:
    """The log opened again (as after a crash when the last one was not closed), its
    recovery's log lines captured."""
    with caplog.at_level(logging.INFO, logger="kraft.storage.log"):
        return opened(directory)


def file_bytes(log: SegmentedLog, index: int = -1) -> bytes:
    return log.segments[index].path.read_bytes()


def assert_file_is(log: SegmentedLog, expected: bytes, *, preallocated: bool) -> None:
    """The active segment's file holds `expected`, then only zeros."""
    data = file_bytes(log)
    assert data[:len(expected)] == expected
    tail = data[len(expected):]
    assert tail.count(0) == len(tail), "a byte after the last batch is not zero"
    if preallocated:  # whole blocks, zero-filled ahead
        assert len(data) % DIRECT_BLOCK == 0 and len(data) >= len(expected)
    else:
        assert tail == b""


def test_write_through_appends_read_back_and_leave_only_zeros_after_the_end(
    direct_dir: Path,
) -> None:
    log = opened(direct_dir, preallocate_bytes=PREALLOCATE)
    written = build_batch(0, 1, (b"first",), 5)
    log.append(written, write_through=True)
    log.flush()  # the first epoch's checkpoint and the new segment's directory entry
    timed: list[float] = []
    log.on_flush_time = timed.append
    # sizes that end inside a block, exactly on one, and span several
    for size in (10, 100, 4000, 3, DIRECT_BLOCK * 2, 7000, 1, 50_000, 20):
        offset = log.log_end_offset
        batch = build_batch(offset, 1, (bytes([offset % 251]) * size,), 5)
        log.append(batch, write_through=True)
        written += batch
        assert_file_is(log, written, preallocated=True)
        assert log.read(offset, 1) == batch
    assert len(timed) == 9 and all(t > 0 for t in timed)  # each one timed as a flush
    # durable already: the flush has nothing left to sync and times nothing
    assert log.flush() == log.log_end_offset
    assert len(timed) == 9
    assert whole_log(log) == written
    log.close()
    assert file_bytes(log) == written  # a clean close leaves no zeros
    again = opened(direct_dir, full_scan=True)
    assert whole_log(again) == written
    assert again.recovery.truncated_bytes == 0
    again.close()


def test_a_crash_leaves_zeros_that_open_trims_as_preallocated_space(
    direct_dir: Path, batches: Batches, caplog: pytest.LogCaptureFixture,
) -> None:
    made = batches(0, 30)
    log = written_through(direct_dir, made)
    log.flush()
    end = log.log_end_offset
    size_with_zeros = len(file_bytes(log))
    assert size_with_zeros > len(b"".join(made))
    again = reopened(direct_dir, caplog)  # no close: the process died here
    assert again.log_end_offset == end
    assert whole_log(again) == b"".join(made)
    assert file_bytes(again) == b"".join(made)
    assert again.recovery.truncated_bytes == size_with_zeros - len(b"".join(made))
    assert "event=preallocated_tail_trimmed" in caplog.text
    assert "event=torn_tail_truncated" not in caplog.text
    again.close()


def test_a_torn_batch_before_the_zeros_is_still_reported_as_torn(
    direct_dir: Path, batches: Batches, caplog: pytest.LogCaptureFixture,
) -> None:
    made = batches(0, 5)
    path = written_through(direct_dir, made).segments[-1].path
    with open(path, "r+b") as f:  # half of a next batch, as a crash in its write leaves it
        f.seek(len(b"".join(made)))
        f.write(batches(10, 1)[0][:40])
    again = reopened(direct_dir, caplog)
    assert again.log_end_offset == 10
    assert "event=torn_tail_truncated" in caplog.text
    assert "event=preallocated_tail_trimmed" not in caplog.text
    again.close()


def test_a_roll_cuts_the_old_segment_back_to_its_batches(direct_dir: Path) -> None:
    log = opened(direct_dir, segment_bytes=3 * DIRECT_BLOCK,
                            preallocate_bytes=PREALLOCATE)
    expected: list[bytes] = []
    for i in range(40):
        b = build_batch(log.log_end_offset, 1, (bytes([i]) * (300 + 37 * i),), 5)
        log.append(b, write_through=True)
        expected.append(b)
    assert len(log.segments) > 3
    for seg in log.segments[:-1]:
        assert seg.path.stat().st_size == seg.size  # no zeros left in a rolled segment
    assert os.path.getsize(log.segments[-1].path) > log.segments[-1].size
    log.close()
    again = opened(direct_dir, full_scan=True)
    assert whole_log(again) == b"".join(expected)
    assert again.recovery.truncated_bytes == 0
    again.close()


def test_truncation_then_new_appends_never_bring_back_a_removed_batch(
    direct_dir: Path, batches: Batches,
) -> None:
    old = batches(0, 20, epoch=1)
    log = written_through(direct_dir, old)
    assert log.truncate_to(10) == 10
    new = batches(10, 3, epoch=2, size=7)  # shorter than what was cut
    for b in new:
        log.append(b, write_through=True)
    expected = b"".join(old[:5] + new)
    assert_file_is(log, expected, preallocated=True)
    # a crash now: recovery must find the new end, not an old batch behind zeros
    again = opened(direct_dir)
    assert again.log_end_offset == 16
    assert whole_log(again) == expected
    assert again.last_epoch == 2
    again.close()


def test_appends_through_the_page_cache_and_written_through_mix(
    direct_dir: Path, batches: Batches,
) -> None:
    """A node that leads (page cache, then its flush) and follows (write-through) in turn."""
    log = opened(direct_dir, preallocate_bytes=PREALLOCATE)
    timed: list[float] = []
    log.on_flush_time = timed.append
    made = batches(0, 24, size=900)
    for i, b in enumerate(made):
        log.append(b, write_through=(i // 3) % 2 == 1)
        if i % 5 == 4:
            log.flush()
        assert_file_is(log, b"".join(made[:i + 1]), preallocated=i >= 3)
    log.flush()
    assert len(timed) == 12 + 5  # 12 written through, 5 flushes that synced page-cache appends
    assert whole_log(log) == b"".join(made)
    log.close()


def test_a_write_through_append_above_the_direct_limit_goes_through_the_page_cache(
    direct_dir: Path,
) -> None:
    log = opened(direct_dir, preallocate_bytes=PREALLOCATE)
    timed: list[float] = []
    log.on_flush_time = timed.append
    small = build_batch(0, 1, (b"a" * 100,), 5)
    big = build_batch(1, 1, (b"b" * (DIRECT_MAX_BYTES + 10),), 5)
    tail = build_batch(2, 1, (b"c" * 100,), 5)
    for b in (small, big, tail):
        log.append(b, write_through=True)
    assert len(timed) == 2  # the big one waits for the flush
    log.flush()
    assert len(timed) == 3
    assert_file_is(log, small + big + tail, preallocated=True)
    log.close()


def test_where_o_direct_is_refused_appends_fall_back_to_the_flush(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A filesystem that refuses O_DIRECT (EINVAL at open, as tmpfs before Linux 6.6 and
    several network filesystems do; this machine's all take it, so the refusal is injected)."""
    real_open = os.open

    def refusing_open(path: object, flags: int, *args: int) -> int:
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr("kraft.storage.log.os.open", refusing_open)
    with caplog.at_level(logging.WARNING, logger="kraft.storage.log"):
        log = opened(tmp_path, preallocate_bytes=PREALLOCATE)
        log.append(batches(0, 1)[0])
        log.flush()
        timed: list[float] = []
        log.on_flush_time = timed.append
        made = batches(2, 4)
        for b in made:
            log.append(b, write_through=True)
    assert caplog.text.count("event=write_through_unavailable") == 1
    assert timed == []
    assert log.flush() == 10 and len(timed) == 1  # the flush synced them
    monkeypatch.undo()
    assert log.segments[-1].path.stat().st_size == log.segments[-1].size  # nothing preallocated
    log.close()


def test_a_write_through_the_device_refuses_falls_back_without_losing_the_append(
    direct_dir: Path, batches: Batches, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EINVAL from the O_DIRECT write itself (a device whose block size the 4 KiB writes do not
    fit: injected, this machine has none): that append and the later ones go through the page
    cache and the flush; the log does not fail."""
    made = batches(0, 6)
    log = written_through(direct_dir, made[:2])
    assert log._direct is not None
    direct_fd = log._direct.fd
    real_pwrite = os.pwrite

    def refusing_pwrite(fd: int, data: object, pos: int) -> int:
        if fd == direct_fd:
            raise OSError(22, "Invalid argument")
        return real_pwrite(fd, data, pos)  # type: ignore[arg-type]

    monkeypatch.setattr("kraft.storage.log.os.pwrite", refusing_pwrite)
    timed: list[float] = []
    log.on_flush_time = timed.append
    with caplog.at_level(logging.WARNING, logger="kraft.storage.log"):
        for b in made[2:]:
            log.append(b, write_through=True)
    monkeypatch.undo()
    assert caplog.text.count("event=write_through_unavailable") == 1
    assert log._direct is None and timed == []
    assert log.flush() == 12 and len(timed) == 1
    assert_file_is(log, b"".join(made), preallocated=True)
    log.close()
    again = opened(direct_dir)
    assert whole_log(again) == b"".join(made)
    again.close()


def test_without_preallocation_write_through_is_an_ordinary_append(
    direct_dir: Path, batches: Batches,
) -> None:
    log = opened(direct_dir)
    made = batches(0, 6)
    for b in made:
        log.append(b, write_through=True)
    assert_file_is(log, b"".join(made), preallocated=False)
    assert log._direct is None
    log.close()


@pytest.mark.parametrize("seed", range(6))
def test_random_appends_truncations_and_crashes_against_a_model(direct_dir: Path,
                                                                seed: int) -> None:
    """Every step: the file is the model's bytes then zeros; every reopen (after a close or
    a crash) reads the model back."""
    rng = random.Random(seed)
    log = opened(direct_dir, segment_bytes=64 * 1024, preallocate_bytes=16 * 1024)
    model: list[tuple[int, bytes]] = []  # (base offset, batch) in order
    epoch = 1
    for _step in range(150):
        op = rng.random()
        if op < 0.75:
            n = rng.choice((1, 2, 5))
            size = rng.choice((1, 13, 200, 1500, 4096, 9000))
            values = tuple(rng.randbytes(size) for _ in range(n))
            b = build_batch(log.log_end_offset, epoch, values, 7)
            log.append(b, write_through=rng.random() < 0.8)
            model.append((log.log_end_offset - n, b))
        elif op < 0.85 and model:
            cut = rng.randrange(len(model))
            log.truncate_to(model[cut][0])
            del model[cut:]
            epoch += 1
        elif op < 0.92:
            log.flush()
        else:
            log.flush()
            if rng.random() < 0.5:
                log.close()
            log = opened(direct_dir, segment_bytes=64 * 1024,
                                    preallocate_bytes=16 * 1024)
        expected = b"".join(b for _, b in model)
        active = log.segments[-1]
        data = active.path.read_bytes()
        start = sum(s.size for s in log.segments[:-1])
        assert data[:active.size] == expected[start:]
        assert data[active.size:].count(0) == len(data) - active.size
        for seg in log.segments[:-1]:
            assert seg.path.stat().st_size == seg.size
    log.flush()
    again = opened(direct_dir, full_scan=True)
    assert whole_log(again) == b"".join(b for _, b in model)
    again.close()
