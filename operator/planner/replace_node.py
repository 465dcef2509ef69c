"""Replace node: a pod whose Kubernetes Node has been NotReady (or gone) for the grace period.

With network-attached storage the pod is force-deleted so it is re-created elsewhere on the
same volume (the same incarnation comes back). A node-local volume that went with its Node is
lost: the pod and the claim are deleted, and the node comes back as a new incarnation (see
replace_disk). So is a volume the pod itself reports gone for the grace period (its Node came
back Ready without it): there the claim is deleted first, because the evidence is on the pod
(the claim stays until the pod is gone), then the pod. Either only while a quorum answers and stays healthy without the node: never
while a majority is unreachable (that is a quorum loss, handled by recover).
"""

from __future__ import annotations

from kraft_operator.planner.actions import DeletePod, DeletePVC, Wait
from kraft_operator.planner.context import Context, Decision

REASON = "ReplacingNode"


def replace_failed_node(ctx: Context) -> Decision | None:
    """The next step of moving a node off a failed Kubernetes Node, or None."""
    for node_id in sorted(ctx.pods):
        pod = ctx.pods[node_id]
        if pod.deleting or not ctx.down_beyond_grace(pod.node_name):
            continue
        if not ctx.can_stop(pod):
            return Decision(Wait("NodeFailedQuorumAtRisk",
                                 f"{pod.name}'s Node {pod.node_name} is down, but the quorum "
                                 "counts it healthy"), REASON, degraded="VoterLagging")
        return Decision(DeletePod(node_id, pod.name, "NodeFailed", force=True), REASON,
                        message=f"{pod.name}: Node {pod.node_name} down past the grace period")
    for node_id in sorted(ctx.pods):
        pod = ctx.pods[node_id]
        pvc = ctx.pvcs.get(node_id)
        if pod.deleting or not ctx.volume_reported_gone(node_id):
            continue
        if pvc is None or pvc.deleting:
            # its claim is going: the pod (which can never start) goes, and the node comes
            # back on a new claim with a new directory id
            return Decision(DeletePod(node_id, pod.name, "VolumeLost", force=True), REASON,
                            message=f"{pod.name}: its volume is gone; its claim is deleted")
    for node_id in sorted(ctx.pvcs):
        pvc = ctx.pvcs[node_id]
        if pvc.deleting or not ctx.volume_lost(node_id):
            continue
        on_lost = ctx.live_pod(node_id)
        if on_lost is not None and ctx.volume_reported_gone(node_id) and ctx.can_stop(on_lost):
            return Decision(DeletePVC(node_id, pvc.name), REASON,
                            message=f"{on_lost.name} reports the volume of {pvc.name} gone "
                            f"for {ctx.grace:g} s; node {node_id} gets a new one")
        if on_lost is not None:
            if not ctx.can_stop(on_lost):
                return Decision(Wait("NodeFailedQuorumAtRisk",
                                     f"{on_lost.name} still counts healthy"),
                                REASON, degraded="VoterLagging")
            return Decision(DeletePod(node_id, on_lost.name, "VolumeLost", force=True), REASON)
        voter = next((v for v in ctx.voters
                      if v.key == (node_id, pvc.directory_id) and ctx.healthy(v)), None)
        if voter is not None:
            continue
        return Decision(DeletePVC(node_id, pvc.name), REASON,
                        message=f"volume {pvc.name} is lost; node {node_id} gets a new one")
    return None
