"""Readiness is "in a working quorum and caught up", liveness is "the process serves"
(docs/node.md, "Probes"): real processes, signals, and both probes read over HTTP."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from kraft.cli.local import LocalCluster, http_call


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


def _sample_readiness(cluster: LocalCluster, node_id: int, stop: threading.Event,
                      out: list[tuple[float, int, dict[str, Any]]]) -> None:
    """Probe a node's /readyz as fast as it answers until `stop`: (sent at, status, body)."""
    http = cluster.nodes[node_id].http
    while not stop.is_set():
        sent_at = time.monotonic()
        r = http_call(http, "GET", "/readyz", timeout=5)
        out.append((sent_at, r.status, r.json()))


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
    samples: dict[int, list[tuple[float, int, dict[str, Any]]]] = {n: [] for n in survivors}
    stop = threading.Event()
    threads = [threading.Thread(target=_sample_readiness, args=(cluster, n, stop, samples[n]))
               for n in survivors]
    process.send_signal(signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        for t in threads:
            t.start()
        new = cluster.wait_for_leader(60, leader, survivors)
        _all_ready(cluster, survivors)  # ready again under the new leader
        stop.set()
        for t in threads:
            t.join(30)
        for nid in survivors:
            seen = samples[nid]
            assert seen, nid
            # not ready at some point between the pause and the new leader ...
            assert any(status != 200 for _, status, _ in seen), (nid, len(seen))
            for sent_at, status, body in seen:
                # ... and ready after the pause only in the new leader's epoch: once the
                # paused leader's last answer is older than the fetch timeout (plus a margin
                # for an answer still in the kernel's buffers at the pause), or at once when
                # the node's epoch changed
                if status == 200 and (sent_at > paused_at + fetch_timeout_s + 0.5
                                      or body["epoch"] != old_epoch):
                    assert body["epoch"] > old_epoch and body["leader_id"] == new, (nid, body)
        print("unready samples per survivor:",
              {n: sum(1 for _, st, _ in samples[n] if st != 200) for n in survivors})
    finally:
        stop.set()
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


async def test_a_follower_of_a_new_epoch_is_not_ready_before_the_new_leader_answers_it(
        clusters: Callable[..., LocalCluster]) -> None:
    # The last answer of the old leader is still within the fetch timeout when the node
    # follows the next epoch's leader, whose answers it does not get: caught up to the old
    # leader is not caught up to the new one.
    from tests.node.test_faults import ProxiedQuorum
    from tests.support.proxy import FORWARD

    q = ProxiedQuorum(clusters(3, static=True, properties={
        "controller.quorum.fetch.timeout.ms": "20000"}))
    await q.start()
    try:
        cluster = q.cluster
        old = await asyncio.to_thread(cluster.wait_for_leader, 60)
        for nid in cluster.nodes:
            await asyncio.to_thread(cluster.wait_ready, nid, 60)
        old_epoch = (await asyncio.to_thread(cluster.status, old))["epoch"]  # type: ignore[index]
        follower, new = (n for n in cluster.nodes if n != old)
        # the follower's requests are lost (its fetches, and its own votes: so `new` is the
        # one elected), while the others' requests to it and their answers pass
        q.links[(follower, new)].blackhole(FORWARD)
        q.links[(follower, old)].blackhole(FORWARD)
        await asyncio.to_thread(cluster.kill, old, signal.SIGTERM)  # resigns, then exits
        deadline = time.monotonic() + 15
        body: dict[str, Any] = {}
        while True:
            assert time.monotonic() < deadline, ("the follower never followed the new leader", body)
            ready = await asyncio.to_thread(http_call, cluster.nodes[follower].http, "GET",
                                            "/readyz")
            body = ready.json()
            if body["role"] == "follower" and body["epoch"] > old_epoch:
                break
            await asyncio.sleep(0.01)
        assert body["leader_id"] == new, body
        assert (ready.status, body["ready"]) == (503, False), body
        assert f"leader of epoch {body['epoch']}" in body["reason"], body
        q.heal()
        await asyncio.to_thread(cluster.wait_ready, follower, 60)
    finally:
        await q.stop()


def test_a_static_single_voter_leader_is_ready(clusters: Callable[..., LocalCluster]) -> None:
    """A static quorum's voters carry no directory id: the leader still counts itself."""
    c = clusters(voters=1, static=True)
    c.format(1)
    c.start(1)
    c.wait_ready(1, 60)
