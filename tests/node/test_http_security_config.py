"""The HTTP port's security settings and files, parsed and checked (no node): each bad key,
token line or client token file is refused naming what is wrong, never echoing a token."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from kraft.admin.http_credentials import CredentialsError, HttpCredentials, read_token_file
from kraft.config.http_security import (
    HttpSecurityError,
    Scope,
    http_security,
    parse_principals,
    parse_token_file,
    token_digest,
)
from kraft.config.node import ConfigError, build_config
from kraft.server.http_auth import TlsFiles, TokenFile, principal_of
from tests.support.http_certs import Ca

BASE = {
    "node.id": "1", "process.roles": "controller",
    "listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093", "metadata.log.dir": "/tmp/x",
}
TOKEN = "t0k3n-" + "x" * 20


def test_token_file_lines_scopes_and_shared_names() -> None:
    entries = parse_token_file(f"# c\n\n{TOKEN},ops,ADMIN\n {TOKEN}2 , ops , read \n", "f")
    assert [(e.name, e.scope, e.line) for e in entries] == [("ops", Scope.ADMIN, 3),
                                                            ("ops", Scope.READ, 4)]
    assert entries[1].digest == token_digest(TOKEN + "2")
    assert Scope.ADMIN > Scope.WRITE > Scope.READ


@pytest.mark.parametrize(("text", "problem"), [
    (f"{TOKEN},ops", "line 1: expected token,name,scope"),
    ("short,ops,read", "line 1: the token is 5 characters, at least 16"),
    (f"{TOKEN},ops,superuser", "line 1: unknown scope 'superuser'"),
    (f"{TOKEN},,read", "line 1: the name must be non-empty"),
    (f"#\n{TOKEN},a,read\n{TOKEN},b,write", "line 3: the same token as line 2"),
    ("# nothing\n", "no token"),
])
def test_bad_token_files_name_the_line_not_the_token(text: str, problem: str) -> None:
    with pytest.raises(HttpSecurityError) as err:
        parse_token_file(text, "tokens.csv")
    assert problem in str(err.value) and str(err.value).startswith("tokens.csv")
    assert TOKEN not in str(err.value)


@pytest.mark.parametrize(("props", "problem"), [
    ({"kraft.http.ssl.client.auth": "required"}, "needs TLS"),
    ({"kraft.http.ssl.truststore.location": "/ca.pem"}, "is set but kraft.http.ssl.keystore"),
    ({"kraft.http.ssl.keystore.location": "/k.pem", "kraft.http.ssl.client.auth": "requested"},
     "needs kraft.http.ssl.truststore.location"),
    ({"kraft.http.ssl.keystore.location": "/k.pem", "kraft.http.ssl.keystore.type": "JKS"},
     "only PEM"),
    ({"kraft.http.auth.admin.principals": "User:CN=ops"}, "kraft.http.ssl.client.auth=none"),
    ({"kraft.http.ssl.keystore.location": "/k.pem", "kraft.http.ssl.truststore.location": "/c",
      "kraft.http.ssl.client.auth": "requested", "kraft.http.auth.read.principals": "CN=x"},
     "is not a principal User:<name>"),
    ({"kraft.http.ssl.client.auth": "sometimes"}, "kraft.http.ssl.client.auth"),
])
def test_bad_http_security_settings_stop_the_node_naming_the_key(
        props: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_config({**BASE, **props})
    assert problem in str(err.value)


def test_http_security_settings_as_a_whole() -> None:
    assert not http_security(build_config(BASE)).authenticates
    cfg = build_config({**BASE, "kraft.http.ssl.keystore.location": "/k.pem",
                        "kraft.http.ssl.truststore.location": "/ca.pem",
                        "kraft.http.ssl.client.auth": "REQUESTED",
                        "kraft.http.auth.read.principals": "User:CN=a; User:CN=b,O=x",
                        "kraft.http.auth.admin.principals": "User:CN=a"})
    sec = http_security(cfg)
    assert sec.tls and sec.authenticates and sec.client_auth == "requested"
    assert sec.scope_of_principal("User:CN=a") == Scope.ADMIN  # the highest it is named with
    assert sec.scope_of_principal("User:CN=b,O=x") == Scope.READ
    assert sec.scope_of_principal("User:CN=c") is None
    tokens_only = http_security(build_config({**BASE, "kraft.http.auth.token.file": "/t"}))
    assert tokens_only.authenticates and not tokens_only.tls
    assert parse_principals(" ; User:CN=a ;", "k") == ("User:CN=a",)


def test_principal_is_kafkas_default_rfc2253_subject() -> None:
    subject = ((("countryName", "DE"),), (("organizationName", "Acme, Inc"),),
               (("commonName", "#writer "),), (("userId", "u1"), ("commonName", "b+c")))
    assert principal_of({"subject": subject}) == (
        "User:UID=u1+CN=b\\+c,CN=\\#writer\\ ,O=Acme\\, Inc,C=DE")
    assert principal_of({}) is None and principal_of(None) is None


def test_node_refuses_unreadable_token_file_and_tls_files(tmp_path: Path) -> None:
    with pytest.raises(HttpSecurityError, match="cannot read"):
        TokenFile(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(HttpSecurityError, match="not UTF-8"):
        TokenFile(bad)
    ca = Ca.make("ca")
    keystore = tmp_path / "k.pem"
    key, chain, _ = ca.issue("node", ip="127.0.0.1")
    keystore.write_bytes(chain)  # the key left out
    sec = http_security(build_config({**BASE, "kraft.http.ssl.keystore.location": str(keystore)}))
    with pytest.raises(HttpSecurityError, match=r"kraft\.http\.ssl\.keystore\.location="):
        TlsFiles(sec)
    keystore.write_bytes(key + chain)
    assert isinstance(TlsFiles(sec).server_context, ssl.SSLContext)


def test_client_token_file_and_credentials(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(f"# the dashboard's token\n\n  {TOKEN}  \n")
    assert read_token_file(f) == TOKEN
    creds = HttpCredentials.from_files(token_file=f)
    assert creds.headers() == {"Authorization": f"Bearer {TOKEN}"}
    assert TOKEN not in repr(creds)
    assert creds.url("127.0.0.1:8080", "/v1/status") == "http://127.0.0.1:8080/v1/status"
    assert creds.ssl_context() is None
    for text, problem in (("# only a comment\n", "no token"), ("a b\n", "whitespace")):
        f.write_text(text)
        with pytest.raises(CredentialsError, match=problem):
            read_token_file(f)
    with pytest.raises(CredentialsError, match="cannot read"):
        read_token_file(tmp_path / "missing")
    cafile = Ca.make("ca").write(tmp_path / "ca.pem")
    tls = HttpCredentials.from_files(cafile=cafile)
    assert tls.url("h:1") == "https://h:1" and tls.ssl_context() is not None
    with pytest.raises(CredentialsError, match="TLS files"):
        HttpCredentials.from_files(cafile=tmp_path / "token")
