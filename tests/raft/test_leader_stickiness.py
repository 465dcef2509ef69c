"""Leader stickiness (Raft thesis 4.2.3, etcd's CheckQuorum lease; `elections.live_leader`):
a replica that hears a live leader -- a follower whose leader answered a fetch less than
the fetch timeout ago, a leader that a majority fetched from within it -- does not move to
a higher epoch on a Vote, pre-vote, BeginQuorumEpoch or EndQuorumEpoch request. It answers
with its own leader and epoch and changes nothing. Without a live leader the request is
honoured as KIP-595 / KIP-996 prescribe, and a leader's own EndQuorumEpoch always is."""

from __future__ import annotations

from typing import Any

import pytest

from kraft.protocol.errors import ErrorCode
from kraft.raft.effects import PersistQuorumState, SendRequest, SendResponse, StateChanged
from kraft.raft.epochs import MAX_EPOCH
from kraft.raft.events import RequestFailed, Shutdown
from kraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    Request,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import Role
from kraft.sim.harness import CoreHarness, dir_id, endpoint

FORGER = 9  # no replica of these quorums
KINDS = ["vote", "pre-vote", "begin", "end"]


def forged(kind: str, epoch: int, to: int) -> Request:
    """A request from outside the quorum naming `epoch`, with a log longer than any."""
    if kind in ("vote", "pre-vote"):
        return VoteRequest(epoch, FORGER, dir_id(FORGER), to, dir_id(to), epoch - 1, 1 << 62,
                           pre_vote=kind == "pre-vote")
    if kind == "begin":
        return BeginQuorumEpochRequest(FORGER, epoch, to, dir_id(to), endpoint(FORGER))
    return EndQuorumEpochRequest(FORGER, epoch, (), endpoint(FORGER))


def live_follower() -> tuple[CoreHarness, SendRequest]:
    """Node 1 following node 2 in epoch 3, its last fetch answered just now; the next fetch
    (in flight) is returned."""
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1])
    h.advance(1)
    return h, h.sent(FetchRequest)[-1]


def live_leader() -> CoreHarness:
    """Node 1 leading epoch 1 of (1, 2, 3); voter 2 fetched just now."""
    h = CoreHarness.leader()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    return h


def answer(h: CoreHarness) -> Any:
    sent = [e for e in h.last if isinstance(e, SendResponse)]
    assert len(sent) == 1, h.last
    return sent[0].response


def snapshot(h: CoreHarness) -> tuple[Any, ...]:
    return (h.role, h.epoch, h.core.leader_id, h.core.high_watermark, h.log_end)


def assert_ignored(h: CoreHarness, kind: str, before: tuple[Any, ...]) -> None:
    a = answer(h)
    assert (a.leader_id, a.leader_epoch) == (before[2], before[1])
    if kind in ("vote", "pre-vote"):
        assert isinstance(a, VoteResponse)
        assert a.error_code == ErrorCode.NONE and not a.vote_granted
    else:
        assert isinstance(a, BeginQuorumEpochResponse | EndQuorumEpochResponse)
        assert a.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert snapshot(h) == before
    assert not [e for e in h.last if isinstance(e, PersistQuorumState | StateChanged)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("above", [1, 1000, None], ids=["epoch+1", "epoch+1000", "max-epoch"])
def test_follower_of_a_live_leader_ignores_a_higher_epoch(kind: str, above: int | None) -> None:
    h, _ = live_follower()
    before = snapshot(h)
    assert before[:3] == (Role.FOLLOWER, 3, 2)
    h.request(FORGER, forged(kind, MAX_EPOCH if above is None else h.epoch + above, 1))
    assert_ignored(h, kind, before)
    # it goes on following: the leader's next answer keeps it there
    h.fetch_response(h.sent(FetchRequest)[-1])
    assert snapshot(h) == before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("above", [1, 1000, None], ids=["epoch+1", "epoch+1000", "max-epoch"])
def test_leader_heard_by_a_majority_ignores_a_higher_epoch(kind: str, above: int | None) -> None:
    h = live_leader()
    before = snapshot(h)
    assert before[0] is Role.LEADER
    h.request(FORGER, forged(kind, MAX_EPOCH if above is None else h.epoch + above, 1))
    assert_ignored(h, kind, before)
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    assert h.role is Role.LEADER and h.epoch == before[1]


@pytest.mark.parametrize("kind", KINDS)
def test_the_lease_lasts_one_fetch_timeout_from_the_last_answer(kind: str) -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1])
    answered = h.now
    # the leader falls silent: its lease holds until a fetch timeout after that answer
    h.advance(h.config.fetch_timeout_ms - 1)
    before = snapshot(h)
    h.request(FORGER, forged(kind, h.epoch + 1000, 1))
    assert_ignored(h, kind, before)
    h.advance(answered + h.config.fetch_timeout_ms - h.now)
    h.request(FORGER, forged(kind, h.epoch + 1000, 1))
    assert h.epoch == 1003


@pytest.mark.parametrize("kind", KINDS)
def test_a_leader_no_majority_fetched_from_within_the_fetch_timeout_honours_it(
        kind: str) -> None:
    h = live_leader()
    h.advance(h.config.fetch_timeout_ms - 1)
    before = snapshot(h)
    h.request(FORGER, forged(kind, h.epoch + 1000, 1))
    assert_ignored(h, kind, before)
    h.advance(1)
    assert h.role is Role.LEADER  # check-quorum has not run out yet (1.5 x fetch timeout)
    h.request(FORGER, forged(kind, h.epoch + 1000, 1))
    assert h.epoch == 1001 and h.role is not Role.LEADER


@pytest.mark.parametrize("kind", KINDS)
def test_follower_that_never_fetched_honours_a_higher_epoch(kind: str) -> None:
    # Kafka's behaviour when no leader is live: a Vote or pre-vote of a higher epoch makes
    # the replica Unattached in that epoch, a BeginQuorumEpoch or EndQuorumEpoch follows
    # the leader it names
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.request(FORGER, forged(kind, 1000, 1))
    assert h.epoch == 1000
    if kind in ("vote", "pre-vote"):
        assert h.role is Role.UNATTACHED
        assert answer(h).vote_granted  # its log is longer, and no vote was cast
    else:
        assert (h.role, h.core.leader_id) == (Role.FOLLOWER, FORGER)
    assert h.persisted_state() is not None and h.persisted_state().leader_epoch == 1000


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["disconnected", "unreachable"])
def test_follower_cut_off_from_its_leader_honours_a_higher_epoch(kind: str, how: str) -> None:
    h, inflight = live_follower()
    h.handle(RequestFailed(inflight.destination, inflight.correlation_id,
                           unreachable=how == "unreachable",
                           disconnected=how == "disconnected"))
    # no longer protected: with the leader unreachable the survivor's pre-vote may start
    assert h.role in (Role.FOLLOWER, Role.PROSPECTIVE) and h.epoch == 3
    h.request(FORGER, forged(kind, h.epoch + 1000, 1))
    assert h.epoch == 1003


def test_leaders_own_end_quorum_epoch_is_honoured_while_live() -> None:
    h, _ = live_follower()
    h.request(2, EndQuorumEpochRequest(2, 3, ((h.core.key),), endpoint(2)))
    assert answer(h).error_code == ErrorCode.NONE
    # first of the preferred candidates: its election starts at once
    assert h.role is Role.PROSPECTIVE and h.epoch == 3
    # after that the lease is over: a real candidate's vote is honoured
    h.request(3, VoteRequest(4, 3, dir_id(3), 1, dir_id(1), 3, 1 << 40))
    assert h.epoch == 4 and answer(h).vote_granted


def test_resigned_leader_honours_its_successors_epoch() -> None:
    h = live_leader()
    h.handle(Shutdown())
    assert h.role is Role.RESIGNED
    h.begin_quorum(2, h.epoch + 1)
    assert (h.role, h.epoch, h.core.leader_id) == (Role.FOLLOWER, 2, 2)


def test_prevote_at_the_same_epoch_is_refused_as_before() -> None:
    # KIP-996, unchanged: a follower that fetched refuses a pre-vote of its own epoch
    h, _ = live_follower()
    h.request(3, VoteRequest(3, 3, dir_id(3), 1, dir_id(1), 3, 1 << 40, pre_vote=True))
    a = answer(h)
    assert a.error_code == ErrorCode.NONE and not a.vote_granted and a.leader_epoch == 3
    assert h.role is Role.FOLLOWER


def test_a_voter_left_in_a_higher_epoch_is_heard_through_the_begin_quorum_resend() -> None:
    # Voter 3 lost an election in epoch 5 while 1 and 2 kept their leader: its requests are
    # ignored, but the leader's BeginQuorumEpoch resend reaches it, and its fenced answer
    # moves the leader to that epoch, from which the quorum elects again (as in Kafka).
    h = live_leader()
    h.request(3, VoteRequest(5, 3, dir_id(3), 1, dir_id(1), 1, 1 << 40, pre_vote=True))
    assert h.role is Role.LEADER and h.epoch == 1
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    begins = [r for r in h.sent(BeginQuorumEpochRequest) if r.destination == 3]
    assert begins
    h.respond(begins[-1], BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, -1, 5))
    assert (h.role, h.epoch) == (Role.UNATTACHED, 5)
