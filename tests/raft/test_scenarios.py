"""Data-driven interaction scenarios: each `testdata/*.txt` script is replayed on a simulated
quorum and its transcript must match the file exactly (a behaviour change shows up as a diff).

Regenerate after an intended change with `KRAFT_UPDATE_GOLDEN=1 pytest tests/raft/test_scenarios.py`
and review the diff.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from kraft.sim.script import run_script

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_scenario_transcript(path: Path) -> None:
    expected = path.read_text()
    actual = run_script(expected)
    if os.environ.get("KRAFT_UPDATE_GOLDEN") == "1":
        path.write_text(actual)
        return
    assert "VIOLATION" not in actual and "ERROR" not in actual, actual
    if actual != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"{path.name} (expected)", tofile=f"{path.name} (actual)",
        ))
        pytest.fail(f"transcript differs:\n{diff}")


def test_scenarios_exist() -> None:
    assert len(SCRIPTS) >= 5
