"""The simulator's in-memory disk of one replica: a log, snapshots and the quorum-state.

Everything written is first volatile; `flush()` makes the current log durable (an fsync).
`crash()` drops what was not flushed; `wipe()` is a whole-disk loss. Truncation is durable at
once (Kafka flushes the truncation). Every entry carries a chain hash of the whole log prefix
ending with it, so comparing two hashes compares two complete histories.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field

from kraft.protocol.uuid import Uuid
from kraft.raft.config import LogState, QuorumStateData
from kraft.raft.messages import OffsetAndEpoch
from kraft.raft.records import scan_control
from kraft.raft.voters import VoterSet

# entry = (epoch, value, chain hash, is_control)
Entry = tuple[int, object, int, bool]


def chain_hash(prev: int, epoch: int, value: object) -> int:
    """Hash of a log prefix extended by one record.

    A digest of the values' repr, not Python's hash(): that one is salted per process for
    str and bytes, and the chain ends up in snapshot bytes and so in traces, which must be
    byte-identical from one run of a seed to the next.
    """
    digest = hashlib.blake2b(repr((prev, epoch, value)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True, slots=True)
class SimSnapshot:
    """A snapshot: its id, the history hash it stands for, and its control records' content."""

    snapshot_id: OffsetAndEpoch
    chain: int
    voters: VoterSet | None
    kraft_version: int
    data: bytes = field(default=b"", compare=False, repr=False)
    pad: int = field(default=0, compare=False, repr=False)
    """Filler bytes in the file (a large snapshot: many FetchSnapshot chunks)."""

    def __post_init__(self) -> None:
        if not self.data:
            # The file's bytes (the simulator's own format), made once: chunks are cut from it.
            payload: tuple[object, ...] = (self.snapshot_id.offset, self.snapshot_id.epoch,
                                           self.chain, self.voters, self.kraft_version)
            if self.pad:
                payload += (bytes(self.pad),)
            object.__setattr__(self, "data", pickle.dumps(payload))

    def to_bytes(self) -> bytes:
        """The snapshot file's bytes."""
        return self.data

    @staticmethod
    def from_bytes(data: bytes) -> SimSnapshot:
        """Parse a snapshot file written by `to_bytes`; raises on corrupt data."""
        offset, epoch, chain, voters, version, *filler = pickle.loads(data)
        pad = len(filler[0]) if filler else 0
        return SimSnapshot(OffsetAndEpoch(epoch, offset), chain, voters, version, bytes(data),
                           pad)


@dataclass(slots=True)
class SimDisk:
    """One replica's metadata log directory."""

    directory_id: Uuid
    start_offset: int = 0
    start_chain: int = 0
    entries: list[Entry] = field(default_factory=list)
    durable_len: int = 0
    quorum_state: QuorumStateData = field(default_factory=QuorumStateData)
    snapshots: dict[OffsetAndEpoch, SimSnapshot] = field(default_factory=dict)
    bootstrap_voters: VoterSet | None = None
    bootstrap_kraft_version: int = 0
    durable_start_offset: int = 0
    durable_start_chain: int = 0

    @property
    def end_offset(self) -> int:
        """Log end offset (volatile part included)."""
        return self.start_offset + len(self.entries)

    def chain_at(self, end_offset: int) -> int | None:
        """Hash of the prefix ending at `end_offset`, if this disk can tell."""
        if end_offset == self.start_offset:
            return self.start_chain
        i = end_offset - self.start_offset - 1
        if 0 <= i < len(self.entries):
            return self.entries[i][2]
        return None

    def last_chain(self) -> int:
        """Hash of the whole log."""
        return self.entries[-1][2] if self.entries else self.start_chain

    def append(self, epoch: int, value: object, is_control: bool) -> tuple[int, int]:
        """Append one record; returns (offset, chain hash)."""
        h = chain_hash(self.last_chain(), epoch, value)
        self.entries.append((epoch, value, h, is_control))
        return self.end_offset - 1, h

    def truncate(self, end_offset: int) -> None:
        """Remove records at or after `end_offset` (durably)."""
        keep = max(0, end_offset - self.start_offset)
        del self.entries[keep:]
        self.durable_len = min(self.durable_len, keep)

    def flush(self) -> int:
        """fsync: everything written so far is durable; returns the durable end offset."""
        self.durable_len = len(self.entries)
        self.durable_start_offset = self.start_offset
        self.durable_start_chain = self.start_chain
        return self.end_offset

    def crash(self) -> None:
        """Lose every write that was not flushed."""
        if self.start_offset != self.durable_start_offset:
            # A log-start move (snapshot install or deletion) is made durable with the snapshot.
            pass
        del self.entries[self.durable_len :]

    def advance_start(self, offset: int) -> None:
        """Delete records below `offset` (kept on disk by a snapshot ending there)."""
        n = offset - self.start_offset
        if n <= 0:
            return
        snap = next((s for s in self.snapshots.values() if s.snapshot_id.offset == offset), None)
        assert snap is not None, f"log start {offset} is not a snapshot boundary"
        del self.entries[:n]
        self.durable_len = max(0, self.durable_len - n)
        self.start_offset = offset
        self.start_chain = snap.chain

    def install(self, snap: SimSnapshot) -> None:
        """Replace the whole log by a snapshot."""
        self.snapshots = {snap.snapshot_id: snap}
        self.entries.clear()
        self.durable_len = 0
        self.start_offset = snap.snapshot_id.offset
        self.start_chain = snap.chain

    def load(self) -> LogState:
        """What a restarting replica reads from this disk."""
        epochs: list[tuple[int, int]] = []
        voters: list[tuple[int, VoterSet]] = []
        versions: list[tuple[int, int]] = []
        # The log continues from the snapshot at its start offset (if any); newer snapshots
        # are summaries of records that are still in the log.
        base = next(
            (s for s in self.snapshots.values() if s.snapshot_id.offset == self.start_offset), None
        )
        if base is not None and self.start_offset > 0:
            at = self.start_offset - 1
            if base.voters is not None:
                voters.append((at, base.voters))
            versions.append((at, base.kraft_version))
        else:
            if self.bootstrap_voters is not None:
                voters.append((-1, self.bootstrap_voters))
            versions.append((-1, self.bootstrap_kraft_version))
        for i, (epoch, value, _h, is_control) in enumerate(self.entries):
            offset = self.start_offset + i
            if not epochs or epochs[-1][0] != epoch:
                epochs.append((epoch, offset))
            if is_control:
                vs, kv = scan_control((value,))
                if vs is not None:
                    voters.append((offset, vs))
                if kv is not None:
                    versions.append((offset, kv))
        return LogState(
            quorum_state=self.quorum_state,
            log_start_offset=self.start_offset,
            log_end_offset=self.end_offset,
            epoch_cache=tuple(epochs),
            voters_history=tuple(voters),
            kraft_version_history=tuple(versions),
            snapshots=tuple((s.snapshot_id, len(s.to_bytes())) for s in self.snapshots.values()),
        )
