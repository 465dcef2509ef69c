"""Leader-epoch cache: epoch -> start offset, for divergence detection (KIP-101/KIP-320).

Entries are `(epoch, start_offset)` with strictly increasing epochs and non-decreasing
offsets. Persisted as Kafka's `leader-epoch-checkpoint` text file (version 0, count, then
"<epoch> <start offset>" lines). The file is a cache: `SegmentedLog` rebuilds it from the
batches on open and rewrites it when it disagrees.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from pathlib import Path

from kraft.storage.durability import atomic_write
from kraft.storage.errors import CorruptLogError
from kraft.storage.layout import LEADER_EPOCH_CHECKPOINT, SnapshotId

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """The first offset written in a leader epoch."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Answer of `end_offset_for`: the largest epoch <= the requested one and where it ends.

    (-1, -1) means undefined (unknown epoch, or an epoch above every known one).
    """

    epoch: int
    end_offset: int


class LeaderEpochCache:
    """In-memory epoch cache with Kafka's LeaderEpochFileCache semantics.

    Not thread-safe on its own: `SegmentedLog` guards it with its lock.
    """

    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        self._entries: list[EpochEntry] = []
        for e in entries or []:
            self.assign(e.epoch, e.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        """All entries, oldest first."""
        return tuple(self._entries)

    def latest(self) -> EpochEntry | None:
        """The newest entry, if any."""
        return self._entries[-1] if self._entries else None

    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns True when the cache changed.

        Re-assigning the latest epoch is a no-op. A lower epoch or a smaller start offset than
        the latest entry's is refused: the log only ever grows with non-decreasing epochs.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        last = self.latest()
        if last is not None:
            if epoch == last.epoch:
                return False
            if epoch < last.epoch or start_offset < last.start_offset:
                raise ValueError(
                    f"epoch entry ({epoch}, {start_offset}) goes backwards from "
                    f"({last.epoch}, {last.start_offset})"
                )
            if start_offset == last.start_offset:
                # The previous epoch wrote nothing: it has no offsets of its own.
                self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def start_offset_of(self, epoch: int) -> int | None:
        """The start offset of exactly `epoch`, if the cache knows it."""
        for e in self._entries:
            if e.epoch == epoch:
                return e.start_offset
        return None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote `offset` (largest entry with start <= offset), if known."""
        i = bisect.bisect_right([e.start_offset for e in self._entries], offset)
        return self._entries[i - 1].epoch if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's `endOffsetFor`: (largest epoch <= requested, start offset of the next epoch).

        * requested -1 or the cache empty -> (-1, -1)
        * requested == latest epoch -> (latest, log end offset)
        * requested above every epoch -> (-1, -1)
        * requested below every epoch -> (requested, start offset of the first epoch)
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch == self._entries[-1].epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        epochs = [e.epoch for e in self._entries]
        hi = bisect.bisect_right(epochs, requested_epoch)
        if hi >= len(self._entries):
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        higher = self._entries[hi]
        if hi == 0:
            return EpochEndOffset(requested_epoch, higher.start_offset)
        return EpochEndOffset(self._entries[hi - 1].epoch, higher.start_offset)

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after `end_offset` (log truncated to end_offset)."""
        before = len(self._entries)
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        return len(self._entries) != before

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget offsets below `start_offset`; the epoch covering it now starts there."""
        removed = [e for e in self._entries if e.start_offset <= start_offset]
        if not removed:
            return False
        kept = [e for e in self._entries if e.start_offset > start_offset]
        first = EpochEntry(removed[-1].epoch, start_offset)
        changed = removed != [first]
        self._entries = [first, *kept]
        return changed

    def clear(self) -> None:
        """Drop every entry (the log was fully truncated)."""
        self._entries.clear()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaderEpochCache) and other._entries == self._entries

    def __repr__(self) -> str:
        return f"LeaderEpochCache({[(e.epoch, e.start_offset) for e in self._entries]})"


def end_offset_for_epoch(
    cache: LeaderEpochCache,
    requested_epoch: int,
    log_end_offset: int,
    earliest_snapshot: SnapshotId | None,
) -> EpochEndOffset:
    """The metadata log's divergence answer (Kafka's KafkaMetadataLog.endOffsetForEpoch).

    Like `cache.end_offset_for`, except that when the answer lands on the oldest snapshot's
    end offset with an epoch smaller than requested, the snapshot's id is the answer; and an
    undefined answer becomes (requested epoch, log end offset).
    """
    found = cache.end_offset_for(requested_epoch, log_end_offset)
    if found.end_offset == UNDEFINED_EPOCH_OFFSET:
        return EpochEndOffset(requested_epoch, log_end_offset)
    if (
        earliest_snapshot is not None
        and found.end_offset == earliest_snapshot.end_offset
        and found.epoch < requested_epoch
    ):
        return EpochEndOffset(earliest_snapshot.epoch, earliest_snapshot.end_offset)
    return found


def checkpoint_text(entries: tuple[EpochEntry, ...] | list[EpochEntry]) -> str:
    """The leader-epoch-checkpoint file content for these entries."""
    lines = ["0", str(len(entries))] + [f"{e.epoch} {e.start_offset}" for e in entries]
    return "\n".join(lines) + "\n"


def read_epoch_checkpoint(path: Path | str) -> list[EpochEntry] | None:
    """Parse a leader-epoch-checkpoint file; None if absent. Raises CorruptLogError if bad."""
    p = Path(path)
    try:
        text = p.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CorruptLogError(p, exc.start, "not ASCII text") from None
    lines = [ln.strip() for ln in text.splitlines()]
    pos = 0

    def fail(reason: str) -> CorruptLogError:
        return CorruptLogError(p, pos, reason)

    if len(lines) < 2 or lines[0] != "0":
        raise fail(f"expected version line '0', got {lines[:1]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise fail(f"bad entry count {lines[1]!r}") from None
    body = [ln for ln in lines[2:] if ln]
    if count != len(body):
        raise fail(f"header says {count} entries, file has {len(body)}")
    entries: list[EpochEntry] = []
    for n, ln in enumerate(body):
        parts = ln.split()
        pos = n + 3
        if len(parts) != 2 or not all(x.lstrip("-").isdigit() for x in parts):
            raise fail(f"line {n + 3}: expected '<epoch> <start offset>', got {ln!r}")
        entries.append(EpochEntry(int(parts[0]), int(parts[1])))
    return entries


def write_epoch_checkpoint(path: Path | str, entries: tuple[EpochEntry, ...] | list[EpochEntry]) -> None:
    """Atomically and durably replace the checkpoint file."""
    atomic_write(path, checkpoint_text(entries).encode("ascii"))


def checkpoint_path(partition_dir: Path | str) -> Path:
    """`<partition dir>/leader-epoch-checkpoint`."""
    return Path(partition_dir) / LEADER_EPOCH_CHECKPOINT
