"""A quorum of real `kraft run` processes on loopback (used by `kraft local`, the demo and the
process tests).

Node `i` listens on its own address `127.0.0.i` (controller listener, admin HTTP and binary
client, on ports chosen free when the quorum is described and held against every other local
quorum on the machine until it is closed; tests pass another `address_prefix` such as
`127.3.7.` so parallel test workers never share an address). The quorum is dynamic
(kraft.version 1): the first `voters` nodes are formatted with `--initial-controllers`,
observers and later nodes with `--no-initial-controllers`, and every node finds the leader
through `controller.quorum.bootstrap.servers`. `static=True` formats a static quorum
(`controller.quorum.voters`, kraft.version 0) instead.

All operations are synchronous and short; processes are killed (SIGKILL) by `close()` even
when a caller fails half-way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import http.client
import io
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft.admin.http_credentials import HttpCredentials
from kraft.config.address import parse_host_port
from kraft.protocol.uuid import Uuid
from kraft.storage.format import format_storage
from kraft.storage.properties import write_properties

_PORT_RANGE = (20000, 32000)
"""Listener ports come from below Linux's default ephemeral range (32768-60999), so an
outgoing connection's source port can never take a node's port between choice and bind."""


_LOCK_FILE = Path(tempfile.gettempdir()) / f"kraft-local-ports-{os.getuid()}.lock"
"""One byte per port number: a quorum that chose a port holds a lock on that byte until it is
closed, so that another quorum on this machine (another `kraft local`, another test worker)
does not choose the same port between the choice and the node's bind, or while a node is
down between a kill and a restart."""

_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux: type, whence, start, len, pid
_F_WRLCK = 1


class PortLocks:
    """Ports held against every other `PortLocks` on the machine (same user), until `release()`
    or this process's exit, by open-file-description locks on bytes of one shared file: locks
    of one holder never conflict with each other, locks of two holders do, even in one process,
    and the kernel drops them all when the holder's file is closed (a killed process leaves
    none behind). Where such locks are not available (not Linux, no writable temporary
    directory), `take` always succeeds and ports are only checked free when chosen."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path or _LOCK_FILE
        self._fd: int | None = None
        self._unavailable = _OFD_SETLK is None
        self.held: set[int] = set()

    def _file(self) -> int | None:
        if self._fd is None and not self._unavailable:
            try:
                flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                self._fd = os.open(self._path, flags, 0o600)
            except OSError:
                self._unavailable = True
        return self._fd

    def take(self, port: int) -> bool:
        """Hold `port`; False when another holder has it."""
        fd = self._file()
        if fd is None or _OFD_SETLK is None:
            self.held.add(port)
            return True
        try:
            fcntl.fcntl(fd, _OFD_SETLK, _FLOCK.pack(_F_WRLCK, os.SEEK_SET, port, 1, 0))
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            # the lock itself failed (a filesystem without OFD locks, a struct flock laid out
            # otherwise on this machine): the port is only checked free, as without locks
        self.held.add(port)
        return True

    def release(self) -> None:
        """Give up every port held (closing the file drops its locks)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.held.clear()

    def __del__(self, _close: Any = os.close, _quiet: Any = contextlib.suppress) -> None:
        # also at interpreter exit, when this module's globals may be gone already
        fd, self._fd = self._fd, None
        if fd is not None:
            with _quiet(OSError):
                _close(fd)


def free_port(host: str, avoid: set[int] | None = None, hold: PortLocks | None = None) -> int:
    """A TCP port that is free on `host` right now (outside the ephemeral range) and that no
    `PortLocks` on this machine holds. With `hold`, the port is taken into it before it is
    returned, so no other holder can choose it until `hold` is released."""
    rng = random.Random()
    probe = hold or PortLocks()
    try:
        for _ in range(1000):
            port = rng.randrange(*_PORT_RANGE)
            if avoid and port in avoid:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            if port in probe.held or not probe.take(port):
                continue
            return port
    finally:
        if hold is None:
            probe.release()
    raise OSError(f"no free port on {host} in {_PORT_RANGE}")


@dataclass
class LocalNode:
    """One node of a local quorum: its identity, addresses, files and process."""

    node_id: int
    host: str
    port: int
    http_port: int
    directory_id: Uuid
    dir: Path
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    client_port: int = 0
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def http(self) -> str:
        """host:port of the admin HTTP server."""
        return f"{self.host}:{self.http_port}"

    @property
    def client(self) -> tuple[str, int]:
        """(host, port) of the binary client protocol (`kraft.admin.kv_client`)."""
        return (self.host, self.client_port)

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.poll() is None


@dataclass
class HttpResult:
    """An HTTP answer: status, body bytes and headers (lower-case names)."""

    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


def http_call(address: str, method: str, path: str, body: bytes | None = None,
              timeout: float = 10.0, follow: int = 3,
              credentials: HttpCredentials | None = None) -> HttpResult:
    """One HTTP request; follows up to `follow` 307 redirects (to the leader). `credentials`:
    the bearer token and TLS trust (`kraft.admin.http_credentials`); HTTPS when they name a
    CA or a client certificate."""
    host, port = parse_host_port(address, "HTTP address")
    creds = credentials or HttpCredentials()
    context = creds.ssl_context()
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=creds.headers())
        resp = conn.getresponse()
        data = resp.read()
        headers = {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()
    if resp.status == 307 and follow > 0 and "location" in headers:
        loc = headers["location"]
        rest = loc.split("://", 1)[1]
        addr, _, p = rest.partition("/")
        return http_call(addr, method, "/" + p, body, timeout, follow - 1, credentials)
    return HttpResult(resp.status, data, headers)


class LocalCluster:
    """Formats, starts, kills and restarts a quorum of `kraft run` processes."""

    def __init__(self, base_dir: Path | str, voters: int = 3, observers: int = 0, *,
                 static: bool = False, first_address: int = 1, address_prefix: str = "127.0.0.",
                 properties: dict[str, str] | None = None,
                 credentials: HttpCredentials | None = None) -> None:
        """`credentials`: what the cluster's own HTTP calls (status, readiness, put, get)
        present, for nodes whose `properties` secure their HTTP ports."""
        self.credentials = credentials
        self.command_prefix: list[str] = []
        """Run each `kraft run` under this command (`["prlimit", "--nofile=512:512", "--"]`
        to give the nodes other limits than this process's)."""
        self.base = Path(base_dir)
        self.base.mkdir(parents=True, exist_ok=True)
        self.cluster_id = str(Uuid.random())
        self.static = static
        self.properties = {
            "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.fetch.timeout.ms": "2000",
            "controller.quorum.request.timeout.ms": "2000",
            **(properties or {}),
        }
        self.nodes: dict[int, LocalNode] = {}
        self._ports = PortLocks()  # every node's ports, held until close()
        self._first = first_address
        self._prefix = address_prefix
        for i in range(1, voters + observers + 1):
            self._new_node(i)
        self.initial_voters = list(range(1, voters + 1))

    # ------------------------------------------------------------------ layout

    def _new_node(self, node_id: int) -> LocalNode:
        host = f"{self._prefix}{self._first + node_id - 1}"
        port = free_port(host, hold=self._ports)
        http_port = free_port(host, hold=self._ports)
        node = LocalNode(
            node_id=node_id, host=host, port=port, http_port=http_port,
            client_port=free_port(host, hold=self._ports),
            directory_id=Uuid.random(), dir=self.base / f"node-{node_id}" / "metadata",
            config_path=self.base / f"node-{node_id}" / "server.properties",
            log_path=self.base / f"node-{node_id}" / "kraft.log",
        )
        self.nodes[node_id] = node
        return node

    def add_node(self, node_id: int | None = None) -> LocalNode:
        """Describe a new node (not formatted, not started)."""
        nid = node_id if node_id is not None else max(self.nodes) + 1
        return self._new_node(nid)

    def extra_port(self, node_id: int) -> int:
        """One more port free on node `node_id`'s address, held for this quorum as its own
        ports are (a second controller listener, as a migration to TLS binds)."""
        return free_port(self.nodes[node_id].host, hold=self._ports)

    def _props(self, node: LocalNode) -> dict[str, str]:
        props = {
            "node.id": str(node.node_id),
            "process.roles": "controller",
            "listeners": f"CONTROLLER://{node.host}:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "metadata.log.dir": str(node.dir),
            "http.listener": node.http,
            "client.listener": f"{node.host}:{node.client_port}",
            "http.peers": ",".join(f"{n.node_id}@{n.http}" for n in self.nodes.values()),
            **self.properties,
        }
        voters = [self.nodes[i] for i in self.initial_voters]
        if self.static:
            props["controller.quorum.voters"] = ",".join(
                f"{n.node_id}@{n.host}:{n.port}" for n in voters)
        else:
            props["controller.quorum.bootstrap.servers"] = ",".join(
                f"{n.host}:{n.port}" for n in voters)
        props.update(node.overrides)
        return props

    def write_config(self, node: LocalNode) -> dict[str, str]:
        """Write the node's server.properties; returns the properties."""
        props = self._props(node)
        node.config_path.parent.mkdir(parents=True, exist_ok=True)
        write_properties(node.config_path, props)
        return props

    def format(self, node_id: int, *, join_later: bool | None = None) -> None:
        """Format a node's directory (initial voters get --initial-controllers)."""
        node = self.nodes[node_id]
        props = self.write_config(node)
        if self.static:
            format_storage(props, self.cluster_id, out=io.StringIO())
            return
        is_initial = node_id in self.initial_voters if join_later is None else not join_later
        if is_initial:
            initial = ",".join(
                f"{n.node_id}@{n.host}:{n.port}:{n.directory_id}"
                for n in (self.nodes[i] for i in self.initial_voters))
            format_storage(props, self.cluster_id, initial_controllers=initial,
                           out=io.StringIO())
        else:
            format_storage(props, self.cluster_id, no_initial_controllers=True,
                           out=io.StringIO())
            from kraft.storage.meta_properties import read_meta_properties

            meta = read_meta_properties(node.dir)
            if meta is not None and meta.directory_id is not None:
                node.directory_id = meta.directory_id

    def wipe(self, node_id: int) -> None:
        """Delete a node's metadata directory (a disk failure)."""
        shutil.rmtree(self.nodes[node_id].dir, ignore_errors=True)

    # ------------------------------------------------------------------ processes

    def start(self, node_id: int) -> LocalNode:
        """Start `kraft run` for a node (its directory must be formatted). Raises OSError,
        before starting anything, when another local quorum has taken one of its ports since
        this one was closed."""
        node = self.nodes[node_id]
        for port in (node.port, node.http_port, node.client_port):
            # again, after a close(); a no-op while held
            if not self._ports.take(port):
                raise OSError(f"node {node_id}'s port {port} on {node.host} is held by another "
                              f"local quorum (this one gave it up when it was closed)")
        self.write_config(node)
        logf = open(node.log_path, "ab")  # noqa: SIM115 - owned by the child process
        env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
        env["PYTHONUNBUFFERED"] = "1"
        node.process = subprocess.Popen(
            [*self.command_prefix, sys.executable, "-m", "kraft", "run", "--config",
             str(node.config_path)],
            stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        logf.close()
        return node

    def start_all(self) -> None:
        """Format (when needed) and start every node."""
        for nid in self.nodes:
            if not (self.nodes[nid].dir / "meta.properties").exists():
                self.format(nid)
        for nid in self.nodes:
            self.start(nid)

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a node and wait for it to exit."""
        node = self.nodes[node_id]
        if node.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            node.process.send_signal(sig)
        try:
            node.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(timeout=10)

    def close(self) -> None:
        """SIGKILL every process still running, and give up the nodes' ports to other quorums
        (a later `start` takes a node's ports again)."""
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    node.process.kill()
                with contextlib.suppress(Exception):
                    node.process.wait(timeout=10)
        self._ports.release()

    def stop_all(self, timeout: float = 10.0) -> None:
        """SIGTERM every node (graceful), then SIGKILL what is left after `timeout`."""
        for node in self.nodes.values():
            if node.alive:
                assert node.process is not None
                with contextlib.suppress(ProcessLookupError):
                    node.process.terminate()
        deadline = time.monotonic() + timeout
        for node in self.nodes.values():
            if node.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        self.close()

    # ------------------------------------------------------------------ queries

    def status(self, node_id: int, timeout: float = 2.0) -> dict[str, Any] | None:
        """A node's /v1/status, None when it does not answer."""
        node = self.nodes[node_id]
        try:
            r = http_call(node.http, "GET", "/v1/status", timeout=timeout,
                          credentials=self.credentials)
        except OSError:
            return None
        return r.json() if r.status == 200 else None

    def leader(self, among: list[int] | None = None) -> int | None:
        """The id of a node that says it leads (and has a high watermark), if any."""
        best: tuple[int, int] | None = None
        for nid in among or list(self.nodes):
            if not self.nodes[nid].alive:
                continue
            st = self.status(nid)
            if st and st["role"] == "leader" and st["high_watermark"] >= 0 and (
                    best is None or st["epoch"] > best[1]):
                best = (nid, st["epoch"])
        return best[0] if best else None

    def wait_for_leader(self, timeout: float = 30.0, exclude: int | None = None,
                        among: list[int] | None = None) -> int:
        """Poll until some node (other than `exclude`) leads; raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lid = self.leader(among)
            if lid is not None and lid != exclude:
                return lid
            time.sleep(0.05)
        raise TimeoutError(f"no leader within {timeout}s; logs in {self.base}")

    def wait_ready(self, node_id: int, timeout: float = 30.0) -> None:
        """Poll /readyz until 200; raises TimeoutError."""
        deadline = time.monotonic() + timeout
        node = self.nodes[node_id]
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if http_call(node.http, "GET", "/readyz", timeout=2,
                             credentials=self.credentials).status == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"node {node_id} not ready within {timeout}s; log {node.log_path}")

    def put(self, key: str, value: bytes, via: int | None = None, timeout: float = 10.0) -> HttpResult:
        """PUT through `via` (default: the current leader), following redirects."""
        nid = via if via is not None else self.wait_for_leader()
        return http_call(self.nodes[nid].http, "PUT", f"/v1/kv/{key}", value, timeout=timeout,
                         credentials=self.credentials)

    def get(self, key: str, via: int | None = None, timeout: float = 10.0) -> HttpResult:
        """Linearizable GET through `via` (default: the current leader)."""
        nid = via if via is not None else self.wait_for_leader()
        return http_call(self.nodes[nid].http, "GET", f"/v1/kv/{key}", timeout=timeout,
                         credentials=self.credentials)
