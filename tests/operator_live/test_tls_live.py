"""The operator's PKI in the sandbox: the real operator (a pod) issues a new quorum's CAs and
certificates, the `kraft run` pods form the quorum over mTLS from the Secrets mounted into
them and take writes; a plaintext client is refused at the controller port while the
operator's own certificate reads the quorum; then a CA renewal rolls the pods (the leader
last) with writes acknowledged throughout, none lost; and no PEM text is in the operator's log,
the Events or the status."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kraft_operator import pki
from kraft_sandbox.handle import SandboxHandle

from kraft.admin import QuorumClient
from tests.operator_live.test_live import (
    NS,
    apply,
    crd_sandbox,
    events,
    get,
    operator_log,
    operator_pod,
    quorum,
    ready,
)
from tests.sandbox.conftest import wait_for
from tests.sandbox.test_quorum import kv

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operator_live")]


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    with crd_sandbox(tmp_path_factory.mktemp("tls")) as handle:
        apply(handle, operator_pod("op-tls"))
        apply(handle, quorum())
        yield handle


def secret(sb: SandboxHandle, name: str) -> dict[str, str]:
    obj = get(sb, "secret", name)
    return {k: base64.b64decode(v).decode() for k, v in obj["data"].items()}


def describe(sb: SandboxHandle, tls: Any) -> Any:
    """DescribeCluster (Describe) from the test process, at the pods' addresses (cluster
    names do not resolve outside the sandbox's pods, so the name check is left out here; the
    operator's own calls, by name, check it)."""
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in get(sb, "pods")["items"]
           if p["metadata"]["name"].startswith("kq-")}

    async def go() -> Any:
        async with QuorumClient([f"{ips[n]}:9093" for n in sorted(ips)], timeout_s=5,
                                tls=tls) as admin:
            return await admin.describe_cluster()

    return asyncio.run(go())


def operator_context(sb: SandboxHandle, server_name_check: bool) -> ssl.SSLContext:
    data = secret(sb, "kq-operator-certs")
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=data["truststore.pem"])
    ctx.check_hostname = server_name_check
    with tempfile.NamedTemporaryFile("w", suffix=".pem") as f:
        f.write(data["operator.pem"])
        f.flush()
        ctx.load_cert_chain(f.name)
    return ctx


def no_pem(sb: SandboxHandle) -> None:
    said = operator_log(sb, "op-tls") + json.dumps(events(sb)) + \
        json.dumps(get(sb, "kq", "kq").get("status"))
    for needle in ("BEGIN", "PRIVATE KEY"):
        assert needle not in said


def test_a_quorum_forms_over_mtls_from_the_operators_secrets(sb: SandboxHandle) -> None:
    obj = wait_for("a 3-voter quorum Ready over mTLS", lambda: ready(sb, "kq", 3), timeout_s=180)
    assert obj["status"]["tls"]["enabled"] is True
    props = get(sb, "configmap", "kq-config")["data"]["server-0.properties"]
    assert "listener.security.protocol.map=CONTROLLER:SSL" in props
    assert "listener.name.controller.ssl.client.auth=required" in props
    pod = get(sb, "pod", "kq-0")
    assert {"name": "tls", "secret": {"secretName": "kq-0-certs", "defaultMode": 0o440}} in \
        pod["spec"]["volumes"]
    ca = secret(sb, "kq-cluster-ca-cert")["ca.crt"]
    leaf = pki.split_certs(secret(sb, "kq-0-certs")["node.pem"])[0]
    assert pki.signed_by(leaf, ca)
    # writes through the HTTP port (plaintext: not covered by this change), replicated
    resolver = sb.resolver(NS)
    status, _, _ = kv(resolver, "PUT", "kq-0.kq", "greeting", b"over-mtls")
    assert status in (200, 201, 204), status
    status, body, _ = kv(resolver, "GET", "kq-2.kq", "greeting")
    assert (status, body) == (200, b"over-mtls")
    # the controller port: a plaintext client gets nothing, the operator's certificate reads
    with pytest.raises(Exception):  # noqa: B017 (whatever a refused handshake raises)
        describe(sb, None)
    ctx = operator_context(sb, server_name_check=False)
    info = describe(sb, lambda: ctx)
    assert info.leader_id in (0, 1, 2) and len(info.controllers) == 3
    no_pem(sb)


@pytest.mark.skipif(os.environ.get("KRAFT_SOAK_CA_RENEWAL") != "1",
                    reason="three rolls of 3 pods (about 3 minutes): `make soak` runs it "
                    "(KRAFT_SOAK_CA_RENEWAL=1)")
def test_a_ca_renewal_rolls_the_pods_and_loses_no_acknowledged_write(
        sb: SandboxHandle) -> None:
    wait_for("the quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=180)
    old_ca = secret(sb, "kq-cluster-ca-cert")["ca.crt"]
    resolver = sb.resolver(NS)
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            key = f"w{i}"
            try:
                status, _, _ = kv(resolver, "PUT", f"kq-{i % 3}.kq", key, str(i).encode())
            except (OSError, AssertionError):
                status = 0
            if status in (200, 201, 204):
                acked.append(key)
            i += 1
            time.sleep(0.05)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        # a renewal window longer than what is left of the CAs (365 days) starts their
        # renewal at once; the new ones (3650 days) are outside it, so it runs once
        sb.kubectl("patch", "kq", "kq", "--type=merge", "-p", json.dumps(
            {"spec": {"tls": {"validityDays": 3650, "renewalDays": 3649}}}))
        wait_for("a CA renewal started", lambda: (get(sb, "kq", "kq").get("status") or {})
                 .get("tls", {}).get("caRenewal"), timeout_s=60)

        def renewed() -> bool:
            obj = ready(sb, "kq", 3)
            certs = secret(sb, "kq-cluster-ca-cert")
            return bool(obj and not obj["status"]["tls"].get("caRenewal")
                        and set(certs) == {"ca.crt"} and certs["ca.crt"] != old_ca)

        wait_for("the CA renewal done and the quorum Ready", renewed, timeout_s=420)
    finally:
        stop.set()
        thread.join(timeout=30)
    new_ca = secret(sb, "kq-cluster-ca-cert")["ca.crt"]
    for i in range(3):
        leaf = pki.split_certs(secret(sb, f"kq-{i}-certs")["node.pem"])[0]
        assert pki.signed_by(leaf, new_ca) and not pki.signed_by(leaf, old_ca)
    reasons = [e["reason"] for e in events(sb)]
    assert reasons.count("DeletedPodRolling") >= 3, reasons  # rolled, the leader last
    assert acked, "no write was acknowledged during the renewal"
    lost = []
    for key in acked:
        status, body, _ = kv(resolver, "GET", "kq-0.kq", key)
        if (status, body) != (200, key[1:].encode()):
            lost.append(key)
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged writes lost: {lost[:5]}"
    no_pem(sb)
