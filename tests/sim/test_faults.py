"""The simulator's byte and disk faults (`kraft.sim.faults`): partial reads, short writes and
fsync errors. Each runs seeds under the invariant checker, and each is shown injected and
handled: a frame in pieces is acted on only when whole (and dropped with its connection), a
torn tail is truncated on restart, and a failed fsync never becomes an acknowledgement (while
the unsafe policy that ignores it is caught by the checker)."""

from __future__ import annotations

import pytest

from kraft.raft.events import RequestReceived
from kraft.raft.messages import VoteRequest
from kraft.sim.cluster import _FLUSH, PIECE, SimResult, Simulation, run_seed
from kraft.sim.disk import SimDisk
from kraft.sim.faults import FaultModel, TornRecord, recover_log
from kraft.sim.harness import dir_id
from kraft.sim.params import SimFaults, SimParams


def _run(seeds: range, faults: SimFaults, **kw: object) -> tuple[list[SimResult], dict[str, int]]:
    results = [run_seed(s, SimParams(faults=faults, **kw)) for s in seeds]  # type: ignore[arg-type]
    failed = [f"seed {r.seed}: {r.violation}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    assert all(r.checks > 0 and r.committed > 0 for r in results)
    totals: dict[str, int] = {}
    for r in results:
        for k, v in r.stats.items():
            totals[k] = totals.get(k, 0) + v
    return results, totals


# ---------------------------------------------------------------- off unless asked for


def test_no_faults_leave_a_run_as_it_was() -> None:
    plain: list[str] = []
    zero: list[str] = []
    run_seed(42, SimParams(), plain.append)
    run_seed(42, SimParams(faults=SimFaults()), zero.append)
    assert plain == zero and len(plain) > 500


def test_a_seed_with_faults_reproduces_its_run() -> None:
    faults = SimFaults(partial_reads=0.3, short_writes=0.01, fsync_errors=0.01)
    first: list[str] = []
    second: list[str] = []
    run_seed(7, SimParams(faults=faults), first.append)
    run_seed(7, SimParams(faults=faults), second.append)
    assert first == second
    plain: list[str] = []
    run_seed(7, SimParams(), plain.append)
    assert first != plain


def test_parse_names_the_unknown_fault() -> None:
    assert SimFaults.parse("all", 0.1) == SimFaults(0.1, 0.1, 0.1)
    assert SimFaults.parse("short-writes") == SimFaults(short_writes=0.05)
    with pytest.raises(ValueError, match="unknown fault 'torn-reads'"):
        SimFaults.parse("partial-reads,torn-reads")
    with pytest.raises(ValueError, match="fsync_errors=2"):
        SimFaults(fsync_errors=2)


# ---------------------------------------------------------------- partial reads


def test_seeds_with_partial_reads() -> None:
    _, totals = _run(range(300, 315), SimFaults(partial_reads=0.3))
    assert totals["frames_in_pieces"] > 1000


def test_a_frame_in_pieces_is_acted_on_only_when_whole() -> None:
    sim = Simulation(5, SimParams(dynamic=True, faults=SimFaults(partial_reads=1.0)))
    model = sim.faults
    assert isinstance(model, FaultModel)
    sim._queue.clear()
    event = RequestReceived(1, 77, VoteRequest(9, 1, dir_id(1), 2, dir_id(2), 0, 0, True))
    assert model.send(1, 2, event)
    pieces = sorted(item for item in sim._queue if item[2] == PIECE)
    assert len(pieces) >= 2
    got = [model.piece(2, payload) for _at, _seq, _kind, _node, payload, _inc in pieces]
    assert got[:-1] == [[]] * (len(pieces) - 1)  # nothing before the last byte
    assert got[-1] == [event]


def test_a_partial_frame_is_dropped_with_its_connection() -> None:
    sim = Simulation(5, SimParams(dynamic=True, faults=SimFaults(partial_reads=1.0)))
    model = sim.faults
    assert isinstance(model, FaultModel)
    sim._queue.clear()
    event = RequestReceived(1, 78, VoteRequest(9, 1, dir_id(1), 2, dir_id(2), 0, 0, True))
    model.send(1, 2, event)
    pieces = sorted(item for item in sim._queue if item[2] == PIECE)
    assert model.piece(2, pieces[0][4]) == []
    sim.crash(sim.nodes[1])  # the sender dies with its frame half sent
    assert [model.piece(2, p[4]) for p in pieces[1:]] == [[]] * (len(pieces) - 1)
    assert sim.stats["partial_frames_dropped"] == 1


# ---------------------------------------------------------------- short writes


def test_seeds_with_short_writes() -> None:
    _, totals = _run(range(400, 415), SimFaults(short_writes=0.01))
    assert totals["torn_tails"] > 10
    assert totals["torn_tails_truncated"] == totals["torn_tails"]


def test_a_torn_tail_is_truncated_on_restart() -> None:
    sim = Simulation(3, SimParams(dynamic=True, faults=SimFaults(short_writes=1.0)))
    model = sim.faults
    assert isinstance(model, FaultModel)
    node = sim.nodes[2]
    disk = node.disk
    base = disk.end_offset
    for v in range(5):
        disk.append(1, 1000 + v, False)
    disk.flush()
    for v in range(5, 10):
        disk.append(1, 1000 + v, False)  # never synced
    model._torn_next = True  # the crash comes in the middle of a write
    sim.crash(node)
    torn = [e for e in disk.entries if isinstance(e[1], TornRecord)]
    assert len(torn) == 1 and disk.entries[-1] is torn[0]
    kept = disk.end_offset - 1
    assert base + 5 <= kept < base + 10
    sim.start_node(node)
    assert not any(isinstance(e[1], TornRecord) for e in disk.entries)
    assert disk.end_offset == kept  # the whole records before it stay
    assert node.core is not None and node.core.log.end_offset == kept
    assert sim.stats["torn_tails_truncated"] == 1


def test_recovery_truncates_at_the_first_bad_checksum() -> None:
    disk = SimDisk(dir_id(1))
    for v in range(6):
        disk.append(1, v, False)
    assert recover_log(disk) is None and disk.end_offset == 6
    epoch, _value, h, ctl = disk.entries[3]
    disk.entries[3] = (epoch, 99, h, ctl)  # a record whose bytes changed: its CRC fails
    assert recover_log(disk) == 3
    assert disk.end_offset == 3


# ---------------------------------------------------------------- fsync errors


def test_seeds_with_fsync_errors() -> None:
    _, totals = _run(range(500, 515), SimFaults(fsync_errors=0.01))
    assert totals["fsync_errors"] > 10


def test_a_failed_fsync_stops_the_node_unacknowledged() -> None:
    sim = Simulation(3, SimParams(dynamic=True, faults=SimFaults(fsync_errors=1.0)))
    node = sim.nodes[2]
    disk = node.disk
    durable = disk.end_offset
    disk.append(1, 2000, False)
    incarnation = node.incarnation
    sim.now = 1
    sim._step(_FLUSH, node.node_id, None, incarnation)  # the flush is due
    assert node.core is None  # fail-stop, as the node does
    assert disk.end_offset == durable and disk.durable_len == durable - disk.start_offset
    assert node.acked_end <= durable
    assert sim.stats["fsync_errors"] == 1


def test_ignoring_fsync_errors_is_caught_by_the_checker() -> None:
    """The unsafe policy (retry, trust the page cache) acknowledges writes a crash loses."""
    results = [run_seed(s, SimParams(faults=SimFaults(fsync_errors=0.2, fsync_policy="retry")))
               for s in range(600, 610)]
    caught = [r for r in results if r.violation is not None
              and r.violation.startswith("acknowledged_committed_lost")]
    assert caught, [r.violation for r in results]
    assert sum(r.stats.get("fsync_pages_lost", 0) for r in results) > 0


def test_seeds_with_fsync_errors_in_the_lanes() -> None:
    """The lanes' syncs fail too, and stop the node as the core's do."""
    _, totals = _run(range(800, 808), SimFaults(fsync_errors=0.01), lane_drive=True,
                     leader_drive=True)
    assert totals["lane_fsync_errors"] > 0


def test_all_faults_with_the_lanes_driving() -> None:
    faults = SimFaults(partial_reads=0.3, short_writes=0.01, fsync_errors=0.01)
    _run(range(700, 706), faults, lane_drive=True, leader_drive=True)
