"""Where the scenarios run: the sandbox, or the cluster `KUBECONFIG` names.

The scenarios only talk to a `Backend`: `kubectl`, the KV addresses of a quorum's pods, and
the faults. The two backends differ in how a fault is injected and how the client reaches the
KV API; everything else (the resources applied, the waits, the checks) is the same code.

- `SandboxBackend`: a fresh sandbox per scenario (`kraft-sandbox up --operator`: the operator
  as a pod with its default settings), on the emulated API or (`E2E_BACKEND=sandbox-real`)
  the real control plane; pod addresses are reachable from this machine; faults
  through the sandbox's control endpoint (a claim's directory emptied, a Node taken down with
  its node-local volumes, the operator's process SIGKILLed).
- `ClusterBackend`: the cluster of `$KUBECONFIG` (kind or k3d), the operator installed with
  its chart (docs/e2e.md); the KV API through one `kubectl port-forward` per pod; a disk
  wiped by a pod on the same node that mounts the claim and empties it, then the kraft pod
  deleted at once; a Node failed by a command (`E2E_NODE_DOWN`, e.g. `docker stop {node}`
  for kind/k3d, whose nodes are containers); the operator killed by deleting its pod with no
  grace period.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kraft_sandbox.handle import SandboxHandle, find_kubectl, start_sandbox

KV_PORT = 8080


class BackendError(RuntimeError):
    """A backend could not do what a scenario asked."""


class Backend:
    """What a scenario may ask of the place it runs in."""

    name = "abstract"
    namespace = "default"
    spec_defaults: dict[str, Any] = {}
    """Fields every scenario's KRaftQuorum gets (the cluster's image)."""
    node_local_storage = True
    """True when a Node's failure takes its pods' volumes with it (the sandbox; kind and k3d
    with their default local-path storage)."""

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        raise NotImplementedError

    def kv_addresses(self, pods: list[dict[str, Any]]) -> list[str]:
        """host:port of each pod's KV API, as this machine reaches it."""
        raise NotImplementedError

    def wipe_claim(self, claim: str, pod: str) -> None:
        """Disk failure: the claim's content lost under the running pod, which restarts."""
        raise NotImplementedError

    def node_down(self, node: str) -> None:
        raise NotImplementedError

    def node_up(self, node: str) -> None:
        raise NotImplementedError

    def kill_operator(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    # shared helpers

    def get(self, *what: str) -> Any:
        done = self.kubectl("get", *what, "-n", self.namespace, "-o", "json", check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def apply(self, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-n", self.namespace, "-f", "-",
                            input=json.dumps(manifest), check=False)


class SandboxBackend(Backend):
    """A sandbox of its own, started with the operator pod (default settings)."""

    name = "sandbox"

    def __init__(self, state_dir: Path | None = None, nodes: int = 3,
                 control_plane: str = "emulator") -> None:
        if control_plane == "real":
            self.name = "sandbox-real"
        if find_kubectl() is None:
            raise BackendError("no kubectl: run `make k8s-bins`")
        self._tmp = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kraft-e2e-")
            state_dir = Path(self._tmp.name)
        self._ctx = start_sandbox(state_dir / "sandbox", nodes=nodes, backoff_base_s=0.5,
                                  heartbeat_s=1.0, extra_args=["--operator"],
                                  control_plane=control_plane, startup_timeout_s=120)
        self.sb: SandboxHandle = self._ctx.__enter__()
        from kraft_operator import models

        self.kubectl("wait", "--for=condition=Established", f"crd/{models.CRD_NAME}",
                     "--timeout=60s")

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.sb.kubectl(*args, check=check, input=input, timeout=timeout)

    def kv_addresses(self, pods: list[dict[str, Any]]) -> list[str]:
        return [f"{p['status']['podIP']}:{KV_PORT}" for p in pods
                if (p.get("status") or {}).get("podIP")]

    def wipe_claim(self, claim: str, pod: str) -> None:
        self.sb.faults.wipe_pvc(self.namespace, claim)

    def node_down(self, node: str) -> None:
        self.sb.faults.node_down(node)

    def node_up(self, node: str) -> None:
        self.sb.faults.node_up(node)

    def kill_operator(self) -> None:
        self.sb.faults.kill_operator(self.namespace)

    def close(self) -> None:
        self._ctx.__exit__(None, None, None)
        if self._tmp is not None:
            self._tmp.cleanup()


class _PortForward:
    """`kubectl port-forward pod/NAME :8080`, kept while the pod (same uid) lives."""

    def __init__(self, kubectl: str, namespace: str, pod: str, uid: str) -> None:
        self.uid = uid
        self.proc = subprocess.Popen([kubectl, "port-forward", "-n", namespace, f"pod/{pod}",
                                      f":{KV_PORT}"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.address: str | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            m = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
            if m:
                self.address = f"127.0.0.1:{m.group(1)}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class ClusterBackend(Backend):
    """The cluster of `$KUBECONFIG`, with the operator already installed (docs/e2e.md)."""

    name = "cluster"

    def __init__(self) -> None:
        kubectl = find_kubectl()
        if kubectl is None or not os.environ.get("KUBECONFIG"):
            raise BackendError("the cluster backend needs KUBECONFIG and kubectl")
        self._kubectl = kubectl
        self.namespace = os.environ.get("E2E_NAMESPACE", "default")
        self.node_local_storage = os.environ.get("E2E_NODE_LOCAL_STORAGE", "1") == "1"
        self.operator_selector = os.environ.get("E2E_OPERATOR_SELECTOR",
                                                "app.kubernetes.io/name=kraft-operator")
        self.operator_namespace = os.environ.get("E2E_OPERATOR_NAMESPACE", self.namespace)
        self.wipe_image = os.environ.get("E2E_WIPE_IMAGE", "busybox:1.36")
        self.spec_defaults = {"image": os.environ.get("E2E_IMAGE", "kraft-quorum:0.1.0")}
        self._forwards: dict[str, _PortForward] = {}

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self._kubectl, *args], capture_output=True, text=True,
                              input=input, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise BackendError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def kv_addresses(self, pods: list[dict[str, Any]]) -> list[str]:
        out = []
        for p in pods:
            name, uid = p["metadata"]["name"], p["metadata"]["uid"]
            if (p.get("status") or {}).get("phase") != "Running":
                continue
            fwd = self._forwards.get(name)
            if fwd is not None and (fwd.uid != uid or not fwd.alive()):
                fwd.close()
                fwd = None
            if fwd is None:
                fwd = self._forwards[name] = _PortForward(self._kubectl, self.namespace,
                                                          name, uid)
            if fwd.address:
                out.append(fwd.address)
        return out

    def wipe_claim(self, claim: str, pod: str) -> None:
        node = self.get("pod", pod)["spec"]["nodeName"]
        wiper = f"wipe-{claim}"[:60]
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": wiper, "namespace": self.namespace},
                "spec": {"nodeName": node, "restartPolicy": "Never",
                         "containers": [{"name": "wipe", "image": self.wipe_image,
                                         "command": ["sh", "-c",
                                                     "rm -rf /data/* /data/.[!.]* || true"],
                                         "volumeMounts": [{"name": "d",
                                                           "mountPath": "/data"}]}],
                         "volumes": [{"name": "d",
                                      "persistentVolumeClaim": {"claimName": claim}}]}}
        self.apply(body)
        self.kubectl("wait", "-n", self.namespace, f"pod/{wiper}",
                     "--for=jsonpath={.status.phase}=Succeeded", "--timeout=120s")
        self.kubectl("delete", "-n", self.namespace, f"pod/{pod}", "--grace-period=0",
                     "--force", "--wait=false")
        self.kubectl("delete", "-n", self.namespace, f"pod/{wiper}", "--wait=false")

    def _node_command(self, var: str, node: str) -> None:
        template = os.environ.get(var)
        if not template:
            raise BackendError(f"set {var} (e.g. 'docker stop {{node}}' for kind or k3d)")
        subprocess.run(shlex.split(template.format(node=node)), check=True, timeout=120)

    def node_down(self, node: str) -> None:
        self._node_command("E2E_NODE_DOWN", node)

    def node_up(self, node: str) -> None:
        self._node_command("E2E_NODE_UP", node)

    def kill_operator(self) -> None:
        self.kubectl("delete", "pod", "-n", self.operator_namespace, "-l",
                     self.operator_selector, "--grace-period=0", "--force", "--wait=false")

    def close(self) -> None:
        for fwd in self._forwards.values():
            fwd.close()


def make_backend() -> Backend:
    """`E2E_BACKEND=cluster` (or KUBECONFIG set without E2E_BACKEND=sandbox): the cluster;
    otherwise a sandbox."""
    choice = os.environ.get("E2E_BACKEND") or ("cluster" if os.environ.get("KUBECONFIG")
                                               else "sandbox")
    if choice == "cluster":
        return ClusterBackend()
    return SandboxBackend()


def wait_until(what: str, check: Any, timeout_s: float, every_s: float = 0.25) -> Any:
    """Poll `check` until it returns something truthy; raise naming `what` after the bound."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise BackendError(f"timed out after {timeout_s:.0f} s waiting for {what}")
