"""The node's side of the lane's boundary: `NodeLaneHost`, the `kraft.lane.LaneHost` a node
lends its lane runners (`FollowerLaneRunner`, `LeaderLaneRunner`), and the
`kraft.lane.ArbiterHost` their arbiter on the core loop (`LaneArbiter`) takes.

The runners see the node only through it: its core and log, its event loop and queue, the
connections they are lent (the follower's fetch connection, the client connection, the voters'
fetch connections) and where what they hand back goes. The parked fetches the leader's lane is
lent wait as `FrameAnswer`s in the node's table of inbound requests (`kraft.server.peers`);
when the lane stops, it hands back the ones it still holds, and each is registered again as a
frame waiting for the core's answer. The lane package itself knows nothing of the node, the
frame server or its codecs: this module is where they meet.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from kraft.config.node import NodeConfig
from kraft.lane import ClientConnection, FetchConnection, VoterConnection
from kraft.protocol.api import ApiKey
from kraft.raft import messages as m
from kraft.raft.core import RaftCore
from kraft.server.apply_driver import ApplyDriver
from kraft.server.client_protocol import ClientServer
from kraft.server.event_queue import EventQueue
from kraft.server.fetch_fast import decode_fetch_request, encode_fetch_request
from kraft.server.flusher import LogService
from kraft.server.frame_answer import FRAME_ANSWER_TIMEOUT_S, FrameAnswer
from kraft.server.frames import DeferredReply, FrameListener, FrameServerConnection
from kraft.server.peers import Peers
from kraft.server.writes import WriteBook
from kraft.storage.loader import MetadataDir
from kraft.storage.log import SegmentedLog


class LaneNode(Protocol):
    """What `NodeLaneHost` uses of the node: its configuration, cluster id, core and metadata
    directory, event loop, the core's event queue (a turn of the lane; whether anything waits
    for the core), its transport (the parked frames and the voters' connections), its
    listeners, the writes in hand (`kraft.server.writes`), its log service (whether an inline
    flush is due), its apply driver, and where the leader's high watermark goes."""

    config: NodeConfig
    cluster_id: str
    core: RaftCore | None
    md: MetadataDir | None
    peers: Peers
    client_server: ClientServer | None
    listeners: tuple[FrameListener, ...]
    loop: asyncio.AbstractEventLoop | None
    queue: EventQueue
    writes: WriteBook
    log_service: LogService | None
    applier: ApplyDriver | None

    def note_leader_high_watermark(self, high_watermark: int, epoch: int) -> None: ...
    def in_kafka_quorum(self) -> bool: ...
    def frame_connection(self, connection_id: int) -> FrameServerConnection | None: ...


class NodeLaneHost:
    """One node as its lane runners (`kraft.lane.LaneHost`) and their arbiter
    (`kraft.lane.ArbiterHost`) see it."""

    __slots__ = ("_logs", "_node", "_peers", "_queue", "_writes")

    def __init__(self, node: LaneNode) -> None:
        logs = node.log_service
        assert logs is not None, "the node's log service is started before its lanes"
        self._node = node
        self._peers = node.peers
        self._queue = node.queue
        self._writes = node.writes
        self._logs = logs

    @property
    def node_id(self) -> int:
        """This node's id."""
        return self._node.config.node_id

    @property
    def cluster_id(self) -> str:
        """The cluster's id."""
        return self._node.cluster_id

    @property
    def lane_tick_ms(self) -> int:
        """The lanes' bookkeeping tick (`kraft.lane.tick.ms`)."""
        return self._node.config.lane_tick_ms

    @property
    def max_request_bytes(self) -> int:
        """`socket.request.max.bytes`."""
        return self._node.config.socket_request_max_bytes

    @property
    def core(self) -> RaftCore | None:
        """The consensus core, None before the node started."""
        return self._node.core

    @property
    def log(self) -> SegmentedLog | None:
        """The metadata log, None before the node started."""
        md = self._node.md
        return None if md is None else md.log

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The node's event loop, None before it started."""
        return self._node.loop

    def wake_for_lane(self) -> None:
        """Queue a turn of the lane on the core loop."""
        self._queue.push(("lane", None))

    # ------------------------------------------------------------------ the arbiter

    @property
    def fetch_sent(self) -> tuple[int, FetchConnection, int, int] | None:
        """The core's fetch in flight as sent (`Peers.fetch_sent`)."""
        return self._peers.fetch_sent

    def take_lane_first(self) -> None:
        """Queue a turn of the lane ahead of whatever else is queued."""
        self._queue.push_first(("lane", None))

    def apply_behind(self) -> bool:
        """Committed records wait to be applied."""
        applier = self._node.applier
        return applier is not None and applier.behind()

    def apply_committed(self) -> None:
        """Apply every committed record not applied yet."""
        applier = self._node.applier
        assert applier is not None
        applier.apply_committed()

    # ------------------------------------------------------------------ the follower's lane

    def give_back_fetch(self, conn: FetchConnection, next_correlation: int, unread: bytes,
                        version: int, wire_correlation: int, leader: int, correlation_id: int,
                        fetch: m.FetchRequest) -> None:
        """`conn` back from the follower's lane, its fetch in flight answered to the core."""
        node = self._node
        conn.give_back(next_correlation, unread, ApiKey.FETCH, version, wire_correlation,
                       (node.config.request_timeout_ms + fetch.max_wait_ms) / 1000,
                       node.peers.fetch_callback(leader, correlation_id, fetch),
                       node.peers.fetch_codec(fetch))

    def leader_high_watermark(self, high_watermark: int, epoch: int) -> None:
        """The leader's own high watermark, as an answer of the leader of `epoch` gave it."""
        self._node.note_leader_high_watermark(high_watermark, epoch)

    # ------------------------------------------------------------------ the leader's lane

    def busy(self) -> bool:
        """Events queued, writes pending, submitted or not committed, or a flush due."""
        queue = self._queue
        writes = self._writes
        return bool(queue.events or queue.ahead or writes.pending or writes.waiting
                    or writes.appends or writes.uncommitted or self._logs.flush_due)

    def client_connection(self) -> ClientConnection | None:
        """The one open client connection (None: none, several, or the node not serving)."""
        clients = self._node.client_server
        if clients is None or not self._node.listeners:
            return None
        conns = clients.connections
        if len(conns) != 1 or self._node.in_kafka_quorum():
            # in a quorum with Kafka controllers every KV call goes to KvFront, which refuses it
            return None
        return next(iter(conns))

    def voter_connection(self, replica_id: int) -> tuple[int, VoterConnection] | None:
        """(connection id, connection) of the connection `replica_id` last fetched on."""
        node = self._node
        peer = node.peers.fetch_peers.get(replica_id)
        if peer is None:
            return None
        proto = node.frame_connection(peer)
        return None if proto is None else (peer, proto)

    def parked_frame(self, correlation_id: int) -> tuple[int, int, int] | None:
        """The frame waiting under `correlation_id`: (its connection, version, wire
        correlation id), None when none waits (or the waiter is not a frame)."""
        answer = self._node.peers.inbound.get(correlation_id)
        if type(answer) is not FrameAnswer:
            return None
        return answer.peer, answer.version, answer.corr

    def encode_fetch(self, request: m.FetchRequest, version: int, correlation_id: int
                     ) -> bytes | None:
        """The request frame of `request` (`kraft.server.fetch_fast`), None for a shape the
        direct codec does not serve."""
        return encode_fetch_request(request, self._node.cluster_id, version, correlation_id,
                                    None)

    def lend_frame(self, correlation_id: int) -> None:
        """The frame under `correlation_id` goes to the lane: no longer waited on here."""
        self._node.peers.inbound.pop(correlation_id, None)

    def take_back_frame(self, frame: bytes, peer: int) -> tuple[int, m.FetchRequest, Any] | None:
        """Register a handed-back fetch frame as waiting for the core's answer on `peer`:
        (its id, the request, the reply the connection writes); None when it cannot be read."""
        node = self._node
        peers = node.peers
        assert node.loop is not None
        got = decode_fetch_request(frame, node.cluster_id)
        if got is None:
            return None
        version, wire_corr, req = got
        peers.inbound_ids += 1
        key = peers.inbound_ids
        reply = DeferredReply()
        conn = node.frame_connection(peer)
        answer = FrameAnswer(ApiKey.FETCH, version, wire_corr, reply,
                             node.loop.time() + FRAME_ANSWER_TIMEOUT_S, peer,
                             listener=conn.peer.listener if conn is not None else "")
        peers.inbound[key] = answer
        peers.sweep.ask(answer.deadline)
        return key, req, reply

    def await_commit(self, offset: int, epoch: int, reply: Any) -> None:
        """`reply` answered once `offset` (appended in `epoch`) is applied."""
        self._writes.waiting[offset] = (epoch, reply)
