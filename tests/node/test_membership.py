"""KIP-853 with real processes: add-controller / remove-controller from 3 to 5 to 3 voters while
clients write, and a voter whose disk is wiped rejoining through auto-join."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from kraft.admin.errors import AdminError
from kraft.admin.models import ZERO_DIRECTORY_ID
from kraft.cli.local import LocalCluster, http_call
from kraft.cli.quorum import add_voter, describe_quorum, remove_voter
from tests.node.test_failover import _final_reads
from tests.support.kvclient import KVWorkload
from tests.support.linearizability import check_history


def _bootstrap(cluster: LocalCluster, ids: list[int]) -> list[tuple[str, int]]:
    return [(cluster.nodes[i].host, cluster.nodes[i].port) for i in ids]


def _bootstrap_text(cluster: LocalCluster, ids: list[int]) -> str:
    return ",".join(f"{h}:{p}" for h, p in _bootstrap(cluster, ids))


async def _retry(what: str, fn: Callable[[], object], timeout: float = 60) -> None:
    """Voter changes answer REQUEST_TIMED_OUT while another change or a new leader's first
    commit is pending; retry until the change goes through."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await fn()  # type: ignore[misc]
            return
        except (AdminError, OSError, TimeoutError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not succeed: {exc}") from exc
            await asyncio.sleep(0.3)


async def _cli(args: list[str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Run `kraft quorum ...`; retried like an operator would while the leader answers
    REQUEST_TIMED_OUT (another change pending, the new voter not caught up yet)."""
    deadline = time.monotonic() + timeout
    while True:
        out = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "kraft", "quorum", *args],
            capture_output=True, text=True, timeout=120)
        if out.returncode == 0 or time.monotonic() > deadline:
            return out
        await asyncio.sleep(0.3)


async def _voters(cluster: LocalCluster, ids: list[int], timeout: float = 30) -> dict[int, str | None]:
    """The voter set from the leader, asked again while leadership moves (a removed leader
    resigns once the removal commits: it may still be named for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            resp = await describe_quorum(_bootstrap(cluster, ids))
            break
        except AdminError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)
    return {r.replica_id: None if r.directory_id == ZERO_DIRECTORY_ID else r.directory_id
            for r in resp.voters}


@pytest.mark.slow
async def test_three_to_five_to_three_voters_while_writing(
    clusters: Callable[..., LocalCluster],
) -> None:
    cluster = clusters(3, observers=2)
    for nid in (1, 2, 3):
        await asyncio.to_thread(cluster.format, nid)
    for nid in (4, 5):
        await asyncio.to_thread(cluster.format, nid, join_later=True)
    for nid in cluster.nodes:
        await asyncio.to_thread(cluster.start, nid)
    await asyncio.to_thread(cluster.wait_for_leader, 60)
    for nid in (4, 5):
        await asyncio.to_thread(cluster.wait_ready, nid, 60)
    workload = KVWorkload([n.http for n in cluster.nodes.values()], keys=3, clients=4, seed=5)
    runner = asyncio.ensure_future(workload.run())
    try:
        # node 4 joins through the CLI, exactly as an operator would
        n4 = cluster.nodes[4]
        out = await _cli(["--bootstrap-controller", _bootstrap_text(cluster, [1, 2, 3]),
                          "--command-config", str(n4.config_path), "add-controller"])
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"Added controller 4 with directory id {n4.directory_id}")
        n5 = cluster.nodes[5]
        await _retry("add 5", lambda: add_voter(_bootstrap(cluster, [1, 2, 3]), 5, n5.directory_id,
                                                [("CONTROLLER", n5.host, n5.port)]))
        voters = await _voters(cluster, [1, 2, 3])
        assert sorted(voters) == [1, 2, 3, 4, 5]
        # remove two of the original voters (possibly the leader: it resigns once committed)
        for victim in (1, 2):
            node = cluster.nodes[victim]
            if victim == 1:
                out = await _cli(
                    ["--bootstrap-controller", f"{cluster.nodes[3].host}:{cluster.nodes[3].port}",
                     "remove-controller", "--controller-id", "1", "--controller-directory-id",
                     str(node.directory_id)])
                assert out.returncode == 0, out.stderr
                assert "Removed  KRaft controller 1" in out.stdout
            else:
                await _retry("remove 2", lambda n=node: remove_voter(  # type: ignore[misc]
                    _bootstrap(cluster, [3, 4, 5]), 2, n.directory_id))
        voters = await _voters(cluster, [3, 4, 5])
        assert sorted(voters) == [3, 4, 5]
        await asyncio.sleep(1.0)
    finally:
        workload.stop()
        await runner
    await _final_reads(cluster, workload)
    result = check_history(workload.history.ops)
    assert result.ok, (result.detail, result.bad_ops[:20])
    assert workload.stats.ok > 0
    leader = await asyncio.to_thread(cluster.wait_for_leader, 30, None, [3, 4, 5])
    assert leader in (3, 4, 5)


@pytest.mark.slow
async def test_wiped_voter_rejoins_by_auto_join_and_its_stale_key_is_removed(
    clusters: Callable[..., LocalCluster],
) -> None:
    cluster = clusters(3, properties={"controller.quorum.auto.join.enable": "true"})
    await asyncio.to_thread(cluster.start_all)
    leader = await asyncio.to_thread(cluster.wait_for_leader, 60)
    acked = {}
    for i in range(30):
        r = await asyncio.to_thread(cluster.put, f"k{i}", f"v{i}".encode())
        assert r.status == 200
        acked[f"k{i}"] = f"v{i}".encode()
    victim = next(n for n in cluster.nodes if n != leader)
    old_dir = str(cluster.nodes[victim].directory_id)
    await asyncio.to_thread(cluster.kill, victim, signal.SIGKILL)
    await asyncio.to_thread(cluster.wipe, victim)
    await asyncio.to_thread(cluster.format, victim, join_later=True)
    new_dir = str(cluster.nodes[victim].directory_id)
    assert new_dir != old_dir
    await asyncio.to_thread(cluster.start, victim)
    others = [n for n in cluster.nodes if n != victim]
    deadline = time.monotonic() + 90
    voters: dict[int, str | None] = {}
    while time.monotonic() < deadline:
        try:
            voters = await _voters(cluster, others)
        except (AdminError, OSError, TimeoutError):
            voters = {}
        if voters.get(victim) == new_dir:
            break
        await asyncio.sleep(0.3)
    assert voters.get(victim) == new_dir, voters
    assert len(voters) == 3 and old_dir not in voters.values()
    log_text = cluster.nodes[victim].log_path.read_text()
    assert "event=node_started" in log_text
    await asyncio.to_thread(cluster.wait_ready, victim, 60)
    for key, value in acked.items():
        r = http_call(cluster.nodes[victim].http, "GET", f"/v1/kv/{key}?stale=true")
        assert (r.status, r.body) == (200, value)
        assert (await asyncio.to_thread(cluster.get, key)).body == value
