"""`bench.measure.bench_lane`: the follower's decision on one answer, Python against the lane's C."""

from __future__ import annotations

import pytest

from bench.measure import bench_lane
from kraft.lane import native


def test_the_benchmark_measures_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_QUICK", "1")
    r = bench_lane.run()
    if native() is not None:
        assert set(r["follower_rtt"]) == {"floor", "python", "c"}
        assert all(v["n"] == 300 for v in r["follower_rtt"].values())
        assert r["prototype_sequential"]["n"] == 300
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


@pytest.mark.skipif(native() is None, reason="kraft.lane._native was not built")
def test_the_timed_step_refuses_an_answer_the_lease_does_not_take() -> None:
    lane = native()
    assert lane is not None
    frame = bench_lane._answer(100, 3, 100, 5)
    assert lane.time_follower_step(frame, 5, 3, 100, 10) > 0
    assert lane.time_follower_step(frame, 5, 3, 99, 10) == -1  # not at the log's end
    assert lane.time_follower_step(frame, 6, 3, 100, 10) == -1  # another fetch's answer
    assert lane.time_follower_step(frame, 5, 4, 100, 10) == -1  # another epoch


@pytest.mark.parametrize("kind", ["floor", "python", "c"])
def test_the_follower_round_trip_runs_against_each_follower(kind: str) -> None:
    # each follower process takes every answer (the leader waits for each acknowledgement, so
    # a follower that dropped one would stall the run into its timeout) and leaves by itself
    if kind == "c" and native() is None:
        pytest.skip("kraft.lane._native was not built")
    r = bench_lane.follower_rtt(kind, 100, warmup=20)
    assert r["n"] == 100
    assert 0 < r["p50_ms"] <= r["p90_ms"]
