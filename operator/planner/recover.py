"""Recover: no quorum answers.

While a majority of the last known voters still has its volume, this is a (cold) start:
missing member pods are re-created on their volumes, out-of-date pods that cannot become
ready are restarted (no wedge), and the planner waits; pods crash-looping early (peers' DNS
names not resolvable yet) are not a failure. When a majority's volumes are gone the quorum is
lost: every change stops, Degraded=QuorumLost, until the annotation
kraft.dev/recover-quorum-from names the surviving replica (the one with the longest committed
log). Then the other pods are stopped, the named replica's voter set is forced to itself
alone, and once it leads, the others re-join one at a time as new voters.
"""

from __future__ import annotations

from kraft_operator.models import RECOVER_ANNOTATION
from kraft_operator.planner.actions import (
    ClearRecoveryAnnotation,
    CreatePod,
    DeletePod,
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
    for node_id, directory_id in sorted(ctx.obs.last_known_voters):
        if node_id not in members or node_id in ctx.pods:
            continue
        # A node that is leaving comes back without auto-join, so it can be removed while it
        # runs (a quorum of two voters has no majority while one of them is stopped).
        auto_join = ctx.spec.auto_join and node_id < ctx.replicas
        return Decision(
            CreatePod(node_id, directory_id, FormatMode.JOIN, auto_join, ctx.desired_hash),
            "Rolling", message=f"voter {node_id}'s pod is re-created on its volume")
    for node_id in sorted(members):
        pod = ctx.live_pod(node_id)
        if pod is not None and ctx.down_beyond_grace(pod.node_name):
            return Decision(DeletePod(node_id, pod.name, "NodeFailed", force=True), "ReplacingNode")
    restart = restart_unready_outdated(ctx, members)
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
    for node_id in sorted(ctx.pods):
        pod = ctx.pods[node_id]
        if node_id != chosen and not pod.deleting:
            return Decision(DeletePod(node_id, pod.name, "QuorumRecovery"), REASON,
                            degraded="QuorumLost",
                            message=f"{pod.name} stops while {chosen} becomes the only voter")
    if chosen not in ctx.pods:
        return Decision(CreatePod(chosen, survivors[chosen], FormatMode.JOIN, False,
                                  ctx.desired_hash), REASON, degraded="QuorumLost")
    op = ctx.obs.operation
    if op is not None and op.type == OP_RECOVERING and op.target == str(chosen) \
            and ctx.now - op.started_at < MEMBERSHIP_RETRY_SECONDS:
        return Decision(Wait("RecoveringQuorum", f"waiting for {chosen} to lead alone"), REASON,
                        degraded="QuorumLost")
    return Decision(ForceSingleVoter(chosen, survivors[chosen]), REASON, degraded="QuorumLost",
                    operation=ctx.operation(OP_RECOVERING, str(chosen)),
                    message=f"forcing the voter set to {chosen}:{survivors[chosen]} alone")


def clear_annotation(ctx: Context) -> Decision | None:
    """Once a quorum answers, the recovery annotation is removed so it cannot fire again."""
    if RECOVER_ANNOTATION in ctx.obs.annotations:
        return Decision(ClearRecoveryAnnotation(), None,
                        message=f"the quorum answers; {RECOVER_ANNOTATION} removed")
    return None
