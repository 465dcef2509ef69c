"""A follower whose leader refuses connections (its process is gone) starts a pre-vote at once.

The runtime reports `RequestFailed(unreachable=True)` when connecting to the destination is
refused. Pre-vote keeps the shortcut safe: a voter that still fetches from a live leader
rejects the pre-vote, which sends the prospective replica back to following that leader.
"""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.events import RequestFailed
from kraft.raft.messages import FetchRequest, VoteRequest, VoteResponse
from kraft.raft.state import FollowerState, Role
from kraft.sim.harness import CoreHarness, dir_id


def refuse_fetch(h: CoreHarness, leader: int = 2) -> None:
    h.advance(1)
    fetch = h.sent(FetchRequest)[-1]
    h.handle(RequestFailed(leader, fetch.correlation_id, unreachable=True))


def test_refused_connection_to_the_leader_starts_a_prevote_before_the_fetch_timeout() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)  # node 1, voters 1-3: first survivor
    refuse_fetch(h)
    h.advance(0)
    assert h.role is Role.PROSPECTIVE and h.epoch == 3
    prevotes = [r for r in h.sent(VoteRequest) if r.request.pre_vote]
    assert sorted(r.destination for r in prevotes) == [2, 3]


def test_second_survivor_waits_one_step_so_the_vote_is_rarely_split() -> None:
    h = CoreHarness.follower(node_id=3, leader_id=2, epoch=3)
    refuse_fetch(h)
    h.advance(0)
    assert h.role is Role.FOLLOWER
    h.advance(h.core.config.election_timeout_ms // 10)
    assert h.role is Role.PROSPECTIVE and h.epoch == 3


def test_a_timeout_or_reset_of_an_open_connection_does_not_start_a_prevote() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.advance(1)
    fetch = h.sent(FetchRequest)[-1]
    h.handle(RequestFailed(2, fetch.correlation_id))
    h.advance(500)
    assert h.role is Role.FOLLOWER


def test_a_successful_fetch_cancels_the_early_prevote() -> None:
    h = CoreHarness.follower(node_id=3, leader_id=2, epoch=3)
    refuse_fetch(h)
    h.advance(25)  # retry backoff: the leader answers the next fetch (it was restarting)
    h.fetch_response(h.sent(FetchRequest)[-1])
    h.advance(h.core.config.election_timeout_ms)
    assert h.role is Role.FOLLOWER


def test_follower_that_saw_its_leader_refuse_grants_prevotes() -> None:
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=3)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1])
    assert isinstance(h.core.state, FollowerState) and h.core.state.has_fetched
    h.handle(RequestFailed(2, h.sent(FetchRequest)[-1].correlation_id, unreachable=True))
    h.request(3, VoteRequest(3, 3, dir_id(3), 1, dir_id(1), 0, 0, pre_vote=True))
    assert h.responses(VoteResponse)[-1].vote_granted


def test_voters_of_a_live_leader_reject_it_and_it_follows_that_leader_again() -> None:
    # Node 1 cannot connect to leader 2, but node 3 still fetches from it.
    voter3 = CoreHarness.follower(node_id=3, leader_id=2, epoch=3)
    voter3.advance(1)
    voter3.fetch_response(voter3.sent(FetchRequest)[-1])
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=3)
    refuse_fetch(h)
    h.advance(0)
    assert h.role is Role.PROSPECTIVE
    to3 = next(r for r in h.sent(VoteRequest) if r.request.pre_vote and r.destination == 3)
    voter3.request(1, VoteRequest(3, 1, dir_id(1), 3, dir_id(3), 0, 0, pre_vote=True))
    answer = voter3.responses(VoteResponse)[-1]
    assert not answer.vote_granted and answer.leader_id == 2
    h.respond(to3, answer)
    assert h.role is Role.FOLLOWER and h.core.leader_id == 2 and h.epoch == 3


def test_prospective_after_a_refused_leader_grants_a_real_vote() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    refuse_fetch(h)
    h.advance(0)
    assert h.role is Role.PROSPECTIVE
    h.request(3, VoteRequest(4, 3, dir_id(3), 1, dir_id(1), 0, 0))
    assert h.responses(VoteResponse)[-1].vote_granted
    assert h.epoch == 4


def test_prevote_win_after_refused_leader_becomes_candidate() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    refuse_fetch(h)
    h.advance(0)
    to3 = next(r for r in h.sent(VoteRequest) if r.request.pre_vote and r.destination == 3)
    h.respond(to3, VoteResponse(ErrorCode.NONE, -1, 3, True))
    assert h.role is Role.CANDIDATE and h.epoch == 4


def test_granted_prevote_from_a_voter_that_still_names_the_dead_leader_counts() -> None:
    # Node 3 saw leader 2 refuse; node 1 (also refused, so it still names leader 2 but does
    # not fetch from it) grants node 3's pre-vote: node 3 becomes a candidate.
    h = CoreHarness.follower(node_id=3, leader_id=2, epoch=3)
    refuse_fetch(h)
    h.advance(h.core.config.election_timeout_ms // 10)
    assert h.role is Role.PROSPECTIVE
    to1 = next(r for r in h.sent(VoteRequest) if r.request.pre_vote and r.destination == 1)
    h.respond(to1, VoteResponse(ErrorCode.NONE, 2, 3, True))
    assert h.role is Role.CANDIDATE and h.epoch == 4


def fetched_follower(node_id: int = 3, leader: int = 2) -> CoreHarness:
    h = CoreHarness.follower(node_id=node_id, leader_id=leader, epoch=3)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1])
    assert isinstance(h.core.state, FollowerState) and h.core.state.has_fetched
    return h


def prevote_from(h: CoreHarness, candidate: int) -> VoteResponse:
    h.request(candidate, VoteRequest(3, candidate, dir_id(candidate), h.core.key.id,
                                     dir_id(h.core.key.id), 0, 0, pre_vote=True))
    return h.responses(VoteResponse)[-1]


def test_a_fetch_cut_off_by_the_leader_closing_the_connection_ends_the_protection() -> None:
    h = fetched_follower()
    assert not prevote_from(h, 1).vote_granted  # it hears from its leader
    h.advance(1)
    h.handle(RequestFailed(2, h.sent(FetchRequest)[-1].correlation_id, disconnected=True))
    assert prevote_from(h, 1).vote_granted
    # No pre-vote of its own for a closed connection: the fetch timeout still decides that.
    h.advance(h.core.config.fetch_timeout_ms // 2)
    assert h.role is Role.FOLLOWER and h.epoch == 3


def test_a_successful_fetch_after_the_disconnect_protects_the_leader_again() -> None:
    h = fetched_follower()
    h.advance(1)
    h.handle(RequestFailed(2, h.sent(FetchRequest)[-1].correlation_id, disconnected=True))
    h.advance(h.core.config.retry_backoff_ms)
    h.fetch_response(h.sent(FetchRequest)[-1])  # reconnected: the leader is alive
    assert not prevote_from(h, 1).vote_granted


def test_a_timed_out_fetch_keeps_the_protection() -> None:
    h = fetched_follower()
    h.advance(1)
    h.handle(RequestFailed(2, h.sent(FetchRequest)[-1].correlation_id))
    assert not prevote_from(h, 1).vote_granted


def test_survivors_of_a_killed_leader_elect_at_once_whoever_learns_of_the_refusal_first() -> None:
    # Leader 2 is killed: both fetches parked there fail with the closed connection. Node 1
    # (rank 0) then finds the port refusing and asks node 3 before node 3's own reconnect
    # attempt has failed: node 3 grants, because its fetch was cut off.
    n1, n3 = fetched_follower(node_id=1), fetched_follower(node_id=3)
    for h in (n1, n3):
        h.advance(1)
        h.handle(RequestFailed(2, h.sent(FetchRequest)[-1].correlation_id, disconnected=True))
    n1.advance(n1.core.config.retry_backoff_ms)
    n1.handle(RequestFailed(2, n1.sent(FetchRequest)[-1].correlation_id, unreachable=True))
    n1.advance(0)
    assert n1.role is Role.PROSPECTIVE
    to3 = next(r for r in n1.sent(VoteRequest) if r.request.pre_vote and r.destination == 3)
    n3.request(1, to3.request)
    answer = n3.responses(VoteResponse)[-1]
    assert answer.vote_granted and answer.leader_id == 2
    n1.respond(to3, answer)
    assert n1.role is Role.CANDIDATE and n1.epoch == 4
