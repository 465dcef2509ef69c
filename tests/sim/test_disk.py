"""The simulator's disk: durability on crash, and what a restarting replica loads."""

from __future__ import annotations

from kraft.protocol.uuid import Uuid
from kraft.raft.messages import OffsetAndEpoch
from kraft.raft.records import voters_record
from kraft.sim.disk import SimDisk, SimSnapshot
from kraft.sim.harness import voter_set


def test_crash_loses_only_unflushed_records() -> None:
    d = SimDisk(Uuid(bytes(range(16))))
    d.append(1, "a", False)
    d.append(1, "b", False)
    assert d.flush() == 2
    d.append(1, "c", False)
    d.crash()
    assert d.end_offset == 2


def test_truncation_is_durable_at_once() -> None:
    d = SimDisk(Uuid(bytes(range(16))))
    for v in "abc":
        d.append(1, v, False)
    d.flush()
    d.truncate(1)
    d.append(2, "x", False)
    d.crash()
    assert d.end_offset == 1


def test_load_takes_voters_from_the_snapshot_the_log_starts_at() -> None:
    # regression (seed 100367): a newer snapshot beyond the log start made the loader fall back
    # to the bootstrap checkpoint's voters set
    boot, current = voter_set((1, 2, 3)), voter_set((2, 3, 4))
    d = SimDisk(Uuid(bytes(range(16))), bootstrap_voters=boot, bootstrap_kraft_version=1)
    for i in range(10):
        d.append(1, i, False)
    d.snapshots[OffsetAndEpoch(1, 5)] = SimSnapshot(OffsetAndEpoch(1, 5), d.chain_at(5) or 0,
                                                    current, 1)
    d.advance_start(5)
    d.snapshots[OffsetAndEpoch(1, 8)] = SimSnapshot(OffsetAndEpoch(1, 8), d.chain_at(8) or 0,
                                                    current, 1)
    state = d.load()
    assert state.voters_history == ((4, current),)
    assert state.log_start_offset == 5 and state.log_end_offset == 10


def test_load_reads_voters_records_from_the_log() -> None:
    boot, later = voter_set((1, 2, 3)), voter_set((1, 2, 3, 4))
    d = SimDisk(Uuid(bytes(range(16))), bootstrap_voters=boot, bootstrap_kraft_version=1)
    d.append(1, "x", False)
    d.append(1, voters_record(later), True)
    state = d.load()
    assert state.voters_history == ((-1, boot), (1, later))
    assert state.epoch_cache == ((1, 0),)


def test_snapshot_bytes_round_trip() -> None:
    s = SimSnapshot(OffsetAndEpoch(3, 40), 1234, voter_set((1, 2)), 1)
    back = SimSnapshot.from_bytes(s.to_bytes())
    assert back == s and back.to_bytes() == s.to_bytes()
