"""Timers, transitions and the error paths that did not fit the per-KIP files."""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import QuorumStateData
from kraft.raft.effects import (
    AppendCommitted,
    AppendControl,
    AppendRejected,
    SendRequest,
    StateChanged,
)
from kraft.raft.events import Append, RequestFailed
from kraft.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    KRaftVersionRange,
    RemoveRaftVoterRequest,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoterChangeResponse,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import Role
from kraft.records.control import VotersRecord
from kraft.sim.harness import CoreHarness, dir_id, endpoint, log_state


def test_follower_fetch_timeout_starts_a_prevote() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.advance(1999)
    assert h.role is Role.FOLLOWER
    h.advance(1)
    assert h.role is Role.PROSPECTIVE and h.epoch == 3


def test_observer_fetch_timeout_goes_back_to_bootstrap_discovery() -> None:
    h = CoreHarness.follower(node_id=7, leader_id=2, epoch=3)
    h.advance(2000)
    assert h.role is Role.UNATTACHED and h.epoch == 3
    h.advance(200)
    assert h.sent(FetchRequest)[-1].destination < 0


def test_successful_fetches_keep_a_follower_following() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    for _ in range(6):
        h.advance(1)
        h.fetch_response(h.sent(FetchRequest)[-1])
        h.advance(700)
    assert h.role is Role.FOLLOWER


def test_failed_fetch_is_retried_after_the_backoff() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.advance(1)
    first = h.sent(FetchRequest)[-1]
    h.handle(RequestFailed(2, first.correlation_id))
    h.advance(19)
    assert h.sent(FetchRequest)[-1] is first
    h.advance(1)
    assert h.sent(FetchRequest)[-1] is not first


def test_unanswered_fetch_times_out_and_is_resent() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3, request_timeout_ms=300)
    h.advance(1)
    n = len(h.sent(FetchRequest))
    h.advance(350)
    assert len(h.sent(FetchRequest)) == n + 1


def test_late_and_duplicate_responses_are_ignored() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.advance(1)
    sent = h.sent(FetchRequest)[-1]
    h.fetch_response(sent, batches=[(0, 3)])
    h.fetch_response(sent, batches=[(0, 3)])  # duplicate: same correlation id
    assert h.log_end == 1


def test_candidate_election_timeout_backs_off_then_prevotes_again() -> None:
    h = CoreHarness()
    h.advance(2000)
    h.respond(h.sent(VoteRequest)[0], VoteResponse(ErrorCode.NONE, -1, 0, True))
    assert h.role is Role.CANDIDATE
    h.clear()
    h.advance(2000 + 1000 + 1)  # election timeout + the largest backoff
    states = [(e.state, e.epoch) for e in h.of_type(StateChanged)]
    assert states and states[0] == ("prospective", 1)  # no new epoch without a pre-vote


def test_resigned_leader_starts_a_prevote_after_its_election_timeout() -> None:
    h = CoreHarness(log_state=log_state(3, ((4, 0),), QuorumStateData(4, 1, 1, dir_id(1))))
    assert h.role is Role.RESIGNED
    h.advance(2000)
    assert h.role is Role.PROSPECTIVE and h.epoch == 4


def test_resigned_leader_never_grants_a_second_vote_in_its_epoch() -> None:
    h = CoreHarness(log_state=log_state(3, ((4, 0),), QuorumStateData(4, 1, 1, dir_id(1))))
    h.request(2, VoteRequest(4, 2, dir_id(2), 1, dir_id(1), 4, 3))
    assert not h.responses(VoteResponse)[-1].vote_granted
    h.advance(2000)  # Prospective now, still in epoch 4 where it voted for itself
    h.request(3, VoteRequest(4, 3, dir_id(3), 1, dir_id(1), 4, 3))
    assert not h.responses(VoteResponse)[-1].vote_granted


def test_append_on_a_non_leader_is_rejected_with_the_leader_hint() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.handle(Append(5, ("x",)))
    r = h.of_type(AppendRejected)[-1]
    assert (r.error_code, r.leader_id, r.leader_epoch) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 3)


def test_uncommitted_appends_fail_when_leadership_is_lost() -> None:
    h = CoreHarness.leader()
    h.handle(Append(5, ("x",)))
    h.begin_quorum(2, h.epoch + 1)
    done = h.of_type(AppendCommitted)
    assert done and done[-1].append_id == 5
    assert done[-1].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_pending_voter_change_fails_when_leadership_is_lost() -> None:
    h = CoreHarness.leader()
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    h.request(-1, RemoveRaftVoterRequest(3, dir_id(3)))
    # voter 2 stops fetching (it runs an election): a fetch timeout later the leader no
    # longer hears a majority, and a higher epoch ends its leadership
    h.advance(h.config.fetch_timeout_ms)
    assert h.role is Role.LEADER
    h.begin_quorum(2, h.epoch + 1)
    assert h.responses(VoterChangeResponse)[-1].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_voter_change_to_a_non_leader_is_not_leader_or_follower() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    h.request(-1, AddRaftVoterRequest(4, dir_id(4), endpoint(4)))
    assert h.responses(VoterChangeResponse)[-1].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_removing_the_last_voter_is_voter_not_found() -> None:
    h = CoreHarness.leader(voters=(1,))
    h.request(-1, RemoveRaftVoterRequest(1, dir_id(1)))
    assert h.responses(VoterChangeResponse)[-1].error_code == ErrorCode.VOTER_NOT_FOUND


def test_update_voter_with_a_bad_range_is_invalid_request() -> None:
    h = CoreHarness.leader()
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    h.request(2, UpdateRaftVoterRequest(h.epoch, 2, dir_id(2), endpoint(2), KRaftVersionRange(2, 1)))
    assert h.responses(UpdateRaftVoterResponse)[-1].error_code == ErrorCode.INVALID_REQUEST


def test_update_voter_with_a_stale_epoch_is_fenced() -> None:
    h = CoreHarness.leader()
    h.request(2, UpdateRaftVoterRequest(h.epoch - 1, 2, dir_id(2), endpoint(2),
                                        KRaftVersionRange(0, 1)))
    assert h.responses(UpdateRaftVoterResponse)[-1].error_code == ErrorCode.FENCED_LEADER_EPOCH


def test_begin_quorum_epoch_for_another_voter_key_is_invalid_voter_key() -> None:
    h = CoreHarness()
    h.request(2, BeginQuorumEpochRequest(2, 1, 1, dir_id(1, generation=3), endpoint(2)))
    assert h.responses(BeginQuorumEpochResponse)[-1].error_code == ErrorCode.INVALID_VOTER_KEY
    assert h.role is Role.UNATTACHED


def test_end_quorum_epoch_from_an_older_epoch_is_fenced() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=5)
    h.request(3, EndQuorumEpochRequest(3, 4))
    assert h.responses(EndQuorumEpochResponse)[-1].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert h.role is Role.FOLLOWER


def test_second_leader_does_not_rewrite_voters_already_in_the_log() -> None:
    h = CoreHarness.leader()
    records = h.of_type(AppendControl)[0].control_records
    assert any(isinstance(r, VotersRecord) for r in records)
    # restart with that log: the next leader only writes a LeaderChange
    h2 = CoreHarness(log_state=log_state(h.log_end, ((h.epoch, 0),), QuorumStateData(h.epoch)))
    for offset, voters in h.core.voters_history.entries():
        if offset >= 0:
            h2.core.voters_history.add(offset, voters)
    h2.elect()
    assert [type(r).__name__ for r in h2.of_type(AppendControl)[-1].control_records] == [
        "LeaderChangeMessage"
    ]


def test_leader_refreshes_its_own_endpoints_at_epoch_start() -> None:
    h = CoreHarness(listeners=endpoint(1) + endpoint(11))
    h.core.voters_history.add(0, h.core.voters())  # the set is already in the log
    h.elect()
    records = h.of_type(AppendControl)[-1].control_records
    voters = [r for r in records if isinstance(r, VotersRecord)]
    assert voters and voters[0].voters[0].endpoints == endpoint(1) + endpoint(11)


def test_every_request_gets_a_correlation_id_of_its_own() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3, 4, 5))
    ids = [e.correlation_id for e in h.of_type(SendRequest)]
    assert len(ids) == len(set(ids))
