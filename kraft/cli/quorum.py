"""What `kraft quorum` asks a running quorum and what it prints, as kafka-metadata-quorum does.

The calls go through the one Kafka admin client, `kraft.admin.QuorumClient`: like
`kafka-metadata-quorum --bootstrap-controller`, the leader is found with DescribeCluster
(EndpointType 2 = controllers, KIP-919) sent to any bootstrap controller; DescribeQuorum,
AddRaftVoter and RemoveRaftVoter then go to the node whose id is `ControllerId`. Unlike a
reconciler, a command waits (within its timeout) while no leader is known yet.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kraft.admin.client import QuorumClient
from kraft.admin.errors import AdminError
from kraft.admin.models import ZERO_DIRECTORY_ID, Endpoint, QuorumInfo, ReplicaInfo
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid

T = TypeVar("T")

Bootstrap = Sequence[tuple[str, int]]

Tls = Callable[[], ssl.SSLContext] | None
"""The context source of a TLS connection (`--command-config` with security.protocol=SSL)."""


class QuorumOutputError(Exception):
    """What DescribeQuorum answered cannot be printed (no leader row, a clock drift)."""


async def _once_led(bootstrap: Bootstrap, timeout_s: float,
                    call: Callable[[QuorumClient], Awaitable[T]], tls: Tls = None) -> T:
    """`call` on a client of `bootstrap`, again every 0.2 s while no leader is known, until
    `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    async with QuorumClient(list(bootstrap), timeout_s=timeout_s, tls=tls) as client:
        while True:
            try:
                return await call(client)
            except AdminError as exc:
                if exc.code != ErrorCode.LEADER_NOT_AVAILABLE:
                    raise
                if time.monotonic() > deadline:
                    raise AdminError(exc.code, "no active controller (leader) is known yet",
                                     retriable=True) from None
            await asyncio.sleep(0.2)


async def describe_quorum(bootstrap: Bootstrap, timeout_s: float = 10.0,
                          tls: Tls = None) -> QuorumInfo:
    """DescribeQuorum from the leader."""
    return await _once_led(bootstrap, timeout_s, lambda c: c.describe_quorum(), tls)


async def add_voter(bootstrap: Bootstrap, voter_id: int, directory_id: Uuid,
                    listeners: list[tuple[str, str, int]], timeout_s: float = 30.0,
                    tls: Tls = None) -> None:
    """AddRaftVoter on the leader; raises AdminError on an error answer."""
    endpoints = [Endpoint(listener=n, host=h, port=p) for n, h, p in listeners]
    await _once_led(bootstrap, timeout_s, lambda c: c.add_voter(
        voter_id, directory_id, endpoints, timeout_s=timeout_s), tls)


async def remove_voter(bootstrap: Bootstrap, voter_id: int, directory_id: Uuid,
                       timeout_s: float = 30.0, tls: Tls = None) -> None:
    """RemoveRaftVoter on the leader; raises AdminError on an error answer."""
    await _once_led(bootstrap, timeout_s, lambda c: c.remove_voter(
        voter_id, directory_id, timeout_s=timeout_s), tls)


# ---------------------------------------------------------------- output (MetadataQuorumCommand)


def _ts(value: int | None) -> int:
    return -1 if value is None else value


def _replica_json(r: ReplicaInfo) -> str:
    item: dict[str, Any] = {"id": r.replica_id,
                            "directoryId": None if r.directory_id == ZERO_DIRECTORY_ID
                            else r.directory_id}
    if r.endpoints:
        item["endpoints"] = [f"{e.listener}://{e.host}:{e.port}" for e in r.endpoints]
    return json.dumps(item)


def format_status(quorum: QuorumInfo, now_ms: int | None = None) -> str:
    """`describe --status` text, as kafka-metadata-quorum prints it."""
    leader_row = quorum.voter(quorum.leader_id)
    leader_leo = leader_row.log_end_offset if leader_row else quorum.high_watermark
    laggard = min(quorum.voters, key=lambda r: r.log_end_offset, default=None)
    max_lag = leader_leo - laggard.log_end_offset if laggard else 0
    if laggard is None or leader_row is None:
        lag_time = -1
    elif laggard.replica_id == quorum.leader_id:
        lag_time = 0
    elif (_ts(laggard.last_caught_up_timestamp_ms) < 0
          or _ts(leader_row.last_caught_up_timestamp_ms) < 0):
        lag_time = -1
    else:
        lag_time = (_ts(leader_row.last_caught_up_timestamp_ms)
                    - _ts(laggard.last_caught_up_timestamp_ms))
    rows = [
        ("ClusterId:", quorum.cluster_id),
        ("LeaderId:", str(quorum.leader_id)),
        ("LeaderEpoch:", str(quorum.leader_epoch)),
        ("HighWatermark:", str(quorum.high_watermark)),
        ("MaxFollowerLag:", str(max_lag)),
        ("MaxFollowerLagTimeMs:", str(lag_time)),
        ("CurrentVoters:", "[" + ", ".join(_replica_json(r) for r in quorum.voters) + "]"),
        ("CurrentObservers:", "[" + ", ".join(_replica_json(r) for r in quorum.observers) + "]"),
    ]
    return "\n".join(f"{label:<24}{value}" for label, value in rows)


def format_replication(quorum: QuorumInfo, human_readable: bool = False,
                       now_ms: int | None = None, endpoints: bool = False) -> str:
    """`describe --replication` as kafka-metadata-quorum prints it: the columns NodeId,
    DirectoryId, LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp, Status; the
    leader's row, the other voters' (Follower), then the observers'; every cell padded to its
    column's width and followed by a tab, every line ending with a newline. Lag is the
    leader's log end offset minus the row's; -1 stands for an unknown timestamp, and
    `human_readable` shows known ones as "N ms ago" (a timestamp in the future is an error,
    as in Kafka). `endpoints` adds our Endpoints column (each voter's listeners)."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    leader_row = quorum.voter(quorum.leader_id)
    if leader_row is None:
        raise QuorumOutputError(f"the leader {quorum.leader_id} is not among the voters "
                                "DescribeQuorum returned")
    leader_leo = leader_row.log_end_offset

    def ts(value: int | None, what: str) -> str:
        shown = _ts(value)
        if shown < 0 or not human_readable:
            return str(shown)
        if not 0 < shown <= now:
            raise QuorumOutputError(
                "Error while computing relative time, possible drift in system clock.\n"
                f"Current timestamp is {now}, {what} timestamp is {shown}")
        return f"{now - shown} ms ago"

    header = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
              "LastCaughtUpTimestamp", "Status"]
    if endpoints:
        header.append("Endpoints")
    ordered = [(leader_row, "Leader")]
    ordered += [(r, "Follower") for r in quorum.voters if r is not leader_row]
    ordered += [(r, "Observer") for r in quorum.observers]
    rows: list[list[str]] = []
    for r, status in ordered:
        row = [str(r.replica_id), r.directory_id,
               str(r.log_end_offset), str(leader_leo - r.log_end_offset),
               ts(r.last_fetch_timestamp_ms, "last fetch"),
               ts(r.last_caught_up_timestamp_ms, "last caught up"), status]
        if endpoints:
            eps = r.endpoints if status != "Observer" else []
            row.append(",".join(f"{e.listener}://{e.host}:{e.port}" for e in eps) or "-")
        rows.append(row)
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "".join("".join(cell.ljust(widths[i]) + "\t" for i, cell in enumerate(row)) + "\n"
                   for row in table)
