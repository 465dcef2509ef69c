"""A fault-injecting TCP proxy for tests (this kernel has no netem).

`FaultProxy` listens on a local port and forwards every connection to a target. Faults apply
to the bytes in flight, per direction ("forward" = client → target, "backward" = target →
client):

* `delay(seconds)` holds every chunk that long before forwarding it (order is kept);
* `blackhole(direction)` reads and discards the bytes of one direction (a one-way partition:
  TCP stays up, nothing arrives, so requests time out as with dropped packets);
* `partition()` blackholes both directions and refuses to forward new connections' bytes;
* `drop_connections(probability)` resets a connection on a chunk with that probability;
* `sever()` closes every current connection at once;
* `heal()` removes every fault.

It runs on the caller's asyncio loop; `ProxyThread` runs a set of proxies on a private loop in
a background thread for synchronous tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

FORWARD = "forward"
BACKWARD = "backward"

T = TypeVar("T")


class FaultProxy:
    """One listening port forwarding to (target_host, target_port), with injectable faults."""

    def __init__(
        self, target_host: str, target_port: int, listen_host: str = "127.0.0.1",
        listen_port: int = 0, seed: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.delay_s = 0.0
        self.blackholed: set[str] = set()
        self.drop_probability = 0.0
        self._rng = random.Random(seed)
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections_accepted = 0

    async def start(self) -> int:
        """Start listening; returns the port (chosen by the OS when `listen_port` is 0)."""
        self._server = await asyncio.start_server(self._handle, self.listen_host, self.listen_port)
        self.listen_port = self._server.sockets[0].getsockname()[1]
        return self.listen_port

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
        self.sever()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    # ------------------------------------------------------------------ fault controls

    def delay(self, seconds: float) -> None:
        """Hold every chunk `seconds` before forwarding it."""
        self.delay_s = seconds

    def blackhole(self, direction: str) -> None:
        """Discard the bytes of one direction (FORWARD or BACKWARD)."""
        if direction not in (FORWARD, BACKWARD):
            raise ValueError(f"direction must be {FORWARD!r} or {BACKWARD!r}, got {direction!r}")
        self.blackholed.add(direction)

    def partition(self) -> None:
        """Discard everything both ways."""
        self.blackholed = {FORWARD, BACKWARD}

    def drop_connections(self, probability: float) -> None:
        """Reset a connection on each forwarded chunk with this probability."""
        self.drop_probability = probability

    def sever(self) -> None:
        """Close every current connection."""
        for writer in list(self._conns):
            writer.close()
        self._conns.clear()

    def heal(self) -> None:
        """Remove every fault (existing connections keep running)."""
        self.delay_s = 0.0
        self.blackholed = set()
        self.drop_probability = 0.0

    # ------------------------------------------------------------------ forwarding

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.close()
            return
        self._conns.update((writer, up_writer))
        a = asyncio.ensure_future(self._pump(reader, up_writer, FORWARD, writer))
        b = asyncio.ensure_future(self._pump(up_reader, writer, BACKWARD, up_writer))
        self._tasks.update((a, b))
        try:
            await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in (writer, up_writer):
                w.close()
                self._conns.discard(w)
            for t in (a, b):
                t.cancel()
                self._tasks.discard(t)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, direction: str,
        src_writer: asyncio.StreamWriter,
    ) -> None:
        # chunks are delivered in order by one sender task fed through a queue, so a delay
        # postpones delivery without reordering or stalling the reads
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def sender() -> None:
            while True:
                item = await queue.get()
                if item is None:
                    return
                due, data = item
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if direction in self.blackholed:
                    continue
                dst.write(data)
                await dst.drain()

        send_task = asyncio.ensure_future(sender())
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    break
                if self.drop_probability and self._rng.random() < self.drop_probability:
                    src_writer.transport.abort()
                    dst.transport.abort()
                    break
                if direction in self.blackholed:
                    continue
                await queue.put((loop.time() + self.delay_s, data))
                if send_task.done():
                    break
            await queue.put(None)
            with contextlib.suppress(Exception):
                await send_task
        except (ConnectionError, OSError):
            pass
        finally:
            send_task.cancel()


class ProxyThread:
    """Runs proxies on a private event loop in a daemon thread (for synchronous tests)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.proxies: list[FaultProxy] = []

    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run a coroutine function on the proxy loop and wait for its result."""

        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=30)

    def do(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call a plain function (a fault control) on the proxy loop."""

        async def run() -> None:
            fn(*args)

        self.call(run)

    def add(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1") -> FaultProxy:
        """Create and start a proxy; returns it (its `listen_port` is set)."""
        proxy = FaultProxy(target_host, target_port, listen_host)

        async def start() -> int:
            return await proxy.start()

        self.call(start)
        self.proxies.append(proxy)
        return proxy

    def close(self) -> None:
        """Stop every proxy and the loop."""
        for proxy in self.proxies:
            with contextlib.suppress(Exception):
                self.call(proxy.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
