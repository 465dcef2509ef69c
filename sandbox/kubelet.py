"""The sandbox's nodes: a node controller, a scheduler, a volume binder, cluster DNS and a
kubelet that runs every Pod as local processes.

It runs in the API server's process and reads and writes the objects through the
emulator's own write path (the same rules as HTTP clients get: resourceVersion, status
subresource, graceful deletion), and it is told of every change by the emulator's write
hooks, as a kubelet is by its watch.

What a Pod gets (see docs/sandbox.md for the whole list):

- a Node (`sandbox-node-N`), chosen by the scheduler among the Ready nodes that match
  `nodeSelector`, required pod anti-affinity on `kubernetes.io/hostname`, and the node its
  PersistentVolumeClaims are bound to (node-local storage: a claim binds, with a
  PersistentVolume, to the node of the first pod that uses it);
- its own loopback address (`127.P.x.y`), written to `status.podIP`;
- its volumes as directories: a claim's volume lives under its node's directory (and is lost
  with the node), `emptyDir` under the pod's, `configMap`/`secret` volumes are files written
  before each container start;
- init containers run in order to completion, then the containers run; each container's
  command runs with the `bin/` shims first on `PATH` (`kraft ...` runs the installed kraft
  through `kraft_sandbox.launch`); a `volumeMounts` path in the command, args, env
  values and config-map files is rewritten to the directory that backs it;
- env: `value` (with `$(VAR)` expansion), `fieldRef` (metadata.name, .namespace, .uid,
  .labels['k'], .annotations['k'], spec.nodeName, spec.serviceAccountName, status.podIP,
  status.hostIP), `configMapKeyRef`, `secretKeyRef`, `envFrom`;
- restartPolicy with exponential back-off (`CrashLoopBackOff`) and restartCount;
- startup, readiness and liveness probes (httpGet, tcpSocket, exec) written to the
  container statuses and the Pod's conditions;
- graceful deletion: SIGTERM, the grace period, SIGKILL, then the Pod object is removed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import ctypes
import json
import logging
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import kmock
from kraft_sandbox import deployments, dns
from kraft_sandbox.emulator import (
    PVC_PROTECTION,
    ApiError,
    SandboxEmulator,
    now_rfc3339,
)

log = logging.getLogger("kraft_sandbox.kubelet")

Obj = dict[str, Any]

PODS = kmock.resource("", "v1", "pods")
NODES = kmock.resource("", "v1", "nodes")
SERVICES = kmock.resource("", "v1", "services")
PVCS = kmock.resource("", "v1", "persistentvolumeclaims")
PVS = kmock.resource("", "v1", "persistentvolumes")
CONFIGMAPS = kmock.resource("", "v1", "configmaps")
SECRETS = kmock.resource("", "v1", "secrets")
EVENTS = kmock.resource("", "v1", "events")
STORAGECLASSES = kmock.resource("storage.k8s.io", "v1", "storageclasses")
STORAGE_CLASS = "sandbox-local"

SHIMS = ("kraft", "kraft-operator", "kopf", "kraft-sandbox")
INIT_SHIMS = ("dumb-init", "tini")
HOSTNAME_KEY = "kubernetes.io/hostname"


@dataclass
class KubeletSettings:
    """Knobs of the sandbox's nodes (defaults suit a demo; tests may shorten them)."""

    state_dir: Path
    nodes: int = 3
    network: str = "127.42"
    """The first two octets of every pod address (127.N.x.y); nodes use 127.N.0.x."""
    backoff_base_s: float = 1.0
    """The first restart back-off of a crashed container (Kubernetes uses 10 s), doubled per
    crash in a row up to `backoff_max_s`, reset after `backoff_reset_s` of running."""
    backoff_max_s: float = 30.0
    backoff_reset_s: float = 60.0
    heartbeat_s: float = 5.0
    python: str = sys.executable

    @property
    def hosts_file(self) -> Path:
        return self.state_dir / "dns" / "hosts"

    @property
    def bin_dir(self) -> Path:
        return self.state_dir / "bin"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"


TERMINATION_LOG_LINES, TERMINATION_LOG_BYTES = 80, 2048
"""What a kubelet keeps of a failed container's output as its termination message under
`terminationMessagePolicy: FallbackToLogsOnError`: the last 80 lines or 2048 bytes, the
smaller."""


def _last_output(log_path: Path, start: int) -> str:
    """The end of what one run of a container wrote to its log (from byte `start`), cut as a
    kubelet cuts a termination message taken from the logs."""
    with open(log_path, "rb") as f:
        f.seek(max(start, os.path.getsize(log_path) - TERMINATION_LOG_BYTES))
        tail = f.read()
    lines = tail.decode("utf-8", "replace").splitlines()[-TERMINATION_LOG_LINES:]
    return "\n".join(lines).strip()


async def wait_event(event: asyncio.Event, timeout_s: float) -> None:
    """Wait up to `timeout_s` for `event`. (`asyncio.wait_for` on
    Python 3.11 can swallow a cancellation that arrives as the event is set, and a loop built
    on it then never ends: the kubelet's sync loop outlived `stop` that way.)"""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()


def _set_pdeathsig() -> None:
    """Run in the child before exec: die with the sandbox, whatever kills it."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# ------------------------------------------------------------------ containers


@dataclass
class ContainerState:
    """What the kubelet knows of one container (rendered into containerStatuses)."""

    name: str
    image: str
    init: bool = False
    restart_count: int = 0
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    process: asyncio.subprocess.Process | None = None
    container_id: str = ""

    def render(self) -> Obj:
        out: Obj = {"name": self.name, "image": self.image, "imageID": self.image,
                    "ready": self.ready, "restartCount": self.restart_count,
                    "started": self.started, "state": self.state,
                    "lastState": self.last_state}
        if self.container_id:
            out["containerID"] = self.container_id
        return out


class PodWorker:
    """Runs one Pod on one node until it ends, is deleted or its node goes down."""

    def __init__(self, kubelet: Kubelet, pod: Obj, ip: str) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta.get("namespace", "default"), meta["name"], meta["uid"]
        self.node = pod["spec"]["nodeName"]
        self.ip = ip
        self.dir = kubelet.settings.state_dir / "pods" / f"{self.ns}_{self.name}_{self.uid[:8]}"
        spec = pod["spec"]
        self.init = [ContainerState(c["name"], c.get("image", ""), init=True)
                     for c in spec.get("initContainers") or []]
        self.main = [ContainerState(c["name"], c.get("image", ""))
                     for c in spec.get("containers") or []]
        old = pod.get("status") or {}
        for states, key in ((self.init, "initContainerStatuses"), (self.main, "containerStatuses")):
            counts = {s["name"]: s.get("restartCount", 0) for s in old.get(key) or []}
            for st in states:
                st.restart_count = counts.get(st.name, 0)
        self.initialized = False
        self.phase = "Pending"
        self.start_time = old.get("startTime") or now_rfc3339()
        self.terminating = asyncio.Event()
        self.grace_s = float(spec.get("terminationGracePeriodSeconds", 30))
        self.conditions: dict[str, Obj] = {}
        self.message: str | None = None
        self.task: asyncio.Task[None] | None = None
        self.volume_paths: dict[str, Path] = {}

    # ---------------------------------------------------------------- status

    def _condition(self, kind: str, ok: bool, reason: str | None = None) -> Obj:
        status = "True" if ok else "False"
        prev = self.conditions.get(kind)
        if prev is not None and prev["status"] == status and prev.get("reason") == reason:
            return prev
        cond: Obj = {"type": kind, "status": status, "lastProbeTime": None,
                     "lastTransitionTime": now_rfc3339()}
        if reason:
            cond["reason"] = reason
        self.conditions[kind] = cond
        return cond

    def publish(self) -> None:
        if self.kubelet.node_down(self.node):
            return
        ready_all = bool(self.main) and all(c.ready for c in self.main)
        not_ready = None if ready_all else "ContainersNotReady"
        status: Obj = {
            "phase": self.phase,
            "conditions": [
                self._condition("PodReadyToStartContainers", True),
                self._condition("Initialized", self.initialized,
                                None if self.initialized else "ContainersNotInitialized"),
                self._condition("Ready", ready_all, not_ready),
                self._condition("ContainersReady", ready_all, not_ready),
                self._condition("PodScheduled", True),
            ],
            "hostIP": self.kubelet.node_ip(self.node),
            "hostIPs": [{"ip": self.kubelet.node_ip(self.node)}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.start_time,
            "qosClass": "BestEffort",
            "containerStatuses": [c.render() for c in self.main],
        }
        if self.init:
            status["initContainerStatuses"] = [c.render() for c in self.init]
        if self.message:
            status["message"] = self.message
        self.kubelet.write_status(self.ns, self.name, self.uid, status)

    # ---------------------------------------------------------------- the run

    async def run(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.publish()
            if not await self._wait_volumes():
                return
            policy = self.pod["spec"].get("restartPolicy", "Always")
            for spec, st in zip(self.pod["spec"].get("initContainers") or [], self.init,
                                strict=True):
                while True:
                    code = await self._run_once(spec, st)
                    if self.terminating.is_set():
                        return
                    if code == 0:
                        break
                    if policy == "Never":
                        self.phase = "Failed"
                        self.publish()
                        return
                    await self._backoff(st)
                    if self.terminating.is_set():
                        return
            self.initialized = True
            self.phase = "Running"
            self.publish()
            runners = [asyncio.ensure_future(self._keep_running(spec, st, policy))
                       for spec, st in zip(self.pod["spec"].get("containers") or [], self.main,
                                           strict=True)]
            await asyncio.gather(*runners)
            if not self.terminating.is_set():
                codes = [c.state.get("terminated", {}).get("exitCode", 1) for c in self.main]
                self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
                self.publish()
        except Exception:  # (its processes were killed as the error left `_run_once`)
            log.exception("event=pod_worker_failed pod=%s/%s", self.ns, self.name)

    async def _wait_volumes(self) -> bool:
        """Make every volume; wait (ContainerCreating) while a claim or map is missing."""
        while not self.terminating.is_set():
            problem = self.kubelet.prepare_volumes(self)
            if problem is None:
                self.message = None
                return True
            if self.message != problem:
                self.message = problem
                self.publish()
            await wait_event(self.terminating, 1.0)
        return False

    async def _backoff(self, st: ContainerState, ran_s: float = 0.0) -> None:
        s = self.kubelet.settings
        if ran_s >= s.backoff_reset_s:
            st_crashes = 0
        else:
            st_crashes = getattr(st, "_crashes", 0) + 1
        st._crashes = st_crashes  # type: ignore[attr-defined]
        delay = min(s.backoff_max_s, s.backoff_base_s * (2 ** max(0, st_crashes - 1)))
        self.kubelet.record_event(self.pod, "BackOff", f"Back-off {delay:g}s restarting "
                                  f"failed container {st.name}", "Warning")
        st.state = {"waiting": {"reason": "CrashLoopBackOff",
                                "message": f"back-off {delay:g}s restarting failed container="
                                           f"{st.name} pod={self.name}"}}
        self.publish()
        await wait_event(self.terminating, delay)

    async def _keep_running(self, spec: Obj, st: ContainerState, policy: str) -> None:
        while not self.terminating.is_set():
            started = time.monotonic()
            code = await self._run_once(spec, st, probes=True)
            if self.terminating.is_set():
                return
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                return
            st.restart_count += 1
            await self._backoff(st, time.monotonic() - started)

    async def _run_once(self, spec: Obj, st: ContainerState, probes: bool = False) -> int:
        """Start the container's process, wait for it to end; its exit code."""
        started_at = now_rfc3339()
        problem = self.kubelet.prepare_volumes(self)  # config maps as they are now
        if problem is not None:
            st.state = {"terminated": {"exitCode": 128, "reason": "StartError",
                                       "message": problem, "startedAt": started_at,
                                       "finishedAt": now_rfc3339()}}
            self.publish()
            return 128
        argv, env, cwd = self.kubelet.container_command(self, spec)
        log_path = self.dir / f"{st.name}.log"
        with open(log_path, "ab") as out:
            out.write(f"--- {started_at} start {json.dumps(argv)}\n".encode())
            out.flush()
            output_from = out.tell()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                    stderr=asyncio.subprocess.STDOUT, start_new_session=True,
                    preexec_fn=_set_pdeathsig)
            except OSError as exc:
                st.state = {"terminated": {"exitCode": 128, "reason": "StartError",
                                           "message": str(exc), "startedAt": started_at,
                                           "finishedAt": now_rfc3339()}}
                self.publish()
                return 128
        st.process = proc
        prober = None
        try:
            st.container_id = f"sandbox://{proc.pid}"
            self.kubelet.record_event(self.pod, "Started", f"Started container {st.name}")
            st.state = {"running": {"startedAt": started_at}}
            st.ready = False
            st.started = not probes or "startupProbe" not in spec
            if probes and not spec.get("readinessProbe") and st.started:
                st.ready = True
            self.publish()
            prober = asyncio.ensure_future(self._probe_loop(spec, st)) if probes else None
            if self.terminating.is_set():  # started while the pod was being stopped
                await self.stop_process(proc, min(self.grace_s, 5.0))
            code = await proc.wait()
        except BaseException:  # cancelled, or failed: no process outlives its worker
            _kill_group(proc.pid, signal.SIGKILL)
            raise
        finally:
            if prober is not None:
                prober.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await prober
            st.process = None
        reason = "Completed" if code == 0 else "Error"
        if code < 0:
            code = 128 - code  # killed by a signal: 128 + signal number, as a runtime reports
        st.last_state = {"terminated": {"exitCode": code, "reason": reason,
                                        "startedAt": started_at, "finishedAt": now_rfc3339(),
                                        "containerID": st.container_id}}
        if code != 0 and spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = _last_output(log_path, output_from)
            if message:
                st.last_state["terminated"]["message"] = message
        st.state = copy.deepcopy(st.last_state)
        st.ready = False
        st.started = False
        self.publish()
        return int(code)

    # ---------------------------------------------------------------- probes

    async def _probe_loop(self, spec: Obj, st: ContainerState) -> None:
        startup, readiness, liveness = (spec.get(k) for k in
                                        ("startupProbe", "readinessProbe", "livenessProbe"))
        tasks = []
        if startup:
            tasks.append(asyncio.ensure_future(self._probe(spec, st, startup, "startup")))
        if readiness:
            tasks.append(asyncio.ensure_future(self._probe(spec, st, readiness, "readiness")))
        if liveness:
            tasks.append(asyncio.ensure_future(self._probe(spec, st, liveness, "liveness")))
        try:
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()

    async def _probe(self, spec: Obj, st: ContainerState, probe: Obj, kind: str) -> None:
        period = float(probe.get("periodSeconds", 10))
        fail_at = int(probe.get("failureThreshold", 3))
        ok_at = int(probe.get("successThreshold", 1))
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        fails = oks = 0
        while st.process is not None:
            if kind != "startup" and not st.started:
                await asyncio.sleep(0.1)
                continue
            ok = await self.kubelet.run_probe(self, spec, probe)
            fails, oks = (0, oks + 1) if ok else (fails + 1, 0)
            if kind == "startup":
                if oks >= 1:
                    st.started = True
                    if not spec.get("readinessProbe"):
                        st.ready = True
                    self.publish()
                    return
                if fails >= fail_at:
                    await self._restart_unhealthy(st, "startup")
                    return
            elif kind == "readiness":
                ready = st.ready
                if oks >= ok_at:
                    ready = True
                elif fails >= fail_at:
                    ready = False
                if ready != st.ready:
                    st.ready = ready
                    self.publish()
            elif fails >= fail_at:
                await self._restart_unhealthy(st, "liveness")
                return
            await asyncio.sleep(period)

    async def _restart_unhealthy(self, st: ContainerState, kind: str) -> None:
        log.info("event=probe_failed probe=%s pod=%s/%s container=%s action=restart", kind,
                 self.ns, self.name, st.name)
        self.kubelet.record_event(self.pod, "Unhealthy", f"{kind} probe failed; restarting "
                                  f"container {st.name}", "Warning")
        proc = st.process
        if proc is not None:
            await self.stop_process(proc, self.grace_s)

    # ---------------------------------------------------------------- stopping

    async def stop_process(self, proc: asyncio.subprocess.Process, grace: float) -> None:
        _kill_group(proc.pid, signal.SIGCONT)
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), max(grace, 0.0))
        except TimeoutError:
            _kill_group(proc.pid, signal.SIGKILL)
            await proc.wait()

    def processes(self) -> list[tuple[ContainerState, asyncio.subprocess.Process]]:
        return [(c, c.process) for c in self.init + self.main if c.process is not None]

    def kill_all(self, sig: int) -> None:
        for _c, proc in self.processes():
            _kill_group(proc.pid, sig)

    async def terminate(self, grace: float) -> None:
        """Graceful stop of every container; the worker's run() ends after it."""
        self.terminating.set()
        for st, _proc in self.processes():
            self.kubelet.record_event(self.pod, "Killing", f"Stopping container {st.name}")
        procs = [p for _c, p in self.processes()]
        await asyncio.gather(*(self.stop_process(p, grace) for p in procs))
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self.task, 5.0)


# ------------------------------------------------------------------ the kubelet


class Kubelet:
    """Node controller, scheduler, volume binder, DNS writer and kubelet of every node."""

    def __init__(self, emulator: SandboxEmulator, settings: KubeletSettings) -> None:
        self.api = emulator
        self.settings = settings
        self.workers: dict[str, PodWorker] = {}  # by pod uid
        self.down: set[str] = set()
        self.ips: dict[str, str] = {}  # pod uid -> address
        self._next_ip = 0
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._terminating: set[str] = set()
        self._session: aiohttp.ClientSession | None = None
        self._bg: set[asyncio.Future[Any]] = set()
        self.node_names = [f"sandbox-node-{i}" for i in range(settings.nodes)]

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        s = self.settings
        for sub in ("pods", "nodes", "dns", "bin"):
            (s.state_dir / sub).mkdir(parents=True, exist_ok=True)
        self._write_shims()
        dns.write_hosts(s.hosts_file, [])
        self._session = aiohttp.ClientSession()
        for node in self.node_names:
            self._register_node(node)
        if self.api._get(STORAGECLASSES, None, STORAGE_CLASS) is None:
            self.api._create(STORAGECLASSES, None, {
                "metadata": {"name": STORAGE_CLASS, "annotations": {
                    "storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "kraft.dev/sandbox-local", "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer"})
        self.api.write_hooks.append(self._on_write)
        self.api.log_reader = self.read_log
        self.api.exec_handler = self.exec_in_pod
        self._tasks = [asyncio.ensure_future(self._sync_loop()),
                       asyncio.ensure_future(self._heartbeat_loop())]
        self._dirty.set()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        workers = list(self.workers.values())
        await asyncio.gather(*(w.terminate(min(w.grace_s, 5.0)) for w in workers),
                             return_exceptions=True)
        for w in workers:
            if w.task is not None:
                w.task.cancel()
        if self._session is not None:
            await self._session.close()
        with contextlib.suppress(ValueError):
            self.api.write_hooks.remove(self._on_write)

    def _write_shims(self) -> None:
        for name in SHIMS:
            shim = self.settings.bin_dir / name
            shim.write_text(f'#!/bin/sh\nexec "{self.settings.python}" -m '
                            f'kraft_sandbox.launch {name} "$@"\n')
            shim.chmod(0o755)
        for name in INIT_SHIMS:  # an image's init wrapper: run what follows its options
            shim = self.settings.bin_dir / name
            shim.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in --) shift; break;; '
                            '-*) shift;; *) break;; esac; done\nexec "$@"\n')
            shim.chmod(0o755)

    def _on_write(self, kind: str, res: Any, obj: Obj) -> None:
        if res in (PODS, NODES, SERVICES, PVCS, PVS, deployments.DEPLOYMENTS):
            self._dirty.set()
        if res == PVCS and kind == "DELETED":
            self._release_claim(obj)

    # ---------------------------------------------------------------- API helpers

    def _pods(self) -> list[Obj]:
        return self.api.objects_of("v1/pods")

    def write_status(self, ns: str, name: str, uid: str, status: Obj) -> None:
        current = self.api._get(PODS, ns, name)
        if current is None or current["metadata"]["uid"] != uid:
            return
        new = copy.deepcopy(current)
        new["status"] = {**(current.get("status") or {}), **status}
        with contextlib.suppress(ApiError):
            self.api._commit(PODS, current, new, "status")

    def record_event(self, obj: Obj, reason: str, message: str, kind: str = "Normal") -> None:
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
            self.api._create(EVENTS, meta.get("namespace", "default"), event)

    # ---------------------------------------------------------------- nodes

    def node_ip(self, node: str) -> str:
        index = self.node_names.index(node) if node in self.node_names else 250
        return f"{self.settings.network}.0.{index + 1}"

    def node_down(self, node: str) -> bool:
        return node in self.down

    def _register_node(self, node: str) -> None:
        index = self.node_names.index(node)
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {
            HOSTNAME_KEY: node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": f"sandbox-{'abc'[index % 3]}"}},
            "spec": {}}
        if self.api._get(NODES, None, node) is None:
            self.api._create(NODES, None, body)
        self._node_status(node, ready=True)

    def _node_status(self, node: str, ready: bool) -> None:
        current = self.api._get(NODES, None, node)
        if current is None:
            return
        now = now_rfc3339()
        old = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
        prev = old.get("Ready", {})
        status_text = "True" if ready else "Unknown"
        cond = {"type": "Ready", "status": status_text,
                "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                "message": "kubelet is posting ready status" if ready else
                           "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now if ready else prev.get("lastHeartbeatTime", now),
                "lastTransitionTime": prev.get("lastTransitionTime", now)
                if prev.get("status") == status_text else now}
        new = copy.deepcopy(current)
        new["status"] = {
            "conditions": [cond],
            "addresses": [{"type": "InternalIP", "address": self.node_ip(node)},
                          {"type": "Hostname", "address": node}],
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.35.0-sandbox", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "sandbox://1"},
        }
        self.api._commit(NODES, current, new, "status")
        taints = [] if ready else [{"key": "node.kubernetes.io/unreachable",
                                    "effect": "NoSchedule", "timeAdded": now}]
        current = self.api._get(NODES, None, node)
        if current is not None and (current.get("spec") or {}).get("taints", []) != taints:
            spec_new = copy.deepcopy(current)
            spec_new.setdefault("spec", {})["taints"] = taints
            if not taints:
                spec_new["spec"].pop("taints")
            self.api._commit(NODES, current, spec_new, None)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_s)
            for node in self.node_names:
                if node not in self.down:
                    with contextlib.suppress(ApiError):
                        self._node_status(node, ready=True)

    async def take_node_down(self, node: str) -> list[str]:
        """The node fails: its processes die at once, its local volumes are lost, it goes
        NotReady and its pods are marked not ready. Returns the pods that were running."""
        if node not in self.node_names:
            raise KeyError(f"no node named {node!r}")
        self.down.add(node)
        hit = [w for w in self.workers.values() if w.node == node]
        for w in hit:
            w.kill_all(signal.SIGKILL)
            w.terminating.set()
            if w.task is not None:
                w.task.cancel()
            self.workers.pop(w.uid, None)
        vols = self.settings.state_dir / "nodes" / node / "volumes"
        shutil.rmtree(vols, ignore_errors=True)
        self._node_status(node, ready=False)
        for pod in self._pods():
            if pod.get("spec", {}).get("nodeName") != node:
                continue
            current = copy.deepcopy(pod)
            conds = [c for c in (pod.get("status") or {}).get("conditions") or []
                     if c.get("type") not in ("Ready", "ContainersReady")]
            conds += [{"type": t, "status": "False", "reason": "NodeNotReady",
                       "lastTransitionTime": now_rfc3339()} for t in ("Ready", "ContainersReady")]
            current.setdefault("status", {})["conditions"] = conds
            with contextlib.suppress(ApiError):
                self.api._commit(PODS, pod, current, "status")
        self._dirty.set()
        return [f"{w.ns}/{w.name}" for w in hit]

    def bring_node_up(self, node: str) -> None:
        """The node returns (with empty disks): Ready again; its pods start over."""
        if node not in self.node_names:
            raise KeyError(f"no node named {node!r}")
        self.down.discard(node)
        self._node_status(node, ready=True)
        self._dirty.set()

    # ---------------------------------------------------------------- the sync loop

    async def _sync_loop(self) -> None:
        while True:
            await wait_event(self._dirty, 1.0)
            self._dirty.clear()
            try:
                self._sync_once()
            except Exception:
                log.exception("event=kubelet_sync_failed")

    def _sync_once(self) -> None:
        deployments.reconcile(self.api)
        pods = self._pods()
        live = set()
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            uid = meta["uid"]
            live.add(uid)
            node = spec.get("nodeName")
            if not node:
                if not meta.get("deletionTimestamp"):
                    self._schedule(pod)
                continue
            if node in self.down or node not in self.node_names:
                continue
            worker = self.workers.get(uid)
            if meta.get("deletionTimestamp"):
                if uid not in self._terminating:
                    self._terminating.add(uid)
                    grace = float(meta.get("deletionGracePeriodSeconds") or 0)
                    self._background(self._finish_deletion(pod, worker, grace))
                continue
            phase = (pod.get("status") or {}).get("phase")
            if worker is None and phase not in ("Succeeded", "Failed"):
                self._start_worker(pod)
        for uid in list(self.workers):
            if uid not in live and uid not in self._terminating:
                worker = self.workers.pop(uid)
                self._terminating.add(uid)
                self._background(self._reap(worker))
        for uid in list(self.ips):
            if uid not in live and uid not in self.workers:
                self.ips.pop(uid)
        self._terminating &= live | set(self.workers)
        self._protect_claims(pods)
        self._write_dns(pods)

    def _protect_claims(self, pods: list[Obj]) -> None:
        """The pvc-protection controller: a deleted claim goes once no pod uses it."""
        for pvc in self.api.objects_of("v1/persistentvolumeclaims"):
            meta = pvc["metadata"]
            if not meta.get("deletionTimestamp") or PVC_PROTECTION not in (
                    meta.get("finalizers") or []):
                continue
            in_use = any(p["metadata"].get("namespace") == meta["namespace"]
                         and meta["name"] in self._claims_of(p)
                         and (p.get("status") or {}).get("phase") not in ("Succeeded",
                                                                           "Failed")
                         for p in pods)
            if in_use:
                continue
            new = copy.deepcopy(pvc)
            new["metadata"]["finalizers"] = [f for f in meta["finalizers"]
                                             if f != PVC_PROTECTION]
            with contextlib.suppress(ApiError):
                self.api._commit(PVCS, pvc, new, None)

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _write_dns(self, pods: list[Obj]) -> None:
        services = self.api.objects_of("v1/services")
        dns.write_hosts(self.settings.hosts_file, dns.records(pods, services))

    def _allocate_ip(self, uid: str) -> str:
        if uid in self.ips:
            return self.ips[uid]
        used = set(self.ips.values())
        while True:
            self._next_ip = self._next_ip % (250 * 250) + 1
            x, y = divmod(self._next_ip - 1, 250)
            ip = f"{self.settings.network}.{x + 1}.{y + 1}"
            if ip not in used:
                self.ips[uid] = ip
                return ip

    def _start_worker(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        ip = (pod.get("status") or {}).get("podIP") or self._allocate_ip(uid)
        self.ips[uid] = ip
        worker = PodWorker(self, pod, ip)
        self.workers[uid] = worker
        worker.task = asyncio.ensure_future(worker.run())

    async def _finish_deletion(self, pod: Obj, worker: PodWorker | None, grace: float) -> None:
        meta = pod["metadata"]
        if worker is not None:
            await worker.terminate(grace)
            self.workers.pop(meta["uid"], None)
        with contextlib.suppress(ApiError):
            current = self.api._get(PODS, meta.get("namespace"), meta["name"])
            if current is not None and current["metadata"]["uid"] == meta["uid"]:
                self.api._delete(PODS, meta.get("namespace"), meta["name"],
                                 {"gracePeriodSeconds": 0})
        self._dirty.set()

    async def _reap(self, worker: PodWorker) -> None:
        """A pod force-deleted from the API: stop what still runs."""
        await worker.terminate(min(worker.grace_s, 2.0))
        self._terminating.discard(worker.uid)

    # ---------------------------------------------------------------- scheduling

    def _claims_of(self, pod: Obj) -> list[str]:
        return [v["persistentVolumeClaim"]["claimName"]
                for v in (pod.get("spec") or {}).get("volumes") or []
                if v.get("persistentVolumeClaim")]

    def _unschedulable(self, pod: Obj, reason: str) -> None:
        current = copy.deepcopy(pod)
        status = current.setdefault("status", {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        prev = next((c for c in status.get("conditions") or []
                     if c.get("type") == "PodScheduled"), None)
        if prev is not None and prev.get("message") == reason:
            return
        conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": reason, "lastTransitionTime": now_rfc3339()})
        status["conditions"] = conds
        with contextlib.suppress(ApiError):
            self.api._commit(PODS, pod, current, "status")

    def _schedule(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ns = meta.get("namespace", "default")
        candidates = [n for n in self.node_names if n not in self.down]
        selector = spec.get("nodeSelector") or {}
        nodes = {n: self.api._get(NODES, None, n) or {} for n in candidates}
        candidates = [n for n in candidates if all(
            (nodes[n].get("metadata", {}).get("labels") or {}).get(k) == v
            for k, v in selector.items())
            and not (nodes[n].get("spec") or {}).get("unschedulable")]  # cordoned
        for claim in self._claims_of(pod):
            pvc = self.api._get(PVCS, ns, claim)
            if pvc is None:
                self._unschedulable(pod, f'persistentvolumeclaim "{claim}" not found')
                return
            if pvc["metadata"].get("deletionTimestamp"):
                self._unschedulable(pod, f'persistentvolumeclaim "{claim}" is being deleted')
                return
            bound = (pvc["metadata"].get("annotations") or {}).get(
                "volume.kubernetes.io/selected-node")
            if bound:
                candidates = [n for n in candidates if n == bound]
                if not candidates:
                    self._unschedulable(pod, f'volume of claim "{claim}" is on node {bound}, '
                                             "which is not available (volume node affinity)")
                    return
        candidates = [n for n in candidates if not self._anti_affinity_blocks(pod, n)]
        if not candidates:
            self._unschedulable(pod, self._no_node_message(pod, selector))
            return
        load = {n: 0 for n in candidates}
        for other in self._pods():
            node = (other.get("spec") or {}).get("nodeName")
            if node in load:
                load[node] += 1
        node = min(candidates, key=lambda n: (load[n], n))
        for claim in self._claims_of(pod):
            self._bind_claim(ns, claim, node)
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = node
        with contextlib.suppress(ApiError):
            self.api._commit(PODS, pod, new, None)
            self.record_event(pod, "Scheduled", f"Successfully assigned {ns}/{meta['name']} "
                                                f"to {node}")

    def _no_node_message(self, pod: Obj, selector: dict[str, str]) -> str:
        """The scheduler's "0/N nodes are available: ..." with the count of each reason."""
        ns = pod["metadata"].get("namespace", "default")
        bound: set[str] = set()
        for claim in self._claims_of(pod):
            pvc = self.api._get(PVCS, ns, claim) or {"metadata": {}}
            node = (pvc["metadata"].get("annotations") or {}).get(
                "volume.kubernetes.io/selected-node")
            if node:
                bound.add(node)
        counts: dict[str, int] = {}
        for name in self.node_names:
            node_obj = self.api._get(NODES, None, name) or {}
            labels = (node_obj.get("metadata") or {}).get("labels") or {}
            if name in self.down:
                why = "node(s) were not ready"
            elif any(labels.get(k) != v for k, v in selector.items()):
                why = "node(s) didn't match Pod's node affinity/selector"
            elif (node_obj.get("spec") or {}).get("unschedulable"):
                why = "node(s) were unschedulable"
            elif bound and name not in bound:
                why = "node(s) had volume node affinity conflict"
            elif self._anti_affinity_blocks(pod, name):
                why = "node(s) didn't match pod anti-affinity rules"
            else:
                continue
            counts[why] = counts.get(why, 0) + 1
        detail = ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
        return f"0/{len(self.node_names)} nodes are available" + (f": {detail}." if detail else "")

    def _anti_affinity_blocks(self, pod: Obj, node: str) -> bool:
        terms = ((((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        for term in terms:
            if term.get("topologyKey") != HOSTNAME_KEY:
                continue
            wanted = (term.get("labelSelector") or {}).get("matchLabels") or {}
            for other in self._pods():
                if (other.get("spec") or {}).get("nodeName") != node or \
                        other["metadata"]["uid"] == pod["metadata"]["uid"]:
                    continue
                labels = other["metadata"].get("labels") or {}
                if wanted and all(labels.get(k) == v for k, v in wanted.items()):
                    return True
        return False

    # ---------------------------------------------------------------- volumes

    def volume_dir(self, node: str, pv_name: str) -> Path:
        return self.settings.state_dir / "nodes" / node / "volumes" / pv_name

    def _bind_claim(self, ns: str, claim: str, node: str) -> None:
        """Bind a claim to a new local PersistentVolume on `node` (WaitForFirstConsumer)."""
        pvc = self.api._get(PVCS, ns, claim)
        if pvc is None or (pvc.get("spec") or {}).get("volumeName"):
            return
        pv_name = f"pvc-{pvc['metadata']['uid']}"
        path = self.volume_dir(node, pv_name)
        path.mkdir(parents=True, exist_ok=True)
        size = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
            "storage", "1Gi")
        if self.api._get(PVS, None, pv_name) is None:
            self.api._create(PVS, None, {"metadata": {"name": pv_name}, "spec": {
                "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": (pvc.get("spec") or {}).get("storageClassName")
                or STORAGE_CLASS,
                "local": {"path": str(path)},
                "claimRef": {"kind": "PersistentVolumeClaim", "namespace": ns, "name": claim,
                             "uid": pvc["metadata"]["uid"]},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": HOSTNAME_KEY, "operator": "In", "values": [node]}]}]}}}})
            pv = self.api._get(PVS, None, pv_name)
            if pv is not None:
                new_pv = copy.deepcopy(pv)
                new_pv["status"] = {"phase": "Bound"}
                self.api._commit(PVS, pv, new_pv, "status")
        new = copy.deepcopy(pvc)
        new["spec"]["volumeName"] = pv_name
        new["metadata"].setdefault("annotations", {})["volume.kubernetes.io/selected-node"] = node
        new["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
        self.api._commit(PVCS, pvc, new, None)
        pvc = self.api._get(PVCS, ns, claim)
        if pvc is not None:
            bound = copy.deepcopy(pvc)
            bound["status"] = {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                               "capacity": {"storage": size}}
            self.api._commit(PVCS, pvc, bound, "status")

    def _release_claim(self, pvc: Obj) -> None:
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        if not pv_name:
            return
        pv = self.api._get(PVS, None, pv_name)
        if pv is not None:
            local = ((pv.get("spec") or {}).get("local") or {}).get("path")
            if local:
                shutil.rmtree(local, ignore_errors=True)
            with contextlib.suppress(ApiError):
                self.api._delete(PVS, None, pv_name, {})

    def claim_dir(self, ns: str, claim: str) -> Path | None:
        """The directory backing a bound claim (None while unbound)."""
        pvc = self.api._get(PVCS, ns, claim)
        if pvc is None:
            return None
        pv = self.api._get(PVS, None, (pvc.get("spec") or {}).get("volumeName") or "")
        if pv is None:
            return None
        return Path(pv["spec"]["local"]["path"])

    def prepare_volumes(self, worker: PodWorker) -> str | None:
        """Create each volume's directory and files; a message while one cannot be yet."""
        spec = worker.pod["spec"]
        worker.volume_paths = {}
        pending: list[tuple[Path, dict[str, bytes]]] = []
        for vol in spec.get("volumes") or []:
            name = vol["name"]
            if "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"]["claimName"]
                path = self.claim_dir(worker.ns, claim)
                if path is None:
                    return f'persistentvolumeclaim "{claim}" is not bound'
                if not path.is_dir():
                    return (f'the local volume of claim "{claim}" is gone (its node lost its '
                            "disks)")
            elif "configMap" in vol or "secret" in vol:
                path = worker.dir / "volumes" / name
                files = self._volume_files(worker.ns, vol)
                if files is None:
                    src = vol.get("configMap", vol.get("secret")) or {}
                    ref = src.get("name") or src.get("secretName")
                    return f'{"configmap" if "configMap" in vol else "secret"} "{ref}" not found'
                pending.append((path, files))
            else:  # emptyDir and anything else: a directory of the pod's own
                path = worker.dir / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
            worker.volume_paths[name] = path
        for path, files in pending:
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
            for rel, data in files.items():
                target = path / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(self._rewrite_bytes(worker, data))
        return None

    def _volume_files(self, ns: str, vol: Obj) -> dict[str, bytes] | None:
        if "configMap" in vol:
            src = vol["configMap"]
            obj = self.api._get(CONFIGMAPS, ns, src.get("name", ""))
            if obj is None:
                return {} if src.get("optional") else None
            data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {})
                         .items()})
        else:
            src = vol["secret"]
            obj = self.api._get(SECRETS, ns, src.get("secretName", ""))
            if obj is None:
                return {} if src.get("optional") else None
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            data.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
        items = src.get("items")
        if items:
            data = {i.get("path", i["key"]): data[i["key"]] for i in items if i["key"] in data}
        return data

    # ---------------------------------------------------------------- commands and env

    def _mounts(self, worker: PodWorker, spec: Obj) -> list[tuple[str, str]]:
        paths = worker.volume_paths
        out = []
        for m in spec.get("volumeMounts") or []:
            base = paths.get(m["name"])
            if base is None:
                continue
            host = base / m["subPath"] if m.get("subPath") else base
            out.append((m["mountPath"].rstrip("/") or "/", str(host)))
        out.sort(key=lambda item: -len(item[0]))
        return out

    @staticmethod
    def _rewrite(text: str, mounts: list[tuple[str, str]]) -> str:
        for mount, host in mounts:
            text = re.sub(re.escape(mount) + r"(?=$|[/\s,:;\"'=)])", lambda _m, h=host: h, text)
        return text

    def _rewrite_bytes(self, worker: PodWorker, data: bytes) -> bytes:
        mounts: list[tuple[str, str]] = []
        for c in (worker.pod["spec"].get("initContainers") or []) + \
                worker.pod["spec"].get("containers", []):
            mounts += self._mounts(worker, c)
        mounts = sorted(set(mounts), key=lambda item: -len(item[0]))
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return data
        return self._rewrite(text, mounts).encode()

    def _field(self, worker: PodWorker, path: str) -> str:
        pod = worker.pod
        meta = pod["metadata"]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
        table = {"metadata.name": meta["name"], "metadata.namespace": worker.ns,
                 "metadata.uid": meta["uid"], "spec.nodeName": worker.node,
                 "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
                 "status.podIP": worker.ip, "status.podIPs": worker.ip,
                 "status.hostIP": self.node_ip(worker.node),
                 "status.hostIPs": self.node_ip(worker.node)}
        return table.get(path, "")

    def _env(self, worker: PodWorker, spec: Obj) -> dict[str, str]:
        env: dict[str, str] = {}

        def expand(value: str) -> str:
            return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                          lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1),
                                                                            m.group(0)), value)

        for src in spec.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                obj = self.api._get(CONFIGMAPS, worker.ns, src["configMapRef"]["name"]) or {}
                env.update({prefix + k: v for k, v in (obj.get("data") or {}).items()})
            elif "secretRef" in src:
                obj = self.api._get(SECRETS, worker.ns, src["secretRef"]["name"]) or {}
                env.update({prefix + k: base64.b64decode(v).decode()
                            for k, v in (obj.get("data") or {}).items()})
        for var in spec.get("env") or []:
            name = var["name"]
            if "value" in var:
                env[name] = expand(str(var["value"]))
                continue
            ref = var.get("valueFrom") or {}
            if "fieldRef" in ref:
                env[name] = self._field(worker, ref["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in ref:
                r = ref["configMapKeyRef"]
                obj = self.api._get(CONFIGMAPS, worker.ns, r["name"]) or {}
                if r["key"] in (obj.get("data") or {}):
                    env[name] = obj["data"][r["key"]]
            elif "secretKeyRef" in ref:
                r = ref["secretKeyRef"]
                obj = self.api._get(SECRETS, worker.ns, r["name"]) or {}
                if r["key"] in (obj.get("data") or {}):
                    env[name] = base64.b64decode(obj["data"][r["key"]]).decode()
            else:
                env[name] = ""
        mounts = self._mounts(worker, spec)
        return {k: self._rewrite(v, mounts) for k, v in env.items()}

    def container_command(self, worker: PodWorker, spec: Obj) -> tuple[list[str], dict[str,
                                                                                     str], str]:
        """argv, environment and working directory of one container's process."""
        s = self.settings
        mounts = self._mounts(worker, spec)
        user_env = self._env(worker, spec)

        def expand(value: str) -> str:
            return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                          lambda m: "$" if m.group(0) == "$$" else user_env.get(m.group(1),
                                                                                 m.group(0)),
                          value)

        command = list(spec.get("command") or ["kraft"])  # the image's entrypoint: kraft
        args = list(spec.get("args") or [])
        argv = [self._rewrite(expand(a), mounts) for a in command + args]
        if os.path.basename(argv[0]) in SHIMS + INIT_SHIMS:
            argv[0] = str(s.bin_dir / os.path.basename(argv[0]))
        env = {
            "PATH": f"{s.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(worker.dir),
            "HOSTNAME": worker.pod["spec"].get("hostname") or worker.name,
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONUNBUFFERED": "1",
            "KUBECONFIG": str(s.kubeconfig),
            "SANDBOX_POD_IP": worker.ip,
            "SANDBOX_HOSTS": str(s.hosts_file),
            "SANDBOX_NAMESPACE": worker.ns,
        }
        env.update(user_env)
        workdir = spec.get("workingDir")
        cwd = self._rewrite(workdir, mounts) if workdir else str(worker.dir)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        return argv, env, cwd

    # ---------------------------------------------------------------- probes

    def _port(self, spec: Obj, port: Any) -> int:
        if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
            return int(port)
        for p in spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f"no container port named {port!r}")

    async def run_probe(self, worker: PodWorker, spec: Obj, probe: Obj) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in probe:
                get = probe["httpGet"]
                host = get.get("host") or worker.ip
                url = f"{get.get('scheme', 'HTTP').lower()}://{host}:" \
                      f"{self._port(spec, get['port'])}{get.get('path', '/')}"
                assert self._session is not None
                async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=timeout),
                                             allow_redirects=False) as resp:
                    await resp.read()
                    return 200 <= resp.status < 400
            if "tcpSocket" in probe:
                port = self._port(spec, probe["tcpSocket"]["port"])
                _r, w = await asyncio.wait_for(asyncio.open_connection(worker.ip, port), timeout)
                w.close()
                return True
            if "exec" in probe:
                argv, env, cwd = self.container_command(
                    worker, {**spec, "command": probe["exec"]["command"], "args": []})
                proc = await asyncio.create_subprocess_exec(
                    *argv, env=env, cwd=cwd, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL, preexec_fn=_set_pdeathsig)
                try:
                    return await asyncio.wait_for(proc.wait(), timeout) == 0
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
                    return False
        except (OSError, TimeoutError, aiohttp.ClientError, ValueError):
            return False
        return False

    def read_log(self, pod: Obj, container: str | None, previous: bool) -> str | None:
        """A container's output of its current run (or the one before, `previous`)."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        names = [c["name"] for c in (spec.get("initContainers") or []) +
                 (spec.get("containers") or [])]
        if container is None:
            mains = [c["name"] for c in spec.get("containers") or []]
            if len(mains) != 1:
                return None
            container = mains[0]
        if container not in names:
            return None
        path = (self.settings.state_dir / "pods" /
                f"{meta.get('namespace', 'default')}_{meta['name']}_{meta['uid'][:8]}" /
                f"{container}.log")
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        runs = re.split(r"^--- \S+ start .*\n", text, flags=re.MULTILINE)[1:]
        if previous:
            return runs[-2] if len(runs) >= 2 else None
        return runs[-1] if runs else ""

    async def exec_in_pod(self, raw: Any, pod: Obj, command: list[str],
                          query: dict[str, str]) -> Any:
        """`kubectl exec`: the command in the pod's context (its env, mounts, address and
        DNS), streamed over kubectl's WebSocket protocol (v5.channel.k8s.io: a channel byte
        before each message; 0 stdin, 1 stdout, 2 stderr, 3 the final Status, 255 close)."""
        meta = pod["metadata"]
        worker = self.workers.get(meta["uid"])
        if worker is None or not worker.processes():
            raise ApiError(400, "BadRequest", f'pod {meta["name"]} is not running')
        if not command:
            raise ApiError(400, "BadRequest", "exec needs a command")
        containers = worker.pod["spec"].get("containers") or []
        name = query.get("container") or containers[0]["name"]
        spec = next((c for c in containers if c["name"] == name), None)
        if spec is None:
            raise ApiError(400, "BadRequest", f"container {name} is not valid for pod "
                                              f"{meta['name']}")
        ws = aiohttp.web.WebSocketResponse(protocols=("v5.channel.k8s.io",
                                                      "v4.channel.k8s.io"))
        await ws.prepare(raw)
        argv, env, cwd = self.container_command(worker, {**spec, "command": command,
                                                         "args": []})
        want_stdin = query.get("stdin") in ("true", "1")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=cwd, preexec_fn=_set_pdeathsig,
                stdin=asyncio.subprocess.PIPE if want_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            await ws.send_bytes(b"\x03" + json.dumps({
                "metadata": {}, "status": "Failure", "reason": "InternalError",
                "message": f"could not run {command[0]}: {exc}"}).encode())
            await ws.close()
            return ws

        async def pump(stream: asyncio.StreamReader | None, channel: bytes) -> None:
            while stream is not None:
                chunk = await stream.read(65536)
                if not chunk:
                    return
                await ws.send_bytes(channel + chunk)

        async def feed() -> None:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY or not msg.data or proc.stdin is None:
                    continue
                channel, data = msg.data[0], msg.data[1:]
                if channel == 0 and data:
                    proc.stdin.write(data)
                    await proc.stdin.drain()
                elif channel == 255 and data[:1] == b"\x00":
                    proc.stdin.close()

        feeder = asyncio.ensure_future(feed())
        await asyncio.gather(pump(proc.stdout, b"\x01"), pump(proc.stderr, b"\x02"))
        code = await proc.wait()
        feeder.cancel()
        if code == 0:
            status: Obj = {"metadata": {}, "status": "Success"}
        else:
            status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                      "message": f"command terminated with non-zero exit code: {code}",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        return ws

    # ---------------------------------------------------------------- lookups for faults

    def worker(self, ns: str, name: str) -> PodWorker:
        for w in self.workers.values():
            if w.ns == ns and w.name == name:
                return w
        raise KeyError(f"pod {ns}/{name} is not running on any sandbox node")
