"""KIP-853 the other way: `kraft.admin.QuorumClient` (the operator's client) adds an Apache
Kafka 4.4 controller to a quorum of three kraft voters and removes it again.

The Kafka controller is formatted with --no-initial-controllers, follows the kraft leader as an
observer, becomes a voter through AddRaftVoter and replicates as one; RemoveRaftVoter makes it
an observer again. The quorum holds no KV record: Kafka's QuorumController replays every record
of the log, and KV commands are none of its record types (docs/node.md, "A quorum with Kafka
controllers").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from kraft.admin import QuorumClient
from kraft.admin.models import Endpoint
from kraft.cli.local import http_call
from tests.support.kafka import NEWEST, kafka_dist
from tests.support.mixed import MixedQuorum

pytestmark = pytest.mark.xdist_group("kafka-mixed")

KAFKA = 4


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MixedQuorum]:
    mq = MixedQuorum(tmp_path_factory.mktemp("kafka-joins"), kafka_dist(NEWEST), voters=3,
                     observers=1, kafka_ids={KAFKA}, address_prefix="127.41.15.")
    try:
        mq.start_all()
        mq.wait_for_leader(timeout=90)
        yield mq
    finally:
        mq.close()


def _voters(mq: MixedQuorum, want: list[int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        info = mq.describe(among=[1, 2, 3])
        ids = sorted(v.replica_id for v in info.voters) if info is not None else []
        if ids == want:
            return
        assert time.monotonic() < deadline, (ids, want, mq.log_tail(KAFKA))
        time.sleep(0.2)


def test_quorum_client_adds_and_removes_a_kafka_controller(quorum: MixedQuorum) -> None:
    info = quorum.wait_for_leader()
    assert not quorum.is_kafka(info.leader_id)  # kraft-led: Kafka's node is an observer
    deadline = time.monotonic() + 60
    while not any(o.replica_id == KAFKA and o.log_end_offset > 0 and o.caught_up
                  for o in info.observers):  # AddRaftVoter takes a caught-up observer
        assert time.monotonic() < deadline, (info, quorum.log_tail(KAFKA))
        time.sleep(0.2)
        info = quorum.wait_for_leader()
    kafka = quorum.nodes[KAFKA]

    async def add() -> None:
        async with QuorumClient(quorum.bootstrap, cluster_id=quorum.cluster_id) as client:
            await client.add_voter(KAFKA, kafka.directory_id, [
                Endpoint(listener="CONTROLLER", host=kafka.host, port=kafka.port)])

    asyncio.run(add())
    _voters(quorum, [1, 2, 3, KAFKA])
    # the Kafka voter replicates from the kraft leader, and the kraft nodes now refuse KV
    # calls: a voter fetched as Kafka's client software
    deadline = time.monotonic() + 60
    while True:
        info = quorum.wait_for_leader()
        row = next(v for v in info.voters if v.replica_id == KAFKA)
        if row.log_end_offset >= info.high_watermark and row.last_fetch_timestamp_ms:
            break
        assert time.monotonic() < deadline, info
        time.sleep(0.2)
    leader = quorum.nodes[info.leader_id]
    put = http_call(leader.http, "PUT", "/v1/kv/k", b"v")
    assert put.status == 409, put.body
    assert f"voter {KAFKA} is Apache Kafka".encode() in put.body

    async def remove() -> None:
        async with QuorumClient(quorum.bootstrap, cluster_id=quorum.cluster_id) as client:
            await client.remove_voter(KAFKA, kafka.directory_id)

    asyncio.run(remove())
    _voters(quorum, [1, 2, 3])
    assert quorum.alive(KAFKA), quorum.log_tail(KAFKA)
