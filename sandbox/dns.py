"""Cluster DNS of the sandbox: the names Kubernetes gives Services and Pods, as a hosts file.

The sandbox's DNS is a file (`IP NAME` per line, one line per address) that the kubelet
rewrites whenever a Pod or Service changes, and that every pod process reads through the
launcher (`kraft_sandbox.launch`), which answers `socket.getaddrinfo` from it. The
machine's `/etc/hosts` and resolver are never touched.

Records follow Kubernetes' DNS specification for Services and Pods:

- `SVC.NS.svc.cluster.local`: the addresses of the Service's endpoints: the Pods its
  selector matches that have an IP and are Ready (or every one with an IP when the Service
  sets `publishNotReadyAddresses`). A ClusterIP Service resolves to the same addresses
  (there is no kube-proxy: clients connect to the Pod's port, so `port` must equal
  `targetPort`);
- `HOSTNAME.SVC.NS.svc.cluster.local` for a Pod with `spec.hostname` and `spec.subdomain`
  naming a headless Service (`clusterIP: None`) of its namespace that selects it, on the
  same readiness rule (a headless Service for a quorum sets `publishNotReadyAddresses`,
  because pods must find each other before any is ready).

A pod resolves names with the search path of its namespace (`NS.svc.cluster.local`,
`svc.cluster.local`, `cluster.local`), so `POD.SVC`, `POD.SVC.NS` and `POD.SVC.NS.svc` work
as they do in a cluster. A name under `cluster.local` with no record does not exist.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CLUSTER_DOMAIN = "cluster.local"

Obj = dict[str, Any]


def _selects(service: Obj, pod: Obj) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector or pod["metadata"].get("namespace") != service["metadata"].get("namespace"):
        return False
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _pod_ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def records(pods: Iterable[Obj], services: Iterable[Obj]) -> list[tuple[str, str]]:
    """(name, ip) for every Service and per-pod name the cluster answers."""
    pods = [p for p in pods if (p.get("status") or {}).get("podIP")
            and not p["metadata"].get("deletionTimestamp")]
    out: list[tuple[str, str]] = []
    for svc in services:
        meta, spec = svc["metadata"], svc.get("spec") or {}
        base = f"{meta['name']}.{meta.get('namespace', 'default')}.svc.{CLUSTER_DOMAIN}"
        not_ready_ok = bool(spec.get("publishNotReadyAddresses"))
        headless = spec.get("clusterIP") == "None"
        for pod in pods:
            if not _selects(svc, pod) or not (not_ready_ok or _pod_ready(pod)):
                continue
            ip = pod["status"]["podIP"]
            out.append((base, ip))
            pspec = pod.get("spec") or {}
            if headless and pspec.get("hostname") and pspec.get("subdomain") == meta["name"]:
                out.append((f"{pspec['hostname']}.{base}", ip))
    return out


def write_hosts(path: Path, entries: Iterable[tuple[str, str]]) -> bool:
    """Write the hosts file atomically; returns whether its content changed."""
    text = "".join(f"{ip} {name}\n" for name, ip in sorted(set(entries)))
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True


class Resolver:
    """Answers cluster names from the hosts file, re-read whenever it changes."""

    def __init__(self, path: Path | str, namespace: str = "default") -> None:
        self.path = Path(path)
        self.namespace = namespace
        self._stamp: tuple[int, int] | None = None
        self._table: dict[str, list[str]] = {}

    def _load(self) -> dict[str, list[str]]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._table = None, {}
            return self._table
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            table: dict[str, list[str]] = {}
            for line in self.path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2:
                    table.setdefault(parts[1].lower(), []).append(parts[0])
            self._stamp, self._table = stamp, table
        return self._table

    def candidates(self, name: str) -> list[str]:
        """The fully qualified names tried for `name`, in the pod's search order."""
        name = name.lower()
        if name.endswith("."):
            return [name[:-1]]
        search = [f"{self.namespace}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}",
                  CLUSTER_DOMAIN]
        out = [name] if name.endswith(CLUSTER_DOMAIN) else []
        out += [f"{name}.{s}" for s in search if not name.endswith(CLUSTER_DOMAIN)]
        return out

    def lookup(self, name: str) -> list[str] | None:
        """The addresses of `name` (shuffled, as DNS round-robin does); [] when it is a
        cluster name without a record (NXDOMAIN); None when it is not a cluster name."""
        table = self._load()
        for fqdn in self.candidates(name):
            if fqdn in table:
                ips = list(table[fqdn])
                random.shuffle(ips)
                return ips
        plain = name.lower().rstrip(".")
        if plain.endswith((".svc", "." + CLUSTER_DOMAIN)) or ".svc." in plain:
            return []
        if "." in plain:
            # `POD.SVC` / `SVC.NS` forms: a cluster name when a Service of that name exists.
            services = {key.split(".")[0] for key in table} | {
                key.split(".")[1] for key in table if key.count(".") >= 5}
            labels = plain.split(".")
            if labels[-1] in services or (len(labels) >= 2 and labels[1] in services):
                return []
        return None
