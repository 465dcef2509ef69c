"""Observers replicate but never count: with a majority of voters gone nothing commits, however
many observers are up, and the observers never lead."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from kraft.cli.local import LocalCluster, http_call


@pytest.mark.slow
def test_observers_do_not_make_a_quorum(clusters: Callable[..., LocalCluster]) -> None:
    cluster = clusters(3, observers=2)
    cluster.start_all()
    leader = cluster.wait_for_leader(60)
    assert cluster.put("before", b"1").status == 200
    for nid in (4, 5):
        cluster.wait_ready(nid, 60)
    # two voters down: one voter and two observers are up, which is no majority of voters
    down = [next(n for n in (1, 2, 3) if n != leader), leader]
    for nid in down:
        cluster.kill(nid, signal.SIGKILL)
    alive_voter = next(n for n in (1, 2, 3) if n not in down)
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        for nid in (alive_voter, 4, 5):
            st = cluster.status(nid)
            assert st is not None
            assert st["role"] != "leader", st
        time.sleep(0.2)
    # the observer cannot take the write: it answers 503, or redirects to the leader it last
    # knew, which is dead
    try:
        r = http_call(cluster.nodes[4].http, "PUT", "/v1/kv/during", b"x", timeout=20)
        assert r.status != 200, r.body
    except OSError:
        pass
    # one voter back: a majority again, a voter leads, the write path works, observers follow
    cluster.start(down[0])
    new = cluster.wait_for_leader(60)
    assert new in (1, 2, 3)
    assert cluster.put("after", b"2").status == 200
    for nid in (4, 5):
        cluster.wait_ready(nid, 60)
        # a stale read shows what the observer applied: it learns the write one fetch later
        # (and a round later still when its log first had to be truncated), so poll, bounded
        deadline = time.monotonic() + 15
        while True:
            r = http_call(cluster.nodes[nid].http, "GET", "/v1/kv/after?stale=true")
            if (r.status, r.body) == (200, b"2") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert (r.status, r.body) == (200, b"2")
        st = cluster.status(nid)
        assert st is not None and st["is_voter"] is False
