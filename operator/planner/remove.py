"""Remove: a voter leaves the voter set.

The leader resigns first (EndQuorumEpoch) so it leaves as a follower. Because a process that
runs with auto-join re-adds itself right after RemoveRaftVoter (KAFKA-19850), the voter's pod
is stopped first when it runs with auto-join; a pod without auto-join may keep running until
the removal is confirmed. The removal itself waits until it leaves a healthy majority.
"""

from __future__ import annotations

from kraft_operator.observed import ReplicaInfo
from kraft_operator.planner.actions import DeletePod, RemoveVoter, ResignLeader, Wait
from kraft_operator.planner.context import OP_REMOVING, Context, Decision, target_of


def remove_step(ctx: Context, voter: ReplicaInfo, reason: str) -> Decision:
    """The next step to take this voter out of the voter set."""
    target = target_of(*voter.key)
    others = [v for v in ctx.voters if v.key != voter.key]
    if voter.replica_id == ctx.leader_id and others:
        if any(ctx.healthy(v) for v in others):
            return Decision(ResignLeader(voter.replica_id), reason,
                            message=f"leader {voter.replica_id} resigns before it leaves")
        return Decision(Wait("NoHealthySuccessor", "no caught-up voter could take over"),
                        reason, degraded="VoterLagging")
    pod = ctx.pods.get(voter.replica_id)
    runs_it = pod is not None and pod.directory_id == voter.directory_id
    if runs_it and pod is not None and pod.deleting:
        return Decision(Wait("PodStopping", f"{pod.name} is stopping before its removal"), reason)
    if runs_it and pod is not None and pod.auto_join:
        if not ctx.can_stop(pod) and not ctx.may_pause():
            return Decision(
                Wait("RemovalWouldLoseMajority",
                     f"stopping {pod.name} would leave no healthy majority"),
                reason, degraded="VoterLagging")
        return Decision(DeletePod(voter.replica_id, pod.name, "StopBeforeRemove"), reason,
                        message=f"{pod.name} stops before RemoveRaftVoter {target} "
                        "so auto-join cannot re-add it")
    busy = ctx.membership_busy()
    if busy:
        return Decision(Wait("MembershipChangeInFlight", busy), reason)
    if not ctx.can_remove(voter):
        return Decision(
            Wait("RemovalWouldLoseMajority", f"removing {target} would leave no healthy majority"),
            reason, degraded="VoterLagging")
    return Decision(RemoveVoter(*voter.key), reason, operation=ctx.operation(OP_REMOVING, target),
                    message=f"RemoveRaftVoter {target}")
