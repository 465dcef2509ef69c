"""The Kafka protocol over `kraft.server.frames`: client connections and the peer network.

`KafkaConnection` is one TCP connection that speaks the Kafka protocol: on open it sends
ApiVersions (v4, falling back to v0 when the server answers UNSUPPORTED_VERSION, KIP-511),
remembers the peer's version ranges and then sends each request at the highest version both
sides support. `PeerNetwork` keeps one such connection per destination, reconnects with
exponential backoff (Kafka's 50 ms → 500 ms), and bounds every request by a timeout.

`unsupported_version_frame` builds the answer to a request whose api key or version this node
does not speak: an ApiVersions v0 body with UNSUPPORTED_VERSION and our api ranges under a v0
response header, so any client can read the correlation id and error code and learn what we
serve.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey, api_spec, api_versions_response
from kraft.protocol.errors import ErrorCode, ProtocolError
from kraft.protocol.framing import (
    RequestHeader,
    decode_response,
    encode_request,
    encode_response,
)
from kraft.server.frames import ConnectionClosedError, FrameConnection, PeerClosedError

log = logging.getLogger("kraft.server.transport")

RECONNECT_BACKOFF_MS = 50
RECONNECT_BACKOFF_MAX_MS = 500


class RequestError(Exception):
    """A request could not be completed (no connection, timeout, undecodable answer).

    `unreachable`: the destination refused the connection (nothing listens there: its process
    is gone), as opposed to a timeout or a broken established connection. `disconnected`: the
    destination closed or reset an established connection with the request in flight.
    """

    def __init__(self, message: str, unreachable: bool = False,
                 disconnected: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.disconnected = disconnected


def unsupported_version_frame(correlation_id: int) -> bytes:
    """The response body (no size prefix) for an unknown api key or unsupported version."""
    body = api_versions_response(0, error_code=ErrorCode.UNSUPPORTED_VERSION)
    return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)[4:]


KAFKA_CONTROLLER_APIS = frozenset({62, 63})
"""BrokerRegistration and BrokerHeartbeat: every Apache Kafka controller announces them in
ApiVersions (its ControllerApis serve the brokers), a kraft node never does."""


@dataclass
class PeerVersions:
    """The api version ranges a peer announced, and its supported features."""

    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    features: dict[str, tuple[int, int]] = field(default_factory=dict)
    _picked: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    """`pick`'s answers so far (the ranges do not change once announced)."""

    @property
    def kafka_controller(self) -> bool:
        """Whether the peer is an Apache Kafka controller (`KAFKA_CONTROLLER_APIS`)."""
        return not KAFKA_CONTROLLER_APIS.isdisjoint(self.ranges)

    def pick(self, api_key: int) -> int:
        """The highest version of `api_key` both sides speak; raises RequestError if none."""
        known = self._picked.get(api_key)
        if known is not None:
            return known  # every request of a connection asks again: a fetch per exchange
        ours = api_spec(api_key)
        theirs = self.ranges.get(int(api_key))
        if theirs is None:
            raise RequestError(f"peer does not serve api {ours.name}")
        hi = min(ours.max_version, theirs[1])
        lo = max(ours.min_version, theirs[0])
        if hi < lo:
            raise RequestError(f"no common version of {ours.name}: ours {ours.min_version}-"
                               f"{ours.max_version}, theirs {theirs[0]}-{theirs[1]}")
        self._picked[api_key] = hi
        return hi


class FastCodec(Protocol):
    """A request's own encoder and its answer's decoder (see `KafkaConnection.send`)."""

    def encode(self, version: int, correlation_id: int, client_id: str | None) -> bytes | None:
        """The request frame without its size prefix, or None for the general path."""

    def decode(self, version: int, correlation_id: int, frame: bytes | memoryview) -> Any:
        """The decoded answer, or None for the general path."""


class KafkaConnection:
    """One Kafka-protocol client connection (ApiVersions first, then any request)."""

    def __init__(self, host: str, port: int, client_id: str,
                 tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        """`tls`: the context source of a TLS connection (`FrameConnection`), None for
        PLAINTEXT."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self._conn = FrameConnection(host, port, tls=tls)
        self._corr = 0
        self.versions = PeerVersions()

    @property
    def closed(self) -> bool:
        """True once the underlying connection failed or was closed."""
        return self._conn.closed

    @property
    def lent(self) -> bool:
        """The follower's native lane has the socket (`lend`)."""
        return self._conn.lent

    async def open(self, timeout_s: float) -> None:
        """Connect and exchange ApiVersions within `timeout_s`."""
        await self._conn.open(timeout_s)
        try:
            resp = await self._raw_call(ApiKey.API_VERSIONS, 4, w.ApiVersionsRequestData(
                client_software_name="kraft-quorum", client_software_version="0.1.0"), timeout_s)
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                resp = await self._raw_call(ApiKey.API_VERSIONS, 0, w.ApiVersionsRequestData(),
                                            timeout_s)
            if resp.error_code != ErrorCode.NONE:
                raise RequestError(f"ApiVersions to {self.host}:{self.port} failed: "
                                   f"error {resp.error_code}")
        except BaseException:
            self.close()
            raise
        self.versions = PeerVersions(
            {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys},
            {f.name: (f.min_version, f.max_version) for f in resp.supported_features},
        )

    def _frame(self, api_key: ApiKey, version: int, body: object) -> tuple[bytes, int]:
        """The request frame (without its size prefix) and its correlation id."""
        self._corr += 1
        frame = encode_request(RequestHeader(int(api_key), version, self._corr, self.client_id), body)
        return frame[4:], self._corr

    def _decode(self, api_key: ApiKey, version: int, corr: int, raw: bytes | memoryview) -> Any:
        """The response body; an undecodable answer or a wrong correlation id closes the
        connection (the stream position is no longer trusted) and raises RequestError."""
        try:
            header, data = decode_response(int(api_key), version, raw)
        except ProtocolError as exc:
            self.close()
            raise RequestError(f"undecodable {api_key.name} response: {exc}") from exc
        if header.correlation_id != corr:
            self.close()
            raise RequestError(f"correlation id {header.correlation_id} != {corr}")
        return data

    async def _raw_call(self, api_key: ApiKey, version: int, body: object, timeout_s: float) -> Any:
        frame, corr = self._frame(api_key, version, body)
        return self._decode(api_key, version, corr, await self._conn.request(frame, timeout_s))

    async def call(self, api_key: ApiKey, body: object | Callable[[int], object],
                   timeout_s: float, version: int | None = None) -> tuple[int, Any]:
        """Send a request at `version` (default: the best common one); returns (version, response).

        `body` is the request body, or a function of the chosen version that builds it.
        """
        v = self.versions.pick(api_key) if version is None else version
        built = body(v) if callable(body) else body
        return v, await self._raw_call(api_key, v, built, timeout_s)

    def send(self, api_key: ApiKey, body: Callable[[int], object], timeout_s: float,
             callback: Callable[[int, Any, BaseException | None], None],
             fast: FastCodec | None = None) -> tuple[int, int]:
        """`call` without a task: `callback(version, response, None)` on success, or
        `callback(version, None, error)`; an undecodable answer or a wrong correlation id
        closes the connection (as `call` does).

        With `fast`, the request frame is `fast.encode(version, correlation id, client id)`
        and the answer is `fast.decode(version, correlation id, frame)`, whatever that returns
        (the caller knows its type), or the ProtocolError it raises as the error; either
        returning None falls back to `body` and the general decoder.

        Returns the version and the correlation id the request was sent with."""
        v = self.versions.pick(api_key)
        frame: bytes | None = None
        if fast is not None:
            self._corr += 1
            corr = self._corr
            frame = fast.encode(v, corr, self.client_id)
        if frame is None:
            frame, corr = self._frame(api_key, v, body(v))
        self._conn.send(frame, timeout_s, self._answered(api_key, v, corr, callback, fast))
        return v, corr

    def _answered(self, api_key: ApiKey, v: int, corr: int,
                  callback: Callable[[int, Any, BaseException | None], None],
                  fast: FastCodec | None) -> Callable[[bytes | memoryview | BaseException], None]:
        """The frame callback of a request sent at version `v` with correlation id `corr`
        (see `send`)."""

        def answered(raw: bytes | memoryview | BaseException) -> None:
            if isinstance(raw, BaseException):
                callback(v, None, raw)
                return
            if fast is not None:
                try:
                    decoded = fast.decode(v, corr, raw)
                except ProtocolError as exc:  # e.g. a corrupt batch: this fetch fails
                    callback(v, None, exc)
                    return
                if decoded is not None:
                    callback(v, decoded, None)
                    return
            try:
                data = self._decode(api_key, v, corr, raw)
            except RequestError as exc:
                callback(v, None, exc)
                return
            callback(v, data, None)

        return answered

    def lend(self) -> tuple[int, int] | None:
        """Lend the socket, with its one request in flight, to the follower's native lane
        (`FrameConnection.lend`): (the descriptor, the next correlation id), or None."""
        fd = self._conn.lend()
        return None if fd is None else (fd, self._corr + 1)

    def give_back(self, next_correlation: int, unread: bytes, api_key: ApiKey, version: int,
                  correlation_id: int, timeout_s: float,
                  callback: Callable[[int, Any, BaseException | None], None] | None,
                  fast: FastCodec | None = None) -> None:
        """The lane is done with the socket (`FrameConnection.give_back`): it sent requests
        up to `next_correlation` (exclusive), and `callback` (as for `send`) waits for the
        answer to the one it left in flight, `correlation_id` at `version`."""
        self._corr = max(self._corr, next_correlation - 1)
        answered = None if callback is None else \
            self._answered(api_key, version, correlation_id, callback, fast)
        self._conn.give_back(unread, answered, timeout_s)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def peer_closed(self) -> None:
        """The peer closed the connection while the lane had it (`FrameConnection.peer_closed`)."""
        self._conn.peer_closed()


async def one_shot(host: str, port: int, api_key: ApiKey, body: object | Callable[[int], object],
                   timeout_s: float = 10.0, client_id: str = "kraft-cli",
                   tls: Callable[[], ssl.SSLContext] | None = None) -> tuple[int, Any]:
    """Open a connection, send one request, close; returns (version, response)."""
    conn = KafkaConnection(host, port, client_id, tls)
    await conn.open(timeout_s)
    try:
        return await conn.call(api_key, body, timeout_s)
    finally:
        conn.close()


@dataclass
class _Peer:
    address: tuple[str, int]
    conn: KafkaConnection | None = None
    connecting: asyncio.Future[KafkaConnection] | None = None
    backoff_ms: int = 0
    next_attempt: float = 0.0
    refused: bool = False
    tls_error: str = ""
    """The last TLS handshake failure logged (each distinct one is logged once)."""


class PeerNetwork:
    """One connection per destination (node id, or a negative id for a bootstrap server).

    Each destination is bound to an address; when the address given for a destination changes
    (a voter moved), the old connection is dropped. Failures back off exponentially before the
    next connection attempt; requests made during the backoff wait for it (within their own
    timeout) instead of hammering a dead peer, except when the last attempt was refused: then
    they fail at once as unreachable (nothing listened a moment ago), and the caller's own
    retry backoff paces them.
    """

    def __init__(self, client_id: str, tls: Callable[[], ssl.SSLContext] | None = None,
                 on_open: Callable[[int, PeerVersions], None] | None = None) -> None:
        """`tls`: every connection speaks TLS with the context it gives (None: PLAINTEXT).
        `on_open(dest, versions)`: told what each new connection's peer announced."""
        self.client_id = client_id
        self.tls = tls
        self.on_open = on_open
        self._peers: dict[int, _Peer] = {}

    async def _connection(self, dest: int, address: tuple[str, int], timeout_s: float) -> KafkaConnection:
        peer = self._peers.get(dest)
        if peer is None or peer.address != address:
            if peer is not None and peer.conn is not None:
                peer.conn.close()
            peer = _Peer(address)
            self._peers[dest] = peer
        if peer.conn is not None and not peer.conn.closed:
            return peer.conn
        if peer.connecting is not None:
            return await asyncio.wait_for(asyncio.shield(peer.connecting), timeout_s)
        wait = peer.next_attempt - time.monotonic()
        if wait > 0 and (peer.refused or wait >= timeout_s):
            # Not an attempt: the backoff and what the last attempt found stay as they are.
            raise RequestError(f"node {dest} at {address[0]}:{address[1]} is in reconnect "
                               f"backoff", unreachable=peer.refused)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[KafkaConnection] = loop.create_future()
        peer.connecting = fut
        try:
            if wait > 0:
                await asyncio.sleep(wait)
            conn = KafkaConnection(address[0], address[1], self.client_id, self.tls)
            await conn.open(timeout_s)
        except BaseException as exc:
            if isinstance(exc, ssl.SSLError) and str(exc) != peer.tls_error:
                # a certificate or trust problem does not heal by retrying: say it once
                peer.tls_error = str(exc)
                log.warning("event=tls_handshake_failed destination=%d host=%s port=%d "
                            "error=%r", dest, address[0], address[1], str(exc))
            peer.refused = isinstance(exc, ConnectionRefusedError | ConnectionResetError)
            peer.backoff_ms = min(RECONNECT_BACKOFF_MAX_MS,
                                  max(RECONNECT_BACKOFF_MS, peer.backoff_ms * 2))
            peer.next_attempt = time.monotonic() + peer.backoff_ms / 1000
            peer.connecting = None
            if not fut.done():
                fut.set_exception(RequestError(f"connect to node {dest} failed: {exc}"))
                fut.exception()  # retrieved: waiters see it through shield
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise RequestError(f"connect to node {dest} at {address[0]}:{address[1]} failed: "
                               f"{type(exc).__name__}: {exc}", unreachable=peer.refused) from None
        peer.backoff_ms = 0
        peer.refused = False
        peer.tls_error = ""
        peer.conn = conn
        peer.connecting = None
        fut.set_result(conn)
        log.info("event=connected destination=%d host=%s port=%d", dest, address[0], address[1])
        if self.on_open is not None:
            self.on_open(dest, conn.versions)
        return conn

    async def request(self, dest: int, address: tuple[str, int], api_key: ApiKey,
                      body: object | Callable[[int], object], timeout_s: float) -> tuple[int, Any]:
        """Send one request to `dest`; raises RequestError on any failure."""
        deadline = time.monotonic() + timeout_s
        try:
            conn = await self._connection(dest, address, timeout_s)
            remaining = max(0.001, deadline - time.monotonic())
            if conn.lent:  # the follower's lane has it: a connection of this request's own
                return await one_shot(address[0], address[1], api_key, body, remaining,
                                      self.client_id, self.tls)
            return await conn.call(api_key, body, remaining)
        except (ConnectionClosedError, OSError, TimeoutError) as exc:
            raise RequestError(f"{api_key.name} to node {dest} failed: {type(exc).__name__}: "
                               f"{exc}", disconnected=isinstance(exc, PeerClosedError)) from None

    def ready(self, dest: int, address: tuple[str, int]) -> KafkaConnection | None:
        """The open connection to `dest` at `address`, if there is one (no waiting)."""
        peer = self._peers.get(dest)
        if peer is None or peer.address != address or peer.conn is None or peer.conn.closed:
            return None
        return peer.conn

    def versions_of(self, dest: int) -> PeerVersions | None:
        """The ApiVersions a connected destination announced."""
        peer = self._peers.get(dest)
        return peer.conn.versions if peer is not None and peer.conn is not None else None

    def close(self) -> None:
        """Close every connection."""
        for peer in self._peers.values():
            if peer.conn is not None:
                peer.conn.close()
            if peer.connecting is not None and not peer.connecting.done():
                peer.connecting.cancel()
        self._peers.clear()


def kraft_version_range(versions: PeerVersions) -> tuple[int, int] | None:
    """The peer's supported kraft.version range from ApiVersions, None when not announced."""
    return versions.features.get("kraft.version")
