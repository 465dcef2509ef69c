"""What a container's process is made of: its pod's volumes as directories (a claim's volume,
`emptyDir` under the pod's directory, `configMap`/`secret` files written before each start),
and its command, environment and working directory. Each command runs with the `bin/` shims
first on `PATH` (`kraft ...` runs the installed kraft through `kraft_sandbox.launch`); a
`volumeMounts` path in the command, args, env values and config-map files is rewritten to the
directory that backs it. Env: `value` (with `$(VAR)` expansion), `fieldRef` (metadata.name,
.namespace, .uid, .labels['k'], .annotations['k'], spec.nodeName, spec.serviceAccountName,
status.podIP, status.hostIP), `configMapKeyRef`, `secretKeyRef`, `envFrom`."""

from __future__ import annotations

import base64
import os
import re
import shutil
from pathlib import Path
from typing import Any, Protocol

import kmock
from kraft_sandbox.emulator import ApiError, SandboxEmulator
from kraft_sandbox.nodes import NodeController
from kraft_sandbox.volumes import VolumeBinder

Obj = dict[str, Any]

CONFIGMAPS = kmock.resource("", "v1", "configmaps")
SECRETS = kmock.resource("", "v1", "secrets")

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SHIMS = ("kraft", "kraft-operator", "kopf", "kraft-sandbox")
INIT_SHIMS = ("dumb-init", "tini")


class NodeSettings(Protocol):
    """What container setup reads of the kubelet's settings (`kubelet.KubeletSettings`)."""

    @property
    def bin_dir(self) -> Path: ...

    @property
    def python(self) -> str: ...


class PodWorker(Protocol):
    """What container setup reads of one pod's worker (`kubelet.PodWorker`)."""

    pod: Obj
    ns: str
    name: str
    node: str
    ip: str
    dir: Path
    volume_paths: dict[str, Path]


class TokenSource(Protocol):
    """A bound token of the pod's ServiceAccount (None: there is no real API server)."""

    def __call__(self, worker: Any, audience: str | None, expiration_s: int) -> str | None: ...


class ContainerSetup:
    """Makes a pod's volumes and each container's argv, environment and working directory."""

    def __init__(self, api: SandboxEmulator, settings: NodeSettings, nodes: NodeController,
                 volumes: VolumeBinder, tokens: TokenSource | None = None) -> None:
        self.api = api
        self.settings = settings
        self.nodes = nodes
        self.volumes = volumes
        self.tokens = tokens

    def write_shims(self) -> None:
        """The programs a container's command may name, in `bin/` (first on its PATH)."""
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

    def prepare_volumes(self, worker: PodWorker) -> str | None:
        """Create each volume's directory and files; a message while one cannot be yet."""
        spec = worker.pod["spec"]
        worker.volume_paths = {}
        pending: list[tuple[Path, dict[str, bytes]]] = []
        for vol in spec.get("volumes") or []:
            name = vol["name"]
            if "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"]["claimName"]
                path = self.volumes.claim_dir(worker.ns, claim)
                if path is None:
                    return f'persistentvolumeclaim "{claim}" is not bound'
                if not path.is_dir():
                    return (f'the local volume of claim "{claim}" is gone (its node lost its '
                            "disks)")
            elif "projected" in vol:
                path = worker.dir / "volumes" / name
                projected = self._projected_files(worker, vol["projected"])
                if isinstance(projected, str):
                    return projected
                pending.append((path, projected))
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

    def _projected_files(self, worker: PodWorker, projected: Obj) -> dict[str, bytes] | str:
        """The files of a projected volume (what the ServiceAccount admission of a real API
        server adds to every pod: a token, the cluster's CA bundle, the namespace), or the
        message while a source is missing. The token is also the pod's credential: its
        kubeconfig (`pod_kubeconfig`) names the file."""
        files: dict[str, bytes] = {}
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                src = source["serviceAccountToken"]
                token = None
                if self.tokens is not None:
                    try:
                        token = self.tokens(worker, src.get("audience"),
                                            int(src.get("expirationSeconds", 3600)))
                    except ApiError as exc:
                        return f"service account token: {exc.message}"
                if token is not None:
                    files[src["path"]] = token.encode()
            elif "configMap" in source or "secret" in source:
                kind = "configMap" if "configMap" in source else "secret"
                src = dict(source[kind])
                if kind == "secret":
                    src["secretName"] = src.get("name", "")
                got = self._volume_files(worker.ns, {kind: src})
                if got is None:
                    return f'{kind.lower()} "{src.get("name")}" not found'
                files.update(got)
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    if "fieldRef" in item:
                        files[item["path"]] = self._field(
                            worker, item["fieldRef"]["fieldPath"]).encode()
        return files

    def pod_kubeconfig(self, worker: PodWorker, spec: Obj) -> str:
        """The KUBECONFIG a container gets. With the emulator: the sandbox's. With a real API
        server: one of the pod's own, naming the token file of its service-account volume
        (the mount at /var/run/secrets/kubernetes.io/serviceaccount, where a pod's clients
        look), or no credentials at all when the pod has none (automountServiceAccountToken:
        false), as a pod on a cluster has."""
        s = self.settings
        api_url = getattr(s, "api_url", "")
        if not api_url:
            return str(s.kubeconfig)
        from kraft_sandbox.controlplane import kubeconfig_text, write_file

        token_file = None
        for mount, host in self._mounts(worker, spec):
            if mount == SERVICE_ACCOUNT_DIR and (Path(host) / "token").is_file():
                token_file = Path(host) / "token"
        path = worker.dir / f"kubeconfig-{spec['name']}"
        write_file(path, kubeconfig_text(api_url, Path(str(getattr(s, "api_ca", ""))),
                                         f"{worker.ns}-{worker.name}", token_file=token_file,
                                         namespace=worker.ns))
        return str(path)

    def _volume_files(self, ns: str, vol: Obj) -> dict[str, bytes] | None:
        if "configMap" in vol:
            src = vol["configMap"]
            obj = self.api.read_object(CONFIGMAPS, ns, src.get("name", ""))
            if obj is None:
                return {} if src.get("optional") else None
            data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {})
                         .items()})
        else:
            src = vol["secret"]
            obj = self.api.read_object(SECRETS, ns, src.get("secretName", ""))
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
        """Each mount path in `text` replaced by its host directory, in one pass (longest
        mount first): a host directory that itself begins with a mount path (a state
        directory under /tmp, with an emptyDir at /tmp) is never rewritten again."""
        if not mounts:
            return text
        hosts = dict(mounts)
        pattern = "|".join(re.escape(m) for m, _h in sorted(mounts, key=lambda i: -len(i[0])))
        return re.sub(f"({pattern})" + r"(?=$|[/\s,:;\"'=)])",
                      lambda m: hosts[m.group(1)], text)

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
                 "status.hostIP": self.nodes.node_ip(worker.node),
                 "status.hostIPs": self.nodes.node_ip(worker.node)}
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
                obj = self.api.read_object(CONFIGMAPS, worker.ns, src["configMapRef"]["name"]) or {}
                env.update({prefix + k: v for k, v in (obj.get("data") or {}).items()})
            elif "secretRef" in src:
                obj = self.api.read_object(SECRETS, worker.ns, src["secretRef"]["name"]) or {}
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
                obj = self.api.read_object(CONFIGMAPS, worker.ns, r["name"]) or {}
                if r["key"] in (obj.get("data") or {}):
                    env[name] = obj["data"][r["key"]]
            elif "secretKeyRef" in ref:
                r = ref["secretKeyRef"]
                obj = self.api.read_object(SECRETS, worker.ns, r["name"]) or {}
                if r["key"] in (obj.get("data") or {}):
                    env[name] = base64.b64decode(obj["data"][r["key"]]).decode()
            else:
                env[name] = ""
        mounts = self._mounts(worker, spec)
        return {k: self._rewrite(v, mounts) for k, v in env.items()}

    def command(self, worker: PodWorker, spec: Obj) -> tuple[list[str], dict[str, str], str]:
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
            "KUBECONFIG": self.pod_kubeconfig(worker, spec),
            "SANDBOX_POD_IP": worker.ip,
            "SANDBOX_HOSTS": str(s.hosts_file),
            "SANDBOX_NAMESPACE": worker.ns,
        }
        env.update(user_env)
        workdir = spec.get("workingDir")
        cwd = self._rewrite(workdir, mounts) if workdir else str(worker.dir)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        return argv, env, cwd
