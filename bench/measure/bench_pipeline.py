"""`kraft audit` at real size, next to a plain single-process Python scan of the same files.

Writes a quorum of three voters whose logs agree byte for byte, each about 1 GiB
(`write_large_log`: KV PUT batches of 100 records, 128 MiB segments), then measures:

- `python_scan`: one process reads one replica's segments, `scan_batches` (header + CRC-32C of
  every batch) and `records()` of every batch: the reference line, what a one-off script does;
- `audit_1x1g` and `audit_3x1g`: `python -m kraft_pipeline` as a fresh process with the
  defaults (`local[*]` on this machine's cores, 2 GiB driver heap) over one replica and over
  all three: wall time end to end (JVM start included), the seconds of every step (from
  OUT/steps.json), and the driver's memory high-water marks (from summary.json: the Python
  driver's peak RSS and the driver JVM's peak heap).

Rows are records; MB/s counts segment bytes (10^6 bytes). `BENCH_QUICK=1` uses 64 MiB logs.
`BENCH_PIPELINE_DATA=DIR` reuses (or writes once) the quorum in DIR instead of a temporary
directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kraft.records.batch import scan_batches
from kraft.storage.layout import partition_dir

GIB = 1 << 30
REPLICAS = 3
TARGET_S = 60.0


def python_scan(pdir: Path) -> tuple[int, int]:
    """(records, bytes) of every segment in `pdir`, read in this process."""
    rows = size = 0
    for seg in sorted(pdir.glob("*.log")):
        result = scan_batches(seg.read_bytes())
        for batch in result.batches:
            for _ in batch.records():
                rows += 1
        size += result.valid_bytes
    return rows, size


def write_quorum(root: Path, size_bytes: int) -> list[Path]:
    """Three replicas (node ids 1-3, voters 1-3) whose logs are the same bytes."""
    from kraft_pipeline.synthetic import write_large_log

    done = root / "complete"
    replicas = [root / "quorum" / f"node-{n}" for n in range(1, REPLICAS + 1)]
    if done.exists() and done.read_text() == str(size_bytes):
        return replicas
    shutil.rmtree(root / "quorum", ignore_errors=True)
    for n, path in enumerate(replicas, start=1):
        write_large_log(path, size_bytes, node_id=n, voters=range(1, REPLICAS + 1))
    done.write_text(str(size_bytes))
    return replicas


def audit(inputs: list[Path], out: Path) -> dict[str, Any]:
    """Run `python -m kraft_pipeline` over `inputs` with the defaults; its figures."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "kraft_pipeline", "--input", *map(str, inputs),
         "--output", str(out), "--no-report"],
        capture_output=True, text=True, env=env,
    )
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"kraft audit exited {proc.returncode}: {proc.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s["seconds"] for s in summary["steps"]}
    steps_cpu = {s["name"]: s.get("cpu_s") for s in summary["steps"]}
    res = summary["resources"]
    return {
        "wall_s": round(wall, 2),
        "audit_s": summary["elapsed_s"],
        "spark_start_s": summary.get("spark_start_s"),
        "python_start_s": round(wall - summary["elapsed_s"], 2),
        "steps_s": steps,
        "steps_cpu_s": steps_cpu,
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "consistent": summary["consistent"],
        "records": sum(r["log_records_read"] for r in summary["replicas"].values()),
        "cpu_s": res.get("cpu_s"),
        "python_peak_rss_mib": res["python_peak_rss_mib"],
        "jvm_peak_heap_mib": res.get("jvm_peak_heap_mib"),
        "jvm_peak_old_gen_mib": res.get("jvm_peak_old_gen_mib"),
        "jvm_max_heap_mib": res.get("jvm_max_heap_mib"),
        "jvm_gc_max_before_mib": res.get("jvm_gc_max_before_mib"),
        "jvm_gc_max_after_mib": res.get("jvm_gc_max_after_mib"),
    }


def run(size_bytes: int | None = None) -> dict[str, Any]:
    """Measure the plain scan and the audits over a fresh quorum (default 3 x 1 GiB)."""
    if size_bytes is None:
        size_bytes = 64 << 20 if os.environ.get("BENCH_QUICK") else GIB
    keep = os.environ.get("BENCH_PIPELINE_DATA")
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="kraft-bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        replicas = write_quorum(work, size_bytes)
        write_s = time.perf_counter() - t
        pdir = partition_dir(replicas[0])
        seg_bytes = sum(p.stat().st_size for p in pdir.glob("*.log"))

        t, cpu = time.perf_counter(), time.process_time()
        rows, _ = python_scan(pdir)
        py_s, py_cpu = time.perf_counter() - t, time.process_time() - cpu

        one = audit(replicas[:1], work / "audit-1")
        three = audit(replicas, work / "audit-3")
        if one["records"] != rows or three["records"] != REPLICAS * rows:
            raise RuntimeError(f"the audits read {one['records']} and {three['records']} "
                               f"records, the plain scan {rows} per replica")
        mb = seg_bytes / 1e6
        return {
            "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "log_bytes_per_replica": seg_bytes,
            "records_per_replica": rows,
            "write_logs_s": round(write_s, 2),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "python_scan_1x": {"seconds": round(py_s, 2), "cpu_s": round(py_cpu, 1),
                               "rows_per_s": round(rows / py_s), "mb_per_s": round(mb / py_s, 1)},
            "audit_1x": one,
            "audit_3x": three | {"mb_per_s": round(REPLICAS * mb / three["wall_s"], 1),
                                 "target_s": TARGET_S,
                                 "target_met": three["wall_s"] <= TARGET_S},
        }
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def write_markdown(result: dict[str, Any], md_path: Path) -> None:
    """Render the pipeline's section of docs/benchmarks.md (between its own markers)."""
    begin, end = "<!-- BEGIN pipeline: make bench -->", "<!-- END pipeline: make bench -->"
    one, three, scan = result["audit_1x"], result["audit_3x"], result["python_scan_1x"]
    gib = result["log_bytes_per_replica"] / GIB
    lines = [
        begin, "", "## Pipeline: `kraft audit` of 3 x 1 GiB", "",
        f"Three voters whose logs agree byte for byte, {result['log_bytes_per_replica']:,} "
        f"bytes ({gib:.2f} GiB) and {result['records_per_replica']:,} records each; "
        "`python -m kraft_pipeline` with the defaults (local[*], 2 GiB driver heap), "
        "a fresh process per run, wall time from start to exit (JVM start-up included). "
        f"Measured on {result.get('measured_utc', '?')}; "
        f"load average when the run ended: {result['load_average_1m']}.", "",
        "| run | seconds | MB/s | CPU seconds (all processes) | Python driver peak RSS (MiB) "
        "| driver JVM peak heap (MiB) | JVM heap after GC, max (MiB) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| plain Python scan of 1 replica, 1 process (reference) | {scan['seconds']} | "
        f"{scan['mb_per_s']} | {scan.get('cpu_s', '')} | | | |",
        f"| audit 1 x 1 GiB | {one['wall_s']} | "
        f"{result['log_bytes_per_replica'] / 1e6 / one['wall_s']:.1f} | {one['cpu_s']} | "
        f"{one['python_peak_rss_mib']} | {one['jvm_peak_heap_mib']} | "
        f"{one['jvm_gc_max_after_mib']} |",
        f"| audit 3 x 1 GiB | {three['wall_s']} | {three['mb_per_s']} | {three['cpu_s']} | "
        f"{three['python_peak_rss_mib']} | {three['jvm_peak_heap_mib']} | "
        f"{three['jvm_gc_max_after_mib']} |",
        "",
        f"Target: 3 x 1 GiB in {three['target_s']:.0f} s or less: "
        f"{'met' if three['target_met'] else 'NOT met'}. The 1 x 1 GiB run audits one voter "
        "of three: it shows no majority, so nothing is known committed and the workload step "
        "has nothing to decode; it is there for the memory figures.", "",
        "Per step, the wall seconds and the CPU seconds of every process of the audit (the "
        "driver JVM and its Python workers; on 2 cores a step can use up to twice its wall "
        "time):", "",
        "| step | 1 x 1 GiB (s) | 1 x 1 GiB (CPU s) | 3 x 1 GiB (s) | 3 x 1 GiB (CPU s) |",
        "| --- | --- | --- | --- | --- |",
        f"| Python start-up | {one['python_start_s']} | | {three['python_start_s']} | |",
        f"| Spark session start (JVM) | {one['spark_start_s']} | | {three['spark_start_s']} | |",
    ]
    for name in three["steps_s"]:
        lines.append(f"| {name} | {one['steps_s'].get(name, '')} | "
                     f"{one.get('steps_cpu_s', {}).get(name, '')} | {three['steps_s'][name]} | "
                     f"{three.get('steps_cpu_s', {}).get(name, '')} |")
    lines += ["", end]
    block = "\n".join(lines)
    text = md_path.read_text()
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        marker = "<!-- BEGIN GENERATED: make bench -->"
        at = text.index(marker) if marker in text else len(text)
        text = text[:at].rstrip("\n") + "\n\n" + block + "\n\n" + text[at:]
    md_path.write_text(text)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.measure.bench_pipeline",
                                 description="The audit of 3 x 1 GiB and the plain scan.")
    ap.add_argument("size_bytes", nargs="?", type=int, default=None,
                    help="bytes of log per replica (default 1 GiB)")
    print(json.dumps(run(ap.parse_args().size_bytes), indent=2))
