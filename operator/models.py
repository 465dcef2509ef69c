"""The `KRaftQuorum` custom resource: pydantic models of its spec and status.

These models are the single source of the resource: `kraft_operator.crdgen` writes
`crds/kraftquorums.kraft.dev.yaml` from them, and a test fails when the two drift apart.
Field names on the wire are camelCase (Kubernetes style); in Python they are snake_case.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

GROUP = "kraft.dev"
VERSION = "v1alpha1"
KIND = "KRaftQuorum"
PLURAL = "kraftquorums"
SINGULAR = "kraftquorum"
SHORT_NAMES = ("kq",)
CRD_NAME = f"{PLURAL}.{GROUP}"
API_VERSION = f"{GROUP}/{VERSION}"

MIN_REPLICAS = 1
MAX_REPLICAS = 9

# A Kubernetes resource quantity ("10Gi", "500m", "1.5"), as the API server's own pattern.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# Kafka's text form of a Uuid: 16 bytes in URL-safe base64 without padding (22 characters).
KAFKA_UUID_PATTERN = r"^[A-Za-z0-9_-]{22}$"

# Annotations a user sets on a KRaftQuorum object.
PAUSE_ANNOTATION = "kraft.dev/pause-reconciliation"
RECOVER_ANNOTATION = "kraft.dev/recover-quorum-from"
APPROVE_ROLLOUT_ANNOTATION = "kraft.dev/approve-rollout"
MANUAL_ROLL_ANNOTATION = "kraft.dev/manual-rolling-update"
"""On a quorum pod, "true": restart that pod once, by the rolling rules (its leader resigns
first, a majority stays healthy), as Strimzi's strimzi.io/manual-rolling-update does."""

# Labels and annotations the operator sets on the pods and volumes it owns.
NODE_ID_LABEL = "kraft.dev/node-id"
DIRECTORY_ID_ANNOTATION = "kraft.dev/directory-id"
POD_SPEC_HASH_ANNOTATION = "kraft.dev/pod-spec-hash"
AUTO_JOIN_ANNOTATION = "kraft.dev/auto-join"


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel
    )

    def to_k8s(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class VolumePolicy(StrEnum):
    """What happens to a node's PersistentVolumeClaim when the node leaves."""

    DELETE = "Delete"
    RETAIN = "Retain"


class UpdateStrategyType(StrEnum):
    """How pod-affecting spec changes reach the pods."""

    ROLLING_UPDATE = "RollingUpdate"
    MANUAL = "Manual"


class StorageSpec(_Model):
    """The persistent volume of each node (its metadata log and snapshots)."""

    size: str = Field(
        default="1Gi",
        pattern=QUANTITY_PATTERN,
        description="Requested size of each node's volume, a Kubernetes quantity (e.g. 10Gi).",
    )
    storage_class_name: str | None = Field(
        default=None,
        description="StorageClass of the volumes; the cluster's default class when unset.",
    )
    on_scale_down: VolumePolicy = Field(
        default=VolumePolicy.DELETE,
        description=(
            "What happens to a node's volume once the node has been removed from the voters on "
            "scale-down: Delete (a later scale-up formats a fresh volume) or Retain."
        ),
    )
    on_delete: VolumePolicy = Field(
        default=VolumePolicy.RETAIN,
        description=(
            "What happens to the volumes when the KRaftQuorum is deleted: Retain (the default: "
            "the logs outlive the resource) or Delete (owner references remove them)."
        ),
    )


class ResourceRequirements(_Model):
    """Compute resources of the kraft container, as in a Pod's container resources."""

    requests: dict[str, int | str] = Field(
        default_factory=dict,
        description="Minimum resources (e.g. cpu: 500m, memory: 512Mi).",
    )
    limits: dict[str, int | str] = Field(
        default_factory=dict,
        description="Maximum resources (e.g. memory: 1Gi).",
    )


class PodTemplateOverrides(_Model):
    """What of each node's Pod a user may shape; the operator renders the rest."""

    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels on every pod (the app.kubernetes.io/* labels are the operator's).",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Extra annotations on every pod."
    )
    affinity: dict[str, Any] | None = Field(
        default=None,
        description="Pod affinity, as a Pod's spec.affinity (e.g. podAntiAffinity across nodes).",
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="Tolerations, as a Pod's spec.tolerations."
    )
    topology_spread_constraints: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Topology spread constraints, as a Pod's spec.topologySpreadConstraints.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node selector, as a Pod's spec.nodeSelector."
    )
    priority_class_name: str | None = Field(
        default=None, description="PriorityClass of the pods."
    )
    service_account_name: str | None = Field(
        default=None, description="ServiceAccount the pods run as."
    )


class PodDisruptionBudgetSpec(_Model):
    """The PodDisruptionBudget the operator keeps for the quorum's pods."""

    enabled: bool = Field(
        default=True,
        description=(
            "Keep a PodDisruptionBudget sized so a voluntary eviction never breaks the "
            "majority: maxUnavailable = replicas - (replicas // 2 + 1), 0 for one replica."
        ),
    )


class IPBlock(_Model):
    """An address block, as a NetworkPolicyPeer's ipBlock."""

    cidr: str = Field(min_length=1, description="The block, e.g. 10.0.0.0/16.")
    except_: list[str] | None = Field(default=None, alias="except",
                                      description="Blocks inside cidr left out.")


class NetworkPolicyPeer(_Model):
    """A source of traffic, as a NetworkPolicy rule's `from` entry (networking.k8s.io/v1)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "has(self.ipBlock) != (has(self.podSelector) || has(self.namespaceSelector))",
        "message": "a peer is either an ipBlock or podSelector/namespaceSelector",
    }]})

    pod_selector: dict[str, Any] | None = Field(
        default=None,
        description="Pods (a LabelSelector); with namespaceSelector, pods in those namespaces; "
                    "alone, pods in the quorum's namespace.")
    namespace_selector: dict[str, Any] | None = Field(
        default=None, description="Namespaces (a LabelSelector); {} is every namespace.")
    ip_block: IPBlock | None = Field(default=None, description="An address block.")

    @model_validator(mode="after")
    def _one_kind(self) -> NetworkPolicyPeer:
        if self.ip_block is not None and (self.pod_selector is not None
                                          or self.namespace_selector is not None):
            raise ValueError("ipBlock cannot be combined with podSelector or namespaceSelector")
        if self.ip_block is None and self.pod_selector is None and \
                self.namespace_selector is None:
            raise ValueError("a peer needs podSelector, namespaceSelector or ipBlock")
        return self


class NetworkPolicySpec(_Model):
    """The NetworkPolicy the operator keeps for the quorum's pods (ingress only)."""

    enabled: bool = Field(
        default=True,
        description=(
            "Keep a NetworkPolicy: the controller port (9093) open only to the quorum's own "
            "pods and the operator's, the HTTP port (8080) to those and to httpFrom. It takes "
            "effect only where the cluster's network plugin enforces NetworkPolicies."
        ),
    )
    http_from: list[NetworkPolicyPeer] | None = Field(
        default=None,
        json_schema_extra={"maxItems": 64},
        description=(
            "Who else may reach the HTTP port (the KV API, /metrics), as NetworkPolicyPeer "
            "entries. Unset: every pod of the quorum's namespace. An empty list: nobody else "
            "(the quorum's pods and the operator only). The kubelet's probes are never blocked."
        ),
    )


class UpdateStrategy(_Model):
    """How a pod-affecting change (image, resources, config, pod overrides) is rolled out."""

    type: UpdateStrategyType = Field(
        default=UpdateStrategyType.ROLLING_UPDATE,
        description=(
            "RollingUpdate: restart one pod at a time, unready pods first, then followers, the "
            "leader last after it resigns. Manual: the same order, started only once the "
            "annotation kraft.dev/approve-rollout names the object's current generation."
        ),
    )
    ready_timeout_seconds: int = Field(
        default=600,
        ge=1,
        description=(
            "How long a restarted pod may take to be ready and caught up before the rollout "
            "halts (Degraded=RolloutHalted)."
        ),
    )


class IssuerRef(_Model):
    """A cert-manager Issuer or ClusterIssuer (not supported yet: refused as Degraded)."""

    name: str = Field(min_length=1, description="Name of the Issuer or ClusterIssuer.")
    kind: str | None = Field(default=None, pattern=r"^(Issuer|ClusterIssuer)$",
                             description="Issuer (when unset) or ClusterIssuer.")
    group: str | None = Field(default=None,
                              description="API group of the issuer (cert-manager.io when unset).")


class TlsSpec(_Model):
    """mTLS on the controller listener from a PKI the operator issues (docs/security.md)."""

    enabled: bool | None = Field(
        default=None,
        description=(
            "Serve the controller listener with mTLS (CONTROLLER:SSL, ssl.client.auth="
            "required) from certificates the operator issues. Unset: on for a new quorum; a "
            "quorum formatted before without TLS stays plaintext until this is set to true "
            "(status.tls.enabled says which applies). Changing it on a running quorum "
            "migrates it by three rolls (status.tls.migration)."
        ),
    )
    validity_days: int = Field(
        default=365, ge=2, le=3650,
        description="Validity of the certificates (and CAs) the operator issues, in days.",
    )
    renewal_days: int = Field(
        default=30, ge=1, le=3649,
        description=(
            "A certificate (or CA the operator generated) is renewed this many days before it "
            "expires."
        ),
    )
    ca_secret_name: str | None = Field(
        default=None, min_length=1, max_length=253,
        description=(
            "A Secret of the quorum's namespace holding your own CA (ca.crt and ca.key, or "
            "tls.crt and tls.key): it signs the node and operator certificates, and the "
            "operator never renews it (every certificate in ca.crt is trusted, so put the new "
            "CA beside the old one to move to it)."
        ),
    )
    issuer_ref: IssuerRef | None = Field(
        default=None,
        description="A cert-manager issuer: not supported yet (the quorum goes Degraded).",
    )

    @model_validator(mode="after")
    def _window(self) -> TlsSpec:
        if self.renewal_days >= self.validity_days:
            raise ValueError(f"tls.renewalDays ({self.renewal_days}) must be less than "
                             f"tls.validityDays ({self.validity_days})")
        return self


def _kafka_text(value: object) -> str:
    """A spec.config value as server.properties holds it: strings as they are, integers in
    decimal, booleans as `true`/`false` (as Kafka writes them); anything else is refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise ValueError(f"{value!r} is not a string, an integer or a boolean")


ConfigValue = Annotated[str, BeforeValidator(_kafka_text),
                        WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True})]
"""One spec.config value: a string, an integer or a boolean, rendered as text."""

# No CEL rule checks spec.config's values: they are untyped in the schema (a string, an
# integer or a boolean cannot be said structurally), and a real API server refuses a CRD
# whose rule reaches an untyped value ("unable to convert structural schema to CEL
# declarations"). `_kafka_text` refuses the rest: the quorum goes Degraded, InvalidSpec.


class KRaftQuorumSpec(_Model):
    """The desired state of a KRaft controller quorum."""

    replicas: int = Field(
        default=3,
        ge=MIN_REPLICAS,
        le=MAX_REPLICAS,
        description=(
            "Number of voters (1 to 9). Odd counts are recommended: an even count tolerates no "
            "more failures than the odd count below it."
        ),
    )
    image: str = Field(
        default="kraft-quorum:latest",
        min_length=1,
        description="Container image that runs `kraft run` (and `kraft format` in the init container).",
    )
    image_pull_policy: str = Field(
        default="IfNotPresent",
        pattern=r"^(Always|IfNotPresent|Never)$",
        description="Image pull policy of the pods: Always, IfNotPresent or Never.",
    )
    cluster_id: str | None = Field(
        default=None,
        pattern=KAFKA_UUID_PATTERN,
        max_length=22,
        description=(
            "Cluster id to format a new quorum with (Kafka's 22-character Uuid text). Generated "
            "and recorded in status.clusterId when unset; immutable once set, and when first "
            "set after the quorum was formatted it must be the id in status.clusterId."
        ),
    )
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        json_schema_extra={"default": {}},
        description="Compute resources of the kraft container.",
    )
    storage: StorageSpec = Field(
        default_factory=StorageSpec,
        json_schema_extra={"default": {}},
        description="Each node's persistent volume and what happens to it when the node leaves.",
    )
    config: dict[str, ConfigValue] = Field(
        default_factory=dict,
        json_schema_extra={"maxProperties": 256},
        description=(
            "Extra server.properties for every node (e.g. controller.quorum.fetch.timeout.ms). "
            "Values are strings, integers or booleans (2000 and true are written as Kafka "
            "writes them); another value makes the quorum Degraded (InvalidSpec). Keys the "
            "operator renders itself (node.id, process.roles, "
            "listeners, log dirs, the quorum's bootstrap servers, auto-join) are refused."
        ),
    )
    pod_template: PodTemplateOverrides = Field(
        default_factory=PodTemplateOverrides,
        json_schema_extra={"default": {}},
        description="Overrides of each node's Pod: scheduling, labels and annotations.",
    )
    pod_disruption_budget: PodDisruptionBudgetSpec = Field(
        default_factory=PodDisruptionBudgetSpec,
        json_schema_extra={"default": {}},
        description="The PodDisruptionBudget of the quorum's pods.",
    )
    network_policy: NetworkPolicySpec = Field(
        default_factory=NetworkPolicySpec,
        json_schema_extra={"default": {}},
        description="The NetworkPolicy of the quorum's pods.",
    )
    auto_join: bool = Field(
        default=True,
        description=(
            "Run joining nodes with KIP-853 auto-join (controller.quorum.auto.join.enable), so "
            "a new or re-formatted node adds itself once caught up; when false the operator "
            "calls AddRaftVoter itself."
        ),
    )
    paused: bool = Field(
        default=False,
        description=(
            "Stop every change (status is still observed and reported); the annotation "
            "kraft.dev/pause-reconciliation: \"true\" does the same."
        ),
    )
    update_strategy: UpdateStrategy = Field(
        default_factory=UpdateStrategy,
        json_schema_extra={"default": {}},
        description="How pod-affecting changes are rolled out.",
    )
    tls: TlsSpec = Field(
        default_factory=TlsSpec,
        json_schema_extra={"default": {}},
        description="mTLS on the controller listener from an operator-issued PKI.",
    )
    node_failure_grace_period_seconds: int = Field(
        default=300,
        ge=0,
        description=(
            "How long a node's pod may be unable to run (its Node NotReady or gone, its "
            "node-local volume lost) before the operator replaces it with a new volume."
        ),
    )


class LeaderStatus(_Model):
    """The quorum's current leader as the live DescribeQuorum reports it."""

    id: int = Field(description="Node id of the leader (-1 when there is none).")
    epoch: int = Field(description="Leader epoch.")


class ReplicaStatus(_Model):
    """One voter or observer as the live DescribeQuorum reports it."""

    id: int = Field(description="Node id.")
    directory_id: str = Field(description="Directory id of this incarnation of the node.")
    endpoint: str | None = Field(default=None, description="Controller endpoint (host:port).")
    pod: str | None = Field(default=None, description="Pod that runs this incarnation.")
    lag: int | None = Field(default=None, description="Leader's log end offset minus this replica's.")
    caught_up: bool = Field(default=False, description="Whether the leader counts it caught up.")
    last_caught_up_time: str | None = Field(
        default=None, description="When it was last caught up (RFC 3339)."
    )


class VoterRef(_Model):
    """A node id and the directory id of one incarnation of that node."""

    id: int = Field(ge=0, description="Node id.")
    directory_id: str = Field(pattern=KAFKA_UUID_PATTERN, description="Directory id.")


class OperationStatus(_Model):
    """The operation in progress, recorded before it starts so a restarted operator resumes it."""

    type: str = Field(description="Kind of operation (e.g. AddingVoter, RemovingVoter, Rolling).")
    target: str = Field(description="What it acts on, e.g. a node id or node-id:directory-id.")
    started_at: str = Field(description="When it started (RFC 3339).")
    attempt: int = Field(default=1, ge=1, description="How many times it has been tried.")


class Condition(_Model):
    """A status condition, as in metav1.Condition."""

    type: str = Field(description="Condition type (Ready, Quorate, Progressing, Degraded, ...).")
    status: str = Field(pattern=r"^(True|False|Unknown)$", description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word saying why.")
    message: str = Field(default="", description="Human-readable detail.")
    last_transition_time: str | None = Field(
        default=None, description="When the status last changed (RFC 3339)."
    )
    observed_generation: int | None = Field(
        default=None, description="The generation the condition was computed for."
    )


class TlsMigrationStatus(_Model):
    """A TLS migration in progress: the quorum moves to a second controller listener of the
    other protocol by three rolls (docs/security.md)."""

    protocol: str = Field(pattern=r"^(PLAINTEXT|SSL)$",
                          description="The protocol the quorum moves to: SSL or PLAINTEXT.")
    listener: str = Field(description="The listener it moves to (CONTROLLER_SSL, ...).")
    port: int = Field(ge=1, le=65535, description="That listener's port.")
    phase: int = Field(
        ge=0, le=3,
        description=(
            "The layout the pods are rolled to: 0 the old listener alone, 1 both with the old "
            "one dialled, 2 both with the new one dialled, 3 the new listener alone. A phase "
            "starts once the roll of the one before is done and the quorum is healthy."
        ),
    )
    layout: str | None = Field(
        default=None,
        description="The phase's listeners, the dialled one first (NAME:PROTOCOL:PORT,...).")
    message: str | None = Field(default=None, description="What the phase does.")
    started_at: str | None = Field(default=None,
                                   description="When the migration started (RFC 3339).")


class TlsStatus(_Model):
    """What the operator's PKI serves (no key material) and the controller listener."""

    enabled: bool = Field(
        description=(
            "Whether the quorum's controller listener is served with mTLS (during a migration: "
            "the one it moves from; it flips when the migration completes)."
        ),
    )
    listener: str | None = Field(
        default=None,
        description="The controller listener's name (CONTROLLER unless a migration moved it).")
    port: int | None = Field(default=None, ge=1, le=65535,
                             description="The controller listener's port (9093 or 9094).")
    migration: TlsMigrationStatus | None = Field(
        default=None, description="The TLS migration in progress, if any.")
    cluster_ca_not_after: str | None = Field(
        default=None, description="When the cluster CA signing the nodes expires (RFC 3339).")
    clients_ca_not_after: str | None = Field(
        default=None, description="When the clients CA expires (RFC 3339).")
    ca_renewal: str | None = Field(
        default=None, description="The step of a CA renewal in progress, if any.")


class KRaftQuorumStatus(_Model):
    """The observed state, rebuilt from a live DescribeQuorum on every reconcile."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(oldSelf.clusterId) || "
                    "(has(self.clusterId) && self.clusterId == oldSelf.clusterId)",
                    "message": "status.clusterId is immutable once set",
                }
            ]
        }
    )

    cluster_id: str | None = Field(default=None, max_length=22,
                                   description="Cluster id the nodes are formatted with.")
    observed_generation: int | None = Field(
        default=None,
        description="The generation whose spec is fully realized (set only once it is).",
    )
    initial_voters: list[VoterRef] = Field(
        default_factory=list,
        description="The voters a new quorum was formatted with (--initial-controllers).",
    )
    leader: LeaderStatus | None = Field(default=None, description="Current leader and epoch.")
    high_watermark: int | None = Field(default=None, description="The quorum's high watermark.")
    kraft_version: int | None = Field(default=None, description="The kraft.version feature level.")
    voters: list[ReplicaStatus] = Field(default_factory=list, description="The voters.")
    observers: list[ReplicaStatus] = Field(default_factory=list, description="The observers.")
    replicas: int | None = Field(
        default=None, description="Number of voters (the scale subresource reads it)."
    )
    selector: str | None = Field(
        default=None, description="Label selector of the pods (the scale subresource reads it)."
    )
    voters_ready: str | None = Field(
        default=None, description="Caught-up voters with a ready pod, over the desired count."
    )
    healthy_voters: int | None = Field(
        default=None, description="Voters caught up with a ready pod (kubectl's Healthy column)."
    )
    current_operation: OperationStatus | None = Field(
        default=None, description="The operation in progress, if any."
    )
    tls: TlsStatus | None = Field(default=None, description="The controller listener's TLS.")
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description=(
            "Ready, Quorate, Progressing, Degraded, ReconciliationPaused, AwaitingApproval."
        ),
    )


# CEL rules on the whole object (spec and status together), both transition rules.
# spec.clusterId is immutable once set, except that a wrong one (stored where these rules did
# not run) may be corrected to the id the quorum was formatted with. One first set after the
# quorum was formatted must be that id: a GitOps source may pin it, but no other id can apply
# to volumes formatted already. A mismatch stored before the rules existed never blocks the
# operator's status writes (the planner reports it as Degraded=ClusterIdMismatch).
CLUSTER_ID_FIXED = (
    "spec.clusterId can only be set to status.clusterId, the id this KRaftQuorum recorded; "
    "to run on volumes of another cluster id, delete the KRaftQuorum and create it again "
    "with spec.clusterId set to that id (storage.onDelete: Retain keeps its claims)")
"""What the CEL rule and the operator's ForeignVolume condition both say: a KRaftQuorum's
cluster id, once recorded, changes only by creating the object again."""

QUORUM_VALIDATIONS: list[dict[str, str]] = [
    {
        "rule": "!has(oldSelf.spec.clusterId) || (has(self.spec.clusterId) && "
        "(self.spec.clusterId == oldSelf.spec.clusterId || (has(self.status) && "
        "has(self.status.clusterId) && self.spec.clusterId == self.status.clusterId)))",
        "message": "spec.clusterId is immutable once set (a wrong one can only be corrected "
        "to status.clusterId)",
        "fieldPath": ".spec.clusterId",
    },
    {
        "rule": "!has(self.spec.clusterId) || !has(self.status) || "
        "!has(self.status.clusterId) || self.spec.clusterId == self.status.clusterId || "
        "(has(oldSelf.spec.clusterId) && oldSelf.spec.clusterId == self.spec.clusterId)",
        "message": CLUSTER_ID_FIXED,
        "fieldPath": ".spec.clusterId",
    }
]


class KRaftQuorum(_Model):
    """A KRaft controller quorum managed by kraft-operator."""

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: str = Field(default=KIND)
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: KRaftQuorumSpec
    status: KRaftQuorumStatus | None = None


# --- spec.config: the seam for the ServerProperties model ---------------------------------


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One refused entry of spec.config."""

    key: str
    reason: str

    def __str__(self) -> str:
        return f"spec.config[{self.key!r}]: {self.reason}"


class ConfigChecker:
    """Checks spec.config; the reconcile handler calls `check_config` before rendering pods.

    Today it refuses the keys the operator renders itself and malformed keys. When
    kraft.config's ServerProperties model is available, `property_check` is set to a function
    that parses one key/value pair against it and returns an error text (or None).
    """

    OPERATOR_KEYS: ClassVar[frozenset[str]] = frozenset(
        {
            "node.id",
            "process.roles",
            "listeners",
            "advertised.listeners",
            "controller.listener.names",
            "listener.security.protocol.map",
            "log.dirs",
            "metadata.log.dir",
            "controller.quorum.voters",
            "controller.quorum.bootstrap.servers",
            "controller.quorum.auto.join.enable",
            "http.listener",
            "http.peers",
        }
    )

    UNRENDERED_PREFIXES: ClassVar[tuple[str, ...]] = ("kraft.http.ssl.", "kraft.http.auth.")
    """The HTTP port's TLS and token keys: they name files the pods do not have and turn the
    probes' port to HTTPS, neither of which the operator renders yet (docs/security.md)."""

    def __init__(self, property_check: Any = None) -> None:
        self.property_check = property_check

    def check(self, config: Mapping[str, str]) -> list[ConfigProblem]:
        problems: list[ConfigProblem] = []
        for key, value in sorted(config.items()):
            if not key or key != key.strip() or any(c in key for c in "=: \t\n"):
                problems.append(ConfigProblem(key, "not a server.properties key"))
            elif key in self.OPERATOR_KEYS:
                problems.append(ConfigProblem(key, "set by the operator; it cannot be overridden"))
            elif key.startswith(self.UNRENDERED_PREFIXES):
                problems.append(ConfigProblem(key, "the HTTP port's TLS and tokens need files "
                                              "mounted in the pods and HTTPS probes, which the "
                                              "operator does not render yet"))
            elif "\n" in value:
                problems.append(ConfigProblem(key, "a value cannot span lines"))
            elif self.property_check is not None:
                error = self.property_check(key, value)
                if error:
                    problems.append(ConfigProblem(key, str(error)))
        return problems


def server_properties_check(key: str, value: str) -> str | None:
    """One spec.config entry checked against kraft.config's ServerProperties model: an unknown
    key (with the nearest known one as a hint) or a bad value; None when it is acceptable."""
    from kraft.config.server_properties import ServerProperties

    problems = ServerProperties.validate_overrides({key: value})
    return "; ".join(p.message for p in problems) or None


def check_config(config: Mapping[str, str], checker: ConfigChecker | None = None) -> list[ConfigProblem]:
    """The problems of spec.config (empty when it is acceptable); by default each entry is
    also checked against the ServerProperties model."""
    return (checker or ConfigChecker(property_check=server_properties_check)).check(config)
