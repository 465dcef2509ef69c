"""Throughput of the consensus core under the deterministic simulator.

Reports how many simulated events per second (`sim_steps_per_s`) the simulator drives through
`RaftCore.handle` with invariants checked after every step, how many `handle` calls that is
(`core_events_per_s`), with 3 and with 5 voters under the full fault schedule. Rates are per
second of process CPU time, so other load on the machine distorts them less. `BENCH_QUICK=1`
runs fewer seeds.
"""

from __future__ import annotations

import os
import time
from typing import Any

from kraft.raft.core import RaftCore
from kraft.sim.cluster import run_seed
from kraft.sim.params import SimParams


def _measure(seeds: range, params: SimParams) -> dict[str, float]:
    calls = 0
    original = RaftCore.handle

    def counting(self: RaftCore, event: Any, now_ms: int) -> Any:
        nonlocal calls
        calls += 1
        return original(self, event, now_ms)

    RaftCore.handle = counting  # type: ignore[method-assign]
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        results = [run_seed(s, params) for s in seeds]
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        RaftCore.handle = original  # type: ignore[method-assign]
    steps = sum(r.steps for r in results)
    return {
        "seeds": len(results),
        "steps": steps,
        "core_events": calls,
        "invariant_checks": sum(r.checks for r in results),
        "violations": sum(1 for r in results if not r.ok),
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "sim_steps_per_s": round(steps / cpu, 1) if cpu else 0.0,
        "core_events_per_s": round(calls / cpu, 1) if cpu else 0.0,
        "seeds_per_s": round(len(results) / cpu, 2) if cpu else 0.0,
    }


def run() -> dict[str, Any]:
    """Run the simulator benchmarks; returns flat metric mappings."""
    quick = os.environ.get("BENCH_QUICK") == "1"
    n = 20 if quick else 100
    return {
        "faults_3_voters": _measure(range(n), SimParams(nodes=3)),
        "faults_5_voters": _measure(range(n // 4), SimParams(nodes=5)),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
