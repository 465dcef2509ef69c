"""KIP-996: pre-vote in a Prospective state protects a healthy leader."""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.effects import PersistQuorumState
from kraft.raft.events import Shutdown
from kraft.raft.messages import FetchRequest, VoteRequest, VoteResponse
from kraft.raft.state import Role
from kraft.sim.cluster import Simulation
from kraft.sim.harness import CoreHarness, dir_id
from kraft.sim.params import SimParams


def prevote(candidate: int, epoch: int, last_epoch: int = 0, last_offset: int = 0,
            voter: int = 1) -> VoteRequest:
    return VoteRequest(epoch, candidate, dir_id(candidate), voter, dir_id(voter), last_epoch,
                       last_offset, pre_vote=True)


def last(h: CoreHarness) -> VoteResponse:
    return h.responses(VoteResponse)[-1]  # type: ignore[no-any-return]


def test_kip996_election_timeout_enters_prospective_without_bumping_epoch() -> None:
    h = CoreHarness()
    h.advance(2000)
    assert h.role is Role.PROSPECTIVE and h.epoch == 0
    reqs = h.sent(VoteRequest)
    assert sorted(r.destination for r in reqs) == [2, 3]
    assert all(r.request.pre_vote and r.request.replica_epoch == 0 for r in reqs)
    assert not any(p.leader_epoch > 0 for p in h.of_type(PersistQuorumState))


def test_kip996_prevote_majority_makes_a_candidate_with_bumped_epoch() -> None:
    h = CoreHarness()
    h.advance(2000)
    h.respond(h.sent(VoteRequest)[0], VoteResponse(ErrorCode.NONE, -1, 0, True))
    assert h.role is Role.CANDIDATE and h.epoch == 1
    normal = [r for r in h.sent(VoteRequest) if not r.request.pre_vote]
    assert sorted(r.destination for r in normal) == [2, 3]


def test_kip996_prevote_lost_goes_back_to_the_retained_leader() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=4)
    h.advance(2000)  # fetch timeout without an answer
    assert h.role is Role.PROSPECTIVE and h.epoch == 4
    for r in h.sent(VoteRequest):
        if r.request.pre_vote:
            h.respond(r, VoteResponse(ErrorCode.NONE, 2, 4, False))
    assert h.role is Role.FOLLOWER and h.core.leader_id == 2 and h.epoch == 4


def test_kip996_granting_a_prevote_is_not_persisted_and_keeps_the_epoch() -> None:
    h = CoreHarness()
    before = len(h.of_type(PersistQuorumState))
    h.request(2, prevote(2, 0))
    assert last(h).vote_granted
    assert len(h.of_type(PersistQuorumState)) == before
    assert h.epoch == 0
    h.request(3, VoteRequest(1, 3, dir_id(3), 1, dir_id(1), 0, 0))
    assert last(h).vote_granted  # the pre-vote did not use up the real vote


def test_kip996_follower_with_a_live_leader_rejects_prevotes() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    h.advance(1)
    fetch = h.sent(FetchRequest)[-1]
    h.fetch_response(fetch)
    h.request(3, prevote(3, 1))
    assert not last(h).vote_granted


def test_kip996_follower_that_never_fetched_grants_prevotes() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    h.request(3, prevote(3, 1))
    assert last(h).vote_granted


def test_kip996_leader_rejects_prevotes() -> None:
    h = CoreHarness.leader()
    h.request(3, prevote(3, h.epoch, h.epoch, h.log_end + 10))
    assert not last(h).vote_granted and h.role is Role.LEADER


def test_kip996_prevote_needs_an_up_to_date_log() -> None:
    h = CoreHarness.leader(voters=(1,))
    h.handle(Shutdown())
    h.request(3, prevote(3, h.epoch, 0, 0))
    assert not last(h).vote_granted


def test_kip996_unsupported_version_skips_prevote() -> None:
    h = CoreHarness()
    h.advance(2000)
    h.respond(h.sent(VoteRequest)[0], VoteResponse(ErrorCode.UNSUPPORTED_VERSION, -1, 0, False))
    assert h.role is Role.CANDIDATE and h.epoch == 1


def test_kip996_partitioned_voter_does_not_disrupt_a_healthy_quorum() -> None:
    sim = Simulation(3, SimParams(nodes=3, spares=0))  # a static quorum, no faults scheduled
    # run until a leader exists, isolate one follower for a long time, heal, and check that
    # the leader's epoch never moved.
    while sim._queue and sim.now < 3000:
        _drive(sim)
    leaders = sim.leaders()
    assert leaders
    leader = leaders[0]
    epoch = leader.core.epoch  # type: ignore[union-attr]
    victim = next(i for i in sim.nodes if i != leader.node_id)
    for other in sim.nodes:
        if other != victim:
            sim.blocked.update({(victim, other), (other, victim)})
    while sim._queue and sim.now < 15_000:
        _drive(sim)
    sim.blocked.clear()
    while sim._queue and sim.now < 20_000:
        _drive(sim)
    assert leader.core is not None and leader.core.role is Role.LEADER
    assert leader.core.epoch == epoch
    assert sim.nodes[victim].core.leader_id == leader.node_id  # type: ignore[union-attr]


def _drive(sim: Simulation) -> None:
    import heapq

    from kraft.sim.cluster import _FAULT, _HEAL

    at, _, kind, node, payload, inc = heapq.heappop(sim._queue)
    sim.now = at
    if kind in (_FAULT, _HEAL):
        return  # no random faults in this scripted scenario
    sim._step(kind, node, payload, inc)


def test_kip996_a_voter_that_refused_then_asks_for_a_prevote_is_asked_again() -> None:
    """Two followers lose the leader together: 3 still fetched from it when 1's pre-vote came
    (refused), then times out itself and asks 1, whose log is longer (1 refuses). 1 asks 3
    again at once and wins its vote, instead of both waiting out the election timeout and the
    fetch timeout once more."""
    h = CoreHarness.follower(leader_id=2, epoch=4)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], batches=[(0, 4), (1, 4)], high_watermark=1)
    h.persist()
    h.advance(2000)  # fetch timeout (1 ranks first among 1 and 3): Prospective at once
    assert h.role is Role.PROSPECTIVE
    first = next(r for r in h.sent(VoteRequest) if r.destination == 3 and r.request.pre_vote)
    h.respond(first, VoteResponse(ErrorCode.NONE, 2, 4, False))  # 3 still follows 2
    assert h.role is Role.PROSPECTIVE
    before = len(h.sent(VoteRequest))
    h.request(3, prevote(3, 4, last_epoch=4, last_offset=1))  # 3 timed out too, shorter log
    assert not last(h).vote_granted
    again = h.sent(VoteRequest)[before:]
    assert [(r.destination, r.request.pre_vote) for r in again] == [(3, True)]
    h.respond(again[0], VoteResponse(ErrorCode.NONE, -1, 4, True))
    assert h.role is Role.CANDIDATE and h.epoch == 5


def test_kip996_a_prospective_that_grants_the_refusing_voter_does_not_compete() -> None:
    """Same start, but 3's log is as long as ours: we grant its pre-vote, and it wins with our
    vote. Asking it again would make both of us candidates of epoch 5, each voting for itself
    (a split vote, resolved only after an election timeout)."""
    h = CoreHarness.follower(leader_id=2, epoch=4)
    h.advance(2000)
    first = next(r for r in h.sent(VoteRequest) if r.destination == 3 and r.request.pre_vote)
    h.respond(first, VoteResponse(ErrorCode.NONE, 2, 4, False))
    before = len(h.sent(VoteRequest))
    h.request(3, prevote(3, 4))
    assert last(h).vote_granted
    assert h.sent(VoteRequest)[before:] == []
    h.request(3, VoteRequest(5, 3, dir_id(3), 1, dir_id(1), 0, 0, pre_vote=False))
    assert last(h).vote_granted and h.epoch == 5 and h.role is not Role.CANDIDATE


def test_kip996_fetch_timeout_is_staggered_by_rank_and_stops_protecting_the_leader() -> None:
    """3 ranks second among the voters other than its leader 2: when its fetch timeout
    expires it grants pre-votes at once but starts its own one election_timeout / 10 later,
    so the two followers of a leader that went silent do not ask (and grant) each other
    together."""
    h = CoreHarness.follower(node_id=3, leader_id=2, epoch=4)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1])
    h.request(1, prevote(1, 4, voter=3))
    assert last(h).error_code is ErrorCode.NONE
    assert not last(h).vote_granted  # fetched from a live leader: protects it
    h.advance(2000)
    assert h.role is Role.FOLLOWER
    h.request(1, prevote(1, 4, voter=3))
    assert last(h).vote_granted  # the leader is silent: no longer protected
    h.advance(99)
    assert h.role is Role.FOLLOWER
    h.advance(1)
    assert h.role is Role.PROSPECTIVE


def test_kip996_fetch_timeout_of_the_first_ranked_follower_is_not_delayed() -> None:
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=4)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1])
    h.advance(1999)
    assert h.role is Role.FOLLOWER
    h.advance(1)
    assert h.role is Role.PROSPECTIVE


def test_kip996_a_voter_that_granted_is_not_asked_again() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=4)
    h.advance(2000)
    before = len(h.sent(VoteRequest))
    h.request(2, prevote(2, 4))  # 2 never answered us: nothing to ask again
    assert len(h.sent(VoteRequest)) == before
