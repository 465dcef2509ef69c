"""Crash recovery on open: torn tails are truncated, anything else refuses to start."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.storage.errors import CorruptLogError
from kraft.storage.log import SegmentedLog

Batches = Callable[..., list[bytes]]


def build_log(path: Path, batches: Batches, count: int = 20, segment_bytes: int = 1 << 30) -> list[bytes]:
    log = SegmentedLog.open(path, segment_bytes=segment_bytes)
    made = batches(0, count)
    for b in made:
        log.append(b)
    log.close()
    return made


def snapshot_dir(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def active(path: Path) -> Path:
    return sorted(path.glob("*.log"))[-1]


@pytest.mark.parametrize("cut", [1, 11, 30, 61, 100])
def test_partial_last_batch_is_truncated_and_logged(
    tmp_path: Path, batches: Batches, caplog: pytest.LogCaptureFixture, cut: int
) -> None:
    made = build_log(tmp_path, batches)
    seg = active(tmp_path)
    full = seg.stat().st_size
    with seg.open("r+b") as fh:
        fh.truncate(full - len(made[-1]) + cut)
    caplog.set_level(logging.WARNING, logger="kraft.storage.log")
    log = SegmentedLog.open(tmp_path)
    assert log.log_end_offset == 38
    assert log.recovery.truncated_bytes == cut
    assert log.recovery.truncated_at_position == full - len(made[-1])
    assert seg.stat().st_size == full - len(made[-1])
    msg = caplog.text
    assert "event=torn_tail_truncated" in msg and f"bytes_dropped={cut}" in msg
    assert "last_valid_offset=37 next_offset=38" in msg and seg.name in msg
    # The log is usable again at the truncated end.
    log.append(batches(38, 1)[0])
    log.close()


def test_crc_failure_in_last_batch_is_a_torn_tail(tmp_path: Path, batches: Batches) -> None:
    made = build_log(tmp_path, batches)
    seg = active(tmp_path)
    data = bytearray(seg.read_bytes())
    data[-5] ^= 0x40
    seg.write_bytes(bytes(data))
    log = SegmentedLog.open(tmp_path)
    assert log.log_end_offset == 38
    assert log.recovery.truncated_bytes == len(made[-1])
    log.close()


def test_zero_filled_tail_is_truncated(tmp_path: Path, batches: Batches) -> None:
    build_log(tmp_path, batches)
    seg = active(tmp_path)
    size = seg.stat().st_size
    with seg.open("ab") as fh:
        fh.write(b"\x00" * 5000)
    log = SegmentedLog.open(tmp_path)
    assert log.log_end_offset == 40
    assert seg.stat().st_size == size
    log.close()


def test_torn_tail_with_empty_rolled_segment_after_it(tmp_path: Path, batches: Batches) -> None:
    build_log(tmp_path, batches, count=20, segment_bytes=1000)
    segs = sorted(tmp_path.glob("*.log"))
    last = segs[-1]
    with last.open("r+b") as fh:
        fh.truncate(last.stat().st_size - 7)
    # Simulate a roll that created the next (empty) segment before the crash.
    ghost = tmp_path / f"{99999:020d}.log"
    ghost.write_bytes(b"")
    log = SegmentedLog.open(tmp_path, segment_bytes=1000)
    assert not ghost.exists()
    assert log.log_end_offset == 38
    log.close()


def test_bit_flip_in_closed_segment_refuses_with_file_and_position(
    tmp_path: Path, batches: Batches
) -> None:
    made = build_log(tmp_path, batches, count=30, segment_bytes=1500)
    first = sorted(tmp_path.glob("*.log"))[0]
    position = len(made[0]) + len(made[1])  # third batch
    data = bytearray(first.read_bytes())
    data[position + 70] ^= 0x01  # inside the records: CRC mismatch
    first.write_bytes(bytes(data))
    before = snapshot_dir(tmp_path)
    with pytest.raises(CorruptLogError) as info:
        SegmentedLog.open(tmp_path, segment_bytes=1500)
    err = info.value
    assert err.path == first and err.position == position
    assert str(first) in str(err) and f"byte position {position}" in str(err)
    assert "CRC" in str(err)
    assert snapshot_dir(tmp_path) == before  # nothing was modified


def test_bit_flip_mid_active_segment_with_valid_data_after_refuses(
    tmp_path: Path, batches: Batches
) -> None:
    made = build_log(tmp_path, batches)
    seg = active(tmp_path)
    position = sum(len(b) for b in made[:5])
    data = bytearray(seg.read_bytes())
    data[position + 30] ^= 0x10  # in the CRC-covered header part
    seg.write_bytes(bytes(data))
    before = snapshot_dir(tmp_path)
    # Below the recovery point of a clean close only a full scan reads this batch
    # (test_recovery_point.py covers what the recovery point trusts).
    with pytest.raises(CorruptLogError, match="not a torn tail") as info:
        SegmentedLog.open(tmp_path, full_scan=True)
    assert info.value.position == position
    assert snapshot_dir(tmp_path) == before


def test_damaged_length_field_mid_segment_still_refuses(tmp_path: Path, batches: Batches) -> None:
    made = build_log(tmp_path, batches)
    seg = active(tmp_path)
    position = sum(len(b) for b in made[:3])
    data = bytearray(seg.read_bytes())
    data[position + 9] ^= 0x7F  # the Length field: the batch chain breaks here
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="valid batch \\(base offset 8\\)"):
        SegmentedLog.open(tmp_path, full_scan=True)


def test_offset_discontinuity_is_never_repaired(tmp_path: Path, batches: Batches) -> None:
    build_log(tmp_path, batches, count=5)
    seg = active(tmp_path)
    with seg.open("ab") as fh:
        fh.write(batches(50, 1)[0])  # valid CRC, wrong offset
    with pytest.raises(CorruptLogError, match="base offset 50 where offset 10 was expected"):
        SegmentedLog.open(tmp_path)


def test_missing_segment_in_the_middle_refuses(tmp_path: Path, batches: Batches) -> None:
    build_log(tmp_path, batches, count=30, segment_bytes=1500)
    segs = sorted(tmp_path.glob("*.log"))
    segs[1].unlink()
    with pytest.raises(CorruptLogError, match="does not continue the previous segment"):
        SegmentedLog.open(tmp_path, segment_bytes=1500)


def test_stray_index_files_are_removed(tmp_path: Path, batches: Batches) -> None:
    build_log(tmp_path, batches, count=3)
    stray = tmp_path / f"{777:020d}.index"
    stray.write_bytes(b"\x00" * 8)
    SegmentedLog.open(tmp_path).close()
    assert not stray.exists()
