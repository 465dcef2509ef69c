"""Property tests of the planner: random observed states, and random runs of a simulated world.

The safety judgements here are written out again from the rules, not taken from the planner's
own helpers, so a slip in those helpers shows up as a counterexample.
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kraft_operator import models
from kraft_operator.observed import (
    NodeState,
    Observed,
    Operation,
    PodPhase,
    PodState,
    PvcPhase,
    PvcState,
    QuorumInfo,
    ReplicaInfo,
)
from kraft_operator.planner import (
    AddVoter,
    CreatePod,
    CreatePVC,
    DeletePod,
    DeletePVC,
    ForceSingleVoter,
    RemoveVoter,
    ReportDegraded,
    ResignLeader,
    Wait,
    plan,
    pod_spec_hash,
)

from tests.operator.world import World, kafka_uuid, realized, run, with_spec

# More examples for a deeper search: KRAFT_PLANNER_EXAMPLES=2000 pytest tests/operator
SCALE = max(1, int(os.environ.get("KRAFT_PLANNER_EXAMPLES", "0")) // 80 or 1)
MAX_ID = 6
DIRS = {n: (kafka_uuid(100 + n), kafka_uuid(200 + n), kafka_uuid(300 + n)) for n in range(MAX_ID)}
NODES = ("k8s-a", "k8s-b", "k8s-c")
NOW = 10_000.0
SPEC_IMAGES = ("img:1", "img:2")


def majority(n: int) -> int:
    return n // 2 + 1


@st.composite
def specs(draw: st.DrawFn) -> models.KRaftQuorumSpec:
    return models.KRaftQuorumSpec(
        replicas=draw(st.integers(1, 5)),
        image=draw(st.sampled_from(SPEC_IMAGES)),
        auto_join=draw(st.booleans()),
        node_failure_grace_period_seconds=draw(st.sampled_from([0, 60, 300])),
    )


@st.composite
def observed_states(draw: st.DrawFn, spec: models.KRaftQuorumSpec) -> Observed:
    hashes = [pod_spec_hash(with_spec(spec, image=i)) for i in SPEC_IMAGES]
    node_ids = range(MAX_ID)
    pvcs = []
    for n in node_ids:
        if draw(st.booleans()):
            pvcs.append(PvcState(
                f"data-{n}", n, draw(st.sampled_from(DIRS[n])),
                phase=draw(st.sampled_from([PvcPhase.BOUND] * 4 + [PvcPhase.LOST])),
                deleting=draw(st.booleans()) and draw(st.booleans()),
                node_name=draw(st.none() | st.sampled_from(NODES))))
    pods = []
    for n in node_ids:
        if draw(st.booleans()):
            pods.append(PodState(
                f"kq-{n}", n, draw(st.sampled_from(DIRS[n])),
                phase=draw(st.sampled_from([PodPhase.RUNNING] * 3 + [PodPhase.PENDING])),
                ready=draw(st.booleans()),
                node_name=draw(st.sampled_from(NODES)),
                deleting=draw(st.booleans()) and draw(st.booleans()),
                spec_hash=draw(st.sampled_from(hashes)),
                auto_join=draw(st.booleans())))
    nodes = tuple(NodeState(name, draw(st.booleans()) or draw(st.booleans()),
                            draw(st.sampled_from([NOW - 1000, NOW - 10])))
                  for name in NODES)
    quorum = None
    voter_keys = draw(st.lists(st.tuples(st.sampled_from(list(node_ids)), st.integers(0, 2)),
                               max_size=6, unique_by=lambda t: t[0]))
    voters = tuple(ReplicaInfo(n, DIRS[n][i], caught_up=draw(st.booleans()))
                   for n, i in sorted(voter_keys))
    if voters and draw(st.integers(0, 4)) > 0:
        leader = draw(st.sampled_from([v.replica_id for v in voters] + [-1]))
        observers = tuple(ReplicaInfo(p.node_id, p.directory_id or "", caught_up=draw(st.booleans()))
                          for p in pods if (p.node_id, p.directory_id)
                          not in {v.key for v in voters})
        quorum = QuorumInfo(leader, 5, 100, 1, voters, observers)
    operation = None
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["AddingVoter", "RemovingVoter", "Rolling"]))
        n = draw(st.sampled_from(list(node_ids)))
        target = str(n) if kind == "Rolling" else f"{n}:{draw(st.sampled_from(DIRS[n]))}"
        operation = Operation(kind, target, draw(st.sampled_from([NOW - 5, NOW - 100, NOW - 5000])))
    formed = draw(st.booleans())
    last_known = tuple(v.key for v in voters) if formed and voters else ()
    annotations = {}
    if draw(st.booleans()) and draw(st.booleans()):
        annotations[models.RECOVER_ANNOTATION] = str(draw(st.integers(0, MAX_ID)))
    initial = tuple((n, DIRS[n][0]) for n in range(spec.replicas))
    return Observed(
        generation=3, pods=tuple(pods), pvcs=tuple(pvcs), nodes=nodes, quorum=quorum,
        operation=operation, cluster_id=kafka_uuid(1), initial_voters=initial,
        last_known_voters=last_known, annotations=annotations, now=NOW,
        fresh_ids=tuple(kafka_uuid(900 + i) for i in range(10)))


# --- independent judgements ----------------------------------------------------------------


def live_pod(observed: Observed, node_id: int) -> PodState | None:
    return next((p for p in sorted(observed.pods, key=lambda p: (p.deleting, p.name))
                 if p.node_id == node_id and not p.deleting), None)


def is_healthy(observed: Observed, voter: ReplicaInfo) -> bool:
    quorum = observed.quorum
    assert quorum is not None
    if not (voter.caught_up or voter.replica_id == quorum.leader_id):
        return False
    pod = live_pod(observed, voter.replica_id)
    return pod is not None and pod.directory_id == voter.directory_id \
        and pod.phase == PodPhase.RUNNING


def runs(observed: Observed, voter: ReplicaInfo) -> bool:
    """The voter's own process may be running: its pod is Running on a Ready Node."""
    pod = live_pod(observed, voter.replica_id)
    if pod is None or pod.directory_id != voter.directory_id or pod.phase != PodPhase.RUNNING:
        return False
    return node_ready(observed, pod.node_name)


def node_ready(observed: Observed, name: str | None) -> bool:
    """An unnamed Node is not known to be down; a named one must exist and be Ready."""
    if name is None:
        return True
    node = next((n for n in observed.nodes if n.name == name), None)
    return node is not None and node.ready


def healthy_set(observed: Observed) -> set[tuple[int, str]]:
    assert observed.quorum is not None
    return {v.key for v in observed.quorum.voters if is_healthy(observed, v)}


def change_in_flight(observed: Observed, retry_of: tuple[int, str] | None = None) -> bool:
    """A membership change that has not shown in the quorum, or a pod that may auto-join;
    `retry_of` is the change the action repeats (the recorded one), which does not count."""
    quorum = observed.quorum
    keys = {v.key for v in quorum.voters} if quorum else set()
    op = observed.operation
    if op is not None and op.type in ("AddingVoter", "RemovingVoter"):
        node, _, directory = op.target.partition(":")
        key = (int(node), directory)
        if key != retry_of:
            if op.type == "RemovingVoter" and key in keys:
                return True
            pod = live_pod(observed, key[0])
            if op.type == "AddingVoter" and key not in keys and pod is not None \
                    and pod.directory_id == key[1]:
                return True
    return any(not p.deleting and p.auto_join and p.phase in (PodPhase.RUNNING, PodPhase.PENDING)
               and (p.node_id, p.directory_id) not in keys
               and (p.node_id, p.directory_id) != retry_of for p in observed.pods)


def tiny_outage(observed: Observed, action: object) -> bool:
    """A quorum of one or two voters cannot restart a pod without a pause: the planner may
    restart one when every voter is healthy (its volume is kept)."""
    quorum = observed.quorum
    return (
        isinstance(action, DeletePod)
        and action.reason in ("Rolling", "StopBeforeRemove")
        and quorum is not None
        and len(quorum.voters) <= 2
        and len(healthy_set(observed)) == len(quorum.voters)
    )


def check_safety(spec: models.KRaftQuorumSpec, observed: Observed, action: object) -> None:
    quorum = observed.quorum
    starts_change = isinstance(action, AddVoter | RemoveVoter) or (
        isinstance(action, CreatePod) and action.auto_join and quorum is not None
        and (action.node_id, action.directory_id) not in {v.key for v in quorum.voters})
    if starts_change:
        key = (action.node_id, action.directory_id)  # type: ignore[attr-defined]
        op = observed.operation
        retry = op is not None and op.target == f"{key[0]}:{key[1]}" and (
            (op.type == "AddingVoter") == isinstance(action, AddVoter | CreatePod))
        assert not change_in_flight(observed, key if retry else None), \
            f"second membership change: {action}"
    if isinstance(action, AddVoter | RemoveVoter | ResignLeader):
        assert quorum is not None
    if isinstance(action, ForceSingleVoter):
        assert quorum is None and observed.annotations.get(models.RECOVER_ANNOTATION) == \
            str(action.node_id)
    if quorum is None:
        if observed.last_known_voters and not observed.annotations:
            assert not isinstance(action, CreatePVC | DeletePVC | ForceSingleVoter)
        return
    voters = quorum.voters
    healthy = healthy_set(observed)
    had_majority = len(healthy) >= majority(len(voters))
    if isinstance(action, DeletePod):
        pod = next(p for p in observed.pods if p.name == action.name)
        key = (pod.node_id, pod.directory_id)
        process_may_run = pod.phase == PodPhase.RUNNING and node_ready(observed, pod.node_name)
        if key in {v.key for v in voters} and process_may_run \
                and not tiny_outage(observed, action):
            if key in healthy:
                assert len(healthy - {key}) >= majority(len(voters)), \
                    f"stop breaks the healthy majority: {action}"
            else:
                # a lagging voter still fetches: the others must be a running majority
                running = {v.key for v in voters if runs(observed, v)} - {key}
                assert len(running) >= majority(len(voters)), \
                    f"stop breaks the fetching majority: {action}"
    if isinstance(action, RemoveVoter):
        key = (action.node_id, action.directory_id)
        rest = [v for v in voters if v.key != key]
        assert rest, "removed the last voter"
        left = healthy - {key}
        assert len(left) >= majority(len(rest)), f"removal breaks majority: {action}"
        assert left, "removed the last caught-up voter"
        pod = live_pod(observed, action.node_id)
        assert not (pod is not None and pod.directory_id == action.directory_id and pod.auto_join), \
            "removed a voter whose process runs with auto-join (KAFKA-19850)"
    if isinstance(action, AddVoter):
        key = (action.node_id, action.directory_id)
        observer = next(o for o in quorum.observers if o.key == key)
        assert observer.caught_up
        if had_majority:
            assert len(healthy) + 1 >= majority(len(voters) + 1)
    if isinstance(action, ResignLeader):
        assert any(k != (action.node_id,) and k[0] != action.node_id for k in healthy), \
            "resigned with no healthy successor"
    if isinstance(action, DeletePVC):
        pvc = next(p for p in observed.pvcs if p.name == action.name)
        assert (pvc.node_id, pvc.directory_id) not in healthy, "deleted a healthy voter's volume"
    if isinstance(action, CreatePVC):
        known = {d for v in voters for d in [v.directory_id]} | \
            {p.directory_id for p in observed.pvcs} | {d for _, d in observed.last_known_voters}
        assert action.directory_id not in known, "an empty volume reuses a directory id"


@settings(max_examples=600 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_states_get_a_safe_action(data: st.DataObject) -> None:
    spec = data.draw(specs())
    observed = data.draw(observed_states(spec))
    result = plan(spec, observed)
    assert plan(spec, observed) == result  # pure: the same input, the same plan
    check_safety(spec, observed, result.action)
    assert {c.type for c in result.conditions} == {
        "Ready", "Quorate", "Progressing", "Degraded", "ReconciliationPaused", "AwaitingApproval"}
    if "observedGeneration" in result.status_fields:
        assert isinstance(result.action, Wait) and result.action.reason == "Reconciled"


@settings(max_examples=150 * SCALE, deadline=None)
@given(st.data())
def test_paused_never_acts(data: st.DataObject) -> None:
    spec = with_spec(data.draw(specs()), paused=True)
    observed = data.draw(observed_states(spec))
    assert plan(spec, observed).action == Wait("Paused", "reconciliation is paused")


@settings(max_examples=200 * SCALE, deadline=None)
@given(st.data())
def test_lost_quorum_without_annotation_destroys_nothing(data: st.DataObject) -> None:
    spec = data.draw(specs())
    observed = data.draw(observed_states(spec))
    if observed.quorum is not None or not observed.last_known_voters:
        observed = Observed(**{**{f: getattr(observed, f) for f in observed.__dataclass_fields__},
                               "quorum": None,
                               "last_known_voters": observed.last_known_voters or ((0, DIRS[0][0]),)})
    observed = Observed(**{**{f: getattr(observed, f) for f in observed.__dataclass_fields__},
                           "annotations": {}})
    action = plan(spec, observed).action
    assert not isinstance(action, CreatePVC | DeletePVC | AddVoter | RemoveVoter | ForceSingleVoter)
    if isinstance(action, ReportDegraded):
        assert action.reason in ("QuorumLost", "InvalidConfig")


# --- simulated runs -------------------------------------------------------------------------


EVENTS = st.sampled_from(["scale", "image", "lose_disk", "restart", "node_fail", "auto_join",
                          "bad_image", "bad_scale", "cold_start", "leader_leaves",
                          "local_node_fail"])


@settings(max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.integers(1, 5), events=st.lists(st.tuples(EVENTS, st.integers(0, 9)),
                                                min_size=1, max_size=4),
       auto_join=st.booleans(),
       faults=st.lists(st.tuples(st.integers(1, 12), st.sampled_from(["kill", "stall"]),
                                 st.integers(0, 9)), max_size=3))
@example(start=3, events=[("bad_scale", 0)], auto_join=True, faults=[])
@example(start=3, events=[("bad_scale", 0)], auto_join=False, faults=[])
@example(start=3, events=[("bad_image", 0)], auto_join=True, faults=[])
def test_simulated_loop_stays_safe_and_converges(start: int, events: list[tuple[str, int]],
                                                 auto_join: bool,
                                                 faults: list[tuple[int, str, int]]) -> None:
    spec = models.KRaftQuorumSpec(replicas=start, auto_join=auto_join,
                                  node_failure_grace_period_seconds=30)
    world = World()

    def check(w: World, observed: Observed, result: object) -> None:
        check_safety(spec, observed, result.action)  # type: ignore[attr-defined]
        if observed.quorum is not None:
            # a quorum that answers is never broken by the planner's own action
            probe = copy.deepcopy(w)
            probe.apply(result.action)  # type: ignore[attr-defined]
            if not tiny_outage(observed, result.action):  # type: ignore[attr-defined]
                assert probe.quorum_answers() or not w.quorum_answers(), \
                    f"quorum lost by {result.action}"  # type: ignore[attr-defined]

    def disturb(w: World, step: int) -> None:
        """Faults while the operator works: a pod dies (its volume stays) or falls behind."""
        for at, kind, node in faults:
            if at == step and w.pods:
                pod = w.pods[sorted(w.pods)[node % len(w.pods)]]
                if kind == "kill":
                    del w.pods[pod.node_id]
                else:
                    pod.age = -3  # lags for a few ticks

    run(world, spec, check=check)
    assert realized(world, spec)
    for kind, arg in events:
        if kind == "scale":
            spec = with_spec(spec, replicas=1 + arg % 5)
        elif kind == "image":
            spec = with_spec(spec, image=f"kraft-quorum:{arg}")
        elif kind == "auto_join":
            spec = with_spec(spec, auto_join=not spec.auto_join)
        elif kind == "bad_image":
            # a spec whose pods never start: the quorum must survive it, then a fix converges
            bad = with_spec(spec, image=f"kraft-quorum:bad{arg}")
            world.broken_hashes.add(pod_spec_hash(bad))
            world.generation += 1
            run(world, bad, steps=40, check=check)
            assert world.quorum_answers() or spec.replicas <= 2
            spec = with_spec(spec, image=f"kraft-quorum:fixed{arg}")
        elif kind == "bad_scale":
            # a scale-up whose new pods never start, then the image is fixed
            bad = with_spec(spec, replicas=min(9, spec.replicas + 1 + arg % 2),
                            image=f"kraft-quorum:bad{arg}")
            world.broken_hashes.add(pod_spec_hash(bad))
            world.generation += 1
            run(world, bad, steps=40, check=check)
            spec = with_spec(bad, image=f"kraft-quorum:fixed{arg}")
        elif kind == "cold_start":
            world.pods.clear()
        elif kind == "leader_leaves":
            highest = max(world.voters)
            world.leader = highest
            spec = with_spec(spec, replicas=max(1, spec.replicas - 1 - arg % 2))
        elif kind == "lose_disk" and spec.replicas >= 3:
            world.lose_disk(arg % spec.replicas)
        elif kind == "restart":
            world.pods.pop(arg % spec.replicas, None)
        elif kind == "local_node_fail" and spec.replicas >= 3:
            # the node's volume is node-local: it goes with its Node
            victim = arg % spec.replicas
            for pod in world.pods.values():
                pod.node_name = "k8s-a" if pod.node_id == victim else "k8s-b"
            if victim in world.pvcs:
                world.pvcs[victim] = replace(world.pvcs[victim], node_name="k8s-a")
            world.fail_k8s_node("k8s-a")
        elif kind == "node_fail" and spec.replicas >= 3:
            victim = arg % spec.replicas
            for pod in world.pods.values():
                pod.node_name = "k8s-a" if pod.node_id == victim else "k8s-b"
            world.fail_k8s_node("k8s-a")
        world.generation += 1
        world.tick()
        plans = run(world, spec, steps=300, check=check, disturb=disturb)
        assert realized(world, spec), (kind, arg, [type(p.action).__name__ for p in plans[-8:]])
        world.nodes = {n: NodeState(n, True, world.now) for n in world.nodes}
