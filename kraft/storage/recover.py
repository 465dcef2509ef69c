"""Quorum-loss recovery on a stopped replica's metadata directory (KIP-853, kraft.version 1).

When a majority of the voters is gone for good (their disks lost), no leader can be elected
and nothing commits. The way out is to pick the surviving replica with the longest log and
make it the only voter, so it can lead alone; the others then join again as new voters.

* `inspect_replica` reads what a person (or the operator) needs to pick that replica: its
  identity, the end of its log and its last epoch, its latest snapshot, its quorum-state and
  the latest voters set it saw (committed or not).
* `reset_epoch` moves quorum-state back to a usable epoch when it holds one no replica may
  use (at or above the epoch limit, 2**31 - 1), or one a forged request drove to the last
  usable epoch, from which no election can start: epoch N (by default the highest of its log
  and snapshots), no leader and no vote. Every voter must be stopped and reset
  to the same N, at least the highest epoch of any voter's log and snapshots: then no voter
  remembers a vote above N, and the next election, at N + 1, is above every epoch any log
  holds, so no two leaders can write in one epoch.
* `force_single_voter` rewrites the voters set to this replica alone: it appends, at an epoch
  above every epoch the replica has seen, a control batch holding a VotersRecord of this
  voter only, and moves quorum-state to that epoch with no leader and no vote. A replica
  uses the latest voters set of its log, committed or not (KIP-853), so on its next start it
  is the only voter, elects itself in the epoch after, and once it leads, everything its log
  holds is committed, including records that never were before.

Both open the directory as a node does (taking its lock, so a running node makes them fail).
The high watermark is not kept on disk: what is known to be committed is what the latest
snapshot covers (snapshots are taken at the high watermark).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft.protocol.primitives import EPOCH_LIMIT
from kraft.protocol.uuid import Uuid
from kraft.records.control import (
    Endpoint,
    KRaftVersionFeature,
    Voter,
    VotersRecord,
    build_control_batch,
)
from kraft.storage.errors import StorageError
from kraft.storage.layout import SnapshotId
from kraft.storage.loader import MetadataDir, open_metadata_dir
from kraft.storage.log import DEFAULT_SEGMENT_BYTES
from kraft.storage.quorum_state import (
    QuorumStateData,
    UnusableEpochError,
    check_usable,
)

log = logging.getLogger(__name__)


class StaticQuorumError(StorageError):
    """The replica's quorum is static (kraft.version 0): its voters set comes from
    `controller.quorum.voters`, not from the log, so it cannot be rewritten there."""


class ReplicaMismatchError(StorageError):
    """The directory does not belong to the node the configuration describes."""


@dataclass(frozen=True, slots=True)
class VotersSeen:
    """The latest voters set a replica holds, where it is, and whether it is known committed."""

    offset: int
    """The log offset of its VotersRecord (a snapshot's record: the snapshot's end - 1)."""
    from_snapshot: bool
    committed: bool | None
    """True when a snapshot covers it; None when unknown (the high watermark is not kept)."""
    record: VotersRecord


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """What `kraft recover inspect` reports about one replica's metadata directory."""

    directory: Path
    node_id: int
    directory_id: Uuid | None
    cluster_id: str
    kraft_version: int
    log_start_offset: int
    log_end_offset: int
    last_epoch: int
    """The epoch of the log's last batch; that of the latest snapshot when the log is empty;
    -1 when the replica holds neither."""
    latest_snapshot: SnapshotId | None
    committed_at_least: int
    """Every offset below this is known committed (the latest snapshot's end, else 0)."""
    quorum_state: QuorumStateData | None
    voters: VotersSeen | None
    max_epoch: int
    """The highest usable epoch the replica has seen: in its log, its snapshots or its
    quorum-state (one at or above the epoch limit is left out)."""
    log_max_epoch: int
    """The highest epoch of its log and snapshots (-1 for none): `reset_epoch` goes no lower."""

    @property
    def is_voter(self) -> bool:
        """Whether this replica (id and directory id) is in its latest voters set."""
        return self.voters is not None and any(
            v.voter_id == self.node_id and v.voter_directory_id == self.directory_id
            for v in self.voters.record.voters
        )

    @property
    def is_only_voter(self) -> bool:
        """Whether its latest voters set is this replica alone (it can lead by itself)."""
        return self.is_voter and self.voters is not None and len(self.voters.record.voters) == 1

    def to_json(self) -> dict[str, Any]:
        """The report as JSON values (the `--json` output; documented in docs/node.md)."""
        qs = self.quorum_state
        return {
            "directory": str(self.directory),
            "node_id": self.node_id,
            "directory_id": str(self.directory_id) if self.directory_id else None,
            "cluster_id": self.cluster_id,
            "kraft_version": self.kraft_version,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "last_epoch": self.last_epoch,
            "latest_snapshot": None if self.latest_snapshot is None else {
                "end_offset": self.latest_snapshot.end_offset,
                "epoch": self.latest_snapshot.epoch,
            },
            "high_watermark": None,
            "committed_at_least": self.committed_at_least,
            "quorum_state": None if qs is None else {
                "leader_epoch": qs.leader_epoch,
                "leader_id": qs.leader_id,
                "voted_id": qs.voted_id,
                "voted_directory_id": str(qs.voted_directory_id) if qs.voted_directory_id else None,
            },
            "max_epoch": self.max_epoch,
            "log_max_epoch": self.log_max_epoch,
            "voters": None if self.voters is None else {
                "offset": self.voters.offset,
                "from_snapshot": self.voters.from_snapshot,
                "committed": self.voters.committed,
                "voters": [voter_json(v) for v in self.voters.record.voters],
            },
            "is_voter": self.is_voter,
            "is_only_voter": self.is_only_voter,
        }


def voter_json(voter: Voter) -> dict[str, Any]:
    """One voter of a VotersRecord as JSON values."""
    return {
        "id": voter.voter_id,
        "directory_id": str(voter.voter_directory_id),
        "endpoints": [{"name": e.name, "host": e.host, "port": e.port} for e in voter.endpoints],
        "kraft_version": {
            "min": voter.kraft_version_feature.min_supported_version,
            "max": voter.kraft_version_feature.max_supported_version,
        },
    }


def report_of(md: MetadataDir) -> ReplicaReport:
    """What an opened metadata directory holds, for choosing the replica to recover from."""
    latest = md.latest_snapshot
    last_epoch = md.log.last_epoch
    if md.log.log_end_offset <= md.log.log_start_offset:
        last_epoch = latest.epoch if latest is not None and latest.end_offset > 0 else -1
    qs = md.quorum_state
    data_epochs = [last_epoch, *(sid.epoch for sid in md.snapshots.ids())]
    epochs = [*data_epochs, qs.leader_epoch if qs is not None and qs.leader_epoch < EPOCH_LIMIT
              else -1]
    committed_at_least = latest.end_offset if latest is not None else 0
    seen: VotersSeen | None = None
    entry = md.latest_voters
    if entry is not None:
        assert isinstance(entry.record, VotersRecord)
        known = entry.from_snapshot or entry.offset < committed_at_least
        seen = VotersSeen(entry.offset, entry.from_snapshot, True if known else None,
                          entry.record)
    return ReplicaReport(
        directory=md.path,
        node_id=md.meta.node_id,
        directory_id=md.meta.directory_id,
        cluster_id=md.meta.cluster_id,
        kraft_version=md.kraft_version,
        log_start_offset=md.log.log_start_offset,
        log_end_offset=md.log.log_end_offset,
        last_epoch=last_epoch,
        latest_snapshot=latest,
        committed_at_least=committed_at_least,
        quorum_state=qs,
        voters=seen,
        max_epoch=max(epochs),
        log_max_epoch=max(data_epochs),
    )


def inspect_replica(directory: Path | str, *, expected_node_id: int | None = None) -> ReplicaReport:
    """Open a stopped replica's metadata directory and report on it.

    Opening recovers the log as a node's start does (a torn tail is cut off) and takes the
    directory lock: StorageError names the lock when a running node holds it.
    """
    with open_metadata_dir(directory, expected_node_id=expected_node_id) as md:
        return report_of(md)


# ---------------------------------------------------------------- forcing a single voter


def single_voter_record(node_id: int, directory_id: Uuid, endpoints: tuple[Endpoint, ...],
                        kraft_version: KRaftVersionFeature) -> VotersRecord:
    """The VotersRecord of one voter: this replica alone."""
    if directory_id.is_zero():
        raise ValueError("a voter's directory id must not be zero")
    if not endpoints:
        raise ValueError(f"voter {node_id} needs at least one endpoint")
    return VotersRecord((Voter(node_id, directory_id, endpoints, kraft_version),))


def forced_epoch(report: ReplicaReport) -> int:
    """The epoch of the forced voters batch: one above every epoch the replica has seen, so
    no leader of an epoch it knows of can have written at or beyond it."""
    return max(report.max_epoch, 0) + 1


def same_voter(record: VotersRecord, voter: Voter) -> bool:
    """Whether `record` is exactly `voter` alone (id and directory id)."""
    return len(record.voters) == 1 and (
        record.voters[0].voter_id, record.voters[0].voter_directory_id
    ) == (voter.voter_id, voter.voter_directory_id)


@dataclass(frozen=True, slots=True)
class ForceResult:
    """What `force_single_voter` did."""

    changed: bool
    """False when the replica's latest voters set already was this replica alone."""
    epoch: int
    """The forced epoch (the epoch quorum-state holds when nothing changed)."""
    voters_offset: int
    """The offset of the VotersRecord now latest."""
    before: ReplicaReport
    after: ReplicaReport

    def to_json(self) -> dict[str, Any]:
        """The result as JSON values (the `--json` output of force-single-voter)."""
        return {
            "changed": self.changed,
            "node_id": self.after.node_id,
            "directory_id": str(self.after.directory_id) if self.after.directory_id else None,
            "epoch": self.epoch,
            "voters_offset": self.voters_offset,
            "log_end_offset": self.after.log_end_offset,
            "committed_at_least": self.before.committed_at_least,
            "offsets_not_known_committed": max(
                0, self.before.log_end_offset - self.before.committed_at_least),
        }


def check_forcible(report: ReplicaReport) -> None:
    """Refuse a replica whose voters set cannot be forced in its log (StaticQuorumError), or
    that has no directory id (StorageError)."""
    if report.kraft_version < 1:
        raise StaticQuorumError(
            f"{report.directory}: kraft.version is {report.kraft_version} (a static quorum: its "
            "voters are controller.quorum.voters of the configuration, and the log holds no "
            "voters set to rewrite). force-single-voter needs kraft.version 1 (a dynamic "
            "quorum). See docs/node.md, \"Quorum loss recovery\", for a static quorum."
        )
    if report.directory_id is None or report.directory_id.is_zero():
        raise StorageError(f"{report.directory}/meta.properties has no directory.id")


def force_single_voter(directory: Path | str, *, node_id: int,
                       endpoints: tuple[Endpoint, ...],
                       kraft_version: KRaftVersionFeature,
                       timestamp_ms: int,
                       directory_id: Uuid | None = None,
                       segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> ForceResult:
    """Make this stopped replica the only voter of its quorum (see the module docstring).

    Order, for a crash at any point: the batch is appended and fsynced (with the
    leader-epoch checkpoint) first, then quorum-state is replaced atomically. A crash in
    between leaves quorum-state behind the log, which a node's start resolves to the log's
    epoch, and running this again completes it. A replica whose latest voters set already is
    this replica alone is left as it is (`changed` False), but for a quorum-state behind
    its log's epoch, which is brought up to it. `segment_bytes` is the node's
    `metadata.log.segment.bytes` (when to roll to a new segment before appending).

    Raises StaticQuorumError at kraft.version 0, ReplicaMismatchError when the directory is
    another node's (or, with `directory_id`, another incarnation's), StorageError when a running node holds the directory lock.
    """
    with open_metadata_dir(directory, segment_bytes=segment_bytes) as md:
        if md.meta.node_id != node_id:
            raise ReplicaMismatchError(
                f"{md.path}/meta.properties has node.id {md.meta.node_id}, but the "
                f"configuration's node.id is {node_id}"
            )
        if directory_id is not None and md.meta.directory_id != directory_id:
            raise ReplicaMismatchError(
                f"{md.path}/meta.properties has directory.id {md.meta.directory_id}, not "
                f"{directory_id}: this volume holds another incarnation of node {node_id}"
            )
        before = report_of(md)
        check_forcible(before)
        assert before.directory_id is not None
        voter = single_voter_record(node_id, before.directory_id, endpoints,
                                    kraft_version).voters[0]
        qs = md.quorum_state
        if before.voters is not None and same_voter(before.voters.record, voter):
            epoch = max(before.last_epoch, qs.leader_epoch if qs is not None else -1)
            if qs is None or qs.leader_epoch < before.last_epoch:
                md.quorum_state_store.write(QuorumStateData(leader_epoch=epoch))
                md.quorum_state = md.quorum_state_store.read()
            log.info("event=force_single_voter_unchanged dir=%s node_id=%d epoch=%d",
                     md.path, node_id, epoch)
            return ForceResult(False, epoch, before.voters.offset, before, report_of(md))
        epoch = forced_epoch(before)
        base = md.log.log_end_offset
        record = VotersRecord((voter,))
        md.log.append(build_control_batch(base, epoch, timestamp_ms, [record]))
        md.log.flush()
        md.quorum_state_store.write(QuorumStateData(leader_epoch=epoch))
        log.warning(
            "event=voters_forced dir=%s node_id=%d directory_id=%s epoch=%d offset=%d "
            "previous_voters=%s", md.path, node_id, before.directory_id, epoch, base,
            [v.voter_id for v in before.voters.record.voters] if before.voters else None,
        )
    after = inspect_replica(directory)
    return ForceResult(True, epoch, base, before, after)


# ---------------------------------------------------------------- epochs a node cannot start from


def check_startable(md: MetadataDir) -> None:
    """Raise UnusableEpochError when the node cannot go on from what `md` holds: a
    quorum-state no replica may use (`kraft.storage.quorum_state.check_usable`), or a log or
    snapshot of an epoch at or above the epoch limit."""
    check_usable(md.quorum_state, md.quorum_state_store.path)
    report = report_of(md)
    if report.log_max_epoch >= EPOCH_LIMIT:
        raise UnusableEpochError(
            f"{md.partition_dir}: the log or a snapshot holds epoch {report.log_max_epoch}, at "
            f"or above the epoch limit {EPOCH_LIMIT}: no election could follow it, and no "
            "reset can go below what the log holds. Empty this replica's metadata directory, "
            "format it again with `kraft format -N` and start it to join as a new voter.")


@dataclass(frozen=True, slots=True)
class ResetResult:
    """What `reset_epoch` did."""

    before: QuorumStateData | None
    after: QuorumStateData

    def to_json(self) -> dict[str, Any]:
        """The result as JSON values (the `--json` output of reset-epoch)."""
        b = self.before
        return {
            "quorum_state_before": None if b is None else {
                "leader_epoch": b.leader_epoch, "leader_id": b.leader_id,
                "voted_id": b.voted_id},
            "leader_epoch": self.after.leader_epoch,
            "leader_id": self.after.leader_id,
            "voted_id": self.after.voted_id,
        }


def reset_epoch_target(report: ReplicaReport, epoch: int | None) -> int:
    """The epoch `reset_epoch` writes: `epoch`, by default the highest of the replica's log
    and snapshots (0 when it has none). Raises UnusableEpochError for one below its log's and snapshots'
    highest epoch, or at or above the limit."""
    target = max(report.log_max_epoch, 0) if epoch is None else epoch
    if target >= EPOCH_LIMIT:
        raise UnusableEpochError(
            f"epoch {target} is at or above the epoch limit {EPOCH_LIMIT}")
    if target < max(report.log_max_epoch, 0):
        raise UnusableEpochError(
            f"epoch {target} is below epoch {report.log_max_epoch}, which {report.directory} "
            "holds in its log or snapshots: a leader of a lower epoch would write beside "
            "it. Give every voter the same --epoch: the highest \"highest log epoch\" "
            "`kraft recover inspect` shows over them")
    return target


def reset_epoch(directory: Path | str, *, node_id: int, epoch: int | None = None
                ) -> ResetResult:
    """Rewrite this stopped replica's quorum-state to `epoch` (`reset_epoch_target`), with no
    leader and no vote, keeping its data_version (and a version 0 file's voters). See the
    module docstring for why every voter must be reset to the same epoch.

    Raises ReplicaMismatchError when the directory is another node's, UnusableEpochError
    for an epoch the replica cannot take, StorageError when a running node holds the lock.
    """
    with open_metadata_dir(directory) as md:
        if md.meta.node_id != node_id:
            raise ReplicaMismatchError(
                f"{md.path}/meta.properties has node.id {md.meta.node_id}, but the "
                f"configuration's node.id is {node_id}")
        report = report_of(md)
        target = reset_epoch_target(report, epoch)
        before = md.quorum_state
        after = QuorumStateData(
            leader_epoch=target,
            data_version=before.data_version if before is not None else md_data_version(md),
            current_voters=before.current_voters if before is not None else None,
        )
        md.quorum_state_store.write(after)
        log.warning("event=quorum_state_reset dir=%s node_id=%d epoch_before=%s epoch=%d",
                    md.path, node_id, before.leader_epoch if before is not None else None,
                    target)
    return ResetResult(before, after)


def md_data_version(md: MetadataDir) -> int:
    """The quorum-state data_version of a replica that has none yet: Kafka's for its
    kraft.version."""
    return 0 if md.kraft_version == 0 else 1

