"""plan(spec, observed) -> Plan: the one next safe action, the conditions and the status.

The operations are asked in a fixed order; the first that has something to do decides:

  paused -> a spec the operator's allow-lists refuse -> invalid config -> spec.clusterId not the quorum's -> record a new quorum's ids ->
  a pod's volume formatted for another cluster (ForeignVolume: reported, nothing deleted)
  no quorum answers: never formed -> bootstrap; formed -> cold start or quorum loss/recovery
  a quorum answers: clear the recovery annotation -> failed Nodes -> missing voter pods ->
  the recorded operation in flight -> stale incarnations (disk) -> scale down -> scale up ->
  rolling update -> nothing: the spec is realized (observedGeneration).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kraft_operator import models
from kraft_operator.observed import Observed, Operation, ReplicaInfo
from kraft_operator.planner import format as format_op
from kraft_operator.planner import (
    recover,
    replace_disk,
    replace_node,
    roll,
    scale,
    tls_migration,
)
from kraft_operator.planner.actions import (
    Action,
    AddVoter,
    RecordCluster,
    RemoveVoter,
    ReportDegraded,
    Wait,
)
from kraft_operator.planner.context import (
    MEMBERSHIP_RETRY_SECONDS,
    OP_ADDING,
    OP_REMOVING,
    OP_ROLLING,
    Context,
    Decision,
    parse_target,
)
from kraft_operator.planner.listeners import PHASES, tls_status
from kraft_operator.policy import OperatorPolicy

CONDITION_TYPES = (
    "Ready", "Quorate", "Progressing", "Degraded", "ReconciliationPaused", "AwaitingApproval",
)


@dataclass(frozen=True, slots=True)
class ConditionUpdate:
    """One condition as the planner computed it (the handler keeps lastTransitionTime)."""

    type: str
    status: str
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """The planner's answer: one action, every condition, and a status merge-patch
    (a None value removes the field)."""

    action: Action
    conditions: tuple[ConditionUpdate, ...]
    status_fields: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    message: str = ""

    def condition(self, type_: str) -> ConditionUpdate:
        return next(c for c in self.conditions if c.type == type_)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _is_paused(spec: models.KRaftQuorumSpec, observed: Observed) -> bool:
    value = observed.annotations.get(models.PAUSE_ANNOTATION, "")
    return spec.paused or value.lower() == "true"


def _continue_operation(ctx: Context, op: Operation) -> Decision | None:
    """Carry on with a recorded membership change or restart the quorum does not show done."""
    if op.type == OP_ROLLING:
        node_id = int(op.target)
        pod = ctx.pods.get(node_id)
        if pod is None:
            return None  # restore_missing re-creates it
        if not pod.deleting and pod.spec_hash != ctx.desired_hash:
            return None  # the spec changed again (a fixed one after a halt): roll afresh
        return roll.continue_rolling(ctx)
    if op.type not in (OP_ADDING, OP_REMOVING):
        return None
    key = parse_target(op.target)
    reason = "AddingVoter" if op.type == OP_ADDING else "RemovingVoter"
    if op.type == OP_ADDING:
        pod = ctx.live_pod(key[0])
        if pod is None or pod.directory_id != key[1]:
            return None  # the incarnation is gone: the add is moot, plan afresh
        if pod.spec_hash != ctx.desired_hash or key[0] >= ctx.replicas:
            return None  # the spec changed (a joiner that never started): plan afresh
        if pod.auto_join:
            return Decision(Wait("AwaitingAutoJoin", f"node {op.target} adds itself once "
                                 "caught up"), reason)
    if ctx.now - op.started_at < MEMBERSHIP_RETRY_SECONDS:
        return Decision(Wait("MembershipChangeInFlight", f"{op.type} {op.target} sent; "
                             "waiting for the quorum to show it"), reason)
    others = [p.name for p in ctx.pending_joiners() if (p.node_id, p.directory_id) != key]
    if others:
        return Decision(Wait("MembershipChangeInFlight", f"{', '.join(sorted(others))} may "
                             "still add itself (auto-join)"), reason)
    if op.type == OP_ADDING:
        observer = ctx.observer(key)
        if observer is not None and ctx.can_add(observer):
            return Decision(AddVoter(*key), reason, operation=ctx.operation(op.type, op.target),
                            message=f"AddRaftVoter {op.target} again (attempt {op.attempt + 1})")
        return Decision(Wait("ObserverCatchingUp", f"node {op.target} is not caught up"), reason)
    voter = ctx.voter(key)
    if voter is None:
        return None
    pod = ctx.pods.get(key[0])
    runs_with_auto_join = pod is not None and pod.directory_id == key[1] and pod.auto_join
    if not runs_with_auto_join and ctx.can_remove(voter):
        return Decision(RemoveVoter(*key), reason, operation=ctx.operation(op.type, op.target),
                        message=f"RemoveRaftVoter {op.target} again (attempt {op.attempt + 1})")
    return Decision(Wait("RemovalWouldLoseMajority", f"{op.target} cannot leave safely now"),
                    reason, degraded="VoterLagging")


def _decide(ctx: Context) -> Decision | None:
    """The first operation with something to do, or None when the spec is realized."""
    if ctx.quorum is None:
        if not ctx.obs.last_known_voters:
            return format_op.bootstrap(ctx)
        return recover.no_quorum(ctx)
    steps = (recover.clear_annotation, replace_node.replace_failed_node, roll.restore_missing)
    for step in steps:
        decision = step(ctx)
        if decision is not None:
            return decision
    if ctx.leader_id is None:
        # Answered, but mid-election: caught-up flags are stale and membership calls fail.
        return Decision(Wait("ElectionInProgress", "the quorum has no leader right now"), None)
    op = ctx.obs.operation
    if op is not None and not ctx.op_done(op):
        decision = _continue_operation(ctx, op)
        if decision is not None:
            return decision
    for step in (replace_disk.replace_disk, scale.scale_down, scale.scale_up, roll.roll,
                 tls_migration.step):
        decision = step(ctx)
        if decision is not None:
            return decision
    return None


def _replica_status(ctx: Context, replica: ReplicaInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"id": replica.replica_id, "directoryId": replica.directory_id,
                           "lag": replica.lag, "caughtUp": ctx.caught_up(replica)}
    if replica.endpoints:
        out["endpoint"] = f"{replica.endpoints[0].host}:{replica.endpoints[0].port}"
    pod = ctx.pods.get(replica.replica_id)
    if pod is not None and pod.directory_id == replica.directory_id:
        out["pod"] = pod.name
    if replica.last_caught_up_timestamp_ms is not None:
        out["lastCaughtUpTime"] = _rfc3339(replica.last_caught_up_timestamp_ms / 1000)
    return out


def _runs_here(ctx: Context, observer: ReplicaInfo) -> bool:
    """An observer the leader still reports is shown while a pod of the quorum runs it: its
    node's pod holds that incarnation, or has not reported one yet. A removed node's or a
    wiped volume's old incarnation stays in DescribeQuorum until the leader changes or its
    observer session ends, and is no replica of the quorum any more."""
    pod = ctx.pods.get(observer.replica_id)
    return pod is not None and pod.directory_id in (None, observer.directory_id)


def _op_status(op: Operation | None) -> dict[str, Any] | None:
    if op is None:
        return None
    return {"type": op.type, "target": op.target, "startedAt": _rfc3339(op.started_at),
            "attempt": op.attempt}


def _realized(ctx: Context) -> bool:
    """Every wanted node is a healthy voter on a current pod, and nothing else is left."""
    if ctx.quorum is None or len(ctx.voters) != ctx.replicas:
        return False
    if {v.replica_id for v in ctx.voters} != set(ctx.desired_ids):
        return False
    if not all(ctx.healthy(v) for v in ctx.voters):
        return False
    if any(p.node_id >= ctx.replicas or p.deleting or p.spec_hash != ctx.desired_hash
           or not p.ready for p in ctx.pods.values()):
        return False
    return not replace_disk.stale_voters(ctx)


def plan(spec: models.KRaftQuorumSpec, observed: Observed,
         policy: OperatorPolicy | None = None) -> Plan:
    """The one next safe action for this spec and what was observed, with the conditions and
    the status to write. Pure: the same input always gives the same plan. `policy`: the
    operator's allow-lists (a spec they refuse is only reported: ImageNotAllowed,
    ServiceAccountNotAllowed)."""
    ctx = Context(spec, observed)
    paused = _is_paused(spec, observed)
    warnings = []
    if spec.replicas % 2 == 0:
        warnings.append(f"replicas={spec.replicas} is even: it tolerates no more failures than "
                        f"{spec.replicas - 1}")
    decision: Decision | None
    problems = models.check_config(spec.config)
    refused = policy.refusal(spec) if policy is not None else None
    if paused:
        decision = Decision(Wait("Paused", "reconciliation is paused"), None)
    elif refused is not None:
        decision = Decision(ReportDegraded(refused.reason, refused.message), None,
                            degraded=refused.reason)
    elif problems:
        decision = Decision(ReportDegraded("InvalidConfig", "; ".join(map(str, problems))),
                            None, degraded="InvalidConfig")
    elif observed.tls_problem:
        reason = "IssuerRefNotSupported" if "issuerRef" in observed.tls_problem else "TlsNotReady"
        decision = Decision(ReportDegraded(reason, observed.tls_problem), None, degraded=reason)
    else:
        decision = (format_op.cluster_id_mismatch(ctx) or format_op.record_cluster(ctx)
                    or format_op.foreign_volumes(ctx) or _decide(ctx))
    realized = decision is None and _realized(ctx)
    if decision is None:
        decision = Decision(Wait("Reconciled" if realized else "Settling",
                                 "the spec is realized" if realized else "waiting for the "
                                 "quorum to settle"), None)

    migration = observed.listeners.migration
    if migration is not None and decision.progressing == roll.REASON:
        # a roll of a TLS migration's phase: the condition says which
        decision = dataclasses.replace(decision, message=(
            f"{decision.message or getattr(decision.action, 'message', '')} (TLS migration "
            f"phase {migration.phase} of {PHASES})").strip())
    status = _status(ctx, decision, realized)
    conditions = _conditions(ctx, decision, realized, paused)
    return Plan(decision.action, conditions, status, tuple(warnings),
                decision.message or getattr(decision.action, "message", ""))


def _status(ctx: Context, decision: Decision, realized: bool) -> dict[str, Any]:
    obs = ctx.obs
    status: dict[str, Any] = {}
    action = decision.action
    if isinstance(action, RecordCluster):
        status["clusterId"] = action.cluster_id
        status["initialVoters"] = [{"id": n, "directoryId": d} for n, d in action.initial_voters]
    elif obs.cluster_id:
        status["clusterId"] = obs.cluster_id
    quorum = ctx.quorum
    if quorum is not None:
        status["leader"] = ({"id": quorum.leader_id, "epoch": quorum.leader_epoch}
                            if quorum.leader_id >= 0 else None)
        status["highWatermark"] = quorum.high_watermark
        status["kraftVersion"] = quorum.kraft_version
        status["voters"] = [_replica_status(ctx, v)
                            for v in sorted(ctx.voters, key=lambda v: v.key)]
        status["observers"] = [_replica_status(ctx, o)
                               for o in sorted(ctx.observers, key=lambda o: o.key)
                               if _runs_here(ctx, o)]
        status["replicas"] = len(ctx.voters)
    else:
        status["leader"] = None
    status["healthyVoters"] = ctx.healthy_count()
    status["votersReady"] = f"{status['healthyVoters']}/{ctx.replicas}"
    op = obs.operation
    if op is not None and ctx.op_done(op):
        op = None
    if decision.operation is not None:
        op = decision.operation
    status["currentOperation"] = _op_status(op)
    if realized:
        status["observedGeneration"] = obs.generation
    status["tls"] = tls_migration.unformed(ctx) or tls_status(obs.listeners)
    status.update(decision.extra_status)
    return status


def _cond(type_: str, value: bool, reason: str, message: str = "") -> ConditionUpdate:
    return ConditionUpdate(type_, "True" if value else "False", reason, message)


def _conditions(ctx: Context, decision: Decision, realized: bool,
                paused: bool) -> tuple[ConditionUpdate, ...]:
    quorum = ctx.quorum
    quorate = quorum is not None and quorum.leader_id >= 0
    action = decision.action
    message = decision.message or getattr(action, "message", "")
    degraded = decision.degraded
    if degraded is None and replace_disk.stale_voters(ctx):
        stale = ", ".join(f"{v.replica_id}:{v.directory_id}" for v in replace_disk.stale_voters(ctx))
        degraded, message = "StaleIncarnation", message or f"stale voters: {stale}"
    degraded_message = message if degraded else ""
    if degraded == "QuorumLost" and isinstance(action, ReportDegraded | Wait):
        degraded_message = action.message
    progressing = decision.progressing
    approval = decision.awaiting_approval
    return (
        _cond("Ready", realized and quorate, "Reconciled" if realized else "NotReconciled",
              "" if realized else message),
        _cond("Quorate", quorate,
              "LeaderElected" if quorate else "NoQuorum",
              f"leader {quorum.leader_id} epoch {quorum.leader_epoch}"
              if quorate and quorum is not None else "no leader answers DescribeQuorum"),
        _cond("Progressing", progressing is not None and not paused,
              "Paused" if paused else (progressing or ("Reconciled" if realized else "Idle")),
              message if progressing else ""),
        _cond("Degraded", degraded is not None, degraded or "AsExpected", degraded_message),
        _cond("ReconciliationPaused", paused, "Paused" if paused else "Reconciling"),
        _cond("AwaitingApproval", approval is not None, approval or "NothingToApprove",
              getattr(action, "message", "") if approval else ""),
    )
