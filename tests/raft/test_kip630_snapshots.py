"""KIP-630: snapshot triggers, snapshot redirects in Fetch, FetchSnapshot and installation."""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import LogState, QuorumStateData
from kraft.raft.effects import (
    AbortSnapshotDownload,
    Committed,
    CreateSnapshot,
    InstallSnapshot,
    SendFetchSnapshotResponse,
    WriteSnapshotChunk,
)
from kraft.raft.events import (
    Append,
    RequestFailed,
    SnapshotInstalled,
    SnapshotInstallFailed,
    SnapshotRequested,
    Tick,
)
from kraft.raft.messages import (
    FetchRequest,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import Role
from kraft.sim.harness import CoreHarness, dir_id, log_state, voter_set

SNAP = OffsetAndEpoch(2, 20)


def committed_leader(**kw: object) -> CoreHarness:
    h = CoreHarness.leader(voters=(1, 2, 3), **kw)  # type: ignore[arg-type]
    h.handle(Append(1, ("a", "b", "c")))
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    assert h.core.high_watermark == h.log_end
    return h


def test_kip630_snapshot_requested_at_the_high_watermark_after_commit() -> None:
    h = committed_leader()
    effects = h.handle(SnapshotRequested())
    snaps = [e for e in effects if isinstance(e, CreateSnapshot)]
    assert snaps and snaps[0].snapshot_id == OffsetAndEpoch(h.epoch, h.core.high_watermark)
    commits = [i for i, e in enumerate(h.effects) if isinstance(e, Committed)
               and e.high_watermark >= snaps[0].snapshot_id.offset]
    assert commits and commits[0] < h.effects.index(snaps[0])
    assert snaps[0].voters == h.core.voters() and snaps[0].kraft_version == 1


def test_kip630_snapshot_triggered_by_bytes_between_snapshots() -> None:
    h = committed_leader(snapshot_max_bytes_between=3)
    assert h.of_type(CreateSnapshot)


def test_kip630_snapshot_not_triggered_below_the_byte_threshold() -> None:
    h = committed_leader(snapshot_max_bytes_between=1000, snapshot_interval_ms=0)
    assert not h.of_type(CreateSnapshot)


def test_kip630_snapshot_triggered_by_interval() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3), snapshot_max_bytes_between=10**9,
                           snapshot_interval_ms=1000)
    h.advance(1000)
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    assert h.of_type(CreateSnapshot)


def leader_with_snapshot() -> CoreHarness:
    state = LogState(
        quorum_state=QuorumStateData(2),
        log_start_offset=20,
        log_end_offset=30,
        epoch_cache=((2, 20),),
        voters_history=((-1, voter_set((1, 2, 3))),),
        kraft_version_history=((-1, 1),),
        snapshots=((SNAP, 100),),
    )
    h = CoreHarness(log_state=state)
    h.elect()
    return h


def test_kip630_fetch_below_log_start_answers_snapshot_id() -> None:
    h = leader_with_snapshot()
    h.fetch_from(2, 5, 1)
    r = h.fetch_responses()[-1]
    assert r.response.snapshot_id == SNAP and r.read_offset is None
    assert r.response.log_start_offset == 20


def test_kip630_fetch_from_empty_log_answers_snapshot_id() -> None:
    h = leader_with_snapshot()
    h.fetch_from(2, 0, 0)
    assert h.fetch_responses()[-1].response.snapshot_id == SNAP


def test_kip630_fetch_at_log_start_with_matching_epoch_reads_the_log() -> None:
    h = leader_with_snapshot()
    h.fetch_from(2, 20, 2)
    r = h.fetch_responses()[-1]
    assert r.response.snapshot_id is None and r.read_offset == 20


def fetch_snapshot(h: CoreHarness, sid: OffsetAndEpoch, position: int) -> FetchSnapshotResponse:
    h.request(2, FetchSnapshotRequest(2, dir_id(2), h.epoch, sid, position, 64))
    return h.of_type(SendFetchSnapshotResponse)[-1].response


def test_kip630_fetch_snapshot_chunk() -> None:
    h = leader_with_snapshot()
    r = fetch_snapshot(h, SNAP, 0)
    assert (r.error_code, r.size, r.position) == (ErrorCode.NONE, 100, 0)
    assert h.of_type(SendFetchSnapshotResponse)[-1].max_bytes == 64


def test_kip630_fetch_snapshot_unknown_id_is_snapshot_not_found() -> None:
    h = leader_with_snapshot()
    assert fetch_snapshot(h, OffsetAndEpoch(2, 25), 0).error_code == ErrorCode.SNAPSHOT_NOT_FOUND


def test_kip630_fetch_snapshot_bad_position_is_position_out_of_range() -> None:
    h = leader_with_snapshot()
    assert fetch_snapshot(h, SNAP, 100).error_code == ErrorCode.POSITION_OUT_OF_RANGE
    assert fetch_snapshot(h, SNAP, -1).error_code == ErrorCode.POSITION_OUT_OF_RANGE


def test_kip630_fetch_snapshot_epoch_fencing() -> None:
    h = leader_with_snapshot()
    h.request(2, FetchSnapshotRequest(2, dir_id(2), h.epoch - 1, SNAP, 0))
    r = h.of_type(SendFetchSnapshotResponse)[-1].response
    assert r.error_code == ErrorCode.FENCED_LEADER_EPOCH


def follower_redirected() -> CoreHarness:
    h = CoreHarness(log_state=log_state(5, ((1, 0),), QuorumStateData(1)))
    h.begin_quorum(3, 4)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], snapshot_id=SNAP, high_watermark=25)
    return h


def test_kip630_follower_pulls_snapshot_in_chunks_and_installs_it() -> None:
    h = follower_redirected()
    h.advance(1)
    req = h.sent(FetchSnapshotRequest)[-1]
    assert (req.request.snapshot_id, req.request.position) == (SNAP, 0)
    h.respond(req, FetchSnapshotResponse(ErrorCode.NONE, 3, 4, SNAP, 100, 0, b"x" * 60))
    assert h.of_type(WriteSnapshotChunk)[-1].position == 0
    h.advance(1)
    req = h.sent(FetchSnapshotRequest)[-1]
    assert req.request.position == 60
    h.respond(req, FetchSnapshotResponse(ErrorCode.NONE, 3, 4, SNAP, 100, 60, b"y" * 40))
    assert h.of_type(InstallSnapshot)[-1].snapshot_id == SNAP
    h.handle(SnapshotInstalled(SNAP, 100, voter_set((1, 2, 3)), 1))
    assert (h.core.log.start_offset, h.core.log.end_offset) == (20, 20)
    assert h.core.high_watermark == 20
    h.advance(1)
    fetch = h.sent(FetchRequest)[-1].request
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (20, 2)


def test_kip630_snapshot_not_found_drops_the_download_and_fetches_again() -> None:
    h = follower_redirected()
    h.advance(1)
    req = h.sent(FetchSnapshotRequest)[-1]
    h.respond(req, FetchSnapshotResponse(ErrorCode.SNAPSHOT_NOT_FOUND, 3, 4, SNAP))
    assert h.of_type(AbortSnapshotDownload)[-1].snapshot_id == SNAP
    h.advance(1)
    assert h.sent(FetchRequest)[-1].request.fetch_offset == 5


def test_kip630_replica_with_incomplete_snapshot_votes_with_its_log_only() -> None:
    h = follower_redirected()
    h.advance(1)
    req = h.sent(FetchSnapshotRequest)[-1]
    h.respond(req, FetchSnapshotResponse(ErrorCode.NONE, 3, 4, SNAP, 100, 0, b"x" * 60))
    # the leader's end cuts the next chunk's fetch off: no live leader keeps this replica
    # from a higher epoch (`elections.live_leader`)
    h.advance(1)
    nxt = h.sent(FetchSnapshotRequest)[-1]
    assert nxt.request.position == 60
    h.handle(RequestFailed(nxt.destination, nxt.correlation_id, disconnected=True))
    # a candidate whose log ends where ours does (5 @ epoch 1) is as up to date as we are:
    # the partial snapshot (20 @ epoch 2) does not count
    h.request(5, VoteRequest(6, 5, dir_id(5), 1, dir_id(1), 1, 5))
    assert h.responses(VoteResponse)[-1].vote_granted
    assert h.role is Role.UNATTACHED
    assert h.of_type(AbortSnapshotDownload)  # leaving the follower state drops the partial


def test_kip630_no_fetch_while_the_log_is_being_replaced_by_a_snapshot() -> None:
    h = follower_redirected()
    h.advance(1)
    req = h.sent(FetchSnapshotRequest)[-1]
    h.respond(req, FetchSnapshotResponse(ErrorCode.NONE, 3, 4, SNAP, 100, 0, b"x" * 100))
    assert h.of_type(InstallSnapshot)
    n = len(h.sent(FetchRequest))
    h.begin_quorum(2, 5)  # a new leader before the runtime answered InstallSnapshot
    h.advance(100)
    assert len(h.sent(FetchRequest)) == n
    h.handle(SnapshotInstalled(SNAP, 100, voter_set((1, 2, 3)), 1))
    h.advance(1)
    assert h.sent(FetchRequest)[-1].request.fetch_offset == 20


def test_kip630_snapshot_requested_at_an_applied_offset_below_the_hw() -> None:
    h = committed_leader()
    hw = h.core.high_watermark
    assert hw is not None
    h.handle(SnapshotRequested(end_offset=hw - 1))
    assert h.of_type(CreateSnapshot)[-1].snapshot_id.offset == hw - 1


def test_kip630_snapshot_never_beyond_the_high_watermark() -> None:
    h = committed_leader()
    hw = h.core.high_watermark
    assert hw is not None
    h.handle(SnapshotRequested(end_offset=hw + 1))
    assert not h.of_type(CreateSnapshot)


def test_kip630_one_snapshot_at_a_time() -> None:
    h = committed_leader()
    h.handle(SnapshotRequested())
    h.handle(Append(2, ("d",)))
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    h.handle(SnapshotRequested())
    assert len(h.of_type(CreateSnapshot)) == 1


def download_then_install(h: CoreHarness, leader: int, epoch: int) -> None:
    """Fetch -> SnapshotId -> one FetchSnapshot chunk that completes SNAP -> InstallSnapshot."""
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], snapshot_id=SNAP, high_watermark=25)
    h.advance(1)
    h.respond(h.sent(FetchSnapshotRequest)[-1],
              FetchSnapshotResponse(ErrorCode.NONE, leader, epoch, SNAP, 100, 0, b"x" * 100))
    assert h.of_type(InstallSnapshot)


def test_kip630_observer_waiting_for_an_install_arms_no_busy_timer() -> None:
    # An observer finishes a download; the runtime then takes longer than the fetch timeout to
    # install the snapshot. It must not ask for a Tick "now" over and over (a busy loop for as
    # long as the install takes); fetching resumes once the install is done.
    h = CoreHarness.follower(node_id=7, leader_id=3, epoch=4)
    download_then_install(h, 3, 4)
    h.advance(5000)  # raises on a busy timer
    deadline = h.core.next_deadline()
    if deadline is not None:  # a Tick at the deadline must move it on, not leave it at "now"
        h.now = max(h.now, deadline)
        h.handle(Tick())
        after = h.core.next_deadline()
        assert after is None or after > deadline
    n = len(h.sent(FetchRequest))
    h.handle(SnapshotInstalled(SNAP, 100, voter_set((1, 2, 3)), 1))
    h.advance(200)
    assert len(h.sent(FetchRequest)) > n


def test_kip630_a_long_install_keeps_the_leader_and_fetches_from_it_right_after() -> None:
    # The runtime sends no fetch while it installs a snapshot, so the leader's silence then
    # says nothing. An observer whose install outlasts the fetch timeout (a 1 GB snapshot
    # loading) used to drop its leader when the install ended and rediscover one through the
    # bootstrap servers, which under leader churn could take long; a voter went Prospective.
    for node_id, voters in ((7, (1, 2, 3)), (2, (1, 2, 3))):
        h = CoreHarness.follower(node_id=node_id, leader_id=3, epoch=4, voters=voters)
        download_then_install(h, 3, 4)
        h.advance(3 * h.config.fetch_timeout_ms)
        assert (h.role, h.core.leader_id, h.epoch) == (Role.FOLLOWER, 3, 4)
        assert not h.sent(VoteRequest)
        n = len(h.sent(FetchRequest))
        h.handle(SnapshotInstalled(SNAP, 100, voter_set((1, 2, 3)), 1))
        h.advance(1)
        fetch = h.sent(FetchRequest)[n]
        assert fetch.destination == 3 and fetch.request.fetch_offset == SNAP.offset
        # the fetch timeout starts again at the end of the install, not before it
        h.advance(h.config.fetch_timeout_ms - 10)
        assert h.role is Role.FOLLOWER


def test_kip630_after_an_install_the_replica_follows_the_leader_its_old_one_names() -> None:
    # The leader changed while the snapshot was being installed: the first fetch after the
    # install goes to the old leader, whose answer names the new one.
    h = CoreHarness.follower(node_id=7, leader_id=3, epoch=4)
    download_then_install(h, 3, 4)
    h.advance(10_000)
    n = len(h.sent(FetchRequest))
    h.handle(SnapshotInstalled(SNAP, 100, voter_set((1, 2, 3)), 1))
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[n], error=ErrorCode.FENCED_LEADER_EPOCH,
                     leader_id=2, epoch=6)
    assert (h.role, h.core.leader_id, h.epoch) == (Role.FOLLOWER, 2, 6)
    h.advance(1)
    assert h.sent(FetchRequest)[-1].destination == 2


def test_kip630_a_failed_install_restarts_the_download_from_the_leader() -> None:
    h = CoreHarness.follower(node_id=7, leader_id=3, epoch=4)
    download_then_install(h, 3, 4)
    h.advance(10_000)
    n = len(h.sent(FetchRequest))
    h.handle(SnapshotInstallFailed(SNAP, "disk full"))
    h.advance(1)
    assert h.role is Role.FOLLOWER and h.sent(FetchRequest)[n].destination == 3
