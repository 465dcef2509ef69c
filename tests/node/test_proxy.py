"""The fault-injecting TCP proxy forwards bytes and injects delay, one-way loss and resets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.support.proxy import BACKWARD, FORWARD, FaultProxy, ProxyThread


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(4096):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    p = FaultProxy("127.0.0.1", port)
    await p.start()
    yield p
    await p.stop()
    server.close()


async def _roundtrip(p: FaultProxy, payload: bytes, timeout: float = 2.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", p.listen_port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), timeout)
    finally:
        writer.close()


async def test_forwards_bytes_both_ways(proxy: FaultProxy) -> None:
    assert await _roundtrip(proxy, b"hello" * 1000) == b"hello" * 1000


async def test_delay_postpones_delivery_without_reordering(proxy: FaultProxy) -> None:
    proxy.delay(0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await _roundtrip(proxy, b"abc") == b"abc"
    # two delayed hops (forward and backward)
    assert loop.time() - started >= 0.4


@pytest.mark.parametrize("direction", [FORWARD, BACKWARD])
async def test_one_way_blackhole_loses_the_reply(proxy: FaultProxy, direction: str) -> None:
    proxy.blackhole(direction)
    with pytest.raises(asyncio.TimeoutError):
        await _roundtrip(proxy, b"x", timeout=0.3)
    proxy.heal()
    assert await _roundtrip(proxy, b"y") == b"y"


async def test_partition_then_heal(proxy: FaultProxy) -> None:
    proxy.partition()
    with pytest.raises(asyncio.TimeoutError):
        await _roundtrip(proxy, b"x", timeout=0.3)
    proxy.heal()
    assert await _roundtrip(proxy, b"ok") == b"ok"


async def test_sever_and_drop_close_connections(proxy: FaultProxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.listen_port)
    writer.write(b"1")
    assert await reader.readexactly(1) == b"1"
    proxy.sever()
    assert await asyncio.wait_for(reader.read(), 2) == b""
    proxy.drop_connections(1.0)
    with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
        await _roundtrip(proxy, b"z")


def test_proxy_thread_serves_synchronous_callers() -> None:
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    threads = ProxyThread()
    try:
        p = threads.add("127.0.0.1", srv.getsockname()[1])
        c = socket.create_connection(("127.0.0.1", p.listen_port), timeout=5)
        conn, _ = srv.accept()
        c.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        threads.do(p.blackhole, FORWARD)
        c.sendall(b"lost")
        conn.settimeout(0.3)
        with pytest.raises(TimeoutError):
            conn.recv(4)
        c.close()
        conn.close()
    finally:
        threads.close()
        srv.close()
