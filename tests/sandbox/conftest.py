"""Fixtures for the sandbox: a running sandbox in a child process, and the emulated API alone.

`sandbox` (function scope) gives a `SandboxHandle`: `.url`, `.kubeconfig`, `.kubectl(...)`
(the real kubectl v1.35 from `make k8s-bins`), `.core_v1()` (a kubernetes client),
`.faults` (crash, pause, resume, wipe_pvc, node_down, node_up, kill_operator) and
`.resolver(namespace)` (cluster DNS as a pod sees it). `api` gives the emulator served
in-process, for tests of the API alone.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kraft_sandbox.apiserver import RunningApi, serve
from kraft_sandbox.handle import SandboxHandle, find_kubectl, start_sandbox


@pytest.fixture
def kubectl_path() -> str:
    path = find_kubectl()
    if path is None:
        pytest.fail("no kubectl: run `make k8s-bins` (the tests need the real kubectl)")
    return path


@pytest.fixture
def sandbox(tmp_path: Path, kubectl_path: str) -> Iterator[SandboxHandle]:
    with start_sandbox(tmp_path / "sandbox", nodes=3, backoff_base_s=0.2,
                       heartbeat_s=0.5) as handle:
        yield handle


@pytest.fixture
async def api() -> AsyncIterator[RunningApi]:
    async with serve() as running:
        yield running


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60.0,
             every_s: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after a bound."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})")
