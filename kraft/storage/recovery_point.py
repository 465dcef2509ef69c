"""The recovery point of a segmented log: how far the log is known flushed and consistent.

Kafka keeps `recovery-point-offset-checkpoint` (one offset per partition, in the log dir) and
a `.kafka_cleanshutdown` marker; `LogLoader` trusts the segments below the recovery point and
recovers the rest. Ours is one small text file per partition directory,
`recovery-point-checkpoint`, replaced atomically and durably (`.tmp`, fsync, rename, fsync
dir). It holds more than Kafka's offset, so that open can resume *inside* a segment:

    kraft-recovery-point 1
    log_start_offset <offset>      the log start offset (Kafka's log-start-offset-checkpoint)
    recovery_point <offset>        every offset below it is fsynced, with its index entries
    segment <base offset>          the segment the recovery point falls in ...
    position <bytes>               ... and the file position of that offset's batch there
    clean_shutdown <0|1>           1 only when written by a clean close (Kafka's marker)
    crc32c <8 hex digits>          CRC-32C of every line above (with their newlines)

A file that is missing, unparsable, fails its CRC or disagrees with the segments on disk is
never an error: the log falls back to the full scan of every batch and says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import crc32c as _crc32c_mod

from kraft.storage.durability import atomic_write

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-checkpoint"
_MAGIC = "kraft-recovery-point"
_VERSION = 1
_FIELDS = ("log_start_offset", "recovery_point", "segment", "position", "clean_shutdown")


class RecoveryCheckpointError(ValueError):
    """The checkpoint file exists but cannot be used (the reason is the message)."""


@dataclass(frozen=True, slots=True)
class RecoveryCheckpoint:
    """The content of `recovery-point-checkpoint` (see the module docstring)."""

    log_start_offset: int
    recovery_point: int
    segment: int
    position: int
    clean_shutdown: bool = False

    def encode(self) -> bytes:
        """The file content, CRC line included."""
        body = (
            f"{_MAGIC} {_VERSION}\n"
            f"log_start_offset {self.log_start_offset}\n"
            f"recovery_point {self.recovery_point}\n"
            f"segment {self.segment}\n"
            f"position {self.position}\n"
            f"clean_shutdown {int(self.clean_shutdown)}\n"
        ).encode("ascii")
        return body + f"crc32c {_crc32c_mod.crc32c(body):08x}\n".encode("ascii")


def recovery_checkpoint_path(partition_dir: Path | str) -> Path:
    """`<partition dir>/recovery-point-checkpoint`."""
    return Path(partition_dir) / RECOVERY_POINT_CHECKPOINT


def decode_recovery_checkpoint(data: bytes) -> RecoveryCheckpoint:
    """Parse the file content; raises RecoveryCheckpointError naming what is wrong."""
    lines = data.split(b"\n")
    if len(lines) != 8 or lines[7] != b"":
        raise RecoveryCheckpointError(f"expected 7 lines, found {len(lines) - 1}")
    body = b"\n".join(lines[:6]) + b"\n"
    crc_line = lines[6].split(b" ")
    if len(crc_line) != 2 or crc_line[0] != b"crc32c":
        raise RecoveryCheckpointError("no crc32c line")
    try:
        stored = int(crc_line[1], 16)
    except ValueError:
        raise RecoveryCheckpointError(f"bad crc32c value {crc_line[1]!r}") from None
    computed = _crc32c_mod.crc32c(body)
    if stored != computed:
        raise RecoveryCheckpointError(
            f"CRC mismatch: stored {stored:08x}, computed {computed:08x}"
        )
    head = lines[0].decode("ascii", "replace").split()
    if head != [_MAGIC, str(_VERSION)]:
        raise RecoveryCheckpointError(f"unknown header {lines[0]!r}")
    values: dict[str, int] = {}
    for name, raw in zip(_FIELDS, lines[1:6], strict=True):
        parts = raw.decode("ascii", "replace").split()
        if len(parts) != 2 or parts[0] != name or not parts[1].isdigit():
            raise RecoveryCheckpointError(f"expected '{name} <number>', got {raw!r}")
        values[name] = int(parts[1])
    cp = RecoveryCheckpoint(
        values["log_start_offset"], values["recovery_point"], values["segment"],
        values["position"], values["clean_shutdown"] == 1,
    )
    if values["clean_shutdown"] not in (0, 1):
        raise RecoveryCheckpointError(f"clean_shutdown {values['clean_shutdown']} is not 0 or 1")
    if cp.segment > cp.recovery_point or (cp.position == 0) != (cp.recovery_point == cp.segment):
        raise RecoveryCheckpointError(
            f"recovery point {cp.recovery_point} at position {cp.position} of segment "
            f"{cp.segment} is impossible"
        )
    return cp


def read_recovery_checkpoint(partition_dir: Path | str) -> RecoveryCheckpoint | None:
    """The checkpoint of a partition directory; None when absent.

    Raises RecoveryCheckpointError when the file exists but is unusable.
    """
    path = recovery_checkpoint_path(partition_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode_recovery_checkpoint(data)


def write_recovery_checkpoint(partition_dir: Path | str, cp: RecoveryCheckpoint) -> None:
    """Atomically and durably replace the checkpoint."""
    atomic_write(recovery_checkpoint_path(partition_dir), cp.encode())
