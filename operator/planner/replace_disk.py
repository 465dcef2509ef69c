"""Replace disk: a voter whose volume no longer holds its incarnation.

The node keeps its id but its new volume gets a new directory id, so the old voter
(id, old directory id) is stale. The leader refuses AddRaftVoter for a node id that is a voter
under another directory id (DUPLICATE_VOTER, as Kafka's), so the stale voter goes first:
- with auto-join the new incarnation does it itself once caught up (RemoveRaftVoter of its
  old incarnation, then AddRaftVoter of itself), and the operator only watches;
- without auto-join the operator calls RemoveRaftVoter of the stale incarnation (its volume is
  gone, so it is dead already and removing it costs no availability; it is still refused when
  the voters left would not be a healthy majority), then AddRaftVoter of the new one once it
  is caught up (the join, as for a new node).
A stale voter whose new incarnation is a voter already (added by an earlier version of the
node, or by hand) is removed. An empty volume is never formatted with the old directory id.
"""

from __future__ import annotations

from kraft_operator.observed import ReplicaInfo
from kraft_operator.planner.actions import DeletePod
from kraft_operator.planner.context import Context, Decision
from kraft_operator.planner.join import join_step
from kraft_operator.planner.remove import remove_step

REASON = "ReplacingDisk"


def stale_voters(ctx: Context) -> list[ReplicaInfo]:
    """Voters (of wanted node ids) whose node's volume holds another incarnation or none."""
    stale = []
    for voter in ctx.voters:
        if voter.replica_id >= ctx.replicas:
            continue
        pvc = ctx.pvcs.get(voter.replica_id)
        pod = ctx.pods.get(voter.replica_id)
        if (
            pvc is None
            or pvc.directory_id != voter.directory_id
            or ctx.volume_lost(voter.replica_id)
            or (pod is not None and pod.directory_id not in (None, voter.directory_id))
        ):
            stale.append(voter)
    return stale


def replace_disk(ctx: Context) -> Decision | None:
    """The next step of replacing a stale incarnation, or None when there is none."""
    for voter in sorted(stale_voters(ctx), key=lambda v: v.replica_id):
        pvc = ctx.pvcs.get(voter.replica_id)
        if pvc is not None and pvc.directory_id == voter.directory_id:
            pod = ctx.live_pod(voter.replica_id)
            if pod is not None and pod.directory_id != pvc.directory_id and ctx.can_stop(pod):
                # The pod runs an incarnation its claim does not hold: restart it on the claim.
                return Decision(DeletePod(pod.node_id, pod.name, "WrongIncarnation"), REASON)
            # Otherwise its volume is lost but still claimed: replace_node deletes it first.
            continue
        if pvc is not None and (voter.replica_id, pvc.directory_id) in ctx.voter_keys:
            return remove_step(ctx, voter, REASON)
        pod = ctx.pods.get(voter.replica_id)
        if ctx.spec.auto_join or (pod is not None and pod.auto_join and not pod.deleting):
            return join_step(ctx, voter.replica_id, REASON)
        live = ctx.live_pod(voter.replica_id)
        if live is not None and live.directory_id == voter.directory_id:
            # The old incarnation still runs on a lost or emptied volume: restart it first.
            return join_step(ctx, voter.replica_id, REASON)
        return remove_step(ctx, voter, REASON)
    return None
