"""Strategic merge patch (what `kubectl apply`, `kubectl set`, `kubectl label` send for the
built-in kinds), for the fields whose merge strategy matters to pods and workloads.

A plain merge patch replaces lists; a strategic one merges the lists Kubernetes declares
with a merge key item by item (`containers` by `name`, `volumeMounts` by `mountPath`, ...),
so `kubectl set env deployment/x A=b` changes one container's env and keeps its command.
Supported: recursive merge with `null` deleting a key; keyed lists (table below) merged by
key, with `$patch: delete` items removing and `$setElementOrder/FIELD` ordering; primitive
merge lists (`finalizers`) as unions with `$deleteFromPrimitiveList/FIELD`; `$patch: replace`
and `$patch: delete` on maps; `$retainKeys` ignored. Other lists are replaced.
"""

from __future__ import annotations

import copy
from typing import Any

MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",),
    "env": ("name",), "volumes": ("name",), "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",), "imagePullSecrets": ("name",),
    "ports": ("containerPort", "port"), "conditions": ("type",),
    "ownerReferences": ("uid",), "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey",), "resourceClaims": ("name",),
}
"""Keyed lists: field name -> merge key (the first key present in the items)."""

PRIMITIVE_MERGE = {"finalizers"}


def _key_of(field: str, items: list[Any]) -> str | None:
    for key in MERGE_KEYS.get(field, ()):
        if any(isinstance(i, dict) and key in i for i in items):
            return key
    return None


def _merge_list(field: str, target: Any, patch: list[Any], order: list[Any] | None) -> Any:
    current = list(target) if isinstance(target, list) else []
    if field in PRIMITIVE_MERGE and all(not isinstance(i, dict) for i in patch):
        return current + [i for i in patch if i not in current]
    key = _key_of(field, patch + current)
    if key is None:
        return copy.deepcopy(patch)
    out = [copy.deepcopy(i) for i in current]
    for item in patch:
        if not isinstance(item, dict):
            continue
        directive = item.get("$patch")
        found = next((i for i, have in enumerate(out)
                      if isinstance(have, dict) and have.get(key) == item.get(key)), None)
        if directive == "delete":
            if found is not None:
                out.pop(found)
        elif directive == "replace" or found is None:
            clean = {k: v for k, v in item.items() if k != "$patch"}
            if found is None:
                out.append(strategic_merge({}, clean))
            else:
                out[found] = strategic_merge({}, clean)
        else:
            out[found] = strategic_merge(out[found], item)
    if order:
        rank = {o.get(key) if isinstance(o, dict) else o: n for n, o in enumerate(order)}
        out.sort(key=lambda i: rank.get(i.get(key) if isinstance(i, dict) else i, len(rank)))
    return out


def strategic_merge(target: Any, patch: Any) -> Any:
    """`target` with the strategic merge patch `patch` applied (neither is changed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(target) if isinstance(target, dict) else {}
    orders = {k.split("/", 1)[1]: v for k, v in patch.items()
              if k.startswith("$setElementOrder/")}
    removals = {k.split("/", 1)[1]: v for k, v in patch.items()
                if k.startswith("$deleteFromPrimitiveList/")}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None or (isinstance(value, dict) and value.get("$patch") == "delete"):
            out.pop(key, None)
        elif isinstance(value, list):
            out[key] = _merge_list(key, out.get(key), value, orders.get(key))
        else:
            out[key] = strategic_merge(out.get(key), value)
    for key, order in orders.items():
        if key not in patch and isinstance(out.get(key), list):
            out[key] = _merge_list(key, out[key], [], order)
    for key, gone in removals.items():
        if isinstance(out.get(key), list):
            out[key] = [i for i in out[key] if i not in gone]
    return out
