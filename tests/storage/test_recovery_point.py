"""The recovery point: what a reopen trusts, what it still validates, and every fallback.

Trusted after a clean close or a crash: every segment before the checkpoint's segment and the
bytes of that segment below the checkpoint's position (index files loaded, not rebuilt).
Validated: from the last indexed batch of each trusted part to its end, and everything after
the recovery point. Anything odd about the checkpoint means a full scan, logged.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.storage.epoch_cache import EpochEntry
from kraft.storage.errors import CorruptLogError
from kraft.storage.log import SegmentedLog
from kraft.storage.recovery_point import (
    RecoveryCheckpoint,
    RecoveryCheckpointError,
    decode_recovery_checkpoint,
    read_recovery_checkpoint,
    recovery_checkpoint_path,
    write_recovery_checkpoint,
)

Batches = Callable[..., list[bytes]]

SEG = 1500  # a few ~250-byte batches per segment: many segments
INTERVAL = 256  # index entries every few batches, so trusted segments have some


def build(path: Path, batches: Batches, count: int = 60, *, epochs: int = 1,
          segment_bytes: int = SEG) -> SegmentedLog:
    log = SegmentedLog.open(path, segment_bytes=segment_bytes, index_interval_bytes=INTERVAL,
                            recovery_checkpoint_interval_s=None)
    per = max(count // epochs, 1)
    for e in range(epochs):
        for b in batches(log.log_end_offset, per, epoch=e + 1):
            log.append(b)
    return log


def reopen(path: Path, **kw: object) -> SegmentedLog:
    return SegmentedLog.open(path, segment_bytes=SEG, index_interval_bytes=INTERVAL,
                             recovery_checkpoint_interval_s=None, **kw)  # type: ignore[arg-type]


def crash(log: SegmentedLog) -> None:
    """What kill -9 leaves: the files as written, no close, no checkpoint."""
    for seg in log.segments:
        seg.close()


def state(log: SegmentedLog) -> tuple[object, ...]:
    """Everything a reopen derives: bounds, epochs, per-segment sizes and index files."""
    segs = tuple(
        (s.base_offset, s.size, s.next_offset, s.index_path.read_bytes(),
         s.time_index_path.read_bytes())
        for s in log.segments
    )
    return (log.log_start_offset, log.log_end_offset, log.epoch_cache.entries, segs)


def same_as_full_scan(path: Path, tmp_path: Path, log: SegmentedLog) -> None:
    """The trusted open derived exactly what a full scan of a copy derives."""
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    full = SegmentedLog.open(copy, segment_bytes=SEG, index_interval_bytes=INTERVAL,
                             recovery_checkpoint_interval_s=None, full_scan=True)
    try:
        a, b = state(log), state(full)
        # a full scan does not know a persisted log start: compare the rest
        assert a[1:] == b[1:] or (a[1], a[3]) == (b[1], b[3])
        assert full.recovery.segments_scanned == len(full.segments)
    finally:
        full.close()


# ------------------------------------------------------------------ clean and unclean


def test_clean_restart_trusts_every_segment(tmp_path: Path, batches: Batches,
                                            caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "log"
    log = build(d, batches, epochs=3)
    end = log.log_end_offset
    log.close()
    cp = read_recovery_checkpoint(d)
    assert cp is not None and cp.clean_shutdown and cp.recovery_point == end
    caplog.set_level(logging.INFO, logger="kraft.storage.log")
    log = reopen(d)
    rep = log.recovery
    assert len(log.segments) > 10
    assert rep.recovery_point == end and rep.clean_shutdown
    assert rep.full_scan_reason is None
    assert rep.segments_scanned == 0  # no segment was read from its start
    # only the last indexed batch (and what follows it) of each segment was read
    assert rep.bytes_scanned == sum(s.size - s.index.resume_position() for s in log.segments)
    assert all(s.index.resume_position() > 0 for s in log.segments)
    assert rep.bytes_scanned + rep.bytes_trusted == log.size_in_bytes()
    assert not rep.indexes_rebuilt and not rep.epoch_cache_rebuilt
    assert "event=recovery_full_scan" not in caplog.text
    assert f"recovery_point={end} clean_shutdown=True segments_scanned=0" in caplog.text
    # the clean-shutdown mark is consumed by the open
    cp = read_recovery_checkpoint(d)
    assert cp is not None and not cp.clean_shutdown
    same_as_full_scan(d, tmp_path, log)
    log.close()


def test_unclean_restart_validates_from_the_recovery_point(tmp_path: Path,
                                                           batches: Batches) -> None:
    d = tmp_path / "log"
    log = build(d, batches, count=40)
    log.flush()
    log.checkpoint_recovery_point()
    rp = log.log_end_offset
    rp_segments = len(log.segments)
    for b in batches(log.log_end_offset, 30, epoch=2):
        log.append(b)
    log.flush()  # durable, but no checkpoint after it
    end = log.log_end_offset
    crash(log)
    log = reopen(d)
    rep = log.recovery
    assert rep.recovery_point == rp and not rep.clean_shutdown
    assert log.log_end_offset == end
    # segments after the recovery point's segment were read whole, none before it
    assert rep.segments_scanned == len(log.segments) - rp_segments
    assert rep.bytes_trusted > 0
    assert log.epoch_cache.entries[-1].epoch == 2
    same_as_full_scan(d, tmp_path, log)
    log.close()


def test_unclean_restart_truncates_a_torn_tail_after_the_recovery_point(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "log"
    log = build(d, batches, count=20, segment_bytes=1 << 20)
    log.flush()
    log.checkpoint_recovery_point()
    rp = log.log_end_offset
    made = batches(rp, 5)
    for b in made:
        log.append(b)
    seg = log.segments[-1].path
    crash(log)
    with seg.open("r+b") as fh:
        fh.truncate(seg.stat().st_size - 7)  # the last batch is torn
    caplog.set_level(logging.WARNING, logger="kraft.storage.log")
    log = SegmentedLog.open(d, recovery_checkpoint_interval_s=None)
    assert log.recovery.recovery_point == rp
    assert log.log_end_offset == rp + 8
    assert log.recovery.truncated_bytes == len(made[-1]) - 7
    assert "event=torn_tail_truncated" in caplog.text
    log.close()


def test_periodic_checkpoint_follows_flushes(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, recovery_checkpoint_interval_s=0.0)
    for b in batches(0, 10):
        log.append(b)
    durable = log.flush()
    deadline = 200
    cp = read_recovery_checkpoint(tmp_path)
    while (cp is None or cp.recovery_point != durable) and deadline:
        import time

        time.sleep(0.01)
        deadline -= 1
        cp = read_recovery_checkpoint(tmp_path)
    assert cp is not None and cp.recovery_point == durable and not cp.clean_shutdown
    assert cp.position == log.segments[-1].size
    log.close()


def test_periodic_checkpoints_are_written_by_one_thread_that_ends_at_close(
        tmp_path: Path, batches: Batches, monkeypatch: pytest.MonkeyPatch) -> None:
    """One checkpoint thread per log serves every request (a thread started per checkpoint
    put its start in the path of an append); the checkpoints keep following the flushes, at
    most one per interval, and the thread is gone once the log is closed."""
    import threading
    import time

    writers: list[threading.Thread] = []  # (the objects: a thread's ident can be reused)
    write = SegmentedLog._write_checkpoint_locked

    def recording(self: SegmentedLog, *, clean: bool) -> None:
        # only this test's log: a log another test left open in this process has a
        # checkpoint thread of its own, which would be recorded too
        if Path(self.directory) == tmp_path:
            writers.append(threading.current_thread())
        write(self, clean=clean)

    monkeypatch.setattr(SegmentedLog, "_write_checkpoint_locked", recording)
    log = SegmentedLog.open(tmp_path, recovery_checkpoint_interval_s=0.02)
    assert writers.pop() is threading.current_thread()  # the checkpoint written by open
    offset = 0
    for _ in range(4):  # four rounds, each waits for the checkpoint of its flush
        for b in batches(offset, 3):
            log.append(b)
        offset += 6
        durable = log.flush()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            cp = read_recovery_checkpoint(tmp_path)
            if cp is not None and cp.recovery_point == durable:
                break
            time.sleep(0.005)
        assert cp is not None and cp.recovery_point == durable
    assert len(writers) >= 4 and all(t is writers[0] for t in writers)
    checkpointer = writers[0]
    assert checkpointer.is_alive() and checkpointer.daemon
    log.close()
    assert not checkpointer.is_alive()
    assert writers[-1] is threading.current_thread()  # the clean mark, written by close


# ------------------------------------------------------------------ what is (not) checked


def middle_of_trusted_segment(log: SegmentedLog) -> tuple[Path, int]:
    """A batch position in the first segment below its last index entry."""
    seg = log.segments[0]
    assert len(seg.index) >= 1
    return seg.path, 0  # the first batch: never the last indexed one


def test_bit_flip_below_the_recovery_point_is_not_read_after_a_clean_close(
    tmp_path: Path, batches: Batches
) -> None:
    """Like Kafka: no CRC check of trusted batches on open. A full scan still finds it."""
    d = tmp_path / "log"
    log = build(d, batches)
    path, position = middle_of_trusted_segment(log)
    log.close()
    data = bytearray(path.read_bytes())
    data[position + 70] ^= 0x01
    path.write_bytes(bytes(data))
    log = reopen(d)
    assert log.recovery.recovery_point is not None
    assert log.recovery.segments_scanned == 0
    log.close()
    with pytest.raises(CorruptLogError) as info:
        reopen(d, full_scan=True)
    assert info.value.path == path and info.value.position == position


def test_bit_flip_in_the_last_indexed_batch_of_a_trusted_segment_refuses(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "log"
    log = build(d, batches)
    seg = log.segments[0]
    position = seg.index.resume_position()
    assert position > 0
    path = seg.path
    log.close()
    data = bytearray(path.read_bytes())
    data[position + 70] ^= 0x01
    path.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, logger="kraft.storage.log")
    with pytest.raises(CorruptLogError, match="CRC") as info:
        reopen(d)
    assert info.value.path == path and info.value.position == position
    assert "event=recovery_full_scan" in caplog.text and "below the recovery point" in caplog.text


def test_shortened_trusted_segment_refuses(tmp_path: Path, batches: Batches) -> None:
    d = tmp_path / "log"
    log = build(d, batches)
    path = log.segments[1].path
    log.close()
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size - 10)
    with pytest.raises(CorruptLogError, match="not the tail of the log"):
        reopen(d)


def test_missing_trusted_segment_refuses(tmp_path: Path, batches: Batches) -> None:
    d = tmp_path / "log"
    log = build(d, batches)
    path = log.segments[2].path
    log.close()
    path.unlink()
    with pytest.raises(CorruptLogError, match="does not continue the previous segment"):
        reopen(d)


@pytest.mark.parametrize("damage", ["missing", "zero_filled", "odd_size"])
def test_unusable_index_of_a_trusted_segment_is_rebuilt(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    d = tmp_path / "log"
    log = build(d, batches)
    seg = log.segments[1]
    good = seg.index_path.read_bytes()
    assert good
    log.close()
    if damage == "missing":
        seg.index_path.unlink()
    elif damage == "zero_filled":
        seg.index_path.write_bytes(good + b"\0" * 8)
    else:
        seg.index_path.write_bytes(good[:-3])
    caplog.set_level(logging.INFO, logger="kraft.storage.log")
    log = reopen(d)
    assert log.recovery.recovery_point is not None
    assert log.recovery.segments_scanned == 1  # that segment, validated whole
    assert seg.index_path.read_bytes() == good
    assert "event=index_rebuilt" in caplog.text
    if damage != "missing":
        assert "event=index_unusable" in caplog.text
    log.close()


# ------------------------------------------------------------------ fallbacks


def test_corrupt_checkpoint_falls_back_to_the_full_scan(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "log"
    build(d, batches).close()
    path = recovery_checkpoint_path(d)
    data = bytearray(path.read_bytes())
    data[data.index(b"recovery_point ") + 15] ^= 0x01  # a digit changes: the CRC catches it
    path.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, logger="kraft.storage.log")
    log = reopen(d)
    rep = log.recovery
    assert rep.recovery_point is None
    assert rep.full_scan_reason is not None and "CRC mismatch" in rep.full_scan_reason
    assert rep.segments_scanned == len(log.segments)
    assert rep.bytes_trusted == 0
    assert "event=recovery_full_scan" in caplog.text and "CRC mismatch" in caplog.text
    log.close()


def test_missing_checkpoint_falls_back_to_the_full_scan(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "log"
    build(d, batches).close()
    recovery_checkpoint_path(d).unlink()
    caplog.set_level(logging.INFO, logger="kraft.storage.log")
    log = reopen(d)
    assert log.recovery.full_scan_reason == "no recovery checkpoint"
    assert log.recovery.segments_scanned == len(log.segments)
    assert "event=recovery_full_scan" in caplog.text
    log.close()


@pytest.mark.parametrize("how", ["position_off_a_boundary", "offset_mismatch",
                                 "beyond_the_file", "segment_gone"])
def test_stale_checkpoint_falls_back_to_the_full_scan(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    d = tmp_path / "log"
    build(d, batches).close()
    cp = read_recovery_checkpoint(d)
    assert cp is not None
    if how == "position_off_a_boundary":
        bad = RecoveryCheckpoint(cp.log_start_offset, cp.recovery_point, cp.segment,
                                 cp.position - 1)
    elif how == "offset_mismatch":
        bad = RecoveryCheckpoint(cp.log_start_offset, cp.recovery_point + 1, cp.segment,
                                 cp.position)
    elif how == "beyond_the_file":
        bad = RecoveryCheckpoint(cp.log_start_offset, cp.recovery_point + 2, cp.segment,
                                 cp.position + 500)
    else:
        bad = RecoveryCheckpoint(0, 999, 998, 10)
    write_recovery_checkpoint(d, bad)
    caplog.set_level(logging.WARNING, logger="kraft.storage.log")
    log = reopen(d)
    assert log.recovery.recovery_point is None
    assert log.recovery.full_scan_reason is not None
    assert log.recovery.segments_scanned == len(log.segments)
    assert "event=recovery_full_scan" in caplog.text
    log.close()


def test_epoch_checkpoint_disagreeing_with_the_batches_falls_back(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "log"
    log = build(d, batches, epochs=3)
    entries = log.epoch_cache.entries
    log.close()
    from kraft.storage.epoch_cache import EpochEntry, checkpoint_path, write_epoch_checkpoint

    # Below the recovery point the leader-epoch-checkpoint is trusted like the batches (as
    # Kafka trusts it); it is checked against the batches that are read: here the last one.
    last = entries[-1]
    write_epoch_checkpoint(checkpoint_path(d), [*entries[:-1],
                                                EpochEntry(last.epoch + 5, last.start_offset)])
    caplog.set_level(logging.WARNING, logger="kraft.storage.log")
    log = reopen(d)
    assert log.recovery.recovery_point is None
    reason = log.recovery.full_scan_reason or ""
    assert "below the recovery point" in reason and "epoch" in reason
    assert log.epoch_cache.entries == entries  # rebuilt from the batches
    log.close()


def test_full_scan_on_request(tmp_path: Path, batches: Batches) -> None:
    d = tmp_path / "log"
    build(d, batches).close()
    log = reopen(d, full_scan=True)
    assert log.recovery.full_scan_reason == "a full scan was requested"
    assert log.recovery.segments_scanned == len(log.segments)
    log.close()


# ------------------------------------------------------------------ truncation


def test_truncation_below_the_recovery_point_lowers_it(tmp_path: Path,
                                                       batches: Batches) -> None:
    d = tmp_path / "log"
    log = build(d, batches, count=60)
    log.flush()
    log.checkpoint_recovery_point()
    cp = read_recovery_checkpoint(d)
    assert cp is not None and cp.recovery_point == 120
    log.truncate_to(51)  # inside a batch: the new end is its base offset
    assert log.log_end_offset == 50
    cp = read_recovery_checkpoint(d)
    assert cp is not None and cp.recovery_point == 50 <= log.log_end_offset
    assert cp.segment == log.segments[-1].base_offset
    assert cp.position == log.segments[-1].size
    # a new leader's different data at the same offsets, never checkpointed, then kill -9
    for b in batches(50, 20, epoch=7, size=40):
        log.append(b)
    log.flush()
    end = log.log_end_offset
    crash(log)
    log = reopen(d)
    assert log.recovery.recovery_point == 50
    assert log.log_end_offset == end
    assert log.epoch_cache.entries[-1].epoch == 7
    assert log.epoch_cache.epoch_for_offset(50) == 7
    same_as_full_scan(d, tmp_path, log)
    log.close()


def test_truncation_above_the_recovery_point_keeps_it(tmp_path: Path,
                                                      batches: Batches) -> None:
    d = tmp_path / "log"
    log = build(d, batches, count=30)
    log.flush()
    log.checkpoint_recovery_point()
    before = read_recovery_checkpoint(d)
    for b in batches(log.log_end_offset, 10):
        log.append(b)
    log.truncate_to(70)
    assert read_recovery_checkpoint(d) == before
    log.close()


def test_truncate_fully_moves_the_recovery_point(tmp_path: Path, batches: Batches) -> None:
    d = tmp_path / "log"
    log = build(d, batches)
    log.truncate_fully_and_start_at(500)
    cp = read_recovery_checkpoint(d)
    assert cp == RecoveryCheckpoint(500, 500, 500, 0)
    for b in batches(500, 5, epoch=4):
        log.append(b)
    log.flush()
    crash(log)
    log = reopen(d)
    assert log.recovery.recovery_point == 500
    assert (log.log_start_offset, log.log_end_offset) == (500, 510)
    log.close()


def test_log_start_advance_is_kept_across_a_clean_restart(tmp_path: Path,
                                                          batches: Batches) -> None:
    d = tmp_path / "log"
    log = build(d, batches, epochs=3)
    start = log.segments[3].base_offset + 1  # inside a segment: it stays
    log.advance_log_start_offset(start)
    entries = log.epoch_cache.entries
    segments = len(log.segments)
    log.close()
    log = reopen(d)
    assert log.recovery.recovery_point is not None
    assert log.log_start_offset == start
    assert log.epoch_cache.entries == entries
    assert len(log.segments) == segments
    log.close()


def test_segments_left_below_the_log_start_by_a_crash_are_deleted(
    tmp_path: Path, batches: Batches
) -> None:
    d = tmp_path / "log"
    log = build(d, batches)
    start = log.segments[3].base_offset
    kept = [s.path for s in log.segments[:3]]
    # the checkpoint says the log start moved, the deletion did not happen yet
    log.close()
    cp = read_recovery_checkpoint(d)
    assert cp is not None
    write_recovery_checkpoint(d, RecoveryCheckpoint(start, cp.recovery_point, cp.segment,
                                                    cp.position, True))
    log = reopen(d)
    assert log.log_start_offset == start
    assert all(p.exists() for p in kept)
    assert log.advance_log_start_offset(start) == 3
    assert not any(p.exists() for p in kept)
    log.close()


# ------------------------------------------------------------------ the file itself


def test_checkpoint_file_round_trip_and_rejections() -> None:
    cp = RecoveryCheckpoint(10, 20, 15, 4096, True)
    assert decode_recovery_checkpoint(cp.encode()) == cp
    text = cp.encode()
    with pytest.raises(RecoveryCheckpointError, match="CRC"):
        decode_recovery_checkpoint(text.replace(b"4096", b"4097"))
    with pytest.raises(RecoveryCheckpointError):
        decode_recovery_checkpoint(text[:-10])
    with pytest.raises(RecoveryCheckpointError, match="impossible"):
        decode_recovery_checkpoint(RecoveryCheckpoint(0, 20, 20, 100).encode())
    with pytest.raises(RecoveryCheckpointError, match="impossible"):
        decode_recovery_checkpoint(RecoveryCheckpoint(0, 20, 15, 0).encode())


def test_epoch_starting_at_the_recovery_point_survives_a_crash(tmp_path: Path,
                                                               batches: Batches) -> None:
    """A snapshot moved the log start to the recovery point inside the active segment: the
    stored epoch file then holds one entry that starts exactly there. After more appends
    (same epoch) and a crash, the reopened log must still know that epoch. It once came back
    with an empty epoch cache: the loader took the log for older than its snapshot and
    deleted committed records (found by tests/node/test_nemesis.py)."""
    d = tmp_path / "log"
    log = build(d, batches, count=40, epochs=1)
    while len(log.segments[-1].index) < 2 or log.segments[-1].next_offset \
            == log.segments[-1].base_offset:
        for b in batches(log.log_end_offset, 1, epoch=1):
            log.append(b)
    log.flush()
    start = log.log_end_offset
    assert log.segments[-1].base_offset < start
    log.advance_log_start_offset(start)
    log.checkpoint_recovery_point()
    assert log.epoch_cache.entries == (EpochEntry(1, start),)
    for b in batches(log.log_end_offset, 6, epoch=1):
        log.append(b)
    log.flush()  # durable, not checkpointed
    end = log.log_end_offset
    crash(log)
    log = reopen(d)
    assert log.recovery.recovery_point == start
    assert (log.log_start_offset, log.log_end_offset) == (start, end)
    assert log.epoch_cache.entries == (EpochEntry(1, start),)
    assert log.last_epoch == 1
    log.close()
