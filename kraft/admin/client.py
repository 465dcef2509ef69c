"""`QuorumClient`: describe and change a running quorum over the Kafka protocol.

Like `kafka-metadata-quorum --bootstrap-controller`, every call first asks a bootstrap
controller (the first of the list that answers) for DescribeCluster (EndpointType 2,
KIP-919), which names the active controller (the raft leader) and every voter's address; the
call itself then goes to the leader. The client does not retry: an `AdminError` says whether a
retry may succeed (`retriable`) and whether the goal is already met (`already_done`), so the
caller's own loop (a reconciler) decides.

    async with QuorumClient("ctl-0:9093,ctl-1:9093") as admin:
        quorum = await admin.describe_quorum()
        await admin.add_voter(4, "F5bNbPzXQWa7XaHxJ6Hj4w", [Endpoint(listener="CONTROLLER",
                                                                     host="ctl-4", port=9093)])
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kraft.admin.connection import AdminConnection, WireError
from kraft.admin.errors import AdminConnectionError, AdminError
from kraft.admin.http_credentials import HttpCredentials
from kraft.admin.models import (
    ClusterInfo,
    ControllerInfo,
    Endpoint,
    NodeHealth,
    QuorumInfo,
    ReplicaInfo,
)
from kraft.config.address import parse_host_port
from kraft.config.properties import PropertiesSyntaxError, read_properties
from kraft.config.tls import client_contexts
from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid

if TYPE_CHECKING:
    import aiohttp

METADATA_TOPIC = "__cluster_metadata"
CONTROLLER_ENDPOINTS = 2
"""DescribeCluster's EndpointType for controllers (KIP-919)."""
KRAFT_VERSION = "kraft.version"
UPGRADE = 1
"""UpdateFeatures' UpgradeType for an upgrade."""


def _directory_id(value: str | Uuid, what: str = "directory_id") -> Uuid:
    if isinstance(value, Uuid):
        uuid = value
    else:
        try:
            uuid = Uuid.parse(value)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
    if uuid.is_zero():
        raise ValueError(f"{what} must not be the zero uuid")
    return uuid


def _bootstrap(bootstrap: Sequence[str | tuple[str, int]] | str) -> list[tuple[str, int]]:
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = [item if isinstance(item, tuple) else parse_host_port(item, "address", need_host=True)
           for item in items if isinstance(item, tuple) or item.strip()]
    if not out:
        raise ValueError("bootstrap: at least one HOST:PORT is required")
    return out


def _ms(value: int) -> int | None:
    return None if value < 0 else value


class QuorumClient:
    """An async client of a quorum's controller listeners (use as `async with`).

    `bootstrap`: HOST:PORT of one or more controllers (a list of HOST:PORT texts or
    (host, port) pairs, or comma-separated text).
    `timeout_s`: the bound of each network step (connect, one request). `cluster_id`: when
    given, a quorum that reports another cluster id is refused (INCONSISTENT_CLUSTER_ID),
    and membership calls carry it so the leader checks it too. `http`: the token and TLS
    trust `node_health` presents to a node's HTTP port (`kraft.admin.http_credentials`).
    """

    def __init__(self, bootstrap: Sequence[str | tuple[str, int]] | str, *, timeout_s: float = 5.0,
                 cluster_id: str | None = None, client_id: str = "kraft-admin",
                 tls: Callable[[], ssl.SSLContext] | None = None,
                 command_config: str | Path | None = None,
                 http: HttpCredentials | None = None) -> None:
        """`tls`: speak TLS to the controller listeners with the context it gives; or
        `command_config`: a client properties file, as Kafka's tools take
        `--command-config` (`security.protocol=SSL` and the `ssl.*` client keys; a bad
        key raises ValueError naming it). Neither: PLAINTEXT. `http`: the
        credentials of the nodes' HTTP ports (token, TLS trust) for `node_health`."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if command_config is not None:
            if tls is not None:
                raise ValueError("give tls or command_config, not both")
            try:
                contexts = client_contexts(read_properties(command_config))
            except (OSError, PropertiesSyntaxError) as exc:
                raise ValueError(f"command_config {command_config}: {exc}") from None
            except ValueError as exc:  # SecurityConfigError, TlsMaterialError: the key named
                raise ValueError(f"command_config {command_config}: {exc}") from None
            tls = None if contexts is None else contexts.client_context
        self.bootstrap = _bootstrap(bootstrap)
        self.timeout_s = timeout_s
        self.cluster_id = cluster_id
        self.client_id = client_id
        self.tls = tls
        self._conns: dict[tuple[str, int], AdminConnection] = {}
        self._http: aiohttp.ClientSession | None = None
        self.http_credentials = http or HttpCredentials()

    async def __aenter__(self) -> QuorumClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection the client opened."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self._http is not None:
            await self._http.close()
            self._http = None

    # ------------------------------------------------------------------ plumbing

    async def _request(self, address: tuple[str, int], api_key: ApiKey, body: object,
                       timeout_s: float | None = None) -> tuple[AdminConnection, Any]:
        """One request to `address` over a kept connection; raises WireError."""
        t = self.timeout_s if timeout_s is None else timeout_s
        kept = self._conns.get(address)
        if kept is not None and not kept.closed:
            try:
                _, data = await kept.request(api_key, body, t)
                return kept, data
            except WireError as exc:
                self._conns.pop(address, None)
                if exc.timed_out:
                    raise
                # a kept connection the peer closed meanwhile (it restarted): one new one
        conn = AdminConnection(address[0], address[1], self.client_id, self.tls)
        await conn.connect(self.timeout_s)
        other = self._conns.get(address)
        if other is not None and not other.closed:  # a concurrent call connected first
            conn.close()
            conn = other
        self._conns[address] = conn
        try:
            _, data = await conn.request(api_key, body, t)
        except WireError:
            self._conns.pop(address, None)
            raise
        return conn, data

    async def describe_cluster(self) -> ClusterInfo:
        """DescribeCluster from the first bootstrap controller that answers.

        Raises AdminConnectionError when none answers, AdminError with the code a controller
        answered otherwise, and INCONSISTENT_CLUSTER_ID (not retriable) when `cluster_id`
        was given and the quorum reports another.
        """
        problems: list[str] = []
        answered: AdminError | None = None
        timed_out = False
        body = w.DescribeClusterRequestData(endpoint_type=CONTROLLER_ENDPOINTS)
        for host, port in self.bootstrap:
            try:
                _, resp = await self._request((host, port), ApiKey.DESCRIBE_CLUSTER, body)
            except WireError as exc:
                problems.append(str(exc))
                timed_out = timed_out or exc.timed_out
                continue
            if resp.error_code != ErrorCode.NONE:
                answered = AdminError(resp.error_code, f"DescribeCluster on {host}:{port}: "
                                      f"{resp.error_message or 'error answer'}")
                problems.append(str(answered))
                continue
            info = ClusterInfo(
                cluster_id=resp.cluster_id, leader_id=resp.controller_id,
                controllers=[ControllerInfo(node_id=b.broker_id, host=b.host, port=b.port)
                             for b in resp.brokers])
            if self.cluster_id is not None and info.cluster_id != self.cluster_id:
                raise AdminError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                                 f"{host}:{port} belongs to cluster {info.cluster_id}, "
                                 f"not {self.cluster_id}", retriable=False)
            return info
        if answered is not None:
            raise AdminError(answered.code, "DescribeCluster failed on every bootstrap "
                             "controller: " + "; ".join(problems))
        raise AdminConnectionError(
            "no bootstrap controller answered DescribeCluster: " + "; ".join(problems),
            timed_out=timed_out, addresses=tuple(f"{h}:{p}" for h, p in self.bootstrap))

    async def _leader(self) -> tuple[ClusterInfo, tuple[str, int]]:
        info = await self.describe_cluster()
        address = info.address_of(info.leader_id) if info.leader_id >= 0 else None
        if address is None:
            raise AdminError(ErrorCode.LEADER_NOT_AVAILABLE,
                             f"no active controller is known (DescribeCluster names leader "
                             f"{info.leader_id})")
        return info, address

    async def _leader_call(self, api_key: ApiKey, body: object, what: str,
                           timeout_s: float | None = None,
                           ) -> tuple[ClusterInfo, AdminConnection, Any]:
        info, address = await self._leader()
        try:
            conn, resp = await self._request(address, api_key, body, timeout_s)
        except WireError as exc:
            # names the leader, the address it advertises and who said so: a cluster DNS
            # name is reachable from inside the cluster only (`connect_problem` says so)
            told = ", ".join(f"{h}:{p}" for h, p in self.bootstrap)
            raise AdminConnectionError(f"{what} to the leader, controller {info.leader_id} "
                                       f"at {address[0]}:{address[1]} (the address it "
                                       f"advertises, from DescribeCluster of {told}): {exc}",
                                       timed_out=exc.timed_out,
                                       addresses=(f"{address[0]}:{address[1]}",)) from None
        return info, conn, resp

    # ------------------------------------------------------------------ describe

    async def describe_quorum(self) -> QuorumInfo:
        """DescribeQuorum from the leader: leader, epoch, high watermark, kraft.version, and
        every voter and observer with its directory id, endpoints, lag and timestamps."""
        D = w.DescribeQuorumRequestData
        body = D(topics=[D.TopicData(METADATA_TOPIC, [D.PartitionData(0)])])
        info, conn, resp = await self._leader_call(ApiKey.DESCRIBE_QUORUM, body,
                                                   "DescribeQuorum")
        if resp.error_code != ErrorCode.NONE:
            raise AdminError(resp.error_code, f"DescribeQuorum on node {info.leader_id}: "
                             f"{resp.error_message or 'error answer'}")
        parts = [p for t in resp.topics if t.topic_name == METADATA_TOPIC for p in t.partitions]
        if len(parts) != 1:
            raise AdminError(ErrorCode.UNKNOWN_SERVER_ERROR,
                             f"DescribeQuorum on node {info.leader_id} answered "
                             f"{len(parts)} partitions of {METADATA_TOPIC}", retriable=False)
        part = parts[0]
        if part.error_code != ErrorCode.NONE:
            raise AdminError(part.error_code, f"DescribeQuorum on node {info.leader_id}: "
                             f"{part.error_message or 'error answer'}")
        try:  # the finalized kraft.version now, not when the connection opened
            await conn.api_versions(self.timeout_s)
        except WireError as exc:
            self._conns.pop((conn.host, conn.port), None)
            raise AdminConnectionError(f"ApiVersions to the leader {info.leader_id}: {exc}",
                                       timed_out=exc.timed_out,
                                       addresses=(conn.address,)) from None
        endpoints = {n.node_id: [Endpoint(listener=e.name, host=e.host, port=e.port)
                                 for e in n.listeners] for n in resp.nodes}
        leader_row = next((r for r in part.current_voters if r.replica_id == part.leader_id),
                          None)
        leader_leo = leader_row.log_end_offset if leader_row is not None else part.high_watermark

        def replica(r: w.DescribeQuorumResponseData.ReplicaState) -> ReplicaInfo:
            return ReplicaInfo(
                replica_id=r.replica_id,
                directory_id=str(r.replica_directory_id),
                log_end_offset=r.log_end_offset,
                last_fetch_timestamp_ms=_ms(r.last_fetch_timestamp),
                last_caught_up_timestamp_ms=_ms(r.last_caught_up_timestamp),
                endpoints=endpoints.get(r.replica_id, []),
                lag=max(0, leader_leo - r.log_end_offset) if r.log_end_offset >= 0 else leader_leo,
                caught_up=r.log_end_offset >= 0 and r.log_end_offset >= part.high_watermark,
            )

        return QuorumInfo(
            cluster_id=info.cluster_id,
            leader_id=part.leader_id,
            leader_epoch=part.leader_epoch,
            high_watermark=part.high_watermark,
            kraft_version=conn.finalized_features.get(KRAFT_VERSION, 0)
            if conn.features_known else None,
            voters=[replica(r) for r in part.current_voters],
            observers=[replica(r) for r in part.observers],
        )

    async def _has_voter(self, voter_id: int, directory_id: Uuid) -> bool | None:
        """Whether the voter set holds the replica key; None when it could not be read."""
        try:
            quorum = await self.describe_quorum()
        except AdminError:
            return None
        return quorum.has_voter(voter_id, str(directory_id))

    # ------------------------------------------------------------------ membership

    def _change_timeout(self, timeout_s: float | None) -> float:
        return max(self.timeout_s, 30.0) if timeout_s is None else timeout_s

    async def add_voter(self, voter_id: int, directory_id: str | Uuid,
                        endpoints: Sequence[Endpoint], *, timeout_s: float | None = None) -> None:
        """AddRaftVoter (KIP-853): make the observer `voter_id` with `directory_id` a voter.

        Returns once the leader committed the new voter set. The leader refuses with
        REQUEST_TIMED_OUT (retriable) while another change is pending or the replica has
        not caught up. DUPLICATE_VOTER has `already_done` set when the voter set holds
        exactly this replica key (a retry of an add that went through); with another
        directory id under that voter id it is not done, and not retriable.
        `timeout_s` (default 30 s) bounds the leader's wait for the commit.
        """
        if voter_id < 0:
            raise ValueError(f"voter_id must be >= 0, got {voter_id}")
        dir_id = _directory_id(directory_id)
        if not endpoints:
            raise ValueError("endpoints: the new voter needs at least its controller listener")
        t = self._change_timeout(timeout_s)
        A = w.AddRaftVoterRequestData
        body = A(cluster_id=self.cluster_id, timeout_ms=int(t * 1000), voter_id=voter_id,
                 voter_directory_id=dir_id,
                 listeners=[A.Listener(e.listener, e.host, e.port) for e in endpoints])
        info, _, resp = await self._leader_call(ApiKey.ADD_RAFT_VOTER, body, "AddRaftVoter",
                                                t + 2)
        if resp.error_code == ErrorCode.NONE:
            return
        detail = resp.error_message or "error answer"
        if resp.error_code == ErrorCode.DUPLICATE_VOTER:
            present = await self._has_voter(voter_id, dir_id)
            if present:
                raise AdminError(resp.error_code, f"voter {voter_id} with directory id "
                                 f"{dir_id} is already a voter", retriable=False,
                                 already_done=True)
            raise AdminError(resp.error_code, f"AddRaftVoter {voter_id}/{dir_id} on node "
                             f"{info.leader_id}: {detail}" + (
                                 " (the voter set could not be read to check it)"
                                 if present is None else
                                 f" (voter {voter_id} is a voter with another directory id)"),
                             retriable=present is None)
        raise AdminError(resp.error_code, f"AddRaftVoter {voter_id}/{dir_id} on node "
                         f"{info.leader_id}: {detail}")

    async def remove_voter(self, voter_id: int, directory_id: str | Uuid, *,
                           timeout_s: float | None = None) -> None:
        """RemoveRaftVoter (KIP-853): remove the replica key (`voter_id`, `directory_id`).

        Returns once the leader committed the smaller voter set (a leader that removed
        itself resigns afterwards). VOTER_NOT_FOUND has `already_done` set when the voter
        set does not hold that key (a retry of a removal that went through); when the key
        is there (the removal would leave no voter) it is not done.
        """
        if voter_id < 0:
            raise ValueError(f"voter_id must be >= 0, got {voter_id}")
        dir_id = _directory_id(directory_id)
        t = self._change_timeout(timeout_s)
        body = w.RemoveRaftVoterRequestData(cluster_id=self.cluster_id, voter_id=voter_id,
                                            voter_directory_id=dir_id)
        info, _, resp = await self._leader_call(ApiKey.REMOVE_RAFT_VOTER, body,
                                                "RemoveRaftVoter", t)
        if resp.error_code == ErrorCode.NONE:
            return
        detail = resp.error_message or "error answer"
        if resp.error_code == ErrorCode.VOTER_NOT_FOUND:
            present = await self._has_voter(voter_id, dir_id)
            if present is False:
                raise AdminError(resp.error_code, f"voter {voter_id} with directory id "
                                 f"{dir_id} is not a voter", retriable=False,
                                 already_done=True)
            raise AdminError(resp.error_code, f"RemoveRaftVoter {voter_id}/{dir_id} on node "
                             f"{info.leader_id}: {detail}", retriable=present is None)
        raise AdminError(resp.error_code, f"RemoveRaftVoter {voter_id}/{dir_id} on node "
                         f"{info.leader_id}: {detail}")

    async def update_voter(self, voter_id: int, directory_id: str | Uuid,
                           endpoints: Sequence[Endpoint], *,
                           kraft_version_range: tuple[int, int] = (0, 1)) -> None:
        """UpdateRaftVoter (KIP-853): change a voter's endpoints and supported kraft.version
        range in the voter set (a voter sends this itself after a restart; this call does
        it on its behalf). The leader answers once the new record is appended."""
        if voter_id < 0:
            raise ValueError(f"voter_id must be >= 0, got {voter_id}")
        dir_id = _directory_id(directory_id)
        lo, hi = kraft_version_range
        if not 0 <= lo <= hi:
            raise ValueError(f"kraft_version_range {kraft_version_range} is not 0 <= min <= max")
        if not endpoints:
            raise ValueError("endpoints: at least the controller listener is required")
        quorum = await self.describe_quorum()
        U = w.UpdateRaftVoterRequestData
        body = U(cluster_id=self.cluster_id, current_leader_epoch=quorum.leader_epoch,
                 voter_id=voter_id, voter_directory_id=dir_id,
                 listeners=[U.Listener(e.listener, e.host, e.port) for e in endpoints],
                 kraft_version_feature=U.KRaftVersionFeature(lo, hi))
        info, _, resp = await self._leader_call(ApiKey.UPDATE_RAFT_VOTER, body,
                                                "UpdateRaftVoter")
        if resp.error_code != ErrorCode.NONE:
            raise AdminError(resp.error_code, f"UpdateRaftVoter {voter_id}/{dir_id} on node "
                             f"{info.leader_id} (epoch {quorum.leader_epoch})")

    async def update_features(self, *, kraft_version: int, validate_only: bool = False,
                              timeout_s: float | None = None) -> None:
        """UpdateFeatures for kraft.version: upgrade a static quorum (0) to a dynamic one (1).

        Every voter must already report support for the level and a directory id (voters
        started by this version do); asking for the current level succeeds at once; a
        downgrade is refused with INVALID_UPDATE_VERSION. `validate_only` checks without
        changing anything.
        """
        if kraft_version < 0:
            raise ValueError(f"kraft_version must be >= 0, got {kraft_version}")
        t = self._change_timeout(timeout_s)
        F = w.UpdateFeaturesRequestData
        body = F(timeout_ms=int(t * 1000), validate_only=validate_only,
                 feature_updates=[F.FeatureUpdateKey(KRAFT_VERSION, kraft_version,
                                                     upgrade_type=UPGRADE)])
        info, _, resp = await self._leader_call(ApiKey.UPDATE_FEATURES, body, "UpdateFeatures",
                                                t + 2)
        codes = [(resp.error_code, resp.error_message)]
        codes += [(r.error_code, r.error_message) for r in resp.results]
        for code, message in codes:
            if code != ErrorCode.NONE:
                raise AdminError(code, f"UpdateFeatures {KRAFT_VERSION}={kraft_version} on "
                                 f"node {info.leader_id}: {message or 'error answer'}")

    # ------------------------------------------------------------------ node health

    async def node_health(self, http_address: str) -> NodeHealth:
        """Read a node's own health from its admin HTTP port (HOST:PORT or a URL).

        Never raises for an unreachable node: it answers `live=False` with the reason.
        """
        creds = self.http_credentials
        base = creds.url(http_address)
        import aiohttp  # here: describing a quorum or formatting never pays for it

        if self._http is None:
            context = creds.ssl_context()
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s), headers=creds.headers(),
                connector=aiohttp.TCPConnector(ssl=context) if context is not None else None)
        session = self._http
        try:
            async with session.get(f"{base}/healthz") as r:
                live = r.status == 200
                await r.read()
            if not live:
                return NodeHealth(live=False, ready=False,
                                  reason=f"/healthz answered {r.status}")
            async with session.get(f"{base}/readyz") as r:
                ready = r.status == 200
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return NodeHealth(live=False, ready=False,
                              reason=f"{base} unreachable: {type(exc).__name__}: {exc}")
        reason = _reason(text, ready)
        status: dict[str, Any] = {}
        try:
            async with session.get(f"{base}/v1/status") as r:
                if r.status == 200:
                    loaded = json.loads(await r.text())
                    status = loaded if isinstance(loaded, dict) else {}
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            status = {}
        return NodeHealth(live=True, ready=ready, reason=reason,
                          leader_id=_int(status.get("leader_id")),
                          epoch=_int(status.get("epoch")),
                          high_watermark=_int(status.get("high_watermark")),
                          applied_offset=_int(status.get("applied_offset")))


def _reason(text: str, ready: bool) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("reason"), str):
        return str(body["reason"])
    return text.strip() or ("ready" if ready else "not ready")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
