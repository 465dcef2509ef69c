"""The operator's PKI against the emulated API: the Secrets made for a quorum with TLS, the
node's server.properties and mounts, a CA renewal in its three rolled steps, a user's CA, and
no key material anywhere but in the Secrets' data."""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kraft_operator import models, pki, render
from kraft_operator.actions import tls
from kraft_operator.kube import Kube, NotFound
from kraft_operator.planner import CreatePod, FormatMode, pod_spec_hash
from kraft_sandbox.apiserver import serve
from kubernetes import client

from kraft.config.server_properties import ServerProperties

NOW = datetime.datetime.now(datetime.UTC).replace(microsecond=0)  # X.509 keeps seconds
DAY = datetime.timedelta(days=1)
D0 = "AAAAAAAAAAAAAAAAAAAAAQ"
CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"


def body(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": models.API_VERSION, "kind": models.KIND,
                           "metadata": {"name": "kq", "namespace": "default", "uid": "u-1"},
                           "spec": {"replicas": 3, **spec}}
    if status is not None:
        obj["status"] = status
    return obj


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with serve() as api:
        cfg = client.Configuration()
        cfg.host = api.url
        yield Kube(client.ApiClient(cfg))


async def secret(kube: Kube, name: str) -> dict[str, str]:
    obj = await kube.get("v1", "secrets", "default", name)
    return {k: base64.b64decode(v).decode() for k, v in obj["data"].items()}


def pods(ref: render.QuorumRef, generation: str, ready: bool = True) -> list[dict[str, Any]]:
    """The quorum's pods as listed: every one carrying the hash of this trust generation."""
    return [{"metadata": {"name": ref.pod_name(i), "labels": ref.node_labels(i),
                          "annotations": {models.POD_SPEC_HASH_ANNOTATION:
                                          pod_spec_hash(ref.spec, generation)}},
             "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}
            for i in range(ref.spec.replicas)]


def test_tls_is_on_for_a_new_quorum_and_off_for_one_formatted_without_it() -> None:
    assert render.QuorumRef.from_body(body()).tls
    assert not render.QuorumRef.from_body(body({"clusterId": CLUSTER})).tls
    assert render.QuorumRef.from_body(body({"clusterId": CLUSTER, "tls": {"enabled": True}})).tls
    assert not render.QuorumRef.from_body(body(tls={"enabled": False})).tls
    # a running plaintext quorum whose spec asks for TLS serves plaintext until a migration
    # (kraft_operator.planner.tls_migration) has moved it; its first phase binds TLS beside
    ref = render.QuorumRef.from_body(body({"clusterId": CLUSTER}, tls={"enabled": True}))
    assert not ref.tls and ref.listeners.wanted_ssl
    migrating = render.QuorumRef.from_body(body({"clusterId": CLUSTER, "tls": {
        "enabled": False, "migration": {"protocol": "SSL", "listener": "CONTROLLER_SSL",
                                        "port": 9094, "phase": 1}}}, tls={"enabled": True}))
    assert migrating.tls and migrating.layout.names == ("CONTROLLER", "CONTROLLER_SSL")


def test_a_tls_nodes_properties_and_pod_mount_its_secret_read_only() -> None:
    ref = render.QuorumRef.from_body(body())
    props = ServerProperties.parse(render.config_map(ref)["data"]["server-1.properties"])
    text = props.render()
    assert "listener.security.protocol.map=CONTROLLER:SSL" in text
    assert "listener.name.controller.ssl.client.auth=required" in text
    assert f"listener.name.controller.ssl.keystore.location={render.TLS_DIR}/node.pem" in text
    assert f"listener.name.controller.ssl.truststore.location={render.TLS_DIR}/truststore.pem" \
        in text
    assert "kraft.authorizer.cluster.action.principals=User:CN=node-0;User:CN=node-1" in text
    assert "kraft.authorizer.alter.principals=User:CN=kraft-operator;" in text
    pod = render.pod(ref, CreatePod(1, D0, FormatMode.JOIN, True, "h"), CLUSTER)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "kq-1-certs"
    for c in pod["spec"]["containers"] + pod["spec"]["initContainers"]:
        mount = next(m for m in c["volumeMounts"] if m["name"] == "tls")
        assert mount == {"name": "tls", "mountPath": render.TLS_DIR, "readOnly": True}
        assert "subPath" not in mount  # a subPath mount is never updated by the kubelet
    plain = render.QuorumRef.from_body(body({"clusterId": CLUSTER}))
    assert "ssl" not in render.config_map(plain)["data"]["server-1.properties"]
    ppod = render.pod(plain, CreatePod(1, D0, FormatMode.JOIN, True, "h"), CLUSTER)
    assert "tls" not in {v["name"] for v in ppod["spec"]["volumes"]}


async def test_the_secrets_of_a_new_quorum(kube: Kube, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    ref = render.QuorumRef.from_body(body())
    state = await tls.ensure(kube, ref, [], NOW)
    assert state.problem is None and state.generation.startswith("tls-")
    for name in ("kq-cluster-ca", "kq-cluster-ca-cert", "kq-clients-ca", "kq-clients-ca-cert",
                 "kq-0-certs", "kq-1-certs", "kq-2-certs", "kq-operator-certs"):
        obj = await kube.get("v1", "secrets", "default", name)
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1", name
    assert set(await secret(kube, "kq-cluster-ca")) == {"ca.key"}  # the key apart
    ca_cert = (await secret(kube, "kq-cluster-ca-cert"))["ca.crt"]
    assert "PRIVATE" not in ca_cert
    node = await secret(kube, "kq-1-certs")
    leaf = pki.split_certs(node["node.pem"])[0]
    info = pki.CertInfo.parse(leaf)
    assert info.subject_cn == "node-1" and set(info.dns_names) == set(ref.host_names(1))
    assert "kq-1.kq.default.svc.cluster.local" in info.dns_names
    assert pki.signed_by(leaf, ca_cert)
    clients_cert = (await secret(kube, "kq-clients-ca-cert"))["ca.crt"]
    assert [pki.fingerprint_of(c) for c in pki.split_certs(node["truststore.pem"])] == \
        [pki.fingerprint_of(ca_cert), pki.fingerprint_of(clients_cert)]
    op = await secret(kube, "kq-operator-certs")
    assert pki.signed_by(pki.split_certs(op["operator.pem"])[0], clients_cert)
    assert state.client is not None and state.client() is not None
    # a second pass changes nothing, and the same trust generation
    again = await tls.ensure(kube, ref, pods(ref, state.generation), NOW)
    assert again.changes == () and again.generation == state.generation
    said = caplog.text + repr(state.status) + repr(state.changes)
    assert "BEGIN" not in said and "PRIVATE KEY" not in said


async def user_ca(kube: Kube, pair: pki.KeyPair, keys: tuple[str, str] = ("tls.crt", "tls.key"),
                  name: str = "my-ca") -> None:
    await kube.create("v1", "secrets", "default", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "data": {keys[0]: base64.b64encode(pair.cert_pem.encode()).decode(),
                 keys[1]: base64.b64encode(pair.key_pem.encode()).decode()}})


async def test_a_leaf_in_its_window_is_reissued_with_no_new_generation(kube: Kube) -> None:
    await user_ca(kube, pki.generate_ca("long-lived", NOW, 1000), ("ca.crt", "ca.key"))
    ref = render.QuorumRef.from_body(body(tls={"caSecretName": "my-ca", "validityDays": 100,
                                               "renewalDays": 10}))
    first = await tls.ensure(kube, ref, [], NOW)
    before = await secret(kube, "kq-0-certs")
    same = await tls.ensure(kube, ref, pods(ref, first.generation), NOW + 89 * DAY)
    assert same.changes == () and await secret(kube, "kq-0-certs") == before
    later = await tls.ensure(kube, ref, pods(ref, first.generation), NOW + 91 * DAY)
    after = await secret(kube, "kq-0-certs")
    assert after["node.pem"] != before["node.pem"]
    info = pki.CertInfo.parse(pki.split_certs(after["node.pem"])[0])
    assert info.not_after == NOW + 191 * DAY
    assert later.generation == first.generation  # no roll: the node reloads the file


async def test_a_ca_renewal_trusts_both_then_reissues_then_drops_the_old(kube: Kube) -> None:
    ref = render.QuorumRef.from_body(body())
    g0 = (await tls.ensure(kube, ref, [], NOW)).generation
    old_ca = (await secret(kube, "kq-cluster-ca-cert"))["ca.crt"]
    old_leaf = (await secret(kube, "kq-1-certs"))["node.pem"]
    later = NOW + 340 * DAY  # inside the CAs' (and the leaves') 30-day window

    # step 1: a new CA, trusted beside the old; the certificates stay the old CA's
    one = await tls.ensure(kube, ref, pods(ref, g0), later)
    cert_secret = await secret(kube, "kq-cluster-ca-cert")
    assert set(cert_secret) == {"ca.crt", "ca-0.crt"} and cert_secret["ca-0.crt"] == old_ca
    new_ca = cert_secret["ca.crt"]
    node = await secret(kube, "kq-1-certs")
    assert node["node.pem"] == old_leaf
    trusted = {pki.fingerprint_of(c) for c in pki.split_certs(node["truststore.pem"])}
    assert {pki.fingerprint_of(old_ca), pki.fingerprint_of(new_ca)} <= trusted
    assert one.generation != g0 and one.status and one.status.get("caRenewal")
    # the pods have not rolled onto that trust yet: nothing moves
    waiting = await tls.ensure(kube, ref, pods(ref, g0), later)
    assert waiting.generation == one.generation
    assert (await secret(kube, "kq-1-certs"))["node.pem"] == old_leaf
    not_ready = await tls.ensure(kube, ref, pods(ref, one.generation, ready=False), later)
    assert (await secret(kube, "kq-1-certs"))["node.pem"] == old_leaf
    assert not_ready.generation == one.generation

    # step 2: every pod trusts the new CA: the certificates are re-issued by it
    two = await tls.ensure(kube, ref, pods(ref, one.generation), later)
    node = await secret(kube, "kq-1-certs")
    assert pki.signed_by(pki.split_certs(node["node.pem"])[0], new_ca)
    assert set(await secret(kube, "kq-cluster-ca-cert")) == {"ca.crt", "ca-0.crt"}
    assert two.generation != one.generation
    clients_new = (await secret(kube, "kq-clients-ca-cert"))["ca.crt"]
    op = await secret(kube, "kq-operator-certs")
    assert pki.signed_by(pki.split_certs(op["operator.pem"])[0], clients_new)

    # step 3: every pod runs with them: the old CA is dropped
    await tls.ensure(kube, ref, pods(ref, one.generation), later)  # not rolled yet
    assert "ca-0.crt" in await secret(kube, "kq-cluster-ca-cert")
    three = await tls.ensure(kube, ref, pods(ref, two.generation), later)
    assert set(await secret(kube, "kq-cluster-ca-cert")) == {"ca.crt"}
    assert set(await secret(kube, "kq-clients-ca-cert")) == {"ca.crt"}
    node = await secret(kube, "kq-1-certs")
    trusted = {pki.fingerprint_of(c) for c in pki.split_certs(node["truststore.pem"])}
    assert pki.fingerprint_of(old_ca) not in trusted and pki.fingerprint_of(new_ca) in trusted
    assert three.generation not in (g0, one.generation, two.generation)
    assert three.status and three.status.get("caRenewal") is None


async def test_a_users_ca_signs_the_certificates_and_is_never_renewed(kube: Kube) -> None:
    ref = render.QuorumRef.from_body(body(tls={"caSecretName": "my-ca"}))
    missing = await tls.ensure(kube, ref, [], NOW)
    assert missing.problem and "my-ca" in missing.problem and "not found" in missing.problem
    mine = pki.generate_ca("my CA", NOW - 300 * DAY, 330)  # inside the window: never renewed
    await user_ca(kube, mine)
    state = await tls.ensure(kube, ref, [], NOW)
    assert state.problem is None
    node = await secret(kube, "kq-0-certs")
    assert pki.signed_by(pki.split_certs(node["node.pem"])[0], mine.cert_pem)
    assert pki.split_certs(node["truststore.pem"]) == [mine.cert_pem]
    for name in ("kq-cluster-ca", "kq-cluster-ca-cert", "kq-clients-ca"):
        with pytest.raises(NotFound):
            await kube.get("v1", "secrets", "default", name)


async def test_an_issuer_ref_and_a_paused_quorum_make_nothing(kube: Kube) -> None:
    ref = render.QuorumRef.from_body(body(tls={"issuerRef": {"name": "letsencrypt"}}))
    state = await tls.ensure(kube, ref, [], NOW)
    assert state.problem and "issuerRef" in state.problem
    paused = render.QuorumRef.from_body(body())
    state = await tls.ensure(kube, paused, [], NOW, write=False)
    assert await kube.list("v1", "secrets", "default") == []
