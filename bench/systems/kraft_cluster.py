"""kraft-quorum as a benchmarked system: a loopback quorum of real `kraft run` processes, a
client driver process, and a fault proxy process.

* **Nodes**: laid out and formatted by `kraft.cli.local.LocalCluster` (node i on 127.0.0.i,
  free ports), started here as `python -m kraft run --config FILE` (the
  command `LocalCluster` uses) with PR_SET_PDEATHSIG, so no node outlives the benchmark.
  Defaults: dynamic quorum (kraft.version 1), fsync on, the node's own timeouts.
* **Driver** (`python -m bench.systems.kraft_cluster driver`): the client. HTTP/1.1
  `PUT /v1/kv/{key}` through aiohttp with keep-alive, one connection per outstanding request,
  closed loop. (The node has no pipelined or binary client API yet; see docs/benchmarks.md.)
* **Proxy** (`python -m bench.systems.kraft_cluster proxy`): one listening port per ordered pair of
  nodes (i -> j). Used with a static quorum whose per-node `controller.quorum.voters` point at
  the proxy ports, so every byte between nodes crosses it. It can blackhole every route of one
  node (a silent partition: TCP stays up, nothing arrives) and can cap the Fetch version a
  node advertises in its ApiVersions responses to 17 (so followers fetch without the KIP-1166
  HighWatermark field, as an older peer would).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench.systems.peers import (
    FAILOVER_REQ_TIMEOUT_S,
    HOST,
    NKEYS,
    ROOT,
    VALUE_SIZE,
    DriverProcess,
    closed_loop,
    die_with_parent,
    failover_loop,
    key_of,
    kill_proc,
    recovery_after,
    sequential,
    serve_json_lines,
    summarize_ns,
    summarize_s,
)

# ============================================================================ driver


def driver_main() -> None:
    """The kraft client driver (aiohttp, keep-alive, closed loop)."""
    import aiohttp

    value = b"v" * VALUE_SIZE
    try:  # the loop `kraft run` itself uses when it is installed (kraft.event.loop=auto)
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    def session(limit: int) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, force_close=False),
                                     timeout=aiohttp.ClientTimeout(total=15))

    class HttpStatusError(Exception):
        """A non-200 answer."""

    async def tput(addr: str, inflight: int, duration: float, warmup: float) -> dict[str, Any]:
        async with session(inflight) as s:
            async def op(i: int) -> None:
                async with s.put(f"http://{addr}/v1/kv/{key_of(i)}", data=value,
                                 allow_redirects=False) as r:
                    body = await r.read()
                    if r.status != 200:
                        raise HttpStatusError(f"{r.status} {body[:60]!r}")
            return await closed_loop(op, inflight, duration, warmup)

    async def seq(addr: str, duration: float, warmup: float) -> dict[str, Any]:
        async with session(1) as s:
            async def op(i: int) -> None:
                async with s.put(f"http://{addr}/v1/kv/{key_of(i)}", data=value,
                                 allow_redirects=False) as r:
                    body = await r.read()
                    if r.status != 200:
                        raise HttpStatusError(f"{r.status} {body[:60]!r}")
            return await sequential(op, duration, warmup)

    async def failover(addrs: list[str], inflight: int, kill_at: float, max_s: float,
                       req_timeout: float) -> dict[str, Any]:
        cur = [addrs[0]]
        timeout = aiohttp.ClientTimeout(total=req_timeout)
        async with session(inflight) as s:
            async def op(i: int) -> None:
                addr = cur[0]
                try:
                    async with s.put(f"http://{addr}/v1/kv/{key_of(i)}", data=value,
                                     allow_redirects=False, timeout=timeout) as r:
                        await r.read()
                        if r.status == 200:
                            return
                        if r.status == 307 and "Location" in r.headers:
                            m = re.match(r"https?://([^/]+)/", r.headers["Location"])
                            if m:
                                cur[0] = m.group(1)
                        elif cur[0] == addr:
                            cur[0] = addrs[(addrs.index(addr) + 1) % len(addrs)] if addr in addrs else addrs[0]
                        raise HttpStatusError(r.status)
                except (aiohttp.ClientError, TimeoutError):
                    if cur[0] == addr:
                        cur[0] = addrs[(addrs.index(addr) + 1) % len(addrs)] if addr in addrs else addrs[0]
                    raise
            return await failover_loop(op, inflight, kill_at, max_s)

    async def visibility(leader: str, follower: str, samples: int, gap_s: float,
                         max_wait_s: float) -> dict[str, Any]:
        gaps: list[float] = []
        async with session(4) as s:
            for n in range(samples):
                val = b"vis%06d" % n + b"v" * 80
                async with s.put(f"http://{leader}/v1/kv/vis", data=val, allow_redirects=False) as r:
                    await r.read()
                    if r.status != 200:
                        continue
                acked = time.monotonic()
                deadline = acked + max_wait_s
                while time.monotonic() < deadline:
                    async with s.get(f"http://{follower}/v1/kv/vis?stale=true") as r:
                        body = await r.read()
                    if body == val:
                        gaps.append(time.monotonic() - acked)
                        break
                await asyncio.sleep(gap_s)
        return {"latency": summarize_s(gaps), "misses": samples - len(gaps)}

    async def bin_visibility(leader: list[Any], follower: list[Any], samples: int, gap_s: float,
                             max_wait_s: float) -> dict[str, Any]:
        """`visibility` through the binary client: PUT on the leader, then GET_STALE on the
        follower back to back until the value shows (one poll costs one loopback round trip,
        about 0.1-0.2 ms, instead of an HTTP request)."""
        from kraft.admin.kv_client import KvClient

        gaps: list[float] = []
        polls: list[int] = []
        async with KvClient(*leader) as lc, KvClient(*follower) as fc:
            for n in range(samples):
                val = b"vis%06d" % n + b"v" * 80
                try:
                    await lc.put("vis", val)
                except Exception:
                    continue
                acked = time.monotonic()
                deadline = acked + max_wait_s
                count = 0
                while time.monotonic() < deadline:
                    count += 1
                    if await fc.get("vis", stale=True) == val:
                        gaps.append(time.monotonic() - acked)
                        polls.append(count)
                        break
                await asyncio.sleep(gap_s)
        return {"latency": summarize_s(gaps), "misses": samples - len(gaps), "client": "binary",
                "polls_p50": sorted(polls)[len(polls) // 2] if polls else None,
                "polls_max": max(polls) if polls else None}

    async def put_big(addr: str, count: int, size: int, inflight: int) -> dict[str, Any]:
        blob = os.urandom(size)
        nxt = [0]
        errors = [0]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=inflight),
                                         timeout=aiohttp.ClientTimeout(total=120)) as s:
            async def worker() -> None:
                while nxt[0] < count and errors[0] < 50:
                    i = nxt[0]
                    nxt[0] += 1
                    async with s.put(f"http://{addr}/v1/kv/big{i:06d}", data=blob,
                                     allow_redirects=False) as r:
                        await r.read()
                        if r.status != 200:
                            errors[0] += 1
                            nxt[0] -= 0
            t0 = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(inflight)))
        return {"seconds": time.monotonic() - t0, "errors": errors[0]}

    # ---------------------------------------------------------------- binary client
    async def bin_clients(addr: list[Any], n: int) -> list[Any]:
        from kraft.admin.kv_client import KvClient

        return [await KvClient(addr[0], addr[1]).connect() for _ in range(n)]

    async def bin_tput(addr: list[Any], inflight: int, duration: float, warmup: float) -> dict[str, Any]:
        """The closed loop of `bench.systems.peers.closed_loop` (same window, counting and latency
        rules) driven through `KvClient.send` callbacks: `inflight` writes outstanding,
        each answer issues the next one (as a Kafka producer's callbacks would)."""
        from kraft.protocol.kv_wire import NOT_FOUND, OK, OP_PUT

        conns = await bin_clients(addr, min(8, inflight))
        pc = time.perf_counter_ns
        t0 = pc()
        warm_end = t0 + int(warmup * 1e9)
        end = warm_end + int(duration * 1e9)
        lat: list[int] = []
        errs: dict[str, int] = {}
        state = {"next": 0, "done": 0, "active": inflight}
        finished = loop.create_future()
        nconn = len(conns)

        keys = [key_of(i) for i in range(NKEYS)]

        def answered(started: int, status: int, _offset: int, payload: bytes) -> None:
            e = pc()
            if status != OK and status != NOT_FOUND:
                k = f"status {status}: {payload[:60].decode(errors='replace')}"
                errs[k] = errs.get(k, 0) + 1
                if e < end:
                    loop.call_later(0.005, issue)
                    return
            elif warm_end <= e <= end:
                state["done"] += 1
                if started >= warm_end:
                    lat.append(e - started)
            if e < end:
                issue()
            else:
                state["active"] -= 1
                if state["active"] == 0 and not finished.done():
                    finished.set_result(None)

        def issue() -> None:
            # a partial, not a closure per write: the driver shares the two cores with the
            # nodes, so what it spends per write is taken from them
            i = state["next"]
            state["next"] = i + 1
            conns[i % nconn].send(OP_PUT, keys[i % NKEYS], value, partial(answered, pc()))

        try:
            for _ in range(inflight):
                issue()
            try:
                await asyncio.wait_for(finished, duration + warmup + 30)
            except TimeoutError:
                errs["driver_timeout"] = errs.get("driver_timeout", 0) + 1
        finally:
            for c in conns:
                await c.close()
        return {"inflight": inflight, "ops_per_s": round(state["done"] / duration, 1),
                "completed_in_window": state["done"], "errors": errs,
                "latency": summarize_ns(lat), "connections": nconn, "client": "callbacks"}

    async def bin_rate(addr: list[Any], rate: int, duration: float, warmup: float,
                       drain_s: float, max_outstanding: int) -> dict[str, Any]:
        """Open loop at a fixed rate, the load shape of Kafka's TestRaftServer: every
        millisecond the writes due by then (`rate` per second from the start) go out through
        `KvClient.send` callbacks whatever the answers. Latency is from a write's send to its
        answer, for every write sent inside the window (answered inside it or during the
        drain after it, up to `drain_s`); throughput counts answers inside the window;
        `behind_at_end_s` is the writes unanswered when the window ends, in seconds of the
        rate. More
        than `max_outstanding` unanswered writes make the writes then due be dropped (counted
        as `held_back`: the rate was not sustained)."""
        from kraft.protocol.kv_wire import NOT_FOUND, OK, OP_PUT

        conns = await bin_clients(addr, 8)
        pc = time.perf_counter_ns
        t0 = pc()
        warm_end = t0 + int(warmup * 1e9)
        end = warm_end + int(duration * 1e9)
        total = int((warmup + duration) * rate)
        lat: list[int] = []
        errs: dict[str, int] = {}
        state = {"sent": 0, "outstanding": 0, "done": 0, "held_back": 0, "sent_in_window": 0}
        drained = loop.create_future()
        nconn = len(conns)
        keys = [key_of(i) for i in range(NKEYS)]
        sending = [True]

        def answered(started: int, in_window: bool, status: int, _offset: int,
                     payload: bytes) -> None:
            e = pc()
            state["outstanding"] -= 1
            if status != OK and status != NOT_FOUND:
                k = f"status {status}: {payload[:60].decode(errors='replace')}"
                errs[k] = errs.get(k, 0) + 1
            else:
                if warm_end <= e <= end:
                    state["done"] += 1
                if in_window:
                    lat.append(e - started)
            if not sending[0] and state["outstanding"] == 0 and not drained.done():
                drained.set_result(None)

        def tick() -> None:
            now = pc()
            target = min(total, (min(now, end) - t0) * rate // 1_000_000_000 + 1)
            due = target - state["sent"] - state["held_back"]
            in_window = warm_end <= now < end
            for _ in range(max(0, due)):
                if state["outstanding"] >= max_outstanding:
                    state["held_back"] += 1
                    continue
                i = state["sent"]
                state["sent"] = i + 1
                state["outstanding"] += 1
                state["sent_in_window"] += in_window
                conns[i % nconn].send(OP_PUT, keys[i % NKEYS], value,
                                      partial(answered, now, in_window))
            if now < end and state["sent"] + state["held_back"] < total:
                loop.call_later(0.001, tick)
            else:
                sending[0] = False
                state["outstanding_at_end"] = state["outstanding"]
                if state["outstanding"] == 0 and not drained.done():
                    drained.set_result(None)

        try:
            tick()
            await asyncio.sleep(max(0.0, (end - pc()) / 1e9))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(drained), duration + warmup + drain_s)
        finally:
            for c in conns:
                await c.close()
        return {"rate": rate, "ops_per_s": round(state["done"] / duration, 1),
                "completed_in_window": state["done"], "sent_in_window": state["sent_in_window"],
                "held_back": state["held_back"], "unanswered": state["outstanding"],
                "behind_at_end_s": round(state.get("outstanding_at_end", 0) / rate, 3),
                "errors": errs, "latency": summarize_ns(lat), "connections": nconn,
                "client": "open loop, callbacks"}

    async def bin_failover(addrs: dict[str, list[Any]], inflight: int, kill_at: float,
                           max_s: float, req_timeout: float) -> dict[str, Any]:
        from kraft.admin.kv_client import KvClient, NotLeader

        ids = list(addrs)
        cur = [ids[0]]
        # One connection per node, opened once however many writes wait for it; a new one
        # only when it broke (a write that timed out leaves it open: its answer comes later).
        conns: dict[str, asyncio.Future[Any]] = {}

        async def open_conn(nid: str) -> Any:
            host, port = addrs[nid]
            return await KvClient(host, port).connect(timeout_s=req_timeout)

        async def conn(nid: str) -> Any:
            f = conns.get(nid)
            if f is None or (f.done() and (f.exception() is not None
                                           or not f.result().connected)):
                f = conns[nid] = asyncio.ensure_future(open_conn(nid))
            return await asyncio.shield(f)

        def move_on(nid: str) -> None:
            if cur[0] == nid:
                cur[0] = ids[(ids.index(nid) + 1) % len(ids)]

        async def op(i: int) -> None:
            nid = cur[0]
            try:
                c = await conn(nid)
                await asyncio.wait_for(c.put(key_of(i), value), req_timeout)
            except NotLeader as exc:
                # -1 (none known) or the node itself (a leader that resigned): try the next.
                if str(exc.leader_id) in addrs and str(exc.leader_id) != nid:
                    cur[0] = str(exc.leader_id)
                else:
                    move_on(nid)
                raise
            except Exception:
                move_on(nid)
                raise
        try:
            return await failover_loop(op, inflight, kill_at, max_s)
        finally:
            for f in conns.values():
                if f.done() and f.exception() is None:
                    with contextlib.suppress(Exception):
                        await f.result().close()

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        cmd = req["cmd"]
        if cmd == "bin_tput":
            return loop.run_until_complete(bin_tput(req["addr"], req["inflight"], req["duration"],
                                                    req["warmup"]))
        if cmd == "bin_seq":
            return loop.run_until_complete(bin_tput(req["addr"], 1, req["duration"], req["warmup"]))
        if cmd == "bin_rate":
            return loop.run_until_complete(bin_rate(req["addr"], req["rate"], req["duration"],
                                                    req["warmup"], req.get("drain_s", 10.0),
                                                    req.get("max_outstanding", 20_000)))
        if cmd == "bin_failover":
            return loop.run_until_complete(bin_failover(req["addrs"], req["inflight"], req["kill_at"],
                                                        req["max_s"], req.get("req_timeout", FAILOVER_REQ_TIMEOUT_S)))
        if cmd == "tput":
            return loop.run_until_complete(tput(req["addr"], req["inflight"], req["duration"],
                                                req["warmup"]))
        if cmd == "seq":
            return loop.run_until_complete(seq(req["addr"], req["duration"], req["warmup"]))
        if cmd == "failover":
            return loop.run_until_complete(failover(req["addrs"], req["inflight"], req["kill_at"],
                                                    req["max_s"], req.get("req_timeout", FAILOVER_REQ_TIMEOUT_S)))
        if cmd == "bin_visibility":
            return loop.run_until_complete(bin_visibility(req["leader"], req["follower"],
                                                          req["samples"], req["gap_s"],
                                                          req.get("max_wait_s", 5.0)))
        if cmd == "visibility":
            return loop.run_until_complete(visibility(req["leader"], req["follower"],
                                                      req["samples"], req["gap_s"],
                                                      req.get("max_wait_s", 5.0)))
        if cmd == "put_big":
            return loop.run_until_complete(put_big(req["addr"], req["count"], req["size"],
                                                   req["inflight"]))
        return {"error": f"unknown command {cmd}"}

    serve_json_lines(handle)


# ============================================================================ proxy

API_VERSIONS = 18
FETCH = 1


def flush_metric(text: str) -> tuple[int, float] | None:
    """(count, sum) of `kraft_log_flush_seconds` in a node's Prometheus text; None if absent."""
    count = re.search(r"^kraft_log_flush_seconds_count (\S+)$", text, re.M)
    total = re.search(r"^kraft_log_flush_seconds_sum (\S+)$", text, re.M)
    if count is None or total is None:
        return None
    return int(float(count.group(1))), float(total.group(1))


def cap_api_versions(frame: bytes, version: int, fetch_max: int) -> bytes:
    """Rewrite one ApiVersions response frame (no size prefix) so Fetch's max version is at
    most `fetch_max`; any frame that does not decode is returned unchanged."""
    from kraft.protocol.framing import decode_response, encode_response

    try:
        header, body = decode_response(API_VERSIONS, version, frame)
    except Exception:
        return frame
    keys = [dataclasses.replace(k, max_version=min(k.max_version, fetch_max))
            if k.api_key == FETCH else k for k in body.api_keys]
    body = dataclasses.replace(body, api_keys=keys)
    used = 0 if body.error_code != 0 else version
    return encode_response(API_VERSIONS, used, header.correlation_id, body)[4:]


class _Route:
    """One listening port forwarding node src's connections to node dst."""

    def __init__(self, src: int, dst: int, target: tuple[str, int], proxy: _Proxy) -> None:
        self.src, self.dst, self.target, self.proxy = src, dst, target, proxy
        self.server: asyncio.base_events.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    @property
    def dropped(self) -> bool:
        return self.proxy.isolated in (self.src, self.dst)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.writers.update((writer, uw))
        pending: dict[int, tuple[int, int]] = {}
        try:
            await asyncio.gather(self._pump(reader, uw, pending, True),
                                 self._pump(ur, writer, pending, False))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, uw):
                self.writers.discard(w)
                w.close()

    async def _pump(self, r: asyncio.StreamReader, w: asyncio.StreamWriter,
                    pending: dict[int, tuple[int, int]], forward: bool) -> None:
        """Copy frames; requests remember (api, version) by correlation id so ApiVersions
        answers can be rewritten when a Fetch cap is set."""
        while True:
            size_b = await r.readexactly(4)
            (size,) = struct.unpack(">i", size_b)
            frame = await r.readexactly(size)
            if self.dropped:
                continue
            if forward:
                if len(frame) >= 8:
                    api, ver, corr = struct.unpack_from(">hhi", frame, 0)
                    if api == API_VERSIONS:
                        pending[corr] = (api, ver)
            elif self.proxy.fetch_cap is not None and len(frame) >= 4:
                (corr,) = struct.unpack_from(">i", frame, 0)
                if corr in pending:
                    _, ver = pending.pop(corr)
                    frame = cap_api_versions(frame, ver, self.proxy.fetch_cap)
                    size_b = struct.pack(">i", len(frame))
            w.write(size_b + frame)
            await w.drain()


class _Proxy:
    """The set of routes and the fault state."""

    def __init__(self) -> None:
        self.routes: list[_Route] = []
        self.isolated: int | None = None
        self.fetch_cap: int | None = None

    def sever(self) -> None:
        for route in self.routes:
            for w in list(route.writers):
                w.close()


def proxy_main() -> None:
    """Proxy process: commands `routes`, `isolate`, `heal`, `cap_fetch` on stdin."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    proxy = _Proxy()

    async def add_routes(routes: list[dict[str, Any]]) -> list[int]:
        ports = []
        for spec in routes:
            route = _Route(spec["src"], spec["dst"], (spec["host"], spec["port"]), proxy)
            route.server = await asyncio.start_server(route.handle, HOST, 0)
            ports.append(route.server.sockets[0].getsockname()[1])
            proxy.routes.append(route)
        return ports

    import queue as q
    import threading

    inbox: q.Queue[str] = q.Queue()

    def reader() -> None:
        for line in sys.stdin:
            inbox.put(line)
        inbox.put("")

    threading.Thread(target=reader, daemon=True).start()

    def reply(o: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(o) + "\n")
        sys.stdout.flush()

    async def control() -> None:
        reply({"ready": True})
        while True:
            line = await loop.run_in_executor(None, inbox.get)
            if not line:
                return
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "quit":
                return
            if cmd == "routes":
                reply({"ports": await add_routes(req["routes"])})
            elif cmd == "isolate":
                proxy.isolated = req["node"]
                reply({"isolated": proxy.isolated})
            elif cmd == "heal":
                proxy.isolated = None
                proxy.sever()
                reply({"healed": True})
            elif cmd == "cap_fetch":
                proxy.fetch_cap = req["version"]
                proxy.sever()
                reply({"cap": proxy.fetch_cap})
            else:
                reply({"error": f"unknown command {cmd}"})

    loop.run_until_complete(control())


# ============================================================================ cluster


def log_event_time(log_path: Path, event: str, after: float | None = None) -> float | None:
    """Wall-clock time (epoch seconds) of the first line of a node log that contains
    `event=<event>` (or, when `event` holds a space, the text itself) and is later than
    `after` (epoch seconds), parsed from the logging asctime prefix (millisecond resolution)."""
    marker = event if " " in event else f"event={event}"
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if marker not in line:
            continue
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})", line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
        if after is None or t >= after - 0.002:
            return t
    return None


BENCH_PROPERTIES = {"kraft.log.preallocate.bytes": str(4 << 20)}
"""What every benchmark cluster sets on top of the project's defaults (each result records
its cluster's properties under `config`): followers write what they fetch through, with
`O_DIRECT | O_DSYNC`, into 4 MiB of zero-filled space ahead of the active segment's end
(off by default, as Kafka's `log.preallocate`; docs/journal/perf-27-write-through.md)."""


class KraftCluster:
    """A 3-voter kraft-quorum on loopback with the benchmark's client driver.

    `proxied=True` formats a static quorum whose inter-node traffic crosses the fault proxy.
    """

    name = "kraft-quorum"

    def __init__(self, workdir: Path, proxied: bool = False,
                 properties: dict[str, str] | None = None, voters: int = 3,
                 client: str = "auto") -> None:
        from kraft.cli.local import LocalCluster

        self.workdir = Path(workdir)
        with contextlib.suppress(FileNotFoundError):
            import shutil

            shutil.rmtree(self.workdir)
        self.proxied = proxied
        self.lc = LocalCluster(self.workdir, voters=voters, static=proxied,
                               properties={**BENCH_PROPERTIES, **(properties or {})})
        self.driver: DriverProcess | None = None
        self.proxy: DriverProcess | None = None
        self.version = self._version()
        has_binary = hasattr(next(iter(self.lc.nodes.values())), "client_port")
        self.client = ("binary" if has_binary else "http") if client == "auto" else client

    @staticmethod
    def _version() -> str:
        try:
            from importlib.metadata import version

            v = version("kraft-quorum")
        except Exception:
            v = "?"
        commit = os.environ.get("BENCH_KRAFT_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            timeout=10).stdout.strip()
        return f"{v} ({commit})"

    def info(self) -> dict[str, Any]:
        """Version and configuration (for the results)."""
        return {"system": "kraft-quorum", "version": self.version,
                "config": {"fsync": True, "quorum": "static via proxy" if self.proxied else
                           "dynamic (kraft.version 1)", **self.lc.properties,
                           "client": "aiohttp HTTP/1.1 PUT /v1/kv/{key}, keep-alive, separate process"
                           if self.client == "http" else "binary pipelined KV protocol "
                           "(kraft.admin.kv_client.KvClient), up to 8 connections, separate process"}}

    # ------------------------------------------------------------------ processes

    def _python(self) -> str:
        return sys.executable

    @staticmethod
    def node_env_cwd() -> tuple[dict[str, str], str]:
        """Environment and working directory for `kraft` child processes. With
        `BENCH_KRAFT_SRC` set (bench_compare sets it to an export of HEAD's `kraft/`), nodes
        import that frozen copy, so edits in the working tree during a run cannot mix code
        versions between nodes started at different times."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
        env["PYTHONUNBUFFERED"] = "1"
        src = os.environ.get("BENCH_KRAFT_SRC")
        if src:
            env["PYTHONPATH"] = src
            return env, src
        return env, str(ROOT)

    def start_node(self, nid: int) -> None:
        """Start `kraft run` for a formatted node (with PDEATHSIG)."""
        node = self.lc.nodes[nid]
        self.lc.write_config(node)
        logf = open(node.log_path, "ab")  # noqa: SIM115 - handed to the child
        env, cwd = self.node_env_cwd()
        node.process = subprocess.Popen(
            [self._python(), "-m", "kraft", "run", "--config",
             str(node.config_path)],
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=cwd, preexec_fn=die_with_parent)
        logf.close()

    def _setup_proxy(self) -> None:
        self.proxy = DriverProcess([self._python(), "-m", "bench.systems.kraft_cluster", "proxy"],
                                   self.workdir / "proxy.log")
        self.proxy.recv(30)
        ids = sorted(self.lc.nodes)
        routes = [{"src": i, "dst": j, "host": self.lc.nodes[j].host, "port": self.lc.nodes[j].port}
                  for i in ids for j in ids if i != j]
        ports = self.proxy.call({"cmd": "routes", "routes": routes}, 30)["ports"]
        via = {(r["src"], r["dst"]): p for r, p in zip(routes, ports, strict=True)}
        for i in ids:
            me = self.lc.nodes[i]
            voters = [f"{i}@{me.host}:{me.port}" if j == i else f"{j}@{HOST}:{via[(i, j)]}" for j in ids]
            me.overrides["controller.quorum.voters"] = ",".join(voters)

    def start(self) -> None:
        """Format and start the nodes and the driver; wait for a ready leader."""
        self.driver = DriverProcess([self._python(), "-m", "bench.systems.kraft_cluster", "driver"],
                                    self.workdir / "driver.log")
        self.driver.recv(30)
        if self.proxied:
            self._setup_proxy()
        for nid in self.lc.nodes:
            self.lc.wipe(nid)  # a retried start begins from empty directories
            self.lc.format(nid)
        for nid in self.lc.nodes:
            self.start_node(nid)
        self.wait_leader(60)

    def stop(self) -> None:
        """Kill every process by PID."""
        for node in self.lc.nodes.values():
            kill_proc(node.process, graceful_s=0)
        for dp in (self.driver, self.proxy):
            if dp is not None:
                dp.stop()

    def pids(self) -> dict[str, int]:
        """label -> pid of live nodes, the driver and the proxy."""
        out = {f"node{nid}": n.process.pid for nid, n in self.lc.nodes.items()
               if n.process is not None and n.process.poll() is None}
        if self.driver is not None:
            out["client"] = self.driver.pid
        if self.proxy is not None:
            out["proxy"] = self.proxy.pid
        return out

    def driver_pid(self) -> int | None:
        """The client process."""
        return self.driver.pid if self.driver else None

    # ------------------------------------------------------------------ queries

    def wait_leader(self, timeout: float = 30.0, exclude: int | None = None) -> int:
        """Id of a node that leads and is ready (bounded wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for nid, n in self.lc.nodes.items():
                if n.process is not None and n.process.poll() is not None and nid != exclude \
                        and n.process.returncode not in (-9, -15):
                    raise RuntimeError(f"kraft node {nid} exited rc={n.process.returncode}; "
                                       f"see {n.log_path}")
            lid = self.lc.leader()
            if lid is not None and lid != exclude:
                st = self.lc.status(lid)
                if st and st["applied_offset"] >= st["high_watermark"] >= 0:
                    return lid
            time.sleep(0.05)
        raise RuntimeError(f"kraft: no leader within {timeout}s; logs in {self.workdir}")

    def wait_caught_up(self, timeout: float = 30.0) -> bool:
        """Bounded wait until every live node applied the leader's high watermark."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sts = [self.lc.status(nid) for nid, n in self.lc.nodes.items() if n.alive]
            if all(sts) and len({s["applied_offset"] for s in sts if s}) == 1:
                return True
            time.sleep(0.1)
        return False

    def addr(self, nid: int) -> str:
        """Admin HTTP host:port of a node."""
        return self.lc.nodes[nid].http

    def flush_times(self) -> dict[str, tuple[int, float]]:
        """`node<id>` -> (log fsyncs so far, their seconds) of each live node, from the
        `kraft_log_flush_seconds` histogram of its /metrics (a node without it is left out)."""
        from kraft.cli.local import http_call

        out: dict[str, tuple[int, float]] = {}
        for nid, n in self.lc.nodes.items():
            if not n.alive:
                continue
            try:
                r = http_call(n.http, "GET", "/metrics", timeout=5)
            except OSError:
                continue
            got = flush_metric(r.body.decode()) if r.status == 200 else None
            if got is not None:
                out[f"node{nid}"] = got
        return out

    # ------------------------------------------------------------------ workloads

    def bin_addr(self, nid: int) -> list[Any]:
        """[host, port] of a node's binary client listener."""
        return list(self.lc.nodes[nid].client)

    def seq(self, duration: float, warmup: float) -> dict[str, Any]:
        """Sequential PUTs against the leader."""
        assert self.driver is not None
        if self.client == "binary":
            return self.driver.call({"cmd": "bin_seq", "addr": self.bin_addr(self.wait_leader()),
                                     "duration": duration, "warmup": warmup}, duration + warmup + 60)
        return self.driver.call({"cmd": "seq", "addr": self.addr(self.wait_leader()),
                                 "duration": duration, "warmup": warmup}, duration + warmup + 60)

    def tput(self, inflight: int, duration: float, warmup: float) -> dict[str, Any]:
        """Closed-loop PUTs against the leader."""
        assert self.driver is not None
        self.wait_caught_up()
        if self.client == "binary":
            return self.driver.call({"cmd": "bin_tput", "addr": self.bin_addr(self.wait_leader()),
                                     "inflight": inflight, "duration": duration, "warmup": warmup},
                                    duration + warmup + 60)
        return self.driver.call({"cmd": "tput", "addr": self.addr(self.wait_leader()),
                                 "inflight": inflight, "duration": duration, "warmup": warmup},
                                duration + warmup + 60)

    def rate(self, rate: int, duration: float, warmup: float, drain_s: float = 10.0,
             max_outstanding: int = 20_000) -> dict[str, Any]:
        """PUTs against the leader at a fixed rate, open loop (the driver's `bin_rate`)."""
        assert self.driver is not None
        if self.client != "binary":
            raise RuntimeError("the fixed-rate load runs on the binary client protocol only")
        self.wait_caught_up()
        return self.driver.call({"cmd": "bin_rate", "addr": self.bin_addr(self.wait_leader()),
                                 "rate": rate, "duration": duration, "warmup": warmup,
                                 "drain_s": drain_s, "max_outstanding": max_outstanding},
                                2 * (duration + warmup) + drain_s + 60)

    def slow_trial_limit_s(self, fault: str) -> float:
        """The issue's target for a trial: 300 ms after kill -9, fetch timeout + 1 s after a
        silent partition. A slower trial keeps the nodes' logs (`_keep_trial_logs`)."""
        if fault == "kill":
            return 0.3
        return int(self.lc.properties["controller.quorum.fetch.timeout.ms"]) / 1000 + 1.0

    def _log_marks(self) -> dict[int, int]:
        marks = {}
        for nid, n in self.lc.nodes.items():
            try:
                marks[nid] = n.log_path.stat().st_size
            except FileNotFoundError:
                marks[nid] = 0
        return marks

    def _keep_trial_logs(self, fault: str, marks: dict[int, int], r: dict[str, Any]) -> Path:
        """Copy what every node logged during a slow trial into `<workdir>/../slow-trials/`
        (outside the cluster's own directory, which the next run deletes)."""
        keep = self.workdir.parent / "slow-trials" / (
            f"{self.workdir.name}-{fault}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        keep.mkdir(parents=True, exist_ok=True)
        for nid, n in self.lc.nodes.items():
            try:
                with open(n.log_path, "rb") as f:
                    f.seek(marks.get(nid, 0))
                    (keep / f"node-{nid}.log").write_bytes(f.read())
            except FileNotFoundError:
                continue
        (keep / "trial.json").write_text(json.dumps(r, indent=1, default=str) + "\n")
        return keep

    def _fault_trial(self, inflight: int, max_s: float, fault: str) -> dict[str, Any]:
        assert self.driver is not None
        lid = self.wait_leader()
        marks = self._log_marks()
        addrs = [self.addr(lid)] + [self.addr(n) for n in self.lc.nodes if n != lid]
        kill_at = time.monotonic() + 1.0
        if self.client == "binary":
            order = [lid] + [n for n in self.lc.nodes if n != lid]
            self.driver.send({"cmd": "bin_failover", "inflight": inflight, "kill_at": kill_at,
                              "max_s": max_s, "addrs": {str(n): self.bin_addr(n) for n in order}})
        else:
            self.driver.send({"cmd": "failover", "addrs": addrs, "inflight": inflight,
                              "kill_at": kill_at, "max_s": max_s})
        time.sleep(max(0.0, kill_at - time.monotonic()))
        node = self.lc.nodes[lid]
        if fault == "kill":
            assert node.process is not None
            os.kill(node.process.pid, signal.SIGKILL)
        else:
            assert self.proxy is not None
            self.proxy.call({"cmd": "isolate", "node": lid}, 10)
        done_at = time.monotonic()  # the node is dead, or every route of it cut, by now
        r = recovery_after(self.driver.recv(max_s + 30), done_at)
        r["old_leader"] = lid
        if fault == "kill":
            kill_proc(node.process, graceful_s=0)
            self.start_node(lid)
        else:
            assert self.proxy is not None
            self.proxy.call({"cmd": "heal"}, 10)
        self.wait_leader(30)
        r["caught_up_after"] = self.wait_caught_up(30)
        rec = r.get("recovery_s")
        if rec is None or rec > self.slow_trial_limit_s(fault):
            r["logs_kept"] = str(self._keep_trial_logs(fault, marks, r))
            print(f"   slow {fault} trial ({rec} s): node logs kept in {r['logs_kept']}", flush=True)
        return r

    def failover_trial(self, inflight: int, max_s: float) -> dict[str, Any]:
        """kill -9 of the leader under load; then restart it and wait until caught up."""
        return self._fault_trial(inflight, max_s, "kill")

    def partition_trial(self, inflight: int, max_s: float) -> dict[str, Any]:
        """Silent partition of the leader (proxy drops its traffic) under load; then heal."""
        return self._fault_trial(inflight, max_s, "partition")

    def cap_fetch(self, version: int | None) -> None:
        """Make every node advertise Fetch <= `version` (None: no cap) and reconnect."""
        assert self.proxy is not None
        self.proxy.call({"cmd": "cap_fetch", "version": version}, 10)
        self.wait_leader(30)
        self.wait_caught_up(30)

    def visibility(self, samples: int, gap_s: float, max_wait_s: float = 5.0) -> dict[str, Any]:
        """Leader acknowledgement -> value visible in a follower's local (stale) read."""
        assert self.driver is not None
        lid = self.wait_leader()
        fid = next(n for n in self.lc.nodes if n != lid and self.lc.nodes[n].alive)
        if self.client == "binary":
            req = {"cmd": "bin_visibility", "leader": self.bin_addr(lid),
                   "follower": self.bin_addr(fid)}
        else:
            req = {"cmd": "visibility", "leader": self.addr(lid), "follower": self.addr(fid)}
        r: dict[str, Any] = self.driver.call(
            dict(req, samples=samples, gap_s=gap_s, max_wait_s=max_wait_s),
            samples * (gap_s + max_wait_s) + 60)
        return r

    def put_big(self, count: int, size: int, inflight: int = 4) -> dict[str, Any]:
        """Write `count` values of `size` bytes through the leader (to build up state)."""
        assert self.driver is not None
        return self.driver.call({"cmd": "put_big", "addr": self.addr(self.wait_leader()),
                                 "count": count, "size": size, "inflight": inflight}, 1800)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "driver":
        driver_main()
    elif what == "proxy":
        proxy_main()
    else:
        print("usage: python -m bench.systems.kraft_cluster driver|proxy", file=sys.stderr)
        sys.exit(2)
