"""One running sandbox: the emulated API, the nodes, the fault controls and the state file.

`run_sandbox` serves everything in the current event loop until it is stopped; the state
directory then holds `kubeconfig` (for kubectl, kopf and the kubernetes client),
`sandbox.json` (addresses for `kraft-sandbox fault ...` and `SandboxHandle`), `dns/hosts`,
`pods/` (each container's log) and `nodes/NODE/volumes/` (the claims' directories).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock
from aiohttp import web
from kraft_sandbox.apiserver import serve, write_kubeconfig
from kraft_sandbox.kubelet import Kubelet, KubeletSettings, PodWorker
from kraft_sandbox.volumes import PVCS

log = logging.getLogger("kraft_sandbox")

OPERATOR_SELECTOR = {"app.kubernetes.io/name": "kraft-operator"}


class FaultError(Exception):
    """A fault names something the sandbox does not have."""


@dataclass
class Sandbox:
    """The in-process fault API of a running sandbox."""

    kubelet: Kubelet
    api_url: str
    state_dir: Path
    admin: Any = None
    """The API as the cluster's administrator: the emulator itself, or a client of the real
    API server with the administrator's certificate (what `--operator` installs with)."""

    def _worker(self, namespace: str, pod: str) -> PodWorker:
        try:
            return self.kubelet.worker(namespace, pod)
        except KeyError as exc:
            raise FaultError(str(exc.args[0])) from None

    def crash(self, namespace: str, pod: str, container: str | None = None,
              sig: int = signal.SIGKILL) -> list[int]:
        """Kill the pod's running processes (all containers, or one) with `sig`."""
        worker = self._worker(namespace, pod)
        pids = []
        for st, proc in worker.processes():
            if container is None or st.name == container:
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, sig)
                pids.append(proc.pid)
        if not pids:
            raise FaultError(f"pod {namespace}/{pod} has no running process"
                             + (f" in container {container}" if container else ""))
        return pids

    def pause(self, namespace: str, pod: str) -> list[int]:
        """SIGSTOP every process of the pod (it stops answering; its sockets stay open)."""
        worker = self._worker(namespace, pod)
        pids = [proc.pid for _st, proc in worker.processes()]
        for pid in pids:
            os.killpg(pid, signal.SIGSTOP)
        return pids

    def resume(self, namespace: str, pod: str) -> list[int]:
        """SIGCONT what `pause` stopped."""
        worker = self._worker(namespace, pod)
        pids = [proc.pid for _st, proc in worker.processes()]
        for pid in pids:
            os.killpg(pid, signal.SIGCONT)
        return pids

    def wipe_pvc(self, namespace: str, claim: str, crash: bool = True) -> dict[str, Any]:
        """Disk failure: empty the claim's directory; with `crash`, kill the pods that use
        it, so that they come back on the empty disk (as after a disk replacement)."""
        path = self.kubelet.volumes.claim_dir(namespace, claim)
        if path is None:
            if self.kubelet.api.read_object(PVCS, namespace, claim) is None:
                raise FaultError(f"no claim {namespace}/{claim} (kubectl get pvc -n {namespace} "
                                 "lists them)")
            raise FaultError(f"claim {namespace}/{claim} is not bound to a volume")
        hit = []
        if crash:
            for worker in list(self.kubelet.workers.values()):
                claims = [v["persistentVolumeClaim"]["claimName"]
                          for v in worker.pod["spec"].get("volumes") or []
                          if v.get("persistentVolumeClaim")]
                if worker.ns == namespace and claim in claims:
                    worker.kill_all(signal.SIGKILL)
                    hit.append(worker.name)
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return {"path": str(path), "crashed": hit}

    async def node_down(self, node: str) -> list[str]:
        """Node failure (see `Kubelet.take_node_down`)."""
        try:
            return await self.kubelet.take_node_down(node)
        except KeyError as exc:
            raise FaultError(str(exc.args[0])) from None

    def node_up(self, node: str) -> None:
        try:
            self.kubelet.bring_node_up(node)
        except KeyError as exc:
            raise FaultError(str(exc.args[0])) from None

    def kill_operator(self, namespace: str | None = None) -> list[str]:
        """SIGKILL every running pod labelled app.kubernetes.io/name=kraft-operator."""
        killed = []
        for worker in list(self.kubelet.workers.values()):
            labels = worker.pod["metadata"].get("labels") or {}
            if namespace not in (None, worker.ns):
                continue
            if all(labels.get(k) == v for k, v in OPERATOR_SELECTOR.items()):
                worker.kill_all(signal.SIGKILL)
                killed.append(f"{worker.ns}/{worker.name}")
        if not killed:
            raise FaultError("no running operator pod (label app.kubernetes.io/name="
                             "kraft-operator)")
        return killed

    def pods(self) -> list[dict[str, Any]]:
        """The pods the nodes run, with their processes."""
        return [{"namespace": w.ns, "name": w.name, "node": w.node, "ip": w.ip,
                 "processes": {st.name: proc.pid for st, proc in w.processes()}}
                for w in self.kubelet.workers.values()]

    def claims(self) -> dict[str, str]:
        """Each bound claim's directory, by namespace/name."""
        out = {}
        for pvc in self.kubelet.api.objects_of("v1/persistentvolumeclaims"):
            meta = pvc["metadata"]
            path = self.kubelet.volumes.claim_dir(meta["namespace"], meta["name"])
            if path is not None:
                out[f"{meta['namespace']}/{meta['name']}"] = str(path)
        return out


FAULTS: dict[str, Callable[..., Any]] = {
    "crash": Sandbox.crash, "pause": Sandbox.pause, "resume": Sandbox.resume,
    "wipe-pvc": Sandbox.wipe_pvc, "node-down": Sandbox.node_down, "node-up": Sandbox.node_up,
    "kill-operator": Sandbox.kill_operator, "pods": Sandbox.pods, "claims": Sandbox.claims,
}


def _control_app(sandbox: Sandbox) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        fn = FAULTS.get(name)
        if fn is None:
            return web.json_response({"error": f"no fault named {name!r}"}, status=404)
        args = await request.json() if request.can_read_body else {}
        if "sig" in args and isinstance(args["sig"], str):
            args["sig"] = int(getattr(signal, "SIG" + args["sig"].upper().removeprefix("SIG")))
        try:
            result = fn(sandbox, **args)
            if asyncio.iscoroutine(result):
                result = await result
        except (FaultError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"result": result})

    app = web.Application()
    app.router.add_post("/v1/{name}", handle)
    return app


@contextlib.asynccontextmanager
async def _emulated(settings: KubeletSettings, api_host: str,
                    api_port: int) -> AsyncIterator[tuple[Any, str, Any]]:
    async with serve(host=api_host, port=api_port) as api:
        write_kubeconfig(settings.kubeconfig, api.url)
        yield api.emulator, api.url, api.emulator


@contextlib.asynccontextmanager
async def _real(settings: KubeletSettings,
                api_host: str) -> AsyncIterator[tuple[Any, str, Any]]:
    """The real control plane (`kraft_sandbox.controlplane`), the node agent's RBAC and the
    StorageClass made as the administrator, then the nodes' client of the API."""
    from kraft_sandbox.controlplane import running_control_plane
    from kraft_sandbox.realapi import RealApi, bootstrap

    nodes = {f"sandbox-node-{i}": f"{settings.network}.0.{i + 1}"
             for i in range(settings.nodes)}
    async with running_control_plane(settings.state_dir, api_host, nodes) as plane:
        pki = plane.dir / "pki"
        admin = RealApi(plane.url, plane.ca, pki / "admin.crt", pki / "admin.key", [])
        bootstrap(admin)
        assert plane.node_agent is not None
        api = RealApi(plane.url, plane.ca, plane.node_agent.cert, plane.node_agent.key,
                      REAL_CACHED, node_identities={
                          name: (cred.cert, cred.key) for name, cred in plane.node_creds.items()})
        api.start(asyncio.get_running_loop())
        settings.api_url, settings.api_ca = plane.url, plane.ca
        try:
            await api.wait_synced()
            yield api, plane.url, admin
        finally:
            api.stop()
            admin.stop()


REAL_CACHED = [kmock.resource(r) for r in (
    "v1/pods", "v1/nodes", "v1/services", "v1/persistentvolumeclaims", "v1/persistentvolumes",
    "v1/configmaps", "v1/secrets")]
"""What the nodes read on a real API server: served from watches, as informers do."""


@contextlib.asynccontextmanager
async def run_sandbox(settings: KubeletSettings, api_port: int = 0,
                      prepare: Callable[[Sandbox], None] | None = None
                      ) -> AsyncIterator[Sandbox]:
    """Serve the API (the emulator, or the real control plane when
    `settings.control_plane` is "real"), the nodes and the control endpoint; write the
    state files. `prepare` runs before `sandbox.json` says the sandbox is up (what it
    installs is there when a client sees the sandbox)."""
    state = settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    api_host = f"{settings.network}.0.250"  # not 127.0.0.1: in a pod that is the pod itself
    backend = _real(settings, api_host) if settings.real else _emulated(settings, api_host,
                                                                        api_port)
    async with backend as (store, api_url, admin):
        kubelet = Kubelet(store, settings)
        await kubelet.start()
        sandbox = Sandbox(kubelet, api_url, state, admin)
        runner = web.AppRunner(_control_app(sandbox), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, api_host, 0)
        await site.start()
        port = runner.addresses[0][1]
        if prepare is not None:
            prepare(sandbox)
        info = {"api": api_url, "control_plane": settings.control_plane,
                "kubeconfig": str(settings.kubeconfig),
                "control": f"http://{api_host}:{port}", "hosts": str(settings.hosts_file),
                "network": settings.network, "nodes": kubelet.nodes.node_names, "pid": os.getpid(),
                "state_dir": str(state)}
        tmp = state / "sandbox.json.tmp"
        tmp.write_text(json.dumps(info, indent=2) + "\n")
        tmp.replace(state / "sandbox.json")
        try:
            yield sandbox
        finally:
            with contextlib.suppress(FileNotFoundError):
                (state / "sandbox.json").unlink()
            await kubelet.stop()
            await runner.cleanup()


__all__ = ["FAULTS", "FaultError", "Sandbox", "run_sandbox"]
