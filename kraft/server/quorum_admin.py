"""Admin calls to a running quorum over the Kafka protocol (what `kraft quorum` uses).

Like `kafka-metadata-quorum --bootstrap-controller`, the leader is found with DescribeCluster
(EndpointType 2 = controllers, KIP-919) sent to any bootstrap controller; DescribeQuorum,
AddRaftVoter and RemoveRaftVoter then go to the node whose id is `ControllerId`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from kraft.admin.connection import connect_problem
from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.server.translate import METADATA_TOPIC, response_to_core
from kraft.server.transport import RequestError, one_shot


class QuorumAdminError(Exception):
    """An admin call failed; the message names the call and the error."""


@dataclass(frozen=True)
class ClusterView:
    """What DescribeCluster told us: cluster id, leader id and controller addresses."""

    cluster_id: str
    leader_id: int
    controllers: dict[int, tuple[str, int]]


def parse_host_port(text: str) -> tuple[str, int]:
    """Parse HOST:PORT; raises ValueError naming the text."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


async def describe_cluster(bootstrap: list[tuple[str, int]], timeout_s: float = 10.0) -> ClusterView:
    """DescribeCluster against the first bootstrap controller that answers."""
    errors = []
    for host, port in bootstrap:
        try:
            _, resp = await one_shot(host, port, ApiKey.DESCRIBE_CLUSTER,
                                     w.DescribeClusterRequestData(endpoint_type=2), timeout_s)
        except (OSError, TimeoutError) as exc:
            errors.append(connect_problem(host, port, exc))
            continue
        except RequestError as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        if resp.error_code != ErrorCode.NONE:
            errors.append(f"{host}:{port}: error {resp.error_code} {resp.error_message or ''}")
            continue
        return ClusterView(resp.cluster_id, resp.controller_id,
                           {b.broker_id: (b.host, b.port) for b in resp.brokers})
    raise QuorumAdminError("DescribeCluster failed on every bootstrap controller: " + "; ".join(errors))


async def _call_leader(bootstrap: list[tuple[str, int]], api_key: ApiKey, body: object,
                       what: str, timeout_s: float, call_timeout_s: float | None = None) -> Any:
    """`what` to the leader DescribeCluster names; a failure to reach it names the leader,
    the address it advertises and which bootstrap controller said so."""
    view, (host, port) = await _leader_address(bootstrap, timeout_s)
    try:
        _, resp = await one_shot(host, port, api_key, body,
                                 timeout_s if call_timeout_s is None else call_timeout_s)
    except (OSError, TimeoutError, RequestError) as exc:
        problem = (str(exc) if isinstance(exc, RequestError)
                   else connect_problem(host, port, exc))
        told = ", ".join(f"{h}:{p}" for h, p in bootstrap)
        raise QuorumAdminError(
            f"{what} to the leader, controller {view.leader_id} at {host}:{port} (the address "
            f"it advertises, from DescribeCluster of {told}): {problem}") from None
    return view, resp


async def _leader_address(bootstrap: list[tuple[str, int]], timeout_s: float) -> tuple[ClusterView, tuple[str, int]]:
    deadline = time.monotonic() + timeout_s
    while True:
        view = await describe_cluster(bootstrap, timeout_s)
        if view.leader_id >= 0 and view.leader_id in view.controllers:
            return view, view.controllers[view.leader_id]
        if time.monotonic() > deadline:
            raise QuorumAdminError("no active controller (leader) is known yet")
        import asyncio

        await asyncio.sleep(0.2)


async def describe_quorum(bootstrap: list[tuple[str, int]], timeout_s: float = 10.0) -> tuple[ClusterView, m.DescribeQuorumResponse]:
    """DescribeQuorum from the leader."""
    D = w.DescribeQuorumRequestData
    view, data = await _call_leader(
        bootstrap, ApiKey.DESCRIBE_QUORUM,
        D(topics=[D.TopicData(METADATA_TOPIC, [D.PartitionData(0)])]), "DescribeQuorum", timeout_s)
    resp = response_to_core(data, "CONTROLLER")
    assert isinstance(resp, m.DescribeQuorumResponse)
    if resp.error_code != ErrorCode.NONE:
        raise QuorumAdminError(f"DescribeQuorum failed: {resp.error_code.name} "
                               f"{resp.error_message or ''}")
    return view, resp


async def add_voter(bootstrap: list[tuple[str, int]], voter_id: int, directory_id: Uuid,
                    listeners: list[tuple[str, str, int]], timeout_s: float = 30.0) -> None:
    """AddRaftVoter on the leader; raises QuorumAdminError on an error answer."""
    A = w.AddRaftVoterRequestData
    body = A(timeout_ms=int(timeout_s * 1000), voter_id=voter_id, voter_directory_id=directory_id,
             listeners=[A.Listener(n, h, p) for n, h, p in listeners])
    _, resp = await _call_leader(bootstrap, ApiKey.ADD_RAFT_VOTER, body, "AddRaftVoter",
                                 timeout_s, timeout_s + 5)
    if resp.error_code != ErrorCode.NONE:
        raise QuorumAdminError(f"AddRaftVoter failed: {_name(resp.error_code)} "
                               f"{resp.error_message or ''}".rstrip())


async def remove_voter(bootstrap: list[tuple[str, int]], voter_id: int, directory_id: Uuid,
                       timeout_s: float = 30.0) -> None:
    """RemoveRaftVoter on the leader; raises QuorumAdminError on an error answer."""
    body = w.RemoveRaftVoterRequestData(voter_id=voter_id, voter_directory_id=directory_id)
    _, resp = await _call_leader(bootstrap, ApiKey.REMOVE_RAFT_VOTER, body, "RemoveRaftVoter",
                                 timeout_s, timeout_s + 5)
    if resp.error_code != ErrorCode.NONE:
        raise QuorumAdminError(f"RemoveRaftVoter failed: {_name(resp.error_code)} "
                               f"{resp.error_message or ''}".rstrip())


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


# ---------------------------------------------------------------- output (MetadataQuorumCommand)


def _replica_json(r: m.ReplicaDescription, nodes: dict[int, tuple[m.Endpoint, ...]]) -> str:
    item: dict[str, Any] = {"id": r.replica_id,
                            "directoryId": str(r.replica_directory_id) if r.replica_directory_id else None}
    eps = nodes.get(r.replica_id)
    if eps:
        item["endpoints"] = [f"{e.name}://{e.host}:{e.port}" for e in eps]
    return json.dumps(item)


def format_status(view: ClusterView, resp: m.DescribeQuorumResponse, now_ms: int | None = None) -> str:
    """`describe --status` text, as kafka-metadata-quorum prints it."""
    nodes = dict(resp.nodes)
    leader_row = next((r for r in resp.current_voters if r.replica_id == resp.leader_id), None)
    leader_leo = leader_row.log_end_offset if leader_row else resp.high_watermark
    laggard = min(resp.current_voters, key=lambda r: r.log_end_offset, default=None)
    max_lag = leader_leo - laggard.log_end_offset if laggard else 0
    if laggard is None or leader_row is None:
        lag_time = -1
    elif laggard.replica_id == resp.leader_id:
        lag_time = 0
    elif laggard.last_caught_up_timestamp < 0 or leader_row.last_caught_up_timestamp < 0:
        lag_time = -1
    else:
        lag_time = leader_row.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    rows = [
        ("ClusterId:", view.cluster_id),
        ("LeaderId:", str(resp.leader_id)),
        ("LeaderEpoch:", str(resp.leader_epoch)),
        ("HighWatermark:", str(resp.high_watermark)),
        ("MaxFollowerLag:", str(max_lag)),
        ("MaxFollowerLagTimeMs:", str(lag_time)),
        ("CurrentVoters:", "[" + ", ".join(_replica_json(r, nodes) for r in resp.current_voters) + "]"),
        ("CurrentObservers:", "[" + ", ".join(_replica_json(r, nodes) for r in resp.observers) + "]"),
    ]
    return "\n".join(f"{label:<24}{value}" for label, value in rows)


def format_replication(resp: m.DescribeQuorumResponse, human_readable: bool = False,
                       now_ms: int | None = None, endpoints: bool = False) -> str:
    """`describe --replication` as kafka-metadata-quorum prints it: the columns NodeId,
    DirectoryId, LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp, Status; the
    leader's row, the other voters' (Follower), then the observers'; every cell padded to its
    column's width and followed by a tab, every line ending with a newline. Lag is the
    leader's log end offset minus the row's; -1 stands for an unknown timestamp, and
    `human_readable` shows known ones as "N ms ago" (a timestamp in the future is an error,
    as in Kafka). `endpoints` adds our Endpoints column (each voter's listeners)."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    nodes = dict(resp.nodes)
    leader_row = next((r for r in resp.current_voters if r.replica_id == resp.leader_id), None)
    if leader_row is None:
        raise QuorumAdminError(f"the leader {resp.leader_id} is not among the voters "
                               "DescribeQuorum returned")
    leader_leo = leader_row.log_end_offset

    def ts(value: int, what: str) -> str:
        if value < 0 or not human_readable:
            return str(value)
        if not 0 < value <= now:
            raise QuorumAdminError(
                "Error while computing relative time, possible drift in system clock.\n"
                f"Current timestamp is {now}, {what} timestamp is {value}")
        return f"{now - value} ms ago"

    header = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
              "LastCaughtUpTimestamp", "Status"]
    if endpoints:
        header.append("Endpoints")
    ordered = [(leader_row, "Leader")]
    ordered += [(r, "Follower") for r in resp.current_voters if r is not leader_row]
    ordered += [(r, "Observer") for r in resp.observers]
    rows: list[list[str]] = []
    for r, status in ordered:
        row = [str(r.replica_id), str(r.replica_directory_id or Uuid.ZERO),
               str(r.log_end_offset), str(leader_leo - r.log_end_offset),
               ts(r.last_fetch_timestamp, "last fetch"),
               ts(r.last_caught_up_timestamp, "last caught up"), status]
        if endpoints:
            eps = nodes.get(r.replica_id, ()) if status != "Observer" else ()
            row.append(",".join(f"{e.name}://{e.host}:{e.port}" for e in eps) or "-")
        rows.append(row)
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "".join("".join(cell.ljust(widths[i]) + "\t" for i, cell in enumerate(row)) + "\n"
                   for row in table)
