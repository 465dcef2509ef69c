"""A Spark failure ends `kraft audit` with one line naming the step, the cause and the setting
to change (exit status 3); the traceback goes to a log file and finished steps stay."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kraft_pipeline.failure import classify

OOM_TASK = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling o356.parquet.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 "
    "failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 49) (localhost "
    "executor driver): java.lang.OutOfMemoryError: Java heap space\n\tat java.base/..."
)


def test_causes_and_settings_named() -> None:
    oom = classify(OOM_TASK, "local[2]", "2g")
    assert "out of memory" in oom.cause and "Java heap space" in oom.cause
    assert oom.remedy == "raise --driver-memory (now 2g)"
    on_cluster = classify(OOM_TASK, "spark://127.0.0.1:7077", "2g")
    assert "spark.executor.memory" in on_cluster.remedy
    lost = classify("org.apache.spark.SparkException: Job aborted due to stage failure: "
                    "ExecutorLostFailure (executor 1 exited caused by one of the running "
                    "tasks) Reason: Remote RPC client disassociated.", "spark://h:7077", "2g")
    assert lost.cause.startswith("an executor was lost") and "spark.executor.memory" in lost.remedy
    bad = classify("pyspark.errors.exceptions.captured.IllegalArgumentException: "
                   "spark.sql.shuffle.partitions should be int, but was abc", "local[2]", "2g")
    assert bad.cause.startswith("Spark rejected a setting") and "--conf" in bad.remedy
    gone = classify("py4j.protocol.Py4JError: Answer from Java side is empty", "local[2]", "1g",
                    log_text="ERROR Executor: Exception in task 0.0\n"
                             "java.lang.OutOfMemoryError: Java heap space\n\tat x")
    assert "ran out of memory" in gone.cause and gone.remedy == "raise --driver-memory (now 1g)"
    small = classify("java.lang.IllegalArgumentException: System memory 62390272 must be at "
                     "least 471859200. Please increase heap size", "local[2]", "64m")
    assert "--driver-memory 64m" in small.cause and "--driver-memory" in small.remedy


def _audit(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft_pipeline", *args], capture_output=True, text=True,
        timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}, cwd=tmp,
    )


def _one_failure_line(stderr: str) -> str:
    """The failure line; everything else on stderr is the audit's own progress lines (no
    traceback, no JVM output)."""
    assert "Traceback" not in stderr and "Py4J" not in stderr and "\tat " not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("kraft audit:")]
    assert len(lines) == 1, stderr
    others = [ln for ln in stderr.splitlines()
              if ln.strip() and not ln.startswith("kraft audit:") and " kraft-audit " not in ln]
    assert others == [], stderr
    return lines[0]


@pytest.mark.spark
def test_out_of_memory_in_a_step(tmp_path: Path) -> None:
    """A driver heap of 64 MiB runs out during the audit of a 48 MiB log.

    Spark refuses to start with less than 450 MiB of heap; `spark.testing.memory` tells it
    it has more than it has, so that a small input is enough to run the heap out. Which step
    it runs out in depends on the collector's timing: the test takes the one the line names
    and checks that steps.json agrees with it.
    """
    from kraft_pipeline.synthetic import write_large_log

    write_large_log(tmp_path / "q" / "n1", 48 << 20, segment_bytes=48 << 20,
                    value_bytes=64 << 10, batch_records=16)
    out = tmp_path / "out"
    proc = _audit(["--input", str(tmp_path / "q"), "--output", str(out),
                   "--driver-memory", "64m", "--conf", "spark.testing.memory=2147483648"],
                  tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    line = _one_failure_line(proc.stderr)
    found = re.search(r"step (\d)/9 \((\w+)\) failed: ", line)
    assert found, line
    assert "out of memory" in line and "raise --driver-memory (now 64m)" in line
    number, name = int(found.group(1)), found.group(2)
    steps = json.loads((out / "steps.json").read_text())
    assert steps["failed"]["name"] == name and steps["failed"]["step"] == number
    assert [s["step"] for s in steps["finished"]] == list(range(1, number))
    assert "Traceback" in (out / "logs" / "audit-error.log").read_text()
    assert "OutOfMemoryError" in (out / "logs" / "spark.log").read_text() + (
        out / "logs" / "jvm.log").read_text()


def _start_with_driver_memory(memory: str, tmp_path: Path, scenario: Any) -> tuple[str, Path]:
    """The failure line (exit status 3) of an audit run with `--driver-memory memory`, and
    its output directory."""
    out = tmp_path / "out"
    proc = _audit(["--input", str(scenario.root), "--output", str(out),
                   "--driver-memory", memory], tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    return _one_failure_line(proc.stderr), out


@pytest.mark.spark
def test_jvm_that_does_not_start_is_quoted(tmp_path: Path, scenario: Any) -> None:
    """The JVM's own complaint goes to logs/jvm.log, and the line quotes it."""
    line, out = _start_with_driver_memory("2q", tmp_path, scenario)
    assert "Spark start-up failed: the driver JVM did not start" in line, line
    assert "Invalid maximum heap size: -Xmx2q" in line, line
    assert "Could not create the Java Virtual Machine" in (out / "logs" / "jvm.log").read_text()
    # run again into the same OUT: the line quotes this JVM, not the one before
    line, out = _start_with_driver_memory("3z", tmp_path, scenario)
    assert "Invalid maximum heap size: -Xmx3z" in line and "2q" not in line, line
    assert "2q" not in (out / "logs" / "jvm.log").read_text()


def test_stray_output_goes_to_the_error_log(tmp_path: Path) -> None:
    """What a dying JVM makes Python print on its own (a thread's uncaught Py4J error, a
    proxy's finaliser failing, anything written to stderr after the failure line) goes to
    the error log, and the terminal gets nothing."""
    log = tmp_path / "audit-error.log"
    script = f"""
import gc, sys, threading
from pathlib import Path
from kraft_pipeline.audit import StrayOutput

class Proxy:
    def __del__(self):
        raise ConnectionResetError("finaliser could not release the Java object")

with StrayOutput(Path({str(log)!r})) as stray:
    def poll():
        raise ConnectionResetError("status query on a dead JVM")
    t = threading.Thread(target=poll, name="kraft-audit-progress")
    t.start(); t.join()
    Proxy(); gc.collect()
    print("kraft audit: step 2/9 (ingest) failed", file=sys.stderr)
    stray.detach()
    print("a late complaint", file=sys.stderr)
    sys.stderr.flush()
    import os; os.write(2, b"the JVM's last words\\n")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "kraft audit: step 2/9 (ingest) failed\n"
    text = log.read_text()
    assert "uncaught in thread kraft-audit-progress" in text and "status query" in text
    assert "Exception ignored in" in text and "finaliser could not release" in text
    assert "a late complaint" in text and "the JVM's last words" in text


@pytest.mark.spark
def test_driver_memory_below_what_spark_needs(tmp_path: Path, scenario: Any) -> None:
    line, out = _start_with_driver_memory("100m", tmp_path, scenario)
    assert "Spark start-up failed" in line and "--driver-memory 100m is below" in line
    assert "Traceback" in (out / "logs" / "audit-error.log").read_text()


@pytest.mark.spark
def test_bad_conf_is_named(tmp_path: Path, scenario: Any) -> None:
    out = tmp_path / "out"
    proc = _audit(["--input", str(scenario.root), "--output", str(out), "--no-report",
                   "--conf", "spark.sql.shuffle.partitions=lots"], tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    line = _one_failure_line(proc.stderr)
    assert "Spark rejected a setting" in line and "spark.sql.shuffle.partitions" in line
