"""The Events the sandbox's kubelet and scheduler record (`kubectl get events`,
`kubectl describe`): one per happening, with the object it is about."""

from __future__ import annotations

import contextlib
from typing import Any

import kmock
from kraft_sandbox.emulator import ApiError, SandboxEmulator, now_rfc3339

Obj = dict[str, Any]

EVENTS = kmock.resource("", "v1", "events")


def record_event(api: SandboxEmulator, obj: Obj, reason: str, message: str,
                 kind: str = "Normal") -> None:
    """An Event about `obj` (a Pod by default), from the kubelet."""
    meta = obj["metadata"]
    event = {
        "metadata": {"generateName": f"{meta['name']}.", "namespace":
                     meta.get("namespace", "default")},
        "involvedObject": {"kind": obj.get("kind", "Pod"), "name": meta["name"],
                           "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                           "apiVersion": obj.get("apiVersion", "v1")},
        "reason": reason, "message": message, "type": kind, "count": 1,
        "source": {"component": "kubelet"}, "firstTimestamp": now_rfc3339(),
        "lastTimestamp": now_rfc3339(),
    }
    with contextlib.suppress(ApiError):
        api.create_object(EVENTS, meta.get("namespace", "default"), event)
