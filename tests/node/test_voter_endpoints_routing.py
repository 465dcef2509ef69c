"""KIP-853: once kraft.version is 1, the voters set in the log (its endpoints, as UpdateRaftVoter
changes them) decides where a node sends its requests, not `controller.quorum.voters`, which
only bootstraps a kraft.version 0 quorum (Kafka ignores the static voters then, and reports
it with its ignored-static-voters metric)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path

from kraft.cli.local import free_port
from kraft.config.node import build_config
from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.raft.state import Role
from kraft.server.node import KraftNode
from kraft.server.transport import one_shot
from kraft.storage.format import format_storage
from tests.node.conftest import own_host

CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"


async def _until(what: str, ok: Callable[[], bool], seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if ok():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _props(base: Path, node_id: int, host: str, port: int, voters: str) -> dict[str, str]:
    return {
        "node.id": str(node_id), "process.roles": "controller",
        "listeners": f"CONTROLLER://{host}:{port}", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": voters, "metadata.log.dir": str(base / f"n{node_id}"),
        "controller.quorum.election.timeout.ms": "300",
        "controller.quorum.fetch.timeout.ms": "1000",
    }


async def _upgrade(host: str, port: int) -> None:
    """UpdateFeatures(kraft.version=1) to the leader until it is done (it waits for every
    voter's UpdateRaftVoter)."""
    U = w.UpdateFeaturesRequestData
    body = U(feature_updates=[U.FeatureUpdateKey("kraft.version", 1)])
    for _ in range(100):
        _, resp = await one_shot(host, port, ApiKey.UPDATE_FEATURES, body, 10.0)
        codes = [resp.error_code, *(r.error_code for r in resp.results)]
        if all(c == ErrorCode.NONE for c in codes):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"kraft.version upgrade refused: {resp}")


async def test_after_the_upgrade_the_logs_voter_endpoints_route_requests(tmp_path: Path) -> None:
    host = own_host()
    ports = {1: free_port(host), 2: free_port(host)}
    voters = ",".join(f"{i}@{host}:{p}" for i, p in ports.items())
    props = {i: _props(tmp_path, i, host, ports[i], voters) for i in ports}
    for i in ports:
        format_storage(props[i], CLUSTER, out=io.StringIO())
    nodes = {i: KraftNode(build_config(props[i], {})) for i in ports}
    for n in nodes.values():
        await n.start()
    try:
        def leader() -> int:
            for i, n in nodes.items():
                if n.core is not None and n.core.role == Role.LEADER and n.core.high_watermark:
                    return i
            return -1

        await _until("a leader", lambda: leader() > 0)
        lead = leader()
        moved = 3 - lead
        core = nodes[lead].core
        assert core is not None and core.kraft_version == 0
        # kraft.version 0: controller.quorum.voters is the voters set and its addresses
        assert nodes[lead].address_of(moved, ()) == (host, ports[moved])
        await _upgrade(host, ports[lead])
        await _until("kraft.version 1 on both", lambda: all(
            n.core is not None and n.core.kraft_version == 1 for n in nodes.values()))
        # The follower moves to another port; the leader's controller.quorum.voters still
        # names the old one. Restarted, it tells the leader with UpdateRaftVoter.
        await nodes[moved].stop()
        new_port = free_port(host)
        props[moved] = _props(tmp_path, moved, host, new_port,
                              f"{lead}@{host}:{ports[lead]},{moved}@{host}:{new_port}")
        nodes[moved] = KraftNode(build_config(props[moved], {}))
        await nodes[moved].start()

        def published() -> bool:
            c = nodes[lead].core
            v = c.voters().get(moved) if c is not None else None
            return v is not None and any(e.port == new_port for e in v.endpoints)

        await _until("the moved voter's new endpoint in the leader's voters set", published)
        # every request of the leader's to it (BeginQuorumEpoch, Vote, EndQuorumEpoch) takes
        # this route
        assert nodes[lead].address_of(moved, ()) == (host, new_port)
    finally:
        for n in nodes.values():
            await n.stop()
