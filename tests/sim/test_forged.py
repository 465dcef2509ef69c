"""Forged higher epochs in the simulator (`SimParams.forged_every_ms`): throughout the fault
phase a Vote, pre-vote, BeginQuorumEpoch or EndQuorumEpoch from outside the quorum, naming
1 to 1000 epochs above the replicas' highest, reaches a random replica. Every invariant
holds, the quorum commits after the faults heal, and a replica that heard a live leader
never took the forged epoch (`sticky`, leader stickiness)."""

from __future__ import annotations

import pytest

from kraft.sim.cluster import SimResult, run_seed
from kraft.sim.params import SimParams


def _check(results: list[SimResult]) -> None:
    failed = [f"seed {r.seed}: {r.violation}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    assert all(r.committed > 0 for r in results)
    # the rule was exercised: forged requests reached replicas that heard a live leader
    assert sum(r.stats.get("forged_ignored", 0) for r in results) > 0


@pytest.mark.parametrize("nodes", [3, 5])
def test_forged_higher_epochs_keep_every_invariant(nodes: int) -> None:
    _check([run_seed(s, SimParams(nodes=nodes, forged_every_ms=500))
            for s in range(40_000, 40_000 + (30 if nodes == 3 else 10))])


def test_forged_higher_epochs_with_the_lanes_driving() -> None:
    _check([run_seed(s, SimParams(forged_every_ms=500, lane_drive=True, leader_drive=True))
            for s in range(41_000, 41_015)])


def test_the_forged_requests_draw_from_a_stream_of_their_own() -> None:
    # none sent (the first one would come after the run): the seed runs as without them
    a, b = run_seed(7, SimParams()), run_seed(7, SimParams(forged_every_ms=10**9))
    assert (a.steps, a.committed, a.elections, a.stats) == \
        (b.steps, b.committed, b.elections, b.stats)
    assert "forged" not in a.stats
