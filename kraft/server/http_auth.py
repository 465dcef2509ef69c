"""The HTTP port's TLS and authorization (settings: `kraft.config.http_security`).

* `TlsFiles` builds the port's `ssl.SSLContext` from the PEM keystore and truststore and
  swaps in a fresh one for each new connection once either file changed (the handshake's
  server-name callback, which OpenSSL runs for every ClientHello): a renewed certificate is
  served without a restart, and a file caught half-written is retried at the next handshake
  while the last good context keeps serving.
* `TokenFile` holds the SHA-256 of each token of the token file and re-reads the file when it
  changed, checked at every request: a rotated token counts from the next request on, a
  removed one is refused from then; a file left with no token line revokes them all. A file
  that cannot be read or parsed keeps the last good tokens (logged once per change), so a bad
  edit never opens the port nor locks it.
* `HttpAuthorizer` is the aiohttp middleware that decides each request before its handler
  runs (so before any body is read or anything applied): /healthz and /readyz are open; every
  other route needs the scope of `ROUTE_SCOPES` (admin > write > read). No credential or an
  unknown token answers 401 with `WWW-Authenticate: Bearer`; a credential without the scope
  answers 403.

A token is compared as its SHA-256 against every known digest with `hmac.compare_digest`,
all of them whatever matches, so the time taken says nothing about the tokens; tokens are
never logged, only the name of the line that matched.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from kraft.config.http_security import (
    KEYS,
    MAX_TOKEN_FILE_BYTES,
    HttpSecurity,
    HttpSecurityError,
    Scope,
    TokenEntry,
    parse_token_file,
    token_digest,
)
from kraft.config.security import distinguished_name
from kraft.server.metrics import CounterFamily, Registry

log = logging.getLogger("kraft.server.http_auth")

OPEN_ROUTES = frozenset({"/healthz", "/readyz"})
"""Routes answered without a credential (the kubelet's probes)."""

ROUTE_SCOPES: dict[tuple[str, str], Scope] = {
    ("GET", "/metrics"): Scope.READ,
    ("GET", "/v1/status"): Scope.READ,
    ("GET", "/v1/quorum"): Scope.READ,
    ("GET", "/v1/kv/{key}"): Scope.READ,
    ("PUT", "/v1/kv/{key}"): Scope.WRITE,
    ("DELETE", "/v1/kv/{key}"): Scope.WRITE,
    ("POST", "/v1/kv/{key}/cas"): Scope.WRITE,
    ("GET", "/v1/export"): Scope.ADMIN,
}
"""The scope each route needs, by method and route pattern; a route not listed (a new one, an
unknown path or method) needs admin, so a route added later is never open by mistake."""

RACY_S = 2.0
"""A file modified less than this long before it was read may be written again within the
same timestamp tick (the kernel's file clock is coarse): it is read again at the next check
even when its size and times look the same."""

PRINCIPAL_KEY = "kraft.principal"
"""Where a request carries who it was authorized as (`token:<name>` or `User:<DN>`)."""


class _FileWatch:
    """Whether a file changed since it was last read: its inode, size and times, and the
    content itself while its last change is recent (`RACY_S`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sig: tuple[int, int, int, int] | None = None
        self._settled = False
        self._content: bytes | None = None

    def read_if_changed(self, limit: int = MAX_TOKEN_FILE_BYTES) -> bytes | None:
        """The file's bytes when they differ from those last returned, else None. Raises
        OSError when the file cannot be read (the caller keeps what it has)."""
        st = os.stat(self.path)
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if sig == self._sig and self._settled:
            return None
        with open(self.path, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise OSError(f"larger than {limit} bytes")
        self._sig = sig
        self._settled = time.time() - st.st_mtime_ns / 1e9 > RACY_S
        if data == self._content:
            return None
        self._content = data
        return data

    def forget(self) -> None:
        """Read the file again at the next check (what was read could not be used)."""
        self._sig = None
        self._content = None


class TokenFile:
    """The token file's entries, re-read when the file changes (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        """Reads the file; raises HttpSecurityError when it cannot be read or parsed (a node
        does not start on a bad token file)."""
        self.path = path
        self._watch = _FileWatch(path)
        self._entries: tuple[TokenEntry, ...] = ()
        self._bad: str | None = None
        self.generation = 0
        """Counts the reloads that changed the entries (a holder of a digest checks it again
        when this moved)."""
        try:
            data = self._watch.read_if_changed()
        except OSError as exc:
            raise HttpSecurityError(f"{KEYS['token_file']}={path}: cannot read: "
                                    f"{exc.strerror or exc}") from None
        self._entries = tuple(self._parse(data or b"", allow_empty=False))

    def _parse(self, data: bytes, *, allow_empty: bool) -> list[TokenEntry]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise HttpSecurityError(f"{self.path}: not UTF-8 text") from None
        return parse_token_file(text, str(self.path), allow_empty=allow_empty)

    @property
    def entries(self) -> tuple[TokenEntry, ...]:
        """The tokens in force (digests, names, scopes)."""
        return self._entries

    def refresh(self) -> None:
        """Re-read the file if it changed; a file that cannot be used keeps the last good
        entries and is logged once (until it changes again)."""
        try:
            data = self._watch.read_if_changed()
            if data is None:
                return
            entries = self._parse(data, allow_empty=True)
        except (OSError, HttpSecurityError) as exc:
            self._watch.forget()
            problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if problem != self._bad:
                self._bad = problem
                log.error("event=http_token_file_invalid file=%s kept=%d error=%r",
                          self.path, len(self._entries), problem)
            return
        self._bad = None
        old = {e.name for e in self._entries}
        self._entries = tuple(entries)
        self.generation += 1
        log.log(logging.INFO if entries else logging.WARNING,
                "event=http_token_file_reloaded file=%s tokens=%d names=%s", self.path,
                len(entries), ",".join(sorted({e.name for e in entries} | old)))

    def lookup(self, token: str) -> TokenEntry | None:
        """The entry of `token` (the file re-read first if it changed), or None. Every digest
        is compared, in constant time each."""
        self.refresh()
        return self.lookup_digest(token_digest(token))

    def lookup_digest(self, digest: bytes) -> TokenEntry | None:
        """The entry whose token has this SHA-256, or None (the file is not re-read: the
        caller refreshes). Every digest is compared, in constant time each."""
        found: TokenEntry | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry
        return found


class TlsFiles:
    """The HTTP port's TLS contexts from the PEM files, renewed for new connections when the
    files change (see the module docstring)."""

    def __init__(self, sec: HttpSecurity) -> None:
        """Builds the first context; raises HttpSecurityError naming the key and file when a
        file cannot be read or the key does not match the certificate."""
        assert sec.keystore is not None
        self.sec = sec
        self._watches = [_FileWatch(p) for p in (sec.keystore, sec.truststore) if p is not None]
        self._bad: str | None = None
        for watch in self._watches:  # first, so a change while building is seen next time
            with contextlib.suppress(OSError):
                watch.read_if_changed()
        self.server_context = self._build()
        self.current = self.server_context
        self.server_context.sni_callback = self._on_hello

    def _build(self) -> ssl.SSLContext:
        """A context from the files as they are now; raises HttpSecurityError naming the key
        and file."""
        sec = self.sec
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        assert sec.keystore is not None
        try:
            ctx.load_cert_chain(sec.keystore, password=sec.key_password)
        except (OSError, ssl.SSLError) as exc:
            raise HttpSecurityError(
                f"{KEYS['keystore']}={sec.keystore}: {_ssl_problem(exc)} (a PEM file with the "
                f"private key and its certificate chain; {KEYS['key_password']} for an "
                "encrypted key)") from None
        if sec.truststore is not None and sec.client_auth != "none":
            try:
                ctx.load_verify_locations(cafile=str(sec.truststore))
            except (OSError, ssl.SSLError) as exc:
                raise HttpSecurityError(f"{KEYS['truststore']}={sec.truststore}: "
                                        f"{_ssl_problem(exc)} (a PEM file of CA "
                                        "certificates)") from None
        ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[sec.client_auth]
        return ctx

    def refresh(self) -> ssl.SSLContext:
        """The context for a new connection: a new one when a file changed and its contents
        make a working context, else the last good one."""
        try:
            changed = False
            for watch in self._watches:
                changed = watch.read_if_changed() is not None or changed
            if not changed:
                return self.current
            fresh = self._build()
        except (OSError, HttpSecurityError) as exc:
            for watch in self._watches:
                watch.forget()
            problem = _ssl_problem(exc) if isinstance(exc, OSError) else str(exc)
            if problem != self._bad:
                self._bad = problem
                log.error("event=http_tls_reload_failed error=%r kept=previous", problem)
            return self.current
        self._bad = None
        self.current = fresh
        log.info("event=http_tls_reloaded keystore=%s truststore=%s", self.sec.keystore,
                 self.sec.truststore or "-")
        return fresh

    def _on_hello(self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                  ctx: ssl.SSLContext) -> None:
        fresh = self.refresh()
        if fresh is not self.server_context:
            conn.context = fresh  # verify_mode stays the listener's; certs and CAs are fresh


def _ssl_problem(exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"cannot load: {exc.reason or exc.strerror or 'error'}"
    return exc.strerror or str(exc)


def principal_of(peercert: dict[str, Any] | None) -> str | None:
    """Kafka's default principal of a verified client certificate: `User:` and its subject
    in RFC 2253 form (the last RDN first, as Java's `X500Principal.getName()`), or None."""
    if not peercert or not peercert.get("subject"):
        return None
    return "User:" + distinguished_name(peercert["subject"])


def no_scope_reason(principal: str) -> str:
    """Why a verified certificate's principal gets nothing (it is in no scope list)."""
    return (f"principal {principal} has no scope (name it in {KEYS['read']}, {KEYS['write']} "
            f"or {KEYS['admin']})")


@dataclass(frozen=True, slots=True)
class _Refusal:
    status: int
    reason: str
    header: str


class HttpAuthorizer:
    """The middleware deciding every request (see the module docstring)."""

    def __init__(self, sec: HttpSecurity, registry: Registry | None = None) -> None:
        """Reads the token file when one is set (raises HttpSecurityError if it is bad).
        With `registry`, refusals are counted in `kraft_http_refused_total{status}`."""
        self.sec = sec
        self.tokens = TokenFile(sec.token_file) if sec.token_file is not None else None
        self.refused = 0
        self._counted: CounterFamily | None = None
        if registry is not None:
            self._counted = registry.counter_family(
                "kraft_http_refused_total",
                "HTTP requests refused before their handler ran: 401 (no credential or an "
                "unknown token), 403 (a credential without the route's scope)", ("status",))
        self._last_log = 0.0
        self._unlogged = 0

    @staticmethod
    def scope_needed(request: web.Request) -> Scope | None:
        """The scope `request` needs; None for an open route."""
        resource = request.match_info.route.resource
        pattern = resource.canonical if resource is not None else request.path
        if pattern in OPEN_ROUTES:
            return None
        method = "GET" if request.method == "HEAD" else request.method
        return ROUTE_SCOPES.get((method, pattern), Scope.ADMIN)

    def _credential(self, request: web.Request) -> tuple[str, Scope] | _Refusal:
        """(who, scope) of the request's token or client certificate, or why not."""
        header = request.headers.get("Authorization")
        if header is not None:
            kind, _, token = header.strip().partition(" ")
            token = token.strip()
            if kind.lower() != "bearer" or not token:
                return _Refusal(401, "the Authorization header is not 'Bearer <token>'",
                                'Bearer realm="kraft", error="invalid_request"')
            got = self.token_credential(token)
            if got is None:
                return _Refusal(401, "unknown token",
                                'Bearer realm="kraft", error="invalid_token"')
            return got
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        principal = principal_of(ssl_object.getpeercert()) if ssl_object is not None else None
        if principal is not None:
            scope = self.sec.scope_of_principal(principal)
            if scope is None:
                return _Refusal(403, no_scope_reason(principal),
                                'Bearer realm="kraft", error="insufficient_scope"')
            return principal, scope
        return _Refusal(401, "no credential: send Authorization: Bearer <token>"
                        + (" or a client certificate" if self.sec.client_auth != "none" else ""),
                        'Bearer realm="kraft"')

    def token_credential(self, token: str) -> tuple[str, Scope] | None:
        """(`token:<name>`, scope) of a token the file holds, or None."""
        entry = self.tokens.lookup(token) if self.tokens is not None else None
        return None if entry is None else (f"token:{entry.name}", entry.scope)

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                         ) -> web.StreamResponse:
        """Answers 401/403 before `handler` runs, or runs it with `PRINCIPAL_KEY` set."""
        needed = self.scope_needed(request)
        if needed is None:
            return await handler(request)
        got = self._credential(request)
        if not isinstance(got, _Refusal):
            who, scope = got
            if scope >= needed:
                request[PRINCIPAL_KEY] = who
                return await handler(request)
            got = _Refusal(403, f"{who} has scope {scope.label}; {request.method} "
                           f"{request.path} needs {needed.label}",
                           f'Bearer realm="kraft", error="insufficient_scope", '
                           f'scope="{needed.label}"')
        self._log_refusal(request, got)
        return web.json_response({"error": got.reason}, status=got.status,
                                 headers={"WWW-Authenticate": got.header})

    def _log_refusal(self, request: web.Request, refusal: _Refusal) -> None:
        """Refusals are counted; logged at most once a second (a flood of them is one line
        a second saying how many were not logged)."""
        self.refused += 1
        if self._counted is not None:
            self._counted.labels(str(refusal.status)).inc()
        now = time.monotonic()
        if now - self._last_log < 1.0:
            self._unlogged += 1
            return
        log.warning("event=http_refused status=%d method=%s path=%s peer=%s reason=%r "
                    "unlogged_since_last=%d", refusal.status, request.method, request.path,
                    request.remote, refusal.reason, self._unlogged)
        self._last_log = now
        self._unlogged = 0
