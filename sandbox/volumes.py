"""The sandbox's volume binder: a default StorageClass (`sandbox-local`,
WaitForFirstConsumer), a claim bound with a local PersistentVolume to the node of the first pod
that uses it (a directory under that node's, lost with the node), the volume deleted with its
claim, and the pvc-protection controller (a deleted claim goes once no pod uses it)."""

from __future__ import annotations

import contextlib
import copy
import shutil
from pathlib import Path
from typing import Any

import kmock
from kraft_sandbox.emulator import PVC_PROTECTION, ApiError, SandboxEmulator
from kraft_sandbox.nodes import HOSTNAME_KEY

Obj = dict[str, Any]

PVCS = kmock.resource("", "v1", "persistentvolumeclaims")
PVS = kmock.resource("", "v1", "persistentvolumes")
STORAGECLASSES = kmock.resource("storage.k8s.io", "v1", "storageclasses")
STORAGE_CLASS = "sandbox-local"
PROVISIONER = "kraft.dev/sandbox-local"


def claims_of(pod: Obj) -> list[str]:
    """The names of the claims a pod's volumes use."""
    return [v["persistentVolumeClaim"]["claimName"]
            for v in (pod.get("spec") or {}).get("volumes") or []
            if v.get("persistentVolumeClaim")]


class VolumeBinder:
    """PersistentVolumes and PersistentVolumeClaims of the sandbox's nodes."""

    def __init__(self, api: SandboxEmulator, state_dir: Path) -> None:
        self.api = api
        self.state_dir = state_dir

    def ensure_storage_class(self) -> None:
        """The default StorageClass, once."""
        if self.api.read_object(STORAGECLASSES, None, STORAGE_CLASS) is None:
            self.api.create_object(STORAGECLASSES, None, {
                "metadata": {"name": STORAGE_CLASS, "annotations": {
                    "storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": PROVISIONER, "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer"})

    def node_volumes(self, node: str) -> Path:
        """The directory of a node's local volumes (lost with the node)."""
        return self.state_dir / "nodes" / node / "volumes"

    def volume_dir(self, node: str, pv_name: str) -> Path:
        """The directory of the local PersistentVolume `pv_name` on `node`."""
        return self.node_volumes(node) / pv_name

    def bind_claim(self, ns: str, claim: str, node: str) -> None:
        """Bind a claim to a new local PersistentVolume on `node` (WaitForFirstConsumer)."""
        pvc = self.api.read_object(PVCS, ns, claim)
        if pvc is None or (pvc.get("spec") or {}).get("volumeName"):
            return
        pv_name = f"pvc-{pvc['metadata']['uid']}"
        path = self.volume_dir(node, pv_name)
        path.mkdir(parents=True, exist_ok=True)
        size = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
            "storage", "1Gi")
        if self.api.read_object(PVS, None, pv_name) is None:
            self.api.create_object(PVS, None, self._volume(pvc, node, pv_name, path))
            pv = self.api.read_object(PVS, None, pv_name)
            if pv is not None:
                new_pv = copy.deepcopy(pv)
                new_pv["status"] = {"phase": "Bound"}
                self.api.commit(PVS, pv, new_pv, "status")
        new = copy.deepcopy(pvc)
        new["spec"]["volumeName"] = pv_name
        new["metadata"].setdefault("annotations", {})["volume.kubernetes.io/selected-node"] = node
        new["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
        self.api.commit(PVCS, pvc, new, None)
        pvc = self.api.read_object(PVCS, ns, claim)
        if pvc is not None:
            bound = copy.deepcopy(pvc)
            bound["status"] = {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                               "capacity": {"storage": size}}
            self.api.commit(PVCS, pvc, bound, "status")

    @staticmethod
    def _volume(pvc: Obj, node: str, pv_name: str, path: Path) -> Obj:
        """The local PersistentVolume for `pvc` on `node`, claimed by it."""
        spec = pvc.get("spec") or {}
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        meta = pvc["metadata"]
        return {"metadata": {"name": pv_name, "annotations": {
            "pv.kubernetes.io/provisioned-by": PROVISIONER}}, "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.get("storageClassName") or STORAGE_CLASS,
            "local": {"path": str(path)},
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                         "namespace": meta["namespace"], "name": meta["name"],
                         "uid": meta["uid"]},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME_KEY, "operator": "In", "values": [node]}]}]}}}}

    # ---------------------------------------------------------------- on a real API server

    def provision_claims(self) -> None:
        """The external provisioner of the StorageClass, with a real API server: a claim of
        ours that kube-scheduler chose a node for (`volume.kubernetes.io/selected-node`, set
        under WaitForFirstConsumer) gets a local PersistentVolume on that node, claimed by
        it; kube-controller-manager's PV controller then binds the two."""
        for pvc in self.api.objects_of("v1/persistentvolumeclaims"):
            meta, spec = pvc["metadata"], pvc.get("spec") or {}
            notes = meta.get("annotations") or {}
            node = notes.get("volume.kubernetes.io/selected-node")
            provisioner = (notes.get("volume.kubernetes.io/storage-provisioner")
                           or notes.get("volume.beta.kubernetes.io/storage-provisioner"))
            if (not node or provisioner != PROVISIONER or spec.get("volumeName")
                    or meta.get("deletionTimestamp")):
                continue
            pv_name = f"pvc-{meta['uid']}"
            if self.api.read_object(PVS, None, pv_name) is not None:
                continue
            path = self.volume_dir(node, pv_name)
            path.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(ApiError):  # (409: made meanwhile)
                self.api.create_object(PVS, None, self._volume(pvc, node, pv_name, path))

    def reclaim_released(self) -> None:
        """Reclaim policy Delete, with a real API server: a volume of ours whose claim is gone
        (the PV controller marks it Released) loses its directory, then the object."""
        for pv in self.api.objects_of("v1/persistentvolumes"):
            meta, spec = pv["metadata"], pv.get("spec") or {}
            if ((meta.get("annotations") or {}).get("pv.kubernetes.io/provisioned-by")
                    != PROVISIONER or (pv.get("status") or {}).get("phase") != "Released"
                    or spec.get("persistentVolumeReclaimPolicy") != "Delete"
                    or meta.get("deletionTimestamp")):
                continue
            local = (spec.get("local") or {}).get("path")
            if local:
                shutil.rmtree(local, ignore_errors=True)
            with contextlib.suppress(ApiError):
                self.api.delete_object(PVS, None, meta["name"], {})

    def release_claim(self, pvc: Obj) -> None:
        """A deleted claim: its PersistentVolume and directory go (reclaimPolicy Delete)."""
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        if not pv_name:
            return
        pv = self.api.read_object(PVS, None, pv_name)
        if pv is not None:
            local = ((pv.get("spec") or {}).get("local") or {}).get("path")
            if local:
                shutil.rmtree(local, ignore_errors=True)
            with contextlib.suppress(ApiError):
                self.api.delete_object(PVS, None, pv_name, {})

    def claim_dir(self, ns: str, claim: str) -> Path | None:
        """The directory backing a bound claim (None while unbound)."""
        pvc = self.api.read_object(PVCS, ns, claim)
        if pvc is None:
            return None
        pv = self.api.read_object(PVS, None, (pvc.get("spec") or {}).get("volumeName") or "")
        if pv is None:
            return None
        return Path(pv["spec"]["local"]["path"])

    def protect_claims(self, pods: list[Obj]) -> None:
        """The pvc-protection controller: a deleted claim goes once no pod uses it."""
        for pvc in self.api.objects_of("v1/persistentvolumeclaims"):
            meta = pvc["metadata"]
            if not meta.get("deletionTimestamp") or PVC_PROTECTION not in (
                    meta.get("finalizers") or []):
                continue
            in_use = any(p["metadata"].get("namespace") == meta["namespace"]
                         and meta["name"] in claims_of(p)
                         and (p.get("status") or {}).get("phase") not in ("Succeeded",
                                                                           "Failed")
                         for p in pods)
            if in_use:
                continue
            new = copy.deepcopy(pvc)
            new["metadata"]["finalizers"] = [f for f in meta["finalizers"]
                                             if f != PVC_PROTECTION]
            with contextlib.suppress(ApiError):
                self.api.commit(PVCS, pvc, new, None)
