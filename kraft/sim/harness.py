"""Drive one `RaftCore` by hand: the scripted-test context (in the spirit of Kafka's
`RaftClientTestContext`).

`CoreHarness` builds a replica in a given state in one line, delivers events at a controlled
simulated time and offers queries over the effects it produced, e.g.

    h = CoreHarness.leader(voters=(1, 2, 3))        # node 1, elected, LeaderChange persisted
    h.fetch_from(2, fetch_offset=h.log_end, last_fetched_epoch=h.epoch)
    assert h.fetch_responses()[-1].response.high_watermark == ...
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any, TypeVar

from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft.config import LogState, QuorumStateData, RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.effects import (
    Effect,
    PersistQuorumState,
    SendFetchResponse,
    SendRequest,
    SendResponse,
)
from kraft.raft.events import (
    Event,
    Persisted,
    RequestReceived,
    ResponseReceived,
    Tick,
)
from kraft.raft.messages import (
    BeginQuorumEpochRequest,
    Endpoint,
    FetchedBatch,
    FetchRequest,
    FetchResponse,
    KRaftVersionRange,
    ReplicaKey,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import Role
from kraft.raft.voters import VoterNode, VoterSet

E = TypeVar("E")


def dir_id(node_id: int, generation: int = 0) -> Uuid:
    """A deterministic directory id for a node (a new `generation` = a new disk)."""
    return Uuid(bytes([node_id % 256, generation % 256]) + bytes([7]) * 14)


def endpoint(node_id: int) -> tuple[Endpoint, ...]:
    """The single controller listener of a test node."""
    return (Endpoint("CONTROLLER", f"node{node_id}", 9093),)


def voter_set(ids: Iterable[int], dynamic: bool = True) -> VoterSet:
    """A voters set: with directory ids (kraft.version 1) or without (static, version 0)."""
    return VoterSet.of(
        [
            VoterNode(
                ReplicaKey(i, dir_id(i) if dynamic else None),
                endpoint(i),
                KRaftVersionRange(0, 1) if dynamic else KRaftVersionRange(0, 0),
            )
            for i in ids
        ]
    )


class CoreHarness:
    """One core, a clock and the list of every effect it produced."""

    def __init__(
        self,
        node_id: int = 1,
        voters: Iterable[int] = (1, 2, 3),
        dynamic: bool = True,
        log_state: LogState | None = None,
        seed: int = 0,
        generation: int = 0,
        **config: Any,
    ) -> None:
        ids = tuple(voters)
        self.node_id = node_id
        self.dynamic = dynamic
        vs = voter_set(ids, dynamic)
        state = log_state or LogState()
        if dynamic and not state.voters_history:
            offset = -1
            state = LogState(
                quorum_state=state.quorum_state,
                log_start_offset=state.log_start_offset,
                log_end_offset=state.log_end_offset,
                epoch_cache=state.epoch_cache,
                voters_history=((offset, vs),),
                kraft_version_history=((offset, 1),),
                snapshots=state.snapshots,
            )
        defaults: dict[str, Any] = {
            "listeners": endpoint(node_id),
            "static_voters": None if dynamic else vs,
            "bootstrap_servers": tuple(e for i in ids for e in endpoint(i)),
            "election_timeout_ms": 1000,
            "fetch_timeout_ms": 2000,
            "request_timeout_ms": 2000,
        }
        defaults.update(config)
        self.config = RaftConfig(
            node_id=node_id, directory_id=dir_id(node_id, generation), **defaults
        )
        self.now = 0
        self.core = RaftCore(self.config, state, random.Random(seed), self.now)
        self.effects: list[Effect] = []
        self.last: list[Effect] = []
        self.last = self.core.start()
        self.effects.extend(self.last)

    # ------------------------------------------------------------------ builders

    @classmethod
    def leader(cls, node_id: int = 1, voters: Iterable[int] = (1, 2, 3), **kw: Any) -> CoreHarness:
        """A replica that won an election and persisted its epoch-start batch."""
        h = cls(node_id, voters, **kw)
        h.elect()
        return h

    @classmethod
    def follower(
        cls, node_id: int = 1, leader_id: int = 2, epoch: int = 1,
        voters: Iterable[int] = (1, 2, 3), **kw: Any,
    ) -> CoreHarness:
        """A replica following `leader_id` in `epoch` (told by BeginQuorumEpoch)."""
        h = cls(node_id, voters, **kw)
        h.begin_quorum(leader_id, epoch)
        return h

    # ------------------------------------------------------------------ driving

    def handle(self, event: Event) -> list[Effect]:
        """Deliver one event at the current time."""
        self.last = self.core.handle(event, self.now)
        self.effects.extend(self.last)
        return self.last

    def advance(self, ms: int) -> list[Effect]:
        """Move the clock forward, delivering a Tick at every deadline on the way."""
        target = self.now + ms
        out: list[Effect] = []
        while True:
            d = self.core.next_deadline()
            if d is None or d > target:
                break
            self.now = max(self.now, d)
            out.extend(self.handle(Tick()))
            if self.core.next_deadline() == d:
                # The real runtime would Tick again at once, forever: a busy loop.
                raise AssertionError(
                    f"busy timer: a Tick at {d} left the next deadline at {d} "
                    f"(role={self.core.role.name}, epoch={self.core.epoch})"
                )
        self.now = target
        out.extend(self.handle(Tick()))
        return out

    def request(self, source: int, request: Request, correlation_id: int = 1000) -> list[Effect]:
        """Deliver a request from `source`."""
        return self.handle(RequestReceived(source, correlation_id, request))

    def respond(self, sent: SendRequest, response: Response, source: int | None = None) -> list[Effect]:
        """Deliver `response` to the request the core sent in `sent`."""
        src = sent.destination if source is None else source
        return self.handle(ResponseReceived(src, sent.correlation_id, response))

    def persist(self) -> list[Effect]:
        """Report the whole log durable."""
        return self.handle(Persisted(self.core.log.end_offset))

    def elect(self) -> None:
        """Run an election to leadership: timeout, pre-vote, vote, persist the epoch start."""
        self.advance(2 * self.config.election_timeout_ms)
        for r in self.sent(VoteRequest):
            if _is_vote(r, pre=True) and self.core.role is Role.PROSPECTIVE:
                self.respond(r, VoteResponse(ErrorCode.NONE, -1, self.core.epoch, True))
        for r in self.sent(VoteRequest):
            if _is_vote(r, pre=False) and self.core.role is Role.CANDIDATE:
                self.respond(r, VoteResponse(ErrorCode.NONE, -1, self.core.epoch, True))
        assert self.core.role is Role.LEADER, self.core.role
        self.persist()

    def begin_quorum(self, leader_id: int, epoch: int) -> list[Effect]:
        """Tell the replica that `leader_id` leads `epoch`."""
        return self.request(
            leader_id,
            BeginQuorumEpochRequest(
                leader_id, epoch, self.node_id,
                self.config.directory_id if self.dynamic else None,
                endpoint(leader_id),
            ),
        )

    def fetch_from(
        self,
        replica: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        epoch: int | None = None,
        high_watermark: int | None = -1,
        max_wait_ms: int = 500,
        directory_id: Uuid | None = None,
        correlation_id: int = 2000,
    ) -> list[Effect]:
        """Deliver a Fetch from `replica` to this (leader) core."""
        return self.request(
            replica,
            FetchRequest(
                replica_id=replica,
                replica_directory_id=directory_id or dir_id(replica),
                current_leader_epoch=self.core.epoch if epoch is None else epoch,
                fetch_offset=fetch_offset,
                last_fetched_epoch=last_fetched_epoch,
                max_wait_ms=max_wait_ms,
                high_watermark=high_watermark,
            ),
            correlation_id,
        )

    def fetch_response(
        self,
        sent: SendRequest,
        batches: Iterable[tuple[int, int]] = (),
        high_watermark: int = -1,
        error: ErrorCode = ErrorCode.NONE,
        leader_id: int | None = None,
        epoch: int | None = None,
        **kw: Any,
    ) -> list[Effect]:
        """Answer the core's Fetch; `batches` are (offset, epoch) single-record batches."""
        resp = FetchResponse(
            error,
            sent.destination if leader_id is None else leader_id,
            self.core.epoch if epoch is None else epoch,
            high_watermark,
            0,
            batches=tuple(FetchedBatch(o, o, e, payload=o) for o, e in batches),
            **kw,
        )
        return self.respond(sent, resp)

    # ------------------------------------------------------------------ queries

    def of_type(self, kind: type[E], effects: list[Effect] | None = None) -> list[E]:
        """Effects of one type (from `effects`, default: all so far)."""
        src = self.effects if effects is None else effects
        return [e for e in src if isinstance(e, kind)]

    def sent(self, request_type: type, clear: bool = False) -> list[SendRequest]:
        """Requests of `request_type` sent so far."""
        out = [
            e for e in self.effects
            if isinstance(e, SendRequest) and isinstance(e.request, request_type)
        ]
        if clear:
            self.effects = [e for e in self.effects if e not in out]
        return out

    def responses(self, response_type: type) -> list[Any]:
        """Responses (SendResponse) of `response_type` sent so far, oldest first."""
        return [
            e.response for e in self.effects
            if isinstance(e, SendResponse) and isinstance(e.response, response_type)
        ]

    def fetch_responses(self) -> list[SendFetchResponse]:
        """Fetch answers sent so far, oldest first."""
        return self.of_type(SendFetchResponse)

    def persisted_state(self) -> PersistQuorumState | None:
        """The last quorum-state write."""
        p = self.of_type(PersistQuorumState)
        return p[-1] if p else None

    def clear(self) -> None:
        """Forget the effects seen so far."""
        self.effects = []

    @property
    def epoch(self) -> int:
        """The core's epoch."""
        return self.core.epoch

    @property
    def role(self) -> Role:
        """The core's role."""
        return self.core.role

    @property
    def log_end(self) -> int:
        """The core's log end offset."""
        return self.core.log.end_offset


def _is_vote(sent: SendRequest, pre: bool) -> bool:
    return isinstance(sent.request, VoteRequest) and sent.request.pre_vote is pre


def log_state(
    end_offset: int = 0,
    epochs: tuple[tuple[int, int], ...] = (),
    quorum: QuorumStateData | None = None,
    **kw: Any,
) -> LogState:
    """A loaded log: `epochs` = ((epoch, start offset), ...) up to `end_offset`."""
    return LogState(
        quorum_state=quorum or QuorumStateData(epochs[-1][0] if epochs else 0),
        log_end_offset=end_offset,
        epoch_cache=epochs,
        **kw,
    )
