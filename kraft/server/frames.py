"""Size-prefixed frames over asyncio TCP: the listener side and one client connection.

Kafka frames are an int32 big-endian size followed by that many bytes. This module knows
nothing of what is inside a frame; `kraft.server.transport` puts the Kafka protocol on top.

Listener rules (what a hostile or broken peer can do, and what happens):

* a size prefix that is negative or larger than `max_frame_bytes` (a 2 GiB prefix, garbage
  bytes read as a size) closes that connection at once, without allocating anything;
* a frame is buffered only as its bytes arrive, and the bytes held in unfinished frames count
  against the node's budget (`kraft.server.connection_limits`): over it, the connection
  holding the most is closed;
* a connection over the listener's `max.connections` or `max.connections.per.ip` is closed at
  accept, and one idle for `connections.max.idle.ms` is closed (not while lent or while a
  request of it is in flight);
* a frame started but not finished within `partial_frame_timeout_s` (a half frame then
  silence) closes that connection;
* every connection closed for bad input or a limit is counted by reason and logged,
  rate-limited (`BadInputLog`);
* a handler that raises, or returns None (undecodable header), closes that connection after
  the responses queued before it were written;
* requests of one connection are handled concurrently, but their responses are written in
  request order (Kafka's per-connection ordering); at most `max_in_flight` per connection are
  handled at once, further reads wait (back-pressure instead of unbounded memory).

Nothing here affects other connections or the process.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import math
import ssl
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from kraft.protocol.framing import ReadBuffer
from kraft.server.connection_limits import (
    DEFAULT_MAX_FRAME_BYTES,
    ConnectionGuard,
    ConnectionLimits,
    ListenerGuard,
    Tracked,
)

log = logging.getLogger("kraft.server.frames")

HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS handshake not done within this long closes the connection."""

_SIZE = struct.Struct(">i")


class BadRequest(Exception):
    """Raised by a handler for a frame it cannot take (an undecodable request): the
    connection closes as for a handler that returns None, and the message goes to the
    rate-limited bad-input log (reason `undecodable`) instead of a line of the handler's."""


class ConnectionClosedError(ConnectionError):
    """The connection closed (or was closed) before a response arrived."""


class PeerClosedError(ConnectionClosedError):
    """The other end closed or reset the connection while requests were in flight (its process
    may have died: the kernel closes a killed process's sockets at once)."""


ANONYMOUS = "User:ANONYMOUS"
"""Kafka's principal of a connection without a client certificate (and of PLAINTEXT)."""


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """Where a connection comes from (for logs) and who it is (its principal: `User:` and
    the mapped name of its verified client certificate, else ANONYMOUS)."""

    host: str
    port: int
    connection_id: int
    principal: str = ANONYMOUS
    tls: bool = False
    listener: str = ""
    """The name of the listener the connection came on: an answer names the leader's
    endpoint of that listener (Kafka answers with the request's listener name)."""


ReplyBody = bytes | tuple[bytes | memoryview, ...]
"""A response frame body: bytes, or parts to be written in order (`encode_response_parts`:
a large value, such as a snapshot chunk, is its own part and is not copied into the frame)."""

_WRITE_ALONE = 64 * 1024
"""A part at least this large is handed to the transport as it is, not joined with the rest."""

FrameHandler = Callable[[bytes, PeerInfo], "Awaitable[bytes | None] | DeferredReply | bytes | None"]
"""Handles one request frame: returns the response frame body, or None to close the
connection, either at once, through a `DeferredReply`, or through an awaitable (a coroutine
or a future). The first two cost no task and no loop turn per request."""


class DeferredReply:
    """What a handler returns to answer later without a future: `set(body)` hands the answer
    (bytes, or parts: `ReplyBody`) to the connection at once, in the same call (a future's
    callbacks would wait for the next loop turn). `set(None)` closes the connection, like a
    handler returning None."""

    __slots__ = ("_body", "_callback", "_set")

    def __init__(self) -> None:
        self._callback: Callable[[ReplyBody | None], None] | None = None
        self._set = False
        self._body: ReplyBody | None = None

    def done(self) -> bool:
        """True once answered."""
        return self._set

    def set(self, body: ReplyBody | None) -> None:
        """Answer (the first call wins)."""
        if self._set:
            return
        self._set = True
        self._body = body
        if self._callback is not None:
            self._callback(body)

    def bind(self, callback: Callable[[ReplyBody | None], None]) -> None:
        """Where the answer goes (called by the listener)."""
        self._callback = callback
        if self._set:
            callback(self._body)


class _Pending:
    """One request of a connection awaiting its turn to be answered (responses go in order)."""

    __slots__ = ("body", "done")

    def __init__(self) -> None:
        self.done = False
        self.body: ReplyBody | None = None


class _FrameServerProtocol(asyncio.Protocol):
    """One accepted connection of a `FrameListener` (see the module docstring for the rules)."""

    def __init__(self, listener: FrameListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.peer = PeerInfo("?", 0, 0)
        self._buf = bytearray()
        self._queue: collections.deque[_Pending] = collections.deque()
        self._partial_timer: asyncio.TimerHandle | None = None
        self._paused = False  # max_in_flight answers outstanding
        self._write_blocked = False  # the peer does not read its answers (transport buffer full)
        self._reading = True
        self._closing = False
        self._reason: tuple[str, str] | None = None  # (reason, detail) of a failed handler
        self._track: Tracked | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        lst = self.listener
        connection_id = next(lst._ids)
        peername = transport.get_extra_info("peername") or ("?", 0)
        principal: str | None = ANONYMOUS
        tls = lst._tls is not None
        if tls:
            principal = lst._principal_of(transport.get_extra_info("peercert"))
        self.peer = PeerInfo(str(peername[0]), int(peername[1]), connection_id,
                             principal or ANONYMOUS, tls, lst.name)
        if principal is None:  # no ssl.principal.mapping.rules rule matched: not authenticated
            lst._bad_input(self.peer, "no_principal", "no ssl.principal.mapping.rules rule "
                           "matches the client certificate's name")
            self.close()
            return
        self._track = lst._guard.admit(self.peer.host, self.peer.port, self._drop,
                                       self._in_flight)
        if self._track is None:  # over a connection limit: closed at accept, as Kafka does
            self.close()
            return
        lst._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._closing = True
        if self._partial_timer is not None:
            self._partial_timer.cancel()
        self.listener._connections.discard(self)
        self.listener._guard.release(self._track)

    def close(self) -> None:
        self._closing = True
        if self.transport is not None:
            self.transport.close()

    def _in_flight(self) -> bool:
        return bool(self._queue)

    def _drop(self) -> None:
        """Closed by the listener's guard (a limit): what is buffered goes at once."""
        self._buf = bytearray()
        self._queue.clear()
        self.close()

    def _bad_input(self, reason: str, detail: str) -> None:
        self.listener._bad_input(self.peer, reason, detail)
        self._flush()  # what was answered before the bad frame still goes out
        self._queue.clear()
        self.close()

    def _account(self) -> None:
        """Tell the node's budget what this connection holds of unfinished frames (it may
        close this connection, or another one)."""
        t = self._track
        if t is not None and (self._buf or t.buffered) and not self._closing:
            self.listener._guard.node.buffered(t, len(self._buf))

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        t = self._track
        if t is not None:
            t.active = True
        buf = self._buf
        if buf or self._paused or self._write_blocked:
            buf += data
            self._process_buffer()
            return
        pos = self._parse(data)  # the common case: parse the chunk where it is
        if pos < 0:
            return
        if pos < len(data):
            buf += memoryview(data)[pos:]
            self._account()
        self._arm_partial_timer(bool(self._buf) and self._reading)

    def _process_buffer(self) -> None:
        buf = self._buf
        pos = self._parse(buf)
        if pos < 0:
            return
        del buf[:pos]
        self._account()
        self._arm_partial_timer(bool(self._buf) and self._reading)

    def _parse(self, view: bytes | bytearray) -> int:
        """Dispatch the whole frames in `view` while fewer than `max_in_flight` await their
        answer; returns how many bytes were used, -1 once the connection is closing."""
        n = len(view)
        pos = 0
        lst = self.listener
        max_frame = lst._max_frame
        limit = lst._max_in_flight
        queue = self._queue
        while n - pos >= 4:
            if self._write_blocked:
                break
            if len(queue) >= limit:
                if not self._paused:
                    self._paused = True  # back-pressure: stop reading until answers go out
                    self._update_reading()
                break
            (size,) = _SIZE.unpack_from(view, pos)
            if size < 0 or size > max_frame:
                self._bad_input("frame_size", f"frame size {size} outside 0..{max_frame} "
                                              "(socket.request.max.bytes)")
                return -1
            end = pos + 4 + size
            if end > n:
                break
            body = bytes(view[pos + 4:end])
            pos = end
            if not self._dispatch(body):
                return -1
        return pos

    def _arm_partial_timer(self, partial: bool) -> None:
        if not partial:
            if self._partial_timer is not None:
                self._partial_timer.cancel()
                self._partial_timer = None
        elif self._partial_timer is None:
            self._partial_timer = asyncio.get_running_loop().call_later(
                self.listener._partial_timeout, self._partial_timed_out)

    def _partial_timed_out(self) -> None:
        self._partial_timer = None
        if self._buf and not self._closing:
            self._bad_input("incomplete_frame", "peer went silent mid-frame for "
                            f"{self.listener._partial_timeout:g} s")

    def _dispatch(self, body: bytes) -> bool:
        """Hand one frame to the handler; False once the connection is closing."""
        slot = _Pending()
        self._queue.append(slot)
        try:
            result = self.listener._handler(body, self.peer)
        except Exception as exc:
            self._failed(slot, exc)
            return not self._closing
        if result is None or isinstance(result, bytes | bytearray):
            self._settle(slot, bytes(result) if result is not None else None)
            return not self._closing
        if isinstance(result, DeferredReply):
            result.bind(lambda body: self._settle(slot, body))
            return not self._closing
        fut = asyncio.ensure_future(result)
        fut.add_done_callback(lambda f: self._future_done(slot, f))
        return True

    def _future_done(self, slot: _Pending, fut: asyncio.Future[bytes | None]) -> None:
        if fut.cancelled():
            self._failed(slot, asyncio.CancelledError())
            return
        exc = fut.exception()
        if exc is not None:
            self._failed(slot, exc)
            return
        self._settle(slot, fut.result())

    def _failed(self, slot: _Pending, exc: BaseException) -> None:
        if self._closing:
            return
        slot.done, slot.body = True, None
        if isinstance(exc, BadRequest):
            self._reason = ("undecodable", str(exc))
        else:
            self._reason = ("handler_failed",
                            f"request handler failed: {type(exc).__name__}: {exc}")
        self._flush()

    def _settle(self, slot: _Pending, body: ReplyBody | None) -> None:
        if self._closing:
            return
        slot.done, slot.body = True, body
        if self._queue[0] is slot:
            self._flush()

    def _flush(self) -> None:
        queue = self._queue
        out: list[bytes | memoryview] = []
        parts = False
        while queue and queue[0].done:
            slot = queue.popleft()
            body = slot.body
            if body is None:
                self._write(out, parts)
                if self._reason is not None:
                    self.listener._bad_input(self.peer, *self._reason)
                else:
                    self.listener._bad_input(self.peer, "undecodable",
                                             "request could not be decoded")
                queue.clear()
                self.close()
                return
            if isinstance(body, tuple):
                out.append(_SIZE.pack(sum(map(len, body))))
                out += body
                parts = True
            else:
                out.append(_SIZE.pack(len(body)))
                out.append(body)
        self._write(out, parts)
        if self._paused and len(queue) < self.listener._max_in_flight:
            self._paused = False
            self._update_reading()
            if self._buf and not self._write_blocked:
                self._process_buffer()  # frames read before the pause

    def _write(self, out: list[bytes | memoryview], parts: bool) -> None:
        """Write the answers in `out`, in order: one joined write, except that with parts
        among them each large part is written as it is (no copy of a snapshot chunk)."""
        transport = self.transport
        if not out or transport is None:
            return
        t = self._track
        if t is not None:
            t.active = True
        if not parts:
            transport.write(b"".join(out))
            return
        run: list[bytes | memoryview] = []
        for piece in out:
            if len(piece) >= _WRITE_ALONE:
                if run:
                    transport.write(b"".join(run))
                    run = []
                transport.write(piece)
            else:
                run.append(piece)
        if run:
            transport.write(b"".join(run))

    def pause_writing(self) -> None:
        # the peer is not reading its answers: read (and so handle) nothing more from it
        self._write_blocked = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._update_reading()
        if self._buf and not self._paused and not self._closing:
            self._process_buffer()

    # ------------------------------------------------------------------ lending (leader lane)

    def lendable(self, pending: int) -> bool:
        """The connection can be lent (`lend`): open, reading, with nothing waiting to be
        written, and exactly `pending` requests awaiting their answer."""
        t = self.transport
        return (t is not None and not self._closing and not self._paused
                and not self._write_blocked and len(self._queue) == pending
                and not t.get_write_buffer_size() and t.get_extra_info("socket") is not None
                and not self.peer.tls)  # the lanes speak raw TCP: TLS stays in Python

    def lend(self) -> tuple[int, bytes]:
        """Lend the socket to another reader and writer (the leader's native lane): reading
        pauses, and the requests awaiting an answer are dropped (the borrower answers them).
        Returns the socket's descriptor, which stays this connection's, and the bytes read and
        not handled yet, which the borrower reads first."""
        t = self.transport
        assert t is not None
        self._reading = False
        t.pause_reading()
        self._queue.clear()
        self._arm_partial_timer(False)
        unread = bytes(self._buf)
        self._buf.clear()
        track = self._track
        if track is not None:
            track.lent = True  # in use, by the lane: never idle meanwhile
            self.listener._guard.node.buffered(track, 0)  # the lane holds those bytes now
        return t.get_extra_info("socket").fileno(), unread

    def give_back(self, unread: bytes, waiting: DeferredReply | None = None) -> None:
        """The socket back from `lend`: `waiting` is a request the borrower read and did not
        answer (it is answered first, through the reply), then `unread` is handled as if it
        had just arrived."""
        if waiting is not None:
            slot = _Pending()
            self._queue.append(slot)
            waiting.bind(lambda body: self._settle(slot, body))
        track = self._track
        if track is not None:
            track.lent = False
            track.active = True
        if self.transport is None or self._closing:
            return
        self._buf += unread
        self._update_reading()  # reading resumes (lend paused it)
        if self._buf:
            self._process_buffer()

    def _update_reading(self) -> None:
        want = not (self._paused or self._write_blocked)
        if want != self._reading and self.transport is not None and not self._closing:
            self._reading = want
            if want:
                self.transport.resume_reading()
            else:
                self.transport.pause_reading()


FrameServerConnection = _FrameServerProtocol
"""One accepted connection of a `FrameListener` (what `FrameListener.connection` returns)."""


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
        guard: ListenerGuard | None = None,
        tls: ssl.SSLContext | None = None,
        principal_of: Callable[[Any], str | None] | None = None,
        connection_ids: Iterator[int] | None = None,
    ) -> None:
        """`guard` admits the connections and holds the node-wide limits
        (`kraft.server.connection_limits`); by default, a guard of this listener's own with
        Kafka's defaults and `max_frame_bytes`. `tls`: serve TLS with this context (a
        connection is served once its handshake is done); `principal_of` maps a verified
        peer certificate (`getpeercert()`, None without one) to the connection's principal
        (None: refused). `connection_ids`: where the connections' ids come from (a
        sequence several listeners of a node share keeps them unique; default 1, 2, ...)."""
        self.host = host
        self.port = port
        self.name = name
        self._handler = handler
        self._max_frame = max_frame_bytes
        self._partial_timeout = partial_frame_timeout_s
        self._max_in_flight = max_in_flight
        self._guard = guard or ConnectionGuard(
            ConnectionLimits(max_frame_bytes=max_frame_bytes)).listener(name)
        self._tls = tls
        self._principal_of: Callable[[Any], str | None] = principal_of or (lambda _c: ANONYMOUS)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_FrameServerProtocol] = set()
        self._ids: Iterator[int] = connection_ids if connection_ids is not None \
            else itertools.count(1)
        self.connections_closed_for_bad_input = 0

    def connection(self, connection_id: int) -> _FrameServerProtocol | None:
        """The open connection of id `connection_id` (`Peer.connection_id`), None when it is
        closed."""
        for conn in self._connections:
            if conn.peer.connection_id == connection_id:
                return conn
        return None

    async def start(self) -> int:
        """Bind and listen; returns the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _FrameServerProtocol(self), self.host, self.port, reuse_address=True,
            ssl=self._tls, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._tls else None)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("event=listening listener=%s host=%s port=%d", self.name, self.host, self.port)
        return self.port

    async def stop(self) -> None:
        """Stop accepting and close every connection."""
        if self._server is not None:
            self._server.close()
        self._guard.stop()
        for conn in list(self._connections):
            conn.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def _bad_input(self, peer: PeerInfo, reason: str, detail: str) -> None:
        """A connection closed for bad input: counted by `reason` and logged, rate-limited."""
        self.connections_closed_for_bad_input += 1
        self._guard.node.bad_input.report(self.name, reason,
                                          f"{peer.host}:{peer.port} conn={peer.connection_id}",
                                          detail)


FrameCallback = Callable[["bytes | memoryview | BaseException"], None]
"""Called once with the response body (a memoryview for a large one, see `_LARGE_FRAME`), or
with the exception that ended the request."""

_LARGE_FRAME = 1 << 20
"""Answers at least this large are handed over without a copy when they fill the read buffer."""


class EarliestDeadline:
    """One loop timer for many deadlines: armed at the earliest deadline asked for so far and
    re-armed only for an earlier one, instead of a timer per deadline. When it fires,
    `callback` looks at what is due and asks again for the earliest deadline left."""

    __slots__ = ("_callback", "_handle", "at", "loop")

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self.at = math.inf
        """Loop time it fires at (inf: not armed)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The loop to arm on, set by the owner once it knows it (None: the running loop,
        which costs a getpid system call per lookup on Python 3.11)."""

    def ask(self, deadline: float) -> None:
        """Fire at `deadline` at the latest."""
        if deadline < self.at:
            handle = (self.loop or asyncio.get_running_loop()).call_at(deadline, self._fire)
            if self._handle is not None:
                self._handle.cancel()
            self._handle, self.at = handle, deadline

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self.at = None, math.inf

    def _fire(self) -> None:
        self._handle, self.at = None, math.inf
        self._callback()


class _Waiter:
    """A request of a `FrameConnection` waiting for its response."""

    __slots__ = ("callback", "deadline", "timeout_s")

    def __init__(self, callback: FrameCallback, deadline: float, timeout_s: float) -> None:
        self.callback = callback
        self.deadline = deadline
        self.timeout_s = timeout_s


class _FrameClientProtocol(asyncio.Protocol):
    """The read side of a `FrameConnection`."""

    def __init__(self, conn: FrameConnection) -> None:
        self.conn = conn
        self._buf = ReadBuffer()

    @property
    def idle(self) -> bool:
        """No part of a frame is buffered."""
        return not self._buf

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn._fail(PeerClosedError(
            "connection closed by the peer" + (f": {exc}" if exc is not None else "")))

    def data_received(self, data: bytes) -> None:
        view = self._buf.feed(data)
        n = len(view)
        pos = 0
        conn = self.conn
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(view, pos)
            if size < 0 or size > conn._max_frame:
                conn._fail(ConnectionClosedError(f"response frame size {size} out of range"))
                return
            end = pos + 4 + size
            if end > n:
                break
            body: bytes | memoryview
            if size >= _LARGE_FRAME and pos == 0 and end == n and view is self._buf.buf:
                # a large answer (a snapshot chunk) that fills the buffer: hand the buffer over
                # as it is instead of copying megabytes; the next frame starts a new buffer
                body = memoryview(view)[4:end]
                self._buf.buf = bytearray()
            else:
                body = bytes(view[pos + 4:end])
            pos = end
            if not conn._deliver(body):
                return
        self._buf.consumed(view, pos)


class FrameConnection:
    """One client TCP connection: send request frames, receive response frames in order.

    Responses are matched first-in first-out, which is what a Kafka server guarantees per
    connection. Any failure (timeout, reset, bad size) closes the connection and fails every
    request in flight with `ConnectionClosedError`: after a timeout the stream position is
    unknown, so the only safe move is a new connection (Kafka's NetworkClient does the same).
    `send` takes a callback and costs no task per request; `request` is its awaitable form.
    """

    def __init__(self, host: str, port: int, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        """`tls`: speak TLS with the context it gives at `open` (the peer's certificate is
        verified, and its name checked against `host` when the context says so)."""
        self.host = host
        self.port = port
        self._tls = tls
        self._max_frame = max_frame_bytes
        self._transport: asyncio.Transport | None = None
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._timer = EarliestDeadline(self._check_deadlines)
        """At or before the earliest deadline in flight: one timer per connection."""
        self.closed = False
        # The loop the connection was opened on. Kept: asyncio.get_running_loop() costs a
        # getpid system call on every call (Python 3.11 checks for a fork), and `send` runs
        # for every request.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._protocol: _FrameClientProtocol | None = None
        self.lent = False
        """The socket is lent (`lend`): another reader and writer uses it until `give_back`."""

    async def open(self, timeout_s: float) -> None:
        """Connect within `timeout_s`; raises OSError/TimeoutError."""
        loop = self._loop = self._timer.loop = asyncio.get_running_loop()
        if self._tls is not None:
            ctx = self._tls()
            connect = loop.create_connection(
                lambda: _FrameClientProtocol(self), self.host, self.port, ssl=ctx,
                server_hostname=self.host if ctx.check_hostname else None,
                ssl_handshake_timeout=timeout_s)
        else:
            connect = loop.create_connection(lambda: _FrameClientProtocol(self), self.host,
                                             self.port)
        transport, protocol = await asyncio.wait_for(connect, timeout_s)
        self._transport = transport
        self._protocol = protocol
        if self.closed:  # closed while connecting
            transport.close()

    def _deliver(self, body: bytes | memoryview) -> bool:
        if not self._waiters:
            self._fail(ConnectionClosedError("response without a request"))
            return False
        waiter = self._waiters.popleft()
        waiter.callback(body)
        return not self.closed

    def _fail(self, exc: BaseException) -> None:
        self.closed = True
        self._timer.cancel()
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        waiters, self._waiters = self._waiters, collections.deque()
        kind = PeerClosedError if isinstance(exc, PeerClosedError) else ConnectionClosedError
        for waiter in waiters:
            waiter.callback(kind(f"{self.host}:{self.port}: {exc}"))

    def _check_deadlines(self) -> None:
        if self.closed or not self._waiters or self._loop is None:
            return
        now = self._loop.time()
        for waiter in self._waiters:
            if waiter.deadline <= now:
                self._timed_out(waiter)
                return
        self._timer.ask(min(w.deadline for w in self._waiters))

    def _timed_out(self, waiter: _Waiter) -> None:
        exc = TimeoutError(f"request timed out after {waiter.timeout_s:.3f}s")
        self._waiters = collections.deque(w for w in self._waiters if w is not waiter)
        self._fail(exc)  # everything else in flight: ConnectionClosedError
        waiter.callback(exc)

    def lend(self) -> int | None:
        """Lend the socket to another reader and writer (the follower's native lane), when
        exactly one request is in flight and nothing is buffered either way; None otherwise.

        Reading pauses, and the request's waiter and its deadline are dropped: the borrower
        reads that request's answer and answers for it. Returns the socket's descriptor, which
        stays this connection's (the borrower does not close it). Until `give_back`, `send`
        fails at once and nothing is read here.
        """
        t, proto = self._transport, self._protocol
        if self._tls is not None:
            return None  # the lane speaks raw TCP: a TLS connection stays on the Python path
        if (self.closed or self.lent or t is None or proto is None or len(self._waiters) != 1
                or not proto.idle or t.get_write_buffer_size()):
            return None
        sock = t.get_extra_info("socket")
        if sock is None:
            return None
        t.pause_reading()
        self._waiters.clear()
        self._timer.cancel()
        self.lent = True
        return int(sock.fileno())

    def give_back(self, unread: bytes, callback: FrameCallback | None, timeout_s: float) -> None:
        """The borrower is done with the socket. `callback` (if any) waits for the answer to
        the request the borrower left in flight, within `timeout_s`; `unread`, the bytes it
        received and did not take, are taken as received here; and reading resumes."""
        self.lent = False
        if callback is not None:
            if self.closed or self._loop is None:
                callback(ConnectionClosedError(f"{self.host}:{self.port}: not connected"))
            else:
                deadline = self._loop.time() + timeout_s
                self._waiters.append(_Waiter(callback, deadline, timeout_s))
                self._timer.ask(deadline)
        if self.closed or self._transport is None or self._protocol is None:
            return
        if unread:
            self._protocol.data_received(unread)
        if not self.closed and self._transport is not None:
            self._transport.resume_reading()

    def send(self, frame: bytes, timeout_s: float, callback: FrameCallback) -> None:
        """Send one frame; `callback` gets its response body, or the exception that ended
        it (a timeout closes the connection, failing everything in flight)."""
        if self.closed or self._transport is None or self._loop is None:
            callback(ConnectionClosedError(f"{self.host}:{self.port}: not connected"))
            return
        if self.lent:
            callback(ConnectionClosedError(f"{self.host}:{self.port}: the connection is lent "
                                           "to the follower's lane"))
            return
        deadline = self._loop.time() + timeout_s
        self._waiters.append(_Waiter(callback, deadline, timeout_s))
        self._timer.ask(deadline)
        self._transport.write(_SIZE.pack(len(frame)) + frame)

    async def request(self, frame: bytes, timeout_s: float, expect_response: bool = True) -> bytes:
        """Send one frame and wait for its response; on timeout the connection is closed."""
        if self.closed or self._transport is None:
            raise ConnectionClosedError(f"{self.host}:{self.port}: not connected")
        if self.lent:
            raise ConnectionClosedError(f"{self.host}:{self.port}: the connection is lent to "
                                        "the follower's lane")
        if not expect_response:
            self._transport.write(_SIZE.pack(len(frame)) + frame)
            return b""
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def done(result: bytes | memoryview | BaseException) -> None:
            if waiter.done():
                return
            if isinstance(result, BaseException):
                waiter.set_exception(result)
            else:
                waiter.set_result(bytes(result))

        self.send(frame, timeout_s, done)
        return await waiter

    def close(self) -> None:
        """Close the connection and fail whatever is in flight."""
        self._fail(ConnectionClosedError("closed by client"))

    def peer_closed(self) -> None:
        """The peer closed the connection while it was lent (the borrower saw it): fail what
        is in flight as the read side would have (`PeerClosedError`), and close."""
        self._fail(PeerClosedError("connection closed by the peer"))
