"""Voters loaded from the snapshot a log starts from came from the log: the node hands them to
the core at the snapshot's last offset, not at -1 (the bootstrap checkpoint's place), so the
next leader writes only its LeaderChange, not KRaftVersion and Voters records again (as
Kafka's KRaftControlRecordStateMachine records a snapshot's sets at its offset)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from kraft.cli.local import free_port
from kraft.config.node import build_config
from kraft.raft.state import Role
from kraft.records.control import (
    Endpoint,
    KRaftVersionFeature,
    KRaftVersionRecord,
    LeaderChangeMessage,
    Voter,
    VotersRecord,
    decode_control_batch,
)
from kraft.records.snapshot_format import build_snapshot
from kraft.server.node import KraftNode
from kraft.storage.format import format_storage
from kraft.storage.layout import SnapshotId
from kraft.storage.loader import open_metadata_dir
from tests.node.conftest import own_host

CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"


async def test_voters_from_the_start_snapshot_are_not_written_again(tmp_path: Path) -> None:
    host = own_host()
    port = free_port(host)
    props = {
        "node.id": "1", "process.roles": "controller",
        "listeners": f"CONTROLLER://{host}:{port}", "controller.listener.names": "CONTROLLER",
        "metadata.log.dir": str(tmp_path / "m"), "controller.quorum.election.timeout.ms": "200",
        "controller.quorum.bootstrap.servers": f"{host}:{port}",
    }
    format_storage(props, CLUSTER, standalone=True, out=io.StringIO())
    with open_metadata_dir(tmp_path / "m") as md:
        me = Voter(1, md.meta.directory_id, (Endpoint("CONTROLLER", host, port),),
                   KRaftVersionFeature(0, 1))
        md.log.truncate_fully_and_start_at(50)
        md.log.flush()
        sid = SnapshotId(50, 4)
        md.snapshots.write(sid, [build_snapshot(4, 1, [], timestamp_ms=1,
                                                kraft_version=1, voters=VotersRecord((me,)))])
    node = KraftNode(build_config(props, {}))
    await node.start()
    try:
        for _ in range(600):
            core = node.core
            if core is not None and core.role == Role.LEADER and core.high_watermark:
                break
            await asyncio.sleep(0.01)
        assert node.core is not None and node.core.role == Role.LEADER
        assert node.core.epoch == 5
    finally:
        await node.stop()
    with open_metadata_dir(tmp_path / "m") as md:
        batches = [b for b in md.log.batches(50) if b.is_control]
        records = [r for b in batches for r in decode_control_batch(b)]
    assert [type(r) for r in records] == [LeaderChangeMessage], records
    assert not any(isinstance(r, KRaftVersionRecord | VotersRecord) for r in records)
