"""The KRaft consensus core: `RaftCore.handle(event, now_ms) -> list[Effect]`.

The core is a deterministic state machine. It never does I/O, reads a clock, awaits or draws
randomness other than from the injected `random.Random`; the time is whatever `now_ms` the
runtime passes in. The runtime (or the simulator) executes the returned effects in the order
documented in `kraft.raft.effects`:

1. effects run in list order;
2. `PersistQuorumState` is durable before any later `Send*` of the same list (a vote is on disk
   before it is answered);
3. log writes run in order and are fsynced later; each fsync is reported back as
   `Persisted(end)`; the leader counts itself, and a follower fetches again, only up to that;
4. `Committed(hw)` allows applying records below `hw` and nothing more; `CreateSnapshot`
   always follows the `Committed` that covers it.

Call `start()` once before the first `handle()`; after each call ask `next_deadline()` and
deliver a `Tick` no later than that time.

Protocol: KIP-595 (epochs, votes, Begin/EndQuorumEpoch, fetch-based replication, check-quorum),
KIP-996 (pre-vote), KIP-320 (leader-epoch fencing, divergence), KIP-630 (snapshots), KIP-853
(voters set in the log, Add/Remove/UpdateRaftVoter, kraft.version upgrade), KIP-1166 (follower
high watermark in Fetch).

This module owns the core's state, its public API and the dispatch of events, requests,
answers and timers; the rules live in one module per concern, as functions over this state:

- `kraft.raft.elections` — KIP-595/996: transitions, Vote and pre-vote, Begin/EndQuorumEpoch,
  check-quorum, the election timers;
- `kraft.raft.replication` — KIP-595/320/1166: Fetch on both sides, divergence and
  truncation, the high watermark, parking, appends;
- `kraft.raft.membership` — KIP-853: Add/Remove/UpdateRaftVoter, auto-join, the kraft.version
  upgrade, controller registration, DescribeQuorum;
- `kraft.raft.snapshots` — KIP-630: FetchSnapshot on both sides, snapshot creation, log start
  and retention;
- `kraft.raft.lease` — the native lane's lease and the lane's reports: the one interface
  between this core and the lane (`kraft.lane`), which this package never imports.
"""

from __future__ import annotations

import logging
import random

from kraft.protocol.errors import ErrorCode
from kraft.raft import elections, lease, membership, replication, snapshots
from kraft.raft.config import LogState, QuorumStateData, RaftConfig
from kraft.raft.effects import (
    Effect,
    MeasureRetention,
    PersistQuorumState,
    SendFetchSnapshotResponse,
    SendRequest,
    SendResponse,
    StateChanged,
)
from kraft.raft.epochs import (
    EPOCH_LIMIT,
    MAX_EPOCH,
    request_epoch_error,
    response_epoch_error,
)
from kraft.raft.errors import RaftFatalError as RaftFatalError
from kraft.raft.events import (
    ApiVersionsReceived,
    Append,
    Event,
    FollowerLaneReport,
    LeaderLaneReport,
    Persisted,
    RequestFailed,
    RequestReceived,
    ResponseReceived,
    RetentionMeasured,
    Shutdown,
    SnapshotCreated,
    SnapshotInstalled,
    SnapshotInstallFailed,
    SnapshotRequested,
    Tick,
)
from kraft.raft.leader import LeaderState, ParkedFetch
from kraft.raft.lease import FollowerLease, LeaderLease
from kraft.raft.log import LogMeta
from kraft.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
    DescribeQuorumRequest,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    RemoveRaftVoterRequest,
    ReplicaKey,
    Request,
    Response,
    UpdateKRaftVersionRequest,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.refusals import Refusals
from kraft.raft.state import (
    CandidateState,
    FollowerState,
    InFlight,
    ProspectiveState,
    ResignedState,
    Role,
    UnattachedState,
)
from kraft.raft.voters import OffsetHistory, VoterSet

logger = logging.getLogger("kraft.raft")

State = UnattachedState | ProspectiveState | CandidateState | LeaderState | FollowerState | ResignedState
"""The state object of the current epoch."""


class RaftCore:
    """One replica's consensus state machine.

    Construct with the replica's `RaftConfig`, the `LogState` loaded from disk and a seeded
    `random.Random`; call `start()` and execute its effects, then feed every event to
    `handle()`.
    """

    def __init__(
        self, config: RaftConfig, log_state: LogState, rng: random.Random, now_ms: int = 0
    ) -> None:
        self.config = config
        self.key = ReplicaKey(config.node_id, config.directory_id)
        self._rng = rng
        self._now = now_ms
        self.refusals = Refusals()
        """What this core refused or ignored from its peers: counted, and logged at a bounded
        rate (`kraft.raft.refusals`)."""
        self._out: list[Effect] = []
        self.log = LogMeta(
            log_state.log_start_offset,
            log_state.log_end_offset,
            log_state.epoch_cache,
            log_state.snapshots,
        )
        self.voters_history: OffsetHistory[VoterSet] = OffsetHistory(config.static_voters)
        for offset, voters in log_state.voters_history:
            if offset < log_state.log_end_offset:
                self.voters_history.add(offset, voters)
        self.kraft_version_history: OffsetHistory[int] = OffsetHistory(0)
        for offset, version in log_state.kraft_version_history:
            if offset < log_state.log_end_offset:
                self.kraft_version_history.add(offset, version)
        self.high_watermark: int | None = None
        self._qs = log_state.quorum_state
        self._persisted = log_state.quorum_state
        self._corr = 0
        self._inflight: dict[int, InFlight] = {}
        # replication: the fetch in flight, its backoff, the next bootstrap server to ask
        self._fetch_corr: int | None = None
        self._fetch_backoff_until = 0
        self._bootstrap_index = 0
        # membership: the follower's admin request in flight
        self._admin_corr: int | None = None
        # elections: lost elections in a row (the candidate's backoff grows with them)
        self._election_retries = 0
        # snapshots: the one being created, what makes the next one due, the retention
        # check's timer, the downloaded one the runtime installs
        self._snapshot_in_progress: OffsetAndEpoch | None = None
        self._snapshot_started_ms = now_ms
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now_ms
        self._retention_at = now_ms + config.retention_check_interval_ms
        self._installing: OffsetAndEpoch | None = None
        self._shutting_down = False
        self.state: State = UnattachedState(0)
        self._started = False
        self._voter_cache_set: VoterSet | None = None
        self._voter_cache = False

    # ================================================================== public API

    def start(self) -> list[Effect]:
        """Enter the initial state from the loaded quorum-state; returns the first effects."""
        self._out = []
        qs = self._qs
        epoch = qs.leader_epoch
        voted = (
            ReplicaKey(qs.voted_id, qs.voted_directory_id) if qs.voted_id >= 0 else None
        )
        log_epoch = self.log.last_epoch()
        if epoch > MAX_EPOCH or log_epoch > MAX_EPOCH:
            # the runtime refuses such a quorum-state with the way out before it gets here
            raise RaftFatalError(
                f"node {self.key.id}: quorum-state epoch {epoch} / log epoch {log_epoch}: at "
                f"or above the epoch limit {EPOCH_LIMIT}, no election could ever follow")
        if epoch < log_epoch:
            elections.to_unattached(self, log_epoch, None)
        elif qs.leader_id == self.key.id:
            self.state = ResignedState(
                epoch, self._now + self._election_timeout(), (), self.key.id, voted
            )
            self._emit_state()
        elif qs.leader_id >= 0:
            elections.to_follower(self, epoch, qs.leader_id, ())
        else:
            self.state = UnattachedState(epoch, voted, None)
            self._emit_state()
        self._started = True
        logger.info(
            "raft started node=%s epoch=%s state=%s log_end=%s",
            self.key,
            self.state.epoch,
            self.state.role.value,
            self.log.end_offset,
        )
        self._expire_timers()
        replication.poll(self)
        out, self._out = self._out, []
        return out

    def handle(self, event: Event, now_ms: int) -> list[Effect]:
        """Process one event at time `now_ms` and return the effects to execute, in order."""
        if now_ms > self._now:
            self._now = now_ms
        self._out = []
        t = type(event)
        if t is RequestReceived:
            assert isinstance(event, RequestReceived)
            self._on_request(event.source, event.correlation_id, event.request)
        elif t is ResponseReceived:
            assert isinstance(event, ResponseReceived)
            self._on_response(event.source, event.correlation_id, event.response)
        elif t is Persisted:
            assert isinstance(event, Persisted)
            replication.on_persisted(self, event.end_offset)
        elif t is Append:
            assert isinstance(event, Append)
            replication.on_append(self, event)
        elif t is Tick:
            pass
        elif t is RequestFailed:
            assert isinstance(event, RequestFailed)
            self._on_request_failed(event.correlation_id, event.unreachable, event.disconnected)
        elif t is SnapshotRequested:
            assert isinstance(event, SnapshotRequested)
            snapshots.maybe_snapshot(self, force=True, at=event.end_offset)
        elif t is SnapshotCreated:
            assert isinstance(event, SnapshotCreated)
            snapshots.on_snapshot_created(self, event.snapshot_id, event.size_bytes)
        elif t is SnapshotInstalled:
            assert isinstance(event, SnapshotInstalled)
            snapshots.on_snapshot_installed(self, event)
        elif t is RetentionMeasured:
            assert isinstance(event, RetentionMeasured)
            snapshots.on_retention_measured(self, event)
        elif t is SnapshotInstallFailed:
            assert isinstance(event, SnapshotInstallFailed)
            snapshots.on_snapshot_install_failed(self, event.snapshot_id)
        elif t is ApiVersionsReceived:
            assert isinstance(event, ApiVersionsReceived)
            membership.on_api_versions(self, event)
        elif t is FollowerLaneReport or t is LeaderLaneReport:
            if t is FollowerLaneReport:
                assert isinstance(event, FollowerLaneReport)
                lease.on_follower_lane_report(self, event)
            else:
                assert isinstance(event, LeaderLaneReport)
                lease.on_leader_lane_report(self, event)
            if event.armed:
                # The lane goes on under its lease: the timers and the poll wait for the next
                # event, before which the runtime stops the lane. A timer that ended the lease
                # now would leave the lane writing under a lease the core no longer holds.
                out, self._out = self._out, []
                return out
        elif t is Shutdown:
            self._on_shutdown()
        else:  # pragma: no cover - the Event union is closed
            raise TypeError(f"unknown event {event!r}")
        self._expire_timers()
        replication.poll(self)
        out, self._out = self._out, []
        return out

    def advance_clock(self, now_ms: int) -> None:
        """Move the core's clock to `now_ms` (never back), as `handle` does first, with no
        event: a question about the present (`elections.live_leader`) is then asked at
        `now_ms`."""
        if now_ms > self._now:
            self._now = now_ms

    def next_deadline(self) -> int | None:
        """The earliest time at which a `Tick` has work to do (None: no timer armed)."""
        times: list[int] = [f.deadline for f in self._inflight.values()]
        s = self.state
        # `replication.poll` sends nothing while the runtime replaces the log with a snapshot: arming its
        # timers then would ask for a Tick "now" again and again (a busy loop for as long as
        # the install takes). SnapshotInstalled/SnapshotInstallFailed wake the poll instead.
        polling = self._installing is None
        # the steady states first
        if isinstance(s, LeaderState):
            times.append(s.check_quorum_deadline)
            if len(self.log.snapshots) > 1:  # the retention rule only deletes with two
                times.append(self._retention_at)
            resend = elections.begin_quorum_next(self, s)
            if resend is not None:
                times.append(resend)
            times.extend(p.deadline for p in s.parked)
            if s.pending_change is not None:
                times.append(s.pending_change.deadline)
        elif isinstance(s, FollowerState):
            if polling:  # an install outstanding stops the fetch timeout (see elections.expire_election_timers)
                times.append(s.fetch_deadline)
            if s.leader_gone_at is not None:
                times.append(s.leader_gone_at)
            if polling and self._fetch_corr is None and self._fetch_backoff_until > self._now:
                times.append(self._fetch_backoff_until)
            if polling and self._admin_corr is None and membership.wants_admin(self, s):
                times.append(max(self._now, s.next_admin_at))
        elif isinstance(s, UnattachedState):
            if s.election_deadline is not None:
                times.append(s.election_deadline)
            elif self._is_voter():
                times.append(self._now)
            if (
                polling
                and not self._is_voter()
                and self.config.bootstrap_servers
                and self._fetch_corr is None
            ):
                times.append(max(self._now, self._fetch_backoff_until))
        elif isinstance(s, ProspectiveState | ResignedState):
            times.append(s.election_deadline)
        elif isinstance(s, CandidateState):
            if s.backoff_until is not None:
                times.append(s.backoff_until)
            else:
                times.append(s.election_deadline)
                times.extend(s.vote_retry.values())
        return min(times) if times else None

    @property
    def role(self) -> Role:
        """The current epoch state's role."""
        return self.state.role

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self.state.epoch

    @property
    def leader_id(self) -> int:
        """The leader of the current epoch, -1 when unknown."""
        return self.state.leader_id

    @property
    def kraft_version(self) -> int:
        """The finalized kraft.version (latest in the log, committed or not)."""
        v = self.kraft_version_history.latest()
        return v if v is not None else 0

    def voters(self) -> VoterSet:
        """The active voters set (latest in the log, committed or not)."""
        v = self.voters_history.latest()
        return v if v is not None else VoterSet(())

    def is_voter(self) -> bool:
        """True when this replica's key is in the active voters set."""
        return self._is_voter()

    # ---------------------------------------------------------------- the native lane's lease

    def leader_lease(self) -> LeaderLease | None:
        """The lease this leader would give the native lane now, None when it would not arm
        one (the rules: `kraft.raft.lease.leader_lease`)."""
        return lease.leader_lease(self)

    def lend_parked(self) -> list[ParkedFetch]:
        """The fetches this leader holds parked, handed to the native lane it arms now
        (`kraft.raft.lease.lend_parked`)."""
        return lease.lend_parked(self)

    def follower_lease(self) -> FollowerLease | None:
        """The lease this follower would give the native lane now, None when it would not arm
        one (the rules: `kraft.raft.lease.follower_lease`)."""
        return lease.follower_lease(self)

    def lane_fetch(self) -> FetchRequest | None:
        """The fetch this follower would send its leader now, the template of the follower
        lane's fetches; None when it follows none (`kraft.raft.lease.lane_fetch`)."""
        return lease.lane_fetch(self)

    # ================================================================== shared by the concerns
    # The concern modules (`elections`, `replication`, `membership`, `snapshots`, `lease`)
    # are parts of this core: they read and write its state and use these helpers.

    def _voters(self) -> VoterSet:
        """The active voters set (as `voters()`, for the concern modules)."""
        v = self.voters_history.latest()
        return v if v is not None else VoterSet(())

    def _is_voter(self) -> bool:
        """Whether this replica is a voter, cached per voters set (asked on every event)."""
        voters = self._voters()
        if voters is not self._voter_cache_set:
            self._voter_cache_set = voters
            self._voter_cache = voters.is_voter(self.key)
        return self._voter_cache

    def _election_timeout(self) -> int:
        """A fresh random election timeout in [T, 2T)."""
        t = self.config.election_timeout_ms
        return self._rng.randrange(t, 2 * t)

    def _next_corr(self) -> int:
        """The next correlation id of this core's requests."""
        self._corr += 1
        return self._corr

    def _send(self, dest: int, endpoints: tuple[Endpoint, ...], request: Request) -> int:
        """Send `request`, tracked in flight until answered or timed out; its correlation id."""
        corr = self._next_corr()
        self._inflight[corr] = InFlight(dest, request, self._now + self.config.request_timeout_ms)
        self._out.append(SendRequest(dest, endpoints, corr, request))
        return corr

    def _respond(self, dest: int, corr: int, response: Response) -> None:
        """Answer the request `corr` of `dest`."""
        self._out.append(SendResponse(dest, corr, response))

    def _persist(self, leader_id: int, epoch: int, voted: ReplicaKey | None) -> None:
        """Persist the quorum-state when it changed (before any later send of this step)."""
        data = QuorumStateData(
            epoch, leader_id, voted.id if voted else -1, voted.directory_id if voted else None
        )
        if data != self._persisted:
            self._persisted = data
            v0 = self.kraft_version == 0
            self._out.append(PersistQuorumState(
                leader_id, epoch, data.voted_id, data.voted_directory_id,
                0 if v0 else 1, tuple(sorted(self._voters().ids())) if v0 else ()))

    def _emit_state(self) -> None:
        """Tell the runtime the current role, epoch and leader."""
        s = self.state
        self._out.append(StateChanged(s.role.value, s.epoch, s.leader_id))

    def _leader_endpoints(self) -> tuple[Endpoint, ...]:
        """The endpoints of the current leader as this replica knows them (answers carry them)."""
        s = self.state
        if isinstance(s, FollowerState):
            return s.leader_endpoints
        if isinstance(s, LeaderState | ResignedState):
            return self.config.listeners
        return ()

    def _endpoints_of(self, node_id: int) -> tuple[Endpoint, ...]:
        """The endpoints of voter `node_id`, empty when it is no voter."""
        v = self._voters().get(node_id)
        return v.endpoints if v is not None else ()

    def _leader_only_error(self, request_epoch: int) -> ErrorCode | None:
        """The error a leader-only request of `request_epoch` gets here, None when this is the
        leader of that epoch (Kafka's order of checks)."""
        s = self.state
        if request_epoch < s.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if request_epoch > s.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if not isinstance(s, LeaderState):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._shutting_down:
            # Kafka's order of checks; a leader resigns on Shutdown, so this only answers
            # requests a runtime still delivers to a leader on its way down.
            return ErrorCode.BROKER_NOT_AVAILABLE
        return None

    # ================================================================== dispatch

    def _on_request(self, src: int, corr: int, req: Request) -> None:
        """Dispatch a request to the concern that answers it (one naming an epoch no replica
        may be in is refused first, `kraft.raft.epochs`)."""
        bad_epoch = request_epoch_error(req)
        if bad_epoch is not None:
            self._refuse_epoch(src, corr, req, bad_epoch)
            return
        t = type(req)
        if t is FetchRequest:
            assert isinstance(req, FetchRequest)
            replication.on_fetch(self, src, corr, req)
        elif t is VoteRequest:
            assert isinstance(req, VoteRequest)
            elections.on_vote(self, src, corr, req)
        elif t is BeginQuorumEpochRequest:
            assert isinstance(req, BeginQuorumEpochRequest)
            elections.on_begin_quorum(self, src, corr, req)
        elif t is EndQuorumEpochRequest:
            assert isinstance(req, EndQuorumEpochRequest)
            elections.on_end_quorum(self, src, corr, req)
        elif t is FetchSnapshotRequest:
            assert isinstance(req, FetchSnapshotRequest)
            snapshots.on_fetch_snapshot(self, src, corr, req)
        elif t is DescribeQuorumRequest:
            membership.on_describe(self, src, corr)
        elif t is AddRaftVoterRequest:
            assert isinstance(req, AddRaftVoterRequest)
            membership.on_add_voter(self, src, corr, req)
        elif t is RemoveRaftVoterRequest:
            assert isinstance(req, RemoveRaftVoterRequest)
            membership.on_remove_voter(self, src, corr, req)
        elif t is UpdateRaftVoterRequest:
            assert isinstance(req, UpdateRaftVoterRequest)
            membership.on_update_voter(self, src, corr, req)
        elif t is UpdateKRaftVersionRequest:
            assert isinstance(req, UpdateKRaftVersionRequest)
            membership.on_update_kraft_version(self, src, corr, req)
        elif t is ControllerRegistrationRequest:
            assert isinstance(req, ControllerRegistrationRequest)
            membership.on_controller_registration(self, src, corr, req)

    def _refuse_epoch(self, src: int, corr: int, req: Request, why: str) -> None:
        """Answer INVALID_REQUEST to a request naming an unusable epoch; nothing changes."""
        self.refusals.note(
            self._now, "request_epoch", type(req).__name__, logging.WARNING,
            "raft request refused node=%s source=%s request=%s error=INVALID_REQUEST reason=%r",
            self.key.id, src, type(req).__name__, why,
        )
        s = self.state
        code = ErrorCode.INVALID_REQUEST
        answer: Response
        if isinstance(req, VoteRequest):
            answer = elections.vote_response(self, code, False)
        elif isinstance(req, BeginQuorumEpochRequest):
            answer = BeginQuorumEpochResponse(code, s.leader_id, s.epoch)
        elif isinstance(req, EndQuorumEpochRequest):
            answer = EndQuorumEpochResponse(code, s.leader_id, s.epoch)
        elif isinstance(req, FetchRequest):
            replication.fetch_error(self, src, corr, code)
            return
        elif isinstance(req, FetchSnapshotRequest):
            self._out.append(SendFetchSnapshotResponse(src, corr, FetchSnapshotResponse(
                code, s.leader_id, s.epoch, req.snapshot_id, position=req.position,
                leader_endpoints=self._leader_endpoints()), 0))
            return
        elif isinstance(req, UpdateRaftVoterRequest):
            answer = UpdateRaftVoterResponse(code, s.leader_id, s.epoch)
        else:  # pragma: no cover - `request_epoch_error` checks only the types above
            raise TypeError(f"no refusal for {type(req).__name__}")
        self._respond(src, corr, answer)

    def _on_response(self, src: int, corr: int, resp: Response) -> None:
        """Match an answer to its request in flight and dispatch it to the concern that sent it
        (one naming an epoch no replica may be in counts as a failed request)."""
        if corr in self._inflight:
            bad_epoch = response_epoch_error(resp)
            if bad_epoch is not None:
                self.refusals.note(
                    self._now, "answer_epoch", type(resp).__name__, logging.WARNING,
                    "raft answer ignored node=%s source=%s answer=%s reason=%r",
                    self.key.id, src, type(resp).__name__, bad_epoch,
                )
                self._on_request_failed(corr)
                return
        f = self._inflight.pop(corr, None)
        if f is None:
            return  # duplicate, late or from a previous state: ignore
        req = f.request
        if corr == self._fetch_corr:
            self._fetch_corr = None
        if corr == self._admin_corr:
            self._admin_corr = None
        if isinstance(resp, FetchResponse):
            replication.on_fetch_response(self, resp)
        elif isinstance(resp, VoteResponse) and isinstance(req, VoteRequest):
            elections.on_vote_response(self, req, resp)
        elif isinstance(resp, BeginQuorumEpochResponse | EndQuorumEpochResponse):
            if elections.maybe_transition_on_epoch(self, resp.leader_epoch, resp.leader_id, ()):
                return
        elif isinstance(resp, FetchSnapshotResponse):
            snapshots.on_fetch_snapshot_response(self, resp)
        elif isinstance(resp, ControllerRegistrationResponse):
            membership.on_controller_registration_response(self, f.destination, resp)
        elif isinstance(resp, UpdateRaftVoterResponse):
            membership.on_update_voter_response(self, resp)
        # VoterChangeResponse (auto-join): the next attempt is paced by next_admin_at.

    def _on_request_failed(
        self, corr: int, unreachable: bool = False, disconnected: bool = False
    ) -> None:
        """A request got no answer: a vote to ask again, a fetch to back off from (and a
        leader that refused the connection), an admin request to pace."""
        f = self._inflight.pop(corr, None)
        if f is not None and isinstance(f.request, VoteRequest):
            elections.vote_unanswered(self, f.request)
        if corr == self._fetch_corr:
            self._fetch_corr = None
            self._fetch_backoff_until = self._now + self.config.retry_backoff_ms
            s = self.state
            if f is not None and isinstance(s, FollowerState) and f.destination == s.leader_id:
                if unreachable:
                    elections.leader_unreachable(self, s)
                elif disconnected:
                    # The leader's end of the connection went away with our fetch parked there
                    # (a killed leader's kernel closes it at once). Whether the leader is gone
                    # is for the next connection attempt to tell, but this replica no longer
                    # hears from it: it grants pre-votes until a fetch succeeds again, so a
                    # survivor that learns first that the leader refuses connections is not
                    # refused by this one in the instant before it learns it too.
                    s.disconnected = True
        if corr == self._admin_corr:
            self._admin_corr = None
            s = self.state
            if isinstance(s, FollowerState):
                s.next_admin_at = self._now + self.config.retry_backoff_ms * 10

    def _expire_timers(self) -> None:
        """Fire every timer due by now: requests in flight, then the current state's timers."""
        now = self._now
        if self._inflight:
            for corr in [c for c, f in self._inflight.items() if f.deadline <= now]:
                self._on_request_failed(corr)  # removes it from `_inflight`
        s = self.state
        if isinstance(s, LeaderState):  # the steady state first
            self._leader_timers(s)
        else:
            elections.expire_election_timers(self, s)

    def _leader_timers(self, s: LeaderState) -> None:
        """The leader's timers: retention check, parked fetches, a pending voter change,
        the BeginQuorumEpoch resend and check-quorum."""
        now = self._now
        if self._retention_at <= now and len(self.log.snapshots) > 1:
            # Kafka's periodic cleaner: the runtime measures the log, `snapshots.on_retention_measured`
            # decides what goes (with a single snapshot nothing can)
            self._retention_at = now + self.config.retention_check_interval_ms
            self._out.append(MeasureRetention())
        if s.parked:
            due = [p for p in s.parked if p.deadline <= now]
            if due:
                s.parked = [p for p in s.parked if p.deadline > now]
                for p in due:
                    replication.answer_fetch(self, p.source, p.correlation_id, p.request)
        if s.pending_change is not None and s.pending_change.deadline <= now:
            pc = s.pending_change
            s.pending_change = None
            membership.reply_change(self, pc, ErrorCode.REQUEST_TIMED_OUT, "timed out")
        if s.begin_quorum_resend_at <= now:
            # Kafka's LeaderState.needToSendBeginQuorumRequests: every other voter that has
            # not fetched within fetch timeout / 2, whether or not it ever fetched in this
            # epoch (a voter that restarted without knowing the leader learns it here).
            silent = [v for v in self._voters().voters
                      if v.id != self.key.id and elections.begin_quorum_due_at(self, s, v) <= now]
            if silent:
                s.begin_quorum_resend_at = now + self.config.fetch_timeout_ms // 2
                for v in silent:
                    elections.send_begin_quorum(self, v)
        if s.check_quorum_deadline <= now:
            if elections.check_quorum_ok(self, s):
                elections.reset_check_quorum(self, s)
            else:
                elections.resign(self, "check-quorum: no majority fetched")

    def _on_shutdown(self) -> None:
        """A leader resigns; from now on no lease, append or voter change is granted."""
        if isinstance(self.state, LeaderState):
            elections.resign(self, "shutdown")
        self._shutting_down = True

    # ================================================================== the voters along the log

    def voters_at(self, end_offset: int) -> VoterSet | None:
        """The voters set in force for the log prefix ending at `end_offset`."""
        return self.voters_history.value_at(end_offset)

    def kraft_version_at(self, end_offset: int) -> int:
        """The kraft.version in force for the log prefix ending at `end_offset`."""
        v = self.kraft_version_history.value_at(end_offset)
        return v if v is not None else 0
