"""Mixed voters: Apache Kafka 4.4 controllers and kraft nodes in one quorum (2 Kafka + 1 kraft,
and 1 Kafka + 2 kraft).

Leadership moves both ways under kill -9 of the leader (pre-votes and votes across the two
implementations, BeginQuorumEpoch of the new leader followed by both kinds), Kafka followers
replicate from a kraft leader, the high watermark the leaders report never goes back, and at
the end every replica holds the same batches, byte for byte, wherever two of them overlap.
Then faults of either kind (kill -9, SIGTERM, whose leader resigns with EndQuorumEpoch, and
SIGSTOP) while Kafka's active controller writes
(a NoOpRecord every 100 ms, KIP-835): `KRAFT_INTEROP_SOAK_S` seconds of them (8 by default;
`make soak-nodes` runs minutes). `KRAFT_INTEROP_MIXED` names the compositions
(`kafka1-kraft2` by default, `kafka2-kraft1,kafka1-kraft2` in `make soak-nodes`) and
`KRAFT_INTEROP_KAFKA` the Kafka version (4.4.0 by default; `make soak-nodes` also runs 4.1.2).

A kraft node in such a quorum holds Kafka's metadata records byte for byte, takes none of them
as KV commands and refuses every KV call with 409 (docs/node.md, "A quorum with Kafka
controllers").
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from kraft.cli.local import http_call
from tests.support.kafka import NEWEST, kafka_dist
from tests.support.mixed import MixedQuorum, batches_of

pytestmark = pytest.mark.xdist_group("kafka-mixed")

SOAK_S = float(os.environ.get("KRAFT_INTEROP_SOAK_S", "8"))
VERSION = os.environ.get("KRAFT_INTEROP_KAFKA", NEWEST)
COMPOSITIONS = ("kafka2-kraft1", "kafka1-kraft2")
MIXED = os.environ.get("KRAFT_INTEROP_MIXED", "kafka1-kraft2").split(",")
"""The compositions to run: one in `make test` (each quorum costs a minute of JVMs), both in
`make soak-nodes`."""
# kraft's followers notice a lost leader sooner than Kafka's: a kraft node then runs the
# pre-vote first, so leadership reaches kraft as often as Kafka
KRAFT_TIMEOUTS = {"controller.quorum.fetch.timeout.ms": "1200",
                  "controller.quorum.election.timeout.ms": "600"}


@dataclass
class Watch:
    """What a sampler thread saw of the quorum: (epoch, leader, high watermark) in order."""

    samples: list[tuple[int, int, int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def _sample(mq: MixedQuorum, watch: Watch) -> None:
    while not watch.stop.wait(0.3):
        info = mq.describe(timeout_s=1.0)
        if info is not None and info.high_watermark >= 0 and info.leader_id >= 0:
            watch.samples.append((info.leader_epoch, info.leader_id, info.high_watermark))


@pytest.fixture(scope="module", params=[c for c in COMPOSITIONS if c in MIXED])
def mixed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[MixedQuorum, Watch]]:
    kafka_ids = {1, 2} if request.param == "kafka2-kraft1" else {1}
    prefix = "127.41.12." if request.param == "kafka2-kraft1" else "127.41.13."
    mq = MixedQuorum(tmp_path_factory.mktemp(request.param), kafka_dist(VERSION), voters=3,
                     kafka_ids=kafka_ids, address_prefix=prefix,
                     kafka_properties={"metadata.max.idle.interval.ms": "100"})
    for nid, node in mq.nodes.items():
        if not mq.is_kafka(nid):
            node.overrides.update(KRAFT_TIMEOUTS)
    watch = Watch()
    sampler = threading.Thread(target=_sample, args=(mq, watch), daemon=True)
    try:
        mq.start_all()
        mq.wait_for_leader(timeout=90)
        sampler.start()
        yield mq, watch
    finally:
        watch.stop.set()
        if sampler.is_alive():
            sampler.join(timeout=10)
        mq.close()


def _restart(mq: MixedQuorum, nid: int) -> None:
    mq.start(nid)
    mq.wait_listening(nid)


def _caught_up(mq: MixedQuorum, timeout: float = 90.0) -> int:
    """Until every voter's log end reaches the leader's high watermark; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        info = mq.wait_for_leader(timeout=max(1.0, deadline - time.monotonic()))
        if len(info.voters) == 3 and all(v.log_end_offset >= info.high_watermark
                                         for v in info.voters):
            return info.high_watermark
        assert time.monotonic() < deadline, info
        time.sleep(0.2)


def _no_divergence(mq: MixedQuorum, hw: int) -> int:
    """Every pair of replicas holds the same bytes for every batch below `hw` both hold;
    returns how many batches were compared."""
    logs = {nid: {b: d for b, d in batches_of(n.dir).items() if b < hw}
            for nid, n in mq.nodes.items()}
    compared = 0
    ids = sorted(logs)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            for base in logs[a].keys() & logs[b].keys():
                assert logs[a][base] == logs[b][base], (a, b, base)
                compared += 1
    return compared


def _hw_never_back(watch: Watch) -> None:
    best = -1
    for epoch, leader, hw in watch.samples:
        assert hw >= best, (epoch, leader, hw, best)
        best = hw


def test_leadership_moves_both_ways_under_kill_9(mixed: tuple[MixedQuorum, Watch]) -> None:
    mq, watch = mixed
    led: dict[str, int] = {"kafka": 0, "kraft": 0}
    info = mq.wait_for_leader()
    for _ in range(8):
        if min(led.values()) >= 1:
            break
        old = info.leader_id
        mq.kill(old)
        info = mq.wait_for_leader(exclude=old, min_epoch=info.leader_epoch + 1)
        led["kafka" if mq.is_kafka(info.leader_id) else "kraft"] += 1
        _restart(mq, old)
        hw = _caught_up(mq)  # the restarted voter (either kind) follows the new leader
        info = mq.wait_for_leader()
        if not mq.is_kafka(info.leader_id):
            # Kafka followers replicate from the kraft leader up to its log end
            kafka_rows = [v for v in info.voters if mq.is_kafka(v.replica_id)]
            assert kafka_rows and all(v.log_end_offset >= hw for v in kafka_rows), info
    assert led["kafka"] >= 1 and led["kraft"] >= 1, led
    for nid in mq.nodes:
        assert mq.alive(nid), mq.log_tail(nid)
    _hw_never_back(watch)


def test_kraft_nodes_keep_kafkas_records_and_refuse_kv(mixed: tuple[MixedQuorum, Watch]
                                                       ) -> None:
    mq, _ = mixed
    hw = _caught_up(mq)
    for nid, node in mq.nodes.items():
        if mq.is_kafka(nid):
            continue
        status = mq.cluster.status(nid)
        assert status is not None and status["applied_offset"] >= 0
        put = http_call(node.http, "PUT", "/v1/kv/k", b"v")
        assert put.status == 409, put.body
        assert b"Apache Kafka" in put.body
    assert _no_divergence(mq, hw) > 0


def test_faults_of_either_kind_leave_no_divergence(mixed: tuple[MixedQuorum, Watch]) -> None:
    """Random kill -9 or SIGTERM (then a restart) and SIGSTOP (then SIGCONT) of one node at a
    time, of either kind, for SOAK_S seconds; then every replica agrees and the watermark never
    went back."""
    mq, watch = mixed
    rng = random.Random(int(os.environ.get("KRAFT_INTEROP_SEED", "55")))
    deadline = time.monotonic() + SOAK_S
    faults = 0
    while time.monotonic() < deadline or faults < 2:
        nid = rng.choice(sorted(mq.nodes))
        roll = rng.random()
        if roll < 0.4:
            mq.kill(nid)
            time.sleep(rng.uniform(0.0, 1.0))
            _restart(mq, nid)
        elif roll < 0.6:
            # a graceful stop: a leader of either kind resigns with EndQuorumEpoch first
            mq.kill(nid, signal.SIGTERM)
            _restart(mq, nid)
        else:
            mq.send(nid, signal.SIGSTOP)
            time.sleep(rng.uniform(0.5, 3.0))
            mq.send(nid, signal.SIGCONT)
        faults += 1
        mq.wait_for_leader(timeout=90)
    hw = _caught_up(mq)
    for nid in mq.nodes:
        assert mq.alive(nid), mq.log_tail(nid)
    assert _no_divergence(mq, hw) > 0
    _hw_never_back(watch)
