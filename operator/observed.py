"""What the operator observed on one reconcile: the planner's whole input besides the spec.

Plain frozen values, built by the handlers from the Kubernetes API (pods, volume claims,
nodes, the KRaftQuorum's own status and annotations) and from a live DescribeQuorum. The
quorum types carry the field names of kraft.admin's QuorumInfo and ReplicaInfo, so
`QuorumInfo.from_admin` converts the admin client's answer without the planner importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class PodPhase(StrEnum):
    """A Pod's status.phase."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class PvcPhase(StrEnum):
    """A PersistentVolumeClaim's status.phase."""

    PENDING = "Pending"
    BOUND = "Bound"
    LOST = "Lost"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a replica (kraft.admin's Endpoint)."""

    listener: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One voter or observer as DescribeQuorum reports it (kraft.admin's ReplicaInfo)."""

    replica_id: int
    directory_id: str
    log_end_offset: int = 0
    last_fetch_timestamp_ms: int | None = None
    last_caught_up_timestamp_ms: int | None = None
    endpoints: tuple[Endpoint, ...] = ()
    lag: int = 0
    caught_up: bool = True

    @property
    def key(self) -> tuple[int, str]:
        """(node id, directory id): one incarnation of a node."""
        return (self.replica_id, self.directory_id)


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    """The live quorum as DescribeQuorum reports it (kraft.admin's QuorumInfo)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    kraft_version: int | None
    voters: tuple[ReplicaInfo, ...]
    observers: tuple[ReplicaInfo, ...] = ()

    @classmethod
    def from_admin(cls, info: Any) -> QuorumInfo:
        """Convert kraft.admin's QuorumInfo (or anything with its field names)."""

        def replica(r: Any) -> ReplicaInfo:
            return ReplicaInfo(
                replica_id=r.replica_id,
                directory_id=r.directory_id,
                log_end_offset=r.log_end_offset,
                last_fetch_timestamp_ms=r.last_fetch_timestamp_ms,
                last_caught_up_timestamp_ms=r.last_caught_up_timestamp_ms,
                endpoints=tuple(Endpoint(e.listener, e.host, e.port) for e in r.endpoints),
                lag=r.lag,
                caught_up=r.caught_up,
            )

        return cls(
            leader_id=info.leader_id,
            leader_epoch=info.leader_epoch,
            high_watermark=info.high_watermark,
            kraft_version=info.kraft_version,
            voters=tuple(replica(v) for v in info.voters),
            observers=tuple(replica(o) for o in info.observers),
        )


PLAINTEXT = "PLAINTEXT"
SSL = "SSL"


@dataclass(frozen=True, slots=True)
class ControllerListener:
    """One controller listener of the quorum's nodes: its name, security protocol (Kafka's
    PLAINTEXT or SSL) and port."""

    name: str
    protocol: str
    port: int

    @property
    def ssl(self) -> bool:
        return self.protocol == SSL

    def text(self) -> str:
        """`NAME:PROTOCOL:PORT`, as a pod's listeners annotation holds it."""
        return f"{self.name}:{self.protocol}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> ControllerListener | None:
        """`NAME:PROTOCOL:PORT`, None when it is not that."""
        name, _, rest = text.strip().partition(":")
        protocol, _, port = rest.partition(":")
        if not name or protocol not in (PLAINTEXT, SSL) or not port.isdigit():
            return None
        return cls(name, protocol, int(port))


DEFAULT_LISTENER = ControllerListener("CONTROLLER", PLAINTEXT, 9093)
"""The controller listener of a quorum with nothing recorded (and no TLS)."""


@dataclass(frozen=True, slots=True)
class TlsMigration:
    """status.tls.migration: the quorum moves from its controller listener to `target` (the
    other protocol, on the other port) by rolls; `phase` is the layout the pods are rolled to
    (0: the old listener alone, 1: both, the old one dialled, 2: both, the new one dialled,
    3: the new one alone)."""

    target: ControllerListener
    phase: int
    started_at: float = 0.0


@dataclass(frozen=True, slots=True)
class ListenerState:
    """The quorum's controller listeners as recorded in status.tls, and what the spec wants:
    `steady` is the listener it runs on (during a migration, the one it moves from),
    `wanted_ssl` whether spec.tls (or the default for a new quorum) asks for TLS."""

    steady: ControllerListener = DEFAULT_LISTENER
    migration: TlsMigration | None = None
    wanted_ssl: bool = False


@dataclass(frozen=True, slots=True)
class PodState:
    """One node's Pod. node_id and directory_id come from the label and annotation the
    operator set when it created the pod (the directory id its volume was formatted with)."""

    name: str
    node_id: int
    directory_id: str | None
    phase: PodPhase = PodPhase.RUNNING
    ready: bool = True
    node_name: str | None = None
    deleting: bool = False
    restart_count: int = 0
    waiting_reason: str | None = None
    spec_hash: str = ""
    auto_join: bool = True
    created_at: float = 0.0
    volume_gone_since: float | None = None
    """Set when the pod's status says its claim's volume is gone (the kubelet cannot mount
    it: a node-local volume lost with its Node): since when the pod has not been ready."""
    format_refused: str | None = None
    """Set when the format init container exited 3 (`kraft format` refused a volume formatted
    for another cluster or node): its termination message, or "" when it gave none."""
    manual_roll: bool = False
    """The pod carries kraft.dev/manual-rolling-update: "true": a person asked for its restart."""
    listeners: tuple[ControllerListener, ...] | None = None
    """The controller listeners its node binds, dialled one first (kraft.dev/controller-listeners);
    None for a pod made before the annotation: it binds the quorum's steady listener."""


@dataclass(frozen=True, slots=True)
class PvcState:
    """One node's PersistentVolumeClaim; directory_id is the annotation the operator set when
    it created the claim (a new claim always gets a new directory id). node_name is the Node a
    node-local volume is bound to (None for network-attached storage)."""

    name: str
    node_id: int
    directory_id: str
    phase: PvcPhase = PvcPhase.BOUND
    deleting: bool = False
    node_name: str | None = None


@dataclass(frozen=True, slots=True)
class NodeState:
    """A Kubernetes Node: whether it is Ready and since when (its Ready condition's
    lastTransitionTime, seconds since the epoch)."""

    name: str
    ready: bool
    since: float = 0.0


@dataclass(frozen=True, slots=True)
class Operation:
    """status.currentOperation: recorded before the action it names is run."""

    type: str
    target: str
    started_at: float
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything one reconcile saw.

    cluster_id, initial_voters and last_known_voters come from the resource's own status:
    the first two are the operator's records of what it formatted, the last is the voter set
    the quorum last reported, used only to judge a quorum loss while no quorum answers.
    fresh_ids are random Kafka Uuids drawn for this reconcile: the planner takes new cluster
    and directory ids from them, so it stays a pure function of its input.
    """

    generation: int
    pods: tuple[PodState, ...] = ()
    pvcs: tuple[PvcState, ...] = ()
    nodes: tuple[NodeState, ...] = ()
    quorum: QuorumInfo | None = None
    operation: Operation | None = None
    cluster_id: str | None = None
    initial_voters: tuple[tuple[int, str], ...] = ()
    last_known_voters: tuple[tuple[int, str], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    now: float = 0.0
    fresh_ids: tuple[str, ...] = ()
    tls_generation: str = ""
    """The trust generation of the quorum's PKI ("" without TLS): part of the pods' hash."""
    tls_problem: str | None = None
    """Why the quorum's PKI could not be made (TLS on): the planner reports it, Degraded."""
    listeners: ListenerState = field(default_factory=ListenerState)
    """The controller listeners recorded in status.tls and the protocol the spec wants
    (`kraft_operator.planner.tls_migration`)."""
