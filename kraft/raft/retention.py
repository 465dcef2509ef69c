"""Which snapshots, and which prefix of the log, a replica may delete (KIP-630 retention).

Pure functions over numbers handed to them: no file is looked at here. The core calls them
with what the runtime measured (`RetentionMeasured`: the log's segment sizes and each
snapshot's LastContainedLogTimestamp) and what the core itself knows (its snapshots and their
sizes, its log start, the snapshots a FetchSnapshot is reading).

The leader's rule is Kafka's `KafkaMetadataLog.maybeClean` (run every 60 s there):

1. `metadata.max.retention.bytes` (negative: off): while the log's bytes plus the bytes of
   every snapshot still kept exceed the limit, the oldest snapshot goes and the log start
   moves up to the end offset of the next one; segments whose offsets all lie below the new
   log start go with it (the active segment never does).
2. `metadata.max.retention.ms` (negative: off): then, while the oldest snapshot's
   LastContainedLogTimestamp is more than that long ago, the same step.

Either pass stops at the first snapshot it may not delete. The latest snapshot is never
deleted (a step always needs a next snapshot to move the log start to), so the log start
never passes it. Ours adds one stop Kafka does not have: a snapshot that a FetchSnapshot read
within the last fetch timeout (`protected`) stays, so a follower downloading it finishes.

A follower's (and an observer's) rule is KIP-630's: its log start follows the leader's, the
LogStartOffset of the leader's Fetch answers, as far as its own snapshots allow:
`follower_log_start`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from kraft.raft.messages import OffsetAndEpoch

__all__ = [
    "RetainedSnapshot",
    "follower_log_start",
    "log_bytes_from",
    "retention_log_start",
]


@dataclass(frozen=True, slots=True)
class RetainedSnapshot:
    """One complete snapshot as the retention rule sees it: its id, its size in bytes and its
    SnapshotHeader's LastContainedLogTimestamp (None when unknown: the time rule keeps it)."""

    snapshot_id: OffsetAndEpoch
    size_bytes: int
    timestamp_ms: int | None = None


def log_bytes_from(segments: Sequence[tuple[int, int]], log_start: int) -> int:
    """The bytes of the log's segments ((base offset, bytes), oldest first) that remain when
    the log starts at `log_start`: a segment is deleted only when the next one starts at or
    below the log start (all its offsets are below it); the last, active one always stays."""
    total = 0
    for i, (_base, size) in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1][0] <= log_start:
            continue
        total += size
    return total


def retention_log_start(
    snapshots: Iterable[RetainedSnapshot],
    log_start: int,
    segments: Sequence[tuple[int, int]],
    now_ms: int,
    max_bytes: int,
    max_ms: int,
    protected: Collection[OffsetAndEpoch] = (),
) -> OffsetAndEpoch | None:
    """The snapshot the leader's log start moves up to (every older snapshot is deleted with
    the log below it), or None when nothing may go. See the module docstring for the rule."""
    snaps = sorted(snapshots, key=lambda s: (s.snapshot_id.offset, s.snapshot_id.epoch))
    if len(snaps) < 2:
        return None
    start = log_start
    first = 0  # the oldest snapshot still kept
    new: OffsetAndEpoch | None = None

    def step() -> bool:
        """Delete snaps[first] and move the log start to the next one's end offset."""
        nonlocal start, first, new
        old, nxt = snaps[first], snaps[first + 1]
        if old.snapshot_id in protected or nxt.snapshot_id.offset <= start:
            return False
        start = nxt.snapshot_id.offset
        new = nxt.snapshot_id
        first += 1
        return True

    if max_bytes >= 0:
        kept = sum(s.size_bytes for s in snaps)
        while first + 1 < len(snaps):
            if log_bytes_from(segments, start) + kept <= max_bytes:
                break
            size = snaps[first].size_bytes
            if not step():
                break
            kept -= size
    if max_ms >= 0:
        while first + 1 < len(snaps):
            ts = snaps[first].timestamp_ms
            if ts is None or now_ms - ts <= max_ms or not step():
                break
    return new


def follower_log_start(
    snapshots: Iterable[OffsetAndEpoch], log_start: int, leader_log_start: int, high_watermark: int
) -> OffsetAndEpoch | None:
    """The snapshot a follower's log start moves up to, or None: the latest of its own
    snapshots that ends above its log start and at or below both the leader's log start and
    its own high watermark. So the follower's log start is min(the leader's log start, its
    latest snapshot), taken down to where one of its own snapshots ends (a log only starts
    where a snapshot of this replica covers everything before it)."""
    best: OffsetAndEpoch | None = None
    for sid in snapshots:
        if log_start < sid.offset <= min(leader_log_start, high_watermark) and (
            best is None or (sid.offset, sid.epoch) > (best.offset, best.epoch)
        ):
            best = sid
    return best
