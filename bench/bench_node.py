"""Node benchmarks with real `kraft run` processes on loopback (fsync on).

* election time after `kill -9` of the leader: time from the kill until a surviving node
  reports itself leader with a high watermark in the new epoch (polled every 10 ms through its
  admin API), over `ELECTION_TRIALS` trials; timeouts: election 500 ms, fetch 1000 ms;
* commit throughput and latency of 3 voters: `CLIENTS` concurrent HTTP clients PUT 100-byte
  values to the leader for `WRITE_SECONDS`; latency is measured by the client from request to
  the 200 answer (committed on a majority, fsynced, applied).

`python -m bench node` runs it; `run()` returns the figures for docs/benchmarks.{json,md}.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from kraft.server.local import LocalCluster

ELECTION_TRIALS = 24
WRITE_SECONDS = 10.0
CLIENTS = 32
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


def bench_elections(base: Path, trials: int = ELECTION_TRIALS) -> dict[str, Any]:
    """Kill -9 the leader `trials` times; returns election-time percentiles in ms."""
    cluster = LocalCluster(base, voters=3, properties=TIMEOUTS)
    times: list[float] = []
    try:
        cluster.start_all()
        for nid in cluster.nodes:
            cluster.wait_ready(nid, 60)
        for _ in range(trials):
            leader = cluster.wait_for_leader(60)
            st = cluster.status(leader)
            assert st is not None
            for nid in cluster.nodes:
                cluster.wait_ready(nid, 60)
            cluster.kill(leader, signal.SIGKILL)
            elapsed = _new_leader_after(cluster, leader, st["epoch"], 60)
            times.append(elapsed * 1000)
            cluster.start(leader)
            cluster.wait_ready(leader, 60)
    finally:
        cluster.stop_all()
    return {
        "trials": len(times),
        "p50_ms": round(_pct(times, 0.5), 1),
        "p99_ms": round(_pct(times, 0.99), 1),
        "min_ms": round(min(times), 1),
        "max_ms": round(max(times), 1),
        "mean_ms": round(statistics.fmean(times), 1),
    }


async def _writers(address: str, seconds: float, clients: int) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    stop_at = time.monotonic() + seconds
    value = b"v" * 100

    async def client(c: int) -> None:
        nonlocal errors
        i = 0
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < stop_at:
                i += 1
                t0 = time.monotonic()
                async with session.put(f"http://{address}/v1/kv/bench-{c}-{i % 50}",
                                       data=value) as resp:
                    await resp.read()
                    if resp.status == 200:
                        latencies.append(time.monotonic() - t0)
                    else:
                        errors += 1

    await asyncio.gather(*(client(c) for c in range(clients)))
    return latencies, errors


def bench_commits(base: Path, seconds: float = WRITE_SECONDS, clients: int = CLIENTS) -> dict[str, Any]:
    """Concurrent PUTs to the leader of 3 voters; throughput and latency percentiles."""
    cluster = LocalCluster(base, voters=3, properties=TIMEOUTS)
    try:
        cluster.start_all()
        leader = cluster.wait_for_leader(60)
        for nid in cluster.nodes:
            cluster.wait_ready(nid, 60)
        address = cluster.nodes[leader].http
        asyncio.run(_writers(address, 1.0, clients))  # warm-up
        started = time.monotonic()
        latencies, errors = asyncio.run(_writers(address, seconds, clients))
        elapsed = time.monotonic() - started
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


def run() -> dict[str, Any]:
    """Both node benchmarks (figures for docs/benchmarks.md)."""
    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        base = Path(tmp)
        return {
            "election_after_kill9": bench_elections(base / "elections"),
            "commit_3_voters_fsync": bench_commits(base / "commits"),
            "commit_3_voters_fsync_1_client": bench_commits(base / "commits-1", 5.0, 1),
        }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
