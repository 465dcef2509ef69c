"""The node's transport: its routes to the peers and the Kafka requests it sends and serves
(`Peers`, the executor's network port).

- Outbound: each request of the core goes to its destination's address (`address_of`: the
  static voters at kraft.version 0, else the endpoints the voters set or the effect names),
  at once on an open connection of `kraft.server.transport.PeerNetwork` with a callback for
  its answer, or from a task that opens one; the answer, or the failure, goes back to the core
  under the request's correlation id. The steady state's Fetch goes through the direct codecs
  of `kraft.server.fetch_fast` (`_FetchCodec`), and the last one sent on an open connection is
  kept (`fetch_sent`): the follower's native lane arms with it in flight.
- Inbound: each frame of the Kafka listener (`on_frame`) is answered at once (ApiVersions,
  DescribeCluster, UpdateFeatures refused, rejections) or handed to the core and registered
  under an id (`inbound`) until the core answers it (`send_response`, `send_fetch_response`,
  ...) or its deadline passes (one sweep timer for all of them).

It reaches the node through `PeerHost`, and the node's lanes reach the frames it holds
through `kraft.server.lane_host`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Callable
from typing import Any, Protocol

from kraft.config.node import NodeConfig
from kraft.protocol import messages as w
from kraft.protocol.api import SUPPORTED_FEATURES, ApiKey, api_spec, api_versions_response
from kraft.protocol.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from kraft.protocol.framing import decode_request, encode_response
from kraft.raft import effects as fx
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.raft.core import RaftCore
from kraft.raft.state import Role
from kraft.server import frame_answer
from kraft.server.apply_driver import ApplyDriver
from kraft.server.authorize import Authorizer, refusal
from kraft.server.event_queue import EventQueue
from kraft.server.features import (
    FAILED_PREFIX,
    KRAFT_VERSION,
    METADATA_VERSION,
    NOT_CONTROLLER_MESSAGE,
    FeatureState,
    FeatureUpdateError,
    plan_feature_updates,
    update_features_response,
    updates_of,
)
from kraft.server.fetch_fast import (
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_request,
)
from kraft.server.forward import is_forward_frame
from kraft.server.frame_answer import FrameAnswer, audit_line
from kraft.server.frames import (
    BadRequest,
    DeferredReply,
    EarliestDeadline,
    PeerClosedError,
    PeerInfo,
)
from kraft.server.kv_front import KvFront
from kraft.server.node_metrics import NodeMetrics
from kraft.server.translate import (
    TopLevelError,
    request_to_core,
    request_to_wire,
    response_to_core,
)
from kraft.server.transport import (
    KafkaConnection,
    PeerNetwork,
    PeerVersions,
    RequestError,
    unsupported_version_frame,
)
from kraft.storage.errors import OffsetOutOfRangeError
from kraft.storage.loader import MetadataDir

log = logging.getLogger("kraft.server.node")

FETCH_ERROR_LOG_INTERVAL_S = 10.0
"""A follower logs at most one warning about refused fetch answers this often (each is
counted in kraft_fetch_errors_total)."""

_API_OF_REQUEST: dict[type, ApiKey] = {
    m.VoteRequest: ApiKey.VOTE,
    m.BeginQuorumEpochRequest: ApiKey.BEGIN_QUORUM_EPOCH,
    m.EndQuorumEpochRequest: ApiKey.END_QUORUM_EPOCH,
    m.FetchRequest: ApiKey.FETCH,
    m.FetchSnapshotRequest: ApiKey.FETCH_SNAPSHOT,
    m.DescribeQuorumRequest: ApiKey.DESCRIBE_QUORUM,
    m.AddRaftVoterRequest: ApiKey.ADD_RAFT_VOTER,
    m.RemoveRaftVoterRequest: ApiKey.REMOVE_RAFT_VOTER,
    m.UpdateRaftVoterRequest: ApiKey.UPDATE_RAFT_VOTER,
    m.ControllerRegistrationRequest: ApiKey.CONTROLLER_REGISTRATION,
}



KAFKA_SOFTWARE_NAME = "apache-kafka"
"""ClientSoftwareName (KIP-511) that Apache Kafka's clients send: "apache-kafka-java"."""

class _FetchCodec:
    """The direct codecs of `kraft.server.fetch_fast` for one outbound FetchRequest (the
    `FastCodec` of `KafkaConnection.send`): the answer decodes to a core FetchResponse."""

    __slots__ = ("cluster_id", "listener", "request")

    def __init__(self, request: m.FetchRequest, cluster_id: str, listener: str) -> None:
        self.request = request
        self.cluster_id = cluster_id
        self.listener = listener

    def encode(self, version: int, correlation_id: int, client_id: str | None) -> bytes | None:
        return encode_fetch_request(self.request, self.cluster_id, version, correlation_id,
                                    client_id)

    def decode(self, version: int, correlation_id: int, frame: bytes | memoryview
               ) -> m.FetchResponse | None:
        return decode_fetch_response(frame, version, correlation_id, self.listener)


class PeerHost(Protocol):
    """What the transport uses of the node: its configuration, core, log and apply driver (the
    answers read from them), its KV front end (forwarded KV calls), the metadata.version of its
    bootstrap checkpoint, the core's event queue, its tasks, and where the leader's high
    watermark goes."""

    config: NodeConfig
    core: RaftCore | None
    cluster_id: str
    md: MetadataDir | None
    applier: ApplyDriver | None
    kv: KvFront
    metadata_version: int | None
    queue: EventQueue
    metrics: NodeMetrics
    tls_client: Callable[[], ssl.SSLContext] | None
    """The context of a new outgoing connection when the controller listener is SSL."""

    def spawn(self, coro: Any) -> None: ...
    def note_leader_high_watermark(self, high_watermark: int, epoch: int) -> None: ...


class Peers:
    """One node's routes to its peers and its Kafka requests in and out (see the module
    docstring); the executor's `NetworkPort`."""

    def __init__(self, node: PeerHost) -> None:
        self._node = node
        self._queue = node.queue
        config = node.config
        self._listener_name = config.controller_listener.name
        self._loop: asyncio.AbstractEventLoop | None = None
        self.network = PeerNetwork(f"raft-client-{config.node_id}", node.tls_client,
                                   on_open=self._peer_opened)
        self.authorizer = Authorizer(config.authorizer, config.node_id)
        """Who may send what on the controller listener (`kraft.server.authorize`)."""
        """The connections to the peers, one per destination."""
        self.inbound: dict[int, asyncio.Future[tuple[m.Response, bytes | None]] | FrameAnswer] = {}
        """The requests handed to the core, by the id it knows them by, until it answers."""
        self.inbound_ids = 0
        self._address_memo: tuple[tuple[m.Endpoint, ...] | None, tuple[str, int] | None] = (
            None, None)
        """(endpoints, address) of `address_of`'s last answer from given endpoints."""
        self._static_addresses: dict[int, tuple[str, int]] = {
            v.node_id: (v.host, v.port) for v in config.quorum_voters}
        self.sweep = EarliestDeadline(self._sweep_inbound)
        """At the earliest deadline of the request frames waiting for the core."""
        self.fetch_peers: dict[int, int] = {}
        """Replica id -> the listener's id of the connection its last fetch came on."""
        self.kafka_connections: set[int] = set()
        """Listener connections whose ApiVersions named Apache Kafka's client software."""
        self.kafka_replicas: set[int] = set()
        """Replicas that fetched on such a connection, or whose ApiVersions answered this
        node's own connection as a Kafka controller's: Kafka controllers (docs/node.md, "A
        quorum with Kafka controllers")."""
        self.fetch_sent: tuple[int, KafkaConnection, int, int] | None = None
        """The last fetch sent on an open connection: (the core's correlation id, the
        connection, the correlation id it was sent with, the version): the lane arms with
        it in flight."""
        self._fetch_error_logged = -FETCH_ERROR_LOG_INTERVAL_S
        self._fetch_errors_unlogged = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run on `loop` (the node's)."""
        self._loop = self.sweep.loop = loop

    def close(self) -> None:
        """Close the connections to the peers and the sweep's timer."""
        self.network.close()
        self.sweep.cancel()

    def send_request(self, e: fx.SendRequest) -> None:
        """Send a request of the core: at once on an open connection, else from a task."""
        if not self._send_on_open_connection(e):
            self._node.spawn(self._send_request(e))

    def send_response(self, e: fx.SendResponse) -> None:
        """Answer a request the core took."""
        self._answer(e.correlation_id, e.response, None)

    def send_fetch_response(self, e: fx.SendFetchResponse) -> None:
        """Answer a Fetch with the log bytes the effect names, read now."""
        records = b""
        if e.read_offset is not None:
            md = self._node.md
            assert md is not None
            try:
                records = md.log.read(e.read_offset, e.max_bytes)
            except OffsetOutOfRangeError:
                records = b""
        self._answer(e.correlation_id, e.response, records)

    def send_fetch_snapshot_response(self, e: fx.SendFetchSnapshotResponse) -> None:
        """Answer a FetchSnapshot with a chunk of the snapshot file."""
        assert self._node.applier is not None
        self._answer(e.correlation_id, e.response, self._node.applier.snapshot_chunk(e))

    def send_api_versions(self, e: fx.SendApiVersions) -> None:
        """Ask a node for its ApiVersions, from a task."""
        self._node.spawn(self._send_api_versions(e))

    # ------------------------------------------------------------------ outbound requests

    def address_of(self, dest: int, endpoints: tuple[m.Endpoint, ...]) -> tuple[str, int] | None:
        # At kraft.version 0 controller.quorum.voters is the voters set: its addresses decide
        # the route to a voter (the operator's, or a test's fault proxy). From kraft.version 1
        # the voters set in the log is, with the endpoints UpdateRaftVoter published, and the
        # static addresses are ignored (as Kafka does; see kraft_ignored_static_voters).
        if dest in self._static_addresses and (
                self._node.core is None or self._node.core.kraft_version == 0):
            return self._static_addresses[dest]
        if endpoints and endpoints is self._address_memo[0]:
            return self._address_memo[1]  # the leader's endpoints of the last fetch, again
        given = endpoints
        if not endpoints and dest >= 0 and self._node.core is not None:
            node = self._node.core.voters().get(dest)
            endpoints = node.endpoints if node is not None else ()
        if not endpoints:
            return None
        name = self._listener_name
        chosen = next((e for e in endpoints if e.name == name), endpoints[0])
        address = (chosen.host, chosen.port)
        if given:
            self._address_memo = (given, address)
        return address

    def _send_on_open_connection(self, e: fx.SendRequest) -> bool:
        """Send `e` at once when its destination's connection is open (the steady state of
        every fetch): no task, the answer comes back through a callback. False when a
        connection must be made first (`_send_request` does that)."""
        address = self.address_of(e.destination, e.endpoints)
        api = _API_OF_REQUEST.get(type(e.request))
        if address is None or api is None:
            return False
        conn = self.network.ready(e.destination, address)
        if conn is None or conn.lent:  # lent: the request goes on a connection of its own
            return False
        timeout = self._node.config.request_timeout_ms / 1000
        if isinstance(e.request, m.FetchRequest):
            timeout += e.request.max_wait_ms / 1000
        request = e.request
        cluster_id = self._node.cluster_id

        def body(version: int) -> object:
            return request_to_wire(request, cluster_id, version)

        is_fetch = type(request) is m.FetchRequest
        fast = _FetchCodec(request, cluster_id, self._listener_name) \
            if isinstance(request, m.FetchRequest) else None
        try:
            version, corr = conn.send(api, body, timeout, self._answered(e, api), fast)
        except (ProtocolError, ValueError) as exc:  # the request could not be encoded
            log.warning("event=request_not_sent replica=%d destination=%d api=%s error=%r",
                        self._node.config.node_id, e.destination, api.name, str(exc))
            self._queue.push(ev.RequestFailed(e.destination, e.correlation_id, False))
            return True
        if is_fetch:
            self.fetch_sent = (e.correlation_id, conn, corr, version)
        return True

    def _answered(self, e: fx.SendRequest,
                  api: ApiKey) -> Callable[[int, Any, BaseException | None], None]:
        """The callback of the request `e` sent on an open connection: its answer, or its
        failure, to the core under `e`'s correlation id."""

        def answered(_version: int, data: Any, error: BaseException | None) -> None:
            if error is None:
                if type(data) is m.FetchResponse:  # decoded by FetchCodec
                    self._response_received(e, data)
                    return
                try:
                    resp = response_to_core(data, self._listener_name)
                except (ProtocolError, UnsupportedVersionError) as exc:
                    error = exc
                else:
                    self._response_received(e, resp)
                    return
            if api == ApiKey.FETCH and isinstance(error, ProtocolError):
                self.fetch_refused(e.destination, error)
            else:
                log.debug("event=request_failed replica=%d destination=%d api=%s error=%r",
                          self._node.config.node_id, e.destination, api.name, str(error))
            self._queue.push(ev.RequestFailed(e.destination, e.correlation_id, False,
                                           isinstance(error, PeerClosedError)))

        return answered

    def fetch_refused(self, leader: int, error: BaseException) -> None:
        """A fetch answer from `leader` whose records this follower does not append (a batch
        that fails its CRC, is malformed, or is above the batch limit): counted, logged (at
        most one warning every FETCH_ERROR_LOG_INTERVAL_S), and the fetch is failed, to be
        tried again after the backoff; nothing of it reaches the log."""
        self._node.metrics.fetch_errors.inc()
        now = (self._loop or asyncio.get_running_loop()).time()
        if now - self._fetch_error_logged < FETCH_ERROR_LOG_INTERVAL_S:
            self._fetch_errors_unlogged += 1
            return
        log.warning("event=fetch_refused replica=%d leader=%d error=%r not_logged_since=%d",
                    self._node.config.node_id, leader, str(error), self._fetch_errors_unlogged)
        self._fetch_error_logged = now
        self._fetch_errors_unlogged = 0

    def fetch_callback(self, leader: int, correlation_id: int,
                       request: m.FetchRequest) -> Callable[[int, Any, BaseException | None], None]:
        """The callback that takes the answer to a fetch the follower lane left in flight to
        `leader` to the core, as its request `correlation_id`."""
        return self._answered(fx.SendRequest(leader, (), correlation_id, request), ApiKey.FETCH)

    def fetch_codec(self, request: m.FetchRequest) -> _FetchCodec:
        """The fast codec of `request`'s answer."""
        return _FetchCodec(request, self._node.cluster_id, self._listener_name)

    def _response_received(self, e: fx.SendRequest, resp: m.Response) -> None:
        if isinstance(resp, m.FetchResponse) and resp.error_code == ErrorCode.NONE:
            batches = resp.batches
            # epochs never go back within an answer (parse_fetched_batches): the last is the
            # highest, and no leader writes a batch of an epoch above its own
            if batches and 0 <= resp.leader_epoch < batches[-1].epoch:
                self.fetch_refused(e.destination, ProtocolError(
                    f"fetched batch at offset {batches[-1].base_offset} has epoch "
                    f"{batches[-1].epoch}, above the leader's epoch {resp.leader_epoch}"))
                self._queue.push(ev.RequestFailed(e.destination, e.correlation_id))
                return
            self._node.note_leader_high_watermark(resp.high_watermark, resp.leader_epoch)
        self._queue.push(ev.ResponseReceived(e.destination, e.correlation_id, resp))

    async def _send_request(self, e: fx.SendRequest) -> None:
        address = self.address_of(e.destination, e.endpoints)
        api = _API_OF_REQUEST.get(type(e.request))
        if address is None or api is None:
            self._queue.push(ev.RequestFailed(e.destination, e.correlation_id))
            return
        timeout = self._node.config.request_timeout_ms / 1000
        if isinstance(e.request, m.FetchRequest):
            timeout += e.request.max_wait_ms / 1000
        request = e.request

        def body(version: int) -> object:
            return request_to_wire(request, self._node.cluster_id, version)

        try:
            _, data = await self.network.request(e.destination, address, api, body, timeout)
            resp = response_to_core(data, self._listener_name)
        except (RequestError, ProtocolError, UnsupportedVersionError) as exc:
            if api == ApiKey.FETCH and isinstance(exc, ProtocolError):
                self.fetch_refused(e.destination, exc)
            log.debug("event=request_failed replica=%d destination=%d api=%s error=%r",
                      self._node.config.node_id, e.destination, api.name, str(exc))
            unreachable = isinstance(exc, RequestError) and exc.unreachable
            disconnected = isinstance(exc, RequestError) and exc.disconnected
            self._queue.push(ev.RequestFailed(e.destination, e.correlation_id, unreachable,
                                           disconnected))
            return
        self._response_received(e, resp)

    async def _send_api_versions(self, e: fx.SendApiVersions) -> None:
        address = self.address_of(e.node_id, e.endpoints)
        result = m.ApiVersionsResult(ErrorCode.REQUEST_TIMED_OUT)
        if address is not None:
            conn = KafkaConnection(address[0], address[1], f"raft-client-{self._node.config.node_id}",
                                   self._node.tls_client)
            try:
                await conn.open(self._node.config.request_timeout_ms / 1000)
                rng = conn.versions.features.get("kraft.version", (0, 0))
                result = m.ApiVersionsResult(ErrorCode.NONE, m.KRaftVersionRange(rng[0], rng[1]))
            except (RequestError, OSError, TimeoutError, ProtocolError) as exc:
                log.info("event=api_versions_failed replica=%d node=%d error=%r",
                         self._node.config.node_id, e.node_id, str(exc))
            finally:
                conn.close()
        self._queue.push(ev.ApiVersionsReceived(e.node_id, result))

    # ------------------------------------------------------------------ inbound requests

    def _answer(self, corr: int, response: m.Response, records: bytes | None) -> None:
        waiter = self.inbound.pop(corr, None)
        if waiter is None:
            return
        if type(waiter) is FrameAnswer:
            waiter.finish(response, records)
        elif isinstance(waiter, asyncio.Future) and not waiter.done():
            waiter.set_result((response, records))

    def _sweep_inbound(self) -> None:
        """Answer REQUEST_TIMED_OUT to every request frame the core left unanswered past its
        deadline, and arm the next sweep at the earliest deadline left. One timer for all of
        them instead of one per request: the core answers almost every request in a loop turn
        or, for a parked fetch, within its MaxWaitMs."""
        now = (self._loop or asyncio.get_running_loop()).time()
        expired = [k for k, w in self.inbound.items()
                   if type(w) is FrameAnswer and w.deadline <= now]
        for key in expired:
            waiter = self.inbound.pop(key)
            assert type(waiter) is FrameAnswer
            waiter.timed_out()
        earliest = min((w.deadline for w in self.inbound.values() if type(w) is FrameAnswer),
                       default=None)
        if earliest is not None:
            self.sweep.ask(earliest)

    async def core_request(self, source: int, request: m.Request,
                           timeout_s: float = 60.0) -> tuple[m.Response, bytes | None]:
        """Hand a request to the core and wait for its answer (response, attached bytes)."""
        self.inbound_ids += 1
        corr = self.inbound_ids
        fut: asyncio.Future[tuple[m.Response, bytes | None]] = asyncio.get_running_loop().create_future()
        self.inbound[corr] = fut
        self._queue.push(ev.RequestReceived(source, corr, request))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self.inbound.pop(corr, None)

    def _peer_opened(self, dest: int, versions: PeerVersions) -> None:
        """A connection of this node's to `dest` is open: a voter that answers ApiVersions as
        a Kafka controller is one (known before this node asks for its vote, so before it
        leads a new mixed quorum and takes any KV write there)."""
        if dest >= 0 and versions.kafka_controller and dest not in self.kafka_replicas:
            self.kafka_replicas.add(dest)
            log.info("event=kafka_controller_peer replica=%d detail=%r", dest,
                     "its ApiVersions lists BrokerRegistration: KV calls are refused here")

    def on_frame(self, frame: bytes, peer: PeerInfo) -> bytes | DeferredReply | None:
        """One request frame of the Kafka listener: answered at once (ApiVersions,
        DescribeCluster, rejections) or through a future the core's answer completes (no
        task per request). With an authorizer, a request whose principal lacks the api's
        operation, or that claims another replica's id, is refused first
        (`kraft.server.authorize`)."""
        authz = self.authorizer
        if authz.enabled and len(frame) >= 8:
            api_key, api_version, correlation_id = _HEAD.unpack_from(frame)
            if not authz.allows(api_key, peer):
                return _refused(api_key, api_version, correlation_id)
        if frame[:2] == b"\x00\x01":  # Fetch: a follower's, in the steady state
            fetch = decode_fetch_request(frame, self._node.cluster_id)
            if fetch is not None:
                version, corr, req = fetch
                if authz.enabled and not authz.claim_allowed(ApiKey.FETCH, req.replica_id, peer):
                    return _refused(ApiKey.FETCH, version, corr)
                self.fetch_peers[req.replica_id] = peer.connection_id
                if peer.connection_id in self.kafka_connections:
                    self.kafka_replicas.add(req.replica_id)
                elif self.kafka_replicas:
                    # its latest fetch decides: a forged one is undone by the replica's next
                    self.kafka_replicas.discard(req.replica_id)
                return self._defer(ApiKey.FETCH, version, corr, req, req.replica_id,
                                   peer.connection_id, listener=peer.listener)
        elif is_forward_frame(frame):
            return self._node.kv.serve_forwarded(frame, peer)
        try:
            header, data = decode_request(frame)
        except UnsupportedVersionError as exc:
            if exc.correlation_id is None:
                return None
            log.info("event=unsupported_request peer=%s api_key=%s api_version=%s",
                     peer.host, exc.api_key, exc.api_version)
            return unsupported_version_frame(exc.correlation_id)
        except ProtocolError as exc:  # logged, rate-limited, as the connection closes
            raise BadRequest(f"bad request: {exc}") from None
        api, version, corr = header.api_key, header.api_version, header.correlation_id
        if api == ApiKey.API_VERSIONS:
            if getattr(data, "client_software_name", "").startswith(KAFKA_SOFTWARE_NAME):
                if len(self.kafka_connections) >= 4096:  # ids of closed connections
                    self.kafka_connections.clear()
                self.kafka_connections.add(peer.connection_id)
            if version >= 5 and (data.cluster_id is None) != (data.node_id == -1):
                # KIP-1242: both or neither; Kafka's ApiVersionsRequest.isValid, answered as
                # its ControllerApis answers an invalid request
                invalid = w.ApiVersionsResponseData(error_code=int(ErrorCode.INVALID_REQUEST))
                return encode_response(api, version, corr, invalid)[4:]
            finalized = {"kraft.version": self._node.core.kraft_version} if self._node.core else {}
            if self._node.metadata_version is not None:
                finalized[METADATA_VERSION] = self._node.metadata_version
            body: object = api_versions_response(version, finalized_features=finalized)
            return encode_response(api, version, corr, body)[4:]
        if api == ApiKey.DESCRIBE_CLUSTER:
            return encode_response(api, version, corr,
                                   self._describe_cluster(data, peer.listener))[4:]
        if api == ApiKey.UPDATE_FEATURES:
            assert isinstance(data, w.UpdateFeaturesRequestData)
            return self._update_features(version, corr, data, peer)
        try:
            request = request_to_core(data, version, self._node.cluster_id)
        except TopLevelError as exc:
            log.info("event=request_rejected peer=%s api=%s error=%s reason=%r", peer.host,
                     api_spec(api).name, exc.code.name, str(exc))
            err_body = api_spec(api).response_class(error_code=int(exc.code))
            return encode_response(api, version, corr, err_body)[4:]
        if authz.enabled and not authz.claim_allowed(api, _source_of(request), peer):
            return _refused(api, version, corr)
        return self._defer(ApiKey(api), version, corr, request,
                           audit=audit_line(request, f"{peer.host}:{peer.port}"),
                           listener=peer.listener)

    def _update_features(self, version: int, corr: int, data: w.UpdateFeaturesRequestData,
                         peer: PeerInfo) -> bytes | DeferredReply:
        """UpdateFeatures as Kafka's controller answers it (`kraft.server.features`): a node
        that is not the leader answers NOT_CONTROLLER; the updates are checked as one change;
        a kraft.version upgrade goes to the core, which answers once it is committed."""
        names = tuple(u.feature for u in data.feature_updates)
        core = self._node.core
        assert core is not None

        asked = ",".join(f"{u.feature}={u.max_version_level}" for u in data.feature_updates)

        def answer(code: int, message: str | None) -> bytes:
            log.info("event=update_features_request features=%s validate_only=%s peer=%s:%d "
                     "result=%s", asked or "-", data.validate_only, peer.host, peer.port,
                     ErrorCode(code).name)
            body = update_features_response(version, code, message, names)
            return encode_response(ApiKey.UPDATE_FEATURES, version, corr, body)[4:]

        if core.role != Role.LEADER:
            return answer(ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE)
        lo, hi = SUPPORTED_FEATURES[KRAFT_VERSION]
        known = {KRAFT_VERSION: FeatureState(core.kraft_version, lo, hi)}
        if self._node.metadata_version is not None:
            lo, hi = SUPPORTED_FEATURES[METADATA_VERSION]
            known[METADATA_VERSION] = FeatureState(self._node.metadata_version, lo, hi)
        try:
            plan = plan_feature_updates(updates_of(data, version), known, self._node.config.node_id)
        except FeatureUpdateError as exc:
            log.info("event=update_features_refused replica=%d error=%s reason=%r",
                     self._node.config.node_id, exc.code.name, exc.message)
            return answer(exc.code, FAILED_PREFIX + exc.message)
        if plan.kraft_version is None:
            return answer(ErrorCode.NONE, None)
        return self._defer(ApiKey.UPDATE_FEATURES, version, corr,
                           m.UpdateKRaftVersionRequest(plan.kraft_version, data.validate_only),
                           features=names,
                           audit=f"event=update_features_request features={asked} "
                                 f"validate_only={data.validate_only} peer={peer.host}:{peer.port}")

    def _defer(self, api: ApiKey, version: int, corr: int, request: m.Request,
               source: int | None = None, peer: int = -1,
               features: tuple[str, ...] = (), audit: str | None = None,
               listener: str = "") -> DeferredReply:
        """Hand a decoded request to the core; its answer completes the returned reply (with
        the leader's endpoint of `listener`, the one the request came on)."""
        timeout = frame_answer.FRAME_ANSWER_TIMEOUT_S
        if isinstance(request, m.AddRaftVoterRequest):
            timeout = max(timeout, request.timeout_ms / 1000 + 5)
        self.inbound_ids += 1
        key = self.inbound_ids
        assert self._loop is not None
        deadline = self._loop.time() + timeout
        answer = FrameAnswer(api, version, corr, DeferredReply(), deadline, peer, features, audit,
                             listener)
        self.inbound[key] = answer
        self.sweep.ask(deadline)
        self._queue.push(ev.RequestReceived(_source_of(request) if source is None else source, key,
                                         request))
        return answer.future

    def _describe_cluster(self, data: w.DescribeClusterRequestData,
                          listener: str = "") -> w.DescribeClusterResponseData:
        """The controllers at their endpoints of the listener the request came on, as Kafka's
        ControllerApis answers (a client that reached the TLS listener is sent to TLS ports);
        on the listener this node dials with (or an unknown one), at the addresses it dials
        them at (a static quorum's controller.quorum.voters)."""
        D = w.DescribeClusterResponseData
        core = self._node.core
        assert core is not None
        own = not listener or listener.upper() == self._listener_name.upper()
        brokers = []
        for v in core.voters().voters:
            if own:
                addr = self.address_of(v.id, v.endpoints)
            else:
                found = next((e for e in v.endpoints if e.name.upper() == listener.upper()), None)
                addr = None if found is None else (found.host, found.port)
            if addr is not None:
                brokers.append(D.DescribeClusterBroker(broker_id=v.id, host=addr[0], port=addr[1]))
        return D(error_code=0, endpoint_type=2, cluster_id=self._node.cluster_id,
                 controller_id=core.leader_id, brokers=brokers)


_HEAD = struct.Struct(">hhi")
"""A request header's api key, api version and correlation id."""


def _refused(api_key: int, version: int, corr: int) -> bytes | None:
    """CLUSTER_AUTHORIZATION_FAILED in the RPC's own error field; None (the connection
    closes) for a Fetch below v7, which has no top-level error field; an api or version
    this node does not speak is answered as any other (UNSUPPORTED_VERSION)."""
    if api_key == ApiKey.FETCH and version < 7:
        return None
    try:
        return refusal(api_key, version, corr)
    except (KeyError, ValueError, ProtocolError, UnsupportedVersionError):
        return unsupported_version_frame(corr)


def _source_of(req: m.Request) -> int:
    if isinstance(req, m.VoteRequest):
        return req.replica_id
    if isinstance(req, m.BeginQuorumEpochRequest | m.EndQuorumEpochRequest):
        return req.leader_id
    if isinstance(req, m.FetchRequest | m.FetchSnapshotRequest):
        return req.replica_id
    if isinstance(req, m.UpdateRaftVoterRequest):
        return req.voter_id
    if isinstance(req, m.ControllerRegistrationRequest):
        return req.controller_id
    return -1
