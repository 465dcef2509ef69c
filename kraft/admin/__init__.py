"""kraft.admin: the public API to manage a quorum (what the operator and users call).

- `QuorumClient`: async client of the controller listeners (Kafka protocol):
  `describe_quorum`, `describe_cluster`, `add_voter`, `remove_voter`, `update_voter`,
  `update_features`, and `node_health` (a node's admin HTTP port).
- Results are frozen pydantic models: `QuorumInfo`, `ReplicaInfo`, `Endpoint`, `ClusterInfo`,
  `ControllerInfo`, `NodeHealth`.
- Errors: `AdminError` (Kafka code and name, `retriable`, `already_done`) and
  `AdminConnectionError` (no answer; retriable).
- `KvClient` / `KvClusterClient` (`kraft.admin.kv_client`): the binary KV protocol's client.
- `HttpCredentials` (`kraft.admin.http_credentials`): the bearer token and TLS trust every
  client of a node's HTTP port or binary client port presents (docs/security.md).

`server.properties` (read, validate, write) is `kraft.config.server_properties`'s
`ServerProperties`. See docs/admin.md.
"""

from kraft.admin.client import QuorumClient
from kraft.admin.errors import RETRIABLE_CODES, AdminConnectionError, AdminError
from kraft.admin.http_credentials import CredentialsError, HttpCredentials
from kraft.admin.models import (
    ClusterInfo,
    ControllerInfo,
    Endpoint,
    NodeHealth,
    QuorumInfo,
    ReplicaInfo,
)

__all__ = [
    "RETRIABLE_CODES",
    "AdminConnectionError",
    "AdminError",
    "ClusterInfo",
    "ControllerInfo",
    "CredentialsError",
    "Endpoint",
    "HttpCredentials",
    "NodeHealth",
    "QuorumClient",
    "QuorumInfo",
    "ReplicaInfo",
]
