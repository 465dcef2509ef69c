"""kraft-quorum beside Apache Kafka's own raft benchmark, `kafka.tools.TestRaftServer`.

One scenario of `python -m bench compare` (`res["kafka_raft"]`), and a command of its own:

    python -m bench kafka-raft [--quick] [--seconds S] [--warmup S] [--rates R,R,...]
                               [--trials N] [--write-docs]

The same records and the same load on both: records of `RECORD_SIZE` bytes (a PUT of a 100-byte
value in kraft-quorum's log; TestRaftServer's `--record-size`), offered open loop at fixed
rates, TestRaftServer's own shape (its `--throughput`; kraft-quorum's driver `bin_rate`: the
writes due each millisecond go out whatever the answers). A closed loop would let the slower
system offer itself less load; at a fixed rate both get the same offered load, and a rate one
cannot carry shows as committed < offered. Per rate, for each system:

- committed records/s over the window: kraft-quorum counts the answers inside it;
  TestRaftServer's leader high watermark is read at both ends of the window (`probe`), and
  its own printed figure (bytes/s over its metrics window) is kept beside it;
- commit latency: kraft-quorum from its client's send to the answer (so one loopback round
  trip and the state machine's apply more than a commit), nanosecond clock; TestRaftServer
  from `scheduleAppend` to the committed batch in its own process, whole milliseconds, p75,
  p99 and p99.9 (it computes no p50), from the line it printed last in the window. That line
  covers Kafka's two 30-s metric samples (`histogram_span`), so a warm-up of 30 s after the
  leader's first commit and a window of up to 60 s make it cover the window alone.
- CPU seconds of every process in the window (`CpuMeter`).

A last rate (`capacity_rate`) above what either system carries gives their throughput, with a
short warm-up and window: at a rate it cannot carry, TestRaftServer's unanswered appends pile
up without bound in its leader's heap.

Failover: kill -9 of the leader, the time until a commit in a higher epoch. TestRaftServer:
the new leader's own log line of its first commit in the new epoch (ms timestamps); kraft-quorum:
the compare scenario's trial (`KraftCluster.failover_trial`: the first acknowledgement of a
write sent after the kill, 16 writes outstanding). Then the killed node restarts and catches
up before the next trial.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.measure.scenarios import WORK, _safe, failover_trials, running
from bench.systems.kafka_raft import (
    RECORD_SIZE,
    VERSION,
    KafkaRaftCluster,
    KafkaUnavailable,
    first_commits,
    histogram_span,
)
from bench.systems.kraft_cluster import KraftCluster
from bench.systems.peers import ROOT, CpuMeter, wait_quiet

DOCS = ROOT / "docs"


@dataclass
class KafkaRaftParams:
    """Rates and durations of the comparison (`quick_params()` for a short run)."""

    rates: list[int] = field(default_factory=lambda: [5_000, 25_000, 100_000])
    """Offered records/s, one TestRaftServer cluster each (its `--throughput` is fixed at
    start); the first is TestRaftServer's default and the rate of the latency target."""
    warmup_s: float = 30.0
    """TestRaftServer: after the leader's first commit (JIT, and one 30-s metrics sample);
    kraft-quorum: `kraft_warmup_s`."""
    duration_s: float = 55.0
    kraft_warmup_s: float = 5.0
    capacity_rate: int | None = 200_000
    """A last rate meant to be more than either system carries on 2 cores, for its throughput,
    with a short warm-up and window (on a quiet machine TestRaftServer carried all of it: its
    figure is then a floor, and the summary says so): TestRaftServer bounds neither its unanswered appends nor their
    batches, so at a rate it cannot carry its leader's heap fills (1 GiB at about 150 bytes
    per record behind). kraft-quorum's driver drops what is due past 20,000 unanswered."""
    capacity_warmup_s: float = 15.0
    capacity_duration_s: float = 10.0
    failover_trials: int = 5
    failover_inflight: int = 16
    quiet_max_s: float = 60.0
    """Longest wait for a quiet machine (< 15 % CPU) before each rate (and, for TestRaftServer,
    before its JVMs start): the machine is shared, and what it waited and saw is recorded."""
    version: str = VERSION
    start_timeout_s: float = 240.0
    quick: bool = False

    @classmethod
    def quick_params(cls) -> KafkaRaftParams:
        """5,000/s and the capacity rate, short windows, one failover trial (TestRaftServer's
        percentiles then cover its warm-up too: `histogram_span` in the results says so)."""
        return cls(rates=[5_000], warmup_s=5.0, duration_s=10.0, kraft_warmup_s=2.0,
                   capacity_warmup_s=5.0, capacity_duration_s=5.0, failover_trials=1,
                   quiet_max_s=5.0, quick=True)

    def levels(self) -> list[tuple[int, float, float, str]]:
        """(rate, TestRaftServer's warm-up, window, kind) of every rate, in run order: the
        latency rates, then the capacity rate."""
        out = [(r, self.warmup_s, self.duration_s, "latency") for r in self.rates]
        if self.capacity_rate:
            out.append((self.capacity_rate, self.capacity_warmup_s, self.capacity_duration_s,
                        "capacity"))
        return out


RESTART_TIMEOUT_S = 180.0
"""How long a restarted JVM may take to be back and caught up (slow on 2 busy cores)."""


def _sleep_until(t: float, what: str) -> None:
    left = t - time.time()
    if left > 5:
        print(f"   {what}: {left:.0f} s", flush=True)
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 10.0))


# ============================================================================ TestRaftServer


def kafka_window(c: KafkaRaftCluster, warmup_s: float, duration_s: float) -> dict[str, Any]:
    """One rate's window on a started TestRaftServer cluster."""
    lead = c.wait_leader()
    first = c.first_commit(lead.leader_id, lead.epoch) or time.time()
    _sleep_until(first + warmup_s, f"kafka-raft {c.throughput}/s: warm-up after the first commit")
    before = wait_quiet(max_wait_s=0.0)
    v0, t0 = c.leader_view(), time.time()
    with CpuMeter(c.pids()) as m:
        _sleep_until(t0 + duration_s, f"kafka-raft {c.throughput}/s: window")
        v1, t1 = c.leader_view(), time.time()
    out: dict[str, Any] = {"rate": c.throughput, "window_s": round(t1 - t0, 2), "cpu": m.result,
                           "machine_before": before, "leader": lead.leader_id, "epoch": lead.epoch}
    if v0 is None or v1 is None or (v0.leader_id, v0.epoch) != (v1.leader_id, v1.epoch):
        out["error"] = (f"the leader changed during the window ({v0} -> {v1}): no "
                        f"committed rate")
    else:
        assert v0.high_watermark is not None and v1.high_watermark is not None
        out["committed_per_s"] = round((v1.high_watermark - v0.high_watermark) / (t1 - t0), 1)
        out["high_watermark"] = [v0.high_watermark, v1.high_watermark]
        # its generator aims at `rate` records per second since the epoch began, catching up
        # in bursts when behind: what it has not committed by the end, in seconds of the rate
        out["behind_at_end_s"] = round(max(0.0, c.throughput * (t1 - first) - v1.high_watermark)
                                       / c.throughput, 3)
    reports = [r for r in c.reports(lead.leader_id) if r.at <= t1 + 0.5]
    if reports:
        r = reports[-1]
        span = histogram_span(first, r.at)
        out["printed"] = {"bytes_per_s": r.bytes_per_s,
                          "records_per_s": round(r.records_per_s(c.record_size), 1),
                          "p75_ms": r.p75_ms, "p99_ms": r.p99_ms, "p999_ms": r.p999_ms,
                          "histogram_span_s": [round(span[0] - first, 1), round(span[1] - first, 1)],
                          "covers_warmup": span[0] < first + warmup_s - 0.5}
        out["latency"] = {"p75_ms": r.p75_ms, "p99_ms": r.p99_ms, "p999_ms": r.p999_ms,
                          "resolution_ms": 1.0}
    else:
        out.setdefault("error", "TestRaftServer's leader printed no report in the window")
    return out


def kafka_failover_trial(c: KafkaRaftCluster, max_s: float) -> dict[str, Any]:
    """kill -9 of the leader a second into its load; the time until a commit in a higher epoch
    (the new leader's log), then the killed node back and caught up."""
    lead = c.wait_leader()
    time.sleep(1.0)
    killed_at = c.kill(lead.leader_id)
    survivors = [n for n in c.nodes if n != lead.leader_id]
    found: tuple[int, int, float] | None = None
    deadline = time.monotonic() + max_s
    while found is None and time.monotonic() < deadline:
        time.sleep(0.05)
        for nid in survivors:
            try:
                text = c.nodes[nid].kafka_log.read_text(errors="replace")
            except OSError:
                continue
            later = [(e, nid, t) for e, _, t in first_commits(text)
                     if e > lead.epoch and t >= killed_at - 0.002]
            if later:
                found = min(later)
                break
    r: dict[str, Any] = {"old_leader": lead.leader_id, "old_epoch": lead.epoch,
                         "recovery_s": round(found[2] - killed_at, 4) if found else None}
    if found:
        r.update(new_epoch=found[0], new_leader=found[1])
    c.start_node(lead.leader_id)
    c.wait_leader(RESTART_TIMEOUT_S)
    r["caught_up_after"] = c.wait_caught_up(lead.leader_id, RESTART_TIMEOUT_S)
    return r


def kafka_side(p: KafkaRaftParams) -> dict[str, Any]:
    """Every rate on a cluster of its own; the failover trials on the first rate's."""
    out: dict[str, Any] = {"levels": {}}
    for i, (rate, warmup, duration, kind) in enumerate(p.levels()):
        print(f"-- kafka-raft: TestRaftServer at {rate:,} records/s", flush=True)

        def one(rate: int = rate, warmup: float = warmup, duration: float = duration,
                kind: str = kind, first: bool = i == 0) -> dict[str, Any]:
            c = KafkaRaftCluster(WORK / f"kafka-raft-{rate}", throughput=rate, version=p.version)
            quiet = wait_quiet(max_wait_s=p.quiet_max_s)
            t = time.monotonic()
            with running(c):
                started_s = round(time.monotonic() - t, 1)
                out.setdefault("info", c.info())
                level = dict(kafka_window(c, warmup, duration), start_s=started_s, kind=kind,
                             warmup_s=warmup, machine_before_start=quiet)
                _print_level("kafka-raft", level)
                if first:
                    out["failover"] = failover_trials(lambda: kafka_failover_trial(c, 30.0),
                                                      p.failover_trials, "kafka-raft")
            return level
        out["levels"][str(rate)] = _safe(one, f"kafka-raft {rate}/s")
    return out


# ============================================================================ kraft-quorum


def kraft_side(p: KafkaRaftParams) -> dict[str, Any]:
    """Every rate on one kraft-quorum cluster (its driver takes the rate per call), then the
    failover trials."""
    out: dict[str, Any] = {"levels": {}}

    def run() -> None:
        s = KraftCluster(WORK / "kraft-vs-kafka")
        with running(s):
            out["info"] = s.info()
            for rate, _, duration, kind in p.levels():
                print(f"-- kafka-raft: kraft-quorum at {rate:,} records/s", flush=True)
                before = wait_quiet(max_wait_s=p.quiet_max_s)
                with CpuMeter(s.pids()) as m:
                    r = s.rate(rate, duration, p.kraft_warmup_s)
                level = dict(r, committed_per_s=r.get("ops_per_s"), cpu=m.result,
                             machine_before=before, kind=kind, warmup_s=p.kraft_warmup_s)
                _print_level("kraft-quorum", level)
                out["levels"][str(rate)] = level
            out["failover"] = failover_trials(lambda: s.failover_trial(p.failover_inflight, 15.0),
                                              p.failover_trials, "kraft-quorum")
    r = _safe(lambda: (run(), {})[1], "kafka-raft: kraft-quorum")
    if "error" in r:
        out.update(r)
    return out


def _print_level(name: str, level: dict[str, Any]) -> None:
    lat = level.get("latency") or {}
    print(f"   {name} {level.get('rate'):,}/s: committed {level.get('committed_per_s')}/s "
          f"p50 {lat.get('p50_ms', '—')} p75 {lat.get('p75_ms', '—')} p99 {lat.get('p99_ms')} ms "
          f"cpu {(level.get('cpu') or {}).get('cpu_s')} {level.get('error', '')}", flush=True)


# ============================================================================ summary


def summarize(res: dict[str, Any], rates: list[int]) -> dict[str, Any]:
    """Per system: its throughput (the most records/s committed at any offered rate), the
    highest rate it carried (committed >= 99 % of offered, nothing held back, less than half a
    second of the rate behind at the window's end), and the latency at the first rate."""
    out: dict[str, Any] = {}
    for name, side in (res.get("systems") or {}).items():
        levels = side.get("levels") or {}
        got = {int(r): lv.get("committed_per_s") for r, lv in levels.items()
               if isinstance(lv, dict) and lv.get("committed_per_s") is not None}
        carried = [r for r, c in got.items() if c >= 0.99 * r
                   and not (levels[str(r)].get("held_back") or levels[str(r)].get("unanswered"))
                   and (levels[str(r)].get("behind_at_end_s") or 0) < 0.5]
        at = levels.get(str(rates[0])) or {}
        best = max(got, key=lambda r: got[r]) if got else None
        out[name] = {"throughput_per_s": got[best] if best is not None else None,
                     "at_rate": best,
                     "cpu_us_per_record": cpu_per_record(levels[str(best)]) if best else None,
                     "highest_rate_carried": max(carried) if carried else None,
                     "latency_rate": rates[0], "latency": at.get("latency"),
                     "failover": (side.get("failover") or {}).get("recovery")}
    return out


def cpu_per_record(level: dict[str, Any]) -> dict[str, float] | None:
    """CPU microseconds per committed record in one window: in all, and per process."""
    cpu = level.get("cpu") or {}
    n = (level.get("committed_per_s") or 0) * (cpu.get("wall_s") or 0)
    per = cpu.get("cpu_s") or {}
    if n <= 0 or not per:
        return None
    return {"all": round(sum(per.values()) / n * 1e6, 1),
            **{k: round(v / n * 1e6, 1) for k, v in per.items()}}


def run(p: KafkaRaftParams) -> dict[str, Any]:
    """Both systems at every rate, then their failover; JSON-ready."""
    res: dict[str, Any] = {
        "mode": "quick" if p.quick else "full", "params": asdict(p), "record_size": RECORD_SIZE,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "units": {"committed_per_s": "records committed per second in the window",
                  "latency": "ms; kraft-quorum: client send -> answer; TestRaftServer: "
                             "scheduleAppend -> commit in its process, whole ms",
                  "recovery": "ms from kill -9 of the leader to a commit in a higher epoch"},
        "systems": {}}
    started = time.monotonic()
    res["systems"]["kraft-quorum"] = kraft_side(p)
    res["systems"]["kafka-raft"] = kafka_side(p)
    res["summary"] = summarize(res, p.rates)
    res["took_s"] = round(time.monotonic() - started, 1)
    return res


# ============================================================================ command


def parse(argv: list[str]) -> argparse.Namespace:
    """`python -m bench kafka-raft` options; a bad one exits 2 naming it."""
    ap = argparse.ArgumentParser(
        prog="python -m bench kafka-raft",
        description="kraft-quorum beside Apache Kafka's TestRaftServer (3 voters each on "
                    "127.0.0.1): committed records/s and commit latency at fixed offered rates, "
                    "failover after kill -9 of the leader.")
    ap.add_argument("--quick", action="store_true",
                    help="5,000/s and the capacity rate, short windows, one failover trial")
    ap.add_argument("--seconds", type=float, help="the measured window per rate, seconds")
    ap.add_argument("--warmup", type=float,
                    help="TestRaftServer's warm-up after its first commit, seconds (30 lets "
                         "its printed percentiles cover the window alone)")
    ap.add_argument("--rates", help="offered records/s, comma-separated (the first is the "
                                    "latency target's)")
    ap.add_argument("--capacity-rate", type=int,
                    help="the last rate, above both systems' capacity, with a short window "
                         "(default 200000; 0: none)")
    ap.add_argument("--trials", type=int, help="failover trials per system")
    ap.add_argument("--kafka-version", default=VERSION, help=f"default {VERSION}")
    ap.add_argument("--write-docs", action="store_true",
                    help="put the figures into docs/benchmarks.json and docs/benchmarks.md "
                         "(the comparison's section)")
    args = ap.parse_args(argv)
    if args.seconds is not None and args.seconds <= 0:
        ap.error(f"--seconds must be positive, got {args.seconds}")
    if args.warmup is not None and args.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {args.warmup}")
    if args.trials is not None and args.trials < 0:
        ap.error(f"--trials must be >= 0, got {args.trials}")
    if args.rates is not None:
        try:
            args.rates = [int(r) for r in args.rates.split(",") if r.strip()]
        except ValueError:
            ap.error(f"--rates: expected whole records/s separated by commas, got {args.rates!r}")
        if not args.rates or min(args.rates) <= 0:
            ap.error(f"--rates: expected positive records/s, got {args.rates!r}")
        if len(set(args.rates)) != len(args.rates):
            ap.error(f"--rates: each rate once, got {args.rates!r}")
    if args.capacity_rate is not None and args.capacity_rate < 0:
        ap.error(f"--capacity-rate must be >= 0, got {args.capacity_rate}")
    if args.capacity_rate and args.rates and args.capacity_rate in args.rates:
        ap.error(f"--capacity-rate {args.capacity_rate} is one of --rates already")
    return args


def params_of(args: argparse.Namespace) -> KafkaRaftParams:
    """The parameters the command line asks for."""
    p = KafkaRaftParams.quick_params() if args.quick else KafkaRaftParams()
    if args.seconds is not None:
        p.duration_s = args.seconds
    if args.warmup is not None:
        p.warmup_s = args.warmup
    if args.rates:
        p.rates = args.rates
    if args.trials is not None:
        p.failover_trials = args.trials
    if args.capacity_rate is not None:
        p.capacity_rate = args.capacity_rate or None
    if p.capacity_rate in p.rates:
        p.capacity_rate = None  # --rates named it: measured with the long window
    p.version = args.kafka_version
    return p


def check_jars(version: str) -> None:
    """Raise KafkaUnavailable (naming `make kafka`) unless the jars of `version` are cached."""
    import kafka_launch

    kafka_launch.cached_dist(version)


def main(argv: list[str]) -> int:
    """Run the comparison alone; print the figures; with --write-docs merge them into the
    comparison's results and section."""
    try:
        args = parse(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    p = params_of(args)
    try:
        check_jars(p.version)
    except KafkaUnavailable as exc:
        print(f"python -m bench kafka-raft: {exc}", file=sys.stderr)
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    try:
        res = run(p)
    finally:
        for d in [WORK / "kraft-vs-kafka", *(WORK / f"kafka-raft-{r}" for r, *_ in p.levels())]:
            shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(res["summary"], indent=2, default=str), flush=True)
    if args.write_docs:
        merge_into_docs(res)
    return 0


def merge_into_docs(res: dict[str, Any], docs: Path = DOCS) -> None:
    """Put one run's figures into docs/benchmarks.json (`results.compare.kafka_raft`), evaluate
    the targets again and render the comparison's section of docs/benchmarks.md anew."""
    from bench.measure.scenarios import evaluate_targets
    from bench.report.compare import write_markdown

    json_path = docs / "benchmarks.json"
    data = json.loads(json_path.read_text()) if json_path.exists() else {}
    compare = data.setdefault("results", {}).setdefault("compare", {})
    compare["kafka_raft"] = res
    compare["targets"] = evaluate_targets(compare)
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    write_markdown(compare, docs / "benchmarks.md")
    print(f"wrote {json_path} and {docs / 'benchmarks.md'}", flush=True)
