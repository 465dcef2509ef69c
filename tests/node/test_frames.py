"""Size-prefixed framing: in-order responses, and bad input closes only the bad connection."""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kraft.server.frames import (
    ConnectionClosedError,
    DeferredReply,
    FrameConnection,
    FrameHandler,
    FrameListener,
    PeerInfo,
)


async def _handler(body: bytes, peer: PeerInfo) -> bytes | None:
    if body == b"close":
        return None
    if body == b"boom":
        raise RuntimeError("handler failure")
    if body.startswith(b"sleep"):
        # earlier requests finish later: responses must still come back in request order
        await asyncio.sleep(float(body[5:].decode()))
    return b"re:" + body


@pytest.fixture
async def listener() -> AsyncIterator[FrameListener]:
    lst = FrameListener("127.0.0.1", 0, _handler, max_frame_bytes=1 << 20,
                        partial_frame_timeout_s=0.3)
    await lst.start()
    yield lst
    await lst.stop()


async def _connect(lst: FrameListener) -> FrameConnection:
    conn = FrameConnection("127.0.0.1", lst.port)
    await conn.open(2)
    return conn


@contextlib.asynccontextmanager
async def _serving(handler: FrameHandler, **options: Any) -> AsyncIterator[FrameConnection]:
    """A listener with `handler` and one open connection to it; both closed afterwards."""
    lst = FrameListener("127.0.0.1", 0, handler, **options)
    await lst.start()
    try:
        conn = await _connect(lst)
        try:
            yield conn
        finally:
            conn.close()
    finally:
        await lst.stop()


async def test_pipelined_requests_are_answered_in_request_order(listener: FrameListener) -> None:
    conn = await _connect(listener)
    delays = [0.2, 0.0, 0.1, 0.05, 0.0]
    results = await asyncio.gather(
        *(conn.request(f"sleep{d}".encode(), 5) for d in delays)
    )
    assert results == [f"re:sleep{d}".encode() for d in delays]
    conn.close()


async def _raw_then_check(lst: FrameListener, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
    writer.write(payload)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 3)
    writer.close()
    return data


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">i", 2**31 - 1) + b"x",  # a 2 GiB length prefix
        struct.pack(">i", -5),  # negative size
        bytes(random.Random(7).randrange(256) | 0x80 for _ in range(64)),  # garbage bytes
        struct.pack(">i", 100) + b"half",  # half a frame, then silence
        b"\x00\x00",  # half a size prefix, then silence
    ],
    ids=["2GiB-prefix", "negative-size", "garbage", "half-frame", "half-prefix"],
)
async def test_bad_input_closes_that_connection_and_the_listener_keeps_serving(
    listener: FrameListener, payload: bytes
) -> None:
    healthy = await _connect(listener)
    assert await _raw_then_check(listener, payload) == b""
    assert listener.connections_closed_for_bad_input == 1
    # an existing connection and a new one both still work
    assert await healthy.request(b"a", 2) == b"re:a"
    fresh = await _connect(listener)
    assert await fresh.request(b"b", 2) == b"re:b"
    healthy.close()
    fresh.close()


async def test_undecodable_request_closes_after_earlier_responses(listener: FrameListener) -> None:
    conn = await _connect(listener)
    first = asyncio.ensure_future(conn.request(b"sleep0.1", 3))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(conn.request(b"close", 3))
    assert await first == b"re:sleep0.1"
    with pytest.raises(ConnectionClosedError):
        await second


async def test_handler_exception_closes_the_connection_only(listener: FrameListener) -> None:
    conn = await _connect(listener)
    with pytest.raises(ConnectionClosedError):
        await conn.request(b"boom", 3)
    other = await _connect(listener)
    assert await other.request(b"ok", 3) == b"re:ok"
    other.close()


async def test_client_timeout_closes_and_fails_everything_in_flight(listener: FrameListener) -> None:
    conn = await _connect(listener)
    slow = asyncio.ensure_future(conn.request(b"sleep1", 5))
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        await conn.request(b"sleep1", 0.1)
    with pytest.raises(ConnectionClosedError):
        await slow
    assert conn.closed


async def test_a_later_request_times_out_after_the_one_its_timer_was_armed_for_answered(
        listener: FrameListener) -> None:
    """A connection keeps one timer, armed for the earliest deadline in flight: when it fires
    for a request already answered, it is re-armed for the next deadline, which still ends
    the request that outlives it."""
    conn = await _connect(listener)
    assert await conn.request(b"quick", 0.2) == b"re:quick"
    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(conn.request(b"sleep3", 0.5), 2.5)
    assert asyncio.get_running_loop().time() - started >= 0.45  # not the first deadline
    assert conn.closed


async def test_immediate_and_future_answers_mix_in_request_order() -> None:
    """A handler may answer at once (bytes) or later (a plain future, no task): the order on
    the wire is still the request order."""
    later: dict[bytes, asyncio.Future[bytes | None]] = {}

    def handler(body: bytes, peer: PeerInfo) -> bytes | asyncio.Future[bytes | None] | None:
        if body.startswith(b"later"):
            fut: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
            later[body] = fut
            return fut
        return b"now:" + body

    async with _serving(handler) as conn:
        calls = [asyncio.ensure_future(conn.request(b, 5)) for b in (b"later1", b"a", b"later2", b"b")]
        while len(later) < 2:
            await asyncio.sleep(0.01)
        later[b"later2"].set_result(b"done2")  # the later one finishes first
        await asyncio.sleep(0.05)
        assert not any(c.done() for c in calls)  # all wait for the head of the line
        later[b"later1"].set_result(b"done1")
        assert await asyncio.gather(*calls) == [b"done1", b"now:a", b"done2", b"now:b"]


async def test_reading_pauses_at_max_in_flight_and_resumes() -> None:
    """Back-pressure: with `max_in_flight` answers outstanding, no further frame is handed to
    the handler until one is answered."""
    pending: list[asyncio.Future[bytes | None]] = []

    def handler(body: bytes, peer: PeerInfo) -> asyncio.Future[bytes | None]:
        fut: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        pending.append(fut)
        return fut

    async with _serving(handler, max_in_flight=4) as conn:
        calls = [asyncio.ensure_future(conn.request(str(i).encode(), 5)) for i in range(10)]
        await asyncio.sleep(0.2)
        seen = len(pending)
        assert 4 <= seen < 10  # frames already read in the same chunk may still be dispatched
        while not all(c.done() for c in calls):
            for f in pending:
                if not f.done():
                    f.set_result(b"ok")
            await asyncio.sleep(0.02)
        assert len(pending) == 10
        assert [c.result() for c in calls] == [b"ok"] * 10


async def test_a_peer_that_does_not_read_its_answers_is_not_served_further() -> None:
    """Write back-pressure: once the answers to a peer pile up unread (the transport's buffer
    is full), the listener reads and handles nothing more from it until the peer catches up,
    instead of buffering answers without bound."""
    handled = [0]
    answer = b"x" * (256 * 1024)

    def handler(body: bytes, peer: PeerInfo) -> bytes:
        handled[0] += 1
        return answer

    lst = FrameListener("127.0.0.1", 0, handler)
    await lst.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
        total = 200
        writer.write(b"".join(struct.pack(">i", 4) + b"ping" for _ in range(total)))
        await writer.drain()
        await asyncio.sleep(0.5)  # the client reads nothing meanwhile
        assert handled[0] < total // 2
        got = 0
        while got < total:
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
            assert await reader.readexactly(size) == answer
            got += 1
        assert handled[0] == total
        writer.close()
    finally:
        await lst.stop()


async def test_large_answers_arrive_whole_and_in_order_with_small_ones() -> None:
    """An answer of megabytes (a snapshot chunk) is handed over without a copy when it fills
    the read buffer; its bytes, and those of the small answers around it, are exact."""
    big = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB

    def handler(body: bytes, peer: PeerInfo) -> bytes:
        return big if body == b"big" else b"re:" + body

    async with _serving(handler) as conn:
        got: list[bytes | memoryview | BaseException] = []
        done = asyncio.get_running_loop().create_future()

        def collect(result: bytes | memoryview | BaseException) -> None:
            got.append(result)
            if len(got) == 4 and not done.done():
                done.set_result(None)

        for body in (b"big", b"a", b"big", b"b"):
            conn.send(body, 10, collect)
        await asyncio.wait_for(done, 10)
        assert [bytes(g) for g in got if not isinstance(g, BaseException)] == [
            big, b"re:a", big, b"re:b"]
        assert await conn.request(b"big", 10) == big  # the awaitable form returns bytes


async def test_answers_given_as_parts_arrive_as_one_frame_each_in_order() -> None:
    """A body of parts (`ReplyBody`: a snapshot chunk left uncopied between the encoded bytes
    around it) reaches the peer as one frame, byte for byte, in request order among answers
    given as bytes, answered at once or later."""
    chunk = bytes(range(256)) * (2 * 4096 + 3)  # ~2 MiB: written as a part of its own
    deferred: dict[bytes, DeferredReply] = {}

    def handler(body: bytes, peer: PeerInfo) -> bytes | DeferredReply:
        if body.startswith(b"later"):
            reply = deferred[body] = DeferredReply()
            return reply
        if body == b"parts":
            reply = DeferredReply()
            reply.set((b"head:", memoryview(chunk)[1:], b":tail"))
            return reply
        return b"re:" + body

    async with _serving(handler) as conn:
        calls = [asyncio.ensure_future(conn.request(b, 10))
                 for b in (b"later1", b"parts", b"a", b"later2", b"b")]
        while len(deferred) < 2:
            await asyncio.sleep(0.01)
        deferred[b"later2"].set((b"small", b" parts"))
        deferred[b"later1"].set((b"x" * 100_000, memoryview(chunk), b"y"))
        got = [bytes(g) for g in await asyncio.gather(*calls)]
        assert got == [b"x" * 100_000 + chunk + b"y", b"head:" + chunk[1:] + b":tail", b"re:a",
                       b"small parts", b"re:b"]


def test_earliest_deadline_arms_once_for_the_earliest_and_fires_on_the_loop_it_was_given() -> None:
    """One timer serves many deadlines: a later deadline does not re-arm it, an earlier one
    does, and it fires once. With its owner's loop set it can be asked from outside that
    loop's callbacks (no running loop looked up); unset, it needs a running loop."""
    from kraft.server.frames import EarliestDeadline

    loop = asyncio.new_event_loop()
    try:
        fired: list[float] = []
        timer = EarliestDeadline(lambda: fired.append(loop.time()))
        with pytest.raises(RuntimeError):
            timer.ask(loop.time() + 0.05)  # no loop given and none running
        timer.loop = loop
        now = loop.time()
        timer.ask(now + 0.2)
        assert timer.at == now + 0.2
        timer.ask(now + 0.5)  # later: the armed timer stays
        assert timer.at == now + 0.2
        timer.ask(now + 0.05)  # earlier: re-armed
        assert timer.at == now + 0.05
        loop.run_until_complete(asyncio.sleep(0.3))
        assert len(fired) == 1 and fired[0] >= now + 0.049  # the loop may run a timer 1 clock tick early
        assert timer.at == float("inf")  # fired: the next ask arms again
        timer.ask(loop.time() + 0.01)
        timer.cancel()
        loop.run_until_complete(asyncio.sleep(0.05))
        assert len(fired) == 1
    finally:
        loop.close()
