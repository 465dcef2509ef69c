"""Server-side printing: the `Table` answers `kubectl get` asks for.

kubectl (since 1.10) asks the API server for a `meta.k8s.io/v1` Table and prints its rows;
without one it prints only NAME and AGE. This module renders the columns a real API server
gives the kinds the sandbox runs (Pods, Nodes, claims, volumes, Services, ConfigMaps,
Events) and, for custom resources, the CRD's `additionalPrinterColumns` (JSONPath of the
form kubectl documents: `.a.b`, `[n]`, `[?(@.k=="v")]`).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj], Any]]  # name, type, priority, cell


def wants_table(accept: str | None) -> bool:
    """Whether an Accept header asks for a Table."""
    return bool(accept) and "as=Table" in str(accept)


def human_age(timestamp: str | None, now: datetime.datetime | None = None) -> str:
    """kubectl's short duration since `timestamp` (RFC 3339), e.g. 45s, 3m12s, 2h, 5d."""
    if not timestamp:
        return "<unknown>"
    then = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC)
    secs = max(0, int(((now or datetime.datetime.now(datetime.UTC)) - then).total_seconds()))
    if secs < 120:
        return f"{secs}s"
    mins = secs // 60
    if mins < 10:
        return f"{mins}m{secs % 60}s"
    if mins < 180:
        return f"{mins}m"
    hours = mins // 60
    if hours < 8:
        return f"{hours}h{mins % 60}m"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _age(obj: Obj) -> str:
    return human_age(obj["metadata"].get("creationTimestamp"))


def _pod_ready(obj: Obj) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(obj: Obj) -> str:
    status = obj.get("status") or {}
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    inits = status.get("initContainerStatuses") or []
    for i, st in enumerate(inits):
        state = st.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        if "waiting" in state and state["waiting"].get("reason") not in (None,
                                                                         "PodInitializing"):
            return f"Init:{state['waiting']['reason']}"
        if "terminated" in state:
            return f"Init:{state['terminated'].get('reason', 'Error')}"
        return f"Init:{i}/{len(inits)}"
    reason = status.get("phase") or "Pending"
    for st in status.get("containerStatuses") or []:
        state = st.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            reason = state["terminated"].get("reason") or "Error"
    return str(reason)


def _restarts(obj: Obj) -> int:
    return sum(int(s.get("restartCount", 0))
               for s in (obj.get("status") or {}).get("containerStatuses") or [])


def _node_status(obj: Obj) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            text = "Ready" if cond.get("status") == "True" else "NotReady"
            if (obj.get("spec") or {}).get("unschedulable"):
                text += ",SchedulingDisabled"
            return text
    return "Unknown"


def _ports(obj: Obj) -> str:
    ports = (obj.get("spec") or {}).get("ports") or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


def _get(path: str) -> Callable[[Obj], Any]:
    return lambda obj: jsonpath(obj, path)


NAME: Column = ("Name", "string", 0, lambda o: o["metadata"]["name"])
AGE: Column = ("Age", "string", 0, _age)

BUILTIN: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [NAME, ("Ready", "string", 0, _pod_ready), ("Status", "string", 0,
                                                              _pod_status),
                   ("Restarts", "integer", 0, _restarts), AGE,
                   ("IP", "string", 1, _get(".status.podIP")),
                   ("Node", "string", 1, _get(".spec.nodeName"))],
    ("", "nodes"): [NAME, ("Status", "string", 0, _node_status),
                    ("Roles", "string", 0, lambda o: "<none>"), AGE,
                    ("Version", "string", 0, _get(".status.nodeInfo.kubeletVersion")),
                    ("Internal-IP", "string", 1, _get(".status.addresses[0].address"))],
    ("", "persistentvolumeclaims"): [
        NAME, ("Status", "string", 0, _get(".status.phase")),
        ("Volume", "string", 0, _get(".spec.volumeName")),
        ("Capacity", "string", 0, _get(".status.capacity.storage")),
        ("Access Modes", "string", 0, lambda o: ",".join(
            (o.get("status") or {}).get("accessModes") or [])),
        ("StorageClass", "string", 0, _get(".spec.storageClassName")), AGE],
    ("", "persistentvolumes"): [
        NAME, ("Capacity", "string", 0, _get(".spec.capacity.storage")),
        ("Reclaim Policy", "string", 0, _get(".spec.persistentVolumeReclaimPolicy")),
        ("Status", "string", 0, _get(".status.phase")),
        ("Claim", "string", 0, lambda o: "/".join(
            str(x) for x in (jsonpath(o, ".spec.claimRef.namespace"),
                             jsonpath(o, ".spec.claimRef.name")) if x)),
        ("StorageClass", "string", 0, _get(".spec.storageClassName")), AGE],
    ("", "services"): [NAME, ("Type", "string", 0, _get(".spec.type")),
                       ("Cluster-IP", "string", 0, _get(".spec.clusterIP")),
                       ("External-IP", "string", 0, lambda o: "<none>"),
                       ("Port(s)", "string", 0, _ports), AGE],
    ("", "configmaps"): [NAME, ("Data", "integer", 0, lambda o: len(o.get("data") or {})
                                + len(o.get("binaryData") or {})), AGE],
    ("", "events"): [("Last Seen", "string", 0, lambda o: human_age(
        o.get("lastTimestamp") or o["metadata"].get("creationTimestamp"))),
                     ("Type", "string", 0, _get(".type")),
                     ("Reason", "string", 0, _get(".reason")),
                     ("Object", "string", 0, lambda o: f"{str(jsonpath(o, '.involvedObject.kind') or '').lower()}/"
                                                       f"{jsonpath(o, '.involvedObject.name')}"),
                     ("Message", "string", 0, _get(".message"))],
}


_STEP = re.compile(r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*"
                   r"[\"']([^\"']*)[\"']\)\]|\['([^']+)'\]")


def jsonpath(obj: Any, path: str) -> Any:
    """The value at a kubectl-style JSONPath (None when absent); a filter takes the first
    match."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    cur = obj
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            return None
        pos = m.end()
        field, index, fkey, fval, quoted = m.groups()
        if field is not None or quoted is not None:
            cur = cur.get(field or quoted) if isinstance(cur, dict) else None
        elif index is not None:
            cur = cur[int(index)] if isinstance(cur, list) and int(index) < len(cur) else None
        else:
            found = None
            for item in cur if isinstance(cur, list) else []:
                if str(jsonpath(item, "." + fkey)) == fval:
                    found = item
                    break
            cur = found
        if cur is None:
            return None
    return cur


def crd_columns(printer_columns: list[Obj] | None) -> list[Column]:
    """The columns of a custom resource: Name, the CRD's printer columns, Age when none is
    a date already."""
    columns: list[Column] = [NAME]
    has_age = False
    for col in printer_columns or []:
        kind = col.get("type", "string")
        path = col.get("jsonPath", "")

        def cell(o: Obj, p: str = path, t: str = kind) -> Any:
            value = jsonpath(o, p)
            if t == "date":
                return human_age(value) if isinstance(value, str) else "<unknown>"
            return value

        if kind == "date":
            has_age = True
        columns.append((col["name"], "string" if kind == "date" else kind,
                        int(col.get("priority", 0)), cell))
    if not has_age:
        columns.append(AGE)
    return columns


def _cell(value: Any) -> Any:
    if value is None:
        return "<none>"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return value


def table(columns: list[Column], objects: list[Obj], resource_version: str,
          include: str = "Metadata") -> Obj:
    """A meta.k8s.io/v1 Table of `objects`."""
    rows = []
    for obj in objects:
        row: Obj = {"cells": [_cell(fn(obj)) for _n, _t, _p, fn in columns]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": [{"name": n, "type": t, "format": "name" if n == "Name" else "",
                                   "description": "", "priority": p}
                                  for n, t, p, _fn in columns],
            "rows": rows}
