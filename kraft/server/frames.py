"""Size-prefixed frames over asyncio TCP: the listener side and one client connection.

Kafka frames are an int32 big-endian size followed by that many bytes. This module knows
nothing of what is inside a frame; `kraft.server.transport` puts the Kafka protocol on top.

Listener rules (what a hostile or broken peer can do, and what happens):

* a size prefix that is negative or larger than `max_frame_bytes` (a 2 GiB prefix, garbage
  bytes read as a size) closes that connection at once, without allocating anything;
* a frame started but not finished within `partial_frame_timeout_s` (a half frame then
  silence) closes that connection;
* a handler that raises, or returns None (undecodable header), closes that connection after
  the responses queued before it were written;
* requests of one connection are handled concurrently, but their responses are written in
  request order (Kafka's per-connection ordering); at most `max_in_flight` per connection are
  handled at once, further reads wait (back-pressure instead of unbounded memory).

Nothing here affects other connections or the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("kraft.server.frames")

_SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
"""Kafka's `socket.request.max.bytes` default."""


class ConnectionClosedError(ConnectionError):
    """The connection closed (or was closed) before a response arrived."""


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """Where a connection comes from (for logs)."""

    host: str
    port: int
    connection_id: int


FrameHandler = Callable[[bytes, PeerInfo], Awaitable[bytes | None]]
"""Handles one request frame; returns the response frame body, or None to close."""


class FrameListener:
    """Accepts connections and serves size-prefixed request frames with `handler`."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: FrameHandler,
        *,
        name: str = "listener",
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        partial_frame_timeout_s: float = 30.0,
        max_in_flight: int = 64,
    ) -> None:
        self.host = host
        self.port = port
        self.name = name
        self._handler = handler
        self._max_frame = max_frame_bytes
        self._partial_timeout = partial_frame_timeout_s
        self._max_in_flight = max_in_flight
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._next_id = 0
        self.connections_closed_for_bad_input = 0

    async def start(self) -> int:
        """Bind and listen; returns the bound port."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("event=listening listener=%s host=%s port=%d", self.name, self.host, self.port)
        return self.port

    async def stop(self) -> None:
        """Stop accepting and close every connection."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def _bad_input(self, peer: PeerInfo, reason: str) -> None:
        self.connections_closed_for_bad_input += 1
        log.warning(
            "event=connection_closed listener=%s peer=%s:%d conn=%d reason=%r",
            self.name, peer.host, peer.port, peer.connection_id, reason,
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername") or ("?", 0)
        self._next_id += 1
        peer = PeerInfo(str(peername[0]), int(peername[1]), self._next_id)
        self._writers.add(writer)
        queue: asyncio.Queue[asyncio.Future[bytes | None] | None] = asyncio.Queue(
            self._max_in_flight
        )
        responder = asyncio.ensure_future(self._respond(queue, writer, peer))
        try:
            while not responder.done():
                first = await reader.read(1)
                if not first:
                    break
                try:
                    rest = await asyncio.wait_for(reader.readexactly(3), self._partial_timeout)
                    (size,) = _SIZE.unpack(first + rest)
                    if size < 0 or size > self._max_frame:
                        self._bad_input(peer, f"frame size {size} outside 0..{self._max_frame}")
                        break
                    body = await asyncio.wait_for(reader.readexactly(size), self._partial_timeout)
                except TimeoutError:
                    self._bad_input(peer, "incomplete frame: peer went silent mid-frame")
                    break
                fut = asyncio.ensure_future(self._handler(body, peer))
                await queue.put(fut)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)
            if not responder.done():
                # let queued responses go out, but do not wait for ever on a dead peer
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(responder), 10)
            responder.cancel()
            writer.close()
            self._writers.discard(writer)

    async def _respond(
        self,
        queue: asyncio.Queue[asyncio.Future[bytes | None] | None],
        writer: asyncio.StreamWriter,
        peer: PeerInfo,
    ) -> None:
        while True:
            fut = await queue.get()
            if fut is None:
                return
            try:
                body = await fut
            except Exception as exc:
                self._bad_input(peer, f"request handler failed: {type(exc).__name__}: {exc}")
                writer.close()
                return
            if body is None:
                self._bad_input(peer, "request could not be decoded")
                writer.close()
                return
            try:
                writer.write(_SIZE.pack(len(body)) + body)
                await writer.drain()
            except (ConnectionError, OSError):
                writer.close()
                return


class FrameConnection:
    """One client TCP connection: send request frames, receive response frames in order.

    Responses are matched first-in first-out, which is what a Kafka server guarantees per
    connection. Any failure (timeout, reset, bad size) closes the connection and fails every
    request in flight with `ConnectionClosedError`: after a timeout the stream position is
    unknown, so the only safe move is a new connection (Kafka's NetworkClient does the same).
    """

    def __init__(self, host: str, port: int, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.host = host
        self.port = port
        self._max_frame = max_frame_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiters: list[asyncio.Future[bytes]] = []
        self._read_task: asyncio.Task[None] | None = None
        self.closed = False

    async def open(self, timeout_s: float) -> None:
        """Connect within `timeout_s`; raises OSError/TimeoutError."""
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), timeout_s
        )
        self._read_task = asyncio.ensure_future(self._read_loop())

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                head = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if size < 0 or size > self._max_frame:
                    raise ConnectionClosedError(f"response frame size {size} out of range")
                body = await self._reader.readexactly(size)
                if not self._waiters:
                    raise ConnectionClosedError("response without a request")
                waiter = self._waiters.pop(0)
                if not waiter.done():
                    waiter.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._fail(exc)
        except asyncio.CancelledError:
            self._fail(ConnectionClosedError("closed"))
            raise

    def _fail(self, exc: BaseException) -> None:
        self.closed = True
        if self._writer is not None:
            self._writer.close()
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_exception(ConnectionClosedError(f"{self.host}:{self.port}: {exc}"))

    async def request(self, frame: bytes, timeout_s: float, expect_response: bool = True) -> bytes:
        """Send one frame and wait for its response; on timeout the connection is closed."""
        if self.closed or self._writer is None:
            raise ConnectionClosedError(f"{self.host}:{self.port}: not connected")
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if expect_response:
            self._waiters.append(waiter)
        self._writer.write(_SIZE.pack(len(frame)) + frame)
        if not expect_response:
            await self._writer.drain()
            return b""
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            self._fail(TimeoutError(f"request timed out after {timeout_s:.3f}s"))
            raise

    def close(self) -> None:
        """Close the connection and fail whatever is in flight."""
        if self._read_task is not None:
            self._read_task.cancel()
        self._fail(ConnectionClosedError("closed by client"))
