"""The HTTP port's security settings: TLS (`kraft.http.ssl.*`), bearer tokens and client
certificate principals (`kraft.http.auth.*`), read from `ServerProperties` and checked as a whole.

The keys follow Kafka's listener keys (`ssl.keystore.type`, `ssl.keystore.location`,
`ssl.key.password`, `ssl.truststore.type`, `ssl.truststore.location`, `ssl.client.auth`) with
the prefix of the project's other HTTP settings, `kraft.http.`. Only PEM stores are read, as
Kafka's `ssl.keystore.type=PEM`: the keystore is one file holding the private key and the
certificate chain, the truststore a file of CA certificates.

The token file (`kraft.http.auth.token.file`) holds one token a line, in the shape of
kube-apiserver's static token file, `token,name,scope`:

    # comments and blank lines are skipped
    Yp1d4...c0ffee,dashboard,read
    9mQx2...beefed,writer-a,write
    Fj7Hw...d00d00,ops,admin

`token` is at least `MIN_TOKEN_CHARS` printable characters without `,` or whitespace; `name`
is what logs show instead of the token; `scope` is `read`, `write` or `admin` (admin implies
write, which implies read). Two lines may share a name (a rotation's old and new token), never
a token. A client certificate's principal (Kafka's default mapping: `User:` and the subject's
distinguished name in RFC 2253 form) gets a scope through `kraft.http.auth.read.principals`,
`...write.principals` and `...admin.principals`, each a `;`-separated list as Kafka's
`super.users`.

This module only parses and checks; the node's runtime (`kraft.server.http_auth`) serves them.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIN_TOKEN_CHARS = 16
"""The shortest token a token file may hold (a short secret is a guessable one)."""

MAX_TOKEN_FILE_BYTES = 1 << 20
"""The largest token file read (a token file is a few lines; this bounds a mistake)."""

CLIENT_AUTH = ("none", "requested", "required")
"""Kafka's `ssl.client.auth` values."""

STORE_TYPES = ("PEM",)
"""The keystore and truststore types read (Kafka's JKS and PKCS12 are not)."""


class Scope(enum.IntEnum):
    """What a token or principal may do; each scope implies those below it."""

    READ = 1
    WRITE = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        """The scope as the token file and the answers spell it."""
        return self.name.lower()


SCOPES = {s.label: s for s in Scope}


class HttpSecurityError(ValueError):
    """HTTP security settings or a token file that cannot be used; the message names the key,
    file and line (never a token)."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One line of a token file: the SHA-256 of the token (the token itself is not kept),
    the name logs show, the scope, and the line it came from."""

    digest: bytes
    name: str
    scope: Scope
    line: int


def token_digest(token: str | bytes) -> bytes:
    """The SHA-256 of a token, as `TokenEntry.digest` holds it."""
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


def parse_token_file(text: str, source: str, *, allow_empty: bool = False) -> list[TokenEntry]:
    """The entries of a token file's text (see the module docstring); raises
    HttpSecurityError naming `source` and the line of the first problem. A file with no
    token at all is refused unless `allow_empty` (a node does not start on one: it would lock
    every client out without saying why; a running node takes one as "revoke every token")."""
    entries: list[TokenEntry] = []
    seen: dict[bytes, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")]
        where = f"{source} line {number}"
        if len(fields) != 3:
            raise HttpSecurityError(f"{where}: expected token,name,scope "
                                    f"(3 comma-separated fields), found {len(fields)}")
        token, name, scope_text = fields
        if len(token) < MIN_TOKEN_CHARS:
            raise HttpSecurityError(f"{where}: the token is {len(token)} characters, "
                                    f"at least {MIN_TOKEN_CHARS} are required")
        if any(c.isspace() or not c.isprintable() for c in token):
            raise HttpSecurityError(f"{where}: the token holds whitespace or a control "
                                    "character")
        if not name or any(c.isspace() or not c.isprintable() for c in name):
            raise HttpSecurityError(f"{where}: the name must be non-empty, without whitespace")
        scope = SCOPES.get(scope_text.lower())
        if scope is None:
            raise HttpSecurityError(f"{where}: unknown scope {scope_text!r} "
                                    f"(one of {', '.join(SCOPES)})")
        digest = token_digest(token)
        if digest in seen:
            raise HttpSecurityError(f"{where}: the same token as line {seen[digest]}")
        seen[digest] = number
        entries.append(TokenEntry(digest, name, scope, number))
    if not entries and not allow_empty:
        raise HttpSecurityError(f"{source}: no token (lines are token,name,scope)")
    return entries


def parse_principals(value: str, key: str) -> tuple[str, ...]:
    """A `;`-separated principal list (`User:CN=ops,O=example;User:CN=dashboard`)."""
    out: list[str] = []
    for item in value.split(";"):
        item = item.strip()
        if not item:
            continue
        kind, sep, name = item.partition(":")
        if not sep or kind != "User" or not name.strip():
            raise HttpSecurityError(f"{key}: {item!r} is not a principal User:<name>")
        out.append(f"User:{name.strip()}")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class HttpSecurity:
    """The HTTP port's settings, checked together (build with `http_security`)."""

    keystore: Path | None = None
    """The PEM file with the server's private key and certificate chain; None: plain HTTP."""
    key_password: str | None = None
    truststore: Path | None = None
    """The PEM file of the CAs a client certificate must chain to."""
    client_auth: str = "none"
    token_file: Path | None = None
    principal_scopes: tuple[tuple[str, Scope], ...] = ()
    """(principal, scope) pairs; a principal named in several lists gets the highest."""

    @property
    def tls(self) -> bool:
        """Whether the port speaks TLS."""
        return self.keystore is not None

    @property
    def authenticates(self) -> bool:
        """Whether requests need a credential (a token or a client certificate) at all."""
        return self.token_file is not None or self.client_auth != "none"

    def scope_of_principal(self, principal: str) -> Scope | None:
        """The scope granted to a certificate's principal, or None."""
        best: Scope | None = None
        for name, scope in self.principal_scopes:
            if name == principal and (best is None or scope > best):
                best = scope
        return best


KEYS = {
    "keystore_type": "kraft.http.ssl.keystore.type",
    "keystore": "kraft.http.ssl.keystore.location",
    "key_password": "kraft.http.ssl.key.password",
    "truststore_type": "kraft.http.ssl.truststore.type",
    "truststore": "kraft.http.ssl.truststore.location",
    "client_auth": "kraft.http.ssl.client.auth",
    "token_file": "kraft.http.auth.token.file",
    "read": "kraft.http.auth.read.principals",
    "write": "kraft.http.auth.write.principals",
    "admin": "kraft.http.auth.admin.principals",
}
"""The property names, by the role they play here."""


def http_security(props: Any) -> HttpSecurity:
    """The HTTP settings of a `ServerProperties` (any object with its `http_ssl_*` and
    `http_auth_*` attributes), checked together; raises HttpSecurityError naming the key."""
    for kind in ("keystore_type", "truststore_type"):
        value = str(getattr(props, f"http_ssl_{kind}")).upper()
        if value not in STORE_TYPES:
            raise HttpSecurityError(f"{KEYS[kind]}={value!r}: only PEM is read")
    keystore = _path(props.http_ssl_keystore_location)
    truststore = _path(props.http_ssl_truststore_location)
    client_auth = str(props.http_ssl_client_auth).lower()
    if client_auth not in CLIENT_AUTH:
        raise HttpSecurityError(f"{KEYS['client_auth']}={client_auth!r}: "
                                f"one of {', '.join(CLIENT_AUTH)}")
    if keystore is None:
        for role, value in (("key_password", props.http_ssl_key_password),
                            ("truststore", props.http_ssl_truststore_location)):
            if value:
                raise HttpSecurityError(f"{KEYS[role]} is set but {KEYS['keystore']} is not: "
                                        "the HTTP port speaks TLS only with a keystore")
        if client_auth != "none":
            raise HttpSecurityError(f"{KEYS['client_auth']}={client_auth} needs TLS: set "
                                    f"{KEYS['keystore']}")
    if client_auth != "none" and truststore is None:
        raise HttpSecurityError(f"{KEYS['client_auth']}={client_auth} needs "
                                f"{KEYS['truststore']} (the CAs client certificates chain to)")
    pairs: list[tuple[str, Scope]] = []
    for scope in Scope:
        value = getattr(props, f"http_auth_{scope.label}_principals") or ""
        pairs += [(p, scope) for p in parse_principals(value, KEYS[scope.label])]
    if pairs and client_auth == "none":
        raise HttpSecurityError(f"{KEYS[pairs[0][1].label]} names principals but "
                                f"{KEYS['client_auth']}=none: no client certificate is asked for")
    return HttpSecurity(keystore=keystore, key_password=props.http_ssl_key_password or None,
                        truststore=truststore, client_auth=client_auth,
                        token_file=_path(props.http_auth_token_file),
                        principal_scopes=tuple(pairs))


def _path(value: str | None) -> Path | None:
    return Path(value) if value not in (None, "") else None


def describe(sec: HttpSecurity) -> Iterable[str]:
    """key=value words for the node's start line (files and modes, never a secret)."""
    yield f"tls={'on' if sec.tls else 'off'}"
    yield f"client_auth={sec.client_auth}"
    yield f"token_file={sec.token_file or '-'}"
    yield f"principals={len(sec.principal_scopes)}"
