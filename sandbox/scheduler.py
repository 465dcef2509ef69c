"""The sandbox's scheduler: a pod with no node goes to the least loaded Ready node that
matches its `nodeSelector`, is not cordoned, breaks no required pod anti-affinity on
`kubernetes.io/hostname`, and holds its bound claims' volumes (node-local storage: an unbound
claim binds to the node chosen); otherwise PodScheduled is False with the scheduler's
"0/N nodes are available: ..." message."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from kraft_sandbox.emulator import ApiError, SandboxEmulator, now_rfc3339
from kraft_sandbox.events import record_event
from kraft_sandbox.nodes import HOSTNAME_KEY, NODES, PODS, NodeController
from kraft_sandbox.volumes import PVCS, VolumeBinder, claims_of

Obj = dict[str, Any]


class Scheduler:
    """Binds each unscheduled pod to a node."""

    def __init__(self, api: SandboxEmulator, nodes: NodeController,
                 volumes: VolumeBinder) -> None:
        self.api = api
        self.nodes = nodes
        self.volumes = volumes

    def _unschedulable(self, pod: Obj, reason: str) -> None:
        current = copy.deepcopy(pod)
        status = current.setdefault("status", {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        prev = next((c for c in status.get("conditions") or []
                     if c.get("type") == "PodScheduled"), None)
        if prev is not None and prev.get("message") == reason:
            return
        conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": reason, "lastTransitionTime": now_rfc3339()})
        status["conditions"] = conds
        with contextlib.suppress(ApiError):
            self.api.commit(PODS, pod, current, "status")

    def schedule(self, pod: Obj) -> None:
        """Bind the pod to a node (its claims with it), or say in PodScheduled why none."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ns = meta.get("namespace", "default")
        candidates = [n for n in self.nodes.node_names if n not in self.nodes.down]
        selector = spec.get("nodeSelector") or {}
        nodes = {n: self.api.read_object(NODES, None, n) or {} for n in candidates}
        candidates = [n for n in candidates if all(
            (nodes[n].get("metadata", {}).get("labels") or {}).get(k) == v
            for k, v in selector.items())
            and not (nodes[n].get("spec") or {}).get("unschedulable")]  # cordoned
        for claim in claims_of(pod):
            pvc = self.api.read_object(PVCS, ns, claim)
            if pvc is None:
                self._unschedulable(pod, f'persistentvolumeclaim "{claim}" not found')
                return
            if pvc["metadata"].get("deletionTimestamp"):
                self._unschedulable(pod, f'persistentvolumeclaim "{claim}" is being deleted')
                return
            bound = (pvc["metadata"].get("annotations") or {}).get(
                "volume.kubernetes.io/selected-node")
            if bound:
                candidates = [n for n in candidates if n == bound]
                if not candidates:
                    self._unschedulable(pod, f'volume of claim "{claim}" is on node {bound}, '
                                             "which is not available (volume node affinity)")
                    return
        candidates = [n for n in candidates if not self._anti_affinity_blocks(pod, n)]
        if not candidates:
            self._unschedulable(pod, self._no_node_message(pod, selector))
            return
        load = {n: 0 for n in candidates}
        for other in self.api.objects_of("v1/pods"):
            node = (other.get("spec") or {}).get("nodeName")
            if node in load:
                load[node] += 1
        node = min(candidates, key=lambda n: (load[n], n))
        for claim in claims_of(pod):
            self.volumes.bind_claim(ns, claim, node)
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = node
        with contextlib.suppress(ApiError):
            self.api.commit(PODS, pod, new, None)
            record_event(self.api, pod, "Scheduled", f"Successfully assigned {ns}/{meta['name']} "
                                                     f"to {node}")

    def _no_node_message(self, pod: Obj, selector: dict[str, str]) -> str:
        """The scheduler's "0/N nodes are available: ..." with the count of each reason."""
        ns = pod["metadata"].get("namespace", "default")
        bound: set[str] = set()
        for claim in claims_of(pod):
            pvc = self.api.read_object(PVCS, ns, claim) or {"metadata": {}}
            node = (pvc["metadata"].get("annotations") or {}).get(
                "volume.kubernetes.io/selected-node")
            if node:
                bound.add(node)
        counts: dict[str, int] = {}
        for name in self.nodes.node_names:
            node_obj = self.api.read_object(NODES, None, name) or {}
            labels = (node_obj.get("metadata") or {}).get("labels") or {}
            if name in self.nodes.down:
                why = "node(s) were not ready"
            elif any(labels.get(k) != v for k, v in selector.items()):
                why = "node(s) didn't match Pod's node affinity/selector"
            elif (node_obj.get("spec") or {}).get("unschedulable"):
                why = "node(s) were unschedulable"
            elif bound and name not in bound:
                why = "node(s) had volume node affinity conflict"
            elif self._anti_affinity_blocks(pod, name):
                why = "node(s) didn't match pod anti-affinity rules"
            else:
                continue
            counts[why] = counts.get(why, 0) + 1
        detail = ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
        return (f"0/{len(self.nodes.node_names)} nodes are available"
                + (f": {detail}." if detail else ""))

    def _anti_affinity_blocks(self, pod: Obj, node: str) -> bool:
        terms = ((((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        for term in terms:
            if term.get("topologyKey") != HOSTNAME_KEY:
                continue
            wanted = (term.get("labelSelector") or {}).get("matchLabels") or {}
            for other in self.api.objects_of("v1/pods"):
                if (other.get("spec") or {}).get("nodeName") != node or \
                        other["metadata"]["uid"] == pod["metadata"]["uid"]:
                    continue
                labels = other["metadata"].get("labels") or {}
                if wanted and all(labels.get(k) == v for k, v in wanted.items()):
                    return True
        return False
