"""One Kafka-protocol client connection for admin calls (asyncio streams, no node runtime).

On open it sends ApiVersions (v3, falling back to v0 on UNSUPPORTED_VERSION, KIP-511) and
remembers the peer's version ranges and finalized features; each later request goes out at
the highest version both sides speak. Requests are sent one at a time (an admin client has
no use for pipelining).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any

from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey, api_spec
from kraft.protocol.errors import ErrorCode, ProtocolError
from kraft.protocol.framing import RequestHeader, decode_response, encode_request

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""Admin answers are small; a larger size prefix means the peer does not speak Kafka."""

CLIENT_SOFTWARE = ("kraft-admin", "0.1.0")


class WireError(Exception):
    """The connection failed or the peer's answer could not be used; `timed_out` tells a
    timeout from a refused or broken connection."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


CLUSTER_DNS_SUFFIXES = (".svc", ".svc.cluster.local", ".cluster.local")
"""Kubernetes cluster DNS names: they resolve only inside the cluster (or the sandbox)."""


def connect_problem(host: str, port: int, exc: BaseException) -> str:
    """What went wrong connecting to `host:port`, naming both; a name that does not resolve
    says so, and a cluster DNS name says where it does resolve."""
    if isinstance(exc, TimeoutError):
        return f"connect to {host}:{port} timed out"
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if isinstance(exc, socket.gaierror):
        text = f"{host}:{port}: the name {host!r} does not resolve here ({reason})"
        if host.rstrip(".").endswith(CLUSTER_DNS_SUFFIXES):
            text += ("; it is a Kubernetes cluster name: run the command inside the cluster "
                     "(in the sandbox, under `kraft-sandbox run`, which resolves cluster names)")
        return text
    return f"connect to {host}:{port} failed: {reason}"


class AdminConnection:
    """A connection to one controller listener (open with `connect`)."""

    def __init__(self, host: str, port: int, client_id: str = "kraft-admin",
                 tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        """`tls`: connect with TLS, with the context it gives (None: PLAINTEXT)."""
        self._tls = tls
        self.host = host
        self.port = port
        self.client_id = client_id
        self.ranges: dict[int, tuple[int, int]] = {}
        self.finalized_features: dict[str, int] = {}
        self.features_known = False
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = 0
        self._lock = asyncio.Lock()

    @property
    def address(self) -> str:
        """HOST:PORT of the peer."""
        return f"{self.host}:{self.port}"

    @property
    def closed(self) -> bool:
        """True before `connect` and after a failure or `close`."""
        return self._writer is None

    async def connect(self, timeout_s: float) -> None:
        """Open the TCP connection and exchange ApiVersions; raises WireError."""
        try:
            async with asyncio.timeout(timeout_s):
                if self._tls is None:
                    self._reader, self._writer = await asyncio.open_connection(self.host,
                                                                               self.port)
                else:
                    self._reader, self._writer = await asyncio.open_connection(
                        self.host, self.port, ssl=self._tls(), server_hostname=self.host,
                        ssl_handshake_timeout=timeout_s)
        except TimeoutError:
            raise WireError(f"connect to {self.address} timed out after {timeout_s:g} s",
                            timed_out=True) from None
        except OSError as exc:
            raise WireError(connect_problem(self.host, self.port, exc)) from None
        await self.api_versions(timeout_s)

    async def api_versions(self, timeout_s: float) -> None:
        """Exchange ApiVersions: the peer's version ranges and its finalized features now
        (kraft.version changes while a connection stays open); raises WireError."""
        name, version = CLIENT_SOFTWARE
        resp = await self._call(ApiKey.API_VERSIONS, 3, w.ApiVersionsRequestData(
            client_software_name=name, client_software_version=version), timeout_s)
        used = 3
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = await self._call(ApiKey.API_VERSIONS, 0, w.ApiVersionsRequestData(), timeout_s)
            used = 0
        if resp.error_code != ErrorCode.NONE:
            self.close()
            raise WireError(f"ApiVersions to {self.address} answered error {resp.error_code}")
        self.ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        self.features_known = used >= 3
        self.finalized_features = {f.name: f.max_version_level for f in resp.finalized_features}

    def version_for(self, api_key: ApiKey) -> int:
        """The highest version of `api_key` both sides speak; raises WireError if none."""
        ours = api_spec(api_key)
        theirs = self.ranges.get(int(api_key))
        if theirs is None:
            raise WireError(f"{self.address} does not serve {ours.name}")
        hi, lo = min(ours.max_version, theirs[1]), max(ours.min_version, theirs[0])
        if hi < lo:
            raise WireError(f"{self.address}: no common version of {ours.name} (ours "
                            f"{ours.min_version}-{ours.max_version}, theirs {theirs[0]}-{theirs[1]})")
        return hi

    async def request(self, api_key: ApiKey, body: object, timeout_s: float) -> tuple[int, Any]:
        """Send one request at the best common version; returns (version, response body)."""
        version = self.version_for(api_key)
        return version, await self._call(api_key, version, body, timeout_s)

    async def _call(self, api_key: ApiKey, version: int, body: object, timeout_s: float) -> Any:
        if self._reader is None or self._writer is None:
            raise WireError(f"connection to {self.address} is closed")
        reader, writer = self._reader, self._writer
        async with self._lock:
            self._corr += 1
            corr = self._corr
            frame = encode_request(RequestHeader(int(api_key), version, corr, self.client_id), body)
            try:
                async with asyncio.timeout(timeout_s):
                    writer.write(frame)
                    await writer.drain()
                    size = struct.unpack(">i", await reader.readexactly(4))[0]
                    if not 0 <= size <= MAX_RESPONSE_BYTES:
                        raise WireError(f"{self.address} sent a frame of {size} bytes")
                    raw = await reader.readexactly(size)
            except TimeoutError:
                self.close()
                raise WireError(f"{api_spec(api_key).name} to {self.address} got no answer "
                                f"within {timeout_s:g} s", timed_out=True) from None
            except (OSError, asyncio.IncompleteReadError) as exc:
                self.close()
                raise WireError(f"{api_spec(api_key).name} to {self.address} failed: "
                                f"{type(exc).__name__}: {exc}") from None
            except WireError:
                self.close()
                raise
        try:
            header, data = decode_response(int(api_key), version, raw)
        except ProtocolError as exc:
            self.close()
            raise WireError(f"undecodable {api_spec(api_key).name} answer from "
                            f"{self.address}: {exc}") from None
        if header.correlation_id != corr:
            self.close()
            raise WireError(f"{self.address} answered correlation id {header.correlation_id}, "
                            f"expected {corr}")
        return data

    def close(self) -> None:
        """Close the connection (idempotent)."""
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
