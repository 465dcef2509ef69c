"""How a leader groups the writes that arrive together into batches (`KvFront.submit_pending`):
in order, at most MAX_APPEND_BYTES of values and MAX_APPEND_VALUES values per batch, a value
larger than the byte limit alone in its own; and a lone write reaching the core before the
fetches queued with it."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

import kraft.server.kv_front as kv_module
from kraft.cli.local import free_port
from kraft.config.node import build_config
from kraft.protocol.uuid import Uuid
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.raft.state import Role
from kraft.records.batch import iter_batches
from kraft.server.kv_api import KvCall, KvOp, WriteRefusedError
from kraft.server.node import KraftNode
from kraft.statemachine.kv import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    KVStore,
    encode_cas,
    encode_put,
)
from kraft.storage.format import format_storage
from kraft.storage.log import MAX_BATCH_BYTES
from tests.node.conftest import own_host


async def _leader(tmp_path: Path, **extra: str) -> KraftNode:
    """A single-voter quorum in this process, once it leads with a high watermark (`extra`:
    more properties, by name)."""
    host = own_host()
    port = free_port(host)
    props = {
        "node.id": "1", "process.roles": "controller",
        "listeners": f"CONTROLLER://{host}:{port}", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@{host}:{port}", "metadata.log.dir": str(tmp_path),
        **extra,
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
    results = await asyncio.gather(*(node.kv.propose(v) for v in values))
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
        limit = kv_module.MAX_APPEND_BYTES
        # sizes of the encoded values: seven of ~0.3 limit, one larger than the limit (a
        # value of MAX_VALUE_BYTES, the most a PUT takes, with its key), then small ones
        sizes = [limit * 3 // 10] * 7 + [MAX_VALUE_BYTES + 16] + [100] * 50
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
    monkeypatch.setattr(kv_module, "MAX_APPEND_VALUES", 20)
    node = await _leader(tmp_path)
    try:
        values = [encode_put(f"t{i}", b"") for i in range(75)]
        counts = [len(b) for b in await _batches_of(node, values)]
        assert max(counts) == 20 and counts[:3] == [20, 20, 20], counts
    finally:
        await node.stop()


def _spy_on_core(node: KraftNode) -> list[str]:
    """The names of the events the core handles from now on, in order (a request by its
    request's type)."""
    core = node.core
    assert core is not None
    handled: list[str] = []
    handle = core.handle

    def recording(item: ev.Event, now: int) -> list[Any]:
        handled.append(type(item.request).__name__ if isinstance(item, ev.RequestReceived)
                       else type(item).__name__)
        return handle(item, now)

    core.handle = recording  # type: ignore[method-assign]
    return handled


def _observer_fetch(node: KraftNode) -> m.FetchRequest:
    """An observer's (replica 7) fetch from the leader's log end: parked until records come."""
    assert node.core is not None and node.md is not None
    epoch = node.core.epoch
    return m.FetchRequest(7, Uuid.random(), epoch, node.md.log.log_end_offset, epoch,
                          max_wait_ms=5000)


async def test_a_lone_write_is_handled_before_the_fetches_queued_with_it(tmp_path: Path) -> None:
    """One client writing one value at a time: its batch reaches the core ahead of the fetches
    that arrived in the same loop turn (followers refetching after the previous write), so the
    leader appends first and answers those fetches with the records."""
    node = await _leader(tmp_path)
    try:
        handled = _spy_on_core(node)
        fetch = asyncio.ensure_future(node.core_request(7, _observer_fetch(node)))
        await asyncio.sleep(0)  # the fetch is queued, and the core loop is due to run
        write = node.kv.submit(encode_put("k", b"v"))  # before it does
        response, records = await asyncio.wait_for(fetch, 10)
        offset, _ = await asyncio.wait_for(write, 10)
        assert [h for h in handled if h in ("Append", "FetchRequest")][:2] == \
            ["Append", "FetchRequest"], handled
        assert isinstance(response, m.FetchResponse) and records  # answered with the write
        assert any(b.base_offset <= offset <= b.last_offset for b in iter_batches(records))
    finally:
        await node.stop()



class _Done:
    """A completion of `submit_many` (the node's `Completion`)."""

    def __init__(self) -> None:
        self.fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    def done(self) -> bool:
        return self.fut.done()

    def set_result(self, result: object, /) -> None:
        self.fut.set_result(result)

    def set_exception(self, exc: BaseException, /) -> None:
        self.fut.set_exception(exc)


async def test_a_write_above_a_limit_is_refused_before_anything_is_proposed(
        tmp_path: Path) -> None:
    """Every Python write passes `KvFront.submit` or `submit_many`: a key or value above its
    limit, or a record above MAX_RECORD_BYTES, is refused with WriteRefusedError naming it,
    nothing of it reaches the log, the writes around it commit, and no batch is built above
    MAX_BATCH_BYTES."""
    node = await _leader(tmp_path)
    try:
        assert node.md is not None
        end = node.md.log.log_end_offset
        refused = [encode_put("k" * (MAX_KEY_BYTES + 1), b"v"),
                   encode_put("k", b"v" * (MAX_VALUE_BYTES + 1)),
                   encode_put("k", b"v" * (12 * 1024 * 1024)),
                   encode_cas("k", b"e" * (MAX_VALUE_BYTES + 1), b"v"),
                   b"\x07" * (kv_module.MAX_RECORD_BYTES + 1)]
        for value in refused:
            with pytest.raises(WriteRefusedError, match="limit"):
                await node.kv.propose(value)
        with pytest.raises(WriteRefusedError, match="4096-byte limit"):
            await node.kv.kv_call(KvCall(KvOp.GET, "k" * (MAX_KEY_BYTES + 1)))
        assert node.md.log.log_end_offset == end  # nothing proposed
        good = [encode_put(f"g{i}", b"x" * MAX_VALUE_BYTES) for i in range(10)]
        mixed = [good[0], refused[1], *good[1:5], refused[2], *good[5:]]
        dones = [_Done() for _ in mixed]
        node.kv.submit_many(list(zip(mixed, dones, strict=True)))
        outcomes = await asyncio.gather(*(d.fut for d in dones), return_exceptions=True)
        assert [isinstance(o, WriteRefusedError) for o in outcomes] == \
            [v in refused for v in mixed]
        assert isinstance(node.sm, KVStore) and node.sm.get("g9") == b"x" * MAX_VALUE_BYTES
        batches = list(node.md.log.batches(end))
        assert max(b.size_in_bytes for b in batches) <= MAX_BATCH_BYTES
        assert sum(len(b.values()) for b in batches if not b.is_control) == len(good)
    finally:
        await node.stop()
