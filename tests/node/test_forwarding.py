"""Any node takes KV calls: a follower or an observer forwards each to the leader over the
controller listener (`kraft.server.forward`), with no `http.peers` map, and a client that
picks a node at random for every call keeps a linearizable history through kill -9 of the
leader."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time
from collections.abc import Callable

import pytest

from kraft.cli.local import LocalCluster, http_call
from kraft.protocol.errors import ErrorCode
from kraft.server.forward import (
    FORWARD_KV_API_KEY,
    BadForwardedCall,
    decode_answer,
    decode_call,
    encode_answer,
    encode_call,
    is_forward_frame,
)
from kraft.server.frames import FrameConnection
from kraft.server.kv_api import KvAnswer, KvCall, KvOp
from kraft.server.transport import unsupported_version_frame
from tests.support.kvclient import KVWorkload, http_op, new_session
from tests.support.linearizability import GET, Op, check_history, dump_history


def _without_address_map(cluster: LocalCluster) -> LocalCluster:
    """No node knows another's HTTP address: the quorum is the only source."""
    for node in cluster.nodes.values():
        node.overrides["http.peers"] = ""
    return cluster


# ---------------------------------------------------------------------- the codec


@pytest.mark.parametrize("call", [
    KvCall(KvOp.GET, "k"),
    KvCall(KvOp.PUT, "ключ", b"\x00v" * 100),
    KvCall(KvOp.DELETE, "k"),
    KvCall(KvOp.CAS, "k", None, b"old"),
    KvCall(KvOp.CAS, "k", b"", None),
])
def test_a_forwarded_call_reads_back_as_written(call: KvCall) -> None:
    frame = encode_call(7, "client", "cluster-1", call, 1500)
    assert is_forward_frame(frame)
    got = decode_call(frame)
    assert (got.correlation_id, got.version, got.cluster_id, got.call, got.timeout_ms) == (
        7, 0, "cluster-1", call, 1500)


@pytest.mark.parametrize("answer", [KvAnswer(), KvAnswer(12, True, b""),
                                    KvAnswer(-1, True, b"value")])
def test_an_answer_reads_back_as_written(answer: KvAnswer) -> None:
    got = decode_answer(encode_answer(9, ErrorCode.NONE, 2, answer=answer), 9)
    assert (got.error, got.leader_id, got.outcome_unknown, got.answer) == (0, 2, False, answer)
    refused = decode_answer(encode_answer(9, ErrorCode.REQUEST_TIMED_OUT, 3,
                                          outcome_unknown=True, message="lost"), 9)
    assert (refused.error, refused.leader_id, refused.outcome_unknown, refused.answer,
            refused.message) == (ErrorCode.REQUEST_TIMED_OUT, 3, True, None, "lost")


def test_a_leader_that_does_not_know_the_api_is_recognised() -> None:
    # what any Kafka-protocol server answers for an unknown api key (KIP-511)
    got = decode_answer(unsupported_version_frame(5), 5)
    assert got.error == ErrorCode.UNSUPPORTED_VERSION and got.answer is None


def test_bad_forwarded_calls_are_refused_with_what_is_wrong() -> None:
    good = encode_call(4, "c", "x", KvCall(KvOp.PUT, "k", b"v"), 100)
    with pytest.raises(BadForwardedCall, match="cut short") as cut:
        decode_call(good[:-3])
    assert cut.value.correlation_id == 4
    with pytest.raises(ValueError, match="bytes after the body"):
        decode_call(good + b"\x00")
    bad_op = bytearray(encode_call(4, "c", "x", KvCall(KvOp.GET, "k"), 100))
    bad_op[8 + 2 + 1 + 2 + 1] = 9  # header, client id "c", cluster id "x", then the op
    with pytest.raises(ValueError, match="unknown operation 9"):
        decode_call(bytes(bad_op))
    with pytest.raises(ValueError, match="PUT without a value"):
        decode_call(encode_call(4, "c", "x", KvCall(KvOp.PUT, "k"), 100))
    assert decode_call(good[:2] + b"\x00\x05" + good[4:]).call is None  # another version
    with pytest.raises(ValueError, match="correlation id"):
        decode_answer(encode_answer(3, ErrorCode.NONE), 4)


# ---------------------------------------------------------------------- real processes


def test_every_node_answers_every_kv_call_without_an_address_map(
        clusters: Callable[..., LocalCluster]) -> None:
    cluster = _without_address_map(clusters(3, observers=1))
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    for nid in cluster.nodes:
        cluster.wait_ready(nid, 60)
    assert cluster.status(4)["is_voter"] is False  # type: ignore[index]
    order = sorted(cluster.nodes, key=lambda n: n == leader)  # the leader last
    for nid in order:
        http = cluster.nodes[nid].http
        key = f"key-via-{nid}"
        put = http_call(http, "PUT", f"/v1/kv/{key}", b"one")
        assert put.status == 200, (nid, put.status, put.body)
        assert put.json()["offset"] >= 0
        got = http_call(http, "GET", f"/v1/kv/{key}")
        assert (got.status, got.body) == (200, b"one"), nid
        cas = http_call(http, "POST", f"/v1/kv/{key}/cas", json.dumps({
            "expected": base64.b64encode(b"one").decode(),
            "value": base64.b64encode(b"two").decode()}).encode())
        assert cas.status == 200 and cas.json() == {
            "swapped": True, "previous": base64.b64encode(b"one").decode()}, nid
        missed = http_call(http, "POST", f"/v1/kv/{key}/cas", json.dumps({
            "expected": None, "value": base64.b64encode(b"three").decode()}).encode())
        assert missed.json()["swapped"] is False, nid
        deleted = http_call(http, "DELETE", f"/v1/kv/{key}")
        assert (deleted.status, deleted.json()) == (200, {"existed": True}), nid
        assert http_call(http, "GET", f"/v1/kv/{key}").status == 404, nid
        # what a follower acknowledged is the leader's
        assert http_call(cluster.nodes[leader].http, "GET", f"/v1/kv/{key}").status == 404


async def _forward_raw(host: str, port: int, frame: bytes) -> bytes:
    conn = FrameConnection(host, port)
    await conn.open(5)
    try:
        return await conn.request(frame, 20)
    finally:
        conn.close()


async def test_a_forwarded_call_runs_only_at_the_leader(
        clusters: Callable[..., LocalCluster]) -> None:
    cluster = clusters(3)
    await asyncio.to_thread(cluster.start_all)
    leader = await asyncio.to_thread(cluster.wait_for_leader, 60)
    follower = next(n for n in cluster.nodes if n != leader)
    for nid in cluster.nodes:
        await asyncio.to_thread(cluster.wait_ready, nid, 60)
    put = KvCall(KvOp.PUT, "raw", b"v")
    f, lead = cluster.nodes[follower], cluster.nodes[leader]
    # a follower never forwards a forwarded call again: it names the leader instead
    raw = await _forward_raw(f.host, f.port, encode_call(1, "t", cluster.cluster_id, put, 5000))
    got = decode_answer(raw, 1)
    assert (got.error, got.leader_id) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, leader)
    assert http_call(lead.http, "GET", "/v1/kv/raw").status == 404
    raw = await _forward_raw(lead.host, lead.port, encode_call(2, "t", "another", put, 5000))
    assert decode_answer(raw, 2).error == ErrorCode.INCONSISTENT_CLUSTER_ID
    raw = await _forward_raw(lead.host, lead.port,
                             encode_call(3, "t", cluster.cluster_id, put, 5000))
    done = decode_answer(raw, 3)
    assert done.error == ErrorCode.NONE and done.answer is not None and done.answer.offset > 0
    assert http_call(lead.http, "GET", "/v1/kv/raw").body == b"v"
    # the api is the project's own: ApiVersions does not list it
    from kraft.protocol import messages as w
    from kraft.protocol.api import ApiKey
    from kraft.server.transport import one_shot

    _, versions = await one_shot(lead.host, lead.port, ApiKey.API_VERSIONS,
                                 w.ApiVersionsRequestData("t", "1"))
    assert FORWARD_KV_API_KEY not in {k.api_key for k in versions.api_keys}


@pytest.mark.slow
async def test_random_nodes_through_two_leader_kills_stay_linearizable(
        clusters: Callable[..., LocalCluster]) -> None:
    cluster = _without_address_map(clusters(3))
    await asyncio.to_thread(cluster.start_all)
    await asyncio.to_thread(cluster.wait_for_leader, 60)
    for nid in cluster.nodes:
        await asyncio.to_thread(cluster.wait_ready, nid, 60)
    # every call goes to a node picked at random (KVWorkload._client)
    workload = KVWorkload([n.http for n in cluster.nodes.values()], keys=4, clients=6, seed=43)
    runner = asyncio.ensure_future(workload.run())
    await asyncio.sleep(1.5)
    for _ in range(2):
        old = await asyncio.to_thread(cluster.wait_for_leader, 30)
        await asyncio.to_thread(cluster.kill, old, signal.SIGKILL)
        survivors = [n for n in cluster.nodes if n != old]
        await asyncio.to_thread(cluster.wait_for_leader, 30, old, survivors)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(cluster.start, old)
        await asyncio.to_thread(cluster.wait_ready, old, 60)
        await asyncio.sleep(1.0)
    workload.stop()
    await runner
    leader = await asyncio.to_thread(cluster.wait_for_leader, 30)
    async with new_session() as session:
        for key in workload.keys:
            call = time.monotonic()
            out = await http_op(session, cluster.nodes[leader].http, "GET", f"/v1/kv/{key}",
                                None, 10)
            assert out.status in (200, 404), out
            workload.history.record(Op(99, GET, key, call, time.monotonic(),
                                       output=out.body if out.status == 200 else None))
    # The only calls not taken are those sent to the killed node while it was down; no node
    # that was up answered "not the leader".
    refused = [(op, out) for op, out in workload.rejected if out.status != 0]
    assert not refused, refused[:5]
    assert workload.stats.ok > 0
    result = check_history(workload.history.ops)
    if not result.ok:
        dump_history(result.bad_ops, str(cluster.base / "bad-history.jsonl"))
    assert result.ok, (result.detail, str(cluster.base / "bad-history.jsonl"))
    print(f"ops ok={workload.stats.ok} unknown={workload.stats.unknown} "
          f"rejected={workload.stats.rejected} checked={result.ops_checked}")


def test_a_call_no_leader_takes_is_refused_as_never_applied(
        clusters: Callable[..., LocalCluster]) -> None:
    cluster = _without_address_map(clusters(3))
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    for nid in cluster.nodes:
        cluster.wait_ready(nid, 60)
    survivor, other = (n for n in cluster.nodes if n != leader)
    cluster.kill(leader, signal.SIGKILL)
    cluster.kill(other, signal.SIGKILL)
    # no leader can be elected: the survivor tries for the call's time, then says that
    # nothing was applied (no "outcome": "unknown")
    r = http_call(cluster.nodes[survivor].http, "PUT", "/v1/kv/never", b"v", timeout=60)
    assert r.status == 503, (r.status, r.body)
    assert r.json()["error"] == "NOT_LEADER_OR_FOLLOWER" and "outcome" not in r.json(), r.json()
    cluster.start(leader)
    cluster.start(other)
    cluster.wait_for_leader(60)
    for nid in cluster.nodes:
        cluster.wait_ready(nid, 60)
    got = http_call(cluster.nodes[survivor].http, "GET", "/v1/kv/never")
    assert got.status == 404, (got.status, got.body)
