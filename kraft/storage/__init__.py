"""On-disk state: segmented log, leader-epoch cache, snapshots, quorum-state, meta.properties.

The names most callers need are re-exported here; see docs/storage.md for the layout and the
durability rules, and `kraft.storage.log` for the append/flush thread-safety contract.
"""

from kraft.storage.epoch_cache import (
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
    end_offset_for_epoch,
)
from kraft.storage.errors import (
    AlreadyFormattedError,
    CorruptLogError,
    DirectoryLockedError,
    InvalidAppendError,
    InvalidSnapshotError,
    NotFormattedError,
    OffsetOutOfRangeError,
    StorageConfigError,
    StorageError,
)
from kraft.storage.layout import BOOTSTRAP_SNAPSHOT_ID, SnapshotId
from kraft.storage.loader import MetadataDir, VotersHistoryEntry, open_metadata_dir
from kraft.storage.log import RecoveryReport, SegmentedLog
from kraft.storage.meta_properties import (
    MetaProperties,
    read_meta_properties,
    write_meta_properties,
)
from kraft.storage.quorum_state import QuorumStateData, QuorumStateStore
from kraft.storage.snapshots import SnapshotReader, SnapshotStore, SnapshotWriter

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "AlreadyFormattedError",
    "CorruptLogError",
    "DirectoryLockedError",
    "EpochEndOffset",
    "EpochEntry",
    "InvalidAppendError",
    "InvalidSnapshotError",
    "LeaderEpochCache",
    "MetaProperties",
    "MetadataDir",
    "NotFormattedError",
    "OffsetOutOfRangeError",
    "QuorumStateData",
    "QuorumStateStore",
    "RecoveryReport",
    "SegmentedLog",
    "SnapshotId",
    "SnapshotReader",
    "SnapshotStore",
    "SnapshotWriter",
    "StorageConfigError",
    "StorageError",
    "VotersHistoryEntry",
    "end_offset_for_epoch",
    "open_metadata_dir",
    "read_meta_properties",
    "write_meta_properties",
]
