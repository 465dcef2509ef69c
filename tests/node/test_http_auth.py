"""The KV API secured (docs/security.md, "The HTTP port"): one `kraft run` node serving
HTTPS with a token file and client certificates mapped to scopes, driven over loopback, and
its binary client port held to the same settings (TLS, AUTH frames, the same scopes).

No credential or an unknown token answers 401 with `WWW-Authenticate: Bearer`, a credential
without the scope 403, and neither applies anything; the probes stay open; a rotated token
file and a renewed certificate count from the next request or connection, without a restart;
a client that trusts another CA, a client certificate from another CA and plain HTTP are
refused.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import logging
import os
import secrets
import socket
import ssl
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography import x509

from kraft.admin import QuorumClient
from kraft.admin.http_credentials import HttpCredentials
from kraft.admin.kv_client import Forbidden, KvClient, OutcomeUnknown, Unauthenticated
from kraft.cli.local import HttpResult, LocalCluster, http_call
from kraft.cli.main import main
from kraft.config.http_security import HttpSecurity
from kraft.server.client_protocol import ClientServer
from kraft.server.http_api import HttpApiServer
from tests.node.conftest import FAST_TIMEOUTS, address_prefix, own_host
from tests.support.http_certs import Ca

pytestmark = pytest.mark.xdist_group("http-auth")  # one node for the whole module

READ, WRITE, ADMIN = (secrets.token_urlsafe(24) for _ in range(3))
TOKENS = f"# test tokens\n{READ},dashboard,read\n{WRITE},writer,write\n\n{ADMIN},ops,admin\n"


@dataclass
class World:
    """The running node and the files and credentials the tests use."""

    cluster: LocalCluster
    address: str
    ca: Ca
    other_ca: Ca
    cafile: Path
    tokens: Path
    keystore: Path
    base: Path

    def creds(self, token: str | None = None, **kwargs: Any) -> HttpCredentials:
        return HttpCredentials(token=token, cafile=str(self.cafile), **kwargs)

    def call(self, method: str, path: str, token: str | None = None, body: bytes | None = None,
             **kwargs: Any) -> HttpResult:
        return http_call(self.address, method, path, body, timeout=10,
                         credentials=self.creds(token, **kwargs))

    def value(self, key: str) -> bytes | None:
        """The key's value as the admin token reads it (linearizable)."""
        r = self.call("GET", f"/v1/kv/{key}", ADMIN)
        assert r.status in (200, 404), r
        return r.body if r.status == 200 else None

    def client_cert(self, ca: Ca, common_name: str, org: str | None = None) -> dict[str, str]:
        key, chain, _ = ca.issue(common_name, org=org, client=True)
        path = self.base / f"client-{common_name}-{ca.name}.pem"
        path.write_bytes(key + chain)
        return {"certfile": str(path)}


def _replace(path: Path, data: bytes) -> None:
    """Write `path` as a rotation does: a new file renamed over the old one."""
    tmp = path.with_suffix(".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("http-auth")
    ca, other = Ca.make("kraft-test-ca"), Ca.make("other-ca")
    cluster = LocalCluster(base / "cluster", 1, properties=dict(FAST_TIMEOUTS),
                           address_prefix=address_prefix())
    node = cluster.nodes[1]
    keystore = base / "http-keystore.pem"
    ca.keystore(keystore, "node-1", ip=node.host)
    cafile = ca.write(base / "ca.pem")
    tokens = base / "tokens.csv"
    tokens.write_text(TOKENS)
    cluster.properties.update({
        "kraft.http.ssl.keystore.location": str(keystore),
        "kraft.http.ssl.truststore.location": str(ca.write(base / "truststore.pem")),
        "kraft.http.ssl.client.auth": "requested",
        "kraft.http.auth.token.file": str(tokens),
        "kraft.http.auth.write.principals": "User:CN=writer,O=acme",
        "kraft.http.auth.read.principals": "User:CN=auditor",
    })
    cluster.credentials = HttpCredentials(token=ADMIN, cafile=str(cafile))
    try:
        cluster.start_all()
        cluster.wait_for_leader(timeout=60)
        yield World(cluster, node.http, ca, other, cafile, tokens, keystore, base)
    finally:
        cluster.close()


def _refused(r: HttpResult, status: int) -> dict[str, Any]:
    assert r.status == status, (r.status, r.body)
    assert r.headers["www-authenticate"].startswith("Bearer"), r.headers
    body = r.json()
    assert isinstance(body, dict) and isinstance(body["error"], str)
    return cast(dict[str, Any], body)


def test_probes_are_open_without_a_credential(world: World) -> None:
    assert world.call("GET", "/healthz").status == 200
    r = world.call("GET", "/readyz")
    assert r.status == 200 and r.json()["ready"] is True


def test_no_token_or_an_unknown_one_is_401_and_applies_nothing(world: World) -> None:
    for method, path in (("PUT", "/v1/kv/k401"), ("DELETE", "/v1/kv/k401"),
                         ("GET", "/v1/kv/k401"), ("GET", "/metrics"), ("GET", "/v1/status"),
                         ("GET", "/v1/export"), ("POST", "/v1/kv/k401/cas")):
        _refused(world.call(method, path, None, b"v" if method != "GET" else None), 401)
    r = world.call("PUT", "/v1/kv/k401", "not-a-token-of-this-file", b"v")
    _refused(r, 401)
    assert 'error="invalid_token"' in r.headers["www-authenticate"]
    host, _, port = world.address.rpartition(":")
    conn = http.client.HTTPSConnection(host, int(port), timeout=10,
                                       context=world.creds().ssl_context())
    try:  # a Basic header is no bearer token
        conn.request("PUT", "/v1/kv/k401", body=b"v",
                     headers={"Authorization": "Basic " + base64.b64encode(b"a:b").decode()})
        resp = conn.getresponse()
        assert resp.status == 401
        assert 'error="invalid_request"' in resp.getheader("WWW-Authenticate", "")
        resp.read()
    finally:
        conn.close()
    assert world.value("k401") is None


def test_read_token_reads_but_writing_is_403_and_applies_nothing(world: World) -> None:
    assert world.call("PUT", "/v1/kv/kr", WRITE, b"before").status == 200
    assert world.call("GET", "/v1/kv/kr", READ).body == b"before"
    _refused(world.call("GET", "/v1/kv/kr"), 401)
    metrics = world.call("GET", "/metrics", READ)
    assert metrics.status == 200
    assert b'kraft_http_refused_total{status="401"}' in metrics.body
    cas = json.dumps({"expected": base64.b64encode(b"before").decode(),
                      "value": base64.b64encode(b"after").decode()}).encode()
    for method, path, body in (("PUT", "/v1/kv/kr", b"after"), ("DELETE", "/v1/kv/kr", None),
                               ("POST", "/v1/kv/kr/cas", cas), ("PUT", "/v1/kv/kr-new", b"x")):
        r = world.call(method, path, READ, body)
        _refused(r, 403)
        assert 'error="insufficient_scope", scope="write"' in r.headers["www-authenticate"]
    assert world.value("kr") == b"before"
    assert world.value("kr-new") is None


def test_write_token_writes_and_only_admin_exports(world: World) -> None:
    r = world.call("PUT", "/v1/kv/kw", WRITE, b"v1")
    assert r.status == 200 and r.json()["offset"] >= 0
    cas = json.dumps({"expected": base64.b64encode(b"v1").decode(),
                      "value": base64.b64encode(b"v2").decode()}).encode()
    assert world.call("POST", "/v1/kv/kw/cas", WRITE, cas).json()["swapped"] is True
    assert world.value("kw") == b"v2"
    _refused(world.call("GET", "/v1/export", WRITE), 403)
    r = world.call("GET", "/v1/export", ADMIN)
    assert r.status == 200
    with tarfile.open(fileobj=io.BytesIO(r.body)) as tar:
        assert any(name.endswith(".log") for name in tar.getnames())


def test_rotated_token_file_counts_from_the_next_request(world: World) -> None:
    new_writer = secrets.token_urlsafe(24)
    rotated = TOKENS.replace(f"{WRITE},writer,write", f"{new_writer},writer,write")
    try:
        _replace(world.tokens, rotated.encode())
        _refused(world.call("PUT", "/v1/kv/krot", WRITE, b"old"), 401)
        assert world.value("krot") is None
        assert world.call("PUT", "/v1/kv/krot", new_writer, b"new").status == 200
        assert world.value("krot") == b"new"
        # rewritten in place (same inode and size, within one tick of the file clock)
        again = rotated.replace(new_writer, new_writer[::-1])
        world.tokens.write_text(again)
        _refused(world.call("PUT", "/v1/kv/krot", new_writer, b"x"), 401)
        # a broken file keeps the last good tokens, and says so in the log
        _replace(world.tokens, b"this line is no token,\n")
        assert world.call("PUT", "/v1/kv/krot", new_writer[::-1], b"kept").status == 200
        _refused(world.call("PUT", "/v1/kv/krot", WRITE, b"x"), 401)
        _replace(world.tokens, b"# every token revoked\n")  # no token line: none is valid
        _refused(world.call("PUT", "/v1/kv/krot", new_writer[::-1], b"x"), 401)
    finally:
        _replace(world.tokens, TOKENS.encode())
    assert world.call("PUT", "/v1/kv/krot", WRITE, b"back").status == 200
    log = world.cluster.nodes[1].log_path.read_text()
    assert "event=http_token_file_invalid" in log
    for token in (READ, WRITE, ADMIN, new_writer):
        assert token not in log


def test_client_certificate_principal_gets_its_scope(world: World) -> None:
    writer = world.client_cert(world.ca, "writer", org="acme")
    assert world.call("PUT", "/v1/kv/kcert", None, b"by-cert", **writer).status == 200
    auditor = world.client_cert(world.ca, "auditor")
    assert world.call("GET", "/v1/kv/kcert", None, **auditor).body == b"by-cert"
    r = world.call("DELETE", "/v1/kv/kcert", None, **auditor)
    assert "User:CN=auditor has scope read" in _refused(r, 403)["error"]
    stranger = world.client_cert(world.ca, "stranger")
    assert "has no scope" in _refused(world.call("GET", "/v1/kv/kcert", None, **stranger),
                                      403)["error"]
    rogue = world.client_cert(world.other_ca, "writer", org="acme")
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        world.call("PUT", "/v1/kv/kcert", None, b"rogue", **rogue)
    assert world.value("kcert") == b"by-cert"


def test_a_client_trusting_another_ca_and_plain_http_are_refused(world: World) -> None:
    other = world.base / "other-ca.pem"
    world.other_ca.write(other)
    with pytest.raises(ssl.SSLCertVerificationError):
        http_call(world.address, "PUT", "/v1/kv/kca", b"v",
                  credentials=HttpCredentials(token=WRITE, cafile=str(other)))
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        http_call(world.address, "PUT", "/v1/kv/kca", b"v",
                  credentials=HttpCredentials(token=WRITE))
    assert world.value("kca") is None


def _served_serial(world: World) -> int:
    host, _, port = world.address.rpartition(":")
    ctx = world.creds().ssl_context()
    assert ctx is not None
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_renewed_keystore_is_served_to_the_next_connection(world: World) -> None:
    node = world.cluster.nodes[1]
    before = _served_serial(world)
    _replace(world.keystore, b"-----BEGIN PRIVATE KEY-----\ncut short\n")
    assert _served_serial(world) == before  # a broken file keeps the last good context
    renewed = world.base / "renewed.pem"
    cert = world.ca.keystore(renewed, "node-1", ip=node.host)
    _replace(world.keystore, renewed.read_bytes())
    assert _served_serial(world) == cert.serial_number != before
    assert world.call("GET", "/v1/kv/kw", READ).status in (200, 404)
    assert "event=http_tls_reload_failed" in node.log_path.read_text()


async def test_node_health_and_the_admin_client_carry_credentials(world: World) -> None:
    async with QuorumClient("127.0.0.1:1", http=world.creds(READ)) as client:
        health = await client.node_health(world.address)
    assert health.live and health.ready and health.leader_id == 1, health
    async with QuorumClient("127.0.0.1:1", http=world.creds()) as client:
        health = await client.node_health(world.address)
    assert health.live and health.leader_id is None  # /v1/status refused without a token
    log = world.cluster.nodes[1].log_path.read_text()
    assert "event=http_open" not in log


async def test_an_open_port_warns_once_at_start(caplog: pytest.LogCaptureFixture,
                                                tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(TOKENS)
    events = {}
    for name, security in (("open", None), ("tokens", HttpSecurity(token_file=tokens))):
        caplog.clear()
        server = HttpApiServer(cast(Any, None), cast(Any, None), own_host(), 0,
                               security=security)
        with caplog.at_level(logging.WARNING, logger="kraft.server.http_api"):
            await server.start()
            await server.stop()
        events[name] = [r.getMessage().split()[0] for r in caplog.records]
    assert events == {"open": ["event=http_open"], "tokens": ["event=http_tokens_without_tls"]}


def test_kraft_kv_command_reads_its_token_from_a_file(
        world: World, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    writer, reader = world.base / "writer.token", world.base / "reader.token"
    writer.write_text(f"# the ingest job's token\n{WRITE}\n")
    reader.write_text(READ + "\n")

    def kv(token: Path, *op: str) -> tuple[int, bytes, bytes]:
        code = main(["kv", "--http", world.address, "--token-file", str(token),
                     "--http-cafile", str(world.cafile), *op])
        out, err = capsysbinary.readouterr()
        return code, out, err

    code, out, _ = kv(writer, "put", "k/cli", "from the command line")
    assert code == 0 and int(out) >= 0
    code, out, err = kv(reader, "delete", "k/cli")
    assert code == 1 and b"403 token:dashboard has scope read" in err
    assert READ.encode() not in out + err
    assert kv(reader, "get", "k/cli")[:2] == (0, b"from the command line")


def test_replaced_truststore_decides_the_next_connections_client_certificates(
        world: World) -> None:
    ours = world.client_cert(world.ca, "writer", org="acme")
    theirs = world.client_cert(world.other_ca, "writer", org="acme")
    truststore = world.base / "truststore.pem"  # the node's; clients trust ca.pem
    try:
        _replace(truststore, world.other_ca.pem())
        assert world.call("PUT", "/v1/kv/ktrust", None, b"theirs", **theirs).status == 200
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            world.call("PUT", "/v1/kv/ktrust", None, b"ours", **ours)
    finally:
        _replace(truststore, world.ca.pem())
    assert world.call("PUT", "/v1/kv/ktrust", None, b"ours again", **ours).status == 200
    assert world.value("ktrust") == b"ours again"


# ------------------------------------------------------------------ the binary client port
# The same node's `client.listener`: the HTTP port's settings hold for it (docs/security.md).


def _kv(world: World, token: str | None = None, **kwargs: Any) -> KvClient:
    host, port = world.cluster.nodes[1].client
    return KvClient(host, port, world.creds(token, **kwargs))


async def test_binary_port_without_a_credential_is_refused_and_applies_nothing(
        world: World) -> None:
    async with _kv(world) as c:
        with pytest.raises(Unauthenticated, match="no credential"):
            await c.put("kbin-anon", b"x")
        with pytest.raises(Unauthenticated):
            await c.delete("kbin-anon")
        with pytest.raises(Unauthenticated):
            await c.get("kbin-anon", stale=True)
        assert c.connected  # a refusal is an answer; only a wrong token closes
    host, port = world.cluster.nodes[1].client
    plain = KvClient(host, port)  # plaintext to a TLS port: the handshake fails
    with pytest.raises((ConnectionError, OutcomeUnknown, ssl.SSLError)):
        await plain.connect()
        await plain.put("kbin-anon", b"plain")
    assert world.value("kbin-anon") is None


async def test_binary_port_tokens_have_their_scopes(world: World) -> None:
    async with _kv(world, WRITE) as writer:
        assert writer.principal == "token:writer write"
        offset = await writer.put("kbin", b"by-writer")
        assert offset >= 0
    assert world.value("kbin") == b"by-writer"  # the HTTP port sees it
    async with _kv(world, READ) as reader:
        assert await reader.get("kbin") == b"by-writer"
        with pytest.raises(Forbidden, match="token:dashboard has scope read"):
            await reader.put("kbin", b"by-reader")
        with pytest.raises(Forbidden):
            await reader.delete("kbin")
        assert await reader.get("kbin", stale=True) == b"by-writer"
    with pytest.raises(Unauthenticated, match="unknown token"):
        await _kv(world, secrets.token_urlsafe(24)).connect()
    assert world.value("kbin") == b"by-writer"
    metrics = world.call("GET", "/metrics", READ).body.decode()
    assert 'kraft_bad_requests_total{listener="client",reason="forbidden"}' in metrics
    assert 'kraft_connections_closed_total{listener="client",reason="auth_failed"}' in metrics


async def test_binary_port_a_revoked_token_stops_counting_on_an_open_connection(
        world: World) -> None:
    async with _kv(world, WRITE) as c:
        await c.put("kbin-rev", b"before")
        try:
            _replace(world.tokens, TOKENS.replace(f"{WRITE},writer,write\n", "").encode())
            with pytest.raises(Unauthenticated, match="revoked"):
                await c.put("kbin-rev", b"after")
        finally:
            _replace(world.tokens, TOKENS.encode())
    assert world.value("kbin-rev") == b"before"
    log = world.cluster.nodes[1].log_path.read_text()
    assert WRITE not in log and "event=client_open" not in log


async def test_binary_port_client_certificates_have_their_principals_scopes(
        world: World) -> None:
    async with _kv(world, **world.client_cert(world.ca, "writer", org="acme")) as c:
        await c.put("kbin-cert", b"by-cert")
    async with _kv(world, **world.client_cert(world.ca, "auditor")) as c:
        assert await c.get("kbin-cert") == b"by-cert"
        with pytest.raises(Forbidden, match="User:CN=auditor has scope read"):
            await c.put("kbin-cert", b"by-auditor")
    async with _kv(world, **world.client_cert(world.ca, "stranger")) as c:
        with pytest.raises(Forbidden, match="has no scope"):
            await c.get("kbin-cert")
    rogue = _kv(world, **world.client_cert(world.other_ca, "writer", org="acme"))
    with pytest.raises((ConnectionError, OutcomeUnknown, ssl.SSLError)):
        await rogue.connect()
        await rogue.put("kbin-cert", b"rogue")
    assert world.value("kbin-cert") == b"by-cert"


async def test_an_open_binary_port_warns_and_takes_any_auth(
        caplog: pytest.LogCaptureFixture) -> None:
    server = ClientServer(cast(Any, None), cast(Any, None), own_host(), 0)
    with caplog.at_level(logging.WARNING, logger="kraft.server.client_protocol"):
        await server.start()
    try:
        assert [r.getMessage().split()[0] for r in caplog.records] == ["event=client_open"]
        creds = HttpCredentials(token="t" * 20)
        async with KvClient(server.host, server.port, creds) as c:
            assert c.principal == "anonymous admin"
    finally:
        await server.stop()
