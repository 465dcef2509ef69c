"""The lane's rules in C (`kraft.lane._native`) against the same rules in Python (`kraft.lane.rules`),
input for input, and in the simulator in their place (docs/native-lane.md, "How it is checked")."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.lane import FollowerLane, LeaderLane, native, rules, to_native
from kraft.protocol.uuid import Uuid
from kraft.raft.lease import LeaseVoter
from kraft.raft.messages import FetchedBatch, ReplicaKey
from kraft.sim.cli import main
from kraft.sim.cluster import run_seed
from kraft.sim.params import SimParams

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")

DIRS = [Uuid(bytes([i]) * 16) for i in range(1, 4)]
"""A few directory ids, so that fetches often name the voter's own and sometimes another."""


def leader_state(lane: Any) -> tuple[Any, ...]:
    matched = lane.matched if C is not None and isinstance(lane, C.LeaderLane) else tuple(
        v.matched for v in lane.voters)
    return (lane.epoch, lane.epoch_start, lane.log_start, lane.log_end, lane.durable,
            lane.high_watermark, matched)


def follower_state(lane: Any) -> tuple[Any, ...]:
    return (lane.epoch, lane.leader_id, lane.fetch_correlation, lane.log_end,
            lane.high_watermark, lane.leader_high_watermark)


small = st.integers(-2, 40)
epochs = st.integers(0, 4)
directory = st.sampled_from([None, *DIRS])


def mostly(data: st.DataObject, usual: Any, other: st.SearchStrategy[Any]) -> Any:
    """`usual` four times in five, else a draw of `other`: inputs stay near the steady state
    (where the lanes decide) and still stray from it (where they must hand over)."""
    return usual if data.draw(st.integers(0, 4)) else data.draw(other)


@st.composite
def leases(draw: st.DrawFn) -> LeaderLane:
    n = draw(st.integers(1, 6))
    leader_at = draw(st.integers(0, n - 1))
    epoch = draw(st.integers(1, 4))
    epoch_start = draw(st.integers(0, 20))
    log_end = epoch_start + draw(st.integers(1, 10))
    voters = []
    for i in range(n):
        vid = i + 1
        if i == leader_at:
            voters.append(LeaseVoter(vid, None, True))
            continue
        key = draw(st.one_of(st.none(), directory.map(lambda d, v=vid: ReplicaKey(v, d))))
        voters.append(LeaseVoter(vid, key, False, draw(st.integers(-1, log_end))))
    hw = draw(st.one_of(st.none(), st.integers(epoch_start + 1, log_end)))
    return LeaderLane(epoch, epoch_start, draw(st.integers(0, epoch_start + 1)), log_end,
                      draw(st.integers(epoch_start, log_end)), hw, voters)


def leader_input(data: st.DataObject, lane: LeaderLane) -> tuple[Any, ...]:
    op = data.draw(st.sampled_from(["fetch", "fetch", "fetch", "appended", "persisted"]))
    if op == "fetch":
        v = data.draw(st.sampled_from(lane.voters))
        rid = mostly(data, v.id, st.integers(0, 8))
        d = mostly(data, v.key.directory_id if v.key is not None else None, directory)
        off = data.draw(st.integers(lane.log_end - 3, lane.log_end + 1))
        return (op, rid, d, off, mostly(data, lane.epoch, epochs),
                mostly(data, lane.epoch, epochs), mostly(data, 500, st.integers(-1, 500)))
    if op == "appended":
        base = mostly(data, lane.log_end, small)
        return (op, base, base + data.draw(st.integers(-1, 3)), mostly(data, lane.epoch, epochs))
    return (op, data.draw(st.integers(lane.durable - 1, lane.log_end + 2)))


@settings(max_examples=400, deadline=None)
@given(leases(), st.data())
def test_the_leaders_rules_agree_input_for_input(lease: LeaderLane, data: st.DataObject) -> None:
    assert C is not None
    c_lane = to_native(lease, C)
    for _ in range(data.draw(st.integers(1, 30))):
        op, *args = leader_input(data, lease)
        assert getattr(c_lane, op)(*args) == getattr(lease, op)(*args), (op, args)
        assert leader_state(c_lane) == leader_state(lease), (op, args)


def answer_input(data: st.DataObject, lane: FollowerLane) -> tuple[Any, ...]:
    batches = []
    nxt = mostly(data, lane.log_end, small)
    for _ in range(data.draw(st.integers(0, 3))):
        last = nxt + mostly(data, 0, st.integers(-1, 2))
        batches.append(FetchedBatch(nxt, last, mostly(data, lane.epoch, epochs),
                                    mostly(data, False, st.booleans())))
        nxt = mostly(data, last + 1, small)
    return (mostly(data, lane.fetch_correlation, st.integers(0, 3)),
            mostly(data, 0, st.sampled_from([6, 74])),
            mostly(data, lane.leader_id, st.integers(1, 3)), mostly(data, lane.epoch, epochs),
            data.draw(st.integers(-1, lane.log_end + 4)), mostly(data, False, st.booleans()),
            mostly(data, False, st.booleans()), batches)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 3), small,
       st.one_of(st.none(), small), st.data())
def test_the_followers_rules_agree_input_for_input(epoch: int, leader: int, corr: int,
                                                   log_end: int, hw: int | None,
                                                   data: st.DataObject) -> None:
    assert C is not None
    lane = FollowerLane(epoch, leader, corr, log_end, hw)
    c_lane = to_native(lane, C)
    for _ in range(data.draw(st.integers(1, 30))):
        if not data.draw(st.integers(0, 3)):  # the next fetch is in flight
            lane.fetch_correlation = data.draw(st.integers(0, 3))
            c_lane.fetch_correlation = lane.fetch_correlation  # type: ignore[attr-defined]
            continue
        args = answer_input(data, lane)
        assert c_lane.answer(*args) == lane.answer(*args), args  # type: ignore[attr-defined]
        assert follower_state(c_lane) == follower_state(lane), args


def test_plain_steady_state_inputs_are_taken_by_both() -> None:
    # the differential tests above must not pass only on handovers: a hand-made steady state
    assert C is not None
    lease = LeaderLane(3, 10, 0, 15, 14, 12, [
        LeaseVoter(1, None, True), LeaseVoter(2, ReplicaKey(2, DIRS[0]), False, 12),
        LeaseVoter(3, ReplicaKey(3, None), False, 12)])
    c_lane = to_native(lease, C)
    for lane in (lease, c_lane):
        got = lane.fetch(2, DIRS[0], 14, 3, 3, 500)  # type: ignore[attr-defined]
        assert got == rules.LaneFetch(14, 14)
        assert lane.fetch(3, None, 15, 3, 3, 500) == rules.LaneFetch(14, None)  # type: ignore[attr-defined]
        lane.persisted(15)  # type: ignore[attr-defined]
        assert lane.high_watermark == 15  # type: ignore[attr-defined]
    f = FollowerLane(3, 2, 7, 15, 12)
    for lane in (f, to_native(f, C)):
        got = lane.answer(7, 0, 2, 3, 20, False, False,  # type: ignore[attr-defined]
                          [FetchedBatch(15, 16, 3)])
        assert got == rules.LaneAnswer((15, 16), 17)


@pytest.mark.parametrize(("args", "error", "text"), [
    ((3.5, 0, 0, 0, 0, None, []), TypeError, "epoch must be an int"),
    ((3, 0, 0, 0, 0, "1", []), TypeError, "high_watermark must be an int"),
    ((1 << 40, 0, 0, 0, 0, None, []), OverflowError, "epoch out of the int32 range"),
    ((3, 0, 0, 0, 0, None, 7), TypeError, "voters must be a sequence"),
    ((3, 0, 0, 0, 0, None, [object()]), AttributeError, "id"),
    ((3, 0, 0, 0, 0, None, [LeaseVoter(2, ReplicaKey(5, None), False)]), ValueError,
     "another replica id"),
    ((3, 0, 0, 0, 0, None, [LeaseVoter(i, None, False) for i in range(65)]), ValueError,
     "at most 64 voters"),
])
def test_a_bad_lease_is_refused_with_what_is_wrong(args: tuple[Any, ...], error: type,
                                                   text: str) -> None:
    assert C is not None
    with pytest.raises(error, match=text):
        C.LeaderLane(*args)


def test_a_bad_input_is_refused_with_what_is_wrong() -> None:
    assert C is not None
    lane = C.LeaderLane(3, 10, 0, 15, 14, 12, [LeaseVoter(1, None, True)])
    with pytest.raises(TypeError, match="fetch_offset must be an int"):
        lane.fetch(2, None, "15", 3, 3, 500)
    with pytest.raises(AttributeError):
        lane.fetch(2, "not a uuid", 15, 3, 3, 500)
    f = C.FollowerLane(3, 2, 7, 15, None)
    with pytest.raises(TypeError, match="batches must be a sequence"):
        f.answer(7, 0, 2, 3, 20, False, False, 5)
    with pytest.raises(AttributeError):
        f.answer(7, 0, 2, 3, 20, False, False, [object()])
    assert follower_state(f) == (3, 2, 7, 15, None, None)  # nothing changed


def test_the_simulator_runs_the_c_rules_with_the_same_result() -> None:
    for seed in (0, 1, 2, 5, 358):
        py, c = run_seed(seed), run_seed(seed, SimParams(lane_native=True))
        assert py.ok and c.ok, (py.violation, c.violation)
        assert py.stats == c.stats and py.steps == c.steps
    r = run_seed(10_001, SimParams(nodes=5, lane_native=True))
    assert r.ok and r.stats["lane_handled"] > 0


def test_the_command_line_runs_the_c_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "2", "--native-lane"]) == 0
    assert "lane_handled=" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["--seeds", "2", "--native-lane", "--no-lane-shadow"])
    assert stop.value.code == 2
    assert "leave out --no-lane-shadow" in capsys.readouterr().err


def test_a_failing_seed_with_the_c_rules_is_replayed_with_them() -> None:
    from kraft.sim.cli import replay_command

    assert replay_command(7, 5, native_lane=True) == (
        "python -m kraft.sim --seed 7 --nodes 5 --native-lane --trace")
    assert replay_command(7, 3) == "python -m kraft.sim --seed 7 --nodes 3 --trace"


BIG = 2**31 - 1
"""The epoch limit (`kraft.raft.epochs`)."""


def test_no_lease_is_of_an_epoch_at_the_limit_so_a_frame_naming_it_is_handed_over() -> None:
    assert C is not None
    for make in (LeaderLane, C.LeaderLane):
        with pytest.raises(ValueError, match="below the epoch limit"):
            make(BIG, 10, 0, 15, 14, 12, [LeaseVoter(1, None, True)])
        with pytest.raises(ValueError, match="below the epoch limit"):
            make(-1, 10, 0, 15, 14, 12, [LeaseVoter(1, None, True)])
    for make_f in (FollowerLane, C.FollowerLane):
        with pytest.raises(ValueError, match="below the epoch limit"):
            make_f(BIG, 2, 7, 15, 12)
    top = BIG - 1  # the highest usable epoch: a lease may be of it
    lease = LeaderLane(top, 10, 0, 15, 14, 12, [
        LeaseVoter(1, None, True), LeaseVoter(2, ReplicaKey(2, DIRS[0]), False, 12)])
    for lane in (lease, to_native(lease, C)):
        before = leader_state(lane)
        for last, current in ((BIG, BIG), (top, BIG), (BIG, top)):
            assert lane.fetch(2, DIRS[0], 14, last, current, 500) is None  # type: ignore[attr-defined]
        assert leader_state(lane) == before
    f = FollowerLane(top, 2, 7, 15, 12)
    for lane in (f, to_native(f, C)):
        before = follower_state(lane)
        assert lane.answer(7, 0, 2, BIG, 20, False, False,  # type: ignore[attr-defined]
                           [FetchedBatch(15, 16, BIG)]) is None
        assert lane.answer(7, 0, 2, top, 20, False, False,  # type: ignore[attr-defined]
                           [FetchedBatch(15, 16, BIG)]) is None
        assert follower_state(lane) == before
