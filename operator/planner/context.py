"""One reconcile's view of the world, and the quorum arithmetic every operation shares.

A voter is *healthy* when the leader counts it caught up (the leader always is) and the pod
running that very incarnation (same node id and directory id) is up and not being deleted.
Every step that takes a voter away (stopping its pod, removing it) or adds one is allowed only
when the healthy voters stay a majority of the voter set the quorum will have afterwards.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from kraft_operator import models
from kraft_operator.observed import (
    NodeState,
    Observed,
    Operation,
    PodPhase,
    PodState,
    PvcPhase,
    PvcState,
    ReplicaInfo,
)
from kraft_operator.planner.actions import Action
from kraft_operator.planner.listeners import layout_of

# How long a membership call may stay unconfirmed before it is sent again (it is idempotent).
MEMBERSHIP_RETRY_SECONDS = 30.0

# Operation types recorded in status.currentOperation.
OP_ADDING = "AddingVoter"
OP_REMOVING = "RemovingVoter"
OP_ROLLING = "Rolling"
OP_RECOVERING = "RecoveringQuorum"


def majority(n: int) -> int:
    """The smallest majority of n voters."""
    return n // 2 + 1


def pod_spec_hash(spec: models.KRaftQuorumSpec, tls_generation: str = "",
                  listeners: str = "") -> str:
    """A digest of everything in the spec that shapes a pod: a pod created from another
    digest is out of date and is rolled. `tls_generation`: the trust generation of the
    operator's PKI (kraft_operator.actions.tls), "" for a quorum without TLS (whose digest
    is the same as before TLS existed). `listeners`: the controller listeners' layout
    (`Layout.key`: "" for the one CONTROLLER listener on 9093 a quorum that never migrated
    runs on)."""
    shaping = {
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "resources": spec.resources.to_k8s(),
        "config": spec.config,
        "podTemplate": spec.pod_template.to_k8s(),
        "autoJoin": spec.auto_join,
    }
    if tls_generation:
        shaping["tls"] = tls_generation
    if listeners:
        shaping["listeners"] = listeners
    text = json.dumps(shaping, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Decision:
    """What one operation decided: the action, why (the Progressing or Degraded reason),
    and the operation to record in status (None: leave it as it is)."""

    action: Action
    progressing: str | None = None
    degraded: str | None = None
    awaiting_approval: str | None = None
    operation: Operation | None = None
    clear_operation: bool = False
    message: str = ""
    extra_status: dict[str, Any] = field(default_factory=dict)


class Context:
    """The observed state indexed for the planner's questions."""

    def __init__(self, spec: models.KRaftQuorumSpec, observed: Observed) -> None:
        self.spec = spec
        self.obs = observed
        self.now = observed.now
        self.replicas = spec.replicas
        self.desired_ids = range(spec.replicas)
        self.layout = layout_of(observed.listeners)
        """The controller listeners the pods are to run (`kraft_operator.planner.listeners`)."""
        self.desired_hash = pod_spec_hash(spec, observed.tls_generation, self.layout.key)
        self.grace = float(spec.node_failure_grace_period_seconds)
        self.pods: dict[int, PodState] = {}
        for pod in sorted(observed.pods, key=lambda p: (p.deleting, p.name)):
            self.pods.setdefault(pod.node_id, pod)
        self.pvcs: dict[int, PvcState] = {}
        for pvc in sorted(observed.pvcs, key=lambda p: (p.deleting, p.name)):
            self.pvcs.setdefault(pvc.node_id, pvc)
        self.nodes: dict[str, NodeState] = {n.name: n for n in observed.nodes}
        self.quorum = observed.quorum
        self.fresh = list(observed.fresh_ids)
        quorum = observed.quorum
        self.voters: tuple[ReplicaInfo, ...] = quorum.voters if quorum else ()
        self.observers: tuple[ReplicaInfo, ...] = quorum.observers if quorum else ()
        self.voter_keys = {v.key for v in self.voters}
        self.voter_ids = {v.replica_id for v in self.voters}
        self.leader_id = quorum.leader_id if quorum and quorum.leader_id >= 0 else None

    # --- ids ---------------------------------------------------------------------------------

    def take_fresh_id(self) -> str | None:
        """A new random directory (or cluster) id, never one already in use."""
        used = {p.directory_id for p in self.pvcs.values()} | {k[1] for k in self.voter_keys}
        used |= {d for _, d in self.obs.initial_voters}
        while self.fresh:
            candidate = self.fresh.pop(0)
            if candidate not in used:
                return candidate
        return None

    # --- pods and nodes ------------------------------------------------------------------------

    def live_pod(self, node_id: int) -> PodState | None:
        """The node's pod unless it is being deleted."""
        pod = self.pods.get(node_id)
        return pod if pod is not None and not pod.deleting else None

    def pod_runs(self, replica: ReplicaInfo) -> bool:
        """Whether a pod that is not being deleted runs this very incarnation."""
        pod = self.live_pod(replica.replica_id)
        return (
            pod is not None
            and pod.directory_id == replica.directory_id
            and pod.phase == PodPhase.RUNNING
        )

    def process_runs(self, replica: ReplicaInfo) -> bool:
        """Whether this incarnation's process may be running (and fetching) now."""
        pod = self.live_pod(replica.replica_id)
        return (
            pod is not None
            and pod.directory_id == replica.directory_id
            and pod.phase == PodPhase.RUNNING
            and self.node_down_since(pod.node_name) is None
        )

    def node_down_since(self, node_name: str | None) -> float | None:
        """Since when a Node is NotReady or gone (None when it is Ready or unnamed)."""
        if node_name is None:
            return None
        node = self.nodes.get(node_name)
        if node is None:
            return float("-inf")
        return None if node.ready else node.since

    def down_beyond_grace(self, node_name: str | None) -> bool:
        since = self.node_down_since(node_name)
        return since is not None and self.now - since >= self.grace

    def volume_reported_gone(self, node_id: int) -> bool:
        """The node's pod has said for the grace period that its volume is gone (the Node
        may be Ready again: it came back without the node-local volume)."""
        pod = self.live_pod(node_id)
        since = pod.volume_gone_since if pod is not None else None
        return since is not None and self.now - since >= self.grace

    def volume_lost(self, node_id: int) -> bool:
        """The node's volume is gone: claim Lost, node-local on a Node down past the grace,
        or its pod reporting it gone for the grace period."""
        pvc = self.pvcs.get(node_id)
        if pvc is None:
            return False
        return (pvc.phase == PvcPhase.LOST or self.down_beyond_grace(pvc.node_name)
                or self.volume_reported_gone(node_id))

    # --- quorum arithmetic -------------------------------------------------------------------

    def caught_up(self, replica: ReplicaInfo) -> bool:
        return replica.caught_up or replica.replica_id == self.leader_id

    def healthy(self, replica: ReplicaInfo) -> bool:
        """Caught up according to the leader, and its own pod is up."""
        return self.caught_up(replica) and self.pod_runs(replica)

    def healthy_count(self, voters: tuple[ReplicaInfo, ...] | None = None) -> int:
        return sum(1 for v in (self.voters if voters is None else voters) if self.healthy(v))

    def voter(self, key: tuple[int, str]) -> ReplicaInfo | None:
        return next((v for v in self.voters if v.key == key), None)

    def observer(self, key: tuple[int, str]) -> ReplicaInfo | None:
        return next((o for o in self.observers if o.key == key), None)

    def can_stop(self, pod: PodState) -> bool:
        """Stopping this pod leaves a healthy majority of the current voters.

        Stopping a caught-up voter needs the other voters to be a healthy majority on their
        own. A pod whose process cannot be running (not Running, or on a Node that is not
        Ready) costs nothing to stop."""
        if pod.phase != PodPhase.RUNNING or self.node_down_since(pod.node_name) is not None:
            return True
        key = (pod.node_id, pod.directory_id or "")
        voter = self.voter(key)
        if voter is None:
            return True
        others = tuple(v for v in self.voters if v.key != key)
        needed = majority(len(self.voters))
        if self.healthy(voter):
            return self.healthy_count(others) >= needed
        # A lagging voter adds nothing to commits; what stopping it may cost is the leader's
        # majority of fetching voters. So the others must be a running majority: then even a
        # rollout that fixes lagging voters is not wedged behind them.
        return sum(1 for v in others if self.process_runs(v)) >= needed

    def may_pause(self) -> bool:
        """A quorum of one or two voters cannot restart a pod without a pause in availability;
        it is allowed (the volume is kept) when every voter is healthy, or the quorum could
        never be rolled or scaled down at all."""
        return 0 < len(self.voters) <= 2 and self.healthy_count() == len(self.voters)

    def can_remove(self, voter: ReplicaInfo) -> bool:
        """Removing this voter leaves a healthy majority of the smaller set."""
        rest = tuple(v for v in self.voters if v.key != voter.key)
        return bool(rest) and self.healthy_count(rest) >= majority(len(rest))

    def can_add(self, replica: ReplicaInfo) -> bool:
        """Adding this caught-up, running replica keeps a healthy majority of the larger set."""
        if not (replica.caught_up and self.pod_runs(replica)):
            return False
        return self.healthy_count() + 1 >= majority(len(self.voters) + 1)

    # --- membership changes in flight -----------------------------------------------------

    def pending_joiners(self) -> list[PodState]:
        """Pods running with auto-join whose incarnation is not a voter: each may add itself."""
        return [
            pod
            for pod in self.pods.values()
            if not pod.deleting
            and pod.auto_join
            and pod.directory_id is not None
            and pod.phase in (PodPhase.RUNNING, PodPhase.PENDING)
            and (pod.node_id, pod.directory_id) not in self.voter_keys
        ]

    def membership_busy(self) -> str | None:
        """Why no new membership change may start now (None when one may)."""
        op = self.obs.operation
        if op is not None and op.type in (OP_ADDING, OP_REMOVING) and not self.op_done(op):
            return f"{op.type} {op.target} is not confirmed yet"
        joiners = self.pending_joiners()
        if joiners:
            names = ", ".join(sorted(p.name for p in joiners))
            return f"{names} may still add itself to the voters (auto-join)"
        return None

    def op_done(self, op: Operation) -> bool:
        """Whether the live quorum shows the recorded operation complete."""
        if op.type in (OP_ADDING, OP_REMOVING):
            key = parse_target(op.target)
            present = key in self.voter_keys
            if op.type == OP_REMOVING:
                return not present
            pod = self.live_pod(key[0])
            # An add is moot once the incarnation it was for has no pod any more.
            return present or pod is None or pod.directory_id != key[1]
        if op.type == OP_ROLLING:
            node_id = int(op.target)
            if node_id not in self.desired_ids:
                return True
            pod = self.live_pod(node_id)
            if pod is None or pod.spec_hash != self.desired_hash or not pod.ready:
                return False
            voter = next((v for v in self.voters if v.replica_id == node_id), None)
            return voter is None or self.healthy(voter)
        if op.type == OP_RECOVERING:
            return self.quorum is not None
        return True

    def operation(self, type_: str, target: str) -> Operation:
        """The operation to record: a retry of the same one counts its attempts."""
        op = self.obs.operation
        if op is not None and op.type == type_ and op.target == target:
            return Operation(type_, target, self.now, op.attempt + 1)
        return Operation(type_, target, self.now, 1)


def target_of(node_id: int, directory_id: str) -> str:
    return f"{node_id}:{directory_id}"


def parse_target(target: str) -> tuple[int, str]:
    node, _, directory = target.partition(":")
    return (int(node), directory)
