"""Replica directories written with the project's own storage code, for tests, demos and bench.

Everything on disk is produced by `kraft.storage` (SegmentedLog, SnapshotStore,
meta.properties, quorum-state) from batches built by `kraft.records` (`build_batch`,
`build_control_batch`, the snapshot format) holding commands of the built-in KV state machine
(`kraft.statemachine.kv`), whose real `KVStore` also computes the snapshot contents.

`write_scenario(root)` writes a five-voter quorum with known faults (see `Scenario`); run
`python -m kraft_pipeline.synthetic OUT` to get one for trying `kraft audit`.
`write_large_log(dir, size_bytes)` writes one replica with a log of about that size.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kraft.protocol.uuid import Uuid
from kraft.records.batch import build_batch, iter_batches, rebase
from kraft.records.control import (
    ControlRecord,
    Endpoint,
    KRaftVersionFeature,
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    Voter,
    VotersRecord,
    build_control_batch,
)
from kraft.records.snapshot_format import iter_snapshot_batches
from kraft.statemachine.base import CommittedBatch, chunk_values
from kraft.statemachine.kv import KVStore, encode_cas, encode_delete, encode_put
from kraft.storage.layout import SnapshotId, partition_dir
from kraft.storage.log import SegmentedLog
from kraft.storage.meta_properties import MetaProperties, write_meta_properties
from kraft.storage.partition_metadata import write_partition_metadata
from kraft.storage.quorum_state import QuorumStateData, QuorumStateStore
from kraft.storage.snapshots import SnapshotStore

CLUSTER_ID = "a2Jx7b0TQxWm1kFv3c9yXg"
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def directory_id(node_id: int) -> Uuid:
    """A fixed, valid directory id per node (tests can predict it)."""
    return Uuid(bytes([0x10 + node_id]) + bytes(14) + bytes([node_id]))


def voters_record(ids: Iterable[int]) -> VotersRecord:
    """A VotersRecord for `ids` with one CONTROLLER endpoint each."""
    return VotersRecord(tuple(
        Voter(i, directory_id(i), (Endpoint("CONTROLLER", f"kraft-{i}.kraft", 9093),),
              KRaftVersionFeature(0, 1))
        for i in sorted(ids)
    ))


@dataclass
class Batch:
    """One batch of the synthetic history, with what the scenario needs to know about it."""

    base_offset: int
    epoch: int
    timestamp_ms: int
    data: bytes
    count: int

    @property
    def next_offset(self) -> int:
        """The offset after this batch."""
        return self.base_offset + self.count


@dataclass
class History:
    """A log history being built: batches plus the KV state as of every batch end."""

    batches: list[Batch] = field(default_factory=list)
    next_offset: int = 0
    clock_ms: int = T0_MS
    store: KVStore = field(default_factory=KVStore)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    keys: int = 200

    def control(self, epoch: int, records: Sequence[ControlRecord], gap_ms: int = 2_000) -> Batch:
        """Append a control batch."""
        self.clock_ms += gap_ms
        data = build_control_batch(self.next_offset, epoch, self.clock_ms, list(records))
        return self._add(Batch(self.next_offset, epoch, self.clock_ms, data, len(records)))

    def leader_change(self, epoch: int, leader: int, voters: Sequence[int],
                      gap_ms: int = 5_000) -> Batch:
        """The first batch of an epoch: LEADER_CHANGE naming the leader and granting voters."""
        lc = LeaderChangeMessage(
            leader, tuple(LeaderChangeVoter(v) for v in voters),
            tuple(LeaderChangeVoter(v) for v in voters[: len(voters) // 2 + 1]),
        )
        return self.control(epoch, [lc], gap_ms)

    def commands(self, n: int) -> list[bytes]:
        """`n` random KV commands (mostly PUT, some DELETE and CAS) on a skewed key space."""
        out = []
        for _ in range(n):
            k = f"user/{min(int(self.rng.paretovariate(1.2)) - 1, self.keys - 1):04d}"
            roll = self.rng.random()
            if roll < 0.8:
                out.append(encode_put(k, self.rng.randbytes(self.rng.randint(8, 64))))
            elif roll < 0.9:
                out.append(encode_delete(k))
            else:
                out.append(encode_cas(k, self.store.get(k), b"cas"))
        return out

    def data(self, epoch: int, values: list[bytes], gap_ms: int = 1_000) -> Batch:
        """Append a data batch of KV commands and apply it to the state."""
        self.clock_ms += gap_ms
        data = build_batch(self.next_offset, epoch, values, self.clock_ms)
        self.store.skip_to(self.next_offset)
        self.store.apply(CommittedBatch(self.next_offset, epoch, tuple(values)))
        return self._add(Batch(self.next_offset, epoch, self.clock_ms, data, len(values)))

    def _add(self, b: Batch) -> Batch:
        self.batches.append(b)
        self.next_offset = b.next_offset
        self.store.skip_to(self.next_offset)
        return b

    def snapshot(self, epoch: int, voters: Sequence[int]) -> tuple[SnapshotId, list[bytes]]:
        """Snapshot batches of the current KV state (end offset = next offset)."""
        sid = SnapshotId(self.next_offset, epoch)
        batches = list(iter_snapshot_batches(
            epoch, self.clock_ms, chunk_values(self.store.snapshot_values(), 4096),
            timestamp_ms=self.clock_ms, kraft_version=1, voters=voters_record(voters),
        ))
        return sid, batches


def write_replica(
    root: Path,
    node_id: int,
    batches: Iterable[bytes],
    *,
    snapshots: Sequence[tuple[SnapshotId, list[bytes]]] = (),
    log_start_offset: int | None = None,
    quorum_state: QuorumStateData | None = None,
    segment_bytes: int = 16 * 1024,
) -> Path:
    """Write one formatted replica directory with `kraft.storage`; returns its root."""
    root.mkdir(parents=True, exist_ok=True)
    write_meta_properties(root, MetaProperties(CLUSTER_ID, node_id, directory_id(node_id)))
    pdir = partition_dir(root)
    pdir.mkdir(exist_ok=True)
    write_partition_metadata(pdir)
    log = SegmentedLog.open(pdir, segment_bytes=segment_bytes)
    try:
        for b in batches:
            log.append(b)
        log.flush()
        if log_start_offset is not None:
            log.advance_log_start_offset(log_start_offset)
    finally:
        log.close()
    store = SnapshotStore(pdir)
    for sid, snap in snapshots:
        store.write(sid, snap)
    if quorum_state is not None:
        QuorumStateStore(pdir).write(quorum_state)
    return root


@dataclass
class Scenario:
    """What `write_scenario` wrote, and what an audit must find in it (nothing else).

    - node-1: the current leader (epoch 6); its last batch is not replicated yet
      (`uncommitted_end - high_watermark` records above the high watermark).
    - node-2: a bit flipped inside one batch of a middle segment (`flipped_*`); its log
      starts at the snapshot it took (`snapshot_id`), older segments deleted.
    - node-3: `diverged_offset`'s batch rewritten with other values, same epoch, valid CRC:
      the one committed divergence.
    - node-4: log cut in the middle of a batch (`truncated_*`): a torn tail.
    - node-5: leader of epoch 3, deposed; its last `stale_records` records from offset
      `stale_offset` (epoch 3) were never replicated: an uncommitted divergence.
    """

    root: Path
    replicas: dict[str, Path]
    high_watermark: int
    uncommitted_end: int
    diverged_offset: int
    diverged_epoch: int
    flipped_file: Path
    flipped_position: int
    flipped_base_offset: int
    truncated_file: Path
    truncated_position: int
    stale_offset: int
    stale_records: int
    stale_epoch: int
    next_epoch_at_stale: int
    snapshot_id: SnapshotId
    epochs: dict[int, int]
    voter_sets: list[list[int]]


def _segment_holding(pdir: Path, offset: int) -> tuple[Path, int, int]:
    """(segment file, byte position, base offset) of the batch containing `offset`."""
    for seg in sorted(pdir.glob("*.log")):
        data = seg.read_bytes()
        for b in iter_batches(data):
            if b.base_offset <= offset <= b.last_offset:
                return seg, b.position, b.base_offset
    raise LookupError(f"offset {offset} not found in {pdir}")


def write_scenario(root: Path | str, *, rounds: int = 8, batch_records: int = 20) -> Scenario:
    """Write the five replicas of `Scenario` under `root` (node-1 ... node-5)."""
    root = Path(root)
    h = History()
    epochs: dict[int, int] = {}
    voter_sets = [[1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 5]]

    def epoch_start(epoch: int, leader: int, voters: list[int], first: bool = False) -> None:
        epochs[epoch] = leader
        if first:
            h.clock_ms += 1_000
            lc = LeaderChangeMessage(leader, tuple(LeaderChangeVoter(v) for v in voters),
                                     tuple(LeaderChangeVoter(v) for v in voters[:2]))
            h.control(epoch, [lc, KRaftVersionRecord(1), voters_record(voters)])
        else:
            h.leader_change(epoch, leader, voters, gap_ms=40 * 60_000)

    def work(epoch: int, n: int) -> None:
        for _ in range(n):
            h.data(epoch, h.commands(batch_records), gap_ms=20_000)

    epoch_start(1, 1, voter_sets[0], first=True)
    work(1, rounds)
    h.control(1, [voters_record(voter_sets[1])])
    work(1, rounds)
    epoch_start(2, 2, voter_sets[1])
    work(2, rounds)
    h.control(2, [voters_record(voter_sets[2])])
    work(2, rounds)
    sid, snap = h.snapshot(2, voter_sets[2])
    epoch_start(3, 5, voter_sets[2])
    work(3, rounds)
    # node-5, leader of epoch 3, appends a batch nobody else receives, then is deposed.
    stale_offset = h.next_offset
    stale_values = h.commands(batch_records // 2)
    stale_batch = build_batch(stale_offset, 3, stale_values, h.clock_ms + 10_000)
    shared = [b.data for b in h.batches]
    epoch_start(4, 3, voter_sets[2])
    work(4, rounds)
    diverged = h.batches[-rounds // 2]
    epoch_start(6, 1, voter_sets[2])  # epoch 5 elected nobody
    work(6, rounds * 2)
    committed = [b.data for b in h.batches]
    hw = h.next_offset
    tail = build_batch(hw, 6, h.commands(batch_records // 4), h.clock_ms + 500)

    reps: dict[str, Path] = {}
    qs = QuorumStateData(leader_epoch=6, leader_id=1, voted_id=1)
    reps["node-1"] = write_replica(root / "node-1", 1, [*committed, tail], snapshots=[(sid, snap)],
                                   quorum_state=qs)
    reps["node-2"] = write_replica(root / "node-2", 2, committed, snapshots=[(sid, snap)],
                                   log_start_offset=sid.end_offset,
                                   quorum_state=QuorumStateData(6, 1, -1))
    altered = build_batch(diverged.base_offset, diverged.epoch,
                          [encode_put("user/9999", b"diverged")] * diverged.count,
                          diverged.timestamp_ms)
    node3 = [altered if b.base_offset == diverged.base_offset else b.data for b in h.batches]
    reps["node-3"] = write_replica(root / "node-3", 3, node3, snapshots=[(sid, snap)],
                                   quorum_state=QuorumStateData(6, 1, -1))
    reps["node-4"] = write_replica(root / "node-4", 4, committed,
                                   quorum_state=QuorumStateData(6, 1, -1))
    reps["node-5"] = write_replica(root / "node-5", 5, [*shared, stale_batch],
                                   quorum_state=QuorumStateData(3, 5, 5))

    # node-2: flip one bit in the first record of a batch of epoch 3 (a middle segment).
    flip_offset = h.batches[len(h.batches) * 5 // 8].base_offset + 1
    flipped_file, flipped_pos, flipped_base = _segment_holding(partition_dir(reps["node-2"]),
                                                               flip_offset)
    with open(flipped_file, "r+b") as f:
        f.seek(flipped_pos + 80)
        byte = f.read(1)[0]
        f.seek(flipped_pos + 80)
        f.write(bytes([byte ^ 0x04]))
    # node-4: cut the log in the middle of a batch about three quarters in.
    cut_offset = h.batches[len(h.batches) * 3 // 4].base_offset
    trunc_file, trunc_pos, _ = _segment_holding(partition_dir(reps["node-4"]), cut_offset)
    later = [p for p in sorted(partition_dir(reps["node-4"]).glob("*.log")) if p > trunc_file]
    for p in later:
        for suffix in (".log", ".index", ".timeindex"):
            p.with_suffix(suffix).unlink(missing_ok=True)
    os.truncate(trunc_file, trunc_pos + 40)

    return Scenario(
        root=root, replicas=reps, high_watermark=hw, uncommitted_end=hw + batch_records // 4,
        diverged_offset=diverged.base_offset, diverged_epoch=diverged.epoch,
        flipped_file=flipped_file, flipped_position=flipped_pos,
        flipped_base_offset=flipped_base, truncated_file=trunc_file,
        truncated_position=trunc_pos, stale_offset=stale_offset,
        stale_records=len(stale_values), stale_epoch=3, next_epoch_at_stale=4,
        snapshot_id=sid, epochs=epochs, voter_sets=voter_sets,
    )


def write_large_log(
    root: Path | str, size_bytes: int, *, segment_bytes: int = 128 * 1024 * 1024,
    batch_records: int = 100, value_bytes: int = 100, node_id: int = 1,
    voters: Sequence[int] = (1,),
) -> Path:
    """One replica whose log holds about `size_bytes` of KV PUT batches.

    The log is the same for every `node_id` given the same `voters` (node 1 leads epoch 1),
    so replicas written with each voter's id agree byte for byte, as a healthy quorum's do.
    """
    root = Path(root)
    rng = random.Random(1)
    payload = rng.randbytes(value_bytes)
    values = [encode_put(f"key/{i:06d}", payload) for i in range(batch_records)]

    def batches() -> Iterable[bytes]:
        ts = T0_MS
        ids = tuple(LeaderChangeVoter(v) for v in sorted(voters))
        lc = LeaderChangeMessage(1, ids, ids[: len(ids) // 2 + 1])
        first = build_control_batch(0, 1, ts, [lc, KRaftVersionRecord(1), voters_record(voters)])
        yield first
        offset, written = 3, len(first)
        # One encoded batch, re-based to each offset: the CRC does not cover the base offset.
        template = build_batch(0, 1, values, ts + 10)
        while written < size_bytes:
            yield rebase(template, offset)
            offset += batch_records
            written += len(template)

    return write_replica(root, node_id, batches(), segment_bytes=segment_bytes,
                         quorum_state=QuorumStateData(1, 1, 1))


def main(argv: list[str]) -> int:
    """`python -m kraft_pipeline.synthetic OUT`: write the demo scenario to OUT."""
    if len(argv) != 1:
        print("usage: python -m kraft_pipeline.synthetic OUT_DIR", file=sys.stderr)
        return 2
    s = write_scenario(argv[0])
    print(f"wrote {len(s.replicas)} replicas under {s.root}; high watermark {s.high_watermark}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
