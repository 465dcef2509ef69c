"""Quorum-loss recovery on a stopped replica's directory: inspect and force-single-voter."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kraft.protocol.uuid import Uuid
from kraft.records.batch import RecordBatch, build_batch
from kraft.records.control import (
    Endpoint,
    KRaftVersionFeature,
    LeaderChangeMessage,
    VotersRecord,
    build_control_batch,
    decode_control_batch,
)
from kraft.records.snapshot_format import iter_snapshot_batches
from kraft.storage.errors import DirectoryLockedError
from kraft.storage.format import format_storage
from kraft.storage.layout import LEADER_EPOCH_CHECKPOINT, SnapshotId
from kraft.storage.loader import open_metadata_dir
from kraft.storage.quorum_state import QuorumStateData
from kraft.storage.recover import (
    ReplicaMismatchError,
    StaticQuorumError,
    force_single_voter,
    forced_epoch,
    inspect_replica,
    single_voter_record,
)

CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"
DIRS = {1: Uuid.random(), 2: Uuid.random(), 3: Uuid.random()}
ENDPOINTS = (Endpoint("CONTROLLER", "node1.example", 9093),)
FEATURE = KRaftVersionFeature(0, 1)


def three_voter_replica(tmp_path: Path, node_id: int = 1) -> Path:
    """Node `node_id` of a 3-voter quorum: epochs 2 and 3 in its log, quorum-state at 4."""
    root = tmp_path / f"meta-{node_id}"
    props = {
        "process.roles": "controller", "node.id": str(node_id),
        "controller.listener.names": "CONTROLLER",
        "listeners": "CONTROLLER://localhost:9093", "metadata.log.dir": str(root),
    }
    initial = ",".join(f"{i}@h{i}:9093:{d}" for i, d in DIRS.items())
    format_storage(props, CLUSTER, initial_controllers=initial, out=io.StringIO())
    with open_metadata_dir(root) as md:
        md.log.append(build_control_batch(0, 2, 10, [LeaderChangeMessage(2)]))
        md.log.append(build_batch(1, 2, [b"a", b"b"], 11))
        md.log.append(build_control_batch(3, 3, 12, [LeaderChangeMessage(3)]))
        md.log.append(build_batch(4, 3, [b"c"], 13))
        md.log.flush()
        md.quorum_state_store.write(QuorumStateData(leader_epoch=4, voted_id=2,
                                                    voted_directory_id=DIRS[2]))
    return root


def force(root: Path, node_id: int = 1) -> object:
    return force_single_voter(root, node_id=node_id, endpoints=ENDPOINTS, kraft_version=FEATURE,
                              timestamp_ms=1_000)


def last_batch(root: Path) -> RecordBatch:
    with open_metadata_dir(root) as md:
        return list(md.log.batches())[-1]


def test_inspect_reports_what_picking_the_survivor_needs(tmp_path: Path) -> None:
    root = three_voter_replica(tmp_path)
    report = inspect_replica(root)
    assert (report.node_id, report.directory_id, report.cluster_id) == (1, DIRS[1], CLUSTER)
    assert (report.log_end_offset, report.last_epoch, report.max_epoch) == (5, 3, 4)
    assert report.latest_snapshot == SnapshotId(0, 0)
    assert report.kraft_version == 1
    assert report.voters is not None and report.voters.from_snapshot
    assert [v.voter_id for v in report.voters.record.voters] == [1, 2, 3]
    assert report.is_voter and not report.is_only_voter
    js = report.to_json()
    assert js["high_watermark"] is None and js["committed_at_least"] == 0
    assert js["quorum_state"] == {"leader_epoch": 4, "leader_id": -1, "voted_id": 2,
                                  "voted_directory_id": str(DIRS[2])}
    assert [v["directory_id"] for v in js["voters"]["voters"]] == [str(d) for d in DIRS.values()]


def test_force_appends_a_single_voter_set_above_every_epoch_seen(tmp_path: Path) -> None:
    root = three_voter_replica(tmp_path)
    result = force(root)
    assert result.changed and result.epoch == 5 and result.voters_offset == 5  # type: ignore[attr-defined]
    batch = last_batch(root)
    assert batch.is_control and (batch.base_offset, batch.partition_leader_epoch) == (5, 5)
    records = decode_control_batch(batch)
    assert records == [single_voter_record(1, DIRS[1], ENDPOINTS, FEATURE)]
    with open_metadata_dir(root) as md:
        assert md.quorum_state == QuorumStateData(leader_epoch=5)
        assert [(e.epoch, e.start_offset) for e in md.log.epoch_cache.entries][-1] == (5, 5)
        latest = md.latest_voters
        assert latest is not None and latest.offset == 5
        assert isinstance(latest.record, VotersRecord) and len(latest.record.voters) == 1
    # the epoch checkpoint on disk names the new epoch (not only the cache rebuilt on open)
    text = (root / "__cluster_metadata-0" / LEADER_EPOCH_CHECKPOINT).read_text().split("\n")
    assert "5 5" in text
    after = inspect_replica(root)
    assert after.is_only_voter and after.log_end_offset == 6


def test_force_again_changes_nothing(tmp_path: Path) -> None:
    root = three_voter_replica(tmp_path)
    force(root)
    files = {p: p.read_bytes() for p in (root / "__cluster_metadata-0").iterdir()
             if p.suffix in (".log", "") and p.is_file()}
    again = force(root)
    assert not again.changed and again.epoch == 5 and again.voters_offset == 5  # type: ignore[attr-defined]
    assert {p: p.read_bytes() for p in files} == files


def test_force_again_completes_a_run_cut_off_before_quorum_state(tmp_path: Path) -> None:
    root = three_voter_replica(tmp_path)
    force(root)
    with open_metadata_dir(root) as md:  # as if the process died before replacing quorum-state
        md.quorum_state_store.write(QuorumStateData(leader_epoch=4))
    again = force(root)
    assert not again.changed  # type: ignore[attr-defined]
    with open_metadata_dir(root) as md:
        assert md.quorum_state == QuorumStateData(leader_epoch=5)
        assert md.log.log_end_offset == 6


def test_forced_epoch_is_above_quorum_state_log_and_snapshots(tmp_path: Path) -> None:
    root = three_voter_replica(tmp_path)
    with open_metadata_dir(root) as md:
        md.quorum_state_store.write(QuorumStateData(leader_epoch=9))
    assert forced_epoch(inspect_replica(root)) == 10
    # a snapshot of a later epoch than the whole log (a follower that installed it): the log
    # is replaced by it on open, and the forced epoch goes above it
    with open_metadata_dir(root) as md:
        voters = VotersRecord(tuple(single_voter_record(i, d, ENDPOINTS, FEATURE).voters[0]
                                    for i, d in DIRS.items()))
        md.snapshots.write(SnapshotId(40, 12), iter_snapshot_batches(
            12, 5, [[b"x"]], timestamp_ms=5, kraft_version=1, voters=voters))
    report = inspect_replica(root)
    assert (report.log_end_offset, report.last_epoch, report.committed_at_least) == (40, 12, 40)
    assert report.voters is not None and report.voters.committed is True
    result = force(root)
    assert result.epoch == 13 and result.voters_offset == 40  # type: ignore[attr-defined]


def test_static_quorum_is_refused_and_untouched(tmp_path: Path) -> None:
    root = tmp_path / "meta"
    props = {
        "process.roles": "controller", "node.id": "1",
        "controller.listener.names": "CONTROLLER", "controller.quorum.voters": "1@h1:9093,2@h2:9093",
        "listeners": "CONTROLLER://localhost:9093", "metadata.log.dir": str(root),
    }
    format_storage(props, CLUSTER, out=io.StringIO())
    assert inspect_replica(root).kraft_version == 0
    with pytest.raises(StaticQuorumError, match=r"kraft\.version is 0"):
        force(root)
    with open_metadata_dir(root) as md:
        assert md.log.log_end_offset == 0 and md.quorum_state is None


def test_a_running_node_holding_the_lock_makes_it_fail(tmp_path: Path) -> None:
    root = three_voter_replica(tmp_path)
    with open_metadata_dir(root):
        with pytest.raises(DirectoryLockedError, match="locked"):
            force(root)
        with pytest.raises(DirectoryLockedError):
            inspect_replica(root)
    assert inspect_replica(root).log_end_offset == 5


def test_another_nodes_directory_is_refused(tmp_path: Path) -> None:
    root = three_voter_replica(tmp_path, node_id=2)
    with pytest.raises(ReplicaMismatchError, match=r"node\.id 2"):
        force(root, node_id=1)
    assert inspect_replica(root).log_end_offset == 5


def test_single_voter_record_needs_a_directory_id_and_an_endpoint() -> None:
    with pytest.raises(ValueError, match="directory id"):
        single_voter_record(1, Uuid.ZERO, ENDPOINTS, FEATURE)
    with pytest.raises(ValueError, match="endpoint"):
        single_voter_record(1, DIRS[1], (), FEATURE)
