"""The Kafka network client: ApiVersions first and version negotiation, request timeouts that
drop the connection, reconnect backoff, and UNSUPPORTED_VERSION answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from kraft.cli.local import free_port
from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey, api_versions_response
from kraft.protocol.errors import UnsupportedVersionError
from kraft.protocol.framing import decode_request, encode_response
from kraft.server.frames import ConnectionClosedError, FrameListener, PeerClosedError, PeerInfo
from kraft.server.translate import METADATA_TOPIC
from kraft.server.transport import (
    KafkaConnection,
    PeerNetwork,
    RequestError,
    unsupported_version_frame,
)


class FakePeer:
    """A Kafka-protocol server whose behaviour the test controls."""

    def __init__(self) -> None:
        self.vote_max = 2
        self.silent = False
        self.close_on_connect = False
        self.close_on_request = False
        self.connections: set[int] = set()
        self.votes: list[int] = []
        self.listener = FrameListener("127.0.0.1", 0, self.handle, name="fake")

    async def handle(self, frame: bytes, peer: PeerInfo) -> bytes | None:
        self.connections.add(peer.connection_id)
        if self.close_on_connect:
            return None
        try:
            header, _ = decode_request(frame)
        except UnsupportedVersionError as exc:
            assert exc.correlation_id is not None
            return unsupported_version_frame(exc.correlation_id)
        if header.api_key == ApiKey.API_VERSIONS:
            resp = api_versions_response(header.api_version)
            keys = [k if k.api_key != ApiKey.VOTE else
                    w.ApiVersionsResponseData.ApiVersion(k.api_key, 0, self.vote_max)
                    for k in resp.api_keys]
            resp = w.ApiVersionsResponseData(
                error_code=0, api_keys=keys, supported_features=resp.supported_features)
            return encode_response(header.api_key, header.api_version, header.correlation_id,
                                   resp)[4:]
        if self.close_on_request:
            return None
        if self.silent:
            await asyncio.sleep(3600)
        self.votes.append(header.api_version)
        V = w.VoteResponseData
        out = V(topics=[V.TopicData(METADATA_TOPIC, [V.PartitionData(0, 0, 1, 3, True)])])
        return encode_response(header.api_key, header.api_version, header.correlation_id, out)[4:]


@pytest.fixture
async def peer() -> AsyncIterator[FakePeer]:
    p = FakePeer()
    await p.listener.start()
    yield p
    await p.listener.stop()


def _vote(version: int) -> w.VoteRequestData:
    V = w.VoteRequestData
    return V(cluster_id=None, voter_id=2 if version >= 1 else -1, topics=[V.TopicData(
        METADATA_TOPIC, [V.PartitionData(partition_index=0, replica_epoch=3, replica_id=1,
                                         last_offset_epoch=2, last_offset=10)])])


async def test_versions_are_negotiated_after_api_versions(peer: FakePeer) -> None:
    net = PeerNetwork("raft-client-1")
    addr = ("127.0.0.1", peer.listener.port)
    version, resp = await net.request(2, addr, ApiKey.VOTE, _vote, 5)
    assert version == 2 and peer.votes == [2] and resp.topics[0].partitions[0].vote_granted
    net.close()
    peer.vote_max = 1
    version, _ = await net.request(2, addr, ApiKey.VOTE, _vote, 5)
    assert version == 1 and peer.votes == [2, 1]
    net.close()


async def test_a_timeout_drops_the_connection_and_the_next_request_reconnects(peer: FakePeer) -> None:
    net = PeerNetwork("raft-client-1")
    addr = ("127.0.0.1", peer.listener.port)
    await net.request(2, addr, ApiKey.VOTE, _vote, 5)
    assert len(peer.connections) == 1
    peer.silent = True
    with pytest.raises(RequestError) as err:
        await net.request(2, addr, ApiKey.VOTE, _vote, 0.2)
    assert not err.value.disconnected and not err.value.unreachable
    peer.silent = False
    await net.request(2, addr, ApiKey.VOTE, _vote, 5)
    assert len(peer.connections) == 2
    net.close()


async def test_failed_connections_back_off(peer: FakePeer) -> None:
    net = PeerNetwork("raft-client-1")
    addr = ("127.0.0.1", peer.listener.port)
    peer.close_on_connect = True
    with pytest.raises(RequestError):
        await net.request(2, addr, ApiKey.VOTE, _vote, 2)
    assert len(peer.connections) == 1
    # within the backoff a short request fails without a new connection attempt
    with pytest.raises(RequestError, match="backoff"):
        await net.request(2, addr, ApiKey.VOTE, _vote, 0.01)
    assert len(peer.connections) == 1
    # a request with time to wait tries again once the backoff is over
    peer.close_on_connect = False
    await net.request(2, addr, ApiKey.VOTE, _vote, 5)
    assert len(peer.connections) == 2
    net.close()


async def test_unreachable_peer_is_a_request_error() -> None:
    net = PeerNetwork("raft-client-1")
    with pytest.raises(RequestError):
        await net.request(7, ("127.0.0.1", 1), ApiKey.VOTE, _vote, 1)
    net.close()


async def test_the_peer_closing_the_connection_mid_request_is_a_disconnect(peer: FakePeer) -> None:
    net = PeerNetwork("raft-client-1")
    addr = ("127.0.0.1", peer.listener.port)
    await net.request(2, addr, ApiKey.VOTE, _vote, 5)
    peer.close_on_request = True
    with pytest.raises(RequestError) as err:
        await net.request(2, addr, ApiKey.VOTE, _vote, 5)
    assert err.value.disconnected and not err.value.unreachable
    net.close()


async def test_a_refused_peer_fails_at_once_during_the_backoff_then_is_tried_again() -> None:
    # a port outside the ephemeral range: no other test's connection or listener on port 0 can
    # take it between this choice and the listener bound on it below
    port = free_port("127.0.0.1")
    net = PeerNetwork("raft-client-1")
    addr = ("127.0.0.1", port)
    with pytest.raises(RequestError) as err:
        await net.request(2, addr, ApiKey.VOTE, _vote, 5)
    assert err.value.unreachable
    backoff = net._peers[2].backoff_ms
    next_attempt = net._peers[2].next_attempt
    # Within the backoff even a request with time to wait fails at once, still unreachable
    # (nothing listened a moment ago), and without pushing the backoff further out.
    for _ in range(3):
        with pytest.raises(RequestError, match="backoff") as err:
            await net.request(2, addr, ApiKey.VOTE, _vote, 5)
        assert err.value.unreachable
    assert net._peers[2].backoff_ms == backoff and net._peers[2].next_attempt == next_attempt
    # Something listens there now: once the backoff is over the next request connects.
    p = FakePeer()
    p.listener = FrameListener("127.0.0.1", port, p.handle, name="fake")
    await p.listener.start()
    try:
        await asyncio.sleep(max(0.0, next_attempt - time.monotonic()) + 0.01)
        _, resp = await net.request(2, addr, ApiKey.VOTE, _vote, 5)
        assert resp.topics[0].partitions[0].vote_granted
    finally:
        net.close()
        await p.listener.stop()


async def test_a_callback_request_tells_the_peer_closing_from_our_own_close(peer: FakePeer) -> None:
    errors: asyncio.Queue[BaseException | None] = asyncio.Queue()

    def send(conn: KafkaConnection) -> None:
        conn.send(ApiKey.VOTE, _vote, 5, lambda _v, _r, error: errors.put_nowait(error))

    conn = KafkaConnection("127.0.0.1", peer.listener.port, "raft-client-1")
    await conn.open(5)
    peer.silent = True
    send(conn)
    conn.close()  # we close it: not the peer's doing
    error = await asyncio.wait_for(errors.get(), 5)
    assert isinstance(error, ConnectionClosedError) and not isinstance(error, PeerClosedError)

    peer.silent, peer.close_on_request = False, True
    conn = KafkaConnection("127.0.0.1", peer.listener.port, "raft-client-1")
    await conn.open(5)
    send(conn)
    error = await asyncio.wait_for(errors.get(), 5)
    assert isinstance(error, PeerClosedError)
    conn.close()
