"""The typed results of `kraft.admin` calls (pydantic v2, frozen).

Directory ids are Kafka's Uuid text (22 characters of URL-safe base64); a replica whose
directory id is unknown (a kraft.version 0 quorum) shows the all-zero id
`AAAAAAAAAAAAAAAAAAAAAA`. Timestamps are milliseconds since the epoch, None when the
leader has none for that replica.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kraft.protocol.uuid import Uuid

ZERO_DIRECTORY_ID = str(Uuid.ZERO)
"""The directory id shown for a replica whose directory id is not known."""


def check_directory_id(value: str) -> str:
    """Return `value` when it is a canonical Uuid text; raises ValueError naming it."""
    Uuid.parse(value)
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Endpoint(_Frozen):
    """One listener of a controller: its name (e.g. CONTROLLER), host and port."""

    listener: str = Field(min_length=1)
    host: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


class ReplicaInfo(_Frozen):
    """One voter or observer as the leader's DescribeQuorum reports it.

    `lag` is the leader's log end offset minus this replica's (0 for the leader itself).
    `caught_up` is true when the replica's log end offset has reached the high watermark,
    i.e. it holds every committed record at the time of the call.
    """

    replica_id: int
    directory_id: str
    log_end_offset: int
    last_fetch_timestamp_ms: int | None
    last_caught_up_timestamp_ms: int | None
    endpoints: list[Endpoint]
    lag: int
    caught_up: bool

    @field_validator("directory_id")
    @classmethod
    def _directory_id(cls, value: str) -> str:
        return check_directory_id(value)


class QuorumInfo(_Frozen):
    """The quorum as its leader describes it (DescribeQuorum v2 plus the leader's finalized
    kraft.version from ApiVersions; None when the leader did not announce features)."""

    cluster_id: str | None = None
    leader_id: int
    leader_epoch: int
    high_watermark: int
    kraft_version: int | None
    voters: list[ReplicaInfo]
    observers: list[ReplicaInfo]

    def voter(self, replica_id: int) -> ReplicaInfo | None:
        """The voter with this id, or None."""
        return next((r for r in self.voters if r.replica_id == replica_id), None)

    def observer(self, replica_id: int) -> ReplicaInfo | None:
        """The observer with this id (the first if several directories fetch), or None."""
        return next((r for r in self.observers if r.replica_id == replica_id), None)

    def has_voter(self, replica_id: int, directory_id: str) -> bool:
        """True when the voter set holds exactly this replica key (id and directory id)."""
        return any(r.replica_id == replica_id and r.directory_id == directory_id
                   for r in self.voters)


class ControllerInfo(_Frozen):
    """One controller of DescribeCluster: node id and the address clients reach it at."""

    node_id: int
    host: str
    port: int


class ClusterInfo(_Frozen):
    """DescribeCluster of the controllers (KIP-919): cluster id, the active controller
    (the raft leader; -1 when none is known) and every voter's address."""

    cluster_id: str
    leader_id: int
    controllers: list[ControllerInfo]

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """(host, port) of a controller, or None when DescribeCluster did not list it."""
        c = next((c for c in self.controllers if c.node_id == node_id), None)
        return None if c is None else (c.host, c.port)


class NodeHealth(_Frozen):
    """A node's own view, read from its admin HTTP port.

    `live`: `/healthz` answered 200 (the process and its event loop run). `ready`: `/readyz`
    answered 200; `reason` is the node's explanation (or why the node could not be asked).
    The rest comes from `/v1/status` and is None when that could not be read.
    """

    live: bool
    ready: bool
    reason: str
    leader_id: int | None = None
    epoch: int | None = None
    high_watermark: int | None = None
    applied_offset: int | None = None
