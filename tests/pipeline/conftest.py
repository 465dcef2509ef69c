"""Fixtures of the pipeline tests: one SparkSession per test run, one audited scenario.

Every test that touches Spark is marked `xdist_group("spark")`; with `--dist loadgroup`
they all run on one pytest-xdist worker, so the run starts exactly one JVM.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's only SparkSession: local[2], 1g driver, 2 shuffle partitions, no UI."""
    from kraft_pipeline.session import build_session

    session = build_session("local[2]", app_name="kraft-pipeline-tests",
                            conf={"spark.driver.memory": "1g"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Five replicas written by kraft.storage with known faults (see synthetic.Scenario)."""
    from kraft_pipeline.synthetic import write_scenario

    return write_scenario(tmp_path_factory.mktemp("quorum"))


@pytest.fixture(scope="session")
def audited(spark: Any, scenario: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The audit of `scenario`, run once: {"summary": ..., "out": output dir}."""
    from kraft_pipeline.audit import run_audit

    logging.getLogger("kraft_pipeline").setLevel(logging.INFO)
    out = tmp_path_factory.mktemp("audit")
    run_audit(spark, [str(scenario.root)], out)
    summary = json.loads((Path(out) / "summary.json").read_text())
    return {"summary": summary, "out": Path(out)}
