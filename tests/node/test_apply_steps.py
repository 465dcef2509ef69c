"""Applying committed records in steps, after the replication work that arrived with them
(`kraft.server.apply_driver`, "Applying after replicating" in docs/node.md): three voters in this
process, a state machine that records every call, and a step of a few records so every batch
is applied in parts on the leader (its own values) and on the followers (decoded once)."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import kraft.server.apply_driver as apply_module
from kraft.cli.local import free_port
from kraft.config.node import build_config
from kraft.protocol.uuid import Uuid
from kraft.raft.state import Role
from kraft.server.apply_driver import ApplyDriver
from kraft.server.node import KraftNode
from kraft.statemachine.base import CommittedBatch
from kraft.storage.format import format_storage
from kraft.storage.snapshots import SnapshotStore, iter_snapshot_values
from tests.node.conftest import own_host

STEP = 7


class Recorder:
    """Sums signed 64-bit increments and records each `apply` call's (base offset, count) and
    the offsets its snapshots were taken at; notes a record given twice or out of order."""

    def __init__(self) -> None:
        self.total = 0
        self._applied = 0
        self.parts: list[tuple[int, int]] = []
        self.errors: list[str] = []
        self.snapshots_at: list[int] = []

    @property
    def applied_offset(self) -> int:
        return self._applied

    def apply(self, batch: CommittedBatch) -> list[object]:
        if batch.base_offset != self._applied:
            self.errors.append(f"part at {batch.base_offset}, applied up to {self._applied}")
        self.parts.append((batch.base_offset, len(batch.values)))
        out: list[object] = []
        for value in batch.values:
            self.total += struct.unpack(">q", value)[0]
            out.append(self.total)
        self._applied = batch.base_offset + len(batch.values)
        return out

    def skip_to(self, offset: int) -> None:
        self._applied = max(self._applied, offset)

    def snapshot_values(self) -> list[bytes]:
        self.snapshots_at.append(self._applied)
        return [struct.pack(">q", self.total)]

    def load_snapshot(self, end_offset: int, values: Iterable[bytes]) -> None:
        self.total = sum(struct.unpack(">q", v)[0] for v in values)
        self._applied = end_offset


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, list[tuple[int, int]]]]:
    """Steps of STEP records; yields each node's apply calls: (applied before, applied after).

    One call before a snapshot applies everything up to its offset, which may be several
    batches (several `apply` parts) when applying lags by more than one: the test checks calls,
    not parts."""
    monkeypatch.setattr(apply_module, "APPLY_CHUNK", STEP)
    calls: dict[int, list[tuple[int, int]]] = {}
    apply_to = ApplyDriver.apply_to

    def recorded(self: ApplyDriver, hw: int) -> None:
        node = self._node
        before = node.sm.applied_offset
        apply_to(self, hw)
        calls.setdefault(node.config.node_id, []).append((before, node.sm.applied_offset))

    monkeypatch.setattr(ApplyDriver, "apply_to", recorded)
    yield calls


def _configs(base: Path) -> list[dict[str, str]]:
    host = own_host()
    ports: list[int] = []
    for _ in range(3):
        ports.append(free_port(host, set(ports)))
    voters = ",".join(f"{i + 1}@{host}:{p}" for i, p in enumerate(ports))
    return [{
        "node.id": str(i + 1), "process.roles": "controller",
        "listeners": f"CONTROLLER://{host}:{p}", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": voters, "metadata.log.dir": str(base / f"n{i + 1}"),
        "controller.quorum.election.timeout.ms": "300",
        "controller.quorum.fetch.timeout.ms": "600",
        "kraft.log.fsync": "true",
        # a snapshot every ~2.5 rounds of writes: taken while applying lags behind the commit
        "metadata.log.max.record.bytes.between.snapshots": "4000",
    } for i, p in enumerate(ports)]


async def _started(configs: list[dict[str, str]], sms: list[Recorder]) -> list[KraftNode]:
    nodes = [KraftNode(build_config(props, {}), sm) for props, sm in zip(configs, sms, strict=True)]
    for n in nodes:
        await n.start()
    return nodes


async def _leader(nodes: list[KraftNode]) -> KraftNode:
    for _ in range(1000):
        for n in nodes:
            if n.core is not None and n.core.role == Role.LEADER and n.core.high_watermark:
                return n
        await asyncio.sleep(0.01)
    raise AssertionError("no leader")


async def _applied_everywhere(nodes: list[KraftNode], sms: list[Recorder], end: int) -> None:
    for _ in range(1000):
        if all(sm.applied_offset >= end for sm in sms):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not applied to {end}: {[sm.applied_offset for sm in sms]}")


async def test_committed_batches_are_applied_in_steps_each_record_once(
        tmp_path: Path, small_steps: dict[int, list[tuple[int, int]]]) -> None:
    configs = _configs(tmp_path)
    cluster_id = str(Uuid.random())
    for props in configs:
        format_storage(props, cluster_id, out=io.StringIO())
    sms = [Recorder() for _ in configs]
    nodes = await _started(configs, sms)
    try:
        leader = await _leader(nodes)
        lsm = sms[nodes.index(leader)]
        rounds = []
        for r in range(3):
            # 200 writes proposed together: batches of many more records than a step
            rounds.append(await asyncio.gather(
                *(leader.kv.propose(struct.pack(">q", r * 1000 + i)) for i in range(1, 201))))
        increments = dict(_increments(rounds))
        # every writer got the running total just after its own record
        for offset, result in (pair for rnd in rounds for pair in rnd):
            assert result == sum(v for o, v in increments.items() if o <= offset)
        end = max(offset for rnd in rounds for offset, _ in rnd) + 1
        await _applied_everywhere(nodes, sms, end)
        expected = sum(r * 1000 * 200 + 200 * 201 // 2 for r in range(3))
        assert lsm.total == expected
        for node, sm in zip(nodes, sms, strict=True):
            assert sm.errors == []
            assert sm.total == expected
            # a step at a time, but for the records up to a snapshot, applied at once before it
            at_once = [(before, after) for before, after in small_steps[node.config.node_id]
                       if after - before > STEP and after not in sm.snapshots_at]
            assert at_once == [], f"applied at once {at_once}; snapshots at {sm.snapshots_at}"
            # at least one round of 200 went in steps, on the followers too (values decoded
            # from the log once per batch, not the leader's own)
            assert sum(count for _, count in sm.parts if count <= STEP) >= 200, sm.parts
    finally:
        for n in nodes:
            await n.stop()
    # snapshots were taken on the way, while applying lagged behind the commit; each holds
    # the total at exactly its end offset
    assert any(sm.snapshots_at for sm in sms), "no snapshot taken"
    for props in configs:
        store = SnapshotStore(Path(props["metadata.log.dir"]) / "__cluster_metadata-0")
        for sid in store.ids():
            [value] = list(iter_snapshot_values(store.path(sid)))
            assert struct.unpack(">q", value)[0] == sum(
                v for o, v in increments.items() if o < sid.end_offset), sid

    # each node restarts from its snapshot and log alone to the same state
    again = [Recorder() for _ in configs]
    nodes = await _started(configs, again)
    try:
        leader = await _leader(nodes)
        offset, total = await leader.kv.propose(struct.pack(">q", 0))
        await _applied_everywhere(nodes, again, offset + 1)
        assert total == expected
        assert [sm.total for sm in again] == [expected] * 3
        assert all(sm.errors == [] for sm in again)
    finally:
        for n in nodes:
            await n.stop()


def _increments(rounds: list[list[tuple[int, object]]]) -> Iterator[tuple[int, int]]:
    """(offset, increment) of every write of the test, from the order they were proposed."""
    for r, rnd in enumerate(rounds):
        for i, (offset, _) in enumerate(rnd, start=1):
            yield offset, r * 1000 + i
