"""The binary pipelined KV client protocol (`kraft.server.client_protocol`) and its asyncio
client (`kraft.server.client`) against real `kraft run` processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from kraft.server.client import KraftClient, NotLeader, QuorumClient
from kraft.server.client_protocol import encode_request, encode_response
from kraft.server.local import LocalCluster


def test_frames_have_the_documented_layout() -> None:
    frame = encode_request(7, 1, "k", b"vv")
    assert frame == b"\x00\x00\x00\x0a" + b"\x00\x00\x00\x07\x01\x00\x01" + b"k" + b"vv"
    answer = encode_response(7, 0, offset=5, leader_id=2, payload=b"x")
    assert len(answer) == 4 + int.from_bytes(answer[:4], "big")
    assert answer[4:8] == b"\x00\x00\x00\x07" and answer[-1:] == b"x"


def test_pipelined_writes_reads_and_redirects(clusters: Callable[..., LocalCluster]) -> None:
    cluster = clusters(3)
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    for nid in cluster.nodes:
        cluster.wait_ready(nid, 60)
    follower = next(n for n in cluster.nodes if n != leader)

    async def scenario() -> None:
        async with KraftClient(*cluster.nodes[leader].client) as c:
            first = await c.put("a", b"1")
            offsets = await c.put_many([(f"k{i}", str(i).encode()) for i in range(500)])
            assert offsets == sorted(offsets) and len(set(offsets)) == 500
            assert offsets[0] > first
            many = await asyncio.gather(*(c.put(f"p{i}", b"x") for i in range(200)))
            assert len(set(many)) == 200
            assert await c.get("k42") == b"42"
            assert await c.get("missing") is None
            assert await c.delete("a") is True
            assert await c.delete("a") is False
            assert await c.get("a") is None
        async with KraftClient(*cluster.nodes[follower].client) as f:
            with pytest.raises(NotLeader) as info:
                await f.put("x", b"y")
            assert info.value.leader_id == leader
            deadline = time.monotonic() + 30
            while await f.get("k499", stale=True) != b"499" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await f.get("k499", stale=True) == b"499"
        q = QuorumClient({n: cluster.nodes[n].client for n in sorted(cluster.nodes)})
        q.leader_id = follower
        try:
            await q.put("via-redirect", b"ok")
            assert q.leader_id == leader
        finally:
            await q.close()
        async with KraftClient(*cluster.nodes[leader].client) as c:
            assert await c.get("via-redirect") == b"ok"

    asyncio.run(scenario())
    assert cluster.get("k7").status == 200
