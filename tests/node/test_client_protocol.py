"""The binary pipelined KV client protocol (`kraft.server.client_protocol`) and its asyncio
client (`kraft.admin.kv_client`) against real `kraft run` processes."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable

import pytest

from kraft.admin.kv_client import KvClient, KvClusterClient, NotLeader, OutcomeUnknown
from kraft.cli.local import LocalCluster
from kraft.protocol.kv_wire import (
    ERROR,
    NOT_FOUND,
    NOT_LEADER,
    OK,
    OP_DELETE,
    OP_GET,
    OP_GET_STALE,
    OP_PUT,
    RESPONSE_HEAD,
    encode_request,
    encode_response,
)
from kraft.server.client_protocol import MAX_FRAME


def test_frames_have_the_documented_layout() -> None:
    frame = encode_request(7, 1, "k", b"vv")
    assert frame == b"\x00\x00\x00\x0a" + b"\x00\x00\x00\x07\x01\x00\x01" + b"k" + b"vv"
    answer = encode_response(7, 0, offset=5, leader_id=2, payload=b"x")
    assert len(answer) == 4 + int.from_bytes(answer[:4], "big")
    assert answer[4:8] == b"\x00\x00\x00\x07" and answer[-1:] == b"x"


def test_the_client_writes_exactly_the_documented_frames() -> None:
    """`KvClient.send` packs its frames inline (per write, no call to `encode_request`):
    the bytes it writes are `encode_request`'s, ids counting from 1."""

    class Transport:
        def __init__(self) -> None:
            self.written: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.written.append(data)

    async def scenario() -> None:
        client = KvClient("127.0.0.1", 1)
        transport = Transport()
        client._loop = asyncio.get_running_loop()
        client._transport = transport  # type: ignore[assignment]
        requests = [(OP_PUT, "k", b"vv"), (OP_GET, "ключ", b""), (OP_DELETE, "", b""),
                    (OP_PUT, "x" * 300, b"\x00" * 70000)]
        for op, key, value in requests:
            client.send(op, key, value, lambda *_: None)
        await asyncio.sleep(0)  # the flush runs on the next loop turn
        assert transport.written == [b"".join(
            encode_request(rid, op, key, value) for rid, (op, key, value) in enumerate(requests, 1))]

    asyncio.run(scenario())


def _ready_quorum(clusters: Callable[..., LocalCluster],
                  **properties: str) -> tuple[LocalCluster, int, int]:
    """A started 3-voter quorum with every node ready: (cluster, leader id, a follower id)."""
    cluster = clusters(3, properties=properties)
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    for nid in cluster.nodes:
        cluster.wait_ready(nid, 60)
    return cluster, leader, next(n for n in cluster.nodes if n != leader)


def test_sequential_writes_reach_every_follower_with_the_high_watermark_held(
        clusters: Callable[..., LocalCluster]) -> None:
    """One write at a time streams (with the opt-in kraft.fetch.hw.linger.ms=2): each commit's
    high watermark rides on the next write's records, and the last one goes alone when the
    linger runs out. Every follower applies every write, the last included, with no write
    after it."""
    cluster, leader, _ = _ready_quorum(clusters, **{"kraft.fetch.hw.linger.ms": "2"})
    followers = [n for n in cluster.nodes if n != leader]

    async def scenario() -> None:
        async with KvClient(*cluster.nodes[leader].client) as c:
            for i in range(300):
                await c.put(f"s{i}", b"%d" % i)
        for nid in followers:
            async with KvClient(*cluster.nodes[nid].client) as f:
                deadline = time.monotonic() + 30
                while await f.get("s299", stale=True) is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                got = [await f.get(f"s{i}", stale=True) for i in range(300)]
                assert got == [b"%d" % i for i in range(300)], nid

    asyncio.run(scenario())


def test_pipelined_writes_reads_and_redirects(clusters: Callable[..., LocalCluster]) -> None:
    cluster, leader, follower = _ready_quorum(clusters)

    async def scenario() -> None:
        async with KvClient(*cluster.nodes[leader].client) as c:
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
        async with KvClient(*cluster.nodes[follower].client) as f:
            with pytest.raises(NotLeader) as info:
                await f.put("x", b"y")
            assert info.value.leader_id == leader
            deadline = time.monotonic() + 30
            while await f.get("k499", stale=True) != b"499" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await f.get("k499", stale=True) == b"499"
        q = KvClusterClient({n: cluster.nodes[n].client for n in sorted(cluster.nodes)})
        q.leader_id = follower
        try:
            await q.put("via-redirect", b"ok")
            assert q.leader_id == leader
        finally:
            await q.close()
        async with KvClient(*cluster.nodes[leader].client) as c:
            assert await c.get("via-redirect") == b"ok"

    asyncio.run(scenario())
    assert cluster.get("k7").status == 200


def _answers(sock: socket.socket, count: int) -> list[tuple[int, int, int, int, bytes]]:
    """Read `count` answer frames: (id, status, offset, leader, payload)."""
    buf = b""
    out = []
    while len(out) < count:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        buf += chunk
        while len(buf) >= RESPONSE_HEAD.size:
            length, rid, status, offset, leader = RESPONSE_HEAD.unpack_from(buf)
            if len(buf) < 4 + length:
                break
            out.append((rid, status, offset, leader, buf[RESPONSE_HEAD.size:4 + length]))
            buf = buf[4 + length:]
    return out


def test_bad_frames_get_error_answers_and_split_frames_still_work(
        clusters: Callable[..., LocalCluster]) -> None:
    cluster = clusters(1)
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    cluster.wait_ready(leader, 60)
    host, port = cluster.nodes[leader].client
    with socket.create_connection((host, port), timeout=30) as sock:
        bad_utf8 = struct.pack(">IBH", 1, OP_PUT, 2) + b"\xff\xfe" + b"v"
        sock.sendall(struct.pack(">I", len(bad_utf8)) + bad_utf8)
        overrun = struct.pack(">IBH", 2, OP_PUT, 50) + b"short"
        sock.sendall(struct.pack(">I", len(overrun)) + overrun)
        good = encode_request(3, OP_PUT, "split-key", b"split-value")
        for i in range(len(good)):  # one byte per TCP segment: frames cross reads
            sock.sendall(good[i:i + 1])
            time.sleep(0.001)
        got = {rid: (status, payload) for rid, status, _, _, payload in _answers(sock, 3)}
        assert got[1] == (ERROR, b"key is not UTF-8")
        assert got[2] == (ERROR, b"key overruns the frame")
        assert got[3][0] == OK
        sock.sendall(encode_request(4, OP_GET, "split-key") + encode_request(5, 9, "x"))
        got = {rid: (status, payload) for rid, status, _, _, payload in _answers(sock, 2)}
        assert got[4] == (OK, b"split-value")
        assert got[5] == (ERROR, b"unknown op 9")
    with socket.create_connection((host, port), timeout=30) as sock:
        # a length too short for any request head, arriving with fewer bytes than a head:
        # refused at once (the node closes the connection), not waited on for more bytes
        sock.sendall(struct.pack(">I", 2) + b"ab")
        assert sock.recv(64) == b""


def test_callback_api_answers_every_write_and_names_the_leader(
        clusters: Callable[..., LocalCluster]) -> None:
    cluster, leader, follower = _ready_quorum(clusters)

    async def scenario() -> None:
        answers: list[tuple[int, int, bytes]] = []
        done = asyncio.get_running_loop().create_future()

        def on_answer(status: int, offset: int, payload: bytes) -> None:
            answers.append((status, offset, payload))
            if len(answers) == 300 and not done.done():
                done.set_result(None)

        async with KvClient(*cluster.nodes[leader].client) as c:
            for i in range(300):
                c.send(OP_PUT, f"cb{i}", str(i).encode(), on_answer)
            await asyncio.wait_for(done, 30)
            assert all(status == OK for status, _, _ in answers)
            assert len({offset for _, offset, _ in answers}) == 300
            assert await c.get("cb299") == b"299"
        got: asyncio.Future[tuple[int, int, bytes]] = asyncio.get_running_loop().create_future()
        async with KvClient(*cluster.nodes[follower].client) as f:
            f.send(OP_PUT, "x", b"y", lambda *a: got.set_result(a))
            status, leader_id, _ = await asyncio.wait_for(got, 30)
            assert (status, leader_id) == (NOT_LEADER, leader)

    asyncio.run(scenario())


def test_a_leader_cut_off_from_its_followers_does_not_send_clients_back_to_itself(
    clusters: Callable[..., LocalCluster],
) -> None:
    """Both followers paused (SIGSTOP): the leader resigns on check-quorum and waits for a
    successor. Its NOT_LEADER answers then name no leader (-1), not itself: a client that
    followed them would loop on this node until a timeout."""
    import os
    import signal

    cluster, leader, _ = _ready_quorum(clusters)
    followers = [n for n in cluster.nodes if n != leader]
    pids = [cluster.nodes[n].process.pid for n in followers]  # type: ignore[union-attr]

    async def scenario() -> int:
        async with KvClient(*cluster.nodes[leader].client) as c:
            await c.put("before", b"1")
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        await asyncio.wait_for(c.put("during", b"2"), 1.0)
                    except NotLeader as exc:
                        return exc.leader_id
                    except (TimeoutError, OutcomeUnknown):
                        continue  # still leading, or the write in flight when it resigned
                raise AssertionError("the isolated leader kept answering as the leader")
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)

    assert asyncio.run(scenario()) == -1
    assert cluster.wait_for_leader(60) >= 0


def _raw_frame(request_id: int, op: int, key: bytes, value: bytes = b"") -> bytes:
    """`encode_request` for any key bytes (also ones that are not UTF-8)."""
    return struct.pack(">IIBH", 7 + len(key) + len(value), request_id, op, len(key)) + key + value


async def _read_answers(reader: asyncio.StreamReader, count: int) -> dict[int, tuple[int, int, int]]:
    """request id -> (status, offset, leader id) of the next `count` answers."""
    got: dict[int, tuple[int, int, int]] = {}
    for _ in range(count):
        head = await asyncio.wait_for(reader.readexactly(RESPONSE_HEAD.size), 30)
        length, rid, status, offset, leader_id = RESPONSE_HEAD.unpack(head)
        await reader.readexactly(length - (RESPONSE_HEAD.size - 4))
        assert rid not in got, f"request {rid} answered twice"
        got[rid] = (status, offset, leader_id)
    return got


def test_the_writes_of_one_chunk_are_taken_together_in_order(
    clusters: Callable[..., LocalCluster],
) -> None:
    """Frames arriving in one chunk: the writes among them reach the log in frame order, a
    follower refuses each of them (and still answers the reads among them), a bad key fails
    alone, and the whole frames before a bad frame length are taken before the connection
    closes."""
    cluster, leader, follower = _ready_quorum(clusters)

    async def scenario() -> None:
        host, port = cluster.nodes[leader].client
        r, w = await asyncio.open_connection(host, port)
        chunk = b"".join([
            *(_raw_frame(i, OP_PUT, f"chunk{i}".encode(), b"v%d" % i) for i in range(1, 21)),
            _raw_frame(21, OP_PUT, b"\xff\xfe", b"bad key"),
            _raw_frame(22, OP_DELETE, b"chunk3"),
            _raw_frame(23, OP_GET_STALE, b"never-written"),
            _raw_frame(24, OP_PUT, b"chunk3", b"again"),
        ])
        w.write(chunk)
        got = await _read_answers(r, 24)
        assert got[21][0] == ERROR and got[23][0] == NOT_FOUND
        writes = [*range(1, 21), 22, 24]
        assert all(got[i][0] == OK for i in writes)
        offsets = [got[i][1] for i in writes]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(writes)
        w.close()

        fhost, fport = cluster.nodes[follower].client
        r, w = await asyncio.open_connection(fhost, fport)
        w.write(_raw_frame(1, OP_PUT, b"f1", b"x") + _raw_frame(2, OP_GET_STALE, b"chunk3")
                + _raw_frame(3, OP_DELETE, b"chunk1") + _raw_frame(4, OP_PUT, b"f2", b"y"))
        got = await _read_answers(r, 4)
        assert {i: got[i][0] for i in (1, 3, 4)} == {1: NOT_LEADER, 3: NOT_LEADER, 4: NOT_LEADER}
        assert {got[i][2] for i in (1, 3, 4)} == {leader}
        assert got[2][0] in (OK, NOT_FOUND)  # a stale read, answered by the follower itself
        w.close()

        r, w = await asyncio.open_connection(host, port)
        w.write(_raw_frame(1, OP_PUT, b"before-bad", b"kept") + _raw_frame(2, OP_PUT, b"b2", b"k")
                + struct.pack(">I", MAX_FRAME + 1) + b"\x00" * 16)
        assert await asyncio.wait_for(r.read(), 30) is not None  # the node closes it
        w.close()
        async with KvClient(host, port) as c:
            deadline = time.monotonic() + 30
            while await c.get("b2") != b"k" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await c.get("before-bad") == b"kept" and await c.get("b2") == b"k"
            assert await c.get("chunk3") == b"again" and await c.get("chunk1") == b"v1"

    asyncio.run(scenario())
