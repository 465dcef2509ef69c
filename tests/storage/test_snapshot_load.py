"""Start-up reads of a final snapshot: the header batch alone, or one checked streaming pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.records.batch import iter_batches
from kraft.records.control import VotersRecord
from kraft.records.snapshot_format import build_snapshot, read_snapshot
from kraft.statemachine.kv import KVStore, encode_put
from kraft.storage.errors import InvalidSnapshotError
from kraft.storage.layout import SnapshotId
from kraft.storage.snapshot_load import SnapshotStream, read_snapshot_control

SID = SnapshotId(500, 3)


def make(tmp_path: Path, values: list[list[bytes]], **kw: object) -> Path:
    data = build_snapshot(SID.epoch, 77, values, timestamp_ms=1, **kw)  # type: ignore[arg-type]
    path = tmp_path / SID.file_name()
    path.write_bytes(data)
    return path


def values_of(path: Path) -> list[bytes | None]:
    return list(SnapshotStream(path, SID).values())


def test_stream_yields_what_read_snapshot_reads(tmp_path: Path) -> None:
    batches = [[encode_put(f"k{i}-{j}", bytes([j]) * (i * 1000 + j)) for j in range(5)]
               for i in range(40)]
    path = make(tmp_path, batches, kraft_version=1,
                voters=VotersRecord(()))
    stream = SnapshotStream(path, SID)
    got = list(stream.values())
    assert got == list(read_snapshot(path.read_bytes()).values())
    assert stream.complete and stream.size == path.stat().st_size
    assert stream.record_count == read_snapshot(path.read_bytes()).record_count
    assert stream.control is not None and stream.control.kraft_version is not None
    kv = KVStore()
    kv.load_snapshot(SID.end_offset, SnapshotStream(path, SID).present_values())
    assert len(kv) == 200 and kv.get("k3-4") == bytes([4]) * 3004
    assert kv.applied_offset == SID.end_offset


def test_control_records_come_from_the_first_batch_only(tmp_path: Path) -> None:
    path = make(tmp_path, [[encode_put("a", b"1")]], kraft_version=1,
                voters=VotersRecord(()))
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # damage the footer batch: not read here
    path.write_bytes(bytes(data))
    control = read_snapshot_control(path, SID)
    assert control.header.last_contained_log_timestamp == 77
    assert control.voters is not None and control.kraft_version is not None
    with pytest.raises(InvalidSnapshotError):
        values_of(path)


@pytest.mark.parametrize("damage", ["crc", "cut", "no_footer", "wrong_epoch", "empty"])
def test_a_bad_snapshot_raises_and_the_state_is_untouched(tmp_path: Path, damage: str) -> None:
    batches = [[encode_put(f"k{i}", b"v" * 300)] for i in range(10)]
    good = make(tmp_path, batches)
    data = bytearray(good.read_bytes())
    sid = SID
    if damage == "crc":
        data[len(data) // 2] ^= 0x01
    elif damage == "cut":
        data = data[: len(data) - 30]
    elif damage == "no_footer":
        last = list(iter_batches(bytes(data)))[-1]
        data = data[: last.position]  # every batch whole, the footer batch gone
    elif damage == "wrong_epoch":
        sid = SnapshotId(SID.end_offset, SID.epoch + 1)
    else:
        data = bytearray()
    good.write_bytes(bytes(data))
    kv = KVStore()
    kv.load_snapshot(1, [encode_put("keep", b"me")])
    with pytest.raises(InvalidSnapshotError, match=str(good)):
        kv.load_snapshot(SID.end_offset, SnapshotStream(good, sid).present_values())
    assert kv.get("keep") == b"me" and kv.applied_offset == 1
