"""The node's KV front end: the writes and reads of the KV API, grouped into batches for the
core, answered once committed and applied, and forwarded to the leader from any node.

- Writes (`submit`, `submit_many`, `kv_put`, `kv_delete`, `kv_cas`) wait in the node's book of
  writes (`kraft.server.writes.WriteBook`, its `pending`) and go to the core as one `Append`
  (one batch, at most MAX_APPEND_BYTES of values and MAX_APPEND_VALUES of them): at once when
  none of this leader's batches waits for commit, otherwise until the oldest commits or
  `controller.quorum.append.linger.ms` passes (group commit under load, no linger for a lone
  client, whose batch goes `ahead` of the events queued for the core).
- `AppendAccepted` (this front end is the executor's `ClientPort`) keys each writer's
  completion by its offset and epoch in the book's `waiting`; the apply driver
  (`kraft.server.apply_driver`) resolves it with the state machine's result once the record is
  committed and applied. `AppendRejected` fails the writers with NotLeaderError; a batch lost
  to a new leader (`AppendCommitted` with an error), and any change of leadership, fail the
  writers still waiting with OutcomeUnknownError (after applying everything committed).
- Reads are linearizable through a read barrier: a no-op record appended in the current epoch;
  once it is committed and applied, no other leader can have committed anything this leader
  has not applied, so the local state answers the read.
- Any node takes KV calls (`kv_call`): on the leader they run here, elsewhere they go to the
  leader through `kraft.server.forward` (a forwarded call is never forwarded again).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import ssl
import time
from collections.abc import Callable
from itertools import accumulate, repeat
from operator import itemgetter
from typing import Any, Protocol

from kraft.config.node import NodeConfig
from kraft.protocol.errors import ErrorCode
from kraft.raft import effects as fx
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.raft.core import RaftCore
from kraft.raft.state import FollowerState, Role
from kraft.server.apply_driver import ApplyDriver
from kraft.server.client_protocol import ClientServer
from kraft.server.connection_limits import ConnectionGuard
from kraft.server.event_queue import EventQueue
from kraft.server.forward import (
    BadForwardedCall,
    Forwarder,
    Target,
    decode_call,
    encode_answer,
)
from kraft.server.frames import BadRequest, DeferredReply, PeerInfo
from kraft.server.kv_api import (
    KafkaQuorumError,
    KvAnswer,
    KvCall,
    KvOp,
    NotLeaderError,
    OutcomeUnknownError,
    WriteRefusedError,
)
from kraft.server.node_metrics import NodeMetrics
from kraft.server.transport import unsupported_version_frame
from kraft.server.writes import Completion, WriteBook
from kraft.statemachine.base import StateMachine
from kraft.statemachine.kv import (
    MAX_KEY_BYTES,
    KVResult,
    KVStore,
    call_refusal,
    command_limit_error,
    encode_barrier,
    encode_cas,
    encode_delete,
    encode_put,
)
from kraft.storage.log_segments import MAX_BATCH_BYTES

log = logging.getLogger("kraft.server.node")

MAX_APPEND_BYTES = 1024 * 1024
"""Client values per batch are cut at this many bytes (the log takes batches up to 8 MiB)."""
MAX_APPEND_VALUES = 16384
"""...and at this many values (tiny values: a batch's cut then looks at no more pending writes
than this, however many wait)."""
MAX_RECORD_BYTES = MAX_BATCH_BYTES - 64 * 1024
"""The largest record value `submit` takes: a batch holds at most MAX_APPEND_BYTES of values
or one value alone, so with its headers (and up to MAX_APPEND_VALUES records' overhead) no
batch is ever built above MAX_BATCH_BYTES, the most the log takes."""
_FIRST = itemgetter(0)


def _record_limit_error(value: bytes, kv: bool) -> str | None:
    """Why `value` may not be proposed (None: it may): a record above MAX_RECORD_BYTES, or
    (`kv`: the state machine is the KV store) a KV command whose key or value is above its
    limit (`kraft.statemachine.kv`)."""
    n = len(value)
    if n <= MAX_KEY_BYTES:
        return None
    if n > MAX_RECORD_BYTES:
        return (f"record is {n} bytes, above the {MAX_RECORD_BYTES}-byte limit of one record "
                f"(a batch is at most {MAX_BATCH_BYTES} bytes)")
    return command_limit_error(value) if kv else None


def call_limit_error(call: KvCall) -> WriteRefusedError | None:
    """The error refusing `call` when its key or a value is above its limit, else None."""
    refused = call_refusal(call.key, call.value, call.expected)
    if refused is None:
        return None
    why, value_too_large = refused
    return WriteRefusedError(why, too_large=value_too_large)
CLIENT_TIMEOUT_S = 15.0


class KvHost(Protocol):
    """What the KV front end uses of the node: its configuration, core and state machine, its
    event loop, the writes in hand (`kraft.server.writes`: the leader's lane and the apply
    driver share them), the core's event queue (the batches of writes), its apply driver and
    binary client listener, its metrics (the commit latency), and its tasks and routes."""

    config: NodeConfig
    core: RaftCore | None
    sm: StateMachine
    cluster_id: str
    applier: ApplyDriver | None
    client_server: ClientServer | None
    loop: asyncio.AbstractEventLoop | None
    writes: WriteBook
    queue: EventQueue
    metrics: NodeMetrics
    connection_guard: ConnectionGuard
    tls_client: Callable[[], ssl.SSLContext] | None

    def spawn(self, coro: Any) -> None: ...
    def address_of(self, dest: int, endpoints: tuple[m.Endpoint, ...]
                   ) -> tuple[str, int] | None: ...


class KvFront:
    """The KV API of one node and the executor's `ClientPort` (see the module docstring)."""

    def __init__(self, node: KvHost) -> None:
        self._node = node
        self._writes = node.writes
        self._queue = node.queue
        self._metrics = node.metrics
        self._append_ids = 0
        self._linger_handle: asyncio.Handle | None = None
        self.submit_now = False
        """`_linger_handle` submits a lone write at the end of this loop turn: the core loop
        submits it itself if it runs first."""
        self._barrier: asyncio.Future[object] | None = None
        self._forwarder: Forwarder | None = None
        self._leader_waiters: list[asyncio.Future[None]] = []
        """Forwarded calls waiting for news of the leader (`leader_news`)."""

    def start(self) -> None:
        """Open the forwarder to the leader (once the cluster id is known)."""
        node = self._node
        self._forwarder = Forwarder(node.config.node_id, node.cluster_id, self.forward_target,
                                    self.kv_local, self.leader_news, node.tls_client)

    def close(self) -> None:
        """Close the forwarder's connections."""
        if self._forwarder is not None:
            self._forwarder.close()

    # ------------------------------------------------------------------ ClientPort

    def append_accepted(self, e: fx.AppendAccepted) -> None:
        """Key each writer of the batch by its offset (and the epoch it was appended in)."""
        writes = self._writes
        futures = writes.appends.pop(e.append_id, [])
        # offset -> (epoch, completion), built in C: this runs for every write
        writes.waiting.update(zip(range(e.base_offset, e.base_offset + len(futures)),
                                 zip(repeat(e.epoch), futures)))

    def append_rejected(self, e: fx.AppendRejected) -> None:
        """Fail the batch's writers with NotLeaderError."""
        self._append_done(e.append_id)
        leader = self.redirect_leader()
        for fut in self._writes.appends.pop(e.append_id, []):
            if not fut.done():
                fut.set_exception(NotLeaderError(leader, self.leader_http(leader)))

    def append_committed(self, e: fx.AppendCommitted) -> None:
        """A batch of ours is committed; lost to a new leader, every writer still waiting
        learns the outcome is unknown (after everything committed is applied)."""
        self._append_done(e.append_id)
        if e.error_code != ErrorCode.NONE:
            applier = self._node.applier
            assert applier is not None
            applier.apply_committed()
            self.fail_unapplied(f"leader changed before commit ({e.error_code.name})")

    def answers_out(self) -> None:
        """Send the answers of the binary client protocol completed so far."""
        client_server = self._node.client_server
        if client_server is not None:
            client_server.flush()

    def leadership_changed(self, still_leader: bool) -> None:
        """The node's epoch state changed: a node no longer the leader fails its writers, and
        the calls waiting for news of the leader go on."""
        if not still_leader:
            self.fail_unapplied("leadership lost")
            self.fail_pending_values()
        waiters, self._leader_waiters = self._leader_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def fail_unapplied(self, why: str) -> None:
        """Every writer waiting for a result learns the outcome is unknown."""
        applier = self._node.applier
        if applier is not None:
            applier.own_batches.clear()
        self._writes.fail_submitted(why)

    def fail_pending_values(self) -> None:
        """The writes not submitted yet are refused: this node no longer leads."""
        writes = self._writes
        pending, writes.pending = writes.pending, []
        leader = self.redirect_leader()
        for _, fut in pending:
            if not fut.done():
                fut.set_exception(NotLeaderError(leader, self.leader_http(leader)))
        self._barrier = None

    # ------------------------------------------------------------------ the KV API

    def leader_http(self, leader_id: int) -> str | None:
        """The HTTP address of node `leader_id` (`kraft.http.peers`), if known."""
        return self._node.config.http_peers.get(leader_id) if leader_id >= 0 else None

    def kafka_quorum_reason(self) -> str | None:
        """Why this quorum is Apache Kafka's (KV calls refused), None when nothing says so:
        Kafka metadata records in the log or a snapshot (the state machine counted them), or
        a voter that fetched from this node as Kafka's client software (`Peers`)."""
        foreign = getattr(self._node.sm, "foreign_records", 0)
        if foreign:
            return (f"the metadata log holds {foreign} Apache Kafka metadata records: the quorum "
                    f"is a Kafka controller quorum, whose QuorumController would replay KV "
                    f"records it does not know")
        core = self._node.core
        peers = getattr(self._node, "peers", None)
        if core is not None and peers is not None and peers.kafka_replicas:
            kafka_voters = sorted(v.id for v in core.voters().voters
                                  if v.id in peers.kafka_replicas)
            if kafka_voters:
                return (f"voter{'s' if len(kafka_voters) > 1 else ''} "
                        f"{', '.join(map(str, kafka_voters))} "
                        f"{'are' if len(kafka_voters) > 1 else 'is'} Apache Kafka "
                        f"(ApiVersions ClientSoftwareName apache-kafka-java), whose "
                        f"QuorumController would replay KV records it does not know")
        return None

    def _refuse_in_kafka_quorum(self) -> None:
        why = self.kafka_quorum_reason()
        if why is not None:
            self._metrics.requests_refused.inc()
            raise KafkaQuorumError(f"KV calls are refused in this quorum: {why}")

    def _require_leader(self) -> None:
        core = self._node.core
        assert core is not None
        if core.role != Role.LEADER:
            leader = self.redirect_leader()
            raise NotLeaderError(leader, self.leader_http(leader))

    def redirect_leader(self) -> int:
        """The leader to send a client to: -1 when unknown, and when this node is not the
        leader but still names itself (a resigned leader waits for its successor: sending
        clients back to it would loop them until a timeout)."""
        core = self._node.core
        if core is None or core.role == Role.LEADER:
            return core.leader_id if core is not None else -1
        leader = core.leader_id
        return -1 if leader == self._node.config.node_id else leader

    def submit(self, value: bytes) -> asyncio.Future[object]:
        """Start replicating one record value; the future resolves to (offset, the state
        machine's result) once applied, or fails (NotLeaderError, OutcomeUnknownError) when
        leadership is lost. Raises NotLeaderError at once on a non-leader, and
        WriteRefusedError when the value breaks a limit (see `_record_limit_error`): nothing
        is proposed then."""
        self._require_leader()
        self._refuse_in_kafka_quorum()
        if len(value) > MAX_KEY_BYTES:
            why = _record_limit_error(value, isinstance(self._node.sm, KVStore))
            if why is not None:
                raise WriteRefusedError(why)
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._writes.pending.append((value, fut))
        if self._linger_handle is None:
            self._schedule_linger()
        return fut

    def submit_many(self, writes: list[tuple[bytes, Completion]]) -> None:
        """`submit` for several values at once, in order, each with the caller's own
        completion object instead of a new future (one leadership check for all of them).
        Raises NotLeaderError at once on a non-leader, taking none of them. A value that
        breaks a limit fails its own completion with WriteRefusedError, and is not proposed;
        the others are."""
        self._require_leader()
        why = self.kafka_quorum_reason()
        if why is not None:
            for _value, done in writes:
                self._metrics.requests_refused.inc()
                done.set_exception(KafkaQuorumError(f"KV calls are refused in this quorum: {why}"))
            return
        if writes and max(map(len, map(_FIRST, writes))) > MAX_KEY_BYTES:
            writes = self._refuse_over_limits(writes)
        self._writes.pending.extend(writes)
        if self._linger_handle is None:
            self._schedule_linger()

    def _refuse_over_limits(self, writes: list[tuple[bytes, Completion]]
                            ) -> list[tuple[bytes, Completion]]:
        """The writes that break no limit; the others' completions fail at once."""
        kv = isinstance(self._node.sm, KVStore)
        taken: list[tuple[bytes, Completion]] = []
        for value, done in writes:
            why = _record_limit_error(value, kv)
            if why is None:
                taken.append((value, done))
            else:
                self._metrics.requests_refused.inc()
                done.set_exception(WriteRefusedError(why))
        return taken

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
        loop = self._node.loop or asyncio.get_running_loop()  # kept: the call costs a getpid
        if not self._writes.uncommitted:
            self._linger_handle = loop.call_soon(self.submit_pending)
            self.submit_now = True
        else:
            delay = self._node.config.append_linger_ms / 1000
            self._linger_handle = loop.call_later(delay, self.submit_pending)

    def _append_done(self, append_id: int) -> None:
        """A batch of ours is committed or refused: the pending writes go now if it was the
        last one in flight."""
        writes = self._writes
        writes.uncommitted.discard(append_id)
        if not writes.uncommitted and writes.pending:
            if self._linger_handle is not None:
                self._linger_handle.cancel()
            self._linger_handle = (self._node.loop or asyncio.get_running_loop()).call_soon(
                self.submit_pending)

    def submit_pending(self) -> None:
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
        self.submit_now = False
        self._barrier = None
        writes = self._writes
        pending = writes.pending
        if not pending:
            return
        head = pending if len(pending) <= MAX_APPEND_VALUES else pending[:MAX_APPEND_VALUES]
        values, futures = zip(*head)  # per value in C: this runs for every write
        ends = list(accumulate(map(len, values)))
        count = max(1, bisect.bisect_right(ends, MAX_APPEND_BYTES))  # one value at least
        if count < len(pending):  # the rest goes in the next batch, right after this one
            writes.pending = pending[count:]
            values, futures = values[:count], futures[:count]
            self._linger_handle = asyncio.get_running_loop().call_soon(self.submit_pending)
        else:
            writes.pending = []
        self._append_ids += 1
        append_id = self._append_ids
        writes.appends[append_id] = list(futures)
        append = ev.Append(append_id, values, ends[count - 1])
        if writes.uncommitted:
            self._queue.push(append)
        else:  # nothing of ours is queued or in flight: going first reorders no batches
            self._queue.push_ahead(append)
        writes.uncommitted.add(append_id)

    async def kv_put(self, key: str, value: bytes) -> int:
        """Replicate PUT key=value."""
        started = time.perf_counter()
        offset, _ = await self.propose(encode_put(key, value))
        self._metrics.commit_latency.observe(time.perf_counter() - started)
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
            self._writes.pending.append((encode_barrier(), fut))
            self._barrier = fut
            self._schedule_linger()
        await asyncio.wait_for(asyncio.shield(self._barrier), CLIENT_TIMEOUT_S)

    async def kv_get(self, key: str) -> bytes | None:
        """Linearizable read (read barrier, then the local state)."""
        if not isinstance(self._node.sm, KVStore):
            raise TypeError("the KV API needs the built-in KV state machine")
        await self.read_barrier()
        return self._node.sm.get(key)

    def kv_get_stale(self, key: str) -> bytes | None:
        """Local read with no leadership check (NOT linearizable). On a follower whose lane
        runs, await `lane_catch_up()` first."""
        return self._node.sm.get(key) if isinstance(self._node.sm, KVStore) else None

    async def kv_call(self, call: KvCall) -> KvAnswer:
        """Run a KV call at the leader: on this node when it leads, else forwarded to the
        leader (`kraft.server.forward`). Raises NotLeaderError when no leader took it in time
        (nothing applied), OutcomeUnknownError, or ForwardRefusedError."""
        self._refuse_in_kafka_quorum()  # on any node: a follower knows it from its log too
        try:
            return await self.kv_local(call)
        except NotLeaderError:  # refused before proposing: safe to hand to the leader
            pass
        assert self._forwarder is not None
        return await self._forwarder.call(call, CLIENT_TIMEOUT_S)

    async def kv_local(self, call: KvCall) -> KvAnswer:
        """Run `call` on this node as the leader (NotLeaderError at once when it is not;
        WriteRefusedError, before anything is proposed, when a key or value is above its
        limit)."""
        refused = call_limit_error(call)
        if refused is not None:
            self._metrics.requests_refused.inc()
            raise refused
        self._refuse_in_kafka_quorum()
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

    def forward_target(self) -> Target:
        """Where a KV call goes now (see `Forwarder`)."""
        core = self._node.core
        if core is None:
            return Target(False, -1, None)
        if core.role == Role.LEADER:
            return Target(True, self._node.config.node_id, None)
        leader = self.redirect_leader()
        if leader < 0:
            return Target(False, -1, None)
        endpoints: tuple[m.Endpoint, ...] = ()
        if isinstance(core.state, FollowerState) and core.state.leader_id == leader:
            endpoints = core.state.leader_endpoints
        return Target(False, leader, self._node.address_of(leader, endpoints))

    async def leader_news(self, timeout_s: float) -> None:
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

    def serve_forwarded(self, frame: bytes, peer: PeerInfo) -> bytes | DeferredReply | None:
        """A ForwardKv request: run it here as the leader, or answer NOT_LEADER_OR_FOLLOWER
        (a forwarded call is never forwarded again)."""
        try:
            got = decode_call(frame)
        except BadForwardedCall as exc:
            corr = exc.correlation_id
            if corr is None:  # logged, rate-limited, as the connection closes
                raise BadRequest(f"bad forwarded call: {exc}") from None
            self._node.connection_guard.bad_requests.report(
                "controller", "bad_forwarded_call", f"{peer.host}:{peer.port}", str(exc))
            return encode_answer(corr, exc.error, message=str(exc))
        if got.call is None:
            return unsupported_version_frame(got.correlation_id)
        if got.cluster_id != self._node.cluster_id:
            return encode_answer(got.correlation_id, ErrorCode.INCONSISTENT_CLUSTER_ID,
                                 message=f"cluster id {got.cluster_id!r} is not "
                                         f"{self._node.cluster_id!r}")
        core = self._node.core
        if core is None or core.role != Role.LEADER:
            return encode_answer(got.correlation_id, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 self.redirect_leader())
        reply = DeferredReply()
        self._node.spawn(self._answer_forwarded(reply, got.correlation_id, got.call, got.timeout_ms))
        return reply

    async def _answer_forwarded(self, reply: DeferredReply, corr: int, call: KvCall,
                                timeout_ms: int) -> None:
        """Run a forwarded call as the leader and complete `reply` with its answer."""
        timeout_s = min(CLIENT_TIMEOUT_S, timeout_ms / 1000) if timeout_ms > 0 \
            else CLIENT_TIMEOUT_S
        write = call.op != KvOp.GET
        try:
            answer = await asyncio.wait_for(self.kv_local(call), timeout_s)
            body = encode_answer(corr, ErrorCode.NONE, self._node.config.node_id, answer=answer)
        except NotLeaderError as exc:
            body = encode_answer(corr, ErrorCode.NOT_LEADER_OR_FOLLOWER, exc.leader_id)
        except WriteRefusedError as exc:  # nothing proposed
            body = encode_answer(corr, ErrorCode.MESSAGE_TOO_LARGE if exc.too_large
                                 else ErrorCode.INVALID_REQUEST, message=str(exc))
        except (OutcomeUnknownError, TimeoutError) as exc:
            body = encode_answer(corr, ErrorCode.REQUEST_TIMED_OUT, self.redirect_leader(),
                                 outcome_unknown=write, message=str(exc) or "timed out")
        except Exception as exc:  # answered, not left to the caller's timeout
            log.exception("event=forwarded_call_failed op=%s key=%r", call.op.name, call.key)
            body = encode_answer(corr, ErrorCode.UNKNOWN_SERVER_ERROR, self.redirect_leader(),
                                 outcome_unknown=write, message=repr(exc))
        reply.set(body)

