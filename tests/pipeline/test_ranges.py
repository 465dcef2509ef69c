"""Replicas are compared by offset range: byte-identical batches as one row each, records only
where the batches differ; the verdicts are those of a record-by-record comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kraft_pipeline.synthetic import History, write_replica

from kraft.records.batch import build_batch

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


def _quorum(root: Path, rebatch_from: int) -> tuple[list[tuple[int, int]], int]:
    """Three voters holding the same records. node-1 and node-2 hold the same batches;
    node-3 holds the records from batch `rebatch_from` on in batches of other bounds (two
    per batch, then one for the rest). Returns the batch bounds of node-1 and the log end."""
    h = History()
    h.leader_change(1, 1, [1, 2, 3])
    for _ in range(8):
        h.data(1, h.commands(10))
    bounds = [(b.base_offset, b.next_offset - 1) for b in h.batches]
    same = [b.data for b in h.batches]
    tail: list[bytes] = []
    for b in h.batches[rebatch_from:]:
        values = [v for v in _values(b.data)]
        half = len(values) // 2
        tail.append(build_batch(b.base_offset, b.epoch, values[:half], b.timestamp_ms))
        tail.append(build_batch(b.base_offset + half, b.epoch, values[half:], b.timestamp_ms))
    for node in (1, 2):
        write_replica(root / f"n{node}", node, same)
    write_replica(root / "n3", 3, same[:rebatch_from] + tail)
    return bounds, h.next_offset


def _values(data: bytes) -> list[bytes]:
    from kraft.records.batch import RecordBatch

    return [bytes(v or b"") for v in RecordBatch.parse(data, 0).values()]


def test_agreeing_replicas_are_compared_per_batch_and_rebatched_ones_per_record(
    spark: Any, tmp_path: Path
) -> None:
    from kraft_pipeline.audit import run_audit

    bounds, end = _quorum(tmp_path / "q", rebatch_from=6)
    summary = run_audit(spark, [str(tmp_path / "q")], tmp_path / "out", make_report=False)
    assert summary["consistent"] is True
    assert summary["high_watermark"]["value"] == end
    for r in summary["replicas"].values():
        assert r["first_divergence"] is None and r["first_uncommitted_divergence"] is None
        assert r["high_watermark_used"] == end and r["offset_gaps"] == []

    offsets = pd.read_parquet(tmp_path / "out" / "tables" / "offsets").sort_values("offset")
    clean = offsets[~offsets["refined"]]
    refined = offsets[offsets["refined"]]
    # the six batches all replicas hold byte for byte: one row each, held by all three
    assert [(int(a), int(b)) for a, b in zip(clean["offset"], clean["last"])] == bounds[:6]
    assert all(list(t["replicas"]) == ["node-1", "node-2", "node-3"] for t in clean["top"])
    # the re-batched ones: one row per record, one entry each, held by all three
    first_refined = bounds[6][0]
    assert list(refined["offset"]) == list(range(first_refined, end))
    assert set(refined["variants"]) == {1} and set(refined["holders"]) == {3}
    entries = pd.read_parquet(tmp_path / "out" / "tables" / "entries")
    assert len(entries) == 3 * (end - first_refined)


def test_a_record_differing_inside_a_rebatched_range_is_found(spark: Any, tmp_path: Path) -> None:
    from kraft_pipeline.audit import run_audit

    bounds, _ = _quorum(tmp_path / "q", rebatch_from=6)
    # rewrite node-2's last batch with one other value in its middle (same epoch, valid CRC)
    h = History()
    h.leader_change(1, 1, [1, 2, 3])
    for _ in range(8):
        h.data(1, h.commands(10))
    last = h.batches[-1]
    values = _values(last.data)
    values[4] = values[4] + b"!"
    changed = [b.data for b in h.batches[:-1]] + [
        build_batch(last.base_offset, last.epoch, values, last.timestamp_ms)]
    write_replica(tmp_path / "q2" / "n2", 2, changed)
    for node in (1, 3):
        (tmp_path / "q2" / f"n{node}").symlink_to(tmp_path / "q" / f"n{node}")
    summary = run_audit(spark, [str(tmp_path / "q2")], tmp_path / "out", make_report=False,
                        high_watermark=bounds[-1][1] + 1)
    diverged = {n: r["first_divergence"] for n, r in summary["replicas"].items()
                if r["first_divergence"]}
    assert list(diverged) == ["node-2"]
    assert diverged["node-2"]["offset"] == last.base_offset + 4
    assert summary["replicas"]["node-2"]["committed_divergent_offsets"] == 1


def test_running_steps_report_progress(spark: Any, tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from kraft_pipeline.audit import Progress, run_audit
    from kraft_pipeline.layout import discover_replicas

    _quorum(tmp_path / "q", rebatch_from=6)
    files = sum(len(r.files) for r in discover_replicas([str(tmp_path / "q")]))
    progress = Progress(interval=0.05)
    with caplog.at_level(logging.INFO, logger="kraft_pipeline"):
        run_audit(spark, [str(tmp_path / "q")], tmp_path / "out", make_report=False,
                  progress=progress)
    lines = [r.getMessage() for r in caplog.records]
    ticks = [ln for ln in lines if "name=ingest running=" in ln]
    assert ticks, lines
    assert any(" read=" in ln and f"of {files} files" in ln for ln in ticks), ticks
    steps = [s["name"] for s in progress.finished]
    assert steps == ["discover", "ingest", "corrupt_batches", "high_watermark", "divergence",
                     "snapshots", "history", "workload", "write"]
