"""KIP-595: epochs, states, votes, Begin/EndQuorumEpoch, check-quorum, observers."""

from __future__ import annotations

import pytest

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import QuorumStateData
from kraft.raft.effects import AppendControl, PersistQuorumState, SendResponse, StateChanged
from kraft.raft.events import Shutdown
from kraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import Role
from kraft.records.control import LeaderChangeMessage
from kraft.sim.harness import CoreHarness, dir_id, endpoint, log_state


def vote(candidate: int, epoch: int, last_epoch: int, last_offset: int, voter: int = 1,
         pre: bool = False) -> VoteRequest:
    return VoteRequest(epoch, candidate, dir_id(candidate), voter, dir_id(voter), last_epoch,
                       last_offset, pre)


def last_vote_response(h: CoreHarness) -> VoteResponse:
    r = h.responses(VoteResponse)
    assert r
    return r[-1]  # type: ignore[no-any-return]


def test_kip595_vote_granted_to_candidate_with_up_to_date_log() -> None:
    h = CoreHarness(log_state=log_state(10, ((1, 0), (2, 5)), QuorumStateData(2)))
    h.request(2, vote(2, 3, 2, 10))
    assert last_vote_response(h).vote_granted


@pytest.mark.parametrize(("last_epoch", "last_offset"), [(1, 20), (2, 9)])
def test_kip595_vote_rejected_when_candidate_log_is_behind(last_epoch: int, last_offset: int) -> None:
    h = CoreHarness(log_state=log_state(10, ((1, 0), (2, 5)), QuorumStateData(2)))
    h.request(2, vote(2, 3, last_epoch, last_offset))
    r = last_vote_response(h)
    assert r.error_code == ErrorCode.NONE and not r.vote_granted
    assert h.epoch == 3  # the higher epoch is adopted even without granting


def test_kip595_at_most_one_vote_per_epoch() -> None:
    h = CoreHarness()
    h.request(2, vote(2, 1, 0, 0))
    assert last_vote_response(h).vote_granted
    h.request(3, vote(3, 1, 0, 0))
    assert not last_vote_response(h).vote_granted
    h.request(2, vote(2, 1, 0, 0))  # the same candidate again: still granted
    assert last_vote_response(h).vote_granted


def test_kip595_vote_persisted_before_it_is_answered() -> None:
    h = CoreHarness()
    effects = h.request(2, vote(2, 1, 0, 0))
    persist = [i for i, e in enumerate(effects)
               if isinstance(e, PersistQuorumState) and e.voted_id == 2 and e.leader_epoch == 1]
    answer = [i for i, e in enumerate(effects) if isinstance(e, SendResponse)]
    assert persist and answer and persist[0] < answer[0]


def test_kip595_vote_from_lower_epoch_is_fenced() -> None:
    h = CoreHarness(log_state=log_state(0, (), QuorumStateData(5)))
    h.request(2, vote(2, 4, 0, 0))
    r = last_vote_response(h)
    assert r.error_code == ErrorCode.FENCED_LEADER_EPOCH and r.leader_epoch == 5


@pytest.mark.parametrize("bad", [
    vote(2, 1, 1, 0),        # last epoch >= candidate epoch
    vote(2, 1, -1, 0),       # negative epoch
    vote(2, 1, 0, -5),       # negative offset
    vote(-3, 1, 0, 0),       # negative replica id
])
def test_kip595_malformed_vote_is_invalid_request(bad: VoteRequest) -> None:
    h = CoreHarness()
    h.request(2, bad)
    assert last_vote_response(h).error_code == ErrorCode.INVALID_REQUEST
    assert h.epoch == 0


def test_kip595_vote_for_another_voter_key_is_invalid_voter_key() -> None:
    h = CoreHarness()
    h.request(2, vote(2, 1, 0, 0, voter=3))
    assert last_vote_response(h).error_code == ErrorCode.INVALID_VOTER_KEY
    req = VoteRequest(1, 2, dir_id(2), 1, dir_id(1, generation=9), 0, 0)
    h.request(2, req)
    assert last_vote_response(h).error_code == ErrorCode.INVALID_VOTER_KEY


def test_kip595_follower_never_grants_a_normal_vote() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.request(3, vote(3, 3, 0, 0))
    assert not last_vote_response(h).vote_granted


def test_kip595_vote_accepted_from_replica_not_in_local_voters_set() -> None:
    h = CoreHarness(voters=(1, 2, 3))
    h.request(7, vote(7, 1, 0, 0))
    assert last_vote_response(h).vote_granted


def test_kip595_election_timeout_is_randomized_in_t_to_2t() -> None:
    deadlines = set()
    for seed in range(30):
        h = CoreHarness(seed=seed)
        d = h.core.next_deadline()
        assert d is not None and 1000 <= d < 2000
        deadlines.add(d)
    assert len(deadlines) > 5


def test_kip595_candidate_backs_off_after_losing_then_retries_with_prevote() -> None:
    h = CoreHarness()
    h.advance(2000)
    for r in h.sent(VoteRequest):
        h.respond(r, VoteResponse(ErrorCode.NONE, -1, 0, True))
    assert h.role is Role.CANDIDATE and h.epoch == 1
    # every voter rejects: the election is lost, the candidate backs off, then pre-votes again
    for corr, f in list(h.core._inflight.items()):
        from kraft.raft.events import ResponseReceived
        h.handle(ResponseReceived(f.destination, corr, VoteResponse(ErrorCode.NONE, -1, 1, False)))
    assert h.role is Role.CANDIDATE
    state = h.core.state
    assert getattr(state, "backoff_until", None) is not None
    assert state.backoff_until - h.now <= h.config.election_backoff_max_ms  # type: ignore[union-attr]
    h.advance(h.config.election_backoff_max_ms + 1)
    assert h.role is Role.PROSPECTIVE and h.epoch == 1


def test_kip595_leader_sends_begin_quorum_epoch_to_every_other_voter() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3, 4))
    targets = sorted(r.destination for r in h.sent(BeginQuorumEpochRequest))
    assert targets == [2, 3, 4]


def test_kip595_leader_resends_begin_quorum_epoch_to_voters_not_fetching() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.clear()
    h.advance(500)
    h.fetch_from(2, h.log_end, h.epoch)
    h.advance(500)  # fetch timeout / 2 since the election: 2 fetched 500 ms ago
    assert [r.destination for r in h.sent(BeginQuorumEpochRequest)] == [3]


def test_kip595_leader_resends_begin_quorum_epoch_to_a_voter_that_stopped_fetching() -> None:
    # Kafka's LeaderState.needToSendBeginQuorumRequests: every voter whose last fetch is
    # fetch timeout / 2 old, not only the voters that never fetched in the epoch.
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    h.fetch_from(3, h.log_end, h.epoch, max_wait_ms=0)
    start = h.now
    sent: list[tuple[int, int]] = []
    for _ in range(35):  # 3 keeps fetching every 100 ms, 2 went silent
        h.clear()
        h.advance(100)
        sent += [(h.now - start, r.destination) for r in h.sent(BeginQuorumEpochRequest)]
        h.fetch_from(3, h.log_end, h.epoch, max_wait_ms=0)
    assert sent == [(1000, 2), (2000, 2), (3000, 2)]


def test_kip595_leader_appends_leader_change_first_in_its_epoch() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    control = h.of_type(AppendControl)
    assert control and control[0].epoch == h.epoch and control[0].base_offset == 0
    first = control[0].control_records[0]
    assert isinstance(first, LeaderChangeMessage) and first.leader_id == 1


def test_kip595_shutdown_resigns_with_end_quorum_epoch_and_preferred_candidates() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.fetch_from(3, h.log_end, h.epoch)
    h.fetch_from(2, 0, 0)
    h.clear()
    h.handle(Shutdown())
    assert h.role is Role.RESIGNED
    ends = h.sent(EndQuorumEpochRequest)
    assert sorted(e.destination for e in ends) == [2, 3]
    prefs = ends[0].request.preferred_candidates
    assert [k.id for k in prefs] == [3, 2]  # most caught-up first


def test_kip595_end_quorum_epoch_backoff_follows_preferred_position() -> None:
    for pos, expected in [(1, 250), (2, 500)]:  # (max >> (n - 1)) << (pos - 1), n = 3
        h = CoreHarness.follower(node_id=1, leader_id=2, epoch=1, voters=(1, 2, 3, 4),
                                 election_backoff_max_ms=1000)
        others = [3, 4]
        prefs = [*others[:pos], 1, *others[pos:]]
        from kraft.raft.messages import ReplicaKey
        keys = tuple(ReplicaKey(i, dir_id(i)) for i in prefs)
        h.request(2, EndQuorumEpochRequest(2, 1, keys))
        state = h.core.state
        assert state.fetch_deadline - h.now == expected  # type: ignore[union-attr]
    # the first preferred candidate does not wait at all: it starts a pre-vote at once
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=1, voters=(1, 2, 3, 4))
    from kraft.raft.messages import ReplicaKey as Key
    h.request(2, EndQuorumEpochRequest(2, 1, (Key(1, dir_id(1)), Key(3, dir_id(3)))))
    assert h.role is Role.PROSPECTIVE


def test_kip595_end_quorum_ranks_preferred_candidates_by_id_and_directory_id() -> None:
    # Kafka's KafkaRaftClient.endEpochElectionBackoff: a preferred candidate is this replica
    # only when its id and, if it names one, its directory id match. An entry for this id with
    # another directory id (a replica of this id that lost its disk) is someone else.
    from kraft.raft.messages import ReplicaKey as Key
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=1, voters=(1, 2, 3, 4),
                             election_backoff_max_ms=1000)
    h.request(2, EndQuorumEpochRequest(2, 1, (Key(1, dir_id(1, generation=9)),
                                              Key(3, dir_id(3)))))
    assert h.role is Role.FOLLOWER
    assert h.core.state.fetch_deadline - h.now == 1000  # type: ignore[union-attr]
    # without a directory id the entry matches by id (kraft.version 0)
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=1, voters=(1, 2, 3, 4))
    h.request(2, EndQuorumEpochRequest(2, 1, (Key(1, None), Key(3, dir_id(3)))))
    assert h.role is Role.PROSPECTIVE


def test_kip595_check_quorum_leader_resigns_without_majority_fetching() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.advance(2999)
    assert h.role is Role.LEADER
    h.advance(2)
    assert h.role is Role.RESIGNED


def test_kip595_check_quorum_kept_by_majority_fetching() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    for _ in range(5):
        h.advance(1000)
        h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    assert h.role is Role.LEADER


def test_kip595_single_voter_never_resigns_on_check_quorum() -> None:
    h = CoreHarness.leader(voters=(1,))
    h.advance(60_000)
    assert h.role is Role.LEADER


def test_kip595_restart_of_the_leader_comes_back_resigned() -> None:
    h = CoreHarness(log_state=log_state(3, ((4, 0),), QuorumStateData(4, 1, 1, dir_id(1))))
    assert h.role is Role.RESIGNED and h.epoch == 4


def test_kip595_restart_with_log_epoch_ahead_of_quorum_state_is_unattached() -> None:
    h = CoreHarness(log_state=log_state(3, ((6, 0),), QuorumStateData(4, 2)))
    assert h.role is Role.UNATTACHED and h.epoch == 6


def test_kip595_begin_quorum_epoch_makes_a_follower_and_is_persisted() -> None:
    h = CoreHarness()
    effects = h.begin_quorum(3, 5)
    assert h.role is Role.FOLLOWER and h.core.leader_id == 3
    p = [e for e in effects if isinstance(e, PersistQuorumState)]
    assert p and p[-1].leader_id == 3 and p[-1].leader_epoch == 5
    assert h.responses(BeginQuorumEpochResponse)[-1].error_code == ErrorCode.NONE


def test_kip595_begin_quorum_epoch_from_older_epoch_is_fenced() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=5)
    h.begin_quorum(3, 4)
    assert h.responses(BeginQuorumEpochResponse)[-1].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert h.core.leader_id == 2


def test_kip595_begin_quorum_epoch_accepted_from_leader_not_in_local_voters_set() -> None:
    h = CoreHarness(voters=(1, 2, 3))
    h.request(9, BeginQuorumEpochRequest(9, 2, 1, dir_id(1), endpoint(9)))
    assert h.role is Role.FOLLOWER and h.core.leader_id == 9


def test_kip595_observer_discovers_leader_through_bootstrap_servers() -> None:
    h = CoreHarness(node_id=5, voters=(1, 2, 3))
    assert h.role is Role.UNATTACHED
    h.advance(1)
    fetches = h.sent(FetchRequest)
    assert fetches and fetches[0].destination < 0  # a bootstrap server, id unknown
    h.respond(fetches[0], FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 3, -1, 0,
                                        leader_endpoints=endpoint(2)), source=1)
    assert h.role is Role.FOLLOWER and h.core.leader_id == 2 and h.epoch == 3
    h.advance(1)
    assert h.sent(FetchRequest)[-1].destination == 2


def test_kip595_observer_never_starts_an_election() -> None:
    h = CoreHarness(node_id=5, voters=(1, 2, 3))
    h.advance(30_000)
    assert h.role is Role.UNATTACHED and h.epoch == 0
    assert not h.sent(VoteRequest)


def test_kip595_state_changes_are_reported() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    roles = [e.state for e in h.of_type(StateChanged)]
    assert roles[-3:] == ["prospective", "candidate", "leader"]
