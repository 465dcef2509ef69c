"""Run the emulated API server on a loopback port and write a kubeconfig for it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import kmock
from kraft_sandbox.emulator import SandboxEmulator


@dataclass(frozen=True, slots=True)
class RunningApi:
    """A served emulator: the object itself (for in-process use) and its URL."""

    emulator: SandboxEmulator
    url: str


def kubeconfig_text(url: str, namespace: str = "default") -> str:
    """A kubeconfig naming the sandbox cluster (no credentials: the API takes none)."""
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: kraft-sandbox\n  cluster:\n    server: {url}\n"
        "users:\n"
        "- name: kraft-sandbox\n  user: {}\n"
        "contexts:\n"
        "- name: kraft-sandbox\n  context:\n    cluster: kraft-sandbox\n"
        f"    user: kraft-sandbox\n    namespace: {namespace}\n"
        "current-context: kraft-sandbox\n"
        "preferences: {}\n"
    )


def write_kubeconfig(path: Path, url: str, namespace: str = "default") -> Path:
    """Write the kubeconfig atomically; returns its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(kubeconfig_text(url, namespace))
    tmp.replace(path)
    return path


@contextlib.asynccontextmanager
async def serve(host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[RunningApi]:
    """Serve a fresh emulator on `host:port` (0: any free port) for the `async with` body."""
    async with SandboxEmulator() as emulator, kmock.Server(emulator, host=host,
                                                           port=port or None) as server:
        # The namespaces every cluster starts with.
        for name in ("default", "kube-system", "kube-node-lease"):
            emulator.create_object(kmock.resource("", "v1", "namespaces"), None,
                             {"metadata": {"name": name}})
        yield RunningApi(emulator, str(server.url).rstrip("/"))
