"""Authorization on the controller listener: Kafka's ControllerApis table, by principal.

Each request's api key needs one operation on the Cluster resource (`OPERATION_OF`, as
Kafka's `ControllerApis` checks it): ClusterAction for what nodes send each other, Alter
for membership and feature changes, Describe for what reads the quorum's state;
ApiVersions is open. Who holds an operation is `kraft.config.security.AuthorizerSettings`
(`super.users` and the static grant lists). Beyond Kafka, a request that names the replica
sending it (`claimed_id`) is served only when the principal names that node
(`kraft.authorizer.node.principal.pattern`): a node cannot Fetch, Vote or lead as another,
and a principal that is not a node's cannot claim to be one.

A refusal is answered CLUSTER_AUTHORIZATION_FAILED in the RPC's own error field (`refusal`)
and logged once per connection and api, with the principal.
"""

from __future__ import annotations

import logging

from kraft.config.security import AuthorizerSettings
from kraft.protocol.api import ApiKey, api_spec
from kraft.protocol.errors import ErrorCode
from kraft.protocol.framing import encode_response
from kraft.server.forward import FORWARD_KV_API_KEY, encode_answer
from kraft.server.frames import PeerInfo

log = logging.getLogger("kraft.server.authorize")

CLUSTER_ACTION = "ClusterAction"
ALTER = "Alter"
DESCRIBE = "Describe"

OPERATION_OF: dict[int, str] = {
    int(ApiKey.VOTE): CLUSTER_ACTION,
    int(ApiKey.BEGIN_QUORUM_EPOCH): CLUSTER_ACTION,
    int(ApiKey.END_QUORUM_EPOCH): CLUSTER_ACTION,
    int(ApiKey.FETCH): CLUSTER_ACTION,
    int(ApiKey.FETCH_SNAPSHOT): CLUSTER_ACTION,
    int(ApiKey.UPDATE_RAFT_VOTER): CLUSTER_ACTION,
    int(ApiKey.CONTROLLER_REGISTRATION): CLUSTER_ACTION,
    FORWARD_KV_API_KEY: CLUSTER_ACTION,
    int(ApiKey.ADD_RAFT_VOTER): ALTER,
    int(ApiKey.REMOVE_RAFT_VOTER): ALTER,
    int(ApiKey.UPDATE_FEATURES): ALTER,
    int(ApiKey.DESCRIBE_QUORUM): DESCRIBE,
    int(ApiKey.DESCRIBE_CLUSTER): DESCRIBE,
}
"""The operation each api needs (ApiVersions and any api not listed: none; the node does
not serve an api that is not listed here)."""

_LOGGED_MAX = 10_000
"""Connections remembered for the once-per-connection log (then forgotten all at once)."""


def _api_name(api_key: int) -> str:
    if api_key == FORWARD_KV_API_KEY:
        return "ForwardKv"
    try:
        return api_spec(api_key).name
    except (KeyError, ValueError):
        return str(api_key)


class Authorizer:
    """Checks each request of the controller listener (see the module docstring)."""

    def __init__(self, settings: AuthorizerSettings, node_id: int) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self._node_id = node_id
        self._logged: set[tuple[int, int]] = set()
        self.refused = 0
        """Requests refused so far."""

    def allows(self, api_key: int, peer: PeerInfo) -> bool:
        """The principal of `peer` holds the operation `api_key` needs (logs a refusal)."""
        operation = OPERATION_OF.get(api_key)
        if operation is None or self.settings.allows(peer.principal, operation):
            return True
        self._refused(api_key, peer, f"operation={operation}")
        return False

    def claim_allowed(self, api_key: int, claimed_id: int, peer: PeerInfo) -> bool:
        """A request naming `claimed_id` as its sender (a replica id >= 0) comes from that
        node's principal (logs a refusal)."""
        if not self.enabled or claimed_id < 0:
            return True
        named = self.settings.node_id_of(peer.principal)
        if named == claimed_id:
            return True
        self._refused(api_key, peer, f"claimed_replica={claimed_id} principal_node="
                      f"{'none' if named is None else named}")
        return False

    def _refused(self, api_key: int, peer: PeerInfo, detail: str) -> None:
        self.refused += 1
        key = (peer.connection_id, api_key)
        if key in self._logged:
            return
        if len(self._logged) >= _LOGGED_MAX:
            self._logged.clear()
        self._logged.add(key)
        log.warning("event=request_unauthorized replica=%d api=%s principal=%r peer=%s:%d "
                    "conn=%d %s error=CLUSTER_AUTHORIZATION_FAILED", self._node_id,
                    _api_name(api_key), peer.principal, peer.host, peer.port,
                    peer.connection_id, detail)


def refusal(api_key: int, version: int, correlation_id: int) -> bytes:
    """The response frame body (no size prefix) answering CLUSTER_AUTHORIZATION_FAILED in
    the top-level error field every controller RPC has (as Kafka's `getErrorResponse`)."""
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if api_key == FORWARD_KV_API_KEY:
        return encode_answer(correlation_id, code, message="not authorized")
    body = api_spec(api_key).response_class(error_code=int(code))
    return encode_response(ApiKey(api_key), version, correlation_id, body)[4:]
