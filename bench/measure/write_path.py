"""Where a sequential write's time goes inside a running quorum, step by step.

docs/journal/perf-18-sequential-p50-bound.md traced one write by hand; this does it for every write of a
window. It starts a `KraftCluster` (three `kraft run` processes, fsync on, the benchmark's
properties) whose nodes load `bench/measure/write_path_hook` (a `sitecustomize` that timestamps the
functions a write runs through), writes one value at a time for `--seconds`, and lines the
steps of the leader and the followers up on the machine's monotonic clock:

    .venv/bin/python -m bench.measure.write_path [--seconds 4] [--json FILE] [--property K=V ...]

For each write the leader read from its client, the chain is: the leader's core and append,
its fsync submitted, the records written to the followers' parked fetches; the follower that
acknowledges first reading them, decoding, its core, its write (written through with
preallocation, else the append and the inline fsync), its next fetch sent; the leader reading
that fetch, its core, the apply and the answer to the client. It prints the median time of
each step since the leader read the request and the median time since the step before (both
per write, so the second column is not the difference of the first).

The leader's end is found backwards from the answer: the apply before it, the core step
before that (the one that committed) and the fetch that core step handled. The follower
followed is the one whose acknowledgement went out first of those sent before that fetch
was read; a write no traced follower's acknowledgement could have committed (a trace cut
short) is left out. The leader's fsync is in a write's row only when it was submitted before
the records went out (one submitted later waited for the flush before it). So every row's
steps are in time order.

The wrappers add a call and a clock read to every step, so the figures are somewhat above an
untraced run's (the client's p50, taken with the trace on, is printed alongside). The steps
are what they are for: telling where the time between two steps goes, which end-to-end pairs
of runs cannot resolve below some tens of microseconds (docs/journal/perf-18-sequential-p50-bound.md).
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from array import array
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HOOK = Path(__file__).resolve().parent / "write_path_hook"
MAX_WRITE_NS = 20_000_000
"""A chain longer than this (an election, a stall) is not a write's steps: left out."""

Events = list[tuple[str, int]]


def names() -> tuple[str, ...]:
    """The hook's step names by code. Its file is loaded under another module name, so it
    installs nothing here (it does only as `sitecustomize`)."""
    spec = importlib.util.spec_from_file_location("write_path_hook", HOOK / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return tuple(hook.NAMES)


def load(path: Path, step_names: tuple[str, ...]) -> Events:
    """(step, ns) of one process, in time order."""
    raw = array("q")
    raw.frombytes(path.read_bytes()[: path.stat().st_size // 16 * 16])
    out = [(step_names[raw[i]], raw[i + 1]) for i in range(0, len(raw), 2)]
    out.sort(key=lambda e: e[1])
    return out


class _Stream:
    """One process's steps, searchable by time."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.times = [t for _, t in events]

    def first(self, step: str, after: int, before: int | None = None) -> int | None:
        """Time of the first `step` strictly after `after` (and before `before`)."""
        i = bisect.bisect_right(self.times, after)
        limit = after + MAX_WRITE_NS if before is None else before
        events = self.events
        while i < len(events) and events[i][1] < limit:
            if events[i][0] == step:
                return events[i][1]
            i += 1
        return None

    def last(self, step: str, after: int, before: int) -> int | None:
        """Time of the last `step` strictly after `after` and strictly before `before`."""
        i = bisect.bisect_left(self.times, before) - 1
        events = self.events
        while i >= 0 and events[i][1] > after:
            if events[i][0] == step:
                return events[i][1]
            i -= 1
        return None


# (row label, who, step): the chain of one write, in order. "L" is the leader, "F" the
# follower that acknowledged first.
CHAIN: tuple[tuple[str, str, str], ...] = (
    ("client request read", "L", "client_read"),
    ("core handles the write", "L", "core"),
    ("append starts", "L", "append"),
    ("append done", "L", "appended"),
    ("fsync submitted", "L", "flush_submitted"),
    ("records to the first follower", "L", "answer_written"),
    ("records read", "F", "response_read"),
    ("fetch response decoded", "F", "decoded"),
    ("core handles it", "F", "core"),
    ("write starts", "F", "write"),
    ("write durable", "F", "written"),
    ("next fetch sent", "F", "request_sent"),
    ("acknowledgement read", "L", "request_read"),
    ("core handles it", "L", "core"),
    ("apply starts", "L", "apply"),
    ("client answer written", "L", "client_answer"),
)


def _follower_chain(f: _Stream, records_sent: int) -> dict[str, int] | None:
    rx = f.first("response_read", records_sent)
    if rx is None:
        return None
    out = {"response_read": rx}
    for step in ("decoded", "core"):
        t = f.first(step, out[list(out)[-1]])
        if t is None:
            return None
        out[step] = t
    write = f.first("write", out["core"])
    written = f.first("written", write) if write is not None else None
    if write is None or written is None:  # not written through: the append and its fsync
        write = f.first("append", out["core"])
        synced = f.first("synced", write) if write is not None else None
        if write is None or synced is None:
            return None
        written = synced
    out["write"], out["written"] = write, written
    sent = f.first("request_sent", written)
    if sent is None:
        return None
    out["request_sent"] = sent
    return out


def chains(leader: Events, followers: list[Events]) -> list[dict[str, Any]]:
    """Per write the leader read from its client: {row index: ns since the request}, plus the
    second follower's write duration under "other_write_us"."""
    lead = _Stream(leader)
    fols = [_Stream(f) for f in followers]
    starts = [t for s, t in leader if s == "client_read"]
    out: list[dict[str, Any]] = []
    for n, t0 in enumerate(starts):
        nxt = starts[n + 1] if n + 1 < len(starts) else None
        at: dict[str, int] = {}
        prev = t0
        ok = True
        for step in ("core", "append", "appended"):
            t = lead.first(step, prev, nxt)
            if t is None:
                ok = False
                break
            at[step] = prev = t
        if not ok:
            continue
        sent = lead.first("answer_written", at["appended"], nxt)
        if sent is None:
            continue
        # the fsync is on the chain only when submitted before the records went out; one
        # submitted later waited for the flush before it (it is left out of that write's row)
        submitted = lead.first("flush_submitted", at["appended"], sent)
        # the leader's side is found backwards from the answer: the apply before it, the core
        # step that committed, and the acknowledgement that core step handled
        answer = lead.first("client_answer", sent, nxt)
        apply = lead.last("apply", sent, answer) if answer is not None else None
        core = lead.last("core", sent, apply) if apply is not None else None
        ack = lead.last("request_read", sent, core) if core is not None else None
        if answer is None or apply is None or core is None or ack is None:
            continue
        # the chain follows the follower that sent its acknowledgement first, of those sent
        # before the one the leader committed on
        fchains = [c for c in (_follower_chain(f, sent) for f in fols) if c is not None]
        fchains.sort(key=lambda c: c["request_sent"])
        before_ack = [c for c in fchains if c["request_sent"] < ack]
        if not before_ack:
            continue
        first = before_ack[0]
        times = [t0, at["core"], at["append"], at["appended"], submitted, sent,
                 first["response_read"], first["decoded"], first["core"], first["write"],
                 first["written"], first["request_sent"], ack, core, apply, answer]
        if answer - t0 > MAX_WRITE_NS:
            continue
        row: dict[str, Any] = {i: (t - t0) / 1000 for i, t in enumerate(times) if t is not None}
        others = [c for c in fchains if c is not first]
        if others:
            row["other_write_us"] = (others[0]["written"] - others[0]["write"]) / 1000
        out.append(row)
    return out


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per step of CHAIN: median us since the request and since the step before it."""
    table = []
    for i, (label, who, step) in enumerate(CHAIN):
        have = [r for r in rows if i in r]
        if not have:
            continue
        since = [r[i] for r in have]
        prev = [r[i] - max(v for k, v in r.items() if isinstance(k, int) and k < i)
                for r in have if i > 0]
        table.append({"step": label, "where": "leader" if who == "L" else "first follower",
                      "name": step, "writes": len(have),
                      "since_request_us": round(statistics.median(since), 1),
                      "since_previous_us": round(statistics.median(prev), 1) if prev else 0.0})
    return table


def run(seconds: float, properties: dict[str, str]) -> dict[str, Any]:
    """Run the traced quorum and return the summary (also what `--json` writes)."""
    from bench.systems.kraft_cluster import KraftCluster

    step_names = names()
    with tempfile.TemporaryDirectory(prefix="kraft-write-path-") as tmp:
        trace = Path(tmp) / "steps"
        trace.mkdir()
        # the Python path is what is traced: the native lanes stay off
        cluster = KraftCluster(Path(tmp) / "cluster",
                               properties={"kraft.lane.follower": "false",
                                           "kraft.lane.leader": "false", **properties})
        # the nodes inherit the environment they are started with (BENCH_KRAFT_SRC, which
        # sets their PYTHONPATH itself, leaves the hook out: no steps are then recorded)
        saved = {k: os.environ.get(k) for k in ("BENCH_WRITE_TRACE", "PYTHONPATH")}
        os.environ["BENCH_WRITE_TRACE"] = str(trace)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(HOOK), str(ROOT)])
        try:
            try:
                cluster.start()
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            leader = cluster.wait_leader()
            warm = cluster.seq(1.0, 0.0)  # write-in: connections, segments, preallocation
            pids = {name: pid for name, pid in cluster.pids().items() if name.startswith("node")}
            result = cluster.seq(seconds, 0.0)
        finally:
            cluster.stop()
        streams = {}
        for name, pid in pids.items():
            path = trace / f"steps.{pid}.bin"
            if not path.exists():
                raise RuntimeError(f"{name} (pid {pid}) recorded no steps: is the hook loaded?")
            streams[name] = load(path, step_names)
    followers = [ev for name, ev in streams.items() if name != f"node{leader}"]
    rows = chains(streams[f"node{leader}"], followers)
    other = [r["other_write_us"] for r in rows if "other_write_us" in r]
    return {
        "seconds": seconds, "properties": properties,
        "client": {k: result["latency"][k] for k in ("n", "p50_ms", "p99_ms")},
        "writes_acknowledged": warm["latency"]["n"] + result["latency"]["n"],
        "writes_traced": len(rows),
        "steps": summarize(rows),
        "second_follower_write_us": round(statistics.median(other), 1) if other else None,
    }


def render(summary: dict[str, Any]) -> str:
    lines = [f"{summary['writes_traced']} writes traced (the 1 s write-in included); the client's "
             f"window: {summary['client']['n']} writes (p50 {summary['client']['p50_ms']:.3f} ms, p99 "
             f"{summary['client']['p99_ms']:.3f} ms, with the trace on)",
             f"{'step':32s} {'where':15s} {'since request':>14s} {'since previous':>15s}  (median us)"]
    for s in summary["steps"]:
        lines.append(f"{s['step']:32s} {s['where']:15s} {s['since_request_us']:14.1f} "
                     f"{s['since_previous_us']:15.1f}")
    if summary["second_follower_write_us"] is not None:
        lines.append(f"the other follower's write: {summary['second_follower_write_us']:.1f} us")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.measure.write_path", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=4.0, help="measured window (default 4)")
    p.add_argument("--json", type=Path, help="also write the summary to this file")
    p.add_argument("--property", action="append", default=[], metavar="K=V",
                   help="a node property on top of the benchmark's (repeatable)")
    args = p.parse_args(argv)
    if args.seconds <= 0:
        p.error(f"--seconds must be positive, got {args.seconds}")
    props = {}
    for kv in args.property:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            p.error(f"--property wants K=V, got {kv!r}")
        props[key] = value
    summary = run(args.seconds, props)
    print(render(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
