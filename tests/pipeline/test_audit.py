"""The audit of a five-replica quorum with injected faults reports exactly those faults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kraft.records.batch import iter_batches
from kraft.statemachine.kv import OP_DELETE, decode_command
from kraft.storage.layout import partition_dir

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


def test_high_watermark_is_the_majority_replicated_end(audited: dict, scenario: Any) -> None:
    hw = audited["summary"]["high_watermark"]
    assert hw["value"] == scenario.high_watermark
    assert hw["voters"] == [1, 2, 3, 4, 5]
    assert hw["majority"] == 3
    reps = audited["summary"]["replicas"]
    assert reps["node-1"]["high_watermark_used"] == scenario.high_watermark
    assert reps["node-1"]["uncommitted_records"] == scenario.uncommitted_end - scenario.high_watermark
    assert reps["node-4"]["high_watermark_used"] < scenario.high_watermark  # torn, shorter


def test_only_the_diverged_replica_has_a_committed_divergence(audited: dict, scenario: Any) -> None:
    reps = audited["summary"]["replicas"]
    diverged = {name: r["first_divergence"] for name, r in reps.items() if r["first_divergence"]}
    assert list(diverged) == ["node-3"]
    d = diverged["node-3"]
    assert d["offset"] == scenario.diverged_offset
    assert d["epoch"] == scenario.diverged_epoch == d["other_epoch"]
    assert d["other_replica"] in {"node-1", "node-2", "node-4"}
    assert audited["summary"]["consistent"] is False


def test_deposed_leader_tail_is_uncommitted_not_corruption(audited: dict, scenario: Any) -> None:
    reps = audited["summary"]["replicas"]
    unc = {n: r["first_uncommitted_divergence"] for n, r in reps.items()
           if r["first_uncommitted_divergence"]}
    assert list(unc) == ["node-5"]
    u = unc["node-5"]
    assert (u["offset"], u["epoch"], u["other_epoch"]) == (
        scenario.stale_offset, scenario.stale_epoch, scenario.next_epoch_at_stale)
    assert u["divergent_offsets"] == scenario.stale_records
    assert reps["node-5"]["first_divergence"] is None


def test_corrupt_batches_are_exactly_the_flipped_bit_and_the_torn_tail(
    audited: dict, scenario: Any
) -> None:
    reps = audited["summary"]["replicas"]
    bad = {n: [(c["kind"], c["file"], c["position"]) for c in r["corrupt_batches"]]
           for n, r in reps.items() if r["corrupt_batches"]}
    assert bad == {
        "node-2": [("corrupt_crc", str(scenario.flipped_file), scenario.flipped_position)],
        "node-4": [("truncated", str(scenario.truncated_file), scenario.truncated_position)],
    }
    assert audited["summary"]["corrupt_batches"] == 2
    gaps = {n: r["offset_gaps"] for n, r in reps.items() if r["offset_gaps"]}
    assert list(gaps) == ["node-2"]
    assert all(g["explained_by_corrupt_batch"] for g in gaps["node-2"])


def test_snapshots_agree_with_the_log(audited: dict) -> None:
    assert audited["summary"]["findings"] == []


def test_history(audited: dict, scenario: Any) -> None:
    out = audited["out"]
    changes = pd.read_parquet(out / "tables" / "leader_changes.parquet")
    committed = changes[changes["committed"]]
    assert dict(zip(committed["epoch"], committed["leader_id"])) == scenario.epochs
    voters = pd.read_parquet(out / "tables" / "voter_changes.parquet")
    assert [list(v) for v in voters["voters"]] == scenario.voter_sets
    per_hour = pd.read_parquet(out / "tables" / "elections_per_hour.parquet")
    assert per_hour["elections"].sum() == len(scenario.epochs)
    gaps = audited["summary"]["history"]["gaps"]
    assert gaps["epochs"] == [{"after_epoch": 4, "next_epoch": 6, "skipped": 1}]


def test_workload_key_space_matches_a_plain_scan(audited: dict, scenario: Any) -> None:
    ops: dict[int, int] = {}
    keys: set[str] = set()
    records = 0
    for seg in sorted(partition_dir(scenario.replicas["node-1"]).glob("*.log")):
        for b in iter_batches(seg.read_bytes()):
            if b.is_control:
                continue
            for r in b.records():
                if r.offset >= scenario.high_watermark:
                    continue
                cmd = decode_command(r.value)
                ops[cmd.op] = ops.get(cmd.op, 0) + 1
                keys.add(cmd.key)
                records += 1
    ks = audited["summary"]["workload"]["key_space"]
    assert ks["records"] == records
    assert ks["distinct_keys"] == len(keys)
    assert ks["ops"]["DELETE"] == ops[OP_DELETE]
    timeline = pd.read_parquet(audited["out"] / "tables" / "workload_timeline.parquet")
    assert timeline["records"].sum() == records


def test_outputs_exist_and_report_links_its_charts(audited: dict) -> None:
    out: Path = audited["out"]
    summary = json.loads((out / "summary.json").read_text())
    for rel in summary["tables"].values():
        assert (out / rel).exists(), rel
    html = (out / "report.html").read_text()
    charts = sorted(p.name for p in (out / "charts").glob("*.png"))
    assert {"replicas.png", "workload.png", "epochs.png", "elections.png"} <= set(charts)
    for name in charts:
        assert f"charts/{name}" in html
    assert "INCONSISTENT" in html
