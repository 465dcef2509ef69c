"""Embedding the node in-process with a state machine of one's own (the documented interface):
a single-voter quorum commits, snapshots and recovers the custom state after a restart."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Iterable
from pathlib import Path

import pytest

from kraft.cli.local import free_port
from kraft.config.node import build_config
from kraft.protocol.uuid import Uuid
from kraft.raft.state import Role
from kraft.server.node import KraftNode
from kraft.statemachine.base import CommittedBatch, StateMachine
from kraft.storage import aio, uring
from kraft.storage.format import format_storage
from tests.node.conftest import own_host


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
    host = own_host()
    port = free_port(host)
    return {
        "node.id": "1", "process.roles": "controller",
        "listeners": f"CONTROLLER://{host}:{port}", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@{host}:{port}", "metadata.log.dir": str(base / "meta"),
        "controller.quorum.election.timeout.ms": "200",
        "metadata.log.max.record.bytes.between.snapshots": "200",
        "kraft.log.fsync": "true" if fsync else "false",
    }


async def _total_after_restart(props: dict[str, str]) -> object:
    """Start a node on the same directory and return the counter's total (a write of 0)."""
    node = KraftNode(build_config(props, {}), Counter())
    await node.start()
    try:
        await _leader(node)
        _, total = await node.kv.propose(struct.pack(">q", 0))
        return total
    finally:
        await node.stop()


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
        results = await asyncio.gather(*(node.kv.propose(struct.pack(">q", i)) for i in range(1, 101)))
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
        _, total = await node.kv.propose(struct.pack(">q", -50))
        assert total == 5000 and again.total == 5000
    finally:
        await node.stop()


_ENGINE_AVAILABLE = {"uring": uring.available(), "aio": aio.available(), "off": True}


@pytest.mark.parametrize(("mode", "engine"), [("auto", "uring"), ("auto", "aio"), ("auto", "off"),
                                              ("inline", "uring"), ("thread", "uring"),
                                              ("thread", "aio"), ("thread", "off")])
async def test_every_flush_mode_commits_only_what_it_fsynced(tmp_path: Path, mode: str,
                                                             engine: str) -> None:
    """A single voter commits a record only once its own fsync reported it. `auto` fsyncs a
    write made alone from the moment it is appended (started by the kernel through io_uring or
    native AIO, or on the flusher thread) and a big batch inline; `inline` and `thread` use one
    place for every flush (the kernel's flush leaves a new epoch's checkpoint to an inline one)."""
    if not _ENGINE_AVAILABLE[engine]:
        pytest.skip(f"{engine} fsync is not available here")
    kernel = engine != "off"
    props = dict(_config(tmp_path, fsync=True), **{"kraft.log.flush.mode": mode,
                                                   "kraft.log.flush.kernel": engine})
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    sm = Counter()
    node = KraftNode(build_config(props, {}), sm)
    await node.start()
    try:
        await _leader(node)
        assert node.md is not None and node.log_service is not None
        for i in range(1, 21):  # one at a time: batches of one record
            offset, total = await node.kv.propose(struct.pack(">q", i))
            assert total == i * (i + 1) // 2
            assert node.md.log.durable_end_offset > offset  # committed => fsynced
            assert node.metrics.log_end_offset.read() == node.md.log.log_end_offset  # the metric follows
        await asyncio.gather(*(node.kv.propose(struct.pack(">q", 1)) for _ in range(300)))
        assert sm.total == 210 + 300
        flushes, inline = node.log_service.flusher.flushes, node.log_service.flusher.inline
        by_kernel = node.log_service.flusher.kernel
        assert flushes > 0
        # every flush that wrote is timed, wherever it ran: the 20 writes made one at a time
        # each waited for one
        timed = node.metrics.log_flush
        assert 20 <= timed.count <= flushes and timed.sum > 0
        assert f"kraft_log_flush_seconds_count {timed.count}" in node.render_metrics()
        assert (node.log_service.kernel is not None) == (kernel and mode != "inline")
        if node.log_service.kernel is not None:
            assert type(node.log_service.kernel).__module__ == f"kraft.storage.{engine}"
        # the flusher thread runs only where no engine takes the flushes
        assert (node.log_service.flusher._thread.ident is None) == (node.log_service.kernel is not None)
        if mode == "inline":
            assert inline == flushes
        elif mode == "thread" and not kernel:
            assert inline == 0
        elif mode == "thread":  # inline only where a new epoch's checkpoint is written too
            assert 0 < inline < 5 and by_kernel == flushes - inline
        else:  # the writes made alone started at once, the burst's big batches inline
            assert 0 < inline < flushes
            assert by_kernel > 0 if kernel else by_kernel == 0
    finally:
        await node.stop()
    assert await _total_after_restart(props) == 510


async def test_fsync_off_still_commits(tmp_path: Path) -> None:
    props = _config(tmp_path, fsync=False)
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    node = KraftNode(build_config(props, {}))
    await node.start()
    try:
        await _leader(node)
        offset = await node.kv.kv_put("k", b"v")
        assert offset > 0 and await node.kv.kv_get("k") == b"v"
        assert await node.kv.kv_cas("k", b"v", b"w") == (True, b"v")
        assert await node.kv.kv_delete("k") is True
        assert await node.kv.kv_get("k") is None
    finally:
        await node.stop()


async def test_binary_client_that_does_not_read_stops_being_served(tmp_path: Path) -> None:
    """The binary KV protocol's write back-pressure, in-process: a client that pipelines reads
    of a large value but leaves the answers unread gets no further request handled once its
    answers fill the connection's buffers, and gets every answer once it reads."""
    import socket

    from kraft.protocol.kv_wire import OK, OP_GET_STALE, RESPONSE_HEAD, encode_request

    props = _config(tmp_path, fsync=False)
    host, raft_port = props["listeners"].split("//", 1)[1].rsplit(":", 1)
    port = free_port(host, {int(raft_port)})
    props["client.listener"] = f"{host}:{port}"
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    node = KraftNode(build_config(props, {}))
    await node.start()
    try:
        await _leader(node)
        big = b"v" * 65536
        await node.kv.kv_put("big", big)
        served = [0]
        plain = node.kv.kv_get_stale

        def counting(key: str) -> bytes | None:
            served[0] += 1
            return plain(key)

        node.kv.kv_get_stale = counting  # type: ignore[method-assign]
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, (host, port))
        total = 400  # 26 MB of answers: far more than the kernel and transport buffers hold
        for start in range(0, total, 10):  # in separate chunks, as a pipelining client sends
            await loop.sock_sendall(sock, b"".join(encode_request(i, OP_GET_STALE, "big")
                                                   for i in range(start, start + 10)))
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.5)
        stalled_at = served[0]
        await asyncio.sleep(0.3)
        assert served[0] == stalled_at < total
        got, buf = 0, bytearray()
        while got < total:
            buf += await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 10)
            while len(buf) >= RESPONSE_HEAD.size:
                length = int.from_bytes(buf[:4], "big")
                if len(buf) < 4 + length:
                    break
                assert RESPONSE_HEAD.unpack_from(buf)[2] == OK
                assert buf[RESPONSE_HEAD.size:4 + length] == big
                del buf[:4 + length]
                got += 1
        assert served[0] == total
        sock.close()
    finally:
        await node.stop()


@pytest.mark.parametrize("engine", ["uring", "aio"])
async def test_kernel_flushes_across_segment_rolls(tmp_path: Path, engine: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Every flush asked of the kernel (`thread` mode) while segments roll under concurrent
    writes: a flush that must also persist a new segment file falls back to an inline one, even
    when it is asked for from the kernel's completion with the core loop asleep, and every
    write commits durably."""
    if not _ENGINE_AVAILABLE[engine]:
        pytest.skip(f"{engine} fsync is not available here")
    props = dict(_config(tmp_path, fsync=True), **{"kraft.log.flush.mode": "thread",
                                                   "kraft.log.flush.kernel": engine,
                                                   "metadata.log.segment.bytes": "2048"})
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    sm = Counter()
    node = KraftNode(build_config(props, {}), sm)
    caplog.set_level("INFO", logger="kraft.storage.log")
    await node.start()
    try:
        await _leader(node)
        assert node.md is not None and node.log_service is not None and node.log_service.kernel is not None
        for round_ in range(40):
            await asyncio.gather(*(node.kv.propose(struct.pack(">q", 1)) for _ in range(10)))
            _, total = await node.kv.propose(struct.pack(">q", 1))
            assert total == 11 * (round_ + 1)
            assert node.md.log.durable_end_offset == node.md.log.log_end_offset
        rolls = sum("event=segment_rolled" in r.getMessage() for r in caplog.records)
        assert rolls >= 4
        assert node.log_service.flusher.kernel > 0 and node.log_service.flusher.inline >= rolls
    finally:
        await node.stop()
    assert await _total_after_restart(props) == 440


@pytest.mark.parametrize("engine", ["uring", "aio"])
async def test_a_kernel_completion_that_leaves_the_next_flush_to_the_loop_wakes_it(
        tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's eventfd can be readable with no completion of its own to report: the flush
    in flight was finished by waiting for it (a truncation, a log-start advance, a snapshot
    install). If a flush was asked for meanwhile and the kernel cannot take it (a new segment
    file, a new epoch to checkpoint), it is left to the core loop, which is asleep: the
    completion handler wakes it, and the flush runs inline without waiting for a timer."""
    if not _ENGINE_AVAILABLE[engine]:
        pytest.skip(f"{engine} fsync is not available here")
    # the leader's own deadlines a minute away: only the wake-up can start the flush in time
    props = dict(_config(tmp_path, fsync=True), **{"kraft.log.flush.kernel": engine,
                                                   "controller.quorum.fetch.timeout.ms": "60000"})
    format_storage(props, str(Uuid.random()), out=io.StringIO())
    node = KraftNode(build_config(props, {}), Counter())
    await node.start()
    try:
        await _leader(node)
        await node.kv.propose(struct.pack(">q", 1))
        assert node.md is not None and node.log_service is not None and node.log_service.kernel is not None
        for _ in range(500):  # until the core loop sleeps with nothing queued
            await asyncio.sleep(0.01)
            if node.queue.waiter is not None and not node.queue.events:
                break
        assert not node.md.log.flush_in_flight
        inline = node.log_service.flusher.inline
        monkeypatch.setattr(node.md.log, "start_flush", lambda: False)  # the kernel cannot
        node.log_service.kernel_again = True  # a flush was asked for while one was in flight
        node.log_service.kernel_flushed()  # the eventfd's callback, with nothing completed to report
        for _ in range(1000):
            if node.log_service.flusher.inline > inline:
                break
            await asyncio.sleep(0.01)
        assert node.log_service.flusher.inline == inline + 1
        assert not node.log_service.flush_due
    finally:
        await node.stop()
