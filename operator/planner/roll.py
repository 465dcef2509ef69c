"""Roll: bring every pod to the current spec, one pod at a time, and restart missing ones.

Order: pods that are not ready first (restarting them costs the quorum nothing), then
followers and observers, the leader last after it resigns (EndQuorumEpoch). A pod is stopped
only when the other healthy voters remain a majority, and the next one waits until the
restarted pod is ready and caught up; one that is not within updateStrategy's timeout halts
the rollout (Degraded=RolloutHalted). With updateStrategy Manual the rollout starts only once
the annotation kraft.dev/approve-rollout names the resource's current generation. A pod
annotated kraft.dev/manual-rolling-update: "true" is restarted once by the same rules, whatever
the strategy (a person asked for it); the pod created in its place carries no annotation.
"""

from __future__ import annotations

from kraft_operator.models import APPROVE_ROLLOUT_ANNOTATION, UpdateStrategyType
from kraft_operator.observed import PodState
from kraft_operator.planner.actions import CreatePod, DeletePod, FormatMode, ResignLeader, Wait
from kraft_operator.planner.context import OP_ROLLING, Context, Decision

REASON = "Rolling"


def restore_missing(ctx: Context) -> Decision | None:
    """Re-create the pod of a voter whose volume still holds it (no quorum needed for that)."""
    for voter in sorted(ctx.voters, key=lambda v: v.replica_id):
        node_id = voter.replica_id
        if node_id >= ctx.replicas or node_id in ctx.pods:
            continue
        pvc = ctx.pvcs.get(node_id)
        if pvc is None or pvc.deleting or pvc.directory_id != voter.directory_id:
            continue
        if ctx.volume_lost(node_id):
            continue
        return Decision(
            CreatePod(node_id, voter.directory_id, FormatMode.JOIN, ctx.spec.auto_join,
                      ctx.desired_hash),
            REASON, message=f"voter {node_id}'s pod is re-created on its volume")
    return None


def continue_rolling(ctx: Context) -> Decision:
    """The restarted pod of the recorded Rolling operation is not caught up yet."""
    op = ctx.obs.operation
    assert op is not None
    timeout = ctx.spec.update_strategy.ready_timeout_seconds
    if ctx.now - op.started_at >= timeout:
        return Decision(
            Wait("RolloutHalted", f"node {op.target} is not ready and caught up after "
                 f"{timeout} s; the rollout stops here"),
            REASON, degraded="RolloutHalted")
    return Decision(Wait("RestartedPodCatchingUp",
                         f"node {op.target} must be ready and caught up before the next"), REASON)


def _order(ctx: Context, pod: PodState) -> tuple[bool, bool, int]:
    is_leader = pod.node_id == ctx.leader_id
    voter = ctx.voter((pod.node_id, pod.directory_id or ""))
    healthy = pod.ready and (voter is None or ctx.healthy(voter))
    return (is_leader, healthy, -pod.node_id)


def roll(ctx: Context) -> Decision | None:
    """The next pod to restart for the current spec, or None when every pod is current."""
    live = [p for p in ctx.pods.values() if not p.deleting and p.node_id < ctx.replicas]
    outdated = [p for p in live if p.spec_hash != ctx.desired_hash]
    asked = [p for p in live if p.manual_roll and p not in outdated]
    if not outdated and not asked:
        return None
    approved = ctx.spec.update_strategy.type != UpdateStrategyType.MANUAL or \
        ctx.obs.annotations.get(APPROVE_ROLLOUT_ANNOTATION) == str(ctx.obs.generation)
    if outdated and not approved and not asked:
        return Decision(
            Wait("AwaitingApproval", f"{len(outdated)} pod(s) out of date; annotate "
                 f"{APPROVE_ROLLOUT_ANNOTATION}={ctx.obs.generation} to roll them"),
            REASON, awaiting_approval="RolloutApprovalRequired")
    todo = (outdated if approved else []) + asked  # a person's ask needs no approval
    pod = min(todo, key=lambda p: _order(ctx, p))
    if pod.node_id == ctx.leader_id and len(ctx.voters) > 1:
        if any(ctx.healthy(v) for v in ctx.voters if v.replica_id != pod.node_id):
            return Decision(ResignLeader(pod.node_id), REASON,
                            message=f"leader {pod.node_id} resigns before its restart")
        return Decision(Wait("NoHealthySuccessor", "no caught-up voter could take over"),
                        REASON, degraded="VoterLagging")
    if not ctx.can_stop(pod) and not ctx.may_pause():
        return Decision(Wait("RollWouldLoseMajority",
                             f"restarting {pod.name} would leave no healthy majority"),
                        REASON, degraded="VoterLagging")
    why = ("restarts as kraft.dev/manual-rolling-update asks" if pod in asked
           else "restarts with the current spec")
    return Decision(DeletePod(pod.node_id, pod.name, "Rolling"), REASON,
                    operation=ctx.operation(OP_ROLLING, str(pod.node_id)),
                    message=f"{pod.name} {why}")


def restart_unready_outdated(ctx: Context, node_ids: set[int]) -> Decision | None:
    """Without a quorum nothing is protected by waiting: restart an out-of-date pod that is
    not ready, so a bad spec that kept every pod from running is undone (no wedge)."""
    for node_id in sorted(node_ids):
        pod = ctx.live_pod(node_id)
        if pod is not None and not pod.ready and pod.spec_hash != ctx.desired_hash:
            return Decision(DeletePod(node_id, pod.name, "RestartOutdatedWithoutQuorum"), REASON,
                            message=f"{pod.name} is not ready and out of date; no quorum to "
                            "protect, so it restarts with the current spec")
    return None
