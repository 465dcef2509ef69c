"""What a client of a node's HTTP port presents: a bearer token and TLS trust
(docs/security.md, "The HTTP port").

Every HTTP client of the project (`QuorumClient.node_health`, `kraft.cli.local.http_call`, the
sandbox demo, the e2e traffic, the bench harness) takes one `HttpCredentials`. On the command
line they come from `--token-file FILE` (a file holding the token alone: a token never appears
in `ps`, a shell's history or the environment the nodes inherit), `--http-cafile` (the CAs
that sign the nodes' HTTP certificates; given, addresses without a scheme are `https://`),
and `--http-certfile` / `--http-keyfile` (a client certificate, for a port that maps
certificate principals to scopes).

    creds = HttpCredentials.from_files(token_file="reader.token", cafile="ca.pem")
    headers, context = creds.headers(), creds.ssl_context()
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass, field
from pathlib import Path

MAX_TOKEN_BYTES = 4096
"""The most a client token file may hold."""


class CredentialsError(ValueError):
    """A token or certificate file that cannot be used; the message names the file (never
    the token)."""


def read_token_file(path: str | Path) -> str:
    """The token of a client token file: its first line that is neither blank nor a `#`
    comment, stripped. Raises CredentialsError naming the file."""
    try:
        raw = Path(path).read_bytes()[:MAX_TOKEN_BYTES + 1]
    except OSError as exc:
        raise CredentialsError(f"token file {path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_TOKEN_BYTES:
        raise CredentialsError(f"token file {path}: larger than {MAX_TOKEN_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialsError(f"token file {path}: not UTF-8 text") from None
    for line in text.splitlines():
        token = line.strip()
        if token and not token.startswith("#"):
            if any(c.isspace() or not c.isprintable() for c in token):
                raise CredentialsError(f"token file {path}: the token holds whitespace or a "
                                       "control character")
            return token
    raise CredentialsError(f"token file {path}: no token in it")


@dataclass(frozen=True)
class HttpCredentials:
    """A bearer token and TLS settings for a node's HTTP port (all optional)."""

    token: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True
    """Whether the server's certificate must name the host connected to (as curl does)."""

    @classmethod
    def from_files(cls, token_file: str | Path | None = None, cafile: str | Path | None = None,
                   certfile: str | Path | None = None, keyfile: str | Path | None = None,
                   ) -> HttpCredentials:
        """Credentials from files (the token read now); raises CredentialsError."""
        if keyfile is not None and certfile is None:
            raise CredentialsError("a client key file needs its certificate file")
        creds = cls(token=read_token_file(token_file) if token_file is not None else None,
                    cafile=str(cafile) if cafile is not None else None,
                    certfile=str(certfile) if certfile is not None else None,
                    keyfile=str(keyfile) if keyfile is not None else None)
        creds.ssl_context()  # a bad CA or certificate file is named now, not at first call
        return creds

    @property
    def tls(self) -> bool:
        """Whether addresses without a scheme are reached over HTTPS."""
        return self.cafile is not None or self.certfile is not None

    @property
    def scheme(self) -> str:
        """`https` or `http`."""
        return "https" if self.tls else "http"

    def url(self, address: str, path: str = "") -> str:
        """`address` (HOST:PORT or a URL) joined with `path`."""
        base = address if "://" in address else f"{self.scheme}://{address}"
        return base.rstrip("/") + path

    def headers(self) -> dict[str, str]:
        """The request headers that carry the token (none without one)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (the given CAs, else the system's), or None for plain HTTP.
        Raises CredentialsError naming a file that cannot be used."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        ctx.check_hostname = self.check_hostname
        try:
            if self.cafile is not None:
                ctx.load_verify_locations(cafile=self.cafile)
            if self.certfile is not None:
                ctx.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise CredentialsError(f"TLS files (CA {self.cafile}, certificate "
                                   f"{self.certfile}): {exc}") from None
        return ctx


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command-line options of `HttpCredentials` (`from_arguments` reads them)."""
    parser.add_argument("--token-file", default=None, metavar="FILE",
                        help="a file holding the bearer token for the nodes' HTTP ports")
    parser.add_argument("--http-cafile", default=None, metavar="PEM",
                        help="CA certificates of the nodes' HTTP ports (implies https)")
    parser.add_argument("--http-certfile", default=None, metavar="PEM",
                        help="client certificate chain for the HTTP ports (with its key, or "
                             "--http-keyfile)")
    parser.add_argument("--http-keyfile", default=None, metavar="PEM",
                        help="private key of --http-certfile")


def from_arguments(args: argparse.Namespace) -> HttpCredentials:
    """The credentials `add_arguments`' options name; raises CredentialsError."""
    return HttpCredentials.from_files(args.token_file, args.http_cafile, args.http_certfile,
                                      args.http_keyfile)
