"""The objects every quorum has whatever its pods do: the headless and client Services, the
ConfigMap of server.properties and the PodDisruptionBudget. Made to match the rendering on
every reconcile (created when missing, patched when a rendered field differs, the budget
deleted when disabled), before the planner's action runs. And the claims' owner references,
which follow `storage.onDelete` (`claim_owners`)."""

from __future__ import annotations

from typing import Any

from kraft_operator import models, render
from kraft_operator.kube import Conflict, Kube, NotFound
from kraft_operator.policy import OperatorPolicy

KINDS = {"Service": ("v1", "services"), "ConfigMap": ("v1", "configmaps"),
         "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets"),
         "NetworkPolicy": ("networking.k8s.io/v1", "networkpolicies")}


def _differs(want: Any, have: Any) -> bool:
    """Whether anything `want` sets is not in `have`: fields the server adds are ignored, in
    list items too (a real API server gives each Service port its `protocol`; compared
    whole, the ports differed on every pass and the Services were patched on every pass)."""
    if isinstance(want, dict):
        return not isinstance(have, dict) or any(_differs(v, have.get(k))
                                                 for k, v in want.items())
    if isinstance(want, list):
        return not isinstance(have, list) or len(want) != len(have) or any(
            _differs(w, h) for w, h in zip(want, have, strict=True))
    return bool(want != have)


async def ensure(kube: Kube, ref: render.QuorumRef, in_use: list[int],
                 policy: OperatorPolicy | None = None) -> list[str]:
    """Create or patch the standing objects; returns what changed (for the log)."""
    changed = []
    for obj in render.standing_objects(ref, in_use, policy):
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
        if _differs(want, have) or ("data" in want and want["data"] != have.get("data")) \
                or (obj["kind"] == "NetworkPolicy" and _rules_differ(want, have)):
            if "data" in want:  # a ConfigMap's data is replaced whole: stale keys go too
                want["data"] = {**{k: None for k in have.get("data") or {}}, **want["data"]}
            await kube.patch(api, plural, ref.namespace, name, want)
            changed.append(f"updated {obj['kind']} {name}")
    if not ref.spec.network_policy.enabled:
        try:
            await kube.delete("networking.k8s.io/v1", "networkpolicies", ref.namespace,
                              ref.network_policy)
            changed.append(f"deleted NetworkPolicy {ref.network_policy}")
        except NotFound:
            pass
    if not ref.spec.pod_disruption_budget.enabled:
        try:
            await kube.delete("policy/v1", "poddisruptionbudgets", ref.namespace, ref.pdb)
            changed.append(f"deleted PodDisruptionBudget {ref.pdb}")
        except NotFound:
            pass
    return changed


def _rules_differ(want: dict[str, Any], have: dict[str, Any]) -> bool:
    """Whether a NetworkPolicy's rules are not exactly the rendered ones. Compared both ways:
    a rule or a peer field the server holds beyond the rendered ones (added by hand, or left
    from a wider spec) would let in what the spec keeps out. The server adds nothing to
    ingress rules whose ports name their protocol, and the merge patch replaces the list."""
    want_in = (want.get("spec") or {}).get("ingress") or []
    have_in = (have.get("spec") or {}).get("ingress") or []
    return _differs(want_in, have_in) or _differs(have_in, want_in)


async def claim_owners(kube: Kube, ref: render.QuorumRef, claims: list[Any]) -> list[str]:
    """Make each of this quorum's claims owned by it exactly when `storage.onDelete` is
    Delete, so deleting the KRaftQuorum does what the spec says now, not what it said when the
    claim was made (the garbage collector does the deleting: no operator needs to run).

    A claim is this quorum's when it carries the quorum's uid (annotation or owner
    reference); one without either (a claim an earlier quorum of the same name kept, or one
    made before claims carried the uid) is never adopted: deleting it would delete data that
    may be another cluster's."""
    owned = ref.spec.storage.on_delete == models.VolumePolicy.DELETE
    changed = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        refs = list(meta.get("ownerReferences") or [])
        mine = [r for r in refs if r.get("uid") == ref.uid]
        marked = (meta.get("annotations") or {}).get(render.QUORUM_UID_ANNOTATION) == ref.uid
        if not mine and not marked:
            continue
        patch: dict[str, Any] = {}
        if not marked:
            patch["annotations"] = {render.QUORUM_UID_ANNOTATION: ref.uid}
        if owned and not mine:
            patch["ownerReferences"] = [*refs, ref.owner_reference]
        elif not owned and mine:
            patch["ownerReferences"] = [r for r in refs if r.get("uid") != ref.uid] or None
        if not patch:
            continue
        patch["resourceVersion"] = meta.get("resourceVersion")  # over what was read
        try:
            await kube.patch("v1", "persistentvolumeclaims", ref.namespace, meta["name"],
                             {"metadata": patch})
        except (Conflict, NotFound):
            continue  # changed meanwhile: the next pass reads it again
        if "ownerReferences" in patch:
            changed.append(f"claim {meta['name']} {'owned by' if owned else 'released from'} "
                           f"{ref.name} (storage.onDelete: {ref.spec.storage.on_delete.value})")
    return changed
