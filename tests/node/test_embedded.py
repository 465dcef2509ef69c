"""Embedding the node in-process with a state machine of one's own (the documented interface):
a single-voter quorum commits, snapshots and recovers the custom state after a restart."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Iterable
from pathlib import Path

from kraft.protocol.uuid import Uuid
from kraft.raft.state import Role
from kraft.server.config import build_config
from kraft.server.local import free_port
from kraft.server.node import KraftNode
from kraft.statemachine.base import CommittedBatch, StateMachine
from kraft.storage.format import format_storage


class Counter:
    """Sums signed 64-bit increments; its snapshot is the total."""

    def __init__(self) -> None:
        self.total = 0
        self._applied = 0
        self.loaded_from: int | None = None

    @property
    def applied_offset(self) -> int:
        return self._applied

    def apply(self, batch: CommittedBatch) -> list[object]:
        out: list[object] = []
        for offset, value in enumerate(batch.values, start=batch.base_offset):
            if offset >= self._applied and len(value) == 8:
                self.total += struct.unpack(">q", value)[0]
            out.append(self.total)
            self._applied = max(self._applied, offset + 1)
        return out

    def skip_to(self, offset: int) -> None:
        self._applied = max(self._applied, offset)

    def snapshot_values(self) -> list[bytes]:
        return [struct.pack(">q", self.total)]

    def load_snapshot(self, end_offset: int, values: Iterable[bytes]) -> None:
        self.total = sum(struct.unpack(">q", v)[0] for v in values)
        self._applied = end_offset
        self.loaded_from = end_offset


def _config(base: Path, fsync: bool) -> dict[str, str]:
    port = free_port("127.0.0.1")
    return {
        "node.id": "1", "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{port}", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{port}", "metadata.log.dir": str(base / "meta"),
        "controller.quorum.election.timeout.ms": "200",
        "metadata.log.max.record.bytes.between.snapshots": "200",
        "kraft.log.fsync": "true" if fsync else "false",
    }


async def _leader(node: KraftNode) -> None:
    for _ in range(600):
        if node.core is not None and node.core.role == Role.LEADER and node.core.high_watermark:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the single voter did not become leader")


async def test_custom_state_machine_commits_snapshots_and_recovers(tmp_path: Path) -> None:
    props = _config(tmp_path, fsync=True)
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    sm = Counter()
    assert isinstance(sm, StateMachine)
    node = KraftNode(build_config(props, {}), sm)
    await node.start()
    try:
        await _leader(node)
        results = await asyncio.gather(*(node.propose(struct.pack(">q", i)) for i in range(1, 101)))
        assert sm.total == 5050
        assert max(r for _, r in results) == 5050  # type: ignore[type-var]
        await asyncio.sleep(0.3)  # let a snapshot land
    finally:
        await node.stop()
    snapshots = list((tmp_path / "meta" / "__cluster_metadata-0").glob("*.checkpoint"))
    assert snapshots, "no snapshot written"

    again = Counter()
    node = KraftNode(build_config(props, {}), again)
    await node.start()
    try:
        await _leader(node)
        assert again.loaded_from is not None and again.loaded_from > 0
        _, total = await node.propose(struct.pack(">q", -50))
        assert total == 5000 and again.total == 5000
    finally:
        await node.stop()


async def test_fsync_off_still_commits(tmp_path: Path) -> None:
    props = _config(tmp_path, fsync=False)
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    node = KraftNode(build_config(props, {}))
    await node.start()
    try:
        await _leader(node)
        offset = await node.kv_put("k", b"v")
        assert offset > 0 and await node.kv_get("k") == b"v"
        assert await node.kv_cas("k", b"v", b"w") == (True, b"v")
        assert await node.kv_delete("k") is True
        assert await node.kv_get("k") is None
    finally:
        await node.stop()
