"""KIP-630 with real processes: snapshots are taken, the log prefix is dropped, and a follower
that fell behind the leader's log start catches up through FetchSnapshot."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest

from kraft.cli.local import LocalCluster, http_call

RETAIN_LITTLE = {
    # every retention check (each 100 ms) keeps only the latest snapshot, unless one is
    # being downloaded: the leader's log start moves up as soon as it has two
    "metadata.max.retention.bytes": "0",
    "kraft.metadata.retention.check.interval.ms": "100",
}


@pytest.mark.slow
def test_follower_behind_log_start_catches_up_through_fetch_snapshot(
    clusters: Callable[..., LocalCluster],
) -> None:
    cluster = clusters(3, properties={**RETAIN_LITTLE,
                                      "metadata.log.max.record.bytes.between.snapshots": "4096"})
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    lagger = next(n for n in cluster.nodes if n != leader)
    for i in range(10):
        assert cluster.put(f"early-{i}", b"e" * 50).status == 200
    cluster.wait_ready(lagger, 60)
    cluster.kill(lagger, signal.SIGKILL)
    lagger_end = 0
    for i in range(300):
        r = cluster.put(f"key-{i:04d}", f"value-{i}-".encode() * 8)
        assert r.status == 200, r.body
    leader = cluster.wait_for_leader(30)
    deadline = time.monotonic() + 30
    st = cluster.status(leader)
    while time.monotonic() < deadline:
        st = cluster.status(leader)
        if st and st["log_start_offset"] > lagger_end + 20:
            break
        time.sleep(0.1)
    assert st is not None and st["log_start_offset"] > 20, st
    snapshots = list((cluster.nodes[leader].dir / "__cluster_metadata-0").glob("*.checkpoint"))
    assert snapshots, "the leader wrote no snapshot"

    cluster.start(lagger)
    cluster.wait_ready(lagger, 60)
    lst = cluster.status(lagger)
    assert lst is not None and lst["log_start_offset"] > 0, lst
    log_text = cluster.nodes[lagger].log_path.read_text()
    assert "event=snapshot_installed" in log_text
    for i in (0, 150, 299):
        r = http_call(cluster.nodes[lagger].http, "GET", f"/v1/kv/key-{i:04d}?stale=true")
        assert (r.status, r.body) == (200, f"value-{i}-".encode() * 8)
    r = http_call(cluster.nodes[lagger].http, "GET", "/v1/kv/early-3?stale=true")
    assert (r.status, r.body) == (200, b"e" * 50)
    # and the snapshot is loaded on restart (the leader restarts from its snapshot + log tail)
    cluster.kill(leader, signal.SIGKILL)
    cluster.start(leader)
    cluster.wait_ready(leader, 60)
    assert "event=node_started" in cluster.nodes[leader].log_path.read_text()
    r = http_call(cluster.nodes[leader].http, "GET", "/v1/kv/key-0150?stale=true")
    assert (r.status, r.body) == (200, b"value-150-" * 8)
    metrics = http_call(cluster.nodes[lagger].http, "GET", "/metrics").body.decode()
    assert "kraft_snapshot_load_seconds_count 1" in metrics or \
        "kraft_snapshot_load_seconds_count 2" in metrics


def test_new_observer_joins_from_a_snapshot_only_then_becomes_a_voter(
    clusters: Callable[..., LocalCluster],
) -> None:
    # A brand-new node (empty disk, no initial controllers) whose only way to catch up is the
    # leader's snapshot: it must learn the voters set and kraft.version from the snapshot,
    # follow the leader, become ready and be addable as a voter.
    cluster = clusters(3, observers=1,
                       properties={**RETAIN_LITTLE,
                                   "metadata.log.max.record.bytes.between.snapshots": "4096"})
    for nid in (1, 2, 3):
        cluster.format(nid)
        cluster.start(nid)
    leader = cluster.wait_for_leader(60)
    for i in range(300):
        assert cluster.put(f"k-{i:04d}", f"value-{i}-".encode() * 8).status == 200
    deadline = time.monotonic() + 30
    st = cluster.status(leader)
    while time.monotonic() < deadline and not (st and st["log_start_offset"] > 50):
        time.sleep(0.1)
        st = cluster.status(leader)
    assert st is not None and st["log_start_offset"] > 50, st
    cluster.format(4, join_later=True)
    cluster.start(4)
    cluster.wait_ready(4, 60)
    st4 = cluster.status(4)
    assert st4 is not None and st4["role"] == "follower" and st4["kraft_version"] == 1, st4
    assert "event=snapshot_installed" in cluster.nodes[4].log_path.read_text()
    r = http_call(cluster.nodes[4].http, "GET", "/v1/kv/k-0150?stale=true")
    assert (r.status, r.body) == (200, b"value-150-" * 8)


@pytest.mark.slow
def test_follower_downloading_a_large_snapshot_finishes_while_the_leader_takes_more(
    clusters: Callable[..., LocalCluster],
) -> None:
    # ~3 MB of state downloaded in 16 KiB chunks (some 190 FetchSnapshot round trips) while a
    # client keeps writing and the leader takes a snapshot every 64 KiB written. Before, each
    # new snapshot deleted the one being downloaded: the follower got SNAPSHOT_NOT_FOUND, began
    # again with the newest, and under these writes never finished.
    cluster = clusters(3, properties={
        **RETAIN_LITTLE,
        "metadata.log.max.record.bytes.between.snapshots": "32768",
        "controller.quorum.fetch.snapshot.max.bytes": "4096",
    })
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    lagger = next(n for n in cluster.nodes if n != leader)
    cluster.wait_ready(lagger, 60)
    cluster.kill(lagger, signal.SIGKILL)
    value = bytes(range(256)) * 40  # 10 KiB
    for i in range(300):
        assert cluster.put(f"big-{i:03d}", value, via=leader).status == 200
    deadline = time.monotonic() + 30
    st = cluster.status(leader)
    while time.monotonic() < deadline and not (st and st["log_start_offset"] > 0):
        time.sleep(0.05)
        st = cluster.status(leader)
    assert st is not None and st["log_start_offset"] > 0, st

    leader_log = cluster.nodes[leader].log_path
    lagger_log = cluster.nodes[lagger].log_path
    before = len(leader_log.read_bytes())
    stop = threading.Event()
    written: list[int] = []  # the writes acknowledged, in order

    def write() -> None:
        i, via = 0, leader
        while not stop.is_set():
            try:
                ok = cluster.put(f"during-{i % 50:02d}", value + str(i).encode(),
                                 via=via).status == 200
            except OSError:
                ok = False
            if ok:
                written.append(i)
                i += 1
            else:  # a busy machine may move the leadership: write to the new leader
                via = cluster.wait_for_leader(30, exclude=lagger)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        cluster.start(lagger)
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and writer.is_alive() and \
                "event=snapshot_installed" not in lagger_log.read_text():
            time.sleep(0.05)
        taken = leader_log.read_bytes()[before:].decode().count("event=snapshot_created")
        lagger_text = lagger_log.read_text()
        assert "event=snapshot_installed" in lagger_text, \
            f"no download finished while the leader took {taken} snapshots"
    finally:
        stop.set()
        writer.join(30)
    assert taken >= 2, f"the leader took only {taken} snapshots during the download"
    assert lagger_text.count("event=snapshot_installed") == 1
    assert "event=snapshot_aborted" not in lagger_text  # never told SNAPSHOT_NOT_FOUND
    cluster.wait_ready(lagger, 60)
    # Ready is not caught up: the follower serves the last acknowledged write once it has
    # learnt its commit and applied it (a busy machine can leave it a beat behind).
    last = written[-1]
    expected = (200, value + str(last).encode())
    deadline = time.monotonic() + 30
    while True:
        r = http_call(cluster.nodes[lagger].http, "GET",
                      f"/v1/kv/during-{last % 50:02d}?stale=true")
        if (r.status, r.body) == expected or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (r.status, r.body) == expected
    r = http_call(cluster.nodes[lagger].http, "GET", "/v1/kv/big-150?stale=true")
    assert (r.status, r.body) == (200, value)
