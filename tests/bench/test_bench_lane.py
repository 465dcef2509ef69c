"""`bench.bench_lane`: the follower's decision on one answer, Python against the lane's C."""

from __future__ import annotations

import pytest

from bench import bench_lane
from kraft.raft.lane import native


def test_the_benchmark_measures_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_QUICK", "1")
    r = bench_lane.run()
    for key in ("python_read_us", "python_rules_us", "python_next_fetch_us", "python_core_us"):
        assert r[key] > 0, key
    assert r["python_path_us"] == pytest.approx(
        r["python_read_us"] + r["python_core_us"] + r["python_next_fetch_us"], abs=0.01)
    if native() is None:
        assert r["native_step_us"] is None
    else:
        assert r["native_step_us"] > 0
        assert r["python_over_native"] == pytest.approx(
            r["python_path_us"] / r["native_step_us"], rel=0.01)


@pytest.mark.skipif(native() is None, reason="kraft.raft._lane was not built")
def test_the_timed_step_refuses_an_answer_the_lease_does_not_take() -> None:
    lane = native()
    assert lane is not None
    frame = bench_lane._answer(100, 3, 100, 5)
    assert lane.time_follower_step(frame, 5, 3, 100, 10) > 0
    assert lane.time_follower_step(frame, 5, 3, 99, 10) == -1  # not at the log's end
    assert lane.time_follower_step(frame, 6, 3, 100, 10) == -1  # another fetch's answer
    assert lane.time_follower_step(frame, 5, 4, 100, 10) == -1  # another epoch
