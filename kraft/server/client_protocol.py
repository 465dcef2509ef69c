"""The binary KV client protocol: length-prefixed frames, many requests in flight per connection.

One HTTP request per write costs more CPU than the write itself. This protocol lets a client
pipeline any number of operations on one TCP connection; the server hands them to the node as
they arrive (so one `Append` batch carries many of them) and answers each once it is committed
and applied, in completion order, tagged with the request id. Answers produced in the same
event-loop turn leave in one socket write.

The frames, ops and statuses are `kraft.protocol.kv_wire`'s.

A key above `kraft.statemachine.kv.MAX_KEY_BYTES` (any op) or a PUT value above
`MAX_VALUE_BYTES` is answered ERROR, naming the limit, and nothing of it is proposed. A frame
longer than MAX_FRAME (or `socket.request.max.bytes` when that is lower) or shorter than a
request head closes the connection; the listener's connections are admitted, closed when idle
and their unfinished frames held to the node's budget as the controller listener's
(`kraft.server.connection_limits`).

With the node's KV security settings on (`kraft.server.client_auth`: the HTTP port's TLS and
credentials), the port speaks TLS and each op needs the scope it asks for; AUTH frames carry
tokens.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Protocol, cast

from kraft.protocol.kv_wire import (
    AUTH_BEARER,
    ERROR,
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
    encode_response,
)
from kraft.server.client_auth import ClientAuth, Session
from kraft.server.connection_limits import ConnectionGuard, ListenerGuard, Tracked
from kraft.server.kv_api import NotLeaderError, OutcomeUnknownError
from kraft.server.writes import Completion
from kraft.statemachine.kv import (
    FORMAT_VERSION,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    KVResult,
    encode_delete,
    key_limit_error,
    value_limit_error,
)
from kraft.statemachine.kv import OP_PUT as KV_OP_PUT

log = logging.getLogger("kraft.server.client_protocol")


class ClientHost(Protocol):
    """What the binary client protocol uses of the KV front end (`kraft.server.kv_front`
    `KvFront`): its writes, reads and stale reads."""

    def submit_many(self, writes: list[tuple[bytes, Completion]]) -> None:
        """Start replicating each value; its completion gets the result once applied (raises
        `NotLeaderError` when this node does not lead)."""

    async def kv_get(self, key: str) -> bytes | None:
        """A linearizable read of `key`."""

    def kv_get_stale(self, key: str) -> bytes | None:
        """`key` as this node's state machine has it now."""


class ClientNode(Protocol):
    """What the binary client protocol uses of the node itself: the follower lane's catch-up
    before a local read, and the count of refused requests."""

    def lane_catch_up(self) -> asyncio.Future[None] | None:
        """A future done once the follower lane's progress is applied, None when none waits."""

    def request_refused(self) -> None:
        """A request was refused for a key or value above its limit (counted)."""

MAX_FRAME = 16 * 1024 * 1024
HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS handshake not done in this long closes the connection (the controller listener's)."""
MAX_IN_FLIGHT = 16384
"""Requests of one connection waiting for their answer before the server stops reading it."""


_PUT_CMD = struct.Struct(">BBI")  # the KV command's format version, op and key length
_U32 = struct.Struct(">I")
_PACK_ANSWER = RESPONSE_HEAD.pack
_ANSWER_LENGTH = RESPONSE_HEAD.size - 4  # an answer without payload


class _WriteReply:
    """Answers one PUT or DELETE when the node completes it (the node's `Completion`): the
    answer frame is queued straight from `set_result`, without a future and a loop callback
    per write."""

    __slots__ = ("_conn", "_done", "_op", "_rid")

    def __init__(self, conn: ClientProtocol, rid: int, op: int) -> None:
        self._conn = conn
        self._rid = rid
        self._op = op
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: object, /) -> None:
        self._done = True
        pair: tuple[int, object] = result  # type: ignore[assignment]  # not cast(): per write
        offset, outcome = pair
        status = OK
        if self._op == OP_DELETE and isinstance(outcome, KVResult) and not outcome.ok:
            status = NOT_FOUND
        # encode_response(rid, status, offset), packed here: this runs for every write
        self._conn._reply(_PACK_ANSWER(_ANSWER_LENGTH, self._rid, status, offset, -1))

    def set_exception(self, exc: BaseException, /) -> None:
        self._done = True
        self._conn._reply(self._conn._error_frame(self._rid, exc))


class ClientProtocol(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(self, kv: ClientHost, node: ClientNode,
                 connections: set[ClientProtocol] | None = None,
                 dirty: list[ClientProtocol] | None = None,
                 guard: ListenerGuard | None = None, auth: ClientAuth | None = None) -> None:
        self.kv = kv
        self.node = node
        self._auth = auth
        self._session: Session | None = None
        """This connection's credential when the port authenticates (None: it does not)."""
        self._guard = guard or ConnectionGuard().listener("client")
        self._max_frame = min(MAX_FRAME, self._guard.max_frame_bytes)
        self._track: Tracked | None = None
        self._connections = connections if connections is not None else set()
        self._dirty = dirty if dirty is not None else []
        self.transport: asyncio.Transport | None = None
        # Kept from connection_made: asyncio.get_running_loop() costs a getpid system call on
        # every call (Python 3.11 checks for a fork), and `_reply` runs for every request.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._buf = bytearray()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._in_flight = 0
        self._read_paused = False
        self._write_blocked = False
        self._resume_scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername") or ("?", 0)
        self._track = self._guard.admit(str(peer[0]), int(peer[1]), self._drop,
                                        self._busy)
        if self._track is None:  # over a connection limit: closed at accept
            self.transport.close()
            self.transport = None
            return
        self._connections.add(self)
        auth = self._auth
        if auth is not None and auth.authenticates:
            self._session = auth.session(transport.get_extra_info("ssl_object"))
        # (an open port has no session: any AUTH is answered OK, every op allowed)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._connections.discard(self)
        self._guard.release(self._track)

    def _busy(self) -> bool:
        return self._in_flight > 0

    def _drop(self) -> None:
        """Closed by the listener's guard (a limit): what is buffered goes at once."""
        self._buf = bytearray()
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def _account(self) -> None:
        t = self._track
        if t is not None and (self._buf or t.buffered) and self.transport is not None:
            self._guard.node.buffered(t, len(self._buf))

    def data_received(self, data: bytes) -> None:
        t = self._track
        if t is None or self.transport is None:
            return
        t.active = True
        if self._session is not None:
            self._session.check()
        buf = self._buf
        if buf or self._read_paused:
            buf += data
            if not self._read_paused and len(buf) >= 4:
                length = int.from_bytes(buf[:4], "big")
                if REQUEST_HEAD.size <= length <= self._max_frame and len(buf) < 4 + length:
                    self._account()  # the frame is not whole yet: nothing to parse
                    return
            self._parse_buffer()
            return
        pos = self._parse(data)  # the common case: parse the chunk where it is
        if 0 <= pos < len(data):
            buf += memoryview(data)[pos:]
            self._account()

    def _parse_buffer(self) -> None:
        pos = self._parse(self._buf)
        if pos > 0:
            del self._buf[:pos]
        if pos >= 0:
            self._account()

    def _parse(self, view: bytes | bytearray) -> int:
        """Handle the whole request frames in `view` while fewer than MAX_IN_FLIGHT wait for
        their answer and the peer reads its answers; returns the bytes used (-1: closed).

        The writes among them go to the node together, once the frames are parsed (one
        leadership check and one linger decision for all of them): nothing runs on the loop
        between two frames of one chunk, so they reach the log in the same order either way.
        A frame's length and head are read with one struct call, and keys and values are
        sliced from bytes (a buffered bytearray is copied once, whole, rather than per slice)."""
        if type(view) is not bytes:
            view = bytes(view)
        pos = 0
        n = len(view)
        head = REQUEST_FRAME_HEAD.unpack_from
        head_size = REQUEST_FRAME_HEAD.size
        put_head = _PUT_CMD.pack
        u32 = _U32.pack
        writes: list[tuple[bytes, Completion]] = []
        while n - pos >= 4:
            if self._in_flight >= MAX_IN_FLIGHT or self._write_blocked:
                self._pause_reading()
                break
            if n - pos >= head_size:
                length, request_id, op, klen = head(view, pos)
            else:  # not a whole frame, unless its length is already wrong
                length, request_id, op, klen = int.from_bytes(view[pos:pos + 4], "big"), 0, 0, 0
            if length > self._max_frame or length < REQUEST_HEAD.size:
                self._submit(writes)  # the whole frames before it were taken
                detail = (f"frame length {length} outside {REQUEST_HEAD.size}..{self._max_frame}"
                          " (socket.request.max.bytes)")
                if self.transport is not None and n - pos >= head_size:
                    self._flush()  # the answers queued before it go first
                    # the client learns why before the connection closes (the close flushes)
                    self.transport.write(encode_response(request_id, ERROR,
                                                         payload=detail.encode()))
                t = self._track
                if t is not None:
                    t.close("frame_size", detail)
                return -1
            end = pos + 4 + length
            if end > n:
                break
            kstart = pos + head_size
            kend = kstart + klen
            pos = end
            self._in_flight += 1  # every request gets exactly one `_reply`
            if kend > end:
                self._reply(encode_response(request_id, ERROR, payload=b"key overruns the frame"))
                continue
            if klen > MAX_KEY_BYTES or (op == OP_PUT and end - kend > MAX_VALUE_BYTES):
                self._refuse(request_id, klen, end - kend if op == OP_PUT else 0)
                continue
            if op == OP_AUTH:
                if not self._login(request_id, view[kstart:kend], view[kend:end], writes):
                    return -1
                continue
            if self._session is not None:
                refusal = self._session.refusal(op)
                if refusal is not None:
                    self._refused(request_id, *refusal)
                    continue
            key = view[kstart:kend]
            if not key.isascii():
                try:
                    key.decode()
                except UnicodeDecodeError:
                    self._reply(encode_response(request_id, ERROR, payload=b"key is not UTF-8"))
                    continue
            if op == OP_PUT:
                # the KV PUT command (kraft.statemachine.kv.encode_put) built from the frame
                writes.append((put_head(FORMAT_VERSION, KV_OP_PUT, klen) + key
                               + u32(end - kend) + view[kend:end],
                               _WriteReply(self, request_id, op)))
            elif op == OP_DELETE:
                writes.append((encode_delete(key.decode()), _WriteReply(self, request_id, op)))
            else:
                self._handle(request_id, op, key)
        self._submit(writes)
        return pos

    def _login(self, request_id: int, mechanism: bytes, token: bytes,
               writes: list[tuple[bytes, Completion]]) -> bool:
        """An AUTH frame: answered OK with who the connection is now, or UNAUTHENTICATED and
        the connection closed (False: the caller stops reading; the frames before it were
        taken and are submitted first)."""
        session = self._session
        why: str | None
        if mechanism != AUTH_BEARER.encode():
            why = f"unknown AUTH mechanism {mechanism[:32]!r} (the one mechanism is bearer)"
        else:
            why = session.login(token) if session is not None else None
        if why is None:
            who = f"{session.who} {session.scope.label}" if session is not None and \
                session.scope is not None else "anonymous admin"
            self._reply(encode_response(request_id, OK, payload=who.encode()))
            return True
        self._submit(writes)
        writes.clear()
        self._in_flight -= 1  # answered here, written before the close
        self._flush()
        t, transport = self._track, self.transport
        if transport is not None:
            transport.write(encode_response(request_id, UNAUTHENTICATED, payload=why.encode()))
        if t is not None:
            t.close("auth_failed", why)
        return False

    def _refused(self, request_id: int, status: int, why: str) -> None:
        """Answer an op the connection's credential does not allow (nothing of it is read
        or proposed)."""
        t = self._track
        if t is not None:
            self._guard.node.bad_requests.report(
                self._guard.name, "unauthenticated" if status == UNAUTHENTICATED else "forbidden",
                f"{t.host}:{t.port}", why)
        self._reply(encode_response(request_id, status, payload=why.encode()))

    def _refuse(self, request_id: int, key_bytes: int, value_bytes: int) -> None:
        """Answer ERROR to a request whose key or value is above its limit (nothing of it is
        proposed)."""
        why = key_limit_error(key_bytes) or value_limit_error(value_bytes) or "refused"
        log.debug("event=client_request_refused id=%d error=%r", request_id, why)
        self.node.request_refused()
        self._reply(encode_response(request_id, ERROR, payload=why.encode()))

    def _submit(self, writes: list[tuple[bytes, Completion]]) -> None:
        if not writes:
            return
        try:
            self.kv.submit_many(writes)
        except NotLeaderError as exc:
            for _, reply in writes:
                reply.set_exception(exc)

    def _pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()

    def _maybe_resume(self) -> None:
        if (self._read_paused and not self._resume_scheduled and not self._write_blocked
                and self._in_flight < MAX_IN_FLIGHT // 2):
            self._resume_scheduled = True  # not from inside a parse: on the next loop turn
            asyncio.get_running_loop().call_soon(self._resume)

    def _resume(self) -> None:
        self._resume_scheduled = False
        if self.transport is None or self._write_blocked or self._in_flight >= MAX_IN_FLIGHT // 2:
            return
        self._read_paused = False
        self.transport.resume_reading()
        if self._buf:
            self._parse_buffer()

    # ------------------------------------------------------------------ lending (leader lane)

    def lendable(self) -> bool:
        """The connection can be lent (`lend`): open, reading, with no request in flight,
        nothing read and not handled (what the lane handed back waits for this connection's
        own turn), and nothing waiting to be written."""
        t = self.transport
        return (self._auth is None and t is not None and not t.is_closing()
                and not self._in_flight and not self._out
                and not self._buf and not self._read_paused and not self._write_blocked
                and not t.get_write_buffer_size() and t.get_extra_info("socket") is not None)

    def lend(self) -> tuple[int, bytes]:
        """Lend the socket to the leader's native lane, which reads the PUTs and answers them:
        reading pauses. Returns the descriptor (still this connection's) and the bytes read
        and not handled yet, which the lane reads first."""
        t = self.transport
        assert t is not None
        self._read_paused = True
        t.pause_reading()
        unread = bytes(self._buf)
        self._buf.clear()
        track = self._track
        if track is not None:
            track.lent = True  # in use, by the lane: never idle meanwhile
            self._guard.node.buffered(track, 0)  # the lane holds those bytes now
        return t.get_extra_info("socket").fileno(), unread

    def give_back(self, unread: bytes, pending: list[tuple[int, int]]) -> list[Completion]:
        """The socket back from `lend`: `pending` are the (request id, offset) of PUTs the lane
        wrote and did not answer; their completions are returned, for the node to complete
        once they are applied. Then `unread` is handled as if it had just arrived."""
        replies: list[Completion] = []
        for rid, _offset in pending:
            self._in_flight += 1  # every request gets exactly one `_reply`
            replies.append(_WriteReply(self, rid, OP_PUT))
        self._buf += unread
        self._read_paused = False
        track = self._track
        if track is not None:
            track.lent = False
            track.active = True
        t = self.transport
        if t is not None and not t.is_closing():
            t.resume_reading()
            if self._buf:
                # on the next loop turn: after the core took the lane's last report, so that
                # a read among these bytes sees every write the lane answered
                (self._loop or asyncio.get_running_loop()).call_soon(self._parse_buffer)
        return replies

    def pause_writing(self) -> None:
        # the client does not read its answers: take no more requests from it meanwhile
        self._write_blocked = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._maybe_resume()

    def _handle(self, request_id: int, op: int, key: bytes) -> None:
        """A read or an unknown op (`_parse` takes the writes)."""
        kv, node = self.kv, self.node
        try:
            if op == OP_GET:
                fut = asyncio.ensure_future(kv.kv_get(key.decode()))
                fut.add_done_callback(lambda f: self._done_get(request_id, f))
                return
            if op == OP_GET_STALE:
                wait = node.lane_catch_up()
                if wait is not None:  # a follower's lane took answers its core has not seen
                    wait.add_done_callback(lambda _f: self._stale(request_id, key))
                    return
                self._stale(request_id, key)
                return
            self._reply(encode_response(request_id, ERROR, payload=f"unknown op {op}".encode()))
        except NotLeaderError as exc:
            self._reply(self._error_frame(request_id, exc))

    def _stale(self, request_id: int, key: bytes) -> None:
        got = self.kv.kv_get_stale(key.decode())
        self._reply(encode_response(request_id, OK if got is not None else NOT_FOUND,
                                    payload=got or b""))

    def _error_frame(self, request_id: int, exc: BaseException) -> bytes:
        if isinstance(exc, NotLeaderError):
            return encode_response(request_id, NOT_LEADER, leader_id=exc.leader_id,
                                   payload=(exc.leader_http or "").encode())
        if isinstance(exc, OutcomeUnknownError | TimeoutError | asyncio.CancelledError):
            return encode_response(request_id, UNKNOWN_OUTCOME, payload=str(exc).encode())
        return encode_response(request_id, ERROR, payload=str(exc).encode())

    def _done_get(self, request_id: int, fut: asyncio.Future[bytes | None]) -> None:
        if fut.cancelled():
            self._reply(encode_response(request_id, UNKNOWN_OUTCOME))
            return
        exc = fut.exception()
        if exc is not None:
            self._reply(self._error_frame(request_id, exc))
            return
        got = fut.result()
        self._reply(encode_response(request_id, OK if got is not None else NOT_FOUND,
                                    payload=got or b""))

    def _reply(self, frame: bytes) -> None:
        self._in_flight -= 1
        if self._read_paused:
            self._maybe_resume()
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._dirty.append(self)  # `ClientServer.flush` may send it sooner
            (self._loop or asyncio.get_running_loop()).call_soon(self._flush)

    def _flush(self) -> None:
        if not self._flush_scheduled:
            return
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))
            t = self._track
            if t is not None:
                t.active = True


class ClientServer:
    """The listener of the binary client protocol."""

    def __init__(self, kv: ClientHost, node: ClientNode, host: str, port: int,
                 guard: ListenerGuard | None = None, auth: ClientAuth | None = None) -> None:
        """`auth`: TLS and credentials (`ClientAuth.for_settings`); None: plaintext, open."""
        self.kv = kv
        self.auth = auth
        self.node = node
        self.host = host
        self.port = port
        self._guard = guard or ConnectionGuard().listener("client")
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[ClientProtocol] = set()
        self._dirty: list[ClientProtocol] = []

    @property
    def connections(self) -> set[ClientProtocol]:
        """The open connections (the node lends the one open to its leader's lane)."""
        return self._connections

    def flush(self) -> None:
        """Send every answer queued so far now, one write per connection (the node calls
        this once the effects of an event are carried out, after its followers' answers)."""
        dirty = self._dirty  # shared with the connections: emptied in place
        while dirty:
            dirty.pop()._flush()

    async def start(self) -> None:
        """Start listening."""
        loop = asyncio.get_running_loop()
        def protocol() -> ClientProtocol:
            return ClientProtocol(self.kv, self.node, self._connections, self._dirty,
                                  self._guard, self.auth)

        auth = self.auth
        tls = auth.tls.server_context if auth is not None and auth.tls is not None else None
        self._server = await loop.create_server(
            protocol, self.host, self.port, reuse_address=True, ssl=tls,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls is not None else None)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("event=client_listener_started host=%s port=%d %s", self.host, self.port,
                 auth.describe() if auth is not None else "tls=off auth=off")
        if auth is None or not auth.authenticates:
            log.warning("event=client_open host=%s port=%d detail=%r", self.host, self.port,
                        "the binary client port takes reads and writes from anyone who "
                        "reaches it: set kraft.http.auth.token.file or "
                        "kraft.http.ssl.client.auth, which hold for it as for the HTTP port "
                        "(docs/security.md)")

    async def stop(self) -> None:
        """Stop listening and close the connections."""
        self._guard.stop()
        if self._server is not None:
            self._server.close()
            for conn in list(self._connections):
                if conn.transport is not None:
                    conn.transport.close()
            await self._server.wait_closed()
