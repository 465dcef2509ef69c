"""The real API server behind the same methods the sandbox's nodes call on the emulator
(`read_object`, `objects_of`, `create_object`, `commit`, `delete_object`, `write_hooks`), so
that the kubelet, the node controller and the volume code run unchanged on either.

Reads come from a cache that a watch per resource keeps (an informer: list, then watch from
the list's resourceVersion with bookmarks, listed again after 410 Gone); each watch event
calls the `write_hooks` on the event loop, as the emulator calls them on its writes. Writes
go to the API server at once, over TLS with the node agent's client certificate, and the
answer updates the cache, so the next read sees what was written. An error answer is raised
as the emulator's `ApiError` (its code, reason and message), so callers handle 404, 409 and
422 the same on both backends.

Writes block the event loop for one loopback round trip (a few milliseconds); the nodes make
a handful per pod change, which a sandbox can afford.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import kmock
import requests
from kraft_sandbox.emulator import ApiError

log = logging.getLogger("kraft_sandbox.realapi")

Obj = dict[str, Any]
Hook = Callable[[str, Any, Obj], None]


def resource_path(res: Any, ns: str | None, name: str | None = None,
                  subresource: str | None = None) -> str:
    """The URL path of a resource (all namespaces when `ns` is None and it is namespaced:
    the caller knows which kinds are cluster-scoped and passes None for them)."""
    base = f"/apis/{res.group}/{res.version}" if res.group else f"/api/{res.version}"
    path = base + (f"/namespaces/{ns}" if ns else "") + f"/{res.plural}"
    if name is not None:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def _rv(obj: Obj) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Cache:
    """What the watches keep, shared by a client and its views: the objects by resource and
    (namespace, name), under a lock (the watches run in threads), which first lists are in,
    and the hooks told of each change."""

    def __init__(self, cached: list[Any]) -> None:
        self.cached = cached
        self.store: dict[Any, dict[tuple[str | None, str], Obj]] = {r: {} for r in cached}
        self.lock = threading.Lock()
        self.synced = {r: threading.Event() for r in cached}
        self.stopping = threading.Event()
        self.write_hooks: list[Hook] = []


class RealApi:
    """A client of the real API server with the emulator's in-process interface."""

    def __init__(self, url: str, ca: Path, cert: Path, key: Path,
                 cached: Iterable[Any], *, shared: RealApi | None = None,
                 node_identities: dict[str, tuple[Path, Path]] | None = None) -> None:
        self.url = url.rstrip("/")
        self.session = requests.Session()
        # nothing from the environment: a REQUESTS_CA_BUNDLE would replace our CA, a proxy
        # setting would send loopback calls elsewhere
        self.session.trust_env = False
        self.session.verify = str(ca)
        self.session.cert = (str(cert), str(key))
        self.session.headers["Accept"] = "application/json"
        self.log_reader: Any = None  # served by the kubelets' own endpoint instead
        self.exec_handler: Any = None
        self._views: dict[str, RealApi] = {}
        # a view writing as another user reads the same caches
        self.cache = shared.cache if shared is not None else Cache(list(cached))
        self.cached, self.write_hooks = self.cache.cached, self.cache.write_hooks
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        if shared is None:
            for node, (node_cert, node_key) in (node_identities or {}).items():
                self._views[node] = RealApi(url, ca, node_cert, node_key, [], shared=self)

    def node_view(self, node: str) -> RealApi:
        """The API as the kubelet of `node` (user `system:node:NODE`, group `system:nodes`):
        what it writes about its Node, Lease and pods goes through the Node authorizer and
        NodeRestriction as a real kubelet's does. Itself when no such identity was given."""
        return self._views.get(node, self)

    # ---------------------------------------------------------------- requests

    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, Any] | None = None, timeout: float = 30.0) -> Obj:
        """One call; the answer's JSON, or `ApiError` with the server's Status."""
        try:
            resp = self.session.request(method, self.url + path, params=params,
                                        json=body, timeout=timeout)
        except requests.RequestException as exc:
            raise ApiError(503, "ServiceUnavailable",
                           f"{method} {path}: the API server did not answer: {exc}") from None
        if resp.status_code >= 400:
            try:
                status = resp.json()
            except ValueError:
                status = {}
            raise ApiError(resp.status_code, str(status.get("reason") or "Unknown"),
                           str(status.get("message") or resp.text[:300]),
                           status.get("details") or {})
        if not resp.content:
            return {}
        out: Obj = resp.json()
        return out

    def _remember(self, res: Any, obj: Obj) -> None:
        if res not in self.cache.store or obj.get("kind") == "Status":
            return
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name", ""))
        with self.cache.lock:
            old = self.cache.store[res].get(key)
            if old is None or _rv(obj) >= _rv(old):
                self.cache.store[res][key] = obj

    # ---------------------------------------------------------------- the emulator's interface

    def read_object(self, res: Any, ns: str | None, name: str) -> Obj | None:
        """The cached object (a GET for a kind that is not cached); None when absent."""
        if res in self.cache.store:
            with self.cache.lock:
                return self.cache.store[res].get((ns, name))
        try:
            return self.request("GET", resource_path(res, ns, name))
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def fetch(self, res: Any, ns: str | None, name: str) -> Obj | None:
        """The object as the server has it now (a GET, which also refreshes the cache)."""
        try:
            obj = self.request("GET", resource_path(res, ns, name))
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        self._remember(res, obj)
        return obj

    def objects_of(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Every cached object of `resource` ("v1/pods"), optionally of one namespace."""
        res = kmock.resource(resource)
        if res not in self.cache.store:
            items: list[Obj] = self.request("GET", resource_path(res, namespace)).get(
                "items") or []
            return items
        with self.cache.lock:
            out = [o for (ns, _n), o in self.cache.store[res].items()
                   if namespace is None or ns == namespace]
        out.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
        return out

    def create_object(self, res: Any, ns: str | None, body: Any, *, dry: bool = False) -> Obj:
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", f"{res.group}/{res.version}" if res.group else res.version)
        meta = obj.setdefault("metadata", {})
        if ns and not meta.get("namespace"):
            meta["namespace"] = ns
        params = {"dryRun": "All"} if dry else None
        made = self.request("POST", resource_path(res, ns), obj, params)
        if not dry:
            self._remember(res, made)
        return made

    def commit(self, res: Any, current: Obj, wanted: Obj, subresource: str | None,
               *, dry: bool = False) -> Obj:
        """PUT `wanted` (carrying `current`'s resourceVersion unless it names its own)."""
        meta = current["metadata"]
        body = copy.deepcopy(wanted)
        body.setdefault("metadata", {}).setdefault("resourceVersion", meta["resourceVersion"])
        if wanted == current:
            return current
        params = {"dryRun": "All"} if dry else None
        done = self.request("PUT", resource_path(res, meta.get("namespace"), meta["name"],
                                                 subresource), body, params)
        if not dry:
            self._remember(res, done)
        return done

    def delete_object(self, res: Any, ns: str | None, name: str, opts: Obj) -> Obj:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **opts}
        return self.request("DELETE", resource_path(res, ns, name), body)

    # ---------------------------------------------------------------- informers

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start one list-and-watch thread per cached resource."""
        self._loop = loop
        for res in self.cached:
            t = threading.Thread(target=self._informer, args=(res,), daemon=True,
                                 name=f"watch-{res.plural}")
            t.start()
            self._threads.append(t)

    async def wait_synced(self, timeout_s: float = 30.0) -> None:
        """Until every cache holds its first list."""
        deadline = time.monotonic() + timeout_s
        while not all(e.is_set() for e in self.cache.synced.values()):
            if time.monotonic() > deadline:
                missing = [r.plural for r, e in self.cache.synced.items() if not e.is_set()]
                raise ApiError(504, "Timeout", f"no first list of {', '.join(missing)} "
                                               f"within {timeout_s:g} s")
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        self.cache.stopping.set()
        self.session.close()
        for view in self._views.values():
            view.session.close()

    def _fire(self, kind: str, res: Any, obj: Obj) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        for hook in list(self.write_hooks):
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(hook, kind, res, obj)

    def _relist(self, res: Any, session: requests.Session) -> str:
        resp = session.get(self.url + resource_path(res, None), timeout=30)
        resp.raise_for_status()
        body = resp.json()
        fresh = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o
                 for o in body.get("items") or []}
        with self.cache.lock:
            old = self.cache.store[res]
            self.cache.store[res] = fresh
        for key, obj in fresh.items():
            if key not in old or _rv(old[key]) != _rv(obj):
                self._fire("ADDED" if key not in old else "MODIFIED", res, obj)
        for key, obj in old.items():
            if key not in fresh:
                self._fire("DELETED", res, obj)
        self.cache.synced[res].set()
        return str(body["metadata"]["resourceVersion"])

    def _informer(self, res: Any) -> None:
        session = requests.Session()
        session.trust_env = False
        session.verify, session.cert = self.session.verify, self.session.cert
        rv = ""
        while not self.cache.stopping.is_set():
            try:
                if not rv:
                    rv = self._relist(res, session)
                rv = self._watch(res, session, rv)
            except (requests.RequestException, ValueError, KeyError) as exc:
                if self.cache.stopping.is_set():
                    return
                log.info("event=watch_failed resource=%s error=%s", res.plural, exc)
                rv = ""
                self.cache.stopping.wait(0.5)

    def _watch(self, res: Any, session: requests.Session, rv: str) -> str:
        """Follow the watch from `rv` until it ends; the resourceVersion to go on from ("" to
        list again after 410 Gone)."""
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "240"}
        with session.get(self.url + resource_path(res, None), params=params, stream=True,
                         timeout=(10, 300)) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if self.cache.stopping.is_set():
                    return rv
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return ""
                    raise ValueError(f"watch error: {obj.get('message')}")
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind == "BOOKMARK":
                    continue
                meta = obj["metadata"]
                key = (meta.get("namespace"), meta["name"])
                with self.cache.lock:
                    if kind == "DELETED":
                        self.cache.store[res].pop(key, None)
                    else:
                        old = self.cache.store[res].get(key)
                        if old is None or _rv(obj) >= _rv(old):
                            self.cache.store[res][key] = obj
                self._fire(str(kind), res, obj)
        return rv


NODE_AGENT_RULES: list[Obj] = [
    # what the nodes read, through watches: their pods, what the pods' volumes and
    # environment name, the cluster DNS's Services, the Nodes
    {"apiGroups": [""], "resources": ["pods", "nodes", "configmaps", "secrets", "services",
                                      "endpoints", "namespaces", "persistentvolumeclaims"],
     "verbs": ["get", "list", "watch"]},
    # the local-volume provisioner of the sandbox's StorageClass
    {"apiGroups": [""], "resources": ["persistentvolumes"],
     "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]
"""What the sandbox's node agent (one process for every node: its watches and the volume
provisioner) may do, a ClusterRole bound to its group. What each kubelet writes (its Node,
its Lease, its pods' status and deletion, their tokens, their Events) it writes as that
node, `system:node:NAME`, which the Node authorizer and NodeRestriction admission limit."""


def bootstrap(admin: RealApi) -> None:
    """As the cluster's administrator: the node agent's ClusterRole and binding, and the
    sandbox's default StorageClass (WaitForFirstConsumer, our provisioner)."""
    from kraft_sandbox.controlplane import NODE_AGENT_GROUP, NODE_AGENT_USER
    from kraft_sandbox.volumes import PROVISIONER, STORAGE_CLASS

    name = NODE_AGENT_USER
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    objects = [
        (f"{rbac}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1",
                                  "kind": "ClusterRole", "metadata": {"name": name},
                                  "rules": NODE_AGENT_RULES}),
        (f"{rbac}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": NODE_AGENT_GROUP}]}),
        ("/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "annotations": {
                "storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer"}),
    ]
    for path, body in objects:
        try:
            admin.request("POST", path, body)
        except ApiError as exc:
            if exc.code != 409:
                raise


__all__ = ["NODE_AGENT_RULES", "RealApi", "bootstrap", "resource_path"]
