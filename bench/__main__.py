"""`python -m bench`: run every benchmark module and record the figures.

Each `bench/measure/bench_*.py` module exposes `run() -> dict`: a flat mapping of metric name to a
number (or a nested mapping of such). The results of one invocation are written, together with
the machine they ran on, to `docs/benchmarks.json` and rendered as tables in the generated part
of `docs/benchmarks.md`. `python -m bench protocol records` runs a subset by name.

A module may also define `write_markdown(result, md_path)`: it then renders its own section
of docs/benchmarks.md (outside the generated block) and is left out of the generated tables
(the comparison with the peers, `bench_compare`, does this). `--quick` sets `BENCH_QUICK=1`
for a short smoke run of the modules that honour it.

`python -m bench kafka-raft [--seconds S] [--quick] [--write-docs] ...` runs only the
comparison's Kafka scenario, kraft-quorum beside Apache Kafka's TestRaftServer
(`bench.measure.kafka_raft`; `--help` lists its options).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.systems.peers import interpreter_path

ROOT = Path(__file__).resolve().parents[1]
MEASURE = "bench.measure"
"""The package of the benchmark modules (`bench_<name>.py`)."""
DOCS = ROOT / "docs"
BEGIN = "<!-- BEGIN GENERATED: make bench -->"
END = "<!-- END GENERATED: make bench -->"


def machine() -> dict[str, Any]:
    """Describe the machine and software versions a run was measured on."""
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "python_executable": interpreter_path(),
        "platform": platform.platform(),
        "commit": commit,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def discover() -> list[str]:
    """Names of the benchmark modules present (bench/measure/bench_<name>.py)."""
    folder = ROOT.joinpath(*MEASURE.split("."))
    return sorted(p.stem[len("bench_") :] for p in folder.glob("bench_*.py"))


def flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """Flatten nested result mappings to dotted metric names."""
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def _own_markdown(name: str) -> bool:
    """True when bench_<name> renders its own section (has `write_markdown`)."""
    try:
        return hasattr(importlib.import_module(f"{MEASURE}.bench_{name}"), "write_markdown")
    except ImportError:
        return False


def render(results: dict[str, Any], info: dict[str, Any]) -> str:
    """Markdown tables of one run (modules with their own section are left out)."""
    lines = [BEGIN, "", f"Measured by `make bench` on {info['date_utc']} at commit {info['commit']}: "
             f"{info['nproc']} cores, {info['memory_gib']} GiB, Python {info['python']}.", ""]
    for name, res in results.items():
        if _own_markdown(name):
            lines += [f"### {name}", "", "See its own section above (and docs/benchmarks.json).", ""]
            continue
        lines += [f"### {name}", "", "| metric | value |", "| --- | --- |"]
        flat: dict[str, Any] = {}
        flatten("", res, flat)
        for k, v in flat.items():
            shown = f"{v:,.3f}" if isinstance(v, float) else str(v)
            lines.append(f"| {k} | {shown} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line: benchmark names and `--quick`; anything else is an error (exit 2)."""
    have = discover()
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run the benchmarks (all by default) and write docs/benchmarks.{json,md}.",
        epilog=f"benchmarks: {', '.join(have)}; `python -m bench kafka-raft --help`: only the "
               "comparison with Apache Kafka's TestRaftServer")
    p.add_argument("names", nargs="*", metavar="NAME", help="the benchmarks to run (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="a short smoke run (BENCH_QUICK=1) of the modules that honour it")
    args = p.parse_args(argv)
    unknown = [n for n in args.names if n not in have]
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(have)}")
    return args


def main(argv: list[str]) -> int:
    """Run the named benchmarks (all by default) and write docs/benchmarks.{json,md}; or, with
    `kafka-raft` first, only the comparison with Kafka's TestRaftServer."""
    if argv[:1] == ["kafka-raft"]:
        from bench.measure import kafka_raft

        return kafka_raft.main(argv[1:])
    try:
        args = parse(argv)
    except SystemExit as exc:  # --help (0) or a bad flag or name (2), already printed
        return int(exc.code or 0)
    if args.quick:
        os.environ["BENCH_QUICK"] = "1"
    names = args.names or discover()
    info = machine()
    results: dict[str, Any] = {}
    failed: set[str] = set()
    for name in names:
        print(f"== bench {name}", flush=True)
        started = time.perf_counter()
        mod = importlib.import_module(f"{MEASURE}.bench_{name}")
        try:
            results[name] = mod.run()
        except Exception as exc:  # the others still run and are written
            failed.add(name)
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"== bench {name} FAILED: {results[name]['error']}", flush=True)
        if not hasattr(mod, "write_markdown") or name in failed:
            print(json.dumps(results[name], indent=2, default=str), flush=True)
        print(f"== bench {name} took {time.perf_counter() - started:.1f} s", flush=True)
    DOCS.mkdir(exist_ok=True)
    json_path = DOCS / "benchmarks.json"
    previous = json.loads(json_path.read_text()) if json_path.exists() else {}
    merged = dict(previous.get("results", {}))
    # a benchmark that failed keeps its previous figures (its error is printed above)
    merged.update({k: v for k, v in results.items() if k not in failed})
    json_path.write_text(json.dumps({"machine": info, "results": merged}, indent=2, default=str) + "\n")
    md_path = DOCS / "benchmarks.md"
    text = md_path.read_text() if md_path.exists() else "# Benchmarks\n\n"
    block = render(merged, info)
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    md_path.write_text(text)
    for name in names:
        mod = importlib.import_module(f"{MEASURE}.bench_{name}")
        if hasattr(mod, "write_markdown") and name not in failed:
            mod.write_markdown(results[name], md_path)
    print(f"wrote {json_path.relative_to(ROOT)} and {md_path.relative_to(ROOT)}")
    if failed:
        print(f"failed: {', '.join(sorted(failed))}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
