"""`bench.systems.peers.build_lane` builds the native lane in an export of a commit (what the peer
comparison runs the nodes from): the extension is there afterwards, and loads."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.systems.peers import build_lane

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler here")
def test_the_lane_of_an_exported_commit_is_built_and_loads(tmp_path: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", "kraft"],
                             capture_output=True, timeout=60, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True, timeout=60)
    assert build_lane(tmp_path)
    loaded = subprocess.run(
        [sys.executable, "-c", "from kraft.lane import native; print(native() is not None)"],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
        timeout=60, check=True)
    assert loaded.stdout.strip() == "True"
