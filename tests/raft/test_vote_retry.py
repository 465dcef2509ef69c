"""A vote request that gets no answer is sent again within the same election round.

Kafka's candidates keep asking the voters they have no answer from (after `retry.backoff.ms`)
until the round is decided or times out. Without that, a voter that refused a connection for a
moment (restarting, or inside the transport's reconnect backoff) is only asked again in the next
round: an election timeout later and one epoch higher. Pre-vote requests are not asked again:
two prospective replicas that each win the other's pre-vote split the real vote.
"""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.effects import SendRequest
from kraft.raft.events import RequestFailed
from kraft.raft.messages import VoteRequest, VoteResponse
from kraft.raft.state import CandidateState, ProspectiveState, Role
from kraft.sim.harness import CoreHarness, dir_id


def votes_to(h: CoreHarness, voter: int, *, pre: bool) -> list[SendRequest]:
    return [r for r in h.sent(VoteRequest)
            if r.destination == voter and r.request.pre_vote is pre]


def prospective(**config: object) -> CoreHarness:
    """Node 1 of voters 1-3, in its first pre-vote round (epoch 0)."""
    h = CoreHarness(**config)
    h.advance(2 * h.config.election_timeout_ms)
    assert h.role is Role.PROSPECTIVE
    return h


def candidate(**config: object) -> CoreHarness:
    """Node 1 of voters 1-3, a candidate in epoch 1 after winning its pre-vote through node 2."""
    h = prospective(**config)
    h.respond(votes_to(h, 2, pre=True)[-1], VoteResponse(ErrorCode.NONE, -1, 0, True))
    assert h.role is Role.CANDIDATE and h.epoch == 1
    return h


def test_a_refused_prevote_request_is_not_sent_again_in_the_round() -> None:
    h = prospective()
    first = votes_to(h, 3, pre=True)[-1]
    h.handle(RequestFailed(3, first.correlation_id, unreachable=True))
    h.advance(h.config.election_timeout_ms // 2)
    assert h.role is Role.PROSPECTIVE
    assert votes_to(h, 3, pre=True) == [first]


def test_failed_vote_request_is_retried_until_answered_in_the_same_epoch() -> None:
    h = candidate()
    for _ in range(3):  # refused three times: the voter is still starting
        req = votes_to(h, 2, pre=False)[-1]
        h.handle(RequestFailed(2, req.correlation_id, unreachable=True))
        h.advance(h.config.retry_backoff_ms)
    sent = votes_to(h, 2, pre=False)
    assert len(sent) == 4
    assert {(r.request.replica_epoch, r.request.pre_vote) for r in sent} == {(1, False)}
    h.respond(sent[-1], VoteResponse(ErrorCode.NONE, -1, 1, True))
    assert h.role is Role.LEADER and h.epoch == 1


def test_timed_out_vote_requests_are_retried_too() -> None:
    h = candidate(request_timeout_ms=300)
    h.advance(300)  # neither voter answered in time
    assert len(votes_to(h, 2, pre=False)) == 1 and len(votes_to(h, 3, pre=False)) == 1
    h.advance(h.config.retry_backoff_ms)
    assert h.role is Role.CANDIDATE and h.epoch == 1
    assert len(votes_to(h, 2, pre=False)) == 2 and len(votes_to(h, 3, pre=False)) == 2


def test_no_retry_for_a_voter_that_answered_or_after_the_round_ended() -> None:
    h = candidate()
    to2 = votes_to(h, 2, pre=False)[-1]
    to3 = votes_to(h, 3, pre=False)[-1]
    h.respond(to3, VoteResponse(ErrorCode.NONE, -1, 1, False))  # voter 3 said no
    h.handle(RequestFailed(3, to3.correlation_id, unreachable=True))  # late: already answered
    h.handle(RequestFailed(2, to2.correlation_id, unreachable=True))
    assert isinstance(h.core.state, CandidateState) and set(h.core.state.vote_retry) == {2}
    # The round ends before the retry is due: voter 2 asks for its own vote in a higher epoch
    # and this replica grants it.
    h.request(2, VoteRequest(2, 2, dir_id(2), 1, dir_id(1), 0, 1))
    assert h.epoch == 2 and h.role is Role.UNATTACHED
    h.advance(h.config.retry_backoff_ms)
    assert len(votes_to(h, 2, pre=False)) == 1 and len(votes_to(h, 3, pre=False)) == 1


def test_a_failure_from_an_earlier_round_schedules_nothing_in_a_later_one() -> None:
    h = candidate(request_timeout_ms=60_000)
    old = votes_to(h, 3, pre=False)[-1]
    for _ in range(1000):  # the round times out, the replica backs off and pre-votes again
        h.advance(10)
        if h.role is Role.PROSPECTIVE:
            break
    assert isinstance(h.core.state, ProspectiveState) and h.epoch == 1

    def epoch1_votes() -> int:
        return sum(r.request.replica_epoch == 1 for r in votes_to(h, 3, pre=False))

    before = epoch1_votes()
    h.handle(RequestFailed(3, old.correlation_id, unreachable=True))
    # It wins the pre-vote and becomes a candidate of epoch 2: nothing of epoch 1 is resent.
    h.respond(votes_to(h, 2, pre=True)[-1], VoteResponse(ErrorCode.NONE, -1, 1, True))
    assert isinstance(h.core.state, CandidateState) and h.epoch == 2
    assert not h.core.state.vote_retry
    h.advance(h.config.retry_backoff_ms)
    assert epoch1_votes() == before == 1
