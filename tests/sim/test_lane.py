"""The native lane's rules (`kraft.lane.rules`), the lease a core gives (`RaftCore.leader_lease` /
`follower_lease`), and their check against the core in the simulator (`kraft.sim.lane_shadow`,
docs/native-lane.md step 1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

import kraft.lane.rules as lane_rules
from kraft.lane import FollowerLane, LaneAnswer, LaneFetch, LeaderLane
from kraft.raft.events import Append
from kraft.raft.leader import LeaderState
from kraft.raft.lease import FollowerLease, LeaderLease, LeaseVoter
from kraft.raft.messages import FetchedBatch, FetchRequest, ReplicaKey
from kraft.sim.cluster import run_seed
from kraft.sim.harness import CoreHarness, dir_id
from kraft.sim.params import SimParams


def leader_lane(**kw: Any) -> LeaderLane:
    """Leader 1 of epoch 3 (its LeaderChange at 10), voters 2 and 3 at 12, log end 15, durable
    14, high watermark 12."""
    fields: dict[str, Any] = {"epoch": 3, "epoch_start": 10, "log_start": 0, "log_end": 15,
                              "durable": 14, "high_watermark": 12}
    fields.update(kw)
    voters = [LeaseVoter(1, None, True), LeaseVoter(2, ReplicaKey(2, dir_id(2)), False, 12),
              LeaseVoter(3, ReplicaKey(3, dir_id(3)), False, 12)]
    return LeaderLane(voters=voters, **fields)


def fetch(lane: LeaderLane, replica: int = 2, offset: int = 15, last_epoch: int = 3,
          epoch: int = 3, directory: Any = "own", max_wait_ms: int = 500) -> LaneFetch | None:
    d = dir_id(replica) if directory == "own" else directory
    return lane.fetch(replica, d, offset, last_epoch, epoch, max_wait_ms)


# ---------------------------------------------------------------- the leader's rules


def test_a_voters_fetch_at_the_tail_counts_and_moves_the_high_watermark() -> None:
    lane = leader_lane()
    assert fetch(lane, offset=14) == LaneFetch(14, 14)  # leader durable 14, voter 2 at 14
    assert fetch(lane, replica=3, offset=15) == LaneFetch(14, None)  # 15 needs the leader's sync
    lane.persisted(15)
    assert lane.high_watermark == 15


def test_the_leader_counts_only_its_durable_end() -> None:
    lane = leader_lane(durable=12)
    assert fetch(lane, offset=15) == LaneFetch(12, None)  # 2 at 15, 3 at 12, leader 12
    assert fetch(lane, replica=3, offset=15) == LaneFetch(15, None)
    lane.persisted(99)  # more than the log holds counts as the log's end
    assert lane.durable == 15


@pytest.mark.parametrize(("why", "kw"), [
    ("another leader epoch", {"epoch": 4}),
    ("a last fetched epoch other than the lease's", {"last_epoch": 2}),
    ("an offset at the epoch's start", {"offset": 10}),
    ("an offset past the log", {"offset": 16}),
    ("an observer", {"replica": 4}),
    ("the leader's own id", {"replica": 1}),
    ("another directory of the voter", {"directory": dir_id(2, 1)}),
    ("no directory where the voter has one", {"directory": None}),
    ("a voter going back", {"offset": 11}),
    ("a malformed wait", {"max_wait_ms": -1}),
])
def test_the_leader_hands_over_anything_outside_the_lease(why: str, kw: dict[str, Any]) -> None:
    lane = leader_lane()
    assert fetch(lane, **kw) is None, why
    assert [v.matched for v in lane.voters] == [-1, 12, 12]
    assert lane.high_watermark == 12


def test_the_lease_starts_above_the_log_start() -> None:
    lane = leader_lane(log_start=13)
    assert fetch(lane, offset=13) is None
    assert fetch(lane, offset=14) == LaneFetch(14, 14)


def test_a_voter_of_a_set_without_directory_ids_counts_for_the_replica_the_core_counts() -> None:
    voters = [LeaseVoter(1, None, True), LeaseVoter(2, ReplicaKey(2, None), False, 12),
              LeaseVoter(3, None, False, -1)]  # 3 not heard from: no replica to count yet
    lane = LeaderLane(3, 10, 0, 15, 15, 12, voters)
    assert lane.fetch(2, None, 15, 3, 3, 500) == LaneFetch(15, None)
    assert lane.fetch(3, None, 15, 3, 3, 500) is None


def test_appends_continue_the_tail_in_the_lease_epoch_only() -> None:
    lane = leader_lane()
    assert lane.appended(15, 17, 3)
    assert lane.log_end == 18
    assert not lane.appended(19, 19, 3)  # a gap
    assert not lane.appended(18, 18, 4)  # another epoch
    assert lane.log_end == 18


def test_the_high_watermark_never_moves_back() -> None:
    lane = leader_lane(high_watermark=14)
    assert fetch(lane, offset=13) == LaneFetch(14, 13)  # majority 13 < 14


# ---------------------------------------------------------------- the follower's rules


def batches(*spans: tuple[int, int, int]) -> tuple[FetchedBatch, ...]:
    return tuple(FetchedBatch(b, last, e) for b, last, e in spans)


def answer(lane: FollowerLane, corr: int = 7, error: int = 0, leader: int = 2, epoch: int = 3,
           hw: int = 20, diverging: bool = False, snapshot: bool = False,
           got: tuple[FetchedBatch, ...] = ()) -> LaneAnswer | None:
    return lane.answer(corr, error, leader, epoch, hw, diverging, snapshot, got)


def test_a_plain_answer_is_appended_and_its_high_watermark_taken_up_to_the_log_end() -> None:
    lane = FollowerLane(3, 2, 7, 15, 12)
    assert lane.leader_high_watermark is None
    assert answer(lane, got=batches((15, 16, 3), (17, 17, 3))) == LaneAnswer((15, 17), 18)
    assert lane.log_end == 18 and lane.high_watermark == 18  # min(20, 18)
    assert lane.leader_high_watermark == 20  # the leader's own, not capped: readiness reads it
    assert answer(lane) is None  # that fetch is answered: a second answer to it is not taken


def test_an_answer_without_records_moves_only_the_high_watermark_and_never_back() -> None:
    lane = FollowerLane(3, 2, 7, 15, 14)
    assert answer(lane, hw=13) == LaneAnswer(None, 14)
    assert lane.leader_high_watermark == 13
    lane.fetch_correlation = 8
    assert answer(lane, corr=8, hw=-1) == LaneAnswer(None, 14)
    assert lane.leader_high_watermark == 13  # an answer without one leaves the last


@pytest.mark.parametrize(("why", "kw"), [
    ("a late or duplicated answer", {"corr": 6}),
    ("an error", {"error": 6}),
    ("another leader", {"leader": 3}),
    ("another epoch", {"epoch": 4}),
    ("a divergence", {"diverging": True}),
    ("a snapshot id", {"snapshot": True}),
    ("records that do not start at the log end", {"got": batches((16, 16, 3))}),
    ("a gap between batches", {"got": batches((15, 15, 3), (17, 17, 3))}),
    ("records of an older epoch", {"got": batches((15, 15, 2))}),
    ("a control batch", {"got": (FetchedBatch(15, 15, 3, is_control=True),)}),
])
def test_the_follower_hands_over_anything_outside_the_lease(why: str, kw: dict[str, Any]) -> None:
    lane = FollowerLane(3, 2, 7, 15, 12)
    assert answer(lane, **kw) is None, why
    assert (lane.log_end, lane.high_watermark, lane.fetch_correlation) == (15, 12, 7)


# ---------------------------------------------------------------- the lease a core gives


def test_a_new_leader_arms_no_lane_until_its_epoch_start_commits() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    assert h.core.leader_lease() is None  # LeaderChange not committed
    end = h.log_end
    h.fetch_from(2, end, h.epoch, max_wait_ms=0)
    lane = h.core.leader_lease()
    assert lane is not None
    assert (lane.epoch, lane.log_end, lane.high_watermark) == (h.epoch, end, end)
    assert [(v.id, v.is_leader, v.matched) for v in lane.voters] == [
        (1, True, -1), (2, False, end), (3, False, -1)]
    assert h.core.follower_lease() is None


def test_the_lease_is_plain_data_and_the_lane_built_from_it_keeps_its_own_rows() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    end = h.log_end
    h.fetch_from(2, end, h.epoch, max_wait_ms=0)
    lease = h.core.leader_lease()
    assert isinstance(lease, LeaderLease)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lease.voters[1].matched = 0  # type: ignore[misc]
    lane = LeaderLane.from_lease(lease)
    h.handle(Append(0, ("v",)))
    assert lane.appended(end, end, h.epoch)
    h.persist()
    lane.persisted(end + 1)
    assert lane.fetch(3, dir_id(3), end + 1, h.epoch, h.epoch, 0) is not None
    assert [v.matched for v in lane.voters] == [-1, end, end + 1]
    assert [v.matched for v in lease.voters] == [-1, end, -1]  # the core's lease is unchanged
    # one definition of a voter's row: the lane's rows are the lease's type
    assert all(type(v) is LeaseVoter for v in lane.voters)
    follower = CoreHarness.follower(node_id=1, leader_id=2, epoch=1)
    follower.advance(1)
    flease = follower.core.follower_lease()
    assert isinstance(flease, FollowerLease)
    assert FollowerLane.from_lease(flease).fetch_correlation == flease.fetch_correlation


def test_a_leader_with_a_voter_change_pending_arms_no_lane() -> None:
    from kraft.raft.messages import RemoveRaftVoterRequest

    h = CoreHarness.leader(voters=(1, 2, 3))
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    assert h.core.leader_lease() is not None
    h.request(99, RemoveRaftVoterRequest(3, dir_id(3)))
    s = h.core.state
    assert isinstance(s, LeaderState) and s.pending_change is not None
    assert h.core.leader_lease() is None


def test_the_lease_agrees_with_the_core_on_a_run_of_writes() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
    for n in range(5):
        lease = h.core.leader_lease()
        assert lease is not None
        lane = LeaderLane.from_lease(lease)
        h.handle(Append(n, (f"v{n}",)))
        assert lane.appended(lane.log_end, lane.log_end, h.epoch)
        h.persist()
        lane.persisted(h.log_end)
        decision = lane.fetch(2, dir_id(2), h.log_end, h.epoch, h.epoch, 0)
        h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0)
        assert decision is not None
        assert decision.high_watermark == h.core.high_watermark == h.log_end


def test_a_follower_arms_its_lane_with_the_fetch_in_flight() -> None:
    h = CoreHarness.follower(node_id=1, leader_id=2, epoch=1)
    h.advance(1)
    sent = h.sent(FetchRequest)
    assert sent
    lane = h.core.follower_lease()
    assert lane is not None
    assert (lane.epoch, lane.leader_id, lane.fetch_correlation) == (
        1, 2, sent[-1].correlation_id)
    assert h.core.leader_lease() is None


# ---------------------------------------------------------------- in the simulator


def test_the_lanes_agree_with_the_cores_under_the_simulators_faults() -> None:
    handled = handed_over = 0
    for seed in range(0, 12):
        r = run_seed(seed)
        assert r.ok, r.violation
        handled += r.stats["lane_handled"]
        handed_over += r.stats["lane_handed_over"]
    for seed in range(50, 54):
        r = run_seed(seed, SimParams(nodes=5))
        assert r.ok, r.violation
        handled += r.stats["lane_handled"]
    # the lanes take most of the steady state (about 89 % of the events of their kinds in
    # seeds 0-39), so the check covers the path, not only its edges
    assert handled > 4 * handed_over > 0


def test_without_the_shadow_a_seed_runs_the_same() -> None:
    a, b = run_seed(3), run_seed(3, SimParams(lane_shadow=False))
    assert (a.steps, a.committed, a.sim_time_ms) == (b.steps, b.committed, b.sim_time_ms)
    assert "lane_handled" in a.stats and "lane_handled" not in b.stats


def _caught(seeds: range) -> str | None:
    for seed in seeds:
        r = run_seed(seed)
        if not r.ok:
            return r.violation
    return None


def _mutations() -> dict[str, Callable[[pytest.MonkeyPatch], None]]:
    def minority(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(lane_rules, "majority_offset", lambda offs: max(offs, default=-1))

    def any_last_epoch(mp: pytest.MonkeyPatch) -> None:
        original = LeaderLane.fetch
        mp.setattr(LeaderLane, "fetch", lambda self, r, d, o, lfe, cle, w:
                   original(self, r, d, o, self.epoch, cle, w))

    def unsynced_leader(mp: pytest.MonkeyPatch) -> None:
        def advance(self: LeaderLane) -> None:
            offsets = [self.log_end if v.is_leader else v.matched for v in self.voters]
            self.high_watermark = lane_rules.next_high_watermark(
                self.high_watermark, lane_rules.majority_offset(offsets), self.epoch_start)
        mp.setattr(LeaderLane, "_advance", advance)

    def past_a_divergence(mp: pytest.MonkeyPatch) -> None:
        original = FollowerLane.answer
        mp.setattr(FollowerLane, "answer", lambda self, c, e, lid, le, hw, dv, sn, b:
                   original(self, c, e, lid, le, hw, False, False, b))

    def late_answers(mp: pytest.MonkeyPatch) -> None:
        original = FollowerLane.answer

        def any_answer(self: FollowerLane, corr: int, *rest: Any) -> LaneAnswer | None:
            self.fetch_correlation = corr
            return original(self, corr, *rest)
        mp.setattr(FollowerLane, "answer", any_answer)

    return {"the high watermark on a minority": minority,
            "a fetch of any last epoch counted": any_last_epoch,
            "the leader counting its unsynced end": unsynced_leader,
            "a follower appending past a divergence": past_a_divergence,
            "a follower taking late answers": late_answers}


@pytest.mark.parametrize("mutation", list(_mutations()))
def test_a_broken_lane_rule_is_caught(mutation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _mutations()[mutation](monkeypatch)
    v = _caught(range(0, 30))
    assert v is not None and v.startswith("lane:"), v


def test_the_command_line_leaves_the_lane_out_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    from kraft.sim.cli import main

    assert main(["--seeds", "2"]) == 0
    with_lane = capsys.readouterr().out
    assert main(["--seeds", "2", "--no-lane-shadow"]) == 0
    without = capsys.readouterr().out
    assert "lane_handled=" in with_lane and "lane_handled=" not in without
    # the same seeds, the same runs
    assert with_lane.split(" seconds=")[0] == without.split(" seconds=")[0]
