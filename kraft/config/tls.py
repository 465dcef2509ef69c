"""`ssl.SSLContext`s built from `SslSettings`, rebuilt when the files they came from change.

`TlsContexts` is what a listener and a client hold: `server_context()` and `client_context()`
return a context for the next connection; each call compares the keystore's and the
truststore's (mtime, size, inode) with those the current contexts were built from, and
rebuilds them when one changed (a certificate rotated by replacing the file, as a
Kubernetes Secret volume does). A file that cannot be read or parsed as it is being
replaced keeps the previous contexts, with a warning; at start, it raises
`TlsMaterialError` naming the key.

A listener's context serves with the context that is current at each handshake: the context
given to the listener picks the current one from OpenSSL's ClientHello callback
(`sni_callback`, called for every handshake, with or without SNI), so a rotated certificate
is served to the next connection and a connection already open keeps its own.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from kraft.config.security import (
    PrincipalMapper,
    SecurityConfigError,
    SslSettings,
    distinguished_name,
    ssl_settings,
)

log = logging.getLogger("kraft.config.tls")

ANONYMOUS = "User:ANONYMOUS"
"""Kafka's principal of a connection that presented no certificate (and of PLAINTEXT)."""


class TlsMaterialError(ValueError):
    """A keystore or truststore that cannot be loaded; names the key it came from."""


_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _stamp(path: str | None) -> tuple[int, int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class TlsContexts:
    """The server and client contexts of one `SslSettings`, reloaded on file change."""

    def __init__(self, settings: SslSettings) -> None:
        self.settings = settings
        self._stamps: tuple[object, ...] = ()
        self._server: ssl.SSLContext | None = None
        self._client: ssl.SSLContext | None = None
        self._base: ssl.SSLContext | None = None
        self.reloads = 0
        """How many times the contexts were rebuilt after a file changed."""
        self._load(first=True)

    # ------------------------------------------------------------------ building

    def _files_stamp(self) -> tuple[object, ...]:
        s = self.settings
        return (_stamp(s.keystore_location), _stamp(s.truststore_location))

    def _load(self, first: bool) -> None:
        stamps = self._files_stamp()
        try:
            server = self._build(server_side=True)
            client = self._build(server_side=False)
        except TlsMaterialError as exc:
            if first:
                raise
            log.warning("event=tls_reload_failed error=%r (the previous certificates stay in "
                        "use)", str(exc))
            self._stamps = stamps  # tried: wait for the next change
            return
        if not first:
            self.reloads += 1
            log.info("event=tls_reloaded keystore=%s truststore=%s",
                     self.settings.keystore_location or "-",
                     self.settings.truststore_location or "-")
        self._server, self._client, self._stamps = server, client, stamps

    def _build(self, server_side: bool) -> ssl.SSLContext:
        s = self.settings
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
        versions = sorted(_VERSIONS[p] for p in s.enabled_protocols)
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        if s.cipher_suites:
            try:
                ctx.set_ciphers(":".join(s.cipher_suites))
            except ssl.SSLError as exc:
                raise TlsMaterialError(f"{s.key_of('ssl.cipher.suites')}: no usable cipher "
                                       f"({exc})") from None
        if server_side:
            ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                               "none": ssl.CERT_NONE}[s.client_auth]
        else:
            ctx.check_hostname = s.endpoint_identification
            ctx.verify_mode = ssl.CERT_REQUIRED
        self._load_truststore(ctx, server_side)
        self._load_keystore(ctx)
        return ctx

    def _load_truststore(self, ctx: ssl.SSLContext, server_side: bool) -> None:
        s = self.settings
        try:
            if s.truststore_location is not None:
                ctx.load_verify_locations(cafile=s.truststore_location)
            elif s.truststore_certificates is not None:
                ctx.load_verify_locations(cadata=s.truststore_certificates)
            elif not server_side:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        except (OSError, ssl.SSLError) as exc:
            key = s.key_of("ssl.truststore.location" if s.truststore_location is not None
                           else "ssl.truststore.certificates")
            raise TlsMaterialError(f"{key}: cannot load the trusted certificates: "
                                   f"{_reason(exc)}") from None

    def _load_keystore(self, ctx: ssl.SSLContext) -> None:
        s = self.settings
        password = s.key_password
        if s.keystore_location is not None:
            try:
                ctx.load_cert_chain(s.keystore_location, password=password)
            except (OSError, ssl.SSLError) as exc:
                raise TlsMaterialError(f"{s.key_of('ssl.keystore.location')}: cannot load "
                                       f"the key and certificate chain: {_reason(exc)}") from None
        elif s.keystore_key is not None and s.keystore_certificate_chain is not None:
            # OpenSSL loads a chain from a file only: a private file that lives for the call
            with tempfile.TemporaryDirectory(prefix="kraft-tls-") as tmp:
                path = Path(tmp) / "keystore.pem"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(s.keystore_key.strip() + "\n" + s.keystore_certificate_chain.strip()
                            + "\n")
                try:
                    ctx.load_cert_chain(str(path), password=password)
                except (OSError, ssl.SSLError) as exc:
                    raise TlsMaterialError(f"{s.key_of('ssl.keystore.key')}: cannot load the "
                                           f"inline key and certificate chain: "
                                           f"{_reason(exc)}") from None

    def _current(self) -> None:
        if self._files_stamp() != self._stamps:
            self._load(first=False)

    # ------------------------------------------------------------------ use

    def server_context(self) -> ssl.SSLContext:
        """The context a new server-side handshake uses (reloaded when a file changed)."""
        self._current()
        assert self._server is not None
        return self._server

    def client_context(self) -> ssl.SSLContext:
        """The context of a new outgoing connection (reloaded when a file changed)."""
        self._current()
        assert self._client is not None
        return self._client

    def listener_context(self) -> ssl.SSLContext:
        """The one context to give a listener: each handshake switches to the current
        server context (module docstring)."""
        if self._base is None:
            base = self._build(server_side=True)

            def pick(sslobj: ssl.SSLObject | ssl.SSLSocket, _name: str | None,
                     _ctx: ssl.SSLContext) -> None:
                current = self.server_context()
                if sslobj.context is not current:
                    sslobj.context = current

            base.sni_callback = pick
            self._base = base
        return self._base

    def principal_of(self, peercert: dict[str, object] | None) -> str | None:
        """The principal of a verified peer certificate (`User:` + the mapped distinguished
        name), ANONYMOUS without a certificate, None when no mapping rule matches."""
        return principal_of(peercert, self.settings.principal_rules)


def principal_of(peercert: dict[str, object] | None, rules: PrincipalMapper) -> str | None:
    """See `TlsContexts.principal_of`."""
    if not peercert:
        return ANONYMOUS
    subject = peercert.get("subject")
    if not isinstance(subject, tuple):
        return ANONYMOUS
    name = rules.principal_name(distinguished_name(subject))
    return None if name is None else f"User:{name}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


ContextSource = Callable[[], ssl.SSLContext]
"""Gives the context of the next outgoing connection."""

CLIENT_PROTOCOLS = ("PLAINTEXT", "SSL")


def client_contexts(props: Mapping[str, str]) -> TlsContexts | None:
    """A client's TLS from its properties (`--command-config`, Kafka's client keys):
    `security.protocol=SSL` with the bare `ssl.*` keys; None for PLAINTEXT (the default).
    Raises SecurityConfigError or TlsMaterialError naming the key."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in CLIENT_PROTOCOLS:
        raise SecurityConfigError("security.protocol", f"{protocol} is not supported "
                                  f"(one of {', '.join(CLIENT_PROTOCOLS)}; SASL is not "
                                  "implemented)")
    if protocol == "PLAINTEXT":
        return None
    return TlsContexts(ssl_settings(props))
