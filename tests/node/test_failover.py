"""Leader failure with real processes: kill -9 under write load, re-election, catch-up; every
recorded history is checked for linearizability."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable

import pytest

from kraft.cli.local import LocalCluster, http_call
from tests.support.kvclient import KVWorkload, http_op, new_session
from tests.support.linearizability import GET, Op, check_history, dump_history


async def _final_reads(cluster: LocalCluster, workload: KVWorkload) -> None:
    """Read every key through the leader and add the reads to the history."""
    leader = await asyncio.to_thread(cluster.wait_for_leader, 30)
    async with new_session() as session:
        for key in workload.keys:
            call = time.monotonic()
            out = await http_op(session, cluster.nodes[leader].http, "GET", f"/v1/kv/{key}",
                                None, 10)
            assert out.status in (200, 404), out
            workload.history.record(Op(99, GET, key, call, time.monotonic(),
                                       output=out.body if out.status == 200 else None))


async def _wait_caught_up(cluster: LocalCluster, node_id: int, timeout: float = 60) -> None:
    await asyncio.to_thread(cluster.wait_ready, node_id, timeout)


@pytest.mark.slow
async def test_kill_9_of_the_leader_under_write_load(clusters: Callable[..., LocalCluster]) -> None:
    cluster = clusters(3)
    await asyncio.to_thread(cluster.start_all)
    old = await asyncio.to_thread(cluster.wait_for_leader, 60)
    workload = KVWorkload([n.http for n in cluster.nodes.values()], keys=4, clients=6, seed=11)
    runner = asyncio.ensure_future(workload.run())
    await asyncio.sleep(2.0)
    acked_before = workload.stats.ok
    killed_at = time.monotonic()
    await asyncio.to_thread(cluster.kill, old, signal.SIGKILL)
    survivors = [n for n in cluster.nodes if n != old]
    new = await asyncio.to_thread(cluster.wait_for_leader, 30, old, survivors)
    election_s = time.monotonic() - killed_at
    assert new != old
    await asyncio.sleep(2.0)
    # the killed node restarts from its own disk and catches up as a follower
    await asyncio.to_thread(cluster.start, old)
    await _wait_caught_up(cluster, old)
    await asyncio.sleep(1.0)
    workload.stop()
    await runner
    await _final_reads(cluster, workload)
    assert acked_before > 0 and workload.stats.ok > acked_before
    result = check_history(workload.history.ops)
    if not result.ok:
        dump_history(result.bad_ops, str(cluster.base / "bad-history.jsonl"))
        with open(cluster.base / "rejected.txt", "w") as f:
            for op, out in workload.rejected:
                f.write(f"{op!r} {out!r}\n")
    assert result.ok, (result.detail, str(cluster.base / "bad-history.jsonl"))
    # the restarted node holds exactly the leader's committed state
    leader = await asyncio.to_thread(cluster.wait_for_leader, 30)
    for key in workload.keys:
        want = http_call(cluster.nodes[leader].http, "GET", f"/v1/kv/{key}")
        await asyncio.to_thread(cluster.wait_ready, old, 30)
        got = http_call(cluster.nodes[old].http, "GET", f"/v1/kv/{key}?stale=true")
        assert (got.status, got.body) == (want.status, want.body) or got.status == want.status == 404
    print(f"election after kill -9: {election_s * 1000:.0f} ms; ops ok={workload.stats.ok} "
          f"unknown={workload.stats.unknown} checked={result.ops_checked}")


async def test_first_election_and_reelection_respect_the_configured_timeouts(
    clusters: Callable[..., LocalCluster],
) -> None:
    """A leader appears after start and after a kill; the wait is bounded generously (the
    timeouts are 0.5 s election / 1 s fetch; loaded CI machines are slow)."""
    cluster = clusters(3)
    await asyncio.to_thread(cluster.start_all)
    first = await asyncio.to_thread(cluster.wait_for_leader, 60)
    st = cluster.status(first)
    assert st is not None and st["role"] == "leader"
    # every follower learns the leader (one of them may still be catching up to the new epoch)
    for n in cluster.nodes:
        if n != first:
            await asyncio.to_thread(cluster.wait_ready, n, 30)
            f = cluster.status(n)
            assert f is not None and f["leader_id"] == first
    await asyncio.to_thread(cluster.kill, first, signal.SIGKILL)
    survivors = [n for n in cluster.nodes if n != first]
    second = await asyncio.to_thread(cluster.wait_for_leader, 30, first, survivors)
    st2 = cluster.status(second)
    assert st2 is not None and st2["epoch"] > st["epoch"]
