"""The planner, operation by operation: what it does next for a given observed state."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kraft_operator import models
from kraft_operator.observed import NodeState, PodPhase, PvcPhase, ReplicaInfo
from kraft_operator.planner import (
    AddVoter,
    ClearRecoveryAnnotation,
    CreatePod,
    CreatePVC,
    DeletePod,
    DeletePVC,
    ForceSingleVoter,
    FormatMode,
    RecordCluster,
    RemoveVoter,
    ReportDegraded,
    ResignLeader,
    Wait,
    plan,
    pod_spec_hash,
)

from tests.operator.world import World, kafka_uuid, realized, run, with_spec


def converged(replicas: int = 3, **spec_fields: object) -> tuple[World, models.KRaftQuorumSpec]:
    spec = models.KRaftQuorumSpec(replicas=replicas, **spec_fields)
    world = World()
    run(world, spec)
    assert realized(world, spec), world.events
    return world, spec


def step(world: World, spec: models.KRaftQuorumSpec):
    """Plan once, write the status, apply the action and let a tick pass."""
    result = plan(spec, world.observe())
    world.write_status(result)
    world.apply(result.action)
    world.tick()
    return result


def actions_until_done(world: World, spec: models.KRaftQuorumSpec, steps: int = 200) -> list:
    plans = run(world, spec, steps)
    assert plans[-1].status_fields.get("observedGeneration") == world.generation, \
        [type(p.action).__name__ for p in plans][-10:]
    return [p.action for p in plans]


# --- format -----------------------------------------------------------------------------------


def test_new_quorum_records_cluster_id_and_fresh_directory_ids_first() -> None:
    spec = models.KRaftQuorumSpec(replicas=3)
    result = plan(spec, World().observe())
    action = result.action
    assert isinstance(action, RecordCluster)
    assert [n for n, _ in action.initial_voters] == [0, 1, 2]
    ids = [d for _, d in action.initial_voters] + [action.cluster_id]
    assert len(set(ids)) == 4
    assert result.status_fields["clusterId"] == action.cluster_id
    assert result.condition("Progressing").reason == "Formatting"


def test_spec_cluster_id_is_used() -> None:
    cid = kafka_uuid(77)
    result = plan(models.KRaftQuorumSpec(cluster_id=cid), World().observe())
    assert isinstance(result.action, RecordCluster) and result.action.cluster_id == cid


def test_bootstrap_creates_every_initial_pod_without_waiting_for_readiness() -> None:
    spec = models.KRaftQuorumSpec(replicas=3)
    world = World()
    world.apply(plan(spec, world.observe()).action)  # no tick: nothing runs
    created = []
    for _ in range(6):
        result = plan(spec, world.observe())
        world.apply(result.action)
        created.append(result.action)
    pvcs = [a for a in created if isinstance(a, CreatePVC)]
    pods = [a for a in created if isinstance(a, CreatePod)]
    assert [a.directory_id for a in pvcs] == [d for _, d in world.initial_voters]
    assert len(pods) == 3
    assert all(p.format_mode == FormatMode.INITIAL for p in pods)
    assert all(p.initial_voters == world.initial_voters for p in pods)
    assert isinstance(plan(spec, world.observe()).action, Wait)


def test_bootstrap_with_every_pod_stuck_restarts_them_on_the_fixed_spec() -> None:
    """Every pod Pending after a bad affinity: without a quorum there is nothing to protect,
    so the fixed spec reaches the pods one after another (no wedge)."""
    spec = models.KRaftQuorumSpec(replicas=3, image="bad:1")
    world = World()
    world.broken_hashes.add(models_hash(spec))
    run(world, spec, steps=15)
    assert not world.formed
    fixed = with_spec(spec, image="good:1")
    world.generation += 1
    actions = actions_until_done(world, fixed)
    restarts = [a for a in actions if isinstance(a, DeletePod)]
    assert {a.node_id for a in restarts} == {0, 1, 2}
    assert realized(world, fixed)


def models_hash(spec: models.KRaftQuorumSpec) -> str:
    return pod_spec_hash(spec)


def test_pods_not_ready_early_is_not_a_failure() -> None:
    """Pods crash-looping while their peers' names do not resolve yet: wait, not Degraded."""
    spec = models.KRaftQuorumSpec(replicas=3)
    world = World()
    for _ in range(7):
        world.apply(plan(spec, world.observe()).action)
    observed = world.observe()
    observed = replace(observed, pods=tuple(
        replace(p, ready=False, restart_count=4, waiting_reason="CrashLoopBackOff")
        for p in observed.pods))
    result = plan(spec, observed)
    assert result.action == Wait("WaitingForQuorum", result.action.message)
    assert result.condition("Degraded").status == "False"
    assert result.condition("Progressing").status == "True"


# --- scale up / join ----------------------------------------------------------------------------


def test_scale_up_joins_one_node_at_a_time_with_a_new_volume() -> None:
    world, spec = converged(3)
    world.auto_join_enabled = False  # keep the joiner pending to see the planner wait
    bigger = with_spec(spec, replicas=5)
    world.generation += 1
    first = step(world, bigger)
    assert isinstance(first.action, CreatePVC) and first.action.node_id == 3
    assert first.action.directory_id not in {d for _, d in world.last_known_voters}
    second = step(world, bigger)
    assert isinstance(second.action, CreatePod)
    assert second.action.format_mode == FormatMode.JOIN and second.action.auto_join
    assert second.status_fields["currentOperation"]["type"] == "AddingVoter"
    for _ in range(3):
        result = step(world, bigger)
        assert isinstance(result.action, Wait), result.action  # node 4 waits for node 3
        assert result.action.reason in ("AwaitingAutoJoin", "MembershipChangeInFlight")
    world.auto_join_enabled = True
    actions_until_done(world, bigger)
    assert realized(world, bigger)


def test_without_auto_join_the_operator_adds_the_caught_up_observer() -> None:
    world, spec = converged(3, auto_join=False)
    bigger = with_spec(spec, replicas=4)
    world.generation += 1
    actions = actions_until_done(world, bigger)
    adds = [a for a in actions if isinstance(a, AddVoter)]
    assert [a.node_id for a in adds] == [3]
    assert realized(world, bigger)


def test_add_that_timed_out_but_was_applied_is_recognised() -> None:
    world, spec = converged(3, auto_join=False)
    bigger = with_spec(spec, replicas=4)
    world.generation += 1
    while True:
        result = step(world, bigger)
        if isinstance(result.action, AddVoter):
            break
    # the call "timed out": status says AddingVoter, the quorum shows it done
    assert world.operation is not None and world.operation.type == "AddingVoter"
    result = plan(bigger, world.observe())
    assert result.status_fields["currentOperation"] is None
    assert not isinstance(result.action, AddVoter)


def test_add_recorded_but_never_sent_is_sent_again_after_the_retry_interval() -> None:
    world, spec = converged(3, auto_join=False)
    bigger = with_spec(spec, replicas=4)
    world.generation += 1
    for _ in range(20):
        result = plan(bigger, world.observe())
        world.write_status(result)
        if isinstance(result.action, AddVoter):
            break  # the operator "crashed" after writing status, before the call
        world.apply(result.action)
        world.tick()
    assert world.operation is not None and world.operation.attempt == 1
    assert isinstance(plan(bigger, world.observe()).action, Wait)  # within the interval
    world.now += 31
    again = plan(bigger, world.observe())
    assert isinstance(again.action, AddVoter)
    assert again.status_fields["currentOperation"]["attempt"] == 2


# --- scale down / remove ----------------------------------------------------------------------


def test_scale_down_stops_the_pod_before_removing_and_the_voter_stays_removed() -> None:
    world, spec = converged(5)
    smaller = with_spec(spec, replicas=3)
    world.generation += 1
    seen = []

    def check(w: World, observed, result) -> None:
        if isinstance(result.action, RemoveVoter):
            assert result.action.node_id not in w.pods, "auto-join would re-add it"
        seen.append(result.action)

    run(world, smaller, check=check)
    removes = [a.node_id for a in seen if isinstance(a, RemoveVoter)]
    assert removes == [4, 3]
    stops = [i for i, a in enumerate(seen) if isinstance(a, DeletePod)]
    assert stops and stops[0] < next(i for i, a in enumerate(seen) if isinstance(a, RemoveVoter))
    for _ in range(10):
        world.tick()
    assert sorted(n for n, _ in world.voters) == [0, 1, 2]
    assert sorted(world.pvcs) == [0, 1, 2]  # onScaleDown: Delete


def test_scale_down_keeps_volumes_when_policy_is_retain() -> None:
    world, spec = converged(5, storage=models.StorageSpec(on_scale_down=models.VolumePolicy.RETAIN))
    smaller = with_spec(spec, replicas=3)
    world.generation += 1
    actions = actions_until_done(world, smaller)
    assert not any(isinstance(a, DeletePVC) for a in actions)
    assert sorted(world.pvcs) == [0, 1, 2, 3, 4]


def test_leader_leaving_resigns_and_is_removed_last() -> None:
    world, spec = converged(5)
    world.leader = next(k for k in world.voters if k[0] == 4)
    smaller = with_spec(spec, replicas=3)
    world.generation += 1
    actions = actions_until_done(world, smaller)
    kinds = [(type(a).__name__, getattr(a, "node_id", None)) for a in actions]
    resign = kinds.index(("ResignLeader", 4))
    assert kinds.index(("RemoveVoter", 3)) < kinds.index(("RemoveVoter", 4))
    assert resign < kinds.index(("RemoveVoter", 4))


def test_removal_that_would_lose_the_majority_is_refused() -> None:
    world, spec = converged(5)
    smaller = with_spec(spec, replicas=4)
    world.generation += 1
    # voters 1 and 2 lag: removing a healthy voter 4 would leave 2 healthy of 4
    observed = world.observe()
    quorum = observed.quorum
    assert quorum is not None
    lagging = replace(quorum, voters=tuple(
        replace(v, caught_up=v.replica_id not in (1, 2)) for v in quorum.voters))
    result = plan(smaller, replace(observed, quorum=lagging))
    assert isinstance(result.action, Wait)
    assert result.action.reason == "RemovalWouldLoseMajority"
    assert result.condition("Degraded").reason == "VoterLagging"


def test_a_lagging_voter_leaves_before_healthy_ones() -> None:
    world, spec = converged(5)
    smaller = with_spec(spec, replicas=4)
    world.generation += 1
    observed = world.observe()
    quorum = observed.quorum
    assert quorum is not None
    # only victim is 4; make it lag: it can be removed without being stopped first? no:
    # it still runs with auto-join, so it is stopped first even though it lags
    lagging = replace(quorum, voters=tuple(
        replace(v, caught_up=v.replica_id != 4) for v in quorum.voters))
    result = plan(smaller, replace(observed, quorum=lagging))
    assert result.action == DeletePod(4, "kq-4", "StopBeforeRemove")


# --- replace disk ------------------------------------------------------------------------------


@pytest.mark.parametrize("auto_join", [True, False])
def test_lost_disk_gets_a_new_directory_id_and_replaces_the_stale_voter(auto_join: bool) -> None:
    world, spec = converged(3, auto_join=auto_join)
    old = next(k for k in world.voters if k[0] == 2)
    world.lose_disk(2)
    world.tick()
    first = plan(spec, world.observe())
    assert first.condition("Degraded").reason == "StaleIncarnation"
    assert first.condition("Progressing").reason == "ReplacingDisk"
    actions = actions_until_done(world, spec)
    new_pvc = next(a for a in actions if isinstance(a, CreatePVC))
    assert new_pvc.node_id == 2 and new_pvc.directory_id != old[1]
    removes = [a for a in actions if isinstance(a, RemoveVoter)]
    adds = [a for a in actions if isinstance(a, AddVoter)]
    if auto_join:
        # the node replaces its old incarnation itself; the operator only watches
        assert removes == [] and adds == []
    else:
        assert removes == [RemoveVoter(*old)]
        assert adds == [AddVoter(2, new_pvc.directory_id)]
        assert actions.index(removes[0]) < actions.index(adds[0])
    assert not [e for e in world.events if e.startswith("DUPLICATE_VOTER")]
    assert realized(world, spec)
    assert old not in world.voters


def test_without_auto_join_the_stale_voter_goes_before_the_new_incarnation_is_added() -> None:
    world, spec = converged(3, auto_join=False)
    old = next(k for k in world.voters if k[0] == 1)
    world.lose_disk(1)
    seen = []
    run(world, spec, check=lambda w, o, r: seen.append(r.action))
    kinds = [type(a).__name__ for a in seen]
    assert kinds.index("RemoveVoter") < kinds.index("AddVoter")
    assert RemoveVoter(*old) in seen
    assert not [e for e in world.events if e.startswith("DUPLICATE_VOTER")], world.events
    assert realized(world, spec)


def test_without_auto_join_a_stale_voter_stays_while_removing_it_loses_the_majority() -> None:
    # 3 voters: node 1's disk is gone and node 2 lags: removing 1 would leave {0, 2} with
    # one healthy voter, no majority of two
    world, spec = converged(3, auto_join=False)
    old = next(k for k in world.voters if k[0] == 1)
    world.lose_disk(1)
    world.tick()
    observed = world.observe()
    quorum = observed.quorum
    assert quorum is not None and quorum.leader_id != 2
    lagging = replace(quorum, voters=tuple(replace(v, caught_up=v.replica_id != 2)
                                           for v in quorum.voters))
    result = plan(spec, replace(observed, quorum=lagging))
    assert not isinstance(result.action, RemoveVoter | AddVoter), result.action
    assert result.condition("Degraded").status == "True"
    assert old in world.voters


# --- replace node ------------------------------------------------------------------------------


def test_node_down_within_grace_is_left_alone() -> None:
    world, spec = converged(3)
    node = world.pods[1].node_name
    world.nodes = {n: (s if n != node else NodeState(n, False, world.now)) for n, s in world.nodes.items()}
    for p in world.pods.values():
        p.node_name = node if p.node_id == 1 else "k8s-b"
    world.pods[1].broken = True
    world.now += 100
    result = plan(spec, world.observe())
    assert not isinstance(result.action, DeletePod | DeletePVC)


def test_node_down_past_grace_with_network_volume_moves_the_pod() -> None:
    world, spec = converged(3)
    for p in world.pods.values():
        p.node_name = "k8s-a" if p.node_id == 1 else "k8s-b"
    old = next(k for k in world.voters if k[0] == 1)
    world.fail_k8s_node("k8s-a")
    world.now += spec.node_failure_grace_period_seconds + 1
    result = plan(spec, world.observe())
    assert result.action == DeletePod(1, "kq-1", "NodeFailed", force=True)
    assert result.condition("Progressing").reason == "ReplacingNode"
    actions = actions_until_done(world, spec)
    assert not any(isinstance(a, DeletePVC) for a in actions)
    assert old in world.voters  # the same incarnation came back on its volume


def test_node_local_volume_lost_with_its_node_is_replaced_with_a_new_incarnation() -> None:
    world, spec = converged(3)
    for p in world.pods.values():
        p.node_name = "k8s-a" if p.node_id == 2 else "k8s-b"
    world.pvcs[2] = replace(world.pvcs[2], node_name="k8s-a")
    old = next(k for k in world.voters if k[0] == 2)
    world.fail_k8s_node("k8s-a")
    world.now += spec.node_failure_grace_period_seconds + 1
    actions = actions_until_done(world, spec)
    assert DeletePVC(2, "data-kq-2") in actions
    # the new incarnation removes the stale one itself (auto-join), then adds itself
    assert old not in world.voters and realized(world, spec)


def test_node_back_ready_without_its_local_volume_is_replaced_after_the_grace_period() -> None:
    world, spec = converged(3)
    for p in world.pods.values():
        p.node_name = "k8s-a" if p.node_id == 2 else "k8s-b"
    world.pvcs[2] = replace(world.pvcs[2], node_name="k8s-a")
    old = next(k for k in world.voters if k[0] == 2)
    world.node_back_without_volumes("k8s-a")  # Ready again, the volume gone
    world.tick()
    early = plan(spec, world.observe())
    assert not isinstance(early.action, DeletePVC | DeletePod)  # within the grace period
    world.now += spec.node_failure_grace_period_seconds + 1
    result = plan(spec, world.observe())
    # the evidence is the pod's status: the claim goes first, then the pod
    assert result.action == DeletePVC(2, "data-kq-2")
    assert result.condition("Progressing").reason == "ReplacingNode"
    actions = actions_until_done(world, spec)
    assert DeletePod(2, "kq-2", "VolumeLost", force=True) in actions
    assert old not in world.voters and realized(world, spec)
    assert world.pvcs[2].directory_id != old[1]  # a new volume, a new directory id


def test_no_replacement_while_a_majority_is_unreachable() -> None:
    world, spec = converged(3)
    for p in world.pods.values():
        p.node_name = "k8s-a" if p.node_id in (1, 2) else "k8s-b"
    for n in (1, 2):
        world.pvcs[n] = replace(world.pvcs[n], node_name="k8s-a")
    world.fail_k8s_node("k8s-a")
    world.now += spec.node_failure_grace_period_seconds + 1
    world.tick()
    result = plan(spec, world.observe())
    assert isinstance(result.action, ReportDegraded) and result.action.reason == "QuorumLost"
    assert result.condition("Degraded").reason == "QuorumLost"
    assert result.condition("AwaitingApproval").status == "True"


# --- roll ----------------------------------------------------------------------------------------


def test_rolling_update_goes_unready_then_followers_then_leader_after_it_resigns() -> None:
    world, spec = converged(5)
    world.leader = next(k for k in world.voters if k[0] == 2)
    world.pods[1].broken = True  # not ready
    world.tick()
    newer = with_spec(spec, image="kraft-quorum:2")
    world.generation += 1
    actions = actions_until_done(world, newer)
    order = [(type(a).__name__, a.node_id) for a in actions
             if isinstance(a, DeletePod | ResignLeader)]
    assert order[0] == ("DeletePod", 1)  # the unready pod first
    assert {n for _, n in order[1:4]} == {0, 3, 4}  # then the followers
    assert order[4:] == [("ResignLeader", 2), ("DeletePod", 2)]  # the leader last
    assert realized(world, newer)


def _asked_to_roll(observed: Any, node_id: int) -> Any:
    pods = tuple(replace(p, manual_roll=True) if p.node_id == node_id else p
                 for p in observed.pods)
    return replace(observed, pods=pods)


@pytest.mark.parametrize("strategy", ["RollingUpdate", "Manual"])
def test_a_pod_annotated_for_a_manual_roll_restarts_once_by_the_rolling_rules(
        strategy: str) -> None:
    """kraft.dev/manual-rolling-update: "true" on a pod (Strimzi's manual-rolling-update):
    that pod restarts, the leader resigning first, whatever the update strategy."""
    world, spec = converged(3)
    spec = with_spec(spec, update_strategy={"type": strategy})
    leader = world.leader[0]
    follower = next(k[0] for k in world.voters if k[0] != leader)
    result = plan(spec, _asked_to_roll(world.observe(), follower))
    assert result.action == DeletePod(follower, f"kq-{follower}", "Rolling")
    assert "manual-rolling-update" in result.message
    result = plan(spec, _asked_to_roll(world.observe(), leader))
    assert result.action == ResignLeader(leader)
    # without the annotation nothing restarts
    assert not isinstance(plan(spec, world.observe()).action, DeletePod | ResignLeader)


def test_rolling_waits_for_the_restarted_pod_to_catch_up() -> None:
    world, spec = converged(3)
    newer = with_spec(spec, image="kraft-quorum:2")
    world.generation += 1
    first = step(world, newer)
    assert isinstance(first.action, DeletePod)
    assert first.status_fields["currentOperation"]["type"] == "Rolling"
    second = step(world, newer)
    assert isinstance(second.action, CreatePod)  # the restarted pod comes back
    observed = world.observe()
    observed = replace(observed, pods=tuple(replace(p, ready=False) if p.node_id ==
                                            first.action.node_id else p for p in observed.pods))
    held = plan(newer, observed)
    assert held.action.reason == "RestartedPodCatchingUp"
    assert "observedGeneration" not in held.status_fields
    assert held.condition("Degraded").status == "False"  # a rollout is Progressing


def test_rollout_halts_when_the_restarted_pod_never_catches_up() -> None:
    world, spec = converged(3)
    newer = with_spec(spec, image="kraft-quorum:broken")
    world.broken_hashes.add(models_hash(newer))
    world.generation += 1
    plans = run(world, newer, steps=80)
    last = plans[-1]
    assert last.action.reason == "RolloutHalted"
    assert last.condition("Degraded").reason == "RolloutHalted"
    restarts = [p.action for p in plans if isinstance(p.action, DeletePod)]
    assert len(restarts) == 1  # only one pod was taken down
    assert world.quorum_answers()


def test_roll_refuses_to_take_a_healthy_voter_when_another_lags() -> None:
    world, spec = converged(3)
    world.leader = next(k for k in world.voters if k[0] == 0)
    newer = with_spec(spec, image="kraft-quorum:2")
    world.generation += 1
    observed = world.observe()
    quorum = observed.quorum
    assert quorum is not None
    # voter 2 lags (already on the new spec); 0 (leader) and 1 are healthy and out of date
    lagging = replace(quorum, voters=tuple(replace(v, caught_up=v.replica_id != 2)
                                           for v in quorum.voters))
    pods = tuple(replace(p, spec_hash=pod_spec_hash(newer), ready=False) if p.node_id == 2
                 else p for p in observed.pods)
    result = plan(newer, replace(observed, quorum=lagging, pods=pods))
    assert result.action.reason == "RollWouldLoseMajority", result.action
    assert result.condition("Degraded").reason == "VoterLagging"
    caught_up = replace(quorum, voters=tuple(replace(v, caught_up=True) for v in quorum.voters))
    ready = tuple(replace(p, ready=True) for p in pods)
    assert plan(newer, replace(observed, quorum=caught_up, pods=ready)).action == \
        DeletePod(1, "kq-1", "Rolling")


def test_manual_strategy_waits_for_approval_of_this_generation() -> None:
    world, spec = converged(3, update_strategy=models.UpdateStrategy(type="Manual"))
    newer = with_spec(spec, image="kraft-quorum:2")
    world.generation += 1
    result = plan(newer, world.observe())
    assert result.action.reason == "AwaitingApproval"
    assert result.condition("AwaitingApproval").status == "True"
    world.annotations[models.APPROVE_ROLLOUT_ANNOTATION] = str(world.generation)
    assert isinstance(plan(newer, world.observe()).action, DeletePod | ResignLeader)


# --- recover -----------------------------------------------------------------------------------


def test_quorum_loss_stops_everything_until_the_annotation_then_recovers() -> None:
    world, spec = converged(3)
    survivor = 0
    world.leader = next(k for k in world.voters if k[0] == survivor)
    world.lose_disk(1)
    world.lose_disk(2)
    world.tick()
    for _ in range(5):
        result = step(world, spec)
        assert isinstance(result.action, ReportDegraded)
        assert result.action.reason == "QuorumLost"
    world.annotations[models.RECOVER_ANNOTATION] = "1"  # a replica that did not survive
    result = step(world, spec)
    assert isinstance(result.action, ReportDegraded) and "names no surviving" in result.action.message
    world.annotations[models.RECOVER_ANNOTATION] = str(survivor)
    actions = actions_until_done(world, spec)
    assert ForceSingleVoter(survivor, world.pvcs[survivor].directory_id) in actions
    assert ClearRecoveryAnnotation() in actions
    assert models.RECOVER_ANNOTATION not in world.annotations
    assert realized(world, spec)


def test_recovery_stops_everything_forces_the_survivor_and_rejoins_the_others() -> None:
    world, spec = converged(3)
    survivor = 0
    world.leader = next(k for k in world.voters if k[0] == survivor)
    survivor_dir = world.pvcs[survivor].directory_id
    # two volumes emptied under running pods: they come back as new, empty incarnations
    for n, fresh in ((1, 501), (2, 502)):
        world.pvcs[n] = replace(world.pvcs[n], directory_id=kafka_uuid(fresh))
        world.pods[n].directory_id = kafka_uuid(fresh)
    world.tick()
    assert world.observe().quorum is None
    result = step(world, spec)
    assert isinstance(result.action, ReportDegraded)
    assert result.condition("Degraded").reason == "QuorumLost"
    assert result.condition("AwaitingApproval").status == "True"
    world.annotations[models.RECOVER_ANNOTATION] = str(survivor)
    seen = []

    def check(w: World, observed, result) -> None:
        seen.append(result.action)
        if isinstance(result.action, ForceSingleVoter):
            # recorded before it runs, so an operator restarted midway carries on
            assert result.status_fields["currentOperation"]["type"] == "RecoveringQuorum"

    run(world, spec, check=check)
    assert realized(world, spec), world.events
    first = seen[:6]
    assert first == [
        DeletePod(1, "kq-1", "QuorumRecovery"), DeletePod(2, "kq-2", "QuorumRecovery"),
        DeletePVC(1, "data-kq-1"), DeletePVC(2, "data-kq-2"),
        DeletePod(0, "kq-0", "QuorumRecovery"), ForceSingleVoter(0, survivor_dir)], first
    assert seen.count(ForceSingleVoter(0, survivor_dir)) == 1
    cleared = seen.index(ClearRecoveryAnnotation())
    rejoined = [a for a in seen[cleared:] if isinstance(a, CreatePVC)]
    assert [a.node_id for a in rejoined] == [1, 2]
    assert not {a.directory_id for a in rejoined} & {kafka_uuid(501), kafka_uuid(502)}
    assert world.voters == {(0, survivor_dir)} | {(a.node_id, a.directory_id) for a in rejoined}
    assert world.pods[0].spec_hash == pod_spec_hash(spec)  # rolled to an ordinary pod
    assert models.RECOVER_ANNOTATION not in world.annotations


def test_recovery_resumes_when_the_operator_stopped_after_recording_it() -> None:
    world, spec = converged(3)
    world.leader = next(k for k in world.voters if k[0] == 0)
    world.lose_disk(1)
    world.lose_disk(2)
    world.annotations[models.RECOVER_ANNOTATION] = "0"
    world.tick()
    while not isinstance((result := plan(spec, world.observe())).action, ForceSingleVoter):
        world.write_status(result)
        world.apply(result.action)
        world.tick()
    world.write_status(result)  # the operation is recorded, then the operator dies
    world.tick()
    again = plan(spec, world.observe())
    assert again.action == result.action  # the pod was never made: it is made now
    assert again.status_fields["currentOperation"]["attempt"] == 2
    world.write_status(again)
    world.apply(again.action)
    actions = actions_until_done(world, spec)
    assert not any(isinstance(a, ForceSingleVoter) for a in actions)
    assert realized(world, spec)


def test_recovery_waits_for_the_survivors_pod_to_stop_before_forcing() -> None:
    world, spec = converged(3)
    world.leader = next(k for k in world.voters if k[0] == 0)
    world.lose_disk(1)
    world.lose_disk(2)
    world.annotations[models.RECOVER_ANNOTATION] = "0"
    world.tick()
    observed = world.observe()
    first = plan(spec, observed)
    assert first.action == DeletePod(0, "kq-0", "QuorumRecovery")
    stopping = replace(observed, pods=tuple(replace(p, deleting=True) for p in observed.pods))
    assert plan(spec, stopping).action == Wait("PodStopping", "kq-0 is stopping")


def test_cold_start_of_the_whole_cluster_recreates_every_pod() -> None:
    world, spec = converged(3)
    world.pods.clear()
    world.tick()
    result = plan(spec, world.observe())
    assert isinstance(result.action, CreatePod)
    assert result.condition("Quorate").status == "False"
    assert result.condition("Degraded").status == "False"
    actions = actions_until_done(world, spec)
    assert sum(isinstance(a, CreatePod) for a in actions) == 3
    assert not any(isinstance(a, CreatePVC | DeletePVC | AddVoter | RemoveVoter) for a in actions)


# --- status and conditions --------------------------------------------------------------------


def test_observed_generation_only_when_the_spec_is_realized() -> None:
    world, spec = converged(3)
    newer = with_spec(spec, image="kraft-quorum:2")
    world.generation += 1
    plans = run(world, newer)
    assert all("observedGeneration" not in p.status_fields for p in plans[:-1])
    assert plans[-1].status_fields["observedGeneration"] == world.generation
    assert plans[-1].condition("Ready").status == "True"
    assert plans[-1].condition("Progressing").status == "False"


def test_steady_state_status_and_conditions() -> None:
    world, spec = converged(3)
    result = plan(spec, world.observe())
    assert result.action.reason == "Reconciled"
    status = result.status_fields
    assert status["votersReady"] == "3/3" and status["replicas"] == 3
    assert status["healthyVoters"] == 3
    assert status["leader"]["id"] == world.leader[0]
    assert [v["pod"] for v in status["voters"]] == ["kq-0", "kq-1", "kq-2"]
    assert {c.type: c.status for c in result.conditions} == {
        "Ready": "True", "Quorate": "True", "Progressing": "False", "Degraded": "False",
        "ReconciliationPaused": "False", "AwaitingApproval": "False"}


@pytest.mark.parametrize("how", ["spec", "annotation"])
def test_paused_does_nothing_but_still_reports(how: str) -> None:
    world, spec = converged(3)
    bigger = with_spec(spec, replicas=5, paused=how == "spec")
    if how == "annotation":
        world.annotations[models.PAUSE_ANNOTATION] = "true"
    result = plan(bigger, world.observe())
    assert result.action == Wait("Paused", "reconciliation is paused")
    assert result.condition("ReconciliationPaused").status == "True"
    assert result.status_fields["votersReady"] == "3/5"


def test_a_scale_down_reports_voters_and_healthy_as_counts_of_their_own() -> None:
    """kubectl's columns read Voters 5, Desired 3, Healthy 5 while 5 -> 3 is under way (the
    one column "5/3" read as five of three)."""
    world, spec = converged(5)
    result = plan(with_spec(spec, replicas=3), world.observe())
    status = result.status_fields
    assert (status["replicas"], status["healthyVoters"]) == (5, 5)


def test_observers_without_a_pod_of_theirs_are_not_in_status() -> None:
    """DescribeQuorum keeps a removed node's and a wiped volume's old incarnation as observers
    for a while (7 rows after 3 -> 5 -> 3 and one wipe): status lists only those a pod runs."""
    world, spec = converged(3)
    observed = world.observe()
    assert observed.quorum is not None
    kept = observed.quorum.observers
    old_incarnation = ReplicaInfo(1, "wipedwipedwipedwiped0A")  # node 1's pod holds another
    removed = ReplicaInfo(4, "removedremovedremoved0")  # scaled away: no pod kq-4
    quorum = replace(observed.quorum, observers=(*kept, old_incarnation, removed))
    status = plan(spec, replace(observed, quorum=quorum)).status_fields
    assert [(o["id"], o["directoryId"]) for o in status["observers"]] == [
        (o.replica_id, o.directory_id) for o in kept]


def test_invalid_config_is_reported_and_nothing_changes() -> None:
    world, spec = converged(3)
    bad = with_spec(spec, config={"node.id": "7"})
    result = plan(bad, world.observe())
    assert isinstance(result.action, ReportDegraded) and "node.id" in result.action.message


def test_even_replicas_warn() -> None:
    assert plan(models.KRaftQuorumSpec(replicas=4), World().observe()).warnings
    assert not plan(models.KRaftQuorumSpec(replicas=3), World().observe()).warnings


def test_claim_lost_phase_counts_as_a_lost_volume() -> None:
    world, spec = converged(3)
    world.pvcs[2] = replace(world.pvcs[2], phase=PvcPhase.LOST)
    world.pods[2].broken = True
    world.tick()
    result = plan(spec, world.observe())
    assert result.action in (DeletePod(2, "kq-2", "VolumeLost", force=True),)


def test_no_membership_step_while_the_quorum_has_no_leader() -> None:
    world, spec = converged(5)
    smaller = with_spec(spec, replicas=3)
    world.generation += 1
    observed = world.observe()
    assert observed.quorum is not None
    leaderless = replace(observed, quorum=replace(observed.quorum, leader_id=-1))
    result = plan(smaller, leaderless)
    assert result.action == Wait("ElectionInProgress", "the quorum has no leader right now")
    assert result.condition("Quorate").status == "False"
    assert result.status_fields["leader"] is None


def test_a_halted_rollout_resumes_once_the_spec_is_fixed() -> None:
    world, spec = converged(3)
    broken = with_spec(spec, image="kraft-quorum:broken")
    world.broken_hashes.add(models_hash(broken))
    world.generation += 1
    plans = run(world, broken, steps=80)
    assert plans[-1].action.reason == "RolloutHalted"
    fixed = with_spec(spec, image="kraft-quorum:fixed")
    world.generation += 1
    actions_until_done(world, fixed)
    assert realized(world, fixed)


def test_a_new_quorum_waits_rather_than_record_too_few_voters() -> None:
    short = replace(World().observe(), fresh_ids=(kafka_uuid(1), kafka_uuid(2), kafka_uuid(3)))
    result = plan(models.KRaftQuorumSpec(replicas=3), short)  # 1 cluster id + 2 of 3 voters
    assert result.action == Wait("NoFreshIds", "not enough new ids were drawn")
    assert "initialVoters" not in result.status_fields


@pytest.mark.parametrize("auto_join", [True, False])
def test_a_joiner_that_never_starts_is_restarted_once_the_spec_is_fixed(auto_join: bool) -> None:
    world, spec = converged(3, auto_join=auto_join)
    broken = with_spec(spec, replicas=4, image="kraft-quorum:broken")
    world.broken_hashes.add(models_hash(broken))
    world.generation += 1
    plans = run(world, broken, steps=40)
    assert world.quorum_answers() and len(world.voters) == 3
    assert isinstance(plans[-1].action, Wait)
    fixed = with_spec(broken, image="kraft-quorum:fixed")
    world.generation += 1
    actions_until_done(world, fixed)
    assert realized(world, fixed)


def test_roll_restarts_lagging_followers_when_they_are_what_the_rollout_fixes() -> None:
    """Two of three voters lag (a bad setting the new spec fixes): commits are stalled either
    way, the leader keeps fetching voters enough, so the lagging ones may restart (no wedge)."""
    world, spec = converged(3)
    world.leader = next(k for k in world.voters if k[0] == 0)
    newer = with_spec(spec, image="kraft-quorum:2")
    world.generation += 1
    observed = world.observe()
    quorum = observed.quorum
    assert quorum is not None
    lagging = replace(quorum, voters=tuple(replace(v, caught_up=v.replica_id == 0)
                                           for v in quorum.voters))
    pods = tuple(replace(p, ready=p.node_id == 0) for p in observed.pods)
    result = plan(newer, replace(observed, quorum=lagging, pods=pods))
    assert isinstance(result.action, DeletePod) and result.action.node_id in (1, 2)
    # but never the last fetching majority: with one of the two laggards gone, wait
    stuck = tuple(replace(p, phase=PodPhase.PENDING) if p.node_id == 2 else p for p in pods)
    held = plan(newer, replace(observed, quorum=lagging, pods=stuck))
    # pod 2 cannot run: restarting it is free; pod 1 is the leader's last fetching peer
    assert held.action == DeletePod(2, "kq-2", "Rolling")
    current2 = tuple(replace(p, spec_hash=pod_spec_hash(newer)) if p.node_id == 2 else p
                     for p in stuck)
    held = plan(newer, replace(observed, quorum=lagging, pods=current2))
    assert held.action.reason == "RollWouldLoseMajority", held.action


# --- a cluster id set after creation -------------------------------------------------------


def test_a_different_cluster_id_set_after_creation_is_reported_and_nothing_changes() -> None:
    world, spec = converged(3)
    formatted = world.cluster_id
    other = kafka_uuid(4242)
    assert formatted and other != formatted
    # Set later, together with a change that would otherwise start a scale-up.
    bad = with_spec(spec, cluster_id=other, replicas=5)
    world.generation += 1
    result = plan(bad, world.observe())
    assert isinstance(result.action, ReportDegraded)
    degraded = result.condition("Degraded")
    assert (degraded.status, degraded.reason) == ("True", "ClusterIdMismatch")
    assert other in degraded.message and formatted in degraded.message
    assert "spec.clusterId" in degraded.message
    assert result.condition("Ready").status == "False"
    assert result.condition("Progressing").status == "False"
    assert result.status_fields["clusterId"] == formatted
    assert "observedGeneration" not in result.status_fields
    assert result.status_fields["votersReady"] == "3/5"  # status is still rebuilt
    # Nothing is touched however often it is asked.
    before = (sorted(p.name for p in world.observe().pods), world.cluster_id)
    for _ in range(5):
        step(world, bad)
    assert (sorted(p.name for p in world.observe().pods), world.cluster_id) == before


def test_the_quorums_own_cluster_id_pinned_later_is_accepted() -> None:
    world, spec = converged(3)
    pinned = with_spec(spec, cluster_id=world.cluster_id)
    world.generation += 1
    result = plan(pinned, world.observe())
    assert result.action.reason == "Reconciled"
    assert result.condition("Degraded").status == "False"
    assert result.status_fields["observedGeneration"] == world.generation


def test_correcting_a_wrong_cluster_id_heals_the_report() -> None:
    world, spec = converged(3)
    world.generation += 1
    assert isinstance(plan(with_spec(spec, cluster_id=kafka_uuid(4242)), world.observe()).action,
                       ReportDegraded)
    world.generation += 1
    fixed = plan(with_spec(spec, cluster_id=world.cluster_id), world.observe())
    assert fixed.condition("Degraded").status == "False"
    assert fixed.condition("Ready").status == "True"


def test_volumes_formatted_for_another_cluster_are_reported_degraded_and_kept() -> None:
    spec = models.KRaftQuorumSpec(replicas=3)
    world = World()
    while len(world.pods) < 3:  # ids recorded, claims and pods created
        step(world, spec)
    refusal = ("error: /var/lib/kraft/data/meta.properties is formatted for cluster "
               "OLDaaaaaaaaaaaaaaaaaaa, not NEWbbbbbbbbbbbbbbbbbbb: this volume holds another "
               "cluster's data.")
    observed = world.observe()
    pods = tuple(replace(p, phase=PodPhase.PENDING, ready=False, format_refused=refusal)
                 for p in observed.pods)
    assert pods
    result = plan(spec, replace(observed, pods=pods, quorum=None))
    assert isinstance(result.action, ReportDegraded)
    assert result.action.reason == "ForeignVolume"
    degraded = result.condition("Degraded")
    assert degraded.status == "True" and degraded.reason == "ForeignVolume"
    for text in ("OLDaaaaaaaaaaaaaaaaaaa", "NEWbbbbbbbbbbbbbbbbbbb", "spec.clusterId",
                 "delete the claims", "data-kq-0"):
        assert text in degraded.message
    # one story with the CRD's rule on spec.clusterId: a new object, never an edit of this one
    assert ("delete the KRaftQuorum and create it again with spec.clusterId: "
            "OLDaaaaaaaaaaaaaaaaaaa") in degraded.message
    assert "editing spec.clusterId of this one is refused" in degraded.message
    assert "delete the KRaftQuorum and create it again" in models.CLUSTER_ID_FIXED
