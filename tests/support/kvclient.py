"""Concurrent KV clients for the process tests: each operation is recorded for the
linearizability checker.

Every client sends its operations to one node's admin HTTP API and follows 307 redirects to
the leader. Outcomes map to the checker's model:

* 200 (or 404 for a read) → a completed operation with its output;
* 503 with `"outcome": "unknown"`, a timeout or a broken connection during a write → an
  operation whose outcome is unknown (it may or may not have taken effect);
* 503 without an outcome (not the leader, no leader known) or a refused connection → the write
  was never proposed: not recorded; a failed read is not recorded either (it returned nothing).
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
from dataclasses import dataclass, field

import aiohttp

from kraft.admin.http_credentials import HttpCredentials
from tests.support.linearizability import CAS, DELETE, GET, PUT, HistoryRecorder, Op


@dataclass
class Outcome:
    """What one HTTP exchange produced."""

    status: int
    body: bytes
    known: bool


@dataclass
class WorkloadStats:
    """Counts of what the clients did."""

    ok: int = 0
    unknown: int = 0
    rejected: int = 0
    acked_writes: dict[str, bytes] = field(default_factory=dict)


def new_session(credentials: HttpCredentials | None = None) -> aiohttp.ClientSession:
    """A client session that never re-sends a request by itself; with `credentials`, its
    requests carry their token and trust their CAs (`kraft.admin.http_credentials`).

    aiohttp silently retries idempotent methods (PUT, DELETE, GET) once when a connection
    breaks mid-request: a PUT that reached a leader which then died is sent again, and the
    retry's "connection refused" would hide the first attempt. With retries off, a refused
    connection really means the request never reached any node.
    """
    creds = credentials or HttpCredentials()
    context = creds.ssl_context()
    session = aiohttp.ClientSession(
        headers=creds.headers(),
        connector=aiohttp.TCPConnector(ssl=context) if context is not None else None)
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False
    else:  # pragma: no cover - another aiohttp: refused connections are not trustworthy
        global _REFUSED_MEANS_NOT_SENT
        _REFUSED_MEANS_NOT_SENT = False
    return session


_REFUSED_MEANS_NOT_SENT = True


async def http_op(session: aiohttp.ClientSession, address: str, method: str, path: str,
                  body: bytes | None, timeout: float, stale: bool = False,
                  scheme: str = "http") -> Outcome:
    """One request with manual 307 following; raises nothing (failures become outcomes)."""
    url = f"{scheme}://{address}{path}"
    if stale:
        url += "?stale=true"
    for _ in range(4):
        try:
            async with session.request(method, url, data=body, allow_redirects=False,
                                       timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                data = await resp.read()
                if resp.status == 307 and "Location" in resp.headers:
                    url = resp.headers["Location"]
                    continue
                if resp.status == 503:
                    try:
                        info = json.loads(data)
                    except ValueError:
                        info = {}
                    return Outcome(503, data, known=info.get("outcome") != "unknown")
                return Outcome(resp.status, data, known=True)
        except aiohttp.ClientConnectorError as exc:
            # no connection was made: the request never reached a node (see new_session)
            return Outcome(0, repr(exc).encode(), known=_REFUSED_MEANS_NOT_SENT)
        except (aiohttp.ClientError, TimeoutError, OSError):
            return Outcome(0, b"", known=False)
    return Outcome(503, b"redirect loop", known=True)


class KVWorkload:
    """Random put/get/cas/delete on a few keys from several clients, recorded as a history."""

    def __init__(self, addresses: list[str], keys: int = 4, clients: int = 4, seed: int = 0,
                 timeout: float = 8.0, read_ratio: float = 0.4, stale_reads: bool = False,
                 binary: dict[int, tuple[str, int]] | None = None,
                 credentials: HttpCredentials | None = None) -> None:
        self.addresses = addresses
        self.credentials = credentials or HttpCredentials()
        """The token and TLS trust of every HTTP call (none by default)."""
        self.binary = binary or {}
        """Node id -> the binary client protocol's address: one more client writes and reads
        through it (`kraft.admin.kv_client.KvClient`), on one connection to the leader, as
        a producer would (the leader's native lane serves such a connection)."""
        self.keys = [f"key{i}" for i in range(keys)]
        self.clients = clients
        self.rng = random.Random(seed)
        self.timeout = timeout
        self.read_ratio = read_ratio
        self.stale_reads = stale_reads
        self.history = HistoryRecorder()
        self.stats = WorkloadStats()
        self._stop = asyncio.Event()
        self._counter = 0
        self.rejected: list[tuple[Op, Outcome]] = []
        """Operations not recorded (never proposed), with the answer that said so."""

    def stop(self) -> None:
        """Ask every client to finish its current operation and stop."""
        self._stop.set()

    async def run(self) -> None:
        """Run the clients until `stop()`."""
        async with new_session(self.credentials) as session:
            extra = [self._binary_client(self.clients)] if self.binary else []
            await asyncio.gather(*(self._client(session, c) for c in range(self.clients)),
                                 *extra)

    async def _client(self, session: aiohttp.ClientSession, client: int) -> None:
        rng = random.Random(self.rng.random())
        while not self._stop.is_set():
            address = rng.choice(self.addresses)
            key = rng.choice(self.keys)
            r = rng.random()
            if r < self.read_ratio:
                await self._get(session, client, address, key)
            elif r < self.read_ratio + 0.4:
                await self._put(session, client, address, key)
            elif r < self.read_ratio + 0.5:
                await self._delete(session, client, address, key)
            else:
                await self._cas(session, client, address, key, rng)
            await asyncio.sleep(rng.random() * 0.01)

    async def _binary_client(self, client: int) -> None:
        """PUTs and linearizable GETs over the binary protocol, one at a time, on one
        connection that follows the leader (NOT_LEADER names it)."""
        from kraft.admin.kv_client import ClientError, KvClient, NotLeader

        rng = random.Random(self.rng.random())
        ids = sorted(self.binary)
        target = rng.choice(ids)
        conn: KvClient | None = None
        while not self._stop.is_set():
            if conn is None or not conn.connected:
                try:
                    conn = await KvClient(*self.binary[target]).connect(self.timeout)
                except (OSError, TimeoutError):
                    conn = None
                    target = ids[(ids.index(target) + 1) % len(ids)]
                    await asyncio.sleep(0.05)
                    continue
            key = rng.choice(self.keys)
            call = time.monotonic()
            try:
                if rng.random() < self.read_ratio:
                    got = await asyncio.wait_for(conn.get(key), self.timeout)
                    self._record(Op(client, GET, key, call, time.monotonic(), output=got),
                                 Outcome(200, b"", True))
                    continue
                value = self._value(client)
                try:
                    await asyncio.wait_for(conn.put(key, value), self.timeout)
                except NotLeader as exc:  # never proposed: to the leader it names
                    self._record(Op(client, PUT, key, call, None, value=value),
                                 Outcome(503, b"not leader", True))
                    if exc.leader_id in self.binary:
                        target = exc.leader_id
                    await conn.close()
                    conn = None
                    await asyncio.sleep(0.02)
                    continue
                except (ClientError, OSError, TimeoutError):  # sent: may or may not be written
                    self._record(Op(client, PUT, key, call, None, value=value),
                                 Outcome(0, b"", False))
                    raise
                self.stats.acked_writes[key] = value
                self._record(Op(client, PUT, key, call, time.monotonic(), value=value),
                             Outcome(200, b"", True))
            except (ClientError, OSError, TimeoutError):
                if conn is not None:
                    await conn.close()
                conn = None
                target = ids[(ids.index(target) + 1) % len(ids)]
                await asyncio.sleep(0.05)

    def _value(self, client: int) -> bytes:
        self._counter += 1
        return f"c{client}-{self._counter}".encode()

    def _record(self, op: Op, outcome: Outcome) -> None:
        if outcome.known and outcome.status not in (200, 404):
            self.stats.rejected += 1
            self.rejected.append((op, outcome))
            return
        if op.ret is None:
            self.stats.unknown += 1
        else:
            self.stats.ok += 1
        self.history.record(op)

    async def _put(self, s: aiohttp.ClientSession, client: int, address: str, key: str) -> None:
        value = self._value(client)
        call = time.monotonic()
        out = await http_op(s, address, "PUT", f"/v1/kv/{key}", value, self.timeout,
                            scheme=self.credentials.scheme)
        ret = time.monotonic() if out.known and out.status == 200 else None
        if ret is not None:
            self.stats.acked_writes[key] = value
        self._record(Op(client, PUT, key, call, ret, value=value), out)

    async def _delete(self, s: aiohttp.ClientSession, client: int, address: str, key: str) -> None:
        call = time.monotonic()
        out = await http_op(s, address, "DELETE", f"/v1/kv/{key}", None, self.timeout,
                            scheme=self.credentials.scheme)
        ret = time.monotonic() if out.known and out.status == 200 else None
        if ret is not None:
            self.stats.acked_writes.pop(key, None)
        self._record(Op(client, DELETE, key, call, ret), out)

    async def _cas(self, s: aiohttp.ClientSession, client: int, address: str, key: str,
                   rng: random.Random) -> None:
        expected = self.stats.acked_writes.get(key) if rng.random() < 0.7 else b"nope"
        value = self._value(client)
        body = json.dumps({
            "expected": base64.b64encode(expected).decode() if expected is not None else None,
            "value": base64.b64encode(value).decode(),
        }).encode()
        call = time.monotonic()
        out = await http_op(s, address, "POST", f"/v1/kv/{key}/cas", body, self.timeout,
                            scheme=self.credentials.scheme)
        if out.known and out.status == 200:
            swapped = bool(json.loads(out.body)["swapped"])
            if swapped:
                self.stats.acked_writes[key] = value
            self._record(Op(client, CAS, key, call, time.monotonic(), value=value,
                            expected=expected, output=swapped), out)
        else:
            self._record(Op(client, CAS, key, call, None, value=value, expected=expected), out)

    async def _get(self, s: aiohttp.ClientSession, client: int, address: str, key: str) -> None:
        call = time.monotonic()
        out = await http_op(s, address, "GET", f"/v1/kv/{key}", None, self.timeout,
                            stale=self.stale_reads, scheme=self.credentials.scheme)
        if out.status == 200:
            self._record(Op(client, GET, key, call, time.monotonic(), output=out.body), out)
        elif out.status == 404:
            self._record(Op(client, GET, key, call, time.monotonic(), output=None), out)
        else:  # a read that returned nothing is not part of the history
            self.stats.rejected += 1
            self.rejected.append((Op(client, GET, key, call, None), out))
