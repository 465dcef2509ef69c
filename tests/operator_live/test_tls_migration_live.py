"""A TLS migration run by the real operator in the sandbox: a running plaintext quorum's
spec.tls.enabled is set to true, and the operator moves it to mTLS by three rolls (each
phase recorded in status.tls.migration and told by an Event, the Service and NetworkPolicy
opening both controller ports meanwhile), with writes acknowledged throughout and none
lost; then back to plaintext the same way.

Six rolls of three pods take about two minutes with the sandbox's start: `make soak` runs it
(KRAFT_SOAK_TLS_MIGRATION=1); the
planner's side is tests/operator/test_planner_tls_migration.py and the nodes' side
tests/node/test_tls_migration.py, both in `make test`."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kraft_sandbox.handle import SandboxHandle

from tests.operator_live.test_live import (
    NS,
    apply,
    crd_sandbox,
    events,
    get,
    operator_pod,
    quorum,
    ready,
)
from tests.sandbox.conftest import wait_for
from tests.sandbox.test_quorum import kv

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operator_live"),
              pytest.mark.skipif(os.environ.get("KRAFT_SOAK_TLS_MIGRATION") != "1",
                                 reason="six rolls of 3 pods (about 2 minutes): `make soak` runs it "
                                 "(KRAFT_SOAK_TLS_MIGRATION=1)")]


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    with crd_sandbox(tmp_path_factory.mktemp("tls-migration")) as handle:
        apply(handle, operator_pod("op-mig"))
        apply(handle, quorum(tls={"enabled": False}))
        yield handle


class Writer:
    """PUTs through the nodes' HTTP ports, one after another; the acknowledged ones kept."""

    def __init__(self, sb: SandboxHandle, prefix: str) -> None:
        self.resolver = sb.resolver(NS)
        self.prefix = prefix
        self.acked: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            key = f"{self.prefix}{i}"
            try:
                status, _, _ = kv(self.resolver, "PUT", f"kq-{i % 3}.kq", key, str(i).encode())
            except (OSError, AssertionError):
                status = 0
            if status in (200, 201, 204):
                self.acked.append(key)
            i += 1
            time.sleep(0.05)

    def lost(self) -> list[str]:
        out = []
        for key in self.acked:
            status, body, _ = kv(self.resolver, "GET", "kq-0.kq", key)
            if (status, body) != (200, key[len(self.prefix):].encode()):
                out.append(key)
        return out


def both_ports_open(sb: SandboxHandle) -> bool:
    service = {p["port"] for p in get(sb, "service", "kq")["spec"]["ports"]}
    policy = {p["port"] for p in get(sb, "networkpolicy", "kq")["spec"]["ingress"][0]["ports"]}
    return {9093, 9094} <= service and policy == {9093, 9094}


def migrate(sb: SandboxHandle, enabled: bool, prefix: str) -> tuple[list[dict[str, Any]], int]:
    """Flip spec.tls.enabled and wait for the migration to end with the quorum Ready; the
    phases seen in status (in order, without repeats) and the writes acknowledged."""
    seen: list[dict[str, Any]] = []
    with Writer(sb, prefix) as writer:
        sb.kubectl("patch", "kq", "kq", "--type=merge", "-p",
                   json.dumps({"spec": {"tls": {"enabled": enabled}}}))

        def done() -> bool:
            obj = get(sb, "kq", "kq") or {}
            tls = (obj.get("status") or {}).get("tls") or {}
            mig = tls.get("migration")
            if mig and (not seen or seen[-1]["phase"] != mig["phase"]):
                seen.append(mig)
                if mig["phase"] in (1, 2):  # both ports open (from the pass after the record)
                    wait_for("the Service and the NetworkPolicy open both controller ports",
                             lambda: both_ports_open(sb), timeout_s=60)
            return bool(tls.get("enabled") is enabled and not mig and ready(sb, "kq", 3))

        wait_for(f"the migration to tls.enabled={enabled} done, the quorum Ready", done,
                 timeout_s=900)
    lost = writer.lost()
    assert writer.acked, "no write was acknowledged during the migration"
    assert not lost, f"{len(lost)} of {len(writer.acked)} acknowledged writes lost: {lost[:5]}"
    return seen, len(writer.acked)


def test_a_plaintext_quorum_moves_to_mtls_and_back_by_rolls_without_losing_writes(
        sb: SandboxHandle) -> None:
    obj = wait_for("a plaintext 3-voter quorum Ready", lambda: ready(sb, "kq", 3),
                   timeout_s=240)
    assert obj["status"]["tls"]["enabled"] is False
    started = time.monotonic()
    seen, acked = migrate(sb, True, "on")
    to_tls = time.monotonic() - started
    assert [m["phase"] for m in seen] == [1, 2, 3], seen
    status = get(sb, "kq", "kq")["status"]["tls"]
    assert (status["listener"], status["port"]) == ("CONTROLLER_SSL", 9094)
    props = get(sb, "configmap", "kq-config")["data"]["server-0.properties"]
    assert "controller.listener.names=CONTROLLER_SSL" in props
    assert "listener.name.controller_ssl.ssl.client.auth=required" in props
    assert "kraft.authorizer.cluster.action.principals=" in props
    rules = get(sb, "networkpolicy", "kq")["spec"]["ingress"]
    assert [p["port"] for p in rules[0]["ports"]] == [9094]
    reasons = [e["reason"] for e in events(sb)]
    assert reasons.count("TlsMigrationPhase") >= 3 and "TlsMigrationComplete" in reasons
    started = time.monotonic()
    back, acked_back = migrate(sb, False, "off")
    to_plain = time.monotonic() - started
    assert [m["phase"] for m in back] == [1, 2, 3], back
    status = get(sb, "kq", "kq")["status"]["tls"]
    assert (status["enabled"], status["listener"], status["port"]) == (
        False, "CONTROLLER", 9093)
    print(f"\nto mTLS: {to_tls:.0f} s, {acked} writes acknowledged; back to plaintext: "
          f"{to_plain:.0f} s, {acked_back} writes acknowledged; none lost")
