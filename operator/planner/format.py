"""Format: a new quorum's cluster id and initial voters, their volumes and pods.

The cluster id and one new directory id per initial voter are recorded in status before
anything is formatted, so a restarted operator formats with the same ones. Every initial
voter's pod is created without waiting for any other to be ready: none can be ready before a
majority of them runs (a cold start of a new quorum must not wedge).
"""

from __future__ import annotations

import re

from kraft_operator.planner.actions import (
    CreatePod,
    CreatePVC,
    DeletePod,
    FormatMode,
    RecordCluster,
    ReportDegraded,
    Wait,
)
from kraft_operator.planner.context import Context, Decision
from kraft_operator.planner.roll import restart_unready_outdated

REASON = "Formatting"


def cluster_id_mismatch(ctx: Context) -> Decision | None:
    """spec.clusterId differs from the cluster id the quorum was formatted with.

    The API only keeps spec.clusterId from changing once it is set, so a quorum created
    without one can be given any id later. No volume can change its cluster id: nothing is
    done (a pod created now would refuse to start on its volume) until the spec agrees. The
    quorum's own id is accepted, so a GitOps source may pin it after the fact."""
    wanted, formatted = ctx.spec.cluster_id, ctx.obs.cluster_id
    if wanted is None or formatted is None or wanted == formatted:
        return None
    message = (f"spec.clusterId {wanted} differs from the cluster id {formatted} the quorum "
               f"was formatted with (status.clusterId); a quorum's cluster id cannot change, "
               f"so nothing is done until spec.clusterId is set to {formatted}")
    return Decision(ReportDegraded("ClusterIdMismatch", message), None,
                    degraded="ClusterIdMismatch")


RECREATE = ("editing spec.clusterId of this one is refused, its id is recorded in "
            "status.clusterId; storage.onDelete: Retain keeps the claims")
"""Why a new object, not an edit: the same story as the CRD's rule (`CLUSTER_ID_FIXED`)."""

_FOREIGN = re.compile(r"formatted for cluster (\S+?),? not (\S+?)[:.,]?(?:\s|$)")


def foreign_volumes(ctx: Context) -> Decision | None:
    """A pod's format init container refuses its volume: it was formatted for another
    cluster (or node), e.g. a quorum created again under the same name over kept claims.
    Nothing is deleted (the volume holds another cluster's data): a person decides."""
    refused = [p for p in sorted(ctx.pods.values(), key=lambda p: p.node_id)
               if not p.deleting and p.format_refused is not None]
    if not refused:
        return None
    pvc_names = {n: c.name for n, c in ctx.pvcs.items()}
    claims = ", ".join(pvc_names.get(p.node_id, f"the claim of node {p.node_id}") for p in refused)
    found = next((m for m in (_FOREIGN.search(p.format_refused or "") for p in refused) if m), None)
    if found is not None:
        theirs, ours = found.group(1), found.group(2)
        what = (f"formatted for cluster {theirs}, not this quorum's {ours}. To start on their "
                f"data, delete the KRaftQuorum and create it again with spec.clusterId: "
                f"{theirs} ({RECREATE}); to start afresh, delete the claims (losing their data)")
    else:
        details = "; ".join(p.format_refused for p in refused if p.format_refused)
        what = (f"formatted for another cluster or node ({details or 'kraft format exit code 3'})."
                " To start on their data, delete the KRaftQuorum and create it again with "
                f"spec.clusterId set to the cluster id in the volume's meta.properties "
                f"({RECREATE}); to start afresh, delete the claims (losing their data)")
    message = f"the volumes of {claims} are {what}; nothing is deleted"
    return Decision(ReportDegraded("ForeignVolume", message), None, degraded="ForeignVolume")


def record_cluster(ctx: Context) -> Decision | None:
    """Choose and record a new quorum's ids, or None when they are on record already."""
    if ctx.obs.cluster_id and ctx.obs.initial_voters:
        return None
    if ctx.quorum is not None or ctx.obs.last_known_voters:
        return None  # a quorum exists already: nothing new to format
    cluster_id = ctx.spec.cluster_id or ctx.obs.cluster_id or ctx.take_fresh_id()
    voters = []
    for node_id in ctx.desired_ids:
        fresh = ctx.take_fresh_id()
        if fresh is None:
            break
        voters.append((node_id, fresh))
    if cluster_id is None or len(voters) < ctx.replicas:
        return Decision(Wait("NoFreshIds", "not enough new ids were drawn"), REASON)
    return Decision(RecordCluster(cluster_id, tuple(voters)), REASON,
                    message=f"new quorum {cluster_id} with {len(voters)} initial voters")


def bootstrap(ctx: Context) -> Decision:
    """No quorum has ever answered: volumes and pods of every initial voter, then wait."""
    initial = ctx.obs.initial_voters
    for node_id, directory_id in initial:
        pvc = ctx.pvcs.get(node_id)
        if pvc is None:
            return Decision(CreatePVC(node_id, directory_id), REASON,
                            message=f"volume of initial voter {node_id}:{directory_id}")
    for node_id, _ in initial:
        pvc = ctx.pvcs[node_id]
        if pvc.deleting or node_id in ctx.pods:
            continue
        return Decision(
            CreatePod(node_id, pvc.directory_id, FormatMode.INITIAL, ctx.spec.auto_join,
                      ctx.desired_hash, initial_voters=initial),
            REASON, message=f"initial voter {node_id} formats with --initial-controllers")
    for node_id, _ in initial:
        pod = ctx.live_pod(node_id)
        if pod is not None and ctx.down_beyond_grace(pod.node_name):
            return Decision(DeletePod(node_id, pod.name, "NodeFailed", force=True), REASON)
    restart = restart_unready_outdated(ctx, {n for n, _ in initial})
    if restart is not None:
        return restart
    return Decision(Wait("WaitingForQuorum", "the initial voters are electing a leader; pods "
                         "restarting while their peers' names do not resolve yet is expected"),
                    REASON)
