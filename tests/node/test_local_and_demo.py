"""`kraft local` and the `make run` demo, run as a user would run them."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

LEADER_ROW = re.compile(r"^\s*\d+\s+\S+\s+leader\s")
"""A row of the status table for a node whose role is leader."""


def _pids_under(base: Path) -> list[int]:
    """kraft run processes whose config lives under `base` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\x00")
        except OSError:
            continue
        if b"run" in cmd and any(str(base).encode() in part for part in cmd):
            found.append(int(entry.name))
    return found


def _kill_all_under(base: Path) -> None:
    """SIGKILL every node process of `base`, including any still being started."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        for pid in _pids_under(base):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


IGNORING_SIGINT = [sys.executable, "-c",
                   "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                   "os.execv(sys.argv[1], sys.argv[1:])"]
"""Runs a command with SIGINT ignored, as a non-interactive shell starts `cmd &` (an ignored
signal stays ignored across exec)."""


# These tests start quorums on the addresses users get (127.0.0.1-4), with ports chosen free
# before the nodes bind them: two such quorums started at once on the two xdist workers could
# choose the same port. In the "default-loopback" group they run one after another on one
# worker (`kraft local`, the demo, the benchmark's clusters; other tests use their own /24s).
pytestmark = pytest.mark.xdist_group("default-loopback")


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", ["SIGINT", "SIGTERM"])
def test_kraft_local_shows_a_leader_and_stops_every_node_on_a_signal(
    tmp_path: Path, stop_signal: str,
) -> None:
    base = tmp_path / "local"
    # started with SIGINT ignored (as `cmd &` in a script is): Ctrl-C must still stop it
    proc = subprocess.Popen(
        [*IGNORING_SIGINT, sys.executable, "-m", "kraft", "local", "--voters", "3",
         "--observers", "1", "--dir", str(base), "--refresh", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if LEADER_ROW.match(line):
                break
        assert any(LEADER_ROW.match(line) for line in lines), "".join(lines[-30:])
        deadline = time.monotonic() + 30
        while len(_pids_under(base)) != 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_pids_under(base)) == 4
        proc.send_signal(getattr(signal, stop_signal))
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert "stopping every node" in out
        assert _pids_under(base) == []
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # lets kraft local stop its nodes
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        _kill_all_under(base)


@pytest.mark.slow
def test_make_run_demo_finishes_and_keeps_every_acknowledged_key(tmp_path: Path) -> None:
    base = tmp_path / "demo"
    try:
        out = subprocess.run([sys.executable, "-m", "kraft.cli.demo", "--dir", str(base)],
                             capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "every acknowledged key readable: 40/40" in out.stdout
        assert "every acknowledged key still readable: 40/40" in out.stdout
        assert "== 7. stopping every node" in out.stdout
        assert _pids_under(base) == []
    finally:
        _kill_all_under(base)
