"""A Deployment controller for the sandbox, so that a chart's Deployment (the operator's,
installed with helm) runs.

Simplified from Kubernetes': the Deployment owns its Pods directly (no ReplicaSets). Its pods
carry the template's labels plus `pod-template-hash` (a hash of the template); it keeps
`spec.replicas` pods of the current template, replacing any that ended or were deleted; on a
template change it creates the new pods first and deletes the old ones once as many new ones
are Ready (surge first, as `maxUnavailable: 0` does); it writes `status` (replicas,
updatedReplicas, readyReplicas, availableReplicas, observedGeneration, the Available and
Progressing conditions).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
from typing import Any

import kmock
from kraft_sandbox.emulator import ApiError, SandboxEmulator, now_rfc3339

Obj = dict[str, Any]

DEPLOYMENTS = kmock.resource("apps", "v1", "deployments")
PODS = kmock.resource("", "v1", "pods")
HASH_LABEL = "pod-template-hash"


def template_hash(template: Obj) -> str:
    """A short, stable hash of a pod template (the pod-template-hash label's value)."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _owned_by(pod: Obj, uid: str) -> bool:
    return any(o.get("uid") == uid for o in pod["metadata"].get("ownerReferences") or [])


def reconcile(api: SandboxEmulator) -> None:
    """One pass over every Deployment (idempotent; run after each change)."""
    pods = api.objects_of("v1/pods")
    for deploy in api.objects_of("apps/v1/deployments"):
        with contextlib.suppress(ApiError):
            _reconcile_one(api, deploy, pods)


def _reconcile_one(api: SandboxEmulator, deploy: Obj, pods: list[Obj]) -> None:
    meta, spec = deploy["metadata"], deploy.get("spec") or {}
    if meta.get("deletionTimestamp"):
        return
    ns, uid = meta["namespace"], meta["uid"]
    wanted = int(spec.get("replicas", 1))
    template = spec.get("template") or {}
    current = template_hash(template)
    mine = [p for p in pods if p["metadata"].get("namespace") == ns and _owned_by(p, uid)
            and not p["metadata"].get("deletionTimestamp")]
    for pod in mine:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            api.delete_object(PODS, ns, pod["metadata"]["name"], {})
    mine = [p for p in mine if (p.get("status") or {}).get("phase") not in ("Succeeded",
                                                                            "Failed")]
    new = [p for p in mine if (p["metadata"].get("labels") or {}).get(HASH_LABEL) == current]
    old = [p for p in mine if p not in new]
    for _ in range(wanted - len(new)):
        _create_pod(api, deploy, template, current)
    if len(new) > wanted:
        surplus = sorted(new, key=lambda p: p["metadata"]["creationTimestamp"])[wanted:]
        for pod in surplus:
            api.delete_object(PODS, ns, pod["metadata"]["name"], {})
    ready_new = [p for p in new if _ready(p)]
    if old and len(ready_new) >= wanted:
        for pod in old:
            api.delete_object(PODS, ns, pod["metadata"]["name"], {})
    ready = [p for p in mine if _ready(p)]
    available = len(ready) >= wanted
    status = {
        "observedGeneration": meta.get("generation", 1),
        "replicas": len(mine), "updatedReplicas": len(new),
        "readyReplicas": len(ready), "availableReplicas": len(ready),
        "conditions": [
            {"type": "Available", "status": "True" if available else "False",
             "reason": "MinimumReplicasAvailable" if available else
             "MinimumReplicasUnavailable", "lastUpdateTime": now_rfc3339()},
            {"type": "Progressing", "status": "True",
             "reason": "NewReplicaSetAvailable" if not old and len(ready_new) >= wanted
             else "ReplicaSetUpdated", "lastUpdateTime": now_rfc3339()}],
    }
    if not status["readyReplicas"]:
        status.pop("readyReplicas")
        status.pop("availableReplicas")
    old_status = deploy.get("status") or {}
    if _same(old_status, status):
        return
    updated = copy.deepcopy(deploy)
    updated["status"] = status
    api.commit(DEPLOYMENTS, deploy, updated, "status")


def _same(old: Obj, new: Obj) -> bool:
    """Equal but for the conditions' timestamps (no write, no event, when nothing moved)."""
    def strip(status: Obj) -> Obj:
        out = dict(status)
        out["conditions"] = [{k: v for k, v in c.items() if k != "lastUpdateTime"}
                             for c in status.get("conditions") or []]
        return out
    return strip(old) == strip(new)


def _create_pod(api: SandboxEmulator, deploy: Obj, template: Obj, digest: str) -> None:
    meta = deploy["metadata"]
    tmeta = copy.deepcopy(template.get("metadata") or {})
    labels = {**(tmeta.get("labels") or {}), HASH_LABEL: digest}
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {**tmeta, "generateName": f"{meta['name']}-{digest}-", "labels": labels,
                     "namespace": meta["namespace"],
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                          "name": meta["name"], "uid": meta["uid"],
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": copy.deepcopy(template.get("spec") or {}),
    }
    pod["metadata"].pop("name", None)
    api.create_object(PODS, meta["namespace"], pod)
