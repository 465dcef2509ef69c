"""Segment I/O of the segmented log: the segment files, their indexes, appending and reading.

Owns what a segment is on disk and in memory (`Segment`: the `.log` file, its `.index` and
`.timeindex`, the epochs that start in it), creating one (`create_segment`), and the parts of
`kraft.storage.log.SegmentedLog` that touch segment bytes without making them durable
(`LogSegmentIO`): the bookkeeping of batches written at the end of the active segment (index
entries, the epoch cache, the positions of the latest batches and the bytes of the latest
appends, which reads near the log end are served from), reading whole batches, rewriting a
segment's index files after a truncation and deleting a segment's files.

`LogState` declares the state every part of the log shares; `SegmentedLog.__init__` sets it.
The locks and the thread-safety contract are described in `kraft.storage.log`.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kraft.records.batch import LOG_OVERHEAD, RecordBatch
from kraft.storage.epoch_cache import EpochEntry, LeaderEpochCache
from kraft.storage.errors import OffsetOutOfRangeError, StorageError
from kraft.storage.index import SegmentIndex, append_entry
from kraft.storage.layout import INDEX_SUFFIX, TIME_INDEX_SUFFIX, segment_file_name

MAX_BATCH_BYTES = 8 * 1024 * 1024
"""Largest batch the metadata log accepts (`max.message.bytes` of KafkaMetadataLog)."""
TAIL_BATCHES = 256
"""Batch positions of the active segment kept in memory for reads near the log end."""
RECENT_BYTES = 1024 * 1024
"""Bytes of the latest appends kept in memory for reads of them (see `SegmentedLog._pread`)."""
RECENT_APPENDS = 8
"""At most this many of the latest appends are kept in memory (see `SegmentedLog._pread`)."""


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


def create_segment(directory: Path, base_offset: int, interval: int) -> Segment:
    """Create the empty `.log` file of a new segment starting at `base_offset` (it must not
    exist) and return it, with an empty index of `interval` bytes between entries."""
    path = directory / segment_file_name(base_offset)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    seg = Segment(base_offset, path, fd, 0, base_offset, SegmentIndex(base_offset, interval))
    return seg


class LogState:
    """The state of a `SegmentedLog` that its parts (segment I/O, recovery point, durability)
    share, declared for them; `SegmentedLog.__init__` sets it and says what each is for."""

    directory: Path
    _segments: list[Segment]
    _bases: list[int]
    _epochs: LeaderEpochCache
    _log_start: int
    _lock: threading.Lock
    _flush_lock: threading.Lock
    _ckpt_lock: threading.Lock
    _durable: int
    _durable_at: tuple[int, int]
    _index_dirty: set[int]
    _closed: bool
    _failed: BaseException | None

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended batch must start at (LEO, exclusive)."""
        return self._segments[-1].next_offset

    def _check_usable(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory} is closed")
        if self._failed is not None:
            raise StorageError(f"log {self.directory} failed earlier: {self._failed}")


class LogSegmentIO(LogState):
    """Segment I/O of `SegmentedLog`: the bookkeeping of appended batches, reads, and the
    index and segment files a truncation rewrites or deletes (see the module docstring)."""

    _tail_seg: int
    _tail_bases: list[int]
    _tail_lasts: list[int]
    _tail_pos: list[int]
    _recent: list[bytes]
    _recent_at: int
    _recent_size: int

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
