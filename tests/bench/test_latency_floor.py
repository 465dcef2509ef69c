"""`bench.measure.latency_floor`: the floor of a sequential write (hops and fsyncs, no work) and its
what-if mode, CPU work put on the path's steps (`--work`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.measure.latency_floor import _spend, _spend_unlocked, off_path, parse_work
from kraft.storage.uring import UringSync

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "expected"), [
    ("0,0,0,0", (0, 0, 0, 0, 0, 0, 0)),
    ("80,60,80,45", (80, 60, 80, 45, 0, 0, 0)),
    ("1,2,3,4,5,6", (1, 2, 3, 4, 5, 6, 0)),
    ("1,2,3,4,5,6,7", (1, 2, 3, 4, 5, 6, 7)),
    ("100000,0,0,0", (100_000, 0, 0, 0, 0, 0, 0)),
])
def test_work_takes_four_six_or_seven_figures(text: str, expected: tuple[int, ...]) -> None:
    assert parse_work(text) == expected


@pytest.mark.parametrize("text", ["", "1,2,3", "1,2,3,4,5", "1,2,3,4,5,6,7,8", "1,x,3,4",
                                  "1,-2,3,4", "1.5,2,3,4", "1,2,3,100001", "\u00b2,1,1,1"])
def test_work_refuses_anything_else(text: str) -> None:
    assert parse_work(text) is None


def test_spent_work_is_cpu_time_of_the_thread() -> None:
    before = time.thread_time()
    _spend(3000)
    assert time.thread_time() - before >= 0.003
    before = time.thread_time()
    _spend(0)
    assert time.thread_time() - before < 0.003


def test_off_path_work_in_line_is_spent_once_every_tick() -> None:
    later = off_path("loop", 3)
    spent = []
    for _ in range(6):
        before = time.thread_time()
        later(3000)
        spent.append(time.thread_time() - before >= 0.003)
    assert spent == [False, False, True, False, False, True]


def test_off_path_work_on_its_thread_leaves_the_caller_free() -> None:
    # 30 ms handed to the role's off-path thread: the caller returns at once, having spent
    # (nearly) none of it, and the process as a whole spends it soon after
    later = off_path("thread", 1)
    process = time.process_time()
    mine = time.thread_time()
    later(30_000)
    assert time.thread_time() - mine < 0.01
    deadline = time.monotonic() + 30
    while time.process_time() - process < 0.03 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert time.process_time() - process >= 0.03


def test_unlocked_work_lets_another_thread_run_meanwhile() -> None:
    # while one thread spends 200 ms of CPU hashing, another that needs the GIL gets through
    # many short steps; had the spender held the GIL throughout (as `_spend` does), the other
    # would wait for the interpreter's switch interval (5 ms) at each step
    steps = [0]
    stop = threading.Event()

    def other() -> None:
        while not stop.is_set():
            steps[0] += 1
            time.sleep(0)

    t = threading.Thread(target=other)
    t.start()
    before = time.thread_time()
    _spend_unlocked(200_000)
    spent = time.thread_time() - before
    stop.set()
    t.join()
    assert spent >= 0.2
    assert steps[0] > 200


def _floor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.measure.latency_floor", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_bad_work_flag_is_named_and_nothing_starts() -> None:
    done = _floor("--work", "1,2,x,4")
    assert done.returncode == 2
    assert "--work must be four, six or seven whole numbers" in done.stderr
    assert "'1,2,x,4'" in done.stderr


@pytest.mark.parametrize("tick", ["0", "10001", "x"])
def test_a_bad_tick_is_named_and_nothing_starts(tick: str) -> None:
    done = _floor("--tick", tick)
    assert done.returncode == 2
    assert "--tick" in done.stderr


def test_work_on_the_sync_completion_needs_the_uring_sync() -> None:
    done = _floor("--work", "0,0,0,0,0,0,5", "--leader-sync", "thread")
    assert done.returncode == 2
    assert "seventh figure" in done.stderr and "--leader-sync uring" in done.stderr


def _p50_of_a_short_run(sync: str, work: str, shown: str) -> float:
    """Run 300 writes with `--leader-sync sync --work work`; check the line the run prints
    (the sync and all seven figures, `shown`, over the 100 writes after warm-up) and return
    its p50 in ms."""
    done = _floor("--writes", "300", "--leader-sync", sync, "--work", work)
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    head = f"latency floor (leader fsync on its {sync}, work {shown} µs): p50 "
    assert line.startswith(head)
    assert line.endswith("over 100 writes")
    return float(line[len(head):].split(" ms", 1)[0])


def test_the_model_runs_with_work_and_a_syncing_thread() -> None:
    # 1 ms of CPU in the leader and 1 ms in each follower, both on the path: every write takes
    # at least 2 ms of wall time (CPU time never runs ahead of it), however fast the machine,
    # so a p50 below that means the roles did not get their work
    assert _p50_of_a_short_run("thread", "1000,0,1000,0", "1000,0,1000,0,0,0,0") >= 2.0


def test_two_runs_side_by_side_do_not_collide_on_ports() -> None:
    # each run listens on ports the kernel picks for it, so a second run (or any program that
    # took a port first) cannot make the roles fail to bind or reach the other run's roles
    me = [sys.executable, "-m", "bench.measure.latency_floor", "--writes", "300"]
    runs = [subprocess.Popen(me, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        assert out.strip().splitlines()[-1].endswith("over 100 writes")


@pytest.mark.skipif(not UringSync.available(), reason="io_uring is not available here")
def test_the_uring_sync_reaps_on_the_loop_and_does_its_work() -> None:
    # 2 ms of CPU on each completion of the leader's sync: the run says how many syncs the
    # leader reaped on its loop (at least one in 300 writes, each of which starts a sync or
    # asks for the next) and the CPU their work took, measured where it was spent (2 ms each,
    # at least). Whether a write then waits for that work is a matter of timing on the machine
    # and not asserted here
    done = _floor("--writes", "300", "--leader-sync", "uring", "--work", "0,0,0,0,0,0,2000")
    assert done.returncode == 0, done.stderr
    report, result = done.stdout.strip().splitlines()[-2:]
    assert result.startswith("latency floor (leader fsync on its uring, work 0,0,0,0,0,0,2000 µs)")
    head, tail = "the leader reaped ", " µs of CPU spent on their completions"
    assert report.startswith(head) and report.endswith(tail), report
    reaped, spent = report[len(head):-len(tail)].split(" fdatasyncs on its loop, ")
    assert int(reaped) >= 1
    assert int(spent) >= 2000 * int(reaped)


def test_the_json_line_has_the_leader_syncs_only_with_the_uring_sync() -> None:
    done = _floor("--writes", "300", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert "leader_syncs_reaped" not in figures  # the leader syncs on its loop: nothing reaped
    if UringSync.available():
        done = _floor("--writes", "300", "--json", "--leader-sync", "uring",
                      "--work", "0,0,0,0,0,0,500")
        assert done.returncode == 0, done.stderr
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        assert figures["leader_syncs_reaped"] >= 1
        assert figures["leader_sync_work_us"] >= 500 * figures["leader_syncs_reaped"]


def test_the_model_runs_with_off_path_work_on_a_thread_once_every_tick() -> None:
    done = _floor("--writes", "300", "--work", "0,0,0,0,200,100", "--off-path", "thread",
                  "--tick", "4")
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("latency floor (leader fsync on its loop, work 0,0,0,0,200,100,0 µs; "
                           "E and F on the thread, once every 4 writes): p50 ")
    assert line.endswith("over 100 writes")
