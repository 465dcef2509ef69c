"""Translation between Kafka wire messages (`kraft.protocol.messages`) and the consensus core's
own messages (`kraft.raft.messages`).

The wire format nests everything under topics and partitions; KRaft always uses exactly one
partition, `__cluster_metadata`-0 (by topic id `AAAAAAAAAAAAAAAAAAAAAQ` in Fetch v13+). Checks
that need no consensus state happen here and raise `TopLevelError`, which the listener turns
into a top-level error response:

* a non-null cluster id different from ours → INCONSISTENT_CLUSTER_ID;
* a wrong topic or partition → INVALID_REQUEST (Fetch, Vote, Begin/EndQuorumEpoch) or
  UNKNOWN_TOPIC_OR_PARTITION (DescribeQuorum, FetchSnapshot).

Directory ids: the core uses `None` for "no directory id", the wire all-zero uuid.
"""

from __future__ import annotations

import struct
from typing import Any

from kraft.protocol import messages as w
from kraft.protocol.codec import Spliced
from kraft.protocol.errors import ErrorCode, ProtocolError
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.records.batch import RecordBatch
from kraft.records.control import decode_control_batch
from kraft.server.features import core_answer, update_features_response
from kraft.storage.log_segments import MAX_BATCH_BYTES

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
FETCH_HW_NOT_PROVIDED = 9223372036854775807
"""Fetch v18 `HighWatermark` default: the fetcher did not send one."""


class TopLevelError(Exception):
    """A request fails before it reaches the core; answered with this top-level error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _code(code: int) -> ErrorCode:
    """The enum member for a wire error code; a code we do not name is an unknown error."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _dir(u: Uuid) -> Uuid | None:
    return None if u.is_zero() else u


def _wire_dir(u: Uuid | None) -> Uuid:
    return Uuid.ZERO if u is None else u


def _check_cluster(cluster_id: str | None, ours: str) -> None:
    if cluster_id is not None and cluster_id != ours:
        raise TopLevelError(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"request cluster id {cluster_id!r} differs from this node's {ours!r}",
        )


def _single(items: list[Any], what: str, code: ErrorCode) -> Any:
    if len(items) != 1:
        raise TopLevelError(code, f"expected exactly one {what}, got {len(items)}")
    return items[0]


def _topic_partition(
    topics: list[Any], name_attr: str, parts_attr: str, index_attr: str, code: ErrorCode
) -> Any:
    topic = _single(topics, "topic", code)
    name = getattr(topic, name_attr)
    if name != METADATA_TOPIC:
        raise TopLevelError(code, f"unknown topic {name!r}: only {METADATA_TOPIC} exists")
    part = _single(getattr(topic, parts_attr), "partition", code)
    if getattr(part, index_attr) != METADATA_PARTITION:
        raise TopLevelError(code, f"unknown partition {getattr(part, index_attr)}")
    return part


# ---------------------------------------------------------------- requests: wire → core


def request_to_core(data: object, version: int, cluster_id: str) -> m.Request:
    """Translate an inbound wire request into a core request (raises TopLevelError)."""
    if isinstance(data, w.VoteRequestData):
        _check_cluster(data.cluster_id, cluster_id)
        p = _topic_partition(data.topics, "topic_name", "partitions", "partition_index",
                             ErrorCode.INVALID_REQUEST)
        return m.VoteRequest(
            replica_epoch=p.replica_epoch, replica_id=p.replica_id,
            replica_directory_id=_dir(p.replica_directory_id), voter_id=data.voter_id,
            voter_directory_id=_dir(p.voter_directory_id), last_offset_epoch=p.last_offset_epoch,
            last_offset=p.last_offset, pre_vote=p.pre_vote, cluster_id=data.cluster_id,
        )
    if isinstance(data, w.BeginQuorumEpochRequestData):
        _check_cluster(data.cluster_id, cluster_id)
        p = _topic_partition(data.topics, "topic_name", "partitions", "partition_index",
                             ErrorCode.INVALID_REQUEST)
        return m.BeginQuorumEpochRequest(
            leader_id=p.leader_id, leader_epoch=p.leader_epoch, voter_id=data.voter_id,
            voter_directory_id=_dir(p.voter_directory_id),
            leader_endpoints=tuple(m.Endpoint(e.name, e.host, e.port) for e in data.leader_endpoints),
            cluster_id=data.cluster_id,
        )
    if isinstance(data, w.EndQuorumEpochRequestData):
        _check_cluster(data.cluster_id, cluster_id)
        p = _topic_partition(data.topics, "topic_name", "partitions", "partition_index",
                             ErrorCode.INVALID_REQUEST)
        if version >= 1:
            preferred = tuple(m.ReplicaKey(c.candidate_id, _dir(c.candidate_directory_id))
                              for c in p.preferred_candidates)
        else:
            preferred = tuple(m.ReplicaKey(i, None) for i in p.preferred_successors)
        return m.EndQuorumEpochRequest(
            leader_id=p.leader_id, leader_epoch=p.leader_epoch, preferred_candidates=preferred,
            leader_endpoints=tuple(m.Endpoint(e.name, e.host, e.port) for e in data.leader_endpoints),
            cluster_id=data.cluster_id,
        )
    if isinstance(data, w.FetchRequestData):
        _check_cluster(data.cluster_id, cluster_id)
        topic = _single(data.topics, "topic", ErrorCode.INVALID_REQUEST)
        if version >= 13:
            if topic.topic_id != Uuid.METADATA_TOPIC_ID:
                raise TopLevelError(ErrorCode.INVALID_REQUEST, f"unknown topic id {topic.topic_id}")
        elif topic.topic != METADATA_TOPIC:
            raise TopLevelError(ErrorCode.INVALID_REQUEST, f"unknown topic {topic.topic!r}")
        p = _single(topic.partitions, "partition", ErrorCode.INVALID_REQUEST)
        if p.partition != METADATA_PARTITION:
            raise TopLevelError(ErrorCode.INVALID_REQUEST, f"unknown partition {p.partition}")
        replica_id = data.replica_state.replica_id if version >= 15 else data.replica_id
        hw: int | None = None
        if version >= 18 and p.high_watermark != FETCH_HW_NOT_PROVIDED:
            hw = p.high_watermark
        return m.FetchRequest(
            replica_id=replica_id, replica_directory_id=_dir(p.replica_directory_id),
            current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
            last_fetched_epoch=p.last_fetched_epoch, max_wait_ms=data.max_wait_ms,
            max_bytes=data.max_bytes, high_watermark=hw, cluster_id=data.cluster_id,
        )
    if isinstance(data, w.FetchSnapshotRequestData):
        _check_cluster(data.cluster_id, cluster_id)
        p = _topic_partition(data.topics, "name", "partitions", "partition",
                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return m.FetchSnapshotRequest(
            replica_id=data.replica_id, replica_directory_id=_dir(p.replica_directory_id),
            current_leader_epoch=p.current_leader_epoch,
            snapshot_id=m.OffsetAndEpoch(p.snapshot_id.epoch, p.snapshot_id.end_offset),
            position=p.position, max_bytes=data.max_bytes, cluster_id=data.cluster_id,
        )
    if isinstance(data, w.DescribeQuorumRequestData):
        _topic_partition(data.topics, "topic_name", "partitions", "partition_index",
                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return m.DescribeQuorumRequest()
    if isinstance(data, w.AddRaftVoterRequestData):
        _check_cluster(data.cluster_id, cluster_id)
        return m.AddRaftVoterRequest(
            voter_id=data.voter_id, voter_directory_id=_dir(data.voter_directory_id),
            listeners=tuple(m.Endpoint(e.name, e.host, e.port) for e in data.listeners),
            timeout_ms=data.timeout_ms, cluster_id=data.cluster_id,
            ack_when_committed=data.ack_when_committed,
        )
    if isinstance(data, w.RemoveRaftVoterRequestData):
        _check_cluster(data.cluster_id, cluster_id)
        return m.RemoveRaftVoterRequest(
            voter_id=data.voter_id, voter_directory_id=_dir(data.voter_directory_id),
            cluster_id=data.cluster_id,
        )
    if isinstance(data, w.UpdateRaftVoterRequestData):
        _check_cluster(data.cluster_id, cluster_id)
        f = data.kraft_version_feature
        return m.UpdateRaftVoterRequest(
            current_leader_epoch=data.current_leader_epoch, voter_id=data.voter_id,
            voter_directory_id=_dir(data.voter_directory_id),
            listeners=tuple(m.Endpoint(e.name, e.host, e.port) for e in data.listeners),
            kraft_version_feature=m.KRaftVersionRange(f.min_supported_version,
                                                      f.max_supported_version),
            cluster_id=data.cluster_id,
        )
    if isinstance(data, w.ControllerRegistrationRequestData):
        ranges = {f.name: (f.min_supported_version, f.max_supported_version)
                  for f in data.features}
        lo, hi = ranges.get("kraft.version", (0, 0))
        return m.ControllerRegistrationRequest(
            controller_id=data.controller_id, incarnation_id=_dir(data.incarnation_id),
            listeners=tuple(m.Endpoint(e.name, e.host, e.port) for e in data.listeners),
            kraft_version_feature=m.KRaftVersionRange(lo, hi),
        )
    raise TopLevelError(ErrorCode.UNSUPPORTED_VERSION, f"{type(data).__name__} is not a core request")


# ---------------------------------------------------------------- responses: core → wire


def _node_endpoints(cls: Any, leader_id: int, endpoints: tuple[m.Endpoint, ...]) -> list[Any]:
    if leader_id < 0 or not endpoints:
        return []
    e = endpoints[0]
    return [cls(node_id=leader_id, host=e.host, port=e.port)]


def response_to_wire(resp: m.Response, version: int,
                     records: bytes | Spliced | None = None) -> object:
    """Translate a core response into the wire body (records/snapshot bytes attached; a
    `Spliced` value is kept as it is for `encode_response_parts`)."""
    attached: Any = records if records is not None else b""  # the wire field: bytes-like
    if isinstance(resp, m.VoteResponse):
        V = w.VoteResponseData
        return V(
            topics=[V.TopicData(METADATA_TOPIC, [V.PartitionData(
                partition_index=0, error_code=int(resp.error_code), leader_id=resp.leader_id,
                leader_epoch=resp.leader_epoch, vote_granted=resp.vote_granted)])],
            node_endpoints=_node_endpoints(V.NodeEndpoint, resp.leader_id, resp.leader_endpoints)
            if version >= 1 else [],
        )
    if isinstance(resp, m.BeginQuorumEpochResponse):
        B = w.BeginQuorumEpochResponseData
        return B(
            topics=[B.TopicData(METADATA_TOPIC, [B.PartitionData(
                0, int(resp.error_code), resp.leader_id, resp.leader_epoch)])],
            node_endpoints=_node_endpoints(B.NodeEndpoint, resp.leader_id,
                                           getattr(resp, "leader_endpoints", ()))
            if version >= 1 else [],
        )
    if isinstance(resp, m.EndQuorumEpochResponse):
        E = w.EndQuorumEpochResponseData
        return E(topics=[E.TopicData(METADATA_TOPIC, [E.PartitionData(
            0, int(resp.error_code), resp.leader_id, resp.leader_epoch)])])
    if isinstance(resp, m.FetchResponse):
        F = w.FetchResponseData
        div = resp.diverging_epoch
        snap = resp.snapshot_id
        f12 = version >= 12
        part = F.PartitionData(
            partition_index=0, error_code=int(resp.error_code),
            high_watermark=resp.high_watermark, log_start_offset=resp.log_start_offset,
            diverging_epoch=F.EpochEndOffset(div.epoch, div.offset) if div and f12
            else F.EpochEndOffset(),
            current_leader=F.LeaderIdAndEpoch(resp.leader_id, resp.leader_epoch) if f12
            else F.LeaderIdAndEpoch(),
            snapshot_id=F.SnapshotId(snap.offset, snap.epoch) if snap and f12 else F.SnapshotId(),
            records=attached,
        )
        endpoints: list[Any] = []
        if version >= 17 and resp.leader_id >= 0 and resp.leader_endpoints:
            e = resp.leader_endpoints[0]
            endpoints = [F.NodeEndpoint(node_id=resp.leader_id, host=e.host, port=e.port)]
        return F(
            responses=[F.FetchableTopicResponse(
                topic=METADATA_TOPIC if version <= 12 else "",
                topic_id=Uuid.METADATA_TOPIC_ID if version >= 13 else Uuid.ZERO,
                partitions=[part])],
            node_endpoints=endpoints,
        )
    if isinstance(resp, m.FetchSnapshotResponse):
        S = w.FetchSnapshotResponseData
        part_s = S.PartitionSnapshot(
            index=0, error_code=int(resp.error_code),
            snapshot_id=S.SnapshotId(resp.snapshot_id.offset, resp.snapshot_id.epoch),
            current_leader=S.LeaderIdAndEpoch(resp.leader_id, resp.leader_epoch),
            size=resp.size, position=resp.position,
            unaligned_records=attached,
        )
        return S(
            topics=[S.TopicSnapshot(METADATA_TOPIC, [part_s])],
            node_endpoints=_node_endpoints(S.NodeEndpoint, resp.leader_id, resp.leader_endpoints)
            if version >= 1 else [],
        )
    if isinstance(resp, m.DescribeQuorumResponse):
        D = w.DescribeQuorumResponseData

        d1, d2 = version >= 1, version >= 2

        def row(r: m.ReplicaDescription) -> Any:
            return D.ReplicaState(
                r.replica_id, _wire_dir(r.replica_directory_id) if d2 else Uuid.ZERO,
                r.log_end_offset, r.last_fetch_timestamp if d1 else -1,
                r.last_caught_up_timestamp if d1 else -1)

        return D(
            error_code=0,
            error_message=None if d2 else "",
            topics=[D.TopicData(METADATA_TOPIC, [D.PartitionData(
                partition_index=0, error_code=int(resp.error_code),
                error_message=resp.error_message if d2 else "", leader_id=resp.leader_id,
                leader_epoch=resp.leader_epoch, high_watermark=resp.high_watermark,
                current_voters=[row(r) for r in resp.current_voters],
                observers=[row(r) for r in resp.observers])])],
            nodes=[D.Node(node_id, [D.Listener(e.name, e.host, e.port) for e in eps])
                   for node_id, eps in resp.nodes] if d2 else [],
        )
    if isinstance(resp, m.VoterChangeResponse):
        # the same shape serves AddRaftVoter and RemoveRaftVoter; the caller picks the class
        return w.AddRaftVoterResponseData(error_code=int(resp.error_code),
                                          error_message=resp.error_message)
    if isinstance(resp, m.UpdateRaftVoterResponse):
        U = w.UpdateRaftVoterResponseData
        return U(error_code=int(resp.error_code),
                 current_leader=U.CurrentLeader(resp.leader_id, resp.leader_epoch))
    if isinstance(resp, m.ControllerRegistrationResponse):
        return w.ControllerRegistrationResponseData(error_code=int(resp.error_code),
                                                    error_message=resp.error_message)
    if isinstance(resp, m.UpdateKRaftVersionResponse):
        # the node answers with the request's own features (`Peers._update_features`)
        code, message = core_answer(resp.error_code, resp.error_message)
        return update_features_response(version, code, message, ("kraft.version",))
    raise TypeError(f"no wire form for {type(resp).__name__}")


def remove_voter_response(resp: m.VoterChangeResponse) -> w.RemoveRaftVoterResponseData:
    """The RemoveRaftVoter wire body of a core voter-change response."""
    return w.RemoveRaftVoterResponseData(error_code=int(resp.error_code),
                                         error_message=resp.error_message)


# ---------------------------------------------------------------- requests: core → wire


def request_to_wire(req: m.Request, cluster_id: str, version: int) -> object:
    """Translate an outbound core request to its wire body for `version` (fields that the
    version lacks keep their defaults, as the codec requires)."""
    if isinstance(req, m.VoteRequest):
        V = w.VoteRequestData
        v1 = version >= 1
        return V(
            cluster_id=cluster_id, voter_id=req.voter_id if v1 else -1,
            topics=[V.TopicData(METADATA_TOPIC, [V.PartitionData(
                partition_index=0, replica_epoch=req.replica_epoch, replica_id=req.replica_id,
                replica_directory_id=_wire_dir(req.replica_directory_id) if v1 else Uuid.ZERO,
                voter_directory_id=_wire_dir(req.voter_directory_id) if v1 else Uuid.ZERO,
                last_offset_epoch=req.last_offset_epoch, last_offset=req.last_offset,
                pre_vote=req.pre_vote)])],
        )
    if isinstance(req, m.BeginQuorumEpochRequest):
        B = w.BeginQuorumEpochRequestData
        b1 = version >= 1
        return B(
            cluster_id=cluster_id, voter_id=req.voter_id if b1 else -1,
            topics=[B.TopicData(METADATA_TOPIC, [B.PartitionData(
                0, _wire_dir(req.voter_directory_id) if b1 else Uuid.ZERO, req.leader_id,
                req.leader_epoch)])],
            leader_endpoints=[B.LeaderEndpoint(e.name, e.host, e.port)
                              for e in req.leader_endpoints] if b1 else [],
        )
    if isinstance(req, m.EndQuorumEpochRequest):
        E = w.EndQuorumEpochRequestData
        return E(
            cluster_id=cluster_id,
            topics=[E.TopicData(METADATA_TOPIC, [E.PartitionData(
                partition_index=0, leader_id=req.leader_id, leader_epoch=req.leader_epoch,
                preferred_successors=[k.id for k in req.preferred_candidates]
                if version == 0 else [],
                preferred_candidates=[E.ReplicaInfo(k.id, _wire_dir(k.directory_id))
                                      for k in req.preferred_candidates] if version >= 1 else [])])],
            leader_endpoints=[E.LeaderEndpoint(e.name, e.host, e.port)
                              for e in req.leader_endpoints] if version >= 1 else [],
        )
    if isinstance(req, m.FetchRequest):
        F = w.FetchRequestData
        hw = FETCH_HW_NOT_PROVIDED
        if version >= 18 and req.high_watermark is not None:
            hw = req.high_watermark
        return F(
            cluster_id=cluster_id if version >= 12 else None,
            replica_id=req.replica_id if version <= 14 else -1,
            replica_state=F.ReplicaState(replica_id=req.replica_id) if version >= 15
            else F.ReplicaState(),
            max_wait_ms=req.max_wait_ms, max_bytes=req.max_bytes,
            topics=[F.FetchTopic(
                topic=METADATA_TOPIC if version <= 12 else "",
                topic_id=Uuid.METADATA_TOPIC_ID if version >= 13 else Uuid.ZERO,
                partitions=[F.FetchPartition(
                    partition=0, current_leader_epoch=req.current_leader_epoch,
                    fetch_offset=req.fetch_offset,
                    last_fetched_epoch=req.last_fetched_epoch if version >= 12 else -1,
                    replica_directory_id=_wire_dir(req.replica_directory_id)
                    if version >= 17 else Uuid.ZERO,
                    high_watermark=hw)])],
        )
    if isinstance(req, m.FetchSnapshotRequest):
        S = w.FetchSnapshotRequestData
        return S(
            cluster_id=cluster_id, replica_id=req.replica_id, max_bytes=req.max_bytes,
            topics=[S.TopicSnapshot(METADATA_TOPIC, [S.PartitionSnapshot(
                partition=0, current_leader_epoch=req.current_leader_epoch,
                snapshot_id=S.SnapshotId(req.snapshot_id.offset, req.snapshot_id.epoch),
                position=req.position,
                replica_directory_id=_wire_dir(req.replica_directory_id)
                if version >= 1 else Uuid.ZERO)])],
        )
    if isinstance(req, m.DescribeQuorumRequest):
        D = w.DescribeQuorumRequestData
        return D(topics=[D.TopicData(METADATA_TOPIC, [D.PartitionData(0)])])
    if isinstance(req, m.AddRaftVoterRequest):
        A = w.AddRaftVoterRequestData
        return A(cluster_id=cluster_id, timeout_ms=req.timeout_ms, voter_id=req.voter_id,
                 voter_directory_id=_wire_dir(req.voter_directory_id),
                 listeners=[A.Listener(e.name, e.host, e.port) for e in req.listeners])
    if isinstance(req, m.RemoveRaftVoterRequest):
        return w.RemoveRaftVoterRequestData(cluster_id=cluster_id, voter_id=req.voter_id,
                                            voter_directory_id=_wire_dir(req.voter_directory_id))
    if isinstance(req, m.UpdateRaftVoterRequest):
        U = w.UpdateRaftVoterRequestData
        return U(
            cluster_id=cluster_id, current_leader_epoch=req.current_leader_epoch,
            voter_id=req.voter_id, voter_directory_id=_wire_dir(req.voter_directory_id),
            listeners=[U.Listener(e.name, e.host, e.port) for e in req.listeners],
            kraft_version_feature=U.KRaftVersionFeature(req.kraft_version_feature.min_supported,
                                                        req.kraft_version_feature.max_supported),
        )
    if isinstance(req, m.ControllerRegistrationRequest):
        C = w.ControllerRegistrationRequestData
        rng = req.kraft_version_feature
        return C(
            controller_id=req.controller_id, incarnation_id=_wire_dir(req.incarnation_id),
            zk_migration_ready=False,
            listeners=[C.Listener(e.name, e.host, e.port, 0) for e in req.listeners],
            features=[C.Feature("kraft.version", rng.min_supported, rng.max_supported)],
        )
    raise TypeError(f"no wire form for {type(req).__name__}")


# ---------------------------------------------------------------- responses: wire → core


def parse_fetched_batches(records: bytes | memoryview | None) -> tuple[m.FetchedBatch, ...]:
    """Batches of a Fetch response, with control records decoded; a cut-off tail is dropped.

    Raises ProtocolError naming what is wrong for a batch this follower must not append: a
    bad header or CRC, one above MAX_BATCH_BYTES (the most any log of ours takes), one that
    does not follow the batch before it, one whose epoch is below the batch before it, or a
    control batch that does not decode. The fetch is then failed and retried rather than
    appended. (An epoch above the answer's leader epoch is refused when the answer arrives:
    `kraft.server.peers`.)
    """
    if not records:
        return ()
    out: list[m.FetchedBatch] = []
    buf = bytes(records)
    pos = 0
    while pos < len(buf):
        try:
            batch = RecordBatch.parse(buf, pos)
        except ProtocolError:
            if out or pos > 0:
                break  # a partial batch at the end of a size-limited read
            raise
        if batch.size_in_bytes > MAX_BATCH_BYTES:
            raise ProtocolError(
                f"fetched batch at offset {batch.base_offset} is {batch.size_in_bytes} bytes, "
                f"above the {MAX_BATCH_BYTES}-byte batch limit")
        if not batch.is_valid():
            raise ProtocolError(f"fetched batch at offset {batch.base_offset} fails its CRC")
        epoch = batch.partition_leader_epoch
        if out:
            before = out[-1]
            if batch.base_offset != before.last_offset + 1:
                raise ProtocolError(f"fetched batch at offset {batch.base_offset} does not "
                                    f"follow the batch ending at {before.last_offset}")
            if epoch < before.epoch:
                raise ProtocolError(f"fetched batch at offset {batch.base_offset} has epoch "
                                    f"{epoch}, below the {before.epoch} of the batch before")
        try:
            control = tuple(decode_control_batch(batch)) if batch.is_control else ()
        except (ValueError, IndexError, struct.error) as exc:
            raise ProtocolError(f"fetched control batch at offset {batch.base_offset} does "
                                f"not decode: {exc}") from None
        out.append(m.FetchedBatch(
            base_offset=batch.base_offset, last_offset=batch.last_offset,
            epoch=epoch, is_control=batch.is_control,
            control_records=control, payload=bytes(batch.raw),
        ))
        pos += batch.size_in_bytes
    return tuple(out)


def _leader_endpoints(node_endpoints: list[Any], leader_id: int, listener: str) -> tuple[m.Endpoint, ...]:
    return tuple(m.Endpoint(listener, e.host, e.port) for e in node_endpoints
                 if e.node_id == leader_id)


def response_to_core(data: object, listener: str) -> m.Response:
    """Translate an inbound wire response into a core response.

    A top-level error (e.g. INCONSISTENT_CLUSTER_ID) becomes the partition error, with no
    leader information.
    """
    if isinstance(data, w.VoteResponseData):
        if data.error_code or not data.topics:
            return m.VoteResponse(_code(data.error_code or -1), -1, -1, False)
        p = data.topics[0].partitions[0]
        return m.VoteResponse(_code(p.error_code), p.leader_id, p.leader_epoch,
                              p.vote_granted,
                              _leader_endpoints(data.node_endpoints, p.leader_id, listener))
    if isinstance(data, w.BeginQuorumEpochResponseData):
        if data.error_code or not data.topics:
            return m.BeginQuorumEpochResponse(_code(data.error_code or -1), -1, -1)
        bp = data.topics[0].partitions[0]
        return m.BeginQuorumEpochResponse(_code(bp.error_code), bp.leader_id, bp.leader_epoch)
    if isinstance(data, w.EndQuorumEpochResponseData):
        if data.error_code or not data.topics:
            return m.EndQuorumEpochResponse(_code(data.error_code or -1), -1, -1)
        ep = data.topics[0].partitions[0]
        return m.EndQuorumEpochResponse(_code(ep.error_code), ep.leader_id, ep.leader_epoch)
    if isinstance(data, w.FetchResponseData):
        if data.error_code or not data.responses or not data.responses[0].partitions:
            return m.FetchResponse(_code(data.error_code or -1), -1, -1, -1, -1)
        fp = data.responses[0].partitions[0]
        div = fp.diverging_epoch
        snap = fp.snapshot_id
        leader = fp.current_leader
        return m.FetchResponse(
            error_code=_code(fp.error_code),
            leader_id=leader.leader_id, leader_epoch=leader.leader_epoch,
            high_watermark=fp.high_watermark, log_start_offset=fp.log_start_offset,
            diverging_epoch=m.OffsetAndEpoch(div.epoch, div.end_offset)
            if div.epoch >= 0 and div.end_offset >= 0 else None,
            snapshot_id=m.OffsetAndEpoch(snap.epoch, snap.end_offset)
            if snap.epoch >= 0 and snap.end_offset >= 0 else None,
            leader_endpoints=_leader_endpoints(data.node_endpoints, leader.leader_id, listener),
            batches=parse_fetched_batches(fp.records) if fp.error_code == 0 else (),
        )
    if isinstance(data, w.FetchSnapshotResponseData):
        if data.error_code or not data.topics or not data.topics[0].partitions:
            return m.FetchSnapshotResponse(_code(data.error_code or -1), -1, -1,
                                           m.OffsetAndEpoch(-1, -1))
        sp = data.topics[0].partitions[0]
        return m.FetchSnapshotResponse(
            error_code=_code(sp.error_code),
            leader_id=sp.current_leader.leader_id, leader_epoch=sp.current_leader.leader_epoch,
            snapshot_id=m.OffsetAndEpoch(sp.snapshot_id.epoch, sp.snapshot_id.end_offset),
            size=sp.size, position=sp.position, unaligned_records=bytes(sp.unaligned_records),
            leader_endpoints=_leader_endpoints(data.node_endpoints, sp.current_leader.leader_id,
                                               listener),
        )
    if isinstance(data, w.DescribeQuorumResponseData):
        if data.error_code or not data.topics or not data.topics[0].partitions:
            return m.DescribeQuorumResponse(_code(data.error_code or -1), -1, -1, -1,
                                            error_message=data.error_message)
        dp = data.topics[0].partitions[0]

        def row(r: Any) -> m.ReplicaDescription:
            return m.ReplicaDescription(r.replica_id, _dir(r.replica_directory_id),
                                        r.log_end_offset, r.last_fetch_timestamp,
                                        r.last_caught_up_timestamp)

        return m.DescribeQuorumResponse(
            error_code=_code(dp.error_code),
            leader_id=dp.leader_id, leader_epoch=dp.leader_epoch,
            high_watermark=dp.high_watermark,
            current_voters=tuple(row(r) for r in dp.current_voters),
            observers=tuple(row(r) for r in dp.observers),
            nodes=tuple((n.node_id, tuple(m.Endpoint(x.name, x.host, x.port) for x in n.listeners))
                        for n in data.nodes),
            error_message=dp.error_message,
        )
    if isinstance(data, (w.AddRaftVoterResponseData, w.RemoveRaftVoterResponseData)):
        return m.VoterChangeResponse(_code(data.error_code), data.error_message)
    if isinstance(data, w.UpdateRaftVoterResponseData):
        return m.UpdateRaftVoterResponse(_code(data.error_code),
                                         data.current_leader.leader_id,
                                         data.current_leader.leader_epoch)
    if isinstance(data, w.ControllerRegistrationResponseData):
        return m.ControllerRegistrationResponse(_code(data.error_code), data.error_message)
    raise TypeError(f"no core form for {type(data).__name__}")
