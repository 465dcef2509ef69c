"""What the native lanes' real-quorum tests share (`tests/node/test_follower_lane.py`,
`tests/node/test_leader_lane.py`): local reads, a node's lane statistics, waiting for a value
everywhere, and a stopped node's log bytes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kraft.cli.local import LocalCluster, http_call
from kraft.storage.layout import partition_dir
from kraft.storage.log import SegmentedLog


def local_value(cluster: LocalCluster, nid: int, key: str) -> bytes | None:
    """What node `nid` itself has applied for `key` (a stale read: no leadership check)."""
    r = http_call(cluster.nodes[nid].http, "GET", f"/v1/kv/{key}?stale=true")
    return r.body if r.status == 200 else None


def lane_stats(cluster: LocalCluster, nid: int, which: str = "lane") -> dict[str, Any]:
    """Node `nid`'s status entry for its follower's ("lane") or leader's ("leader_lane")
    native lane."""
    status = cluster.status(nid)
    assert status is not None and which in status, f"node {nid} reports no {which}"
    lane: dict[str, Any] = status[which]
    return lane


def wait_lane_armed(cluster: LocalCluster, nid: int, timeout: float = 30) -> None:
    """Wait until node `nid`'s follower lane runs."""
    deadline = time.monotonic() + timeout
    while not lane_stats(cluster, nid)["armed"]:
        assert time.monotonic() < deadline, f"node {nid}'s lane never armed"
        time.sleep(0.05)


def applied_everywhere(cluster: LocalCluster, key: str, value: bytes,
                       nodes: list[int] | None = None, timeout: float = 30) -> None:
    """Wait until every node (or `nodes`) has applied `key` = `value`."""
    for nid in nodes if nodes is not None else list(cluster.nodes):
        deadline = time.monotonic() + timeout
        while local_value(cluster, nid, key) != value:
            assert time.monotonic() < deadline, f"node {nid} never applied {key}"
            time.sleep(0.05)


def log_bytes(node_dir: Path, end: int) -> tuple[int, bytes]:
    """A stopped node's log below offset `end`: (start offset, the batches from there, as
    stored)."""
    log = SegmentedLog.open(partition_dir(node_dir), recovery_checkpoint_interval_s=None)
    try:
        start = log.log_start_offset
        return start, b"".join(bytes(b.raw) for b in log.batches() if b.last_offset < end)
    finally:
        log.close()
