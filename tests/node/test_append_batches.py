"""How a leader groups the writes that arrive together into batches (`KraftNode._submit_pending`):
in order, at most MAX_APPEND_BYTES of values and MAX_APPEND_VALUES values per batch, a value
larger than the byte limit alone in its own."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

import kraft.server.node as node_module
from kraft.protocol.uuid import Uuid
from kraft.raft.state import Role
from kraft.server.config import build_config
from kraft.server.local import free_port
from kraft.server.node import KraftNode
from kraft.statemachine.kv import KVStore, encode_put
from kraft.storage.format import format_storage


async def _leader(tmp_path: Path) -> KraftNode:
    """A single-voter quorum in this process, once it leads with a high watermark."""
    port = free_port("127.0.0.1")
    props = {
        "node.id": "1", "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{port}", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{port}", "metadata.log.dir": str(tmp_path),
    }
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    node = KraftNode(build_config(props, {}), KVStore())
    await node.start()
    for _ in range(1000):
        if node.core is not None and node.core.role == Role.LEADER and node.core.high_watermark:
            return node
        await asyncio.sleep(0.01)
    await node.stop()
    raise AssertionError("no leader")


async def _batches_of(node: KraftNode, values: list[bytes]) -> list[list[bytes]]:
    """Propose `values` in one loop turn (so they are pending together); the values of each
    data batch they landed in, after checking every one landed once, in order."""
    results = await asyncio.gather(*(node.propose(v) for v in values))
    offsets = [offset for offset, _ in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(values)
    assert node.md is not None
    batches = [[v or b"" for v in b.values()]
               for b in node.md.log.batches(offsets[0]) if not b.is_control]
    assert [v for b in batches for v in b] == values  # every value, once, in the order proposed
    return batches


async def test_writes_arriving_together_are_cut_into_batches_of_at_most_the_byte_limit(
        tmp_path: Path) -> None:
    node = await _leader(tmp_path)
    try:
        limit = node_module.MAX_APPEND_BYTES
        # sizes of the encoded values: seven of ~0.3 limit, one larger than the limit, then
        # small ones
        sizes = [limit * 3 // 10] * 7 + [limit + 1000] + [100] * 50
        values = [encode_put(f"k{i}", b"x" * (size - 16)) for i, size in enumerate(sizes)]
        per_batch = [[len(v) for v in b] for b in await _batches_of(node, values)]
        for sizes_in_batch in per_batch:
            assert len(sizes_in_batch) == 1 or sum(sizes_in_batch) <= limit, per_batch
        # cut greedily: three of ~0.3 limit fit, a fourth does not; the large value alone
        assert [len(s) for s in per_batch[:4]] == [3, 3, 1, 1], per_batch
        assert per_batch[3] == [len(values[7])]
        assert sum(len(s) for s in per_batch[4:]) == 50
    finally:
        await node.stop()


async def test_tiny_writes_are_cut_at_the_value_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_module, "MAX_APPEND_VALUES", 20)
    node = await _leader(tmp_path)
    try:
        values = [encode_put(f"t{i}", b"") for i in range(75)]
        counts = [len(b) for b in await _batches_of(node, values)]
        assert max(counts) == 20 and counts[:3] == [20, 20, 20], counts
    finally:
        await node.stop()
