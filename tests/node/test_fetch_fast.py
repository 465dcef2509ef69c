"""The direct Fetch codecs (`kraft.server.fetch_fast`) against the general path.

Encoders: the same bytes as `encode_request(request_to_wire(...))` /
`encode_response(response_to_wire(...))` for any core message. Decoders: for any frame, either
None (the general path takes it) or exactly what the general decoder and `translate` give; in
particular never an answer for a frame the general path rejects, and never an exception.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey, api_versions_response
from kraft.protocol.errors import ErrorCode, ProtocolError
from kraft.protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.records.batch import build_batch
from kraft.server.fetch_fast import (
    FAST_VERSIONS,
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
)
from kraft.server.frames import FrameListener, PeerInfo
from kraft.server.peers import _FetchCodec
from kraft.server.translate import (
    TopLevelError,
    request_to_core,
    request_to_wire,
    response_to_core,
    response_to_wire,
)
from kraft.server.transport import KafkaConnection

CLUSTER = "kvJ3yQKdQGaz9IuZ4XpXvA"
LISTENER = "CONTROLLER"
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
DIRS = st.one_of(st.none(), st.just(Uuid.ZERO), st.binary(min_size=16, max_size=16).map(Uuid))
VERSIONS = st.sampled_from(sorted(FAST_VERSIONS))


def _general_request_frame(req: m.FetchRequest, version: int, corr: int,
                           client_id: str | None, cluster: str = CLUSTER) -> bytes:
    return encode_request(RequestHeader(1, version, corr, client_id),
                          request_to_wire(req, cluster, version))[4:]


def _general_request(frame: bytes) -> tuple[int, int, m.FetchRequest]:
    header, data = decode_request(frame)
    return header.api_version, header.correlation_id, request_to_core(
        data, header.api_version, CLUSTER)


fetch_requests = st.builds(
    m.FetchRequest, replica_id=I32, replica_directory_id=DIRS, current_leader_epoch=I32,
    fetch_offset=I64, last_fetched_epoch=I32, max_wait_ms=I32, max_bytes=I32,
    high_watermark=st.one_of(st.none(), I64), cluster_id=st.just(CLUSTER))


@settings(max_examples=300, deadline=None)
@given(req=fetch_requests, version=VERSIONS, corr=I32,
       client_id=st.one_of(st.none(), st.text(max_size=40)))
def test_fetch_request_encodes_and_decodes_as_the_general_path(req: m.FetchRequest, version: int,
                                                               corr: int,
                                                               client_id: str | None) -> None:
    general = _general_request_frame(req, version, corr, client_id)
    assert encode_fetch_request(req, CLUSTER, version, corr, client_id) == general
    assert decode_fetch_request(general, CLUSTER) == _general_request(general)
    assert decode_fetch_request(memoryview(general), CLUSTER) == _general_request(general)


def _records(count: int) -> bytes:
    return b"".join(build_batch(100 + i, 3, (b"v" * (10 + i),), 1_700_000_000_000)
                    for i in range(count))


ENDPOINTS = st.lists(st.builds(m.Endpoint, st.just(LISTENER), st.text(min_size=1, max_size=30),
                               st.integers(0, 65535)), max_size=2).map(tuple)
POSITIONS = st.one_of(st.none(), st.builds(m.OffsetAndEpoch, st.integers(-1, 2**31 - 1),
                                            st.integers(-1, 2**62)))
fetch_responses = st.builds(
    m.FetchResponse, error_code=st.sampled_from(list(ErrorCode)), leader_id=st.integers(-1, 2**31 - 1),
    leader_epoch=st.integers(-1, 2**31 - 1), high_watermark=I64, log_start_offset=I64,
    diverging_epoch=POSITIONS, snapshot_id=POSITIONS, leader_endpoints=ENDPOINTS)


@settings(max_examples=300, deadline=None)
@given(resp=fetch_responses, version=VERSIONS, corr=I32,
       records=st.one_of(st.none(), st.integers(0, 3).map(_records)))
def test_fetch_response_encodes_and_decodes_as_the_general_path(resp: m.FetchResponse,
                                                                version: int, corr: int,
                                                                records: bytes | None) -> None:
    general = encode_response(1, version, corr, response_to_wire(resp, version, records))[4:]
    assert encode_fetch_response(version, corr, resp, records) == general
    expected = response_to_core(decode_response(1, version, general)[1], LISTENER)
    assert decode_fetch_response(general, version, corr, LISTENER) == expected
    assert decode_fetch_response(memoryview(general), version, corr, LISTENER) == expected
    # an answer to another request is left to the general path, which reports it
    assert decode_fetch_response(general, version, corr ^ 1, LISTENER) is None


REQ = m.FetchRequest(2, Uuid.random(), 5, 100, 4, 500, 8 << 20, 90, CLUSTER)


def test_other_versions_and_apis_take_the_general_path() -> None:
    for version in (4, 12, 13, 15, 16):
        assert encode_fetch_request(REQ, CLUSTER, version, 1, "c") is None
        frame = _general_request_frame(REQ, version, 1, "c")
        assert decode_fetch_request(frame, CLUSTER) is None
        resp = m.FetchResponse(ErrorCode.NONE, 1, 5, 100, 0)
        assert encode_fetch_response(version, 1, resp, b"") is None
        wire = encode_response(1, version, 1, response_to_wire(resp, version, b""))[4:]
        assert decode_fetch_response(wire, version, 1, LISTENER) is None
    vote = encode_request(RequestHeader(52, 2, 1, "c"), w.VoteRequestData(cluster_id=CLUSTER))[4:]
    assert decode_fetch_request(vote, CLUSTER) is None


def test_a_foreign_cluster_is_left_to_the_general_path_which_rejects_it() -> None:
    frame = _general_request_frame(REQ, 18, 1, "c", cluster="someone-elses-cluster-")
    assert decode_fetch_request(frame, CLUSTER) is None
    with pytest.raises(TopLevelError):
        _general_request(frame)


def _wire_request(**changes: object) -> bytes:
    F = w.FetchRequestData
    part = F.FetchPartition(partition=0, current_leader_epoch=5, fetch_offset=100,
                            last_fetched_epoch=4, replica_directory_id=Uuid.random())
    body = {"cluster_id": CLUSTER, "replica_state": F.ReplicaState(replica_id=2),
            "max_wait_ms": 500, "topics": [F.FetchTopic(topic_id=Uuid.METADATA_TOPIC_ID,
                                                        partitions=[part])]}
    body.update(changes)
    return encode_request(RequestHeader(1, 18, 9, "c"), F(**body))[4:]  # type: ignore[arg-type]


def test_other_shapes_of_request_take_the_general_path() -> None:
    F = w.FetchRequestData
    part = F.FetchPartition(partition=0, fetch_offset=1)
    assert decode_fetch_request(_wire_request(), CLUSTER) is not None
    shapes = {
        "two partitions": {"topics": [F.FetchTopic(topic_id=Uuid.METADATA_TOPIC_ID,
                                                   partitions=[part, part])]},
        "two topics": {"topics": [F.FetchTopic(topic_id=Uuid.METADATA_TOPIC_ID, partitions=[part])] * 2},
        "another topic": {"topics": [F.FetchTopic(topic_id=Uuid.random(), partitions=[part])]},
        "another partition": {"topics": [F.FetchTopic(topic_id=Uuid.METADATA_TOPIC_ID,
                                                      partitions=[F.FetchPartition(partition=3)])]},
        "forgotten topics": {"forgotten_topics_data": [F.ForgottenTopic(topic_id=Uuid.random())]},
        "an unknown tagged field": {"unknown_tagged_fields": {7: b"x"}},
    }
    for what, change in shapes.items():
        frame = _wire_request(**change)
        assert decode_fetch_request(frame, CLUSTER) is None, what
    # a rack id and a replica epoch are read past (neither reaches the core)
    for change in ({"rack_id": "rack-1"},
                   {"replica_state": F.ReplicaState(replica_id=2, replica_epoch=3)}):
        frame = _wire_request(**change)
        assert decode_fetch_request(frame, CLUSTER) == _general_request(frame), change


def _agrees_or_declines_request(frame: bytes) -> None:
    fast = decode_fetch_request(frame, CLUSTER)
    try:
        general: object = _general_request(frame)
    except (ProtocolError, TopLevelError):
        general = None
    if fast is not None:
        assert fast == general


def _outcome(decode: object) -> object:
    """What a decoder gave: its value, or the class of the ProtocolError it raised."""
    try:
        return decode()  # type: ignore[operator]
    except ProtocolError as exc:
        return type(exc)


def _agrees_or_declines_response(frame: bytes, version: int) -> None:
    fast = _outcome(lambda: decode_fetch_response(frame, version, 7, LISTENER))
    if fast is None:
        return

    def general() -> object:
        header, data = decode_response(1, version, frame)
        return response_to_core(data, LISTENER) if header.correlation_id == 7 else "other request"

    assert fast == _outcome(general)


def test_cut_and_extended_frames_are_never_accepted() -> None:
    request = _general_request_frame(REQ, 18, 7, "client")
    resp = m.FetchResponse(ErrorCode.NONE, 1, 5, 100, 0, leader_endpoints=(
        m.Endpoint(LISTENER, "127.0.0.1", 9093),))
    response = encode_response(1, 18, 7, response_to_wire(resp, 18, _records(2)))[4:]
    for cut in range(len(request)):
        assert decode_fetch_request(request[:cut], CLUSTER) is None
    for cut in range(len(response)):
        _agrees_or_declines_response(response[:cut], 18)
    assert decode_fetch_request(request + b"\x00", CLUSTER) is None
    assert decode_fetch_response(response + b"\x00", 18, 7, LISTENER) is None


def _damage_fixtures(version: int) -> tuple[bytes, bytes]:
    request = _general_request_frame(REQ, version, 7, "client")
    resp = m.FetchResponse(ErrorCode.NONE, 1, 5, 100, 0, m.OffsetAndEpoch(4, 90),
                           leader_endpoints=(m.Endpoint(LISTENER, "h", 1),))
    response = encode_response(1, version, 7, response_to_wire(resp, version, _records(1)))[4:]
    return request, response


@pytest.mark.parametrize("version", sorted(FAST_VERSIONS))
def test_every_single_byte_change_is_declined_or_decoded_as_the_general_path(version: int) -> None:
    request, response = _damage_fixtures(version)
    for frame, check in ((request, _agrees_or_declines_request),
                         (response, lambda f: _agrees_or_declines_response(f, version))):
        for at in range(len(frame)):
            for value in range(256):
                damaged = bytearray(frame)
                damaged[at] = value
                check(bytes(damaged))


@settings(max_examples=200, deadline=None)
@given(data=st.data(), version=VERSIONS)
def test_damaged_frames_are_declined_or_decoded_as_the_general_path(data: st.DataObject,
                                                                     version: int) -> None:
    request, response = (bytearray(f) for f in _damage_fixtures(version))
    for frame in (request, response):
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(frame) - 1))
            frame[at] = data.draw(st.integers(0, 255))
    _agrees_or_declines_request(bytes(request))
    _agrees_or_declines_response(bytes(response), version)


class _FetchServer:
    """A Kafka listener that answers ApiVersions and answers each Fetch with `self.answer`
    (a core response and the record bytes to attach), keeping the requests it decoded."""

    def __init__(self) -> None:
        self.answer: tuple[m.FetchResponse, bytes] = (m.FetchResponse(ErrorCode.NONE, 1, 5, 0, 0),
                                                      b"")
        self.requests: list[tuple[int, m.FetchRequest]] = []
        self.listener = FrameListener("127.0.0.1", 0, self.handle, name="fetch-server")

    def handle(self, frame: bytes, peer: PeerInfo) -> bytes:
        header, data = decode_request(frame)
        if header.api_key == ApiKey.API_VERSIONS:
            return encode_response(header.api_key, header.api_version, header.correlation_id,
                                   api_versions_response(header.api_version))[4:]
        self.requests.append((header.api_version, request_to_core(data, header.api_version,
                                                                   CLUSTER)))
        resp, records = self.answer
        return encode_response(1, header.api_version, header.correlation_id,
                               response_to_wire(resp, header.api_version, records))[4:]


async def test_a_connection_sends_and_reads_fetches_through_the_direct_codecs() -> None:
    server = _FetchServer()
    await server.listener.start()
    conn = KafkaConnection("127.0.0.1", server.listener.port, "raft-client-2")
    try:
        await conn.open(5)
        results: asyncio.Queue[tuple[int, object, BaseException | None]] = asyncio.Queue()

        def fetch() -> tuple[int, object, BaseException | None]:
            conn.send(ApiKey.FETCH, lambda v: request_to_wire(REQ, CLUSTER, v), 5,
                      lambda *r: results.put_nowait(r), _FetchCodec(REQ, CLUSTER, LISTENER))
            return asyncio.wait_for(results.get(), 10)  # type: ignore[return-value]

        records = _records(2)
        server.answer = (m.FetchResponse(ErrorCode.NONE, 1, 5, 101, 0, leader_endpoints=(
            m.Endpoint(LISTENER, "127.0.0.1", 9093),)), records)
        version, resp, error = await fetch()  # type: ignore[misc]
        assert error is None and version == max(FAST_VERSIONS)
        assert server.requests == [(version, REQ)]
        assert type(resp) is m.FetchResponse  # the core's message, no wire dataclasses
        assert resp.high_watermark == 101 and [b.base_offset for b in resp.batches] == [100, 101]
        assert resp.leader_endpoints == (m.Endpoint(LISTENER, "127.0.0.1", 9093),)

        corrupt = bytearray(records)
        corrupt[-1] ^= 0xFF  # the second batch fails its CRC
        server.answer = (server.answer[0], bytes(corrupt))
        _, resp, error = await fetch()  # type: ignore[misc]
        assert resp is None and isinstance(error, ProtocolError) and "CRC" in str(error)
        assert not conn.closed  # the stream is intact: only this fetch failed

        server.answer = (m.FetchResponse(ErrorCode.FENCED_LEADER_EPOCH, 3, 7, 101, 0), b"")
        _, resp, error = await fetch()  # type: ignore[misc]
        assert error is None and type(resp) is m.FetchResponse
        assert (resp.error_code, resp.leader_id, resp.leader_epoch) == (
            ErrorCode.FENCED_LEADER_EPOCH, 3, 7)
    finally:
        conn.close()
        await server.listener.stop()
