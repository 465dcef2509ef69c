"""The epoch limit (`kraft.raft.epochs`): a request naming an epoch at or above 2**31 - 1
(or a negative one the field does not allow) is refused with INVALID_REQUEST and changes
nothing; an answer naming one counts as a failed request; no election starts into the limit."""

from __future__ import annotations

from typing import Any

import pytest

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import QuorumStateData
from kraft.raft.effects import (
    AppendFetched,
    PersistQuorumState,
    SendFetchResponse,
    SendFetchSnapshotResponse,
    SendRequest,
    SendResponse,
    StateChanged,
)
from kraft.raft.epochs import EPOCH_LIMIT, MAX_EPOCH, request_epoch_error
from kraft.raft.errors import RaftFatalError
from kraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchedBatch,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    KRaftVersionRange,
    OffsetAndEpoch,
    Request,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import Role
from kraft.sim.harness import CoreHarness, dir_id, endpoint, log_state

BIG = 2**31 - 1


def vote(**kw: Any) -> VoteRequest:
    f: dict[str, Any] = dict(replica_epoch=2, replica_id=2, replica_directory_id=dir_id(2),
                             voter_id=1, voter_directory_id=dir_id(1), last_offset_epoch=1,
                             last_offset=1)
    f.update(kw)
    return VoteRequest(**f)


def fetch(**kw: Any) -> FetchRequest:
    f: dict[str, Any] = dict(replica_id=2, replica_directory_id=dir_id(2),
                             current_leader_epoch=1, fetch_offset=1, last_fetched_epoch=1)
    f.update(kw)
    return FetchRequest(**f)


def fetch_snapshot(**kw: Any) -> FetchSnapshotRequest:
    f: dict[str, Any] = dict(replica_id=2, replica_directory_id=dir_id(2),
                             current_leader_epoch=1, snapshot_id=OffsetAndEpoch(1, 10),
                             position=0)
    f.update(kw)
    return FetchSnapshotRequest(**f)


def update_voter(epoch: int) -> UpdateRaftVoterRequest:
    return UpdateRaftVoterRequest(epoch, 2, dir_id(2), endpoint(2), KRaftVersionRange(0, 1))


# (request, the field its error names)
FORGED: list[tuple[Request, str]] = [
    # the forged Vote that deposed a leader: its epoch is the int32 maximum
    (vote(replica_epoch=BIG, replica_id=1, last_offset_epoch=BIG - 1, last_offset=2**62),
     "ReplicaEpoch"),
    (vote(replica_epoch=BIG, pre_vote=True), "ReplicaEpoch"),
    (vote(replica_epoch=-2), "ReplicaEpoch"),
    (vote(replica_epoch=-1), "ReplicaEpoch"),
    (vote(replica_epoch=3, last_offset_epoch=BIG), "LastOffsetEpoch"),
    (BeginQuorumEpochRequest(2, BIG, 1, dir_id(1), endpoint(2)), "LeaderEpoch"),
    (BeginQuorumEpochRequest(2, -1, 1, dir_id(1), endpoint(2)), "LeaderEpoch"),
    (EndQuorumEpochRequest(2, BIG, (), endpoint(2)), "LeaderEpoch"),
    (EndQuorumEpochRequest(2, -5, (), endpoint(2)), "LeaderEpoch"),
    (fetch(current_leader_epoch=BIG), "CurrentLeaderEpoch"),
    (fetch(current_leader_epoch=-2), "CurrentLeaderEpoch"),
    (fetch(last_fetched_epoch=BIG), "LastFetchedEpoch"),
    (fetch(last_fetched_epoch=-2), "LastFetchedEpoch"),
    (fetch_snapshot(current_leader_epoch=BIG), "CurrentLeaderEpoch"),
    (fetch_snapshot(snapshot_id=OffsetAndEpoch(BIG, 10)), "SnapshotId.Epoch"),
    (fetch_snapshot(snapshot_id=OffsetAndEpoch(-1, 10)), "SnapshotId.Epoch"),
    (update_voter(BIG), "CurrentLeaderEpoch"),
    (update_voter(-7), "CurrentLeaderEpoch"),
]


def _answer(h: CoreHarness) -> Any:
    sent = [e for e in h.last
            if isinstance(e, SendResponse | SendFetchResponse | SendFetchSnapshotResponse)]
    assert len(sent) == 1, h.last
    return sent[0].response


@pytest.mark.parametrize(("req", "field"), FORGED, ids=lambda x: getattr(x, "__name__", None))
@pytest.mark.parametrize("role", ["leader", "follower"])
def test_request_with_unusable_epoch_is_invalid_request_and_changes_nothing(
        req: Request, field: str, role: str) -> None:
    h = CoreHarness.leader() if role == "leader" else CoreHarness.follower(leader_id=2, epoch=1)
    before = (h.role, h.epoch, h.core.leader_id, h.core.high_watermark, h.log_end)
    h.request(2 if role == "leader" else 3, req)
    answer = _answer(h)
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    assert answer.leader_epoch == before[1]
    assert (h.role, h.epoch, h.core.leader_id, h.core.high_watermark, h.log_end) == before
    assert not [e for e in h.last if isinstance(e, PersistQuorumState | StateChanged)]
    why = request_epoch_error(req)
    assert why is not None and why.startswith(field + " ")


@pytest.mark.parametrize("req", [
    vote(replica_epoch=MAX_EPOCH, last_offset_epoch=MAX_EPOCH - 1),
    BeginQuorumEpochRequest(2, MAX_EPOCH, 1, dir_id(1), endpoint(2)),
    fetch(current_leader_epoch=-1, last_fetched_epoch=-1),
    fetch_snapshot(current_leader_epoch=-1),
    update_voter(-1),
])
def test_the_highest_usable_epoch_and_documented_unknown_pass_the_check(req: Request) -> None:
    assert request_epoch_error(req) is None


def test_begin_quorum_at_the_highest_usable_epoch_is_followed() -> None:
    h = CoreHarness()
    h.begin_quorum(2, MAX_EPOCH)
    assert (h.role, h.epoch, h.core.leader_id) == (Role.FOLLOWER, MAX_EPOCH, 2)


# ---------------------------------------------------------------- answers


def _candidate() -> tuple[CoreHarness, list[SendRequest]]:
    h = CoreHarness()
    h.advance(2000)
    for r in h.sent(VoteRequest):
        if r.request.pre_vote:
            h.respond(r, VoteResponse(ErrorCode.NONE, -1, h.epoch, True))
    assert h.role is Role.CANDIDATE
    return h, [r for r in h.sent(VoteRequest) if not r.request.pre_vote]


@pytest.mark.parametrize("epoch", [BIG, -2])
def test_vote_answer_with_unusable_epoch_is_a_failed_request(epoch: int) -> None:
    h, votes = _candidate()
    before = h.epoch
    h.respond(votes[0], VoteResponse(ErrorCode.NONE, 2, epoch, False))
    assert (h.role, h.epoch) == (Role.CANDIDATE, before)
    assert not h.of_type(PersistQuorumState, h.last)
    # asked again after the backoff, as after an unanswered request
    h.clear()
    h.advance(h.config.retry_backoff_ms)
    assert [r for r in h.sent(VoteRequest) if r.request.voter_id == votes[0].request.voter_id]


@pytest.mark.parametrize("answer", [
    BeginQuorumEpochResponse(ErrorCode.NONE, 3, BIG),
    EndQuorumEpochResponse(ErrorCode.NONE, 3, BIG),
    UpdateRaftVoterResponse(ErrorCode.NONE, 3, BIG),
])
def test_leader_moves_no_epoch_on_answers_with_unusable_epoch(answer: Any) -> None:
    h = CoreHarness.leader()
    sent = h.sent(BeginQuorumEpochRequest)
    assert sent
    before = h.epoch
    h.respond(sent[0], answer)
    assert (h.role, h.epoch) == (Role.LEADER, before)


@pytest.mark.parametrize("kw", [
    {"epoch": BIG},
    {"diverging_epoch": OffsetAndEpoch(BIG, 5)},
    {"snapshot_id": OffsetAndEpoch(BIG, 5)},
])
def test_fetch_answer_with_unusable_epoch_is_a_failed_fetch(kw: dict[str, Any]) -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    sent = h.sent(FetchRequest)
    assert sent
    h.fetch_response(sent[-1], **kw)
    assert (h.role, h.epoch, h.core.leader_id) == (Role.FOLLOWER, 1, 2)
    assert not h.of_type(PersistQuorumState, h.last)
    assert h.core.state.download is None  # type: ignore[union-attr]


@pytest.mark.parametrize("batch_epoch", [2, BIG, -1])
def test_fetched_batch_of_an_epoch_above_the_leaders_is_not_appended(batch_epoch: int) -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    sent = h.sent(FetchRequest)
    h.fetch_response(sent[-1], batches=[(0, batch_epoch)])  # no RaftFatalError either
    assert h.log_end == 0 and not h.of_type(AppendFetched, h.last)
    assert (h.role, h.epoch) == (Role.FOLLOWER, 1)


def test_fetch_snapshot_answer_with_unusable_epoch_is_ignored() -> None:
    resp = FetchSnapshotResponse(ErrorCode.NONE, 2, 1, OffsetAndEpoch(BIG, 10), size=10)
    from kraft.raft.epochs import response_epoch_error
    why = response_epoch_error(resp)
    assert why is not None and why.startswith("SnapshotId.Epoch")
    no_leader = FetchSnapshotResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1,
                                      OffsetAndEpoch(-1, -1))
    assert response_epoch_error(no_leader) is None
    assert response_epoch_error(FetchResponse(ErrorCode.NONE, 2, 1, 0, 0, batches=(
        FetchedBatch(0, 0, 1),))) is None


# ---------------------------------------------------------------- the core's own epochs


def test_election_from_the_highest_usable_epoch_never_starts() -> None:
    h = CoreHarness(log_state=log_state(0, (), QuorumStateData(MAX_EPOCH)))
    h.advance(20_000)  # many election timeouts; `advance` fails on a busy timer
    assert (h.role, h.epoch) == (Role.UNATTACHED, MAX_EPOCH)
    assert not h.sent(VoteRequest)
    assert all(e.leader_epoch <= MAX_EPOCH for e in h.of_type(PersistQuorumState))


def test_follower_at_the_highest_usable_epoch_stays_when_its_leader_goes_silent() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=MAX_EPOCH)
    h.advance(20_000)
    assert (h.role, h.epoch) == (Role.FOLLOWER, MAX_EPOCH)
    assert not h.sent(VoteRequest)


def test_election_into_the_highest_usable_epoch_succeeds() -> None:
    h = CoreHarness(log_state=log_state(0, (), QuorumStateData(MAX_EPOCH - 1)))
    h.elect()
    assert (h.role, h.epoch) == (Role.LEADER, MAX_EPOCH)


@pytest.mark.parametrize(("quorum", "epochs"), [
    (QuorumStateData(EPOCH_LIMIT), ()),
    (QuorumStateData(0), ((EPOCH_LIMIT, 0),)),
])
def test_core_refuses_to_start_at_an_unusable_epoch(quorum: QuorumStateData,
                                                    epochs: tuple[tuple[int, int], ...]) -> None:
    with pytest.raises(RaftFatalError, match="epoch limit"):
        CoreHarness(log_state=log_state(1 if epochs else 0, epochs, quorum))
