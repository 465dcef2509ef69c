"""Which write path the node tests run: `TEST_LANE=on` (the default: each node as
configured, so with the native lanes where `kraft.lane.leader` / `kraft.lane.follower` are on)
or `TEST_LANE=off` (every node a test starts runs the pure-Python path: both lanes off).

With the lane off:
- a `LocalCluster` the test process makes writes `kraft.lane.leader=false` and
  `kraft.lane.follower=false` into every node's server.properties (after the test's own
  properties: the setting wins over a test that asks for a lane);
- a `KraftNode` started inside the test process gets a configuration with both lanes off;
- `kraft` processes the test starts itself inherit `KRAFT_KRAFT_LANE_LEADER=false` and
  `KRAFT_KRAFT_LANE_FOLLOWER=false` (the node's own environment overrides);
- the tests of the lanes themselves are skipped with the reason (`LANE_MODULES`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

ENV = "TEST_LANE"
"""Not `KRAFT_*`: a node takes every `KRAFT_*` variable for a property and refuses an unknown
one, and `kraft` commands run by the tests inherit the environment."""

LANE_OFF_PROPERTIES = {"kraft.lane.leader": "false", "kraft.lane.follower": "false"}
"""What every node runs with when the lane is off."""

LANE_MODULES = {
    "test_follower_lane": "starts quorums with the follower's native lane on and checks what it did",
    "test_leader_lane": "starts quorums with the leader's native lane on and checks what it did",
    "test_lane_shell": "drives the native follower lane's C loop itself (no node)",
    "test_lane_leader_shell": "drives the native leader lane's C loop itself (no node)",
    "test_lane_fetch_answer": "checks the native lane's codec itself (no node)",
    "test_lane_leader_wire": "checks the native lane's codec itself (no node)",
    "test_lane_tick": "checks the lanes' bookkeeping tick (no node)",
}
"""The node tests of the native lanes (module name -> what they test): with the lane off they
are skipped, as they test the lane, not the pure-Python path (the lane-on run has them)."""


def lane_mode() -> str:
    """`on` or `off`, from `TEST_LANE`; anything else is an error naming the variable."""
    value = os.environ.get(ENV, "on").strip().lower()
    if value not in ("on", "off"):
        raise ValueError(f"{ENV}={value!r}: expected 'on' or 'off'")
    return value


def lane_off() -> bool:
    """True when the node tests run the pure-Python path."""
    return lane_mode() == "off"


def skip_reason(module_name: str) -> str | None:
    """Why a test module is skipped in the current mode, or None."""
    if not lane_off():
        return None
    what = LANE_MODULES.get(module_name.rpartition(".")[2])
    return None if what is None else f"{ENV}=off: {what}"


def switch_lanes_off() -> None:
    """Make every node a test starts (in this process, through a LocalCluster of this process,
    or as a `kraft run` child inheriting the environment) run with both lanes off."""
    from kraft.cli.local import LocalCluster
    from kraft.config.node import NodeConfig
    from kraft.server.node import KraftNode

    # the node's environment overrides: `KRAFT_` + the property name (`kraft.lane.leader`)
    os.environ["KRAFT_KRAFT_LANE_LEADER"] = "false"
    os.environ["KRAFT_KRAFT_LANE_FOLLOWER"] = "false"

    props: Callable[..., dict[str, str]] = LocalCluster._props  # type: ignore[attr-defined]
    if not getattr(props, "_lane_off", False):
        @functools.wraps(props)
        def _props(self: LocalCluster, node: Any) -> dict[str, str]:
            return {**props(self, node), **LANE_OFF_PROPERTIES}
        _props._lane_off = True  # type: ignore[attr-defined]
        LocalCluster._props = _props  # type: ignore[attr-defined]

    init = KraftNode.__init__
    if not getattr(init, "_lane_off", False):
        @functools.wraps(init)
        def __init__(self: KraftNode, config: NodeConfig, *args: Any, **kwargs: Any) -> None:
            config = config.model_copy(update={"lane_leader": False, "lane_follower": False})
            init(self, config, *args, **kwargs)
        __init__._lane_off = True  # type: ignore[attr-defined]
        KraftNode.__init__ = __init__  # type: ignore[method-assign]
