"""The node runtime: one asyncio process around the pure consensus core.

`KraftNode` owns the `RaftCore`, the metadata directory (log, snapshots, quorum-state), the
Kafka listener, the peer network, the admin HTTP server and the application state machine.

Threads: everything runs on the event loop thread except fsync. A dedicated flusher thread
calls `SegmentedLog.flush()` whenever appends are waiting (group commit: every append made
while a flush runs is covered by the next one) and reports `Persisted(end)` back to the loop.
Quorum-state writes and snapshot files are written on the default executor; the loop awaits
them without blocking.

Events reach the core through one queue and one task (`_core_loop`), so the core sees them one
at a time. Effects are executed in list order, as `kraft.raft.effects` requires:
`PersistQuorumState` is awaited (durable) before anything after it; log writes go to the page
cache at once and are fsynced by the flusher. `Committed(hw)` raises the apply target; the core
loop applies up to it in steps of APPLY_CHUNK records once the events that arrived with it are
handled (and an inline fsync done): a follower fetches the next batch, and a leader appends and
sends it, before applying the one just committed, so replication and applying overlap. Before
`CreateSnapshot` (and `AdvanceLogStart`) the state machine is brought exactly to that offset,
and before any effect that changes leadership or replaces the state (a state change, a
truncation, a snapshot installed, the quorum state written), everything committed is applied.

Writes from clients are grouped into one `Append` (one batch, at most 1 MiB of values and 16,384
of them): at once when none of this leader's batches waits for commit, otherwise until the
oldest commits or `controller.quorum.append.linger.ms` passes (group commit under load, no
linger for a lone client, whose batch the core also handles before the events queued with
it). Each value's future is keyed by its offset and epoch; the apply
step resolves it with the state machine's result. Reads are linearizable through a read
barrier: a no-op record appended in the current epoch; once it is committed and applied, no
other leader can have committed anything this leader has not applied, so the local state
answers the read.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import concurrent.futures
import contextlib
import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from itertools import accumulate, repeat
from pathlib import Path
from typing import Any, Final, Protocol

from kraft.lane import FollowerLaneRunner, LeaderLaneRunner, append_scan, native
from kraft.protocol import messages as w
from kraft.protocol.api import SUPPORTED_FEATURES, ApiKey, api_spec, api_versions_response
from kraft.protocol.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from kraft.protocol.framing import decode_request, encode_response
from kraft.raft import effects as fx
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.raft.config import LogState, QuorumStateData, RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.leader import ChangeKind, LeaderState
from kraft.raft.records import voters_from_record, voters_record
from kraft.raft.state import FollowerState, Role
from kraft.raft.voters import VoterSet, static_voter_set
from kraft.records.batch import build_batch
from kraft.records.control import KRaftVersionRecord, VotersRecord, build_control_batch
from kraft.records.snapshot_format import iter_snapshot_batches
from kraft.server import frame_answer
from kraft.server.admin import (
    AdminServer,
    KvAnswer,
    KvCall,
    KvOp,
    NotLeaderError,
    OutcomeUnknownError,
)
from kraft.server.client_protocol import ClientServer
from kraft.server.config import NodeConfig
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
from kraft.server.forward import (
    BadForwardedCall,
    Forwarder,
    Target,
    decode_call,
    encode_answer,
    is_forward_frame,
)
from kraft.server.frame_answer import FrameAnswer
from kraft.server.frames import (
    DeferredReply,
    EarliestDeadline,
    FrameListener,
    PeerClosedError,
    PeerInfo,
)
from kraft.server.lane_host import NodeFetchFrames
from kraft.server.metrics import DISK_LATENCY_BUCKETS, Registry
from kraft.server.translate import (
    TopLevelError,
    request_to_core,
    request_to_wire,
    response_to_core,
)
from kraft.server.transport import (
    KafkaConnection,
    PeerNetwork,
    RequestError,
    unsupported_version_frame,
)
from kraft.statemachine.base import CommittedBatch, StateMachine, chunk_values
from kraft.statemachine.kv import (
    KVResult,
    KVStore,
    encode_barrier,
    encode_cas,
    encode_delete,
    encode_put,
)
from kraft.storage.bootstrap import METADATA_VERSION_FEATURE, read_bootstrap_checkpoint
from kraft.storage.engine_choice import open_engine
from kraft.storage.errors import OffsetOutOfRangeError, StorageError
from kraft.storage.layout import BOOTSTRAP_CHECKPOINT, SnapshotId
from kraft.storage.loader import MetadataDir, open_metadata_dir
from kraft.storage.quorum_state import QuorumStateData as StoredQuorumState
from kraft.storage.snapshot_load import SnapshotStream, read_snapshot_control
from kraft.storage.snapshots import SnapshotChunkReader, SnapshotWriter, iter_snapshot_values
from kraft.storage.sync_engine import SyncEngine

log = logging.getLogger("kraft.server.node")

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

SNAPSHOT_BATCH_BYTES = 1024 * 1024
MAX_APPEND_BYTES = 1024 * 1024
"""Client values per batch are cut at this many bytes (the log takes batches up to 8 MiB)."""
MAX_APPEND_VALUES = 16384
"""...and at this many values (tiny values: a batch's cut then looks at no more pending writes
than this, however many wait)."""
APPLY_CHUNK = 8192
"""Committed records applied in one step of the core loop; the loop handles what arrived
meanwhile (fetches, acknowledgements, new writes) between two steps."""
APPLY_EVERY = 16
"""Events the core loop handles at most while committed records wait to be applied."""
CLIENT_TIMEOUT_S = 15.0
INLINE_FLUSH_EVERY = 64
"""Inline flush mode: fsync after at most this many events handled since an append, even
while more keep queueing (a busy leader's own durable offset still moves)."""
SNAPSHOT_DELETE_DELAY_S = 60.0
"""A deleted snapshot stays as `.checkpoint.deleted` this long before it is removed (Kafka's
file.delete.delay.ms for the metadata log, 60 s)."""
EARLY_FLUSH_MAX_RECORDS = 16
"""`kraft.log.flush.mode=auto`: a leader's append of at most this many records is fsynced by
the flusher thread as soon as it is written (see `_execute`)."""


_APPLY_LATER_OK: Final = frozenset({
    fx.SendRequest, fx.SendResponse, fx.SendFetchResponse, fx.SendFetchSnapshotResponse,
    fx.AppendRecords, fx.AppendControl, fx.AppendFetched, fx.Committed, fx.AppendAccepted,
    fx.AppendCommitted, fx.CreateSnapshot, fx.AdvanceLogStart, fx.DeleteSnapshot,
    fx.WriteSnapshotChunk, fx.SendApiVersions, fx.FetchAdopted, fx.MeasureRetention,
})
"""Effects the core loop executes while committed records still wait to be applied (a
snapshot is taken, and the log's start moved, only after applying exactly up to their
offset); before any other (a state change, a truncation, a snapshot installed, the quorum
state written) every committed record is applied first."""


def now_ms() -> int:
    """Wall-clock milliseconds (Kafka reports wall-clock timestamps in DescribeQuorum)."""
    return int(time.time() * 1000)


class Completion(Protocol):
    """What waits for one submitted record: an `asyncio.Future`, or any object with the same
    three methods (the binary client protocol answers from `set_result` directly, without a
    future and a loop callback per write)."""

    def done(self) -> bool: ...
    def set_result(self, result: object, /) -> None: ...
    def set_exception(self, exc: BaseException, /) -> None: ...


class _Flusher:
    """The disk writer thread: fsyncs the log on demand and reports the durable end."""

    def __init__(self, flush: Callable[[], int], report: Callable[[int, int], None]) -> None:
        self._flush = flush
        self._report = report
        self._wanted = threading.Event()
        self._stop = False
        self.generation = 0
        self._thread = threading.Thread(target=self._run, name="kraft-flusher", daemon=True)
        self.flushes = 0
        """Flushes done, on this thread, inline or by the kernel (`inline` of them on the loop,
        `kernel` of them started by the kernel, `kraft.storage.sync_engine`)."""
        self.inline = 0
        self.kernel = 0

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def request(self) -> None:
        """Ask for a flush of everything appended so far."""
        self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._stop:
                return
            generation = self.generation
            try:
                durable = self._flush()
            except StorageError as exc:
                # fail-stop: an fsync error means the page cache can no longer be trusted
                log.critical("event=flush_failed error=%r", str(exc))
                self._report(-1, -1)
                return
            self.flushes += 1
            self._report(generation, durable)

    def stop(self) -> None:
        """Stop the thread (after the flush in progress, if any), if it was started."""
        self._stop = True
        self._wanted.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)


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


class KraftNode:
    """A running KRaft controller node (see the module docstring)."""

    def __init__(self, config: NodeConfig, state_machine: StateMachine | None = None,
                 seed: int | None = None) -> None:
        self.config = config
        self._listener_name = config.controller_listener.name
        self.sm: StateMachine = state_machine if state_machine is not None else KVStore()
        self._apply_quietly: Callable[[CommittedBatch], None] | None = getattr(
            self.sm, "apply_quietly", None)
        self._rng = random.Random(seed)
        self._events: collections.deque[ev.Event | tuple[str, Any]] = collections.deque()
        self._lone_append: collections.deque[ev.Append] = collections.deque()
        """A batch of writes submitted with none of this leader's batches waiting for commit
        (at most one): the core loop handles it before the events queued with it."""
        self._flush_due = 0
        """Events handled since an append that the inline flush has not covered yet (0: none)."""
        self._apply_target = 0
        """The highest high watermark the core reported (`Committed`): the core loop applies up
        to it in steps of APPLY_CHUNK records, after the replication work queued before it."""
        self._apply_waited = 0
        """Events handled since a step of applying while records waited to be applied."""
        self._decoded: tuple[int, int, Sequence[bytes | None]] | None = None
        """(base offset, epoch, values) of a batch applied in part: the rest needs no decoding."""
        self._wake: asyncio.Future[None] | None = None
        self._core_timer: asyncio.TimerHandle | None = None
        self._core_timer_at = 0
        """The core deadline (ms) `_core_timer` wakes the core loop for."""
        self._inbound: dict[int, asyncio.Future[tuple[m.Response, bytes | None]] | FrameAnswer] = {}
        self._inbound_ids = 0
        self._address_memo: tuple[tuple[m.Endpoint, ...] | None, tuple[str, int] | None] = (
            None, None)
        """(endpoints, address) of `_address_of`'s last answer from given endpoints."""
        self._sweep = EarliestDeadline(self._sweep_inbound)
        """At the earliest deadline of the request frames waiting for the core."""
        self._append_ids = 0
        self._appends: dict[int, list[Completion]] = {}
        # offset -> (the epoch it was appended in, the writer's completion)
        self._waiting: dict[int, tuple[int, Completion]] = {}
        # base offset -> (epoch, values) of the batches this leader appended and has not
        # applied yet: applying them needs no read back from the log and no decoding
        self._own_batches: dict[int, tuple[int, tuple[bytes, ...]]] = {}
        self._pending_values: list[tuple[bytes, Completion]] = []
        self._linger_handle: asyncio.Handle | None = None
        self._submit_now = False
        """`_linger_handle` submits a lone write at the end of this loop turn: the core loop
        submits it itself if it runs first."""
        self._uncommitted_appends: set[int] = set()
        self._barrier: asyncio.Future[object] | None = None
        self._snapshot_readers: dict[m.OffsetAndEpoch, SnapshotChunkReader] = {}
        self._snapshot_times: dict[m.OffsetAndEpoch, int] = {}
        """Each snapshot's LastContainedLogTimestamp, for the retention check."""
        self._downloads: dict[m.OffsetAndEpoch, SnapshotWriter] = {}
        # FetchSnapshot chunks are written, frozen and aborted in order on one thread, so the
        # loop goes on receiving the next chunk while the previous one reaches the disk
        self._snapshot_io = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="kraft-snapshot-io")
        self._tasks: set[asyncio.Task[Any]] = set()
        self._leader_hw = -1
        self._leader_hw_at = 0.0
        self._leader_hw_epoch = -1
        """The epoch of the leader whose Fetch answer set `_leader_hw` (readiness counts only
        the current epoch's leader)."""
        self._last_applied_ts = -1
        self._stopped = asyncio.Event()
        self._fatal: BaseException | None = None
        self.metrics = Registry()
        self._setup_metrics()
        self.md: MetadataDir | None = None
        self.core: RaftCore | None = None
        self._metadata_version: int | None = None
        """The metadata.version level of bootstrap.checkpoint (None: the file has none)."""
        self.cluster_id = ""
        self.listener: FrameListener | None = None
        self.admin: AdminServer | None = None
        self.client_server: ClientServer | None = None
        self.network = PeerNetwork(f"raft-client-{config.node_id}")
        self._forwarder: Forwarder | None = None
        self._leader_waiters: list[asyncio.Future[None]] = []
        """Forwarded calls waiting for news of the leader (`_leader_news`)."""
        self._flusher: _Flusher | None = None
        self._kernel: SyncEngine | None = None
        # a flush was asked for while the kernel's was in flight; the flusher generation when
        # the kernel's flush in flight started
        self._kernel_again = False
        self._kernel_generation = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._core_task: asyncio.Task[None] | None = None
        self._lane: FollowerLaneRunner | None = None
        """The follower's native lane (`kraft.lane.follower`), when on and built."""
        self._lane_readers: list[tuple[int, asyncio.Future[None]]] = []
        """Stale reads waiting for the core loop to take the lane's progress and apply it:
        (the count of takes that serves each, its future)."""
        self._lane_takes = 0
        """How often the core loop took the lane's progress for the readers (`lane_catch_up`)."""
        self._leader_lane: LeaderLaneRunner | None = None
        """The leader's native lane (`kraft.lane.leader`), when on and built."""
        self._fetch_peers: dict[int, int] = {}
        """Replica id -> the listener's id of the connection its last fetch came on."""
        self._fetch_sent: tuple[int, KafkaConnection, int, int] | None = None
        """The last fetch sent on an open connection: (the core's correlation id, the
        connection, the correlation id it was sent with, the version): the lane arms with
        it in flight."""

    # ================================================================== start / stop

    async def start(self) -> None:
        """Open storage, load the state machine, start listeners and the core."""
        self._loop = self._sweep.loop = asyncio.get_running_loop()
        cfg = self.config
        self.md = md = open_metadata_dir(cfg.metadata_dir, segment_bytes=cfg.segment_bytes,
                                         expected_node_id=cfg.node_id,
                                         preallocate_bytes=cfg.preallocate_bytes if cfg.fsync else 0)
        md.log.on_flush_time = self._observe_flush
        self.cluster_id = md.meta.cluster_id
        self._forwarder = Forwarder(cfg.node_id, self.cluster_id, self._forward_target,
                                    self._kv_local, self._leader_news)
        directory_id = md.meta.directory_id
        if directory_id is None:
            raise StorageError(f"{cfg.metadata_dir}/meta.properties has no directory.id")
        self._metadata_version = _bootstrap_metadata_version(cfg.metadata_dir)
        latest = md.latest_snapshot
        if latest is not None:
            # One checked pass over the file (CRC, offsets, header/footer) feeding the state
            # machine; a corrupt snapshot raises before the state is published.
            started = time.perf_counter()
            stream = SnapshotStream(md.snapshots.path(latest), latest)
            values = stream.present_values()
            self.sm.load_snapshot(latest.end_offset, values)
            for _ in values:  # a state machine that stopped early: still check the rest
                pass
            elapsed = time.perf_counter() - started
            self._m_snapshot_load.observe(elapsed)
            self._m_snapshot_size.set(stream.size)
            log.info("event=snapshot_loaded replica=%d snapshot=%s bytes=%d records=%d "
                     "load_ms=%.0f", cfg.node_id, latest, stream.size, stream.record_count,
                     elapsed * 1000)
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
        self._static_addresses = {v.node_id: (v.host, v.port) for v in cfg.quorum_voters}
        self.core = RaftCore(raft_cfg, log_state, self._rng, now_ms())
        md.log.use_native_scan(append_scan())  # the lane's C scan of appends, where built
        module = self._lane_module("lane") if cfg.lane_follower else None
        if module is not None:
            self._lane = FollowerLaneRunner(self, module)
        module = self._lane_module("leader_lane") if cfg.lane_leader else None
        if module is not None:
            self._leader_lane = LeaderLaneRunner(self, module, NodeFetchFrames(self))
        self._flusher = _Flusher(md.log.flush, self._flushed_from_thread)
        engine = "thread"
        if cfg.fsync and cfg.flush_mode != "inline":
            self._kernel, engine = open_engine(cfg.flush_kernel)
            if self._kernel is not None:
                md.log.use_kernel_sync(self._kernel)
                self._loop.add_reader(self._kernel.fileno(), self._kernel_flushed)
        if self._kernel is None:  # with an engine every flush is the kernel's or inline
            self._flusher.start()
        log.info("event=flusher replica=%d mode=%s engine=%s", cfg.node_id, cfg.flush_mode,
                 engine)
        bound = cfg.controller_listener
        self.listener = FrameListener(bound.host, bound.port, self._on_frame, name=bound.name)
        await self.listener.start()
        if cfg.http_listener is not None:
            self.admin = AdminServer(self, cfg.http_listener.host, cfg.http_listener.port,
                                     metadata_dir=Path(cfg.metadata_dir))
            await self.admin.start()
        if cfg.client_listener is not None:
            self.client_server = ClientServer(self, cfg.client_listener.host,
                                              cfg.client_listener.port)
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

    def _lane_module(self, which: str) -> Any:
        """The native lane's module for a lane that is switched on, or None (logged) where it
        cannot run: the extension was not built, or nothing is synced
        (`kraft.log.fsync=false`)."""
        module = native()
        if module is None or not self.config.fsync:
            log.warning("event=%s_unavailable replica=%d reason=%s", which, self.config.node_id,
                        "kraft.log.fsync=false" if self.config.fsync is False else
                        "the native extension kraft.lane._native was not built")
            return None
        return module

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
            self._push(ev.Shutdown())
            await asyncio.sleep(0.2)
        if self._core_task is not None:
            self._core_task.cancel()
            with contextlib.suppress(BaseException):
                await self._core_task
        if self.listener is not None:
            await self.listener.stop()
        if self.admin is not None:
            await self.admin.stop()
        if self.client_server is not None:
            await self.client_server.stop()
        if self._lane is not None:
            self._lane.close()  # before its connection and its segment are closed
        if self._leader_lane is not None:
            self._leader_lane.close()
        self.network.close()
        if self._forwarder is not None:
            self._forwarder.close()
        self._sweep.cancel()
        if self._core_timer is not None:
            self._core_timer.cancel()
            self._core_timer = None
        for task in list(self._tasks):
            task.cancel()
        if self._flusher is not None:
            self._flusher.stop()
        for writer in self._downloads.values():
            writer.abort()
        if self._kernel is not None and self._loop is not None:
            self._loop.remove_reader(self._kernel.fileno())
        if self.md is not None:
            with contextlib.suppress(Exception):
                self.md.close()
        if self._kernel is not None:
            self._kernel.close()
        self._stopped.set()
        log.info("event=node_stopped replica=%d", self.config.node_id)

    # ================================================================== the core loop

    def _flushed_from_thread(self, generation: int, durable: int) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._push, ("flushed", (generation, durable)))

    def _request_flush(self) -> None:
        """Have what was appended so far fsynced while the loop goes on: by the kernel when it
        can (`kraft.log.flush.kernel`), else by the flusher thread; a `flushed` event reports."""
        assert self.md is not None and self._flusher is not None
        if self._kernel is None:
            self._flusher.request()
            return
        log_ = self.md.log
        if log_.flush_in_flight:
            self._kernel_again = True  # started again when this one is done
            return
        self._kernel_again = False
        if log_.start_flush():
            self._kernel_generation = self._flusher.generation
        else:  # nothing the kernel can take alone (a new segment, a new epoch): on the loop
            self._flush_due = self._flush_due or 1

    def _kernel_flushed(self) -> None:
        """The kernel's eventfd is readable: report a finished flush, start the next one."""
        assert self.md is not None
        try:
            durable = self.md.log.finish_flush()
        except StorageError:
            self._push(("flushed", (-1, -1)))  # fail-stop, as a failed fsync on the thread
            return
        if durable is not None:
            assert self._flusher is not None
            self._flusher.flushes += 1
            self._flusher.kernel += 1
            self._push(("flushed", (self._kernel_generation, durable)))
        if self._kernel_again and not self.md.log.flush_in_flight:
            self._request_flush()
            if self._flush_due:  # left to an inline flush: the core loop may be asleep
                self._wake_core()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _core_loop(self, first: list[fx.Effect]) -> None:
        core = self.core
        assert core is not None
        try:
            await self._execute(first)
            loop = asyncio.get_running_loop()
            events = self._events
            lone = self._lone_append
            sm = self.sm
            while True:
                if self._flush_due and (
                        not (events or lone) or self._flush_due > INLINE_FLUSH_EVERY):
                    # Inline group commit: the events that arrived together (a client write
                    # and the followers' fetches) are all handled and answered first, then one
                    # fsync covers every append among them.
                    self._flush_inline()
                if self._apply_target > sm.applied_offset and (
                        not (events or lone) or self._apply_waited >= APPLY_EVERY):
                    # Applying comes after replication: the fetches, acknowledgements and
                    # appends that arrived are handled (and fsynced) first, so the next batch
                    # replicates while this one is applied. One step, then whatever the
                    # transports delivered meanwhile.
                    self._apply_step()
                    if self._leader_lane is not None and not self._leader_lane.armed:
                        self._leader_lane.try_arm()  # a writer was answered: the next may come
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
                        follow = self._lane
                        if follow is not None and follow.waiting(True):
                            # the follower's lane made progress while this loop ran: the core
                            # takes it now rather than at the lane's next tick
                            follow.waiting(False)
                            events.append(("lane", None))
                        else:
                            wake = self._wake = loop.create_future()
                            try:
                                await wake
                            finally:
                                self._wake = None
                                if follow is not None:
                                    follow.waiting(False)
                    else:
                        await asyncio.sleep(0)
                if self._submit_now:
                    # A lone client's write that arrived in this loop turn goes to the core
                    # before the fetches that arrived with it (see _submit_pending).
                    self._submit_pending()
                item = lone.popleft() if lone else events.popleft() if events else ev.Tick()
                lane = self._active_lane()
                if isinstance(item, tuple):
                    kind, payload = item
                    if kind == "flushed":
                        generation, durable = payload
                        assert self._flusher is not None
                        if generation < 0:
                            raise StorageError("the log could not be fsynced; stopping")
                        if generation != self._flusher.generation:
                            self._request_flush()  # stale: a truncation happened meanwhile
                            continue
                        item = ev.Persisted(durable)
                    elif kind == "lane" and lane is not None:
                        self._lane_takes += 1  # covers every answer the lane has taken now
                        report = lane.stop_report("ended") if lane.ended \
                            else lane.progress_report()
                        if report is None:
                            if self._lane_readers:
                                self._lane_read_done()
                            continue
                        item = report
                    else:  # pragma: no cover
                        continue
                if (lane is not None and lane.armed and type(item) is not ev.FollowerLaneReport
                        and type(item) is not ev.LeaderLaneReport):
                    if type(item) is ev.Tick:
                        due = core.next_deadline()
                        if due is None or due > now_ms():
                            continue  # an early wake-up: nothing is due, the lane goes on
                    # the lane reports everything it did before the core sees anything else
                    report = lane.stop_report("event")
                    if report is not None:
                        await self._execute(core.handle(report, now_ms()))
                effects = core.handle(item, now_ms())
                await self._execute(effects)
                if self._lane_readers:
                    self._lane_read_done()
                if self._lane is not None and not self._lane.armed:
                    self._lane.try_arm(self._fetch_sent)
                if self._leader_lane is not None and not self._leader_lane.armed:
                    self._leader_lane.try_arm()
                if self._flush_due:
                    self._flush_due += 1
                if self._apply_target > sm.applied_offset:
                    self._apply_waited += 1
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._fatal = exc
            log.critical("event=fatal replica=%d error=%r", self.config.node_id, repr(exc),
                         exc_info=True)
            self._stopped.set()
            raise

    def _active_lane(self) -> FollowerLaneRunner | LeaderLaneRunner | None:
        """The lane that runs or ended unreported (at most one: a node leads or follows), else
        the follower's runner, if any."""
        lead = self._leader_lane
        if lead is not None and (lead.armed or lead.ended):
            return lead
        return self._lane if self._lane is not None else lead

    def _core_timer_fired(self) -> None:
        self._core_timer = None
        self._wake_core()

    def _push(self, item: ev.Event | tuple[str, Any]) -> None:
        self._events.append(item)
        self._wake_core()

    def _wake_core(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _enqueue(self, event: ev.Event) -> None:
        self._push(event)

    # ================================================================== effects

    async def _execute(self, effects: list[fx.Effect]) -> None:
        md = self.md
        assert md is not None and self._flusher is not None
        appended = False  # the log grew
        flush_later = False  # and something appended waits for the flush after the effects
        early_flush = self.config.fsync and self.config.flush_mode == "auto"
        for e in effects:
            t = type(e)
            if t not in _APPLY_LATER_OK and self._apply_target > self.sm.applied_offset:
                # leadership, the log's start, a snapshot, a truncation: all committed records
                # are applied before it (a writer whose record committed gets its result, not
                # "outcome unknown"; nothing below the log's start is left unapplied)
                self._apply_to(self._apply_target)
            if t is fx.SendRequest:
                assert isinstance(e, fx.SendRequest)
                if not self._send_on_open_connection(e):
                    self._spawn(self._send_request(e))
            elif t is fx.SendResponse:
                assert isinstance(e, fx.SendResponse)
                self._answer(e.correlation_id, e.response, None)
            elif t is fx.SendFetchResponse:
                assert isinstance(e, fx.SendFetchResponse)
                records = b""
                if e.read_offset is not None:
                    try:
                        records = md.log.read(e.read_offset, e.max_bytes)
                    except OffsetOutOfRangeError:
                        records = b""
                self._answer(e.correlation_id, e.response, records)
            elif t is fx.SendFetchSnapshotResponse:
                assert isinstance(e, fx.SendFetchSnapshotResponse)
                self._answer(e.correlation_id, e.response, self._snapshot_chunk(e))
            elif t is fx.AppendRecords:
                assert isinstance(e, fx.AppendRecords)
                values = tuple(map(bytes, e.values))  # type: ignore[arg-type]  # bytes: no copy
                md.log.append(build_batch(e.base_offset, e.epoch, values, e.timestamp_ms))
                self._own_batches[e.base_offset] = (e.epoch, values)
                if early_flush and len(values) <= EARLY_FLUSH_MAX_RECORDS and not self._flush_due:
                    # A small write: its fsync starts now, on the flusher thread, and runs
                    # while the answers to the followers' parked fetches are written (each
                    # socket write wakes a follower, which often runs on this CPU first). The
                    # leader's own durable offset is half of the majority that commits it.
                    self._request_flush()
                else:
                    flush_later = True
                appended = True
            elif t is fx.AppendControl:
                assert isinstance(e, fx.AppendControl)
                md.log.append(build_control_batch(e.base_offset, e.epoch, e.timestamp_ms,
                                                  list(e.control_records)))  # type: ignore[arg-type]
                appended = flush_later = True
            elif t is fx.AppendFetched:
                assert isinstance(e, fx.AppendFetched)
                # fsynced before the next fetch acknowledges it: written through when the log
                # preallocates (kraft.log.preallocate.bytes), so that flush has nothing left
                md.log.append(b"".join(bytes(b.payload) for b in e.batches),  # type: ignore[call-overload]
                              write_through=True)
                appended = flush_later = True
            elif t is fx.TruncateTo:
                assert isinstance(e, fx.TruncateTo)
                self._flusher.generation += 1
                md.log.truncate_to(e.end_offset)
                self._fail_waiters_from(e.end_offset, "truncated")
                log.warning("event=log_truncated replica=%d epoch=%d end_offset=%d",
                            self.config.node_id, self._epoch(), e.end_offset)
            elif t is fx.PersistQuorumState:
                assert isinstance(e, fx.PersistQuorumState)
                data = StoredQuorumState(
                    e.leader_epoch, e.leader_id, e.voted_id,
                    e.voted_directory_id if e.data_version >= 1 else None, e.data_version,
                    e.voter_ids if e.data_version == 0 else None)
                await asyncio.get_running_loop().run_in_executor(
                    None, md.quorum_state_store.write, data)
            elif t is fx.Committed:
                assert isinstance(e, fx.Committed)
                if e.high_watermark > self._apply_target:
                    self._apply_target = e.high_watermark  # applied by the core loop
                    self._m_hw.set(e.high_watermark)
            elif t is fx.AppendAccepted:
                assert isinstance(e, fx.AppendAccepted)
                futures = self._appends.pop(e.append_id, [])
                # offset -> (epoch, completion), built in C: this runs for every write
                self._waiting.update(zip(range(e.base_offset, e.base_offset + len(futures)),
                                         zip(repeat(e.epoch), futures)))
            elif t is fx.AppendRejected:
                assert isinstance(e, fx.AppendRejected)
                self._append_done(e.append_id)
                leader = self._redirect_leader()
                for fut in self._appends.pop(e.append_id, []):
                    if not fut.done():
                        fut.set_exception(NotLeaderError(leader, self._leader_http(leader)))
            elif t is fx.AppendCommitted:
                assert isinstance(e, fx.AppendCommitted)
                self._append_done(e.append_id)
                if e.error_code != ErrorCode.NONE:
                    self._apply_to(self._apply_target)
                    self._fail_unapplied(f"leader changed before commit ({e.error_code.name})")
            elif t is fx.CreateSnapshot:
                assert isinstance(e, fx.CreateSnapshot)
                self._create_snapshot(e)
            elif t is fx.AdvanceLogStart:
                assert isinstance(e, fx.AdvanceLogStart)
                self._apply_to(e.offset)  # nothing below the log's start is left unapplied
                md.log.advance_log_start_offset(e.offset)
            elif t is fx.DeleteSnapshot:
                assert isinstance(e, fx.DeleteSnapshot)
                self._delete_snapshot(e.snapshot_id)
            elif t is fx.MeasureRetention:
                self._enqueue(self._measure_retention())
            elif t is fx.WriteSnapshotChunk:
                assert isinstance(e, fx.WriteSnapshotChunk)
                writer = self._downloads.get(e.snapshot_id)
                if writer is None:
                    writer = md.snapshots.create_writer(
                        SnapshotId(e.snapshot_id.offset, e.snapshot_id.epoch))
                    self._downloads[e.snapshot_id] = writer
                chunk = e.data
                assert isinstance(chunk, bytes | bytearray | memoryview)
                # a failed write fails the freeze (SnapshotInstallFailed), not the node
                self._snapshot_io.submit(writer.write_at, e.position, chunk)
            elif t is fx.InstallSnapshot:
                assert isinstance(e, fx.InstallSnapshot)
                await self._install_snapshot(e.snapshot_id)
            elif t is fx.AbortSnapshotDownload:
                assert isinstance(e, fx.AbortSnapshotDownload)
                dl = self._downloads.pop(e.snapshot_id, None)
                if dl is not None:
                    self._snapshot_io.submit(dl.abort)  # after the writes already queued
            elif t is fx.SendApiVersions:
                assert isinstance(e, fx.SendApiVersions)
                self._spawn(self._send_api_versions(e))
            elif t is fx.StateChanged:
                assert isinstance(e, fx.StateChanged)
                self._on_state_changed(e)
            elif t is fx.FetchAdopted:
                assert isinstance(e, fx.FetchAdopted) and self._lane is not None
                self._lane.adopted(e.correlation_id)
        if self.client_server is not None:
            # Client answers go out after the followers' (their fetches learn the new high
            # watermark first: a reader of a follower sees a write sooner after its
            # acknowledgement, at no measurable cost to the writer) and before an inline fsync.
            self.client_server.flush()
        if flush_later:
            if self.config.fsync and self.config.flush_mode != "thread":
                self._flush_due = self._flush_due or 1  # see _core_loop
            elif self.config.fsync:
                self._request_flush()
            else:
                # kraft.log.fsync=false (tests, benchmarks only): page cache counts as durable
                self._push(("flushed", (self._flusher.generation,
                                                    md.log.log_end_offset)))
        if appended:
            self._m_leo.set(md.log.log_end_offset)
        if self._kernel is not None:
            # A truncation, a log-start advance or a snapshot install above waited for the
            # kernel's flush and consumed its completion: report it here, and start the flush
            # asked for meanwhile now.
            settled = md.log.take_settled()
            if settled is not None:
                self._push(("flushed", (self._flusher.generation, settled)))
            if self._kernel_again and not md.log.flush_in_flight:
                self._request_flush()

    def _flush_inline(self) -> None:
        """fsync the log on the loop thread (`kraft.log.flush.mode=inline`) and report it."""
        md = self.md
        assert md is not None and self._flusher is not None
        self._flush_due = 0
        self._kernel_again = False  # this flush covers everything appended so far
        try:
            durable = md.log.flush()
        except StorageError:
            self._push(("flushed", (-1, -1)))
        else:
            self._flusher.flushes += 1
            self._flusher.inline += 1
            self._push(("flushed", (self._flusher.generation, durable)))

    def _epoch(self) -> int:
        return self.core.epoch if self.core is not None else -1

    def _on_state_changed(self, e: fx.StateChanged) -> None:
        log.info("event=state_changed replica=%d state=%s epoch=%d leader=%d",
                 self.config.node_id, e.state, e.epoch, e.leader_id)
        if e.state == Role.LEADER.value:
            self._m_elections_won.inc()
        if e.state in (Role.CANDIDATE.value,):
            self._m_elections.inc()
        if e.state != Role.LEADER.value:
            self._fail_unapplied("leadership lost")
            self._fail_pending_values()
        waiters, self._leader_waiters = self._leader_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ apply

    def _apply_step(self) -> None:
        """Apply the next APPLY_CHUNK committed records and send the answers that completes."""
        self._apply_waited = 0
        before = self.sm.applied_offset
        self._apply_to(min(self._apply_target, before + APPLY_CHUNK))
        if self.sm.applied_offset == before:
            self._apply_target = before  # nothing can be applied (logged); the next Committed retries
        if self.client_server is not None:
            self.client_server.flush()

    def _apply_to(self, hw: int) -> None:
        """Apply the committed records below `hw` not applied yet (a batch may be applied in
        parts: the records from the applied offset to `hw`)."""
        md = self.md
        assert md is not None
        start = self.sm.applied_offset
        if start >= hw:
            return
        if start < md.log.log_start_offset:
            log.error("event=apply_gap replica=%d applied=%d log_start=%d", self.config.node_id,
                      start, md.log.log_start_offset)
            return
        for batch in md.log.batches(start):
            base = batch.base_offset
            if base >= hw:
                break
            end = min(batch.next_offset, hw)
            self._last_applied_ts = batch.max_timestamp
            if batch.is_control:
                self.sm.skip_to(end)
                continue
            epoch = batch.partition_leader_epoch
            whole = end == batch.next_offset
            own = self._own_batches.get(base) if self._own_batches else None
            values: Sequence[bytes | None]
            if own is not None and own[0] == epoch and len(own[1]) == batch.next_offset - base:
                # the batch this leader built (one epoch, one base offset: the same batch)
                values = own[1]
                if whole:
                    del self._own_batches[base]
            else:
                decoded = self._decoded
                if decoded is not None and decoded[0] == base and decoded[1] == epoch:
                    values = decoded[2]  # the rest of a batch applied in part
                else:
                    values = batch.values()
                    if None in values:
                        values = [v if v is not None else b"" for v in values]
                self._decoded = None if whole else (base, epoch, values)
            first = max(start, base)
            if first > base or not whole:
                values = values[first - base:end - base]
            committed = CommittedBatch(first, epoch, tuple(values))  # type: ignore[arg-type]
            waiting = self._waiting
            if not waiting and self._apply_quietly is not None:
                # nobody waits on this node (a follower, the replay at start-up): no results
                self._apply_quietly(committed)
            else:
                results = self.sm.apply(committed)
                # only a leader (or a deposed one) has writers waiting
                pop = waiting.pop
                for offset, result in enumerate(results, start=first):
                    waiter = pop(offset, None)
                    if waiter is None:
                        continue
                    w_epoch, fut = waiter
                    if fut.done():
                        continue
                    if w_epoch == epoch:
                        fut.set_result((offset, result))
                    else:
                        fut.set_exception(OutcomeUnknownError("write replaced by another leader"))
            if not whole:
                break
        self._m_applied.set(self.sm.applied_offset)

    def _fail_waiters_from(self, offset: int, why: str) -> None:
        self._own_batches.clear()  # the log changed under them: read it again
        for off in [o for o in self._waiting if o >= offset]:
            _, fut = self._waiting.pop(off)
            if not fut.done():
                fut.set_exception(OutcomeUnknownError(f"write {why} at offset {off}"))

    def _fail_unapplied(self, why: str) -> None:
        self._own_batches.clear()
        for off in list(self._waiting):
            _, fut = self._waiting.pop(off)
            if not fut.done():
                fut.set_exception(OutcomeUnknownError(why))
        for futures in self._appends.values():
            for fut in futures:
                if not fut.done():
                    fut.set_exception(OutcomeUnknownError(why))
        self._appends.clear()
        self._uncommitted_appends.clear()

    def _fail_pending_values(self) -> None:
        pending, self._pending_values = self._pending_values, []
        leader = self._redirect_leader()
        for _, fut in pending:
            if not fut.done():
                fut.set_exception(NotLeaderError(leader, self._leader_http(leader)))
        self._barrier = None

    # ------------------------------------------------------------------ snapshots

    def _snapshot_chunk(self, e: fx.SendFetchSnapshotResponse) -> bytes:
        md = self.md
        assert md is not None
        if e.response.error_code != ErrorCode.NONE:
            return b""
        sid = e.response.snapshot_id
        reader = self._snapshot_readers.get(sid)
        if reader is None:
            try:  # one pread per chunk from here on; the file is never read whole
                reader = md.snapshots.open_chunk_reader(SnapshotId(sid.offset, sid.epoch))
            except StorageError:
                return b""
            self._snapshot_readers[sid] = reader
        try:
            return reader.read_chunk(e.response.position, e.max_bytes)
        except StorageError:
            return b""

    def _delete_snapshot(self, sid: m.OffsetAndEpoch) -> None:
        """As Kafka: renamed `.checkpoint.deleted` at once (no longer served, and gone at the
        next start if the node stops first), removed SNAPSHOT_DELETE_DELAY_S later."""
        md = self.md
        assert md is not None
        self._snapshot_times.pop(sid, None)
        served = self._snapshot_readers.pop(sid, None)
        snapshot_id = SnapshotId(sid.offset, sid.epoch)
        if not md.snapshots.mark_deleted(snapshot_id):
            if served is not None:
                served.close()
            return
        store = md.snapshots

        def remove() -> None:
            if served is not None:
                served.close()
            store.remove_marked(snapshot_id)

        assert self._loop is not None
        self._loop.call_later(SNAPSHOT_DELETE_DELAY_S, remove)

    def _measure_retention(self) -> ev.RetentionMeasured:
        """What the leader's retention check needs: the segments' sizes and each snapshot's
        LastContainedLogTimestamp (read from its header once, then remembered)."""
        md = self.md
        assert md is not None and self.core is not None
        times: list[tuple[m.OffsetAndEpoch, int]] = []
        for sid in self.core.log.snapshots:
            ts = self._snapshot_times.get(sid)
            if ts is None:
                snapshot_id = SnapshotId(sid.offset, sid.epoch)
                try:
                    header = read_snapshot_control(md.snapshots.path(snapshot_id), snapshot_id)
                except (StorageError, OSError) as exc:
                    log.warning("event=snapshot_header_unreadable replica=%d snapshot=%s "
                                "error=%r", self.config.node_id, sid, str(exc))
                    continue
                ts = header.header.last_contained_log_timestamp
                self._snapshot_times[sid] = ts
            times.append((sid, ts))
        segments = tuple((seg.base_offset, seg.size) for seg in md.log.segments)
        return ev.RetentionMeasured(segments, tuple(times))

    def _create_snapshot(self, e: fx.CreateSnapshot) -> None:
        """Capture the state now (it must be exactly at the snapshot's end offset) and write
        the file on an executor thread; `SnapshotCreated` follows."""
        sid = e.snapshot_id
        self._apply_to(sid.offset)  # committed records may wait to be applied (core loop)
        if self.sm.applied_offset != sid.offset:
            log.error("event=snapshot_skipped replica=%d snapshot=%s applied=%d",
                      self.config.node_id, sid, self.sm.applied_offset)
            return
        values = self.sm.snapshot_values()
        voters = voters_record(e.voters) if e.voters is not None else None
        self._spawn(self._write_snapshot(sid, values, voters, e.kraft_version,
                                         self._last_applied_ts))

    async def _write_snapshot(self, sid: m.OffsetAndEpoch, values: Sequence[bytes],
                              voters: VotersRecord | None, kraft_version: int,
                              last_ts: int) -> None:
        md = self.md
        assert md is not None
        started = time.perf_counter()

        def write() -> Path:
            assert md is not None
            batches = iter_snapshot_batches(
                sid.epoch, last_ts, chunk_values(values, SNAPSHOT_BATCH_BYTES),
                timestamp_ms=now_ms(), kraft_version=kraft_version, voters=voters,
            )
            return md.snapshots.write(SnapshotId(sid.offset, sid.epoch), batches)

        try:
            path = await asyncio.get_running_loop().run_in_executor(None, write)
        except (StorageError, OSError) as exc:
            log.error("event=snapshot_failed replica=%d snapshot=%s error=%r",
                      self.config.node_id, sid, str(exc))
            return
        size = path.stat().st_size
        self._m_snapshot_gen.observe(time.perf_counter() - started)
        self._m_snapshot_size.set(size)
        log.info("event=snapshot_created replica=%d epoch=%d offset=%d bytes=%d records=%d",
                 self.config.node_id, sid.epoch, sid.offset, size, len(values))
        self._snapshot_times[sid] = last_ts
        self._enqueue(ev.SnapshotCreated(sid, size))

    async def _install_snapshot(self, sid: m.OffsetAndEpoch) -> None:
        """Freeze the downloaded file and load it into the state machine, both on an executor
        thread: the core waits for `SnapshotInstalled` (it handles nothing else meanwhile,
        so nothing is applied concurrently), but the loop keeps serving. The file is checked
        and then streamed batch by batch; it is never held in memory whole."""
        md = self.md
        assert md is not None and self._flusher is not None
        writer = self._downloads.pop(sid, None)
        if writer is None:
            self._enqueue(ev.SnapshotInstallFailed(sid, "no download in progress"))
            return
        loop = asyncio.get_running_loop()
        try:  # on the download's thread: after every chunk queued before it
            path = await loop.run_in_executor(self._snapshot_io, writer.freeze)
        except (StorageError, ProtocolError, OSError) as exc:
            log.warning("event=snapshot_install_failed replica=%d snapshot=%s error=%r",
                        self.config.node_id, sid, str(exc))
            self._enqueue(ev.SnapshotInstallFailed(sid, str(exc)))
            return
        c = writer.contents
        assert c is not None
        size = writer.position
        started = time.perf_counter()
        self._flusher.generation += 1
        md.log.truncate_fully_and_start_at(sid.offset)
        self._fail_waiters_from(0, "replaced by a snapshot")
        await loop.run_in_executor(None, self.sm.load_snapshot, sid.offset,
                                   iter_snapshot_values(path))
        self._m_snapshot_load.observe(time.perf_counter() - started)
        self._m_snapshot_size.set(size)
        voters = voters_from_record(c.voters) if c.voters is not None else None
        kv = c.kraft_version.kraft_version if c.kraft_version is not None else 0
        log.info("event=snapshot_installed replica=%d epoch=%d offset=%d bytes=%d load_ms=%.0f",
                 self.config.node_id, sid.epoch, sid.offset, size,
                 (time.perf_counter() - started) * 1000)
        self._enqueue(ev.SnapshotInstalled(sid, size, voters, kv))

    # ------------------------------------------------------------------ outbound requests

    def _address_of(self, dest: int, endpoints: tuple[m.Endpoint, ...]) -> tuple[str, int] | None:
        # At kraft.version 0 controller.quorum.voters is the voters set: its addresses decide
        # the route to a voter (the operator's, or a test's fault proxy). From kraft.version 1
        # the voters set in the log is, with the endpoints UpdateRaftVoter published, and the
        # static addresses are ignored (as Kafka does; see kraft_ignored_static_voters).
        if dest in self._static_addresses and (
                self.core is None or self.core.kraft_version == 0):
            return self._static_addresses[dest]
        if endpoints and endpoints is self._address_memo[0]:
            return self._address_memo[1]  # the leader's endpoints of the last fetch, again
        given = endpoints
        if not endpoints and dest >= 0 and self.core is not None:
            node = self.core.voters().get(dest)
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
        address = self._address_of(e.destination, e.endpoints)
        api = _API_OF_REQUEST.get(type(e.request))
        if address is None or api is None:
            return False
        conn = self.network.ready(e.destination, address)
        if conn is None or conn.lent:  # lent: the request goes on a connection of its own
            return False
        timeout = self.config.request_timeout_ms / 1000
        if isinstance(e.request, m.FetchRequest):
            timeout += e.request.max_wait_ms / 1000
        request = e.request
        cluster_id = self.cluster_id

        def body(version: int) -> object:
            return request_to_wire(request, cluster_id, version)

        is_fetch = type(request) is m.FetchRequest
        fast = _FetchCodec(request, cluster_id, self._listener_name) \
            if isinstance(request, m.FetchRequest) else None
        try:
            version, corr = conn.send(api, body, timeout, self._answered(e, api), fast)
        except (ProtocolError, ValueError) as exc:  # the request could not be encoded
            log.warning("event=request_not_sent replica=%d destination=%d api=%s error=%r",
                        self.config.node_id, e.destination, api.name, str(exc))
            self._enqueue(ev.RequestFailed(e.destination, e.correlation_id, False))
            return True
        if is_fetch:
            self._fetch_sent = (e.correlation_id, conn, corr, version)
        return True

    def _answered(self, e: fx.SendRequest,
                  api: ApiKey) -> Callable[[int, Any, BaseException | None], None]:
        """The callback of the request `e` sent on an open connection: its answer, or its
        failure, to the core under `e`'s correlation id."""

        def answered(_version: int, data: Any, error: BaseException | None) -> None:
            if error is None:
                if type(data) is m.FetchResponse:  # decoded by _FetchCodec
                    self._response_received(e, data)
                    return
                try:
                    resp = response_to_core(data, self._listener_name)
                except (ProtocolError, UnsupportedVersionError) as exc:
                    error = exc
                else:
                    self._response_received(e, resp)
                    return
            log.debug("event=request_failed replica=%d destination=%d api=%s error=%r",
                      self.config.node_id, e.destination, api.name, str(error))
            self._enqueue(ev.RequestFailed(e.destination, e.correlation_id, False,
                                           isinstance(error, PeerClosedError)))

        return answered

    def fetch_callback(self, leader: int, correlation_id: int,
                       request: m.FetchRequest) -> Callable[[int, Any, BaseException | None], None]:
        """The callback that takes the answer to a fetch the follower lane left in flight to
        `leader` to the core, as its request `correlation_id`."""
        return self._answered(fx.SendRequest(leader, (), correlation_id, request), ApiKey.FETCH)

    def fetch_codec(self, request: m.FetchRequest) -> _FetchCodec:
        """The fast codec of `request`'s answer."""
        return _FetchCodec(request, self.cluster_id, self._listener_name)

    def _response_received(self, e: fx.SendRequest, resp: m.Response) -> None:
        if isinstance(resp, m.FetchResponse) and resp.error_code == ErrorCode.NONE:
            self._leader_hw = resp.high_watermark
            self._leader_hw_at = time.monotonic()
            self._leader_hw_epoch = resp.leader_epoch
        self._enqueue(ev.ResponseReceived(e.destination, e.correlation_id, resp))

    async def _send_request(self, e: fx.SendRequest) -> None:
        address = self._address_of(e.destination, e.endpoints)
        api = _API_OF_REQUEST.get(type(e.request))
        if address is None or api is None:
            self._enqueue(ev.RequestFailed(e.destination, e.correlation_id))
            return
        timeout = self.config.request_timeout_ms / 1000
        if isinstance(e.request, m.FetchRequest):
            timeout += e.request.max_wait_ms / 1000
        request = e.request

        def body(version: int) -> object:
            return request_to_wire(request, self.cluster_id, version)

        try:
            _, data = await self.network.request(e.destination, address, api, body, timeout)
            resp = response_to_core(data, self._listener_name)
        except (RequestError, ProtocolError, UnsupportedVersionError) as exc:
            log.debug("event=request_failed replica=%d destination=%d api=%s error=%r",
                      self.config.node_id, e.destination, api.name, str(exc))
            unreachable = isinstance(exc, RequestError) and exc.unreachable
            disconnected = isinstance(exc, RequestError) and exc.disconnected
            self._enqueue(ev.RequestFailed(e.destination, e.correlation_id, unreachable,
                                           disconnected))
            return
        self._response_received(e, resp)

    async def _send_api_versions(self, e: fx.SendApiVersions) -> None:
        address = self._address_of(e.node_id, e.endpoints)
        result = m.ApiVersionsResult(ErrorCode.REQUEST_TIMED_OUT)
        if address is not None:
            conn = KafkaConnection(address[0], address[1], f"raft-client-{self.config.node_id}")
            try:
                await conn.open(self.config.request_timeout_ms / 1000)
                rng = conn.versions.features.get("kraft.version", (0, 0))
                result = m.ApiVersionsResult(ErrorCode.NONE, m.KRaftVersionRange(rng[0], rng[1]))
            except (RequestError, OSError, TimeoutError, ProtocolError) as exc:
                log.info("event=api_versions_failed replica=%d node=%d error=%r",
                         self.config.node_id, e.node_id, str(exc))
            finally:
                conn.close()
        self._enqueue(ev.ApiVersionsReceived(e.node_id, result))

    # ------------------------------------------------------------------ inbound requests

    def _answer(self, corr: int, response: m.Response, records: bytes | None) -> None:
        waiter = self._inbound.pop(corr, None)
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
        expired = [k for k, w in self._inbound.items()
                   if type(w) is FrameAnswer and w.deadline <= now]
        for key in expired:
            waiter = self._inbound.pop(key)
            assert type(waiter) is FrameAnswer
            waiter.timed_out()
        earliest = min((w.deadline for w in self._inbound.values() if type(w) is FrameAnswer),
                       default=None)
        if earliest is not None:
            self._sweep.ask(earliest)

    async def core_request(self, source: int, request: m.Request,
                           timeout_s: float = 60.0) -> tuple[m.Response, bytes | None]:
        """Hand a request to the core and wait for its answer (response, attached bytes)."""
        self._inbound_ids += 1
        corr = self._inbound_ids
        fut: asyncio.Future[tuple[m.Response, bytes | None]] = asyncio.get_running_loop().create_future()
        self._inbound[corr] = fut
        self._enqueue(ev.RequestReceived(source, corr, request))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._inbound.pop(corr, None)

    def _on_frame(self, frame: bytes, peer: PeerInfo) -> bytes | DeferredReply | None:
        """One request frame of the Kafka listener: answered at once (ApiVersions,
        DescribeCluster, rejections) or through a future the core's answer completes (no
        task per request)."""
        if frame[:2] == b"\x00\x01":  # Fetch: a follower's, in the steady state
            fetch = decode_fetch_request(frame, self.cluster_id)
            if fetch is not None:
                version, corr, req = fetch
                self._fetch_peers[req.replica_id] = peer.connection_id
                return self._defer(ApiKey.FETCH, version, corr, req, req.replica_id,
                                   peer.connection_id)
        elif is_forward_frame(frame):
            return self._serve_forwarded(frame, peer)
        try:
            header, data = decode_request(frame)
        except UnsupportedVersionError as exc:
            if exc.correlation_id is None:
                return None
            log.info("event=unsupported_request peer=%s api_key=%s api_version=%s",
                     peer.host, exc.api_key, exc.api_version)
            return unsupported_version_frame(exc.correlation_id)
        except ProtocolError as exc:
            log.warning("event=bad_request peer=%s:%d error=%r", peer.host, peer.port, str(exc))
            return None
        api, version, corr = header.api_key, header.api_version, header.correlation_id
        if api == ApiKey.API_VERSIONS:
            finalized = {"kraft.version": self.core.kraft_version} if self.core else {}
            if self._metadata_version is not None:
                finalized[METADATA_VERSION] = self._metadata_version
            body: object = api_versions_response(version, finalized_features=finalized)
            return encode_response(api, version, corr, body)[4:]
        if api == ApiKey.DESCRIBE_CLUSTER:
            return encode_response(api, version, corr, self._describe_cluster(data))[4:]
        if api == ApiKey.UPDATE_FEATURES:
            assert isinstance(data, w.UpdateFeaturesRequestData)
            return self._update_features(version, corr, data)
        try:
            request = request_to_core(data, version, self.cluster_id)
        except TopLevelError as exc:
            log.info("event=request_rejected peer=%s api=%s error=%s reason=%r", peer.host,
                     api_spec(api).name, exc.code.name, str(exc))
            err_body = api_spec(api).response_class(error_code=int(exc.code))
            return encode_response(api, version, corr, err_body)[4:]
        return self._defer(ApiKey(api), version, corr, request)

    def _update_features(self, version: int, corr: int,
                         data: w.UpdateFeaturesRequestData) -> bytes | DeferredReply:
        """UpdateFeatures as Kafka's controller answers it (`kraft.server.features`): a node
        that is not the leader answers NOT_CONTROLLER; the updates are checked as one change;
        a kraft.version upgrade goes to the core, which answers once it is committed."""
        names = tuple(u.feature for u in data.feature_updates)
        core = self.core
        assert core is not None

        def answer(code: int, message: str | None) -> bytes:
            body = update_features_response(version, code, message, names)
            return encode_response(ApiKey.UPDATE_FEATURES, version, corr, body)[4:]

        if core.role != Role.LEADER:
            return answer(ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE)
        lo, hi = SUPPORTED_FEATURES[KRAFT_VERSION]
        known = {KRAFT_VERSION: FeatureState(core.kraft_version, lo, hi)}
        if self._metadata_version is not None:
            lo, hi = SUPPORTED_FEATURES[METADATA_VERSION]
            known[METADATA_VERSION] = FeatureState(self._metadata_version, lo, hi)
        try:
            plan = plan_feature_updates(updates_of(data, version), known, self.config.node_id)
        except FeatureUpdateError as exc:
            log.info("event=update_features_refused replica=%d error=%s reason=%r",
                     self.config.node_id, exc.code.name, exc.message)
            return answer(exc.code, FAILED_PREFIX + exc.message)
        if plan.kraft_version is None:
            return answer(ErrorCode.NONE, None)
        return self._defer(ApiKey.UPDATE_FEATURES, version, corr,
                           m.UpdateKRaftVersionRequest(plan.kraft_version, data.validate_only),
                           features=names)

    def _defer(self, api: ApiKey, version: int, corr: int, request: m.Request,
               source: int | None = None, peer: int = -1,
               features: tuple[str, ...] = ()) -> DeferredReply:
        """Hand a decoded request to the core; its answer completes the returned reply."""
        timeout = frame_answer.FRAME_ANSWER_TIMEOUT_S
        if isinstance(request, m.AddRaftVoterRequest):
            timeout = max(timeout, request.timeout_ms / 1000 + 5)
        self._inbound_ids += 1
        key = self._inbound_ids
        assert self._loop is not None
        deadline = self._loop.time() + timeout
        answer = FrameAnswer(api, version, corr, DeferredReply(), deadline, peer, features)
        self._inbound[key] = answer
        self._sweep.ask(deadline)
        self._enqueue(ev.RequestReceived(_source_of(request) if source is None else source, key,
                                         request))
        return answer.future

    def _describe_cluster(self, data: w.DescribeClusterRequestData) -> w.DescribeClusterResponseData:
        D = w.DescribeClusterResponseData
        core = self.core
        assert core is not None
        brokers = []
        for v in core.voters().voters:
            addr = self._address_of(v.id, v.endpoints)
            if addr is not None:
                brokers.append(D.DescribeClusterBroker(broker_id=v.id, host=addr[0], port=addr[1]))
        return D(error_code=0, endpoint_type=2, cluster_id=self.cluster_id,
                 controller_id=core.leader_id, brokers=brokers)

    # ================================================================== client API (KV)

    def _leader_http(self, leader_id: int) -> str | None:
        return self.config.http_peers.get(leader_id) if leader_id >= 0 else None

    def _require_leader(self) -> None:
        core = self.core
        assert core is not None
        if core.role != Role.LEADER:
            leader = self._redirect_leader()
            raise NotLeaderError(leader, self._leader_http(leader))

    def _redirect_leader(self) -> int:
        """The leader to send a client to: -1 when unknown, and when this node is not the
        leader but still names itself (a resigned leader waits for its successor: sending
        clients back to it would loop them until a timeout)."""
        core = self.core
        if core is None or core.role == Role.LEADER:
            return core.leader_id if core is not None else -1
        leader = core.leader_id
        return -1 if leader == self.config.node_id else leader

    def submit(self, value: bytes) -> asyncio.Future[object]:
        """Start replicating one record value; the future resolves to (offset, the state
        machine's result) once applied, or fails (NotLeaderError, OutcomeUnknownError) when
        leadership is lost. Raises NotLeaderError at once on a non-leader."""
        self._require_leader()
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._pending_values.append((value, fut))
        if self._linger_handle is None:
            self._schedule_linger()
        return fut

    def submit_many(self, writes: list[tuple[bytes, Completion]]) -> None:
        """`submit` for several values at once, in order, each with the caller's own
        completion object instead of a new future (one leadership check for all of them).
        Raises NotLeaderError at once on a non-leader, taking none of them."""
        self._require_leader()
        self._pending_values.extend(writes)
        if self._linger_handle is None:
            self._schedule_linger()

    async def propose(self, value: bytes, timeout_s: float = CLIENT_TIMEOUT_S) -> tuple[int, object]:
        """Replicate one record value; returns (offset, the state machine's result) once applied."""
        done = await asyncio.wait_for(self.submit(value), timeout_s)
        assert isinstance(done, tuple)
        return done

    def _schedule_linger(self) -> None:
        """Decide when the pending values go to the core as one batch.

        With no batch of ours waiting for commit, right away (at the end of this loop turn,
        so requests that arrived together share a batch): a lone client pays no linger. With
        batches in flight, the values wait for the oldest to commit (which submits them at
        once, see `_append_done`) or for `append.linger.ms`, whichever comes first: under load
        batches grow while the previous one replicates (group commit).
        """
        if self._linger_handle is not None:
            return
        loop = self._loop or asyncio.get_running_loop()  # kept: the call costs a getpid
        if not self._uncommitted_appends:
            self._linger_handle = loop.call_soon(self._submit_pending)
            self._submit_now = True
        else:
            delay = self.config.append_linger_ms / 1000
            self._linger_handle = loop.call_later(delay, self._submit_pending)

    def _append_done(self, append_id: int) -> None:
        self._uncommitted_appends.discard(append_id)
        if not self._uncommitted_appends and self._pending_values:
            if self._linger_handle is not None:
                self._linger_handle.cancel()
            self._linger_handle = (self._loop or asyncio.get_running_loop()).call_soon(
                self._submit_pending)

    def _submit_pending(self) -> None:
        """Hand the pending writes to the core as one batch (`Append`).

        A batch submitted with none of this leader's batches waiting for commit (one client
        writing one value at a time) is handled before the events already queued: those are
        the followers' fetches that arrived in the same loop turn, after the previous write's
        high-watermark answers and acknowledgements. The core then appends first, the leader's
        fsync starts sooner, and each of those fetches is answered with the new records (and
        the high watermark they were behind) instead of an answer of its own first. Other
        batches queue behind the events as they arrive (under load, reordering them measured
        slower).
        """
        if self._linger_handle is not None:
            self._linger_handle.cancel()  # when the core loop submits before the handle runs
        self._linger_handle = None
        self._submit_now = False
        self._barrier = None
        pending = self._pending_values
        if not pending:
            return
        head = pending if len(pending) <= MAX_APPEND_VALUES else pending[:MAX_APPEND_VALUES]
        values, futures = zip(*head)  # per value in C: this runs for every write
        ends = list(accumulate(map(len, values)))
        count = max(1, bisect.bisect_right(ends, MAX_APPEND_BYTES))  # one value at least
        if count < len(pending):  # the rest goes in the next batch, right after this one
            self._pending_values = pending[count:]
            values, futures = values[:count], futures[:count]
            self._linger_handle = asyncio.get_running_loop().call_soon(self._submit_pending)
        else:
            self._pending_values = []
        self._append_ids += 1
        append_id = self._append_ids
        self._appends[append_id] = list(futures)
        append = ev.Append(append_id, values, ends[count - 1])
        if self._uncommitted_appends:
            self._enqueue(append)
        else:  # nothing of ours is queued or in flight: going first reorders no batches
            self._lone_append.append(append)
            self._wake_core()
        self._uncommitted_appends.add(append_id)

    async def kv_put(self, key: str, value: bytes) -> int:
        """Replicate PUT key=value."""
        started = time.perf_counter()
        offset, _ = await self.propose(encode_put(key, value))
        self._m_commit_latency.observe(time.perf_counter() - started)
        return offset

    async def kv_delete(self, key: str) -> bool:
        """Replicate DELETE key; returns whether it existed."""
        _, result = await self.propose(encode_delete(key))
        assert isinstance(result, KVResult)
        return result.ok

    async def kv_cas(self, key: str, expected: bytes | None, new: bytes | None) -> tuple[bool, bytes | None]:
        """Replicate CAS; returns (swapped, previous value)."""
        _, result = await self.propose(encode_cas(key, expected, new))
        assert isinstance(result, KVResult)
        return result.ok, result.value

    async def read_barrier(self) -> None:
        """Wait until a no-op record appended after this call is committed and applied."""
        self._require_leader()
        if self._barrier is None or self._barrier.done():
            fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            self._pending_values.append((encode_barrier(), fut))
            self._barrier = fut
            self._schedule_linger()
        await asyncio.wait_for(asyncio.shield(self._barrier), CLIENT_TIMEOUT_S)

    async def kv_get(self, key: str) -> bytes | None:
        """Linearizable read (read barrier, then the local state)."""
        if not isinstance(self.sm, KVStore):
            raise TypeError("the KV API needs the built-in KV state machine")
        await self.read_barrier()
        return self.sm.get(key)

    def kv_get_stale(self, key: str) -> bytes | None:
        """Local read with no leadership check (NOT linearizable). On a follower whose lane
        runs, await `lane_catch_up()` first."""
        return self.sm.get(key) if isinstance(self.sm, KVStore) else None

    def lane_catch_up(self) -> asyncio.Future[None] | None:
        """What a local read waits for first on a follower whose native lane runs and has
        taken answers the core was not told of: the core loop takes the lane's progress next
        and applies what it committed (docs/native-lane.md: every read drains the lane).
        None when there is nothing to wait for."""
        lane = self._active_lane()
        if lane is None or self._loop is None:
            return None
        if not lane.has_progress() and not (
                lane is self._leader_lane and self._apply_target > self.sm.applied_offset):
            # (a leader's lane answers a write at its commit, before it is applied: a local
            # read waits for that apply, so a writer reads what it was told is written)
            return None
        fut: asyncio.Future[None] = self._loop.create_future()
        if not self._lane_readers or self._lane_readers[-1][0] <= self._lane_takes:
            self._events.appendleft(("lane", None))  # ahead of whatever else is queued
            self._wake_core()
        self._lane_readers.append((self._lane_takes + 1, fut))
        return fut

    def _lane_read_done(self) -> None:
        """After a turn of the core loop: the readers whose take has happened read now, with
        what it committed applied."""
        takes = self._lane_takes
        if self._lane_readers[0][0] > takes:
            return
        self._apply_to(self._apply_target)
        waiting = []
        for needed, fut in self._lane_readers:
            if needed > takes:
                waiting.append((needed, fut))
            elif not fut.done():
                fut.set_result(None)
        self._lane_readers = waiting

    # ------------------------------------------------------------------ any node takes KV calls

    async def kv_call(self, call: KvCall) -> KvAnswer:
        """Run a KV call at the leader: on this node when it leads, else forwarded to the
        leader (`kraft.server.forward`). Raises NotLeaderError when no leader took it in time
        (nothing applied), OutcomeUnknownError, or ForwardRefusedError."""
        try:
            return await self._kv_local(call)
        except NotLeaderError:  # refused before proposing: safe to hand to the leader
            pass
        assert self._forwarder is not None
        return await self._forwarder.call(call, CLIENT_TIMEOUT_S)

    async def _kv_local(self, call: KvCall) -> KvAnswer:
        """Run `call` on this node as the leader (NotLeaderError at once when it is not)."""
        if call.op == KvOp.GET:
            value = await self.kv_get(call.key)
            return KvAnswer(ok=value is not None, value=value)
        if call.op == KvOp.PUT:
            assert call.value is not None
            return KvAnswer(offset=await self.kv_put(call.key, call.value))
        if call.op == KvOp.DELETE:
            return KvAnswer(ok=await self.kv_delete(call.key))
        swapped, previous = await self.kv_cas(call.key, call.expected, call.value)
        return KvAnswer(ok=swapped, value=previous)

    def _forward_target(self) -> Target:
        """Where a KV call goes now (see `Forwarder`)."""
        core = self.core
        if core is None:
            return Target(False, -1, None)
        if core.role == Role.LEADER:
            return Target(True, self.config.node_id, None)
        leader = self._redirect_leader()
        if leader < 0:
            return Target(False, -1, None)
        endpoints: tuple[m.Endpoint, ...] = ()
        if isinstance(core.state, FollowerState) and core.state.leader_id == leader:
            endpoints = core.state.leader_endpoints
        return Target(False, leader, self._address_of(leader, endpoints))

    async def _leader_news(self, timeout_s: float) -> None:
        """Return at the next change of this node's epoch state, or after `timeout_s`."""
        if timeout_s <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._leader_waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            if fut in self._leader_waiters:
                self._leader_waiters.remove(fut)

    def _serve_forwarded(self, frame: bytes, peer: PeerInfo) -> bytes | DeferredReply | None:
        """A ForwardKv request: run it here as the leader, or answer NOT_LEADER_OR_FOLLOWER
        (a forwarded call is never forwarded again)."""
        try:
            got = decode_call(frame)
        except BadForwardedCall as exc:
            corr = exc.correlation_id
            log.warning("event=bad_forwarded_call peer=%s:%d error=%r", peer.host, peer.port,
                        str(exc))
            if corr is None:
                return None
            return encode_answer(corr, ErrorCode.INVALID_REQUEST, message=str(exc))
        if got.call is None:
            return unsupported_version_frame(got.correlation_id)
        if got.cluster_id != self.cluster_id:
            return encode_answer(got.correlation_id, ErrorCode.INCONSISTENT_CLUSTER_ID,
                                 message=f"cluster id {got.cluster_id!r} is not "
                                         f"{self.cluster_id!r}")
        core = self.core
        if core is None or core.role != Role.LEADER:
            return encode_answer(got.correlation_id, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 self._redirect_leader())
        reply = DeferredReply()
        self._spawn(self._answer_forwarded(reply, got.correlation_id, got.call, got.timeout_ms))
        return reply

    async def _answer_forwarded(self, reply: DeferredReply, corr: int, call: KvCall,
                                timeout_ms: int) -> None:
        timeout_s = min(CLIENT_TIMEOUT_S, timeout_ms / 1000) if timeout_ms > 0 \
            else CLIENT_TIMEOUT_S
        write = call.op != KvOp.GET
        try:
            answer = await asyncio.wait_for(self._kv_local(call), timeout_s)
            body = encode_answer(corr, ErrorCode.NONE, self.config.node_id, answer=answer)
        except NotLeaderError as exc:
            body = encode_answer(corr, ErrorCode.NOT_LEADER_OR_FOLLOWER, exc.leader_id)
        except (OutcomeUnknownError, TimeoutError) as exc:
            body = encode_answer(corr, ErrorCode.REQUEST_TIMED_OUT, self._redirect_leader(),
                                 outcome_unknown=write, message=str(exc) or "timed out")
        except Exception as exc:  # answered, not left to the caller's timeout
            log.exception("event=forwarded_call_failed op=%s key=%r", call.op.name, call.key)
            body = encode_answer(corr, ErrorCode.UNKNOWN_SERVER_ERROR, self._redirect_leader(),
                                 outcome_unknown=write, message=repr(exc))
        reply.set(body)

    # ================================================================== status / metrics

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
            "is_voter": core.is_voter(),
            "voters": [{"id": v.id, "directory_id": str(v.key.directory_id) if v.key.directory_id else None,
                        "endpoints": [f"{e.name}://{e.host}:{e.port}" for e in v.endpoints]}
                       for v in core.voters().voters],
            "kraft_version": core.kraft_version,
            **({"lane": self._lane.stats()} if self._lane is not None else {}),
            **({"leader_lane": self._leader_lane.stats()}
               if self._leader_lane is not None else {}),
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
            address = self._address_of(leader, endpoints)
            if address is None:
                raise NotLeaderError(leader, None)
            _, data = await self.network.request(
                leader, address, ApiKey.DESCRIBE_QUORUM,
                lambda v: request_to_wire(m.DescribeQuorumRequest(), self.cluster_id, v), 10)
            resp = response_to_core(data, self._listener_name)
        assert isinstance(resp, m.DescribeQuorumResponse)
        return describe_quorum_json(resp)

    def _setup_metrics(self) -> None:
        r = self.metrics
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
        r.gauge("kraft_current_epoch", "Current epoch", lambda: self._epoch())
        r.gauge("kraft_is_leader", "1 when this node leads",
                lambda: 1.0 if self.core is not None and self.core.role == Role.LEADER else 0.0)
        self._m_hw = r.gauge("kraft_high_watermark", "High watermark")
        self._m_leo = r.gauge("kraft_log_end_offset", "Log end offset")
        self._m_applied = r.gauge("kraft_applied_offset", "State machine applied offset")
        self._m_commit_latency = r.histogram("kraft_commit_latency_seconds",
                                             "Client write latency until committed and applied")
        self._m_elections = r.counter("kraft_elections_total", "Elections this node started")
        self._m_elections_won = r.counter("kraft_elections_won_total", "Times this node became leader")
        self._m_snapshot_size = r.gauge("kraft_snapshot_size_bytes", "Size of the latest snapshot")
        self._m_snapshot_gen = r.histogram("kraft_snapshot_generation_seconds",
                                           "Time to write a snapshot")
        self._m_snapshot_load = r.histogram("kraft_snapshot_load_seconds",
                                            "Time to load a snapshot into the state machine")
        # The disk every commit waits for (etcd's wal_fsync_duration, Kafka's
        # LogFlushRateAndTimeMs): observed on the loop or on the flusher thread, hence the lock.
        self._m_log_flush = r.histogram(
            "kraft_log_flush_seconds",
            "Time to fsync the log, per flush that wrote to disk (a kernel flush: from its "
            "start until its completion was seen)", DISK_LATENCY_BUCKETS)
        self._m_log_flush_lock = threading.Lock()

    def _observe_flush(self, seconds: float) -> None:
        with self._m_log_flush_lock:
            self._m_log_flush.observe(seconds)

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
        if self.core is not None:
            self._m_hw.set(self.core.high_watermark if self.core.high_watermark is not None else -1)
        if self.md is not None:
            self._m_leo.set(self.md.log.log_end_offset)
        self._m_applied.set(self.sm.applied_offset)
        return self.metrics.render()


def _bootstrap_metadata_version(metadata_dir: Path) -> int | None:
    """The metadata.version level `kraft format` wrote into bootstrap.checkpoint (None when
    the file is missing or names none)."""
    path = metadata_dir / BOOTSTRAP_CHECKPOINT
    if not path.exists():
        return None
    for record in read_bootstrap_checkpoint(path):
        if record.name == METADATA_VERSION_FEATURE:
            return record.feature_level
    return None


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
