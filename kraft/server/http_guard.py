"""The admin HTTP server's connections held to the node's limits (`kraft.server.connection_limits`).

aiohttp reads a request's headers and body at the pace the client sends them, and keeps a
connection as long as the client does: one byte every few seconds holds a connection open for
ever. `HttpConnections` puts each connection aiohttp serves behind its listener's guard:

* admitted under the listener's cap (`kraft.http.max.connections`, `max.connections` when lower,
  and `max.connections.per.ip`), closed at accept past it;
* a request whose headers are not complete within `kraft.http.header.timeout.ms` of its first
  byte is closed (`header_timeout`);
* a request whose body has not all arrived within `kraft.http.body.timeout.ms` of its headers
  is closed (`body_timeout`): `client_max_size` bounds a body's size, this its duration;
* a connection idle (no request in progress, no byte received) for `connections.max.idle.ms`
  is closed.

Only aiohttp's public surface is used: the server's protocol factory (`ServerRunner.server`),
the transport's callbacks forwarded as they come, and a middleware that sees where each
request's headers end and its handler returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web

from kraft.server.connection_limits import ListenerGuard, Tracked


class _GuardedConnection(asyncio.Protocol):
    """One HTTP connection: aiohttp's protocol `inner` behind the guard's rules."""

    def __init__(self, owner: HttpConnections, inner: asyncio.Protocol) -> None:
        self._owner = owner
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self._track: Tracked | None = None
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._in_request = False
        self._during = 0  # bytes received while a request is handled

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        self._track = self._owner.guard.admit(str(peer[0]), int(peer[1]), self._drop,
                                              lambda: self._in_request)
        if self._track is None:  # over a connection limit: closed at accept
            transport.close()
            return
        self._owner.by_transport[transport] = self
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        if self._track is None:
            return
        self._owner.guard.release(self._track)
        self._owner.by_transport.pop(self._transport, None)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        t = self._track
        if t is None:
            return
        t.active = True
        if self._in_request:
            self._during += len(data)
        elif self._header_timer is None:
            self._arm_header_timer()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._track is not None else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # ------------------------------------------------------------------ timers

    def _arm_header_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._header_timer = loop.call_later(self._owner.header_timeout_s, self._header_late)

    def _header_late(self) -> None:
        self._header_timer = None
        if not self._in_request and self._track is not None:
            self._timed_out("header_timeout", "request headers not complete within "
                            f"{self._owner.header_timeout_s * 1000:g} ms of their first byte "
                            "(kraft.http.header.timeout.ms)")

    def _body_late(self, request: web.BaseRequest) -> None:
        self._body_timer = None
        if self._in_request and not request.content.is_eof() and self._track is not None:
            self._timed_out("body_timeout", "request body not complete within "
                            f"{self._owner.body_timeout_s * 1000:g} ms of its headers "
                            "(kraft.http.body.timeout.ms)")

    def _timed_out(self, reason: str, detail: str) -> None:
        """Answer 408 naming the deadline (no answer of this connection is under way: its
        request has not reached a handler, or its handler still waits for the body), then
        close."""
        if self._transport is not None and not self._transport.is_closing():
            body = (detail + "\n").encode()
            self._transport.write(
                b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        if self._track is not None:
            self._track.close(reason, detail)

    def _cancel_timers(self) -> None:
        for timer in (self._header_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._body_timer = None

    def _drop(self) -> None:
        if self._transport is not None:
            self._transport.close()  # aiohttp's handler is cancelled through connection_lost

    # ------------------------------------------------------------------ requests

    def request_started(self, request: web.BaseRequest) -> None:
        """The request's headers are in: its handler starts."""
        self._cancel_timers()
        self._in_request = True
        self._during = 0
        if request.body_exists and not request.content.is_eof():
            self._body_timer = asyncio.get_running_loop().call_later(
                self._owner.body_timeout_s, self._body_late, request)

    def request_done(self, request: web.BaseRequest) -> None:
        """The request's handler returned."""
        self._cancel_timers()
        self._in_request = False
        if self._track is not None:
            self._track.active = True
        if self._during > (request.content_length or 0):
            self._arm_header_timer()  # bytes of a next request came in meanwhile


class HttpConnections:
    """The protocol factory and middleware that put an aiohttp server's connections behind
    `guard` (see the module docstring)."""

    def __init__(self, guard: ListenerGuard) -> None:
        self.guard = guard
        limits = guard.node.limits
        self.header_timeout_s = limits.http_header_timeout_ms / 1000
        self.body_timeout_s = limits.http_body_timeout_ms / 1000
        self.by_transport: dict[Any, _GuardedConnection] = {}

    def factory(self, runner: web.BaseRunner) -> Callable[[], asyncio.Protocol]:
        """The protocol factory for `loop.create_server`, around `runner`'s."""
        def make() -> asyncio.Protocol:
            server = runner.server
            assert server is not None, "runner.setup() first"
            return _GuardedConnection(self, cast(asyncio.Protocol, server()))
        return make

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                         ) -> web.StreamResponse:
        """Marks where each request's handling starts and ends (headers in, handler done)."""
        conn = self.by_transport.get(request.transport)
        if conn is None:
            return await handler(request)
        conn.request_started(request)
        try:
            return await handler(request)
        finally:
            conn.request_done(request)
