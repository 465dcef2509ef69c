"""Metadata of the replicated log as the core sees it: offsets, epochs, snapshots.

The core never holds record bytes. It tracks the log start and end offsets, the persisted end,
the leader-epoch cache (epoch -> start offset) and the complete snapshots.
"""

from __future__ import annotations

import bisect

from kraft.raft.messages import OffsetAndEpoch


class LogMeta:
    """Offsets, epoch cache and snapshot ids of the local log."""

    __slots__ = ("_epochs", "_starts", "end_offset", "persisted_end", "snapshots", "start_offset")

    def __init__(
        self,
        start_offset: int = 0,
        end_offset: int = 0,
        epoch_cache: tuple[tuple[int, int], ...] = (),
        snapshots: tuple[tuple[OffsetAndEpoch, int], ...] = (),
    ) -> None:
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.persisted_end = end_offset
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in epoch_cache:
            if start < end_offset:
                self._epochs.append(epoch)
                self._starts.append(start)
        self.snapshots: dict[OffsetAndEpoch, int] = dict(snapshots)

    # ------------------------------------------------------------------ queries

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        """The snapshot with the largest end offset."""
        if not self.snapshots:
            return None
        return max(self.snapshots, key=lambda s: (s.offset, s.epoch))

    def oldest_snapshot(self) -> OffsetAndEpoch | None:
        """The snapshot with the smallest end offset."""
        if not self.snapshots:
            return None
        return min(self.snapshots, key=lambda s: (s.offset, s.epoch))

    def last_epoch(self) -> int:
        """Epoch of the last record; with an empty log, of the latest snapshot (else 0)."""
        if self._epochs and self.end_offset > self.start_offset:
            return self._epochs[-1]
        snap = self.latest_snapshot()
        if snap is not None and snap.offset == self.end_offset:
            return snap.epoch
        return self._epochs[-1] if self._epochs else 0

    def inside_latest_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> bool:
        """True when a fetch at `fetch_offset` whose last record is of `last_fetched_epoch`
        continues the log inside its latest epoch: above the log start, at most at the end,
        and that epoch the last one cached. Such a fetch needs no snapshot and does not
        diverge (`end_offset_for_epoch` of the latest epoch is the log end): the leader's
        steady state, decided without looking at snapshots or searching the epoch cache."""
        return (self.start_offset < fetch_offset <= self.end_offset and bool(self._epochs)
                and last_fetched_epoch == self._epochs[-1])

    def end_position(self) -> OffsetAndEpoch:
        """(last epoch, end offset): what the vote rule compares."""
        return OffsetAndEpoch(self.last_epoch(), self.end_offset)

    def epoch_at(self, end_offset: int) -> int:
        """Epoch of the record just before `end_offset` (0 when there is none)."""
        i = bisect.bisect_right(self._starts, end_offset - 1) - 1
        if i >= 0:
            return self._epochs[i]
        for snap in self.snapshots:
            if snap.offset == end_offset:
                return snap.epoch
        return 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest cached epoch <= `epoch` and the offset where it ends.

        The last cached epoch ends at the log end offset. When no cached epoch qualifies, the
        log start is the answer (with the oldest snapshot's epoch if one ends there).
        """
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i < 0:
            snap = self.oldest_snapshot()
            if snap is not None and snap.offset == self.start_offset:
                return OffsetAndEpoch(snap.epoch, self.start_offset)
            return OffsetAndEpoch(0, self.start_offset)
        end = self._starts[i + 1] if i + 1 < len(self._starts) else self.end_offset
        return OffsetAndEpoch(self._epochs[i], end)

    def epoch_entries(self) -> list[tuple[int, int]]:
        """The leader-epoch cache as (epoch, start offset) pairs."""
        return list(zip(self._epochs, self._starts))

    # ------------------------------------------------------------------ mutations

    def append(self, base_offset: int, last_offset: int, epoch: int) -> None:
        """Record a batch [base_offset, last_offset] of `epoch` at the end of the log."""
        if base_offset != self.end_offset:
            raise ValueError(f"append at {base_offset} but log end is {self.end_offset}")
        if not self._epochs or epoch > self._epochs[-1]:
            self._epochs.append(epoch)
            self._starts.append(base_offset)
        elif epoch < self._epochs[-1]:
            raise ValueError(f"append of epoch {epoch} after epoch {self._epochs[-1]}")
        self.end_offset = last_offset + 1

    def truncate_to(self, end_offset: int) -> None:
        """Drop records at or after `end_offset` and the epochs that start there."""
        self.end_offset = end_offset
        self.persisted_end = min(self.persisted_end, end_offset)
        i = bisect.bisect_left(self._starts, end_offset)
        del self._epochs[i:]
        del self._starts[i:]

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch, size: int) -> None:
        """The whole log was replaced by a snapshot: start = end = its end offset."""
        self.start_offset = snapshot_id.offset
        self.end_offset = snapshot_id.offset
        self.persisted_end = snapshot_id.offset
        self._epochs.clear()
        self._starts.clear()
        self.snapshots[snapshot_id] = size

    def advance_start(self, offset: int) -> None:
        """Forget records below `offset` (their epochs stay if a later record uses them)."""
        self.start_offset = max(self.start_offset, offset)
