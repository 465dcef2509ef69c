"""Peer systems for `python -m bench compare`: PySyncObj and etcd clusters on loopback, plus
the measurement plumbing every system runner shares (percentiles, CPU accounting, quiet-machine
wait, driver processes, closed-loop load).

Every system is driven the same way: a *driver* process (a child speaking JSON lines on
stdin/stdout) runs a closed loop with N outstanding writes (1 s warm-up, then a measured window)
and reports latencies in nanoseconds and completions in the window. Timestamps are
`time.monotonic()` (CLOCK_MONOTONIC, shared by every process of the machine), so the orchestrator
can relate a driver's acknowledgement to the moment it killed a node.

* **PySyncObj 0.3.17** has no client protocol: it is a library embedded in each node. Its
  driver therefore runs *inside* a node process (the leader for throughput and latency, a
  follower for failover, since the leader is the process that gets killed), and its figures
  contain no client-to-server network hop. PySyncObj never calls fsync; the nodes use its mmap
  journal (`journalFile`), the closest it has to a durable log.
* **etcd 3.4** (Debian `etcd-server`) runs 3 members; its driver uses etcd's native gRPC API
  (the generated stubs shipped in the `etcd3` package) from the `.venv-peers` interpreter.

This file is imported by the orchestrator (project venv) and also executed as a script by the
peers' interpreter (`.venv-peers/bin/python bench/systems/peers.py <role> ...`), so it imports
only the standard library at the top level.

Safety: everything binds to 127.0.0.1; ports are chosen free at start; every wait has a
timeout; every child gets PR_SET_PDEATHSIG and is killed by PID in `stop()`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[2]
PEERS_VENV = Path(os.environ.get("PEERS_VENV", str(ROOT / ".venv-peers")))
VALUE_SIZE = 100
NKEYS = 1000
FAILOVER_REQ_TIMEOUT_S = 0.5
"""Per-write timeout of the failover drivers: a write unanswered this long is retried on the
next node (the same for every system)."""


_KEYS = tuple(f"k{i:06d}" for i in range(NKEYS))


def interpreter_path() -> str:
    """The real path of the interpreter behind this process (a venv's base): builds of one
    Python version differ widely in speed, so a run records which one it used."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def export_head(dest: Path) -> str:
    """Export HEAD's `kraft/` and `pipeline/` into `dest` (pipeline/ too: the kraft CLI loads
    its subcommands as a plugin, so it must match kraft/), with the native lane built into it
    (`build_lane`); returns the short commit id."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", "kraft", "pipeline"],
                             capture_output=True, timeout=60, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=60)
    build_lane(dest)
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, timeout=20).stdout.strip()


def build_lane(dest: Path) -> bool:
    """Build the native lane (`kraft/lane/csrc/`, `setup.LANE`) in place in an exported tree, as
    `make` builds it in the working tree: an export holds no build, and without it the nodes
    would run without the lane. A commit from before the lane's package has it as one source,
    `kraft/raft/_lane.c` (the module `kraft.raft._lane`), built with the same options. False,
    with the compiler's words printed, where it does not build (the nodes then run the Python
    path, and say so in their logs)."""
    if (dest / "kraft" / "lane" / "csrc").is_dir():
        where, name, sources = dest / "kraft" / "lane", "_native", None
    elif (dest / "kraft" / "raft" / "_lane.c").exists():
        where, name, sources = dest / "kraft" / "raft", "_lane", ["kraft/raft/_lane.c"]
    else:
        return False  # a commit from before the lane
    script = ("import runpy; from setuptools import Distribution; "
              "from setuptools.command.build_ext import build_ext; "
              f"lane = runpy.run_path({str(ROOT / 'setup.py')!r}, run_name='setup')['LANE']; "
              + (f"lane.name, lane.sources, lane.depends = 'kraft.raft._lane', {sources!r}, []; "
                 if sources else "")
              + "cmd = build_ext(Distribution({'ext_modules': [lane]})); cmd.inplace = True; "
              "cmd.ensure_finalized(); cmd.run()")
    done = subprocess.run([sys.executable, "-c", script], cwd=dest, capture_output=True,
                          text=True, timeout=300)
    built = any(where.glob(f"{name}*.so"))
    if not built:
        print(f"!! the native lane did not build in {dest}: {done.stderr[-2000:]}", flush=True)
    return built


def key_of(i: int) -> str:
    """The i-th key of the 1000-key workload (made once: every driver calls this per write)."""
    return _KEYS[i % NKEYS]


# =========================================================================== statistics


def pct(sorted_vals: list[float] | list[int], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of an already sorted list; NaN when empty."""
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, math.ceil(p / 100.0 * len(sorted_vals)) - 1))
    return float(sorted_vals[k])


def summarize_ns(lat_ns: list[int]) -> dict[str, float]:
    """Latencies in nanoseconds -> count and percentiles in milliseconds."""
    s = sorted(lat_ns)
    if not s:
        return {"n": 0}
    def ms(v: float) -> float:
        return round(v / 1e6, 4)
    return {"n": len(s), "mean_ms": ms(sum(s) / len(s)), "p50_ms": ms(pct(s, 50)),
            "p75_ms": ms(pct(s, 75)), "p90_ms": ms(pct(s, 90)), "p99_ms": ms(pct(s, 99)), "p999_ms": ms(pct(s, 99.9)),
            "max_ms": ms(s[-1]), "min_ms": ms(s[0])}


def summarize_s(values_s: list[float]) -> dict[str, float]:
    """Durations in seconds -> count and percentiles in milliseconds."""
    return summarize_ns([int(v * 1e9) for v in values_s])


# =========================================================================== CPU accounting

CLK_TCK = os.sysconf("SC_CLK_TCK")


def parse_proc_stat_cpu(text: str, clk_tck: int = CLK_TCK) -> float:
    """user+system CPU seconds from the text of /proc/<pid>/stat (the command name may hold
    spaces and parentheses, so fields are counted after the last ')')."""
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / clk_tck


def proc_cpu_s(pid: int) -> float:
    """CPU seconds a process used so far (NaN once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return parse_proc_stat_cpu(f.read())
    except (OSError, IndexError, ValueError):
        return float("nan")


def parse_machine_stat(line: str) -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs from the first line of /proc/stat."""
    vals = [int(x) for x in line.split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals) - idle, sum(vals)


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far."""
    with open("/proc/stat") as f:
        return parse_machine_stat(f.readline())


class CpuMeter:
    """CPU seconds per tracked process and whole-machine use over a `with` block.

    `other_cpu_s` is CPU burnt by anything not tracked (kernel threads, and any other workload
    on the machine): a large value means the window was contaminated.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self.result: dict[str, Any] = {}

    def __enter__(self) -> CpuMeter:
        self.t0 = time.monotonic()
        self.c0 = {k: proc_cpu_s(p) for k, p in self.pids.items()}
        self.m0 = machine_busy()
        return self

    def __exit__(self, *exc: object) -> None:
        self.result = cpu_delta(self.c0, {k: proc_cpu_s(p) for k, p in self.pids.items()},
                                self.m0, machine_busy(), time.monotonic() - self.t0)


def cpu_delta(c0: dict[str, float], c1: dict[str, float], m0: tuple[int, int],
              m1: tuple[int, int], wall_s: float, clk_tck: int = CLK_TCK) -> dict[str, Any]:
    """The accounting of one window from before/after samples (pure; see CpuMeter)."""
    cpu = {k: round(c1[k] - c0[k], 2) for k in c0 if k in c1}
    busy_s = (m1[0] - m0[0]) / clk_tck
    tracked = sum(v for v in cpu.values() if v == v)
    util = 100.0 * (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
    return {"wall_s": round(wall_s, 2), "cpu_s": cpu,
            "machine_util_pct": round(util, 1),
            "other_cpu_s": round(busy_s - tracked, 2)}


def wait_quiet(threshold_pct: float = 15.0, sample_s: float = 0.5,
               max_wait_s: float = 30.0) -> dict[str, Any]:
    """Wait (bounded) until whole-machine CPU use over `sample_s` drops below `threshold_pct`;
    returns what was seen so a window can be flagged when the machine was busy."""
    t0 = time.monotonic()
    util = 100.0
    while True:
        a = machine_busy()
        time.sleep(sample_s)
        b = machine_busy()
        util = 100.0 * (b[0] - a[0]) / max(1, b[1] - a[1])
        waited = time.monotonic() - t0
        if util < threshold_pct or waited >= max_wait_s:
            return {"util_pct_before": round(util, 1), "waited_s": round(waited, 1),
                    "quiet": util < threshold_pct}


# =========================================================================== processes


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL if the orchestrator dies (PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


_HELD: Any = None
"""The run's peer ports (a `kraft.cli.local.PortLocks`, made on first use), held until the
run ends, against other runs and local quorums on the machine."""


def free_port(host: str = HOST) -> int:
    """A TCP port free on `host` right now, from outside the ephemeral range (as the nodes'
    ports are), so the run's own outgoing connections cannot take it before a peer binds it;
    held for the rest of the run, so it is never handed out twice (a peer's ports are all
    chosen before it starts) nor chosen by another run or local quorum on the machine."""
    global _HELD
    from kraft.cli.local import PortLocks
    from kraft.cli.local import free_port as _outside_ephemeral

    if _HELD is None:
        _HELD = PortLocks()
    return _outside_ephemeral(host, hold=_HELD)


def kill_proc(p: subprocess.Popen[Any] | None, graceful_s: float = 5.0) -> None:
    """Stop one child by PID: SIGTERM, then SIGKILL after `graceful_s` (0 = SIGKILL at once)."""
    if p is None or p.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        if graceful_s > 0:
            p.terminate()
        else:
            p.kill()
    try:
        p.wait(timeout=max(graceful_s, 0.1))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


class DriverProcess:
    """A child process speaking one JSON object per line on stdin/stdout."""

    def __init__(self, argv: list[str], log_path: Path, cwd: Path = ROOT,
                 env: dict[str, str] | None = None) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, text=True, bufsize=1, cwd=str(cwd),
                                  env=env, preexec_fn=die_with_parent)
        self.pid = self.p.pid
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self._lines.put(line)
        self._lines.put("")

    def send(self, obj: dict[str, Any]) -> None:
        """Write one command."""
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()

    def recv(self, timeout: float) -> dict[str, Any]:
        """The next reply (bounded wait); raises RuntimeError on timeout or exit."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"driver {self.pid}: no reply within {timeout:.0f}s") from None
        if not line:
            raise RuntimeError(f"driver {self.pid} exited (rc={self.p.poll()}); see {self.log.name}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def call(self, obj: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send a command and wait (bounded) for its reply."""
        self.send(obj)
        return self.recv(timeout)

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.p.poll() is None

    def stop(self, graceful_s: float = 3.0) -> None:
        """Ask it to quit, then stop it by PID."""
        if self.alive:
            with contextlib.suppress(Exception):
                self.send({"cmd": "quit"})
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.p.wait(timeout=graceful_s)
        kill_proc(self.p, graceful_s=1.0)
        with contextlib.suppress(Exception):
            self.log.close()


def serve_json_lines(handler: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
    """Driver main loop: one reply per command line until `quit` or EOF."""
    def reply(o: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(o, default=str) + "\n")
        sys.stdout.flush()
    reply({"ready": True})
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if req.get("cmd") == "quit":
            break
        try:
            out = handler(req)
        except Exception as exc:  # reported to the orchestrator, which records it
            out = {"error": f"{type(exc).__name__}: {exc}"}
        reply(out if out is not None else {})


# =========================================================================== closed loops


def error_key(exc: BaseException) -> str:
    """A short label for a failed request: exception type and the first words of its text."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:80] if text else type(exc).__name__


async def closed_loop(op: Callable[[int], Awaitable[None]], inflight: int, duration: float,
                      warmup: float, max_extra_s: float = 30.0) -> dict[str, Any]:
    """`inflight` workers each issue `op(i)` back to back for warm-up + window.

    Throughput counts completions inside the window; latency is every request started after
    the warm-up and finished inside the window. Failed ops are counted by exception type.
    """
    pc = time.perf_counter_ns
    t0 = pc()
    warm_end = t0 + int(warmup * 1e9)
    end = warm_end + int(duration * 1e9)
    lat: list[int] = []
    errs: collections.Counter[str] = collections.Counter()
    counter = [0]
    done = [0]

    async def worker() -> None:
        while True:
            s = pc()
            if s >= end:
                return
            i = counter[0]
            counter[0] += 1
            try:
                await op(i)
            except Exception as exc:
                errs[error_key(exc)] += 1
                await asyncio.sleep(0.005)
                continue
            e = pc()
            if warm_end <= e <= end:
                done[0] += 1
                if s >= warm_end:
                    lat.append(e - s)

    tasks = [asyncio.ensure_future(worker()) for _ in range(inflight)]
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), duration + warmup + max_extra_s)
    except TimeoutError:
        errs["driver_timeout"] += 1
    finally:
        for t in tasks:
            t.cancel()
    return {"inflight": inflight, "ops_per_s": round(done[0] / duration, 1),
            "completed_in_window": done[0], "errors": dict(errs),
            "latency": summarize_ns(lat)}


async def sequential(op: Callable[[int], Awaitable[None]], duration: float,
                     warmup: float) -> dict[str, Any]:
    """One write at a time for warm-up + window; latency of each write after the warm-up."""
    return await closed_loop(op, 1, duration, warmup)


FAULT_MARGIN_S = 0.1
"""The drivers run on past the first acknowledgement of a write sent this long after the
planned fault: the orchestrator's fault lands a little after the planned moment (its sleep
ends late on a busy machine), and only writes sent after it lands count (`recovery_after`)."""
MAX_ACKS = 20_000


def recovery_after(r: dict[str, Any], fault_at: float) -> dict[str, Any]:
    """Set `recovery_s` of a failover driver's answer from its acknowledgements: the first
    acknowledgement of a write sent at or after `fault_at` (monotonic seconds, when the fault
    is known to be in place), minus `fault_at`; None when there is none. A write sent between
    the planned moment and the fault may be acknowledged by the old leader: it does not count."""
    acks = r.pop("acks_after", None) or []
    ends = [e for s, e in acks if s >= fault_at]
    r["recovery_s"] = (min(ends) - fault_at) if ends else None
    return r


async def failover_loop(op: Callable[[int], Awaitable[None]], inflight: int, kill_at: float,
                        max_s: float, after_s: float = 0.3) -> dict[str, Any]:
    """Closed-loop load across a leader kill planned at monotonic time `kill_at`.

    `op` must route to whichever node leads (and raise on failure; workers back off 5 ms).
    Returns `acks_after`, the (sent, acknowledged) times of the first writes sent at or after
    `kill_at`, for `recovery_after`. Stops `after_s` after the first acknowledgement of a write
    sent `FAULT_MARGIN_S` after `kill_at`, or at `kill_at + max_s`.
    """
    mono = time.monotonic
    first: list[float] = []
    acks: list[tuple[float, float]] = []
    before = [0]
    errs: collections.Counter[str] = collections.Counter()
    counter = [0]
    stop_at = [kill_at + max_s]

    async def worker() -> None:
        while mono() < stop_at[0]:
            i = counter[0]
            counter[0] += 1
            s = mono()
            try:
                await op(i)
            except Exception as exc:
                errs[error_key(exc)] += 1
                await asyncio.sleep(0.005)
                continue
            e = mono()
            if s >= kill_at:
                if len(acks) < MAX_ACKS:
                    acks.append((s, e))
                if not first and s >= kill_at + FAULT_MARGIN_S:
                    first.append(e)
                    stop_at[0] = min(stop_at[0], e + after_s)
            elif e < kill_at:
                before[0] += 1

    tasks = [asyncio.ensure_future(worker()) for _ in range(inflight)]
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), max(0.0, kill_at - mono()) + max_s + 15)
    except TimeoutError:
        errs["driver_timeout"] += 1
    finally:
        for t in tasks:
            t.cancel()
    return {"acks_after": acks, "acked_before_kill": before[0], "errors": dict(errs)}


# =========================================================================== PySyncObj


def pysyncobj_node_main(argv: list[str]) -> None:
    """A PySyncObj node process (ReplDict, mmap journal) that also runs the write driver."""
    import argparse

    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjException
    from pysyncobj.batteries import ReplDict
    from pysyncobj.version import VERSION

    ap = argparse.ArgumentParser()
    ap.add_argument("--me")
    ap.add_argument("--partners")
    ap.add_argument("--workdir")
    ap.add_argument("--batch", action="store_true")
    a = ap.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    tag = a.me.replace(":", "_")
    conf = SyncObjConf(appendEntriesUseBatch=a.batch,
                       journalFile=os.path.join(a.workdir, tag + ".journal"),
                       fullDumpFile=os.path.join(a.workdir, tag + ".dump"))
    d = ReplDict()
    obj = SyncObj(a.me, a.partners.split(","), conf=conf, consumers=[d])
    mono = time.monotonic
    pc = time.perf_counter_ns
    value = "v" * VALUE_SIZE

    def tput(inflight: int, duration: float, warmup: float) -> dict[str, Any]:
        sem = threading.Semaphore(inflight)
        lat: list[int] = []
        errs: collections.Counter[str] = collections.Counter()
        done = [0]
        t0 = pc()
        warm_end = t0 + int(warmup * 1e9)
        end = warm_end + int(duration * 1e9)

        def cb(res: Any, err: Any, s: int) -> None:
            e = pc()
            if err == FAIL_REASON.SUCCESS:
                if warm_end <= e <= end:
                    done[0] += 1
                    if s >= warm_end:
                        lat.append(e - s)
            else:
                errs[str(err)] += 1
            sem.release()

        i = 0
        while True:
            if not sem.acquire(timeout=10):
                errs["client_stall_10s"] += 1
                break
            s = pc()
            if s >= end:
                sem.release()
                break
            d.set(key_of(i), value, callback=lambda r, e, s=s: cb(r, e, s))
            i += 1
        drained = 0
        deadline = mono() + 30
        while drained < inflight and mono() < deadline:
            if sem.acquire(timeout=1):
                drained += 1
        return {"inflight": inflight, "ops_per_s": round(done[0] / duration, 1),
                "completed_in_window": done[0], "errors": dict(errs),
                "undrained": inflight - drained, "latency": summarize_ns(lat)}

    def seq(duration: float, warmup: float) -> dict[str, Any]:
        lat: list[int] = []
        errs: collections.Counter[str] = collections.Counter()
        t0 = pc()
        warm_end = t0 + int(warmup * 1e9)
        end = warm_end + int(duration * 1e9)
        i = 0
        while True:
            s = pc()
            if s >= end:
                break
            try:
                d.set(key_of(i), value, sync=True, timeout=5)
                e = pc()
                if s >= warm_end and e <= end:
                    lat.append(e - s)
            except SyncObjException as exc:
                errs[str(exc.errorCode)] += 1
            i += 1
        return {"inflight": 1, "ops_per_s": round(len(lat) / duration, 1),
                "completed_in_window": len(lat), "errors": dict(errs),
                "latency": summarize_ns(lat)}

    def failover(inflight: int, kill_at: float, max_s: float, after_s: float = 0.3) -> dict[str, Any]:
        first: list[float] = []
        acks: list[tuple[float, float]] = []
        errs: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()
        stop_at = [kill_at + max_s]
        counter = [0]

        def worker() -> None:
            while mono() < stop_at[0]:
                with lock:
                    i = counter[0]
                    counter[0] += 1
                s = mono()
                try:
                    d.set(key_of(i), value, sync=True, timeout=FAILOVER_REQ_TIMEOUT_S)
                except SyncObjException as exc:
                    with lock:
                        errs[str(exc.errorCode)] += 1
                    time.sleep(0.005)
                    continue
                e = mono()
                if s >= kill_at:
                    with lock:
                        if len(acks) < MAX_ACKS:
                            acks.append((s, e))
                        if not first and s >= kill_at + FAULT_MARGIN_S:
                            first.append(e)
                            stop_at[0] = min(stop_at[0], e + after_s)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(inflight)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(0.0, kill_at - mono()) + max_s + 5)
        return {"acks_after": acks, "errors": dict(errs)}

    def watch(key: str, want: str, timeout: float) -> dict[str, Any]:
        deadline = mono() + timeout
        while mono() < deadline:
            if d.get(key) == want:
                return {"visible_at": mono()}
            time.sleep(0.00005)
        return {"visible_at": None}

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        cmd = req["cmd"]
        if cmd == "status":
            st = obj.getStatus()
            leader = obj._getLeader()
            return {"leader": str(leader) if leader is not None else None,
                    "is_leader": bool(obj._isLeader()), "ready": bool(obj.isReady()),
                    "commit_idx": st.get("commit_idx"), "last_applied": st.get("last_applied"),
                    "raft_term": st.get("raft_term"), "version": VERSION}
        if cmd == "tput":
            return tput(req["inflight"], req["duration"], req["warmup"])
        if cmd == "seq":
            return seq(req["duration"], req["warmup"])
        if cmd == "failover":
            return failover(req["inflight"], req["kill_at"], req["max_s"])
        if cmd == "set_sync":
            d.set(req["key"], req["value"], sync=True, timeout=5)
            return {"acked_at": mono()}
        if cmd == "watch":
            return watch(req["key"], req["value"], req["timeout"])
        if cmd == "get":
            return {"value": d.get(req["key"])}
        return {"error": f"unknown command {cmd}"}

    serve_json_lines(handle)
    with contextlib.suppress(Exception):
        obj.destroy()
    os._exit(0)


class PySyncObjCluster:
    """3 PySyncObj processes on loopback, each a ReplDict with an mmap journal (no fsync:
    PySyncObj has none). `batch=True` is PySyncObj's default (entries go out with the 0.1 s
    append tick), `batch=False` sends AppendEntries per command (low latency)."""

    def __init__(self, workdir: Path, batch: bool) -> None:
        self.workdir = Path(workdir)
        self.batch = batch
        self.name = "pysyncobj" + ("" if batch else "-nobatch")
        self.nodes: list[DriverProcess | None] = [None, None, None]
        self.addrs: list[str] = []

    def info(self) -> dict[str, Any]:
        """Version and configuration (for the results)."""
        return {"system": "PySyncObj", "version": self.version,
                "config": {"appendEntriesUseBatch": self.batch, "journalFile": True,
                           "fsync": "never (PySyncObj has no fsync; mmap journal)",
                           "client": "in-process (driver runs inside a node process)"}}

    def _spawn(self, i: int) -> DriverProcess:
        partners = [a for a in self.addrs if a != self.addrs[i]]
        argv = [str(PEERS_VENV / "bin" / "python"), str(Path(__file__).resolve()), "pysyncobj-node",
                "--me", self.addrs[i], "--partners", ",".join(partners),
                "--workdir", str(self.workdir / "data")] + (["--batch"] if self.batch else [])
        dp = DriverProcess(argv, self.workdir / f"node{i}.log")
        ready = dp.recv(30)
        assert ready.get("ready"), ready
        return dp

    def start(self) -> None:
        """Start the 3 nodes and wait for a leader."""
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        self.addrs = [f"{HOST}:{free_port()}" for _ in range(3)]
        for i in range(3):
            self.nodes[i] = self._spawn(i)
        li = self.wait_leader(30)
        node = self.nodes[li]
        assert node is not None
        self.version = node.call({"cmd": "status"}, 5).get("version", "?")

    def stop(self) -> None:
        """Stop every node by PID."""
        for n in self.nodes:
            if n is not None:
                n.stop(graceful_s=2.0)

    def pids(self) -> dict[str, int]:
        """label -> pid of the live nodes."""
        return {f"node{i}": n.pid for i, n in enumerate(self.nodes) if n is not None and n.alive}

    def statuses(self) -> list[dict[str, Any] | None]:
        """Every live node's status (None for dead ones)."""
        out: list[dict[str, Any] | None] = []
        for n in self.nodes:
            if n is None or not n.alive:
                out.append(None)
                continue
            try:
                out.append(n.call({"cmd": "status"}, 5))
            except RuntimeError:
                out.append(None)
        return out

    def wait_leader(self, timeout: float = 30.0) -> int:
        """Index of the node every live node agrees leads (bounded wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sts = self.statuses()
            live = [s for s in sts if s is not None]
            who = [i for i, s in enumerate(sts) if s is not None and s["is_leader"]]
            if len(who) == 1 and len({s["leader"] for s in live}) == 1 and all(s["ready"] for s in live):
                return who[0]
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: no stable leader within {timeout}s")

    def wait_caught_up(self, timeout: float = 60.0) -> bool:
        """Bounded wait until all nodes applied the same index."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sts = self.statuses()
            if all(s is not None for s in sts) and len({s["last_applied"] for s in sts if s}) == 1:
                return True
            time.sleep(0.2)
        return False

    def leader_node(self) -> DriverProcess:
        """The leader's process."""
        n = self.nodes[self.wait_leader()]
        assert n is not None
        return n

    def driver_pid(self) -> int | None:
        """PySyncObj's driver runs inside the leader (its CPU is in the leader's figure)."""
        return None

    def seq(self, duration: float, warmup: float) -> dict[str, Any]:
        """Sequential sync writes on the leader."""
        return self.leader_node().call({"cmd": "seq", "duration": duration, "warmup": warmup},
                                       duration + warmup + 60)

    def tput(self, inflight: int, duration: float, warmup: float) -> dict[str, Any]:
        """Closed-loop async writes on the leader."""
        self.wait_caught_up()
        return self.leader_node().call({"cmd": "tput", "inflight": inflight, "duration": duration,
                                        "warmup": warmup}, duration + warmup + 90)

    def failover_trial(self, inflight: int, max_s: float) -> dict[str, Any]:
        """kill -9 of the leader while a follower drives writes; then restart it."""
        li = self.wait_leader()
        fi = (li + 1) % 3
        driver, victim = self.nodes[fi], self.nodes[li]
        assert driver is not None and victim is not None
        kill_at = time.monotonic() + 1.0
        driver.send({"cmd": "failover", "inflight": inflight, "kill_at": kill_at, "max_s": max_s})
        time.sleep(max(0.0, kill_at - time.monotonic()))
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        r = recovery_after(driver.recv(max_s + 30), killed_at)
        victim.stop(graceful_s=0)
        self.nodes[li] = self._spawn(li)
        self.wait_leader(30)
        r["caught_up_after"] = self.wait_caught_up(30)
        return r

    def visibility(self, samples: int, gap_s: float) -> dict[str, Any]:
        """Leader acknowledgement -> value visible in a follower's ReplDict (ms)."""
        li = self.wait_leader()
        leader, follower = self.nodes[li], self.nodes[(li + 1) % 3]
        assert leader is not None and follower is not None
        gaps: list[float] = []
        for n in range(samples):
            val = f"vis{n:06d}" + "v" * 80
            follower.send({"cmd": "watch", "key": "vis", "value": val, "timeout": 5})
            time.sleep(0.002)
            acked = leader.call({"cmd": "set_sync", "key": "vis", "value": val}, 10)["acked_at"]
            seen = follower.recv(10)["visible_at"]
            if seen is not None:
                gaps.append(max(0.0, seen - acked))
            time.sleep(gap_s)
        return {"latency": summarize_s(gaps), "misses": samples - len(gaps)}


# =========================================================================== etcd


def etcd_driver_main(argv: list[str]) -> None:
    """etcd driver process: native gRPC (etcd3's generated stubs) from the peers' venv."""
    import grpc
    from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc

    value = b"v" * VALUE_SIZE
    keys = [key_of(i).encode() for i in range(NKEYS)]

    async def tput(ep: str, inflight: int, duration: float, warmup: float) -> dict[str, Any]:
        nchan = min(8, inflight)
        chans = [grpc.aio.insecure_channel(ep) for _ in range(nchan)]
        stubs = [rpc_pb2_grpc.KVStub(c) for c in chans]

        async def op(i: int) -> None:
            await stubs[i % nchan].Put(rpc_pb2.PutRequest(key=keys[i % NKEYS], value=value), timeout=10)
        try:
            r = await closed_loop(op, inflight, duration, warmup)
        finally:
            for c in chans:
                await c.close()
        r["channels"] = nchan
        return r

    async def seq(ep: str, duration: float, warmup: float) -> dict[str, Any]:
        async with grpc.aio.insecure_channel(ep) as ch:
            stub = rpc_pb2_grpc.KVStub(ch)

            async def op(i: int) -> None:
                await stub.Put(rpc_pb2.PutRequest(key=keys[i % NKEYS], value=value), timeout=10)
            return await sequential(op, duration, warmup)

    async def failover(eps: list[str], inflight: int, kill_at: float, max_s: float) -> dict[str, Any]:
        chans = [grpc.aio.insecure_channel(e) for e in eps]
        stubs = [rpc_pb2_grpc.KVStub(c) for c in chans]
        cur = [0]

        async def op(i: int) -> None:
            k = cur[0]
            try:
                await stubs[k].Put(rpc_pb2.PutRequest(key=keys[i % NKEYS], value=value), timeout=FAILOVER_REQ_TIMEOUT_S)
            except grpc.RpcError:
                if cur[0] == k:
                    cur[0] = (k + 1) % len(stubs)
                raise
        try:
            return await failover_loop(op, inflight, kill_at, max_s)
        finally:
            for c in chans:
                await c.close()

    def visibility(leader: str, follower: str, samples: int, gap_s: float) -> dict[str, Any]:
        gaps: list[float] = []
        with grpc.insecure_channel(leader) as lc, grpc.insecure_channel(follower) as fc:
            ls, fs = rpc_pb2_grpc.KVStub(lc), rpc_pb2_grpc.KVStub(fc)
            for n in range(samples):
                val = b"vis%06d" % n + b"v" * 80
                ls.Put(rpc_pb2.PutRequest(key=b"vis", value=val), timeout=5)
                acked = time.monotonic()
                deadline = acked + 5
                while time.monotonic() < deadline:
                    r = fs.Range(rpc_pb2.RangeRequest(key=b"vis", serializable=True), timeout=5)
                    if r.kvs and r.kvs[0].value == val:
                        gaps.append(time.monotonic() - acked)
                        break
                time.sleep(gap_s)
        return {"latency": summarize_s(gaps), "misses": samples - len(gaps)}

    def status(eps: list[str]) -> dict[str, Any]:
        out = []
        for e in eps:
            try:
                with grpc.insecure_channel(e) as ch:
                    st = rpc_pb2_grpc.MaintenanceStub(ch).Status(rpc_pb2.StatusRequest(), timeout=1)
                out.append({"member_id": st.header.member_id, "leader": st.leader,
                            "raft_term": st.raftTerm, "raft_index": st.raftIndex,
                            "applied": getattr(st, "raftAppliedIndex", st.raftIndex),
                            "db_size": st.dbSize,
                            "version": st.version})
            except grpc.RpcError:
                out.append(None)
        return {"members": out}

    def put_big(ep: str, count: int, size: int, inflight: int) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            chans = [grpc.aio.insecure_channel(ep, options=[
                ("grpc.max_send_message_length", 4 << 20)]) for _ in range(4)]
            stubs = [rpc_pb2_grpc.KVStub(c) for c in chans]
            blob = os.urandom(size)
            nxt = [0]

            async def worker() -> None:
                while nxt[0] < count:
                    i = nxt[0]
                    nxt[0] += 1
                    await stubs[i % 4].Put(rpc_pb2.PutRequest(key=b"big%06d" % i, value=blob), timeout=60)
            t0 = time.monotonic()
            try:
                await asyncio.gather(*(worker() for _ in range(inflight)))
            finally:
                for c in chans:
                    await c.close()
            return {"seconds": time.monotonic() - t0}
        return asyncio.run(go())

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        cmd = req["cmd"]
        if cmd == "tput":
            return asyncio.run(tput(req["ep"], req["inflight"], req["duration"], req["warmup"]))
        if cmd == "seq":
            return asyncio.run(seq(req["ep"], req["duration"], req["warmup"]))
        if cmd == "failover":
            return asyncio.run(failover(req["eps"], req["inflight"], req["kill_at"], req["max_s"]))
        if cmd == "visibility":
            return visibility(req["leader"], req["follower"], req["samples"], req["gap_s"])
        if cmd == "status":
            return status(req["eps"])
        if cmd == "put_big":
            return put_big(req["ep"], req["count"], req["size"], req["inflight"])
        return {"error": f"unknown command {cmd}"}

    serve_json_lines(handle)


ETCD = shutil.which("etcd") or "/usr/bin/etcd"


class EtcdCluster:
    """3 etcd members on loopback (WAL fsync on, as always in 3.4), defaults otherwise
    (heartbeat 100 ms, election timeout 1000 ms); the driver speaks native gRPC."""

    name = "etcd"

    def __init__(self, workdir: Path, extra_flags: tuple[str, ...] = ()) -> None:
        self.workdir = Path(workdir)
        self.extra = list(extra_flags)
        self.procs: list[subprocess.Popen[bytes] | None] = [None, None, None]
        self.client_ports: list[int] = []
        self.peer_ports: list[int] = []
        self.driver: DriverProcess | None = None
        self.version = "?"

    def info(self) -> dict[str, Any]:
        """Version and configuration (for the results)."""
        return {"system": "etcd", "version": self.version,
                "config": {"fsync": "WAL fdatasync before ack (not switchable in 3.4)",
                           "heartbeat_ms": 100, "election_timeout_ms": 1000,
                           "client": "Python grpc.aio (etcd3 0.12.0 stubs), separate process, "
                                     "up to 8 HTTP/2 channels"}}

    def ep(self, i: int) -> str:
        """Client endpoint host:port of member i."""
        return f"{HOST}:{self.client_ports[i]}"

    def _spawn(self, i: int, state: str = "new") -> None:
        initial = ",".join(f"m{j}=http://{HOST}:{self.peer_ports[j]}" for j in range(max(3, i + 1)))
        log = open(self.workdir / f"m{i}.log", "ab")  # noqa: SIM115 - handed to the child
        cmd = [ETCD, "--name", f"m{i}", "--data-dir", str(self.workdir / f"m{i}"),
               "--listen-client-urls", f"http://{HOST}:{self.client_ports[i]}",
               "--advertise-client-urls", f"http://{HOST}:{self.client_ports[i]}",
               "--listen-peer-urls", f"http://{HOST}:{self.peer_ports[i]}",
               "--initial-advertise-peer-urls", f"http://{HOST}:{self.peer_ports[i]}",
               "--initial-cluster", initial, "--initial-cluster-token", "kraft-bench",
               "--initial-cluster-state", state, "--logger", "zap", "--log-outputs", "stderr",
               *self.extra]
        self.procs[i] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        log.close()

    def start(self) -> None:
        """Start 3 members and the driver; wait for a leader."""
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        self.client_ports = [free_port() for _ in range(3)]
        self.peer_ports = [free_port() for _ in range(3)]
        for i in range(3):
            self._spawn(i)
        self.driver = DriverProcess([str(PEERS_VENV / "bin" / "python"), str(Path(__file__).resolve()),
                                     "etcd-driver"], self.workdir / "driver.log")
        self.driver.recv(30)
        self.wait_leader(30)
        self.version = subprocess.run([ETCD, "--version"], capture_output=True, text=True,
                                      timeout=10).stdout.splitlines()[0].split(":")[-1].strip()

    def stop(self) -> None:
        """Stop members and the driver by PID."""
        if self.driver is not None:
            self.driver.stop()
        for p in self.procs:
            kill_proc(p, graceful_s=5.0)

    def pids(self) -> dict[str, int]:
        """label -> pid of the live members and the driver."""
        out = {f"m{i}": p.pid for i, p in enumerate(self.procs) if p is not None and p.poll() is None}
        if self.driver is not None:
            out["client"] = self.driver.pid
        return out

    def status(self) -> list[dict[str, Any] | None]:
        """Per-member status (None when it does not answer)."""
        assert self.driver is not None
        reply = self.driver.call({"cmd": "status", "eps": [self.ep(i) for i in range(3)]}, 30)
        if "members" not in reply:
            raise RuntimeError(f"etcd driver: {reply}")
        members: list[dict[str, Any] | None] = reply["members"]
        return members

    def wait_leader(self, timeout: float = 30.0) -> int:
        """Index of the leader every answering member agrees on (bounded wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, p in enumerate(self.procs):
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"etcd m{i} exited rc={p.returncode}; see {self.workdir}")
            sts = self.status()
            live = [s for s in sts if s is not None]
            leaders = {s["leader"] for s in live}
            if len(live) >= 2 and len(leaders) == 1 and 0 not in leaders:
                idx = [i for i, s in enumerate(sts) if s is not None and s["member_id"] == s["leader"]]
                if idx:
                    return idx[0]
            time.sleep(0.1)
        raise RuntimeError(f"etcd: no leader within {timeout}s")

    def wait_caught_up(self, timeout: float = 30.0) -> bool:
        """Bounded wait until every member applied the same index."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sts = self.status()
            if all(s is not None for s in sts) and len({s["applied"] for s in sts if s}) == 1:
                return True
            time.sleep(0.2)
        return False

    def driver_pid(self) -> int | None:
        """The client process."""
        return self.driver.pid if self.driver else None

    def seq(self, duration: float, warmup: float) -> dict[str, Any]:
        """Sequential Put against the leader."""
        assert self.driver is not None
        return self.driver.call({"cmd": "seq", "ep": self.ep(self.wait_leader()),
                                 "duration": duration, "warmup": warmup}, duration + warmup + 60)

    def tput(self, inflight: int, duration: float, warmup: float) -> dict[str, Any]:
        """Closed-loop Puts against the leader."""
        assert self.driver is not None
        return self.driver.call({"cmd": "tput", "ep": self.ep(self.wait_leader()),
                                 "inflight": inflight, "duration": duration, "warmup": warmup},
                                duration + warmup + 60)

    def failover_trial(self, inflight: int, max_s: float) -> dict[str, Any]:
        """kill -9 of the leader under load; then restart it and wait until caught up."""
        assert self.driver is not None
        li = self.wait_leader()
        eps = [self.ep(li)] + [self.ep(j) for j in range(3) if j != li]
        kill_at = time.monotonic() + 1.0
        self.driver.send({"cmd": "failover", "eps": eps, "inflight": inflight, "kill_at": kill_at,
                          "max_s": max_s})
        time.sleep(max(0.0, kill_at - time.monotonic()))
        victim = self.procs[li]
        assert victim is not None
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        r = recovery_after(self.driver.recv(max_s + 30), killed_at)
        victim.wait(timeout=10)
        self._spawn(li, state="existing")
        self.wait_leader(30)
        r["caught_up_after"] = self.wait_caught_up(30)
        return r

    # ------------------------------------------------------------------ state, join, restart

    def _status_of(self, i: int) -> dict[str, Any] | None:
        assert self.driver is not None
        reply = self.driver.call({"cmd": "status", "eps": [self.ep(i)]}, 30)
        members = reply.get("members") or [None]
        return members[0]

    def load_state(self, count: int, size: int, inflight: int = 4) -> dict[str, Any]:
        """Write `count` values of `size` bytes through the leader."""
        assert self.driver is not None
        r: dict[str, Any] = self.driver.call({"cmd": "put_big", "ep": self.ep(self.wait_leader()),
                                              "count": count, "size": size, "inflight": inflight}, 1800)
        return r

    def _wait_applied(self, i: int, target: int, timeout: float) -> float | None:
        """Seconds until member i answers Status with applied >= target (None on timeout)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            st = self._status_of(i)
            if st is not None and st["applied"] >= target:
                return time.monotonic() - t0
            time.sleep(0.05)
        return None

    def join_learner(self, timeout: float = 600.0) -> dict[str, Any]:
        """Add a 4th member as a learner (`etcdctl member add --learner`), start it, and time
        process start -> its applied index reaches the leader's (caught up); then promote."""
        li = self.wait_leader()
        lead = self._status_of(li)
        assert lead is not None
        self.client_ports.append(free_port())
        self.peer_ports.append(free_port())
        self.procs.append(None)
        env = dict(os.environ, ETCDCTL_API="3")
        ctl = shutil.which("etcdctl") or "/usr/bin/etcdctl"
        deadline = time.monotonic() + 60
        while True:  # etcd refuses a member change until the cluster has been healthy ~5 s
            add = subprocess.run([ctl, f"--endpoints={self.ep(li)}", "member", "add", "m3",
                                  "--learner", f"--peer-urls=http://{HOST}:{self.peer_ports[3]}"],
                                 capture_output=True, text=True, timeout=30, env=env)
            if add.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        if add.returncode != 0:
            return {"error": (add.stdout + add.stderr)[-300:]}
        t0 = time.monotonic()
        self._spawn(3, state="existing")
        caught = self._wait_applied(3, lead["applied"], timeout)
        out: dict[str, Any] = {"time_to_caught_up_s": caught, "leader_db_bytes": lead["db_size"],
                               "leader_applied": lead["applied"],
                               "started_to_caught_up_wall_s": time.monotonic() - t0}
        st = self._status_of(3)
        out["learner_db_bytes"] = st["db_size"] if st else None
        return out

    def restart_member(self, graceful: bool, timeout: float = 300.0) -> dict[str, Any]:
        """Stop a follower (SIGKILL or SIGTERM), start it again, time start -> it answers with
        the leader's applied index (ready)."""
        li = self.wait_leader()
        fi = (li + 1) % 3
        p = self.procs[fi]
        kill_proc(p, graceful_s=10 if graceful else 0)
        lead = self._status_of(li)
        target = lead["applied"] if lead else 0
        t0 = time.monotonic()
        self._spawn(fi, state="existing")
        ready = self._wait_applied(fi, target, timeout)
        return {"ready_s": ready, "wall_s": time.monotonic() - t0,
                "data_dir_bytes": sum(f.stat().st_size for f in (self.workdir / f"m{fi}").rglob("*")
                                      if f.is_file())}

    def visibility(self, samples: int, gap_s: float) -> dict[str, Any]:
        """Leader acknowledgement -> value visible in a serializable read on a follower."""
        assert self.driver is not None
        li = self.wait_leader()
        r: dict[str, Any] = self.driver.call(
            {"cmd": "visibility", "leader": self.ep(li), "follower": self.ep((li + 1) % 3),
             "samples": samples, "gap_s": gap_s}, samples * (gap_s + 5) + 30)
        return r


if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "pysyncobj-node":
        pysyncobj_node_main(sys.argv[2:])
    elif role == "etcd-driver":
        etcd_driver_main(sys.argv[2:])
    else:
        print("usage: peers.py pysyncobj-node ... | etcd-driver", file=sys.stderr)
        sys.exit(2)
