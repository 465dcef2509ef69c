"""kraft.admin.QuorumClient against real `kraft run` processes: describe, add an observer as
a voter, remove it, the already-done answers a reconciler relies on, a node that is down,
and the kraft.version upgrade of a static quorum."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from kraft.admin import AdminConnectionError, AdminError, Endpoint, QuorumClient, QuorumInfo
from kraft.cli.local import LocalCluster
from kraft.protocol.uuid import Uuid

T = TypeVar("T")


async def _until(what: str, call: Callable[[], Awaitable[T]], timeout: float = 60) -> T:
    """Repeat `call` while it fails with a retriable AdminError (another change pending, the
    replica still catching up, a leader election), as a reconciler would."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except AdminError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise AssertionError(f"{what}: {exc!r}") from exc
        await asyncio.sleep(0.2)


async def _quorum_where(admin: QuorumClient, test: Callable[[QuorumInfo], bool],
                        timeout: float = 60) -> QuorumInfo:
    deadline = time.monotonic() + timeout
    while True:
        q = await _until("describe", admin.describe_quorum)
        if test(q):
            return q
        assert time.monotonic() < deadline, f"quorum never reached the state: {q}"
        await asyncio.sleep(0.2)


def _addresses(cluster: LocalCluster, ids: list[int]) -> list[str]:
    return [f"{cluster.nodes[i].host}:{cluster.nodes[i].port}" for i in ids]


@pytest.mark.slow
async def test_describe_add_remove_and_the_already_done_answers(
    clusters: Callable[..., LocalCluster],
) -> None:
    cluster = clusters(3, observers=1)
    for nid in (1, 2, 3):
        await asyncio.to_thread(cluster.format, nid)
    await asyncio.to_thread(cluster.format, 4, join_later=True)
    for nid in cluster.nodes:
        await asyncio.to_thread(cluster.start, nid)
    await asyncio.to_thread(cluster.wait_for_leader, 60)
    await asyncio.to_thread(cluster.wait_ready, 4, 60)
    n4 = cluster.nodes[4]
    dir4 = str(n4.directory_id)

    async with QuorumClient(_addresses(cluster, [1, 2, 3]), timeout_s=5,
                            cluster_id=cluster.cluster_id) as admin:
        info = await _until("describe cluster", admin.describe_cluster)
        assert info.cluster_id == cluster.cluster_id
        assert sorted(c.node_id for c in info.controllers) == [1, 2, 3]

        q = await _quorum_where(admin, lambda q: q.observer(4) is not None)
        assert q.cluster_id == cluster.cluster_id
        assert q.leader_id in (1, 2, 3) and q.leader_epoch >= 1 and q.high_watermark > 0
        assert q.kraft_version == 1
        assert {r.replica_id: r.directory_id for r in q.voters} == {
            i: str(cluster.nodes[i].directory_id) for i in (1, 2, 3)}
        for r in q.voters:
            node = cluster.nodes[r.replica_id]
            assert r.endpoints == [Endpoint(listener="CONTROLLER", host=node.host,
                                            port=node.port)]
            assert r.lag >= 0 and r.log_end_offset >= 0
        leader_row = q.voter(q.leader_id)
        assert leader_row is not None and leader_row.lag == 0 and leader_row.caught_up
        observer = q.observer(4)
        assert observer is not None and observer.directory_id == dir4
        assert observer.last_fetch_timestamp_ms is not None

        # concurrent calls on one client share its connections
        together = await asyncio.gather(*(admin.describe_quorum() for _ in range(5)))
        assert {t.leader_id for t in together} == {q.leader_id}

        health = await admin.node_health(cluster.nodes[q.leader_id].http)
        assert health.live and health.ready, health
        assert health.leader_id == q.leader_id and health.epoch == q.leader_epoch
        assert health.applied_offset is not None and health.high_watermark is not None

        # the observer becomes a voter (REQUEST_TIMED_OUT, retriable, until it caught up)
        endpoints = [Endpoint(listener="CONTROLLER", host=n4.host, port=n4.port)]
        await _until("add 4", lambda: admin.add_voter(4, dir4, endpoints))
        q = await admin.describe_quorum()
        assert q.has_voter(4, dir4) and q.observer(4) is None

        # the same add again (as after a lost answer): DUPLICATE_VOTER, and the goal is met
        with pytest.raises(AdminError) as again:
            await admin.add_voter(4, dir4, endpoints)
        assert (again.value.name, again.value.code) == ("DUPLICATE_VOTER", 126)
        assert again.value.already_done and not again.value.retriable

        # voter id 4 under another directory id: DUPLICATE_VOTER that is NOT done
        with pytest.raises(AdminError) as other:
            await admin.add_voter(4, str(Uuid.random()), endpoints)
        assert other.value.name == "DUPLICATE_VOTER"
        assert not other.value.already_done and not other.value.retriable
        assert "another directory id" in other.value.message

        # UpdateRaftVoter with the voter's own endpoints and range is accepted
        await _until("update 4", lambda: admin.update_voter(4, dir4, endpoints))

        await _until("remove 4", lambda: admin.remove_voter(4, dir4))
        q = await _quorum_where(admin, lambda q: not q.has_voter(4, dir4))
        assert sorted(r.replica_id for r in q.voters) == [1, 2, 3]

        with pytest.raises(AdminError) as gone:
            await admin.remove_voter(4, dir4)
        assert (gone.value.name, gone.value.code) == ("VOTER_NOT_FOUND", 127)
        assert gone.value.already_done and not gone.value.retriable

    # a client pinned to another cluster id refuses this quorum
    async with QuorumClient(_addresses(cluster, [1]), cluster_id=str(Uuid.random())) as wrong:
        with pytest.raises(AdminError) as mismatch:
            await wrong.describe_quorum()
    assert mismatch.value.name == "INCONSISTENT_CLUSTER_ID" and not mismatch.value.retriable


@pytest.mark.slow
async def test_a_node_that_is_down(clusters: Callable[..., LocalCluster]) -> None:
    cluster = clusters(3)
    await asyncio.to_thread(cluster.start_all)
    await asyncio.to_thread(cluster.wait_for_leader, 60)
    await asyncio.to_thread(cluster.kill, 1, signal.SIGKILL)
    await asyncio.to_thread(cluster.wait_for_leader, 60, 1, [2, 3])

    # the dead first bootstrap controller is skipped
    async with QuorumClient(_addresses(cluster, [1, 2, 3]), timeout_s=3) as admin:
        q = await _until("describe", admin.describe_quorum)
        assert q.leader_id in (2, 3)
        assert sorted(r.replica_id for r in q.voters) == [1, 2, 3]
        health = await admin.node_health(cluster.nodes[1].http)
        assert not health.live and not health.ready
        assert "unreachable" in health.reason and health.leader_id is None
        assert (await admin.node_health(cluster.nodes[2].http)).live

    # only the dead one: no answer at all, a retriable connection error naming the address
    async with QuorumClient(_addresses(cluster, [1]), timeout_s=3) as lone:
        with pytest.raises(AdminConnectionError) as down:
            await lone.describe_quorum()
    err = down.value
    assert err.retriable and not err.already_done and not err.timed_out
    assert err.name == "NETWORK_EXCEPTION"
    assert err.addresses == tuple(_addresses(cluster, [1]))
    assert _addresses(cluster, [1])[0] in err.message

    # back again: a client's kept connection to a node that restarted is replaced
    await asyncio.to_thread(cluster.start, 1)
    await asyncio.to_thread(cluster.wait_ready, 1, 60)
    async with QuorumClient(_addresses(cluster, [1]), timeout_s=3) as pinned:
        before = await _until("describe cluster", pinned.describe_cluster)
        await asyncio.to_thread(cluster.kill, 1, signal.SIGTERM)
        await asyncio.to_thread(cluster.start, 1)
        await asyncio.to_thread(cluster.wait_ready, 1, 60)
        after = await pinned.describe_cluster()
        assert after.cluster_id == before.cluster_id
        assert (await pinned.node_health(cluster.nodes[1].http)).ready


@pytest.mark.slow
async def test_upgrade_a_static_quorum_to_kraft_version_1(
    clusters: Callable[..., LocalCluster],
) -> None:
    cluster = clusters(3, static=True)
    await asyncio.to_thread(cluster.start_all)
    await asyncio.to_thread(cluster.wait_for_leader, 60)
    async with QuorumClient(_addresses(cluster, [1, 2, 3])) as admin:
        q = await _until("describe", admin.describe_quorum)
        assert q.kraft_version == 0
        await _until("validate", lambda: admin.update_features(kraft_version=1,
                                                               validate_only=True))
        assert (await admin.describe_quorum()).kraft_version == 0
        await _until("upgrade", lambda: admin.update_features(kraft_version=1))
        q = await _quorum_where(admin, lambda q: q.kraft_version == 1)
        assert all(r.directory_id != "AAAAAAAAAAAAAAAAAAAAAA" for r in q.voters)
        # asking for the level it has is a success; a downgrade is refused for good
        await admin.update_features(kraft_version=1)
        with pytest.raises(AdminError) as down:
            await admin.update_features(kraft_version=0)
        assert down.value.name == "INVALID_UPDATE_VERSION" and not down.value.retriable
