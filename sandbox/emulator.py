"""The sandbox's Kubernetes API: kmock's `KubernetesEmulator` made to behave like a real API
server for the clients the project uses (kopf, the kubernetes Python client, kubectl 1.35).

kmock supplies the HTTP server, request parsing, discovery and the object store; this
subclass owns every write and every watch, because those are where kmock is simpler than
Kubernetes in ways kopf and kubectl notice:

- objects get `uid`, `creationTimestamp`, `resourceVersion` (one counter for the whole
  server, bumped on every write), `generation` (bumped only when something other than
  metadata and status changes) and a name from `generateName`; create answers 201;
- PATCH as JSON-patch (a failed `test` op is a 409 Conflict, as kopf expects), merge-patch
  and strategic-merge-patch (applied as a merge patch with the `$` directives dropped); PUT
  replaces; a `metadata.resourceVersion` that is not the current one is a 409 Conflict;
- a resource with a `status` subresource keeps spec and status apart: writes to the object
  ignore its status, writes to `/status` change only the status;
- the `scale` subresource of custom resources (`kubectl scale`), from the CRD's
  `specReplicasPath`/`statusReplicasPath`/`labelSelectorPath`;
- creating a CustomResourceDefinition serves its resource (discovery, kubectl short names);
- DELETE honours finalizers, deletes Pods gracefully (`deletionTimestamp` and
  `deletionGracePeriodSeconds`; the kubelet removes the Pod once its processes stopped, by
  deleting it again with a grace period of 0), and deletes dependents whose
  `ownerReferences` name the deleted object (background garbage collection);
- lists and watches filter by `labelSelector` and `fieldSelector`; lists carry `kind`,
  `apiVersion` and the current `resourceVersion`; a watch from a resourceVersion replays the
  events after it (410 Gone when they are no longer kept), `sendInitialEvents` ends the
  initial events with the bookmark kubectl 1.35 waits for, `timeoutSeconds` ends the
  stream; watch streams are `application/json`;
- OpenAPI v3 documents that name every write and its `fieldValidation` parameter, so
  kubectl leaves validation to the server: custom resources are validated against their
  CRD (`Strict` refuses an unknown field, `Warn` warns), built-in kinds are not.

Simplified: server-side apply (create or merge), protobuf bodies (a few kinds). Not
emulated: admission, RBAC, authentication.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import datetime
import json
import logging
import random
import re
import string
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
import yaml
from kmock._internal import parsing as _kmock_parsing
from kraft_sandbox import printing, protobuf
from kraft_sandbox.schema import StructuralSchema, untyped_rules
from kraft_sandbox.strategic import strategic_merge

Obj = dict[str, Any]

NAMESPACES = kmock.resource("", "v1", "namespaces")
PVC_PROTECTION = "kubernetes.io/pvc-protection"


def _parse_path(path: str) -> Any:
    """kmock's URL parser, except for the Namespace objects themselves: it reads
    `/api/v1/namespaces[/NAME[/status|finalize]]` as the start of a namespaced URL and fails
    (so `kubectl create namespace` and `kubectl get ns` could not work)."""
    parts = path.strip("/").split("/")
    if len(parts) >= 3 and parts[0] == "api" and parts[2] == "namespaces" and (
            len(parts) in (3, 4) or (len(parts) == 5 and parts[4] in ("status", "finalize"))):
        return _kmock_parsing.ParsedPath("", parts[1], "namespaces", None,
                                         parts[3] if len(parts) > 3 else None,
                                         parts[4] if len(parts) == 5 else None)
    return _kmock_parse_path(path)


_kmock_parse_path = getattr(_kmock_parsing.parse_path, "wrapped", _kmock_parsing.parse_path)
_parse_path.wrapped = _kmock_parse_path  # type: ignore[attr-defined]
_kmock_parsing.parse_path = _parse_path


async def _parse_request(cls: Any, raw_request: Any, *, id: int = 0) -> Any:
    """kmock's request parsing, except for protobuf bodies: kmock decodes every body as
    text, and a binary one (helm's release Secret) failed before any handler saw it."""
    if "protobuf" not in (raw_request.headers.get("Content-Type") or ""):
        return await _kmock_parse_request(cls, raw_request, id=id)
    body = await raw_request.read()
    k8s = _kmock_parsing.parse_path(raw_request.path)
    resource = None if k8s is None or k8s.group is None else kmock.resource(
        group=k8s.group, version=k8s.version, plural=k8s.plural)
    method = kmock.method(raw_request.method)
    return cls(id=id, raw_request=raw_request, url=raw_request.url, method=raw_request.method,
               params=dict(raw_request.query), headers=dict(raw_request.headers),
               cookies=dict(raw_request.cookies), data=None, body=body,
               text=body.decode("latin-1"),
               action=_kmock_parsing.guess_k8s(k8s, method, dict(raw_request.query)),
               resource=resource, namespace=k8s.namespace, name=k8s.name,
               subresource=k8s.subresource)


_kmock_parse_request = getattr(kmock.Request._parse, "wrapped",
                               kmock.Request._parse.__func__)
_parse_request.wrapped = _kmock_parse_request  # type: ignore[attr-defined]
kmock.Request._parse = classmethod(_parse_request)  # type: ignore[assignment]

log = logging.getLogger("kraft_sandbox.api")

KEPT_EVENTS = 4096
"""Watch events kept per resource for resuming a watch from a resourceVersion."""

LIVENESS_POLL_S = 2.0
"""How often an idle watch checks that its client is still connected."""

SERVER_VERSION = {"major": "1", "minor": "35", "gitVersion": "v1.35.0+kraft-sandbox",
                  "gitCommit": "0000000000000000000000000000000000000000",
                  "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                  "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"}


UNKEPT_LOG_OPTIONS = (("sinceSeconds", "--since"), ("sinceTime", "--since-time"),
                      ("timestamps", "--timestamps"))
"""`pods/NAME/log` options (and kubectl's flags for them) that need a time for each line."""


class ApiError(Exception):
    """An error answered as a Kubernetes `Status` with its canonical reason."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> Obj:
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                "code": self.code, "reason": self.reason, "message": self.message,
                "details": self.details}


def now_rfc3339(offset_s: float = 0.0) -> str:
    """The current UTC time (plus `offset_s`) as Kubernetes writes timestamps."""
    t = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=offset_s)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------ selectors


_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(text: str) -> list[str]:
    terms, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t.strip() for t in terms if t.strip()]


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """A predicate over a label map for a selector string (`a=b,c!=d,e in (x,y),!f,g`)."""
    if not selector:
        return lambda labels: True
    checks: list[Callable[[dict[str, str]], bool]] = []
    for term in _split_terms(selector):
        m = _SET_TERM.match(term)
        if m:
            key, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                checks.append(lambda lb, k=key, v=vals: lb.get(k) in v)
            else:
                checks.append(lambda lb, k=key, v=vals: lb.get(k) not in v)
        elif "!=" in term:
            key, val = (s.strip() for s in term.split("!=", 1))
            checks.append(lambda lb, k=key, v=val: lb.get(k) != v)
        elif "=" in term:
            key, val = (s.strip() for s in term.replace("==", "=").split("=", 1))
            checks.append(lambda lb, k=key, v=val: lb.get(k) == v)
        elif term.startswith("!"):
            absent = term[1:].strip()
            checks.append(lambda lb, k=absent: k not in lb)
        else:
            checks.append(lambda lb, k=term: k in lb)
    return lambda labels: all(check(labels) for check in checks)


def _dig(obj: Obj, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def field_matcher(selector: str | None) -> Callable[[Obj], bool]:
    """A predicate over an object for a field selector (`metadata.name=x,spec.nodeName!=y`)."""
    if not selector:
        return lambda obj: True
    checks: list[Callable[[Obj], bool]] = []
    for term in _split_terms(selector):
        neg = "!=" in term
        key, val = (s.strip() for s in re.split(r"!=|==|=", term, maxsplit=1))

        def check(obj: Obj, k: str = key, v: str = val, n: bool = neg) -> bool:
            got = _dig(obj, k)
            got_s = "" if got is None else str(got)
            return (got_s != v) if n else (got_s == v)

        checks.append(check)
    return lambda obj: all(c(obj) for c in checks)


# ------------------------------------------------------------------ patches


def _strip_directives(value: Any) -> Any:
    """Drop strategic-merge-patch directives (`$patch`, `$setElementOrder/...`, ...)."""
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes a key; lists are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _without(obj: Obj, *keys: str) -> Obj:
    return {k: v for k, v in obj.items() if k not in keys}


# ------------------------------------------------------------------ the emulator


def qos_class(spec: Obj) -> str:
    """A pod's QoS class as the API server sets it on create: Guaranteed when every container
    limits cpu and memory and requests no other amount, BestEffort when none asks for
    anything, Burstable otherwise."""
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    asked = [(c.get("resources") or {}) for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in asked):
        return "BestEffort"
    for r in asked:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        if any(limits.get(k) is None for k in ("cpu", "memory")):
            return "Burstable"
        if any(requests.get(k, limits[k]) != limits[k] for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


def default_service_ports(spec: Obj) -> None:
    """A Service's ports as the API server stores them on every write: `protocol` TCP and
    `targetPort` the port, when not given."""
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


async def log_response(raw: aiohttp.web.Request, params: dict[str, str], text: str,
                       previous: bool, current_run: Callable[[], str | None]) -> Any:
    """A container log as `pods/NAME/log` answers it (the emulator's, and the sandbox
    kubelets' endpoint behind the real API server): `tailLines`, `limitBytes`, and with
    `follow` what the current run writes next, until it ends (`current_run` answers None, or
    text that does not continue the one sent: a new run, as `kubectl logs -f` ends)."""
    unkept = [flag for param, flag in UNKEPT_LOG_OPTIONS
              if params.get(param) not in (None, "", "false")]
    if unkept:  # the kubelet keeps no time per line: refused, never ignored
        raise ApiError(400, "BadRequest",
                       f"{', '.join(unkept)}: not supported by the sandbox's kubelet, which "
                       "keeps a container's output without a time for each line; use "
                       "--tail, --limit-bytes, --previous or -f")
    shown = text
    if params.get("tailLines", "").isdigit():
        shown = "".join(text.splitlines(keepends=True)[-int(params["tailLines"]):])
    if params.get("limitBytes", "").isdigit():
        shown = shown.encode()[:int(params["limitBytes"])].decode(errors="ignore")
    if params.get("follow") != "true" or previous:
        return aiohttp.web.Response(text=shown, content_type="text/plain")
    response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(raw)
    sent = text
    with contextlib.suppress(ConnectionError, RuntimeError):
        await response.write(shown.encode())
        while raw.transport is not None and not raw.transport.is_closing():
            await asyncio.sleep(0.2)
            now = current_run()
            if now is None or not now.startswith(sent):
                break
            if len(now) > len(sent):
                await response.write(now[len(sent):].encode())
                sent = now
        await response.write_eof()
    return response


@attrs.define(kw_only=True)
class SandboxEmulator(kmock.KubernetesEmulator):
    """The emulated API server (see the module docstring for what it does and does not do)."""

    _rv: int = attrs.field(default=0, init=False)
    _wlock: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)
    _history: dict[Any, collections.deque[tuple[int, str, Obj]]] = attrs.field(
        factory=dict, init=False)
    _floor: dict[Any, int] = attrs.field(factory=dict, init=False)
    _watchers: dict[Any, set[asyncio.Queue[tuple[int, str, Obj]]]] = attrs.field(
        factory=lambda: collections.defaultdict(set), init=False)
    _scale_paths: dict[Any, dict[str, str]] = attrs.field(factory=dict, init=False)
    _printers: dict[Any, list[Obj]] = attrs.field(factory=dict, init=False)
    _orphans: dict[str, bool] = attrs.field(factory=dict, init=False)
    _schemas: dict[Any, StructuralSchema] = attrs.field(factory=dict, init=False)
    _field_validation: str = attrs.field(default="", init=False)
    _warnings: list[str] = attrs.field(factory=list, init=False)
    _cluster_ips: int = attrs.field(default=0, init=False)
    write_hooks: list[Callable[[str, Any, Obj], None]] = attrs.field(factory=list, init=False)
    default_storage_class: str = attrs.field(default="sandbox-local", init=False)
    exec_handler: Callable[[Any, Obj, list[str], dict[str, str]], Awaitable[Any]] | None = \
        attrs.field(default=None, init=False)
    """Answers `pods/NAME/exec` (the kubelet sets it): (request, pod, command, query)."""
    log_reader: Callable[[Obj, str | None, bool], str | None] | None = attrs.field(
        default=None, init=False)
    """Answers `pods/NAME/log` (the kubelet sets it): (pod, container, previous) -> text."""
    """Callables told (event type, resource, object) after every stored change."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        with warnings.catch_warnings():  # kmock reads its bundle with a deprecated call
            warnings.simplefilter("ignore", DeprecationWarning)
            self.resources.load_bundled()
        for plural in ("deployments", "statefulsets", "replicasets"):
            self._scale_paths[kmock.resource("apps", "v1", plural)] = {
                "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".spec.selector"}

    # ---------------------------------------------------------------- plumbing

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _info(self, res: Any) -> kmock.ResourceInfo:
        if res not in self.resources:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource "
                                            f"({res.group}/{res.version}/{res.plural})")
        info: kmock.ResourceInfo = self.resources[res]
        return info

    def _kind(self, res: Any) -> str:
        info = self.resources[res] if res in self.resources else None  # noqa: SIM401
        return info.kind if info is not None and info.kind else str(res.plural).capitalize()

    @staticmethod
    def _api_version(res: Any) -> str:
        return f"{res.group}/{res.version}" if res.group else str(res.version)

    def read_object(self, res: Any, ns: str | None, name: str) -> Obj | None:
        """The stored object (the store's own, not a copy), None when there is none. With
        `create_object`, `commit` and `delete_object`, what the sandbox's kubelet, scheduler and
        controllers use: the rules HTTP clients get, in the API server's process."""
        key = (res, ns, name)
        if key not in self._objects or self._objects[key].deleted:
            return None
        raw: Obj = self._objects[key].raw
        return raw

    def node_view(self, node: str) -> SandboxEmulator:
        """The API as the kubelet of `node` writes to it: the emulator itself (it has no
        authorization; a client of the real API server writes as `system:node:NODE`)."""
        return self

    def fetch(self, res: Any, ns: str | None, name: str) -> Obj | None:
        """The object as the server has it now: `read_object` (a client of the real API
        server reads through its cache, and fetches after a conflict)."""
        return self.read_object(res, ns, name)

    def _must_get(self, res: Any, ns: str | None, name: str) -> Obj:
        obj = self.read_object(res, ns, name)
        if obj is None:
            raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found',
                           {"name": name, "kind": res.plural})
        return obj

    def _items(self, res: Any, ns: str | None) -> list[Obj]:
        out = []
        for (r, o_ns, _name), obj in self._objects.items():
            if r == res and not obj.deleted and (ns is None or o_ns == ns):
                out.append(obj.raw)
        out.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
        return out

    def _publish(self, res: Any, kind: str, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        hist = self._history.setdefault(res, collections.deque(maxlen=KEPT_EVENTS))
        if len(hist) == hist.maxlen:
            self._floor[res] = hist[0][0]
        hist.append((rv, kind, obj))
        for queue in list(self._watchers.get(res, ())):
            queue.put_nowait((rv, kind, obj))
        for hook in self.write_hooks:
            hook(kind, res, obj)

    def _store(self, res: Any, obj: Obj, event: str) -> None:
        meta = obj["metadata"]
        key = (res, meta.get("namespace"), meta["name"])
        if key in self._objects:
            self._objects[key].create(obj)
            self._objects[key].history = [obj]  # keep one version: the sandbox runs for long
        else:
            self._objects[key] = obj
        self._publish(res, event, obj)

    def _remove(self, res: Any, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (res, meta.get("namespace"), meta["name"])
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        del self._objects[key]
        self._publish(res, "DELETED", gone)
        if self._orphans.pop(meta.get("uid"), None) is None:
            self._collect_dependents(meta.get("uid"))
        if res != NAMESPACES:
            self._finish_namespace(meta.get("namespace"))

    def _collect_dependents(self, uid: str | None) -> None:
        """Background garbage collection: delete what the removed object owned."""
        if not uid:
            return
        for (res, ns, name), box in list(self._objects.items()):
            if box.deleted:
                continue
            owners = box.raw.get("metadata", {}).get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                with contextlib.suppress(ApiError):
                    self.delete_object(res, ns, name, {})

    # ---------------------------------------------------------------- HTTP entry

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        with contextlib.suppress(AttributeError):
            if len(self._requests) > 256:  # kmock keeps every request; the sandbox runs long
                del self._requests[:-64]
        res = request.resource
        path = request.url.path
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            return self._openapi_v3(path)
        if path == "/openapi/v2":  # kubectl asks for it in protobuf only
            err = ApiError(404, "NotFound", "the sandbox serves OpenAPI v3 only (/openapi/v3), "
                           "which kubectl explain reads by default")
            return aiohttp.web.json_response(err.status(), status=404)
        if res is None or res.plural is None:
            return await super()._handle(request)
        try:
            return await self._serve(request)
        except ApiError as exc:
            return aiohttp.web.json_response(exc.status(), status=exc.code)
        except Exception as exc:  # answered and logged here: kmock would keep them all
            log.exception("event=api_internal_error method=%s path=%s", request.method,
                          request.url)
            err = ApiError(500, "InternalError", f"an error on the server: {exc!r}")
            return aiohttp.web.json_response(err.status(), status=500)

    async def _serve(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        res = request.resource
        method = str(request.method.value if hasattr(request.method, "value") else
                     request.method).upper()
        self._info(res)
        params = dict(request.params or {})
        as_table = printing.wants_table(request.headers.get("Accept"))
        if request.action == kmock.action.WATCH:
            return await self._watch(request, params, as_table)
        if method == "GET" and request.name is None:
            listed = self._list(res, request.namespace, params)
            if as_table:
                listed = printing.table(self._columns(res), listed["items"],
                                        listed["metadata"]["resourceVersion"],
                                        params.get("includeObject", "Metadata"))
            return aiohttp.web.json_response(listed)
        if request.subresource == "scale":
            async with self._wlock:
                return aiohttp.web.json_response(self._scale(request, method))
        if method == "GET" and request.subresource == "log":
            return await self._log(request, params)
        if request.subresource == "exec" and method in ("GET", "POST"):
            if res.group != "" or res.plural != "pods" or self.exec_handler is None:
                raise ApiError(404, "NotFound", "exec is served for pods only")
            pod = self._must_get(res, request.namespace, request.name)
            raw = request._raw_request
            return await self.exec_handler(raw, pod, raw.query.getall("command", []),
                                           dict(raw.query))
        if method == "GET":
            obj = self._must_get(res, request.namespace, request.name)
            if as_table and request.subresource is None:
                obj = printing.table(self._columns(res), [obj], str(self._rv),
                                     params.get("includeObject", "Metadata"))
            return aiohttp.web.json_response(obj)
        dry = "dryRun" in params
        data = request.data
        ctype = request.headers.get("Content-Type") or ""
        if method in ("POST", "PUT") and "protobuf" in ctype:
            try:
                data = protobuf.decode(request.body)
            except protobuf.ProtobufError as exc:
                raise ApiError(415, "UnsupportedMediaType", str(exc)) from None
        async with self._wlock:
            self._field_validation = params.get("fieldValidation", "")
            self._warnings = []
            try:
                response = self._write(request, method, data, ctype, params, dry)
            finally:
                self._field_validation = ""
            if self._warnings:
                response.headers["Warning"] = ", ".join(
                    '299 - "' + w.replace('"', '\\"') + '"' for w in self._warnings)
            return response

    def _write(self, request: kmock.Request, method: str, data: Any, ctype: str,
               params: dict[str, str], dry: bool) -> aiohttp.web.Response:
        res = request.resource
        if method == "POST" and request.subresource in ("binding", "eviction"):
            return aiohttp.web.json_response(self._pod_subresource(request), status=201)
        if method == "POST":
            obj = self.create_object(res, request.namespace, data, dry=dry)
            return aiohttp.web.json_response(obj, status=201)
        if method == "PATCH" and "apply-patch" in ctype:
            obj, created = self._apply(request, dry=dry)
            return aiohttp.web.json_response(obj, status=201 if created else 200)
        if method in ("PATCH", "PUT"):
            obj = self._update(request, method, data, dry=dry)
            return aiohttp.web.json_response(obj)
        if method == "DELETE":
            opts = dict(request.data) if isinstance(request.data, dict) else {}
            for k in ("gracePeriodSeconds", "propagationPolicy"):
                if k in params:
                    opts[k] = int(params[k]) if k == "gracePeriodSeconds" else params[k]
            if dry:
                return aiohttp.web.json_response(
                    self._must_get(res, request.namespace, request.name))
            return aiohttp.web.json_response(
                self.delete_object(res, request.namespace, request.name, opts))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    # ---------------------------------------------------------------- reads

    def _list(self, res: Any, ns: str | None, params: dict[str, str]) -> Obj:
        labels = label_matcher(params.get("labelSelector"))
        fields = field_matcher(params.get("fieldSelector"))
        items = [o for o in self._items(res, ns)
                 if labels(o["metadata"].get("labels") or {}) and fields(o)]
        return {"apiVersion": self._api_version(res), "kind": self._kind(res) + "List",
                "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _served(self) -> dict[str, list[tuple[Any, kmock.ResourceInfo]]]:
        """The served resources by group-version path (`api/v1`, `apis/apps/v1`)."""
        out: dict[str, list[tuple[Any, kmock.ResourceInfo]]] = {}
        for res in self._get_resources():
            if not res.plural or res.version is None or res not in self.resources:
                continue
            gv = f"apis/{res.group}/{res.version}" if res.group else f"api/{res.version}"
            out.setdefault(gv, []).append((res, self.resources[res]))
        return out

    def _openapi_v3(self, path: str) -> aiohttp.web.Response:
        """OpenAPI v3 deep enough for kubectl: every write takes the `fieldValidation`
        parameter, so kubectl leaves validation to the server (which validates custom
        resources against their CRD and takes built-in kinds as they are) instead of
        downloading schemas the sandbox does not have; and each CRD's schema is a component
        named by its group, version and kind, so `kubectl explain` reads it as on a cluster."""
        served = self._served()
        if path.rstrip("/") == "/openapi/v3":
            return aiohttp.web.json_response({"paths": {
                gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={self._rv}"}
                for gv in sorted(served)}})
        gv = path[len("/openapi/v3/"):].strip("/")
        if gv not in served:
            err = ApiError(404, "NotFound", f"no OpenAPI document for {gv}")
            return aiohttp.web.json_response(err.status(), status=404)
        param = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"},
                  "uniqueItems": True}]
        paths: Obj = {}
        schemas: Obj = {}
        for res, info in served[gv]:
            base = f"/{gv}/namespaces/{{namespace}}/{res.plural}" if info.namespaced \
                else f"/{gv}/{res.plural}"
            gvk = {"group": res.group, "version": res.version, "kind": self._kind(res)}
            op = {"x-kubernetes-group-version-kind": gvk, "parameters": param,
                  "responses": {"200": {"description": "OK"}}}
            paths[base] = {"post": op}
            paths[base + "/{name}"] = {"patch": op, "put": op}
            structural = self._schemas.get(res)
            if structural is not None:  # a CRD's schema, as kube-apiserver publishes it
                name = ".".join([*reversed(res.group.split(".")), res.version, gvk["kind"]])
                schemas[name] = {**structural.openapi,
                                 "x-kubernetes-group-version-kind": [gvk]}
                ok = {"description": "OK", "content": {"application/json": {
                    "schema": {"$ref": f"#/components/schemas/{name}"}}}}
                paths[base + "/{name}"]["get"] = {**op, "responses": {"200": ok}}
        return aiohttp.web.json_response({
            "openapi": "3.0.0", "info": {"title": "Kubernetes (kraft sandbox)",
                                         "version": SERVER_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}})

    def _columns(self, res: Any) -> list[printing.Column]:
        builtin = printing.BUILTIN.get((res.group, res.plural))
        if builtin is not None:
            return builtin
        return printing.crd_columns(self._printers.get(res))

    async def _log(self, request: kmock.Request, params: dict[str, str]) -> Any:
        res = request.resource
        if res.group != "" or res.plural != "pods" or self.log_reader is None:
            raise ApiError(404, "NotFound", "logs are served for pods only")
        pod = self._must_get(res, request.namespace, request.name)
        container, previous = params.get("container"), params.get("previous") == "true"
        text = self.log_reader(pod, container, previous)
        if text is None:
            raise ApiError(400, "BadRequest", f'no log for pod "{request.name}" (a container '
                                              "name may be needed: ?container=NAME)")
        raw = request._raw_request

        def current_run() -> str | None:
            current = self.read_object(res, request.namespace, request.name)
            if current is None or current["metadata"]["uid"] != pod["metadata"]["uid"]:
                return None
            return (self.log_reader(current, container, False) or "") if self.log_reader \
                else None

        return await log_response(raw, params, text, previous, current_run)

    async def _watch(self, request: kmock.Request, params: dict[str, str],
                     as_table: bool = False) -> Any:
        res, ns = request.resource, request.namespace
        labels = label_matcher(params.get("labelSelector"))
        fields = field_matcher(params.get("fieldSelector"))
        name = request.name

        def wanted(obj: Obj) -> bool:
            meta = obj["metadata"]
            return ((ns is None or meta.get("namespace") == ns)
                    and (name is None or meta.get("name") == name)
                    and labels(meta.get("labels") or {}) and fields(obj))

        since = params.get("resourceVersion") or "0"
        initial = params.get("sendInitialEvents") == "true" or since == "0"
        bookmarks = params.get("allowWatchBookmarks") == "true"
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        queue: asyncio.Queue[tuple[int, str, Obj]] = asyncio.Queue()
        # Snapshot and registration happen with no await between them: no event is missed.
        first: list[tuple[str, Obj]] = []
        gone = False
        if initial:
            first = [("ADDED", o) for o in self._items(res, ns) if wanted(o)]
        else:
            after = int(since) if since.isdigit() else 0
            if after < self._floor.get(res, 0):
                gone = True
            else:
                first = [(kind, o) for rv, kind, o in self._history.get(res, ())
                         if rv > after and wanted(o)]
        self._watchers[res].add(queue)
        raw = request._raw_request
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(raw)
            if gone:
                err = ApiError(410, "Expired", f"too old resource version: {since}")
                await response.write(json.dumps({"type": "ERROR", "object": err.status()})
                                     .encode() + b"\n")
                return response
            columns = self._columns(res) if as_table else None

            def line(kind: str, obj: Obj) -> bytes:
                if columns is not None:
                    obj = printing.table(columns, [obj], obj["metadata"]["resourceVersion"],
                                         params.get("includeObject", "Metadata"))
                return json.dumps({"type": kind, "object": obj}).encode() + b"\n"

            for kind, obj in first:
                await response.write(line(kind, obj))
            if params.get("sendInitialEvents") == "true" and bookmarks:
                mark = {"apiVersion": self._api_version(res), "kind": self._kind(res),
                        "metadata": {"resourceVersion": str(self._rv), "annotations": {
                            "k8s.io/initial-events-end": "true"}}}
                await response.write(json.dumps({"type": "BOOKMARK", "object": mark})
                                     .encode() + b"\n")
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while True:
                wait = LIVENESS_POLL_S
                if deadline is not None:
                    wait = min(wait, deadline - loop.time())
                    if wait <= 0:
                        break
                try:  # (not asyncio.wait_for: on 3.11 it can lose a cancellation)
                    async with asyncio.timeout(wait):
                        _rv, kind, obj = await queue.get()
                except TimeoutError:
                    if raw.transport is None or raw.transport.is_closing():
                        break
                    continue
                if wanted(obj):
                    await response.write(line(kind, obj))
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            pass
        finally:
            self._watchers[res].discard(queue)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
        return response

    # ---------------------------------------------------------------- writes

    def create_object(self, res: Any, ns: str | None, body: Any, *, dry: bool = False) -> Obj:
        """Create `body` as a POST does (names, defaults, admission, the watch event)."""
        info = self._info(res)
        if not isinstance(body, dict):
            raise ApiError(415, "UnsupportedMediaType", "the body must be a JSON object")
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", self._api_version(res))
        obj.setdefault("kind", self._kind(res))
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "metadata.name or metadata.generateName is "
                                               "required")
            meta["name"] = meta["generateName"] + "".join(
                random.choices(string.ascii_lowercase + string.digits, k=5))
        if info.namespaced:
            if ns and meta.get("namespace") and meta["namespace"] != ns:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does "
                                                  "not match the namespace sent on the request")
            meta["namespace"] = ns or meta.get("namespace") or "default"
            space = self.read_object(NAMESPACES, None, meta["namespace"])
            if space is None:
                raise ApiError(404, "NotFound", f'namespaces "{meta["namespace"]}" not found',
                               {"name": meta["namespace"], "kind": "namespaces"})
            if space["metadata"].get("deletionTimestamp"):
                raise ApiError(403, "Forbidden", f'unable to create new content in namespace '
                                                 f'{meta["namespace"]} because it is being '
                                                 "terminated")
        else:
            meta.pop("namespace", None)
        if self.read_object(res, meta.get("namespace"), meta["name"]) is not None:
            raise ApiError(409, "AlreadyExists",
                           f'{res.plural} "{meta["name"]}" already exists',
                           {"name": meta["name"], "kind": res.plural})
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        if "status" in info.subresources:
            obj.pop("status", None)
        self._defaults(res, obj)
        obj = self._admit(res, obj, None)
        if dry:
            return obj
        obj["metadata"]["resourceVersion"] = self._next_rv()
        if self._is_crd(res):
            self._register_crd(obj)
        self._store(res, obj, "ADDED")
        return obj

    @staticmethod
    def _is_crd(res: Any) -> bool:
        return bool(res.group == "apiextensions.k8s.io"
                    and res.plural == "customresourcedefinitions")

    def _admit(self, res: Any, obj: Obj, old: Obj | None) -> Obj:
        """A custom resource through its CRD's schema: defaults, pruning, validation."""
        schema = self._schemas.get(res)
        if schema is None:
            return obj
        unknown: list[str] = []
        admitted, problems = schema.admit(obj, old, unknown)
        if unknown and self._field_validation == "Strict":
            raise ApiError(400, "BadRequest", "strict decoding error: " + ", ".join(
                f'unknown field "{field}"' for field in unknown))
        if unknown and self._field_validation == "Warn":
            self._warnings += [f'unknown field "{field}"' for field in unknown]
        if problems:
            meta = obj.get("metadata") or {}
            kind = f"{self._kind(res)}.{res.group}"
            text = "; ".join(f"{field}: Invalid value: {msg}" for field, msg in problems)
            raise ApiError(422, "Invalid", f'{kind} "{meta.get("name")}" is invalid: {text}',
                           {"name": meta.get("name"), "group": res.group,
                            "kind": self._kind(res),
                            "causes": [{"reason": "FieldValueInvalid", "message": msg,
                                        "field": field} for field, msg in problems]})
        return admitted

    def _defaults(self, res: Any, obj: Obj) -> None:
        """What the API server fills in on create for the kinds the sandbox runs."""
        if res.group != "":
            return
        if res.plural == "pods":
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("schedulerName", "default-scheduler")
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
        elif res.plural == "persistentvolumeclaims":
            obj["status"] = {"phase": "Pending"}
            obj.setdefault("spec", {})
            if "storageClassName" not in obj["spec"]:  # the default class, as admission does
                obj["spec"]["storageClassName"] = self.default_storage_class
            finalizers = obj["metadata"].setdefault("finalizers", [])
            if PVC_PROTECTION not in finalizers:  # released once no pod uses the claim
                finalizers.append(PVC_PROTECTION)
        elif res.plural == "namespaces":
            obj["status"] = {"phase": "Active"}
        elif res.plural == "secrets" and not obj.get("type"):
            obj["type"] = "Opaque"
        elif res.plural == "services":
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if not spec.get("clusterIP"):
                self._cluster_ips += 1
                n = self._cluster_ips
                spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            for key, value in (("sessionAffinity", "None"), ("internalTrafficPolicy", "Cluster"),
                               ("ipFamilies", ["IPv4"]), ("ipFamilyPolicy", "SingleStack")):
                spec.setdefault(key, value)
            default_service_ports(spec)

    def _register_crd(self, crd: Obj) -> None:
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        group, plural = spec.get("group"), names.get("plural")
        if not group or not plural:
            raise ApiError(422, "Invalid", "spec.group and spec.names.plural are required")
        untyped = [p for v in spec.get("versions") or []
                   for p in untyped_rules((v.get("schema") or {}).get("openAPIV3Schema") or {})]
        if untyped:  # refused as a real API server refuses it
            raise ApiError(422, "Invalid", 'CustomResourceDefinition.apiextensions.k8s.io '
                           f'"{crd.get("metadata", {}).get("name")}" is invalid: '
                           + "; ".join(f"spec.validation.{p}: Internal error: unable to "
                                       "convert structural schema to CEL declarations"
                                       for p in untyped))
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            subs = version.get("subresources") or {}
            key = kmock.resource(group, version["name"], plural)
            self.resources[key] = kmock.ResourceInfo(
                kind=names.get("kind"), singular=names.get("singular") or plural,
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                shortnames=set(names.get("shortNames") or ()),
                categories=set(names.get("categories") or ()),
                verbs={"create", "delete", "deletecollection", "get", "list", "patch",
                       "update", "watch"},
                subresources={s for s in ("status", "scale") if s in subs})
            if "scale" in subs:
                self._scale_paths[key] = subs["scale"]
            self._printers[key] = version.get("additionalPrinterColumns") or []
            openapi = (version.get("schema") or {}).get("openAPIV3Schema")
            if openapi:
                self._schemas[key] = StructuralSchema(openapi)
            else:
                self._schemas.pop(key, None)
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": "",
                 "lastTransitionTime": now_rfc3339()}
                for t, r in (("NamesAccepted", "NoConflicts"), ("Established", "InitialNamesAccepted"))
            ],
        }

    def _apply_patch(self, request: kmock.Request, current: Obj) -> Obj:
        ctype = (request.headers.get("Content-Type") or request.headers.get("content-type")
                 or "application/merge-patch+json").split(";")[0].strip()
        body = request.data
        if ctype == "application/json-patch+json" or isinstance(body, list):
            try:
                result: Obj = jsonpatch.apply_patch(copy.deepcopy(current), body)
            except jsonpatch.JsonPatchTestFailed as exc:
                raise ApiError(409, "Conflict", f"the object has been modified: {exc}") from None
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise ApiError(422, "Invalid", f"the JSON patch cannot be applied: {exc}") \
                    from None
            return result
        if ctype == "application/apply-patch+yaml":
            raise ApiError(415, "UnsupportedMediaType",
                           "server-side apply is not supported by the sandbox: use client-side "
                           "kubectl apply")
        if not isinstance(body, dict):
            raise ApiError(415, "UnsupportedMediaType", "the patch must be a JSON object")
        if ctype == "application/strategic-merge-patch+json":
            if self._schemas.get(request.resource) is not None:
                # custom resources take no strategic merge on a cluster; kubectl sends them
                # merge patches, but a hand-made request gets the plain merge
                merged: Obj = merge_patch(current, _strip_directives(body))
                return merged
            strategic: Obj = strategic_merge(current, body)
            return strategic
        merged = merge_patch(current, body)
        return merged

    def _apply(self, request: kmock.Request, *, dry: bool = False) -> tuple[Obj, bool]:
        """Server-side apply, simplified: create the object, or merge the applied fields
        into it (no field managers, no conflicts, no removal of fields an applier dropped)."""
        res, ns, name = request.resource, request.namespace, request.name
        body = request.data
        if not isinstance(body, dict):
            try:
                body = yaml.safe_load(request.text)
            except yaml.YAMLError as exc:
                raise ApiError(400, "BadRequest", f"the apply body is not YAML: {exc}") \
                    from None
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the apply body must be an object")
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, name):
            raise ApiError(400, "BadRequest", f"the name in the body ({meta['name']}) does not "
                                              f"match the name in the URL ({name})")
        meta["name"] = name
        current = self.read_object(res, ns, name)
        if current is None:
            if request.subresource:
                raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found')
            return self.create_object(res, ns, body, dry=dry), True
        meta.pop("resourceVersion", None)
        wanted = merge_patch(current, body)
        return self.commit(res, current, wanted, request.subresource, dry=dry), False

    def _update(self, request: kmock.Request, method: str, data: Any, *,
                dry: bool = False) -> Obj:
        res, ns, name = request.resource, request.namespace, request.name
        current = self._must_get(res, ns, name)
        if method == "PUT":
            if not isinstance(data, dict):
                raise ApiError(415, "UnsupportedMediaType", "the body must be a JSON object")
            wanted = copy.deepcopy(data)
            if not (wanted.get("metadata") or {}).get("resourceVersion"):
                wanted.setdefault("metadata", {})["resourceVersion"] = \
                    current["metadata"]["resourceVersion"]
        else:
            wanted = self._apply_patch(request, current)
        return self.commit(res, current, wanted, request.subresource, dry=dry)

    def commit(self, res: Any, current: Obj, wanted: Obj, subresource: str | None,
                *, dry: bool = False) -> Obj:
        """Store `wanted` as the next version of `current`, with the API server's rules."""
        info = self._info(res)
        cur_meta = current["metadata"]
        got_rv = (wanted.get("metadata") or {}).get("resourceVersion")
        if got_rv is not None and str(got_rv) != cur_meta["resourceVersion"]:
            raise ApiError(409, "Conflict",
                           f'Operation cannot be fulfilled on {res.plural} "{cur_meta["name"]}": '
                           "the object has been modified; please apply your changes to the "
                           "latest version and try again")
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in wanted:
                new["status"] = wanted["status"]
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(wanted)
            new_meta = new.setdefault("metadata", {})
            for key in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp",
                        "deletionGracePeriodSeconds", "generation"):
                if key in cur_meta:
                    new_meta[key] = cur_meta[key]
                else:
                    new_meta.pop(key, None)
            if "status" in info.subresources:
                if "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
        new["metadata"]["resourceVersion"] = cur_meta["resourceVersion"]
        if res.group == "" and res.plural == "services" and subresource is None:
            default_service_ports(new.setdefault("spec", {}))  # on every write, as decoding does
        new = self._admit(res, new, current)
        if self._is_crd(res) and subresource != "status":
            self._register_crd(new)
        if new == current:
            return current  # a no-op write changes nothing and tells no watcher
        if _without(new, "metadata", "status") != _without(current, "metadata", "status"):
            new["metadata"]["generation"] = int(cur_meta.get("generation") or 1) + 1
        if res.plural == "pods" and res.group == "" and subresource == "status":
            was, now = ((o.get("status") or {}).get("qosClass") for o in (current, new))
            if was and now != was:
                raise ApiError(422, "Invalid", f'Pod "{cur_meta["name"]}" is invalid: '
                               f'status.qosClass: Invalid value: "{now}": field is immutable',
                               {"causes": [{"field": "status.qosClass",
                                            "reason": "FieldValueInvalid"}]})
        if res.plural == "pods" and res.group == "" and subresource != "status":
            old_node = current.get("spec", {}).get("nodeName")
            if old_node and new.get("spec", {}).get("nodeName") != old_node:
                raise ApiError(422, "Invalid", "spec.nodeName: a scheduled Pod cannot move")
        if dry:
            return new
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._store(res, new, "MODIFIED")
        if self._removable(res, new):
            self._remove(res, new)
        return new

    @staticmethod
    def _removable(res: Any, obj: Obj) -> bool:
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers"):
            return False
        if res.group == "" and res.plural == "pods" and obj.get("spec", {}).get("nodeName"):
            return meta.get("deletionGracePeriodSeconds") == 0
        return True

    def delete_object(self, res: Any, ns: str | None, name: str, opts: Obj) -> Obj:
        """Delete as a DELETE with the options `opts` does (a scheduled Pod gracefully)."""
        current = self._must_get(res, ns, name)
        meta = current["metadata"]
        if res == NAMESPACES:
            return self._delete_namespace(current)
        if opts.get("propagationPolicy") == "Orphan" or opts.get("orphanDependents"):
            self._orphans[meta["uid"]] = True
        is_pod = res.group == "" and res.plural == "pods"
        grace = 0
        if is_pod:
            spec = current.get("spec", {})
            grace = opts.get("gracePeriodSeconds")
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", 30))
            phase = current.get("status", {}).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
            grace = max(0, int(grace))
            if meta.get("deletionGracePeriodSeconds") is not None:
                grace = min(grace, int(meta["deletionGracePeriodSeconds"]))
        if grace == 0 and not meta.get("finalizers"):
            self._remove(res, current)
            return current
        new = copy.deepcopy(current)
        new_meta = new["metadata"]
        if not new_meta.get("deletionTimestamp") or (
                is_pod and grace < int(new_meta.get("deletionGracePeriodSeconds") or 0)):
            new_meta["deletionTimestamp"] = now_rfc3339(grace)
        new_meta["deletionGracePeriodSeconds"] = grace
        if new == current:
            return current
        new_meta["resourceVersion"] = self._next_rv()
        self._store(res, new, "MODIFIED")
        if self._removable(res, new):
            self._remove(res, new)
        return new

    def _delete_namespace(self, space: Obj) -> Obj:
        """The namespace controller: Terminating, its content deleted (pods gracefully),
        then the namespace itself once nothing is left in it."""
        name = space["metadata"]["name"]
        if not space["metadata"].get("deletionTimestamp"):
            new = copy.deepcopy(space)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["status"] = {"phase": "Terminating"}
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._store(NAMESPACES, new, "MODIFIED")
            space = new
        for (res, ns, obj_name), box in list(self._objects.items()):
            if ns == name and not box.deleted and not box.raw["metadata"].get(
                    "deletionTimestamp"):
                with contextlib.suppress(ApiError):
                    self.delete_object(res, ns, obj_name, {})
        self._finish_namespace(name)
        return self.read_object(NAMESPACES, None, name) or space

    def _finish_namespace(self, name: str | None) -> None:
        if name is None:
            return
        space = self.read_object(NAMESPACES, None, name)
        if space is None or not space["metadata"].get("deletionTimestamp"):
            return
        if any(ns == name and not box.deleted for (_r, ns, _n), box in self._objects.items()):
            return
        self._remove(NAMESPACES, space)

    def _scale(self, request: kmock.Request, method: str) -> Obj:
        res, ns, name = request.resource, request.namespace, request.name
        paths = self._scale_paths.get(res)
        if paths is None:
            raise ApiError(404, "NotFound", f"{res.plural} has no scale subresource")
        current = self._must_get(res, ns, name)
        spec_path = paths.get("specReplicasPath", ".spec.replicas").lstrip(".")
        status_path = paths.get("statusReplicasPath", ".status.replicas").lstrip(".")

        def as_scale(obj: Obj) -> Obj:
            status: Obj = {"replicas": int(_dig(obj, status_path) or 0)}
            if paths.get("labelSelectorPath"):
                sel = _dig(obj, paths["labelSelectorPath"].lstrip("."))
                if isinstance(sel, dict):  # a LabelSelector: its matchLabels as a string
                    sel = ",".join(f"{k}={v}" for k, v in (sel.get("matchLabels") or {})
                                   .items())
                if sel:
                    status["selector"] = sel
            meta = obj["metadata"]
            return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                                 "uid": meta["uid"], "resourceVersion": meta["resourceVersion"],
                                 "creationTimestamp": meta["creationTimestamp"]},
                    "spec": {"replicas": int(_dig(obj, spec_path) or 0)}, "status": status}

        scale = as_scale(current)
        if method == "GET":
            return scale
        if method == "PUT":
            wanted = request.data if isinstance(request.data, dict) else {}
        else:
            wanted = self._apply_patch(request, scale)
        replicas = (wanted.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int):
            raise ApiError(422, "Invalid", "spec.replicas of the Scale must be an integer")
        got_rv = (wanted.get("metadata") or {}).get("resourceVersion")
        new = copy.deepcopy(current)
        cur: Any = new
        parts = spec_path.split(".")
        for part in parts[:-1]:
            cur = cur.setdefault(part, {})
        cur[parts[-1]] = replicas
        new["metadata"]["resourceVersion"] = got_rv or current["metadata"]["resourceVersion"]
        return as_scale(self.commit(res, current, new, None))

    def _pod_subresource(self, request: kmock.Request) -> Obj:
        res, ns, name = request.resource, request.namespace, request.name
        if res.group != "" or res.plural != "pods":
            raise ApiError(404, "NotFound", f"no {request.subresource} for {res.plural}")
        current = self._must_get(res, ns, name)
        body = request.data if isinstance(request.data, dict) else {}
        if request.subresource == "binding":
            node = (body.get("target") or {}).get("name")
            if not node:
                raise ApiError(422, "Invalid", "a Binding needs target.name")
            if current.get("spec", {}).get("nodeName"):
                raise ApiError(409, "Conflict", f'pod "{name}" is already assigned to a node')
            new = copy.deepcopy(current)
            new["spec"]["nodeName"] = node
            self.commit(res, current, new, None)
        else:  # eviction: a graceful delete (PodDisruptionBudgets are not checked)
            opts = body.get("deleteOptions") or {}
            self.delete_object(res, ns, name, opts)
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success",
                "code": 201}

    # ---------------------------------------------------------------- discovery fixes

    async def _serve_version(self, request: kmock.Request) -> Any:
        result = await super()._serve_version(request)
        result["groupVersion"] = result["groupVersion"].lstrip("/")  # core is "v1", not "/v1"
        for entry in result["resources"]:
            if "/" in entry["name"]:  # subresources carry no short names or categories
                entry["shortNames"], entry["categories"] = [], []
        return result

    async def _serve_server_version(self, request: kmock.Request) -> Any:
        return dict(SERVER_VERSION)

    # ---------------------------------------------------------------- in-process helpers

    def objects_of(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Every stored object of `resource` ("v1/pods", "kraft.dev/v1alpha1/kraftquorums")."""
        return self._items(kmock.resource(resource), namespace)


def declare(emulator: SandboxEmulator, keys: Iterable[str]) -> None:
    """Serve extra resources given as "group/version/plural=Kind" (namespaced)."""
    for item in keys:
        path, _, kind = item.partition("=")
        emulator.resources[path] = kmock.ResourceInfo(
            kind=kind or None, namespaced=True,
            verbs={"create", "delete", "get", "list", "patch", "update", "watch"},
            subresources={"status"})
