"""What the lane's runners use of the node that runs them: `LaneHost`, and the connections it
lends them (`FetchConnection`, `ClientConnection`, `VoterConnection`).

The runners (`kraft.lane.follower`, `kraft.lane.leader`) see the node only through these
protocols; the node provides them (`kraft.server.lane_host.NodeLaneHost`). So this package
imports nothing of the server, at run time or for its types, and a change inside the node
reaches the lane only when one of the operations below changes.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from kraft.raft import messages as m
from kraft.raft.core import RaftCore
from kraft.storage.log import SegmentedLog


class FetchConnection(Protocol):
    """A follower's connection to its leader, lent to the follower's lane with the fetch in
    flight on it."""

    @property
    def client_id(self) -> str:
        """The client id its requests carry."""

    def lend(self) -> tuple[int, int] | None:
        """Lend the socket: (its descriptor, the next correlation id), None when it cannot be
        lent (closed, or holding more than the one fetch in flight)."""

    def give_back(self, next_correlation: int, unread: bytes, api_key: Any, version: int,
                  correlation_id: int, timeout_s: float, callback: Any,
                  fast: Any = None) -> None:
        """The socket back from the lane, with the bytes it read and did not take and the
        request it left in flight (`correlation_id`), whose answer goes to `callback`."""

    def peer_closed(self) -> None:
        """The leader closed the connection while the lane had it."""

    def close(self) -> None:
        """Close the connection."""


class ClientConnection(Protocol):
    """A connection of the binary client protocol, lent to the leader's lane."""

    @property
    def transport(self) -> asyncio.Transport | None:
        """Its transport, None once closed."""

    def lendable(self) -> bool:
        """It can be lent now (open, nothing in flight, nothing unread or unwritten)."""

    def lend(self) -> tuple[int, bytes]:
        """Lend the socket: (its descriptor, the bytes read and not handled yet)."""

    def give_back(self, unread: bytes, pending: list[tuple[int, int]]) -> list[Any]:
        """The socket back, with the bytes the lane did not read; `pending` are the (request
        id, offset) of the PUTs it wrote and did not answer: their replies are returned."""


class VoterConnection(Protocol):
    """A voter's fetch connection to this leader, lent to the leader's lane."""

    def lendable(self, pending: int) -> bool:
        """It can be lent now, holding `pending` requests not answered (its parked fetch)."""

    def lend(self) -> tuple[int, bytes]:
        """Lend the socket: (its descriptor, the bytes read and not handled yet)."""

    def give_back(self, unread: bytes, waiting: Any = None) -> None:
        """The socket back, with the bytes the lane did not read and the reply of the fetch
        it handed back (`waiting`), which the connection writes when the core answers."""

    def close(self) -> None:
        """Close the connection."""


class LaneHost(Protocol):
    """What a lane runner uses of its node: its identity and settings, its core and log, its
    event loop and queue, the connections it lends, and where what the lane hands back goes."""

    @property
    def node_id(self) -> int:
        """This node's id."""

    @property
    def cluster_id(self) -> str:
        """The cluster's id (the loops check it in the frames they read)."""

    @property
    def lane_tick_ms(self) -> int:
        """The bookkeeping tick of the lanes (`kraft.lane.tick.ms`)."""

    @property
    def max_request_bytes(self) -> int:
        """The largest request frame a listener takes (`socket.request.max.bytes`): the leader's
        lane hands a larger one back to the listener, which refuses it."""

    @property
    def core(self) -> RaftCore | None:
        """The consensus core, None before the node started."""

    @property
    def log(self) -> SegmentedLog | None:
        """The metadata log the lanes write into, None before the node started."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The node's event loop, where the runners watch their loops' descriptors."""

    def wake_for_lane(self) -> None:
        """Queue a turn of the lane on the core loop: the core takes the lane's report next."""

    # ------------------------------------------------------------------ the follower's lane

    def give_back_fetch(self, conn: FetchConnection, next_correlation: int, unread: bytes,
                        version: int, wire_correlation: int, leader: int, correlation_id: int,
                        fetch: m.FetchRequest) -> None:
        """Give `conn` back with the fetch the lane left in flight on it (`wire_correlation`
        at `version`, whose answer reaches the core as its request `correlation_id` to
        `leader`); the connection's next correlation id is `next_correlation` and `unread`
        what it read and the lane did not take."""

    def leader_high_watermark(self, high_watermark: int, epoch: int) -> None:
        """An answer of the leader of `epoch` gave its own high watermark (the node's
        readiness compares its own to it)."""

    # ------------------------------------------------------------------ the leader's lane

    def busy(self) -> bool:
        """The node has work of its own in hand: events queued, writes pending, submitted or
        not committed, a lone write to submit, or a flush due."""

    def client_connection(self) -> ClientConnection | None:
        """The one open client connection; None when none or several are open."""

    def voter_connection(self, replica_id: int) -> tuple[int, VoterConnection] | None:
        """The connection voter `replica_id` fetches on: (its connection id, the connection),
        None when it is not connected."""

    def parked_frame(self, correlation_id: int) -> tuple[int, int, int] | None:
        """The request frame waiting under `correlation_id` (a fetch the core holds parked):
        (the connection it came on, its version, its wire correlation id), None when no frame
        waits under that id."""

    def encode_fetch(self, request: m.FetchRequest, version: int, correlation_id: int
                     ) -> bytes | None:
        """`request` as the Fetch request frame the loop reads, None when the loop's codec
        does not serve its shape."""

    def lend_frame(self, correlation_id: int) -> None:
        """The frame waiting under `correlation_id` is lent to the loop with its connection:
        the node no longer waits to answer it."""

    def take_back_frame(self, frame: bytes, peer: int) -> tuple[int, m.FetchRequest, Any] | None:
        """A fetch the loop hands back, registered again as waiting for the core's answer on
        connection `peer`: (its id for the core, the request, the reply the connection
        writes), None when the frame cannot be read."""

    def await_commit(self, offset: int, epoch: int, reply: Any) -> None:
        """A PUT the loop wrote at `offset` in `epoch` and did not answer: the node answers
        `reply` once that offset is applied, as it answers its own writes."""
