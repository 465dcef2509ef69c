"""KIP-630 retention: which snapshots and which log prefix a replica deletes, and when.

The rule (`kraft.raft.retention`) is Kafka's `KafkaMetadataLog.maybeClean` on the leader
(metadata.max.retention.bytes, then metadata.max.retention.ms, oldest snapshot first, never the
latest), plus our stop at a snapshot a FetchSnapshot is reading; a follower's log start
follows the leader's LogStartOffset, at most to its own latest snapshot.
"""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import LogState, QuorumStateData
from kraft.raft.effects import (
    AdvanceLogStart,
    CreateSnapshot,
    DeleteSnapshot,
    MeasureRetention,
    SendFetchSnapshotResponse,
)
from kraft.raft.events import RetentionMeasured, SnapshotCreated, SnapshotRequested
from kraft.raft.messages import (
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    OffsetAndEpoch,
)
from kraft.raft.retention import (
    RetainedSnapshot,
    follower_log_start,
    log_bytes_from,
    retention_log_start,
)
from kraft.sim.harness import CoreHarness, dir_id

S10, S20, S30 = OffsetAndEpoch(1, 10), OffsetAndEpoch(1, 20), OffsetAndEpoch(1, 30)
MB = 1 << 20


def snaps(*sizes: int, times: tuple[int | None, ...] = ()) -> list[RetainedSnapshot]:
    ids = [OffsetAndEpoch(1, 10 * (i + 1)) for i in range(len(sizes))]
    return [RetainedSnapshot(sid, size, times[i] if i < len(times) else None)
            for i, (sid, size) in enumerate(zip(ids, sizes, strict=True))]


# ------------------------------------------------------------------ the rule, pure


def test_log_bytes_drop_only_whole_segments_below_the_log_start() -> None:
    segments = [(0, 100), (15, 100), (25, 100)]
    assert log_bytes_from(segments, 0) == 300
    assert log_bytes_from(segments, 14) == 300  # segment 0 still holds offset 14
    assert log_bytes_from(segments, 15) == 200
    assert log_bytes_from(segments, 99) == 100  # the active segment always stays


def test_retention_keeps_everything_within_the_byte_limit() -> None:
    assert retention_log_start(snaps(10, 10, 10), 0, [(0, 10)], 0, 100, -1) is None


def test_retention_never_deletes_the_latest_snapshot() -> None:
    # far over the limit, yet one snapshot is all there is: nothing goes (Kafka's
    # cleanSnapshots needs two), and with three the log start stops at the latest
    assert retention_log_start(snaps(MB), 0, [(0, MB)], 0, 0, 0) is None
    assert retention_log_start(snaps(MB, MB, MB), 0, [(0, MB)], 0, 0, -1) == S30


def test_retention_bytes_deletes_oldest_first_until_under_the_limit() -> None:
    # log 50 + snapshots 30+30+30 = 140 > 100: the oldest goes (110 left), still over: the
    # next goes (80 left, and the log shrinks only by whole segments)
    assert retention_log_start(snaps(30, 30, 30), 0, [(0, 50)], 0, 100, -1) == S30
    # 60 + 30 + 30 = 120 > 100: one step is enough (90)
    assert retention_log_start(snaps(30, 30, 30), 0, [(0, 30)], 0, 100, -1) == S20


def test_retention_bytes_counts_the_segments_deleted_with_the_log_start() -> None:
    # segments [0,20) 60 B and [20,..) 10 B; snapshots 10+10+10: 100 > 90, the oldest goes and
    # the log start reaches 20, which frees the first segment: 10 + 20 = 30, done
    assert retention_log_start(snaps(10, 10, 10), 0, [(0, 60), (20, 10)], 0, 90, -1) == S20


def test_retention_ms_deletes_snapshots_older_than_the_limit() -> None:
    s = snaps(1, 1, 1, times=(1_000, 5_000, 9_000))
    assert retention_log_start(s, 0, [(0, 1)], 10_000, -1, 6_000) == S20
    assert retention_log_start(s, 0, [(0, 1)], 10_000, -1, 4_000) == S30
    assert retention_log_start(s, 0, [(0, 1)], 10_000, -1, 9_000) is None
    # a snapshot whose timestamp is unknown stops the time rule
    unknown = snaps(1, 1, 1, times=(None, 5_000, 9_000))
    assert retention_log_start(unknown, 0, [(0, 1)], 10_000, -1, 1) is None


def test_retention_negative_limits_keep_everything() -> None:
    s = snaps(MB, MB, MB, times=(0, 0, 0))
    assert retention_log_start(s, 0, [(0, MB)], 10**12, -1, -1) is None


def test_retention_stops_at_a_snapshot_being_read() -> None:
    s = snaps(MB, MB, MB)
    assert retention_log_start(s, 0, [(0, 1)], 0, 0, -1, protected={S10}) is None
    # an older one may still go: the log start stops at the one being read
    assert retention_log_start(s, 0, [(0, 1)], 0, 0, -1, protected={S20}) == S20


def test_retention_only_moves_the_log_start_up() -> None:
    at_20 = [RetainedSnapshot(S20, MB), RetainedSnapshot(S30, MB)]
    assert retention_log_start(at_20, 20, [(20, 1)], 0, 0, -1) == S30
    assert retention_log_start(snaps(MB, MB), 20, [(20, 1)], 0, 0, -1) is None


def test_follower_log_start_is_min_of_leader_log_start_and_latest_snapshot() -> None:
    own = [S10, S20, S30]
    assert follower_log_start(own, 0, 0, 100) is None
    assert follower_log_start(own, 0, 25, 100) == S20  # at one of its own snapshots
    assert follower_log_start(own, 0, 1000, 100) == S30  # its latest snapshot
    assert follower_log_start(own, 0, 1000, 25) == S20  # never above its high watermark
    assert follower_log_start(own, 20, 25, 100) is None  # already there


# ------------------------------------------------------------------ the leader


def leader(snapshots: tuple[tuple[OffsetAndEpoch, int], ...], **kw: object) -> CoreHarness:
    """A single-voter leader whose log [0, 30) is committed, with `snapshots`."""
    state = LogState(
        quorum_state=QuorumStateData(1),
        log_end_offset=30,
        epoch_cache=((1, 0),),
        snapshots=snapshots,
    )
    h = CoreHarness.leader(voters=(1,), log_state=state, **kw)  # type: ignore[arg-type]
    assert h.core.high_watermark is not None and h.core.high_watermark >= 30
    h.clear()
    return h


def test_kip630_new_snapshot_does_not_move_the_log_start_by_itself() -> None:
    # Kafka moves the log start only when retention says so: a new snapshot leaves the log
    # and the older snapshots for a lagging follower (and one downloading the older one)
    h = leader(((S10, 100),), snapshot_max_bytes_between=10**9)
    h.handle(SnapshotRequested())
    sid = h.of_type(CreateSnapshot)[-1].snapshot_id
    h.handle(SnapshotCreated(sid, 100))
    assert h.core.log.start_offset == 0
    assert not h.of_type(AdvanceLogStart) and not h.of_type(DeleteSnapshot)
    assert set(h.core.log.snapshots) == {S10, sid}


def test_kip630_leader_checks_retention_every_interval() -> None:
    # (with two snapshots at least: with one, the rule has nothing it could delete)
    h = leader(((S10, 100), (S20, 100)), retention_check_interval_ms=5_000)
    h.advance(4_000)
    first = len(h.of_type(MeasureRetention))
    h.advance(5_000)
    assert len(h.of_type(MeasureRetention)) == first + 1


def test_kip630_leader_retention_moves_the_log_start_and_deletes_older_snapshots() -> None:
    h = leader(((S10, 60), (S20, 60)), retention_max_bytes=100)
    h.handle(RetentionMeasured(((0, 10),), ()))
    assert [e.offset for e in h.of_type(AdvanceLogStart)] == [20]
    assert [e.snapshot_id for e in h.of_type(DeleteSnapshot)] == [S10]
    assert h.core.log.start_offset == 20 and set(h.core.log.snapshots) == {S20}


def test_kip630_leader_default_retention_keeps_small_logs() -> None:
    h = leader(((S10, 60), (S20, 60)))  # 100 MiB, 7 days
    h.handle(RetentionMeasured(((0, 10),), ((S10, 0), (S20, 0))))
    assert not h.of_type(AdvanceLogStart) and h.core.log.start_offset == 0


def test_kip630_leader_retention_ms_uses_the_snapshot_timestamps() -> None:
    h = leader(((S10, 1), (S20, 1)), retention_max_ms=1_000)
    h.now = 10_000
    h.handle(RetentionMeasured(((0, 10),), ((S10, 9_000), (S20, 9_500))))
    assert h.core.log.start_offset == 0
    h.handle(RetentionMeasured(((0, 10),), ((S10, 8_999), (S20, 9_500))))
    assert h.core.log.start_offset == 20


def fetch_snapshot(h: CoreHarness, sid: OffsetAndEpoch, position: int) -> None:
    h.request(2, FetchSnapshotRequest(2, dir_id(2), h.epoch, sid, position, 64))
    assert h.of_type(SendFetchSnapshotResponse)[-1].response.error_code == ErrorCode.NONE


def test_kip630_snapshot_being_downloaded_is_not_deleted() -> None:
    h = leader(((S10, 600), (S20, 600)), retention_max_bytes=0, fetch_timeout_ms=2_000)
    fetch_snapshot(h, S10, 0)
    h.now += 1_500
    fetch_snapshot(h, S10, 64)
    h.now += 1_500
    h.handle(RetentionMeasured(((0, 10),), ()))
    assert h.core.log.start_offset == 0 and S10 in h.core.log.snapshots
    # the download ends (or stops) and the fetch timeout passes: now it may go
    h.now += 600
    h.handle(RetentionMeasured(((0, 10),), ()))
    assert h.core.log.start_offset == 20 and S10 not in h.core.log.snapshots
    h.request(2, FetchSnapshotRequest(2, dir_id(2), h.epoch, S10, 128, 64))
    r = h.of_type(SendFetchSnapshotResponse)[-1].response
    assert r.error_code == ErrorCode.SNAPSHOT_NOT_FOUND


# ------------------------------------------------------------------ a follower


def follower(snapshots: tuple[tuple[OffsetAndEpoch, int], ...]) -> CoreHarness:
    state = LogState(
        quorum_state=QuorumStateData(1),
        log_end_offset=40,
        epoch_cache=((1, 0),),
        snapshots=snapshots,
    )
    return CoreHarness.follower(node_id=1, leader_id=2, epoch=1, log_state=state)


def answer(h: CoreHarness, high_watermark: int, log_start: int) -> None:
    sent = h.sent(FetchRequest)[-1]
    h.respond(sent, FetchResponse(ErrorCode.NONE, 2, 1, high_watermark, log_start))


def test_kip630_follower_log_start_follows_the_leader_up_to_its_own_snapshots() -> None:
    h = follower(((S10, 5), (S20, 5), (S30, 5)))
    answer(h, 40, 0)
    assert h.core.log.start_offset == 0 and not h.of_type(AdvanceLogStart)
    h.advance(10)
    answer(h, 40, 25)  # the leader's log start: down to this replica's snapshot at 20
    assert h.core.log.start_offset == 20
    assert [e.snapshot_id for e in h.of_type(DeleteSnapshot)] == [S10]
    h.advance(10)
    answer(h, 40, 1_000)  # beyond every snapshot of this replica: its latest
    assert h.core.log.start_offset == 30
    assert [e.offset for e in h.of_type(AdvanceLogStart)] == [20, 30]


def test_kip630_follower_keeps_its_log_while_the_leader_keeps_its_own() -> None:
    # a follower's own snapshot does not move its log start past the leader's
    h = follower(())
    answer(h, 40, 0)
    h.handle(SnapshotRequested())
    sid = h.of_type(CreateSnapshot)[-1].snapshot_id
    h.handle(SnapshotCreated(sid, 10))
    assert h.core.log.start_offset == 0 and not h.of_type(AdvanceLogStart)
    # once the leader's log start is past it, its own snapshot is where the log starts
    h.advance(10)
    answer(h, 40, 40)
    assert h.core.log.start_offset == sid.offset
