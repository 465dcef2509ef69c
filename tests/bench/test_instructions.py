"""The program `bench_instructions` counts under callgrind: three in-process nodes elect a
leader and commit the warm-up and the measured writes (run here without valgrind)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.measure import bench_instructions

ROOT = Path(__file__).resolve().parents[2]


# a quorum on 127.0.0.1-3, in the group tests/node/test_local_and_demo.py explains
@pytest.mark.xdist_group("default-loopback")
def test_the_counted_quorum_commits_every_write(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench.measure.bench_instructions", "quorum", "7",
                          str(tmp_path / "q")], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    hw = int(out.stdout.split()[-1])
    # every write, after the few control records a new dynamic quorum starts with (3 here:
    # a second election would add a LeaderChange, which an instruction count must not hold)
    assert bench_instructions.WARM_UP + 7 < hw <= bench_instructions.WARM_UP + 7 + 3


def test_a_wrong_command_line_is_refused() -> None:
    assert bench_instructions.main(["quorum"]) == 2
    assert bench_instructions.main(["other", "1", "x"]) == 2
