"""Join: a node's incarnation that is not a voter becomes one.

Shared by scale-up and disk replacement. The claim comes first (a new claim gets a new
directory id), then the pod, formatted to join (--no-initial-controllers). With auto-join the
pod adds itself once caught up and the operator only watches; without it the operator calls
AddRaftVoter once the observer is caught up. A joining pod is started only when no other
membership change is in flight, because a pod running with auto-join is one.
"""

from __future__ import annotations

from kraft_operator.planner.actions import (
    AddVoter,
    CreatePod,
    CreatePVC,
    DeletePod,
    FormatMode,
    Wait,
)
from kraft_operator.planner.context import OP_ADDING, Context, Decision, target_of


def join_step(ctx: Context, node_id: int, reason: str) -> Decision:
    """The next step to make node_id's current incarnation a voter."""
    pvc = ctx.pvcs.get(node_id)
    if pvc is not None and pvc.deleting:
        return Decision(Wait("VolumeDeleting", f"claim {pvc.name} is being deleted"), reason)
    if pvc is None:
        fresh = ctx.take_fresh_id()
        if fresh is None:
            return Decision(Wait("NoFreshIds", "no new directory id was drawn"), reason)
        return Decision(CreatePVC(node_id, fresh), reason,
                        message=f"node {node_id}: new volume, directory id {fresh}")
    key = (node_id, pvc.directory_id)
    target = target_of(*key)
    pod = ctx.pods.get(node_id)
    if pod is not None and pod.deleting:
        return Decision(Wait("PodStopping", f"pod {pod.name} is stopping"), reason)
    if pod is None:
        busy = ctx.membership_busy()
        if busy:
            return Decision(Wait("MembershipChangeInFlight", busy), reason)
        auto = ctx.spec.auto_join
        return Decision(
            CreatePod(node_id, pvc.directory_id, FormatMode.JOIN, auto, ctx.desired_hash),
            reason,
            operation=ctx.operation(OP_ADDING, target) if auto else None,
            message=f"node {node_id} starts as an observer"
            + (" and adds itself once caught up (auto-join)" if auto else ""),
        )
    if pod.directory_id != pvc.directory_id:
        # The pod runs an incarnation its claim no longer holds: restart it on the claim.
        if ctx.can_stop(pod):
            return Decision(DeletePod(node_id, pod.name, "WrongIncarnation"), reason)
        return Decision(Wait("StopWouldLoseMajority", f"{pod.name} runs a stale incarnation"),
                        reason, degraded="VoterLagging")
    if pod.spec_hash != ctx.desired_hash:
        # Not a voter yet, so restarting it costs the quorum nothing; waiting for a pod made
        # from an older spec (one that may never start) would wedge the join.
        return Decision(DeletePod(node_id, pod.name, "RestartOutdatedJoiner"), reason,
                        message=f"{pod.name} joins with the current spec")
    if pod.auto_join:
        op = ctx.obs.operation
        recorded = op is not None and op.type == OP_ADDING and op.target == target
        return Decision(
            Wait("AwaitingAutoJoin", f"node {target} adds itself once caught up"),
            reason,
            operation=None if recorded else ctx.operation(OP_ADDING, target),
        )
    observer = ctx.observer(key)
    if observer is None or not observer.caught_up or not ctx.pod_runs(observer):
        return Decision(Wait("ObserverCatchingUp", f"node {target} is not caught up yet"), reason)
    busy = ctx.membership_busy()
    if busy:
        return Decision(Wait("MembershipChangeInFlight", busy), reason)
    if not ctx.can_add(observer):
        return Decision(Wait("AddWouldLoseMajority",
                             f"adding {target} would leave no healthy majority"),
                        reason, degraded="VoterLagging")
    return Decision(AddVoter(*key), reason, operation=ctx.operation(OP_ADDING, target),
                    message=f"AddRaftVoter {target} (auto-join off)")
