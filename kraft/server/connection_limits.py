"""What connections from anyone may cost a node, and what happens past each limit.

Every listener of a node (the controller listener, the binary client listener, the admin HTTP
server) admits its connections through a `ListenerGuard`, and all of them share one
`ConnectionGuard`. The limits (`ConnectionLimits`, from the node's configuration; Kafka's
names and defaults where Kafka has the setting):

* `max.connections` (2147483647): the open connections of one listener. Kafka also counts
  per broker; here each listener counts its own, so that a flood of one listener does not
  lock the operator out of the others (`/healthz`, a PUT over HTTP). One more is closed at
  accept.
* `max.connections.per.ip` (2147483647) and `max.connections.per.ip.overrides` (`host:count`
  pairs, Kafka's format): the open connections of one listener from one address.
* `connections.max.idle.ms` (600000; negative: never): a connection with no byte read or
  written for that long, no request in flight and not lent to a native lane is closed (Kafka's
  idle expiry; a lent connection is in use even though this side sees none of its bytes).
* `socket.request.max.bytes` (104857600): the largest request frame any listener takes.
* `kraft.socket.buffered.max.bytes` (128 MiB): the bytes held, across every connection of the
  node, in frames not complete yet. A frame is buffered only as its bytes arrive (nothing is
  allocated from a size prefix); once the total is over the budget the connection holding the
  most is closed, so a handful of peers sending huge half frames cannot take the memory of
  the process while a client's small requests still go through.
* `kraft.http.max.connections` (1000), `kraft.http.header.timeout.ms` (10000) and
  `kraft.http.body.timeout.ms` (30000): the admin HTTP server's own cap on open connections,
  and the time a request's headers, then its body, have to arrive.

* The open-files budget (not a setting: `socket_budget` of the process's `RLIMIT_NOFILE`,
  whose soft limit `kraft run` raises to the hard one at start): the connections of every
  listener together; past the budget a new one is closed at accept (reason `open_files`), so
  a flood of connections leaves the node the descriptors its log, snapshots and peers need
  (a segment it could not open would stop it). A TLS connection counts once its handshake
  is done (a handshake has 10 s).

Each connection closed or refused for a limit, or for bad input (a listener's own reasons),
counts in `kraft_connections_closed_total{listener, reason}` and is logged, rate-limited by
`BadInputLog`: the first lines of a reason in a minute, then one line saying how many more
were not logged, so that a flood of bad connections cannot flood the log.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraft.server.metrics import CounterFamily, Registry

log = logging.getLogger("kraft.server.connections")

KAFKA_INT_MAX = 2_147_483_647
"""Kafka's default for `max.connections` and `max.connections.per.ip` (no limit)."""
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
"""Kafka's `socket.request.max.bytes` default."""
DEFAULT_BUFFERED_MAX_BYTES = 128 * 1024 * 1024
"""`kraft.socket.buffered.max.bytes`: above one largest frame (`socket.request.max.bytes`),
so a single largest request always fits, and well under a small pod's memory."""
FD_RESERVE_MIN, FD_RESERVE_MAX = 256, 4096
"""The file descriptors kept from the listeners (`socket_budget`): a quarter of the limit,
within these bounds."""
IDLE_SWEEPS = 4
"""A listener looks for idle connections every `connections.max.idle.ms / IDLE_SWEEPS`; one
is closed after that many looks in a row found it idle (so after 1 to 1.25 times the limit)."""


def raise_open_files_limit() -> int:
    """Raise the soft `RLIMIT_NOFILE` to the hard limit (as Go's runtime does for every
    program, etcd included); returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def socket_budget(open_files: int | None = None) -> int:
    """The sockets the listeners may hold together: `open_files` (default: the soft
    `RLIMIT_NOFILE` now) less a reserve for the log, snapshots, peers and the runtime."""
    if open_files is None:
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files == resource.RLIM_INFINITY:
        return KAFKA_INT_MAX
    reserve = min(FD_RESERVE_MAX, max(FD_RESERVE_MIN, open_files // 4))
    return max(16, open_files - reserve)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits of the module docstring (milliseconds, as in Kafka)."""

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_connections: int = KAFKA_INT_MAX
    max_connections_per_ip: int = KAFKA_INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    idle_ms: int = 600_000
    buffered_max_bytes: int = DEFAULT_BUFFERED_MAX_BYTES
    http_max_connections: int = 1000
    http_header_timeout_ms: int = 10_000
    http_body_timeout_ms: int = 30_000
    max_sockets: int = KAFKA_INT_MAX
    """The open-files budget of every listener's sockets together (`socket_budget`)."""

    @classmethod
    def from_config(cls, cfg: Any) -> ConnectionLimits:
        """The limits a node's configuration (`kraft.config.node.NodeConfig`) sets."""
        return cls(
            max_frame_bytes=cfg.socket_request_max_bytes,
            max_connections=cfg.max_connections,
            max_connections_per_ip=cfg.max_connections_per_ip,
            per_ip_overrides=dict(cfg.max_connections_per_ip_overrides),
            idle_ms=cfg.connections_max_idle_ms,
            buffered_max_bytes=cfg.socket_buffered_max_bytes,
            http_max_connections=cfg.http_max_connections,
            http_header_timeout_ms=cfg.http_header_timeout_ms,
            http_body_timeout_ms=cfg.http_body_timeout_ms,
            max_sockets=socket_budget(),
        )


@dataclass(slots=True)
class _Window:
    start: float
    logged: int = 0
    suppressed: int = 0
    level: int = logging.WARNING
    timer: asyncio.TimerHandle | None = None


class BadInputLog:
    """Counts every closed or refused connection by listener and reason, and logs the first
    `burst` of each (listener, reason) per `interval_s`; the rest of that interval are
    counted and summed up in one line at its end."""

    def __init__(self, counters: CounterFamily, burst: int = 10, interval_s: float = 60.0,
                 event: str = "connection_closed",
                 summary_event: str = "connections_closed_not_logged") -> None:
        self.counters = counters
        self.burst = burst
        self.interval_s = interval_s
        self.event = event
        """The `event=` of each line (`summary_event`: of the line that counts those left
        out): a guard logs closed connections, and refused requests on open ones, apart."""
        self.summary_event = summary_event
        self._windows: dict[tuple[str, str], _Window] = {}

    def report(self, listener: str, reason: str, peer: str, detail: str,
               level: int = logging.WARNING) -> None:
        """One connection closed or refused for `reason` (a short code: the metric's label);
        `detail` says what exactly was wrong. An expected close (idle) comes at a lower
        `level`, rate-limited all the same (idle connections are cheap to make by the
        thousand)."""
        self.counters.labels(listener, reason).inc()
        key = (listener, reason)
        now = time.monotonic()
        w = self._windows.get(key)
        if w is None or now - w.start >= self.interval_s:
            if w is not None:
                self._summary(key, w)
            w = self._windows[key] = _Window(now, level=level)
        if w.logged < self.burst:
            w.logged += 1
            log.log(level, "event=%s listener=%s reason=%s peer=%s detail=%s",
                    self.event, listener, reason, peer, detail)
            return
        w.suppressed += 1
        if w.timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop: the next report after the interval sums it up
                return
            w.timer = loop.call_later(max(0.0, w.start + self.interval_s - now),
                                      self._interval_over, key, w)

    def _interval_over(self, key: tuple[str, str], w: _Window) -> None:
        w.timer = None
        self._summary(key, w)
        if self._windows.get(key) is w:
            del self._windows[key]

    def _summary(self, key: tuple[str, str], w: _Window) -> None:
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        if w.suppressed:
            log.log(w.level, "event=%s listener=%s reason=%s suppressed=%d interval_s=%g",
                    self.summary_event, key[0], key[1], w.suppressed, self.interval_s)
            w.suppressed = 0

    def close(self) -> None:
        """Write the pending summaries now (the node stops)."""
        for key, w in list(self._windows.items()):
            self._summary(key, w)
        self._windows.clear()


class Tracked:
    """One admitted connection as its listener's guard sees it. The connection sets `active`
    on every byte read or written, `lent` while a native lane has its socket, and reports its
    buffered bytes with `ConnectionGuard.buffered`; `close` is how the guard closes it."""

    __slots__ = ("_busy", "_close", "active", "buffered", "host", "idle_sweeps", "lent",
                 "listener", "port")

    def __init__(self, listener: ListenerGuard, host: str, port: int,
                 close: Callable[[], None], busy: Callable[[], bool]) -> None:
        self.listener = listener
        self.host = host
        self.port = port
        self._close = close
        self._busy = busy
        self.active = True
        self.lent = False
        self.idle_sweeps = 0
        self.buffered = 0

    @property
    def peer(self) -> str:
        """host:port of the other end."""
        return f"{self.host}:{self.port}"

    def busy(self) -> bool:
        """In use although no byte moved: lent, or requests in flight."""
        return self.lent or self._busy()

    def close(self, reason: str, detail: str, level: int = logging.WARNING) -> None:
        """Close the connection for `reason` (counted and logged by the guard)."""
        self.listener.node.bad_input.report(self.listener.name, reason, self.peer, detail, level)
        self.listener.node.buffered(self, 0)
        self._close()


class ListenerGuard:
    """The connections of one listener: admitted under `max.connections` and
    `max.connections.per.ip`, closed once idle (see the module docstring)."""

    def __init__(self, node: ConnectionGuard, name: str, max_connections: int) -> None:
        self.node = node
        self.name = name
        self.max_connections = max_connections
        self.connections: set[Tracked] = set()
        self._per_ip: dict[str, int] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._stopped = False

    @property
    def max_frame_bytes(self) -> int:
        """`socket.request.max.bytes`."""
        return self.node.limits.max_frame_bytes

    def admit(self, host: str, port: int, close: Callable[[], None],
              busy: Callable[[], bool]) -> Tracked | None:
        """A connection just accepted: its `Tracked`, or None when it is over a limit (counted
        and logged here; the caller closes it at once)."""
        limits = self.node.limits
        peer = f"{host}:{port}"
        node = self.node
        if node.sockets >= limits.max_sockets:
            node.bad_input.report(self.name, "open_files", peer, node.budget_detail())
            return None
        if len(self.connections) >= self.max_connections:
            self.node.bad_input.report(
                self.name, "max_connections", peer,
                f"{len(self.connections)} connections open, the listener's limit "
                f"(max.connections) is {self.max_connections}")
            return None
        per_ip = limits.per_ip_overrides.get(host, limits.max_connections_per_ip)
        have = self._per_ip.get(host, 0)
        if have >= per_ip:
            self.node.bad_input.report(
                self.name, "max_connections_per_ip", peer,
                f"{have} connections open from {host}, the limit "
                f"(max.connections.per.ip) is {per_ip}")
            return None
        t = Tracked(self, host, port, close, busy)
        self.connections.add(t)
        node.sockets += 1
        self._per_ip[host] = have + 1
        self._start_sweeper()
        return t

    def release(self, t: Tracked | None) -> None:
        """The connection `t` is closed (connection_lost)."""
        if t is None or t not in self.connections:
            return
        self.connections.discard(t)
        self.node.sockets -= 1
        left = self._per_ip.get(t.host, 1) - 1
        if left > 0:
            self._per_ip[t.host] = left
        else:
            self._per_ip.pop(t.host, None)
        self.node.buffered(t, 0)

    def _period_s(self) -> float:
        return max(0.005, self.node.limits.idle_ms / 1000 / IDLE_SWEEPS)

    def _start_sweeper(self) -> None:
        if self._sweeper is not None or self._stopped or self.node.limits.idle_ms < 0:
            return
        self._sweeper = asyncio.get_running_loop().call_later(self._period_s(), self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        idle_ms = self.node.limits.idle_ms
        for t in list(self.connections):
            if t.active or t.busy():
                t.active = False
                t.idle_sweeps = 0
                continue
            t.idle_sweeps += 1
            if t.idle_sweeps >= IDLE_SWEEPS:
                t.close("idle", f"no byte read or written for {idle_ms} ms "
                                "(connections.max.idle.ms)", logging.INFO)
        if self.connections:
            self._start_sweeper()

    def stop(self) -> None:
        """The listener stops: no more sweeps."""
        self._stopped = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None


class ConnectionGuard:
    """The limits shared by every listener of a node: the budget of bytes buffered in frames
    not complete yet, and the log and counters of closed connections."""

    def __init__(self, limits: ConnectionLimits | None = None,
                 registry: Registry | None = None) -> None:
        self.limits = limits or ConnectionLimits()
        r = registry or Registry()
        self.closed = r.counter_family(
            "kraft_connections_closed_total",
            "Connections closed or refused at accept by a listener, by reason (a limit or bad "
            "input)", ("listener", "reason"))
        r.gauge_family("kraft_connections", "Open connections of each listener (max.connections "
                       "bounds each)", ("listener",),
                       lambda: {(name, ): float(len(g.connections))
                                for name, g in self.listeners.items()})
        r.gauge("kraft_socket_buffered_bytes",
                "Bytes held in request frames not complete yet, all connections "
                "(kraft.socket.buffered.max.bytes bounds it)", lambda: self.buffered_total)
        self.bad_input = BadInputLog(self.closed)
        self.bad_requests = BadInputLog(
            r.counter_family("kraft_bad_requests_total",
                             "Requests refused on a connection that stays open, by listener "
                             "and reason (e.g. a forwarded call that breaks a limit)",
                             ("listener", "reason")),
            event="bad_request", summary_event="bad_requests_not_logged")
        """Requests refused on an open connection (the connection's own close is `bad_input`'s)."""
        self.buffered_total = 0
        self.sockets = 0
        """The listeners' admitted connections now, all listeners together."""
        r.gauge("kraft_listener_sockets", "Connections the listeners hold, all together, "
                "against the open-files budget",
                lambda: float(self.sockets))
        self._holders: set[Tracked] = set()
        self.listeners: dict[str, ListenerGuard] = {}

    def budget_detail(self) -> str:
        """Why a connection is over the open-files budget (for the log line)."""
        return (f"{self.sockets} connections open on the listeners, the open-files budget is {self.limits.max_sockets} (RLIMIT_NOFILE less a "
                "reserve for the log, snapshots and peers)")

    def listener(self, name: str, max_connections: int | None = None) -> ListenerGuard:
        """The guard of listener `name` (made at its first use)."""
        g = self.listeners.get(name)
        if g is None:
            cap = self.limits.max_connections if max_connections is None else max_connections
            g = self.listeners[name] = ListenerGuard(self, name, cap)
        return g

    def buffered(self, t: Tracked, nbytes: int) -> None:
        """`t` now holds `nbytes` of frames not complete yet. Over the budget, the connection
        holding the most is closed (it may be `t`: the caller checks whether it is closing)."""
        delta = nbytes - t.buffered
        if not delta:
            return
        t.buffered = nbytes
        self.buffered_total += delta
        if nbytes:
            self._holders.add(t)
        else:
            self._holders.discard(t)
        budget = self.limits.buffered_max_bytes
        while self.buffered_total > budget and self._holders:
            victim = max(self._holders, key=lambda h: h.buffered)
            victim.close("buffered_bytes",
                         f"{victim.buffered} bytes of an unfinished frame held; all connections "
                         f"together held {self.buffered_total}, over the budget "
                         f"(kraft.socket.buffered.max.bytes) of {budget}")

    def stop(self) -> None:
        """The node stops."""
        for g in self.listeners.values():
            g.stop()
        self.bad_input.close()
        self.bad_requests.close()

