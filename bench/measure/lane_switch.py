"""The native lanes on and off, back to back: `python -m bench.measure.lane_switch [--rounds N]`.

Each round starts the benchmark's 3-voter quorum (`bench.systems.kraft_cluster.KraftCluster`, fsync
on, the binary client protocol, the benchmark's properties) once with `kraft.lane.leader` and
`kraft.lane.follower` on and once with both off, alternating which goes first, and measures on
each: sequential writes (one at a time: p50 / p99 latency), pipelined throughput (16 writes
outstanding, and 256) and kill -9 failover (a few trials). It prints one JSON line per
measurement and a table at the end; docs/tuning.md ("The native lanes") holds a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.systems.kraft_cluster import KraftCluster

SETTINGS = {
    "on": {"kraft.lane.leader": "true", "kraft.lane.follower": "true"},
    "off": {"kraft.lane.leader": "false", "kraft.lane.follower": "false"},
}
TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.request.timeout.ms": "1000",
}


def measure(setting: str, workdir: Path, duration: float, failovers: int) -> dict[str, Any]:
    """One quorum with the lanes `setting` ("on" / "off"): its figures."""
    cluster = KraftCluster(workdir, properties={**TIMEOUTS, **SETTINGS[setting]})
    out: dict[str, Any] = {"setting": setting, "at": time.strftime("%H:%M:%SZ", time.gmtime())}
    try:
        cluster.start()
        seq = cluster.seq(duration, 1.0)
        out["seq_p50_ms"] = seq["latency"]["p50_ms"]
        out["seq_p99_ms"] = seq["latency"]["p99_ms"]
        for inflight in (16, 256):
            t = cluster.tput(inflight, duration, 1.0)
            out[f"tput_{inflight}_per_s"] = t["ops_per_s"]
        trials = [cluster.failover_trial(16, 10.0) for _ in range(failovers)]
        times = [t["recovery_s"] * 1000 for t in trials if t.get("recovery_s") is not None]
        if times:
            out["failover_p50_ms"] = round(statistics.median(times), 1)
            out["failover_max_ms"] = round(max(times), 1)
    finally:
        cluster.stop()
    return out


def main() -> None:
    """Run the rounds and print the figures."""
    ap = argparse.ArgumentParser(prog="python -m bench.measure.lane_switch", description=__doc__)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=8.0, help="seconds per write window")
    ap.add_argument("--failovers", type=int, default=3, help="kill -9 trials per quorum")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lane-switch-") as tmp:
        for r in range(args.rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            for setting in order:
                row = measure(setting, Path(tmp) / f"{r}-{setting}", args.duration,
                              args.failovers)
                row["round"] = r + 1
                print(json.dumps(row), flush=True)
                rows.append(row)
    keys = [k for k in rows[0] if k not in ("setting", "at", "round")]
    print("| round | lanes | " + " | ".join(keys) + " |")
    for row in rows:
        cells = [f"{row.get(k, float('nan')):.3f}" if isinstance(row.get(k), float)
                 else str(row.get(k)) for k in keys]
        print(f"| {row['round']} ({row['at']}) | {row['setting']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
