"""A small model of a Kubernetes namespace running a KRaft quorum, for driving the planner.

It applies the planner's actions and then lets "physics" run one tick: pods start, catch up
and become ready, a quorum forms from the initial voters, auto-join adds caught-up observers
one at a time (a replaced disk's node removing its old incarnation first), the leader moves
when its pod stops; AddVoter of a node id that is a voter under another directory id is
refused (DUPLICATE_VOTER). `observe()` gives the planner's input and
`write_status()` keeps what a handler would write back. Failures are injected by the tests.
"""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kraft_operator import models
from kraft_operator.observed import (
    ControllerListener,
    Endpoint,
    ListenerState,
    NodeState,
    Observed,
    Operation,
    PodPhase,
    PodState,
    PvcState,
    QuorumInfo,
    ReplicaInfo,
)
from kraft_operator.planner import (
    AddVoter,
    ClearRecoveryAnnotation,
    CreatePod,
    CreatePVC,
    DeletePod,
    DeletePVC,
    ForceSingleVoter,
    Plan,
    RecordCluster,
    RemoveVoter,
    ResignLeader,
    majority,
    pod_spec_hash,
)
from kraft_operator.planner.listeners import layout_of, listener_state

TICK_SECONDS = 10.0


def kafka_uuid(n: int) -> str:
    """A deterministic 22-character Kafka Uuid text for test ids."""
    return base64.urlsafe_b64encode(n.to_bytes(16, "big")).decode().rstrip("=")


@dataclass
class SimPod:
    node_id: int
    directory_id: str
    spec_hash: str
    auto_join: bool
    node_name: str = "k8s-a"
    age: int = 0  # ticks since it started; caught up and ready from age 1
    broken: bool = False  # cannot start (bad spec, no room): stays Pending
    volume_gone_since: float | None = None  # its status says its volume is gone
    listeners: tuple[ControllerListener, ...] = ()  # bound, the dialled one first
    authorizer: bool = False

    @property
    def key(self) -> tuple[int, str]:
        return (self.node_id, self.directory_id)


@dataclass
class World:
    """The namespace, the quorum and the KRaftQuorum's status, as the planner will see them."""

    generation: int = 1
    now: float = 1_000_000.0
    pods: dict[int, SimPod] = field(default_factory=dict)
    pvcs: dict[int, PvcState] = field(default_factory=dict)
    nodes: dict[str, NodeState] = field(default_factory=lambda: {
        n: NodeState(n, True, 0.0) for n in ("k8s-a", "k8s-b", "k8s-c")})
    voters: set[tuple[int, str]] = field(default_factory=set)
    leader: tuple[int, str] | None = None
    epoch: int = 0
    formed: bool = False
    high_watermark: int = 0
    # the KRaftQuorum's status and annotations
    cluster_id: str | None = None
    initial_voters: tuple[tuple[int, str], ...] = ()
    last_known_voters: tuple[tuple[int, str], ...] = ()
    operation: Operation | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    tls_generation: str = ""
    """The trust generation of the quorum's PKI, as kraft_operator.actions.tls reports it."""
    tls_problem: str | None = None
    observed_generation: int | None = None
    broken_hashes: set[str] = field(default_factory=set)
    auto_join_enabled: bool = True  # whether auto-join really adds (Kafka's behaviour)
    spec: models.KRaftQuorumSpec | None = None
    """The spec `run` plans with (status.tls's record is read against it)."""
    tls_record: dict[str, object] | None = None
    """status.tls as the handler stores it (the listeners' record, a migration's phase)."""
    pki: bool = False
    """The trust generation follows the layout: "tls-1" while a listener is TLS, else ""."""
    publish_delay: int = 0
    """Ticks a restarted voter takes, once caught up, to publish its endpoints
    (UpdateRaftVoter committed)."""
    endpoints: dict[tuple[int, str], tuple[ControllerListener, ...]] = field(
        default_factory=dict)
    """Each voter's endpoints in the voters set."""
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1000))
    events: list[str] = field(default_factory=list)

    # --- the quorum ----------------------------------------------------------------------

    def running(self, key: tuple[int, str]) -> bool:
        pod = self.pods.get(key[0])
        return pod is not None and pod.directory_id == key[1] and not pod.broken

    def caught_up(self, key: tuple[int, str]) -> bool:
        pod = self.pods.get(key[0])
        return self.running(key) and pod is not None and pod.age >= 1

    def healthy_voters(self) -> int:
        return sum(1 for k in self.voters if self.caught_up(k))

    def quorum_answers(self) -> bool:
        return self.formed and bool(self.voters) and \
            sum(1 for k in self.voters if self.running(k)) >= majority(len(self.voters))

    # --- observing -----------------------------------------------------------------------

    def listener_state(self) -> ListenerState:
        """What the handler reads from the spec and status.tls."""
        status: dict[str, object] = {"tls": self.tls_record or {}}
        if self.cluster_id:
            status["clusterId"] = self.cluster_id
        return listener_state(self.spec or models.KRaftQuorumSpec(), status)

    def generation_now(self) -> str:
        if not self.pki:
            return self.tls_generation
        return "tls-1" if layout_of(self.listener_state()).has_ssl else ""

    def observe(self, fresh: int = 12) -> Observed:
        quorum = None
        if self.quorum_answers() and self.leader is not None:
            voters = tuple(ReplicaInfo(k[0], k[1], caught_up=self.caught_up(k),
                                       endpoints=tuple(Endpoint(e.name, f"kq-{k[0]}", e.port)
                                                       for e in self.endpoints.get(k, ())))
                           for k in sorted(self.voters))
            observers = tuple(ReplicaInfo(p.node_id, p.directory_id, caught_up=p.age >= 1)
                              for p in sorted(self.pods.values(), key=lambda p: p.node_id)
                              if p.key not in self.voters and not p.broken)
            quorum = QuorumInfo(self.leader[0], self.epoch, self.high_watermark, 1, voters,
                                observers)
        pods = tuple(
            PodState(
                name=f"kq-{p.node_id}", node_id=p.node_id, directory_id=p.directory_id,
                phase=PodPhase.PENDING if p.broken else PodPhase.RUNNING,
                ready=quorum is not None and not p.broken and p.age >= 1,
                node_name=p.node_name, spec_hash=p.spec_hash, auto_join=p.auto_join,
                volume_gone_since=p.volume_gone_since, listeners=p.listeners or None)
            for p in self.pods.values())
        return Observed(
            generation=self.generation, pods=pods, pvcs=tuple(self.pvcs.values()),
            nodes=tuple(self.nodes.values()), quorum=quorum, operation=self.operation,
            cluster_id=self.cluster_id, initial_voters=self.initial_voters,
            last_known_voters=self.last_known_voters, annotations=dict(self.annotations),
            now=self.now, fresh_ids=tuple(kafka_uuid(next(self._ids)) for _ in range(fresh)),
            tls_generation=self.generation_now(), tls_problem=self.tls_problem,
            listeners=self.listener_state())

    def write_status(self, plan: Plan) -> None:
        """What the handler writes back from the plan."""
        fields = plan.status_fields
        if "clusterId" in fields:
            self.cluster_id = fields["clusterId"]
        if "initialVoters" in fields:
            self.initial_voters = tuple((v["id"], v["directoryId"])
                                        for v in fields["initialVoters"])
        if fields.get("voters") is not None:
            self.last_known_voters = tuple((v["id"], v["directoryId"]) for v in fields["voters"])
        op = fields.get("currentOperation")
        self.operation = None if op is None else Operation(
            op["type"], op["target"], self._parse_time(op["startedAt"]), op["attempt"])
        if "observedGeneration" in fields:
            self.observed_generation = fields["observedGeneration"]
        if isinstance(fields.get("tls"), dict):
            record = dict(self.tls_record or {})
            for key, value in fields["tls"].items():
                if value is None:
                    record.pop(key, None)
                else:
                    record[key] = value
            self.tls_record = record

    @staticmethod
    def _parse_time(text: str) -> float:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()

    # --- acting ------------------------------------------------------------------------------

    def apply(self, action: object) -> None:
        self.events.append(repr(action))
        match action:
            case RecordCluster(cluster_id=cid, initial_voters=voters):
                self.cluster_id, self.initial_voters = cid, voters
            case CreatePVC(node_id=n, directory_id=d):
                assert n not in self.pvcs, f"claim of {n} exists"
                self.pvcs[n] = PvcState(f"data-kq-{n}", n, d)
            case DeletePVC(node_id=n):
                self.pvcs.pop(n, None)
            case CreatePod(node_id=n, directory_id=d, spec_hash=h, auto_join=a):
                assert n not in self.pods, f"pod of {n} exists"
                assert n in self.pvcs and self.pvcs[n].directory_id == d, "pod without its claim"
                pvc = self.pvcs[n]
                if pvc.node_name is not None:
                    # a node-local volume: the pod can only run where its volume is, and
                    # stays Pending while that Node is down
                    node = pvc.node_name
                    down = node in self.nodes and not self.nodes[node].ready
                else:
                    node = next(name for name, s in sorted(self.nodes.items()) if s.ready)
                    down = False
                layout = layout_of(self.listener_state())  # what the ConfigMap says now
                self.pods[n] = SimPod(n, d, h, a, node_name=node,
                                      broken=h in self.broken_hashes or down,
                                      listeners=layout.listeners, authorizer=layout.authorizer)
            case DeletePod(node_id=n):
                self.pods.pop(n, None)
            case AddVoter(node_id=n, directory_id=d):
                assert self.quorum_answers()
                if any(k[0] == n and k[1] != d for k in self.voters):
                    # the leader answers DUPLICATE_VOTER: the id is a voter under another
                    # directory id (Kafka's AddVoterHandler does the same)
                    self.events.append(f"DUPLICATE_VOTER {n}:{d}")
                else:
                    self.voters.add((n, d))
            case RemoveVoter(node_id=n, directory_id=d):
                assert self.quorum_answers()
                self.voters.discard((n, d))
                if self.leader == (n, d):
                    self.leader = None
            case ResignLeader(node_id=n):
                if self.leader is not None and self.leader[0] == n:
                    others = sorted(k for k in self.voters if k != self.leader and self.caught_up(k))
                    if others:
                        self.leader, self.epoch = others[0], self.epoch + 1
            case ForceSingleVoter(node_id=n, directory_id=d):
                # the executor re-creates the stopped survivor's pod with the recovery run
                # before `kraft run` (a pod of its own spec: rolled to an ordinary one later)
                assert n not in self.pods or self.pods[n].spec_hash == "recovery", \
                    f"the voter set of {n} is forced while its ordinary pod runs"
                assert not any(k != n for k in self.pods), "forced while other pods run"
                self.pods.setdefault(n, SimPod(n, d, "recovery", False))
                self.voters = {(n, d)}
                self.leader, self.epoch = (n, d), self.epoch + 1
            case ClearRecoveryAnnotation():
                self.annotations.pop(models.RECOVER_ANNOTATION, None)
            case _:
                pass

    def tick(self) -> None:
        """Time passes: pods age, the quorum forms or moves its leader, auto-join acts."""
        self.now += TICK_SECONDS
        self.high_watermark += 1
        for pod in self.pods.values():
            if not pod.broken:
                pod.age += 1
        if not self.formed and self.initial_voters:
            initial = set(self.initial_voters)
            if sum(1 for k in initial if self.running(k)) >= majority(len(initial)):
                self.formed, self.voters = True, set(initial)
                formatted = layout_of(self.listener_state()).listeners[:1]
                for k in initial:  # as formatted (--initial-controllers)
                    self.endpoints[k] = formatted
        if not self.quorum_answers():
            return
        for k in self.voters:  # a restarted voter publishes its listeners (UpdateRaftVoter)
            pod = self.pods.get(k[0])
            if pod is not None and pod.directory_id == k[1] and not pod.broken \
                    and pod.age >= 1 + self.publish_delay:
                self.endpoints[k] = pod.listeners
        if self.leader is None or self.leader not in self.voters or not self.running(self.leader):
            candidates = sorted(k for k in self.voters if self.running(k))
            self.leader, self.epoch = candidates[0], self.epoch + 1
        if self.auto_join_enabled:
            for pod in sorted(self.pods.values(), key=lambda p: p.node_id):
                if pod.auto_join and pod.age >= 1 and not pod.broken and pod.key not in self.voters:
                    # a replaced disk: the node first removes its old incarnation, then (on a
                    # later tick) adds itself, one change at a time
                    stale = sorted(k for k in self.voters if k[0] == pod.node_id)
                    if stale:
                        self.voters.discard(stale[0])
                        if self.leader == stale[0]:
                            self.leader = None
                    else:
                        self.voters.add(pod.key)
                    break

    # --- failures ----------------------------------------------------------------------------

    def lose_disk(self, node_id: int) -> None:
        """The node's volume is gone (and its pod with it)."""
        self.pods.pop(node_id, None)
        self.pvcs.pop(node_id, None)

    def node_back_without_volumes(self, name: str) -> None:
        """The Node went down and came back Ready, its node-local volumes gone: its pods stay
        Pending, their status saying the volume is gone; the claims still look Bound."""
        self.nodes[name] = NodeState(name, True, self.now)
        for pod in self.pods.values():
            if pod.node_name == name:
                pod.broken = True
                pod.volume_gone_since = self.now

    def fail_k8s_node(self, name: str) -> None:
        self.nodes[name] = NodeState(name, False, self.now)
        for pod in self.pods.values():
            if pod.node_name == name:
                pod.broken = True


def realized(world: World, spec: models.KRaftQuorumSpec) -> bool:
    """The world matches the spec: ids 0..n-1 are voters on current, caught-up pods."""
    wanted = {(n, world.pvcs[n].directory_id) for n in range(spec.replicas) if n in world.pvcs}
    return (
        world.quorum_answers()
        and world.voters == wanted
        and len(wanted) == spec.replicas
        and set(world.pods) == set(range(spec.replicas))
        and all(p.spec_hash == pod_spec_hash(spec, world.generation_now(),
                                             layout_of(world.listener_state()).key)
                and p.age >= 1 for p in world.pods.values())
    )


def run(world: World, spec: models.KRaftQuorumSpec, steps: int = 200,
        check: object = None, disturb: object = None) -> list[Plan]:
    """Plan, act, tick until the planner reports the spec realized (or steps run out);
    `check(world, observed, plan)` sees each plan before it is applied, `disturb(world, step)`
    may inject a fault after each tick."""
    from kraft_operator.planner import plan

    plans = []
    world.spec = spec
    for _ in range(steps):
        observed = world.observe()
        result = plan(spec, observed)
        plans.append(result)
        if callable(check):
            check(world, observed, result)
        world.write_status(result)
        if result.status_fields.get("observedGeneration") == world.generation:
            return plans
        world.apply(result.action)
        world.tick()
        if callable(disturb):
            disturb(world, len(plans))
    return plans


def with_spec(spec: models.KRaftQuorumSpec, **changes: object) -> models.KRaftQuorumSpec:
    data = spec.model_dump()
    data.update(changes)
    return models.KRaftQuorumSpec.model_validate(data)


__all__ = ["World", "kafka_uuid", "realized", "run", "with_spec"]
