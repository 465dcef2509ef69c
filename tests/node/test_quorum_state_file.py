"""The node writes quorum-state as Kafka does for the quorum's kraft.version: a static quorum
(controller.quorum.voters, kraft.version 0) gets data_version 0 with currentVoters."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from kraft.cli.local import free_port
from kraft.config.node import build_config
from kraft.protocol.uuid import Uuid
from kraft.raft.state import Role
from kraft.server.node import KraftNode
from kraft.storage.format import format_storage
from tests.node.conftest import own_host


async def test_static_quorum_writes_quorum_state_data_version_0(tmp_path: Path) -> None:
    host = own_host()
    port = free_port(host)
    props = {
        "node.id": "1", "process.roles": "controller",
        "listeners": f"CONTROLLER://{host}:{port}", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@{host}:{port}", "metadata.log.dir": str(tmp_path / "m"),
        "controller.quorum.election.timeout.ms": "200",
    }
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    node = KraftNode(build_config(props, {}))
    await node.start()
    try:
        for _ in range(600):
            if node.core is not None and node.core.role == Role.LEADER:
                break
            await asyncio.sleep(0.01)
        assert node.core is not None and node.core.role == Role.LEADER
    finally:
        await node.stop()
    stored = json.loads((tmp_path / "m" / "__cluster_metadata-0" / "quorum-state").read_text())
    assert stored["data_version"] == 0
    assert stored["currentVoters"] == [{"voterId": 1}]
    assert "votedDirectoryId" not in stored
    assert stored["leaderId"] == 1 and stored["votedId"] == 1


async def test_node_refuses_to_start_from_an_epoch_at_the_limit_until_reset(
        tmp_path: Path) -> None:
    """A quorum-state at epoch 2**31 - 1 (what a forged Vote left before the epoch limit) is
    refused at start, naming the file, the epoch and the recovery command; after
    `kraft recover reset-epoch` the node starts and leads."""
    import pytest

    from kraft.storage.quorum_state import QuorumStateData, QuorumStateStore, UnusableEpochError
    from kraft.storage.recover import reset_epoch

    host = own_host()
    port = free_port(host)
    props = {
        "node.id": "1", "process.roles": "controller",
        "listeners": f"CONTROLLER://{host}:{port}", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@{host}:{port}", "metadata.log.dir": str(tmp_path / "m"),
        "controller.quorum.election.timeout.ms": "200",
    }
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    (tmp_path / "m" / "__cluster_metadata-0").mkdir(exist_ok=True)
    store = QuorumStateStore(tmp_path / "m" / "__cluster_metadata-0")
    store.write(QuorumStateData(leader_epoch=2**31 - 1, voted_id=1, data_version=0,
                                current_voters=(1,)))
    forged = store.path.read_text()
    node = KraftNode(build_config(props, {}))
    with pytest.raises(UnusableEpochError) as exc:
        await node.start()
    text = str(exc.value)
    assert str(store.path) in text and "2147483647" in text and "reset-epoch" in text
    assert store.path.read_text() == forged  # refused, not rewritten
    await node.stop()
    reset_epoch(tmp_path / "m", node_id=1)  # the directory lock was given up
    node = KraftNode(build_config(props, {}))
    await node.start()
    try:
        for _ in range(600):
            if node.core is not None and node.core.role == Role.LEADER:
                break
            await asyncio.sleep(0.01)
        assert node.core is not None and node.core.role == Role.LEADER
        assert node.core.epoch == 1
    finally:
        await node.stop()
