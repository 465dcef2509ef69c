"""KRaft snapshot files: `<20-digit end offset>-<10-digit epoch>.checkpoint` (KIP-630).

A snapshot is written to `<id prefix><random digits>.checkpoint.part`, fsynced, validated,
renamed to its final name and the directory fsynced — so a final name always holds a
complete, checked snapshot. Deletion renames to `.checkpoint.deleted` first. Startup
(`SnapshotStore.recover`) removes leftover `.part` and `.deleted` files.

`SnapshotWriter` serves both producers of snapshots: the local state machine (`append`
batches in order) and a follower downloading with FetchSnapshot (`write_at(position, bytes)`
with the position the leader answered for). Either way `freeze()` validates the whole file
(SnapshotHeader first, SnapshotFooter last, every CRC, contiguous offsets from 0, one epoch).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from kraft.protocol.errors import ProtocolError
from kraft.records.snapshot_format import SnapshotContents, read_snapshot
from kraft.storage.durability import fsync_dir
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

__all__ = ["SnapshotId", "SnapshotReader", "SnapshotStore", "SnapshotWriter"]


class PositionOutOfRangeError(StorageError):
    """A chunk written or read at a position that is not the expected one."""


def validate_snapshot_bytes(data: bytes, snapshot_id: SnapshotId, source: Path) -> SnapshotContents:
    """Check snapshot bytes; raises InvalidSnapshotError naming `source` and the problem."""
    try:
        return read_snapshot(data, expected_epoch=snapshot_id.epoch)
    except ProtocolError as exc:
        raise InvalidSnapshotError(f"invalid snapshot {source}: {exc}") from None


class SnapshotWriter:
    """An in-progress snapshot (`.part` file). Not thread-safe: one writer thread."""

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
        self._done = False

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
        return self._position

    def freeze(self) -> Path:
        """fsync, validate, rename to the final name and fsync the directory.

        On a validation failure the `.part` file is deleted and InvalidSnapshotError raised.
        Returns the final path.
        """
        if self._done:
            raise StorageError(f"snapshot writer {self.path} is already frozen or aborted")
        os.fsync(self._fd)
        data = os.pread(self._fd, self._position, 0)
        try:
            validate_snapshot_bytes(data, self.snapshot_id, self.path)
        except InvalidSnapshotError:
            self.abort()
            raise
        os.close(self._fd)
        self._done = True
        if self.final_path.exists():
            self.path.unlink()
            raise StorageError(f"snapshot {self.final_path} already exists")
        os.rename(self.path, self.final_path)
        fsync_dir(self.directory)
        log.info(
            "event=snapshot_frozen file=%s end_offset=%d epoch=%d bytes=%d",
            self.final_path, self.snapshot_id.end_offset, self.snapshot_id.epoch, self._position,
        )
        return self.final_path

    def abort(self) -> None:
        """Close and delete the `.part` file. Idempotent."""
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
