"""Observe: the Kubernetes objects of one KRaftQuorum and its live quorum -> the planner's input.

Two halves. `build()` is pure: raw objects (the resource, its pods, claims, the Nodes, the
PersistentVolumes behind the claims) plus what the live nodes said (kraft.admin's
DescribeQuorum, each pod's own `/v1/status`) become an `Observed`, and the annotation
corrections that make the operator's records match the volumes. `gather()` does the reading.

Directory ids. A claim and its pod carry the directory id the operator expects the volume to
hold (`kraft.dev/directory-id`). A volume formatted `--initial-controllers` holds exactly that
one; a volume formatted `--no-initial-controllers` (a joining node, a replaced disk) gets a new
random one from `kraft format`, so the record is a placeholder until the node's process reports
the real one on its admin port. The id a running pod reports is the truth: it is what the
planner sees, and a correction writes it to the pod and the claim (so it is known while the
process is down). A confirmed id that changes means the volume was emptied and re-formatted:
a new incarnation of the node, whose stale voter the quorum still lists.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kraft_operator import models
from kraft_operator.observed import (
    NodeState,
    Observed,
    Operation,
    PodPhase,
    PodState,
    PvcPhase,
    PvcState,
    QuorumInfo,
)
from kraft_operator.planner.listeners import parse_listeners
from kraft_operator.render import (
    DIRECTORY_CONFIRMED_ANNOTATION,
    HTTP_PORT,
    LISTENERS_ANNOTATION,
    QuorumRef,
)

Obj = dict[str, Any]

FRESH_IDS = 2 * models.MAX_REPLICAS + 2
"""How many new random ids each reconcile offers the planner (a cluster id, one directory
id per initial voter, spares)."""


def random_kafka_uuid() -> str:
    """A new random Kafka Uuid in its text form (22 characters of URL-safe base64), never
    one that starts with '-' (Kafka avoids those: they read as command-line options)."""
    while True:
        raw = bytearray(os.urandom(16))
        text = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
        if not text.startswith("-") and any(raw):
            return text


def parse_time(text: str | None) -> float:
    """An RFC 3339 timestamp as seconds since the epoch (0.0 when absent or unreadable)."""
    if not text:
        return 0.0
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0


@dataclass(frozen=True, slots=True)
class Reported:
    """What a node's own process said about itself on its admin port (`/v1/status`)."""

    node_id: int
    directory_id: str
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class Correction:
    """An annotation to write so the operator's record matches what the volume holds."""

    kind: str  # "pod" or "pvc"
    name: str
    node_id: int
    old: str | None
    new: str
    replaced: bool  # a confirmed id changed: the volume was emptied and re-formatted


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The raw objects one reconcile read."""

    body: Obj
    pods: Sequence[Obj] = ()
    pvcs: Sequence[Obj] = ()
    nodes: Sequence[Obj] | None = ()
    """None when Nodes may not be read (no permission): every Node a pod or claim names is
    then taken as Ready, so nothing is ever replaced for a Node failure it cannot see."""
    volumes: Mapping[str, Obj] = field(default_factory=dict)  # PersistentVolumes by name


@dataclass(frozen=True, slots=True)
class Observation:
    """The planner's input, the corrections to write, and why no quorum answered (if not)."""

    observed: Observed
    corrections: tuple[Correction, ...] = ()
    quorum_error: str | None = None
    claims: tuple[Obj, ...] = ()
    """The quorum's PersistentVolumeClaims as read (for their owner references)."""
    forbidden: tuple[str, ...] = ()
    """The API server's messages for the reads it refused (403) that the pass went on
    without (the Nodes, a claim's PersistentVolume): each one is reported, never silent."""


def _node_id(obj: Obj) -> int | None:
    value = (obj.get("metadata", {}).get("labels") or {}).get(models.NODE_ID_LABEL)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _annotations(obj: Obj) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("annotations") or {})


def _condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _says_volume_gone(pod: Obj) -> bool:
    """Whether the pod's status says a volume it mounts is gone (the kubelet reports a
    node-local volume that went with its Node in the pod's message while it waits to mount
    it: 'the local volume of claim "data-kq-2" is gone', 'path ... does not exist')."""
    status = pod.get("status") or {}
    texts = [str(status.get("message") or "")]
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        texts.append(str(((c.get("state") or {}).get("waiting") or {}).get("message") or ""))
    return any("volume" in t and ("is gone" in t or "does not exist" in t) for t in texts)


FORMATTED_FOR_ANOTHER_EXIT = 3
"""`kraft format`'s exit code for a directory formatted for another cluster or node."""


def _format_refused(pod: Obj) -> str | None:
    """The format init container's message when it refused a foreign volume (exit code 3,
    now or on its last run while it waits in CrashLoopBackOff), else None."""
    status = pod.get("status") or {}
    for c in status.get("initContainerStatuses") or []:
        if c.get("name") != "format":
            continue
        for state in (c.get("state") or {}, c.get("lastState") or {}):
            ended = state.get("terminated") or {}
            if ended.get("exitCode") == FORMATTED_FOR_ANOTHER_EXIT:
                return str(ended.get("message") or "").strip()
    return None


def pod_state(pod: Obj, reported: Reported | None = None) -> PodState | None:
    """One node's Pod as the planner sees it (None for a pod without the node-id label)."""
    node_id = _node_id(pod)
    if node_id is None:
        return None
    meta, status = pod["metadata"], pod.get("status") or {}
    notes = _annotations(pod)
    kraft = next((c for c in status.get("containerStatuses") or [] if c.get("name") == "kraft"),
                 {})
    waiting = (kraft.get("state") or {}).get("waiting") or {}
    try:
        phase = PodPhase(status.get("phase") or "Pending")
    except ValueError:
        phase = PodPhase.UNKNOWN
    ready_cond = _condition(pod, "Ready") or {}
    ready = ready_cond.get("status") == "True"
    created_at = parse_time(meta.get("creationTimestamp"))
    gone_since = None
    if not ready and _says_volume_gone(pod):
        gone_since = parse_time(ready_cond.get("lastTransitionTime")) or created_at
    directory = reported.directory_id if reported is not None else \
        notes.get(models.DIRECTORY_ID_ANNOTATION)
    return PodState(
        name=meta["name"], node_id=node_id, directory_id=directory, phase=phase, ready=ready,
        node_name=(pod.get("spec") or {}).get("nodeName"),
        deleting=bool(meta.get("deletionTimestamp")),
        restart_count=int(kraft.get("restartCount") or 0),
        waiting_reason=waiting.get("reason"),
        spec_hash=notes.get(models.POD_SPEC_HASH_ANNOTATION, ""),
        auto_join=notes.get(models.AUTO_JOIN_ANNOTATION, "true") == "true",
        created_at=created_at,
        volume_gone_since=gone_since,
        format_refused=_format_refused(pod),
        manual_roll=notes.get(models.MANUAL_ROLL_ANNOTATION, "").lower() == "true",
        listeners=parse_listeners(notes.get(LISTENERS_ANNOTATION)),
    )


def _local_node(pvc: Obj, volumes: Mapping[str, Obj]) -> str | None:
    """The Node a claim's volume lives on when it is node-local (a local or hostPath volume,
    or one whose node affinity pins it to one host); None for network-attached storage."""
    name = (pvc.get("spec") or {}).get("volumeName")
    pv = volumes.get(name or "")
    if pv is None:
        return None
    spec = pv.get("spec") or {}
    if not (spec.get("local") or spec.get("hostPath")):
        return None
    terms = ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == "kubernetes.io/hostname" and len(expr.get("values") or []) == 1:
                return str(expr["values"][0])
    selected = _annotations(pvc).get("volume.kubernetes.io/selected-node")
    return selected or None


def pvc_state(pvc: Obj, volumes: Mapping[str, Obj],
              reported: Reported | None = None) -> PvcState | None:
    """One node's claim as the planner sees it (None without the node-id label or an id)."""
    node_id = _node_id(pvc)
    notes = _annotations(pvc)
    directory = reported.directory_id if reported is not None else \
        notes.get(models.DIRECTORY_ID_ANNOTATION)
    if node_id is None or not directory:
        return None
    try:
        phase = PvcPhase((pvc.get("status") or {}).get("phase") or "Pending")
    except ValueError:
        phase = PvcPhase.PENDING
    meta = pvc["metadata"]
    return PvcState(name=meta["name"], node_id=node_id, directory_id=directory, phase=phase,
                    deleting=bool(meta.get("deletionTimestamp")),
                    node_name=_local_node(pvc, volumes))


def node_state(node: Obj) -> NodeState:
    cond = _condition(node, "Ready") or {}
    return NodeState(name=node["metadata"]["name"], ready=cond.get("status") == "True",
                     since=parse_time(cond.get("lastTransitionTime")))


def _operation(status: Obj) -> Operation | None:
    op = status.get("currentOperation")
    if not op:
        return None
    return Operation(type=str(op.get("type", "")), target=str(op.get("target", "")),
                     started_at=parse_time(op.get("startedAt")), attempt=int(op.get("attempt") or 1))


def _pairs(items: Iterable[Obj] | None) -> tuple[tuple[int, str], ...]:
    return tuple((int(v["id"]), str(v["directoryId"])) for v in items or ()
                 if "id" in v and v.get("directoryId"))


def _nodes(snap: Snapshot, pods: Sequence[PodState],
           pvcs: Sequence[PvcState]) -> tuple[NodeState, ...]:
    if snap.nodes is not None:
        return tuple(node_state(n) for n in snap.nodes)
    names = {p.node_name for p in pods} | {c.node_name for c in pvcs}
    return tuple(NodeState(name, True) for name in sorted(n for n in names if n))


def build(ref: QuorumRef, snap: Snapshot, quorum: QuorumInfo | None,
          reported: Mapping[str, Reported], *, now: float,
          fresh_ids: Sequence[str] = (), quorum_error: str | None = None) -> Observation:
    """The planner's input for this snapshot (pure). `reported` maps a pod's name to what its
    own process said; only a report for this pod's node id (and cluster) counts."""
    body = snap.body
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    cluster_id = status.get("clusterId")
    pods: list[PodState] = []
    corrections: list[Correction] = []
    truth: dict[int, Reported] = {}  # node id -> what its live, current pod reports
    for raw in snap.pods:
        node_id = _node_id(raw)
        said = reported.get(raw["metadata"]["name"])
        if said is not None and (said.node_id != node_id or
                                 (cluster_id and said.cluster_id not in (None, cluster_id))):
            said = None  # not this node's volume (or another cluster's): ignore it
        state = pod_state(raw, said)
        if state is None:
            continue
        pods.append(state)
        if said is None:
            continue
        if not state.deleting:
            truth[state.node_id] = said
        notes = _annotations(raw)
        old = notes.get(models.DIRECTORY_ID_ANNOTATION)
        confirmed = notes.get(DIRECTORY_CONFIRMED_ANNOTATION) == "true"
        if old != said.directory_id or not confirmed:
            corrections.append(Correction("pod", state.name, state.node_id, old,
                                          said.directory_id, replaced=confirmed))
    pvcs: list[PvcState] = []
    for raw in snap.pvcs:
        node_id = _node_id(raw)
        said = truth.get(node_id) if node_id is not None else None
        state = pvc_state(raw, snap.volumes, said)
        if state is None:
            continue
        pvcs.append(state)
        if said is None or state.deleting:
            continue
        notes = _annotations(raw)
        old = notes.get(models.DIRECTORY_ID_ANNOTATION)
        confirmed = notes.get(DIRECTORY_CONFIRMED_ANNOTATION) == "true"
        if old != said.directory_id or not confirmed:
            corrections.append(Correction("pvc", state.name, state.node_id, old,
                                          said.directory_id, replaced=confirmed))
    observed = Observed(
        generation=int(meta.get("generation") or 1),
        pods=tuple(pods), pvcs=tuple(pvcs),
        nodes=_nodes(snap, pods, pvcs),
        quorum=quorum,
        operation=_operation(status),
        cluster_id=cluster_id,
        initial_voters=_pairs(status.get("initialVoters")),
        last_known_voters=_pairs(status.get("voters")),
        annotations=dict(meta.get("annotations") or {}),
        now=now,
        fresh_ids=tuple(fresh_ids),
        listeners=ref.listeners,
    )
    return Observation(observed, tuple(corrections), quorum_error)


# --- reading --------------------------------------------------------------------------------


async def _report(session: Any, pod: Obj, timeout_s: float) -> Reported | None:
    """A running pod's own /v1/status (node id, directory id, cluster id), or None."""
    import aiohttp

    ip = (pod.get("status") or {}).get("podIP")
    if not ip or pod["metadata"].get("deletionTimestamp"):
        return None
    url = f"http://{ip}:{HTTP_PORT}/v1/status"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None
    if not isinstance(data, dict) or "node_id" not in data or not data.get("directory_id"):
        return None
    return Reported(int(data["node_id"]), str(data["directory_id"]), data.get("cluster_id"))


async def read_reports(pods: Sequence[Obj], timeout_s: float = 2.0) -> dict[str, Reported]:
    """What every running pod's process says about itself, by pod name."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        said = await asyncio.gather(*(_report(session, p, timeout_s) for p in pods))
    return {p["metadata"]["name"]: r for p, r in zip(pods, said, strict=True) if r is not None}


async def describe(ref: QuorumRef, node_ids: Iterable[int], cluster_id: str | None,
                   timeout_s: float = 3.0, tls: Any = None,
                   pods: Sequence[PodState] = ()) -> tuple[QuorumInfo | None, str | None]:
    """The live quorum through kraft.admin (DescribeQuorum from the leader), asked of every
    node that has a pod, on the controller listener every one of `pods` binds
    (`QuorumRef.dial`); (None, why) when no leader answers. `tls`: the operator's client
    TLS (kraft.admin's `tls`), used when that listener is TLS."""
    from kraft.admin import AdminError, QuorumClient

    ids = sorted(set(node_ids))
    if not ids:
        return None, "no pods"
    dial = ref.dial(pods)
    tls = tls if dial.ssl else None
    bootstrap = [ref.controller_address(i, dial.port) for i in ids]
    try:
        async with QuorumClient(bootstrap, timeout_s=timeout_s, cluster_id=cluster_id,
                                client_id="kraft-operator", tls=tls) as admin:
            info = await admin.describe_quorum()
    except AdminError as exc:
        return None, str(exc)  # "NAME: message": the Kafka error name is already there
    except (OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if info.leader_id < 0:
        return None, "no leader"
    return QuorumInfo.from_admin(info), None


async def gather(kube: Any, ref: QuorumRef, body: Obj, *, now: float | None = None,
                 describe_timeout_s: float = 3.0, tls: Any = None) -> Observation:
    """Read everything the planner needs for this quorum (see the module docstring)."""
    import time

    selector = ref.selector
    pods, pvcs = await asyncio.gather(
        kube.list("v1", "pods", ref.namespace, label_selector=selector),
        kube.list("v1", "persistentvolumeclaims", ref.namespace, label_selector=selector))
    nodes: list[Obj] | None
    forbidden: list[str] = []
    try:
        nodes = await kube.list("v1", "nodes", None)
    except kube.ApiError as exc:
        if exc.status != 403:
            raise
        nodes = None  # without permission to read Nodes no Node failure is ever assumed
        forbidden.append(exc.message)
    volumes: dict[str, Obj] = {}
    for claim in pvcs:
        name = (claim.get("spec") or {}).get("volumeName")
        if name:
            try:
                volumes[name] = await kube.get("v1", "persistentvolumes", None, name)
            except kube.NotFound:
                pass
            except kube.ApiError as exc:
                if exc.status != 403:
                    raise
                if exc.message not in forbidden:
                    forbidden.append(exc.message)
    status = body.get("status") or {}
    live = [p for p in pods if _node_id(p) is not None]
    states = [state for state in map(pod_state, live) if state is not None]
    (quorum, why), reports = await asyncio.gather(
        describe(ref, (n for n in map(_node_id, live) if n is not None), status.get("clusterId"),
                 describe_timeout_s, tls, states),
        read_reports(live))
    snap = Snapshot(body, pods, pvcs, nodes, volumes)
    seen = build(ref, snap, quorum, reports, now=time.time() if now is None else now,
                 fresh_ids=[random_kafka_uuid() for _ in range(FRESH_IDS)], quorum_error=why)
    return dataclasses.replace(seen, claims=tuple(pvcs), forbidden=tuple(forbidden))
