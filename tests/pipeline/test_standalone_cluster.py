"""`kraft audit --master spark://...` on a real Spark standalone cluster on loopback.

A master and a worker are started from the installed PySpark (`spark-class` with
`org.apache.spark.deploy.master.Master` and `...worker.Worker`, two cores and a small memory;
one worker and one executor: each JVM costs seconds of CPU to start on a 2-core machine, and
the driver already talks to the cluster over the network as with many); the audit of the planted-fault quorum runs on them as a separate process and must
give the same summary as the in-process `local[2]` audit of the same quorum.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

VOLATILE = {"generated_at", "output", "spark", "elapsed_s", "report", "steps", "resources",
            "spark_start_s"}


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([str(_spark_class()), *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found.group(1) if found.groups() else found.group(0)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not seen in {log}:\n{log.read_text(errors='replace')}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the process group started for this daemon
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and one two-core worker on 127.0.0.1; yields the master URL."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = tmp_path / "master.log"
        master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", "0", "--webui-port", "0"], master_log, env)
        procs.append(master)
        url = _wait_for(master_log, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)",
                        master, 60)
        work = tmp_path / "worker"
        work.mkdir()
        wlog = tmp_path / "worker.log"
        worker = _start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--cores", "2", "--memory", "1g", "--webui-port", "0",
                         "--work-dir", str(work), url], wlog, env)
        procs.append(worker)
        _wait_for(wlog, r"Successfully registered with master", worker, 60)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in VOLATILE}


def test_audit_on_a_standalone_cluster_matches_local(
    cluster: str, scenario: Any, audited: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "audit"
    kraft = Path(sys.executable).with_name("kraft")
    proc = subprocess.run(
        [str(kraft), "audit", "--master", cluster, "--input", str(scenario.root),
         "--output", str(out), "--no-report",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=2",
         "--conf", "spark.cores.max=2"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["spark"]["master"] == cluster
    assert _comparable(summary) == _comparable(audited["summary"])
