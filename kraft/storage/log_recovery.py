"""Recovery of the segmented log: the start-up scan, torn-tail truncation, the recovery point.

Owns what `kraft.storage.log.SegmentedLog.open` does before the log is usable
(`recover_segments`): list the segment files, plan the open from the recovery checkpoint
(`kraft.storage.recovery_point`) or fall back to a full scan of every batch, validate the
batches (header, CRC, offset continuity, epochs), truncate a torn or zero-filled tail of the
last segment, refuse a corruption anywhere else (`CorruptLogError`, nothing modified), rebuild
index files and the leader-epoch checkpoint that disagree with the batches, fsync what it
checked, and say what it found (`RecoveryReport`).

And the writing of the recovery checkpoint while the log runs (`LogRecoveryPoint`): the
durable end offset, where it is, and the index files it covers, after flushes (by the
checkpoint thread of `kraft.storage.log_durability`), on `close` with the clean-shutdown mark
and when a truncation goes below it. docs/storage.md, "Recovery on open", gives the rules.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

from kraft.protocol.errors import ProtocolError, TruncatedInputError
from kraft.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    RecordBatch,
    batch_header,
    zero_tail,
)
from kraft.storage.durability import fsync_dir
from kraft.storage.epoch_cache import (
    EpochEntry,
    LeaderEpochCache,
    checkpoint_path,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)
from kraft.storage.errors import CorruptLogError, StorageError
from kraft.storage.index import SegmentIndex
from kraft.storage.layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    parse_segment_file_name,
    segment_file_name,
)
from kraft.storage.log_segments import LogState, Segment, create_segment
from kraft.storage.recovery_point import (
    RecoveryCheckpoint,
    RecoveryCheckpointError,
    read_recovery_checkpoint,
    recovery_checkpoint_path,
    write_recovery_checkpoint,
)

log = logging.getLogger("kraft.storage.log")  # the log's events keep the log's logger name

_MAX_SANE_BATCH = 64 * 1024 * 1024
"""Recovery treats a declared batch length above this as garbage rather than a real batch."""


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


def recover_segments(
    d: Path, *, index_interval_bytes: int, initial_offset: int, full_scan: bool,
) -> tuple[list[Segment], LeaderEpochCache, RecoveryReport]:
    """Recover the segments of the log in directory `d` (which exists), as
    `SegmentedLog.open` describes: the open segments (the last one with its index files open
    for appending), the leader-epoch cache and the report (whose `log_start_offset` is the
    log's). Raises CorruptLogError, having modified nothing, on what a torn write cannot
    explain."""
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
        segments.append(create_segment(d, initial_offset, index_interval_bytes))
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
    return segments, cache, report


class LogRecoveryPoint(LogState):
    """The recovery checkpoint of a running `SegmentedLog` (see the module docstring)."""

    _ckpt_last_at: float
    _ckpt_written: RecoveryCheckpoint | None

    def checkpoint_recovery_point(self) -> None:
        """Checkpoint the durable end offset as the recovery point now (any thread).

        Flushes do this on their own at most every `recovery_checkpoint_interval_s`; a
        truncation below the recovery point and `close` (with the clean-shutdown mark) do it
        at once.
        """
        with self._ckpt_lock:
            self._check_usable()
            self._write_checkpoint_locked(clean=False)

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
