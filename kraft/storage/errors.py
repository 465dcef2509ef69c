"""Errors raised by `kraft.storage`: each names the file (and position) that is wrong."""

from __future__ import annotations

from pathlib import Path


class StorageError(Exception):
    """Base class of every storage failure."""


class CorruptLogError(StorageError):
    """Bytes on disk that cannot be what we wrote; startup refuses rather than drop data.

    `path` is the file and `position` the byte offset in it where the problem starts.
    """

    def __init__(self, path: Path | str, position: int, reason: str) -> None:
        self.path = Path(path)
        self.position = position
        self.reason = reason
        super().__init__(f"corrupt data in {self.path} at byte position {position}: {reason}")


class OffsetOutOfRangeError(StorageError):
    """A read or truncation asked for an offset outside [log start offset, log end offset]."""


class InvalidAppendError(StorageError):
    """An append whose batches do not continue the log (offset gap, lower epoch, bad CRC)."""


class InvalidSnapshotError(StorageError):
    """Snapshot bytes that fail validation (header, footer, CRC, offsets); names file/position."""


class StorageConfigError(StorageError):
    """A bad configuration value or command-line argument (the CLI exits with code 2)."""


class AlreadyFormattedError(StorageError):
    """A directory already holds meta.properties and `--ignore-formatted` was not given."""


class FormattedForAnotherError(StorageError):
    """A directory is formatted for another cluster id or node id than the one asked for:
    it holds another cluster's (or node's) data and is never formatted over."""


class NotFormattedError(StorageError):
    """A directory that should have been formatted (no meta.properties) or is inconsistent."""


class DirectoryLockedError(StorageError):
    """Another process (a running node) holds the directory's `.lock`."""
