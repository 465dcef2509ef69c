"""Version rules, tagged-field handling, hostile lengths and generated-code drift."""

from __future__ import annotations

import dataclasses

import pytest

from kraft.protocol import codec, gen_messages
from kraft.protocol import messages as m
from kraft.protocol.codec import codec_source, decode, encode
from kraft.protocol.errors import (
    MalformedInputError,
    ProtocolError,
    TruncatedInputError,
    UnsupportedVersionError,
)
from kraft.protocol.uuid import Uuid


def test_generated_messages_module_is_up_to_date() -> None:
    assert gen_messages.TARGET.read_text(encoding="utf-8") == gen_messages.render(), (
        "run: python -m kraft.protocol.gen_messages"
    )


def test_defaults_match_schema() -> None:
    assert m.VoteRequestData() == m.VoteRequestData(cluster_id=None, voter_id=-1, topics=[])
    p = m.FetchRequestData.FetchPartition()
    assert (p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset) == (-1, -1, -1)
    assert p.high_watermark == 2**63 - 1
    assert p.replica_directory_id == Uuid.ZERO
    r = m.FetchRequestData()
    assert (r.replica_id, r.max_bytes, r.session_epoch, r.rack_id) == (-1, 0x7FFFFFFF, -1, "")
    assert r.replica_state == m.FetchRequestData.ReplicaState(-1, -1)
    pd = m.FetchResponseData.PartitionData()
    assert pd.snapshot_id == m.FetchResponseData.SnapshotId(-1, -1)
    assert pd.records is None
    assert m.DescribeClusterResponseData().cluster_authorized_operations == -(2**31)
    assert m.UpdateFeaturesRequestData().timeout_ms == 60000
    assert m.FetchSnapshotResponseData.PartitionSnapshot().unaligned_records == b""


def test_non_ignorable_field_in_old_version_raises() -> None:
    req = m.VoteRequestData(topics=[m.VoteRequestData.TopicData("t", [
        m.VoteRequestData.PartitionData(pre_vote=True)])])
    encode(req, 2)
    for v in (0, 1):
        with pytest.raises(UnsupportedVersionError, match="pre_vote"):
            encode(req, v)
    # LastFetchedEpoch (Fetch v12+) is not ignorable either
    fetch = m.FetchRequestData(topics=[m.FetchRequestData.FetchTopic(partitions=[
        m.FetchRequestData.FetchPartition(last_fetched_epoch=3)])])
    with pytest.raises(UnsupportedVersionError, match="last_fetched_epoch"):
        encode(fetch, 11)
    encode(fetch, 12)


def test_ignorable_fields_are_dropped_silently() -> None:
    req = m.VoteRequestData(voter_id=3, topics=[m.VoteRequestData.TopicData("t", [
        m.VoteRequestData.PartitionData(replica_directory_id=Uuid(b"\x01" * 16))])])
    back = decode(m.VoteRequestData, encode(req, 0), 0)
    assert back.voter_id == -1
    assert back.topics[0].partitions[0].replica_directory_id == Uuid.ZERO
    # Fetch v13 drops the (ignorable) topic name and keeps the topic id
    f = m.FetchRequestData(topics=[m.FetchRequestData.FetchTopic(
        topic="__cluster_metadata", topic_id=Uuid.METADATA_TOPIC_ID)])
    back_f = decode(m.FetchRequestData, encode(f, 13), 13)
    assert back_f.topics[0].topic == "" and back_f.topics[0].topic_id == Uuid.METADATA_TOPIC_ID


def test_tagged_fields_omitted_at_default_and_written_otherwise() -> None:
    base = m.FetchRequestData.FetchPartition()
    wire = encode(m.FetchRequestData(topics=[m.FetchRequestData.FetchTopic(
        partitions=[base])]), 18)
    with_hw = encode(m.FetchRequestData(topics=[m.FetchRequestData.FetchTopic(
        partitions=[dataclasses.replace(base, high_watermark=-1)])]), 18)
    assert len(with_hw) == len(wire) + 1 + 1 + 8  # tag, size, int64
    # in v17 the HighWatermark tag does not exist: ignorable, so dropped
    v17 = encode(m.FetchRequestData(topics=[m.FetchRequestData.FetchTopic(
        partitions=[dataclasses.replace(base, high_watermark=-1)])]), 17)
    assert v17 == encode(m.FetchRequestData(topics=[m.FetchRequestData.FetchTopic(
        partitions=[base])]), 17)


def test_unknown_tagged_fields_survive_roundtrip_in_order() -> None:
    wire = bytes.fromhex(
        "0000 01"             # error_code, topics: []
        "02"                  # two tagged fields
        "05 02 abcd"          # unknown tag 5
        "07 00"               # unknown tag 7, empty
    )
    msg = decode(m.VoteResponseData, wire, 1)
    assert msg.unknown_tagged_fields == {5: b"\xab\xcd", 7: b""}
    assert encode(msg, 1) == wire
    # known and unknown tags are merged in ascending order
    msg2 = dataclasses.replace(msg, node_endpoints=[m.VoteResponseData.NodeEndpoint(1, "h", 1)])
    out = encode(msg2, 1)
    assert out.startswith(bytes.fromhex("0000 01 03 00".replace(" ", "")))
    assert decode(m.VoteResponseData, out, 1) == msg2


def test_unknown_tags_cannot_be_written_into_a_non_flexible_version() -> None:
    msg = m.BeginQuorumEpochResponseData(unknown_tagged_fields={9: b""})
    with pytest.raises(UnsupportedVersionError):
        encode(msg, 0)
    assert decode(m.BeginQuorumEpochResponseData, encode(msg, 1), 1) == msg


def test_tagged_value_size_mismatch_is_malformed() -> None:
    # FetchSnapshot request body tags: cluster_id with size 5 but a 4-byte value inside
    good = encode(m.FetchSnapshotRequestData(cluster_id="abc"), 0)
    assert good.endswith(bytes.fromhex("01 00 04 04616263".replace(" ", "")))
    bad = good[:-6] + bytes.fromhex("00 05 04616263 00".replace(" ", ""))
    with pytest.raises(MalformedInputError, match="cluster_id"):
        decode(m.FetchSnapshotRequestData, bad, 0)


def test_out_of_order_tags_rejected() -> None:
    wire = bytes.fromhex("0000 01 02 07 00 05 00".replace(" ", ""))
    with pytest.raises(MalformedInputError, match="out of order"):
        decode(m.VoteResponseData, wire, 1)


def test_hostile_lengths_do_not_allocate() -> None:
    # Fetch v11 response whose records length claims 2**31 - 1 bytes
    msg = m.FetchResponseData(responses=[m.FetchResponseData.FetchableTopicResponse(
        topic="t", partitions=[m.FetchResponseData.PartitionData(records=b"xyz")])])
    wire = bytearray(encode(msg, 11))
    assert wire[-7:] == b"\x00\x00\x00\x03xyz"
    wire[-7:-3] = b"\x7f\xff\xff\xff"
    with pytest.raises(TruncatedInputError, match=r"FetchResponse v11: field "
                       r"'PartitionData\.records' at byte offset \d+: needs 2147483647"):
        decode(m.FetchResponseData, bytes(wire), 11)
    # array count far larger than the bytes left: rejected before the loop
    hostile = b"\x00\x00" + b"\x7f\xff\xff\xff"  # BeginQuorumEpoch v0 response, topics count
    with pytest.raises(MalformedInputError, match="cannot fit"):
        decode(m.BeginQuorumEpochResponseData, hostile, 0)
    compact = b"\x00\x00" + b"\xff\xff\xff\xff\x0f"  # Vote response, compact count 2**32-2
    with pytest.raises(MalformedInputError, match="cannot fit"):
        decode(m.VoteResponseData, compact, 1)


def test_null_where_not_nullable() -> None:
    with pytest.raises(MalformedInputError, match="null"):
        decode(m.VoteResponseData, b"\x00\x00\x00", 1)  # compact array 0 = null
    with pytest.raises(ValueError, match="not nullable"):
        encode(m.VoteRequestData(topics=[m.VoteRequestData.TopicData(None)]), 2)  # type: ignore[arg-type]
    # cluster_id is nullable
    assert decode(m.VoteRequestData, encode(m.VoteRequestData(), 2), 2).cluster_id is None


def test_out_of_range_values_raise_value_error() -> None:
    with pytest.raises(ValueError, match="VoteResponse v1"):
        encode(m.VoteResponseData(error_code=70000), 1)
    with pytest.raises(ValueError, match="32767"):
        encode(m.AddRaftVoterResponseData(error_message="x" * 40000), 0)


def test_bad_utf8_is_malformed() -> None:
    wire = bytes.fromhex("03 ff fe 00000000 01 00".replace(" ", ""))
    with pytest.raises(MalformedInputError, match="UTF-8"):
        decode(m.RemoveRaftVoterRequestData, wire + bytes(16), 0)


def test_unsupported_body_version() -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        encode(m.VoteRequestData(), 3)
    assert info.value.api_key == 52
    with pytest.raises(UnsupportedVersionError):
        decode(m.FetchRequestData, b"", 3)
    with pytest.raises(TypeError):
        encode(object(), 0)


def test_codecs_are_compiled_once_with_struct_runs() -> None:
    src = codec_source(m.VoteRequestData, 2)
    assert ".pack(m.partition_index, m.replica_epoch, m.replica_id" in src
    assert "unpack_from(buf, pos)" in src
    first = codec._codec(m.VoteRequestData, 2)
    assert codec._codec(m.VoteRequestData, 2) is first


def test_records_stay_zero_copy_for_memoryview_input() -> None:
    msg = m.FetchResponseData(responses=[m.FetchResponseData.FetchableTopicResponse(
        partitions=[m.FetchResponseData.PartitionData(records=b"r" * 1000)])])
    wire = memoryview(encode(msg, 16))
    back = decode(m.FetchResponseData, wire, 16)
    rec = back.responses[0].partitions[0].records
    assert isinstance(rec, memoryview) and rec == b"r" * 1000


def test_truncation_errors_are_protocol_errors_with_context() -> None:
    wire = encode(m.DescribeQuorumRequestData(topics=[
        m.DescribeQuorumRequestData.TopicData("t", [m.DescribeQuorumRequestData.PartitionData(0)])
    ]), 1)
    with pytest.raises(ProtocolError, match=r"DescribeQuorumRequest v1: field "
                       r"'TopicData\.partitions' at byte offset 3"):
        decode(m.DescribeQuorumRequestData, wire[:6], 1)
    # inside a run of fixed-width fields the exact field is named
    upd = encode(m.UpdateRaftVoterRequestData(), 0)
    with pytest.raises(TruncatedInputError, match=r"UpdateRaftVoterRequest v0: field "
                       r"'UpdateRaftVoterRequest\.voter_id' at byte offset 5"):
        decode(m.UpdateRaftVoterRequestData, upd[:7], 0)
