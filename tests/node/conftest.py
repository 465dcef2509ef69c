"""Makes `tests.support` importable (appended, so the standard library still wins)."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)


from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from kraft.server.local import LocalCluster  # noqa: E402

FAST_TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.quorum.append.linger.ms": "5",
}
"""Short timeouts: elections in ~0.5-1.5 s, still far above loopback round trips."""


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Make LocalClusters under tmp_path; every process is SIGKILLed at the end, even on failure."""
    made: list[LocalCluster] = []
    counter = iter(range(1000))

    def make(voters: int = 3, observers: int = 0, **kwargs: Any) -> LocalCluster:
        props = {**FAST_TIMEOUTS, **kwargs.pop("properties", {})}
        c = LocalCluster(tmp_path / f"cluster-{next(counter)}", voters, observers,
                         properties=props, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
