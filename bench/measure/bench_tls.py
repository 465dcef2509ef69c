"""The write path with TLS on the controller listener beside the same quorum without it.

Three `kraft run` processes on loopback, fsync on, the authorizer on in the TLS run (mTLS,
`ssl.client.auth=required`, a throwaway CA made with `cryptography`). The client writes go
through the binary client protocol (not TLS: only the controller listener is), so what
differs is what TLS costs the replication: the followers' Fetches and their answers go
through OpenSSL, and the native lanes step aside on TLS sockets (docs/native-lane.md), so
the TLS run is the Python path. For the part the lanes play, the plaintext run is given
twice: with the lanes (the default) and with `kraft.lane.*=false`.

Figures: binary client, one write at a time (sequential: the latency of one commit) and
`WORKERS` x `BATCH` outstanding (throughput); p50 and p99 per call.
`python -m bench tls` runs it; `write_markdown` renders its section of docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.measure.bench_node import TIMEOUTS, _binary_writers, _pct
from kraft.cli.local import LocalCluster

QUICK = os.environ.get("BENCH_QUICK") == "1"
SECONDS = 2.0 if QUICK else 5.0
WORKERS = 16
BATCH = 64
ORG = "kraft-bench"


def _measure(base: Path, variant: str) -> dict[str, Any]:
    props = dict(TIMEOUTS)
    if variant == "plaintext, Python path":
        props.update({"kraft.lane.leader": "false", "kraft.lane.follower": "false"})
    cluster = LocalCluster(base, voters=3, properties=props)
    if variant == "TLS (mTLS, authorizer on)":
        from tests.support.pki import enable_mtls  # the tests' throwaway PKI

        enable_mtls(cluster, org=ORG, super_nodes=False)
    out: dict[str, Any] = {"variant": variant}
    try:
        cluster.start_all()
        leader = cluster.wait_for_leader(60)
        for nid in cluster.nodes:
            cluster.wait_ready(nid, 60)
        address = cluster.nodes[leader].client
        for name, workers, batch in (("sequential", 1, 1), ("pipelined", WORKERS, BATCH)):
            asyncio.run(_binary_writers(address, 0.5, workers, batch))  # warm-up
            started = time.monotonic()
            latencies, done = asyncio.run(_binary_writers(address, SECONDS, workers, batch))
            elapsed = time.monotonic() - started
            ms = [x * 1000 for x in latencies]
            out[name] = {"outstanding": workers * batch, "commits_per_s": round(done / elapsed, 1),
                         "p50_ms": round(_pct(ms, 0.5), 3), "p99_ms": round(_pct(ms, 0.99), 3)}
    finally:
        cluster.stop_all()
    return out


VARIANTS = ("plaintext (lanes on, the default)", "plaintext, Python path",
            "TLS (mTLS, authorizer on)")


def run() -> dict[str, Any]:
    """Each variant's sequential and pipelined figures."""
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        return {"seconds": SECONDS, "variants": [
            _measure(Path(tmp) / f"v{i}", v) for i, v in enumerate(VARIANTS)]}


BEGIN = "<!-- BEGIN SECTION: tls (bench/measure/bench_tls.py) -->"
END = "<!-- END SECTION: tls -->"


def render_section(result: dict[str, Any]) -> str:
    lines = [
        BEGIN,
        "## The write path with TLS on the controller listener",
        "",
        "Three `kraft run` processes on loopback, fsync on, writes of 100 bytes through the "
        "binary client protocol to the leader, "
        f"{result['seconds']:g} s per figure (`bench/measure/bench_tls.py`, "
        "`python -m bench tls`). The TLS run has mTLS between the nodes and the authorizer "
        "on; the native lanes step aside on TLS sockets, so it runs the Python path, which "
        "the middle row measures without TLS.",
        "",
        "| variant | sequential commits/s | p50 | p99 | pipelined commits/s | p50 | p99 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v in result["variants"]:
        s, p = v["sequential"], v["pipelined"]
        lines.append(f"| {v['variant']} | {s['commits_per_s']} | {s['p50_ms']} ms | "
                     f"{s['p99_ms']} ms | {p['commits_per_s']} | {p['p50_ms']} ms | "
                     f"{p['p99_ms']} ms |")
    lines += ["", f"Pipelined: {result['variants'][0]['pipelined']['outstanding']} writes "
              "outstanding on one connection; p50/p99 are per batch call.", ""]
    by = {v["variant"]: v for v in result["variants"]}
    tls, py, lanes = (by.get(name) for name in VARIANTS[::-1])
    if tls and py and lanes:
        def ratio(a: dict[str, Any], b: dict[str, Any], kind: str) -> str:
            return f"{a[kind]['commits_per_s'] / b[kind]['commits_per_s']:.2f}x"
        lines.append(
            "What TLS costs in this run: commits/s with TLS against the plaintext Python path "
            f"{ratio(tls, py, 'sequential')} sequential, {ratio(tls, py, 'pipelined')} "
            "pipelined; against the default (the lanes on) "
            f"{ratio(tls, lanes, 'sequential')} sequential, {ratio(tls, lanes, 'pipelined')} "
            "pipelined. On this project's shared 2-core machines a short run moves by tens "
            "of percent between runs: read a difference below that as noise.")
    lines.append(END)
    return "\n".join(lines)


def write_markdown(result: dict[str, Any], md_path: Path) -> None:
    """Insert or replace the TLS section of docs/benchmarks.md (other sections untouched)."""
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
