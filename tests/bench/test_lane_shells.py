"""`bench.measure.lane_shells`: the lane's steady state end to end in four processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.measure import lane_shells
from kraft.lane import native

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(native() is None, reason="kraft.lane._native was not built")
def test_the_shells_commit_every_write_in_order_on_every_replica() -> None:
    # each PUT is answered OK with its own offset, and afterwards every replica's log is a
    # prefix of the leader's: CRC-valid batches of epoch 1 holding the PUTs' KV records in
    # order (sequential() raises otherwise)
    r = lane_shells.sequential(300)
    assert r["n"] == 300
    assert 0 < r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"]


def test_a_bad_flag_is_named() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.measure.lane_shells", "--writes", "5"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--writes must be at least 100" in done.stderr
