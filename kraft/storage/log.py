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

Modules
-------
`SegmentedLog` is this module's façade over three parts, each a base class in its own module
(the methods are defined there, not wrapped here): `kraft.storage.log_segments` (segment
files, their indexes, the bookkeeping of appended batches, reads), `kraft.storage.log_recovery`
(the start-up scan, torn-tail truncation, the recovery checkpoint) and
`kraft.storage.log_durability` (flush and the kernel flush, write-through appends and
preallocation, the checkpoint thread). This module keeps what callers use and what ties the
parts together: `open`, the validation and write of an append (`append`, `adopt_written`, the
roll), truncations, log-start advances and `close`.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kraft.protocol.errors import ProtocolError
from kraft.records.batch import BATCH_HEADER_SIZE, RecordBatch
from kraft.storage.durability import fsync_dir
from kraft.storage.epoch_cache import EpochEntry, LeaderEpochCache
from kraft.storage.errors import InvalidAppendError, OffsetOutOfRangeError
from kraft.storage.index import DEFAULT_INDEX_INTERVAL_BYTES
from kraft.storage.log_durability import (
    DEFAULT_RECOVERY_CHECKPOINT_INTERVAL_S,
    DIRECT_BLOCK,
    DIRECT_MAX_BYTES,
    DirectWriter,
    LogDurability,
)
from kraft.storage.log_recovery import RecoveryReport, recover_segments
from kraft.storage.log_segments import (
    MAX_BATCH_BYTES,
    LogSegmentIO,
    Segment,
    create_segment,
)
from kraft.storage.recovery_point import RecoveryCheckpoint
from kraft.storage.sync_engine import SyncEngine

__all__ = [
    "DEFAULT_RECOVERY_CHECKPOINT_INTERVAL_S",
    "DEFAULT_SEGMENT_BYTES",
    "DIRECT_BLOCK",
    "DIRECT_MAX_BYTES",
    "MAX_BATCH_BYTES",
    "RecoveryReport",
    "Segment",
    "SegmentedLog",
]

log = logging.getLogger(__name__)

AppendScan = Callable[[memoryview, int, int, int],
                      tuple[list[tuple[int, int, int, int, int]], int] | None]
"""A faster scan of an append (`SegmentedLog.use_native_scan`): (the bytes, the log's end
offset, its last epoch, the largest batch) -> what `SegmentedLog._scan_appended` returns when
every check passes, None otherwise (the Python scan then runs and names what fails)."""

DEFAULT_SEGMENT_BYTES = 1 << 30
"""`metadata.log.segment.bytes` default (1 GiB)."""


class SegmentedLog(LogSegmentIO, LogDurability):
    """The metadata log of one partition directory. Open it with `SegmentedLog.open`.

    See the module docstring for the thread-safety contract of `append` and `flush`, and for
    the modules its methods come from.
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
        self._direct: DirectWriter | None = None
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
        self._native_scan: AppendScan | None = None
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
        segments, cache, report = recover_segments(
            d, index_interval_bytes=index_interval_bytes, initial_offset=initial_offset,
            full_scan=full_scan,
        )
        opened = cls(
            d, segments, cache, segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes, report=report,
            log_start_offset=report.log_start_offset,
            recovery_checkpoint_interval_s=recovery_checkpoint_interval_s,
            preallocate_bytes=preallocate_bytes,
        )
        # Everything is fsynced now: the log end is the recovery point (and a clean-shutdown
        # mark from the last close is consumed).
        with opened._ckpt_lock:
            opened._write_checkpoint_locked(clean=False)
        return opened

    # ------------------------------------------------------------------ properties
    # (and, inherited: `log_end_offset` from LogState, `durable_end_offset` from LogDurability)

    @property
    def log_start_offset(self) -> int:
        """The first offset still readable."""
        return self._log_start

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

    def use_native_scan(self, scan: AppendScan | None) -> None:
        """Scan appends with `scan` first (None: the Python scan alone). Storage imports no
        C of its own: the node hands it the native lane's scan (`kraft.lane`), which makes the
        same checks in C."""
        self._native_scan = scan

    def _scan_appended(self, buf: memoryview) -> tuple[list[tuple[int, int, int, int, int]], int]:
        """The batches of `buf` as an append at the log's end takes them: (position in `buf`,
        base offset, last offset, epoch, max timestamp) each, and the end offset after them.
        Raises InvalidAppendError unless they continue the log, whole, with good CRCs, within
        the size limit and with epochs that do not go down.

        The C scan (`use_native_scan`) takes the batches when every check passes: it touches far less memory (on a
        follower taking one written batch after a quiet spell, with the caches cold, 12-13 µs
        against the Python scan's 41-43: docs/journal/perf-43-quiet-follower.md). The Python scan
        below runs when one fails, and names what."""
        expected = self.log_end_offset
        last_epoch = self._epochs.latest_epoch()
        if self._native_scan is not None:
            scanned = self._native_scan(buf, expected, last_epoch, MAX_BATCH_BYTES)
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
        seg = create_segment(self.directory, old.next_offset, self.index_interval_bytes)
        seg.open_index_files()
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        log.info(
            "event=segment_rolled file=%s base_offset=%d previous_bytes=%d",
            seg.path, seg.base_offset, old.size,
        )
        return seg

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
                seg = create_segment(self.directory, offset, self.index_interval_bytes)
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

    # ------------------------------------------------------------------ lifecycle

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
