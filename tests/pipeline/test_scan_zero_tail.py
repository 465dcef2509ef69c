"""The pipeline's file scan (no Spark session): zeros after a segment's last batch, as a crash
with `kraft.log.preallocate.bytes` leaves them, are no error row; a torn batch before them is."""

from __future__ import annotations

from pathlib import Path

from kraft_pipeline.datasource import COLUMNS, scan_file_rows
from kraft_pipeline.layout import LogFile

from kraft.records.batch import PREALLOCATION_BLOCK, build_batch

ERROR = COLUMNS.index("error")


def _zeros_to_block_end(data: bytes, blocks: int = 1) -> bytes:
    """`data` then zeros up to `blocks` whole blocks past its last full one."""
    return data + bytes(blocks * PREALLOCATION_BLOCK - len(data) % PREALLOCATION_BLOCK)
OFFSET = COLUMNS.index("offset")


def _file(path: Path, source: str = "log") -> LogFile:
    return LogFile("node-1", 1, None, str(path), source, 0, size_bytes=path.stat().st_size)


def test_zeros_after_the_last_batch_of_a_segment_are_not_an_error(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    batches = build_batch(0, 1, [b"a", b"b"], 5) + build_batch(2, 1, [b"c"], 6)
    seg.write_bytes(_zeros_to_block_end(batches, 3))
    rows = scan_file_rows(_file(seg))
    assert [r[OFFSET] for r in rows] == [0, 1, 2]
    assert all(r[ERROR] is None for r in rows)
    # zeros that do not end on a block are not preallocated space: a torn tail
    seg.write_bytes(batches + bytes(100))
    rows = scan_file_rows(_file(seg))
    assert [r[OFFSET] for r in rows if r[ERROR] is None] == [0, 1, 2]
    assert len([r for r in rows if r[ERROR] is not None]) == 1


def test_a_torn_batch_before_the_zeros_is_still_an_error_row(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    good = build_batch(0, 1, [b"a"], 5)
    seg.write_bytes(_zeros_to_block_end(good + build_batch(1, 1, [b"b"], 6)[:25]))
    rows = scan_file_rows(_file(seg))
    assert [r[OFFSET] for r in rows if r[ERROR] is None] == [0]
    errors = [r for r in rows if r[ERROR] is not None]
    assert len(errors) == 1  # the cut batch: framed over the zeros, its CRC fails
    assert errors[0][COLUMNS.index("position")] == len(good)
    assert errors[0][ERROR].startswith("corrupt_crc:")
