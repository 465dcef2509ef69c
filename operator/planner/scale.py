"""Scale: the voters are node ids 0..replicas-1.

Scale-up joins the lowest missing id (one membership change at a time). Scale-down takes the
nodes with ids at or above spec.replicas: pods that are not voters go first, then the voters,
lagging ones before caught-up ones and the leader last (after it resigns); then the volumes,
as storage.onScaleDown says.
"""

from __future__ import annotations

from kraft_operator.models import VolumePolicy
from kraft_operator.planner.actions import DeletePod, DeletePVC, Wait
from kraft_operator.planner.context import Context, Decision
from kraft_operator.planner.join import join_step
from kraft_operator.planner.remove import remove_step

REASON = "Scaling"


def scale_down(ctx: Context) -> Decision | None:
    """The next step of removing the nodes beyond spec.replicas, or None when none are left."""
    leaving = [v for v in ctx.voters if v.replica_id >= ctx.replicas]
    for pod in sorted(ctx.pods.values(), key=lambda p: -p.node_id):
        if pod.node_id < ctx.replicas or pod.deleting:
            continue
        if (pod.node_id, pod.directory_id) not in ctx.voter_keys:
            return Decision(DeletePod(pod.node_id, pod.name, "ScaleDown"), REASON,
                            message=f"{pod.name} is not a voter and leaves")
    if leaving:
        order = sorted(leaving, key=lambda v: (ctx.healthy(v), v.replica_id == ctx.leader_id,
                                               -v.replica_id))
        return remove_step(ctx, order[0], REASON)
    if any(p.node_id >= ctx.replicas for p in ctx.pods.values()):
        return Decision(Wait("PodStopping", "pods of removed nodes are stopping"), REASON)
    if ctx.spec.storage.on_scale_down == VolumePolicy.DELETE:
        for pvc in sorted(ctx.pvcs.values(), key=lambda p: -p.node_id):
            if pvc.node_id >= ctx.replicas and not pvc.deleting:
                return Decision(DeletePVC(pvc.node_id, pvc.name), REASON,
                                message=f"volume {pvc.name} of removed node {pvc.node_id}")
    return None


def scale_up(ctx: Context) -> Decision | None:
    """The next step of adding the lowest node id below spec.replicas that is no voter."""
    for node_id in ctx.desired_ids:
        if node_id not in ctx.voter_ids:
            return join_step(ctx, node_id, REASON)
    return None
