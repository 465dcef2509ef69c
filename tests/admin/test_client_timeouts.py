"""QuorumClient against peers that never answer: a timeout is an AdminConnectionError with
timed_out set (retriable), and the next bootstrap controller is tried."""

from __future__ import annotations

import asyncio

import pytest

from kraft.admin import AdminConnectionError, QuorumClient


async def _silent_server() -> tuple[asyncio.Server, str]:
    """Accepts connections and reads requests, never answers."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(4096):
            pass
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"127.0.0.1:{port}"


async def test_a_controller_that_never_answers_is_a_retriable_timeout() -> None:
    server, address = await _silent_server()
    try:
        async with QuorumClient([address], timeout_s=0.3) as admin:
            with pytest.raises(AdminConnectionError) as err:
                await admin.describe_quorum()
        assert err.value.timed_out and err.value.retriable
        assert err.value.name == "REQUEST_TIMED_OUT"
        assert address in err.value.message and err.value.addresses == (address,)
    finally:
        server.close()
        await server.wait_closed()


async def test_every_bootstrap_is_tried_and_named() -> None:
    server, silent = await _silent_server()
    refused_server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    refused = f"127.0.0.1:{refused_server.sockets[0].getsockname()[1]}"
    refused_server.close()
    await refused_server.wait_closed()  # nothing listens there any more
    try:
        async with QuorumClient(f"{refused},{silent}", timeout_s=0.3) as admin:
            with pytest.raises(AdminConnectionError) as err:
                await admin.describe_cluster()
        assert refused in err.value.message and silent in err.value.message
        assert err.value.timed_out  # one of them timed out: the request may have arrived
    finally:
        server.close()
        await server.wait_closed()


def test_bad_arguments_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="not HOST:PORT"):
        QuorumClient("nohost")
    with pytest.raises(ValueError, match="at least one"):
        QuorumClient([])
    admin = QuorumClient("127.0.0.1:1")
    with pytest.raises(ValueError, match="directory_id: invalid uuid"):
        asyncio.run(admin.remove_voter(1, "nope"))
    with pytest.raises(ValueError, match="must not be the zero uuid"):
        asyncio.run(admin.remove_voter(1, "AAAAAAAAAAAAAAAAAAAAAA"))
