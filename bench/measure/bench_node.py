"""Node benchmarks with real `kraft run` processes on loopback (fsync on).

* election time after `kill -9` of the leader: time from the kill until a surviving node
  reports itself leader with a high watermark in the new epoch (polled every 10 ms through its
  admin API), over `ELECTION_TRIALS` trials; timeouts: election 500 ms, fetch 1000 ms;
* commit throughput and latency of 3 voters: `CLIENTS` concurrent HTTP clients PUT 100-byte
  values to the leader for `WRITE_SECONDS`; latency is measured by the client from request to
  the 200 answer (committed on a majority, fsynced, applied);
* the same over HTTPS with a bearer token (`kraft.http.ssl.*`, `kraft.http.auth.token.file`,
  docs/security.md): what TLS and the token check cost a write on the HTTP port;
* the same through the binary pipelined client protocol (`kraft.admin.kv_client`): one write
  at a time (sequential latency), and `BINARY_WORKERS` x `BINARY_BATCH` writes outstanding on
  one connection (throughput);
* failover after `kill -9` of the leader: from the kill until a write commits again (a client
  retries every survivor every 2 ms through the binary protocol, following NOT_LEADER).

`python -m bench node` runs it; `run()` returns the figures for docs/benchmarks.{json,md}.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from kraft.admin.http_credentials import HttpCredentials
from kraft.admin.kv_client import ClientError, KvClient
from kraft.cli.local import LocalCluster

QUICK = os.environ.get("BENCH_QUICK") == "1"
ELECTION_TRIALS = 5 if QUICK else 24
WRITE_SECONDS = 3.0 if QUICK else 10.0
CLIENTS = 32
BINARY_WORKERS = 16
BINARY_BATCH = 256
FAILOVER_TRIALS = 5 if QUICK else 20
TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.request.timeout.ms": "1000",
}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def _new_leader_after(cluster: LocalCluster, old: int, old_epoch: int, timeout: float) -> float:
    started = time.monotonic()
    survivors = [n for n in cluster.nodes if n != old]
    while time.monotonic() - started < timeout:
        for nid in survivors:
            st = cluster.status(nid, timeout=0.5)
            if st and st["role"] == "leader" and st["epoch"] > old_epoch \
                    and st["high_watermark"] >= 0:
                return time.monotonic() - started
        time.sleep(0.01)
    raise TimeoutError("no new leader")


def _kill_leader_trials(base: Path, trials: int, properties: dict[str, str] | None,
                       measure: Callable[[LocalCluster, int, int], float],
                       settle_s: float = 0.0) -> dict[str, Any]:
    """Kill -9 the leader of a ready 3-voter quorum `trials` times; `measure(cluster, killed,
    old_epoch)` returns the seconds until the quorum recovered by its own definition."""
    props = TIMEOUTS if properties is None else properties
    cluster = LocalCluster(base, voters=3, properties=props)
    times: list[float] = []
    try:
        cluster.start_all()
        for _ in range(trials):
            leader = cluster.wait_for_leader(60)
            for nid in cluster.nodes:
                cluster.wait_ready(nid, 60)
            st = cluster.status(leader)
            assert st is not None
            time.sleep(settle_s)
            cluster.kill(leader, signal.SIGKILL)
            times.append(measure(cluster, leader, st["epoch"]) * 1000)
            cluster.start(leader)
            cluster.wait_ready(leader, 60)
    finally:
        cluster.stop_all()
    return {
        "election_timeout_ms": int(props.get("controller.quorum.election.timeout.ms", 1000)),
        "fetch_timeout_ms": int(props.get("controller.quorum.fetch.timeout.ms", 2000)),
        "trials": len(times),
        "p50_ms": round(_pct(times, 0.5), 1),
        "p99_ms": round(_pct(times, 0.99), 1),
        "min_ms": round(min(times), 1),
        "max_ms": round(max(times), 1),
        "mean_ms": round(statistics.fmean(times), 1),
    }


def bench_elections(base: Path, trials: int = ELECTION_TRIALS,
                    properties: dict[str, str] | None = None) -> dict[str, Any]:
    """Kill -9 the leader `trials` times; returns election-time percentiles in ms."""
    return _kill_leader_trials(
        base, trials, properties,
        lambda cluster, killed, epoch: _new_leader_after(cluster, killed, epoch, 60))


async def _writers(address: str, seconds: float, clients: int,
                   credentials: HttpCredentials | None = None,
                   ) -> tuple[list[float], int, float]:
    """`clients` closed loops of PUTs for `seconds`: (latencies, errors, elapsed). Each client
    opens its connection (and its TLS session) with a GET /healthz before the clock starts,
    so the figures are the write path's, not the handshakes'."""
    latencies: list[float] = []
    errors = 0
    value = b"v" * 100
    creds = credentials or HttpCredentials()
    context = creds.ssl_context()
    connected = 0
    go = asyncio.Event()
    stop_at = 0.0

    async def client(c: int) -> None:
        nonlocal errors, connected
        i = 0
        async with aiohttp.ClientSession(
                headers=creds.headers(),
                connector=aiohttp.TCPConnector(ssl=context) if context else None) as session:
            async with session.get(creds.url(address, "/healthz")) as resp:
                await resp.read()
            connected += 1
            if connected == clients:
                go.set()
            await go.wait()
            while time.monotonic() < stop_at:
                i += 1
                t0 = time.monotonic()
                async with session.put(creds.url(address, f"/v1/kv/bench-{c}-{i % 50}"),
                                       data=value) as resp:
                    await resp.read()
                    if resp.status == 200:
                        latencies.append(time.monotonic() - t0)
                    else:
                        errors += 1

    async def clock() -> float:
        nonlocal stop_at
        await go.wait()
        started = time.monotonic()
        stop_at = started + seconds
        return started

    started, *_ = await asyncio.gather(clock(), *(client(c) for c in range(clients)))
    return latencies, errors, time.monotonic() - started


def _secure(cluster: LocalCluster, base: Path) -> HttpCredentials:
    """Turn on HTTPS (one certificate naming every node's address) and a token file for
    `cluster`'s nodes; returns the credentials of a writer."""
    from tests.support.http_certs import Ca

    base.mkdir(parents=True, exist_ok=True)
    ca = Ca.make("bench-ca")
    keystore = base / "http.pem"
    ca.keystore(keystore, "kraft-bench", ip=sorted({n.host for n in cluster.nodes.values()}))
    token = secrets.token_urlsafe(32)
    (base / "tokens.csv").write_text(f"{token},bench,write\n")
    cluster.properties.update({"kraft.http.ssl.keystore.location": str(keystore),
                               "kraft.http.auth.token.file": str(base / "tokens.csv")})
    creds = HttpCredentials(token=token, cafile=str(ca.write(base / "ca.pem")))
    cluster.credentials = creds
    return creds


def bench_commits(base: Path, seconds: float = WRITE_SECONDS, clients: int = CLIENTS,
                  secure: bool = False) -> dict[str, Any]:
    """Concurrent PUTs to the leader of 3 voters; throughput and latency percentiles.
    `secure`: over HTTPS with a bearer token checked on every request."""
    cluster = LocalCluster(base, voters=3, properties=TIMEOUTS)
    creds = _secure(cluster, base / "http-security") if secure else None
    try:
        cluster.start_all()
        leader = cluster.wait_for_leader(60)
        for nid in cluster.nodes:
            cluster.wait_ready(nid, 60)
        address = cluster.nodes[leader].http
        asyncio.run(_writers(address, 1.0, clients, creds))  # warm-up
        latencies, errors, elapsed = asyncio.run(_writers(address, seconds, clients, creds))
        st = cluster.status(leader)
    finally:
        cluster.stop_all()
    ms = [x * 1000 for x in latencies]
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "commits": len(ms),
        "errors": errors,
        "commits_per_s": round(len(ms) / elapsed, 1),
        "p50_ms": round(_pct(ms, 0.5), 2),
        "p99_ms": round(_pct(ms, 0.99), 2),
        "max_ms": round(max(ms), 2) if ms else None,
        "final_high_watermark": st["high_watermark"] if st else None,
    }


async def _binary_writers(address: tuple[str, int], seconds: float, workers: int,
                          batch: int) -> tuple[list[float], int]:
    """`workers` closed loops on one connection, each `batch` PUTs at a time (`put_many`);
    latency is per call (per batch when batch > 1)."""
    latencies: list[float] = []
    done = 0
    stop_at = time.monotonic() + seconds
    value = b"v" * 100
    async with KvClient(*address) as client:
        async def worker(w: int) -> None:
            nonlocal done
            i = 0
            while time.monotonic() < stop_at:
                t0 = time.monotonic()
                if batch == 1:
                    await client.put(f"bench-{w}-{i % 50}", value)
                else:
                    await client.put_many([(f"bench-{w}-{j % 1000}", value)
                                           for j in range(i, i + batch)])
                latencies.append(time.monotonic() - t0)
                done += batch
                i += batch

        await asyncio.gather(*(worker(w) for w in range(workers)))
    return latencies, done


def bench_binary(base: Path, seconds: float = WRITE_SECONDS, workers: int = BINARY_WORKERS,
                 batch: int = BINARY_BATCH) -> dict[str, Any]:
    """Writes through the binary client protocol to the leader of 3 voters."""
    cluster = LocalCluster(base, voters=3, properties=TIMEOUTS)
    try:
        cluster.start_all()
        leader = cluster.wait_for_leader(60)
        for nid in cluster.nodes:
            cluster.wait_ready(nid, 60)
        address = cluster.nodes[leader].client
        asyncio.run(_binary_writers(address, 1.0, workers, batch))  # warm-up
        started = time.monotonic()
        latencies, done = asyncio.run(_binary_writers(address, seconds, workers, batch))
        elapsed = time.monotonic() - started
    finally:
        cluster.stop_all()
    ms = [x * 1000 for x in latencies]
    return {
        "workers": workers, "batch": batch, "outstanding": workers * batch,
        "seconds": round(elapsed, 1), "commits": done,
        "commits_per_s": round(done / elapsed, 1),
        "p50_ms": round(_pct(ms, 0.5), 3), "p99_ms": round(_pct(ms, 0.99), 3),
        "max_ms": round(max(ms), 2) if ms else None,
    }


async def _write_again(cluster: LocalCluster, survivors: list[int], timeout: float) -> float:
    started = time.monotonic()
    clients: dict[int, KvClient] = {}
    try:
        while time.monotonic() - started < timeout:
            for nid in survivors:
                try:
                    if nid not in clients:
                        clients[nid] = await KvClient(*cluster.nodes[nid].client).connect(0.5)
                    await asyncio.wait_for(clients[nid].put("failover", b"x"), 0.5)
                    return time.monotonic() - started
                except (ClientError, OSError, TimeoutError):
                    bad = clients.pop(nid, None)
                    if bad is not None:
                        await bad.close()
            await asyncio.sleep(0.002)
    finally:
        for c in clients.values():
            await c.close()
    raise TimeoutError("no write committed after the kill")


def bench_failover(base: Path, trials: int = FAILOVER_TRIALS,
                   properties: dict[str, str] | None = None) -> dict[str, Any]:
    """Kill -9 the leader `trials` times; time until a write commits again, in ms."""
    return _kill_leader_trials(
        base, trials, properties,
        lambda cluster, killed, _epoch: asyncio.run(
            _write_again(cluster, [n for n in cluster.nodes if n != killed], 60)),
        settle_s=0.2)


def run() -> dict[str, Any]:
    """Both node benchmarks (figures for docs/benchmarks.md)."""
    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        base = Path(tmp)
        return {
            "election_after_kill9": bench_elections(base / "elections"),
            "election_after_kill9_kafka_defaults": bench_elections(
                base / "elections-defaults", max(5, ELECTION_TRIALS - 4), {}),
            "commit_3_voters_fsync": bench_commits(base / "commits"),
            "commit_3_voters_fsync_1_client": bench_commits(base / "commits-1",
                                                            WRITE_SECONDS / 2, 1),
            "commit_3_voters_fsync_https_token": bench_commits(base / "commits-tls",
                                                               secure=True),
            "commit_3_voters_fsync_https_token_1_client": bench_commits(
                base / "commits-tls-1", WRITE_SECONDS / 2, 1, secure=True),
            "binary_sequential": bench_binary(base / "binary-1", WRITE_SECONDS / 2, 1, 1),
            "binary_pipelined": bench_binary(base / "binary-n"),
            "failover_write_after_kill9": bench_failover(base / "failover"),
            "failover_write_after_kill9_kafka_defaults": bench_failover(
                base / "failover-defaults", FAILOVER_TRIALS, {}),
        }


BEGIN = "<!-- BEGIN SECTION: node (bench/measure/bench_node.py) -->"
END = "<!-- END SECTION: node -->"


def render_section(result: dict[str, Any]) -> str:
    """The node section of docs/benchmarks.md."""
    e = result["election_after_kill9"]
    d = result.get("election_after_kill9_kafka_defaults")
    c = result["commit_3_voters_fsync"]
    one = result.get("commit_3_voters_fsync_1_client")
    lines = [
        BEGIN,
        "## Node: election after kill -9, commits of 3 voters (kraft run processes)",
        "",
        "Real `kraft run` processes on loopback (127.0.0.1-3), fsync on, measured by "
        "`bench/measure/bench_node.py` (`python -m bench node`).",
        "",
        "**Election time after `kill -9` of the leader** (from the kill until a survivor "
        "reports leader with a high watermark in a higher epoch, polled every 10 ms; the test "
        "suite's timeouts and Kafka's defaults):",
        "",
        "| timeouts (election / fetch) | trials | p50 | p99 | min | max | mean |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in (e, d):
        if row:
            lines.append(
                f"| {row.get('election_timeout_ms', 500)} / {row.get('fetch_timeout_ms', 1000)} ms "
                f"| {row['trials']} | {row['p50_ms']} ms | {row['p99_ms']} ms | {row['min_ms']} ms "
                f"| {row['max_ms']} ms | {row['mean_ms']} ms |")
    lines += [
        "",
        "Followers notice a dead leader at once: its parked fetches break, the reconnect is "
        "refused, and a refused connection starts a pre-vote (voters in id order, one "
        "election timeout / 10 apart); pre-vote keeps it safe (a voter still fetching from a live "
        "leader rejects). The fetch timeout only matters for a silent leader.",
        "",
        "**Commit throughput and latency, 3 voters** (client-measured HTTP PUT of a 100-byte "
        "value until the 200 answer: committed on a majority after fsync, applied; batches go "
        "out at once when none is waiting for commit, else grow until the oldest commits, "
        "append linger 25 ms at most):",
        "",
        "| clients | commits/s | p50 | p99 | max | commits | errors |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {c['clients']} | {c['commits_per_s']} | {c['p50_ms']} ms | {c['p99_ms']} ms | "
        f"{c['max_ms']} ms | {c['commits']} | {c['errors']} |",
    ]
    if one:
        lines.append(
            f"| {one['clients']} | {one['commits_per_s']} | {one['p50_ms']} ms | "
            f"{one['p99_ms']} ms | {one['max_ms']} ms | {one['commits']} | {one['errors']} |")
    tls = [r for r in (result.get("commit_3_voters_fsync_https_token"),
                       result.get("commit_3_voters_fsync_https_token_1_client")) if r]
    if tls:
        lines += ["", "The same over HTTPS (TLS 1.3, an ECDSA P-256 certificate) with a bearer "
                  "token checked on every request (docs/security.md):", "",
                  "| clients | commits/s | p50 | p99 | max | commits | errors |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in tls:
            lines.append(
                f"| {row['clients']} | {row['commits_per_s']} | {row['p50_ms']} ms | "
                f"{row['p99_ms']} ms | {row['max_ms']} ms | {row['commits']} | {row['errors']} |")
    fo = [r for r in (result.get("failover_write_after_kill9"),
                      result.get("failover_write_after_kill9_kafka_defaults")) if r]
    if fo:
        lines += [
            "",
            "**Failover: `kill -9` of the leader until a write commits again** (a client retries "
            "every survivor every 2 ms through the binary protocol):",
            "",
            "| timeouts (election / fetch) | trials | p50 | p99 | min | max | mean |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in fo:
            lines.append(
                f"| {row['election_timeout_ms']} / {row['fetch_timeout_ms']} ms | {row['trials']} "
                f"| {row['p50_ms']} ms | {row['p99_ms']} ms | {row['min_ms']} ms "
                f"| {row['max_ms']} ms | {row['mean_ms']} ms |")
    bs, bp = result.get("binary_sequential"), result.get("binary_pipelined")
    if bs or bp:
        lines += [
            "",
            "**Binary pipelined client protocol** (`kraft.admin.kv_client`, one TCP connection to "
            "the leader, 100-byte PUTs, committed on a majority after fsync and applied; latency "
            "per call, per `put_many` batch when batched):",
            "",
            "| outstanding | commits/s | p50 | p99 | max | commits |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in (bs, bp):
            if row:
                shape = ("1 (sequential)" if row["outstanding"] == 1 else
                         f"{row['outstanding']} ({row['workers']} x put_many of {row['batch']})")
                lines.append(
                    f"| {shape} | {row['commits_per_s']} | {row['p50_ms']} ms | "
                    f"{row['p99_ms']} ms | {row['max_ms']} ms | {row['commits']} |")
    lines += [
        "",
        "**Linearizability evidence.** Every KV history recorded by the process tests "
        "(`tests/node/`: kill -9 of the leader under load, 3→5→3 voters under load, one-way "
        "loss, delay and connection resets through the fault proxy) is checked by the "
        "Wing-Gong-Lowe checker in `tests/support/linearizability.py` (per-key register model "
        "for put/get/delete/cas, memoized search, unknown-outcome writes modelled as possibly "
        "applied); a stale read taken from an isolated old leader is rejected by it "
        "(`test_isolated_leader_is_replaced_and_a_stale_read_path_is_caught`).",
        END,
    ]
    return "\n".join(lines)


def write_markdown(result: dict[str, Any], md_path: Path) -> None:
    """Insert or replace the node section of docs/benchmarks.md (other sections untouched)."""
    text = md_path.read_text() if md_path.exists() else "# Benchmarks\n\n"
    block = render_section(result)
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        marker = "<!-- BEGIN GENERATED: make bench -->"
        if marker in text:
            i = text.index(marker)
            text = text[:i] + block + "\n\n" + text[i:]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    md_path.write_text(text)


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
