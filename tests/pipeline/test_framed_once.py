"""The batch scan of `rows=batches` (no Spark session) frames the records of each distinct
batch once per buffer (one Spark partition): replicas that agree hold the same bytes, so their copies are not
framed again; a batch whose records do not frame is reported on every copy."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from kraft_pipeline import datasource
from kraft_pipeline.datasource import BATCH_COLUMNS, BatchBuffer, scan_file
from kraft_pipeline.layout import LogFile

from kraft.records.batch import RecordBatch, build_batch

CRC_AT, ATTRIBUTES_AT = 17, 21


def _segment(path: Path, data: bytes, replica: str) -> LogFile:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return LogFile(replica, 1, None, str(path), "log", 0, size_bytes=len(data))


def _rows(files: list[LogFile]) -> list[dict[str, object]]:
    buffer = BatchBuffer()
    for f in files:
        for _ in scan_file(f, buffer, 1 << 62):
            pass
    table = buffer.to_arrow(datasource._arrow_batch_schema())
    return table.to_pylist()


def _unframed(base: int, values: list[bytes]) -> bytes:
    """A batch whose last record announces a header it does not hold, with a valid CRC."""
    raw = bytearray(build_batch(base, 1, values, 7))
    raw[-1] = 2  # headers count: varint 1
    struct.pack_into(">I", raw, CRC_AT, crc32c.crc32c(bytes(raw[ATTRIBUTES_AT:])))
    return bytes(raw)


def test_each_distinct_batch_is_framed_once_across_replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = build_batch(0, 1, [b"a", b"b"], 5) + build_batch(2, 1, [b"c"], 6)
    other = build_batch(0, 1, [b"a", b"b"], 5) + build_batch(2, 1, [b"X"], 6)
    files = [_segment(tmp_path / f"node-{n}" / "00000000000000000000.log", data, f"node-{n}")
             for n, data in ((1, log), (2, log), (3, other))]
    framed: list[int] = []
    values = RecordBatch.values

    def counting(self: RecordBatch) -> list[bytes | None]:
        framed.append(self.base_offset)
        return values(self)

    monkeypatch.setattr(RecordBatch, "values", counting)
    rows = _rows(files)
    assert len(rows) == 6 and all(r["error"] is None for r in rows)
    # node-2 is node-1's bytes: nothing new; node-3's second batch differs: framed
    assert framed == [0, 2, 2]
    assert [r["replica"] for r in rows] == ["node-1"] * 2 + ["node-2"] * 2 + ["node-3"] * 2
    assert rows[0]["batch_hash"] == rows[2]["batch_hash"] == rows[4]["batch_hash"]
    assert rows[1]["batch_hash"] == rows[3]["batch_hash"] != rows[5]["batch_hash"]


def test_a_batch_whose_records_do_not_frame_is_reported_on_every_copy(tmp_path: Path) -> None:
    bad = build_batch(0, 1, [b"a"], 5) + _unframed(1, [b"b", b"c"])
    files = [_segment(tmp_path / f"node-{n}" / "00000000000000000000.log", bad, f"node-{n}")
             for n in (1, 2)]
    rows = _rows(files)
    errors = [r for r in rows if r["error"] is not None]
    assert [r["replica"] for r in errors] == ["node-1", "node-2"]
    assert all(str(r["error"]).startswith("invalid_records:") for r in errors)
    assert all(r["data"] is None for r in errors)
    assert BATCH_COLUMNS[-1] == "data"
