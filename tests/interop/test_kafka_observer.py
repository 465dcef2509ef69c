"""A kraft node as an observer of a quorum of three Apache Kafka 4.4 controllers.

Kafka's active QuorumController writes on its own (a NoOpRecord every 100 ms, KIP-835), its
controllers snapshot every 2 KiB of records and move their log start past the snapshot
(`metadata.max.retention.*` small), so the kraft observer, started once the log has moved on,
must install Kafka's snapshot through FetchSnapshot and then replicate the log that Kafka's
controller writes. One quorum serves the module; the tests only read it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft.cli.local import http_call
from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.server.transport import PeerNetwork
from kraft.storage.layout import parse_snapshot_file_name, partition_dir
from tests.support.kafka import NEWEST, kafka_dist
from tests.support.mixed import MixedQuorum, batches_of

pytestmark = pytest.mark.xdist_group("kafka-interop")

OBSERVER = 4
KAFKA_SNAPSHOTS = {
    "metadata.max.idle.interval.ms": "100",
    "metadata.log.max.record.bytes.between.snapshots": "2048",
    "internal.metadata.log.segment.bytes": "4096",
    "metadata.max.retention.bytes": "1",
    "metadata.max.retention.ms": "1",
    "internal.metadata.delete.delay.millis": "100",
}


def _snapshots(metadata_dir: Path) -> dict[str, bytes]:
    """name -> bytes of every snapshot other than the bootstrap (0, 0) one."""
    pdir = partition_dir(metadata_dir)
    return {p.name: p.read_bytes() for p in sorted(pdir.glob("*.checkpoint"))
            if (sid := parse_snapshot_file_name(p.name)) and sid.end_offset > 0}


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MixedQuorum]:
    mq = MixedQuorum(tmp_path_factory.mktemp("kafka-observer"), kafka_dist(NEWEST), voters=3,
                     observers=1, kafka_ids={1, 2, 3}, address_prefix="127.41.11.",
                     kafka_properties=KAFKA_SNAPSHOTS)
    try:
        mq.format_all()
        for nid in (1, 2, 3):
            mq.start(nid)
        for nid in (1, 2, 3):
            mq.wait_listening(nid)
        info = mq.wait_for_leader(timeout=90)
        # past Kafka's second snapshot: the log start has moved, a new observer needs one
        deadline = time.monotonic() + 90
        while len(_snapshots(mq.nodes[info.leader_id].dir)) < 2:
            assert time.monotonic() < deadline, mq.log_tail(info.leader_id)
            time.sleep(0.2)
        mq.start(OBSERVER)
        mq.wait_listening(OBSERVER)
        yield mq
    finally:
        mq.close()


def _observer_caught_up(mq: MixedQuorum, timeout: float = 60.0) -> dict[str, object]:
    """The observer's status once it applied past the leader's high watermark of now."""
    target = mq.wait_for_leader(timeout=30).high_watermark
    deadline = time.monotonic() + timeout
    while True:
        status = mq.cluster.status(OBSERVER)
        if status is not None and status["applied_offset"] >= target:
            return status
        assert mq.alive(OBSERVER), mq.log_tail(OBSERVER)
        assert time.monotonic() < deadline, (status, target, mq.log_tail(OBSERVER))
        time.sleep(0.2)


def test_observer_installs_kafkas_snapshot_and_replicates(quorum: MixedQuorum) -> None:
    status = _observer_caught_up(quorum)
    assert status["role"] == "follower" and status["is_voter"] is False
    assert status["leader_id"] in (1, 2, 3)
    assert sorted(v["id"] for v in status["voters"]) == [1, 2, 3]
    log_start = status["log_start_offset"]
    assert isinstance(log_start, int) and log_start > 0  # started from Kafka's snapshot
    ours = _snapshots(quorum.nodes[OBSERVER].dir)
    installed = [name for name in ours
                 if (sid := parse_snapshot_file_name(name)) and sid.end_offset == log_start]
    assert installed, sorted(ours)
    # the installed snapshot is, byte for byte, the file of the Kafka controller it came from
    # (each Kafka controller writes its own snapshots: the same records, other batch
    # timestamps, so the three files of one snapshot id differ)
    theirs = {nid: _snapshots(quorum.nodes[nid].dir) for nid in (1, 2, 3)}
    for name in installed:
        assert any(snaps.get(name) == ours[name] for snaps in theirs.values()), name
    # every record it applied was Kafka's, none a KV command
    assert isinstance(status["kafka_metadata_records"], int)
    assert status["kafka_metadata_records"] > 0


def test_observer_shows_in_kafkas_describe_quorum(quorum: MixedQuorum) -> None:
    """Kafka's leader answers DescribeQuorum (the RPC behind kafka-metadata-quorum describe
    --replication) with the kraft node as an observer, under its directory id, caught up."""
    _observer_caught_up(quorum)
    info = quorum.describe()
    assert info is not None and info.leader_id in (1, 2, 3)
    assert sorted(v.replica_id for v in info.voters) == [1, 2, 3]
    observers = {o.replica_id: o for o in info.observers}
    assert list(observers) == [OBSERVER], info
    assert observers[OBSERVER].directory_id == str(quorum.nodes[OBSERVER].directory_id)
    assert observers[OBSERVER].log_end_offset > 0
    assert observers[OBSERVER].last_fetch_timestamp_ms is not None


def test_observer_log_equals_kafkas_batch_for_batch(quorum: MixedQuorum) -> None:
    # Kafka's leader writes a batch at least every metadata.max.idle.interval.ms (500 ms):
    # wait until the observer holds a dozen past its snapshot, however slow the machine
    deadline = time.monotonic() + 120
    while True:
        status = _observer_caught_up(quorum)
        hw = status["high_watermark"]
        assert isinstance(hw, int)
        ours = {b: data for b, data in batches_of(quorum.nodes[OBSERVER].dir).items()
                if b < hw}
        if len(ours) > 10:
            break
        assert time.monotonic() < deadline, (len(ours), status)
        time.sleep(1.0)
    compared = 0
    for nid in (1, 2, 3):
        theirs = batches_of(quorum.nodes[nid].dir)
        for base, data in ours.items():
            if base in theirs:
                assert theirs[base] == data, (nid, base)
                compared += 1
    assert compared >= len(ours)  # each of ours is on some Kafka replica, the same bytes


def test_kafka_records_are_ignored_and_kv_calls_refused(quorum: MixedQuorum) -> None:
    """The KV state machine took none of Kafka's records as KV commands, and the node
    writes no KV record into a Kafka controller quorum: 409, with the reason."""
    _observer_caught_up(quorum)
    node = quorum.nodes[OBSERVER]
    put = http_call(node.http, "PUT", "/v1/kv/k", b"v")
    assert put.status == 409, put.body
    assert b"Apache Kafka metadata records" in put.body
    get = http_call(node.http, "GET", "/v1/kv/k")
    assert get.status == 409, get.body
    stale = http_call(node.http, "GET", "/v1/kv/k?stale=true")
    assert stale.status == 404
    status = quorum.cluster.status(OBSERVER)
    assert status is not None and status["role"] == "follower"
    # no snapshot of its own: every snapshot it holds is one it installed from Kafka
    theirs = {name for nid in (1, 2, 3) for name in _snapshots(quorum.nodes[nid].dir)}
    assert set(_snapshots(node.dir)) <= theirs


def test_observer_truncates_the_tail_a_deposed_kafka_leader_lost(quorum: MixedQuorum) -> None:
    """Truncation on divergence (KIP-595's DivergingEpoch): with both Kafka followers stopped,
    Kafka's leader keeps appending NoOpRecords that only the kraft observer fetches; the
    leader is killed, the followers elect a new leader whose epoch starts below the
    observer's log end, and the observer cuts the lost tail and then holds the new leader's
    batches byte for byte."""
    _observer_caught_up(quorum)
    info = quorum.wait_for_leader()
    old = info.leader_id
    followers = [n for n in (1, 2, 3) if n != old]
    log_path = quorum.nodes[OBSERVER].log_path
    seen = len(log_path.read_text(errors="replace"))
    for nid in followers:
        quorum.send(nid, signal.SIGSTOP)
    try:
        start = info.high_watermark
        deadline = time.monotonic() + 30
        while True:  # the observer holds records no voter but the leader has
            status = quorum.cluster.status(OBSERVER)
            if status is not None and status["log_end_offset"] >= start + 5:
                break
            assert time.monotonic() < deadline, (status, start)
            time.sleep(0.05)
        quorum.kill(old)  # its unacknowledged tail goes with it
    finally:
        for nid in followers:
            quorum.send(nid, signal.SIGCONT)
    tail_end = status["log_end_offset"]
    new = quorum.wait_for_leader(timeout=90, exclude=old, min_epoch=info.leader_epoch + 1)
    quorum.start(old)
    quorum.wait_listening(old)
    status = _observer_caught_up(quorum)
    assert status["epoch"] >= new.leader_epoch
    truncations = [line for line in log_path.read_text(errors="replace")[seen:].splitlines()
                   if "event=log_truncated " in line]
    assert truncations, quorum.log_tail(OBSERVER)
    # what it kept and fetched since is the new leader's log, batch for batch
    hw = status["high_watermark"]
    assert isinstance(hw, int) and isinstance(tail_end, int)
    ours = {b: d for b, d in batches_of(quorum.nodes[OBSERVER].dir).items() if b < hw}
    theirs = batches_of(quorum.nodes[new.leader_id].dir)
    common = [b for b in ours if b in theirs]
    assert any(b >= start for b in common), (start, tail_end, hw)
    for base in common:
        assert ours[base] == theirs[base], base


def _voter_ids(mq: MixedQuorum, want: list[int], timeout: float = 60.0) -> list[int]:
    """Until the Kafka leader's DescribeQuorum lists `want` as the voters."""
    deadline = time.monotonic() + timeout
    while True:
        info = mq.describe(among=[1, 2, 3])
        ids = sorted(v.replica_id for v in info.voters) if info is not None else []
        if ids == want:
            return ids
        assert time.monotonic() < deadline, (ids, want, mq.log_tail(OBSERVER))
        time.sleep(0.2)


def test_kafkas_tool_adds_the_kraft_node_as_a_voter_and_removes_it(quorum: MixedQuorum,
                                                                    tmp_path: Path) -> None:
    """KIP-853 across implementations: kafka-metadata-quorum add-controller (AddRaftVoter to
    Kafka's leader, which checks the kraft node's ApiVersions and catch-up) and
    remove-controller."""
    _observer_caught_up(quorum)
    node = quorum.nodes[OBSERVER]
    added = quorum.dist.tool("metadata-quorum", "--bootstrap-controller", quorum.bootstrap,
                             "--command-config", str(node.config_path), "add-controller",
                             logs_dir=tmp_path).stdout
    assert f"Added controller {OBSERVER} with directory id {node.directory_id}" in added
    _voter_ids(quorum, [1, 2, 3, OBSERVER])
    status = quorum.cluster.status(OBSERVER)
    assert status is not None and status["is_voter"] is True
    removed = quorum.dist.tool("metadata-quorum", "--bootstrap-controller", quorum.bootstrap,
                               "remove-controller", "--controller-id", str(OBSERVER),
                               "--controller-directory-id", str(node.directory_id),
                               logs_dir=tmp_path).stdout
    assert f"KRaft controller {OBSERVER} with directory id {node.directory_id}" in removed
    _voter_ids(quorum, [1, 2, 3])


def test_kraft_node_auto_joins_a_kafka_quorum(quorum: MixedQuorum) -> None:
    """controller.quorum.auto.join.enable (Kafka 4.2+): restarted with it, the kraft observer
    adds itself through Kafka's leader (AddRaftVoter v1, KIP-1186). Last: it stays a voter."""
    quorum.kill(OBSERVER)
    quorum.nodes[OBSERVER].overrides["controller.quorum.auto.join.enable"] = "true"
    quorum.start(OBSERVER)
    quorum.wait_listening(OBSERVER)
    _voter_ids(quorum, [1, 2, 3, OBSERVER])
    status = _observer_caught_up(quorum)
    assert status["is_voter"] is True


async def test_a_nodes_own_connection_tells_a_kafka_controller_from_a_kraft_node(
        quorum: MixedQuorum) -> None:
    """What a kraft node learns of each voter when it dials it (before it asks for a vote, so
    before it could lead a new mixed quorum): Kafka's controllers announce BrokerRegistration
    and BrokerHeartbeat in ApiVersions, a kraft node neither; `Peers` marks the former as
    Kafka's, and KV calls are refused from then on."""
    seen: dict[int, bool] = {}
    network = PeerNetwork("raft-client-test",
                          on_open=lambda dest, v: seen.__setitem__(dest, v.kafka_controller))
    try:
        for nid, node in quorum.nodes.items():
            await network.request(nid, (node.host, node.port), ApiKey.API_VERSIONS,
                                  lambda _v: w.ApiVersionsRequestData(), 10.0)
    finally:
        network.close()
    assert seen == {1: True, 2: True, 3: True, OBSERVER: False}
