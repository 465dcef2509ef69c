"""The objects every quorum has whatever its pods do: the headless and client Services, the
ConfigMap of server.properties and the PodDisruptionBudget. Made to match the rendering on
every reconcile (created when missing, patched when a rendered field differs, the budget
deleted when disabled), before the planner's action runs."""

from __future__ import annotations

from typing import Any

from kraft_operator import render
from kraft_operator.kube import Conflict, Kube, NotFound

KINDS = {"Service": ("v1", "services"), "ConfigMap": ("v1", "configmaps"),
         "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets")}


def _differs(want: Any, have: Any) -> bool:
    """Whether anything `want` sets is not in `have` (fields the server adds are ignored)."""
    if isinstance(want, dict):
        return not isinstance(have, dict) or any(_differs(v, have.get(k))
                                                 for k, v in want.items())
    return bool(want != have)


async def ensure(kube: Kube, ref: render.QuorumRef, in_use: list[int]) -> list[str]:
    """Create or patch the standing objects; returns what changed (for the log)."""
    changed = []
    for obj in render.standing_objects(ref, in_use):
        api, plural = KINDS[obj["kind"]]
        name = obj["metadata"]["name"]
        try:
            have = await kube.get(api, plural, ref.namespace, name)
        except NotFound:
            try:
                await kube.create(api, plural, ref.namespace, obj)
                changed.append(f"created {obj['kind']} {name}")
            except Conflict:
                pass
            continue
        want = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        want["metadata"] = {k: want["metadata"][k] for k in ("labels", "ownerReferences")}
        if _differs(want, have) or ("data" in want and want["data"] != have.get("data")):
            if "data" in want:  # a ConfigMap's data is replaced whole: stale keys go too
                want["data"] = {**{k: None for k in have.get("data") or {}}, **want["data"]}
            await kube.patch(api, plural, ref.namespace, name, want)
            changed.append(f"updated {obj['kind']} {name}")
    if not ref.spec.pod_disruption_budget.enabled:
        try:
            await kube.delete("policy/v1", "poddisruptionbudgets", ref.namespace, ref.pdb)
            changed.append(f"deleted PodDisruptionBudget {ref.pdb}")
        except NotFound:
            pass
    return changed
