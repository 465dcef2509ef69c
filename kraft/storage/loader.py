"""Opening a formatted metadata directory at startup: everything the raft core starts from.

`open_metadata_dir` takes the directory lock, checks meta.properties, recovers snapshots and
the log (see `SegmentedLog.open`), applies Kafka's start-up rules for snapshots, reads
quorum-state, and collects the voters history: every KRaftVersion and KRaftVoters control
record from the latest snapshot and from the log after it, with its offset.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path

from kraft.protocol.uuid import Uuid
from kraft.records.batch import RecordBatch
from kraft.records.control import KRaftVersionRecord, VotersRecord, decode_control_batch
from kraft.storage.errors import DirectoryLockedError, NotFormattedError, StorageError
from kraft.storage.layout import LOCK_FILE, SnapshotId, partition_dir
from kraft.storage.log import DEFAULT_SEGMENT_BYTES, SegmentedLog
from kraft.storage.meta_properties import (
    MetaProperties,
    read_meta_properties,
    write_meta_properties,
)
from kraft.storage.partition_metadata import read_partition_metadata, write_partition_metadata
from kraft.storage.quorum_state import QuorumStateData, QuorumStateStore
from kraft.storage.snapshot_load import read_snapshot_control
from kraft.storage.snapshots import SnapshotStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class VotersHistoryEntry:
    """A KRaftVersion or KRaftVoters record and the offset it takes effect at.

    Log records carry their own offset; records from a snapshot carry the snapshot's end
    offset - 1 (the last offset the snapshot covers), as Kafka's voter-set history does.
    """

    offset: int
    record: KRaftVersionRecord | VotersRecord
    from_snapshot: bool


@dataclass(slots=True)
class MetadataDir:
    """An opened metadata log directory. Call `close()` (or use `with`) to release it."""

    path: Path
    partition_dir: Path
    meta: MetaProperties
    log: SegmentedLog
    snapshots: SnapshotStore
    latest_snapshot: SnapshotId | None
    quorum_state_store: QuorumStateStore
    quorum_state: QuorumStateData | None
    voters_history: tuple[VotersHistoryEntry, ...]
    _lock_fd: int

    @property
    def kraft_version(self) -> int:
        """The latest kraft.version in the history (0 when none was ever written)."""
        for entry in reversed(self.voters_history):
            if isinstance(entry.record, KRaftVersionRecord):
                return entry.record.kraft_version
        return 0

    @property
    def latest_voters(self) -> VotersHistoryEntry | None:
        """The newest VotersRecord (committed or not), if any."""
        for entry in reversed(self.voters_history):
            if isinstance(entry.record, VotersRecord):
                return entry
        return None

    def close(self) -> None:
        """Flush and close the log and release the directory lock. Idempotent."""
        self.log.close()
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> MetadataDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take_lock(path: Path) -> int:
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DirectoryLockedError(
            f"{path / LOCK_FILE} is locked: another process is using {path}"
        ) from None
    return fd


def control_records_of(batch: RecordBatch) -> list[VotersHistoryEntry]:
    """The KRaftVersion/KRaftVoters records of a control batch, with their offsets."""
    out: list[VotersHistoryEntry] = []
    if not batch.is_control:
        return out
    for offset, rec in enumerate(decode_control_batch(batch), start=batch.base_offset):
        if isinstance(rec, KRaftVersionRecord | VotersRecord):
            out.append(VotersHistoryEntry(offset, rec, False))
    return out


def _give_directory_id(root: Path, meta: MetaProperties) -> MetaProperties:
    """A fresh directory id for a meta.properties written without one, written back.

    Kafka's start-up does the same for a log directory formatted before directory ids
    existed. The rewrite is atomic and durable (a new file, fsync, rename, fsync of the
    directory), under the directory lock, and keeps every other key.
    """
    meta = replace(meta, directory_id=Uuid.random())
    write_meta_properties(root, meta)
    log.info("event=directory_id_generated path=%s directory_id=%s", root, meta.directory_id)
    return meta


def open_metadata_dir(
    path: Path | str,
    *,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    expected_cluster_id: str | None = None,
    expected_node_id: int | None = None,
    full_scan: bool = False,
    preallocate_bytes: int = 0,
) -> MetadataDir:
    """Open a formatted metadata directory for the runtime.

    `full_scan` validates every batch of the log instead of trusting what lies below the
    recovery point (see `SegmentedLog.open`); `preallocate_bytes` turns on the log's
    write-through appends. Raises NotFormattedError when meta.properties
    is missing or disagrees with the expected
    cluster/node id, CorruptLogError for corruption that recovery must not repair, and
    DirectoryLockedError (a StorageError) when another process holds the directory lock.
    """
    root = Path(path)
    meta = read_meta_properties(root)
    if meta is None:
        raise NotFormattedError(f"{root} is not formatted: no meta.properties (run `kraft format`)")
    if expected_cluster_id is not None and meta.cluster_id != expected_cluster_id:
        raise NotFormattedError(
            f"{root}/meta.properties has cluster.id {meta.cluster_id}, expected {expected_cluster_id}"
        )
    if expected_node_id is not None and meta.node_id != expected_node_id:
        raise NotFormattedError(
            f"{root}/meta.properties has node.id {meta.node_id}, expected {expected_node_id}"
        )
    lock_fd = _take_lock(root)
    try:
        if meta.directory_id is None:
            meta = _give_directory_id(root, meta)
        pdir = partition_dir(root)
        pdir.mkdir(exist_ok=True)
        if read_partition_metadata(pdir) is None:
            write_partition_metadata(pdir)
        snapshots = SnapshotStore(pdir)
        snapshots.recover()
        mlog = SegmentedLog.open(pdir, segment_bytes=segment_bytes, full_scan=full_scan,
                                 preallocate_bytes=preallocate_bytes)
        latest = snapshots.latest()
        if mlog.last_epoch < 0 and mlog.log_end_offset > mlog.log_start_offset:
            # Never decide "older than the snapshot" without knowing the log's epoch: that
            # would delete records that may be committed.
            raise StorageError(
                f"{pdir}: the log holds offsets {mlog.log_start_offset}-"
                f"{mlog.log_end_offset - 1} but no leader epoch for them; refusing to start "
                "(reopen with a full scan to rebuild the leader-epoch-checkpoint)"
            )
        log_epoch = max(mlog.last_epoch, 0)
        if latest is not None and (
            latest.epoch > log_epoch
            or (latest.epoch == log_epoch and latest.end_offset > mlog.log_end_offset)
        ):
            # Kafka's truncateToLatestSnapshot: a follower crashed after downloading a
            # snapshot but before truncating its log to it.
            mlog.truncate_fully_and_start_at(latest.end_offset)
        earliest = snapshots.earliest()
        if earliest is not None and mlog.log_start_offset < earliest.end_offset <= mlog.log_end_offset:
            mlog.advance_log_start_offset(earliest.end_offset)
        snapshots.delete_below_log_start(mlog.log_start_offset)
        if mlog.log_start_offset > 0 and not any(
            s.end_offset >= mlog.log_start_offset for s in snapshots.ids()
        ):
            raise StorageError(
                f"{pdir}: the log starts at offset {mlog.log_start_offset} but no snapshot "
                "covers the offsets below it"
            )
        latest = snapshots.latest()
        history: list[VotersHistoryEntry] = []
        from_offset = mlog.log_start_offset
        if latest is not None:
            # Only the header batch: the data is checked when the state machine loads it.
            control = read_snapshot_control(snapshots.path(latest), latest)
            for rec in control.records:
                if isinstance(rec, KRaftVersionRecord | VotersRecord):
                    history.append(VotersHistoryEntry(latest.end_offset - 1, rec, True))
            from_offset = max(from_offset, latest.end_offset)
        if from_offset < mlog.log_end_offset:
            for batch in mlog.batches(from_offset):
                if batch.is_control and batch.last_offset >= from_offset:
                    history.extend(
                        e for e in control_records_of(batch) if e.offset >= from_offset
                    )
        qstore = QuorumStateStore(pdir)
        qstate = qstore.read()
    except BaseException:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)
        raise
    log.info(
        "event=metadata_dir_opened dir=%s node_id=%d cluster_id=%s log_start_offset=%d "
        "log_end_offset=%d latest_snapshot=%s voters_records=%d",
        root, meta.node_id, meta.cluster_id, mlog.log_start_offset, mlog.log_end_offset,
        latest, len(history),
    )
    return MetadataDir(
        path=root,
        partition_dir=pdir,
        meta=meta,
        log=mlog,
        snapshots=snapshots,
        latest_snapshot=latest,
        quorum_state_store=qstore,
        quorum_state=qstate,
        voters_history=tuple(history),
        _lock_fd=lock_fd,
    )
