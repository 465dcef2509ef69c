"""KRaft snapshot files: `<20-digit end offset>-<10-digit epoch>.checkpoint` (KIP-630).

A snapshot is written to `<id prefix><random digits>.checkpoint.part`, fsynced, validated,
renamed to its final name and the directory fsynced — so a final name always holds a
complete, checked snapshot. Deletion renames to `.checkpoint.deleted` first. Startup
(`SnapshotStore.recover`) removes leftover `.part` and `.deleted` files.

`SnapshotWriter` serves both producers of snapshots: the local state machine (`append`
batches in order) and a follower downloading with FetchSnapshot (`write_at(position, bytes)`
with the position the leader answered for). Either way `freeze()` validates the whole file
(SnapshotHeader first, SnapshotFooter last, every CRC, contiguous offsets from 0, one epoch),
reading it batch by batch through one reused buffer: a snapshot of any size costs a few MiB
of memory to check, never a copy of the whole file.

Serving and loading never hold a whole snapshot in memory either: `SnapshotChunkReader`
answers FetchSnapshot with one `pread` per chunk, and `iter_snapshot_values` streams the data
records of a final file for `StateMachine.load_snapshot`.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from kraft.protocol.errors import ProtocolError
from kraft.records.batch import LOG_OVERHEAD, RecordBatch
from kraft.records.snapshot_format import SnapshotChecker, SnapshotContents, read_snapshot
from kraft.storage.durability import fsync_dir, start_writeback
from kraft.storage.errors import InvalidSnapshotError, StorageError
from kraft.storage.layout import (
    DELETED_SUFFIX,
    PART_SUFFIX,
    SnapshotId,
    parse_deleted_file_name,
    parse_part_file_name,
    parse_snapshot_file_name,
)

log = logging.getLogger(__name__)

__all__ = [
    "SnapshotChunkReader",
    "SnapshotId",
    "SnapshotReader",
    "SnapshotStore",
    "SnapshotWriter",
    "iter_snapshot_values",
]

READ_BUFFER_BYTES = 8 * 1024 * 1024
"""Bytes read per `pread` when a snapshot file is scanned (grown for a larger batch)."""

WRITEBACK_EVERY = 4 * 1024 * 1024
"""A snapshot being written asks the kernel to start writing its pages to the device every
this many bytes (`durability.start_writeback`), so that `freeze`'s fsync has little left."""


class PositionOutOfRangeError(StorageError):
    """A chunk written or read at a position that is not the expected one."""


def validate_snapshot_bytes(data: bytes, snapshot_id: SnapshotId, source: Path) -> SnapshotContents:
    """Check snapshot bytes; raises InvalidSnapshotError naming `source` and the problem."""
    try:
        return read_snapshot(data, expected_epoch=snapshot_id.epoch)
    except ProtocolError as exc:
        raise InvalidSnapshotError(f"invalid snapshot {source}: {exc}") from None


def _pread_into(fd: int, view: memoryview, position: int) -> int:
    """Fill `view` from `position` (short only at the end of the file); returns bytes read."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], position + done)
        if n == 0:
            break
        done += n
    return done


def iter_file_batches(fd: int, size: int) -> Iterator[RecordBatch]:
    """Yield the batches of the first `size` bytes of an open file, in order, reading
    `READ_BUFFER_BYTES` at a time into one reused buffer.

    A yielded batch is a view into that buffer: it is valid until the next one is asked for
    (copy what must outlive it). Raises TruncatedInputError / CorruptRecordError (from
    `RecordBatch.parse`) for a cut-off or impossible batch; CRCs are not checked here.
    """
    buf = bytearray(min(READ_BUFFER_BYTES, max(size, LOG_OVERHEAD)))
    pos = 0  # file position of buf[0]
    while pos < size:
        n = _pread_into(fd, memoryview(buf)[: min(len(buf), size - pos)], pos)
        view = memoryview(buf)[:n]
        at_end = pos + n >= size
        off = 0
        grow = 0
        while off < n:
            if n - off < LOG_OVERHEAD:
                if at_end:
                    RecordBatch.parse(view, off, base_position=pos)  # raises: cut short
                break
            batch_size = int.from_bytes(view[off + 8 : off + 12], "big", signed=True) + LOG_OVERHEAD
            if off + batch_size > n:
                if at_end or pos + off + batch_size > size or batch_size <= LOG_OVERHEAD:
                    RecordBatch.parse(view, off, base_position=pos)  # raises: cut short / bad
                if off == 0:
                    grow = batch_size
                break
            batch = RecordBatch.parse(view, off, base_position=pos)
            yield batch
            del batch
            off += batch_size
        view.release()
        if n == 0:  # the file is shorter than `size`
            raise StorageError(f"snapshot file ends at byte {pos}, expected {size} bytes")
        if grow:
            buf = bytearray(grow)
        pos += off


def check_snapshot_file(fd: int, size: int, snapshot_id: SnapshotId,
                        source: Path) -> SnapshotContents:
    """`read_snapshot`'s checks over an open file, batch by batch (data batches not kept).
    Raises InvalidSnapshotError naming `source` and the problem."""
    checker = SnapshotChecker(expected_epoch=snapshot_id.epoch)
    try:
        for batch in iter_file_batches(fd, size):
            checker.add(batch)
        return checker.finish()
    except ProtocolError as exc:
        raise InvalidSnapshotError(f"invalid snapshot {source}: {exc}") from None


def iter_snapshot_values(path: Path | str) -> Iterator[bytes]:
    """The data records' values of a final (already validated) snapshot file, in order,
    read batch by batch: what `StateMachine.load_snapshot` takes. Null values are skipped."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for batch in iter_file_batches(fd, os.fstat(fd).st_size):
            if batch.is_control:
                continue
            for value in batch.values():
                if value is not None:
                    yield value
    except ProtocolError as exc:
        raise InvalidSnapshotError(f"invalid snapshot {path}: {exc}") from None
    finally:
        os.close(fd)


class SnapshotWriter:
    """An in-progress snapshot (`.part` file).

    Calls are serialised by a lock, so a download can write its chunks on a worker thread
    while `abort` comes from another. A chunk that failed with an I/O error (maybe written in
    part) makes `freeze` fail; a chunk refused for its position wrote nothing.
    """

    def __init__(self, directory: Path, snapshot_id: SnapshotId) -> None:
        self.snapshot_id = snapshot_id
        self.directory = directory
        self.final_path = directory / snapshot_id.file_name()
        while True:
            name = f"{snapshot_id.part_prefix()}{secrets.randbelow(10**18)}{PART_SUFFIX}"
            self.path = directory / name
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                continue
        self._position = 0
        self._writeback_from = 0
        self._done = False
        self._failed: BaseException | None = None
        self._lock = threading.Lock()
        self.contents: SnapshotContents | None = None
        """The checked control records, once frozen."""

    @property
    def position(self) -> int:
        """Bytes written so far (the next FetchSnapshot position)."""
        return self._position

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append bytes (whole batches, or any chunk); returns the new size."""
        return self.write_at(self._position, data)

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> int:
        """Write a downloaded chunk at `position`, which must equal `self.position`.

        Raises PositionOutOfRangeError otherwise (nothing is written). Returns the new size.
        """
        with self._lock:
            try:
                return self._write_at(position, data)
            except OSError as exc:  # maybe written in part: this file can never be frozen
                if self._failed is None:
                    self._failed = exc
                raise

    def _write_at(self, position: int, data: bytes | bytearray | memoryview) -> int:
        if self._done:
            raise StorageError(f"snapshot writer {self.path} is already frozen or aborted")
        if position != self._position:
            raise PositionOutOfRangeError(
                f"snapshot {self.path}: chunk at position {position}, expected {self._position}"
            )
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], position + written)
        self._position += len(view)
        if self._position - self._writeback_from >= WRITEBACK_EVERY:
            # a download of hundreds of MB would otherwise sit in the page cache until the
            # fsync of `freeze`, which then writes it all while the node waits
            start_writeback(self._fd, self._writeback_from, self._position - self._writeback_from)
            self._writeback_from = self._position
        return self._position

    def freeze(self) -> Path:
        """fsync, validate, rename to the final name and fsync the directory.

        On a validation failure the `.part` file is deleted and InvalidSnapshotError raised.
        Returns the final path; `contents` then holds the checked control records (the data
        batches are not kept: `iter_snapshot_values` streams them from the file).
        """
        with self._lock:
            return self._freeze()

    def _freeze(self) -> Path:
        if self._done:
            raise StorageError(f"snapshot writer {self.path} is already frozen or aborted")
        if self._failed is not None:
            self._abort()
            raise StorageError(f"snapshot {self.path}: a chunk failed to write: {self._failed}")
        started = time.perf_counter()
        os.fsync(self._fd)
        synced = time.perf_counter()
        try:
            self.contents = check_snapshot_file(self._fd, self._position, self.snapshot_id,
                                                self.path)
        except (InvalidSnapshotError, StorageError):
            self._abort()
            raise
        checked = time.perf_counter()
        os.close(self._fd)
        self._done = True
        if self.final_path.exists():
            self.path.unlink()
            raise StorageError(f"snapshot {self.final_path} already exists")
        os.rename(self.path, self.final_path)
        fsync_dir(self.directory)
        log.info(
            "event=snapshot_frozen file=%s end_offset=%d epoch=%d bytes=%d fsync_ms=%.0f "
            "check_ms=%.0f",
            self.final_path, self.snapshot_id.end_offset, self.snapshot_id.epoch, self._position,
            (synced - started) * 1000, (checked - synced) * 1000,
        )
        return self.final_path

    def abort(self) -> None:
        """Close and delete the `.part` file. Idempotent."""
        with self._lock:
            self._abort()

    def _abort(self) -> None:
        if self._done:
            return
        self._done = True
        os.close(self._fd)
        self.path.unlink(missing_ok=True)
        log.info("event=snapshot_aborted file=%s bytes=%d", self.path, self._position)

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._done:
            self.abort()


class SnapshotReader:
    """A validated, final snapshot file held in memory."""

    def __init__(self, path: Path, snapshot_id: SnapshotId, data: bytes) -> None:
        self.path = path
        self.snapshot_id = snapshot_id
        self.data = data
        self.contents = validate_snapshot_bytes(data, snapshot_id, path)

    @classmethod
    def open(cls, path: Path | str) -> SnapshotReader:
        """Read and validate a `.checkpoint` file; raises InvalidSnapshotError if it is bad."""
        p = Path(path)
        sid = parse_snapshot_file_name(p.name)
        if sid is None:
            raise InvalidSnapshotError(f"{p}: not a snapshot file name")
        return cls(p, sid, p.read_bytes())

    @property
    def size(self) -> int:
        """Size of the snapshot in bytes (FetchSnapshot's `Size`)."""
        return len(self.data)

    @property
    def last_contained_log_timestamp(self) -> int:
        """The SnapshotHeader's LastContainedLogTimestamp."""
        return self.contents.header.last_contained_log_timestamp

    def read_chunk(self, position: int, max_bytes: int) -> bytes:
        """Bytes at `position` (up to max_bytes), for serving FetchSnapshot.

        Raises PositionOutOfRangeError when position is negative or beyond the size.
        """
        if position < 0 or position > len(self.data):
            raise PositionOutOfRangeError(
                f"snapshot {self.path}: position {position} outside [0, {len(self.data)}]"
            )
        return self.data[position : position + max_bytes]


class SnapshotChunkReader:
    """A final snapshot file served in chunks (FetchSnapshot): one `pread` per chunk, nothing
    else held in memory, so serving a snapshot of any size never stalls the caller for
    longer than one chunk takes to read. The file is not checked again: a final name only
    ever holds a snapshot that was validated before its rename (`SnapshotWriter.freeze`).
    The open descriptor keeps the bytes readable after the file is deleted, until `close`.
    """

    def __init__(self, path: Path, snapshot_id: SnapshotId) -> None:
        self.path = path
        self.snapshot_id = snapshot_id
        self._fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    def read_chunk(self, position: int, max_bytes: int) -> bytes:
        """Bytes at `position` (up to max_bytes; fewer only at the end of the file).

        Raises PositionOutOfRangeError when position is negative or beyond the size.
        """
        if position < 0 or position > self.size:
            raise PositionOutOfRangeError(
                f"snapshot {self.path}: position {position} outside [0, {self.size}]"
            )
        want = max(0, min(max_bytes, self.size - position))
        data = os.pread(self._fd, want, position)
        if len(data) < want:  # a regular file reads short only at its end: keep going
            parts = [data]
            got = len(data)
            while got < want:
                more = os.pread(self._fd, want - got, position + got)
                if not more:
                    raise StorageError(f"snapshot {self.path} shrank below {self.size} bytes")
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        return data

    def close(self) -> None:
        """Close the descriptor. Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SnapshotStore:
    """The snapshots of one partition directory. Owner thread only."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def recover(self) -> list[Path]:
        """Remove stale `.part` and `.deleted` files (startup); returns what was removed."""
        removed: list[Path] = []
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(PART_SUFFIX) or name.endswith(DELETED_SUFFIX):
                if parse_part_file_name(name) is None and parse_deleted_file_name(name) is None:
                    log.warning("event=unrecognised_snapshot_temp_file file=%s", name)
                path = self.directory / name
                size = path.stat().st_size
                path.unlink()
                removed.append(path)
                log.info("event=stale_snapshot_file_removed file=%s bytes=%d", path, size)
        if removed:
            fsync_dir(self.directory)
        return removed

    def ids(self) -> list[SnapshotId]:
        """Ids of all final snapshots, oldest first."""
        ids = [parse_snapshot_file_name(n) for n in os.listdir(self.directory)]
        return sorted(i for i in ids if i is not None)

    def latest(self) -> SnapshotId | None:
        """The newest snapshot id, if any."""
        ids = self.ids()
        return ids[-1] if ids else None

    def earliest(self) -> SnapshotId | None:
        """The oldest snapshot id, if any."""
        ids = self.ids()
        return ids[0] if ids else None

    def path(self, snapshot_id: SnapshotId) -> Path:
        """Final path of a snapshot id."""
        return self.directory / snapshot_id.file_name()

    def create_writer(self, snapshot_id: SnapshotId) -> SnapshotWriter:
        """Start a new `.part` for `snapshot_id`; raises StorageError if it already exists."""
        if self.path(snapshot_id).exists():
            raise StorageError(f"snapshot {self.path(snapshot_id)} already exists")
        return SnapshotWriter(self.directory, snapshot_id)

    def write(self, snapshot_id: SnapshotId, batches: Iterable[bytes]) -> Path:
        """Write a whole snapshot from its encoded batches and freeze it; returns its path."""
        with self.create_writer(snapshot_id) as writer:
            for b in batches:
                writer.append(b)
            return writer.freeze()

    def open_reader(self, snapshot_id: SnapshotId) -> SnapshotReader:
        """Open and validate a final snapshot."""
        path = self.path(snapshot_id)
        if not path.exists():
            raise StorageError(f"snapshot {path} does not exist")
        return SnapshotReader(path, snapshot_id, path.read_bytes())

    def open_chunk_reader(self, snapshot_id: SnapshotId) -> SnapshotChunkReader:
        """Open a final snapshot for serving chunks (not read, not checked again)."""
        path = self.path(snapshot_id)
        try:
            return SnapshotChunkReader(path, snapshot_id)
        except FileNotFoundError:
            raise StorageError(f"snapshot {path} does not exist") from None

    def delete(self, snapshot_id: SnapshotId) -> bool:
        """Rename to `.deleted`, fsync the directory, then remove; False if it did not exist."""
        path = self.path(snapshot_id)
        marked = self.directory / snapshot_id.deleted_name()
        try:
            os.rename(path, marked)
        except FileNotFoundError:
            return False
        fsync_dir(self.directory)
        marked.unlink()
        log.info(
            "event=snapshot_deleted file=%s end_offset=%d epoch=%d",
            path, snapshot_id.end_offset, snapshot_id.epoch,
        )
        return True

    def mark_deleted(self, snapshot_id: SnapshotId) -> bool:
        """Rename to `.checkpoint.deleted` and fsync the directory (the first half of a
        deletion, as Kafka does it: the file is no longer a snapshot, and `recover` removes it
        at the next start); False if it did not exist. `remove_marked` finishes."""
        path = self.path(snapshot_id)
        try:
            os.rename(path, self.directory / snapshot_id.deleted_name())
        except FileNotFoundError:
            return False
        fsync_dir(self.directory)
        log.info(
            "event=snapshot_marked_deleted file=%s end_offset=%d epoch=%d",
            path, snapshot_id.end_offset, snapshot_id.epoch,
        )
        return True

    def remove_marked(self, snapshot_id: SnapshotId) -> bool:
        """Remove the `.checkpoint.deleted` file of `snapshot_id`; False if there is none."""
        marked = self.directory / snapshot_id.deleted_name()
        try:
            marked.unlink()
        except FileNotFoundError:
            return False
        log.info(
            "event=snapshot_deleted file=%s end_offset=%d epoch=%d",
            marked, snapshot_id.end_offset, snapshot_id.epoch,
        )
        return True

    def delete_older_than(self, snapshot_id: SnapshotId) -> list[SnapshotId]:
        """Delete every snapshot older than `snapshot_id` (which is kept); returns them."""
        gone = [s for s in self.ids() if s < snapshot_id]
        for s in gone:
            self.delete(s)
        return gone

    def delete_below_log_start(self, log_start_offset: int) -> list[SnapshotId]:
        """Delete snapshots whose end offset is below the log start offset (startup rule)."""
        gone = [s for s in self.ids() if s.end_offset < log_start_offset]
        for s in gone:
            self.delete(s)
        return gone
