"""Pods: CreatePod, DeletePod, and ResignLeader (a graceful stop of the leader's pod: on
SIGTERM `kraft run` resigns with EndQuorumEpoch before it exits, so another caught-up voter
takes over at once)."""

from __future__ import annotations

from kraft_operator import models, render
from kraft_operator.actions.base import Env, Outcome
from kraft_operator.kube import Conflict, NotFound
from kraft_operator.planner import CreatePod, DeletePod, ResignLeader
from kraft_operator.planner.context import Context


async def create_pod(action: CreatePod, env: Env) -> Outcome:
    ref = env.ref
    cluster_id = env.observed.cluster_id
    if not cluster_id:
        return Outcome(False, "NoClusterId", "no cluster id is recorded in status yet")
    name = ref.pod_name(action.node_id)
    try:
        await env.kube.create("v1", "pods", ref.namespace, render.pod(ref, action, cluster_id))
    except Conflict:
        existing = await env.kube.get("v1", "pods", ref.namespace, name)
        if existing["metadata"].get("deletionTimestamp"):
            return Outcome(False, "PodStillStopping", f"pod {name} is still stopping")
        return Outcome(True, "CreatedPod", f"pod {name} exists")
    mode = "--initial-controllers" if action.format_mode.value == "initial-controllers" \
        else "--no-initial-controllers"
    return Outcome(True, "CreatedPod",
                   f"pod {name} (node {action.node_id}, format {mode}, auto-join "
                   f"{'on' if action.auto_join else 'off'})")


async def _delete(env: Env, name: str, grace: int | None) -> bool:
    try:
        await env.kube.delete("v1", "pods", env.ref.namespace, name, grace_period_s=grace)
    except NotFound:
        return False
    return True


async def delete_pod(action: DeletePod, env: Env) -> Outcome:
    await _delete(env, action.name, 0 if action.force else None)
    how = "force-deleted" if action.force else "deleted"
    return Outcome(True, f"DeletedPod{action.reason}",
                   f"pod {action.name} {how} ({action.reason})")


async def resign_leader(action: ResignLeader, env: Env) -> Outcome:
    pod = env.pod_of(action.node_id)
    if pod is None:
        return Outcome(True, "LeaderResigned", f"leader {action.node_id} has no running pod")
    spec = models.KRaftQuorumSpec.model_validate(env.body.get("spec") or {})
    ctx = Context(spec, env.observed)
    if not (ctx.can_stop(pod) or ctx.may_pause()):
        return Outcome(False, "ResignWouldLoseMajority",
                       f"stopping leader {action.node_id} now would leave no healthy majority",
                       warning=True)
    await _delete(env, pod.name, None)
    return Outcome(True, "LeaderResigning",
                   f"leader {action.node_id} stops gracefully and resigns (EndQuorumEpoch)")
