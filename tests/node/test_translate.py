"""Wire <-> core translation: every core request survives encode/decode at every version that
can carry it, and top-level checks reject foreign clusters, topics and partitions."""

from __future__ import annotations

import pytest

from kraft.protocol import messages as w
from kraft.protocol.api import API_SPECS, ApiKey
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
from kraft.server.translate import (
    TopLevelError,
    request_to_core,
    request_to_wire,
    response_to_core,
    response_to_wire,
)

CLUSTER = "kvJ3yQKdQGaz9IuZ4XpXvA"
D1, D2 = Uuid.random(), Uuid.random()
EP = (m.Endpoint("CONTROLLER", "127.0.0.1", 9093),)

REQUESTS: list[tuple[ApiKey, m.Request]] = [
    (ApiKey.VOTE, m.VoteRequest(5, 1, D1, 2, D2, 4, 100, pre_vote=True, cluster_id=CLUSTER)),
    (ApiKey.BEGIN_QUORUM_EPOCH, m.BeginQuorumEpochRequest(1, 5, 2, D2, EP, CLUSTER)),
    (ApiKey.END_QUORUM_EPOCH, m.EndQuorumEpochRequest(1, 5, (m.ReplicaKey(2, D2),), EP, CLUSTER)),
    (ApiKey.FETCH, m.FetchRequest(2, D2, 5, 100, 4, 500, 8 << 20, 90, CLUSTER)),
    (ApiKey.FETCH_SNAPSHOT, m.FetchSnapshotRequest(2, D2, 5, m.OffsetAndEpoch(4, 80), 1024,
                                                   8 << 20, CLUSTER)),
    (ApiKey.DESCRIBE_QUORUM, m.DescribeQuorumRequest()),
    (ApiKey.ADD_RAFT_VOTER, m.AddRaftVoterRequest(4, D1, EP, 30_000, CLUSTER)),
    (ApiKey.REMOVE_RAFT_VOTER, m.RemoveRaftVoterRequest(4, D1, CLUSTER)),
    (ApiKey.UPDATE_RAFT_VOTER, m.UpdateRaftVoterRequest(5, 2, D2, EP, m.KRaftVersionRange(0, 1),
                                                        CLUSTER)),
]


def _roundtrip(api: ApiKey, version: int, req: m.Request) -> m.Request:
    body = request_to_wire(req, CLUSTER, version)
    frame = encode_request(RequestHeader(int(api), version, 3, "t"), body)
    header, data = decode_request(frame, size_prefixed=True)
    assert header.correlation_id == 3
    return request_to_core(data, version, CLUSTER)


@pytest.mark.parametrize(("api", "req"), REQUESTS, ids=[a.name for a, _ in REQUESTS])
def test_requests_round_trip_at_the_newest_version(api: ApiKey, req: m.Request) -> None:
    assert _roundtrip(api, API_SPECS[api].max_version, req) == req


@pytest.mark.parametrize(("api", "req"), REQUESTS, ids=[a.name for a, _ in REQUESTS])
def test_requests_encode_at_every_version(api: ApiKey, req: m.Request) -> None:
    spec = API_SPECS[api]
    for version in range(spec.min_version, spec.max_version + 1):
        if isinstance(req, m.VoteRequest) and version < 2:
            req = m.VoteRequest(5, 1, D1, 2, D2, 4, 100, pre_vote=False, cluster_id=CLUSTER)
        back = _roundtrip(api, version, req)
        assert type(back) is type(req)


def test_foreign_cluster_topic_and_partition_are_top_level_errors() -> None:
    body = request_to_wire(REQUESTS[0][1], "AAAAAAAAAAAAAAAAAAAAAA", 2)
    with pytest.raises(TopLevelError) as err:
        request_to_core(body, 2, CLUSTER)
    assert err.value.code == ErrorCode.INCONSISTENT_CLUSTER_ID
    F = w.FetchRequestData
    fetch = F(topics=[F.FetchTopic(topic_id=Uuid.random(), partitions=[F.FetchPartition()])])
    with pytest.raises(TopLevelError) as err:
        request_to_core(fetch, 18, CLUSTER)
    assert err.value.code == ErrorCode.INVALID_REQUEST
    D = w.DescribeQuorumRequestData
    with pytest.raises(TopLevelError) as err:
        request_to_core(D(topics=[D.TopicData("__cluster_metadata", [D.PartitionData(1)])]), 2,
                        CLUSTER)
    assert err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


RESPONSES: list[tuple[ApiKey, m.Response]] = [
    (ApiKey.VOTE, m.VoteResponse(ErrorCode.NONE, 1, 5, True, EP)),
    (ApiKey.BEGIN_QUORUM_EPOCH, m.BeginQuorumEpochResponse(ErrorCode.NONE, 1, 5)),
    (ApiKey.END_QUORUM_EPOCH, m.EndQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, 1, 6)),
    (ApiKey.FETCH, m.FetchResponse(ErrorCode.NONE, 1, 5, 90, 0,
                                   diverging_epoch=m.OffsetAndEpoch(3, 70), leader_endpoints=EP)),
    (ApiKey.FETCH_SNAPSHOT, m.FetchSnapshotResponse(ErrorCode.NONE, 1, 5, m.OffsetAndEpoch(4, 80),
                                                    300, 0, b"", EP)),
    (ApiKey.DESCRIBE_QUORUM, m.DescribeQuorumResponse(
        ErrorCode.NONE, 1, 5, 90,
        (m.ReplicaDescription(1, D1, 90, 10, 10), m.ReplicaDescription(2, D2, 80, 9, 8)),
        (m.ReplicaDescription(7, None, 60, 5, -1),), ((1, EP),), None)),
    (ApiKey.ADD_RAFT_VOTER, m.VoterChangeResponse(ErrorCode.DUPLICATE_VOTER, "already a voter")),
    (ApiKey.UPDATE_RAFT_VOTER, m.UpdateRaftVoterResponse(ErrorCode.NONE, 1, 5)),
]


@pytest.mark.parametrize(("api", "resp"), RESPONSES, ids=[a.name for a, _ in RESPONSES])
def test_responses_round_trip_at_the_newest_version(api: ApiKey, resp: m.Response) -> None:
    version = API_SPECS[api].max_version
    frame = encode_response(int(api), version, 9, response_to_wire(resp, version))
    header, data = decode_response(int(api), version, frame, size_prefixed=True)
    assert header.correlation_id == 9
    assert response_to_core(data, "CONTROLLER") == resp
