"""`TEST_LANE` (tests/support/lane_mode.py): with `off`, the nodes the tests start run
the pure-Python path: a LocalCluster's nodes are configured with both lanes off and report no
lane; an in-process node has both lanes off; with `on`, nodes keep their configuration."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kraft.cli.local import LocalCluster
from kraft.config.node import build_config
from kraft.server.node import KraftNode
from tests.support import lane_mode
from tests.support.lane_mode import lane_off


def test_mode_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LANE", "OFF")
    assert lane_mode.lane_off()
    assert lane_mode.skip_reason("tests.node.test_leader_lane") is not None
    assert lane_mode.skip_reason("tests.node.test_failover") is None
    monkeypatch.setenv("TEST_LANE", "on")
    assert not lane_mode.lane_off()
    assert lane_mode.skip_reason("tests.node.test_leader_lane") is None
    monkeypatch.setenv("TEST_LANE", "maybe")
    with pytest.raises(ValueError, match="TEST_LANE='maybe'"):
        lane_mode.lane_mode()


def test_in_process_node_follows_the_mode(tmp_path: object) -> None:
    props = {"node.id": "1", "process.roles": "controller",
             "listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
             "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
             "metadata.log.dir": str(tmp_path), "kraft.lane.leader": "true",
             "kraft.lane.follower": "true"}
    node = KraftNode(build_config(props, {}))
    expected = not lane_off()
    assert (node.config.lane_leader, node.config.lane_follower) == (expected, expected)


def test_local_cluster_follows_the_mode(clusters: Callable[..., LocalCluster]) -> None:
    cluster = clusters(voters=1, properties={"kraft.lane.follower": "true",
                                             "kraft.lane.leader": "true"})
    cluster.start_all()
    nid = cluster.wait_for_leader()
    written = cluster.write_config(cluster.nodes[nid])
    expected = "false" if lane_off() else "true"
    assert (written["kraft.lane.leader"], written["kraft.lane.follower"]) == (expected, expected)
    status = cluster.status(nid)
    assert status is not None
    assert ("lane" in status) == (not lane_off())
