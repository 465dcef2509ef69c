"""TLS and authorization settings, resolved as Kafka resolves them.

- `ssl_settings(props, listener)`: the `ssl.*` keys of one listener (`listener.name.<l>.ssl.*`
  wins over the bare `ssl.*` key, as in Kafka's `ListenerName.configPrefix`), or of a client
  (`--command-config`, no listener prefix), checked one by one: a bad value raises
  `SecurityConfigError` naming the key.
- `PrincipalMapper`: `ssl.principal.mapping.rules` (Kafka's `RULE:pattern/replacement/[LU]`
  list and `DEFAULT`) applied to a certificate's distinguished name.
- `AuthorizerSettings`: `super.users` and the project's static grant lists
  (`kraft.authorizer.*.principals`), the static equivalent of Kafka's ACLs
  (docs/security.md).
- `distinguished_name(subject)`: the RFC 2253 text of a subject as `ssl.getpeercert` gives it
  (Java's `X500Principal.getName()`, which Kafka's default principal is made of).

Nothing here opens a socket; files are read by `kraft.server.tls`, which builds the
`ssl.SSLContext` objects from these settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

SSL_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.endpoint.identification.algorithm", "ssl.enabled.protocols",
    "ssl.protocol", "ssl.cipher.suites", "ssl.principal.mapping.rules",
)
"""The `ssl.*` keys a node or a client reads (bare or behind `listener.name.<l>.`)."""

AUTHORIZER_KEYS = (
    "super.users",
    "kraft.authorizer.cluster.action.principals",
    "kraft.authorizer.alter.principals",
    "kraft.authorizer.describe.principals",
    "kraft.authorizer.node.principal.pattern",
)
"""The authorization keys: Kafka's `super.users` and the project's static grant lists."""

CLIENT_KEYS = ("security.protocol", *SSL_KEYS)
"""The keys of a client's `--command-config` file that this project reads."""

LISTENER_PREFIX = re.compile(r"^listener\.name\.([^.]+)\.(ssl\..+)$")
"""`listener.name.<listener, lower case>.<ssl key>`."""

DEFAULT_NODE_PATTERN = r"(?:^|,)CN=node-([0-9]+)(?:,|$)"
"""Where a node's id is in its principal's name by default: a `CN=node-<id>` RDN."""

ClientAuth = Literal["required", "requested", "none"]

PROTOCOLS = ("TLSv1.2", "TLSv1.3")
"""The protocols `ssl.enabled.protocols` may name (Kafka's default is both)."""


class SecurityConfigError(ValueError):
    """A security key with a bad value (or a missing key another one needs); names the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


def listener_key(listener: str, key: str) -> str:
    """The listener-prefixed form of `key` (Kafka lower-cases the listener name)."""
    return f"listener.name.{listener.lower()}.{key}"


def is_listener_security_key(key: str) -> bool:
    """True for a `listener.name.<l>.ssl.*` key this project reads."""
    found = LISTENER_PREFIX.match(key)
    return found is not None and found.group(2) in SSL_KEYS


@dataclass(frozen=True, slots=True)
class SslSettings:
    """One listener's (or one client's) TLS settings; `source` maps each setting to the key
    it was read from (for errors that name it)."""

    keystore_location: str | None
    keystore_key: str | None
    keystore_certificate_chain: str | None
    key_password: str | None
    truststore_location: str | None
    truststore_certificates: str | None
    client_auth: ClientAuth
    endpoint_identification: bool
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]
    principal_rules: PrincipalMapper
    source: Mapping[str, str]

    def key_of(self, name: str) -> str:
        """The configuration key a setting (`ssl.keystore.location`, ...) was read from."""
        return self.source.get(name, name)

    @property
    def has_keystore(self) -> bool:
        """A key and certificate chain is configured (a file or inline PEM)."""
        return self.keystore_location is not None or self.keystore_key is not None


def ssl_settings(props: Mapping[str, str], listener: str | None = None) -> SslSettings:
    """The TLS settings of `listener` (None: a client's, no prefix) from `props`; raises
    SecurityConfigError naming the first bad key."""
    source: dict[str, str] = {}

    def get(key: str) -> str | None:
        if listener is not None:
            prefixed = listener_key(listener, key)
            if prefixed in props:
                source[key] = prefixed
                return props[prefixed]
        if key in props:
            source[key] = key
            return props[key]
        return None

    def blank(value: str | None) -> str | None:
        return None if value is None or not value.strip() else value

    for typed in ("ssl.keystore.type", "ssl.truststore.type"):
        value = get(typed)
        if value is not None and value.strip().upper() not in ("PEM", ""):
            raise SecurityConfigError(source[typed], f"{value!r} is not supported: only PEM "
                                      "keystores and truststores are (JKS and PKCS12 are not)")
    keystore_location = blank(get("ssl.keystore.location"))
    keystore_key = blank(get("ssl.keystore.key"))
    chain = blank(get("ssl.keystore.certificate.chain"))
    if keystore_location is not None and (keystore_key is not None or chain is not None):
        raise SecurityConfigError(source["ssl.keystore.location"], "set either a keystore file "
                                  "or ssl.keystore.key with ssl.keystore.certificate.chain, "
                                  "not both")
    if (keystore_key is None) != (chain is None):
        missing = "ssl.keystore.certificate.chain" if chain is None else "ssl.keystore.key"
        raise SecurityConfigError(missing, "is required with "
                                  + ("ssl.keystore.key" if chain is None
                                     else "ssl.keystore.certificate.chain"))
    for inline, marker in ((keystore_key, "PRIVATE KEY-----"),
                           (chain, "-----BEGIN CERTIFICATE-----")):
        if inline is not None and marker not in inline:
            name = "ssl.keystore.key" if inline is keystore_key else \
                "ssl.keystore.certificate.chain"
            raise SecurityConfigError(source[name], "is not PEM text")
    truststore_location = blank(get("ssl.truststore.location"))
    truststore_certs = blank(get("ssl.truststore.certificates"))
    if truststore_location is not None and truststore_certs is not None:
        raise SecurityConfigError(source["ssl.truststore.location"], "set either a truststore "
                                  "file or ssl.truststore.certificates, not both")
    if truststore_certs is not None and "-----BEGIN CERTIFICATE-----" not in truststore_certs:
        raise SecurityConfigError(source["ssl.truststore.certificates"], "is not PEM text")
    auth = (get("ssl.client.auth") or "none").strip().lower()
    if auth not in ("required", "requested", "none"):
        raise SecurityConfigError(source["ssl.client.auth"],
                                  f"{auth!r} is not one of required, requested, none")
    algorithm = get("ssl.endpoint.identification.algorithm")
    algorithm = "https" if algorithm is None else algorithm.strip().lower()
    if algorithm not in ("https", ""):
        raise SecurityConfigError(source["ssl.endpoint.identification.algorithm"],
                                  f"{algorithm!r} is not https or empty (off)")
    protocols = tuple(_csv(get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3"))
    for p in protocols:
        if p not in PROTOCOLS:
            raise SecurityConfigError(source["ssl.enabled.protocols"],
                                      f"{p!r} is not one of {', '.join(PROTOCOLS)}")
    if not protocols:
        raise SecurityConfigError(source.get("ssl.enabled.protocols", "ssl.enabled.protocols"),
                                  "at least one protocol is required")
    ciphers = tuple(_csv(get("ssl.cipher.suites") or ""))
    rules_text = get("ssl.principal.mapping.rules")
    try:
        mapper = PrincipalMapper.parse(rules_text or "DEFAULT")
    except ValueError as exc:
        raise SecurityConfigError(source.get("ssl.principal.mapping.rules",
                                             "ssl.principal.mapping.rules"), str(exc)) from None
    password = get("ssl.key.password")
    return SslSettings(
        keystore_location=keystore_location, keystore_key=keystore_key,
        keystore_certificate_chain=chain, key_password=password or None,
        truststore_location=truststore_location, truststore_certificates=truststore_certs,
        client_auth=auth,  # type: ignore[arg-type]  # checked above
        endpoint_identification=algorithm == "https", enabled_protocols=protocols,
        cipher_suites=ciphers, principal_rules=mapper, source=dict(source))


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


# ---------------------------------------------------------------------- principals

_RULE = re.compile(r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)")
_JAVA_GROUP = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        out = self.pattern.sub(self.replacement, dn)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """`ssl.principal.mapping.rules`: the first rule whose pattern matches the whole
    distinguished name gives the principal's name (Java's `replaceAll` with the replacement,
    `$1` for a group, then lower or upper case with `/L` or `/U`); `DEFAULT` gives the name
    as it is. No matching rule: the certificate gives no principal (Kafka fails the
    authentication)."""

    rules: tuple[_Rule, ...]

    @classmethod
    def parse(cls, text: str) -> PrincipalMapper:
        """Parse a comma-separated list of rules; raises ValueError naming a bad one."""
        rules: list[_Rule] = []
        pos, n = 0, len(text)
        while True:
            while pos < n and text[pos] in " \t\n":
                pos += 1
            if pos >= n:
                break
            found = _RULE.match(text, pos)
            if found is None:
                raise ValueError(f"invalid rule at {text[pos:]!r} (expected DEFAULT or "
                                 "RULE:pattern/replacement/[LU])")
            if found.group(1):
                rules.append(_Rule(None, "", ""))
            else:
                raw_pattern = found.group(2).replace("\\/", "/")
                try:
                    pattern = re.compile(raw_pattern)
                except re.error as exc:
                    raise ValueError(f"rule pattern {raw_pattern!r}: {exc}") from None
                replacement = found.group(3).replace("\\/", "/").replace("\\", "\\\\")
                replacement = _JAVA_GROUP.sub(r"\\g<\1>", replacement)
                rules.append(_Rule(pattern, replacement, found.group(4)))
            pos = found.end()
            while pos < n and text[pos] in " \t\n":
                pos += 1
            if pos < n:
                if text[pos] != ",":
                    raise ValueError(f"invalid rule at {text[found.start():]!r} (rules are "
                                     "separated by commas)")
                pos += 1
        if not rules:
            raise ValueError("no rule (use DEFAULT)")
        return cls(tuple(rules))

    def principal_name(self, dn: str) -> str | None:
        """The principal's name for `dn`, None when no rule matches."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        return None


_DN_NAMES = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
"""The attribute keywords RFC 2253 (and Java's `X500Principal.getName()`) writes by name."""


def _escape_dn_value(value: str) -> str:
    out = []
    for i, c in enumerate(value):
        if c in ',+"\\<>;' or (c == "#" and i == 0) or (c == " " and i in (0, len(value) - 1)):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def distinguished_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """RFC 2253 text of a subject as `ssl.SSLSocket.getpeercert()` gives it (RDNs in the
    certificate's order: written last first, as Java writes them)."""
    rdns = []
    for rdn in reversed(list(subject)):
        rdns.append("+".join(f"{_DN_NAMES.get(name, name)}={_escape_dn_value(value)}"
                             for name, value in rdn))
    return ",".join(rdns)


# ---------------------------------------------------------------------- authorization


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    """Who may do what (docs/security.md): `super.users` may do everything; the static
    lists grant one operation each (Kafka grants them with ACLs on the Cluster resource).
    `enabled` is False when none of the keys is set: every request is served, as today."""

    super_users: frozenset[str]
    cluster_action: frozenset[str]
    alter: frozenset[str]
    describe: frozenset[str]
    node_pattern: re.Pattern[str]
    enabled: bool

    def allows(self, principal: str, operation: str) -> bool:
        """`principal` (`User:...`) may perform `operation` (ClusterAction, Alter,
        Describe). Alter implies Describe, as Kafka's ACLs imply it."""
        if not self.enabled or principal in self.super_users:
            return True
        if operation == "ClusterAction":
            return principal in self.cluster_action
        if operation == "Alter":
            return principal in self.alter
        if operation == "Describe":
            return principal in self.describe or principal in self.alter
        return False

    def node_id_of(self, principal: str) -> int | None:
        """The node id a principal's name names (`kraft.authorizer.node.principal.pattern`),
        None for a principal that is not a node's."""
        _, _, name = principal.partition(":")
        found = self.node_pattern.search(name)
        if found is None:
            return None
        try:
            return int(found.group(1))
        except (IndexError, ValueError):
            return None


def _principals(key: str, value: str | None) -> frozenset[str]:
    """`super.users` syntax: `User:name;User:other` (Kafka splits on semicolons: a
    distinguished name holds commas)."""
    out: set[str] = set()
    for part in (value or "").split(";"):
        part = part.strip()
        if not part:
            continue
        kind, sep, name = part.partition(":")
        if not sep or not name or kind != "User":
            raise SecurityConfigError(key, f"{part!r} is not a principal of the form User:name "
                                      "(principals are separated by semicolons)")
        out.add(part)
    return frozenset(out)


def authorizer_settings(props: Mapping[str, str]) -> AuthorizerSettings:
    """The authorizer of `props`; raises SecurityConfigError naming a bad key."""
    pattern_text = props.get("kraft.authorizer.node.principal.pattern") or DEFAULT_NODE_PATTERN
    try:
        pattern = re.compile(pattern_text)
    except re.error as exc:
        raise SecurityConfigError("kraft.authorizer.node.principal.pattern",
                                  f"not a regular expression: {exc}") from None
    if pattern.groups < 1:
        raise SecurityConfigError("kraft.authorizer.node.principal.pattern",
                                  "needs one group: the node id")
    lists = {key: _principals(key, props.get(key)) for key in AUTHORIZER_KEYS[:4]}
    enabled = any(props.get(key, "").strip() for key in AUTHORIZER_KEYS[:4])
    return AuthorizerSettings(
        super_users=lists["super.users"],
        cluster_action=lists["kraft.authorizer.cluster.action.principals"],
        alter=lists["kraft.authorizer.alter.principals"],
        describe=lists["kraft.authorizer.describe.principals"],
        node_pattern=pattern, enabled=enabled)
