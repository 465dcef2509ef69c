"""Golden encodings derived by hand from the wire rules (not produced by our encoder).

Each expected value is spelled out field by field in hex. Every (message, version) of the
KRaft apis that kafka-python lacks (Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot,
Add/Remove/UpdateRaftVoter) has at least one golden here; Fetch v13/v17/v18 and ApiVersions
get goldens too (all their versions are also cross-checked against kafka-python).
"""

from __future__ import annotations

from typing import Any

import pytest

from kraft.protocol import messages as m
from kraft.protocol.codec import decode, encode
from kraft.protocol.uuid import Uuid

U1 = Uuid(bytes(range(1, 17)))
U1_HEX = bytes(range(1, 17)).hex()
U2 = Uuid(bytes(range(101, 117)))
U2_HEX = bytes(range(101, 117)).hex()
META_HEX = "00" * 15 + "01"
NAME = "__cluster_metadata"
NAME_COMPACT = "13" + NAME.encode().hex()  # uvarint(18 + 1) then the bytes
NAME_CLASSIC = "0012" + NAME.encode().hex()  # int16 18 then the bytes
ABC_COMPACT = "04616263"
CONTROLLER_COMPACT = "0b" + b"CONTROLLER".hex()
LOCALHOST_COMPACT = "0a" + b"localhost".hex()
PORT_9093_U16 = "2385"


def H(*parts: str) -> bytes:
    """Join hex fragments (spaces allowed) into bytes."""
    return bytes.fromhex("".join(parts).replace(" ", ""))


def _vote_request(pre_vote: bool = False) -> m.VoteRequestData:
    return m.VoteRequestData(
        cluster_id="abc",
        voter_id=2,
        topics=[m.VoteRequestData.TopicData(NAME, [m.VoteRequestData.PartitionData(
            partition_index=0, replica_epoch=5, replica_id=1, replica_directory_id=U1,
            voter_directory_id=U2, last_offset_epoch=4, last_offset=100, pre_vote=pre_vote)])],
    )


def _vote_request_v0() -> m.VoteRequestData:
    return m.VoteRequestData(
        cluster_id="abc",
        topics=[m.VoteRequestData.TopicData(NAME, [m.VoteRequestData.PartitionData(
            partition_index=0, replica_epoch=5, replica_id=1, last_offset_epoch=4,
            last_offset=100)])],
    )


def _vote_response(endpoints: bool) -> m.VoteResponseData:
    return m.VoteResponseData(
        error_code=0,
        topics=[m.VoteResponseData.TopicData(NAME, [m.VoteResponseData.PartitionData(
            partition_index=0, error_code=0, leader_id=2, leader_epoch=5, vote_granted=True)])],
        node_endpoints=[m.VoteResponseData.NodeEndpoint(2, "h1", 9093)] if endpoints else [],
    )


_LISTENER = m.BeginQuorumEpochRequestData.LeaderEndpoint("CONTROLLER", "localhost", 9093)
_LISTENER_HEX = CONTROLLER_COMPACT + LOCALHOST_COMPACT + PORT_9093_U16 + "00"

GOLDEN: list[tuple[str, Any, int, bytes]] = [
    # ---------------- Vote ----------------
    ("Vote request v0", _vote_request_v0(), 0, H(
        ABC_COMPACT,                      # cluster_id
        "02", NAME_COMPACT,               # topics: 1 element; topic_name
        "02",                             # partitions: 1 element
        "00000000 00000005 00000001",     # partition_index, replica_epoch, replica_id
        "00000004 0000000000000064",      # last_offset_epoch, last_offset
        "00", "00", "00")),               # tagged sections: partition, topic, body
    ("Vote request v1", _vote_request(), 1, H(
        ABC_COMPACT, "00000002",          # cluster_id, voter_id
        "02", NAME_COMPACT, "02",
        "00000000 00000005 00000001", U1_HEX, U2_HEX,
        "00000004 0000000000000064",
        "00", "00", "00")),
    ("Vote request v2 (pre-vote)", _vote_request(pre_vote=True), 2, H(
        ABC_COMPACT, "00000002",
        "02", NAME_COMPACT, "02",
        "00000000 00000005 00000001", U1_HEX, U2_HEX,
        "00000004 0000000000000064", "01",  # ... pre_vote = true
        "00", "00", "00")),
    ("Vote response v0", _vote_response(False), 0, H(
        "0000", "02", NAME_COMPACT, "02",
        "00000000 0000 00000002 00000005 01", "00", "00", "00")),
    ("Vote response v1", _vote_response(True), 1, H(
        "0000", "02", NAME_COMPACT, "02",
        "00000000 0000 00000002 00000005 01", "00", "00",
        "01",                             # one tagged field
        "00 0b",                          # tag 0, 11 bytes
        "02 00000002 036831", PORT_9093_U16, "00")),  # [ {node 2, "h1", 9093} ]
    ("Vote response v2", _vote_response(True), 2, H(
        "0000", "02", NAME_COMPACT, "02",
        "00000000 0000 00000002 00000005 01", "00", "00",
        "01 00 0b 02 00000002 036831", PORT_9093_U16, "00")),

    # ---------------- BeginQuorumEpoch ----------------
    ("BeginQuorumEpoch request v0", m.BeginQuorumEpochRequestData(
        cluster_id=None,
        topics=[m.BeginQuorumEpochRequestData.TopicData(NAME, [
            m.BeginQuorumEpochRequestData.PartitionData(0, leader_id=1, leader_epoch=5)])],
    ), 0, H(
        "ffff",                           # cluster_id null (int16 -1)
        "00000001", NAME_CLASSIC,         # topics (int32 count), name (int16 length)
        "00000001 00000000 00000001 00000005")),
    ("BeginQuorumEpoch request v1", m.BeginQuorumEpochRequestData(
        cluster_id="abc", voter_id=2,
        topics=[m.BeginQuorumEpochRequestData.TopicData(NAME, [
            m.BeginQuorumEpochRequestData.PartitionData(0, U2, 1, 5)])],
        leader_endpoints=[_LISTENER],
    ), 1, H(
        ABC_COMPACT, "00000002", "02", NAME_COMPACT,
        "02 00000000", U2_HEX, "00000001 00000005 00", "00",
        "02", _LISTENER_HEX, "00")),
    ("BeginQuorumEpoch response v0", m.BeginQuorumEpochResponseData(
        topics=[m.BeginQuorumEpochResponseData.TopicData(NAME, [
            m.BeginQuorumEpochResponseData.PartitionData(0, 0, 1, 5)])],
    ), 0, H("0000 00000001", NAME_CLASSIC, "00000001 00000000 0000 00000001 00000005")),
    ("BeginQuorumEpoch response v1", m.BeginQuorumEpochResponseData(
        error_code=0,
        topics=[m.BeginQuorumEpochResponseData.TopicData(NAME, [
            m.BeginQuorumEpochResponseData.PartitionData(0, 6, 1, 5)])],
        node_endpoints=[m.BeginQuorumEpochResponseData.NodeEndpoint(1, "h1", 9093)],
    ), 1, H(
        "0000 02", NAME_COMPACT, "02 00000000 0006 00000001 00000005 00 00",
        "01 00 0b 02 00000001 036831", PORT_9093_U16, "00")),

    # ---------------- EndQuorumEpoch ----------------
    ("EndQuorumEpoch request v0", m.EndQuorumEpochRequestData(
        cluster_id="abc",
        topics=[m.EndQuorumEpochRequestData.TopicData(NAME, [
            m.EndQuorumEpochRequestData.PartitionData(0, 1, 5, preferred_successors=[2, 3])])],
    ), 0, H(
        "0003 616263", "00000001", NAME_CLASSIC,
        "00000001 00000000 00000001 00000005",
        "00000002 00000002 00000003")),   # preferred_successors [2, 3]
    ("EndQuorumEpoch request v1", m.EndQuorumEpochRequestData(
        cluster_id=None,
        topics=[m.EndQuorumEpochRequestData.TopicData(NAME, [
            m.EndQuorumEpochRequestData.PartitionData(0, 1, 5, preferred_candidates=[
                m.EndQuorumEpochRequestData.ReplicaInfo(2, U1)])])],
    ), 1, H(
        "00",                             # cluster_id null (compact)
        "02", NAME_COMPACT, "02 00000000 00000001 00000005",
        "02 00000002", U1_HEX, "00",      # preferred_candidates [{2, U1}]
        "00 00",
        "01",                             # leader_endpoints: empty compact array
        "00")),
    ("EndQuorumEpoch response v0", m.EndQuorumEpochResponseData(
        error_code=6, topics=[],
    ), 0, H("0006 00000000")),
    ("EndQuorumEpoch response v1", m.EndQuorumEpochResponseData(
        error_code=6, topics=[],
    ), 1, H("0006 01 00")),

    # ---------------- FetchSnapshot ----------------
    ("FetchSnapshot request v0", m.FetchSnapshotRequestData(
        cluster_id="abc", replica_id=1, max_bytes=8 * 1024 * 1024,
        topics=[m.FetchSnapshotRequestData.TopicSnapshot(NAME, [
            m.FetchSnapshotRequestData.PartitionSnapshot(
                0, 5, m.FetchSnapshotRequestData.SnapshotId(100, 4), position=0)])],
    ), 0, H(
        "00000001 00800000",              # replica_id, max_bytes
        "02", NAME_COMPACT, "02",
        "00000000 00000005",              # partition, current_leader_epoch
        "0000000000000064 00000004 00",   # snapshot_id {end_offset 100, epoch 4}
        "0000000000000000 00",            # position, partition tags
        "00",                             # topic tags
        "01 00 04", ABC_COMPACT)),        # body tags: cluster_id (tag 0, 4 bytes)
    ("FetchSnapshot request v1", m.FetchSnapshotRequestData(
        replica_id=1, max_bytes=8 * 1024 * 1024,
        topics=[m.FetchSnapshotRequestData.TopicSnapshot(NAME, [
            m.FetchSnapshotRequestData.PartitionSnapshot(
                0, 5, m.FetchSnapshotRequestData.SnapshotId(100, 4), 4096, U1)])],
    ), 1, H(
        "00000001 00800000 02", NAME_COMPACT, "02 00000000 00000005",
        "0000000000000064 00000004 00 0000000000001000",
        "01 00 10", U1_HEX,               # replica_directory_id (tag 0, 16 bytes)
        "00 00")),
    ("FetchSnapshot response v0", m.FetchSnapshotResponseData(
        topics=[m.FetchSnapshotResponseData.TopicSnapshot(NAME, [
            m.FetchSnapshotResponseData.PartitionSnapshot(
                0, 0, m.FetchSnapshotResponseData.SnapshotId(100, 4),
                m.FetchSnapshotResponseData.LeaderIdAndEpoch(1, 5), 1000, 0, b"\xaa\xbb\xcc")])],
    ), 0, H(
        "00000000 0000 02", NAME_COMPACT, "02 00000000 0000",
        "0000000000000064 00000004 00",
        "00000000000003e8 0000000000000000",  # size 1000, position 0
        "04 aabbcc",                      # unaligned_records (compact bytes)
        "01 00 09 00000001 00000005 00",  # current_leader (tag 0)
        "00 00")),
    ("FetchSnapshot response v1", m.FetchSnapshotResponseData(
        error_code=6,
        node_endpoints=[m.FetchSnapshotResponseData.NodeEndpoint(1, "h", 9093)],
    ), 1, H("00000000 0006 01", "01 00 0a 02 00000001 0268", PORT_9093_U16, "00")),

    # ApiVersions v5 (KIP-1242): ClusterId and NodeId after the software name and version;
    # the bytes are those Kafka 4.4.0's ApiVersionsRequestData writes
    ("ApiVersions request v5", m.ApiVersionsRequestData(
        client_software_name="kraft", client_software_version="1.0", cluster_id="abc",
        node_id=4), 5, H("066b72616674 04312e30 04616263 00000004 00")),
    ("ApiVersions request v5, neither", m.ApiVersionsRequestData(
        client_software_name="kraft", client_software_version="1.0"), 5,
     H("066b72616674 04312e30 00 ffffffff 00")),

    # ---------------- AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter ----------------
    ("AddRaftVoter request v0", m.AddRaftVoterRequestData(
        cluster_id=None, timeout_ms=30000, voter_id=4, voter_directory_id=U1,
        listeners=[m.AddRaftVoterRequestData.Listener("CONTROLLER", "localhost", 9093)],
    ), 0, H("00 00007530 00000004", U1_HEX, "02", _LISTENER_HEX, "00")),
    ("AddRaftVoter response v0", m.AddRaftVoterResponseData(
        error_code=126, error_message="dup"), 0, H("00000000 007e 04647570 00")),
    # v1 (KIP-1186): AckWhenCommitted, a bool after Listeners; the response is v0's
    ("AddRaftVoter request v1", m.AddRaftVoterRequestData(
        cluster_id=None, timeout_ms=30000, voter_id=4, voter_directory_id=U1,
        listeners=[m.AddRaftVoterRequestData.Listener("CONTROLLER", "localhost", 9093)],
        ack_when_committed=False,
    ), 1, H("00 00007530 00000004", U1_HEX, "02", _LISTENER_HEX, "00", "00")),
    ("AddRaftVoter response v1", m.AddRaftVoterResponseData(
        error_code=126, error_message="dup"), 1, H("00000000 007e 04647570 00")),
    ("RemoveRaftVoter request v0", m.RemoveRaftVoterRequestData(
        cluster_id="abc", voter_id=4, voter_directory_id=U1,
    ), 0, H(ABC_COMPACT, "00000004", U1_HEX, "00")),
    ("RemoveRaftVoter response v0", m.RemoveRaftVoterResponseData(), 0,
     H("00000000 0000 00 00")),
    ("UpdateRaftVoter request v0", m.UpdateRaftVoterRequestData(
        current_leader_epoch=5, voter_id=4, voter_directory_id=U1,
        kraft_version_feature=m.UpdateRaftVoterRequestData.KRaftVersionFeature(0, 1),
    ), 0, H("00 00000005 00000004", U1_HEX, "01", "0000 0001 00", "00")),
    ("UpdateRaftVoter response v0", m.UpdateRaftVoterResponseData(
        current_leader=m.UpdateRaftVoterResponseData.CurrentLeader(1, 5, "h", 9093),
    ), 0, H("00000000 0000 01 00 0f 00000001 00000005 0268 00002385 00")),

    # ---------------- Fetch (KRaft shapes) ----------------
    ("Fetch request v13", m.FetchRequestData(
        replica_id=2, max_wait_ms=500, min_bytes=0, max_bytes=8 * 1024 * 1024,
        session_epoch=-1,
        topics=[m.FetchRequestData.FetchTopic(topic_id=Uuid.METADATA_TOPIC_ID, partitions=[
            m.FetchRequestData.FetchPartition(
                partition=0, current_leader_epoch=5, fetch_offset=100, last_fetched_epoch=4)])],
    ), 13, H(
        "00000002 000001f4 00000000 00800000 00",  # replica_id .. isolation_level
        "00000000 ffffffff",              # session_id, session_epoch
        "02", META_HEX, "02",
        "00000000 00000005 0000000000000064 00000004",
        "ffffffffffffffff 00000000 00",   # log_start_offset -1, partition_max_bytes
        "00",                             # topic tags
        "01",                             # forgotten_topics_data: empty
        "01",                             # rack_id ""
        "00")),
    ("Fetch request v18", m.FetchRequestData(
        cluster_id="abc",
        replica_state=m.FetchRequestData.ReplicaState(replica_id=2),
        max_wait_ms=500, max_bytes=8 * 1024 * 1024, session_epoch=-1,
        topics=[m.FetchRequestData.FetchTopic(topic_id=Uuid.METADATA_TOPIC_ID, partitions=[
            m.FetchRequestData.FetchPartition(
                partition=0, current_leader_epoch=5, fetch_offset=100, last_fetched_epoch=4,
                replica_directory_id=U1, high_watermark=50)])],
    ), 18, H(
        "000001f4 00000000 00800000 00 00000000 ffffffff",
        "02", META_HEX, "02",
        "00000000 00000005 0000000000000064 00000004 ffffffffffffffff 00000000",
        "02 00 10", U1_HEX, "01 08 0000000000000032",  # tags: directory id, high watermark
        "00 01 01",
        "02 00 04", ABC_COMPACT,          # body tags: cluster_id
        "01 0d 00000002 ffffffffffffffff 00")),  # replica_state {2, -1}
    ("Fetch response v18", m.FetchResponseData(
        responses=[m.FetchResponseData.FetchableTopicResponse(
            topic_id=Uuid.METADATA_TOPIC_ID, partitions=[m.FetchResponseData.PartitionData(
                partition_index=0, high_watermark=100, log_start_offset=0,
                diverging_epoch=m.FetchResponseData.EpochEndOffset(3, 90),
                current_leader=m.FetchResponseData.LeaderIdAndEpoch(1, 5),
                aborted_transactions=None, records=b"\xaa\xbb\xcc")])],
        node_endpoints=[m.FetchResponseData.NodeEndpoint(1, "h", 9093, None)],
    ), 18, H(
        "00000000 0000 00000000",         # throttle, error, session_id
        "02", META_HEX, "02",
        "00000000 0000 0000000000000064 ffffffffffffffff 0000000000000000",
        "00",                             # aborted_transactions: null
        "ffffffff",                       # preferred_read_replica -1
        "04 aabbcc",                      # records
        "02 00 0d 00000003 000000000000005a 00",  # diverging_epoch (tag 0)
        "01 09 00000001 00000005 00",     # current_leader (tag 1)
        "00",
        "01 00 0d 02 00000001 0268 00002385 00 00")),  # node_endpoints (tag 0)

    # ---------------- ApiVersions ----------------
    ("ApiVersions request v3", m.ApiVersionsRequestData("kraft", "1.0"), 3, H(
        "06" + b"kraft".hex(), "04" + b"1.0".hex(), "00")),
    ("ApiVersions response v0", m.ApiVersionsResponseData(
        error_code=35, api_keys=[m.ApiVersionsResponseData.ApiVersion(18, 0, 4)]), 0,
     H("0023 00000001 0012 0000 0004")),
    ("ApiVersions response v4", m.ApiVersionsResponseData(
        api_keys=[m.ApiVersionsResponseData.ApiVersion(52, 0, 2)],
        supported_features=[m.ApiVersionsResponseData.SupportedFeatureKey(
            "kraft.version", 0, 1)],
    ), 4, H(
        "0000 02 0034 0000 0002 00",      # error, api_keys [{52, 0, 2}]
        "00000000",                       # throttle_time_ms
        "01 00 14",                       # tag 0 (supported_features), 20 bytes
        "02 0e" + b"kraft.version".hex() + "0000 0001 00")),
]


@pytest.mark.parametrize(("label", "msg", "version", "wire"), GOLDEN,
                         ids=[g[0] for g in GOLDEN])
def test_golden(label: str, msg: Any, version: int, wire: bytes) -> None:
    assert encode(msg, version).hex() == wire.hex()
    assert decode(type(msg), wire, version) == msg


def test_every_kraft_message_version_has_a_golden() -> None:
    have = {(type(g[1]).__name__, g[2]) for g in GOLDEN}
    for cls_name, versions in {
        "VoteRequestData": range(3), "VoteResponseData": range(3),
        "BeginQuorumEpochRequestData": range(2), "BeginQuorumEpochResponseData": range(2),
        "EndQuorumEpochRequestData": range(2), "EndQuorumEpochResponseData": range(2),
        "FetchSnapshotRequestData": range(2), "FetchSnapshotResponseData": range(2),
        "AddRaftVoterRequestData": range(2), "AddRaftVoterResponseData": range(2),
        "RemoveRaftVoterRequestData": range(1), "RemoveRaftVoterResponseData": range(1),
        "UpdateRaftVoterRequestData": range(1), "UpdateRaftVoterResponseData": range(1),
    }.items():
        for v in versions:
            assert (cls_name, v) in have, (cls_name, v)
