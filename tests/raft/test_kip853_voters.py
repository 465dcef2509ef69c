"""KIP-853: the voters set in the log and Add/Remove/UpdateRaftVoter, auto-join, kraft.version."""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import QuorumStateData
from kraft.raft.effects import AppendControl, SendApiVersions
from kraft.raft.events import ApiVersionsReceived
from kraft.raft.messages import (
    AddRaftVoterRequest,
    ApiVersionsResult,
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Endpoint,
    FetchedBatch,
    FetchRequest,
    FetchResponse,
    KRaftVersionRange,
    OffsetAndEpoch,
    RemoveRaftVoterRequest,
    UpdateKRaftVersionRequest,
    UpdateKRaftVersionResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoterChangeResponse,
)
from kraft.raft.records import voters_record
from kraft.raft.state import Role
from kraft.records.control import KRaftVersionRecord, LeaderChangeMessage, VotersRecord
from kraft.sim.harness import CoreHarness, dir_id, endpoint, log_state, voter_set


def committed(h: CoreHarness, *followers: int) -> None:
    """Let `followers` fetch the whole log so the HW covers it."""
    h.persist()
    for f in followers:
        h.fetch_from(f, h.log_end, h.epoch, max_wait_ms=0)


def change_response(h: CoreHarness) -> VoterChangeResponse:
    return h.responses(VoterChangeResponse)[-1]  # type: ignore[no-any-return]


def add(node: int, generation: int = 0) -> AddRaftVoterRequest:
    return AddRaftVoterRequest(node, dir_id(node, generation), endpoint(node))


def test_kip853_first_leader_writes_kraft_version_and_voters() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    records = h.of_type(AppendControl)[0].control_records
    assert [type(r) for r in records] == [LeaderChangeMessage, KRaftVersionRecord, VotersRecord]
    assert h.core.voters_history.has_log_entry()


def test_kip853_static_quorum_leader_writes_only_leader_change() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3), dynamic=False)
    assert [type(r) for r in h.of_type(AppendControl)[0].control_records] == [LeaderChangeMessage]


def test_kip853_voters_set_read_from_log_including_uncommitted_then_reverted() -> None:
    h = CoreHarness(log_state=log_state(3, ((1, 0),), QuorumStateData(1)))
    h.begin_quorum(2, 2)
    h.advance(1)
    new_set = voter_set((1, 2, 3, 4))
    batch = FetchedBatch(3, 3, 2, True, (voters_record(new_set),), b"")
    h.respond(h.sent(FetchRequest)[-1],
              FetchResponse(ErrorCode.NONE, 2, 2, 1, 0, batches=(batch,)))
    assert h.core.voters() == new_set  # not committed (HW 1) but already in force
    h.persist()
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], diverging_epoch=OffsetAndEpoch(1, 3))
    assert h.core.voters() == voter_set((1, 2, 3))


def test_kip853_add_voter_waits_for_leader_change_commit() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.fetch_from(4, h.log_end, h.epoch, max_wait_ms=0, directory_id=dir_id(4))
    h.request(-1, add(4))
    assert change_response(h).error_code == ErrorCode.REQUEST_TIMED_OUT
    assert not h.of_type(SendApiVersions)


def test_kip853_add_voter_id_already_a_voter_is_duplicate_voter() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.request(-1, add(3, generation=5))
    assert change_response(h).error_code == ErrorCode.DUPLICATE_VOTER


def test_kip853_add_voter_not_caught_up_times_out() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.request(-1, add(4))  # node 4 never fetched
    assert change_response(h).error_code == ErrorCode.REQUEST_TIMED_OUT


def test_kip853_add_voter_without_directory_id_is_invalid_request() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.request(-1, AddRaftVoterRequest(4, None, endpoint(4)))
    assert change_response(h).error_code == ErrorCode.INVALID_REQUEST


def caught_up_observer(h: CoreHarness) -> None:
    committed(h, 2)
    h.fetch_from(4, h.log_end, h.epoch, max_wait_ms=0)


def test_kip853_add_voter_appends_new_set_and_answers_after_commit_under_it() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    caught_up_observer(h)
    h.request(-1, add(4), correlation_id=42)
    assert h.of_type(SendApiVersions)[-1].node_id == 4
    h.handle(ApiVersionsReceived(4, ApiVersionsResult(ErrorCode.NONE, KRaftVersionRange(0, 1))))
    last = h.of_type(AppendControl)[-1].control_records
    assert isinstance(last[0], VotersRecord) and [v.voter_id for v in last[0].voters] == [1, 2, 3, 4]
    assert h.core.voters().ids() == {1, 2, 3, 4}
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    assert not h.responses(VoterChangeResponse)  # 2 of 4 is not a majority of the new set
    h.fetch_from(4, h.log_end, h.epoch, max_wait_ms=0)
    assert change_response(h).error_code == ErrorCode.NONE


def test_kip853_add_voter_unreachable_replica_times_out() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    caught_up_observer(h)
    h.request(-1, add(4))
    h.handle(ApiVersionsReceived(4, ApiVersionsResult(ErrorCode.REQUEST_TIMED_OUT)))
    assert change_response(h).error_code == ErrorCode.REQUEST_TIMED_OUT
    assert h.core.voters().ids() == {1, 2, 3}


def test_kip853_add_voter_without_kraft_version_support_is_invalid_request() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    caught_up_observer(h)
    h.request(-1, add(4))
    h.handle(ApiVersionsReceived(4, ApiVersionsResult(ErrorCode.NONE, KRaftVersionRange(0, 0))))
    assert change_response(h).error_code == ErrorCode.INVALID_REQUEST


def test_kip853_only_one_voter_change_at_a_time() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    caught_up_observer(h)
    h.request(-1, add(4), correlation_id=1)
    h.request(-1, RemoveRaftVoterRequest(3, dir_id(3)), correlation_id=2)
    assert change_response(h).error_code == ErrorCode.REQUEST_TIMED_OUT
    h.handle(ApiVersionsReceived(4, ApiVersionsResult(ErrorCode.NONE, KRaftVersionRange(0, 1))))
    # the VotersRecord is appended but uncommitted: still refused
    h.request(-1, RemoveRaftVoterRequest(3, dir_id(3)), correlation_id=3)
    assert change_response(h).error_code == ErrorCode.REQUEST_TIMED_OUT


def test_kip853_voter_changes_need_kraft_version_1() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3), dynamic=False)
    committed(h, 2)
    h.request(-1, add(4))
    assert change_response(h).error_code == ErrorCode.UNSUPPORTED_VERSION


def test_kip853_remove_unknown_voter_is_voter_not_found() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.request(-1, RemoveRaftVoterRequest(9, dir_id(9)))
    assert change_response(h).error_code == ErrorCode.VOTER_NOT_FOUND
    h.request(-1, RemoveRaftVoterRequest(3, dir_id(3, generation=1)))
    assert change_response(h).error_code == ErrorCode.VOTER_NOT_FOUND


def test_kip853_leader_removing_itself_serves_until_committed_then_resigns() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.request(-1, RemoveRaftVoterRequest(1, dir_id(1)))
    assert h.role is Role.LEADER and not h.core.is_voter()
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    # leader (not a voter any more) + node 2 is not a majority of {2, 3}
    assert h.role is Role.LEADER and not h.responses(VoterChangeResponse)
    h.fetch_from(3, h.log_end, h.epoch, max_wait_ms=0)
    assert change_response(h).error_code == ErrorCode.NONE
    assert h.role is Role.RESIGNED


def test_kip853_update_voter_writes_new_endpoints_and_answers_at_once() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    new_ep = (Endpoint("CONTROLLER", "node2-new", 9094),)
    h.request(2, UpdateRaftVoterRequest(h.epoch, 2, dir_id(2), new_ep, KRaftVersionRange(0, 1)))
    assert h.responses(UpdateRaftVoterResponse)[-1].error_code == ErrorCode.NONE
    node = h.core.voters().get(2)
    assert node is not None and node.endpoints == new_ep


def test_kip853_update_voter_unknown_key_is_voter_not_found() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.request(2, UpdateRaftVoterRequest(h.epoch, 2, dir_id(2, 3), endpoint(2), KRaftVersionRange(0, 1)))
    assert h.responses(UpdateRaftVoterResponse)[-1].error_code == ErrorCode.VOTER_NOT_FOUND


def test_kip853_follower_voter_sends_update_raft_voter_after_leader_change() -> None:
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=1, dynamic=False)
    h.advance(1)
    sent = h.sent(UpdateRaftVoterRequest)
    assert sent and sent[-1].destination == 2
    assert sent[-1].request.kraft_version_feature == KRaftVersionRange(0, 1)


def test_kip853_auto_join_removes_stale_directory_then_adds_itself() -> None:
    # node 3 lost its disk: it comes back with generation 1 while the set has generation 0
    h = CoreHarness(node_id=3, voters=(1, 2, 3), auto_join=True, generation=1,
                    update_voter_period_ms=500)
    assert not h.core.is_voter()
    h.begin_quorum(1, 2)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], high_watermark=0)
    h.advance(1)
    removes = h.sent(RemoveRaftVoterRequest)
    assert removes and removes[-1].request.voter_directory_id == dir_id(3, 0)
    h.respond(removes[-1], VoterChangeResponse(ErrorCode.NONE))
    # the removal arrives through the log
    h.core.voters_history.add(0, voter_set((1, 2)))
    h.advance(h.config.update_voter_period_ms)
    adds = h.sent(AddRaftVoterRequest)
    assert adds and adds[-1].request.voter_directory_id == dir_id(3, 1)


def test_kip853_kraft_version_upgrade_checks_every_voter_then_writes_voters() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3), dynamic=False)
    committed(h, 2)
    h.request(-1, UpdateKRaftVersionRequest(1))
    assert h.responses(UpdateKRaftVersionResponse)[-1].error_code == ErrorCode.INVALID_UPDATE_VERSION
    for v in (2, 3):
        h.request(v, UpdateRaftVoterRequest(h.epoch, v, dir_id(v), endpoint(v), KRaftVersionRange(0, 1)))
    assert all(r.error_code == ErrorCode.NONE for r in h.responses(UpdateRaftVoterResponse))
    h.request(-1, UpdateKRaftVersionRequest(1), correlation_id=9)
    records = h.of_type(AppendControl)[-1].control_records
    assert isinstance(records[0], KRaftVersionRecord) and records[0].kraft_version == 1
    assert isinstance(records[1], VotersRecord)
    assert [v.voter_directory_id for v in records[1].voters] == [dir_id(1), dir_id(2), dir_id(3)]
    assert h.core.kraft_version == 1
    committed(h, 2)
    assert h.responses(UpdateKRaftVersionResponse)[-1].error_code == ErrorCode.NONE


def test_kip853_kraft_version_downgrade_is_rejected() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.request(-1, UpdateKRaftVersionRequest(0))
    assert h.responses(UpdateKRaftVersionResponse)[-1].error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert h.core.kraft_version == 1


def test_describe_quorum_lists_voters_and_observers() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.advance(10)
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    h.fetch_from(7, 0, 0, max_wait_ms=0)
    h.request(-1, DescribeQuorumRequest())
    r = h.responses(DescribeQuorumResponse)[-1]
    assert r.error_code == ErrorCode.NONE and r.leader_id == 1
    rows = {v.replica_id: v for v in r.current_voters}
    assert set(rows) == {1, 2, 3}
    assert rows[2].log_end_offset == h.log_end and rows[2].last_fetch_timestamp == h.now
    assert rows[2].last_caught_up_timestamp == h.now
    assert rows[3].log_end_offset == -1 and rows[3].last_fetch_timestamp == -1
    assert [o.replica_id for o in r.observers] == [7]
    assert rows[1].replica_directory_id == dir_id(1)
    assert dict(r.nodes)[2] == endpoint(2)


def test_describe_quorum_on_a_follower_is_not_leader_or_follower() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    h.request(-1, DescribeQuorumRequest())
    assert h.responses(DescribeQuorumResponse)[-1].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_kip853_uncommitted_voters_record_blocks_the_next_change() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    before = h.log_end
    h.request(-1, RemoveRaftVoterRequest(3, dir_id(3)), correlation_id=1)
    for _ in range(31):  # node 2 keeps fetching, but never past the removal record
        h.advance(1000)
        h.fetch_from(2, before, h.epoch, max_wait_ms=0)
    # the removal timed out, uncommitted; its record stays in the log
    assert change_response(h).error_code == ErrorCode.REQUEST_TIMED_OUT
    h.request(-1, RemoveRaftVoterRequest(2, dir_id(2)), correlation_id=2)
    r = change_response(h)
    assert r.error_code == ErrorCode.REQUEST_TIMED_OUT and "not committed" in (r.error_message or "")


def test_kip853_add_voter_without_endpoint_is_invalid_request() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.request(-1, AddRaftVoterRequest(4, dir_id(4), ()))
    assert change_response(h).error_code == ErrorCode.INVALID_REQUEST


def test_kip853_kraft_version_upgrade_validate_only_writes_nothing() -> None:
    h = CoreHarness.leader(voters=(1,), dynamic=False)
    committed(h)
    n = len(h.of_type(AppendControl))
    h.request(-1, UpdateKRaftVersionRequest(1, validate_only=True))
    assert h.responses(UpdateKRaftVersionResponse)[-1].error_code == ErrorCode.NONE
    assert len(h.of_type(AppendControl)) == n and h.core.kraft_version == 0
    h.request(-1, UpdateKRaftVersionRequest(0))  # already there: nothing to do
    assert h.responses(UpdateKRaftVersionResponse)[-1].error_code == ErrorCode.NONE


def test_kraft_version_upgrade_checks_every_observer_that_fetches() -> None:
    # Kafka checks the supported range of every controller and broker registered with the
    # active controller: an observer that has not registered its range, or one without
    # kraft.version 1, refuses the upgrade.
    h = CoreHarness.leader(voters=(1,), dynamic=False)
    committed(h)
    h.fetch_from(7, 0, 0, max_wait_ms=0)  # observer 7
    h.request(-1, UpdateKRaftVersionRequest(1, validate_only=True))
    refused = h.responses(UpdateKRaftVersionResponse)[-1]
    assert refused.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert "Observer 7 has not registered" in (refused.error_message or "")
    h.request(7, ControllerRegistrationRequest(7, dir_id(7), endpoint(7), KRaftVersionRange(0, 0)))
    assert h.responses(ControllerRegistrationResponse)[-1].error_code == ErrorCode.NONE
    h.request(-1, UpdateKRaftVersionRequest(1))
    refused = h.responses(UpdateKRaftVersionResponse)[-1]
    assert refused.error_message == ("Invalid update version 1 for feature kraft.version. "
                                     "Observer 7 only supports versions 0-0")
    assert h.core.kraft_version == 0
    h.request(7, ControllerRegistrationRequest(7, dir_id(7), endpoint(7), KRaftVersionRange(0, 1)))
    h.request(-1, UpdateKRaftVersionRequest(1))
    assert h.core.kraft_version == 1


def test_a_caught_up_observer_registers_its_range_with_the_leader_at_kraft_version_0() -> None:
    h = CoreHarness.follower(node_id=7, leader_id=1, voters=(1, 2, 3), dynamic=False)
    fetch = h.sent(FetchRequest)[-1]
    h.respond(fetch, FetchResponse(ErrorCode.NONE, 1, 1, high_watermark=0, log_start_offset=0))
    h.advance(1)
    sent = h.sent(ControllerRegistrationRequest)
    assert [s.destination for s in sent] == [1]
    req = sent[0].request
    assert (req.controller_id, req.kraft_version_feature) == (7, KRaftVersionRange(0, 1))
    h.respond(sent[0], ControllerRegistrationResponse(ErrorCode.NONE))
    h.advance(60_000)
    assert len(h.sent(ControllerRegistrationRequest)) == 1  # once per leader


def test_a_registration_to_a_node_that_is_not_the_leader_gets_not_controller() -> None:
    h = CoreHarness.follower(node_id=2, leader_id=1, voters=(1, 2, 3), dynamic=False)
    h.request(7, ControllerRegistrationRequest(7, dir_id(7), endpoint(7), KRaftVersionRange(0, 1)))
    assert h.responses(ControllerRegistrationResponse)[-1].error_code == ErrorCode.NOT_CONTROLLER
    h.request(-1, UpdateKRaftVersionRequest(1))
    assert h.responses(UpdateKRaftVersionResponse)[-1].error_code == ErrorCode.NOT_CONTROLLER


def test_kip1186_add_voter_ack_when_committed_false_answers_at_the_append() -> None:
    """AddRaftVoter v1 with AckWhenCommitted false (KIP-1186): answered once the new voters
    record is in the leader's log; the change stays pending until it commits, so a second
    change is refused meanwhile, and the commit sends no second answer."""
    h = CoreHarness.leader(voters=(1, 2, 3))
    caught_up_observer(h)
    request = AddRaftVoterRequest(4, dir_id(4), endpoint(4), ack_when_committed=False)
    h.request(-1, request, correlation_id=42)
    assert not h.responses(VoterChangeResponse)  # not before the append
    h.handle(ApiVersionsReceived(4, ApiVersionsResult(ErrorCode.NONE, KRaftVersionRange(0, 1))))
    assert [r.error_code for r in h.responses(VoterChangeResponse)] == [ErrorCode.NONE]
    assert h.core.voters().ids() == {1, 2, 3, 4}
    h.request(-1, RemoveRaftVoterRequest(3, dir_id(3)), correlation_id=43)
    assert change_response(h).error_code == ErrorCode.REQUEST_TIMED_OUT  # still pending
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    h.fetch_from(4, h.log_end, h.epoch, max_wait_ms=0)  # committed under the new set
    assert len(h.responses(VoterChangeResponse)) == 2  # no answer at the commit
    h.request(-1, RemoveRaftVoterRequest(4, dir_id(4)), correlation_id=44)
    h.persist()
    assert h.core.voters().ids() == {1, 2, 3}
