"""Snapshot files: .part then atomic rename, validation, chunked download, cleanup, listing."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from kraft.protocol.uuid import Uuid
from kraft.records.control import Endpoint, KRaftVersionFeature, Voter, VotersRecord
from kraft.records.snapshot_format import build_snapshot, read_snapshot
from kraft.storage import snapshots
from kraft.storage.errors import InvalidSnapshotError, StorageError
from kraft.storage.layout import SnapshotId, parse_part_file_name
from kraft.storage.snapshots import (
    PositionOutOfRangeError,
    SnapshotReader,
    SnapshotStore,
    iter_snapshot_values,
)

VOTERS = VotersRecord(
    (Voter(1, Uuid.random(), (Endpoint("CONTROLLER", "h1", 9093),), KRaftVersionFeature(0, 1)),)
)


def snapshot_bytes(epoch: int = 3, batches: int = 3) -> bytes:
    data = [[f"k{i}-{j}".encode() * 20 for j in range(4)] for i in range(batches)]
    return build_snapshot(epoch, 12345, data, timestamp_ms=999, kraft_version=1, voters=VOTERS)


def test_write_freeze_read(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    sid = SnapshotId(120, 3)
    path = store.write(sid, [snapshot_bytes()])
    assert path.name == "00000000000000000120-0000000003.checkpoint"
    assert not list(tmp_path.glob("*.part"))
    reader = store.open_reader(sid)
    assert reader.last_contained_log_timestamp == 12345
    assert reader.contents.voters == VOTERS
    assert reader.contents.kraft_version is not None
    assert reader.size == path.stat().st_size
    assert reader.read_chunk(0, 10) + reader.read_chunk(10, 1 << 20) == path.read_bytes()
    with pytest.raises(PositionOutOfRangeError):
        reader.read_chunk(reader.size + 1, 10)
    assert store.ids() == [sid] and store.latest() == sid and store.earliest() == sid


def test_part_name_and_chunked_download(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    sid = SnapshotId(500, 7)
    data = snapshot_bytes(epoch=7)
    writer = store.create_writer(sid)
    assert parse_part_file_name(writer.path.name) == sid
    assert writer.path.name.startswith("00000000000000000500-0000000007-")
    pos = 0
    for size in (1, 60, 100, 7, 10_000):
        chunk = data[pos : pos + size]
        if not chunk:
            break
        with pytest.raises(PositionOutOfRangeError, match=f"expected {pos}"):
            writer.write_at(pos + 1, chunk)
        pos = writer.write_at(pos, chunk)
    assert pos == len(data)
    final = writer.freeze()
    assert final.read_bytes() == data
    assert not writer.path.exists()


@pytest.mark.parametrize("damage", ["truncate", "flip", "no_footer", "wrong_epoch"])
def test_freeze_rejects_bad_snapshots_and_removes_part(tmp_path: Path, damage: str) -> None:
    store = SnapshotStore(tmp_path)
    sid = SnapshotId(100, 3)
    data = bytearray(snapshot_bytes())
    if damage == "truncate":
        data = data[:-10]
    elif damage == "flip":
        data[200] ^= 0x01
    elif damage == "no_footer":
        data = bytearray(build_snapshot(3, 1, [[b"x"]], timestamp_ms=1))[:-75]
    elif damage == "wrong_epoch":
        sid = SnapshotId(100, 4)
    writer = store.create_writer(sid)
    writer.append(bytes(data))
    with pytest.raises(InvalidSnapshotError, match=r"\.checkpoint\.part"):
        writer.freeze()
    assert list(tmp_path.iterdir()) == []


def test_reader_validates_final_file(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    sid = SnapshotId(10, 1)
    path = store.write(sid, [snapshot_bytes(epoch=1)])
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidSnapshotError, match=str(path.name)):
        SnapshotReader.open(path)


def test_startup_cleanup_and_deletion(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    ids = [SnapshotId(10, 1), SnapshotId(20, 1), SnapshotId(30, 2)]
    for sid in ids:
        store.write(sid, [snapshot_bytes(epoch=sid.epoch)])
    stale_part = tmp_path / "00000000000000000040-0000000002-123456.checkpoint.part"
    stale_part.write_bytes(b"half a download")
    stale_deleted = tmp_path / "00000000000000000005-0000000001.checkpoint.deleted"
    stale_deleted.write_bytes(b"old")
    removed = store.recover()
    assert set(removed) == {stale_part, stale_deleted}
    assert store.ids() == ids
    assert store.delete_older_than(SnapshotId(30, 2)) == ids[:2]
    assert store.ids() == [ids[2]]
    assert not list(tmp_path.glob("*.deleted"))
    assert store.delete_below_log_start(31) == [ids[2]]
    assert store.latest() is None
    with pytest.raises(StorageError, match="does not exist"):
        store.open_reader(ids[0])


def test_writer_context_aborts_on_error(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    with pytest.raises(RuntimeError), store.create_writer(SnapshotId(1, 1)) as w:
        w.append(b"partial")
        raise RuntimeError("state machine failed")
    assert list(tmp_path.iterdir()) == []
    store.write(SnapshotId(1, 1), [snapshot_bytes(epoch=1)])
    with pytest.raises(StorageError, match="already exists"):
        store.create_writer(SnapshotId(1, 1))


def big_snapshot_bytes(epoch: int = 2) -> bytes:
    # batches of different sizes, one larger than the scan buffer the tests below set
    data = [[bytes([i]) * 300] * (1 + i % 3) for i in range(20)] + [[b"L" * 5000]]
    return build_snapshot(epoch, 7, data, timestamp_ms=5, kraft_version=1, voters=VOTERS)


@pytest.mark.parametrize("buffer_bytes", [64, 700, 4096, 1 << 20])
def test_freeze_checks_batch_by_batch_through_a_small_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, buffer_bytes: int
) -> None:
    monkeypatch.setattr(snapshots, "READ_BUFFER_BYTES", buffer_bytes)
    store = SnapshotStore(tmp_path)
    data = big_snapshot_bytes()
    sid = SnapshotId(77, 2)
    writer = store.create_writer(sid)
    writer.append(data)
    path = writer.freeze()
    assert writer.contents is not None and writer.contents.voters == VOTERS
    assert writer.contents.record_count == read_snapshot(data).record_count
    expected = [v for v in read_snapshot(data).values() if v is not None]
    assert list(iter_snapshot_values(path)) == expected
    # the same file cut short or damaged anywhere is refused, whatever the buffer size
    for cut in (len(data) - 1, len(data) // 2, 30):
        w = store.create_writer(SnapshotId(78, 2))
        w.append(data[:cut])
        with pytest.raises(InvalidSnapshotError):
            w.freeze()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    w = store.create_writer(SnapshotId(79, 2))
    w.append(bytes(flipped))
    with pytest.raises(InvalidSnapshotError):
        w.freeze()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_chunk_reader_serves_with_pread_and_outlives_deletion(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    sid = SnapshotId(120, 2)
    data = big_snapshot_bytes()
    store.write(sid, [data])
    reader = store.open_chunk_reader(sid)
    assert reader.size == len(data)
    got = b"".join(reader.read_chunk(p, 1000) for p in range(0, len(data), 1000))
    assert got == data
    assert reader.read_chunk(len(data), 1000) == b""
    with pytest.raises(PositionOutOfRangeError):
        reader.read_chunk(len(data) + 1, 10)
    with pytest.raises(PositionOutOfRangeError):
        reader.read_chunk(-1, 10)
    store.delete(sid)  # a download in progress keeps being served from the open file
    assert reader.read_chunk(100, 50) == data[100:150]
    reader.close()
    reader.close()
    with pytest.raises(StorageError, match="does not exist"):
        store.open_chunk_reader(sid)


def test_failed_chunk_write_fails_the_freeze(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path)
    data = snapshot_bytes()
    writer = store.create_writer(SnapshotId(5, 3))
    writer.write_at(0, data[:100])
    real_pwrite = os.pwrite

    def failing_pwrite(fd: int, buf: object, pos: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshots.os, "pwrite", failing_pwrite)
    with pytest.raises(OSError):
        writer.write_at(100, data[100:200])
    monkeypatch.setattr(snapshots.os, "pwrite", real_pwrite)
    writer.write_at(100, data[100:])  # the rest arrives; the file still has had a failed write
    with pytest.raises(StorageError, match="failed to write"):
        writer.freeze()
    assert list(tmp_path.iterdir()) == []


def test_start_writeback_is_the_real_call(tmp_path: Path) -> None:
    """Linux: sync_file_range runs (and a closed descriptor is refused by the kernel)."""
    from kraft.storage.durability import start_writeback

    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 100_000)
        assert start_writeback(fd, 0, 100_000) is True
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="sync_file_range"):
        start_writeback(fd, 0, 100_000)


def test_a_download_starts_writeback_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every WRITEBACK_EVERY bytes the range written since the last call is handed to the
    kernel (the real call, recorded), so freeze's fsync is left with at most that much."""
    monkeypatch.setattr(snapshots, "WRITEBACK_EVERY", 1000)
    ranges: list[tuple[int, int]] = []
    real = snapshots.start_writeback

    def recorded(fd: int, offset: int, nbytes: int) -> bool:
        ranges.append((offset, nbytes))
        return real(fd, offset, nbytes)

    monkeypatch.setattr(snapshots, "start_writeback", recorded)
    data = snapshot_bytes(batches=40)
    assert len(data) > 5000
    writer = SnapshotStore(tmp_path).create_writer(SnapshotId(500, 3))
    pos = 0
    while pos < len(data):
        pos = writer.write_at(pos, data[pos:pos + 700])
    assert ranges and ranges[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(ranges))
    assert all(n >= 1000 for _, n in ranges)
    assert len(data) - (ranges[-1][0] + ranges[-1][1]) < 1000
    assert writer.freeze().read_bytes() == data


def test_mark_deleted_then_remove_as_kafka_does(tmp_path: Path) -> None:
    # a deleted snapshot is first renamed `.checkpoint.deleted` (no longer a snapshot; a reader
    # that holds it open still reads it), removed later; a restart in between removes it too
    store = SnapshotStore(tmp_path)
    sid = SnapshotId(120, 3)
    data = snapshot_bytes()
    store.write(sid, [data])
    served = store.open_chunk_reader(sid)
    assert store.mark_deleted(sid)
    assert store.ids() == []
    marked = tmp_path / "00000000000000000120-0000000003.checkpoint.deleted"
    assert marked.exists()
    assert served.read_chunk(0, len(data)) == data
    assert not store.mark_deleted(sid)
    assert store.remove_marked(sid) and not marked.exists()
    assert not store.remove_marked(sid)
    served.close()
    store.write(sid, [data])
    assert store.mark_deleted(sid)
    assert SnapshotStore(tmp_path).recover() == [marked] and not marked.exists()
