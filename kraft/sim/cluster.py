"""A deterministic simulation of a KRaft quorum: one seed reproduces one run exactly.

The simulator plays the runtime for several `RaftCore`s: a simulated clock and event queue, a
network that delays, drops, duplicates and reorders messages and can be partitioned (fully or
one way), disks with fsync latency that lose unflushed writes on a crash and can be lost
entirely (the replica comes back with a new directory id), client appends, snapshots, restarts
and membership changes through the real AddRaftVoter / RemoveRaftVoter requests. Effects are
executed by the node's own executor (`kraft.server.executor.EffectExecutor`, over the
simulated ports of `kraft.sim.ports.SimPorts`), in the order the core's contract prescribes,
and the invariants of `kraft.sim.invariants` are checked as the effects are executed. After the
fault phase every fault is healed and a leader must be elected and commit a new client append
within a bounded simulated time.

The simulation's parts (the lanes' drives, the byte and disk faults, the ports) take it through
its public host protocol, `kraft.sim.host.SimHost`; `Simulation` implements it.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kraft.lane import native
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft.config import RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.effects import (
    Effect,
    SendRequest,
)
from kraft.raft.elections import live_leader
from kraft.raft.epochs import MAX_EPOCH
from kraft.raft.events import (
    ApiVersionsReceived,
    Append,
    Event,
    Persisted,
    RequestFailed,
    RequestReceived,
    ResponseReceived,
    Shutdown,
    SnapshotRequested,
    Tick,
)
from kraft.raft.messages import (
    AddRaftVoterRequest,
    ApiVersionsResult,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    KRaftVersionRange,
    RemoveRaftVoterRequest,
    ReplicaKey,
    UpdateKRaftVersionRequest,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.quorum import majority_size
from kraft.raft.state import Role
from kraft.raft.voters import VoterNode, VoterSet
from kraft.server.executor import EffectExecutor, run_now
from kraft.sim.brief import brief
from kraft.sim.disk import SimDisk
from kraft.sim.faults import FaultModel
from kraft.sim.invariants import Invariants, InvariantViolation
from kraft.sim.lane_drive import FollowerDrive
from kraft.sim.lane_shadow import LaneShadow
from kraft.sim.leader_drive import LeaderDrive
from kraft.sim.node import SimNode, endpoint
from kraft.sim.params import SimParams
from kraft.sim.ports import SimPorts

ADMIN = -100
"""Node id the simulated admin client uses as its source."""

# event-queue item kinds (PIECE: a piece of a byte stream, `kraft.sim.faults`)
(_DELIVER, _TICK, _FLUSH, _LOCAL, _FAULT, _CLIENT, _HEAL, _ADMIN, _LANE_SYNC, _LEADER_LANE,
 PIECE, _FORGE) = range(12)
FAILURE_JITTER_MS = 5
"""A refused connection or a closed one reaches the sender 1..5 ms later (its timers and the
other replicas' do not line up to the millisecond, as they do not in real processes)."""
# How many immediate re-ticks at one instant are work, not a busy loop.
BUSY_TIMER_RETICKS = 3


@dataclass(slots=True)
class SimResult:
    """Outcome of one seed."""

    seed: int
    steps: int
    checks: int
    violation: str | None
    sim_time_ms: int
    committed: int
    elections: int
    mode: str
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no invariant was violated."""
        return self.violation is None


class Simulation:
    """One seeded run over `params.nodes` voters (+ spares in dynamic mode)."""

    def __init__(
        self,
        seed: int,
        params: SimParams | None = None,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        self.seed = seed
        self.params = params or SimParams()
        self.rng = random.Random(seed)
        self._forge_rng = random.Random(f"forge-{seed}")
        self.trace = trace
        self.now = 0
        self._seq = 0
        self._queue: list[tuple[int, int, int, int, object, int]] = []
        self.inv = Invariants()
        self.steps = 0
        self.elections = 0
        self.dynamic = seed % 3 != 0 if self.params.dynamic is None else self.params.dynamic
        self.mode = "dynamic" if self.dynamic else "static"
        self.connections = (
            seed % 5 != 0 if self.params.connections is None else self.params.connections
        )
        self.hw_linger_ms = (
            (0, 20, 50)[seed // 5 % 3] if self.params.hw_linger_ms is None
            else self.params.hw_linger_ms
        )
        self.blocked: set[tuple[int, int]] = set()
        self.loss = 0.0
        self.dup = 0.01
        self.healed_at: int | None = None
        self.live_after_heal = False
        self._append_seq = 0
        self._value_seq = 0
        self._after_heal_appends: set[int] = set()
        self._unanswered: dict[tuple[int, int, int], int] = {}
        """Requests delivered after healing and not answered yet: (replica, sender, id) ->
        when. With no fault left, every request gets its answer (`request_answered`)."""
        self.committed_appends = 0
        self._admin_corr = 0
        self.nodes: dict[int, SimNode] = {}
        self.stats: dict[str, int] = {}
        self.admin_log: list[str] = []
        module = native() if self.params.lane_native else None
        if self.params.lane_native and module is None:
            raise RuntimeError("the native lane (kraft.lane._native) was not built: "
                               "reinstall with a C compiler (make clean; make test)")
        self.lanes: LaneShadow | None = None
        if self.params.lane_shadow:
            self.lanes = LaneShadow(self.inv.fail, module)
        self.drive: FollowerDrive | None = None
        if self.params.lane_drive:
            self.drive = FollowerDrive(self, self.inv.fail, module)
        self.leader_drive: LeaderDrive | None = None
        if self.params.leader_drive:
            self.leader_drive = LeaderDrive(self, self.inv.fail, module)
        faults = self.params.faults
        self.faults = FaultModel(self, faults) if faults is not None and faults.any else None
        self._build()

    # ------------------------------------------------------------------ setup

    def _uuid(self) -> Uuid:
        return Uuid(self.rng.randbytes(16))

    def _build(self) -> None:
        p = self.params
        total = p.nodes + (p.spares if self.dynamic else 0)
        ids = list(range(1, total + 1))
        bootstrap = tuple(endpoint(i) for i in ids[: p.nodes])
        disks = {i: SimDisk(self._uuid()) for i in ids}
        static: VoterSet | None = None
        boot_voters: VoterSet | None = None
        if self.dynamic:
            boot_voters = VoterSet.of(
                [
                    VoterNode(ReplicaKey(i, disks[i].directory_id), (endpoint(i),),
                              KRaftVersionRange(0, 1))
                    for i in ids[: p.nodes]
                ]
            )
        else:
            static = VoterSet.of(
                [VoterNode(ReplicaKey(i, None), (endpoint(i),), KRaftVersionRange(0, 0))
                 for i in ids[: p.nodes]]
            )
        snap_every = self.rng.choice([15, 40, 1 << 40])
        if p.snapshot_every is not None:
            snap_every = p.snapshot_every
        if p.retention_bytes is None:
            self.retention_bytes = 0 if self.rng.random() < 0.75 else -1
        else:
            self.retention_bytes = p.retention_bytes
        for i in ids:
            d = disks[i]
            if self.dynamic and i <= p.nodes:
                d.bootstrap_voters = boot_voters
                d.bootstrap_kraft_version = 1
            cfg = self._config(i, d.directory_id, static, bootstrap, snap_every)
            self.nodes[i] = SimNode(i, d, cfg)
        for i in ids:
            self.start_node(self.nodes[i])

    def _config(
        self,
        node_id: int,
        directory_id: Uuid,
        static: VoterSet | None,
        bootstrap: tuple[Endpoint, ...],
        snap_every: int,
    ) -> RaftConfig:
        return RaftConfig(
            node_id=node_id,
            directory_id=directory_id,
            listeners=(endpoint(node_id),),
            static_voters=static,
            bootstrap_servers=bootstrap,
            election_timeout_ms=500,
            election_backoff_max_ms=500,
            fetch_timeout_ms=1000,
            request_timeout_ms=800,
            retry_backoff_ms=20,
            max_fetch_wait_ms=200,
            max_fetch_bytes=self.params.fetch_snapshot_bytes,
            fetch_snapshot_max_bytes=self.params.fetch_snapshot_bytes,
            auto_join=self.dynamic if self.params.auto_join is None else self.params.auto_join,
            snapshot_max_bytes_between=snap_every,
            snapshot_interval_ms=0,
            update_voter_period_ms=2000,
            retention_max_bytes=self.retention_bytes,
            retention_max_ms=-1,
            retention_check_interval_ms=self.params.retention_check_ms,
            hw_linger_ms=self.hw_linger_ms,
        )

    def start_node(self, n: SimNode) -> None:
        """Start `n` (again) from its disk: a new incarnation, a new core."""
        n.incarnation += 1
        if self.faults is not None:
            self.faults.recover(n)
        state = n.disk.load()
        n.core = RaftCore(
            n.config, state, random.Random(self.seed * 7919 + n.node_id * 104729 + n.incarnation),
            self.now,
        )
        n.applied_to = n.disk.start_offset
        n.last_hw = -1
        n.timer_at = None
        n.flush_pending = False
        n.partials.clear()
        n.immediate.clear()
        n.outstanding.clear()
        self.note(n.node_id, "start", f"incarnation={n.incarnation} log_end={state.log_end_offset}")
        self.execute(n, n.core.start())
        self._arm(n)

    # ------------------------------------------------------------------ queue

    def _push(self, at: int, kind: int, node: int, payload: object, inc: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, node, payload, inc))

    def _arm(self, n: SimNode) -> None:
        if n.core is None:
            return
        d = n.core.next_deadline()
        if d is None:
            return
        d = max(d, self.now + 1)
        if n.timer_at is None or d < n.timer_at or n.timer_at < self.now:
            n.timer_at = d
            self._push(d, _TICK, n.node_id, None, n.incarnation)

    def count(self, name: str) -> None:
        """Count one more of `name` in the run's stats."""
        self.stats[name] = self.stats.get(name, 0) + 1

    def note(self, node: int, what: str, detail: object) -> None:
        """One line of the trace, when tracing."""
        if self.trace is not None:
            text = str(detail)
            if len(text) > 220:
                text = text[:217] + "..."
            self.trace(f"{self.now:>7} n{node:<3} {what:<26} {text}")

    # ------------------------------------------------------------------ run

    def run(self) -> SimResult:
        """Run the seed to the end; returns the result (violation text if any)."""
        p = self.params
        end = p.fault_ms + p.liveness_ms
        self._push(self.rng.randint(50, 300), _CLIENT, 0, None)
        self._push(self.rng.randint(300, 1500), _FAULT, 0, None)
        self._push(p.fault_ms, _HEAL, 0, None)
        if p.forged_every_ms:
            self._push(self._forge_rng.randint(p.forged_every_ms, 2 * p.forged_every_ms),
                       _FORGE, 0, None)
        violation: str | None = None
        try:
            while self._queue:
                at, _, kind, node, payload, inc = heapq.heappop(self._queue)
                if at > end:
                    break
                self.now = at
                self.steps += 1
                self._step(kind, node, payload, inc)
                if self.live_after_heal and self.now > p.fault_ms + 1000:
                    # Liveness shown; run a little more to check the healed steady state.
                    end = min(end, self.now + 1500)
            self._check_answered(end)
            if not self.live_after_heal:
                self.inv.fail(
                    "liveness",
                    f"no client append committed within {p.liveness_ms} ms after healing",
                )
        except InvariantViolation as exc:
            violation = str(exc)
        except Exception as exc:  # a crash of the core is a finding too
            violation = f"exception: {type(exc).__name__}: {exc}"
        if self.drive is not None:
            self.stats.update(self.drive.stats)
        if self.leader_drive is not None:
            self.stats.update(self.leader_drive.stats)
        if self.lanes is not None:
            self.stats["lane_handled"] = self.lanes.handled
            self.stats["lane_handed_over"] = self.lanes.handed_over
        return SimResult(
            self.seed,
            self.steps,
            self.inv.checks,
            violation,
            self.now,
            self.committed_appends,
            self.elections,
            self.mode,
            dict(self.stats),
        )

    def run_until(self, until_ms: int) -> None:
        """Process queued events up to `until_ms` (no fault injector or client: scripts)."""
        while self._queue and self._queue[0][0] <= until_ms:
            at, _, kind, node, payload, inc = heapq.heappop(self._queue)
            self.now = at
            self.steps += 1
            if kind in (_FAULT, _HEAL, _CLIENT):
                continue
            self._step(kind, node, payload, inc)
        self.now = max(self.now, until_ms)

    def _step(self, kind: int, node_id: int, payload: object, inc: int) -> None:
        if kind in (_DELIVER, _LOCAL):
            if node_id == ADMIN:
                self.note(ADMIN, "admin <-", payload)
                resp = getattr(payload, "response", None)
                code = getattr(resp, "error_code", None)
                line = (f"admin <- n{getattr(payload, 'source', '?')} {type(resp).__name__} "
                        f"{code.name if isinstance(code, ErrorCode) else code}")
                if isinstance(resp, VoteResponse):
                    line += f" granted={resp.vote_granted}"
                if isinstance(resp, VoteResponse | BeginQuorumEpochResponse
                              | EndQuorumEpochResponse):
                    line += f" leader={resp.leader_id} epoch={resp.leader_epoch}"
                self.admin_log.append(line)
                if code == ErrorCode.NONE:
                    self.count(f"admin_ok_{type(resp).__name__}")
                return
            n = self.nodes[node_id]
            if n.core is None or (kind == _LOCAL and inc != n.incarnation):
                return
            if n.outstanding and isinstance(payload, ResponseReceived | RequestFailed):
                n.outstanding.pop(payload.correlation_id, None)
            if self.healed_at is not None and type(payload) is RequestReceived:
                assert isinstance(payload, RequestReceived)
                self._unanswered[(node_id, payload.source, payload.correlation_id)] = self.now
            drive = self.drive
            if drive is not None:
                if drive.take(n, payload):  # type: ignore[arg-type]
                    self._arm(n)
                    return
                payload = drive.translate(n, payload)  # type: ignore[arg-type]
            self._deliver_or_lane(n, payload)  # type: ignore[arg-type]
        elif kind == _TICK:
            n = self.nodes[node_id]
            if n.core is None or inc != n.incarnation or n.timer_at != self.now:
                return
            n.timer_at = None
            self.deliver(n, Tick())
            # Like the runtime, tick again at once while a deadline has already passed (work
            # that became due in the same instant, e.g. a zero election backoff); a deadline
            # that keeps asking for "now" is a busy loop in a real process.
            for _ in range(BUSY_TIMER_RETICKS):
                due = n.core.next_deadline() if n.core is not None else None
                if due is None or due > self.now:
                    break
                self.deliver(n, Tick())
            else:
                assert n.core is not None
                self.inv.fail("busy-timer", f"node {node_id} ({n.core.role.name}) still wants a "
                              f"Tick at {self.now} after {BUSY_TIMER_RETICKS} ticks at that time")
        elif kind == _FLUSH:
            n = self.nodes[node_id]
            if n.core is None or inc != n.incarnation:
                return
            n.flush_pending = False
            if self.faults is not None and self.faults.flush_failed(n):
                return
            end = n.disk.flush()
            self._deliver_or_lane(n, Persisted(end))
        elif kind == _LANE_SYNC:
            n = self.nodes[node_id]
            if n.core is None or inc != n.incarnation:
                return
            assert self.drive is not None and isinstance(payload, int)
            if self.faults is not None and self.faults.lane_sync_failed(n):
                return
            self.drive.synced(n, payload)
            self._arm(n)
        elif kind == _LEADER_LANE:
            n = self.nodes[node_id]
            if n.core is None or inc != n.incarnation:
                return
            assert self.leader_drive is not None and isinstance(payload, tuple)
            what, token = payload
            if what == "sync" and self.faults is not None and self.faults.lane_sync_failed(n):
                return
            if what == "sync":
                self.leader_drive.synced(n, token)
            else:
                self.leader_drive.timer(n, token)
            self._arm(n)
        elif kind == PIECE:
            if self.nodes[node_id].incarnation == inc and self.faults is not None:
                for event in self.faults.piece(node_id, payload):
                    self._step(_DELIVER, node_id, event, inc)
        elif kind == _CLIENT:
            self._client()
        elif kind == _FAULT:
            if self.now < self.params.fault_ms:
                self._fault()
                self._push(self.now + self.rng.randint(150, 1200), _FAULT, 0, None)
        elif kind == _HEAL:
            self._heal()
        elif kind == _FORGE:
            every = self.params.forged_every_ms
            if every and self.now < self.params.fault_ms:
                self._forge()
                self._push(self.now + self._forge_rng.randint(every, 2 * every), _FORGE, 0, None)

    def _deliver_or_lane(self, n: SimNode, event: Event) -> None:
        """`event` to the leader's lane, if armed and it takes it; else to the core."""
        lead = self.leader_drive
        if lead is not None and lead.take(n, event):
            self._arm(n)
            return
        self.deliver(n, event)

    def deliver(self, n: SimNode, event: Event) -> None:
        """`event` to `n`'s core now; its lanes report to it first, and are armed again
        afterwards."""
        drive = self.drive
        lead = self.leader_drive
        if drive is None and lead is None:
            self.deliver_core(n, event)
            return
        # a lane reports before the core sees anything else
        if drive is not None:
            drive.disarm(n, "event")
        if lead is not None and n.core is not None:
            lead.disarm(n, "event")
        if n.core is None:
            return
        self.deliver_core(n, event)
        if n.core is not None:
            if drive is not None:
                drive.arm(n)
            if lead is not None:
                lead.arm(n)

    def leader_lane_later(self, n: SimNode, what: str, token: int, at: int) -> None:
        """The leader lane's sync completes, or its parked fetches' timer fires, at `at`."""
        self._push(at, _LEADER_LANE, n.node_id, (what, token), n.incarnation)

    def append_committed(self, append_id: int) -> None:
        """A client's append was answered as committed."""
        self.committed_appends += 1
        if append_id in self._after_heal_appends:
            self.live_after_heal = True

    def fetch_adopted(self, n: SimNode, correlation_id: int) -> None:
        """`n`'s core took its follower lane's fetch in flight as request `correlation_id`."""
        assert self.drive is not None
        self.drive.adopted(n, correlation_id)

    def deliver_later(self, n: SimNode, at: int, event: Event) -> None:
        """`event` reaches `n`'s core at `at`, unless `n` restarted meanwhile."""
        self._push(at, _LOCAL, n.node_id, event, n.incarnation)

    def piece_later(self, at: int, dst: int, payload: object, incarnation: int) -> None:
        """A piece of a byte stream reaches replica `dst` at `at`, if it is still
        `incarnation` (`kraft.sim.faults`)."""
        self._push(at, PIECE, dst, payload, incarnation)

    def lane_sync_later(self, n: SimNode, token: int) -> None:
        """The sync a follower's lane started completes 1-8 ms from now (as a flush does)."""
        self._push(self.now + self.rng.randint(1, 8), _LANE_SYNC, n.node_id, token,
                   n.incarnation)

    def deliver_core(self, n: SimNode, event: Event) -> None:
        """Hand `event` to `n`'s core now, and carry out its effects."""
        core = n.core
        assert core is not None
        if self.trace is not None and type(event) is not Tick:
            if isinstance(event, RequestReceived | ResponseReceived):
                msg = event.request if isinstance(event, RequestReceived) else event.response
                self.note(n.node_id, f"<- n{event.source} {type(msg).__name__}",
                          f"#{event.correlation_id} {brief(msg, named=False)}")
            else:
                self.note(n.node_id, "<- " + type(event).__name__, brief(event))
        self.execute(n, self._handle(n, core, event))
        while n.immediate and n.core is not None:
            nxt = n.immediate.pop(0)
            self.note(n.node_id, "<- " + type(nxt).__name__, brief(nxt))
            self.execute(n, self._handle(n, n.core, nxt))
        self._arm(n)

    def _handle(self, n: SimNode, core: RaftCore, event: Event) -> list[Effect]:
        """`core.handle`, with the lane's decision taken before and checked after."""
        lanes = self.lanes
        if lanes is None:
            return core.handle(event, self.now)
        decision = lanes.before(n.node_id, core, event)
        effects = core.handle(event, self.now)
        lanes.after(n.node_id, core, event, decision, effects)
        return effects

    # ------------------------------------------------------------------ network

    def _check_answered(self, end: int) -> None:
        """After healing nothing is lost, delayed past `max_delay_ms`, or crashed: a request
        still unanswered a request timeout after it arrived was dropped by its replica."""
        limit = min(n.config.request_timeout_ms for n in self.nodes.values())
        for (node, source, corr), at in sorted(self._unanswered.items(), key=lambda x: x[1]):
            if at + limit < min(self.now, end):
                self.inv.fail("request_answered", f"node {node} never answered request #{corr} "
                              f"of node {source}, which arrived at {at}")

    def send(self, src: int, dst: int, event: Event) -> None:
        """Put a message on the simulated network (cut, lost, delayed or doubled there)."""
        if self._unanswered and type(event) is ResponseReceived:
            assert isinstance(event, ResponseReceived)
            self._unanswered.pop((src, dst, event.correlation_id), None)
        if dst not in self.nodes and dst != ADMIN:
            return
        if self.faults is not None and self.faults.send(src, dst, event):
            return
        if (src, dst) in self.blocked or self.rng.random() < self.loss:
            return
        copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            delay = self.rng.randint(1, self.params.max_delay_ms)
            self._push(self.now + delay, _DELIVER, dst, event)

    def connect(self, n: SimNode, dst: int, e: SendRequest) -> bool:
        """With `connections`: False when `dst` has crashed and refuses (the failure is on its
        way back to `n`); else True, and the request counts as outstanding."""
        target = self.nodes.get(dst)
        if target is None:
            return True
        cut = (n.node_id, dst) in self.blocked or (dst, n.node_id) in self.blocked
        if target.core is None and not cut:
            self.count("refused")
            self._push(self.now + self.rng.randint(1, FAILURE_JITTER_MS), _LOCAL, n.node_id,
                       RequestFailed(e.destination, e.correlation_id, unreachable=True),
                       n.incarnation)
            return False
        if len(n.outstanding) >= 256:  # lost requests are never answered: forget the oldest
            del n.outstanding[next(iter(n.outstanding))]
        n.outstanding[e.correlation_id] = dst
        return True

    def _disconnect(self, dead: SimNode) -> None:
        """The kernel closed a crashed replica's connections: what was in flight to it fails."""
        for n in self.nodes.values():
            if n.core is None or n is dead or (dead.node_id, n.node_id) in self.blocked:
                continue
            lost = [c for c, d in n.outstanding.items() if d == dead.node_id]
            for corr in lost:
                del n.outstanding[corr]
                self.count("disconnects")
                self._push(self.now + self.rng.randint(1, FAILURE_JITTER_MS), _LOCAL, n.node_id,
                           RequestFailed(dead.node_id, corr, disconnected=True), n.incarnation)

    def route(self, dest: int, endpoints: tuple[Endpoint, ...]) -> int:
        """The replica a request goes to (a bootstrap request names only endpoints)."""
        if dest >= 0:
            return dest
        for e in endpoints:
            if e.host.startswith("node"):
                return int(e.host[4:])
        return dest

    # ------------------------------------------------------------------ effects

    def execute(self, n: SimNode, effects: list[Effect]) -> None:
        """Carry out `effects` with the node's executor (`kraft.server.executor`) over this
        replica's simulated ports (`SimPorts`)."""
        executor = n.executor
        if executor is None:
            ports = SimPorts(self, n)
            executor = n.executor = EffectExecutor(ports, ports, ports, ports, ports, ports)
        run_now(executor.execute(effects))

    def schedule_flush(self, n: SimNode) -> None:
        """Flush `n`'s log soon (1-8 ms), unless a flush is already due."""
        if not n.flush_pending:
            n.flush_pending = True
            self._push(self.now + self.rng.randint(1, 8), _FLUSH, n.node_id, None, n.incarnation)

    def check_durable_majority(self, n: SimNode, hw: int) -> None:
        """Leader `n` claims its log committed below `hw`: a majority of its voters must hold
        that prefix durably (a crash of any minority then loses none of it)."""
        core = n.core
        chain = n.disk.chain_at(hw)
        if core is None or chain is None:
            return
        voters = core.voters()
        held = 0
        for v in voters.voters:
            m = self.nodes.get(v.id)
            if m is None:
                continue
            d = m.disk
            if v.key.directory_id is not None and d.directory_id != v.key.directory_id:
                # the voter's disk was lost and replaced since: what it acknowledged went with
                # it, and the voter can no longer vote (KIP-853), so it cannot be checked
                held += 1
                continue
            if hw < d.start_offset or (hw <= d.start_offset + d.durable_len
                                        and d.chain_at(hw) == chain):
                held += 1
        self.inv.checks += 1
        if held < majority_size(len(voters)):
            self.inv.fail("committed_durable_majority",
                          f"node {n.node_id} (epoch {core.epoch}) moved its high watermark to "
                          f"{hw}, but only {held} of its {len(voters)} voters hold that prefix "
                          "durably")

    def api_versions(self, n: SimNode, target: int) -> None:
        """`n` asks replica `target` for its kraft.version range; the answer comes later."""
        t = self.nodes.get(target)
        ok = (
            t is not None
            and t.core is not None
            and (n.node_id, target) not in self.blocked
            and (target, n.node_id) not in self.blocked
        )
        if ok:
            assert t is not None
            result = ApiVersionsResult(ErrorCode.NONE, t.config.kraft_version_range)
            delay = self.rng.randint(2, 20)
        else:
            result = ApiVersionsResult(ErrorCode.REQUEST_TIMED_OUT)
            delay = n.config.request_timeout_ms
        self._push(self.now + delay, _LOCAL, n.node_id, ApiVersionsReceived(target, result),
                   n.incarnation)

    # ------------------------------------------------------------------ workload and faults

    def leaders(self) -> list[SimNode]:
        """The running replicas that lead (more than one while a deposed leader has not
        heard of its successor yet)."""
        return [n for n in self.nodes.values() if n.core is not None and n.core.role is Role.LEADER]

    def new_append(self, count: int) -> Append:
        """A client's next append: `count` new values, one record each."""
        self._append_seq += 1
        values = []
        for _ in range(count):
            self._value_seq += 1
            values.append(self._value_seq)
        return Append(self._append_seq, tuple(values), count)

    def _client(self) -> None:
        leaders = self.leaders()
        if leaders:
            n = self.rng.choice(leaders)
            append = self.new_append(self.rng.randint(1, 3))
            if self.healed_at is not None:
                self._after_heal_appends.add(append.append_id)
            self._deliver_or_lane(n, append)
        self._push(self.now + self.rng.randint(20, 150), _CLIENT, 0, None)

    def _alive(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.core is not None]

    def _dead(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.core is None]

    def crash(self, n: SimNode) -> None:
        """`n`'s process dies: what it did not flush is lost."""
        self.note(n.node_id, "CRASH", "")
        self.count("crashes")
        n.core = None
        if self.drive is not None:
            self.drive.crashed(n)
        if self.leader_drive is not None:
            self.leader_drive.crashed(n)
        if self.faults is not None:
            self.faults.crash_disk(n)
        else:
            n.disk.crash()
        n.partials.clear()
        n.immediate.clear()
        n.outstanding.clear()
        n.incarnation += 1
        if self.connections:
            self._disconnect(n)
        # What this replica acknowledged (FetchOffset) was fsynced first: a crash may not lose
        # any committed record below it.
        self.inv.check_durable_after_crash(n.node_id, n.disk.end_offset, n.acked_end)

    def _fault(self) -> None:
        r = self.rng.random()
        ids = sorted(self.nodes)
        leaders = [n.node_id for n in self.leaders()]
        if r < 0.14:
            alive = self._alive()
            if alive:
                victims = [n for n in alive if n.node_id in leaders]
                if not victims or self.rng.random() < 0.5:
                    victims = alive
                self.crash(self.rng.choice(victims))
        elif r < 0.32:
            dead = self._dead()
            if dead:
                self.start_node(self.rng.choice(dead))
        elif r < 0.40:
            victim = self.rng.choice(leaders if leaders and self.rng.random() < 0.6 else ids)
            self.note(victim, "ISOLATE", "")
            for other in ids:
                if other != victim:
                    self.blocked.add((victim, other))
                    self.blocked.add((other, victim))
        elif r < 0.48 and len(ids) < 2:
            pass
        elif r < 0.44:
            a, b = self.rng.sample(ids, 2)
            self.note(a, "BLOCK", f"-> n{b}")
            self.blocked.add((a, b))
        elif r < 0.48:
            group = set(self.rng.sample(ids, self.rng.randint(1, len(ids) - 1)))
            self.note(0, "SPLIT", sorted(group))
            for a in ids:
                for b in ids:
                    if (a in group) != (b in group):
                        self.blocked.add((a, b))
        elif r < 0.60:
            self.note(0, "HEAL-NET", "")
            self.blocked.clear()
        elif r < 0.65:
            self.loss = self.rng.choice([0.0, 0.0, 0.02, 0.1])
            self.dup = self.rng.choice([0.0, 0.01, 0.05])
        elif r < 0.75:
            alive = self._alive()
            if alive:
                n = self.rng.choice(alive)
                self.deliver(n, SnapshotRequested())
        elif r < 0.80:
            for n in self.leaders():
                self.note(n.node_id, "SHUTDOWN", "resign and restart")
                self.deliver(n, Shutdown())
                self.crash(n)
                self.start_node(n)
                break
        elif r < 0.90:
            self._membership()
        elif r < 0.95:
            self._disk_loss()
        elif not self.dynamic:
            for n in self.leaders():
                self.admin(n, UpdateKRaftVersionRequest(1))

    def _forge(self) -> None:
        """Deliver one forged request (`SimParams.forged_every_ms`) and check that a replica
        that heard a live leader kept its epoch."""
        rng = self._forge_rng
        alive = [n for n in self._alive() if n.core is not None]
        if not alive:
            return
        n = alive[rng.randrange(len(alive))]
        epoch = min(max(a.core.epoch for a in alive if a.core is not None)
                    + rng.randint(1, 1000), MAX_EPOCH - 1)
        kind = rng.choice(("vote", "pre-vote", "begin", "end"))
        forger = 99
        request: object
        if kind in ("vote", "pre-vote"):
            request = VoteRequest(epoch, forger, None, -1, None, epoch - 1, 1 << 62,
                                  pre_vote=kind == "pre-vote")
        elif kind == "begin":
            request = BeginQuorumEpochRequest(forger, epoch, -1, None, (endpoint(forger),))
        else:
            request = EndQuorumEpochRequest(forger, epoch, (), (endpoint(forger),))
        # the lanes report first (as `deliver` has them do), so the lease is the core's own
        if self.drive is not None:
            self.drive.disarm(n, "event")
        if self.leader_drive is not None and n.core is not None:
            self.leader_drive.disarm(n, "event")
        core = n.core
        if core is None:
            return
        core.advance_clock(self.now)  # as `handle` does first: the lease at this time
        live, before = live_leader(core), core.epoch
        self.count("forged")
        self._admin_corr += 1
        self.note(n.node_id, "forged ->", request)
        self.deliver(n, RequestReceived(ADMIN, self._admin_corr, request))
        if n.core is core and live:
            self.count("forged_ignored")
            if core.epoch != before:
                self.inv.fail("sticky", f"node {n.node_id} heard a live leader in epoch "
                              f"{before} and took epoch {core.epoch} from a forged {kind}")

    def admin(self, n: SimNode, request: object) -> None:
        """The admin client sends `request` to `n`; the answers go to `admin_log`."""
        self._admin_corr += 1
        self.note(n.node_id, "admin ->", request)
        self.send(ADMIN, n.node_id, RequestReceived(ADMIN, self._admin_corr, request))  # type: ignore[arg-type]

    def _membership(self) -> None:
        leaders = self.leaders()
        if not leaders:
            return
        leader = self.rng.choice(leaders)
        core = leader.core
        assert core is not None
        voters = core.voters()
        if core.kraft_version < 1:
            return
        if self._stale_voters(voters):
            return
        observers = [n for n in self.nodes.values() if not voters.is_voter_id(n.node_id)]
        if observers and (len(voters) <= 2 or self.rng.random() < 0.5):
            o = self.rng.choice(observers)
            self.admin(leader, AddRaftVoterRequest(o.node_id, o.disk.directory_id, (endpoint(o.node_id),)))
        elif len(voters) > 2:
            v = self.rng.choice(voters.voters)
            self.admin(leader, RemoveRaftVoterRequest(v.id, v.key.directory_id))

    def _stale_voters(self, voters: VoterSet) -> bool:
        """True when some voter key no longer matches its node's disk (a lost disk)."""
        return any(
            v.key.directory_id is not None
            and v.key.directory_id != self.nodes[v.id].disk.directory_id
            for v in voters.voters
        )

    def _disk_loss(self) -> None:
        if not self.dynamic:
            return
        leaders = self.leaders()
        if not leaders:
            return
        core = leaders[0].core
        assert core is not None
        voters = core.voters()
        if len(voters) < 3 or self._stale_voters(voters):
            return
        # Only one unrepaired disk loss at a time, and only while the committed set is the
        # latest one: losing a second voter's disk would lose the quorum for good.
        if core.voters_history.latest_offset() >= (core.high_watermark or 0):
            return
        # ... and only while no replica holds another (uncommitted) set in its log: a former
        # leader with the longest log may hold its own removal; losing a disk of that set's
        # voters would lose that set's majority (seed 704492: 1 removed itself uncommitted,
        # lost leadership, then 3's disk went; only 1 had every committed record and it no
        # longer counted itself a voter, so no election could succeed; Kafka's observers do
        # not campaign either).
        for n in self.nodes.values():
            if n.core is None or n.core.voters() != voters:
                return
        victim = self.nodes[self.rng.choice(sorted(voters.ids()))]
        self.lose_disk(victim, restart=None)

    def lose_disk(self, victim: SimNode, restart: bool | None) -> None:
        """Whole-disk loss: a fresh disk with a new directory id (restart: None = random)."""
        self.note(victim.node_id, "DISK-LOSS", "")
        self.count("disk_losses")
        if victim.core is not None:
            self.crash(victim)
        fresh = SimDisk(self._uuid())
        victim.disk = fresh
        victim.acked_end = 0
        victim.config = replace(victim.config, directory_id=fresh.directory_id,
                                static_voters=None, auto_join=True)
        if restart is None:
            restart = self.rng.random() < 0.7
        if restart:
            self.start_node(victim)

    def _heal(self) -> None:
        self.note(0, "HEAL-ALL", "")
        self.healed_at = self.now
        self.blocked.clear()
        self.loss = 0.0
        self.dup = 0.0
        for n in self._dead():
            self.start_node(n)


def run_seed(
    seed: int, params: SimParams | None = None, trace: Callable[[str], None] | None = None
) -> SimResult:
    """Run one seed and return its result."""
    return Simulation(seed, params, trace).run()
