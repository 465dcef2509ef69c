"""Durability of the segmented log: fsync and flush, direct I/O, preallocation, the checkpoint thread.

Owns how the bytes that `kraft.storage.log.SegmentedLog` appends reach stable storage
(`LogDurability`):

* `flush` (fdatasync of the segments written since the last flush, the directory when
  segments were created, the leader-epoch checkpoint when it changed), callable from one
  thread other than the owner, and the durable end offset it publishes;
* the kernel flush (`start_flush` / `finish_flush` through a `kraft.storage.sync_engine`
  engine), one at a time on the owner thread;
* write-through appends (`DirectWriter`): `O_DIRECT | O_DSYNC` writes of whole blocks into
  space zero-filled and synced ahead of the active segment's end (preallocation), and the
  trimming of that space at a roll and a close;
* the checkpoint thread, which writes the recovery point (`kraft.storage.log_recovery`) at
  most every `recovery_checkpoint_interval_s` after flushes advance the durable end.

A failed fsync or write-through write fails the log (`_flush_failed`): every later call
raises, as the page cache can no longer be trusted.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable

from kraft.records.batch import PREALLOCATION_BLOCK
from kraft.storage.durability import fsync_dir, sync_data
from kraft.storage.epoch_cache import EpochEntry, checkpoint_path, write_epoch_checkpoint
from kraft.storage.errors import StorageError
from kraft.storage.log_recovery import LogRecoveryPoint
from kraft.storage.log_segments import Segment
from kraft.storage.sync_engine import SyncEngine

log = logging.getLogger("kraft.storage.log")  # the log's events keep the log's logger name

DIRECT_BLOCK = PREALLOCATION_BLOCK
"""Alignment (file position, length and memory) of a write-through append's `O_DIRECT` write;
preallocated space ends on a multiple of it."""
DIRECT_MAX_BYTES = 1024 * 1024
"""Larger write-through appends go through the page cache and the flush instead."""
DEFAULT_RECOVERY_CHECKPOINT_INTERVAL_S = 1.0
"""How often (at most) the recovery point is checkpointed while flushes advance it (Kafka's
`log.flush.offset.checkpoint.interval.ms`, 60 s there). A kill -9 re-validates at most about
this much of the newest log on the next open."""


class DirectWriter:
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
        """Close the descriptor and release the buffer."""
        os.close(self.fd)
        self.view.release()
        self.buf.close()

class LogDurability(LogRecoveryPoint):
    """fsync, flush, write-through appends and the checkpoint thread of `SegmentedLog` (see
    the module docstring)."""

    preallocate_bytes: int
    _direct: DirectWriter | None
    _direct_refused: bool
    _unsynced: dict[int, Segment]
    _dir_dirty: bool
    _epochs_written: tuple[EpochEntry, ...]
    _kernel: SyncEngine | None
    _async: tuple[int, tuple[int, int], float] | None
    _settled: bool
    on_flush_time: Callable[[float], None] | None
    _ckpt_interval: float | None
    _ckpt_thread: threading.Thread | None
    _ckpt_due: bool
    _ckpt_wake: threading.Event
    _ckpt_stop: threading.Event

    # ------------------------------------------------------------------ write-through

    def _direct_writer(self, active: Segment) -> DirectWriter | None:
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
        writer = self._direct = DirectWriter(active.base_offset, fd, os.fstat(active.fd).st_size)
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

    def _write_direct(self, w: DirectWriter, seg: Segment, data: memoryview, start: int) -> None:
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

    def _preallocate(self, w: DirectWriter, seg: Segment, end: int) -> None:
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

    # ------------------------------------------------------------------ flush

    @property
    def durable_end_offset(self) -> int:
        """Every offset below this is fsynced (as published by the last flush/truncation)."""
        with self._lock:
            return self._durable

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

    # ------------------------------------------------------------------ checkpoint thread

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

    def _persist_epochs_locked(self) -> None:
        entries = self._epochs.entries
        if entries != self._epochs_written:
            write_epoch_checkpoint(checkpoint_path(self.directory), entries)
            self._epochs_written = entries
