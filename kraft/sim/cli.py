"""Command line of the simulator.

    python -m kraft.sim --seeds N [--start S] [--nodes K]   run N seeds, one summary line
    python -m kraft.sim --seed S [--nodes K] --trace         replay one seed with a trace
    python -m kraft.sim --soak [--start S]                   run seeds until stopped

Every core runs with the native lane's rules beside it, checked against it (`kraft.sim.
lane_shadow`); `--no-lane-shadow` leaves them out (the seeds run the same, about a fifth
faster), and `--native-lane` runs their C implementation (`kraft/lane/csrc/`) instead.
`--faults partial-reads,short-writes,fsync-errors` (or `all`) adds the byte and disk faults of
`kraft.sim.faults`, each at `--fault-share`. A failing seed prints the one command that
replays it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

from kraft.lane import native
from kraft.sim.cluster import SimResult, run_seed
from kraft.sim.params import FAULT_KINDS, SimFaults, SimParams

PROGRESS_EVERY = 100
"""Seeds between two progress lines (a soak's summary on stdout, a run's on stderr)."""


def replay_command(seed: int, nodes: int, native_lane: bool = False,
                   lane_drive: bool = False, leader_drive: bool = False,
                   faults: str = "", fault_share: float = 0.0) -> str:
    """The command that replays one seed with a trace (with the lanes' and faults' options it
    ran with)."""
    lane = ((" --native-lane" if native_lane else "") + (" --lane-drive" if lane_drive else "")
            + (" --leader-drive" if leader_drive else "")
            + (f" --faults {faults} --fault-share {fault_share}" if faults else ""))
    return f"python -m kraft.sim --seed {seed} --nodes {nodes}{lane} --trace"


def summary(results: list[SimResult], seconds: float) -> str:
    """The one-line summary of a batch of seeds."""
    failed = [r for r in results if not r.ok]
    totals: dict[str, int] = {}
    for r in results:
        for k, v in r.stats.items():
            totals[k] = totals.get(k, 0) + v
    extra = " ".join(f"{k}={v}" for k, v in sorted(totals.items()))
    return (
        f"seeds={len(results)} steps={sum(r.steps for r in results)} "
        f"invariant_checks={sum(r.checks for r in results)} violations={len(failed)} "
        f"commits={sum(r.committed for r in results)} elections={sum(r.elections for r in results)} "
        f"seconds={seconds:.1f} {extra}"
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status (1 when a seed failed)."""
    ap = argparse.ArgumentParser(prog="python -m kraft.sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds to run")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--seed", type=int, default=None, help="run this one seed")
    ap.add_argument("--nodes", type=int, default=3, help="initial voters")
    ap.add_argument("--trace", action="store_true", help="print a readable trace")
    ap.add_argument("--soak", action="store_true", help="run seeds until interrupted")
    ap.add_argument("--no-lane-shadow", action="store_true",
                    help="do not check the native lane's rules against the cores")
    ap.add_argument("--native-lane", action="store_true",
                    help="check the C implementation of the lane's rules instead of the Python one")
    ap.add_argument("--lane-drive", action="store_true",
                    help="the followers' lanes take the leader's answers, append, sync and fetch, "
                         "and report to their cores (kraft.sim.lane_drive)")
    ap.add_argument("--leader-drive", action="store_true",
                    help="the leaders' lanes take the voters' fetches, the clients' appends and "
                         "their own syncs, and report to their cores (kraft.sim.leader_drive)")
    ap.add_argument("--faults", default="",
                    help=f"byte and disk faults, comma-separated: {', '.join(FAULT_KINDS)} or all "
                         "(kraft.sim.faults)")
    ap.add_argument("--fault-share", type=float, default=0.01,
                    help="share of the frames, flushes and crashes each fault hits")
    ap.add_argument("--forged-every", type=int, default=None, metavar="MS",
                    help="a forged higher-epoch Vote, pre-vote, BeginQuorumEpoch or "
                         "EndQuorumEpoch reaches a random replica every MS to 2*MS during the "
                         "fault phase (SimParams.forged_every_ms)")
    args = ap.parse_args(argv)
    faults = None
    if args.faults:
        try:
            faults = SimFaults.parse(args.faults, args.fault_share)
        except ValueError as exc:
            ap.error(f"--faults: {exc}")
    if (args.native_lane and args.no_lane_shadow and not args.lane_drive
            and not args.leader_drive):
        ap.error("--native-lane needs the lane's check or a drive: leave out "
                 "--no-lane-shadow")
    if args.native_lane and native() is None:
        ap.error("--native-lane: the C implementation (kraft.lane._native) was not built; "
                 "install the project again with a C compiler on the machine")
    params = SimParams(nodes=args.nodes, lane_shadow=not args.no_lane_shadow,
                       lane_native=args.native_lane, lane_drive=args.lane_drive,
                       leader_drive=args.leader_drive, faults=faults,
                       forged_every_ms=args.forged_every)

    if args.seed is not None:
        trace = print if args.trace else None
        r = run_seed(args.seed, params, trace)
        print(
            f"seed={r.seed} mode={r.mode} steps={r.steps} invariant_checks={r.checks} "
            f"commits={r.committed} elections={r.elections} sim_ms={r.sim_time_ms} "
            f"violation={r.violation}"
        )
        return 0 if r.ok else 1

    seeds: itertools.count[int] | range
    if args.soak:
        seeds = itertools.count(args.start)
    else:
        seeds = range(args.start, args.start + (args.seeds if args.seeds is not None else 100))
    results: list[SimResult] = []
    t0 = time.monotonic()
    try:
        for seed in seeds:
            r = run_seed(seed, params)
            results.append(r)
            if not r.ok:
                print(f"FAIL seed={seed}: {r.violation}", file=sys.stderr)
                replay = replay_command(seed, args.nodes, args.native_lane, args.lane_drive,
                                        args.leader_drive, args.faults, args.fault_share)
                if args.forged_every:
                    replay += f" --forged-every {args.forged_every}"
                print(f"replay: {replay}", file=sys.stderr)
            if len(results) % PROGRESS_EVERY == 0:
                if args.soak:
                    print(summary(results, time.monotonic() - t0), flush=True)
                else:  # progress of a long run on stderr; stdout keeps its one summary line
                    assert isinstance(seeds, range)
                    print(f"progress {len(results)}/{len(seeds)}: "
                          f"{summary(results, time.monotonic() - t0)}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        pass
    print(summary(results, time.monotonic() - t0))
    return 0 if all(r.ok for r in results) else 1
