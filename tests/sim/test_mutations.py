"""Mutation checks: a deliberately broken rule is caught by the simulator within the CI seed
budget. Each test breaks one rule with monkeypatch and expects a violation of the matching
invariant (the scan stops at the first failing seed)."""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Callable
from types import ModuleType

import pytest

import kraft.raft.elections as elections
import kraft.raft.leader as leader
import kraft.raft.replication as replication
from kraft.raft.core import RaftCore
from kraft.raft.log import LogMeta
from kraft.raft.messages import OffsetAndEpoch, VoteRequest
from kraft.raft.state import UnattachedState
from kraft.sim.cli import main
from kraft.sim.cluster import run_seed
from kraft.sim.params import SimParams


def first_violation(seeds: range) -> str | None:
    # the core's own invariants: the native lane's check (tests/sim/test_lane.py) would
    # otherwise see some of these mutations first, as a disagreement with its rules
    for s in seeds:
        r = run_seed(s, SimParams(lane_shadow=False))
        if not r.ok:
            return r.violation
    return None


def patch_source(
    monkeypatch: pytest.MonkeyPatch, owner: ModuleType | type, name: str, old: str, new: str
) -> None:
    """Replace one line of a function of the core (the mutation) and install the result.
    `owner` is the concern module (`kraft.raft.elections`, ...) or `RaftCore` that holds it."""
    src = textwrap.dedent(inspect.getsource(getattr(owner, name)))
    assert old in src, f"mutation target not found in {name}"
    namespace: dict[str, object] = {}
    module = owner if isinstance(owner, ModuleType) else sys.modules[owner.__module__]
    exec(src.replace(old, new), vars(module), namespace)
    monkeypatch.setattr(owner, name, namespace[name])


def test_mutation_hw_advanced_on_a_minority_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leader, "majority_offset", lambda offs: max(offs, default=-1))
    v = first_violation(range(0, 100))
    assert v is not None and ("leader_completeness" in v or "committed" in v
                              or "state_machine_prefix" in v), v


def test_mutation_two_votes_in_one_epoch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    original: Callable[..., None] = elections.on_vote

    def forgetful(core: RaftCore, src: int, corr: int, req: VoteRequest) -> None:
        s = core.state
        if isinstance(s, UnattachedState) and not req.pre_vote and req.replica_epoch == s.epoch:
            s.voted = None  # forget the vote already cast in this epoch
        original(core, src, corr, req)

    monkeypatch.setattr(elections, "on_vote", forgetful)
    v = first_violation(range(0, 300))
    # two leaders in one epoch fork the log: whichever invariant sees the fork first fires
    assert v is not None, v


def test_mutation_vote_without_log_check_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LogMeta, "end_position", lambda self: OffsetAndEpoch(0, 0))
    v = first_violation(range(0, 150))
    assert v is not None and "leader_completeness" in v, v


def test_mutation_follower_hw_not_capped_by_its_log_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    patch_source(monkeypatch, replication, "on_fetch_response",
                 "new = min(resp.high_watermark, core.log.end_offset)",
                 "new = resp.high_watermark")
    v = first_violation(range(0, 50))
    assert v is not None and "beyond its log" in v, v


def test_mutation_truncating_past_divergence_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # truncate one record too many: a committed record held by the follower is removed
    patch_source(monkeypatch, replication, "truncate_diverging",
                 "target = min(diverging.offset, own.offset, core.log.end_offset)",
                 "target = max(0, min(diverging.offset, own.offset, core.log.end_offset) - 1)")
    v = first_violation(range(0, 300))
    assert v is not None and ("committed_never_truncated" in v or "high watermark" in v), v


def test_mutation_fetching_before_fsync_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # the follower acknowledges (FetchOffset) records that are not on disk yet: the leader
    # then commits what a majority does not hold durably, and a crash loses committed records
    # it acknowledged (whichever the seeds show first)
    patch_source(monkeypatch, replication, "poll",
                 "elif core.log.persisted_end >= core.log.end_offset:",
                 "elif True:")
    v = first_violation(range(0, 300))
    assert v is not None and ("acknowledged_committed_lost" in v
                              or "committed_durable_majority" in v), v


def test_failing_seed_prints_the_replay_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(leader, "majority_offset", lambda offs: max(offs, default=-1))
    assert main(["--seeds", "20"]) == 1
    captured = capsys.readouterr()
    assert "replay: python -m kraft.sim --seed" in captured.err
    assert "violations=" in captured.out and "violations=0" not in captured.out
