"""KIP-595 BeginQuorumEpoch resend, in the simulator: the leader tells every voter that has not
fetched within fetch timeout / 2 again, not only the voters that never fetched in its epoch
(as Kafka's `LeaderState.needToSendBeginQuorumRequests` does)."""

from __future__ import annotations

from kraft.raft.events import RequestFailed
from kraft.raft.state import Role
from kraft.sim.cluster import Simulation
from kraft.sim.params import SimParams


def _steady(seed: int) -> tuple[Simulation, int, int]:
    sim = Simulation(seed, SimParams(nodes=3, spares=0, dynamic=True, snapshot_every=1 << 40,
                                     connections=False,
                                     hw_linger_ms=0))
    sim.run_until(3000)
    leaders = sim.leaders()
    assert len(leaders) == 1
    leader = leaders[0].node_id
    voter = min(i for i in sim.nodes if i != leader)
    core = sim.nodes[voter].core
    assert core is not None and core.role is Role.FOLLOWER and core.leader_id == leader
    return sim, leader, voter


def test_kip595_begin_quorum_resent_to_a_voter_restarted_into_unattached() -> None:
    sim, leader, voter = _steady(seed=11)
    epoch = sim.nodes[leader].core.epoch  # type: ignore[union-attr]
    n = sim.nodes[voter]
    # The voter's connections are lost: nothing it sends arrives, and for now nothing reaches
    # it either.
    others = [i for i in sim.nodes if i != voter]
    sim.blocked.update((voter, other) for other in others)
    sim.blocked.update((other, voter) for other in others)
    core = n.core
    assert core is not None and core._fetch_corr is not None
    # Its runtime finds the leader's port refusing it: it stops following, its pre-vote goes
    # unanswered, and it ends Unattached in the same epoch (the quorum-state names no leader).
    sim.deliver(n, RequestFailed(leader, core._fetch_corr, unreachable=True))
    start = sim.now
    while core.role is not Role.UNATTACHED and sim.now < start + 3000:
        sim.run_until(sim.now + 1)
    assert core.role is Role.UNATTACHED and core.leader_id == -1, core.role
    sim.crash(n)
    sim.run_until(sim.now + 100)
    sim.start_node(n)
    restarted = n.core
    assert restarted is not None
    assert restarted.role is Role.UNATTACHED and restarted.epoch == epoch
    # The others reach it again; what it sends still goes nowhere, so it can learn the leader
    # only from a request the leader sends it.
    sim.blocked.difference_update((other, voter) for other in others)
    # The leader is still the leader (with the other voter) and its resend reaches the voter.
    learnt_at = None
    start = sim.now
    while sim.now < start + 3000 and learnt_at is None:
        sim.run_until(sim.now + 10)
        c = n.core
        if c is not None and c.role is Role.FOLLOWER and c.leader_id == leader:
            learnt_at = sim.now - start
    assert sim.nodes[leader].core is not None
    assert sim.nodes[leader].core.role is Role.LEADER  # type: ignore[union-attr]
    assert learnt_at is not None, "the restarted voter never learnt the leader"
    assert not sim.inv.violations
