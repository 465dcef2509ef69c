"""The planner's side of the operator's PKI: a new trust generation rolls the pods as a spec
change does (one at a time, the leader last after it resigns), a leaf renewal alone rolls
nothing, and a PKI that cannot be made is reported Degraded with nothing created."""

from __future__ import annotations

from kraft_operator import models
from kraft_operator.planner import (
    CreatePod,
    CreatePVC,
    DeletePod,
    ReportDegraded,
    ResignLeader,
    Wait,
    plan,
    pod_spec_hash,
)

from tests.operator.world import World, realized, run


def converged(replicas: int = 3, generation: str = "tls-1") -> tuple[World, models.KRaftQuorumSpec]:
    spec = models.KRaftQuorumSpec(replicas=replicas)
    world = World(tls_generation=generation)
    run(world, spec)
    assert realized(world, spec), world.events
    return world, spec


def test_a_plaintext_quorums_pod_hash_is_what_it_was_before_tls() -> None:
    spec = models.KRaftQuorumSpec()
    assert pod_spec_hash(spec, "") == pod_spec_hash(spec)
    assert pod_spec_hash(spec, "tls-1") != pod_spec_hash(spec)
    assert pod_spec_hash(spec, "tls-1") != pod_spec_hash(spec, "tls-2")


def test_pods_are_created_with_the_trust_generation_in_their_hash() -> None:
    world, spec = converged(3, "tls-1")
    assert {p.spec_hash for p in world.pods.values()} == {pod_spec_hash(spec, "tls-1")}


def test_a_new_trust_generation_rolls_one_pod_at_a_time_the_leader_last() -> None:
    world, spec = converged(3, "tls-1")
    world.leader = next(k for k in world.voters if k[0] == 1)
    world.tls_generation = "tls-2"  # a CA renewal step: a new trust bundle
    plans = run(world, spec)
    order = [(type(p.action).__name__, p.action.node_id) for p in plans
             if isinstance(p.action, DeletePod | ResignLeader)]
    assert {n for _, n in order[:2]} == {0, 2}  # the followers first
    assert order[2:] == [("ResignLeader", 1), ("DeletePod", 1)]
    rolled = [p for p in plans if isinstance(p.action, DeletePod)]
    assert all(p.condition("Progressing").reason == "Rolling" for p in rolled)
    assert realized(world, spec)
    assert {p.spec_hash for p in world.pods.values()} == {pod_spec_hash(spec, "tls-2")}


def test_a_leaf_renewal_alone_rolls_nothing() -> None:
    world, spec = converged(3, "tls-1")
    result = plan(spec, world.observe())  # same generation: certificates re-issued in place
    assert isinstance(result.action, Wait) and result.action.reason == "Reconciled"


def test_a_pki_problem_is_degraded_and_creates_nothing() -> None:
    spec = models.KRaftQuorumSpec(replicas=3)
    world = World(tls_problem="spec.tls.caSecretName: Secret mine is not found (or empty)")
    for _ in range(3):
        result = plan(spec, world.observe())
        world.apply(result.action)
        world.tick()
        assert isinstance(result.action, ReportDegraded)
        assert not isinstance(result.action, CreatePod | CreatePVC)
    assert result.condition("Degraded").reason == "TlsNotReady"
    assert "caSecretName" in result.condition("Degraded").message
    assert not world.pods and not world.pvcs


def test_an_issuer_ref_is_refused_by_name() -> None:
    world = World(tls_problem="spec.tls.issuerRef: cert-manager issuers are not supported yet")
    result = plan(models.KRaftQuorumSpec(), world.observe())
    assert result.condition("Degraded").reason == "IssuerRefNotSupported"
