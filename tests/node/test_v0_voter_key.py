"""Vote v0 and BeginQuorumEpoch v0 carry no voter key (VoterId came with v1): through the real
codec, the translation and a core, such a request is one with no key, as in Kafka
(`RaftUtil.voteRequestVoterKey` / `beginQuorumEpochRequestVoterKey` give no key for a VoterId
below 0), and is answered on its merits, not with INVALID_VOTER_KEY."""

from __future__ import annotations

from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.raft.effects import SendResponse
from kraft.raft.state import Role
from kraft.server.translate import (
    METADATA_TOPIC,
    request_to_core,
    response_to_core,
    response_to_wire,
)
from kraft.sim.harness import CoreHarness

CLUSTER = "kvJ3yQKdQGaz9IuZ4XpXvA"


def _through_the_wire(api: ApiKey, body: object) -> m.Request:
    """Encode `body` at v0 as a peer would, decode it with the codec and translate it."""
    frame = encode_request(RequestHeader(int(api), 0, 7, "peer"), body)
    header, data = decode_request(frame, size_prefixed=True)
    assert header.api_version == 0
    return request_to_core(data, 0, CLUSTER)


def _answer(h: CoreHarness, api: ApiKey) -> m.Response:
    """The core's answer, through the v0 encoder and decoder."""
    sent = [e for e in h.last if isinstance(e, SendResponse)]
    assert len(sent) == 1, h.last
    frame = encode_response(int(api), 0, 7, response_to_wire(sent[0].response, 0))
    _, data = decode_response(int(api), 0, frame, size_prefixed=True)
    return response_to_core(data, "CONTROLLER")


def test_vote_v0_without_voter_key_is_granted() -> None:
    V = w.VoteRequestData
    body = V(cluster_id=CLUSTER, topics=[V.TopicData(METADATA_TOPIC, [V.PartitionData(
        partition_index=0, replica_epoch=1, replica_id=2, last_offset_epoch=0, last_offset=0)])])
    req = _through_the_wire(ApiKey.VOTE, body)
    assert isinstance(req, m.VoteRequest) and req.voter_id < 0 and not req.pre_vote
    h = CoreHarness(node_id=1, voters=(1, 2, 3), dynamic=False)
    h.request(2, req)
    resp = _answer(h, ApiKey.VOTE)
    assert isinstance(resp, m.VoteResponse)
    assert resp.error_code == ErrorCode.NONE and resp.vote_granted
    assert h.role is Role.UNATTACHED and h.epoch == 1


def test_vote_v1_for_another_voter_is_still_invalid_voter_key() -> None:
    h = CoreHarness(node_id=1, voters=(1, 2, 3), dynamic=False)
    h.request(2, m.VoteRequest(1, 2, None, 3, None, 0, 0))
    sent = [e for e in h.last if isinstance(e, SendResponse)]
    assert sent[0].response.error_code == ErrorCode.INVALID_VOTER_KEY


def test_begin_quorum_epoch_v0_without_voter_key_is_followed() -> None:
    B = w.BeginQuorumEpochRequestData
    body = B(cluster_id=CLUSTER, topics=[B.TopicData(METADATA_TOPIC, [B.PartitionData(
        0, Uuid.ZERO, 2, 3)])])
    req = _through_the_wire(ApiKey.BEGIN_QUORUM_EPOCH, body)
    assert isinstance(req, m.BeginQuorumEpochRequest) and req.voter_id < 0
    h = CoreHarness(node_id=1, voters=(1, 2, 3), dynamic=False)
    h.request(2, req)
    resp = _answer(h, ApiKey.BEGIN_QUORUM_EPOCH)
    assert isinstance(resp, m.BeginQuorumEpochResponse)
    assert resp.error_code == ErrorCode.NONE
    assert (resp.leader_id, resp.leader_epoch) == (2, 3)
    assert h.role is Role.FOLLOWER and h.core.leader_id == 2
