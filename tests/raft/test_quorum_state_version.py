"""quorum-state's data_version follows the finalized kraft.version, as Kafka's
FileQuorumStateStore writes it (`ElectionState.toQuorumStateData`): version 0, with the voter
ids as currentVoters, at kraft.version 0; version 1, with votedDirectoryId, from 1 on."""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode
from kraft.raft.effects import PersistQuorumState
from kraft.raft.messages import (
    KRaftVersionRange,
    UpdateKRaftVersionRequest,
    UpdateKRaftVersionResponse,
    UpdateRaftVoterRequest,
)
from kraft.sim.harness import CoreHarness, dir_id, endpoint


def test_quorum_state_is_data_version_0_with_the_voter_ids_at_kraft_version_0() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3), dynamic=False)
    written = h.of_type(PersistQuorumState)
    assert written and all(p.data_version == 0 for p in written)
    assert all(p.voter_ids == (1, 2, 3) for p in written)


def test_quorum_state_is_data_version_1_at_kraft_version_1() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    written = h.of_type(PersistQuorumState)
    assert written and all(p.data_version == 1 for p in written)


def test_quorum_state_version_follows_the_upgrade() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3), dynamic=False)
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    for v in (2, 3):
        h.request(v, UpdateRaftVoterRequest(h.epoch, v, dir_id(v), endpoint(v),
                                            KRaftVersionRange(0, 1)))
    h.request(-1, UpdateKRaftVersionRequest(1))
    h.persist()
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    assert h.responses(UpdateKRaftVersionResponse)[-1].error_code == ErrorCode.NONE
    h.clear()
    h.advance(10_000)  # no fetch: check-quorum resigns, and a new epoch starts
    written = h.of_type(PersistQuorumState)
    assert written and all(p.data_version == 1 for p in written)
