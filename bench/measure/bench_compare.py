"""kraft-quorum against PySyncObj 0.3.17, etcd 3.4 and Apache Kafka's own raft benchmark
(`kafka.tools.TestRaftServer`), side by side, in one invocation.

`python -m bench compare` (full, about 28 minutes: 17 without the Kafka scenario) or `python -m bench compare --quick`
(`BENCH_QUICK=1`; a few minutes). Peers must be installed first:
`bash bench/systems/setup_peers.sh`, and Kafka's jars cached by `make kafka` (without them the
Kafka scenario records why it did not run and the others still run).

`run()` returns one dict per scenario (throughput, latency, failover, kip1166, snapshot,
restart, kafka_raft) plus `machine`, `versions` and `targets`; `write_markdown(result, md_path)`
(`bench.report.compare`) renders them as the comparison section of docs/benchmarks.md and the
charts in docs/img/.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.measure import kafka_raft, scenarios
from bench.measure.scenarios import (
    WORK,
    Params,
    evaluate_targets,
    failover,
    kip1166,
    snapshot_and_restart,
    throughput_and_latency,
)
from bench.report.compare import write_markdown
from bench.systems.peers import PEERS_VENV, ROOT, export_head, interpreter_path, machine_busy

__all__ = ["run", "write_markdown"]
"""`python -m bench` runs `run()`, then `write_markdown` renders the comparison's own section."""


def _cmd(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr) else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "missing"


def machine_info() -> dict[str, Any]:
    """nproc, memory, CPU model, kernel, disk of the work dir, and the peers' versions."""
    mem = 0
    model = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1])
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    peers_py = str(PEERS_VENV / "bin" / "python")
    pip_versions = _cmd([peers_py, "-c", "import importlib.metadata as m;print(' '.join("
                         "f'{p}=={m.version(p)}' for p in ('pysyncobj','etcd3','grpcio','protobuf')))"])
    return {"nproc": os.cpu_count(), "memory_gib": round(mem / 1024 / 1024, 1), "cpu": model,
            "kernel": platform.release(), "python": platform.python_version(),
            "python_executable": interpreter_path(),
            "peers_python_executable": _cmd([peers_py, "-c", "import os, sys; print(os.path."
                                             "realpath(sys._base_executable))"]),
            "workdir": str(WORK), "workdir_fs": _cmd(["findmnt", "-no", "FSTYPE,SOURCE", "-T", "/tmp"]),
            "versions": {"etcd": _cmd(["etcd", "--version"]), "peers_venv": pip_versions,
                         "kraft_commit": _cmd(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])}}


def _busy_summary(res: dict[str, Any]) -> dict[str, Any]:
    """How busy the machine was: the worst machine_before and the largest other_cpu_s seen."""
    worst_before, worst_other, windows, not_quiet = 0.0, 0.0, 0, 0

    def walk(x: Any) -> None:
        nonlocal worst_before, worst_other, windows, not_quiet
        if isinstance(x, dict):
            mb = x.get("machine_before")
            if isinstance(mb, dict):
                windows += 1
                worst_before = max(worst_before, mb.get("util_pct_before", 0))
                not_quiet += 0 if mb.get("quiet", True) else 1
            cpu = x.get("cpu")
            if isinstance(cpu, dict) and "other_cpu_s" in cpu:
                worst_other = max(worst_other, cpu["other_cpu_s"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(res)
    return {"windows": windows, "windows_not_quiet_before": not_quiet,
            "worst_util_pct_before": worst_before, "max_other_cpu_s_in_a_window": worst_other}


def freeze_kraft_source(dest: Path) -> dict[str, Any]:
    """Export HEAD's `kraft/` and `pipeline/` to `dest` and point the node processes at it (BENCH_KRAFT_SRC),
    so a run measures one committed version even while the working tree changes.
    `BENCH_KRAFT_SRC=worktree` keeps the working tree instead."""
    if os.environ.get("BENCH_KRAFT_SRC") == "worktree":
        os.environ.pop("BENCH_KRAFT_SRC")
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "kraft"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
        return {"source": "working tree", "uncommitted_changes_in_kraft": bool(dirty)}
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    commit = export_head(dest)
    os.environ["BENCH_KRAFT_SRC"] = str(dest)
    os.environ["BENCH_KRAFT_COMMIT"] = commit
    return {"source": f"git archive of HEAD {commit} (kraft/, pipeline/)", "commit": commit}


def run() -> dict[str, Any]:
    """Run every scenario for every system; returns the JSON-ready results."""
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    p = Params.quick_params() if quick else Params()
    scenarios.QUIET_MAX_S[0] = p.quiet_max_s
    if not (PEERS_VENV / "bin" / "python").exists() or not shutil.which("etcd"):
        raise SystemExit("peers missing: run `bash bench/systems/setup_peers.sh` first")
    WORK.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("BENCH_KRAFT_SRC", "BENCH_KRAFT_COMMIT")}
    frozen = freeze_kraft_source(WORK / "kraft-src")
    try:
        return _run(p, quick, frozen)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
        # the export is gone: the benchmarks that run after this one must not look for it
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def kafka_raft_scenario(quick: bool) -> dict[str, Any]:
    """kraft-quorum beside Kafka's TestRaftServer (`bench.measure.kafka_raft`), or why it did
    not run (the jars of `make kafka` missing)."""
    kp = kafka_raft.KafkaRaftParams.quick_params() if quick else kafka_raft.KafkaRaftParams()
    try:
        kafka_raft.check_jars(kp.version)
    except kafka_raft.KafkaUnavailable as exc:
        print(f"!! kafka-raft not run: {exc}", flush=True)
        return {"error": str(exc)}
    return kafka_raft.run(kp)


def _run(p: Params, quick: bool, frozen: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    m0 = machine_busy()
    res: dict[str, Any] = {"mode": "quick" if quick else "full", "machine": machine_info(),
                           "params": {k: v for k, v in vars(p).items()}, "kraft_source": frozen}
    timings: dict[str, float] = {}

    def step(name: str, fn: Any) -> Any:
        t0 = time.monotonic()
        print(f"== compare: {name}", flush=True)
        out = fn()
        timings[name] = round(time.monotonic() - t0, 1)
        return out

    res["throughput"], res["latency"] = step("throughput+latency", lambda: throughput_and_latency(p))
    res["failover"] = step("failover", lambda: failover(p))
    res["kip1166"] = step("kip1166", lambda: kip1166(p))
    res["snapshot"], res["restart"] = step("snapshot+restart", lambda: snapshot_and_restart(p))
    res["kafka_raft"] = step("kafka-raft", lambda: kafka_raft_scenario(quick))
    m1 = machine_busy()
    res["targets"] = evaluate_targets(res)
    res["machine"]["busy"] = _busy_summary(res)
    res["machine"]["busy"]["whole_run_util_pct"] = round(100.0 * (m1[0] - m0[0]) / max(1, m1[1] - m0[1]), 1)
    res["timings_s"] = dict(timings, total=round(time.monotonic() - started, 1))
    return res

