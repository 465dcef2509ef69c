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


def fetched_follower(node_id: int = 3, leader: int = 2,
                     voters: tuple[int, ...] = (1, 2, 3)) -> CoreHarness:
    h = CoreHarness.follower(node_id=node_id, leader_id=leader, epoch=3, voters=voters)
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


def survivors_of_a_refused_leader(n3_ahead: bool) -> tuple[CoreHarness, CoreHarness]:
    """Nodes 1 and 3 after leader 2 refused both their connections; node 3 holds one more
    record than node 1 when `n3_ahead` (it had fetched the leader's last write, node 1 not)."""
    n1, n3 = fetched_follower(node_id=1), fetched_follower(node_id=3)
    if n3_ahead:
        n3.advance(1)
        n3.fetch_response(n3.sent(FetchRequest)[-1], batches=[(0, 3)])
        n3.persist()
        assert n3.log_end == 1 and n1.log_end == 0
    for h in (n1, n3):
        refuse_fetch(h)
    return n1, n3


def n3_wins_the_prevote_of(n1: CoreHarness, n3: CoreHarness) -> None:
    """Node 3, Prospective, asks node 1 for its pre-vote, is granted, and is a candidate."""
    to1 = next(r for r in n3.sent(VoteRequest) if r.request.pre_vote and r.destination == 1)
    n1.request(3, to1.request)
    answer = n1.responses(VoteResponse)[-1]
    assert answer.vote_granted
    n3.respond(to1, answer)
    assert n3.role is Role.CANDIDATE and n3.epoch == 4


def test_a_survivor_that_refuses_a_shorter_log_starts_its_own_prevote_at_once() -> None:
    # Node 1 ranks first and asks at once, but its log is behind: node 3 refuses it. Node 3
    # then does not wait out its turn (election_timeout / 10): it is the one that can win.
    n1, n3 = survivors_of_a_refused_leader(n3_ahead=True)
    n1.advance(0)
    n3.advance(0)
    assert n1.role is Role.PROSPECTIVE and n3.role is Role.FOLLOWER
    to3 = next(r for r in n1.sent(VoteRequest) if r.request.pre_vote and r.destination == 3)
    n3.request(1, to3.request)
    assert not n3.responses(VoteResponse)[-1].vote_granted
    n3.advance(0)
    assert n3.role is Role.PROSPECTIVE and n3.epoch == 3
    # Node 1, sent back to following the dead leader by the refusal, grants it: node 3 is
    # a candidate without having waited for its turn.
    n1.respond(to3, n3.responses(VoteResponse)[-1])
    n3_wins_the_prevote_of(n1, n3)


def test_a_survivor_that_grants_the_first_one_keeps_its_turn() -> None:
    n1, n3 = survivors_of_a_refused_leader(n3_ahead=False)
    n1.advance(0)
    to3 = next(r for r in n1.sent(VoteRequest) if r.request.pre_vote and r.destination == 3)
    n3.request(1, to3.request)
    assert n3.responses(VoteResponse)[-1].vote_granted
    n3.advance(0)
    assert n3.role is Role.FOLLOWER  # node 1 wins with this vote; no second candidate


def one_record_ahead(voters: tuple[int, ...] = (1, 2, 3)) -> CoreHarness:
    """Node 3 following leader 2, with one record more than a voter whose log is empty."""
    h = fetched_follower(node_id=3, voters=voters)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], batches=[(0, 3)])
    h.persist()
    return h


def waits_its_turn(h: CoreHarness) -> None:
    """Node 3 (second among the survivors) starts its pre-vote one step later, not at once."""
    h.advance(0)
    assert h.role is Role.FOLLOWER
    h.advance(h.core.config.election_timeout_ms // 10)
    assert h.role is Role.PROSPECTIVE


def refuse_prevote_of_shorter_log(h: CoreHarness, asker: int = 1) -> None:
    h.request(asker, VoteRequest(3, asker, dir_id(asker), 3, dir_id(3), 0, 0, pre_vote=True))
    assert not h.responses(VoteResponse)[-1].vote_granted


def test_a_follower_of_a_live_leader_that_refuses_a_shorter_log_stays_a_follower() -> None:
    h = one_record_ahead()
    refuse_prevote_of_shorter_log(h)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], high_watermark=1)  # the leader is alive
    h.advance(h.core.config.fetch_timeout_ms // 2)
    assert h.role is Role.FOLLOWER and h.epoch == 3
    # The successful fetch forgot the refusal: when the leader later refuses connections,
    # this replica waits its turn as usual.
    refuse_fetch(h)
    waits_its_turn(h)


def test_after_a_fetch_timeout_a_survivor_refusing_a_shorter_log_stops_waiting_its_turn() -> None:
    # The leader went silent (a partition): node 3 waits its turn after its fetch timeout,
    # then node 1 (rank 0, shorter log) asks: node 3 refuses it and goes at once.
    h = one_record_ahead()
    h.advance(h.core.config.fetch_timeout_ms)
    assert h.role is Role.FOLLOWER
    refuse_prevote_of_shorter_log(h)
    h.advance(0)
    assert h.role is Role.PROSPECTIVE and h.epoch == 3


def test_a_shorter_log_refused_before_the_fetch_timeout_skips_the_turn() -> None:
    h = one_record_ahead()
    h.advance(h.core.config.fetch_timeout_ms - 10)
    refuse_prevote_of_shorter_log(h)  # still hearing from the leader: refused either way
    assert h.role is Role.FOLLOWER
    h.advance(10)
    assert h.role is Role.PROSPECTIVE and h.epoch == 3


def test_a_shorter_log_refused_before_the_leader_refuses_connections_skips_the_turn() -> None:
    h = one_record_ahead()
    refuse_prevote_of_shorter_log(h)
    refuse_fetch(h)
    h.advance(0)
    assert h.role is Role.PROSPECTIVE and h.epoch == 3


def test_with_five_voters_one_refusal_does_not_decide_and_the_turn_is_kept() -> None:
    # Voters 1, 3, 4, 5 survive leader 2: node 1 can still win with nodes 4 and 5, so node 3
    # starting its own pre-vote at once could split the vote.
    h = one_record_ahead(voters=(1, 2, 3, 4, 5))
    refuse_fetch(h)
    refuse_prevote_of_shorter_log(h)
    waits_its_turn(h)


def test_a_survivor_that_refused_while_still_fetching_skips_its_turn_at_the_fetch_timeout() -> None:
    # A silent leader: node 1's fetch timed out first and it asked node 3, which still heard
    # from the leader and refused. Node 1 waits in Prospective; node 3 goes at its own fetch
    # timeout instead of a turn later, and node 1 grants it.
    n1, n3 = fetched_follower(node_id=1), fetched_follower(node_id=3)
    n1.advance(n1.core.config.fetch_timeout_ms)
    assert n1.role is Role.PROSPECTIVE
    to3 = next(r for r in n1.sent(VoteRequest) if r.request.pre_vote and r.destination == 3)
    n3.advance(n3.core.config.fetch_timeout_ms - 5)
    n3.request(1, to3.request)
    answer = n3.responses(VoteResponse)[-1]
    assert not answer.vote_granted
    n1.respond(to3, answer)
    assert n1.role is Role.PROSPECTIVE  # it keeps the silent leader and does not ask again
    n3.advance(5)
    assert n3.role is Role.PROSPECTIVE and n3.epoch == 3
    n3_wins_the_prevote_of(n1, n3)


def test_a_survivor_that_refused_while_still_fetching_keeps_its_turn_after_a_refusal() -> None:
    # A killed leader: node 1, refused in the leader's name, follows it again and asks again
    # once the port refuses it; node 3 then grants it. Going at once would make two candidates.
    n3 = fetched_follower(node_id=3)
    assert not prevote_from(n3, 1).vote_granted
    refuse_fetch(n3)
    n3.advance(0)
    assert n3.role is Role.FOLLOWER
    assert prevote_from(n3, 1).vote_granted
    n3.advance(n3.core.config.election_timeout_ms // 10 - 1)
    assert n3.role is Role.FOLLOWER
