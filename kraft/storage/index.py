"""Sparse offset and time indexes of one log segment (Kafka's `.index` / `.timeindex`).

`.index` entries are 8 bytes: int32 offset relative to the segment base (the *last* offset of
the indexed batch) + int32 file position of that batch. `.timeindex` entries are 12 bytes:
int64 max timestamp so far + int32 relative offset. An entry is added for a batch when more
than `index_interval_bytes` (4096) lie between it and the previously indexed batch, exactly
as Kafka's segment recovery computes it, so an index built while appending and one rebuilt
from the log are byte-identical. Indexes are derived data: they are not fsynced and are
rebuilt on open when they disagree with the log.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

from kraft.storage.durability import atomic_write

DEFAULT_INDEX_INTERVAL_BYTES = 4096
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class SegmentIndex:
    """In-memory offset + time index of one segment, mirrored to its two index files."""

    def __init__(self, base_offset: int, interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> None:
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self._offsets = array("q")
        self._positions = array("q")
        self._times: list[tuple[int, int]] = []
        self._last_indexed_position = 0
        self._max_ts = -1
        self._offset_of_max_ts = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @classmethod
    def load_trusted(
        cls,
        base_offset: int,
        interval_bytes: int,
        index_bytes: bytes,
        time_index_bytes: bytes,
        limit_position: int,
    ) -> SegmentIndex | str:
        """The index of a segment whose bytes below `limit_position` are trusted, from its files.

        Entries for batches at or after `limit_position` are dropped (the caller scans from
        `resume_position()` and re-adds them). Returns the reason as a string instead when
        the files are not a sane index (Kafka's sanity check, plus what a zero-filled or torn
        write leaves: sizes not a multiple of the entry size, offsets or positions that do not
        increase, an entry at position 0 or relative offset 0, which no batch can produce).
        """
        if len(index_bytes) % _OFFSET_ENTRY.size:
            return f"offset index size {len(index_bytes)} is not a multiple of {_OFFSET_ENTRY.size}"
        if len(time_index_bytes) % _TIME_ENTRY.size:
            return f"time index size {len(time_index_bytes)} is not a multiple of {_TIME_ENTRY.size}"
        idx = cls(base_offset, interval_bytes)
        last_rel = last_pos = 0
        for rel, pos in _OFFSET_ENTRY.iter_unpack(index_bytes):
            if rel <= last_rel or pos <= last_pos:
                return (f"offset index entry ({rel}, {pos}) does not increase from "
                        f"({last_rel}, {last_pos})")
            last_rel, last_pos = rel, pos
            if pos >= limit_position:
                break
            idx._offsets.append(base_offset + rel)
            idx._positions.append(pos)
        last_offset = idx._offsets[-1] if idx._offsets else base_offset - 1
        last_ts, last_trel = -2, -1
        for ts, trel in _TIME_ENTRY.iter_unpack(time_index_bytes):
            if ts == -1 and not idx._times and base_offset + trel == -1:
                # the first index point of batches without timestamps: (-1, offset -1)
                idx._times.append((-1, -1))
                last_ts = -1
                continue
            if ts <= last_ts or trel < last_trel or trel < 0:
                return (f"time index entry ({ts}, {trel}) does not increase from "
                        f"({last_ts}, {last_trel})")
            last_ts, last_trel = ts, trel
            if base_offset + trel > last_offset:
                break
            idx._times.append((ts, base_offset + trel))
        if idx._offsets and not idx._times:
            return "the time index has no entry for the indexed batches"
        if idx._positions:
            idx._last_indexed_position = idx._positions[-1]
        if idx._times:
            idx._max_ts, idx._offset_of_max_ts = idx._times[-1]
        return idx

    def resume_position(self) -> int:
        """Where a scan that continues this index must start: the last indexed batch, or 0.

        Re-observing that batch adds nothing, so scanning on from here rebuilds exactly the
        index a scan from position 0 would have built.
        """
        return self._positions[-1] if self._positions else 0

    def last_indexed_offset(self) -> int | None:
        """The last offset of the last indexed batch, if any."""
        return self._offsets[-1] if self._offsets else None

    def observe(self, position: int, last_offset: int, max_timestamp: int) -> bool:
        """Account for the batch at `position`; returns True when it got an index entry."""
        if max_timestamp > self._max_ts:
            self._max_ts = max_timestamp
            self._offset_of_max_ts = last_offset
        if position - self._last_indexed_position > self.interval_bytes:
            self._offsets.append(last_offset)
            self._positions.append(position)
            self._last_indexed_position = position
            if not self._times or self._max_ts > self._times[-1][0]:
                self._times.append((self._max_ts, self._offset_of_max_ts))
            return True
        return False

    def lookup(self, offset: int) -> int:
        """File position to start scanning from for `offset` (0 when nothing is indexed below)."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._positions[i - 1] if i > 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or after `position` (the segment was truncated there)."""
        i = bisect.bisect_left(self._positions, position)
        removed = self._offsets[i:]
        del self._offsets[i:]
        del self._positions[i:]
        if removed:
            first_removed = removed[0]
            self._times = [t for t in self._times if t[1] < first_removed]
        self._last_indexed_position = self._positions[-1] if self._positions else 0
        # The max timestamp is re-derived by the caller re-observing nothing: keep the latest
        # retained time entry as the running maximum.
        if self._times:
            self._max_ts, self._offset_of_max_ts = self._times[-1]
        else:
            self._max_ts, self._offset_of_max_ts = -1, -1

    def offset_index_bytes(self) -> bytes:
        """The `.index` file content."""
        base = self.base_offset
        return b"".join(
            _OFFSET_ENTRY.pack(o - base, p) for o, p in zip(self._offsets, self._positions)
        )

    def time_index_bytes(self) -> bytes:
        """The `.timeindex` file content."""
        base = self.base_offset
        return b"".join(_TIME_ENTRY.pack(ts, o - base) for ts, o in self._times)

    def last_entries_bytes(self) -> tuple[bytes, bytes]:
        """Encoded newest offset entry and newest time entry (for appending to the files)."""
        o = _OFFSET_ENTRY.pack(self._offsets[-1] - self.base_offset, self._positions[-1])
        t = b""
        if self._times:
            ts, off = self._times[-1]
            t = _TIME_ENTRY.pack(ts, off - self.base_offset)
        return o, t

    def time_entry_count(self) -> int:
        """Number of time index entries."""
        return len(self._times)

    def sync_files(self, index_path: Path, time_index_path: Path) -> bool:
        """Rewrite the index files if their content differs; returns True when rewritten."""
        changed = False
        for path, want in (
            (index_path, self.offset_index_bytes()),
            (time_index_path, self.time_index_bytes()),
        ):
            try:
                have = path.read_bytes()
            except FileNotFoundError:
                have = None
            if have != want:
                atomic_write(path, want, fsync=False)
                # A missing file for an empty index is just a fresh segment, not a repair.
                changed = changed or bool(have or want)
        return changed


def append_entry(fd: int, entry: bytes, position: int) -> None:
    """Write one encoded index entry at `position` of an open index file."""
    if entry:
        os.pwrite(fd, entry, position)
