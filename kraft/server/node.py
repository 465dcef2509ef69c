"""The node runtime: one asyncio process around the pure consensus core.

`KraftNode` owns the `RaftCore`, the metadata directory (log, snapshots, quorum-state), the
Kafka listener, the peer network, the admin HTTP server and the application state machine,
and wires together the parts that do the node's jobs:

- `kraft.server.executor` (`EffectExecutor`): the core's effects carried out in list order
  through ports, under the ordering rules of its docstring (persist the quorum state before any
  later send, apply only what is committed, snapshot install awaited, the flush after the
  list). The simulator runs the same executor over simulated ports.
- `kraft.server.flusher` (`LogService`): the log port; log writes go to the page cache at once
  and are fsynced by the flusher thread, the kernel's engine or inline on the loop, each
  reporting `Persisted(end)`. Quorum-state writes run on the default executor and are awaited.
- `kraft.server.apply_driver` (`ApplyDriver`): the apply and snapshot ports; `Committed(hw)`
  raises the apply target, and the core loop below applies up to it in steps.
- `kraft.server.kv_front` (`KvFront`): the KV API, the writes grouped into `Append`s, read
  barriers, forwarding to the leader; the client port.
- `kraft.server.peers` (`Peers`): the network port; the routes to the peers, the requests sent
  to them and their answers, and the Kafka listener's frames handed to the core and answered.
- `kraft.server.lane_host` (`NodeLaneHost`): the node as its native lanes' runners see it
  (`kraft.lane.LaneHost`).
- `kraft.server.event_queue` (`EventQueue`), `kraft.server.writes` (`WriteBook`) and
  `kraft.server.node_metrics` (`NodeMetrics`): the state the parts share, created here and
  handed to them (each part's `Protocol` names the public attributes it takes): the core's
  queue, the client writes in hand from submitted to answered, the instruments they update.
- `kraft.lane.LaneArbiter` (`lanes`): the native lanes' runners and their turns on the core
  loop (before and after each event, after each step of applying, around its sleep, a local
  read's catch-up).
- This module: the core loop, the node port (state changes, the follower lane's fetch
  adopted), the listeners, readiness and metrics.

Events reach the core through one queue (`queue`) and one task (`_core_loop`), so the core
sees them one at a time. The core loop applies committed records in steps of APPLY_CHUNK once
the events that arrived with them are handled (and an inline fsync done): a follower fetches
the next batch, and a leader appends and sends it, before applying the one just committed, so
replication and applying overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import random
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kraft.config.http_security import http_security
from kraft.config.node import NodeConfig
from kraft.config.tls import TlsContexts
from kraft.lane import LaneArbiter, append_scan
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.raft import effects as fx
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.raft.config import LogState, QuorumStateData, RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.leader import ChangeKind, LeaderState
from kraft.raft.records import voters_from_record
from kraft.raft.state import FollowerState, Role
from kraft.raft.voters import VoterSet, static_voter_set
from kraft.records.control import KRaftVersionRecord, VotersRecord
from kraft.server.apply_driver import ApplyDriver, now_ms
from kraft.server.client_auth import ClientAuth
from kraft.server.client_protocol import ClientServer
from kraft.server.connection_limits import ConnectionGuard, ConnectionLimits
from kraft.server.event_queue import EventQueue
from kraft.server.executor import EffectExecutor
from kraft.server.flusher import LogService
from kraft.server.frames import FrameListener, FrameServerConnection
from kraft.server.http_api import HttpApiServer
from kraft.server.kv_api import NotLeaderError
from kraft.server.kv_front import KvFront
from kraft.server.lane_host import NodeLaneHost
from kraft.server.metrics import Registry
from kraft.server.node_metrics import NodeMetrics
from kraft.server.peers import Peers
from kraft.server.translate import (
    request_to_wire,
    response_to_core,
)
from kraft.server.writes import WriteBook
from kraft.statemachine.base import StateMachine
from kraft.statemachine.kv import (
    KVStore,
)
from kraft.storage.bootstrap import METADATA_VERSION_FEATURE, read_bootstrap_checkpoint
from kraft.storage.errors import StorageError
from kraft.storage.layout import BOOTSTRAP_CHECKPOINT, BOOTSTRAP_SNAPSHOT_ID, partition_dir
from kraft.storage.loader import MetadataDir, open_metadata_dir
from kraft.storage.recover import check_startable

log = logging.getLogger("kraft.server.node")


APPLY_EVERY = 16
"""Events the core loop handles at most while committed records wait to be applied."""
INLINE_FLUSH_EVERY = 64
"""Inline flush mode: fsync after at most this many events handled since an append, even
while more keep queueing (a busy leader's own durable offset still moves)."""


class KraftNode:
    """A running KRaft controller node (see the module docstring)."""

    def __init__(self, config: NodeConfig, state_machine: StateMachine | None = None,
                 seed: int | None = None) -> None:
        self.config = config
        self._listener_name = config.controller_listener.name
        self.sm: StateMachine = state_machine if state_machine is not None else KVStore()
        self._rng = random.Random(seed)
        self.queue = EventQueue()
        """What waits for the core loop (`kraft.server.event_queue`)."""
        self.writes = WriteBook()
        """The client writes in hand, from submitted to answered (`kraft.server.writes`)."""
        self._core_timer: asyncio.TimerHandle | None = None
        self._core_timer_at = 0
        """The core deadline (ms) `_core_timer` wakes the core loop for."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._leader_hw = -1
        self._leader_hw_at = 0.0
        self._leader_hw_epoch = -1
        """The epoch of the leader whose Fetch answer set `_leader_hw` (readiness counts only
        the current epoch's leader)."""
        self._stopped = asyncio.Event()
        self._fatal: BaseException | None = None
        self.registry = Registry()
        """The node's metrics, rendered for /metrics."""
        self.metrics = self._setup_metrics()
        """The instruments the node's parts update (`kraft.server.node_metrics`)."""
        self.connection_guard = ConnectionGuard(ConnectionLimits.from_config(config),
                                                self.registry)
        """The connection limits every listener of the node shares
        (`kraft.server.connection_limits`)."""
        self.md: MetadataDir | None = None
        self.core: RaftCore | None = None
        self.metadata_version: int | None = None
        """The metadata.version level of bootstrap.checkpoint (None: the file has none)."""
        self.cluster_id = ""
        self.listeners: tuple[FrameListener, ...] = ()
        """The controller listeners bound, in the order of controller.listener.names (empty
        before the node started)."""
        self.http_api: HttpApiServer | None = None
        self.client_server: ClientServer | None = None
        self.listener_tls: dict[str, TlsContexts] = {}
        """Each SSL controller listener's TLS contexts by listener name, reloaded when their
        files change; building them raises TlsMaterialError naming the key of a file that
        cannot load."""
        for bound in config.controller_listeners:
            settings = config.listener_ssl(bound.name)
            if settings is not None:
                self.listener_tls[bound.name] = TlsContexts(settings)
        self.tls: TlsContexts | None = self.listener_tls.get(config.controller_listener.name)
        """The TLS contexts of the listener the node dials its peers with (the first
        controller listener; None: PLAINTEXT)."""
        self.tls_client: Callable[[], ssl.SSLContext] | None = (
            None if self.tls is None else self.tls.client_context)
        """The context of each new outgoing connection (Fetch, Vote, forwarding, ...)."""
        self.peers = Peers(self)
        """The routes to the peers and the Kafka requests in and out (`kraft.server.peers`)."""
        self.kv = KvFront(self)
        """The KV API: writes batched for the core, answered once applied; forwarding."""
        self.log_service: LogService | None = None
        """The log, the quorum-state file and the fsyncs (`kraft.server.flusher`)."""
        self.applier: ApplyDriver | None = None
        """Committed records into the state machine, and snapshots
        (`kraft.server.apply_driver`)."""
        self._executor: EffectExecutor | None = None
        """The core's effects carried out in order (`kraft.server.executor`)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop the node runs on, None before it started."""
        self._core_task: asyncio.Task[None] | None = None
        self.lanes = LaneArbiter()
        """The native lanes switched on and built, and their turns on the core loop
        (`kraft.lane.arbiter`)."""

    @property
    def listener(self) -> FrameListener | None:
        """The first controller listener (the one whose protocol the node dials its peers
        with), None before the node started."""
        return self.listeners[0] if self.listeners else None

    def frame_connection(self, connection_id: int) -> FrameServerConnection | None:
        """The open connection of id `connection_id` on any controller listener, None when
        it is closed (`PeerInfo.connection_id`; the ids are unique across the listeners)."""
        for listener in self.listeners:
            conn = listener.connection(connection_id)
            if conn is not None:
                return conn
        return None

    # ================================================================== start / stop

    async def start(self) -> None:
        """Open storage, load the state machine, start listeners and the core."""
        self.loop = loop = asyncio.get_running_loop()
        self.peers.start(loop)
        cfg = self.config
        self.md = md = open_metadata_dir(cfg.metadata_dir, segment_bytes=cfg.segment_bytes,
                                         expected_node_id=cfg.node_id,
                                         preallocate_bytes=cfg.preallocate_bytes if cfg.fsync else 0)
        try:
            check_startable(md)  # a quorum-state or log no election could follow
        except StorageError:
            md.close()
            self.md = None
            raise
        md.log.on_flush_time = self.metrics.observe_flush
        self.cluster_id = md.meta.cluster_id
        self.kv.start()
        self.log_service = logs = LogService(self, md, loop)
        self.applier = applier = ApplyDriver(self, md, logs, loop)
        self._executor = EffectExecutor(logs, self.peers, applier, applier, self.kv, self)
        directory_id = md.meta.directory_id
        if directory_id is None:
            raise StorageError(f"{cfg.metadata_dir}/meta.properties has no directory.id")
        self.metadata_version = _bootstrap_metadata_version(cfg.metadata_dir)
        latest = md.latest_snapshot
        applier.load_latest_snapshot()
        log_state = self._log_state(md)
        listener_name = cfg.controller_listener.name
        static = None
        if cfg.quorum_voters:
            static = static_voter_set({v.node_id: (v.host, v.port) for v in cfg.quorum_voters},
                                      listener_name)
        raft_cfg = RaftConfig(
            node_id=cfg.node_id,
            directory_id=directory_id,
            listeners=tuple(m.Endpoint(a.name, a.host, a.port)
                            for a in cfg.advertised_controller_listeners),
            static_voters=static,
            # an observer of a static quorum finds the leader through the static voters, as
            # Kafka's brokers do when only controller.quorum.voters is set
            bootstrap_servers=tuple(m.Endpoint(listener_name, b.host, b.port)
                                    for b in cfg.bootstrap_servers)
            or tuple(m.Endpoint(listener_name, v.host, v.port) for v in cfg.quorum_voters),
            election_timeout_ms=cfg.election_timeout_ms,
            election_backoff_max_ms=cfg.election_backoff_max_ms,
            fetch_timeout_ms=cfg.fetch_timeout_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            auto_join=cfg.auto_join_enable,
            snapshot_max_bytes_between=cfg.snapshot_max_bytes_between,
            snapshot_interval_ms=cfg.snapshot_interval_ms,
            fetch_snapshot_max_bytes=cfg.fetch_snapshot_max_bytes,
            retention_max_bytes=cfg.retention_max_bytes,
            retention_max_ms=cfg.retention_max_ms,
            retention_check_interval_ms=cfg.retention_check_interval_ms,
            update_voter_period_ms=3 * cfg.fetch_timeout_ms,
            hw_linger_ms=cfg.hw_linger_ms,
        )
        self.core = RaftCore(raft_cfg, log_state, self._rng, now_ms())
        md.log.use_native_scan(append_scan())  # the lane's C scan of appends, where built
        self.lanes.start(NodeLaneHost(self), cfg.lane_follower, cfg.lane_leader, cfg.fsync)
        engine = logs.start()
        log.info("event=flusher replica=%d mode=%s engine=%s", cfg.node_id, cfg.flush_mode,
                 engine)
        guard = self.connection_guard
        ids = itertools.count(1)  # one sequence: a connection id names one connection
        listeners = []
        for bound in cfg.controller_listeners:
            # each listener with its own protocol, TLS files, principals and limits
            tls = self.listener_tls.get(bound.name)
            listener = FrameListener(bound.host, bound.port, self.peers.on_frame,
                                     name=bound.name,
                                     max_frame_bytes=cfg.socket_request_max_bytes,
                                     guard=guard.listener(bound.name),
                                     tls=None if tls is None else tls.listener_context(),
                                     principal_of=None if tls is None else tls.principal_of,
                                     connection_ids=ids)
            listeners.append(listener)
            self.listeners = tuple(listeners)  # those bound so far are stopped by stop()
            await listener.start()
        security = http_security(cfg)  # the KV API's, on the HTTP and the binary port alike
        if security.authenticates and not self.peers.authorizer.enabled:
            # a follower forwards KV calls to the leader as ForwardKv on the controller
            # listener, which then answers anyone who reaches it
            log.warning("event=kv_forward_open detail=%r",
                        "the KV API needs a credential on the HTTP and client ports, but the "
                        "controller listener has no authorizer: ForwardKv there takes KV calls "
                        "from anyone who reaches it; grant ClusterAction to the nodes "
                        "(docs/security.md)")
        if cfg.http_listener is not None:
            self.http_api = HttpApiServer(self.kv, self, cfg.http_listener.host,
                                          cfg.http_listener.port,
                                          metadata_dir=Path(cfg.metadata_dir),
                                          guard=guard.listener("http", min(
                                              cfg.max_connections, cfg.http_max_connections)),
                                          security=security, registry=self.registry)
            await self.http_api.start()
        if cfg.client_listener is not None:
            http = self.http_api
            auth = ClientAuth.for_settings(security, http.tls if http else None,
                                           http.authorizer if http else None)
            self.client_server = ClientServer(self.kv, self, cfg.client_listener.host,
                                              cfg.client_listener.port,
                                              guard=guard.listener("client"), auth=auth)
            await self.client_server.start()
        # Everything allocated so far (modules, configuration, the loaded state) lives as long
        # as the process: keep it out of every later full collection, which otherwise scans it
        # all (~40 ms for the start-up heap alone, measured in docs/journal/perf-04-second-round.md).
        gc.freeze()
        log.info(
            "event=node_started replica=%d directory_id=%s cluster_id=%s log_start=%d "
            "log_end=%d applied=%d snapshot=%s",
            cfg.node_id, directory_id, self.cluster_id, md.log.log_start_offset,
            md.log.log_end_offset, self.sm.applied_offset, latest,
        )
        effects = self.core.start()
        self._core_task = asyncio.ensure_future(self._core_loop(effects))

    def _log_state(self, md: MetadataDir) -> LogState:
        qs = md.quorum_state
        quorum = QuorumStateData()
        if qs is not None:
            quorum = QuorumStateData(max(qs.leader_epoch, 0), qs.leader_id, qs.voted_id,
                                     qs.voted_directory_id)
        voters: list[tuple[int, VoterSet]] = []
        versions: list[tuple[int, int]] = []
        for entry in md.voters_history:
            # a snapshot's sets stand at its last offset (the bootstrap checkpoint's at -1):
            # they came from the log, so the next leader does not write them again
            offset = entry.offset
            if isinstance(entry.record, VotersRecord):
                voters.append((offset, voters_from_record(entry.record)))
            elif isinstance(entry.record, KRaftVersionRecord):
                versions.append((offset, entry.record.kraft_version))
        snapshots = []
        for sid in md.snapshots.ids():
            size = md.snapshots.path(sid).stat().st_size
            snapshots.append((m.OffsetAndEpoch(sid.epoch, sid.end_offset), size))
        return LogState(
            quorum_state=quorum,
            log_start_offset=md.log.log_start_offset,
            log_end_offset=md.log.log_end_offset,
            epoch_cache=tuple((e.epoch, e.start_offset) for e in md.log.epoch_cache.entries),
            voters_history=tuple(voters),
            kraft_version_history=tuple(versions),
            snapshots=tuple(snapshots),
        )

    async def wait_stopped(self) -> None:
        """Return once the node stopped (or failed fatally; then re-raise the failure)."""
        await self._stopped.wait()
        if self._fatal is not None:
            raise self._fatal

    async def stop(self, graceful: bool = True) -> None:
        """Stop serving; a graceful stop lets a leader resign first (EndQuorumEpoch)."""
        if graceful and self.core is not None and self._core_task is not None \
                and not self._core_task.done():
            self.queue.push(ev.Shutdown())
            await asyncio.sleep(0.2)
        if self._core_task is not None:
            self._core_task.cancel()
            with contextlib.suppress(BaseException):
                await self._core_task
        self.connection_guard.stop()
        for listener in self.listeners:
            await listener.stop()
        if self.http_api is not None:
            await self.http_api.stop()
        if self.client_server is not None:
            await self.client_server.stop()
        self.lanes.close()  # before their connections and their segments are closed
        self.peers.network.close()
        self.kv.close()
        self.peers.sweep.cancel()
        if self._core_timer is not None:
            self._core_timer.cancel()
            self._core_timer = None
        for task in list(self._tasks):
            task.cancel()
        if self.log_service is not None:
            self.log_service.stop()
        if self.applier is not None:
            self.applier.close()
        if self.md is not None:
            with contextlib.suppress(Exception):
                self.md.close()
        if self.log_service is not None:
            self.log_service.close_kernel()
        self._stopped.set()
        log.info("event=node_stopped replica=%d", self.config.node_id)

    # ================================================================== the core loop

    def spawn(self, coro: Any) -> None:
        """Run `coro` as a task of the node (cancelled when it stops)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _core_loop(self, first: list[fx.Effect]) -> None:
        core = self.core
        logs = self.log_service
        applier = self.applier
        kv = self.kv
        lanes = self.lanes
        assert core is not None and logs is not None and applier is not None
        try:
            await self._execute(first)
            loop = asyncio.get_running_loop()
            queue = self.queue
            events = queue.events
            lone = queue.ahead
            sm = self.sm
            while True:
                if logs.flush_due and (
                        not (events or lone) or logs.flush_due > INLINE_FLUSH_EVERY):
                    # Inline group commit: the events that arrived together (a client write
                    # and the followers' fetches) are all handled and answered first, then one
                    # fsync covers every append among them.
                    logs.flush_inline()
                if applier.target > sm.applied_offset and (
                        not (events or lone) or applier.waited >= APPLY_EVERY):
                    # Applying comes after replication: the fetches, acknowledgements and
                    # appends that arrived are handled (and fsynced) first, so the next batch
                    # replicates while this one is applied. One step, then whatever the
                    # transports delivered meanwhile.
                    self._apply_step()
                    lanes.after_apply()
                    await asyncio.sleep(0)
                    continue
                if not events and not lone:
                    deadline = core.next_deadline()
                    delay = None if deadline is None else (deadline - now_ms()) / 1000
                    if delay is None or delay > 0:
                        # sleep until an event is pushed or the core's next deadline (no task
                        # per wait: one future). The timer stays armed across sleeps while it
                        # fires no later than the deadline: the deadlines (a parked fetch's
                        # MaxWaitMs, the fetch timeout) move forward with every exchange, so
                        # it is re-armed about once per deadline instead of on every sleep, and
                        # a wake-up before the current deadline costs one Tick.
                        if delay is not None and deadline is not None and (
                                self._core_timer is None or self._core_timer_at > deadline):
                            if self._core_timer is not None:
                                self._core_timer.cancel()
                            self._core_timer_at = deadline
                            self._core_timer = loop.call_later(delay, self._core_timer_fired)
                        if lanes.before_sleep():
                            # the follower's lane made progress while this loop ran: the core
                            # takes it now rather than at the lane's next tick
                            events.append(("lane", None))
                        else:
                            wake = queue.waiter = loop.create_future()
                            try:
                                await wake
                            finally:
                                queue.waiter = None
                                lanes.woken()
                    else:
                        await asyncio.sleep(0)
                if kv.submit_now:
                    # A lone client's write that arrived in this loop turn goes to the core
                    # before the fetches that arrived with it (see KvFront.submit_pending).
                    kv.submit_pending()
                item = lone.popleft() if lone else events.popleft() if events else ev.Tick()
                if isinstance(item, tuple):
                    kind, payload = item
                    if kind == "flushed":
                        generation, durable = payload
                        if generation < 0:
                            raise StorageError("the log could not be fsynced; stopping")
                        if generation != logs.flusher.generation:
                            logs.request_flush()  # stale: a truncation happened meanwhile
                            continue
                        item = ev.Persisted(durable)
                    elif kind == "lane":
                        taken = lanes.take()
                        if taken is None:
                            continue
                        item = taken
                    else:  # pragma: no cover
                        continue
                report = lanes.before_event(item)
                if report is not None:
                    if report is True:
                        continue  # an early wake-up: nothing is due, the running lane goes on
                    # the lane reports everything it did before the core sees anything else
                    await self._execute(core.handle(report, now_ms()))
                effects = core.handle(item, now_ms())
                await self._execute(effects)
                lanes.after_event()
                if logs.flush_due:
                    logs.flush_due += 1
                if applier.target > sm.applied_offset:
                    applier.waited += 1
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._fatal = exc
            log.critical("event=fatal replica=%d error=%r", self.config.node_id, repr(exc),
                         exc_info=True)
            self._stopped.set()
            raise

    def _core_timer_fired(self) -> None:
        self._core_timer = None
        self.queue.wake()

    # ================================================================== effects

    async def _execute(self, effects: list[fx.Effect]) -> None:
        """Carry out the core's effects (`kraft.server.executor`)."""
        executor = self._executor
        assert executor is not None
        await executor.execute(effects)

    # ------------------------------------------------------------------ the transport

    def address_of(self, dest: int, endpoints: tuple[m.Endpoint, ...]) -> tuple[str, int] | None:
        """The address of node `dest` (`Peers.address_of`)."""
        return self.peers.address_of(dest, endpoints)

    async def core_request(self, source: int, request: m.Request,
                           timeout_s: float = 60.0) -> tuple[m.Response, bytes | None]:
        """Hand a request to the core and wait for its answer (`Peers.core_request`)."""
        return await self.peers.core_request(source, request, timeout_s)

    # ------------------------------------------------------------------ NodePort

    def fetch_adopted(self, e: fx.FetchAdopted) -> None:
        """The follower lane's fetch in flight is now the core's request."""
        self.lanes.fetch_adopted(e.correlation_id)

    def note_leader_high_watermark(self, high_watermark: int, epoch: int) -> None:
        """A Fetch answer of the leader of `epoch` (or its follower lane) gave the leader's own
        high watermark: the readiness check compares this node's to it."""
        self._leader_hw = high_watermark
        self._leader_hw_at = time.monotonic()
        self._leader_hw_epoch = epoch

    def epoch(self) -> int:
        """The core's current epoch (-1 before the node started)."""
        return self.core.epoch if self.core is not None else -1

    def state_changed(self, e: fx.StateChanged) -> None:
        """The replica's role or epoch changed: metrics, and the KV front end's writers."""
        log.info("event=state_changed replica=%d state=%s epoch=%d leader=%d",
                 self.config.node_id, e.state, e.epoch, e.leader_id)
        if e.state == Role.LEADER.value:
            self.metrics.elections_won.inc()
        if e.state in (Role.CANDIDATE.value,):
            self.metrics.elections.inc()
        self.kv.leadership_changed(e.state == Role.LEADER.value)

    # ------------------------------------------------------------------ apply

    def _apply_step(self) -> None:
        """Apply the next APPLY_CHUNK committed records and send the answers that completes."""
        assert self.applier is not None
        self.applier.step()
        if self.client_server is not None:
            self.client_server.flush()

    # ================================================================== the listeners' reads
    # (the listeners call the KV front end, `self.kv`, for the KV API itself)

    def request_refused(self) -> None:
        """A client write was refused before it was proposed (a limit): counted."""
        self.metrics.requests_refused.inc()

    def lane_catch_up(self) -> asyncio.Future[None] | None:
        """What a local read waits for first where a native lane runs (`LaneArbiter.catch_up`),
        None when there is nothing to wait for."""
        return self.lanes.catch_up()

    # ================================================================== status / metrics

    def in_kafka_quorum(self) -> bool:
        """True when KV calls are refused here: the quorum has Kafka controllers
        (`KvFront.kafka_quorum_reason`)."""
        if not self.peers.kafka_replicas and not getattr(self.sm, "foreign_records", 0):
            return False
        return self.kv.kafka_quorum_reason() is not None

    def status(self) -> dict[str, Any]:
        """This node's view, JSON-ready."""
        core = self.core
        md = self.md
        assert core is not None and md is not None
        return {
            "node_id": self.config.node_id,
            "directory_id": str(md.meta.directory_id),
            "cluster_id": self.cluster_id,
            "role": core.role.value,
            "epoch": core.epoch,
            "leader_id": core.leader_id,
            "high_watermark": core.high_watermark if core.high_watermark is not None else -1,
            "leader_high_watermark": self._leader_hw if core.role != Role.LEADER
            else (core.high_watermark if core.high_watermark is not None else -1),
            "log_start_offset": md.log.log_start_offset,
            "log_end_offset": md.log.log_end_offset,
            "applied_offset": self.sm.applied_offset,
            "kafka_metadata_records": getattr(self.sm, "foreign_records", 0),
            "is_voter": core.is_voter(),
            "voters": [{"id": v.id, "directory_id": str(v.key.directory_id) if v.key.directory_id else None,
                        "endpoints": [f"{e.name}://{e.host}:{e.port}" for e in v.endpoints]}
                       for v in core.voters().voters],
            "kraft_version": core.kraft_version,
            **self.lanes.stats(),
        }

    def readiness(self) -> tuple[bool, str]:
        """Ready = in a working quorum and caught up (docs/node.md, "Probes"):

        * a leader: a majority of the voters (itself included) fetched from it within the
          fetch timeout, its epoch has a high watermark, and its state machine applied it;
        * a follower or an observer: a Fetch to the leader of its current epoch was answered
          within the fetch timeout, and its state machine applied up to the leader's high
          watermark carried by the latest such answer;
        * anything else (no leader known, an election, a resigned leader, a fatal error):
          not ready.
        """
        core = self.core
        if core is None:
            return False, "starting"
        if self._fatal is not None:
            return False, f"failed: {self._fatal}"
        hw = core.high_watermark
        if core.role == Role.LEADER:
            fetched, needed = self._voters_in_touch()
            if fetched < needed:
                return False, (f"leader without a majority: {fetched} of the voters (needs "
                               f"{needed}) fetched within the fetch timeout")
            if hw is None:
                return False, "leader without a committed record in its epoch yet"
            if self.sm.applied_offset < hw:
                return False, f"leader applied {self.sm.applied_offset} < high watermark {hw}"
            return True, "leader"
        if core.role == Role.FOLLOWER:
            fresh = time.monotonic() - self._leader_hw_at < self.config.fetch_timeout_ms / 1000
            if not fresh or self._leader_hw < 0:
                return False, "no recent fetch response from the leader"
            if self._leader_hw_epoch != core.epoch:
                return False, (f"no fetch response from the leader of epoch {core.epoch} yet "
                               f"(the last was of epoch {self._leader_hw_epoch})")
            if self.sm.applied_offset < self._leader_hw:
                return False, (f"applied {self.sm.applied_offset} behind the leader's high "
                               f"watermark {self._leader_hw}")
            return True, "follower caught up"
        return False, f"{core.role.value} in epoch {core.epoch}"

    def probe_view(self) -> dict[str, Any]:
        """The position a readiness answer shows: role, epoch, leader, this node's applied
        offset and the leader's high watermark it compares it with (-1: none known)."""
        core = self.core
        if core is None:
            return {"role": "starting", "epoch": -1, "leader_id": -1,
                    "applied_offset": self.sm.applied_offset, "leader_high_watermark": -1}
        if core.role == Role.LEADER:
            leader_hw = core.high_watermark if core.high_watermark is not None else -1
        else:
            leader_hw = self._leader_hw
        return {"role": core.role.value, "epoch": core.epoch, "leader_id": core.leader_id,
                "applied_offset": self.sm.applied_offset, "leader_high_watermark": leader_hw}

    def _voters_in_touch(self) -> tuple[int, int]:
        """On a leader: (voters that fetched within the fetch timeout, itself counted when a
        voter; the majority of the voters set)."""
        core = self.core
        assert core is not None and isinstance(core.state, LeaderState)
        s = core.state
        voters = core.voters()
        since = now_ms() - self.config.fetch_timeout_ms
        fetched = 0
        own = s.node_key
        for v in voters.voters:
            # itself as the core counts it: same id, and the same directory id unless the set
            # has none (a static quorum's voters carry no directory id)
            if v.id == own.id and (v.key.directory_id is None or v.key == own):
                fetched += 1
                continue
            p = s.voter_progress(v)
            if p is not None and p.last_fetch_ms >= since:
                fetched += 1
        return fetched, len(voters) // 2 + 1

    async def describe_quorum(self) -> dict[str, Any]:
        """DescribeQuorum from the leader (locally when leader, else over the wire)."""
        core = self.core
        assert core is not None
        if core.role == Role.LEADER:
            resp, _ = await self.core_request(-1, m.DescribeQuorumRequest(), 10)
        else:
            leader = core.leader_id
            if leader < 0:
                raise NotLeaderError(-1, None)
            endpoints: tuple[m.Endpoint, ...] = ()
            if isinstance(core.state, FollowerState):
                endpoints = core.state.leader_endpoints
            address = self.address_of(leader, endpoints)
            if address is None:
                raise NotLeaderError(leader, None)
            _, data = await self.peers.network.request(
                leader, address, ApiKey.DESCRIBE_QUORUM,
                lambda v: request_to_wire(m.DescribeQuorumRequest(), self.cluster_id, v), 10)
            resp = response_to_core(data, self._listener_name)
        assert isinstance(resp, m.DescribeQuorumResponse)
        return describe_quorum_json(resp)

    def _setup_metrics(self) -> NodeMetrics:
        """Register the gauges computed at scrape time, then the instruments the parts
        update (`NodeMetrics`), in the order they are rendered."""
        r = self.registry
        r.gauge("kraft_number_of_voters", "Voters in the active voters set",
                lambda: len(self.core.voters()) if self.core else 0)
        r.gauge("kraft_number_of_observers", "Observers the leader has seen fetching",
                lambda: self._leader_stat("observers"))
        r.gauge("kraft_pending_add_voter", "1 while an AddRaftVoter is in progress on this leader",
                lambda: self._leader_stat("pending_add"))
        r.gauge("kraft_pending_remove_voter", "1 while a RemoveRaftVoter is in progress",
                lambda: self._leader_stat("pending_remove"))
        r.gauge("kraft_duplicate_voter_ids",
                "Replicas fetching with a voter's id but another directory id",
                lambda: self._leader_stat("duplicates"))
        r.gauge("kraft_number_of_offline_voters",
                "Voters that have not fetched within the fetch timeout (leader only)",
                lambda: self._leader_stat("offline"))
        r.gauge("kraft_ignored_static_voters",
                "1 when controller.quorum.voters is set but the log's voters set is used",
                lambda: 1.0 if self.config.quorum_voters and self.core is not None
                and self.core.kraft_version >= 1 else 0.0)
        r.gauge("kraft_current_leader", "Leader id (-1 unknown)",
                lambda: self.core.leader_id if self.core else -1)
        r.gauge("kraft_current_epoch", "Current epoch", lambda: self.epoch())
        r.gauge("kraft_is_leader", "1 when this node leads",
                lambda: 1.0 if self.core is not None and self.core.role == Role.LEADER else 0.0)
        return NodeMetrics(r)

    def _leader_stat(self, what: str) -> float:
        core = self.core
        if core is None or not isinstance(core.state, LeaderState):
            return 0.0
        s = core.state
        voters = core.voters()
        now = now_ms()
        if what == "observers":
            return float(sum(1 for k in s.progress if not voters.is_voter(k)
                             and k != s.node_key and s.progress[k].last_fetch_ms >= now - 300_000))
        if what == "pending_add":
            return 1.0 if s.pending_change is not None and s.pending_change.kind == ChangeKind.ADD else 0.0
        if what == "pending_remove":
            return 1.0 if s.pending_change is not None and s.pending_change.kind == ChangeKind.REMOVE else 0.0
        if what == "duplicates":
            return float(sum(1 for k in s.progress if voters.is_voter_id(k.id)
                             and not voters.is_voter(k)))
        if what == "offline":
            offline = 0
            for v in voters.voters:
                if v.key == s.node_key or v.id == s.node_key.id:
                    continue
                p = s.voter_progress(v)
                if p is None or p.last_fetch_ms < now - self.config.fetch_timeout_ms:
                    offline += 1
            return float(offline)
        return 0.0

    def render_metrics(self) -> str:
        """Prometheus text of this node."""
        metrics = self.metrics
        if self.core is not None:
            metrics.high_watermark.set(self.core.high_watermark
                                       if self.core.high_watermark is not None else -1)
            for (kind, reason), count in self.core.refusals.counts.items():
                metrics.raft_refused.labels(kind, reason).value = float(count)
        if self.md is not None:
            metrics.log_end_offset.set(self.md.log.log_end_offset)
        metrics.applied_offset.set(self.sm.applied_offset)
        return self.registry.render()


def _bootstrap_metadata_version(metadata_dir: Path) -> int | None:
    """The metadata.version level the format wrote: in bootstrap.checkpoint (`kraft format`,
    Kafka up to 4.3), else in the (0, 0) snapshot (Kafka 4.4's `kafka-storage format` puts the
    bootstrap records there and writes no bootstrap.checkpoint). None when neither names one."""
    path = metadata_dir / BOOTSTRAP_CHECKPOINT
    if not path.exists():
        path = partition_dir(metadata_dir) / BOOTSTRAP_SNAPSHOT_ID.file_name()
        if not path.exists():
            return None
    for record in read_bootstrap_checkpoint(path):
        if record.name == METADATA_VERSION_FEATURE:
            return record.feature_level
    return None


def describe_quorum_json(resp: m.DescribeQuorumResponse) -> dict[str, Any]:
    """A DescribeQuorum response as JSON (the shape `kraft quorum describe` prints from)."""

    def row(r: m.ReplicaDescription) -> dict[str, Any]:
        return {
            "id": r.replica_id,
            "directory_id": str(r.replica_directory_id) if r.replica_directory_id else None,
            "log_end_offset": r.log_end_offset,
            "last_fetch_timestamp": r.last_fetch_timestamp,
            "last_caught_up_timestamp": r.last_caught_up_timestamp,
        }

    return {
        "error_code": int(resp.error_code),
        "error": resp.error_code.name if resp.error_code != ErrorCode.NONE else None,
        "leader_id": resp.leader_id,
        "leader_epoch": resp.leader_epoch,
        "high_watermark": resp.high_watermark,
        "voters": [row(r) for r in resp.current_voters],
        "observers": [row(r) for r in resp.observers],
        "nodes": {str(node_id): [f"{e.name}://{e.host}:{e.port}" for e in eps]
                  for node_id, eps in resp.nodes},
    }
