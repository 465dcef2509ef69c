"""The segmented metadata log: append, read, roll, truncate, crash recovery, group commit.

Files in the partition directory: `<20-digit base offset>.log` segments of record batches
(v2), with their `.index`/`.timeindex`, and the `leader-epoch-checkpoint`.

Thread-safety contract
----------------------
* One *owner* thread (the runtime's event loop) calls every method except `flush`, and never
  two at once: `append`, `read`, `batches`, `truncate_to`, `truncate_fully_and_start_at`,
  `advance_log_start_offset`, `close` and the read-only properties.
* `flush()` may be called from **one other thread** (the disk writer) while the owner keeps
  appending. `append` only writes into the OS page cache (`pwrite`, no fsync) under a short
  internal lock; `flush` takes that lock only to capture the end offset and the files to sync,
  then fsyncs **without** holding it, so appends are never blocked by a disk flush. Group
  commit is simply many appends followed by one flush.
* `flush()` returns the durable end offset: every offset below it is on stable storage. It
  covers at least everything appended before `flush` was called (appends racing with it may
  or may not be covered). `durable_end_offset` reads the last value a flush published.
* Truncations, log-start advances and `close` wait for an in-progress flush (they take the
  flush lock) and fsync what they changed before returning, so a reported durable offset is
  never silently undone by a crash; they lower `durable_end_offset` to the new end.
* With a kernel sync engine attached (`use_kernel_sync`; io_uring or native AIO, see
  `kraft.storage.sync_engine`), the owner may instead start a flush that the kernel carries
  out (`start_flush`) and publish it when the kernel reports it done (`finish_flush`); every
  flush then happens on the owner thread, one at a time. `flush`, truncations, log-start
  advances and `close` first wait for a kernel flush in flight.

Preallocation and write-through appends
---------------------------------------
With `preallocate_bytes` > 0 (`kraft.log.preallocate.bytes`, off by default, as Kafka's
`log.preallocate`), an append made with `write_through=True` (a follower that fsyncs before it
acknowledges) is written with `O_DIRECT | O_DSYNC`: the 4 KiB blocks holding the new bytes go
to the device from an aligned buffer, inside space ahead of the segment's end that was
zero-filled and synced beforehand, so the write needs no size change made durable (a journal
commit, or the inode's block where ext4 runs without a journal) and no page writeback, and it
is durable when `append` returns (the next `flush` has nothing left to sync for it). The
active segment's file is then longer than its batches: the rest is zeros. A roll
and `close` cut the file back to its batches (fsynced before the next segment exists), a
truncation cuts it as before, and `open` trims zeros left by a crash like any torn tail
(logged as `preallocated_tail_trimmed`). Where the filesystem refuses `O_DIRECT` (tmpfs before
Linux 6.6, some network filesystems), the append falls back to the page cache and the flush.
"""

from __future__ import annotations

import bisect
import errno
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kraft.protocol.errors import ProtocolError, TruncatedInputError
from kraft.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    PREALLOCATION_BLOCK,
    RecordBatch,
    batch_header,
    zero_tail,
)
from kraft.storage.durability import fsync_dir, sync_data
from kraft.storage.epoch_cache import (
    EpochEntry,
    LeaderEpochCache,
    checkpoint_path,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)
from kraft.storage.errors import (
    CorruptLogError,
    InvalidAppendError,
    OffsetOutOfRangeError,
    StorageError,
)
from kraft.storage.index import DEFAULT_INDEX_INTERVAL_BYTES, SegmentIndex, append_entry
from kraft.storage.layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    parse_segment_file_name,
    segment_file_name,
)
from kraft.storage.recovery_point import (
    RecoveryCheckpoint,
    RecoveryCheckpointError,
    read_recovery_checkpoint,
    recovery_checkpoint_path,
    write_recovery_checkpoint,
)
from kraft.storage.sync_engine import SyncEngine

try:  # the native lane's scan of an append (the same checks, in C), where it was built
    from kraft.raft._lane import scan_appended as _native_scan
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_scan = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 1 << 30
"""`metadata.log.segment.bytes` default (1 GiB)."""

MAX_BATCH_BYTES = 8 * 1024 * 1024
"""Largest batch the metadata log accepts (`max.message.bytes` of KafkaMetadataLog)."""
TAIL_BATCHES = 256
"""Batch positions of the active segment kept in memory for reads near the log end."""
RECENT_BYTES = 1024 * 1024
"""Bytes of the latest appends kept in memory for reads of them (see `SegmentedLog._pread`)."""
RECENT_APPENDS = 8
"""At most this many of the latest appends are kept in memory (see `SegmentedLog._pread`)."""
DIRECT_BLOCK = PREALLOCATION_BLOCK
"""Alignment (file position, length and memory) of a write-through append's `O_DIRECT` write;
preallocated space ends on a multiple of it."""
DIRECT_MAX_BYTES = 1024 * 1024
"""Larger write-through appends go through the page cache and the flush instead."""
DEFAULT_RECOVERY_CHECKPOINT_INTERVAL_S = 1.0
"""How often (at most) the recovery point is checkpointed while flushes advance it (Kafka's
`log.flush.offset.checkpoint.interval.ms`, 60 s there). A kill -9 re-validates at most about
this much of the newest log on the next open."""

_MAX_SANE_BATCH = 64 * 1024 * 1024
"""Recovery treats a declared batch length above this as garbage rather than a real batch."""


@dataclass(slots=True)
class Segment:
    """One `.log` file plus its in-memory index; `next_offset` is the offset after its last batch."""

    base_offset: int
    path: Path
    fd: int
    size: int
    next_offset: int
    index: SegmentIndex
    index_fd: int = -1
    time_index_fd: int = -1
    epochs: list[EpochEntry] = field(default_factory=list)

    @property
    def index_path(self) -> Path:
        """`<base>.index`."""
        return self.path.with_suffix(INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        """`<base>.timeindex`."""
        return self.path.with_suffix(TIME_INDEX_SUFFIX)

    def open_index_files(self) -> None:
        """Open the index files for appending (active segment only)."""
        if self.index_fd < 0:
            self.index_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT, 0o644)
            self.time_index_fd = os.open(self.time_index_path, os.O_RDWR | os.O_CREAT, 0o644)

    def close_index_files(self) -> None:
        """Close the index file descriptors (the data stays as written)."""
        for fd in (self.index_fd, self.time_index_fd):
            if fd >= 0:
                os.close(fd)
        self.index_fd = self.time_index_fd = -1

    def close(self) -> None:
        """Close every descriptor of the segment."""
        self.close_index_files()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `SegmentedLog.open` found and repaired."""

    segments: int
    log_start_offset: int
    log_end_offset: int
    truncated_bytes: int = 0
    truncated_file: Path | None = None
    truncated_at_position: int | None = None
    indexes_rebuilt: tuple[Path, ...] = ()
    epoch_cache_rebuilt: bool = False
    recovery_point: int | None = None
    """The checkpointed recovery point the open trusted, or None after a full scan."""
    clean_shutdown: bool = False
    """The checkpoint came from a clean close and matched the log's end exactly."""
    full_scan_reason: str | None = None
    """Why every batch was validated (no usable checkpoint, or a full scan was asked for)."""
    segments_scanned: int = 0
    """Segments whose batches were all validated from position 0."""
    bytes_scanned: int = 0
    """Bytes of batches validated (header, CRC, offsets, epochs); the rest was trusted."""
    bytes_trusted: int = 0
    """Bytes below the recovery point that were not read (their index files were loaded)."""


class _DirectWriter:
    """The active segment's `O_DIRECT | O_DSYNC` descriptor and the aligned copy of its last
    block (see the module docstring).

    `buf[:used]` holds the file's bytes from position `blk` (a multiple of DIRECT_BLOCK) to
    the segment's end; everything after `used` is zero, so that a write of whole blocks puts
    zeros, never stale bytes, after the last batch. `blk` is -1 when the copy is not known
    (after an append through the page cache): the next write reads the head of its block.
    `allocated` is how far the file is known to extend.
    """

    __slots__ = ("allocated", "blk", "buf", "fd", "seg_base", "used", "view")

    def __init__(self, seg_base: int, fd: int, allocated: int) -> None:
        self.seg_base = seg_base
        self.fd = fd
        self.buf = mmap.mmap(-1, DIRECT_MAX_BYTES + 2 * DIRECT_BLOCK)  # page-aligned, zeros
        self.view = memoryview(self.buf)
        self.blk = -1
        self.used = 0
        self.allocated = allocated

    def close(self) -> None:
        os.close(self.fd)
        self.view.release()
        self.buf.close()


class SegmentedLog:
    """The metadata log of one partition directory. Open it with `SegmentedLog.open`.

    See the module docstring for the thread-safety contract of `append` and `flush`.
    """

    def __init__(
        self,
        directory: Path,
        segments: list[Segment],
        epoch_cache: LeaderEpochCache,
        *,
        segment_bytes: int,
        index_interval_bytes: int,
        report: RecoveryReport,
        log_start_offset: int | None = None,
        recovery_checkpoint_interval_s: float | None = DEFAULT_RECOVERY_CHECKPOINT_INTERVAL_S,
        preallocate_bytes: int = 0,
    ) -> None:
        if preallocate_bytes < 0:
            raise ValueError(f"preallocate_bytes {preallocate_bytes} is negative")
        self.directory = directory
        self.preallocate_bytes = (
            (preallocate_bytes + DIRECT_BLOCK - 1) // DIRECT_BLOCK * DIRECT_BLOCK
        )
        """Zero-filled bytes kept ahead of the active segment's end for write-through appends
        (0: none, and every append goes through the page cache)."""
        self._direct: _DirectWriter | None = None
        self._direct_refused = not hasattr(os, "O_DIRECT")
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.recovery = report
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._epochs = epoch_cache
        # Lock order: _flush_lock, then _ckpt_lock, then _lock.
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._log_start = segments[0].base_offset if log_start_offset is None else log_start_offset
        self._durable = self.log_end_offset
        # Where the durable end is: (segment base offset, file position). Guarded by _lock.
        self._durable_at = (segments[-1].base_offset, segments[-1].size)
        # Segments whose index files changed since the last recovery checkpoint (by base).
        self._index_dirty: set[int] = set()
        self._ckpt_interval = recovery_checkpoint_interval_s
        # The checkpoint thread (one per log, started at the first need) and its signals: a
        # checkpoint is due (set under _lock), wake the thread, stop it (close).
        self._ckpt_thread: threading.Thread | None = None
        self._ckpt_due = False
        self._ckpt_wake = threading.Event()
        self._ckpt_stop = threading.Event()
        self._ckpt_last_at = time.monotonic()
        self._ckpt_written: RecoveryCheckpoint | None = None
        self._unsynced: dict[int, Segment] = {}
        self._dir_dirty = False
        self._epochs_written: tuple[EpochEntry, ...] = epoch_cache.entries
        self._closed = False
        self._failed: BaseException | None = None
        self._kernel: SyncEngine | None = None
        # The kernel flush in flight: the end offset and position it makes durable, and when
        # it was started (time.perf_counter).
        self._async: tuple[int, tuple[int, int], float] | None = None
        self.on_flush_time: Callable[[float], None] | None = None
        """Called with the seconds each flush that wrote to disk took: the fsyncs of `flush`
        (on its thread), or a kernel flush from `start_flush` until `finish_flush` or a wait
        saw it done (owner thread). The node keeps them as a histogram, the measure of the
        disk that every commit waits for."""
        self._settled = False  # a kernel flush was finished by waiting, see take_settled
        # Positions of the most recently appended batches of the active segment (owner thread):
        # reads near the log end (fetches, apply) find their batch without scanning the file.
        self._tail_seg = -1
        self._tail_bases: list[int] = []
        self._tail_lasts: list[int] = []
        self._tail_pos: list[int] = []
        # The bytes of the latest appends to the active segment `_tail_seg` (owner thread),
        # contiguous, the file position of the first and the size of all: the fetches that
        # replicate an append and the apply that follows its commit (on a follower often after
        # the next append) read those bytes, from memory instead of the page cache (a pread
        # each).
        self._recent: list[bytes] = []
        self._recent_at = 0
        self._recent_size = 0

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        directory: Path | str,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        initial_offset: int = 0,
        full_scan: bool = False,
        recovery_checkpoint_interval_s: float | None = DEFAULT_RECOVERY_CHECKPOINT_INTERVAL_S,
        preallocate_bytes: int = 0,
    ) -> SegmentedLog:
        """Open (creating if needed) the log in `directory`, recovering from a crash.

        With a usable `recovery-point-checkpoint` (see `kraft.storage.recovery_point`), the
        segments below the recovery point are trusted: their index files are loaded and only
        the last indexed batch of each is re-read (to find where it ends); validation starts
        at the last indexed batch before the recovery point and covers everything after it.
        Without one (missing, corrupt, or disagreeing with the files: logged, never an error),
        or with `full_scan`, every batch of every segment is checked. Checked means header,
        CRC, offset continuity and epochs. A torn or corrupt tail of the last segment is
        truncated and logged; a problem anywhere else that is checked — or a bad batch
        followed by valid data — raises CorruptLogError naming the file and byte position,
        and nothing is modified. Index files and the epoch checkpoint are rebuilt when they
        disagree with the batches. All segment files are fsynced before returning, so
        `durable_end_offset == log_end_offset`, and a new recovery checkpoint at the log end
        offset is written. `recovery_checkpoint_interval_s` (None: only on open, truncation
        and close) is how often flushes may checkpoint the recovery point afterwards.
        `preallocate_bytes` turns on write-through appends (see the module docstring).
        """
        if segment_bytes < BATCH_HEADER_SIZE:
            raise ValueError(f"segment_bytes {segment_bytes} is too small")
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        bases: set[int] = set()
        strays: list[Path] = []
        for entry in sorted(os.listdir(d)):
            parsed = parse_segment_file_name(entry)
            if parsed is not None:
                if parsed[1] == LOG_SUFFIX:
                    bases.add(parsed[0])
            elif entry.endswith((".log.deleted", ".index.deleted", ".timeindex.deleted")):
                strays.append(d / entry)
        for entry in sorted(os.listdir(d)):
            parsed = parse_segment_file_name(entry)
            if parsed is not None and parsed[1] != LOG_SUFFIX and parsed[0] not in bases:
                strays.append(d / entry)
        ordered = sorted(bases)
        cp_file = checkpoint_path(d)
        stored: list[EpochEntry] | None
        try:
            stored = read_epoch_checkpoint(cp_file)
        except CorruptLogError as exc:
            log.warning("event=epoch_checkpoint_unreadable file=%s error=%r", cp_file, str(exc))
            stored = None
        trusted: _TrustedOpen | None = None
        reason: str | None = None
        unusable = False
        if full_scan:
            reason = "a full scan was requested"
        elif ordered:
            try:
                rp = read_recovery_checkpoint(d)
            except RecoveryCheckpointError as exc:
                rp, reason, unusable = None, f"unreadable recovery checkpoint: {exc}", True
            if rp is None and reason is None:
                reason = "no recovery checkpoint"
            elif rp is not None:
                planned = _open_from_recovery_point(d, ordered, index_interval_bytes, rp, stored)
                if isinstance(planned, str):
                    reason, unusable = f"recovery checkpoint {rp} not usable: {planned}", True
                else:
                    trusted = planned
        if trusted is not None:
            plans = trusted.plans
        else:
            if ordered:
                log.log(
                    logging.WARNING if unusable else logging.INFO,
                    "event=recovery_full_scan dir=%s segments=%d reason=%r",
                    d, len(ordered), reason,
                )
            plans = _scan_segments(d, ordered, index_interval_bytes)
        # No exception: decide the repair, then apply it.
        truncated_bytes = 0
        truncated_file: Path | None = None
        truncated_pos: int | None = None
        for plan in plans:
            if plan.truncate_to is not None:
                truncated_file = plan.path
                truncated_pos = plan.truncate_to
                truncated_bytes += plan.file_size - plan.truncate_to
        for path in strays:
            log.info("event=stray_file_removed file=%s", path)
            path.unlink(missing_ok=True)
        segments: list[Segment] = []
        cache = trusted.epochs if trusted is not None else LeaderEpochCache()
        first_checked = trusted.first_checked if trusted is not None else 0
        for i, plan in enumerate(plans):
            if plan.delete:
                truncated_bytes += plan.file_size
                log.warning(
                    "event=empty_segment_after_torn_tail_removed file=%s bytes=%d",
                    plan.path, plan.file_size,
                )
                for p in (plan.path, plan.path.with_suffix(INDEX_SUFFIX),
                          plan.path.with_suffix(TIME_INDEX_SUFFIX)):
                    p.unlink(missing_ok=True)
                continue
            fd = os.open(plan.path, os.O_RDWR)
            if plan.truncate_to is not None:
                zeros = _preallocated_tail(fd, plan.truncate_to, plan.file_size)
                os.ftruncate(fd, plan.truncate_to)
                if zeros:  # space preallocated for write-through appends, not a torn batch
                    log.info(
                        "event=preallocated_tail_trimmed file=%s position=%d bytes_dropped=%d "
                        "next_offset=%d", plan.path, plan.truncate_to,
                        plan.file_size - plan.truncate_to, plan.next_offset,
                    )
                else:
                    log.warning(
                        "event=torn_tail_truncated file=%s position=%d bytes_dropped=%d "
                        "last_valid_offset=%d next_offset=%d reason=%r",
                        plan.path, plan.truncate_to, plan.file_size - plan.truncate_to,
                        plan.next_offset - 1, plan.next_offset, plan.reason,
                    )
            if i >= first_checked:
                # Below the recovery point the files were fsynced before it was checkpointed.
                os.fsync(fd)
            seg = Segment(
                base_offset=plan.base_offset,
                path=plan.path,
                fd=fd,
                size=plan.valid_size,
                next_offset=plan.next_offset,
                index=plan.index,
            )
            if trusted is None:  # a trusted open's cache already holds the scanned epochs
                for e in plan.epochs:
                    cache.assign(e.epoch, e.start_offset)
            segments.append(seg)
        if not segments:
            segments.append(_create_segment(d, initial_offset, index_interval_bytes))
        log_start = segments[0].base_offset
        if trusted is not None and log_start < trusted.checkpoint.log_start_offset \
                <= segments[-1].next_offset:
            log_start = trusted.checkpoint.log_start_offset
            cache.truncate_from_start(log_start)
        # Kafka's loader does the same: an entry can only start at an offset the log holds
        # (a stored entry for the log start of an empty log goes).
        cache.truncate_from_end(segments[-1].next_offset)
        _assign_segment_epochs(segments, cache)
        rebuilt: list[Path] = []
        for i, seg in enumerate(segments):
            written = seg.index.sync_files(seg.index_path, seg.time_index_path)
            if written:
                rebuilt.append(seg.index_path)
                log.info(
                    "event=index_rebuilt file=%s entries=%d", seg.index_path, len(seg.index)
                )
            if written or i >= first_checked:
                _fsync_paths(seg.index_path, seg.time_index_path)
        segments[-1].open_index_files()
        epoch_rebuilt = stored != list(cache.entries)
        if epoch_rebuilt:
            write_epoch_checkpoint(cp_file, cache.entries)
            log.info(
                "event=epoch_cache_rebuilt file=%s entries=%d previous=%s",
                cp_file, len(cache.entries), "missing" if stored is None else len(stored),
            )
        fsync_dir(d)
        scanned = [p for p in plans if not p.delete]
        report = RecoveryReport(
            segments=len(segments),
            log_start_offset=log_start,
            log_end_offset=segments[-1].next_offset,
            truncated_bytes=truncated_bytes,
            truncated_file=truncated_file,
            truncated_at_position=truncated_pos,
            indexes_rebuilt=tuple(rebuilt),
            epoch_cache_rebuilt=epoch_rebuilt,
            recovery_point=trusted.checkpoint.recovery_point if trusted is not None else None,
            clean_shutdown=trusted.clean if trusted is not None else False,
            full_scan_reason=reason if trusted is None else None,
            segments_scanned=sum(1 for p in scanned if p.scanned_from == 0 and p.file_size > 0),
            bytes_scanned=sum(max(p.valid_size - p.scanned_from, 0) for p in scanned),
            bytes_trusted=sum(p.scanned_from for p in scanned),
        )
        log.info(
            "event=log_opened dir=%s segments=%d log_start_offset=%d log_end_offset=%d "
            "truncated_bytes=%d recovery_point=%s clean_shutdown=%s segments_scanned=%d "
            "bytes_scanned=%d bytes_trusted=%d",
            d, report.segments, report.log_start_offset, report.log_end_offset, truncated_bytes,
            report.recovery_point, report.clean_shutdown, report.segments_scanned,
            report.bytes_scanned, report.bytes_trusted,
        )
        opened = cls(
            d, segments, cache, segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes, report=report, log_start_offset=log_start,
            recovery_checkpoint_interval_s=recovery_checkpoint_interval_s,
            preallocate_bytes=preallocate_bytes,
        )
        # Everything is fsynced now: the log end is the recovery point (and a clean-shutdown
        # mark from the last close is consumed).
        with opened._ckpt_lock:
            opened._write_checkpoint_locked(clean=False)
        return opened

    # ------------------------------------------------------------------ properties

    @property
    def log_start_offset(self) -> int:
        """The first offset still readable."""
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended batch must start at (LEO, exclusive)."""
        return self._segments[-1].next_offset

    @property
    def durable_end_offset(self) -> int:
        """Every offset below this is fsynced (as published by the last flush/truncation)."""
        with self._lock:
            return self._durable

    @property
    def epoch_cache(self) -> LeaderEpochCache:
        """The leader-epoch cache (owner thread only; do not mutate)."""
        return self._epochs

    @property
    def last_epoch(self) -> int:
        """Epoch of the last batch in the log, or -1 when the log holds no batch."""
        return self._epochs.latest_epoch()

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The segments, oldest first (read-only view for tools and tests)."""
        return tuple(self._segments)

    def size_in_bytes(self) -> int:
        """Total bytes of all segment files."""
        return sum(s.size for s in self._segments)

    # ------------------------------------------------------------------ append

    def _scan_appended(self, buf: memoryview) -> tuple[list[tuple[int, int, int, int, int]], int]:
        """The batches of `buf` as an append at the log's end takes them: (position in `buf`,
        base offset, last offset, epoch, max timestamp) each, and the end offset after them.
        Raises InvalidAppendError unless they continue the log, whole, with good CRCs, within
        the size limit and with epochs that do not go down.

        The C scan takes the batches when every check passes: it touches far less memory (on a
        follower taking one written batch after a quiet spell, with the caches cold, 12-13 µs
        against the Python scan's 41-43: docs/journal/perf-43-quiet-follower.md). The Python scan
        below runs when one fails, and names what."""
        expected = self.log_end_offset
        last_epoch = self._epochs.latest_epoch()
        if _native_scan is not None:
            scanned = _native_scan(buf, expected, last_epoch, MAX_BATCH_BYTES)
            if scanned is not None:
                return scanned
        metas: list[tuple[int, int, int, int, int]] = []  # rel pos, base, last, epoch, max ts
        pos = 0
        while pos < len(buf):
            try:
                batch = RecordBatch.parse(buf, pos)
            except ProtocolError as exc:
                raise InvalidAppendError(f"append at offset {expected}: {exc}") from None
            if not batch.is_valid():
                raise InvalidAppendError(
                    f"append at offset {expected}: batch with base offset {batch.base_offset} "
                    "fails its CRC check"
                )
            if batch.base_offset != expected:
                raise InvalidAppendError(
                    f"append: batch base offset {batch.base_offset} does not continue the log "
                    f"at {expected}"
                )
            if batch.size_in_bytes > MAX_BATCH_BYTES:
                raise InvalidAppendError(
                    f"append: batch at offset {expected} is {batch.size_in_bytes} bytes, "
                    f"above the {MAX_BATCH_BYTES}-byte limit"
                )
            epoch = batch.partition_leader_epoch
            if epoch < last_epoch:
                raise InvalidAppendError(
                    f"append: batch at offset {expected} has epoch {epoch} below the log's "
                    f"last epoch {last_epoch}"
                )
            metas.append((pos, batch.base_offset, batch.last_offset, epoch, batch.max_timestamp))
            last_epoch = epoch
            expected = batch.next_offset
            pos += batch.size_in_bytes
            del batch
        return metas, expected

    def append(self, data: bytes | bytearray | memoryview, *, write_through: bool = False) -> int:
        """Append one or more complete batches; returns the new log end offset. No fsync.

        `write_through`: the caller flushes right after (a follower about to acknowledge).
        With preallocation on, the bytes are then written `O_DIRECT | O_DSYNC` and are durable
        when this returns; a failure of that write fails the log, as a failed fsync does.

        The first batch must start at `log_end_offset`, each following batch where the
        previous one ended; epochs must not decrease; every CRC must match and no batch may
        exceed 8 MiB. Raises InvalidAppendError (and writes nothing) otherwise. Rolls to a
        new segment first when the active one would exceed `segment_bytes`.
        """
        self._check_usable()
        buf = memoryview(data)
        metas, expected = self._scan_appended(buf)
        if not metas:
            return self.log_end_offset
        synced_in = 0.0
        with self._lock:
            active = self._segments[-1]
            if active.size > 0 and active.size + len(buf) > self.segment_bytes:
                active = self._roll_locked()
            start = active.size
            writer = None
            if write_through and self.preallocate_bytes and len(buf) <= DIRECT_MAX_BYTES:
                writer = self._direct_writer(active)
            if writer is not None:
                began = time.perf_counter()
                try:
                    self._write_direct(writer, active, buf, start)
                    synced_in = time.perf_counter() - began
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise self._flush_failed(exc) from exc
                    # the device's block size or alignment rules refused the write (nothing
                    # was written): the page cache from now on
                    self._refuse_direct(exc)
                    writer = None
            if writer is None:
                written = 0
                while written < len(buf):
                    written += os.pwrite(active.fd, buf[written:], start + written)
                if self._direct is not None:
                    self._direct.blk = -1  # its copy of the last block is stale now
            if writer is None:
                self._unsynced[active.base_offset] = active
            self._appended_locked(active, start, data if type(data) is bytes else buf, metas,
                                  expected)
        if synced_in:
            report = self.on_flush_time
            if report is not None:
                report(synced_in)
        return expected

    def _appended_locked(self, active: Segment, start: int, data: bytes | memoryview,
                         metas: list[tuple[int, int, int, int, int]], expected: int) -> None:
        """The bookkeeping of batches written at `start` of the active segment (under _lock):
        index entries, the epoch cache, the segment's size and end, the tail's positions and
        the recent bytes."""
        for rel, base, last, epoch, max_ts in metas:
            before_t = active.index.time_entry_count()
            if active.index.observe(start + rel, last, max_ts):
                self._index_dirty.add(active.base_offset)
                o_entry, t_entry = active.index.last_entries_bytes()
                append_entry(active.index_fd, o_entry, (len(active.index) - 1) * 8)
                if active.index.time_entry_count() > before_t:
                    append_entry(
                        active.time_index_fd, t_entry,
                        (active.index.time_entry_count() - 1) * 12,
                    )
            if self._epochs.assign(epoch, base):
                active.epochs.append(EpochEntry(epoch, base))
        active.size = start + len(data)
        active.next_offset = expected
        if self._tail_seg != active.base_offset:
            self._forget_tail()
            self._tail_seg = active.base_offset
        self._keep_recent(start, data)
        for rel, base, last, _epoch, _ts in metas:
            self._tail_bases.append(base)
            self._tail_lasts.append(last)
            self._tail_pos.append(start + rel)
        if len(self._tail_lasts) > 2 * TAIL_BATCHES:
            del self._tail_bases[:-TAIL_BATCHES]
            del self._tail_lasts[:-TAIL_BATCHES]
            del self._tail_pos[:-TAIL_BATCHES]

    def adopt_written(self, write_pos: int, durable_end: int | None = None) -> int:
        """Owner thread: take as appended the batches that another writer (a native lane)
        wrote at the end of the active segment, up to file position `write_pos`, and as
        durable all of them, or (with `durable_end`) the log below that offset when it is the
        new log end; returns the new log end offset.

        They are read back and checked as `append` checks its batches; the index, the epoch
        cache, the tail and the durable end then move as if `append` and `flush` had written
        them. Raises InvalidAppendError, and takes nothing, when the bytes there are not whole
        batches that continue the log, or `write_pos` is before the segment's end.
        """
        self._check_usable()
        with self._lock:
            active = self._segments[-1]
            start = active.size
        if write_pos < start:
            raise InvalidAppendError(
                f"adopt: write position {write_pos} is before the end {start} of {active.path}"
            )
        if write_pos == start:
            if durable_end is not None:
                with self._lock:
                    end = self._segments[-1].next_offset
                    if durable_end >= end > self._durable:
                        self._durable = end  # synced since it was adopted
                        self._durable_at = (active.base_offset, active.size)
            return self.log_end_offset
        data = self._pread(active, write_pos - start, start)
        if len(data) != write_pos - start:
            raise InvalidAppendError(
                f"adopt: {active.path} holds {start + len(data)} bytes, not {write_pos}"
            )
        metas, expected = self._scan_appended(memoryview(data))
        with self._lock:
            self._appended_locked(active, start, data, metas, expected)
            if self._direct is not None:
                self._direct.blk = -1  # its copy of the last block is stale now
            if expected > self._durable and (durable_end is None or durable_end >= expected):
                self._durable = expected
                self._durable_at = (active.base_offset, active.size)
        self._schedule_checkpoint()
        return expected

    # ------------------------------------------------------------------ write-through

    def _direct_writer(self, active: Segment) -> _DirectWriter | None:
        """The active segment's write-through writer (under _lock); None where the
        filesystem refuses O_DIRECT (logged once, then the page cache is used)."""
        writer = self._direct
        if writer is not None:
            if writer.seg_base == active.base_offset:
                return writer
            self._close_direct()
        if self._direct_refused:
            return None
        try:
            fd = os.open(active.path, os.O_WRONLY | os.O_DIRECT | os.O_DSYNC)
        except OSError as exc:
            self._refuse_direct(exc)
            return None
        writer = self._direct = _DirectWriter(active.base_offset, fd, os.fstat(active.fd).st_size)
        return writer

    def _refuse_direct(self, exc: OSError) -> None:
        """The filesystem refused a write-through: page cache and flush from now on."""
        self._direct_refused = True
        self._close_direct()
        log.warning(
            "event=write_through_unavailable dir=%s error=%r: appends go through the page cache "
            "and the flush", self.directory, str(exc),
        )

    def _close_direct(self) -> None:
        writer, self._direct = self._direct, None
        if writer is not None:
            writer.close()

    def _write_direct(self, w: _DirectWriter, seg: Segment, data: memoryview, start: int) -> None:
        """Write `data` at `start` (the segment's end) through `w`, durable on return."""
        end = start + len(data)
        if end > w.allocated:
            self._preallocate(w, seg, end)
        blk = start - start % DIRECT_BLOCK
        buf = w.buf
        if w.blk != blk or w.used != start - blk:
            head = os.pread(seg.fd, start - blk, blk) if start > blk else b""
            if len(head) != start - blk:
                raise OSError(errno.EIO, f"short read of {seg.path} at {blk}")
            if w.used > len(head):
                buf[len(head):w.used] = bytes(w.used - len(head))
            buf[:len(head)] = head
            w.blk, w.used = blk, len(head)
        rel = start - blk
        buf[rel:rel + len(data)] = data
        size = (rel + len(data) + DIRECT_BLOCK - 1) // DIRECT_BLOCK * DIRECT_BLOCK
        w.used = rel + len(data)
        blocks = w.view[:size]
        try:
            done = os.pwrite(w.fd, blocks, blk)
        finally:
            blocks.release()  # no export of the map may outlive this call
        if done != size:
            w.blk = -1
            raise OSError(errno.EIO, f"short write-through write to {seg.path} at {blk}")
        last = end - end % DIRECT_BLOCK
        if last != blk:  # keep the last, partly filled block at the front, zeros after it
            tail = end - last
            buf[:tail] = buf[last - blk:end - blk]
            buf[tail:w.used] = bytes(w.used - tail)
            w.blk, w.used = last, tail

    def _preallocate(self, w: _DirectWriter, seg: Segment, end: int) -> None:
        """Zero-fill and sync the file up to `preallocate_bytes` past `end` (under _lock)."""
        size = os.fstat(seg.fd).st_size
        target = end + self.preallocate_bytes
        target += -target % DIRECT_BLOCK
        if size < target:
            zeros = bytes(min(target - size, 1 << 20))
            pos = size
            while pos < target:
                pos += os.pwrite(seg.fd, zeros[:target - pos], pos)
            sync_data(seg.fd)
            log.debug("event=segment_preallocated file=%s from=%d to=%d", seg.path, size, target)
        w.allocated = max(size, target)

    def _trim_preallocated(self, seg: Segment) -> None:
        """Cut a segment's file back to its batches and fsync that (under _lock)."""
        if os.fstat(seg.fd).st_size > seg.size:
            os.ftruncate(seg.fd, seg.size)
            os.fsync(seg.fd)

    def _keep_recent(self, start: int, data: bytes | memoryview) -> None:
        """Add an append at file position `start` of the active segment to the latest ones."""
        recent = self._recent
        if len(data) > RECENT_BYTES:
            self._forget_recent()
            return
        if not recent or self._recent_at + self._recent_size != start:
            self._forget_recent()
            self._recent_at = start
        else:
            while recent and (len(recent) >= RECENT_APPENDS
                              or self._recent_size + len(data) > RECENT_BYTES):
                dropped = recent.pop(0)
                self._recent_at += len(dropped)
                self._recent_size -= len(dropped)
        # bytes are immutable: kept without a copy; anything else is copied once
        recent.append(data if type(data) is bytes else bytes(data))
        self._recent_size += len(data)

    def _forget_recent(self) -> None:
        self._recent.clear()
        self._recent_size = 0

    def _forget_tail(self) -> None:
        self._tail_seg = -1
        self._forget_recent()
        self._tail_bases.clear()
        self._tail_lasts.clear()
        self._tail_pos.clear()

    def _roll_locked(self) -> Segment:
        old = self._segments[-1]
        if self.preallocate_bytes:  # (a write-through writer exists only then)
            self._close_direct()
            # before the next segment exists: only the last segment may end in zeros
            try:
                self._trim_preallocated(old)
            except OSError as exc:
                raise self._flush_failed(exc) from exc
        old.close_index_files()
        seg = _create_segment(self.directory, old.next_offset, self.index_interval_bytes)
        seg.open_index_files()
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        log.info(
            "event=segment_rolled file=%s base_offset=%d previous_bytes=%d",
            seg.path, seg.base_offset, old.size,
        )
        return seg

    # ------------------------------------------------------------------ flush

    def flush(self) -> int:
        """fsync everything appended so far; returns the durable end offset.

        Safe to call from one thread other than the owner while the owner appends (see the
        module docstring). Also persists the leader-epoch checkpoint when it changed and the
        directory when segments were created. An fsync failure marks the log failed: every
        later call raises, as the page cache can no longer be trusted.
        """
        self._settle_flush()
        with self._flush_lock:
            self._check_usable()
            with self._lock:
                target = self.log_end_offset
                target_at = (self._segments[-1].base_offset, self._segments[-1].size)
                to_sync = list(self._unsynced.values())
                self._unsynced.clear()
                dir_dirty = self._dir_dirty
                self._dir_dirty = False
                epochs = self._epochs.entries
            epochs_changed = epochs != self._epochs_written
            started = time.perf_counter()
            try:
                for seg in to_sync:
                    sync_data(seg.fd)
                if dir_dirty:
                    fsync_dir(self.directory)
                if epochs_changed:
                    write_epoch_checkpoint(checkpoint_path(self.directory), epochs)
                    self._epochs_written = epochs
            except OSError as exc:
                raise self._flush_failed(exc) from exc
            report = self.on_flush_time
            if report is not None and (to_sync or dir_dirty or epochs_changed):
                report(time.perf_counter() - started)
            self._settled = False  # the caller reports this flush, which covers the settled one
            return self._publish_durable(target, target_at)

    def _flush_failed(self, exc: OSError) -> StorageError:
        """Fail the log after a failed fsync; the error for the caller to raise."""
        self._failed = exc
        log.error("event=flush_failed dir=%s error=%r", self.directory, str(exc))
        return StorageError(f"fsync failed in {self.directory}: {exc}")

    def _publish_durable(self, target: int, target_at: tuple[int, int]) -> int:
        """A flush that started when the log ended at `target` is done: raise the durable end
        (never lower it: a later flush may have published more) and return it."""
        with self._lock:
            if target > self._durable:
                self._durable = target
                self._durable_at = target_at
            durable = self._durable
        self._schedule_checkpoint()
        return durable

    # ------------------------------------------------------------------ kernel flush

    def use_kernel_sync(self, kernel: SyncEngine | None) -> None:
        """Let `start_flush` hand fsyncs to `kernel` (owner thread; None: stop doing so)."""
        self._settle_flush()
        self._kernel = kernel

    @property
    def flush_in_flight(self) -> bool:
        """A flush started by `start_flush` is not finished yet."""
        return self._async is not None

    def start_flush(self) -> bool:
        """Owner thread: have the kernel fdatasync what was appended so far, and return at once.

        True when started; `finish_flush` publishes it once the kernel's eventfd is readable.
        False when it cannot start this way (no kernel sync attached, one already in flight,
        nothing to sync, a new segment file or a changed leader-epoch checkpoint to persist as
        well, or the kernel refused the request): the caller uses `flush` then.
        """
        kernel = self._kernel
        if kernel is None or self._async is not None:
            return False
        self._check_usable()
        with self._lock:
            if (self._dir_dirty or len(self._unsynced) != 1
                    or self._epochs.entries != self._epochs_written):
                return False
            (seg,) = self._unsynced.values()
            try:
                kernel.submit(seg.fd, seg.base_offset)
            except OSError as exc:
                log.warning("event=kernel_flush_refused dir=%s error=%r", self.directory,
                            str(exc))
                return False
            self._unsynced.clear()
            self._async = (self.log_end_offset,
                           (self._segments[-1].base_offset, self._segments[-1].size),
                           time.perf_counter())
        return True

    def finish_flush(self) -> int | None:
        """Owner thread, when the kernel's eventfd is readable: the durable end offset if the
        flush in flight is done (None: not yet, or none in flight). Raises StorageError, and
        fails the log, when the kernel's fdatasync failed."""
        kernel = self._kernel
        if kernel is None:
            return None
        done = kernel.reap()
        if self._async is None or not done:
            return None
        return self._flush_done(done[-1][1])

    def _settle_flush(self) -> None:
        """Wait for a kernel flush in flight and publish it (owner thread)."""
        if self._async is None or self._kernel is None:
            return
        done = self._kernel.wait()  # blocks until one completes; [] if the engine has none
        if not done:  # closed under the log: nothing will say whether the sync happened
            self._async = None
            raise self._flush_failed(OSError(errno.EIO, "the kernel flush in flight was lost"))
        self._flush_done(done[-1][1])
        self._settled = True

    def take_settled(self) -> int | None:
        """Owner thread: the durable end offset if a kernel flush was completed by waiting for
        it (in a truncation, a log-start advance or a snapshot install) since the last call or
        the last `flush`; its completion will not come from `finish_flush`, so the caller
        reports this instead. None otherwise."""
        if not self._settled:
            return None
        self._settled = False
        return self.durable_end_offset

    def _flush_done(self, result: int) -> int:
        assert self._async is not None
        target, target_at, started = self._async
        self._async = None
        if result < 0:
            raise self._flush_failed(OSError(-result, os.strerror(-result)))
        report = self.on_flush_time
        if report is not None:
            report(time.perf_counter() - started)
        return self._publish_durable(target, target_at)

    # ------------------------------------------------------------------ recovery point

    def checkpoint_recovery_point(self) -> None:
        """Checkpoint the durable end offset as the recovery point now (any thread).

        Flushes do this on their own at most every `recovery_checkpoint_interval_s`; a
        truncation below the recovery point and `close` (with the clean-shutdown mark) do it
        at once.
        """
        with self._ckpt_lock:
            self._check_usable()
            self._write_checkpoint_locked(clean=False)

    def _schedule_checkpoint(self) -> None:
        """Ask for a recovery checkpoint at most `recovery_checkpoint_interval_s` after the last
        one. The log's checkpoint thread writes it; it is started at the first need and then
        sleeps between requests. (A timer thread per checkpoint put a thread's start, hundreds
        of microseconds on a busy host, in the path of one append a second:
        docs/journal/perf-43-quiet-follower.md.)"""
        if self._ckpt_interval is None or self._ckpt_due:
            return  # (read without the lock: a stale True was set by a request not yet taken)
        start = None
        with self._lock:
            if self._ckpt_due or self._closed:
                return
            self._ckpt_due = True
            if self._ckpt_thread is None:
                start = self._ckpt_thread = threading.Thread(
                    target=self._checkpoint_loop, name=f"checkpoint {self.directory.name}",
                    daemon=True)
        self._ckpt_wake.set()
        if start is not None:
            start.start()

    def _checkpoint_loop(self) -> None:
        """The checkpoint thread: waits for a request, then for the interval since the last
        checkpoint, and writes one; until the log closes or fails."""
        assert self._ckpt_interval is not None
        while True:
            self._ckpt_wake.wait()
            delay = self._ckpt_last_at + self._ckpt_interval - time.monotonic()
            if self._ckpt_stop.wait(delay if delay > 0 else 0):
                return
            with self._ckpt_lock:
                with self._lock:
                    self._ckpt_wake.clear()
                    self._ckpt_due = False  # appends from now on ask again
                    if self._closed or self._failed is not None:
                        return
                try:
                    self._write_checkpoint_locked(clean=False)
                except OSError as exc:
                    # Only the restart gets slower (it validates from an older recovery point).
                    log.error("event=recovery_checkpoint_failed dir=%s error=%r", self.directory,
                              str(exc))

    def _write_checkpoint_locked(self, *, clean: bool) -> None:
        """Checkpoint the durable end as the recovery point (caller holds _ckpt_lock only).

        The index files changed since the last checkpoint are fsynced first: everything the
        checkpoint covers is on stable storage before the checkpoint says so.
        """
        with self._lock:
            offset = self._durable
            seg_base, position = self._durable_at
            if seg_base not in self._bases:
                # Its segment was deleted (log start advanced past it): nothing below the
                # first remaining segment exists, and nothing in it is known flushed.
                first = self._segments[0]
                offset, seg_base, position = first.base_offset, first.base_offset, 0
            cp = RecoveryCheckpoint(
                self._log_start, offset, seg_base, position,
                clean and offset == self.log_end_offset,
            )
            dirty = sorted(self._index_dirty)
            self._index_dirty.clear()
        self._ckpt_last_at = time.monotonic()
        if not dirty and cp == self._ckpt_written:
            return
        try:
            for base in dirty:
                _fsync_paths(self.directory / segment_file_name(base, INDEX_SUFFIX),
                             self.directory / segment_file_name(base, TIME_INDEX_SUFFIX))
            if cp != self._ckpt_written:
                write_recovery_checkpoint(self.directory, cp)
                self._ckpt_written = cp
        except OSError:
            with self._lock:
                self._index_dirty.update(dirty)
            raise

    def _lower_checkpoint_locked(self) -> None:
        """After a truncation: the checkpoint must not claim offsets the log no longer has.

        If it cannot be rewritten it is removed (the next open scans everything); if that
        fails too the log is failed, as a stale recovery point could trust unflushed data.
        """
        try:
            self._write_checkpoint_locked(clean=False)
            return
        except OSError as exc:
            log.error("event=recovery_checkpoint_failed dir=%s error=%r action=remove",
                      self.directory, str(exc))
        try:
            recovery_checkpoint_path(self.directory).unlink(missing_ok=True)
            fsync_dir(self.directory)
            self._ckpt_written = None
        except OSError as exc:
            self._failed = exc
            raise StorageError(
                f"cannot lower or remove the recovery checkpoint in {self.directory}: {exc}"
            ) from exc

    # ------------------------------------------------------------------ reads

    def _segment_for(self, offset: int) -> Segment:
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[max(i, 0)]

    def read(self, offset: int, max_bytes: int = MAX_BATCH_BYTES) -> bytes:
        """Whole batches starting with the one that contains `offset`, up to `max_bytes`.

        At least one batch is returned even if it is larger than `max_bytes` (as Kafka does);
        reads stay within one segment; at the log end offset the result is empty. Raises
        OffsetOutOfRangeError below the log start offset or above the log end offset.
        """
        self._check_usable()
        if offset < self._log_start or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside the log [{self._log_start}, {self.log_end_offset}]"
            )
        if offset == self.log_end_offset:
            return b""
        seg = self._segment_for(offset)
        if offset >= seg.next_offset:  # only possible on an empty active segment
            return b""
        pos = self._position_of(seg, offset)
        if pos >= seg.size:
            return b""
        # One pread for up to max_bytes, then cut at the last whole batch; a first batch
        # larger than max_bytes is read whole (at least one batch is returned).
        chunk = self._pread(seg, min(max_bytes, seg.size - pos), pos)
        end = 0
        while end + LOG_OVERHEAD <= len(chunk):
            size = int.from_bytes(chunk[end + 8:end + 12], "big", signed=True) + LOG_OVERHEAD
            if end + size > len(chunk):
                if end == 0:
                    return self._pread(seg, size, pos)
                break
            end += size
        if end == 0 and len(chunk) < LOG_OVERHEAD:
            header = self._pread(seg, LOG_OVERHEAD, pos)
            size = int.from_bytes(header[8:12], "big", signed=True) + LOG_OVERHEAD
            return self._pread(seg, size, pos)
        return chunk if end == len(chunk) else chunk[:end]

    def _pread(self, seg: Segment, size: int, pos: int) -> bytes:
        """`size` bytes of `seg` from file position `pos` (fewer at its end): from the latest
        appends' bytes when they hold the whole range, else from the file."""
        recent = self._recent
        at = self._recent_at
        if recent and seg.base_offset == self._tail_seg and at <= pos \
                and pos + size <= at + self._recent_size:
            # the appends from the last one back to the one holding `pos`
            i = len(recent) - 1
            start = at + self._recent_size - len(recent[-1])
            while start > pos:
                i -= 1
                start -= len(recent[i])
            data = recent[i]
            if pos + size <= start + len(data):
                return data if pos == start and size == len(data) else \
                    data[pos - start:pos - start + size]
            return b"".join(recent[i:])[pos - start:pos - start + size]
        return os.pread(seg.fd, size, pos)

    def _position_of(self, seg: Segment, offset: int) -> int:
        """File position of the batch containing `offset` (scans from the index entry)."""
        if seg.base_offset == self._tail_seg and self._tail_lasts \
                and self._tail_bases[0] <= offset <= self._tail_lasts[-1]:
            return self._tail_pos[bisect.bisect_left(self._tail_lasts, offset)]
        pos = seg.index.lookup(offset)
        while pos < seg.size:
            head = os.pread(seg.fd, 27, pos)
            base = int.from_bytes(head[0:8], "big", signed=True)
            length = int.from_bytes(head[8:12], "big", signed=True)
            delta = int.from_bytes(head[23:27], "big", signed=True)
            if base + delta >= offset:
                return pos
            pos += length + LOG_OVERHEAD
        return seg.size

    def batches(self, start_offset: int | None = None) -> Iterator[RecordBatch]:
        """Iterate the batches from the one containing `start_offset` (default: log start).

        Owner thread only; do not append while iterating.
        """
        offset = self._log_start if start_offset is None else start_offset
        while offset < self.log_end_offset:
            chunk = self.read(offset, 1 << 20)
            if not chunk:
                break
            pos = 0
            batch: RecordBatch | None = None
            while pos < len(chunk):
                batch = RecordBatch.parse(chunk, pos)
                yield batch
                pos += batch.size_in_bytes
            assert batch is not None
            offset = batch.next_offset

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> int:
        """Remove everything at and after `offset`; returns the new log end offset.

        If `offset` falls inside a batch, the whole batch goes (the new end is that batch's
        base offset), as in Kafka. The change is fsynced before returning, and a recovery
        checkpoint above the new end is lowered to it first. Raises OffsetOutOfRangeError
        below the log start offset; a no-op at or above the end.
        """
        self._forget_tail()
        self._settle_flush()
        with self._flush_lock, self._ckpt_lock:
            with self._lock:
                self._check_usable()
                if offset >= self.log_end_offset:
                    return self.log_end_offset
                self._close_direct()  # the file is cut below: its copy of the tail is stale
                if offset < self._log_start:
                    raise OffsetOutOfRangeError(
                        f"cannot truncate to {offset}: below log start offset {self._log_start}"
                    )
                old_end = self.log_end_offset
                removed_bytes = 0
                while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                    seg = self._segments.pop()
                    self._bases.pop()
                    removed_bytes += seg.size
                    self._unsynced.pop(seg.base_offset, None)
                    self._index_dirty.discard(seg.base_offset)
                    self._delete_segment_files(seg)
                seg = self._segments[-1]
                pos = self._position_of(seg, offset)
                if pos >= seg.size:
                    new_end = seg.next_offset
                else:
                    new_end = int.from_bytes(os.pread(seg.fd, 8, pos), "big", signed=True)
                removed_bytes += seg.size - pos
                os.ftruncate(seg.fd, pos)
                seg.size = pos
                seg.next_offset = new_end
                seg.index.truncate_to_position(pos)
                seg.epochs = [e for e in seg.epochs if e.start_offset < new_end]
                seg.open_index_files()
                self._rewrite_index_files(seg)
                self._index_dirty.add(seg.base_offset)
                os.fsync(seg.fd)
                fsync_dir(self.directory)
                self._epochs.truncate_from_end(new_end)
                if new_end < self._durable:
                    self._durable = new_end
                    self._durable_at = (seg.base_offset, pos)
                self._persist_epochs_locked()
                written = self._ckpt_written
            if written is None or written.recovery_point > new_end or (
                written.recovery_point == new_end
                and (written.segment, written.position) != (seg.base_offset, pos)
            ):
                self._lower_checkpoint_locked()
        log.info(
            "event=log_truncated dir=%s from_offset=%d to_offset=%d bytes_removed=%d",
            self.directory, old_end, new_end, removed_bytes,
        )
        return new_end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the empty log at `offset` (after a snapshot load)."""
        self._forget_tail()
        self._settle_flush()
        with self._flush_lock, self._ckpt_lock:
            with self._lock:
                self._check_usable()
                self._close_direct()
                old_start, old_end = self._log_start, self.log_end_offset
                for seg in self._segments:
                    self._delete_segment_files(seg)
                self._unsynced.clear()
                self._index_dirty.clear()
                seg = _create_segment(self.directory, offset, self.index_interval_bytes)
                seg.open_index_files()
                self._segments = [seg]
                self._bases = [offset]
                self._log_start = offset
                self._durable = offset
                self._durable_at = (offset, 0)
                self._epochs.clear()
                fsync_dir(self.directory)
                self._persist_epochs_locked()
            self._lower_checkpoint_locked()
        log.info(
            "event=log_truncated_fully dir=%s old_start=%d old_end=%d new_start=%d",
            self.directory, old_start, old_end, offset,
        )

    def advance_log_start_offset(self, offset: int) -> int:
        """Raise the log start offset (a snapshot covers everything below it).

        Deletes every segment whose offsets are all below the log start offset (never the
        active one) and forgets epoch-cache entries below it. Returns the number of segments
        deleted. Raises OffsetOutOfRangeError when `offset` is above the log end offset.
        """
        self._forget_tail()
        self._settle_flush()
        with self._flush_lock, self._ckpt_lock:
            with self._lock:
                self._check_usable()
                if offset > self.log_end_offset:
                    raise OffsetOutOfRangeError(
                        f"log start offset {offset} would be above the log end offset "
                        f"{self.log_end_offset}; use truncate_fully_and_start_at"
                    )
                if offset < self._log_start:
                    return 0
                raised = offset > self._log_start
                self._log_start = offset
                deleted = 0
                # (also segments left below an already raised log start by a crash)
                while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
                    seg = self._segments.pop(0)
                    self._bases.pop(0)
                    self._unsynced.pop(seg.base_offset, None)
                    self._index_dirty.discard(seg.base_offset)
                    self._delete_segment_files(seg)
                    deleted += 1
                    log.info(
                        "event=segment_deleted file=%s base_offset=%d next_offset=%d bytes=%d",
                        seg.path, seg.base_offset, seg.next_offset, seg.size,
                    )
                if deleted:
                    fsync_dir(self.directory)
            if not raised and not deleted:
                return 0
            # The checkpoint first: it carries the log start that explains a leader-epoch
            # checkpoint whose first entry moved up to it.
            try:
                self._write_checkpoint_locked(clean=False)
            except OSError as exc:
                log.error("event=recovery_checkpoint_failed dir=%s error=%r", self.directory,
                          str(exc))
            with self._lock:
                if raised and self._epochs.truncate_from_start(offset):
                    self._persist_epochs_locked()
        return deleted

    def _persist_epochs_locked(self) -> None:
        entries = self._epochs.entries
        if entries != self._epochs_written:
            write_epoch_checkpoint(checkpoint_path(self.directory), entries)
            self._epochs_written = entries

    def _rewrite_index_files(self, seg: Segment) -> None:
        # The kept entries are a prefix of the file: rewrite them in place, then cut the rest
        # (a crash in between leaves extra entries, which open drops, never a missing one).
        for fd, content in (
            (seg.index_fd, seg.index.offset_index_bytes()),
            (seg.time_index_fd, seg.index.time_index_bytes()),
        ):
            if content:
                os.pwrite(fd, content, 0)
            os.ftruncate(fd, len(content))

    def _delete_segment_files(self, seg: Segment) -> None:
        seg.close()
        for p in (seg.path, seg.index_path, seg.time_index_path):
            p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ lifecycle

    def _check_usable(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory} is closed")
        if self._failed is not None:
            raise StorageError(f"log {self.directory} failed earlier: {self._failed}")

    def close(self) -> None:
        """Flush, checkpoint the log end as the recovery point with the clean-shutdown mark,
        then close every file. Idempotent."""
        if self._closed:
            return
        if self._failed is None:
            self.flush()
        with self._flush_lock, self._ckpt_lock:
            clean = True
            with self._lock:
                self._close_direct()
                if self._failed is None and self.preallocate_bytes:
                    try:
                        self._trim_preallocated(self._segments[-1])
                    except OSError as exc:  # no clean mark: open scans and trims the zeros
                        clean = False
                        log.error("event=preallocated_trim_failed dir=%s error=%r",
                                  self.directory, str(exc))
            if self._failed is None:
                try:
                    self._write_checkpoint_locked(clean=clean)
                except OSError as exc:
                    log.error("event=recovery_checkpoint_failed dir=%s error=%r",
                              self.directory, str(exc))
            with self._lock:
                thread, self._ckpt_thread = self._ckpt_thread, None
                for seg in self._segments:
                    seg.close()
                self._closed = True
        if thread is not None:
            self._ckpt_stop.set()
            self._ckpt_wake.set()
            thread.join()

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- recovery scan


@dataclass(slots=True)
class _SegmentPlan:
    base_offset: int
    path: Path
    file_size: int
    valid_size: int
    next_offset: int
    index: SegmentIndex
    epochs: list[EpochEntry]
    truncate_to: int | None = None
    delete: bool = False
    reason: str = ""
    scanned_from: int = 0
    """File position the scan started at (0, or the last indexed batch of a trusted prefix)."""
    offset_at_mark: int | None = None
    """The offset of the batch boundary at the requested mark position, if the scan met it."""


@dataclass(slots=True)
class _Problem:
    position: int
    reason: str
    repairable: bool = True
    """True for what a torn write can leave (cut-short batch, bad header, bad CRC)."""


@dataclass(slots=True)
class _Start:
    """Where to start validating a segment whose bytes below `trusted_end` are trusted."""

    position: int
    next_offset: int
    last_epoch: int
    index: SegmentIndex
    trusted_end: int


@dataclass(slots=True)
class _TrustedOpen:
    """The outcome of opening from a recovery point: the plans and the whole epoch cache
    (the stored entries below the recovery point, the scanned ones from it on)."""

    checkpoint: RecoveryCheckpoint
    plans: list[_SegmentPlan]
    epochs: LeaderEpochCache
    first_checked: int
    """Index of the segment the recovery point falls in (segments before it are trusted whole)."""
    clean: bool


class _TrustedRegionError(Exception):
    """A problem below the recovery point: the checkpoint cannot be trusted (full scan)."""


def _create_segment(directory: Path, base_offset: int, interval: int) -> Segment:
    path = directory / segment_file_name(base_offset)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    seg = Segment(base_offset, path, fd, 0, base_offset, SegmentIndex(base_offset, interval))
    return seg


def _preallocated_tail(fd: int, start: int, size: int) -> bool:
    """Whether a file of `size` bytes ends in preallocated space from `start` (`zero_tail`)."""
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            return zero_tail(view, start)
        finally:
            view.release()


def _fsync_paths(*paths: Path) -> None:
    """fsync files by path (those that exist)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _assign_segment_epochs(segments: list[Segment], cache: LeaderEpochCache) -> None:
    """Give each segment the epoch entries that start inside it."""
    entries = cache.entries
    for seg in segments:
        seg.epochs = [e for e in entries if seg.base_offset <= e.start_offset < seg.next_offset]


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _open_from_recovery_point(
    directory: Path,
    bases: list[int],
    interval: int,
    cp: RecoveryCheckpoint,
    stored_epochs: list[EpochEntry] | None,
) -> _TrustedOpen | str:
    """Plan the open from a recovery checkpoint, or say why it cannot be used.

    Trusted: every segment before the checkpoint's segment, and that segment's bytes below
    the checkpoint's position (with their index entries and the epochs the leader-epoch
    checkpoint gives for offsets below the recovery point). Validated: from the last indexed
    batch of each trusted part to its end (so the chain of segments and the batch at the
    recovery point are checked) and everything after the recovery point. A problem found
    below the recovery point, or a recovery point that does not fall on a batch boundary
    with that offset, means the checkpoint is stale: the caller falls back to a full scan.
    """
    if stored_epochs is None:
        return "the leader-epoch-checkpoint is missing or unreadable"
    if cp.segment not in bases:
        return f"its segment {segment_file_name(cp.segment)} is not on disk"
    k = bases.index(cp.segment)
    rp_path = directory / segment_file_name(cp.segment)
    rp_size = rp_path.stat().st_size
    if cp.position > rp_size:
        return f"position {cp.position} is beyond the end of {rp_path} ({rp_size} bytes)"
    try:
        # Below the recovery point the stored entries are trusted. So is the one starting at
        # the log start even when that is the recovery point: a snapshot moved the log start
        # there and the entry carries the epoch in force at it (truncate_from_start); the
        # batches from the recovery point on are scanned and override it if they differ.
        epochs = LeaderEpochCache([
            e for e in stored_epochs
            if e.start_offset < cp.recovery_point or e.start_offset == cp.log_start_offset
        ])
    except ValueError as exc:
        return f"the leader-epoch-checkpoint is inconsistent: {exc}"
    starts: dict[int, _Start] = {}
    for i, base in enumerate(bases[: k + 1]):
        path = directory / segment_file_name(base)
        limit = cp.position if i == k else path.stat().st_size
        loaded = SegmentIndex.load_trusted(
            base, interval, _read_file(path.with_suffix(INDEX_SUFFIX)),
            _read_file(path.with_suffix(TIME_INDEX_SUFFIX)), limit,
        )
        if isinstance(loaded, str):
            log.warning(
                "event=index_unusable file=%s reason=%r action=validate_whole_segment",
                path.with_suffix(INDEX_SUFFIX), loaded,
            )
            loaded = SegmentIndex(base, interval)
        resume = loaded.resume_position()
        next_offset = base
        if resume > 0:
            with open(path, "rb") as fh:
                head = os.pread(fh.fileno(), BATCH_HEADER_SIZE, resume)
            try:
                header = batch_header(head)
            except ProtocolError as exc:
                return f"the last index entry of {path} points at no batch: {exc}"
            if header.last_offset != loaded.last_indexed_offset():
                return (f"the last index entry of {path} names offset "
                        f"{loaded.last_indexed_offset()}, the batch at position {resume} ends "
                        f"at {header.last_offset}")
            next_offset = header.base_offset
        before = epochs.epoch_for_offset(next_offset - 1)
        starts[base] = _Start(resume, next_offset, -1 if before is None else before, loaded, limit)
    try:
        plans = _scan_segments(directory, bases, interval, starts, (cp.segment, cp.position))
    except _TrustedRegionError as exc:
        return str(exc)
    if plans[k].offset_at_mark != cp.recovery_point:
        return (f"no batch boundary with offset {cp.recovery_point} at position {cp.position} "
                f"of {rp_path}")
    for plan in plans[: k + 1]:
        for e in plan.epochs:
            if cp.log_start_offset <= e.start_offset < cp.recovery_point \
                    and epochs.epoch_for_offset(e.start_offset) != e.epoch:
                return (f"the batch at offset {e.start_offset} has epoch {e.epoch}, the "
                        "leader-epoch-checkpoint says otherwise")
    last = plans[-1]
    whole = LeaderEpochCache(list(epochs.entries))
    try:
        for plan in plans:
            for e in plan.epochs:
                if e.start_offset >= cp.recovery_point:
                    whole.assign(e.epoch, e.start_offset)
    except ValueError as exc:
        return f"the leader-epoch-checkpoint disagrees with the batches after it: {exc}"
    log_start = cp.log_start_offset if bases[0] < cp.log_start_offset <= last.next_offset \
        else bases[0]
    if last.next_offset > log_start and whole.epoch_for_offset(log_start) is None:
        # Every batch needs its epoch (divergence checks, and the loader compares the log's
        # last epoch with the snapshot's): never open a non-empty log without one.
        return f"no leader epoch is known for the log start offset {log_start}"
    clean = cp.clean_shutdown and k == len(bases) - 1 and cp.position == last.file_size
    if cp.clean_shutdown and not clean:
        log.warning(
            "event=clean_shutdown_mark_mismatch dir=%s recovery_point=%d action=validate_tail",
            directory, cp.recovery_point,
        )
    return _TrustedOpen(cp, plans, whole, k, clean)


def _scan_segments(
    directory: Path,
    bases: list[int],
    interval: int,
    starts: dict[int, _Start] | None = None,
    mark: tuple[int, int] | None = None,
) -> list[_SegmentPlan]:
    """Validate the segments; returns the repair plan or raises CorruptLogError.

    Segments in `starts` are validated from the given position on; a problem below their
    `trusted_end` raises _TrustedRegionError instead. `mark` = (segment base, position) asks
    for the offset at that position (`offset_at_mark` of that segment's plan).
    """
    plans: list[_SegmentPlan] = []
    expected_next: int | None = None
    last_epoch = -1
    problems: list[tuple[int, _Problem]] = []
    for i, base in enumerate(bases):
        path = directory / segment_file_name(base)
        start = starts.get(base) if starts is not None else None
        if expected_next is not None and base != expected_next:
            problems.append(
                (i, _Problem(0, f"segment base offset {base} does not continue the previous "
                                f"segment, which ends at offset {expected_next}", False))
            )
        at = mark[1] if mark is not None and mark[0] == base else None
        plan, problem, last_epoch = _scan_one(path, base, interval, last_epoch, start, at)
        plans.append(plan)
        if problem is not None:
            problems.append((i, problem))
        expected_next = plan.next_offset
    if not problems:
        return plans
    idx, problem = problems[0]
    plan = plans[idx]
    start = starts.get(plan.base_offset) if starts is not None else None
    if start is not None and (problem.position < start.trusted_end or problem.position == 0):
        raise _TrustedRegionError(
            f"{plan.path} at byte position {problem.position}, below the recovery point: "
            f"{problem.reason}"
        )
    if not problem.repairable:
        raise CorruptLogError(plan.path, problem.position, problem.reason)
    if any(p.file_size > 0 for p in plans[idx + 1 :]):
        raise CorruptLogError(
            plan.path, problem.position,
            f"{problem.reason} (not the tail of the log: later segments hold data; refusing "
            "to start rather than drop what may be committed)",
        )
    found = _find_valid_batch_after(plan.path, problem.position, plan.next_offset)
    if found is not None:
        raise CorruptLogError(
            plan.path, problem.position,
            f"{problem.reason}; a valid batch (base offset {found[1]}) follows at position "
            f"{found[0]}, so this is not a torn tail; refusing to start rather than drop what "
            "may be committed",
        )
    plan.truncate_to = problem.position
    plan.valid_size = problem.position
    plan.reason = problem.reason
    for p in plans[idx + 1:]:
        p.delete = True
    return plans


def _scan_one(
    path: Path,
    base: int,
    interval: int,
    last_epoch: int,
    start: _Start | None = None,
    mark: int | None = None,
) -> tuple[_SegmentPlan, _Problem | None, int]:
    size = path.stat().st_size
    index = start.index if start is not None else SegmentIndex(base, interval)
    pos = start.position if start is not None else 0
    next_offset = start.next_offset if start is not None else base
    if start is not None:
        last_epoch = start.last_epoch
    epochs: list[EpochEntry] = []
    plan = _SegmentPlan(base, path, size, size, base, index, epochs, scanned_from=pos)
    if mark == pos:
        plan.offset_at_mark = next_offset
    if size == 0 or pos >= size:
        plan.next_offset = next_offset
        return plan, None, last_epoch
    problem: _Problem | None = None
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            while pos < size:
                try:
                    batch = RecordBatch.parse(view, pos)
                except TruncatedInputError as exc:
                    problem = _Problem(pos, f"torn batch: {exc}")
                    break
                except ProtocolError as exc:
                    problem = _Problem(pos, f"invalid batch header: {exc}")
                    break
                try:
                    if not batch.is_valid():
                        problem = _Problem(
                            pos, f"CRC mismatch in batch with base offset {batch.base_offset}"
                        )
                        break
                    if batch.base_offset != next_offset:
                        problem = _Problem(
                            pos, f"batch base offset {batch.base_offset} where offset "
                            f"{next_offset} was expected", False,
                        )
                        break
                    epoch = batch.partition_leader_epoch
                    if epoch < last_epoch:
                        problem = _Problem(
                            pos, f"batch at offset {batch.base_offset} has epoch {epoch} "
                            f"below the previous epoch {last_epoch}", False,
                        )
                        break
                    if epoch > last_epoch:
                        epochs.append(EpochEntry(epoch, batch.base_offset))
                        last_epoch = epoch
                    index.observe(pos, batch.last_offset, batch.max_timestamp)
                    next_offset = batch.next_offset
                    pos += batch.size_in_bytes
                finally:
                    del batch
                if pos == mark:
                    plan.offset_at_mark = next_offset
            plan.next_offset = next_offset
            plan.valid_size = pos
        finally:
            view.release()
    return plan, problem, last_epoch


def _find_valid_batch_after(path: Path, position: int, min_offset: int) -> tuple[int, int] | None:
    """A CRC-valid batch starting after `position` with base offset >= min_offset, if any."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        magic = bytes([MAGIC])
        q = data.find(magic, position + 1 + 16)
        while q != -1:
            start = q - 16
            if start > position and len(data) - start >= BATCH_HEADER_SIZE:
                length = int.from_bytes(data[start + 8:start + 12], "big", signed=True)
                if BATCH_HEADER_SIZE - LOG_OVERHEAD <= length <= _MAX_SANE_BATCH \
                        and start + length + LOG_OVERHEAD <= len(data):
                    chunk = data[start:start + length + LOG_OVERHEAD]
                    try:
                        batch = RecordBatch.parse(chunk, 0)
                        if batch.is_valid() and batch.base_offset >= min_offset:
                            return start, batch.base_offset
                    except ProtocolError:
                        pass
            q = data.find(magic, q + 1)
    return None
