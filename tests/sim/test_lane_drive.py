"""A follower's lane doing the steady state's work and reporting it to its core
(`FollowerLaneReport`, `FetchAdopted`), and the simulator run with the followers' lanes
driving (`kraft.sim.lane_drive`, docs/native-lane.md, "How it is checked")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

import kraft.lane.rules as lane_rules
import kraft.sim.lane_drive as lane_drive
from kraft.raft.core import RaftFatalError
from kraft.raft.effects import AppendFetched, Committed, FetchAdopted, SendRequest
from kraft.raft.events import FollowerLaneReport, ResponseReceived
from kraft.raft.messages import FetchedBatch, FetchRequest, FetchResponse
from kraft.raft.state import Role
from kraft.sim.cli import replay_command
from kraft.sim.cluster import run_seed
from kraft.sim.harness import CoreHarness
from kraft.sim.params import SimParams


def following(**config: object) -> tuple[CoreHarness, SendRequest]:
    """Replica 1 following 2 in epoch 1, with its first fetch in flight."""
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=1, **config)
    h.advance(1)
    (sent,) = h.sent(FetchRequest)
    return h, sent


def report(h: CoreHarness, **kw: object) -> FollowerLaneReport:
    """A report of epoch 1 from leader 2: by default two batches (0 and 1-2), durable, the
    high watermark at 2, an answer taken now and the next fetch, at 3, sent now."""
    template = h.core.lane_fetch()
    assert template is not None
    fields: dict[str, object] = {
        "epoch": 1, "leader_id": 2, "appended": ((0, 0), (1, 2)), "appended_bytes": 3,
        "durable_end": 3, "high_watermark": 2, "answered_ms": h.now,
        "fetch": replace(template, fetch_offset=3, last_fetched_epoch=1, high_watermark=2),
        "fetch_sent_ms": h.now, "armed": False,
    }
    fields.update(kw)
    return FollowerLaneReport(**fields)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the core's side


def test_a_report_stands_for_the_answers_and_syncs_the_lane_took() -> None:
    h, sent = following()
    h.now += 100
    out = h.handle(report(h))
    assert h.log_end == 3 and h.core.log.persisted_end == 3
    assert h.core.high_watermark == 2
    assert h.of_type(Committed, out) == [Committed(2)]
    (adopted,) = h.of_type(FetchAdopted, out)
    assert adopted.correlation_id != sent.correlation_id
    # the lane wrote the records and sent the fetch: the core does neither again
    assert not h.of_type(AppendFetched, out) and not h.sent(FetchRequest, clear=False)[1:]
    lease = h.core.follower_lease()
    assert lease is not None
    assert (lease.fetch_correlation, lease.log_end, lease.high_watermark) == (
        adopted.correlation_id, 3, 2)
    # the adopted fetch's answer is the core's, under the id it adopted it with
    answer = FetchResponse(0, 2, 1, 4, 0,
                           batches=(FetchedBatch(3, 3, 1, payload=3),))
    out = h.handle(ResponseReceived(2, adopted.correlation_id, answer))
    assert [b.base_offset for e in h.of_type(AppendFetched, out) for b in e.batches] == [3]
    # the lane's own id means nothing to the core
    h.persist()
    before = h.log_end
    h.handle(ResponseReceived(2, sent.correlation_id, answer))
    assert h.log_end == before


def test_a_report_moves_the_fetch_timeout_only_with_an_answer_taken() -> None:
    h, _ = following()
    h.now += 1500
    h.handle(report(h))  # an answer taken at 1501: the timeout runs from there
    h.advance(1900)
    assert h.core.role is Role.FOLLOWER
    h.handle(report(h, appended=(), appended_bytes=0, answered_ms=None, durable_end=3,
                    fetch=h.core.lane_fetch()))
    h.advance(200)  # past 1501 + 2000 with no answer since
    assert h.core.role is not Role.FOLLOWER


def test_the_adopted_fetch_times_out_as_the_cores_own_do() -> None:
    h, _ = following(fetch_timeout_ms=10_000)  # the request's timeout comes first
    h.handle(report(h))
    h.sent(FetchRequest, clear=True)
    h.advance(h.config.request_timeout_ms + h.config.retry_backoff_ms + 1)
    assert h.sent(FetchRequest)  # the lane's fetch went unanswered: the core fetches again


def test_a_report_without_a_fetch_in_flight_lets_the_core_fetch() -> None:
    h, _ = following()
    h.sent(FetchRequest, clear=True)
    out = h.handle(report(h, fetch=None))
    assert not h.of_type(FetchAdopted, out)
    (fetch,) = h.sent(FetchRequest)
    assert fetch.request.fetch_offset == 3


@pytest.mark.parametrize(("why", "change"), [
    ("another epoch", {"epoch": 2}),
    ("another leader", {"leader_id": 3}),
    ("records that do not continue the log", {"appended": ((1, 2),)}),
    ("a batch that ends before it starts", {"appended": ((0, -1),)}),
])
def test_a_report_outside_the_lease_is_fatal(why: str, change: dict[str, object]) -> None:
    h, _ = following()
    with pytest.raises(RaftFatalError):
        h.handle(report(h, **change))


def test_a_report_after_the_core_left_the_lease_is_fatal() -> None:
    h, _ = following()
    h.begin_quorum(3, 2)  # an event reached the core without the lane stopping first
    with pytest.raises(RaftFatalError, match="reached a follower of epoch 2"):
        h.handle(report(h))


# ---------------------------------------------------------------- in the simulator


def _stops(stats: dict[str, int]) -> int:
    return sum(v for k, v in stats.items() if k.startswith("lane_drive_stop_"))


def test_the_followers_lanes_drive_under_the_simulators_faults() -> None:
    taken = stops = progress = 0
    for seed in range(0, 12):
        r = run_seed(seed, SimParams(lane_drive=True))
        assert r.ok, r.violation
        taken += r.stats["lane_drive_taken"]
        stops += _stops(r.stats)
        progress += r.stats.get("lane_drive_progress", 0)
    for seed in range(50, 54):
        r = run_seed(seed, SimParams(nodes=5, lane_drive=True))
        assert r.ok, r.violation
        taken += r.stats["lane_drive_taken"]
    # the lanes take the steady state's answers, stopping on faults and handovers
    assert taken > 2 * stops > 0 and progress > 0


def test_the_c_lanes_drive_too() -> None:
    module = lane_rules.native()
    if module is None:
        pytest.skip("the native lane was not built")
    for seed in range(0, 6):
        r = run_seed(seed, SimParams(lane_drive=True, lane_native=True))
        assert r.ok, r.violation
        assert r.stats["lane_drive_taken"] > 0


def test_a_driven_seed_runs_the_same_twice() -> None:
    a = run_seed(7, SimParams(lane_drive=True))
    b = run_seed(7, SimParams(lane_drive=True))
    assert (a.steps, a.committed, a.sim_time_ms, a.stats) == (
        b.steps, b.committed, b.sim_time_ms, b.stats)


def test_a_failing_driven_seed_replays_with_the_drive() -> None:
    assert replay_command(5, 3, True, True).endswith("--native-lane --lane-drive --trace")


# ---------------------------------------------------------------- mutations


def _no_sync(self: lane_drive.FollowerDrive, n: object, a: object) -> None:
    a.durable = n.disk.end_offset  # type: ignore[attr-defined]
    a.sync_pending = False  # type: ignore[attr-defined]
    self._next_fetch(n, a)  # type: ignore[arg-type]


def _past_divergence() -> Callable[..., object]:
    original = lane_rules.FollowerLane.answer

    def answer(self: lane_rules.FollowerLane, corr: int, error: int, leader: int, epoch: int,
               hw: int, diverging: bool, snapshot: bool, batches: object) -> object:
        return original(self, corr, error, leader, epoch, hw, False, snapshot, batches)  # type: ignore[arg-type]
    return answer


def _drop_appended() -> Callable[..., None]:
    original = lane_drive.FollowerDrive._report

    def report_(self: lane_drive.FollowerDrive, n: object, a: object, armed: bool) -> None:
        a.appended.clear()  # type: ignore[attr-defined]
        original(self, n, a, armed)  # type: ignore[arg-type]
    return report_


@pytest.fixture
def mutate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def apply(which: str) -> None:
        if which == "acknowledge before the sync":
            monkeypatch.setattr(lane_drive.FollowerDrive, "_finish_sync", _no_sync)
        elif which == "append past a divergence":
            monkeypatch.setattr(lane_rules.FollowerLane, "answer", _past_divergence())
        elif which == "report no appended records":
            monkeypatch.setattr(lane_drive.FollowerDrive, "_report", _drop_appended())
        else:  # pragma: no cover
            raise AssertionError(which)
    yield apply


@pytest.mark.parametrize(("which", "expect"), [
    ("acknowledge before the sync", "committed_durable_majority"),
    ("append past a divergence", ""),
    ("report no appended records", "lane-drive"),
])
def test_a_broken_lane_drive_is_caught(mutate: Callable[[str], None], which: str,
                                       expect: str) -> None:
    mutate(which)
    for seed in range(30):
        r = run_seed(seed, SimParams(lane_drive=True))
        if not r.ok:
            assert r.violation is not None and expect in r.violation
            return
    pytest.fail(f"{which}: not caught in seeds 0-29")


def test_a_progress_report_runs_no_timer_until_the_next_event() -> None:
    h, _ = following()
    h.now += 10_000  # the fetch timeout has long passed
    out = h.handle(report(h, appended=(), appended_bytes=0, durable_end=0, high_watermark=None,
                          answered_ms=None, fetch=h.core.lane_fetch(), armed=True))
    # the lane runs on: the lease holds until the runtime stops it before the next event
    assert h.core.role is Role.FOLLOWER and h.core.follower_lease() is not None
    assert [type(e) for e in out] == [FetchAdopted]
    h.handle(report(h, appended=(), appended_bytes=0, durable_end=0, high_watermark=None,
                    answered_ms=None, fetch=h.core.lane_fetch()))  # the stop's report
    h.advance(1)
    assert h.core.role is not Role.FOLLOWER  # the timer ran with the next event
