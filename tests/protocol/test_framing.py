"""Headers, frames, FrameDecoder limits and the ApiVersions special cases."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.protocol import messages as m
from kraft.protocol.api import (
    API_SPECS,
    SERVED_APIS,
    ApiKey,
    api_spec,
    api_versions_response,
)
from kraft.protocol.codec import PartsBuffer, Spliced, encode, encode_into
from kraft.protocol.errors import (
    ErrorCode,
    FrameTooLargeError,
    MalformedInputError,
    TruncatedInputError,
    UnsupportedVersionError,
)
from kraft.protocol.framing import (
    FrameDecoder,
    RequestHeader,
    ResponseHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
)
from kraft.protocol.uuid import Uuid


def test_request_header_v1_golden() -> None:
    # BeginQuorumEpoch v0 is not flexible: header v1 (no tagged section)
    body = m.BeginQuorumEpochRequestData()
    frame = encode_request(RequestHeader(53, 0, 7, "raft-client-1"), body)
    header_hex = "0035 0000 00000007 000d" + b"raft-client-1".hex()
    body_hex = "ffff 00000000"
    expected = bytes.fromhex((header_hex + body_hex).replace(" ", ""))
    assert frame == struct.pack(">i", len(expected)) + expected
    header, decoded = decode_request(frame[4:])
    assert header == RequestHeader(53, 0, 7, "raft-client-1")
    assert decoded == body


def test_request_header_v2_golden_with_null_client_id() -> None:
    # Vote is flexible: header v2 = v1 fields + tagged section; client id stays int16-length
    body = m.VoteRequestData()
    frame = encode_request(RequestHeader(52, 2, 1, None, {5: b"\x01"}), body)
    expected = bytes.fromhex("0034 0002 00000001 ffff 01 05 01 01".replace(" ", "")) + encode(
        body, 2
    )
    assert frame[4:] == expected
    header, decoded = decode_request(frame, size_prefixed=True)
    assert header.unknown_tagged_fields == {5: b"\x01"}
    assert header.client_id is None
    assert decoded == body


def test_response_headers() -> None:
    body = m.VoteResponseData(error_code=0)
    frame = encode_response(52, 2, 9, body)
    assert frame[4:9] == bytes.fromhex("0000000900")  # correlation id + empty tags (v1)
    assert decode_response(52, 2, frame[4:]) == (ResponseHeader(9), body)
    # non-flexible -> header v0
    frame0 = encode_response(53, 0, 9, m.BeginQuorumEpochResponseData())
    assert frame0[4:8] == bytes.fromhex("00000009")
    assert frame0[8:] == encode(m.BeginQuorumEpochResponseData(), 0)


def test_api_versions_response_always_uses_header_v0() -> None:
    body = api_versions_response(4)
    frame = encode_response(18, 4, 3, body)
    assert frame[4:8] == bytes.fromhex("00000003")
    assert frame[8:] == encode(body, 4)  # no tagged header section
    assert decode_response(18, 4, frame[4:]) == (ResponseHeader(3), body)


def test_api_versions_unsupported_version_falls_back_to_v0_layout() -> None:
    body = api_versions_response(0, error_code=ErrorCode.UNSUPPORTED_VERSION)
    frame = encode_response(18, 0, 3, body)
    header, decoded = decode_response(18, 4, frame, size_prefixed=True)
    assert header.correlation_id == 3
    assert decoded.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [k.api_key for k in decoded.api_keys] == [int(s.key) for s in SERVED_APIS]


def test_api_versions_unsupported_version_in_the_requested_layout_still_decodes() -> None:
    # the error code alone does not make a body v0: a v3 body that carries it parses as v3
    body = api_versions_response(3, error_code=ErrorCode.UNSUPPORTED_VERSION)
    frame = encode_response(18, 3, 9, body)
    assert decode_response(18, 3, frame, size_prefixed=True) == (ResponseHeader(9), body)


def test_api_versions_advertises_kraft_version_only_from_v4() -> None:
    v4 = api_versions_response(4)
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [
        ("kraft.version", 0, 1), ("metadata.version", 20, 33)
    ]
    # a minimum of 0 only from v4 (older clients reject it), as Kafka does
    assert [f.name for f in api_versions_response(3).supported_features] == ["metadata.version"]
    keys = {k.api_key: (k.min_version, k.max_version) for k in v4.api_keys}
    assert keys[ApiKey.FETCH] == (4, 18)
    assert keys[ApiKey.VOTE] == (0, 2)
    assert keys[ApiKey.API_VERSIONS] == (0, 5)  # v5: KIP-1242
    assert keys[ApiKey.ADD_RAFT_VOTER] == (0, 1)  # v1: KIP-1186
    for v in range(5):
        encode(api_versions_response(v), v)


def test_api_table() -> None:
    assert API_SPECS[ApiKey.BEGIN_QUORUM_EPOCH].is_flexible(1)
    assert not API_SPECS[ApiKey.BEGIN_QUORUM_EPOCH].is_flexible(0)
    assert API_SPECS[ApiKey.FETCH].first_flexible_version == 12
    assert API_SPECS[ApiKey.FETCH].request_header_version(11) == 1
    assert API_SPECS[ApiKey.FETCH].response_header_version(12) == 1
    assert API_SPECS[ApiKey.API_VERSIONS].response_header_version(3) == 0


@pytest.mark.parametrize(("key", "version"), [(9999, 0), (52, 3), (1, 3), (18, 6)])
def test_unknown_api_or_version_carries_correlation_id(key: int, version: int) -> None:
    frame = struct.pack(">hhih", key, version, 4242, -1) + b"\x00\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame)
    assert info.value.api_key == key
    assert info.value.api_version == version
    assert info.value.correlation_id == 4242


def test_decode_request_errors_name_field_and_offset() -> None:
    with pytest.raises(TruncatedInputError, match="correlation_id"):
        decode_request(b"\x00\x34\x00\x02\x00")
    good = encode_request(RequestHeader(52, 2, 1, "c"), m.VoteRequestData())[4:]
    with pytest.raises(MalformedInputError, match="trailing"):
        decode_request(good + b"\x00")
    with pytest.raises(TruncatedInputError, match=r"VoteRequest v2: field 'VoteRequest\.topics'"):
        decode_request(good[:-2])
    with pytest.raises(MalformedInputError, match="size prefix"):
        decode_request(b"\x00\x00\x00\x09" + good, size_prefixed=True)


def test_encode_request_rejects_wrong_body_type() -> None:
    with pytest.raises(TypeError):
        encode_request(RequestHeader(52, 2, 1), m.VoteResponseData())
    with pytest.raises(UnsupportedVersionError):
        encode_request(RequestHeader(52, 7, 1), m.VoteRequestData())


def test_frame_decoder_splits_and_reassembles() -> None:
    frames = [encode_request(RequestHeader(52, 2, i, "c"), m.VoteRequestData()) for i in range(5)]
    stream = b"".join(frames)
    dec = FrameDecoder(1024)
    out: list[bytes] = []
    for i in range(0, len(stream), 3):
        out += dec.feed(stream[i : i + 3])
    assert out == [f[4:] for f in frames]
    assert dec.buffered() == 0
    assert [decode_request(f)[0].correlation_id for f in out] == list(range(5))


@given(st.lists(st.binary(max_size=50), max_size=6), st.lists(st.integers(1, 40), min_size=1))
@settings(max_examples=100, deadline=None)
def test_frame_decoder_any_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    dec = FrameDecoder(64)
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        out += dec.feed(stream[pos : pos + step])
        pos += step
        i += 1
    assert out == payloads


def test_frame_decoder_rejects_oversized_and_negative_before_allocating() -> None:
    dec = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameTooLargeError):
        dec.feed(struct.pack(">i", 2**31 - 1))
    with pytest.raises(FrameTooLargeError):  # stays failed
        dec.feed(b"x")
    assert dec.buffered() == 4
    dec = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(MalformedInputError):
        dec.feed(b"\xff\xff\xff\xfe")
    dec = FrameDecoder(max_frame_bytes=100)
    assert dec.feed(struct.pack(">i", 100)) == []
    assert dec.feed(b"a" * 100) == [b"a" * 100]


def test_api_spec_lookup() -> None:
    assert api_spec(52).name == "Vote"
    with pytest.raises(UnsupportedVersionError):
        api_spec(3)


def _fetch_response(records: object, version: int) -> m.FetchResponseData:
    F = m.FetchResponseData
    flexible = version >= 12
    part = F.PartitionData(partition_index=0, high_watermark=77, log_start_offset=3,
                           current_leader=F.LeaderIdAndEpoch(2, 9) if flexible
                           else F.LeaderIdAndEpoch(),  # tagged: after the records
                           records=records)
    topic = F.FetchableTopicResponse(topic="__cluster_metadata" if version <= 12 else "",
                                     topic_id=Uuid.METADATA_TOPIC_ID if version >= 13
                                     else Uuid.ZERO, partitions=[part])
    return F(responses=[topic])


def _snapshot_response(chunk: object, version: int = 1) -> m.FetchSnapshotResponseData:
    S = m.FetchSnapshotResponseData
    part = S.PartitionSnapshot(index=0, snapshot_id=S.SnapshotId(915, 4),
                               current_leader=S.LeaderIdAndEpoch(2, 9),  # tagged: after the chunk
                               size=1 << 30, position=8 << 20, unaligned_records=chunk)
    return S(topics=[S.TopicSnapshot("__cluster_metadata", [part])])


@pytest.mark.parametrize(("api", "version", "build"), [
    (ApiKey.FETCH, 4, _fetch_response),  # not flexible: int32-length bytes
    (ApiKey.FETCH, 12, _fetch_response),  # flexible: compact bytes, tagged fields after
    (ApiKey.FETCH, 17, _fetch_response),
    (ApiKey.FETCH_SNAPSHOT, 0, _snapshot_response),
    (ApiKey.FETCH_SNAPSHOT, 1, _snapshot_response),
])
def test_response_parts_are_the_frame_with_the_spliced_value_uncopied(api, version, build) -> None:
    """`encode_response_parts` gives, joined, exactly the frame body `encode_response` writes
    (so every other reader of the frame sees the same bytes), and the spliced value itself is
    one of the parts: the very object, not a copy."""
    data = bytes(range(256)) * 1031  # 263,936 bytes: a length varint of three bytes
    for value in (data, memoryview(data)[5:]):
        plain = encode_response(api, version, 4242, build(bytes(value), version))
        parts = encode_response_parts(api, version, 4242, build(Spliced(value), version))
        assert b"".join(parts) == plain[4:]
        assert any(p is value for p in parts)
        assert sum(len(p) for p in parts) == len(plain) - 4
        header, body = decode_response(api, version, b"".join(parts))
        assert header.correlation_id == 4242
        assert encode_response(api, version, 4242, body) == plain  # it reads back as sent


def test_a_spliced_value_encoded_into_a_plain_buffer_is_copied_in_place() -> None:
    """Spliced only changes where the bytes go when the target keeps parts."""
    data = b"x" * 70_000
    assert encode(_snapshot_response(Spliced(data)), 1) == encode(_snapshot_response(data), 1)
    out = PartsBuffer()
    encode_into(_snapshot_response(b"small"), 1, out)  # nothing spliced: one part
    assert out.parts() == (encode(_snapshot_response(b"small"), 1),)
