"""KIP-853 request validation the leader does before it writes anything, as Kafka does:
UpdateRaftVoter's kraft.version range must include the finalized kraft.version
(`UpdateVoterHandler.validVersionRange`), and the endpoints of AddRaftVoter and UpdateRaftVoter
must include the cluster's controller listener (KafkaRaftClient.handleAddVoterRequest,
UpdateVoterHandler); otherwise INVALID_REQUEST and nothing is written or remembered."""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.effects import AppendControl, SendApiVersions
from kraft.raft.messages import (
    AddRaftVoterRequest,
    Endpoint,
    KRaftVersionRange,
    UpdateKRaftVersionRequest,
    UpdateKRaftVersionResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoterChangeResponse,
)
from kraft.sim.harness import CoreHarness, dir_id, endpoint

OTHER_LISTENER = (Endpoint("REPLICATION", "node2-new", 9094),)


def committed(h: CoreHarness, *followers: int) -> None:
    h.persist()
    for f in followers:
        h.fetch_from(f, h.log_end, h.epoch, max_wait_ms=0)


def update_error(h: CoreHarness) -> ErrorCode:
    return h.responses(UpdateRaftVoterResponse)[-1].error_code  # type: ignore[no-any-return]


def test_kip853_update_voter_range_without_the_finalized_version_writes_nothing() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    before = len(h.of_type(AppendControl))
    new_ep = (Endpoint("CONTROLLER", "node2-new", 9094),)
    h.request(2, UpdateRaftVoterRequest(h.epoch, 2, dir_id(2), new_ep, KRaftVersionRange(0, 0)))
    assert h.core.kraft_version == 1
    assert update_error(h) == ErrorCode.INVALID_REQUEST
    assert len(h.of_type(AppendControl)) == before
    node = h.core.voters().get(2)
    assert node is not None and node.endpoints == endpoint(2)


def test_kip853_update_voter_range_without_version_0_is_not_remembered_at_version_0() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3), dynamic=False)
    committed(h, 2)
    h.request(2, UpdateRaftVoterRequest(h.epoch, 2, dir_id(2), endpoint(2), KRaftVersionRange(1, 1)))
    assert update_error(h) == ErrorCode.INVALID_REQUEST
    h.request(3, UpdateRaftVoterRequest(h.epoch, 3, dir_id(3), endpoint(3), KRaftVersionRange(0, 1)))
    assert update_error(h) == ErrorCode.NONE
    # voter 2 told nothing the upgrade may use: it is refused, and nothing is written
    before = len(h.of_type(AppendControl))
    h.request(-1, UpdateKRaftVersionRequest(1))
    resp = h.responses(UpdateKRaftVersionResponse)[-1]
    assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION and "voter 2" in resp.error_message
    assert len(h.of_type(AppendControl)) == before and h.core.kraft_version == 0


def test_kip853_update_voter_without_the_controller_listener_writes_nothing() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    before = len(h.of_type(AppendControl))
    h.request(2, UpdateRaftVoterRequest(h.epoch, 2, dir_id(2), OTHER_LISTENER,
                                        KRaftVersionRange(0, 1)))
    assert update_error(h) == ErrorCode.INVALID_REQUEST
    assert len(h.of_type(AppendControl)) == before
    node = h.core.voters().get(2)
    assert node is not None and node.endpoints == endpoint(2)


def test_kip853_update_voter_without_the_controller_listener_at_version_0() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3), dynamic=False)
    committed(h, 2)
    h.request(2, UpdateRaftVoterRequest(h.epoch, 2, dir_id(2), OTHER_LISTENER,
                                        KRaftVersionRange(0, 1)))
    assert update_error(h) == ErrorCode.INVALID_REQUEST


def test_kip853_update_voter_with_the_controller_listener_among_others_is_accepted() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    both = (*OTHER_LISTENER, Endpoint("CONTROLLER", "node2-new", 9093))
    h.request(2, UpdateRaftVoterRequest(h.epoch, 2, dir_id(2), both, KRaftVersionRange(0, 1)))
    assert update_error(h) == ErrorCode.NONE
    node = h.core.voters().get(2)
    assert node is not None and node.endpoints == both


def test_kip853_add_voter_without_the_controller_listener_is_invalid_request() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    committed(h, 2)
    h.fetch_from(4, h.log_end, h.epoch, max_wait_ms=0)
    h.request(-1, AddRaftVoterRequest(4, dir_id(4), (Endpoint("REPLICATION", "node4", 9094),)))
    resp = h.responses(VoterChangeResponse)[-1]
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    assert "CONTROLLER" in (resp.error_message or "")
    assert not h.of_type(SendApiVersions)
    assert h.core.voters().ids() == {1, 2, 3}
