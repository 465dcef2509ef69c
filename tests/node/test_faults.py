"""Network faults between real processes through the fault-injecting TCP proxy.

The quorum is static (`controller.quorum.voters`), and every node's voters entry for a peer
points at a proxy dedicated to that direction (node i → node j), so a test can cut, delay or
one-way-drop any link. Client traffic to the admin port is not proxied.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from kraft.cli.local import LocalCluster, http_call
from tests.node.test_failover import _final_reads
from tests.support.kvclient import KVWorkload, http_op, new_session
from tests.support.linearizability import GET, PUT, Op, check_history
from tests.support.proxy import BACKWARD, FaultProxy


class ProxiedQuorum:
    """A static 3-voter LocalCluster whose node-to-node links all go through FaultProxy."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.links: dict[tuple[int, int], FaultProxy] = {}

    async def start(self) -> None:
        ids = list(self.cluster.nodes)
        for i in ids:
            for j in ids:
                if i != j:
                    nj = self.cluster.nodes[j]
                    proxy = FaultProxy(nj.host, nj.port, "127.0.0.1", seed=i * 10 + j)
                    await proxy.start()
                    self.links[(i, j)] = proxy
        for i in ids:
            entries = []
            for j in ids:
                n = self.cluster.nodes[j]
                port = n.port if i == j else self.links[(i, j)].listen_port
                host = n.host if i == j else "127.0.0.1"
                entries.append(f"{j}@{host}:{port}")
            self.cluster.nodes[i].overrides["controller.quorum.voters"] = ",".join(entries)
        await asyncio.to_thread(self.cluster.start_all)

    def isolate(self, node: int) -> None:
        """Cut every link to and from `node`, both ways."""
        for (i, j), proxy in self.links.items():
            if node in (i, j):
                proxy.partition()
                proxy.sever()

    def heal(self) -> None:
        """Remove every fault."""
        for proxy in self.links.values():
            proxy.heal()

    async def stop(self) -> None:
        """Stop the proxies."""
        for proxy in self.links.values():
            await proxy.stop()


@pytest.fixture
async def proxied(clusters: Callable[..., LocalCluster]) -> AsyncIterator[ProxiedQuorum]:
    q = ProxiedQuorum(clusters(3, static=True))
    await q.start()
    try:
        yield q
    finally:
        await q.stop()
        q.cluster.close()


@pytest.mark.slow
async def test_isolated_leader_is_replaced_and_a_stale_read_path_is_caught(
    proxied: ProxiedQuorum,
) -> None:
    cluster = proxied.cluster
    old = await asyncio.to_thread(cluster.wait_for_leader, 60)
    others = [n for n in cluster.nodes if n != old]
    history: list[Op] = []
    call = time.monotonic()
    assert (await asyncio.to_thread(cluster.put, "s", b"old")).status == 200
    history.append(Op(1, PUT, "s", call, time.monotonic(), value=b"old"))
    for nid in others:
        await asyncio.to_thread(cluster.wait_ready, nid, 30)

    proxied.isolate(old)
    new = await asyncio.to_thread(cluster.wait_for_leader, 30, old, others)
    assert new != old
    call = time.monotonic()
    r = await asyncio.to_thread(http_call, cluster.nodes[new].http, "PUT", "/v1/kv/s", b"new")
    assert r.status == 200
    history.append(Op(1, PUT, "s", call, time.monotonic(), value=b"new"))

    async with new_session() as session:
        # the linearizable read path on the isolated old leader never answers with old data
        out = await http_op(session, cluster.nodes[old].http, "GET", "/v1/kv/s", None, 5)
        assert not (out.status == 200 and out.body == b"old"), out
        # the deliberately stale path does, and the checker must catch it
        call = time.monotonic()
        out = await http_op(session, cluster.nodes[old].http, "GET", "/v1/kv/s", None, 5,
                            stale=True)
        assert (out.status, out.body) == (200, b"old")
        stale = Op(2, GET, "s", call, time.monotonic(), output=out.body)
    verdict = check_history([*history, stale])
    assert not verdict.ok and verdict.key == "s"
    assert check_history(history).ok

    proxied.heal()
    await asyncio.to_thread(cluster.wait_ready, old, 60)
    r = await asyncio.to_thread(http_call, cluster.nodes[old].http, "GET", "/v1/kv/s?stale=true")
    assert (r.status, r.body) == (200, b"new")
    st = cluster.status(old)
    assert st is not None and st["role"] == "follower" and st["leader_id"] == new


@pytest.mark.slow
async def test_one_way_loss_delay_and_resets_under_load_stay_linearizable(proxied: ProxiedQuorum) -> None:
    cluster = proxied.cluster
    old = await asyncio.to_thread(cluster.wait_for_leader, 60)
    others = [n for n in cluster.nodes if n != old]
    workload = KVWorkload([n.http for n in cluster.nodes.values()], keys=3, clients=4, seed=3)
    runner = asyncio.ensure_future(workload.run())
    try:
        await asyncio.sleep(1.0)
        # followers' fetches reach the leader, but its answers are lost: the followers elect a
        # new leader while the old one still hears from them
        for j in others:
            proxied.links[(j, old)].blackhole(BACKWARD)
        new = await asyncio.to_thread(cluster.wait_for_leader, 30, old, others)
        assert new != old
        await asyncio.sleep(1.0)
        proxied.heal()
        # then every link is slow
        for proxy in proxied.links.values():
            proxy.delay(0.03)
        await asyncio.sleep(2.0)
        proxied.heal()
        # then connections are reset at random (TCP resets mid-request)
        for proxy in proxied.links.values():
            proxy.drop_connections(0.02)
        await asyncio.sleep(2.0)
        proxied.heal()
        await asyncio.to_thread(cluster.wait_ready, old, 60)
        await asyncio.sleep(0.5)
    finally:
        workload.stop()
        await runner
    await _final_reads(cluster, workload)
    result = check_history(workload.history.ops)
    assert result.ok, (result.detail, result.bad_ops[:20])
    assert workload.stats.ok > 50
