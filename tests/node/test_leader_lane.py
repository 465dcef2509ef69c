"""`kraft.lane.leader` on a real 3-voter quorum: the leader hands the binary client's
connection, its voters' fetch connections and the active segment to the native lane
(`kraft.lane.leader`), which batches, writes, replicates, syncs and answers the PUTs at
their commit; the core takes its reports; reads, other writers, a killed leader and a clean
stop hand everything back, and every replica ends with the leader's bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from kraft.admin.kv_client import KvClient, NotLeader, OutcomeUnknown
from kraft.cli.local import LocalCluster
from kraft.lane import native
from tests.support.lanes import applied_everywhere, lane_stats, local_value, log_bytes

pytestmark = pytest.mark.skipif(native() is None,
                                reason="kraft.lane._native was not built (no C compiler)")

LANE = {"kraft.lane.leader": "true"}


def _ready(clusters: Callable[..., LocalCluster], **props: str) -> tuple[LocalCluster, int]:
    c = clusters(properties={**LANE, **props})
    c.start_all()
    leader = c.wait_for_leader(60)
    for nid in c.nodes:
        c.wait_ready(nid, 60)
    return c, leader


def _clean_logs(c: LocalCluster) -> None:
    for nid, node in c.nodes.items():
        assert node.process is not None and node.process.returncode == 0, nid
        text = node.log_path.read_text()
        assert "event=fatal" not in text and "Traceback" not in text, nid


@pytest.mark.parametrize("preallocate", [0, 64 * 1024])
def test_the_leaders_lane_carries_the_writes_and_every_log_is_the_leaders(
        clusters: Callable[..., LocalCluster], preallocate: int) -> None:
    c, leader = _ready(clusters, **{"kraft.log.preallocate.bytes": str(preallocate)})

    async def writes() -> list[int]:
        async with KvClient(*c.nodes[leader].client) as client:
            offsets = [await client.put(f"k{i}", b"v%d" % i) for i in range(200)]
            # pipelined: many PUTs in one loop turn, one batch, and more than one turn takes
            # (512) with nothing more to come until they are answered
            offsets += await client.put_many((f"p{i}", b"w%d" % i) for i in range(300))
            offsets += await client.put_many((f"q{i}", b"u%d" % i) for i in range(1500))
            return offsets

    offsets = asyncio.run(writes())
    assert offsets == sorted(offsets) and len(set(offsets)) == 2000
    lane = lane_stats(c, leader, "leader_lane")
    assert lane["arms"] >= 1 and lane["reports"] >= 5, lane
    applied_everywhere(c, "q1499", b"u1499")
    for nid in c.nodes:
        for i in range(0, 200, 7):
            assert local_value(c, nid, f"k{i}") == b"v%d" % i, (nid, i)
    status = c.status(leader)
    assert status is not None
    end = status["high_watermark"]
    c.stop_all(timeout=20)  # a clean stop ends the lane and keeps what it wrote
    logs = {nid: log_bytes(node.dir, end) for nid, node in c.nodes.items()}
    start, leader_log = logs[leader]
    assert leader_log.count(b"v199") == 1 and leader_log.count(b"w299") == 1
    assert leader_log.count(b"u1499") == 1
    for nid in c.nodes:
        assert logs[nid] == (start, leader_log), f"node {nid}'s log differs from the leader's"
    _clean_logs(c)


def test_reads_and_other_writers_see_every_answered_write(
        clusters: Callable[..., LocalCluster]) -> None:
    c, leader = _ready(clusters)

    async def scenario() -> None:
        async with KvClient(*c.nodes[leader].client) as client:
            for i in range(60):
                await client.put(f"r{i}", b"x%d" % i)
                if i % 3 == 0:  # a linearizable read: the lane hands over to the core
                    assert await client.get(f"r{i}") == b"x%d" % i
                elif i % 3 == 1:  # a local read on the leader: it drains the lane first
                    assert await client.get(f"r{i}", stale=True) == b"x%d" % i
                else:  # another writer (HTTP): its write goes after the lane's
                    assert c.put(f"h{i}", b"y").status in (200, 204)
                    assert local_value(c, leader, f"r{i}") == b"x%d" % i

    asyncio.run(scenario())
    lane = lane_stats(c, leader, "leader_lane")
    assert lane["arms"] >= 20 and lane["stops"], lane
    c.stop_all(timeout=20)
    _clean_logs(c)


def test_every_write_the_lane_answered_survives_the_leaders_kill(
        clusters: Callable[..., LocalCluster]) -> None:
    c, leader = _ready(clusters)
    answered: list[str] = []

    async def writes() -> None:
        async with KvClient(*c.nodes[leader].client) as client:
            for i in range(100_000):
                try:
                    await client.put(f"s{i}", b"z%d" % i)
                except (NotLeader, OutcomeUnknown, ConnectionError, OSError):
                    return
                answered.append(f"s{i}")
                if i == 150:
                    c.kill(leader)  # kill -9 mid-stream

    asyncio.run(writes())
    assert len(answered) >= 150
    new = c.wait_for_leader(60, exclude=leader)
    for key in answered:
        r = c.get(key, via=new)
        assert r.status == 200 and r.body == b"z" + key[1:].encode(), key
