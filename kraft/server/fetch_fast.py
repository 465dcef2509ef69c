"""Direct codecs for the Fetch exchange between voters (Fetch v17 and v18).

A follower's fetch costs the leader one FetchRequest decode and one FetchResponse encode, and
the follower the reverse; a write made alone costs two such rounds per follower. The general
path goes frame bytes -> generated wire dataclasses -> `translate` -> core message (and back),
about 12-22 us a message on this project's machines. The functions here go straight between
the frame bytes and the core messages, for the one shape voters send each other:

* one topic (the metadata topic id), one partition (0), no forgotten topics;
* no tagged field other than the ones Fetch v17/v18 define (request: ClusterId, ReplicaState,
  ReplicaDirectoryId, HighWatermark; response: NodeEndpoints, DivergingEpoch, CurrentLeader,
  SnapshotId), each struct with no tagged fields of its own.

Anything else (another version, another shape, an unknown tag, a cluster id that is not ours,
a truncated or malformed frame) makes them return None, and the caller takes the general path,
which also produces every error and rejection. `tests/node/test_fetch_fast.py` checks that both
paths agree byte for byte (encoders) and field for field (decoders).
"""

from __future__ import annotations

import struct
from functools import lru_cache

from kraft.protocol.errors import ErrorCode, ProtocolError
from kraft.protocol.primitives import decode_uvarint as _read_uv
from kraft.protocol.primitives import encode_uvarint as _uv
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.server.translate import FETCH_HW_NOT_PROVIDED, parse_fetched_batches

FETCH_API_KEY = 1
FAST_VERSIONS = frozenset((17, 18))
"""The Fetch versions these functions handle (flexible, topic ids, replica directory ids)."""

_TOPIC_ID = Uuid.METADATA_TOPIC_ID.bytes
_REQ_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# MaxWaitMs, MinBytes, MaxBytes, IsolationLevel, SessionId, SessionEpoch
_REQ_TOP = struct.Struct(">iiibii")
# Partition, CurrentLeaderEpoch, FetchOffset, LastFetchedEpoch, LogStartOffset, PartitionMaxBytes
_REQ_PART = struct.Struct(">iiqiqi")
_REPLICA_STATE = struct.Struct(">iqB")  # ReplicaId, ReplicaEpoch, no tags
# correlation id, no header tags; ThrottleTimeMs, ErrorCode, SessionId; one topic
_RESP_HEAD = struct.Struct(">iBihiB16s")
# one partition: PartitionIndex, ErrorCode, HighWatermark, LastStableOffset, LogStartOffset
_RESP_PART = struct.Struct(">Bihqqq")
_EPOCH_END = struct.Struct(">iqB")  # DivergingEpoch: Epoch, EndOffset, no tags
_LEADER = struct.Struct(">iiB")  # CurrentLeader: LeaderId, LeaderEpoch, no tags
_SNAPSHOT = struct.Struct(">qiB")  # SnapshotId: EndOffset, Epoch, no tags
_NO_HW = FETCH_HW_NOT_PROVIDED


# ---------------------------------------------------------------- FetchRequest (follower -> leader)


@lru_cache(maxsize=8)
def _cluster_id_tag(cluster_id: str) -> bytes:
    """Tagged field 0 of a FetchRequest: the ClusterId as a compact string (the same for
    every fetch of a node)."""
    cid = cluster_id.encode()
    value = _uv(len(cid) + 1) + cid
    return b"\x00" + _uv(len(value)) + value


def encode_fetch_request(req: m.FetchRequest, cluster_id: str, version: int, correlation_id: int,
                         client_id: str | None) -> bytes | None:
    """The request frame (header v2 and body, without the size prefix) that
    `encode_request(RequestHeader(1, version, correlation_id, client_id),
    request_to_wire(req, cluster_id, version))` writes; None for a version not handled."""
    if version not in FAST_VERSIONS:
        return None
    out = bytearray(_REQ_HEAD.pack(FETCH_API_KEY, version, correlation_id))
    if client_id is None:
        out += b"\xff\xff"
    else:
        raw = client_id.encode()
        out += _I16.pack(len(raw))
        out += raw
    out += b"\x00"  # header tagged fields
    out += _REQ_TOP.pack(req.max_wait_ms, 0, req.max_bytes, 0, 0, -1)
    out += b"\x02"  # one topic
    out += _TOPIC_ID
    out += b"\x02"  # one partition
    out += _REQ_PART.pack(0, req.current_leader_epoch, req.fetch_offset, req.last_fetched_epoch,
                          -1, 0)
    directory = req.replica_directory_id
    if directory is not None and directory.is_zero():
        directory = None
    hw = req.high_watermark if version >= 18 and req.high_watermark is not None else _NO_HW
    out.append((directory is not None) + (hw != _NO_HW))
    if directory is not None:
        out += b"\x00\x10"
        out += directory.bytes
    if hw != _NO_HW:
        out += b"\x01\x08"
        out += _I64.pack(hw)
    out += b"\x00\x01\x01"  # topic tagged fields, no forgotten topics, empty rack id
    if req.replica_id == -1:
        out += b"\x01"
        out += _cluster_id_tag(cluster_id)
    else:
        out += b"\x02"
        out += _cluster_id_tag(cluster_id)
        out += b"\x01\x0d"
        out += _REPLICA_STATE.pack(req.replica_id, -1, 0)
    return bytes(out)


def decode_fetch_request(frame: bytes | memoryview, cluster_id: str
                         ) -> tuple[int, int, m.FetchRequest] | None:
    """(api version, correlation id, core request) of a Fetch v17/v18 request frame (no size
    prefix) of the voters' shape naming our cluster; None for anything else."""
    try:
        api_key, version, corr = _REQ_HEAD.unpack_from(frame, 0)
        if api_key != FETCH_API_KEY or version not in FAST_VERSIONS:
            return None
        n = _I16.unpack_from(frame, 8)[0]
        pos = 10 + max(n, 0)
        if n < -1 or frame[pos] != 0:  # header tagged fields
            return None
        bytes(frame[10:pos]).decode()  # the client id: UTF-8, as the general path checks
        max_wait, _min, max_bytes, _iso, _sid, _sep = _REQ_TOP.unpack_from(frame, pos + 1)
        pos += 22
        if frame[pos] != 2 or bytes(frame[pos + 1:pos + 17]) != _TOPIC_ID or frame[pos + 17] != 2:
            return None
        part, leader_epoch, offset, last_epoch, _lso, _pmb = _REQ_PART.unpack_from(frame, pos + 18)
        if part != 0:
            return None
        pos += 50
        directory: Uuid | None = None
        wire_hw = _NO_HW
        count = frame[pos]
        pos += 1
        if count > 2:
            return None
        last = -1
        for _ in range(count):
            tag, size = frame[pos], frame[pos + 1]
            pos += 2
            if tag <= last:
                return None
            last = tag
            if tag == 0 and size == 16:
                raw = bytes(frame[pos:pos + 16])
                if len(raw) != 16:
                    return None
                directory = None if raw == bytes(16) else Uuid(raw)
            elif tag == 1 and size == 8 and version >= 18:
                wire_hw = _I64.unpack_from(frame, pos)[0]
            else:
                return None
            pos += size
        hw = None if version < 18 or wire_hw == _NO_HW else wire_hw
        # topic tagged fields, no forgotten topics
        if frame[pos] != 0 or frame[pos + 1] != 1:
            return None
        rack_len, pos = _read_uv(frame, pos + 2)
        if rack_len == 0:
            return None  # a null rack id: not what the general path accepts either
        bytes(frame[pos:pos + rack_len - 1]).decode()  # UTF-8, as the general path checks
        pos += rack_len - 1
        cid: str | None = None
        replica_id = -1
        count = frame[pos]
        pos += 1
        last = -1
        end = len(frame)
        for _ in range(count):
            tag = frame[pos]
            size, pos = _read_uv(frame, pos + 1)
            if tag <= last or pos + size > end:
                return None
            last = tag
            if tag == 0:
                length, p = _read_uv(frame, pos)
                if length == 0 or p + length - 1 != pos + size:
                    return None
                cid = bytes(frame[p:p + length - 1]).decode()
            elif tag == 1 and size == 13:
                replica_id, _epoch, tags = _REPLICA_STATE.unpack_from(frame, pos)
                if tags:
                    return None
            else:
                return None
            pos += size
        if pos != end or (cid is not None and cid != cluster_id):
            return None
    except (IndexError, ValueError, struct.error, UnicodeDecodeError, ProtocolError):
        return None
    return version, corr, m.FetchRequest(
        replica_id=replica_id, replica_directory_id=directory,
        current_leader_epoch=leader_epoch, fetch_offset=offset, last_fetched_epoch=last_epoch,
        max_wait_ms=max_wait, max_bytes=max_bytes, high_watermark=hw, cluster_id=cid)


# ---------------------------------------------------------------- FetchResponse (leader -> follower)


def encode_fetch_response(version: int, correlation_id: int, resp: m.FetchResponse,
                          records: bytes | bytearray | memoryview | None) -> bytes | None:
    """The response frame (header v1 and body, without the size prefix) that
    `encode_response(1, version, correlation_id, response_to_wire(resp, version, records))`
    writes; None for a version not handled."""
    if version not in FAST_VERSIONS:
        return None
    out = bytearray(_RESP_HEAD.pack(correlation_id, 0, 0, 0, 0, 2, _TOPIC_ID))
    out += _RESP_PART.pack(2, 0, int(resp.error_code), resp.high_watermark, -1,
                           resp.log_start_offset)
    out += b"\x01\xff\xff\xff\xff"  # no aborted transactions, no preferred read replica
    if records is None:
        records = b""
    out += _uv(len(records) + 1)
    out += records
    div, snap = resp.diverging_epoch, resp.snapshot_id
    leader = resp.leader_id != -1 or resp.leader_epoch != -1
    div_on = div is not None and (div.epoch != -1 or div.offset != -1)
    snap_on = snap is not None and (snap.offset != -1 or snap.epoch != -1)
    out.append(div_on + leader + snap_on)
    if div_on:
        assert div is not None
        out += b"\x00\x0d"
        out += _EPOCH_END.pack(div.epoch, div.offset, 0)
    if leader:
        out += b"\x01\x09"
        out += _LEADER.pack(resp.leader_id, resp.leader_epoch, 0)
    if snap_on:
        assert snap is not None
        out += b"\x02\x0d"
        out += _SNAPSHOT.pack(snap.offset, snap.epoch, 0)
    out += b"\x00"  # topic tagged fields
    if resp.leader_id >= 0 and resp.leader_endpoints:
        e = resp.leader_endpoints[0]
        host = e.host.encode()
        ep = _I32.pack(resp.leader_id) + _uv(len(host) + 1) + host + _I32.pack(e.port) + b"\x00\x00"
        value = b"\x02" + ep
        out += b"\x01\x00"
        out += _uv(len(value))
        out += value
    else:
        out += b"\x00"
    return bytes(out)


def decode_fetch_response(frame: bytes | memoryview, version: int, correlation_id: int,
                          listener: str) -> m.FetchResponse | None:
    """The core response of a Fetch v17/v18 response frame (no size prefix) answering
    `correlation_id`, for the voters' shape with no top-level error; None for anything else
    (including a wrong correlation id, which the general path reports). Corrupt record
    batches raise ProtocolError, as `translate.response_to_core` does."""
    if version not in FAST_VERSIONS:
        return None
    try:
        corr, htags, _throttle, top_error, _sid, topics, topic_id = _RESP_HEAD.unpack_from(frame, 0)
        if corr != correlation_id or htags or top_error or topics != 2 or topic_id != _TOPIC_ID:
            return None
        parts, _idx, error, hw, _lso, log_start = _RESP_PART.unpack_from(frame, 32)
        pos = 32 + 31
        if parts != 2 or frame[pos] not in (0, 1):  # aborted transactions: null or none
            return None
        pos += 5  # and the preferred read replica
        length, pos = _read_uv(frame, pos)
        if length == 0:
            records: bytes | memoryview | None = None
        else:
            end_records = pos + length - 1
            if end_records > len(frame):
                return None
            records = memoryview(frame)[pos:end_records]
            pos = end_records
        div: m.OffsetAndEpoch | None = None
        snap: m.OffsetAndEpoch | None = None
        leader_id = leader_epoch = -1
        count = frame[pos]
        pos += 1
        last = -1
        for _ in range(count):
            tag, size = frame[pos], frame[pos + 1]
            pos += 2
            if tag <= last:
                return None
            last = tag
            if tag == 0 and size == 13:
                epoch, end_offset, tags = _EPOCH_END.unpack_from(frame, pos)
                if epoch >= 0 and end_offset >= 0:
                    div = m.OffsetAndEpoch(epoch, end_offset)
            elif tag == 1 and size == 9:
                leader_id, leader_epoch, tags = _LEADER.unpack_from(frame, pos)
            elif tag == 2 and size == 13:
                end_offset, epoch, tags = _SNAPSHOT.unpack_from(frame, pos)
                if epoch >= 0 and end_offset >= 0:
                    snap = m.OffsetAndEpoch(epoch, end_offset)
            else:
                return None
            if tags:
                return None
            pos += size
        if frame[pos] != 0:  # topic tagged fields
            return None
        pos += 1
        endpoints: tuple[m.Endpoint, ...] = ()
        count = frame[pos]
        pos += 1
        end = len(frame)
        if count > 1:
            return None
        if count == 1:
            if frame[pos] != 0:
                return None
            size, pos = _read_uv(frame, pos + 1)
            if pos + size != end:
                return None
            n, pos = _read_uv(frame, pos)
            found = []
            for _ in range(n - 1):
                node_id = _I32.unpack_from(frame, pos)[0]
                length, pos = _read_uv(frame, pos + 4)
                if length == 0:
                    return None
                host = bytes(frame[pos:pos + length - 1]).decode()
                pos += length - 1
                port = _I32.unpack_from(frame, pos)[0]
                rack_len, pos = _read_uv(frame, pos + 4)
                if rack_len:
                    bytes(frame[pos:pos + rack_len - 1]).decode()  # UTF-8, as the general path checks
                    pos += rack_len - 1
                if frame[pos] != 0:
                    return None
                pos += 1
                if node_id == leader_id:
                    found.append(m.Endpoint(listener, host, port))
            endpoints = tuple(found)
        if pos != end:
            return None
    except (IndexError, ValueError, struct.error, UnicodeDecodeError, ProtocolError):
        return None
    try:
        code = ErrorCode(error)
    except ValueError:
        code = ErrorCode.UNKNOWN_SERVER_ERROR
    return m.FetchResponse(
        error_code=code, leader_id=leader_id, leader_epoch=leader_epoch, high_watermark=hw,
        log_start_offset=log_start, diverging_epoch=div, snapshot_id=snap,
        leader_endpoints=endpoints,
        batches=parse_fetched_batches(records) if error == 0 else ())
