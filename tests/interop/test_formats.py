"""Formats both ways: directories formatted by Kafka's `kafka-storage format` start under
`kraft run`, directories formatted by `kraft format` start under Kafka's controller, and the
two formats agree record by record (meta.properties, the (0, 0) snapshot, the bootstrap
feature levels), for Kafka 4.1 and 4.4.

Every node uses one server.properties for both implementations (`kraft.cli.local` writes it;
Kafka ignores the kraft-only keys with a warning).
"""

from __future__ import annotations

import io
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kraft.cli.local import LocalCluster, free_port
from kraft.config.properties import read_properties
from kraft.protocol.uuid import Uuid
from kraft.records.snapshot_format import SnapshotContents, read_snapshot
from kraft.storage.bootstrap import read_bootstrap_checkpoint
from kraft.storage.format import format_storage
from kraft.storage.layout import BOOTSTRAP_CHECKPOINT, BOOTSTRAP_SNAPSHOT_ID, partition_dir
from kraft.storage.properties import write_properties
from tests.support.kafka import NEWEST, VERSIONS, KafkaController, kafka_dist

pytestmark = pytest.mark.xdist_group("kafka-interop")


def _initial_controllers(cluster: LocalCluster) -> str:
    return ",".join(f"{n.node_id}@{n.host}:{n.port}:{n.directory_id}"
                    for n in (cluster.nodes[i] for i in cluster.initial_voters))


def _kafka_format(version: str, config: Path, cluster_id: str, *args: str) -> str:
    done = kafka_dist(version).tool("storage", "format", "-t", cluster_id, "-c", str(config),
                                    *args, logs_dir=config.parent / "kafka-logs")
    return done.stdout


def _bootstrap_snapshot(metadata_dir: Path) -> SnapshotContents:
    path = partition_dir(metadata_dir) / BOOTSTRAP_SNAPSHOT_ID.file_name()
    return read_snapshot(path.read_bytes())


def _bootstrap_features(metadata_dir: Path) -> dict[str, int]:
    """Feature levels the format seeded, wherever it put them: bootstrap.checkpoint (kraft,
    Kafka 4.1) or the (0, 0) snapshot (Kafka 4.4)."""
    path = metadata_dir / BOOTSTRAP_CHECKPOINT
    if not path.exists():
        path = partition_dir(metadata_dir) / BOOTSTRAP_SNAPSHOT_ID.file_name()
    return {r.name: r.feature_level for r in read_bootstrap_checkpoint(path)}


def _meta(metadata_dir: Path) -> dict[str, str]:
    return read_properties(metadata_dir / "meta.properties")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("mode", ["standalone", "initial-controllers", "no-initial-controllers"])
def test_kafka_formatted_directories_start_under_kraft_run(tmp_path: Path, version: str,
                                                           mode: str) -> None:
    voters = 1 if mode != "initial-controllers" else 3
    observers = 1 if mode == "no-initial-controllers" else 0
    cluster = LocalCluster(tmp_path, voters=voters, observers=observers,
                           address_prefix="127.41.5.")
    try:
        for node in cluster.nodes.values():
            node.overrides["log.dirs"] = str(node.dir)  # else Kafka formats /tmp/kafka-logs too
            cluster.write_config(node)
        if mode == "standalone":
            _kafka_format(version, cluster.nodes[1].config_path, cluster.cluster_id,
                          "--standalone")
        elif mode == "initial-controllers":
            with ThreadPoolExecutor(max_workers=3) as pool:  # a JVM start each
                list(pool.map(lambda node: _kafka_format(
                    version, node.config_path, cluster.cluster_id, "--initial-controllers",
                    _initial_controllers(cluster)), cluster.nodes.values()))
        else:
            cluster.format(1)  # the voter: kraft format; the observer: Kafka's format
            observer = cluster.nodes[2]
            _kafka_format(version, observer.config_path, cluster.cluster_id,
                          "--no-initial-controllers")
            observer.directory_id = _meta_directory_id(observer.dir)
        for nid in cluster.nodes:
            cluster.start(nid)
        leader = cluster.wait_for_leader(timeout=60)
        assert leader in cluster.initial_voters
        assert cluster.put("formatted-by", version.encode(), via=leader).status == 200
        for nid in cluster.nodes:
            cluster.wait_ready(nid, timeout=60)
            assert cluster.get("formatted-by", via=nid).body == version.encode()
            status = cluster.status(nid)
            assert status is not None
            assert status["cluster_id"] == cluster.cluster_id
            assert status["directory_id"] == _meta(cluster.nodes[nid].dir)["directory.id"]
            assert status["is_voter"] == (nid in cluster.initial_voters)
        assert sorted(v["id"] for v in status["voters"]) == cluster.initial_voters
        if mode == "standalone":
            # the level Kafka's format seeded (4.4 writes it into the (0, 0) snapshot)
            node = cluster.nodes[1]
            features = kafka_dist(version).tool(
                "features", "--bootstrap-controller", f"{node.host}:{node.port}", "describe",
                logs_dir=tmp_path / "tool").stdout
            mv = {"4.1.2": "4.1-IV1", "4.4.0": "4.4-IV2"}[version]
            assert re.search(rf"metadata.version\s.*FinalizedVersionLevel: {mv}\s", features), \
                features
    finally:
        cluster.close()


def _meta_directory_id(metadata_dir: Path) -> Uuid:
    return Uuid.parse(_meta(metadata_dir)["directory.id"])


@pytest.mark.parametrize("version", VERSIONS)
def test_kraft_formatted_directory_starts_under_kafka(tmp_path: Path, version: str) -> None:
    dist = kafka_dist(version)
    controller = KafkaController(dist, 1, "127.41.6.1", free_port("127.41.6.1"),
                                 tmp_path / "kafka")
    props = read_properties(controller.write_config())
    format_storage(props, "uyHVUszhQjiaZTcw6NkSLQ", standalone=True, out=io.StringIO())
    ours = _meta(controller.dir)["directory.id"]
    controller.start()
    try:
        status = dist.tool("metadata-quorum", "--bootstrap-controller", controller.endpoint,
                           "describe", "--status", logs_dir=tmp_path / "tool").stdout
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        assert fields["ClusterId"].strip() == "uyHVUszhQjiaZTcw6NkSLQ"
        assert fields["LeaderId"].strip() == "1"
        assert f'"directoryId": "{ours}"' in fields["CurrentVoters"]
        features = dist.tool("features", "--bootstrap-controller", controller.endpoint,
                             "describe", logs_dir=tmp_path / "tool").stdout
        assert "Feature: metadata.version" in features
        assert "FinalizedVersionLevel: 4.1-IV1" in features  # kraft format's default
    finally:
        controller.kill()


@pytest.mark.parametrize("version", VERSIONS)
def test_formats_agree_record_by_record(tmp_path: Path, version: str) -> None:
    """One node of a 3-voter quorum, formatted by each side with the same cluster id,
    --initial-controllers and --release-version."""
    cluster = LocalCluster(tmp_path / "layout", voters=3, address_prefix="127.41.7.")
    cluster.close()  # only its node descriptions are used
    node = cluster.nodes[2]
    base = cluster._props(node)
    dirs = {}
    for side in ("kraft", "kafka"):
        props = {**base, "metadata.log.dir": str(tmp_path / side / "metadata"),
                 "log.dirs": str(tmp_path / side / "metadata")}
        config = tmp_path / side / "server.properties"
        config.parent.mkdir(parents=True)
        write_properties(config, props)
        dirs[side] = tmp_path / side / "metadata"
        if side == "kraft":
            format_storage(props, cluster.cluster_id, initial_controllers=_initial_controllers(
                cluster), release_version="4.1-IV1", out=io.StringIO())
        else:
            _kafka_format(version, config, cluster.cluster_id, "--initial-controllers",
                          _initial_controllers(cluster), "--release-version", "4.1-IV1")

    assert _meta(dirs["kraft"]) == _meta(dirs["kafka"])
    assert _meta(dirs["kafka"])["directory.id"] == str(node.directory_id)

    ours, theirs = (_bootstrap_snapshot(dirs[s]) for s in ("kraft", "kafka"))
    assert ours.epoch == theirs.epoch == 0
    assert ours.header.version == theirs.header.version
    assert ours.kraft_version == theirs.kraft_version
    assert ours.voters == theirs.voters
    assert [type(r) for r in ours.control_records] == [type(r) for r in theirs.control_records]

    # metadata.version is the one feature kraft seeds; Kafka also seeds its broker features
    # at their defaults for the release (docs/raft.md, "Kafka in the loop").
    our_features, their_features = (_bootstrap_features(dirs[s]) for s in ("kraft", "kafka"))
    assert our_features == {"metadata.version": 27}
    assert their_features["metadata.version"] == 27
    # Where the records live: bootstrap.checkpoint up to 4.3, the (0, 0) snapshot from 4.4
    kafka_has_checkpoint = (dirs["kafka"] / BOOTSTRAP_CHECKPOINT).exists()
    assert kafka_has_checkpoint == (version != NEWEST)
    assert (dirs["kraft"] / BOOTSTRAP_CHECKPOINT).exists()
