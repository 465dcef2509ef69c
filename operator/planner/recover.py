"""Recover: no quorum answers.

While a majority of the last known voters still has its volume, this is a (cold) start:
missing member pods are re-created on their volumes, out-of-date pods that cannot become
ready are restarted (no wedge), and the planner waits; pods crash-looping early (peers' DNS
names not resolvable yet) are not a failure. When a majority's volumes are gone the quorum is
lost: every change stops, Degraded=QuorumLost, until the annotation
kraft.dev/recover-quorum-from names the surviving replica (the one with the longest committed
log). Then, one step a reconcile:

1. every other pod is deleted, then every other node's claim (their logs may hold records of
   epochs the forced voter never saw: they must never be started on again);
2. the survivor's pod is deleted (the recovery works on a stopped node), and ForceSingleVoter
   re-creates it with a one-shot init container running `kraft recover force-single-voter`
   before `kraft run` (recorded as the RecoveringQuorum operation first, so an operator
   restarted midway carries on; the command is idempotent);
3. once the survivor leads alone a quorum answers again: the annotation is removed and the
   other nodes re-join one at a time on new volumes with new directory ids (scale-up's join),
   after which the survivor's pod is rolled to an ordinary one.
"""

from __future__ import annotations

from kraft_operator.models import RECOVER_ANNOTATION
from kraft_operator.planner.actions import (
    ClearRecoveryAnnotation,
    CreatePod,
    DeletePod,
    DeletePVC,
    ForceSingleVoter,
    FormatMode,
    ReportDegraded,
    Wait,
)
from kraft_operator.planner.context import (
    MEMBERSHIP_RETRY_SECONDS,
    OP_RECOVERING,
    Context,
    Decision,
    majority,
)
from kraft_operator.planner.roll import restart_unready_outdated

REASON = "RecoveringQuorum"


def volume_gone(ctx: Context, node_id: int, directory_id: str) -> bool:
    """Whether the volume that held this incarnation is gone."""
    pvc = ctx.pvcs.get(node_id)
    return pvc is None or pvc.directory_id != directory_id or ctx.volume_lost(node_id)


def lost_voters(ctx: Context) -> list[tuple[int, str]]:
    return [k for k in ctx.obs.last_known_voters if volume_gone(ctx, *k)]


def no_quorum(ctx: Context) -> Decision:
    """The next step while a quorum existed but none answers now."""
    known = ctx.obs.last_known_voters
    lost = lost_voters(ctx)
    if len(known) - len(lost) < majority(len(known)):
        return quorum_lost(ctx, lost)
    return cold_start(ctx)


def cold_start(ctx: Context) -> Decision:
    members = {n for n, d in ctx.obs.last_known_voters if not volume_gone(ctx, n, d)}
    # Every volume that is still there gets its pod back: restarting an existing node needs
    # no quorum, and the voter set last written to status may be older than the quorum's
    # (a node that joined since then is a voter too).
    restartable = sorted(
        n for n, pvc in ctx.pvcs.items()
        if (n in members or n < ctx.replicas) and not pvc.deleting and not ctx.volume_lost(n))
    for node_id in restartable:
        if node_id in ctx.pods:
            continue
        # A node that is leaving comes back without auto-join, so it can be removed while it
        # runs (a quorum of two voters has no majority while one of them is stopped).
        auto_join = ctx.spec.auto_join and node_id < ctx.replicas
        return Decision(
            CreatePod(node_id, ctx.pvcs[node_id].directory_id, FormatMode.JOIN, auto_join,
                      ctx.desired_hash),
            "Rolling", message=f"node {node_id}'s pod is re-created on its volume")
    for node_id in restartable:
        pod = ctx.live_pod(node_id)
        if pod is not None and ctx.down_beyond_grace(pod.node_name):
            return Decision(DeletePod(node_id, pod.name, "NodeFailed", force=True), "ReplacingNode")
    restart = restart_unready_outdated(ctx, set(restartable))
    if restart is not None:
        return restart
    return Decision(Wait("WaitingForQuorum", "no quorum answers yet; a majority of the voters "
                         "still has its volume"), None)


def quorum_lost(ctx: Context, lost: list[tuple[int, str]]) -> Decision:
    gone = ", ".join(f"{n}:{d}" for n, d in lost)
    named = ctx.obs.annotations.get(RECOVER_ANNOTATION)
    if not named:
        return Decision(
            ReportDegraded("QuorumLost", f"the volumes of voters {gone} are gone; no majority "
                           f"is left. Annotate {RECOVER_ANNOTATION}=<node id> with the "
                           "surviving replica that has the longest committed log to recover"),
            None, degraded="QuorumLost", awaiting_approval="RecoveryAnnotationRequired")
    survivors = {n: d for n, d in ctx.obs.last_known_voters if (n, d) not in lost}
    try:
        chosen = int(named)
    except ValueError:
        chosen = -1
    if chosen not in survivors:
        return Decision(
            ReportDegraded("QuorumLost", f"{RECOVER_ANNOTATION}={named!r} names no surviving "
                           f"replica; survivors: {sorted(survivors) or 'none'}"),
            None, degraded="QuorumLost", awaiting_approval="RecoveryAnnotationRequired")
    lost_note = (f"records the other replicas held beyond {chosen}'s log are lost, "
                 "acknowledged ones included")
    for node_id in sorted(ctx.pods):
        pod = ctx.pods[node_id]
        if node_id != chosen and not pod.deleting:
            return Decision(DeletePod(node_id, pod.name, "QuorumRecovery"), REASON,
                            degraded="QuorumLost",
                            message=f"{pod.name} stops while {chosen} becomes the only voter")
    for node_id in sorted(ctx.pvcs):
        pvc = ctx.pvcs[node_id]
        if node_id != chosen and not pvc.deleting:
            # Its log may hold records of epochs the forced voter never saw: it must never be
            # started on again. The node re-joins on a new volume with a new directory id.
            return Decision(DeletePVC(node_id, pvc.name), REASON, degraded="QuorumLost",
                            message=f"volume {pvc.name} of node {node_id} is dropped: it "
                            f"re-joins {chosen} on a new one ({lost_note})")
    op = ctx.obs.operation
    started = op is not None and op.type == OP_RECOVERING and op.target == str(chosen)
    pod = ctx.pods.get(chosen)
    force = Decision(ForceSingleVoter(chosen, survivors[chosen]), REASON, degraded="QuorumLost",
                     operation=ctx.operation(OP_RECOVERING, str(chosen)),
                     message=f"forcing the voter set to {chosen}:{survivors[chosen]} alone "
                     f"({lost_note})")
    if not started:
        # The survivor's process must be stopped: the recovery rewrites its log offline.
        if pod is not None and not pod.deleting:
            return Decision(DeletePod(chosen, pod.name, "QuorumRecovery"), REASON,
                            degraded="QuorumLost",
                            message=f"{pod.name} stops so its voter set can be forced")
        if pod is not None:
            return Decision(Wait("PodStopping", f"{pod.name} is stopping"), REASON,
                            degraded="QuorumLost")
        return force
    assert op is not None
    if pod is None or ctx.now - op.started_at >= MEMBERSHIP_RETRY_SECONDS:
        # Not created yet (the operator stopped after recording the step), or to be checked
        # again: the executor re-creates the recovery pod or reports why it does not start.
        return force
    return Decision(Wait("RecoveringQuorum", f"waiting for {chosen} to lead alone"), REASON,
                    degraded="QuorumLost")


def clear_annotation(ctx: Context) -> Decision | None:
    """Once a quorum answers, the recovery annotation is removed so it cannot fire again."""
    if RECOVER_ANNOTATION in ctx.obs.annotations:
        return Decision(ClearRecoveryAnnotation(), None,
                        message=f"the quorum answers; {RECOVER_ANNOTATION} removed")
    return None
