"""Kafka's own tools against a quorum of `kraft run` processes, and `kraft dump` against
Kafka's files: kafka-metadata-quorum describe prints what `kraft quorum` prints, its
add-controller and remove-controller change the voters, kafka-cluster unregister-controller is
refused as by a controller without the api, kafka-dump-log --cluster-metadata-decoder reads
kraft's segments and snapshots batch for batch as `kraft dump` does, and `kraft dump` reads a
Kafka controller's.

One quorum (3 voters and an observer) serves the whole module: every test leaves its voters
as it found them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft.cli.local import LocalCluster, free_port
from kraft.storage.layout import parse_snapshot_file_name, partition_dir
from tests.support.kafka import NEWEST, VERSIONS, KafkaController, kafka_dist

pytestmark = pytest.mark.xdist_group("kafka-interop")


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("kraft-tools"), voters=3, observers=1,
                           address_prefix="127.41.9.",
                           properties={"metadata.log.max.record.bytes.between.snapshots": "4096"})
    try:
        for node in cluster.nodes.values():
            node.overrides["log.dirs"] = str(node.dir)  # Kafka's tools read the node's config
        cluster.start_all()
        leader = cluster.wait_for_leader(timeout=60)
        for i in range(40):  # past the snapshot threshold: every node writes a snapshot
            assert cluster.put(f"k{i}", b"v" * 200, via=leader).status == 200
        for nid in cluster.nodes:
            cluster.wait_ready(nid, timeout=60)
        yield cluster
    finally:
        cluster.close()


def _bootstrap(cluster: LocalCluster) -> str:
    return ",".join(f"{n.host}:{n.port}" for n in cluster.nodes.values()
                    if n.node_id in cluster.initial_voters)


def _kraft_quorum(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "kraft", "quorum", *args], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _fields(status: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, v in
            (line.split(":", 1) for line in status.splitlines() if ":" in line)}


def _rows(replication: str) -> list[list[str]]:
    lines = [line.split("\t") for line in replication.splitlines() if line.strip()]
    header = [h.strip() for h in lines[0]]
    keep = [header.index(c) for c in ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "Status")]
    return [[row[i].strip() for i in keep] for row in lines[1:]]


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_prints_what_kraft_quorum_prints(quorum: LocalCluster, tmp_path: Path,
                                                  version: str) -> None:
    dist = kafka_dist(version)
    bootstrap = _bootstrap(quorum)
    theirs = _fields(dist.tool("metadata-quorum", "--bootstrap-controller", bootstrap,
                               "describe", "--status", logs_dir=tmp_path).stdout)
    ours = _fields(_kraft_quorum("--bootstrap-controller", bootstrap, "describe", "--status"))
    assert list(theirs) == list(ours)  # the same fields in the same order
    for key in ("ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                "CurrentVoters", "CurrentObservers"):
        assert theirs[key] == ours[key], key
    assert theirs["ClusterId"] == quorum.cluster_id

    theirs_rows = _rows(dist.tool("metadata-quorum", "--bootstrap-controller", bootstrap,
                                  "describe", "--replication", logs_dir=tmp_path).stdout)
    ours_rows = _rows(_kraft_quorum("--bootstrap-controller", bootstrap, "describe",
                                    "--replication"))
    assert theirs_rows == ours_rows
    assert sorted(r[4] for r in theirs_rows) == ["Follower", "Follower", "Leader", "Observer"]


def _voter_ids(cluster: LocalCluster) -> list[int]:
    leader = cluster.wait_for_leader(timeout=30)
    status = cluster.status(leader)
    assert status is not None
    return sorted(v["id"] for v in status["voters"])


def _until_voters(cluster: LocalCluster, want: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _voter_ids(cluster) != want:
        assert time.monotonic() < deadline, f"voters {_voter_ids(cluster)}, expected {want}"
        time.sleep(0.1)


@pytest.mark.parametrize("version", VERSIONS)
def test_add_and_remove_controller_change_our_voters(quorum: LocalCluster, tmp_path: Path,
                                                     version: str) -> None:
    dist = kafka_dist(version)
    bootstrap = _bootstrap(quorum)
    spare = quorum.nodes[4]
    assert _voter_ids(quorum) == [1, 2, 3]
    added = dist.tool("metadata-quorum", "--bootstrap-controller", bootstrap,
                      "--command-config", str(spare.config_path), "add-controller",
                      logs_dir=tmp_path).stdout
    assert f"Added controller 4 with directory id {spare.directory_id}" in added
    _until_voters(quorum, [1, 2, 3, 4])
    removed = dist.tool("metadata-quorum", "--bootstrap-controller", bootstrap,
                        "remove-controller", "--controller-id", "4",
                        "--controller-directory-id", str(spare.directory_id),
                        logs_dir=tmp_path).stdout
    # (Kafka 4.1 prints two spaces after "Removed")
    assert re.search(rf"Removed +KRaft controller 4 with directory id {spare.directory_id}",
                     removed), removed
    _until_voters(quorum, [1, 2, 3])


def test_unregister_controller_is_refused_as_without_the_api(quorum: LocalCluster,
                                                             tmp_path: Path) -> None:
    """UnregisterController (api key 94) is Kafka 4.4's; like a Kafka 4.1-4.3 controller, the
    node does not list it in ApiVersions, so Kafka's tool says so and changes nothing."""
    done = kafka_dist(NEWEST).tool("cluster", "unregister-controller", "--bootstrap-controller",
                                   _bootstrap(quorum), "--id", "4", logs_dir=tmp_path)
    assert "does not support the controller unregistration API" in done.stdout
    assert _voter_ids(quorum) == [1, 2, 3]


_KAFKA_BATCH = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*?"
                          r"isControl: (true|false)")
_KRAFT_BATCH = re.compile(r"batch base_offset=(\d+) last_offset=(\d+) .*?records=(\d+) "
                          r"control=(true|false)")


def _kafka_batches(version: str, path: Path, logs: Path) -> list[tuple[str, ...]]:
    out = kafka_dist(version).tool("dump-log", "--cluster-metadata-decoder", "--files",
                                   str(path), logs_dir=logs).stdout
    assert "isvalid: false" not in out and "Exception" not in out, out
    # KV commands are not metadata records: the decoder names them and goes on
    # ("Failed to deserialize record with type 1"); control records it decodes
    assert "KRaftVoters" in out or "SnapshotHeader" in out, out
    return [m.groups() for m in _KAFKA_BATCH.finditer(out)]


def _kraft_batches(path: Path) -> list[tuple[str, ...]]:
    done = subprocess.run([sys.executable, "-m", "kraft", "dump", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [m.groups() for m in _KRAFT_BATCH.finditer(done.stdout)]


def _files(metadata_dir: Path) -> tuple[Path, Path]:
    """The first segment and the newest snapshot other than the bootstrap one."""
    pdir = partition_dir(metadata_dir)
    segment = sorted(pdir.glob("*.log"))[0]
    snaps = sorted((p for p in pdir.glob("*.checkpoint")
                    if (sid := parse_snapshot_file_name(p.name)) and sid.end_offset > 0),
                   key=lambda p: p.name)
    assert snaps, f"no snapshot in {pdir}"
    return segment, snaps[-1]


@pytest.mark.parametrize("version", VERSIONS)
def test_dump_log_reads_our_segments_and_snapshots(quorum: LocalCluster, tmp_path: Path,
                                                   version: str) -> None:
    for path in _files(quorum.nodes[1].dir):
        ours = _kraft_batches(path)
        assert ours, path
        assert _kafka_batches(version, path, tmp_path) == ours, path


@pytest.mark.parametrize("version", VERSIONS)
def test_kraft_dump_reads_kafkas_segments_and_snapshots(tmp_path: Path, version: str) -> None:
    controller = KafkaController(kafka_dist(version), 1, "127.41.9.20",
                                 free_port("127.41.9.20"), tmp_path / "kafka",
                                 properties={"metadata.log.max.snapshot.interval.ms": "500",
                                             "metadata.max.idle.interval.ms": "100"})
    controller.format("3Bt2cGlNRkWB7m2Xl6hJxA", "--standalone")
    controller.start()
    try:
        pdir = partition_dir(controller.dir)
        deadline = time.monotonic() + 60
        while not any((sid := parse_snapshot_file_name(p.name)) and sid.end_offset > 0
                      for p in pdir.glob("*.checkpoint")):
            assert time.monotonic() < deadline, f"Kafka wrote no snapshot\n{controller.server_log()}"
            time.sleep(0.2)
    finally:
        controller.kill()
    for path in _files(controller.dir):
        theirs = _kafka_batches(version, path, tmp_path / "tool")
        assert theirs, path
        assert _kraft_batches(path) == theirs, path
    whole = subprocess.run([sys.executable, "-m", "kraft", "dump", str(controller.dir)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert whole.returncode == 0, whole.stderr
    assert "FeatureLevelRecord" in whole.stdout
