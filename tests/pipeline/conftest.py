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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Make `--dist loadgroup` group `xdist_group` tests again under pytest 9.

    pytest-xdist 3.8 tags grouped tests by rewriting `item._nodeid`, which pytest 9 no longer
    reads (node ids live in `item._id`), so without this every worker would get Spark tests
    and start its own JVM. Runs on the workers only, and only where xdist's tag is missing.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if not names:
            continue
        suffix = "@" + "_".join(names)
        if item.nodeid.endswith(suffix) or not hasattr(item, "_id"):
            continue
        item._id = coerce_node_id(item.nodeid + suffix)


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
