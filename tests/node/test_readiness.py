"""Readiness is "in a working quorum and caught up", liveness is "the process serves"
(docs/node.md, "Probes"): real processes, signals, and both probes read over HTTP."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

from kraft.server.local import LocalCluster, http_call


def _probe(cluster: LocalCluster, node_id: int) -> tuple[int, int, dict[str, Any]]:
    """(liveness status, readiness status, readiness body) of a node."""
    http = cluster.nodes[node_id].http
    live = http_call(http, "GET", "/healthz", timeout=5).status
    ready = http_call(http, "GET", "/readyz", timeout=5)
    return live, ready.status, ready.json()


def _all_ready(cluster: LocalCluster, nodes: list[int] | None = None) -> None:
    for nid in nodes or list(cluster.nodes):
        cluster.wait_ready(nid, 60)


def test_a_follower_whose_leader_is_gone_is_live_and_not_ready(
        clusters: Callable[..., LocalCluster]) -> None:
    cluster = clusters(3)
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    _all_ready(cluster)
    follower, other = (n for n in cluster.nodes if n != leader)
    # one voter of three left: no leader can be elected any more
    cluster.kill(leader, signal.SIGKILL)
    cluster.kill(other, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _probe(cluster, follower)[1] == 200:
        assert time.monotonic() < deadline, "still ready with its leader gone"
        time.sleep(0.02)
    # and it stays so, while it goes on serving
    for _ in range(50):
        live, ready, body = _probe(cluster, follower)
        assert (live, ready, body["ready"]) == (200, 503, False), body
        time.sleep(0.05)
    status = cluster.status(follower)
    assert status is not None and status["role"] != "leader", status


def test_a_paused_leader_makes_the_others_unready_until_a_new_leader(
        clusters: Callable[..., LocalCluster]) -> None:
    fetch_timeout_s = 2.0
    cluster = clusters(3, properties={"controller.quorum.fetch.timeout.ms": "2000"})
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    _all_ready(cluster)
    old_epoch = cluster.status(leader)["epoch"]  # type: ignore[index]
    survivors = [n for n in cluster.nodes if n != leader]
    process = cluster.nodes[leader].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        unready_seen = set()
        deadline = paused_at + 60
        # Until a new leader exists, nothing is ready: a sample taken once the last answer
        # of the paused leader is older than the fetch timeout (plus a margin for an answer
        # still in the kernel's buffers at the pause) says ready only in a new epoch.
        while time.monotonic() < deadline:
            for nid in survivors:
                taken_at = time.monotonic()
                live, ready, body = _probe(cluster, nid)
                assert live == 200
                status = cluster.status(nid)
                assert status is not None
                if ready != 200:
                    unready_seen.add(nid)
                elif taken_at > paused_at + fetch_timeout_s + 0.5:
                    assert status["epoch"] > old_epoch and status["leader_id"] != leader, (
                        nid, body, status)
            if unready_seen == set(survivors) and cluster.leader(survivors) is not None:
                break
            time.sleep(0.01)
        assert unready_seen == set(survivors), "a survivor never showed unready"
        new = cluster.wait_for_leader(30, leader, survivors)
        assert new != leader
        _all_ready(cluster, survivors)  # ready again under the new leader
    finally:
        process.send_signal(signal.SIGCONT)
    cluster.wait_ready(leader, 60)  # the old leader, back, follows and catches up
    status = cluster.status(leader)
    assert status is not None and status["role"] == "follower", status


def test_a_leader_that_lost_its_majority_is_unready_before_it_resigns(
        clusters: Callable[..., LocalCluster]) -> None:
    # The leader resigns once no majority fetched for 1.5 fetch timeouts (check-quorum);
    # readiness already says no at one fetch timeout, while it still calls itself leader.
    cluster = clusters(3, properties={"controller.quorum.fetch.timeout.ms": "4000"})
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    _all_ready(cluster)
    followers = [n for n in cluster.nodes if n != leader]
    for nid in followers:
        process = cluster.nodes[nid].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the leader stayed ready without a majority"
            live, ready, body = _probe(cluster, leader)
            assert live == 200
            if ready != 200:
                break
            time.sleep(0.01)
        # the first "not ready" came while it still led, and says why
        assert "without a majority" in body["reason"], body
    finally:
        for nid in followers:
            process = cluster.nodes[nid].process
            assert process is not None
            process.send_signal(signal.SIGCONT)
    _all_ready(cluster)


def test_an_observer_downloading_the_log_is_live_and_not_ready_until_caught_up(
        clusters: Callable[..., LocalCluster]) -> None:
    # small snapshots and segments: the observer starts from a snapshot it must download,
    # then the log after it
    cluster = clusters(3, observers=1, properties={
        "metadata.log.max.record.bytes.between.snapshots": str(8 << 20),
        "metadata.log.segment.bytes": str(16 << 20),
    })
    for nid in (1, 2, 3, 4):
        cluster.format(nid)
    for nid in (1, 2, 3):
        cluster.start(nid)
    leader = cluster.wait_for_leader(60)
    _all_ready(cluster, [1, 2, 3])
    value = b"v" * 500_000
    for i in range(160):  # 80 MB
        assert cluster.put(f"k{i % 40}-{i}", value, via=leader, timeout=30).status == 200
    target = cluster.status(leader)["high_watermark"]  # type: ignore[index]
    cluster.start(4)
    observer = cluster.nodes[4]
    behind = 0
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, "the observer never caught up"
        try:
            live, ready, body = _probe(cluster, 4)
        except OSError:  # not listening yet
            time.sleep(0.01)
            continue
        assert live == 200, "the observer stopped serving while it caught up"
        status = cluster.status(4, timeout=5)
        assert status is not None and status["is_voter"] is False
        if ready == 200:
            # applied only grows: behind now means it was behind when it said ready
            assert status["applied_offset"] >= target, (body, status, target)
            break
        behind += 1
    assert behind > 0, f"never seen unready while catching up; log {observer.log_path}"
