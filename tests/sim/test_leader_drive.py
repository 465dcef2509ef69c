"""A leader's lane doing the steady state's work and reporting it to its core
(`LeaderLaneReport`, `RaftCore.lend_parked`), the simulator run with the leaders' lanes
driving (`kraft.sim.leader_drive`, docs/native-lane.md, "How it is checked"), and the two invariants that
hold a leader's claims to the disks: every request answered once the faults end, and every
high watermark durable on a majority of the voters."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import kraft.lane.rules as lane_rules
import kraft.raft.replication as replication
import kraft.sim.leader_drive as leader_drive
from kraft.raft.core import RaftCore, RaftFatalError
from kraft.raft.effects import AppendCommitted, Committed, SendFetchResponse
from kraft.raft.events import Append, LeaderLaneReport, VoterFetched
from kraft.raft.leader import LeaderState, ParkedFetch
from kraft.raft.messages import FetchRequest, ReplicaKey
from kraft.raft.state import Role
from kraft.sim.cli import replay_command
from kraft.sim.cluster import run_seed
from kraft.sim.harness import CoreHarness, dir_id
from kraft.sim.params import SimParams


def leading() -> CoreHarness:
    """Replica 1 leading epoch 1 of voters 1-3, its epoch-start batch (0-2) committed by
    voter 2: a lease is given."""
    h = CoreHarness.leader()
    h.fetch_from(2, 3, h.epoch)
    assert h.core.high_watermark == 3 and h.core.leader_lease() is not None
    h.clear()
    return h


def key(replica: int) -> ReplicaKey:
    return ReplicaKey(replica, dir_id(replica))


def report(h: CoreHarness, **kw: object) -> LeaderLaneReport:
    """A report of epoch 1: by default one batch (3-4) appended and synced, voter 2 at 5 as
    of now, the high watermark at 5, and nothing handed over."""
    fields: dict[str, object] = {
        "epoch": 1, "appended": ((3, 4),), "appended_bytes": 2, "durable_end": 5,
        "high_watermark": 5, "voters": (VoterFetched(key(2), 5, h.now, h.now, 5),),
        "hw_advanced_ms": h.now, "writes_streaming": False, "pending": (), "parked": (),
        "armed": False,
    }
    fields.update(kw)
    return LeaderLaneReport(**fields)  # type: ignore[arg-type]


def voter_fetch(replica: int, offset: int, hw: int | None = -1) -> FetchRequest:
    return FetchRequest(replica_id=replica, replica_directory_id=dir_id(replica),
                        current_leader_epoch=1, fetch_offset=offset, last_fetched_epoch=1,
                        max_wait_ms=500, high_watermark=hw)


# ---------------------------------------------------------------- the core's side


def test_a_report_stands_for_the_fetches_appends_and_syncs_the_lane_took() -> None:
    h = leading()
    h.now += 50
    out = h.handle(report(h, pending=((7, 4),)))
    assert h.core.log.end_offset == 5 and h.core.log.persisted_end == 5
    assert h.core.high_watermark == 5
    assert h.of_type(Committed, out) == [Committed(5)]
    # the append the lane handed over unanswered is committed: the core answers it
    assert h.of_type(AppendCommitted, out) == [AppendCommitted(7, 0)]
    s = h.core.state
    assert isinstance(s, LeaderState)
    row = s.progress[key(2)]
    assert (row.end_offset, row.last_fetch_ms, row.last_caught_up_ms) == (5, h.now, h.now)
    # the lane wrote and answered: the core sends nothing of its own
    assert not h.of_type(SendFetchResponse, out)
    lease = h.core.leader_lease()
    assert lease is not None and (lease.log_end, lease.durable, lease.high_watermark) == (5, 5, 5)


def test_an_append_handed_over_uncommitted_is_answered_at_its_commit() -> None:
    h = leading()
    out = h.handle(report(h, appended=((3, 4), (5, 6)), durable_end=7, pending=((8, 6),)))
    assert not h.of_type(AppendCommitted, out)
    out = h.fetch_from(3, 7, 1)
    assert h.core.high_watermark == 7
    assert h.of_type(AppendCommitted, out) == [AppendCommitted(8, 0)]


def test_parked_fetches_handed_back_are_answered_by_the_core() -> None:
    h = leading()
    waiting = ParkedFetch(3, 900, voter_fetch(3, 5), h.now + 300)
    h.handle(report(h, parked=(waiting,)))
    out = h.advance(299)
    assert not [e for e in h.of_type(SendFetchResponse, out) if e.correlation_id == 900]
    out = h.advance(1)  # its deadline
    (answer,) = [e for e in h.of_type(SendFetchResponse, out) if e.correlation_id == 900]
    assert answer.destination == 3 and answer.read_offset is None
    assert answer.response.high_watermark == 5
    # and one handed back is completed by the next records, as the core's own are
    h.handle(report(h, appended=(), appended_bytes=0, voters=(), parked=(
        ParkedFetch(2, 901, voter_fetch(2, 5), h.now + 300),)))
    out = h.handle(Append(1, (b"v",), 1))
    (answer,) = [e for e in h.of_type(SendFetchResponse, out) if e.correlation_id == 901]
    assert answer.read_offset == 5


def test_the_core_lends_its_parked_fetches_to_the_lane() -> None:
    h = leading()
    h.fetch_from(2, 3, 1, high_watermark=3, correlation_id=77)  # nothing to read: parked
    lent = h.core.lend_parked()
    assert [(p.source, p.correlation_id) for p in lent] == [(2, 77)]
    out = h.advance(1000)  # past its deadline: the core no longer holds it
    assert not [e for e in h.of_type(SendFetchResponse, out) if e.correlation_id == 77]
    assert h.core.lend_parked() == []


def test_check_quorum_restarts_from_the_fetches_not_the_report() -> None:
    h = leading()
    s = h.core.state
    assert isinstance(s, LeaderState)
    fetched_at = h.now + 100
    h.now += 1000  # the report comes 900 ms after the fetch it carries
    h.handle(report(h, voters=(VoterFetched(key(2), 5, fetched_at, fetched_at, 5),)))
    assert s.check_quorum_deadline == fetched_at + 3 * h.config.fetch_timeout_ms // 2


def test_a_progress_report_runs_no_timer_until_the_next_event() -> None:
    h = leading()
    h.now += 10_000  # check-quorum's deadline has long passed, with no fetch counted
    out = h.handle(report(h, appended=(), appended_bytes=0, durable_end=3, high_watermark=3,
                          voters=(), armed=True))
    assert h.core.role is Role.LEADER and h.core.leader_lease() is not None and out == []
    h.handle(report(h, appended=(), appended_bytes=0, durable_end=3, high_watermark=3,
                    voters=()))  # the stop's report
    h.advance(1)
    assert h.core.role is not Role.LEADER  # the timer ran with the next event


@pytest.mark.parametrize(("why", "change"), [
    ("another epoch", {"epoch": 2}),
    ("a gap before the records", {"appended": ((4, 5),)}),
    ("a high watermark the rows do not give", {"high_watermark": 6}),
])
def test_a_report_outside_the_lease_is_fatal(why: str, change: dict[str, object]) -> None:
    h = leading()
    with pytest.raises(RaftFatalError):
        h.handle(report(h, **change))


def test_a_leader_report_to_a_follower_is_fatal() -> None:
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=1)
    with pytest.raises(RaftFatalError, match="leader lane"):
        h.handle(report(h, appended=(), voters=(), high_watermark=None))


# ---------------------------------------------------------------- in the simulator


def test_the_leaders_lanes_drive_under_the_simulators_faults() -> None:
    totals: dict[str, int] = {}
    for seed, nodes in [(s, 3) for s in range(12)] + [(s, 5) for s in range(50, 54)]:
        r = run_seed(seed, SimParams(nodes=nodes, leader_drive=True))
        assert r.ok, r.violation
        for k, v in r.stats.items():
            totals[k] = totals.get(k, 0) + v
    stops = sum(v for k, v in totals.items() if k.startswith("leader_drive_stop_"))
    # the lanes take the steady state's fetches and appends, and answer commits themselves
    assert totals["leader_drive_fetches"] > 2 * stops > 0
    assert totals["leader_drive_appends"] > 0 and totals["leader_drive_committed"] > 0
    assert totals["leader_drive_progress"] > 0


def test_the_c_rules_drive_too_with_the_followers_lanes() -> None:
    if lane_rules.native() is None:
        pytest.skip("the native lane was not built")
    for seed in range(6):
        r = run_seed(seed, SimParams(leader_drive=True, lane_drive=True, lane_native=True))
        assert r.ok, r.violation
        assert r.stats["leader_drive_committed"] > 0 and r.stats["lane_drive_taken"] > 0


def test_a_leader_driven_seed_runs_the_same_twice() -> None:
    a = run_seed(7, SimParams(leader_drive=True))
    b = run_seed(7, SimParams(leader_drive=True))
    assert (a.steps, a.committed, a.sim_time_ms, a.stats) == (
        b.steps, b.committed, b.sim_time_ms, b.stats)


def test_a_failing_leader_driven_seed_replays_with_the_drive() -> None:
    assert replay_command(5, 3, False, False, True).endswith("--leader-drive --trace")


# ---------------------------------------------------------------- mutations


def _answer_at_append() -> Callable[..., bool]:
    original = leader_drive.LeaderDrive._append

    def append(self: leader_drive.LeaderDrive, n: object, a: object, ev: Append) -> bool:
        ok = original(self, n, a, ev)  # type: ignore[arg-type]
        if ok:  # answered as committed at once, before any voter has it
            last = a.pending.pop(ev.append_id)  # type: ignore[attr-defined]
            disk = n.disk  # type: ignore[attr-defined]
            self._sim.inv.on_commit(n.node_id, last + 1, disk.chain_at(last + 1),  # type: ignore[attr-defined]
                                    a.epoch)  # type: ignore[attr-defined]
            self._sim.append_committed(ev.append_id)
        return ok
    return append


def _durable_at_append() -> Callable[..., bool]:
    original = leader_drive.LeaderDrive._append

    def append(self: leader_drive.LeaderDrive, n: object, a: object, ev: Append) -> bool:
        ok = original(self, n, a, ev)  # type: ignore[arg-type]
        if ok:  # the leader's own records counted before its sync
            self._persisted(n, a, n.disk.end_offset)  # type: ignore[arg-type, attr-defined]
        return ok
    return append


def _report_without(field: str) -> Callable[..., None]:
    original = leader_drive.LeaderDrive._report

    def report_(self: leader_drive.LeaderDrive, n: object, a: object, armed: bool) -> None:
        getattr(a, field).clear()
        original(self, n, a, armed)  # type: ignore[arg-type]
    return report_


def _parked_dropped(core: RaftCore, s: LeaderState, hw_moved_only: bool) -> None:
    s.parked = [p for p in s.parked if hw_moved_only and p.request.high_watermark is None]


@pytest.fixture
def mutate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def apply(which: str) -> None:
        if which == "append answered before its commit":
            monkeypatch.setattr(leader_drive.LeaderDrive, "_append", _answer_at_append())
        elif which == "own records counted before the sync":
            monkeypatch.setattr(leader_drive.LeaderDrive, "_append", _durable_at_append())
        elif which == "report no appended records":
            monkeypatch.setattr(leader_drive.LeaderDrive, "_report", _report_without("appended"))
        elif which == "parked fetches lost on a stop":
            monkeypatch.setattr(leader_drive.LeaderDrive, "_report", _report_without("parked"))
        else:  # pragma: no cover
            raise AssertionError(which)
    yield apply


@pytest.mark.parametrize(("which", "expect"), [
    ("append answered before its commit", ""),
    ("own records counted before the sync", "committed_durable_majority"),
    ("report no appended records", "leader-drive"),
    ("parked fetches lost on a stop", "request_answered"),
])
def test_a_broken_leader_drive_is_caught(mutate: Callable[[str], None], which: str,
                                         expect: str) -> None:
    mutate(which)
    for seed in range(30):
        r = run_seed(seed, SimParams(leader_drive=True))
        if not r.ok:
            assert r.violation is not None and expect in r.violation
            return
    pytest.fail(f"{which}: not caught in seeds 0-29")


def test_the_new_invariants_catch_the_core_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # a core that drops its parked fetches instead of answering them
    monkeypatch.setattr(replication, "complete_parked", _parked_dropped)
    for seed in range(30):
        r = run_seed(seed, SimParams())
        if not r.ok:
            assert r.violation is not None and "request_answered" in r.violation
            break
    else:
        pytest.fail("dropped parked fetches: not caught in seeds 0-29")
    monkeypatch.undo()
    # a core that counts its own records durable when it appends them
    original = replication.on_append

    def on_append(core: RaftCore, ev: Append) -> None:
        original(core, ev)
        replication.on_persisted(core, core.log.end_offset)
    monkeypatch.setattr(replication, "on_append", on_append)
    for seed in range(30):
        r = run_seed(seed, SimParams(lane_shadow=False))  # the lane's check would see it first
        if not r.ok:
            assert r.violation is not None and "committed_durable_majority" in r.violation
            return
    pytest.fail("own records counted before the sync: not caught in seeds 0-29")
