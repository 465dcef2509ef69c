"""The planner's TLS migration (kraft_operator.planner.tls_migration): flipping
spec.tls.enabled on a running quorum moves it by three rolls through the listener layouts,
each phase recorded in status.tls.migration and started only once the roll before is done and
every voter published that layout's endpoints; the way back is the same walk; a spec that
turns back mid-way walks back; a new quorum starts on its protocol with no migration.

Every step of every run is checked against the rule that makes a migration safe, written out
here again from the node's behaviour rather than taken from the planner: a node dials the
first listener of its layout, at the peer's endpoint of that name, so every running peer must
bind that listener and (once a voter) publish it, and a peer with the authorizer on refuses a
plaintext one (User:ANONYMOUS). The operator's own calls use a listener every pod binds.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kraft_operator import models
from kraft_operator.observed import Observed
from kraft_operator.planner import AdvanceTlsMigration, DeletePod, Plan, ResignLeader, Wait, plan
from kraft_operator.planner.listeners import dial_listener, layout_of

from tests.operator.world import World, realized, run, with_spec


def spec_with(tls: bool | None, replicas: int = 3) -> models.KRaftQuorumSpec:
    return models.KRaftQuorumSpec(replicas=replicas, tls=models.TlsSpec(enabled=tls))


def talk_problems(world: World, observed: Observed) -> list[str]:
    """Pairs of running pods that could not talk, as the nodes behave."""
    out = []
    running = [p for p in world.pods.values() if not p.broken]
    for a in running:
        dialled = a.listeners[0]
        for b in running:
            if a is b:
                continue
            names = {item.name for item in b.listeners}
            if dialled.name not in names:
                out.append(f"{a.node_id} dials {dialled.name}, which {b.node_id} does not bind")
            published = world.endpoints.get(b.key)
            if b.key in world.voters and published is not None and \
                    dialled.name not in {e.name for e in published}:
                out.append(f"{a.node_id} dials {dialled.name}, which voter {b.node_id} does "
                           f"not publish ({[e.name for e in published]})")
            if b.authorizer and not dialled.ssl:
                out.append(f"{a.node_id} dials plaintext; {b.node_id}'s authorizer refuses it")
    if observed.pods:
        layout = layout_of(observed.listeners)
        dial = dial_listener(layout, observed.pods, observed.listeners.steady)
        for p in running:
            if dial.name not in {item.name for item in p.listeners}:
                out.append(f"the operator dials {dial.name}, which {p.node_id} does not bind")
    return out


def check_talk(world: World, observed: Observed, _plan: Plan) -> None:
    problems = talk_problems(world, observed)
    assert not problems, problems


def converged(tls: bool | None, replicas: int = 3, **world_kwargs: object) -> tuple[World, models.KRaftQuorumSpec]:
    spec = spec_with(tls, replicas)
    world = World(pki=True, **world_kwargs)  # type: ignore[arg-type]
    run(world, spec, check=check_talk)
    assert realized(world, spec), world.events
    return world, spec


def phases(plans: list[Plan]) -> list[tuple[int, bool]]:
    return [(p.action.phase, p.action.complete) for p in plans
            if isinstance(p.action, AdvanceTlsMigration)]


def test_a_new_quorum_starts_on_its_protocol_with_no_migration() -> None:
    for tls, protocol in ((None, True), (True, True), (False, False)):
        spec = spec_with(tls)
        world = World(pki=True)
        plans = run(world, spec, check=check_talk)
        assert realized(world, spec)
        assert phases(plans) == []
        assert world.tls_record == {"enabled": protocol, "listener": "CONTROLLER", "port": 9093}
        assert all(p.listeners[0].ssl == protocol for p in world.pods.values())


def test_plaintext_to_tls_is_three_rolls_each_after_the_last_and_the_leader_last() -> None:
    world, spec = converged(False)
    assert world.tls_record == {"enabled": False, "listener": "CONTROLLER", "port": 9093}
    world.leader = next(k for k in world.voters if k[0] == 1)
    tls = with_spec(spec, tls={"enabled": True})
    plans = run(world, tls, check=check_talk)
    assert realized(world, tls), world.events[-20:]
    # phase 3 is recorded, rolled, and then the migration is over
    assert phases(plans) == [(1, False), (2, False), (3, False), (3, True)]
    # each phase was a roll of every pod, one at a time, before the next phase was recorded
    cuts = [i for i, p in enumerate(plans) if isinstance(p.action, AdvanceTlsMigration)]
    for start, end in itertools.pairwise(cuts):
        rolled = [p.action.node_id for p in plans[start:end] if isinstance(p.action, DeletePod)]
        assert sorted(rolled) == [0, 1, 2], (start, rolled)
        resigned = [p.action.node_id for p in plans[start:end]
                    if isinstance(p.action, ResignLeader)]
        assert resigned, "the leader resigns before its restart"
        assert rolled[-1] == resigned[-1]  # the leader last
    assert world.tls_record == {"enabled": True, "listener": "CONTROLLER_SSL", "port": 9094}
    pod = world.pods[0]
    assert [item.text() for item in pod.listeners] == ["CONTROLLER_SSL:SSL:9094"]
    assert pod.authorizer
    # the phases were reported: Progressing, with the phase in status and the message
    mid = plans[cuts[1]]
    assert mid.condition("Progressing").reason == "MigratingTls"
    assert mid.status_fields["tls"]["migration"]["phase"] == 2
    assert "phase 2 of 3" in mid.message
    rolling = next(p for p in plans[cuts[1]:cuts[2]] if isinstance(p.action, DeletePod))
    assert "TLS migration phase 2 of 3" in rolling.condition("Progressing").message


def test_tls_to_plaintext_walks_the_same_layouts_back_the_authorizer_off_first() -> None:
    world, spec = converged(True)
    assert world.pods[0].authorizer
    plain = with_spec(spec, tls={"enabled": False})
    plans = run(world, plain, check=check_talk)
    assert realized(world, plain)
    assert phases(plans) == [(1, False), (2, False), (3, False), (3, True)]
    assert world.tls_record == {"enabled": False, "listener": "CONTROLLER_PLAINTEXT",
                                "port": 9094}
    assert not any(p.authorizer for p in world.pods.values())
    # and back to TLS: on CONTROLLER at 9093 again, with the hash the quorum had at first
    again = with_spec(plain, tls={"enabled": True})
    plans = run(world, again, check=check_talk)
    assert phases(plans) == [(1, False), (2, False), (3, False), (3, True)]
    assert world.tls_record == {"enabled": True, "listener": "CONTROLLER", "port": 9093}
    assert layout_of(world.listener_state()).key == ""


def test_a_spec_turned_back_mid_way_walks_the_phases_back() -> None:
    world, spec = converged(False)
    tls = with_spec(spec, tls={"enabled": True})
    world.spec = tls
    plans: list[Plan] = []
    for _ in range(200):
        observed = world.observe()
        result = plan(tls, observed)
        check_talk(world, observed, result)
        plans.append(result)
        world.write_status(result)
        world.apply(result.action)
        world.tick()
        if (world.tls_record or {}).get("migration", {}).get("phase") == 2:  # type: ignore[union-attr]
            break
    back = run(world, spec, check=check_talk)
    assert realized(world, spec)
    # the roll to phase 2 ends, then phases 1 and 0 are rolled and the migration is undone
    assert phases(back) == [(1, False), (0, False), (0, True)]
    assert world.tls_record == {"enabled": False, "listener": "CONTROLLER", "port": 9093}


def test_a_phase_waits_for_every_voter_to_publish_its_endpoints() -> None:
    world, spec = converged(False, publish_delay=3)
    tls = with_spec(spec, tls={"enabled": True})
    plans = run(world, tls, check=check_talk)
    assert realized(world, tls)
    waits = [p for p in plans if isinstance(p.action, Wait)
             and p.action.reason == "TlsMigrationWaiting"]
    assert any("UpdateRaftVoter" in p.action.message for p in waits)  # type: ignore[union-attr]


def test_a_phase_does_not_start_while_a_voter_lags() -> None:
    world, spec = converged(False)
    tls = with_spec(spec, tls={"enabled": True})
    world.spec = tls
    world.pods[2].broken = True  # its pod cannot run: the quorum is not healthy
    for _ in range(6):
        observed = world.observe()
        result = plan(tls, observed)
        world.write_status(result)
        assert not isinstance(result.action, AdvanceTlsMigration), result.action
        world.apply(result.action)
        world.tick()
        world.pods[2].broken = True


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flips=st.lists(st.tuples(st.integers(0, 25), st.booleans()), min_size=1, max_size=5),
       replicas=st.sampled_from([1, 3, 5]), delay=st.integers(0, 2), start=st.booleans())
def test_random_flips_keep_every_pair_of_nodes_talking_and_converge(
        flips: list[tuple[int, bool]], replicas: int, delay: int, start: bool) -> None:
    """spec.tls.enabled flipped at random moments of a run (mid-roll too): at every step every
    node can reach every other and the operator can reach them all; in the end the quorum
    runs on the protocol the last spec asks for, with no migration left."""
    world, spec = converged(start, replicas, publish_delay=delay)
    wanted = start
    for wait, value in flips:
        spec = with_spec(spec, tls={"enabled": value})
        wanted = value
        run(world, spec, steps=wait, check=check_talk)
    run(world, spec, steps=400, check=check_talk)
    assert realized(world, spec), world.events[-10:]
    record = world.tls_record or {}
    assert record.get("enabled") is wanted and "migration" not in record
    assert all(p.listeners[0].ssl is wanted and len(p.listeners) == 1
               for p in world.pods.values())
