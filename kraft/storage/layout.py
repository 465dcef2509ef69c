"""File and directory names of a KRaft metadata log directory (Kafka's exact spellings)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-{METADATA_PARTITION}"

META_PROPERTIES = "meta.properties"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
LOCK_FILE = ".lock"
QUORUM_STATE = "quorum-state"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SNAPSHOT_SUFFIX = ".checkpoint"
PART_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"

_SEGMENT_RE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_PART_RE = re.compile(r"^(\d{20})-(\d{10})-\d*\.checkpoint\.part$")
_DELETED_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint\.deleted$")


def offset_name(offset: int) -> str:
    """The 20-digit zero-padded form Kafka uses for segment base offsets."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    return f"{offset:020d}"


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    """`00000000000000000000.log` (or `.index`, `.timeindex`) for a segment base offset."""
    return offset_name(base_offset) + suffix


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment/index file name, or None for any other name."""
    m = _SEGMENT_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), "." + m.group(2)


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A KRaft snapshot id: the exclusive end offset and the epoch of the last contained record."""

    end_offset: int
    epoch: int

    def __post_init__(self) -> None:
        if self.end_offset < 0 or self.epoch < 0:
            raise ValueError(f"invalid snapshot id {self.end_offset}-{self.epoch}")

    def file_name(self) -> str:
        """`<20-digit end offset>-<10-digit epoch>.checkpoint`."""
        return f"{self.end_offset:020d}-{self.epoch:010d}{SNAPSHOT_SUFFIX}"

    def deleted_name(self) -> str:
        """The name a snapshot is renamed to before it is removed."""
        return f"{self.end_offset:020d}-{self.epoch:010d}{DELETED_SUFFIX}"

    def part_prefix(self) -> str:
        """Prefix of the temporary `.part` file (random digits follow, as in Kafka)."""
        return f"{self.end_offset:020d}-{self.epoch:010d}-"

    def __str__(self) -> str:
        return f"{self.end_offset}-{self.epoch}"


BOOTSTRAP_SNAPSHOT_ID = SnapshotId(0, 0)
"""The (0, 0) snapshot `kafka-storage format` writes for dynamic quorums; never served."""


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    """The id of a final snapshot file name, or None."""
    m = _SNAPSHOT_RE.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


def parse_part_file_name(name: str) -> SnapshotId | None:
    """The id of a partial (`.checkpoint.part`) snapshot file name, or None."""
    m = _PART_RE.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


def parse_deleted_file_name(name: str) -> SnapshotId | None:
    """The id of a snapshot marked for deletion (`.checkpoint.deleted`), or None."""
    m = _DELETED_RE.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


def partition_dir(metadata_dir: Path | str) -> Path:
    """`<metadata.log.dir>/__cluster_metadata-0`."""
    return Path(metadata_dir) / METADATA_PARTITION_DIR
