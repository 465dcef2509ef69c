"""Suite-wide pytest configuration."""

from __future__ import annotations

import os

import pytest

# Spark binds to the loopback address; the tests never use anything else.
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
