"""The audit's rules on small, hand-made inputs (no replica directories)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from kraft_pipeline.consistency import (
    ReplicaExtent,
    SnapshotInfo,
    derive_high_watermark,
    first_hole,
    holes,
    per_offset,
    replay_check,
    snapshot_findings,
    variants_by_offset,
)

from kraft.statemachine.kv import encode_delete, encode_put


def test_first_hole_and_holes() -> None:
    assert first_hole([(0, 9), (10, 19)]) is None
    assert first_hole([(0, 9), (5, 30), (40, 50)]) == 31
    assert first_hole([(10, 19)], start=0) == 0
    assert holes([(0, 9), (12, 20), (15, 25), (30, 31)]) == [(10, 12), (26, 30)]


def _info(end: int, replica: str = "node-1") -> SnapshotInfo:
    return SnapshotInfo(replica, f"/{replica}/{end}.checkpoint", end, 1, 0, 0)


def test_replay_check_finds_the_first_differing_key() -> None:
    log = [(0, True, None), (1, False, encode_put("a", b"1")), (2, False, encode_put("b", b"2")),
           (3, False, encode_delete("a")), (4, False, encode_put("c", b"3"))]
    good = [encode_put("b", b"2")]  # state at end offset 4
    bad = [encode_put("a", b"1"), encode_put("b", b"2")]
    findings, compared = replay_check([(_info(4), good)], iter(log))
    assert (findings, compared) == ([], 1)
    findings, compared = replay_check([(_info(4, "node-2"), bad)], iter(log))
    assert compared == 1
    assert [(f["kind"], f["replica"], f["first_key"]) for f in findings] == [
        ("snapshot_state_mismatch", "node-2", "a")]


def test_replay_check_skips_snapshots_the_log_does_not_reach() -> None:
    log = [(0, False, encode_put("a", b"1"))]
    assert replay_check([(_info(5), [encode_put("a", b"1")])], iter(log)) == ([], 0)


def test_replay_check_starts_from_a_base_snapshot() -> None:
    log = [(10, False, encode_put("b", b"2"))]
    base = (10, [encode_put("a", b"1")])
    want = [encode_put("a", b"1"), encode_put("b", b"2")]
    assert replay_check([(_info(11), want)], iter(log), base) == ([], 1)


# -- rules that need Spark DataFrames -------------------------------------------------------

def _entries(spark: Any, logs: dict[str, list[tuple[int, int, int]]]) -> Any:
    rows = [(name, off, ep, h) for name, entries in logs.items() for off, ep, h in entries]
    return spark.createDataFrame(rows, "replica string, offset long, epoch int, h long")


def _batches(logs: dict[str, list[tuple[int, int, int]]]) -> pd.DataFrame:
    rows = [{"replica": n, "node_id": int(n[-1]), "source": "log", "error": None,
             "batch_base_offset": off, "batch_last_offset": off, "epoch": ep,
             "batch_records": 1, "snapshot_end_offset": None, "snapshot_epoch": None}
            for n, entries in logs.items() for off, ep, _ in entries]
    return pd.DataFrame(rows)


def _hw(spark: Any, logs: dict[str, list[tuple[int, int, int]]], override: int | None = None):
    from kraft_pipeline.consistency import extents

    names = sorted(logs)
    batches = _batches(logs)
    offsets = per_offset(variants_by_offset(_entries(spark, logs), names))
    newest = max(ep for entries in logs.values() for _, ep, _ in entries)
    return derive_high_watermark(offsets, extents(batches, names), newest,
                                 [int(n[-1]) for n in names], names, override)


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_hw_is_the_majority_agreed_prefix(spark: Any) -> None:
    common = [(0, 1, 10), (1, 1, 11), (2, 2, 12)]
    logs = {"n1": [*common, (3, 2, 13), (4, 2, 14)], "n2": [*common, (3, 2, 13)], "n3": common}
    hw = _hw(spark, logs)
    assert (hw.value, hw.majority) == (4, 2)
    assert _hw(spark, logs, override=2).value == 2


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_hw_backs_off_when_a_newer_epoch_is_not_on_a_majority(spark: Any) -> None:
    # Raft figure 8: epoch 2's entry at 2 is on a majority, but a leader of epoch 3 exists
    # that may overwrite it; only what precedes epoch 2 is counted as committed.
    common = [(0, 1, 10), (1, 1, 11)]
    logs = {"n1": [*common, (2, 2, 12)], "n2": [*common, (2, 2, 12)], "n3": [*common, (2, 3, 99)]}
    hw = _hw(spark, logs)
    assert hw.value == 2
    assert hw.agreed_prefix_end == 3
    assert "epoch 3" in hw.rule


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_snapshot_findings(spark: Any) -> None:
    logs = {"n1": [(0, 1, 10), (1, 1, 11), (2, 2, 12)], "n2": [(0, 1, 10), (1, 1, 11), (2, 2, 12)]}
    offsets = per_offset(variants_by_offset(_entries(spark, logs), ["n1", "n2"]))
    snaps = [
        SnapshotInfo("n1", "/n1/a", 3, 2, 5, 111),
        SnapshotInfo("n2", "/n2/a", 3, 2, 5, 111),
        SnapshotInfo("n3", "/n3/a", 3, 2, 5, 222),   # same id, other content
        SnapshotInfo("n3", "/n3/b", 2, 2, 5, 333),   # log has epoch 1 at offset 1
    ]
    found = sorted((f["kind"], f["replica"], f["end_offset"])
                   for f in snapshot_findings(snaps, offsets, hw=3))
    assert found == [("snapshot_content_mismatch", "n3", 3),
                     ("snapshot_epoch_mismatch", "n3", 2)]


def test_extent_end_counts_snapshots() -> None:
    e = ReplicaExtent("n1", 1, True, None, None, 0, [(50, 3)])
    assert e.end == 50


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_divergence_kinds(spark: Any) -> None:
    from kraft_pipeline.consistency import committed_divergence

    common = [(0, 1, 10), (1, 1, 11), (2, 2, 12)]
    logs = {
        "n1": [*common, (3, 3, 13), (4, 3, 14), (5, 3, 15)],
        "n2": [*common, (3, 3, 13), (4, 3, 99), (5, 3, 15)],   # other bytes, same epoch
        "n3": [*common, (3, 2, 50), (4, 2, 51)],              # stale tail of epoch 2
        "n4": [*common, (3, 3, 13), (4, 3, 14), (5, 3, 15)],
        "n5": [*common, (3, 3, 13), (4, 3, 14), (5, 3, 15)],
    }
    names = sorted(logs)
    entries = _entries(spark, logs)
    variants = variants_by_offset(entries, names)
    offsets = per_offset(variants)
    committed, stale = committed_divergence(entries, variants, offsets, hw=6, majority=3)
    assert {k: (v["offset"], v["epoch"], v["other_replica"]) for k, v in committed.items()} == {
        "n2": (4, 3, "n1")}
    assert {k: (v["offset"], v["epoch"], v["other_epoch"]) for k, v in stale.items()} == {
        "n3": (3, 2, 3)}

    # Two replicas that disagree, checked below an HW given by hand: no entry has a
    # majority, so both diverge at the first contested offset, each naming the other.
    two = {"n1": logs["n1"], "n2": logs["n2"]}
    entries = _entries(spark, two)
    variants = variants_by_offset(entries, ["n1", "n2"])
    committed, _ = committed_divergence(entries, variants, per_offset(variants), hw=6,
                                        majority=2)
    assert {k: (v["offset"], v["other_replica"]) for k, v in committed.items()} == {
        "n1": (4, "n2"), "n2": (4, "n1")}
