"""open_metadata_dir: formatted directory -> log, snapshots, quorum-state and voters history."""

from __future__ import annotations

import fcntl
import io
import os
from pathlib import Path

import pytest

from kraft.protocol.uuid import Uuid
from kraft.records.batch import build_batch
from kraft.records.control import (
    Endpoint,
    KRaftVersionFeature,
    KRaftVersionRecord,
    LeaderChangeMessage,
    Voter,
    VotersRecord,
    build_control_batch,
)
from kraft.records.snapshot_format import build_snapshot
from kraft.storage.errors import NotFormattedError, StorageError
from kraft.storage.format import format_storage
from kraft.storage.layout import BOOTSTRAP_SNAPSHOT_ID, SnapshotId
from kraft.storage.loader import MetadataDir, open_metadata_dir
from kraft.storage.log import SegmentedLog
from kraft.storage.quorum_state import QuorumStateData

CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"


def formatted(tmp_path: Path) -> Path:
    props = {
        "process.roles": "controller", "node.id": "1",
        "controller.listener.names": "CONTROLLER",
        "listeners": "CONTROLLER://localhost:9093", "metadata.log.dir": str(tmp_path / "meta"),
    }
    format_storage(props, CLUSTER, standalone=True, out=io.StringIO())
    return tmp_path / "meta"


def voter(i: int) -> Voter:
    return Voter(i, Uuid.random(), (Endpoint("CONTROLLER", f"h{i}", 9093),), KRaftVersionFeature(0, 1))


def test_fresh_standalone_directory(tmp_path: Path) -> None:
    root = formatted(tmp_path)
    with open_metadata_dir(root, expected_cluster_id=CLUSTER, expected_node_id=1) as md:
        assert md.meta.node_id == 1
        assert md.latest_snapshot == BOOTSTRAP_SNAPSHOT_ID
        assert (md.log.log_start_offset, md.log.log_end_offset) == (0, 0)
        assert md.quorum_state is None
        assert md.kraft_version == 1
        latest = md.latest_voters
        assert latest is not None and latest.from_snapshot and latest.offset == -1
        assert isinstance(latest.record, VotersRecord)
        assert latest.record.voters[0].voter_directory_id == md.meta.directory_id
        assert (md.partition_dir / "partition.metadata").exists()
        md.quorum_state_store.write(QuorumStateData(leader_epoch=1, leader_id=1))
    with open_metadata_dir(root) as md:
        assert md.quorum_state == QuorumStateData(leader_epoch=1, leader_id=1)


def test_voters_history_from_log(tmp_path: Path) -> None:
    root = formatted(tmp_path)
    new_set = VotersRecord((voter(1), voter(2)))
    with open_metadata_dir(root) as md:
        log = md.log
        log.append(build_control_batch(0, 1, 10, [LeaderChangeMessage(1)]))
        log.append(build_batch(1, 1, [b"data"], 11))
        log.append(build_control_batch(2, 1, 12, [KRaftVersionRecord(1), new_set]))
        log.flush()
    with open_metadata_dir(root) as md:
        hist = md.voters_history
        assert [(e.offset, type(e.record).__name__, e.from_snapshot) for e in hist] == [
            (-1, "KRaftVersionRecord", True), (-1, "VotersRecord", True),
            (2, "KRaftVersionRecord", False), (3, "VotersRecord", False),
        ]
        latest = md.latest_voters
        assert latest is not None and latest.record == new_set
        # Truncating the log rolls the history back on the next open.
        md.log.truncate_to(2)
    with open_metadata_dir(root) as md:
        assert [e.offset for e in md.voters_history] == [-1, -1]


def test_snapshot_ahead_of_log_truncates_log_fully(tmp_path: Path) -> None:
    root = formatted(tmp_path)
    with open_metadata_dir(root) as md:
        md.log.append(build_batch(0, 1, [b"a", b"b"], 1))
        md.log.flush()
        sid = SnapshotId(50, 4)
        md.snapshots.write(sid, [build_snapshot(4, 1, [[b"x"]], timestamp_ms=1, kraft_version=1,
                                                voters=VotersRecord((voter(1),)))])
    with open_metadata_dir(root) as md:
        assert (md.log.log_start_offset, md.log.log_end_offset) == (50, 50)
        assert md.latest_snapshot == sid
        assert md.snapshots.ids() == [sid]  # (0, 0) is below the log start now
        assert [e.offset for e in md.voters_history] == [49, 49]


def test_log_start_without_covering_snapshot_refuses(tmp_path: Path) -> None:
    root = formatted(tmp_path)
    with open_metadata_dir(root) as md:
        md.log.truncate_fully_and_start_at(30)
        md.snapshots.delete(BOOTSTRAP_SNAPSHOT_ID)
    with pytest.raises(StorageError, match="no snapshot covers"):
        open_metadata_dir(root)


def test_unformatted_wrong_ids_and_lock(tmp_path: Path) -> None:
    with pytest.raises(NotFormattedError, match=r"no meta\.properties"):
        open_metadata_dir(tmp_path)
    root = formatted(tmp_path)
    with pytest.raises(NotFormattedError, match=r"cluster\.id"):
        open_metadata_dir(root, expected_cluster_id="AAAAAAAAAAAAAAAAAAAAAQ")
    with pytest.raises(NotFormattedError, match=r"node\.id 1, expected 2"):
        open_metadata_dir(root, expected_node_id=2)
    with open_metadata_dir(root), pytest.raises(StorageError, match="locked"):
        open_metadata_dir(root)
    open_metadata_dir(root).close()  # released


def _crash(md: MetadataDir) -> None:
    """What kill -9 leaves: files as written, no clean close, the lock released."""
    for seg in md.log.segments:
        seg.close()
    fcntl.flock(md._lock_fd, fcntl.LOCK_UN)
    os.close(md._lock_fd)
    md._lock_fd = -1


def test_records_after_a_snapshot_at_the_recovery_point_survive_a_crash(tmp_path: Path) -> None:
    # A leader snapshots at its log end (the log start moves there, the recovery point is
    # checkpointed there), commits four more records of the same epoch, and is killed. The
    # reopened log once had no epoch, looked older than the snapshot, and was truncated to it:
    # the committed records were gone (found by tests/node/test_nemesis.py).
    root = formatted(tmp_path)
    md = open_metadata_dir(root)
    for base in range(0, 50, 5):
        md.log.append(build_batch(base, 4, [b"v%d" % i for i in range(5)], base))
    md.log.flush()
    sid = SnapshotId(50, 4)
    md.snapshots.write(sid, [build_snapshot(4, 1, [[b"x"]], timestamp_ms=1, kraft_version=1,
                                            voters=VotersRecord((voter(1),)))])
    md.log.advance_log_start_offset(50)
    md.log.checkpoint_recovery_point()
    md.log.append(build_batch(50, 4, [b"a", b"b", b"c", b"d"], 60))
    md.log.flush()
    _crash(md)
    with open_metadata_dir(root) as md:
        assert (md.log.log_start_offset, md.log.log_end_offset) == (50, 54)
        assert md.log.last_epoch == 4
        assert [bytes(v) for b in md.log.batches(50) for v in b.values()] == [b"a", b"b", b"c", b"d"]


def test_a_non_empty_log_without_an_epoch_is_not_truncated_to_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Defence in depth: should the log ever open without an epoch for records it holds, the
    # loader refuses to start instead of judging it older than the snapshot and deleting it.
    root = formatted(tmp_path)
    with open_metadata_dir(root) as md:
        md.log.append(build_batch(0, 3, [b"a", b"b"], 1))
        md.snapshots.write(SnapshotId(1, 3), [build_snapshot(
            3, 1, [[b"x"]], timestamp_ms=1, kraft_version=1, voters=VotersRecord((voter(1),)))])
        md.log.flush()
    with monkeypatch.context() as m:
        m.setattr(SegmentedLog, "last_epoch", property(lambda self: -1))
        with pytest.raises(StorageError, match="no leader epoch"):
            open_metadata_dir(root)
    with open_metadata_dir(root) as md:
        assert (md.log.log_start_offset, md.log.log_end_offset) == (0, 2)


def _drop_directory_id(root: Path) -> None:
    path = root / "meta.properties"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if not line.startswith("directory.id=")))


def test_missing_directory_id_is_generated_and_written_back(tmp_path: Path) -> None:
    # Kafka's start-up gives a log directory without directory.id a fresh one and writes it
    # into meta.properties, keeping every other key.
    root = formatted(tmp_path)
    _drop_directory_id(root)
    with open_metadata_dir(root, expected_cluster_id=CLUSTER, expected_node_id=1) as md:
        generated = md.meta.directory_id
        assert generated is not None and not generated.is_zero()
    text = (root / "meta.properties").read_text()
    assert f"directory.id={generated}" in text
    assert f"cluster.id={CLUSTER}" in text and "node.id=1" in text and "version=1" in text
    assert not list(root.glob("*.tmp"))
    with open_metadata_dir(root) as md:  # kept from then on
        assert md.meta.directory_id == generated
