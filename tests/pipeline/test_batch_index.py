"""The batch index (`rows=batches`, `batchBytes=false`) without a Spark session: partitions
planned over the copies of a segment, bytes read back by position and checked, and a file
that changed under the audit named in one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
from kraft_pipeline.datasource import (
    BatchBuffer,
    BatchBytes,
    FileChangedError,
    _arrow_batch_schema,
    plan_partitions,
    scan_file,
)
from kraft_pipeline.failure import classify
from kraft_pipeline.layout import LogFile

from kraft.records.batch import build_batch


def _file(root: Path, replica: str, name: str, data: bytes, source: str = "log") -> LogFile:
    path = root / replica / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return LogFile(replica, 1, None, str(path), source, 0, size_bytes=len(data))


def test_copies_of_a_segment_share_a_partition_within_the_bound(tmp_path: Path) -> None:
    seg0 = build_batch(0, 1, [b"a" * 100], 5)
    seg1 = build_batch(1, 1, [b"b" * 300], 5)
    files = [_file(tmp_path, f"node-{n}", name, data)
             for n in (1, 2, 3) for name, data in (("00000.log", seg0), ("00001.log", seg1))]
    assert plan_partitions(files) == [[f] for f in sorted(
        files, key=lambda f: (-f.size_bytes, f.path))]
    grouped = plan_partitions(files, copies_bytes=3 * len(seg1))
    assert [[Path(f.path).parent.name for f in g] for g in grouped] == [
        ["node-1", "node-2", "node-3"]] * 2
    assert [Path(g[0].path).name for g in grouped] == ["00001.log", "00000.log"]
    # copies larger together than the bound keep a partition per file
    mixed = plan_partitions(files, copies_bytes=3 * len(seg0))
    assert sorted(len(g) for g in mixed) == [1, 1, 1, 3]


def _index(files: list[LogFile]) -> list[dict[str, object]]:
    buffer = BatchBuffer(keep_bytes=False)
    for f in files:
        for _ in scan_file(f, buffer, 1 << 62):
            pass
    schema = _arrow_batch_schema()
    schema = schema.remove(schema.get_field_index("data"))
    return buffer.to_arrow(schema).to_pylist()


def test_bytes_are_read_back_by_position_and_checked(tmp_path: Path) -> None:
    first, second = build_batch(0, 1, [b"x"], 5), build_batch(1, 2, [b"y", b"z"], 6)
    f = _file(tmp_path, "node-1", "00000.log", first + second)
    rows = _index([f])
    assert [r["position"] for r in rows] == [0, len(first)]
    with BatchBytes() as reader:
        assert [reader.read(r) for r in rows] == [first, second]
        assert reader.read({**rows[0], "error": "corrupt_crc: x"}) is None


def test_a_file_changed_since_it_was_indexed_is_named(tmp_path: Path) -> None:
    first, second = build_batch(0, 1, [b"x"], 5), build_batch(1, 2, [b"y", b"z"], 6)
    f = _file(tmp_path, "node-1", "00000.log", first + second)
    rows = _index([f])
    # a retention pass rewrote the file: other bytes where the second batch was
    Path(f.path).write_bytes(first + build_batch(1, 2, [b"Y", b"z"], 6))
    with BatchBytes() as reader, pytest.raises(FileChangedError) as err:
        reader.read(rows[1])
    assert f.path in str(err.value) and f"byte position {len(first)}" in str(err.value)
    Path(f.path).unlink()
    with BatchBytes() as reader, pytest.raises(FileChangedError, match="cannot be read back"):
        reader.read(rows[0])
    # the audit's one line for it, as a Python worker's error reaches the driver
    text = f"PythonException: ... kraft_pipeline.datasource.FileChangedError: {err.value}\n"
    failure = classify(text, "local[*]", "2g")
    assert failure.cause.startswith("an input file changed while the audit read it")
    assert f.path in failure.cause and "copy" in failure.remedy
