"""Who may use the binary client port (`client.listener`): the HTTP port's TLS and credentials.

The binary port serves the same KV API as the HTTP port, so one set of settings secures both
(`kraft.config.http_security`, docs/security.md "The HTTP port"): with
`kraft.http.ssl.keystore.location` set the port speaks TLS only, with the same certificate,
renewed for new connections the same way (`kraft.server.http_auth.TlsFiles`); with a token
file or `kraft.http.ssl.client.auth` other than `none`, every op needs a credential of its
scope: read for GET and GET_STALE, write for PUT and DELETE.

A connection's credential is its client certificate's principal (from the handshake, given a
scope by the `kraft.http.auth.*.principals` lists) or the token of its last AUTH frame
(`kraft.protocol.kv_wire`). A token counts only while the token file holds it: once the file
drops it, the connection's next op is UNAUTHENTICATED. An AUTH naming an unknown token is
answered UNAUTHENTICATED and the connection closed: one guess per connection, and connections
are held to the listener's limits. A refused op is answered before anything of it is proposed
or read; refusals are counted in `kraft_bad_requests_total{listener="client"}` and logged as
`event=bad_request` (rate-limited, never the token).

With security on, the connection is never lent to the leader's native lane (it reads raw
sockets and checks no credential): its writes take the Python path.
"""

from __future__ import annotations

from typing import Any

from kraft.config.http_security import KEYS, HttpSecurity, Scope, token_digest
from kraft.protocol.kv_wire import FORBIDDEN, OP_DELETE, OP_PUT, UNAUTHENTICATED
from kraft.server.http_auth import HttpAuthorizer, TlsFiles, no_scope_reason, principal_of

MAX_TOKEN_BYTES = 4096
"""The longest token an AUTH frame may carry (a token file's tokens are far shorter)."""


class ClientAuth:
    """The binary port's TLS and authorization, from the node's HTTP security settings."""

    def __init__(self, security: HttpSecurity, tls: TlsFiles | None,
                 authorizer: HttpAuthorizer | None) -> None:
        """`tls` and `authorizer` may be the HTTP port's own (one token file and one set of
        certificate files watched for both); `for_settings` builds them when there is none."""
        self.security = security
        self.tls = tls
        self.authorizer = authorizer

    @classmethod
    def for_settings(cls, security: HttpSecurity, tls: TlsFiles | None = None,
                     authorizer: HttpAuthorizer | None = None) -> ClientAuth | None:
        """None when the settings ask for neither TLS nor credentials (the port is open);
        raises HttpSecurityError when their files cannot be used."""
        if not security.tls and not security.authenticates:
            return None
        if security.tls and tls is None:
            tls = TlsFiles(security)
        if security.authenticates and authorizer is None:
            authorizer = HttpAuthorizer(security)
        return cls(security, tls, authorizer)

    @property
    def authenticates(self) -> bool:
        """Whether ops need a credential."""
        return self.authorizer is not None

    def session(self, ssl_object: Any) -> Session:
        """The credential state of a connection just made on a port that `authenticates`
        (`ssl_object`: its TLS object, or None on a plaintext port)."""
        assert self.authorizer is not None
        session = Session(self, self.authorizer)
        if ssl_object is not None:
            principal = principal_of(ssl_object.getpeercert())
            if principal is not None:
                session.who = principal
                session.scope = self.security.scope_of_principal(principal)
                if session.scope is None:  # known, and given nothing: HTTP's 403
                    session.status = FORBIDDEN
                    session.reason = no_scope_reason(principal)
        return session

    def describe(self) -> str:
        """key=value words for the listener's start line."""
        return (f"tls={'on' if self.tls is not None else 'off'} "
                f"auth={'on' if self.authorizer is not None else 'off'}")


class Session:
    """One connection's credential: who it is, the scope it holds (None: none yet), and for a
    token its SHA-256, checked again when the token file changes."""

    __slots__ = ("_authorizer", "_digest", "_generation", "reason", "scope", "status", "who")

    def __init__(self, auth: ClientAuth, authorizer: HttpAuthorizer) -> None:
        self._authorizer = authorizer
        self.who = "anonymous"
        self.scope: Scope | None = None
        self.reason = ("no credential: send AUTH bearer <token>"
                       + (" or a client certificate" if auth.security.client_auth != "none"
                          else ""))
        """Why an op is refused while `scope` is None, with `status`."""
        self.status = UNAUTHENTICATED
        self._digest: bytes | None = None
        self._generation = 0

    def check(self) -> None:
        """Before the ops of a read: a token the file no longer holds stops counting."""
        tokens = self._authorizer.tokens
        if self._digest is None or tokens is None:
            return
        tokens.refresh()
        if tokens.generation == self._generation:
            return
        self._generation = tokens.generation
        entry = tokens.lookup_digest(self._digest)
        if entry is None:
            self._digest = None
            self.scope = None
            self.reason = f"the token of {self.who} was revoked: send AUTH with a current one"
        else:
            self.scope = entry.scope

    def login(self, token: bytes) -> str | None:
        """An AUTH frame's token: None once it is this connection's credential, else why not
        (the caller answers UNAUTHENTICATED and closes the connection)."""
        tokens = self._authorizer.tokens
        if tokens is None:
            return (f"this port takes no token ({KEYS['token_file']} is not set): present a "
                    "client certificate")
        if not token or len(token) > MAX_TOKEN_BYTES:
            return "unknown token"
        tokens.refresh()
        digest = token_digest(token)  # the digest of the bytes the token file's text gives
        entry = tokens.lookup_digest(digest)
        if entry is None:
            return "unknown token"
        self.who, self.scope = f"token:{entry.name}", entry.scope
        self.status = UNAUTHENTICATED
        self._digest = digest
        self._generation = tokens.generation
        return None

    def refusal(self, op: int) -> tuple[int, str] | None:
        """(status, reason) when `op` is not allowed, else None."""
        scope = self.scope
        needed = Scope.WRITE if op in (OP_PUT, OP_DELETE) else Scope.READ
        if scope is not None and scope >= needed:
            return None
        if scope is None:
            return self.status, self.reason
        return FORBIDDEN, f"{self.who} has scope {scope.label}; the op needs {needed.label}"
