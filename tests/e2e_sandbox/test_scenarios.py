"""The end-to-end scenarios (`e2e/`) in the sandbox, as `make test` runs them: the leader's disk
wiped under KV traffic (which also creates the quorum) and a cold start of every pod; and `make
run`'s demo (`make e2e` runs every scenario; a bad spec on a running quorum is
tests/operator_live/test_live.py's too). Each scenario raises on a quorum that does not
converge, on a KV history that is not linearizable (an acknowledged write lost) and on an
action it forbids; the times are measured (`make e2e`, docs/e2e.md), not asserted here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.backend import SandboxBackend
from e2e.scenarios import SCENARIOS, Run

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]


@pytest.mark.parametrize("name", ["disk-failure-leader", "cold-start"])
def test_scenario_in_the_sandbox(name: str, tmp_path: Path) -> None:
    backend = SandboxBackend(tmp_path)
    try:
        figures = SCENARIOS[name](Run(backend, name))
    finally:
        backend.close()
    assert figures["linearizable"] is True
    assert figures["writes_acknowledged"] > 0
    assert figures["ops_checked"] >= figures["writes_acknowledged"]


def test_make_run_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`make run`: the quorum Ready, a disk wiped and healed with a new directory id (the
    quorum's voter changes and the operator's DiskReplaced Event printed), every
    acknowledged key read back."""
    from kraft_sandbox import demo

    assert demo.main(["--state-dir", str(tmp_path / "sandbox")]) == 0
    out = capsys.readouterr().out
    assert "Ready and Quorate in" in out and "healed in" in out
    assert "the quorum: RemoveRaftVoter" in out and "the quorum: AddRaftVoter" in out
    assert "DiskReplaced" in out and "read back all" in out
