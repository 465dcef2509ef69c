"""Wire-protocol throughput: a Fetch response carrying 1 MiB of records, and small requests.

Metrics (best of several repetitions, single thread):
* `fetch_response_1MiB`: encode, decode and encode+decode MB/s of a framed Fetch v18
  response whose one partition carries 1 MiB of record bytes (records are not parsed here),
  plus kafka-python's body encode/decode of the same message for comparison.
* `vote_request_v2` / `fetch_request_v18`: messages/s to encode a framed request, to decode
  it (header + body), and for the round trip.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from kraft.protocol import messages as m
from kraft.protocol.codec import decode, encode
from kraft.protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kraft.protocol.uuid import Uuid

MIB = 1024 * 1024


def _best_seconds(fn: Callable[[], object], repeat: int = 5, number: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def _fetch_response(records: bytes) -> m.FetchResponseData:
    return m.FetchResponseData(
        responses=[m.FetchResponseData.FetchableTopicResponse(
            topic_id=Uuid.METADATA_TOPIC_ID,
            partitions=[m.FetchResponseData.PartitionData(
                partition_index=0, high_watermark=1000, log_start_offset=0,
                current_leader=m.FetchResponseData.LeaderIdAndEpoch(1, 5),
                records=records)])],
        node_endpoints=[m.FetchResponseData.NodeEndpoint(1, "localhost", 9093, None)],
    )


def _fetch_response_case() -> dict[str, float]:
    records = os.urandom(MIB)
    body = _fetch_response(records)
    frame = encode_response(1, 18, 7, body)
    payload = frame[4:]
    mb = len(frame) / 1e6

    def enc() -> None:
        encode_response(1, 18, 7, body)

    def dec() -> None:
        decode_response(1, 18, payload)

    def both() -> None:
        decode_response(1, 18, encode_response(1, 18, 7, body)[4:])

    out = {
        "encode_mb_s": mb / _best_seconds(enc, 7, 5),
        "decode_mb_s": mb / _best_seconds(dec, 7, 5),
        "encode_decode_mb_s": mb / _best_seconds(both, 7, 5),
    }
    out.update(_kafka_python_fetch(body, records, mb))
    return out


def _kafka_python_fetch(body: m.FetchResponseData, records: bytes, mb: float) -> dict[str, float]:
    try:
        import uuid as std_uuid

        from kafka.protocol.consumer.fetch import FetchResponse
    except ImportError:  # pragma: no cover - dev dependency
        return {}
    kp = FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[FetchResponse.FetchableTopicResponse(
            topic_id=std_uuid.UUID(bytes=Uuid.METADATA_TOPIC_ID.bytes),
            partitions=[FetchResponse.FetchableTopicResponse.PartitionData(
                partition_index=0, error_code=0, high_watermark=1000, last_stable_offset=-1,
                log_start_offset=0,
                current_leader=FetchResponse.FetchableTopicResponse.PartitionData.LeaderIdAndEpoch(
                    leader_id=1, leader_epoch=5),
                aborted_transactions=[], preferred_read_replica=-1, records=records)])],
        node_endpoints=[FetchResponse.NodeEndpoint(node_id=1, host="localhost", port=9093,
                                                   rack=None)],
    )
    ours = encode(body, 18)
    theirs = kp.encode(version=18)
    if ours != theirs:  # pragma: no cover - the comparison is only meaningful when equal
        return {"kafka_python_bytes_equal": 0.0}
    return {
        "kafka_python_encode_mb_s": mb / _best_seconds(lambda: kp.encode(version=18), 7, 5),
        "kafka_python_decode_mb_s": mb / _best_seconds(
            lambda: FetchResponse.decode(theirs, version=18), 7, 5),
        "kafka_python_bytes_equal": 1.0,
    }


def _small_request_case(header: RequestHeader, body: object, n: int) -> dict[str, float]:
    frame = encode_request(header, body)
    payload = frame[4:]

    def enc() -> None:
        for _ in range(n):
            encode_request(header, body)

    def dec() -> None:
        for _ in range(n):
            decode_request(payload)

    def both() -> None:
        for _ in range(n):
            decode_request(encode_request(header, body)[4:])

    return {
        "frame_bytes": float(len(frame)),
        "encode_msgs_s": n / _best_seconds(enc),
        "decode_msgs_s": n / _best_seconds(dec),
        "encode_decode_msgs_s": n / _best_seconds(both),
    }


def _vote_request() -> m.VoteRequestData:
    return m.VoteRequestData(
        cluster_id="MkU3OEVBNTcwNTJENDM2Qk", voter_id=2,
        topics=[m.VoteRequestData.TopicData("__cluster_metadata", [
            m.VoteRequestData.PartitionData(
                partition_index=0, replica_epoch=7, replica_id=1,
                replica_directory_id=Uuid.random(), voter_directory_id=Uuid.random(),
                last_offset_epoch=6, last_offset=12345, pre_vote=True)])],
    )


def _fetch_request() -> m.FetchRequestData:
    return m.FetchRequestData(
        cluster_id="MkU3OEVBNTcwNTJENDM2Qk",
        replica_state=m.FetchRequestData.ReplicaState(replica_id=2),
        max_wait_ms=500, max_bytes=8 * MIB, session_epoch=-1,
        topics=[m.FetchRequestData.FetchTopic(topic_id=Uuid.METADATA_TOPIC_ID, partitions=[
            m.FetchRequestData.FetchPartition(
                partition=0, current_leader_epoch=7, fetch_offset=12345, last_fetched_epoch=6,
                replica_directory_id=Uuid.random(), high_watermark=12000)])],
    )


def run() -> dict[str, Any]:
    """Measure and return {case: {metric: value}}."""
    vote = _vote_request()
    if decode(m.VoteRequestData, encode(vote, 2), 2) != vote:  # pragma: no cover
        raise AssertionError("Vote request does not round-trip")
    return {
        "fetch_response_1MiB": _fetch_response_case(),
        "vote_request_v2": _small_request_case(
            RequestHeader(52, 2, 1, "raft-client-1"), _vote_request(), 5000),
        "fetch_request_v18": _small_request_case(
            RequestHeader(1, 18, 1, "raft-client-1"), _fetch_request(), 5000),
    }


if __name__ == "__main__":
    for case, metrics in run().items():
        print(case)
        for name, value in metrics.items():
            print(f"  {name:30s} {value:14,.1f}")
