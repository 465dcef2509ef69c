"""The HTTP API (aiohttp) of a node, on its admin HTTP port: health, readiness, metrics, quorum, KV API.

Routes:

| route | answer |
| --- | --- |
| `GET /healthz` | liveness: 200 `ok` while the process and its event loop run |
| `GET /readyz` | readiness: 200 when this node is in a working quorum and caught up (`KraftNode.readiness`, docs/node.md "Probes"); else 503; JSON `{"ready", "reason", "role", "epoch", "leader_id", "applied_offset", "leader_high_watermark"}` |
| `GET /metrics` | Prometheus text |
| `GET /v1/status` | this node's view (role, epoch, leader, offsets) as JSON |
| `GET /v1/quorum` | DescribeQuorum of the leader as JSON |
| `PUT /v1/kv/{key}` | body = value bytes (at most `MAX_VALUE_BYTES`, else 413 naming the limit); 200 `{"offset": N}` once committed and applied |
| `GET /v1/kv/{key}` | 200 with the value bytes, 404 when absent (linearizable) |
| `DELETE /v1/kv/{key}` | 200 `{"existed": bool}` |
| `GET /v1/export` | a consistent tar bundle of this replica's segments and snapshots (`kraft export`), streamed |
| `POST /v1/kv/{key}/cas` | JSON `{"expected": b64|null, "value": b64|null}` → `{"swapped": bool, "previous": b64|null}` |

Any node takes KV calls: a node that is not the leader forwards each to the leader over the
controller listener (`kraft.server.forward`) and relays its answer. Only when no leader takes
it within the call's time does it answer `307` with the leader's admin address in `Location`
(when `http.peers` names it), else `503` `NOT_LEADER_OR_FOLLOWER` naming the leader id; nothing
was applied then. A write whose outcome is unknown (leader changed before commit, timeout, the
forwarded call's answer lost) answers `503` with `"outcome": "unknown"`.

Security (`kraft.server.http_auth`, docs/security.md): with `kraft.http.ssl.keystore.location`
the port speaks HTTPS only; with a token file or `kraft.http.ssl.client.auth`, every route but
/healthz and /readyz needs a credential of enough scope (read: GETs and metrics; write: PUT,
DELETE, CAS; admin: export), else 401 or 403 before anything is read or applied. With neither,
the port takes every call from anyone who reaches it, and the node says so once at start.

`GET /v1/kv/{key}?stale=true` reads this node's local state without any leadership check. It is
NOT linearizable; it exists so the test suite can show that its linearizability checker catches
stale reads.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast

from aiohttp import web

from kraft.config.http_security import HttpSecurity, describe
from kraft.server.connection_limits import ConnectionGuard, ListenerGuard
from kraft.server.http_auth import PRINCIPAL_KEY, HttpAuthorizer, TlsFiles
from kraft.server.http_guard import HttpConnections
from kraft.server.kv_api import (
    ForwardRefusedError,
    KafkaQuorumError,
    KvAnswer,
    KvCall,
    KvOp,
    NotLeaderError,
    OutcomeUnknownError,
    WriteRefusedError,
)
from kraft.server.metrics import Registry
from kraft.statemachine.kv import MAX_KEY_BYTES, MAX_VALUE_BYTES
from kraft.storage.export import ExportError, export_bundle

log = logging.getLogger("kraft.server.http_api")

MAX_CAS_BODY_BYTES = 2 * (4 * ((MAX_VALUE_BYTES + 2) // 3)) + 1024
"""The largest CAS body: its expected and new values at MAX_VALUE_BYTES each, in base64."""


class HttpKv(Protocol):
    """What the HTTP API uses of the KV front end (`kraft.server.kv_front` `KvFront`): its
    calls, run at the leader, and its stale reads."""

    async def kv_call(self, call: KvCall) -> KvAnswer:
        """Run a KV call at the leader: here when this node leads, else forwarded to it.
        Raises NotLeaderError (nothing applied), OutcomeUnknownError or ForwardRefusedError."""
        ...

    def kv_get_stale(self, key: str) -> bytes | None:
        """Local, non-linearizable read."""
        ...


class NodeAPI(Protocol):
    """What the HTTP API needs from the node runtime itself."""

    def status(self) -> dict[str, Any]:
        """This node's view of the quorum, JSON-ready."""
        ...

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason)."""
        ...

    def probe_view(self) -> dict[str, Any]:
        """What a readiness answer shows besides its verdict: role, epoch, leader, offsets."""
        ...

    def render_metrics(self) -> str:
        """Prometheus text."""
        ...

    async def describe_quorum(self) -> dict[str, Any]:
        """DescribeQuorum from the leader, JSON-ready; raises NotLeaderError if none known."""
        ...

    def lane_catch_up(self) -> asyncio.Future[None] | None:
        """What a local read waits for first (a follower's native lane), or None."""
        ...

    def request_refused(self) -> None:
        """A request was refused for a key or value above its limit (counted)."""
        ...


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(value: Any, field: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a base64 string or null")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{field} is not valid base64") from None


class HttpApiServer:
    """Serves the routes in the module docstring for one node."""

    def __init__(self, kv: HttpKv, node: NodeAPI, host: str, port: int,
                 metadata_dir: Path | None = None, guard: ListenerGuard | None = None,
                 security: HttpSecurity | None = None, registry: Registry | None = None,
                 ) -> None:
        """`guard` holds the connections to the node's limits (`kraft.server.http_guard`);
        by default a guard of its own with the default limits. `security`: TLS and who may
        call what (`kraft.server.http_auth`); by default plain HTTP open to all. Raises
        HttpSecurityError when its files cannot be used. `registry`: where refusals are
        counted (the node's metrics)."""
        self.kv = kv
        self.node = node
        self.host = host
        self.port = port
        self.metadata_dir = metadata_dir
        # The largest body any route takes: a CAS's two values in base64 and JSON. A PUT's
        # body is the value itself, held to exactly MAX_VALUE_BYTES by `kv_put`.
        self.app = web.Application(client_max_size=MAX_CAS_BODY_BYTES)
        self.app.add_routes(
            [
                web.get("/healthz", self.healthz),
                web.get("/readyz", self.readyz),
                web.get("/metrics", self.metrics),
                web.get("/v1/status", self.status),
                web.get("/v1/quorum", self.quorum),
                web.get("/v1/export", self.export),
                web.put("/v1/kv/{key}", self.kv_put),
                web.get("/v1/kv/{key}", self.kv_get),
                web.delete("/v1/kv/{key}", self.kv_delete),
                web.post("/v1/kv/{key}/cas", self.kv_cas),
            ]
        )
        if guard is None:
            own = ConnectionGuard()
            guard = own.listener("http", own.limits.http_max_connections)
        self._connections = HttpConnections(guard)
        self.app.middlewares.append(self._connections.middleware)
        self.security = security if security is not None else HttpSecurity()
        self.tls = TlsFiles(self.security) if self.security.tls else None
        self.authorizer = (HttpAuthorizer(self.security, registry)
                           if self.security.authenticates else None)
        if self.authorizer is not None:
            self.app.middlewares.append(self.authorizer.middleware)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        """Bind and serve; returns the bound port."""
        idle_ms = self._connections.guard.node.limits.idle_ms
        # aiohttp's own keep-alive close never comes first: the guard closes idle connections
        keepalive_s = idle_ms / 1000 + 60 if idle_ms >= 0 else 3630.0
        self._runner = web.AppRunner(self.app, access_log=None, keepalive_timeout=keepalive_s)
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        tls = self.tls.server_context if self.tls is not None else None
        # a handshake is held to the headers' deadline: a client cannot park a connection
        # in it longer than in a request's headers
        handshake_s = self._connections.header_timeout_s if tls is not None else None
        self._server = await loop.create_server(self._connections.factory(self._runner),
                                                self.host, self.port, reuse_address=True,
                                                ssl=tls, ssl_handshake_timeout=handshake_s)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("event=admin_listening host=%s port=%d %s", self.host, self.port,
                 " ".join(describe(self.security)))
        if self.authorizer is None:
            log.warning("event=http_open host=%s port=%d detail=%r", self.host, self.port,
                        "the HTTP port takes reads, writes, deletes and exports from anyone "
                        "who reaches it: set kraft.http.auth.token.file or "
                        "kraft.http.ssl.client.auth (docs/security.md)")
        elif not self.security.tls:
            log.warning("event=http_tokens_without_tls detail=%r",
                        "bearer tokens travel in clear text: whoever sees the traffic can "
                        "replay them; set kraft.http.ssl.keystore.location")
        if self.security.client_auth == "required":
            log.warning("event=http_client_auth_required detail=%r",
                        "a connection without a client certificate is refused at the "
                        "handshake: HTTPS probes (the kubelet's) carry none and fail")
        return self.port

    async def stop(self) -> None:
        """Stop serving."""
        self._connections.guard.stop()
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------ handlers

    async def healthz(self, request: web.Request) -> web.Response:
        """Liveness."""
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        """Readiness (see the module docstring)."""
        ready, reason = self.node.readiness()
        return _json(200 if ready else 503,
                     {"ready": ready, "reason": reason, **self.node.probe_view()})

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus metrics."""
        return web.Response(
            text=self.node.render_metrics(), content_type="text/plain", charset="utf-8",
            headers={"X-Prometheus-Format": "0.0.4"},
        )

    async def status(self, request: web.Request) -> web.Response:
        """This node's status."""
        return _json(200, self.node.status())

    async def export(self, request: web.Request) -> web.StreamResponse:
        """Stream a consistent tar bundle of this replica (see `kraft.storage.export`).

        The tar is produced by a worker thread and written to the response as it is made, so
        a large log never sits in memory. A failure after the first byte aborts the
        connection, so a client never mistakes a cut-off bundle for a whole one.
        """
        if self.metadata_dir is None:
            return _json(404, {"error": "this node has no metadata directory to export"})
        resp = web.StreamResponse(headers={
            "Content-Type": "application/x-tar",
            "Content-Disposition": f'attachment; filename="{self.metadata_dir.name}.tar"',
        })
        await resp.prepare(request)
        loop = asyncio.get_running_loop()

        class _ResponseSink:
            """A write-only binary stream whose bytes go to the HTTP response."""

            def write(self, data: bytes) -> int:
                asyncio.run_coroutine_threadsafe(resp.write(bytes(data)), loop).result()
                return len(data)

            def flush(self) -> None:
                """Nothing is buffered here."""

        try:
            manifest = await asyncio.to_thread(
                export_bundle, self.metadata_dir, cast(BinaryIO, _ResponseSink()))
        except (ExportError, OSError, ConnectionError) as exc:
            log.warning("event=export_failed dir=%s peer=%s error=%r", self.metadata_dir,
                        request.remote, str(exc))
            if request.transport is not None:
                request.transport.close()
            return resp
        log.info("event=exported dir=%s log_start=%d log_end=%d files=%d peer=%s by=%s",
                 self.metadata_dir, manifest.log_start_offset, manifest.log_end_offset,
                 len(manifest.files), request.remote, request.get(PRINCIPAL_KEY, "-"))
        await resp.write_eof()
        return resp

    async def quorum(self, request: web.Request) -> web.Response:
        """DescribeQuorum as JSON."""
        try:
            return _json(200, await self.node.describe_quorum())
        except NotLeaderError as exc:
            return _json(503, {"error": "no leader known", "leader_id": exc.leader_id})
        except (TimeoutError, ConnectionError, OSError) as exc:
            return _json(503, {"error": f"leader unreachable: {exc}"})

    def _key(self, request: web.Request) -> str:
        key = request.match_info["key"]
        if not key or len(key.encode()) > MAX_KEY_BYTES:
            self.node.request_refused()
            raise web.HTTPBadRequest(
                text=json.dumps({"error": f"key must be 1..{MAX_KEY_BYTES} bytes of UTF-8, "
                                          f"not {len(key.encode())}"}),
                content_type="application/json",
            )
        return key

    def _redirect(self, request: web.Request, exc: NotLeaderError) -> web.Response:
        if exc.leader_http:
            location = f"{request.scheme}://{exc.leader_http}{request.rel_url}"
            return web.Response(status=307, headers={"Location": location},
                                text=json.dumps({"leader_id": exc.leader_id}),
                                content_type="application/json")
        return _json(503, {"error": "NOT_LEADER_OR_FOLLOWER", "leader_id": exc.leader_id})

    async def _call(self, request: web.Request, call: KvCall) -> web.Response:
        """Run `call` at the leader (see `NodeAPI.kv_call`) and render its answer."""
        try:
            answer = await self.kv.kv_call(call)
        except NotLeaderError as exc:
            return self._redirect(request, exc)
        except OutcomeUnknownError as exc:
            return _json(503, {"error": str(exc), "outcome": "unknown"})
        except TimeoutError:
            return _json(503, {"error": "timed out", "outcome": "unknown"})
        except ForwardRefusedError as exc:
            return _json(400, {"error": str(exc)})
        except KafkaQuorumError as exc:  # counted where it was refused
            return _json(409, {"error": str(exc)})
        except WriteRefusedError as exc:  # counted where it was refused
            return _json(413 if exc.too_large else 400, {"error": str(exc)})
        if call.op == KvOp.GET:
            if not answer.ok or answer.value is None:
                return _json(404, {"error": "not found"})
            return web.Response(body=answer.value, content_type="application/octet-stream")
        if call.op == KvOp.PUT:
            return _json(200, {"offset": answer.offset})
        if call.op == KvOp.DELETE:
            return _json(200, {"existed": answer.ok})
        return _json(200, {"swapped": answer.ok, "previous": _b64(answer.value)})

    def _too_large(self) -> web.Response:
        self.node.request_refused()
        return _json(413, {"error": f"value is larger than the {MAX_VALUE_BYTES}-byte limit"})

    async def kv_put(self, request: web.Request) -> web.Response:
        """PUT a value."""
        key = self._key(request)
        length = request.content_length
        if length is not None and length > MAX_VALUE_BYTES:
            return self._too_large()  # refused before the body is read
        value = bytearray()
        async for chunk in request.content.iter_any():
            value += chunk
            if len(value) > MAX_VALUE_BYTES:
                return self._too_large()
        return await self._call(request, KvCall(KvOp.PUT, key, bytes(value)))

    async def kv_get(self, request: web.Request) -> web.Response:
        """GET a value (linearizable unless ?stale=true)."""
        key = self._key(request)
        if request.query.get("stale") == "true":
            wait = self.node.lane_catch_up()
            if wait is not None:
                await wait
            value = self.kv.kv_get_stale(key)
            if value is None:
                return _json(404, {"error": "not found"})
            return web.Response(body=value, content_type="application/octet-stream")
        return await self._call(request, KvCall(KvOp.GET, key))

    async def kv_delete(self, request: web.Request) -> web.Response:
        """DELETE a key."""
        return await self._call(request, KvCall(KvOp.DELETE, self._key(request)))

    async def kv_cas(self, request: web.Request) -> web.Response:
        """Compare-and-set."""
        key = self._key(request)
        try:
            body = await request.json(loads=json.loads)
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            expected = _unb64(body.get("expected"), "expected")
            new = _unb64(body.get("value"), "value")
        except (ValueError, UnicodeDecodeError) as exc:
            return _json(400, {"error": f"invalid CAS body: {exc}"})
        except web.HTTPRequestEntityTooLarge:
            return _json(413, {"error": "body too large"})

        return await self._call(request, KvCall(KvOp.CAS, key, new, expected))
