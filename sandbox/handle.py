"""Start a sandbox in a child process and drive it from Python (tests, e2e, scripts).

    with start_sandbox(tmp_path / "sbx", nodes=3) as sb:
        sb.kubectl("apply", "-f", "pod.yaml")
        sb.faults.crash("default", "kraft-0")
        core = sb.core_v1()          # a kubernetes.client.CoreV1Api on the sandbox
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft_sandbox.dns import Resolver


class SandboxError(RuntimeError):
    """The sandbox did not start, or a fault request was refused."""


def find_tool(name: str) -> str | None:
    """The project's `kubectl` or `helm` (`make k8s-bins` puts them in .tools/bin), else one
    on PATH; `SANDBOX_KUBECTL` / `SANDBOX_HELM` name another."""
    env = os.environ.get(f"SANDBOX_{name.upper()}")
    if env:
        return env
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / ".tools" / "bin" / name
        if candidate.is_file():
            return str(candidate)
    from shutil import which

    return which(name)


def find_kubectl() -> str | None:
    """The project's kubectl (see `find_tool`)."""
    return find_tool("kubectl")


class FaultClient:
    """The faults of a running sandbox, through its control endpoint (`sandbox.json`)."""

    def __init__(self, control_url: str) -> None:
        self.url = control_url.rstrip("/")

    def call(self, name: str, **args: Any) -> Any:
        req = urllib.request.Request(f"{self.url}/v1/{name}", data=json.dumps(args).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())["result"]
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError, KeyError):
                body = json.loads(body)["error"]
            raise SandboxError(f"fault {name}: {body}") from None

    def crash(self, namespace: str, pod: str, container: str | None = None,
              sig: str = "KILL") -> list[int]:
        """Kill the pod's processes (SIGKILL by default)."""
        return list(self.call("crash", namespace=namespace, pod=pod, container=container,
                              sig=sig))

    def pause(self, namespace: str, pod: str) -> list[int]:
        return list(self.call("pause", namespace=namespace, pod=pod))

    def resume(self, namespace: str, pod: str) -> list[int]:
        return list(self.call("resume", namespace=namespace, pod=pod))

    def wipe_pvc(self, namespace: str, claim: str, crash: bool = True) -> dict[str, Any]:
        return dict(self.call("wipe-pvc", namespace=namespace, claim=claim, crash=crash))

    def node_down(self, node: str) -> list[str]:
        return list(self.call("node-down", node=node))

    def node_up(self, node: str) -> None:
        self.call("node-up", node=node)

    def kill_operator(self, namespace: str | None = None) -> list[str]:
        return list(self.call("kill-operator", namespace=namespace))

    def pods(self) -> list[dict[str, Any]]:
        return list(self.call("pods"))

    def claims(self) -> dict[str, str]:
        return dict(self.call("claims"))


@dataclass
class SandboxHandle:
    """A running sandbox seen from outside: addresses, kubectl, clients, faults."""

    state_dir: Path
    info: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return str(self.info["api"])

    @property
    def kubeconfig(self) -> Path:
        return Path(self.info["kubeconfig"])

    @property
    def nodes(self) -> list[str]:
        return list(self.info["nodes"])

    @property
    def faults(self) -> FaultClient:
        return FaultClient(self.info["control"])

    def resolver(self, namespace: str = "default") -> Resolver:
        """Cluster DNS as a pod of `namespace` sees it."""
        return Resolver(self.info["hosts"], namespace)

    @contextlib.contextmanager
    def cluster_dns(self, namespace: str = "default") -> Iterator[None]:
        """Resolve cluster names (`kraft-0.kraft`, `svc.ns.svc.cluster.local`) in this process
        for the `with` body, as a pod of `namespace` would."""
        from kraft_sandbox.launch import install_dns

        restore = install_dns(self.resolver(namespace))
        try:
            yield
        finally:
            restore()

    def run(self, program: str, *args: str, namespace: str = "default",
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`kraft-sandbox run PROGRAM ARGS`: an installed program with the cluster's DNS."""
        return subprocess.run([sys.executable, "-m", "kraft_sandbox", "run",
                               "--state-dir", str(self.state_dir), "-n", namespace, program,
                               *args], capture_output=True, text=True, timeout=timeout,
                              check=False)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against the sandbox."""
        kubectl = find_kubectl()
        if kubectl is None:
            raise SandboxError("no kubectl: run `make k8s-bins`")
        # a discovery cache of its own: a sandbox started later on the same address must
        # not read this one's resources from ~/.kube/cache
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
               "KUBECACHEDIR": str(self.state_dir / "kube-cache")}
        done = subprocess.run([kubectl, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, input=input, check=False)
        if check and done.returncode != 0:
            raise SandboxError(f"kubectl {' '.join(args)} failed ({done.returncode}): "
                               f"{done.stderr.strip()}")
        return done

    def helm(self, *args: str, check: bool = True,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the real helm against the sandbox (its cache and config in the state
        directory)."""
        helm = find_tool("helm")
        if helm is None:
            raise SandboxError("no helm: run `make k8s-bins`")
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        for key in ("CACHE", "CONFIG", "DATA"):
            env[f"HELM_{key}_HOME"] = str(self.state_dir / "helm" / key.lower())
        done = subprocess.run([helm, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise SandboxError(f"helm {' '.join(args)} failed ({done.returncode}): "
                               f"{done.stderr.strip()}")
        return done

    def api_client(self) -> Any:
        """A kubernetes.client.ApiClient configured for the sandbox."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig),
                                client_configuration=configuration)
        return client.ApiClient(configuration)

    def core_v1(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    def log_of(self, namespace: str, pod: str, container: str) -> str:
        """The log of a pod's container (every run, each after a `--- start` line)."""
        found = sorted((self.state_dir / "pods").glob(f"{namespace}_{pod}_*/{container}.log"),
                       key=lambda p: p.stat().st_mtime)
        return found[-1].read_text(errors="replace") if found else ""


@contextlib.contextmanager
def start_sandbox(state_dir: Path, *, nodes: int = 3, network: str | None = None,
                  backoff_base_s: float = 1.0, heartbeat_s: float = 5.0,
                  startup_timeout_s: float = 60.0, control_plane: str = "emulator",
                  extra_args: list[str] | None = None) -> Iterator[SandboxHandle]:
    """Run `python -m kraft_sandbox up` in a child process for the `with` body
    (`control_plane="real"`: on the real control plane, `kraft_sandbox.controlplane`)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    info_path = state_dir / "sandbox.json"
    with contextlib.suppress(FileNotFoundError):
        info_path.unlink()
    cmd = [sys.executable, "-m", "kraft_sandbox", "--state-dir", str(state_dir), "up",
           "--nodes", str(nodes), "--backoff-base", str(backoff_base_s),
           "--heartbeat", str(heartbeat_s), "--control-plane", control_plane, "--quiet",
           *(extra_args or [])]
    if network:
        cmd += ["--network", network]
    log = open(state_dir / "sandbox.log", "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not info_path.exists():
            if proc.poll() is not None:
                raise SandboxError(f"the sandbox exited with {proc.returncode}; see "
                                   f"{state_dir / 'sandbox.log'}")
            if time.monotonic() > deadline:
                raise SandboxError("the sandbox did not start in time")
            time.sleep(0.05)
        yield SandboxHandle(state_dir, json.loads(info_path.read_text()), proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
