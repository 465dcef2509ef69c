"""Makes `tests.support` importable (appended, so the standard library still wins)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)


import itertools  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from kraft.cli.local import LocalCluster  # noqa: E402
from tests.support.lane_mode import lane_off, skip_reason, switch_lanes_off  # noqa: E402

if lane_off():  # TEST_LANE=off: every node the tests start runs the pure-Python path
    switch_lanes_off()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `TEST_LANE=off`, skip the tests of the native lanes themselves (with why)."""
    for item in items:
        module = getattr(item, "module", None)
        reason = skip_reason(module.__name__) if module is not None else None
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))

FAST_TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.quorum.append.linger.ms": "5",
}
"""Short timeouts: elections in ~0.5-1.5 s, still far above loopback round trips."""


_clusters_made = itertools.cycle(range(1, 250))
"""The third octet of the next /24; after 249 it starts again (the clusters on those addresses
were stopped long before: each test stops its own)."""


def address_prefix() -> str:
    """A loopback /24 of our own: 127.<worker>.<cluster>. (xdist workers never collide).
    `TEST_NET_OFFSET` moves the second octet, so two test runs on one machine (two
    checkouts at once) do not share addresses either."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    offset = int(os.environ.get("TEST_NET_OFFSET", "0"))
    return f"127.{index + 10 + offset}.{next(_clusters_made)}."


def own_host() -> str:
    """A loopback address no other test uses (the first of a fresh `address_prefix()`), for a
    test that starts nodes in its own process: ports chosen free on it stay free until bound,
    whatever the other xdist worker starts meanwhile."""
    return address_prefix() + "1"


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Make LocalClusters under tmp_path; every process is SIGKILLed at the end, even on failure."""
    made: list[LocalCluster] = []
    counter = iter(range(1000))

    def make(voters: int = 3, observers: int = 0, **kwargs: Any) -> LocalCluster:
        props = {**FAST_TIMEOUTS, **kwargs.pop("properties", {})}
        c = LocalCluster(tmp_path / f"cluster-{next(counter)}", voters, observers,
                         properties=props, address_prefix=address_prefix(), **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
