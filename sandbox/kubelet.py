"""The sandbox's nodes: the kubelet that runs every Pod as local processes, and the sync loop
that runs the node controller (`kraft_sandbox.nodes`), the scheduler (`kraft_sandbox.scheduler`),
the volume binder (`kraft_sandbox.volumes`), the Deployment controller
(`kraft_sandbox.deployments`) and the cluster DNS (`kraft_sandbox.dns`) after each change.

It runs in the API server's process and reads and writes the objects through the
emulator's public write path (the same rules as HTTP clients get: resourceVersion, status
subresource, graceful deletion), and it is told of every change by the emulator's write
hooks, as a kubelet is by its watch.

What a Pod gets (see docs/sandbox.md for the whole list):

- a Node (`sandbox-node-N`), chosen by the scheduler;
- its own loopback address (`127.P.x.y`), written to `status.podIP`;
- its volumes as directories, and each container's command, env and working directory
  (`kraft_sandbox.containers`);
- init containers run in order to completion, then the containers run;
- restartPolicy with exponential back-off (`CrashLoopBackOff`) and restartCount;
- startup, readiness and liveness probes (httpGet, tcpSocket, exec) written to the
  container statuses and the Pod's conditions;
- graceful deletion: SIGTERM, the grace period, SIGKILL, then the Pod object is removed.
"""

from __future__ import annotations

import asyncio
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
import aiohttp.web
import kmock
from kraft_sandbox import deployments, dns
from kraft_sandbox.containers import ContainerSetup
from kraft_sandbox.emulator import ApiError, SandboxEmulator, log_response, now_rfc3339
from kraft_sandbox.events import record_event
from kraft_sandbox.nodes import NODES, PODS, NodeController
from kraft_sandbox.scheduler import Scheduler
from kraft_sandbox.volumes import PVCS, PVS, VolumeBinder

log = logging.getLogger("kraft_sandbox.kubelet")

Obj = dict[str, Any]

SERVICES = kmock.resource("", "v1", "services")


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
    control_plane: str = "emulator"
    """"emulator" (the nodes also schedule, bind volumes and run Deployments) or "real" (a
    real API server, whose scheduler and controllers do that: `kraft_sandbox.controlplane`)."""
    api_url: str = ""
    """The real API server's URL and CA, for the kubeconfig each pod gets (real only)."""
    api_ca: Path | None = None

    @property
    def real(self) -> bool:
        return self.control_plane == "real"

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
    crashes: int = 0
    """Crashes in a row (the restart back-off doubles with each)."""

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
        if self.kubelet.nodes.node_down(self.node):
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
            "hostIP": self.kubelet.nodes.node_ip(self.node),
            "hostIPs": [{"ip": self.kubelet.nodes.node_ip(self.node)}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.start_time,
            # (no qosClass: the API server sets it when the pod is created, from its
            # resources, and refuses a status write that changes it)
            "containerStatuses": [c.render() for c in self.main],
        }
        if self.init:
            status["initContainerStatuses"] = [c.render() for c in self.init]
        if self.message:
            status["message"] = self.message
        self.kubelet.write_status(self.ns, self.name, self.uid, status, self.node)

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
            problem = self.kubelet.containers.prepare_volumes(self)
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
            st_crashes = st.crashes + 1
        st.crashes = st_crashes
        delay = min(s.backoff_max_s, s.backoff_base_s * (2 ** max(0, st_crashes - 1)))
        record_event(self.kubelet.api.node_view(self.node), self.pod, "BackOff",
                     f"Back-off {delay:g}s restarting failed container {st.name}", "Warning")
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
        problem = self.kubelet.containers.prepare_volumes(self)  # config maps as they are now
        if problem is not None:
            st.state = {"terminated": {"exitCode": 128, "reason": "StartError",
                                       "message": problem, "startedAt": started_at,
                                       "finishedAt": now_rfc3339()}}
            self.publish()
            return 128
        argv, env, cwd = self.kubelet.containers.command(self, spec)
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
            record_event(self.kubelet.api.node_view(self.node), self.pod, "Started", f"Started container {st.name}")
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
        record_event(self.kubelet.api.node_view(self.node), self.pod, "Unhealthy",
                     f"{kind} probe failed; restarting container {st.name}", "Warning")
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
            record_event(self.kubelet.api.node_view(self.node), self.pod, "Killing", f"Stopping container {st.name}")
        procs = [p for _c, p in self.processes()]
        await asyncio.gather(*(self.stop_process(p, grace) for p in procs))
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self.task, 5.0)


# ------------------------------------------------------------------ the kubelet


class Kubelet:
    """The kubelet of every node, and the sync loop that runs the sandbox's other components
    after each change: the node controller, the scheduler, the volume binder, the Deployment
    controller and the cluster DNS."""

    def __init__(self, emulator: SandboxEmulator, settings: KubeletSettings) -> None:
        self.api = emulator
        self.settings = settings
        self.nodes = NodeController(emulator, settings.nodes, settings.network,
                                    settings.heartbeat_s, real=settings.real)
        self.volumes = VolumeBinder(emulator, settings.state_dir)
        self.scheduler = Scheduler(emulator, self.nodes, self.volumes)
        self.containers = ContainerSetup(emulator, settings, self.nodes, self.volumes,
                                         tokens=self.service_account_token)
        self.workers: dict[str, PodWorker] = {}  # by pod uid
        self.ips: dict[str, str] = {}  # pod uid -> address
        self._next_ip = 0
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._terminating: set[str] = set()
        self._session: aiohttp.ClientSession | None = None
        self._endpoint: aiohttp.web.AppRunner | None = None
        self._bg: set[asyncio.Future[Any]] = set()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        s = self.settings
        for sub in ("pods", "nodes", "dns", "bin"):
            (s.state_dir / sub).mkdir(parents=True, exist_ok=True)
        self.containers.write_shims()
        dns.write_hosts(s.hosts_file, [])
        self._session = aiohttp.ClientSession()
        for node in self.nodes.node_names:
            self.nodes.register(node)
        if not s.real:  # on a real cluster the StorageClass is the administrator's
            self.volumes.ensure_storage_class()
        self.api.write_hooks.append(self._on_write)
        self.api.log_reader = self.read_log
        self.api.exec_handler = self.exec_in_pod
        self._tasks = [asyncio.ensure_future(self._sync_loop()),
                       asyncio.ensure_future(self.nodes.heartbeat_loop())]
        if s.real:
            await self._serve_endpoints()
        self._dirty.set()

    async def _serve_endpoints(self) -> None:
        """Each node's kubelet endpoint (NODE_IP:10250, HTTPS, clients must hold a
        certificate of the cluster's CA: the API server's) serving `containerLogs`, where
        the real API server sends `kubectl logs`."""
        import ssl

        from kraft_sandbox.nodes import KUBELET_PORT

        pki = self.settings.state_dir / "control-plane" / "pki"
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_cert_chain(str(pki / "kubelet-serving.crt"), str(pki / "kubelet-serving.key"))
        app = aiohttp.web.Application()
        app.router.add_get("/containerLogs/{ns}/{pod}/{container}", self._container_logs)
        for verb in ("exec", "attach", "portForward", "run"):
            app.router.add_route("*", f"/{verb}/{{rest:.*}}", self._not_served)
        self._endpoint = aiohttp.web.AppRunner(app, access_log=None)
        await self._endpoint.setup()
        for node in self.nodes.node_names:
            site = aiohttp.web.TCPSite(self._endpoint, self.nodes.node_ip(node), KUBELET_PORT,
                                       ssl_context=ctx)
            await site.start()

    async def _not_served(self, request: aiohttp.web.Request) -> Any:
        """exec, attach and port-forward: refused with a reason (their streams are SPDY
        from the API server, which this kubelet does not speak; the emulator serves exec)."""
        verb = request.path.strip("/").split("/")[0]
        message = (f"{verb} is not served by the sandbox's kubelet on the real control plane "
                   "(pod addresses are reachable from the machine; `kraft-sandbox run` runs "
                   "a program with the cluster's DNS)")
        return aiohttp.web.json_response(
            {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
             "message": message, "reason": "BadRequest", "code": 400}, status=400)

    async def _container_logs(self, request: aiohttp.web.Request) -> Any:
        ns, name = request.match_info["ns"], request.match_info["pod"]
        container = request.match_info["container"]
        params = dict(request.query)
        pod = self.api.read_object(PODS, ns, name)
        try:
            if pod is None:
                raise ApiError(404, "NotFound", f'pod "{name}" not found on this node')
            previous = params.get("previous") == "true"
            text = self.read_log(pod, container, previous)
            if text is None:
                raise ApiError(400, "BadRequest", f'container "{container}" is not in pod '
                                                  f'"{name}"' + (" or has no previous run"
                                                                 if previous else ""))
            uid = pod["metadata"]["uid"]

            def current_run() -> str | None:
                now = self.api.read_object(PODS, ns, name)
                if now is None or now["metadata"]["uid"] != uid:
                    return None
                return self.read_log(now, container, False) or ""

            return await log_response(request, params, text, previous, current_run)
        except ApiError as exc:
            return aiohttp.web.Response(status=exc.code, text=exc.message)

    def service_account_token(self, worker: PodWorker, audience: str | None,
                              expiration_s: int) -> str | None:
        """A token of the pod's ServiceAccount bound to the pod (TokenRequest), as a kubelet
        fills a projected `serviceAccountToken` volume; None without a real API server."""
        if not self.settings.real:
            return None
        spec = worker.pod["spec"]
        account = spec.get("serviceAccountName") or "default"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
            "audiences": [audience] if audience else [],
            "expirationSeconds": expiration_s,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": worker.name,
                               "uid": worker.uid}}}
        made = self.api.node_view(worker.node).request(
            "POST", f"/api/v1/namespaces/{worker.ns}/serviceaccounts/{account}/token", body)
        token: str = made["status"]["token"]
        return token

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
        if self._endpoint is not None:
            await self._endpoint.cleanup()
        with contextlib.suppress(ValueError):
            self.api.write_hooks.remove(self._on_write)

    def _on_write(self, kind: str, res: Any, obj: Obj) -> None:
        if res in (PODS, NODES, SERVICES, PVCS, PVS, deployments.DEPLOYMENTS):
            self._dirty.set()
        if res == PVCS and kind == "DELETED" and not self.settings.real:
            self.volumes.release_claim(obj)  # (a real PV controller releases the volume)

    # ---------------------------------------------------------------- API helpers

    def _pods(self) -> list[Obj]:
        return self.api.objects_of("v1/pods")

    def write_status(self, ns: str, name: str, uid: str, status: Obj, node: str) -> None:
        """A pod's status as its worker on `node` sees it (not if the pod was replaced
        meanwhile), written as that node."""
        api = self.api.node_view(node)
        current = self.api.read_object(PODS, ns, name)
        for _attempt in range(3):
            if current is None or current["metadata"]["uid"] != uid:
                return
            new = copy.deepcopy(current)
            new["status"] = {**(current.get("status") or {}), **status}
            try:
                api.commit(PODS, current, new, "status")
                return
            except ApiError as exc:
                if exc.code != 409:
                    log.warning("event=pod_status_refused pod=%s/%s code=%s message=%s", ns,
                             name, exc.code, exc.message)
                    return
            # another writer (a controller of the real API server) came first: read it again
            current = api.fetch(PODS, ns, name)

    async def take_node_down(self, node: str) -> list[str]:
        """The node fails: its processes die at once, its local volumes are lost, it goes
        NotReady and its pods are marked not ready. Returns the pods that were running."""
        if node not in self.nodes.node_names:
            raise KeyError(f"no node named {node!r}")
        self.nodes.down.add(node)
        hit = [w for w in self.workers.values() if w.node == node]
        for w in hit:
            w.kill_all(signal.SIGKILL)
            w.terminating.set()
            if w.task is not None:
                w.task.cancel()
            self.workers.pop(w.uid, None)
        shutil.rmtree(self.volumes.node_volumes(node), ignore_errors=True)
        self.nodes.set_status(node, ready=False)
        self.nodes.mark_pods_not_ready(node)
        self._dirty.set()
        return [f"{w.ns}/{w.name}" for w in hit]

    def bring_node_up(self, node: str) -> None:
        """The node returns (with empty disks): Ready again; its pods start over."""
        if node not in self.nodes.node_names:
            raise KeyError(f"no node named {node!r}")
        self.nodes.down.discard(node)
        self.nodes.set_status(node, ready=True)
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
        real = self.settings.real
        if real:  # the real controllers bind claims; the sandbox provisions their volumes
            self.volumes.provision_claims()
            self.volumes.reclaim_released()
        else:
            deployments.reconcile(self.api)
        pods = self._pods()
        live = set()
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            uid = meta["uid"]
            live.add(uid)
            node = spec.get("nodeName")
            if not node:
                if not meta.get("deletionTimestamp") and not real:
                    self.scheduler.schedule(pod)  # (a real API server has kube-scheduler)
                continue
            if node in self.nodes.down or node not in self.nodes.node_names:
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
        if not real:  # (kube-controller-manager's pvc-protection controller, on a real one)
            self.volumes.protect_claims(pods)
        self._write_dns(pods)

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
            current = self.api.read_object(PODS, meta.get("namespace"), meta["name"])
            if current is not None and current["metadata"]["uid"] == meta["uid"]:
                self.api.node_view(pod["spec"]["nodeName"]).delete_object(
                    PODS, meta.get("namespace"), meta["name"], {"gracePeriodSeconds": 0})
        self._dirty.set()

    async def _reap(self, worker: PodWorker) -> None:
        """A pod force-deleted from the API: stop what still runs."""
        await worker.terminate(min(worker.grace_s, 2.0))
        self._terminating.discard(worker.uid)

    # ---------------------------------------------------------------- probes

    def _port(self, spec: Obj, port: Any) -> int:
        if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
            return int(port)
        for p in spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f"no container port named {port!r}")

    async def run_probe(self, worker: PodWorker, spec: Obj, probe: Obj) -> bool:
        """One try of a probe (httpGet, tcpSocket, exec): True when it passed."""
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
                argv, env, cwd = self.containers.command(
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
        argv, env, cwd = self.containers.command(worker, {**spec, "command": command,
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
