"""`python -m e2e [SCENARIO ...] [--write-docs]` (`make e2e`): run the end-to-end scenarios and
print each one's figures; with `--write-docs`, also write them to docs/e2e.json and the table
of docs/e2e.md.

The backends are the sandbox (a fresh one per scenario) on the emulated API and on the real
control plane (`make k8s-control-plane`), each scenario on both and the figures side by side,
unless `KUBECONFIG` is set or `E2E_BACKEND=cluster` (docs/e2e.md); `E2E_BACKEND=sandbox` forces
the sandbox on the emulated API alone, `E2E_BACKEND=sandbox-real` the real control plane alone,
and a comma-separated list (`sandbox,sandbox-real`, the default) runs each backend named.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from e2e.backend import Backend, ClusterBackend, SandboxBackend
from e2e.scenarios import SCENARIOS, Run

ROOT = Path(__file__).resolve().parent.parent
DOCS_JSON = ROOT / "docs" / "e2e.json"
DOCS_MD = ROOT / "docs" / "e2e.md"
BEGIN, END = "<!-- figures: begin (make e2e writes this part) -->", "<!-- figures: end -->"


BACKENDS = ("sandbox", "sandbox-real", "cluster")


def run_scenario(name: str, kind: str) -> dict[str, Any]:
    """One scenario on a backend of its own (a fresh sandbox on the emulated API or on the
    real control plane, or the cluster with a quorum named after the scenario, deleted
    afterwards)."""
    cluster = kind == "cluster"
    backend: Backend = ClusterBackend() if cluster else SandboxBackend(
        control_plane="real" if kind == "sandbox-real" else "emulator")
    quorum = f"e2e-{name}"[:40] if cluster else "e2e"
    run = Run(backend, name, quorum)
    try:
        figures = SCENARIOS[name](run)
        figures["ok"] = True
    except Exception as exc:
        traceback.print_exc()
        figures = {**run.figures, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                   "actions": _safe(run.actions), "scenario_s": run.at()}
    finally:
        if cluster:
            backend.kubectl("delete", "kq", quorum, "-n", backend.namespace, "--wait=false",
                            check=False)
        backend.close()
    return figures


def _safe(f: Any) -> Any:
    try:
        return f()
    except Exception:
        return []


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return str(value)


def compress(actions: list[str]) -> str:
    """`A, B x3, C`: the Events' reasons in order, repeats counted."""
    out: list[list[Any]] = []
    for a in actions:
        if out and out[-1][0] == a:
            out[-1][1] += 1
        else:
            out.append([a, 1])
    return ", ".join(a if n == 1 else f"{a} x{n}" for a, n in out)


def table(results: list[dict[str, Any]]) -> str:
    head = ("| scenario | ok | time to Ready (s) | time to healed (s) | writes acked | "
            "linearizable (ops checked) | writes unknown / refused | longest window without "
            "an acked write (s) | leader changes: window (s) |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    rows = []
    for r in results:
        healed = r.get("time_to_healed_s", r.get("time_to_rolled_s",
                       r.get("time_to_recovered_s")))
        if "time_to_5_voters_s" in r and healed is None:
            healed = f"{r['time_to_5_voters_s']} / {r.get('time_to_3_voters_s')}"
        per = "; ".join(f"{c['leader']}@{c['epoch']}: {c['window_s']}"
                        for c in r.get("window_per_leader_change", []))
        rows.append("| " + " | ".join(_cell(x) for x in (
            r["scenario"], r.get("ok"), r.get("time_to_ready_s"), healed,
            r.get("writes_acknowledged"),
            f"{_cell(r.get('linearizable'))} ({_cell(r.get('ops_checked'))})",
            f"{_cell(r.get('writes_unknown'))} / {_cell(r.get('writes_refused'))}",
            r.get("longest_window_without_ack_s"),
            f"{r.get('leader_changes', '-')}" + (f": {per}" if per else ""))) + " |")
    actions = "\n".join(f"- **{r['scenario']}**: {compress(r.get('actions') or []) or '-'}"
                        + (f" (error: {r['error']})" if r.get("error") else "")
                        for r in results)
    return head + "\n".join(rows) + "\n\nThe operator's actions in order (its Events' reasons " \
        "after the fault or change; the creation's are left out):\n\n" + actions + "\n"


def side_by_side(runs: dict[str, list[dict[str, Any]]]) -> str:
    """One table, a row per scenario, each cell the figure of every backend in order
    (`emulator · real`), then each backend's actions."""
    names = list(runs)
    per_backend = {b: {r["scenario"]: _row(r) for r in results} for b, results in runs.items()}
    scenarios = list(dict.fromkeys(r["scenario"] for results in runs.values() for r in results))
    head = ("| scenario | ok | time to Ready (s) | time to healed (s) | writes acked | "
            "linearizable (ops checked) | writes unknown / refused | longest window without "
            "an acked write (s) | leader changes: window (s) |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    rows = []
    for name in scenarios:
        cells = [per_backend[b].get(name) or ["-"] * 8 for b in names]
        rows.append(f"| {name} | " + " | ".join(
            " · ".join(cells[i][col] for i in range(len(names))) for col in range(8)) + " |")
    actions = ""
    for b, results in runs.items():
        actions += f"\nThe operator's actions on {b} (its Events' reasons after the fault or " \
                   "change; the creation's are left out):\n\n" + "\n".join(
                       f"- **{r['scenario']}**: {compress(r.get('actions') or []) or '-'}"
                       + (f" (error: {r['error']})" if r.get("error") else "")
                       for r in results) + "\n"
    return (f"Each cell: {' · '.join(names)}.\n\n" + head + "\n".join(rows) + "\n" + actions)


def _row(r: dict[str, Any]) -> list[str]:
    line = table([r]).split("\n")[2]
    return [c.strip() for c in line.strip("|").split("|")][1:]


def write_docs(runs: dict[str, list[dict[str, Any]]], meta: dict[str, Any]) -> None:
    DOCS_JSON.write_text(json.dumps({"run": meta, "backends": runs}, indent=2) + "\n")
    text = DOCS_MD.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOCS_MD.name}: the figure markers are missing")
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    backends = " and ".join(f"{b} ({meta['total_s'][b]} s)" for b in runs)
    body = (f"\nMeasured {meta['date']} on {backends} ({meta['machine']}); commit "
            f"{meta['commit']}.\n\n" + side_by_side(runs))
    DOCS_MD.write_text(before + BEGIN + "\n" + body + "\n" + END + after)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenarios", nargs="*", help=f"default: all ({', '.join(SCENARIOS)})")
    p.add_argument("--write-docs", action="store_true",
                   help="write the figures to docs/e2e.json and docs/e2e.md")
    args = p.parse_args(argv)
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    chosen = os.environ.get("E2E_BACKEND") or ("cluster" if os.environ.get("KUBECONFIG")
                                               else "sandbox,sandbox-real")
    backends = [b.strip() for b in chosen.split(",") if b.strip()]
    bad = [b for b in backends if b not in BACKENDS]
    if bad or not backends:
        p.error(f"E2E_BACKEND={chosen}: each must be one of {', '.join(BACKENDS)}")
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    took: dict[str, float] = {b: 0.0 for b in backends}
    for name in names:  # scenario by scenario, each on every backend, under the same load
        for backend in backends:
            print(f"== {name} ({backend})", flush=True)
            started = time.monotonic()
            figures = run_scenario(name, backend)
            took[backend] += time.monotonic() - started
            runs[backend].append(figures)
            print(json.dumps(figures, indent=1), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT, check=False).stdout.strip()
    meta = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "backends": backends, "commit": commit or "unknown",
            "machine": f"{os.cpu_count()} cores, {platform.python_implementation()} "
                       f"{platform.python_version()}, load average "
                       f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end",
            "total_s": {b: round(t, 1) for b, t in took.items()}}
    print("\n" + side_by_side(runs))
    if args.write_docs:
        write_docs(runs, meta)
    return 0 if all(r.get("ok") for results in runs.values() for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
