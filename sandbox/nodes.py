"""The sandbox's node controller: the Nodes `sandbox-node-0..N-1` (labels
`kubernetes.io/hostname`, `topology.kubernetes.io/zone` `sandbox-a/b/c`), their Ready condition
and node Lease (`kube-node-lease/NODE`) renewed by a heartbeat, the unreachable taint while one
is down, and the Ready conditions of a down node's pods set false (NodeNotReady). With a real
API server the taints are its node lifecycle controller's, not ours."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
from typing import Any

import kmock
from kraft_sandbox.emulator import ApiError, SandboxEmulator, now_rfc3339

Obj = dict[str, Any]

NODES = kmock.resource("", "v1", "nodes")
PODS = kmock.resource("", "v1", "pods")
LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_LEASE_S = 40
"""A node Lease's duration: the kubelet's default (nodeLeaseDurationSeconds)."""
KUBELET_PORT = 10250
CAPACITY = {"cpu": "2", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}
PRESSURES = (("MemoryPressure", "KubeletHasSufficientMemory"),
             ("DiskPressure", "KubeletHasNoDiskPressure"),
             ("PIDPressure", "KubeletHasSufficientPID"))
HOSTNAME_KEY = "kubernetes.io/hostname"


class NodeController:
    """The Nodes of the sandbox: their names, which are down, their addresses and status."""

    def __init__(self, api: SandboxEmulator, nodes: int, network: str,
                 heartbeat_s: float, real: bool = False) -> None:
        self.api = api
        self.real = real
        self.network = network
        self.heartbeat_s = heartbeat_s
        self.node_names = [f"sandbox-node-{i}" for i in range(nodes)]
        self.down: set[str] = set()

    def node_ip(self, node: str) -> str:
        """A Node's address (127.N.0.x)."""
        index = self.node_names.index(node) if node in self.node_names else 250
        return f"{self.network}.0.{index + 1}"

    def node_down(self, node: str) -> bool:
        """True while the node is taken down (a fault)."""
        return node in self.down

    def register(self, node: str) -> None:
        """Create the Node (labels: hostname, zone) if it is not there; Ready."""
        index = self.node_names.index(node)
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {
            HOSTNAME_KEY: node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": f"sandbox-{'abc'[index % 3]}"}},
            "spec": {}}
        if self.api.read_object(NODES, None, node) is None:
            self.api.node_view(node).create_object(NODES, None, body)
        self.set_status(node, ready=True)

    def set_status(self, node: str, ready: bool) -> None:
        """The Node's Ready condition (Unknown when down), addresses and capacity; the
        unreachable taint while it is down."""
        current = self.api.read_object(NODES, None, node)
        if current is None:
            return
        now = now_rfc3339()
        old = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
        prev = old.get("Ready", {})
        status_text = "True" if ready else "Unknown"
        cond = {"type": "Ready", "status": status_text,
                "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                "message": "kubelet is posting ready status" if ready else
                           "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now if ready else prev.get("lastHeartbeatTime", now),
                "lastTransitionTime": prev.get("lastTransitionTime", now)
                if prev.get("status") == status_text else now}
        pressures = [self._pressure(kind, reason, ready, old.get(kind, {}), now)
                     for kind, reason in PRESSURES]
        new = copy.deepcopy(current)
        new["status"] = {
            "conditions": [*pressures, cond],
            "addresses": [{"type": "InternalIP", "address": self.node_ip(node)},
                          {"type": "Hostname", "address": node}],
            "capacity": dict(CAPACITY),
            "allocatable": dict(CAPACITY),
            "nodeInfo": {"kubeletVersion": "v1.35.0-sandbox", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "sandbox://1",
                         "kernelVersion": "", "osImage": "kraft-sandbox", "machineID": "",
                         "systemUUID": "", "bootID": "", "kubeProxyVersion": ""},
            # where the API server reaches this node's kubelet (kubectl logs)
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
        }
        self.api.node_view(node).commit(NODES, current, new, "status")
        if self.real:  # the taints are the node lifecycle controller's
            return
        taints = [] if ready else [{"key": "node.kubernetes.io/unreachable",
                                    "effect": "NoSchedule", "timeAdded": now}]
        current = self.api.read_object(NODES, None, node)
        if current is not None and (current.get("spec") or {}).get("taints", []) != taints:
            spec_new = copy.deepcopy(current)
            spec_new.setdefault("spec", {})["taints"] = taints
            if not taints:
                spec_new["spec"].pop("taints")
            self.api.node_view(node).commit(NODES, current, spec_new, None)

    @staticmethod
    def _pressure(kind: str, reason: str, ready: bool, prev: Obj, now: str) -> Obj:
        """One of the pressure conditions a kubelet reports beside Ready: False while the
        node is up (the sandbox's nodes share the machine and measure no pressure), Unknown
        while it is down."""
        status = "False" if ready else "Unknown"
        return {"type": kind, "status": status,
                "reason": reason if ready else "NodeStatusUnknown",
                "message": f"kubelet has {reason.removeprefix('KubeletHas').lower()}"
                if ready else "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now if ready else prev.get("lastHeartbeatTime", now),
                "lastTransitionTime": prev.get("lastTransitionTime", now)
                if prev.get("status") == status else now}

    def renew_lease(self, node: str) -> None:
        """The node's Lease in kube-node-lease (holder: the node; owned by the Node object, so
        it goes with it), its renewTime now: the heartbeat the node lifecycle controller of a
        real cluster reads."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": node, "leaseDurationSeconds": NODE_LEASE_S,
                "renewTime": now}
        api = self.api.node_view(node)  # its own Lease, as the node
        current = api.read_object(LEASES, NODE_LEASE_NAMESPACE, node)
        if current is None:
            owner = self.api.read_object(NODES, None, node)
            meta: Obj = {"name": node, "namespace": NODE_LEASE_NAMESPACE}
            if owner is not None:
                meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node,
                                            "uid": owner["metadata"]["uid"]}]
            api.create_object(LEASES, NODE_LEASE_NAMESPACE, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": spec})
            return
        new = copy.deepcopy(current)
        new["spec"] = {**(current.get("spec") or {}), **spec}
        api.commit(LEASES, current, new, None)

    async def heartbeat_loop(self) -> None:
        """Renew every Node's Lease and Ready condition that is up, as each kubelet does."""
        while True:
            for node in self.node_names:
                if node not in self.down:
                    with contextlib.suppress(ApiError):
                        self.renew_lease(node)
            await asyncio.sleep(self.heartbeat_s)
            for node in self.node_names:
                if node not in self.down:
                    with contextlib.suppress(ApiError):
                        self.set_status(node, ready=True)

    def mark_pods_not_ready(self, node: str) -> None:
        """The node went down: its pods' Ready and ContainersReady conditions are false."""
        for pod in self.api.objects_of("v1/pods"):
            if pod.get("spec", {}).get("nodeName") != node:
                continue
            current = copy.deepcopy(pod)
            conds = [c for c in (pod.get("status") or {}).get("conditions") or []
                     if c.get("type") not in ("Ready", "ContainersReady")]
            conds += [{"type": t, "status": "False", "reason": "NodeNotReady",
                       "lastTransitionTime": now_rfc3339()} for t in ("Ready", "ContainersReady")]
            current.setdefault("status", {})["conditions"] = conds
            with contextlib.suppress(ApiError):
                self.api.node_view(node).commit(PODS, pod, current, "status")
