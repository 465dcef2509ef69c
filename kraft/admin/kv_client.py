"""An asyncio client of the binary KV protocol (`kraft.protocol.kv_wire`, served by `kraft.server.client_protocol`).

One `KvClient` holds one TCP connection to one node and pipelines every call made on it:
any number of `put`/`get`/`delete` may be awaited concurrently, their frames leave in one write
per event-loop turn and answers are matched by request id. `put_many` sends a whole list at
once. A NOT_LEADER answer raises `NotLeader` carrying the leader's id; `KvClusterClient` follows
it given every node's client address.

    async with KvClient("127.0.0.1", 9093) as c:
        offset = await c.put("k", b"v")
        offsets = await c.put_many([("a", b"1"), ("b", b"2")])
        value = await c.get("k")

On a node whose KV API is secured (docs/security.md), `credentials` (the HTTP port's
`HttpCredentials`: a bearer token, the CAs and a client certificate) make the connection TLS
and send the token in an AUTH frame before any other; a refused token raises `Unauthenticated`
from `connect`, an op beyond the credential's scope raises `Forbidden`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import cast

from kraft.admin.http_credentials import HttpCredentials
from kraft.protocol.framing import ReadBuffer
from kraft.protocol.kv_wire import (
    AUTH_BEARER,
    ERROR,
    FORBIDDEN,
    NOT_FOUND,
    NOT_LEADER,
    OK,
    OP_AUTH,
    OP_DELETE,
    OP_GET,
    OP_GET_STALE,
    OP_PUT,
    REQUEST_FRAME_HEAD,
    REQUEST_HEAD,
    RESPONSE_HEAD,
    UNAUTHENTICATED,
    UNKNOWN_OUTCOME,
)


class ClientError(Exception):
    """The server answered ERROR, or the connection failed."""


class NotLeader(ClientError):
    """The node is not the leader; `leader_id` is -1 when it knows none."""

    def __init__(self, leader_id: int, leader_http: str) -> None:
        super().__init__(f"not the leader (leader is {leader_id})")
        self.leader_id = leader_id
        self.leader_http = leader_http


class OutcomeUnknown(ClientError):
    """The write may or may not have been applied (leader change, connection lost)."""


class Unauthenticated(ClientError):
    """The node needs a credential the connection does not hold (none sent, an unknown or
    revoked token); nothing of the op was applied."""


class Forbidden(ClientError):
    """The connection's credential lacks the op's scope; nothing of it was applied."""


_PACK_REQUEST = REQUEST_FRAME_HEAD.pack
_REQUEST_SIZE = REQUEST_HEAD.size  # the head after the length
_Answer = tuple[int, int, bytes]  # status, offset, payload


Callback = Callable[[int, int, bytes], None]
"""`callback(status, offset, payload)` of `KvClient.send`."""


class _ClientProtocol(asyncio.Protocol):
    """Frames in, answers matched to requests by id (the read side of a `KvClient`)."""

    def __init__(self, client: KvClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self._buf = ReadBuffer()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.client._lost(OutcomeUnknown(f"connection lost: {exc!r}" if exc else "connection closed"))

    def data_received(self, data: bytes) -> None:
        view = self._buf.feed(data)
        pos = 0
        n = len(view)
        size = RESPONSE_HEAD.size
        unpack = RESPONSE_HEAD.unpack_from
        pending = self.client._pending
        while n - pos >= size:
            length, rid, status, offset, leader = unpack(view, pos)
            end = pos + 4 + length
            if end > n:
                break
            payload = bytes(view[pos + size:end]) if end > pos + size else b""
            pos = end
            waiter = pending.pop(rid, None)
            if waiter is None:
                continue
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    _settle(waiter, status, offset, leader, payload)
            else:
                waiter(status, offset if status != NOT_LEADER else leader, payload)
        self._buf.consumed(view, pos)


def _settle(fut: asyncio.Future[_Answer], status: int, offset: int, leader: int,
            payload: bytes) -> None:
    if status == NOT_LEADER:
        fut.set_exception(NotLeader(leader, payload.decode()))
    elif status == UNKNOWN_OUTCOME:
        fut.set_exception(OutcomeUnknown(payload.decode() or "outcome unknown"))
    elif status == ERROR:
        fut.set_exception(ClientError(payload.decode()))
    elif status == UNAUTHENTICATED:
        fut.set_exception(Unauthenticated(payload.decode()))
    elif status == FORBIDDEN:
        fut.set_exception(Forbidden(payload.decode()))
    else:
        fut.set_result((status, offset, payload))


class KvClient:
    """One pipelined connection to one node (see the module docstring)."""

    def __init__(self, host: str, port: int, credentials: HttpCredentials | None = None) -> None:
        self.host = host
        self.port = port
        self.credentials = credentials
        self.principal: str | None = None
        """Who the node took the connection for, and its scope (`token:ops admin`), once an
        AUTH was answered."""
        self._protocol: _ClientProtocol | None = None
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[int, asyncio.Future[_Answer] | Callback] = {}
        self._next_id = 0
        self._out: list[bytes] = []
        self._flush_scheduled = False

    async def connect(self, timeout_s: float = 5.0) -> KvClient:
        """Open the connection (TLS and AUTH with `credentials`); raises `Unauthenticated`
        when the node refuses the token."""
        loop = self._loop = asyncio.get_running_loop()
        creds = self.credentials
        ctx = creds.ssl_context() if creds is not None else None
        transport, protocol = await asyncio.wait_for(
            loop.create_connection(lambda: _ClientProtocol(self), self.host, self.port,
                                   ssl=ctx, server_hostname=self.host if ctx else None),
            timeout_s)
        self._transport = transport
        self._protocol = protocol
        if creds is not None and creds.token:
            try:
                _, _, payload = await asyncio.wait_for(
                    self._call(OP_AUTH, AUTH_BEARER, creds.token.encode()), timeout_s)
            except BaseException:
                await self.close()
                raise
            self.principal = payload.decode()
        return self

    @property
    def connected(self) -> bool:
        """True while the connection is open."""
        return self._transport is not None and not self._transport.is_closing()

    async def __aenter__(self) -> KvClient:
        return await self.connect()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; calls in flight fail with OutcomeUnknown."""
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()
            await asyncio.sleep(0)  # let connection_lost run
        self._lost(OutcomeUnknown("connection closed"))

    def _lost(self, exc: OutcomeUnknown) -> None:
        self._transport = None
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_exception(exc)
            else:
                waiter(UNKNOWN_OUTCOME, -1, str(exc).encode())

    def _call(self, op: int, key: str, value: bytes = b"") -> asyncio.Future[_Answer]:
        if self._loop is None:
            raise ClientError("not connected")
        fut: asyncio.Future[_Answer] = self._loop.create_future()
        self.send(op, key, value, fut)
        return fut

    def send(self, op: int, key: str, value: bytes,
             callback: Callback | asyncio.Future[_Answer]) -> None:
        """Queue one request and return at once; `callback(status, offset, payload)` runs on
        the event loop when its answer arrives (a producer-style API for callers that keep
        many writes in flight without a coroutine each). For NOT_LEADER, `offset` carries the
        leader id; a lost connection answers UNKNOWN_OUTCOME. A future of this loop may stand
        in for the callback: it gets (status, offset, payload), or the matching ClientError."""
        if self._transport is None:
            raise ClientError("not connected")
        self._next_id = rid = (self._next_id + 1) & 0xFFFFFFFF
        self._pending[rid] = callback
        k = key.encode()  # encode_request(rid, op, key, value), inline: this runs per write
        self._out.append(_PACK_REQUEST(_REQUEST_SIZE + len(k) + len(value), rid, op, len(k))
                         + k + value)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if self._transport is not None and out:
            self._transport.write(b"".join(out))

    async def put(self, key: str, value: bytes) -> int:
        """PUT key=value once committed and applied; returns its log offset."""
        _, offset, _ = await self._call(OP_PUT, key, value)
        return offset

    async def put_many(self, items: Iterable[tuple[str, bytes]]) -> list[int]:
        """PUT every item (pipelined, one write); returns their offsets in order."""
        futures = [self._call(OP_PUT, k, v) for k, v in items]
        return [offset for _, offset, _ in await asyncio.gather(*futures)]

    async def delete(self, key: str) -> bool:
        """DELETE key; returns whether it existed."""
        status, _, _ = await self._call(OP_DELETE, key)
        return status == OK

    async def get(self, key: str, stale: bool = False) -> bytes | None:
        """Linearizable GET (a read barrier on the leader); `stale=True` reads the node's
        local state without one."""
        status, _, payload = await self._call(OP_GET_STALE if stale else OP_GET, key)
        return None if status == NOT_FOUND else payload


class KvClusterClient:
    """A client of a whole quorum: talks to the leader, follows NOT_LEADER answers.

    `addresses` maps node id -> (host, client port) for every node.
    """

    def __init__(self, addresses: dict[int, tuple[str, int]],
                 credentials: HttpCredentials | None = None) -> None:
        self.addresses = dict(addresses)
        self.credentials = credentials
        self._clients: dict[int, KvClient] = {}
        self.leader_id = next(iter(self.addresses))

    async def _client(self, node_id: int) -> KvClient:
        c = self._clients.get(node_id)
        if c is None or not c.connected:
            host, port = self.addresses[node_id]
            c = await KvClient(host, port, self.credentials).connect()
            self._clients[node_id] = c
        return c

    async def put(self, key: str, value: bytes, attempts: int = 20) -> int:
        """PUT on the leader, following redirects (bounded attempts, 5 ms apart when no
        leader is known); an unknown outcome is raised, not retried."""
        last: Exception = ClientError("no attempt made")
        ids = list(self.addresses)
        for i in range(attempts):
            try:
                return await (await self._client(self.leader_id)).put(key, value)
            except NotLeader as exc:
                last = exc
                if exc.leader_id in self.addresses and exc.leader_id != self.leader_id:
                    self.leader_id = exc.leader_id
                    continue
            except OSError as exc:
                last = exc
                broken = self._clients.pop(self.leader_id, None)
                if broken is not None:
                    with contextlib.suppress(Exception):
                        await broken.close()
            self.leader_id = ids[(ids.index(self.leader_id) + 1) % len(ids)]
            await asyncio.sleep(0.005 * min(i + 1, 10))
        raise last

    async def close(self) -> None:
        """Close every connection."""
        for c in self._clients.values():
            await c.close()
        self._clients.clear()


