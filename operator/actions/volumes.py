"""Volumes: CreatePVC (annotated with the directory id it is for) and DeletePVC."""

from __future__ import annotations

import contextlib

from kraft_operator import models, render
from kraft_operator.actions.base import Env, Outcome
from kraft_operator.kube import Conflict, NotFound
from kraft_operator.planner import CreatePVC, DeletePVC


async def create_pvc(action: CreatePVC, env: Env) -> Outcome:
    ref = env.ref
    name = ref.pvc_name(action.node_id)
    try:
        await env.kube.create("v1", "persistentvolumeclaims", ref.namespace,
                              render.pvc(ref, action.node_id, action.directory_id))
    except Conflict:
        existing = await env.kube.get("v1", "persistentvolumeclaims", ref.namespace, name)
        held = (existing["metadata"].get("annotations") or {}).get(
            models.DIRECTORY_ID_ANNOTATION)
        if existing["metadata"].get("deletionTimestamp"):
            return Outcome(False, "VolumeStillDeleting", f"claim {name} is still being deleted")
        return Outcome(True, "CreatedVolume", f"claim {name} exists (directory id {held})")
    return Outcome(True, "CreatedVolume",
                   f"claim {name} for node {action.node_id}, directory id {action.directory_id}")


async def delete_pvc(action: DeletePVC, env: Env) -> Outcome:
    with contextlib.suppress(NotFound):
        await env.kube.delete("v1", "persistentvolumeclaims", env.ref.namespace, action.name)
    return Outcome(True, "DeletedVolume", f"claim {action.name} of node {action.node_id}")
