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


# TEST_TIMES_FILE=FILE: each test's wall time and the CPU time it cost (this process and
# the processes it started and reaped) appended to FILE as JSON lines, one per test phase, so
# the suite's budget can be judged on a loaded machine too (CPU time barely moves with load).
_TIMES_FILE = os.environ.get("TEST_TIMES_FILE")

if _TIMES_FILE:
    import json
    import resource
    import time

    def _cpu() -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
        wall, cpu = time.monotonic(), _cpu()
        yield
        with open(_TIMES_FILE, "a") as out:
            out.write(json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - wall, 3),
                                  "cpu": round(_cpu() - cpu, 3)}) + "\n")
