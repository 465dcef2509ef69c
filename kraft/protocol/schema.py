"""Declarative message schemas: the single source of truth for every message we speak.

Each message is described once, in the shape of Kafka's JSON message definitions (field
name, type, versions, nullable versions, tag, tagged versions, default, ignorable). From this
table `gen_messages.py` writes the typed dataclasses in `messages.py` and `codec.py` compiles
one specialised encoder and decoder per (message, version).

Type strings: `int8 int16 int32 int64 uint16 float64 bool uuid string bytes records`, a
struct name (capitalised, with `fields`), or `[]T` for an array of either.

Field facts follow Kafka 4.1's message definitions. Where a flag could not be confirmed
against 4.1 (the `ignorable` flag of the tagged `NodeEndpoints` arrays in Vote,
BeginQuorumEpoch, EndQuorumEpoch and FetchSnapshot responses) we mark the field ignorable:
for a version without that field, a server simply drops the endpoints, which is what an older
peer expects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "MESSAGES",
    "FieldSpec",
    "MessageSpec",
    "Versions",
    "message_spec",
]

_MAX = 0x7FFF


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; `lo > hi` means "no versions"."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str) -> Versions:
        """Parse Kafka's version syntax: "none", "3", "3+" or "3-5"."""
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), _MAX)
        if "-" in text:
            a, b = text.split("-")
            return cls(int(a), int(b))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    def is_empty(self) -> bool:
        """True when the range contains no version."""
        return self.lo > self.hi

    def __str__(self) -> str:
        if self.is_empty():
            return "none"
        if self.hi == _MAX:
            return f"{self.lo}+"
        if self.lo == self.hi:
            return str(self.lo)
        return f"{self.lo}-{self.hi}"


_UNSET = object()

_SNAKE_OVERRIDES = {"KRaftVersionFeature": "kraft_version_feature"}

PRIMITIVE_TYPES = frozenset(
    {"int8", "int16", "int32", "int64", "uint16", "float64", "bool", "uuid", "string", "bytes",
     "records"}
)


def snake_case(name: str) -> str:
    """Kafka's CamelCase field name as a Python snake_case attribute name."""
    if name in _SNAKE_OVERRIDES:
        return _SNAKE_OVERRIDES[name]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass(frozen=True)
class FieldSpec:
    """One field of a message or struct, as in Kafka's JSON message definitions."""

    name: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: object
    ignorable: bool
    fields: tuple[FieldSpec, ...]

    @property
    def attr(self) -> str:
        """The snake_case Python attribute name."""
        return snake_case(self.name)

    @property
    def is_array(self) -> bool:
        """True for `[]T` fields."""
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """For arrays the element type, otherwise the type itself."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """True when the (element) type is a struct."""
        return self.element_type not in PRIMITIVE_TYPES

    @property
    def struct_name(self) -> str:
        """The struct's class name (only for struct or struct-array fields)."""
        return self.element_type

    def has_explicit_default(self) -> bool:
        """True when the schema states a default for this field."""
        return self.default is not _UNSET


def f(
    name: str,
    type: str,
    versions: str,
    *fields: FieldSpec,
    nullable: str = "none",
    tag: int | None = None,
    tagged: str | None = None,
    default: object = _UNSET,
    ignorable: bool = False,
) -> FieldSpec:
    """Declare a field (compact helper used by the tables below)."""
    if tag is not None and tagged is None:
        tagged = versions
    return FieldSpec(
        name=name,
        type=type,
        versions=Versions.parse(versions),
        nullable=Versions.parse(nullable),
        tagged=Versions.parse(tagged or "none"),
        tag=tag,
        default=default,
        ignorable=ignorable,
        fields=tuple(fields),
    )


@dataclass(frozen=True)
class MessageSpec:
    """A request or response body definition."""

    name: str
    api_key: int
    kind: str
    valid: Versions
    flexible: Versions
    fields: tuple[FieldSpec, ...]

    @property
    def class_name(self) -> str:
        """Name of the generated dataclass (e.g. `VoteRequestData`)."""
        return self.name + "Data"

    @property
    def api_name(self) -> str:
        """The api name without the Request/Response suffix (e.g. `Vote`)."""
        return self.name.removesuffix("Request").removesuffix("Response")


def _msg(
    name: str, api_key: int, valid: str, flexible: str, *fields: FieldSpec
) -> MessageSpec:
    kind = "request" if name.endswith("Request") else "response"
    return MessageSpec(name, api_key, kind, Versions.parse(valid), Versions.parse(flexible),
                       tuple(fields))


# -------------------------------------------------------------------------------------
# Shared shapes
# -------------------------------------------------------------------------------------


def _endpoints16(name: str, struct: str, versions: str, **kw: object) -> FieldSpec:
    """A KRaft endpoint list: {Name string, Host string, Port uint16}."""
    return f(name, f"[]{struct}", versions,
             f("Name", "string", versions),
             f("Host", "string", versions),
             f("Port", "uint16", versions),
             **kw)  # type: ignore[arg-type]


def _node_endpoints16(versions: str) -> FieldSpec:
    """Tagged NodeEndpoints {NodeId int32, Host string, Port uint16} in KRaft responses."""
    return f("NodeEndpoints", "[]NodeEndpoint", versions,
             f("NodeId", "int32", versions),
             f("Host", "string", versions),
             f("Port", "uint16", versions),
             tag=0, ignorable=True)


def _quorum_epoch_response(name: str, api_key: int) -> MessageSpec:
    return _msg(
        name, api_key, "0-1", "1+",
        f("ErrorCode", "int16", "0+"),
        f("Topics", "[]TopicData", "0+",
          f("TopicName", "string", "0+"),
          f("Partitions", "[]PartitionData", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("LeaderId", "int32", "0+"),
            f("LeaderEpoch", "int32", "0+"))),
        _node_endpoints16("1+"),
    )


def _voter_change_response(name: str, api_key: int, versions: str = "0") -> MessageSpec:
    return _msg(
        name, api_key, versions, "0+",
        f("ThrottleTimeMs", "int32", "0+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+", default=None),
    )


def _replica_state_fields() -> tuple[FieldSpec, ...]:
    return (
        f("ReplicaId", "int32", "0+"),
        f("ReplicaDirectoryId", "uuid", "2+"),
        f("LogEndOffset", "int64", "0+"),
        f("LastFetchTimestamp", "int64", "1+", default=-1, ignorable=True),
        f("LastCaughtUpTimestamp", "int64", "1+", default=-1, ignorable=True),
    )


# -------------------------------------------------------------------------------------
# The tables
# -------------------------------------------------------------------------------------

MESSAGES: tuple[MessageSpec, ...] = (
    # ---- ApiVersions (18) ----
    # v5 (Kafka 4.4, KIP-1242): the sender's ClusterId and NodeId, both or neither
    _msg("ApiVersionsRequest", 18, "0-5", "3+",
         f("ClientSoftwareName", "string", "3+", ignorable=True),
         f("ClientSoftwareVersion", "string", "3+", ignorable=True),
         f("ClusterId", "string", "5+", nullable="5+", default=None, ignorable=True),
         f("NodeId", "int32", "5+", default=-1, ignorable=True)),
    _msg("ApiVersionsResponse", 18, "0-5", "3+",
         f("ErrorCode", "int16", "0+"),
         f("ApiKeys", "[]ApiVersion", "0+",
           f("ApiKey", "int16", "0+"),
           f("MinVersion", "int16", "0+"),
           f("MaxVersion", "int16", "0+")),
         f("ThrottleTimeMs", "int32", "1+", ignorable=True),
         f("SupportedFeatures", "[]SupportedFeatureKey", "3+",
           f("Name", "string", "3+"),
           f("MinVersion", "int16", "3+"),
           f("MaxVersion", "int16", "3+"),
           tag=0, ignorable=True),
         f("FinalizedFeaturesEpoch", "int64", "3+", tag=1, default=-1, ignorable=True),
         f("FinalizedFeatures", "[]FinalizedFeatureKey", "3+",
           f("Name", "string", "3+"),
           f("MaxVersionLevel", "int16", "3+"),
           f("MinVersionLevel", "int16", "3+"),
           tag=2, ignorable=True),
         f("ZkMigrationReady", "bool", "3+", tag=3, default=False, ignorable=True)),

    # ---- Vote (52) ----
    _msg("VoteRequest", 52, "0-2", "0+",
         f("ClusterId", "string", "0+", nullable="0+", default=None),
         f("VoterId", "int32", "1+", default=-1, ignorable=True),
         f("Topics", "[]TopicData", "0+",
           f("TopicName", "string", "0+"),
           f("Partitions", "[]PartitionData", "0+",
             f("PartitionIndex", "int32", "0+"),
             f("ReplicaEpoch", "int32", "0+"),
             f("ReplicaId", "int32", "0+"),
             f("ReplicaDirectoryId", "uuid", "1+", ignorable=True),
             f("VoterDirectoryId", "uuid", "1+", ignorable=True),
             f("LastOffsetEpoch", "int32", "0+"),
             f("LastOffset", "int64", "0+"),
             f("PreVote", "bool", "2+")))),
    _msg("VoteResponse", 52, "0-2", "0+",
         f("ErrorCode", "int16", "0+"),
         f("Topics", "[]TopicData", "0+",
           f("TopicName", "string", "0+"),
           f("Partitions", "[]PartitionData", "0+",
             f("PartitionIndex", "int32", "0+"),
             f("ErrorCode", "int16", "0+"),
             f("LeaderId", "int32", "0+"),
             f("LeaderEpoch", "int32", "0+"),
             f("VoteGranted", "bool", "0+"))),
         _node_endpoints16("1+")),

    # ---- BeginQuorumEpoch (53) ----
    _msg("BeginQuorumEpochRequest", 53, "0-1", "1+",
         f("ClusterId", "string", "0+", nullable="0+", default=None),
         f("VoterId", "int32", "1+", default=-1, ignorable=True),
         f("Topics", "[]TopicData", "0+",
           f("TopicName", "string", "0+"),
           f("Partitions", "[]PartitionData", "0+",
             f("PartitionIndex", "int32", "0+"),
             f("VoterDirectoryId", "uuid", "1+", ignorable=True),
             f("LeaderId", "int32", "0+"),
             f("LeaderEpoch", "int32", "0+"))),
         _endpoints16("LeaderEndpoints", "LeaderEndpoint", "1+", ignorable=True)),
    _quorum_epoch_response("BeginQuorumEpochResponse", 53),

    # ---- EndQuorumEpoch (54) ----
    _msg("EndQuorumEpochRequest", 54, "0-1", "1+",
         f("ClusterId", "string", "0+", nullable="0+", default=None),
         f("Topics", "[]TopicData", "0+",
           f("TopicName", "string", "0+"),
           f("Partitions", "[]PartitionData", "0+",
             f("PartitionIndex", "int32", "0+"),
             f("LeaderId", "int32", "0+"),
             f("LeaderEpoch", "int32", "0+"),
             f("PreferredSuccessors", "[]int32", "0", ignorable=True),
             f("PreferredCandidates", "[]ReplicaInfo", "1+",
               f("CandidateId", "int32", "1+"),
               f("CandidateDirectoryId", "uuid", "1+"),
               ignorable=True))),
         _endpoints16("LeaderEndpoints", "LeaderEndpoint", "1+", ignorable=True)),
    _quorum_epoch_response("EndQuorumEpochResponse", 54),

    # ---- DescribeQuorum (55) ----
    _msg("DescribeQuorumRequest", 55, "0-2", "0+",
         f("Topics", "[]TopicData", "0+",
           f("TopicName", "string", "0+"),
           f("Partitions", "[]PartitionData", "0+",
             f("PartitionIndex", "int32", "0+")))),
    _msg("DescribeQuorumResponse", 55, "0-2", "0+",
         f("ErrorCode", "int16", "0+"),
         f("ErrorMessage", "string", "2+", nullable="2+", ignorable=True),
         f("Topics", "[]TopicData", "0+",
           f("TopicName", "string", "0+"),
           f("Partitions", "[]PartitionData", "0+",
             f("PartitionIndex", "int32", "0+"),
             f("ErrorCode", "int16", "0+"),
             f("ErrorMessage", "string", "2+", nullable="2+", ignorable=True),
             f("LeaderId", "int32", "0+"),
             f("LeaderEpoch", "int32", "0+"),
             f("HighWatermark", "int64", "0+"),
             f("CurrentVoters", "[]ReplicaState", "0+", *_replica_state_fields()),
             f("Observers", "[]ReplicaState", "0+", *_replica_state_fields()))),
         f("Nodes", "[]Node", "2+",
           f("NodeId", "int32", "2+"),
           _endpoints16("Listeners", "Listener", "2+"))),

    # ---- Fetch (1) ----
    _msg("FetchRequest", 1, "4-18", "12+",
         f("ClusterId", "string", "12+", nullable="12+", default=None, tag=0, ignorable=True),
         f("ReplicaId", "int32", "0-14", default=-1),
         f("ReplicaState", "ReplicaState", "15+",
           f("ReplicaId", "int32", "15+", default=-1),
           f("ReplicaEpoch", "int64", "15+", default=-1),
           tag=1),
         f("MaxWaitMs", "int32", "0+"),
         f("MinBytes", "int32", "0+"),
         f("MaxBytes", "int32", "3+", default=0x7FFFFFFF, ignorable=True),
         f("IsolationLevel", "int8", "4+", default=0, ignorable=True),
         f("SessionId", "int32", "7+", default=0, ignorable=True),
         f("SessionEpoch", "int32", "7+", default=-1, ignorable=True),
         f("Topics", "[]FetchTopic", "0+",
           f("Topic", "string", "0-12", ignorable=True),
           f("TopicId", "uuid", "13+", ignorable=True),
           f("Partitions", "[]FetchPartition", "0+",
             f("Partition", "int32", "0+"),
             f("CurrentLeaderEpoch", "int32", "9+", default=-1, ignorable=True),
             f("FetchOffset", "int64", "0+"),
             f("LastFetchedEpoch", "int32", "12+", default=-1, ignorable=False),
             f("LogStartOffset", "int64", "5+", default=-1, ignorable=True),
             f("PartitionMaxBytes", "int32", "0+"),
             f("ReplicaDirectoryId", "uuid", "17+", tag=0, ignorable=True),
             f("HighWatermark", "int64", "18+", tag=1, default=0x7FFFFFFFFFFFFFFF,
               ignorable=True))),
         f("ForgottenTopicsData", "[]ForgottenTopic", "7+",
           f("Topic", "string", "7-12", ignorable=True),
           f("TopicId", "uuid", "13+", ignorable=True),
           f("Partitions", "[]int32", "7+"),
           ignorable=False),
         f("RackId", "string", "11+", default="", ignorable=True)),
    _msg("FetchResponse", 1, "4-18", "12+",
         f("ThrottleTimeMs", "int32", "1+", ignorable=True),
         f("ErrorCode", "int16", "7+", ignorable=True),
         f("SessionId", "int32", "7+", default=0, ignorable=False),
         f("Responses", "[]FetchableTopicResponse", "0+",
           f("Topic", "string", "0-12", ignorable=True),
           f("TopicId", "uuid", "13+", ignorable=True),
           f("Partitions", "[]PartitionData", "0+",
             f("PartitionIndex", "int32", "0+"),
             f("ErrorCode", "int16", "0+"),
             f("HighWatermark", "int64", "0+"),
             f("LastStableOffset", "int64", "4+", default=-1, ignorable=True),
             f("LogStartOffset", "int64", "5+", default=-1, ignorable=True),
             f("DivergingEpoch", "EpochEndOffset", "12+",
               f("Epoch", "int32", "12+", default=-1),
               f("EndOffset", "int64", "12+", default=-1),
               tag=0),
             f("CurrentLeader", "LeaderIdAndEpoch", "12+",
               f("LeaderId", "int32", "12+", default=-1),
               f("LeaderEpoch", "int32", "12+", default=-1),
               tag=1),
             f("SnapshotId", "SnapshotId", "12+",
               f("EndOffset", "int64", "0+", default=-1),
               f("Epoch", "int32", "0+", default=-1),
               tag=2),
             f("AbortedTransactions", "[]AbortedTransaction", "4+",
               f("ProducerId", "int64", "4+"),
               f("FirstOffset", "int64", "4+"),
               nullable="4+", ignorable=True),
             f("PreferredReadReplica", "int32", "11+", default=-1, ignorable=False),
             f("Records", "records", "0+", nullable="0+"))),
         f("NodeEndpoints", "[]NodeEndpoint", "16+",
           f("NodeId", "int32", "16+"),
           f("Host", "string", "16+"),
           f("Port", "int32", "16+"),
           f("Rack", "string", "16+", nullable="16+", default=None),
           tag=0)),

    # ---- UpdateFeatures (57) ----
    _msg("UpdateFeaturesRequest", 57, "0-2", "0+",
         f("timeoutMs", "int32", "0+", default=60000),
         f("FeatureUpdates", "[]FeatureUpdateKey", "0+",
           f("Feature", "string", "0+"),
           f("MaxVersionLevel", "int16", "0+"),
           f("AllowDowngrade", "bool", "0"),
           f("UpgradeType", "int8", "1+", default=1)),
         f("ValidateOnly", "bool", "1+", default=False)),
    _msg("UpdateFeaturesResponse", 57, "0-2", "0+",
         f("ThrottleTimeMs", "int32", "0+"),
         f("ErrorCode", "int16", "0+"),
         f("ErrorMessage", "string", "0+", nullable="0+"),
         f("Results", "[]UpdatableFeatureResult", "0-1",
           f("Feature", "string", "0+"),
           f("ErrorCode", "int16", "0+"),
           f("ErrorMessage", "string", "0+", nullable="0+"),
           ignorable=True)),

    # ---- FetchSnapshot (59) ----
    _msg("FetchSnapshotRequest", 59, "0-1", "0+",
         f("ClusterId", "string", "0+", nullable="0+", default=None, tag=0),
         f("ReplicaId", "int32", "0+", default=-1),
         f("MaxBytes", "int32", "0+", default=0x7FFFFFFF),
         f("Topics", "[]TopicSnapshot", "0+",
           f("Name", "string", "0+"),
           f("Partitions", "[]PartitionSnapshot", "0+",
             f("Partition", "int32", "0+"),
             f("CurrentLeaderEpoch", "int32", "0+"),
             f("SnapshotId", "SnapshotId", "0+",
               f("EndOffset", "int64", "0+"),
               f("Epoch", "int32", "0+")),
             f("Position", "int64", "0+"),
             f("ReplicaDirectoryId", "uuid", "1+", tag=0, ignorable=True)))),
    _msg("FetchSnapshotResponse", 59, "0-1", "0+",
         f("ThrottleTimeMs", "int32", "0+", ignorable=True),
         f("ErrorCode", "int16", "0+", ignorable=False),
         f("Topics", "[]TopicSnapshot", "0+",
           f("Name", "string", "0+"),
           f("Partitions", "[]PartitionSnapshot", "0+",
             f("Index", "int32", "0+"),
             f("ErrorCode", "int16", "0+"),
             f("SnapshotId", "SnapshotId", "0+",
               f("EndOffset", "int64", "0+"),
               f("Epoch", "int32", "0+")),
             f("CurrentLeader", "LeaderIdAndEpoch", "0+",
               f("LeaderId", "int32", "0+"),
               f("LeaderEpoch", "int32", "0+"),
               tag=0),
             f("Size", "int64", "0+"),
             f("Position", "int64", "0+"),
             f("UnalignedRecords", "records", "0+"))),
         _node_endpoints16("1+")),

    # ---- DescribeCluster (60) ----
    _msg("DescribeClusterRequest", 60, "0-2", "0+",
         f("IncludeClusterAuthorizedOperations", "bool", "0+"),
         f("EndpointType", "int8", "1+", default=1),
         f("IncludeFencedBrokers", "bool", "2+")),
    _msg("DescribeClusterResponse", 60, "0-2", "0+",
         f("ThrottleTimeMs", "int32", "0+"),
         f("ErrorCode", "int16", "0+"),
         f("ErrorMessage", "string", "0+", nullable="0+", default=None),
         f("EndpointType", "int8", "1+", default=1),
         f("ClusterId", "string", "0+"),
         f("ControllerId", "int32", "0+", default=-1),
         f("Brokers", "[]DescribeClusterBroker", "0+",
           f("BrokerId", "int32", "0+"),
           f("Host", "string", "0+"),
           f("Port", "int32", "0+"),
           f("Rack", "string", "0+", nullable="0+", default=None),
           f("IsFenced", "bool", "2+")),
         f("ClusterAuthorizedOperations", "int32", "0+", default=-2147483648)),

    # ---- AddRaftVoter (80) / RemoveRaftVoter (81) / UpdateRaftVoter (82) ----
    # v1 (Kafka 4.2, KIP-1186): AckWhenCommitted; false answers once the voters record is
    # appended to the leader's log instead of once it is committed
    _msg("AddRaftVoterRequest", 80, "0-1", "0+",
         f("ClusterId", "string", "0+", nullable="0+", default=None),
         f("TimeoutMs", "int32", "0+"),
         f("VoterId", "int32", "0+"),
         f("VoterDirectoryId", "uuid", "0+"),
         _endpoints16("Listeners", "Listener", "0+"),
         f("AckWhenCommitted", "bool", "1+", default=True)),
    _voter_change_response("AddRaftVoterResponse", 80, "0-1"),
    _msg("RemoveRaftVoterRequest", 81, "0", "0+",
         f("ClusterId", "string", "0+", nullable="0+", default=None),
         f("VoterId", "int32", "0+"),
         f("VoterDirectoryId", "uuid", "0+")),
    _voter_change_response("RemoveRaftVoterResponse", 81),
    _msg("UpdateRaftVoterRequest", 82, "0", "0+",
         f("ClusterId", "string", "0+", nullable="0+", default=None),
         f("CurrentLeaderEpoch", "int32", "0+"),
         f("VoterId", "int32", "0+"),
         f("VoterDirectoryId", "uuid", "0+"),
         _endpoints16("Listeners", "Listener", "0+"),
         f("KRaftVersionFeature", "KRaftVersionFeature", "0+",
           f("MinSupportedVersion", "int16", "0+"),
           f("MaxSupportedVersion", "int16", "0+"))),
    _msg("UpdateRaftVoterResponse", 82, "0", "0+",
         f("ThrottleTimeMs", "int32", "0+"),
         f("ErrorCode", "int16", "0+"),
         f("CurrentLeader", "CurrentLeader", "0+",
           f("LeaderId", "int32", "0+", default=-1),
           f("LeaderEpoch", "int32", "0+", default=-1),
           f("Host", "string", "0+"),
           f("Port", "int32", "0+"),
           tag=0)),

    # ---- ControllerRegistration (70): an observer's supported features for the leader ----
    _msg("ControllerRegistrationRequest", 70, "0", "0+",
         f("ControllerId", "int32", "0+"),
         f("IncarnationId", "uuid", "0+"),
         f("ZkMigrationReady", "bool", "0+"),
         f("Listeners", "[]Listener", "0+",
           f("Name", "string", "0+"),
           f("Host", "string", "0+"),
           f("Port", "uint16", "0+"),
           f("SecurityProtocol", "int16", "0+")),
         f("Features", "[]Feature", "0+",
           f("Name", "string", "0+"),
           f("MinSupportedVersion", "int16", "0+"),
           f("MaxSupportedVersion", "int16", "0+"))),
    _msg("ControllerRegistrationResponse", 70, "0", "0+",
         f("ThrottleTimeMs", "int32", "0+"),
         f("ErrorCode", "int16", "0+"),
         f("ErrorMessage", "string", "0+", nullable="0+")),
)

_BY_NAME = {m.name: m for m in MESSAGES}


def message_spec(name: str) -> MessageSpec:
    """Look up a message definition by its Kafka name (e.g. "FetchRequest")."""
    return _BY_NAME[name]


def iter_structs(fields: tuple[FieldSpec, ...]) -> list[FieldSpec]:
    """Every struct-typed field below `fields`, children before parents (definition order)."""
    out: list[FieldSpec] = []
    for fs in fields:
        if fs.is_struct:
            out.extend(iter_structs(fs.fields))
            out.append(fs)
    return out
