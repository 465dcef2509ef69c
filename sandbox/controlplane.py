"""The real Kubernetes control plane on loopback (`kraft-sandbox up --control-plane real`):
etcd, kube-apiserver, kube-controller-manager and kube-scheduler as processes, built by
`make k8s-control-plane` (tools/k8s-control-plane/).

What it sets up in `STATE/control-plane/`:

- a CA (`ca.crt`), and from it the API server's serving certificate (the API address, the
  `kubernetes` Service's names and first address), the kubelets' serving certificate (every
  node address, for `kubectl logs` through the API server), and client certificates: the
  user (`system:masters`), kube-controller-manager and kube-scheduler (the names the
  bootstrap RBAC policy binds), each kubelet (`system:node:NAME` in `system:nodes`, as the
  Node authorizer knows kubelets), the node agent (`kraft-sandbox:node-agent`: the nodes'
  watches and the volume provisioner, bound to a ClusterRole of what they do) and the API
  server's own, for the kubelets;
- the service-account signing key pair and issuer;
- a kubeconfig for each client; the user's is `STATE/kubeconfig`, as with the emulator;
- the processes, each logging to `NAME.log`, stopped in reverse order (SIGTERM, then SIGKILL).

The API server runs with `--authorization-mode=Node,RBAC` and the default admission plugins
(Pod Security among them) plus NodeRestriction; etcd keeps its data under the state
directory and skips fsync (`--unsafe-no-fsync`: a sandbox's data need not survive a power
loss, and fsync is what a busy 2-core machine is slowest at).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import logging
import os
import signal
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("kraft_sandbox.controlplane")

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
DEFAULT_BIN_DIR = Path.home() / ".cache" / "kraft-quorum" / "k8s" / "bin"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KUBELET_PORT = 10250
NODE_AGENT_USER = "kraft-sandbox:node-agent"
NODE_AGENT_GROUP = "kraft-sandbox:nodes"
ADMIN_USER = "kraft-sandbox-admin"


class ControlPlaneError(RuntimeError):
    """The control plane's binaries are missing, or a process did not come up."""


def bin_dir() -> Path:
    """Where `make k8s-control-plane` puts the binaries ($KRAFT_K8S_BIN overrides; the
    build script's $KRAFT_K8S_CACHE moves the whole cache, bin/ included)."""
    if os.environ.get("KRAFT_K8S_BIN"):
        return Path(os.environ["KRAFT_K8S_BIN"])
    if os.environ.get("KRAFT_K8S_CACHE"):
        return Path(os.environ["KRAFT_K8S_CACHE"]) / "bin"
    return DEFAULT_BIN_DIR


def find_binaries() -> dict[str, Path]:
    """The four binaries by name; a clear error naming what is missing and how to build it."""
    where = bin_dir()
    found = {name: where / name for name in BINARIES}
    missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        raise ControlPlaneError(
            f"the real control plane is not built: {', '.join(missing)} missing in {where} "
            "(run `make k8s-control-plane` once, about 20 minutes on 2 cores; or set "
            "KRAFT_K8S_BIN to a directory holding etcd, kube-apiserver, "
            "kube-controller-manager and kube-scheduler)")
    return found


# ------------------------------------------------------------------ certificates


@dataclass(frozen=True)
class Credential:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


class Pki:
    """A CA and the certificates issued from it (ECDSA P-256: quick to make, and every
    component takes it)."""

    def __init__(self, directory: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ser, self._ec, self._oid = (
            x509, hashes, serialization, ec, NameOID)
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kraft-sandbox-ca")])
        now = datetime.datetime.now(datetime.UTC)
        self._ca_name = name
        self._ca_cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._ca_key, hashes.SHA256()))
        self.ca = Credential(directory / "ca.crt", directory / "ca.key")
        self._write(self.ca, self._ca_cert, self._ca_key)

    def _write(self, cred: Credential, cert: Any, key: Any) -> None:
        ser = self._ser
        cred.cert.write_bytes(cert.public_bytes(ser.Encoding.PEM))
        cred.key.write_bytes(key.private_bytes(ser.Encoding.PEM,
                                               ser.PrivateFormat.TraditionalOpenSSL,
                                               ser.NoEncryption()))
        cred.key.chmod(0o600)

    def issue(self, name: str, common_name: str, *, orgs: tuple[str, ...] = (),
              ips: tuple[str, ...] = (), dns: tuple[str, ...] = (),
              server: bool = False) -> Credential:
        """A leaf certificate: a client's (CN the user, O its groups) or a server's (SANs)."""
        x509, oid = self._x509, self._oid
        attrs = [x509.NameAttribute(oid.ORGANIZATION_NAME, o) for o in orgs]
        attrs.append(x509.NameAttribute(oid.COMMON_NAME, common_name))
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = x509.oid.ExtendedKeyUsageOID
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name(attrs))
            .issuer_name(self._ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [usage.SERVER_AUTH] if server else [usage.CLIENT_AUTH]), critical=False))
        sans: list[Any] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        sans += [x509.DNSName(d) for d in dns]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, self._hashes.SHA256())
        cred = Credential(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        self._write(cred, cert, key)
        return cred

    def key_pair(self, name: str) -> Credential:
        """A bare key pair (`name.key`, and the public key as `name.pub`): the service
        accounts' signing key."""
        ser = self._ser
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        cred = Credential(self.dir / f"{name}.pub", self.dir / f"{name}.key")
        cred.cert.write_bytes(key.public_key().public_bytes(
            ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo))
        cred.key.write_bytes(key.private_bytes(ser.Encoding.PEM,
                                               ser.PrivateFormat.TraditionalOpenSSL,
                                               ser.NoEncryption()))
        cred.key.chmod(0o600)
        return cred


def kubeconfig_text(url: str, ca: Path, user: str, *, cert: Credential | None = None,
                    token_file: Path | None = None, namespace: str = "default") -> str:
    """A kubeconfig for the real API: the CA, and a client certificate or a token file."""
    if cert is not None:
        who = {"client-certificate": str(cert.cert), "client-key": str(cert.key)}
    elif token_file is not None:
        who = {"tokenFile": str(token_file)}
    else:
        who = {}
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kraft-sandbox", "cluster": {
            "server": url, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": who}],
        "contexts": [{"name": "kraft-sandbox", "context": {
            "cluster": "kraft-sandbox", "user": user, "namespace": namespace}}],
        "current-context": "kraft-sandbox", "preferences": {},
    }
    return json.dumps(config, indent=2) + "\n"  # JSON is YAML: every client reads it


def write_file(path: Path, text: str) -> Path:
    """Write atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ processes


def _pdeathsig() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


@dataclass
class ControlPlane:
    """A running control plane: its address, the files clients need, the processes."""

    state_dir: Path
    host: str
    url: str = ""
    ca: Path = Path()
    admin_kubeconfig: Path = Path()
    node_agent: Credential | None = None
    kubelet_serving: Credential | None = None
    node_creds: dict[str, Credential] = field(default_factory=dict)
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.state_dir / "control-plane"

    def ssl_context(self, cred: Credential | None = None) -> ssl.SSLContext:
        """A client TLS context trusting the CA, with `cred` as the client certificate."""
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if cred is not None:
            ctx.load_cert_chain(str(cred.cert), str(cred.key))
        return ctx

    async def _spawn(self, name: str, argv: list[str]) -> None:
        path = self.dir / f"{name}.log"
        self.logs[name] = path
        with open(path, "ab") as out:
            out.write(f"--- start {json.dumps(argv)}\n".encode())
            out.flush()
            self.processes[name] = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True,
                preexec_fn=_pdeathsig)

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self.logs[name].read_text(errors="replace").splitlines()[-lines:])
        except (KeyError, FileNotFoundError):
            return ""

    async def _wait_http(self, name: str, url: str, ctx: ssl.SSLContext | None,
                         timeout_s: float) -> None:
        """Poll `url` until it answers 200; a clear error (with the log's end) otherwise."""
        import aiohttp

        deadline = time.monotonic() + timeout_s
        last = ""
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                proc = self.processes[name]
                if proc.returncode is not None:
                    raise ControlPlaneError(
                        f"{name} exited with {proc.returncode} while starting; the end of "
                        f"{self.logs[name]}:\n{self._tail(name)}")
                try:
                    async with session.get(url, ssl=ctx if ctx is not None else False,
                                           timeout=aiohttp.ClientTimeout(total=2)) as resp:
                        last = f"{resp.status} {(await resp.text())[:200]}"
                        if resp.status == 200:
                            return
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    last = str(exc) or type(exc).__name__
                await asyncio.sleep(0.2)
        raise ControlPlaneError(f"{name} did not become healthy within {timeout_s:g} s "
                                f"({url}: {last}); the end of {self.logs[name]}:\n"
                                f"{self._tail(name)}")

    async def start(self, nodes: dict[str, str], *, node_monitor_grace_s: int = 20) -> None:
        """Make the certificates, start etcd and the API server, wait for them, then start
        the controller manager and the scheduler (which need the API)."""
        binaries = find_binaries()
        cp = self.dir
        cp.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        pki = Pki(cp / "pki")
        self.ca = pki.ca.cert
        host = self.host
        api_port = free_port(host)
        self.url = f"https://{host}:{api_port}"
        serving = pki.issue("apiserver", "kube-apiserver", server=True,
                            ips=(host, KUBERNETES_SERVICE_IP, "127.0.0.1"),
                            dns=("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                 "kubernetes.default.svc.cluster.local", "localhost"))
        self.kubelet_serving = pki.issue("kubelet-serving", "kraft-sandbox-kubelet",
                                         server=True, ips=tuple(nodes.values()))
        # each kubelet's own identity, as the Node authorizer knows kubelets
        self.node_creds = {name: pki.issue(f"node-{name}", f"system:node:{name}",
                                           orgs=("system:nodes",)) for name in nodes}
        to_kubelet = pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                               orgs=("system:masters",))
        admin = pki.issue("admin", ADMIN_USER, orgs=("system:masters",))
        kcm = pki.issue("controller-manager", "system:kube-controller-manager")
        scheduler = pki.issue("scheduler", "system:kube-scheduler")
        self.node_agent = pki.issue("node-agent", NODE_AGENT_USER, orgs=(NODE_AGENT_GROUP,))
        sa = pki.key_pair("service-accounts")
        self.admin_kubeconfig = write_file(self.state_dir / "kubeconfig", kubeconfig_text(
            self.url, self.ca, ADMIN_USER, cert=admin))
        kcm_config = write_file(cp / "controller-manager.kubeconfig", kubeconfig_text(
            self.url, self.ca, "system:kube-controller-manager", cert=kcm))
        sched_config = write_file(cp / "scheduler.kubeconfig", kubeconfig_text(
            self.url, self.ca, "system:kube-scheduler", cert=scheduler))
        log.info("event=control_plane_pki dir=%s took_s=%.2f", cp, time.monotonic() - t0)

        etcd_port, etcd_peer = free_port(host), free_port(host)
        etcd_url = f"http://{host}:{etcd_port}"
        await self._spawn("etcd", [
            str(binaries["etcd"]), "--name", "sandbox", "--data-dir", str(cp / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://{host}:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://{host}:{etcd_peer}",
            "--initial-cluster", f"sandbox=http://{host}:{etcd_peer}",
            "--unsafe-no-fsync", "--log-level", "warn"])
        await self._wait_http("etcd", f"{etcd_url}/health", None, 30)
        await self._spawn("kube-apiserver", [
            str(binaries["kube-apiserver"]),
            "--etcd-servers", etcd_url,
            "--bind-address", host, "--secure-port", str(api_port),
            "--advertise-address", host,
            "--tls-cert-file", str(serving.cert), "--tls-private-key-file", str(serving.key),
            "--client-ca-file", str(self.ca),
            "--service-account-issuer", SERVICE_ACCOUNT_ISSUER,
            "--service-account-key-file", str(sa.cert),
            "--service-account-signing-key-file", str(sa.key),
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            "--kubelet-client-certificate", str(to_kubelet.cert),
            "--kubelet-client-key", str(to_kubelet.key),
            "--kubelet-certificate-authority", str(self.ca),
            "--kubelet-preferred-address-types", "InternalIP",
            "--profiling=false", "--v", "1"])
        await self._wait_http("kube-apiserver", f"{self.url}/readyz", self.ssl_context(admin),
                              90)
        log.info("event=apiserver_ready url=%s took_s=%.2f", self.url, time.monotonic() - t0)
        await self._spawn("kube-controller-manager", [
            str(binaries["kube-controller-manager"]),
            "--kubeconfig", str(kcm_config),
            "--authentication-kubeconfig", str(kcm_config),
            "--authorization-kubeconfig", str(kcm_config),
            "--bind-address", host, "--secure-port", str(free_port(host)),
            "--leader-elect=false", "--use-service-account-credentials",
            "--service-account-private-key-file", str(sa.key),
            "--root-ca-file", str(self.ca),
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--node-monitor-period", "2s",
            "--node-monitor-grace-period", f"{node_monitor_grace_s}s",
            "--profiling=false", "--v", "1"])
        await self._spawn("kube-scheduler", [
            str(binaries["kube-scheduler"]),
            "--kubeconfig", str(sched_config),
            "--authentication-kubeconfig", str(sched_config),
            "--authorization-kubeconfig", str(sched_config),
            "--bind-address", host, "--secure-port", str(free_port(host)),
            "--leader-elect=false", "--profiling=false", "--v", "1"])

    STOP_GRACE_S = {"kube-apiserver": 2.0}
    """kube-apiserver v1.35 finishes its graceful termination (requests drained, listener
    closed) in well under a second after SIGTERM, then does not exit: it would wait out
    the default 10 s on every stop. What it wrote is in etcd, stopped after it."""

    async def stop(self) -> None:
        """SIGTERM every process (the last started first), SIGKILL what outlives its grace
        (10 s; `STOP_GRACE_S`)."""
        for name in reversed(list(self.processes)):
            proc = self.processes[name]
            if proc.returncode is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), self.STOP_GRACE_S.get(name, 10.0))
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()

    def exited(self) -> list[str]:
        """The processes that ended by themselves (a control plane that is not whole)."""
        return [f"{name} (exit {p.returncode}; {self.logs[name]})"
                for name, p in self.processes.items() if p.returncode is not None]


@contextlib.asynccontextmanager
async def running_control_plane(state_dir: Path, host: str,
                                nodes: dict[str, str]) -> AsyncIterator[ControlPlane]:
    """Start the control plane (for the nodes named, by address) for the `async with`
    body; stop it after, even on error."""
    plane = ControlPlane(state_dir, host)
    try:
        await plane.start(nodes)
        yield plane
    finally:
        await plane.stop()


__all__ = ["BINARIES", "KUBELET_PORT", "NODE_AGENT_GROUP", "NODE_AGENT_USER", "ControlPlane",
           "ControlPlaneError", "Credential", "Pki", "bin_dir", "find_binaries",
           "kubeconfig_text", "running_control_plane", "write_file"]
