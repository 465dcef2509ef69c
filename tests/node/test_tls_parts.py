"""The parts of TLS and authorization, in one process: Kafka's principal mapping rules, the
RFC 2253 name a certificate gives, the static grants, the outgoing host check (a wrong SAN
is refused), inline PEM keystores and `ssl.client.auth=requested`."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from kraft.config.security import (
    PrincipalMapper,
    authorizer_settings,
    distinguished_name,
    ssl_settings,
)
from kraft.config.tls import TlsContexts, TlsMaterialError
from kraft.server.frames import FrameConnection, FrameListener, PeerInfo
from tests.support.pki import TestCA

pytest.importorskip("cryptography")

KAFKA_DOC_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                   "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                   "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
                   "DEFAULT")


def test_principal_mapping_rules_as_kafka_applies_them() -> None:
    rules = PrincipalMapper.parse(KAFKA_DOC_RULES)
    assert rules.principal_name(
        "CN=kafka1,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "kafka1"
    assert rules.principal_name(
        "CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "adminuser@admin"
    assert rules.principal_name("CN=Duke,O=x") == "duke"
    assert rules.principal_name("OU=nocn") == "OU=nocn"  # DEFAULT: the name as it is
    upper = PrincipalMapper.parse(r"RULE:^cn=(.*?),ou=(.*?)$/$1\/$2/U")
    assert upper.principal_name("cn=a,ou=b") == "A/B"
    assert upper.principal_name("CN=a") is None  # no rule matches: no principal
    assert PrincipalMapper.parse("DEFAULT").principal_name("CN=a,O=b") == "CN=a,O=b"


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?)$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/LU", "",
])
def test_malformed_mapping_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError):
        PrincipalMapper.parse(rules)


def test_a_subject_is_written_as_rfc_2253_last_rdn_first() -> None:
    subject = ((("countryName", "DE"),), (("organizationName", "ACME, Inc."),),
               (("organizationalUnitName", "ops"), ("commonName", "node-3")))
    assert distinguished_name(subject) == "OU=ops+CN=node-3,O=ACME\\, Inc.,C=DE"


def test_grants_super_users_and_the_node_id_a_principal_names() -> None:
    a = authorizer_settings({
        "super.users": "User:CN=root,O=x",
        "kraft.authorizer.cluster.action.principals": "User:CN=node-1,O=x;User:CN=node-12,O=x",
        "kraft.authorizer.alter.principals": "User:CN=op,O=x",
        "kraft.authorizer.describe.principals": "User:CN=view,O=x"})
    assert a.enabled
    assert a.allows("User:CN=root,O=x", "Alter") and a.allows("User:CN=root,O=x", "ClusterAction")
    assert a.allows("User:CN=node-1,O=x", "ClusterAction")
    assert not a.allows("User:CN=node-1,O=x", "Alter")
    assert a.allows("User:CN=op,O=x", "Describe")  # Alter implies Describe, as in Kafka
    assert not a.allows("User:CN=view,O=x", "Alter")
    assert not a.allows("User:ANONYMOUS", "Describe")
    assert a.node_id_of("User:CN=node-12,O=x") == 12
    assert a.node_id_of("User:CN=node-12x,O=x") is None
    assert a.node_id_of("User:CN=op,O=node-1") is None
    assert a.node_id_of("User:O=x,CN=node-4") == 4
    custom = authorizer_settings({"super.users": "User:a",
                                  "kraft.authorizer.node.principal.pattern": r"^ctl-(\d+)$"})
    assert custom.node_id_of("User:ctl-7") == 7 and custom.node_id_of("User:CN=node-7") is None
    assert not authorizer_settings({}).enabled


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("pki"))


def _contexts(ca: TestCA, keystore: Path, **extra: str) -> TlsContexts:
    props = {"ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca.truststore),
             "ssl.client.auth": "required", **extra}
    return TlsContexts(ssl_settings(props, "CONTROLLER"))


async def _serve(contexts: TlsContexts, seen: list[PeerInfo]) -> FrameListener:
    def handler(body: bytes, peer: PeerInfo) -> bytes:
        seen.append(peer)
        return body
    listener = FrameListener("127.0.0.1", 0, handler, tls=contexts.listener_context(),
                             principal_of=contexts.principal_of)
    await listener.start()
    return listener


def test_outgoing_connections_check_the_name_of_the_peer(pki: TestCA) -> None:
    """A node dialling 127.0.0.1 refuses a peer whose certificate does not name it (a wrong
    SAN), unless ssl.endpoint.identification.algorithm is empty; the right SAN is served."""
    mine = pki.issue("me.pem", "node-1").keystore
    me = _contexts(pki, mine)
    wrong = _contexts(pki, pki.issue("wrong.pem", "node-2", ips=("127.0.0.99",),
                                     dns=("elsewhere",)).keystore)
    lax = _contexts(pki, mine, **{"ssl.endpoint.identification.algorithm": ""})

    async def main() -> None:
        seen: list[PeerInfo] = []
        bad = await _serve(wrong, seen)
        good = await _serve(me, seen)
        try:
            conn = FrameConnection("127.0.0.1", bad.port, tls=me.client_context)
            with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
                await conn.open(5)
            conn = FrameConnection("127.0.0.1", bad.port, tls=lax.client_context)
            await conn.open(5)
            assert await conn.request(b"ping", 5) == b"ping"
            conn.close()
            conn = FrameConnection("127.0.0.1", good.port, tls=me.client_context)
            await conn.open(5)
            assert await conn.request(b"ping", 5) == b"ping"
            assert conn.lend() is None  # a TLS socket is never lent to the native lane
            conn.close()
            assert [p.principal for p in seen] == ["User:CN=node-1,O=kraft-test"] * 2
            assert all(p.tls for p in seen)
        finally:
            await bad.stop()
            await good.stop()

    asyncio.run(main())


def test_requested_client_auth_serves_a_client_without_a_certificate_as_anonymous(
        pki: TestCA) -> None:
    issued = pki.issue("inline.pem", "node-5")
    inline = TlsContexts(ssl_settings({  # the key and the chain as inline PEM
        "ssl.keystore.key": issued.key_pem, "ssl.keystore.certificate.chain": issued.cert_pem,
        "ssl.truststore.certificates": pki.truststore.read_text(),
        "listener.name.controller.ssl.client.auth": "requested"}, "CONTROLLER"))

    async def main() -> None:
        seen: list[PeerInfo] = []
        server = await _serve(inline, seen)
        try:
            bare = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            bare.load_verify_locations(cafile=str(pki.truststore))
            conn = FrameConnection("127.0.0.1", server.port, tls=lambda: bare)
            await conn.open(5)
            assert await conn.request(b"x", 5) == b"x"
            conn.close()
            assert [p.principal for p in seen] == ["User:ANONYMOUS"]
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_keystore_that_cannot_load_names_its_key(pki: TestCA, tmp_path: Path) -> None:
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(TlsMaterialError, match=r"listener\.name\.controller\.ssl\.keystore"
                                               r"\.location: cannot load"):
        TlsContexts(ssl_settings({
            "listener.name.controller.ssl.keystore.location": str(broken),
            "ssl.truststore.location": str(pki.truststore)}, "CONTROLLER"))


def test_a_half_written_keystore_keeps_the_previous_certificate(pki: TestCA) -> None:
    issued = pki.issue("rot.pem", "node-6")
    contexts = _contexts(pki, issued.keystore)
    first = contexts.server_context()
    issued.keystore.write_text("garbage")  # a bad file: the old context stays in use
    assert contexts.server_context() is first and contexts.reloads == 0
    pki.issue("rot.pem", "node-6")
    assert contexts.server_context() is not first and contexts.reloads == 1


def test_a_new_ca_in_the_truststore_is_trusted_by_the_next_handshake(
        pki: TestCA, tmp_path: Path) -> None:
    """A CA rotation: the listener's truststore file gains the new CA (old and new bundled),
    and a client certificate of the new CA is accepted by the next handshake, no restart."""
    new_ca = TestCA(tmp_path / "new-ca", "new-ca")
    trust = tmp_path / "trust.pem"
    trust.write_text(pki.truststore.read_text())
    server = TlsContexts(ssl_settings({
        "ssl.keystore.location": str(pki.issue("srv-rot.pem", "node-7").keystore),
        "ssl.truststore.location": str(trust), "ssl.client.auth": "required"}, "CONTROLLER"))
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cafile=str(pki.truststore))
    client.load_cert_chain(str(new_ca.issue("client.pem", "node-8").keystore))

    async def attempt(port: int) -> bool:
        conn = FrameConnection("127.0.0.1", port, tls=lambda: client)
        try:
            await conn.open(5)
            return await conn.request(b"x", 5) == b"x"
        except (OSError, ConnectionError):
            return False
        finally:
            conn.close()

    async def main() -> None:
        seen: list[PeerInfo] = []
        listener = await _serve(server, seen)
        try:
            assert not await attempt(listener.port)  # the new CA is not trusted yet
            bundle = tmp_path / "trust.pem.new"
            bundle.write_text(pki.truststore.read_text() + new_ca.truststore.read_text())
            bundle.replace(trust)
            assert await attempt(listener.port)
            assert [p.principal for p in seen] == ["User:CN=node-8,O=kraft-test"]
        finally:
            await listener.stop()

    asyncio.run(main())
