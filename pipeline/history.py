"""Quorum history from control records: leader epochs, leader changes, voter sets, gaps.

The inputs that reach the driver are small: one row per control record, one per epoch and
the few longest pauses; the per-batch work (`epoch_stats`, `time_gaps`) is a Spark
aggregation over the batch table. Leader changes come from LEADER_CHANGE records, voter sets from KRAFT_VOTERS
records in logs and snapshots. A record seen by several replicas is counted once; whether it
is committed is decided by the consistency step (majority entry below the high watermark).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

HOUR_MS = 3_600_000


def _iso(ms: Any) -> str | None:
    if ms is None or pd.isna(ms):
        return None
    return pd.Timestamp(int(ms), unit="ms", tz="UTC").isoformat()


def _ids(items: Any, key: str) -> list[int]:
    return sorted(int(v[key]) for v in (items or []) if key in v)


def leader_changes(control: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct LEADER_CHANGE record in the logs, in offset order.

    `control` has columns offset, epoch, timestamp, control_type, control_detail, replicas,
    committed (see `audit.collect_control`).
    """
    rows = []
    lc = control[(control["control_type"] == "LEADER_CHANGE") & (control["source"] == "log")]
    for r in lc.itertuples(index=False):
        detail = json.loads(r.control_detail) if r.control_detail else {}
        rows.append({
            "offset": int(r.offset), "epoch": int(r.epoch), "timestamp": int(r.timestamp),
            "time": _iso(r.timestamp), "leader_id": detail.get("leader_id"),
            "voters": _ids(detail.get("voters"), "voter_id"),
            "granting_voters": _ids(detail.get("granting_voters"), "voter_id"),
            "committed": bool(r.committed), "replicas": list(r.replicas),
        })
    cols = ["offset", "epoch", "timestamp", "time", "leader_id", "voters", "granting_voters",
            "committed", "replicas"]
    return pd.DataFrame(rows, columns=cols).sort_values(["offset", "epoch"]).reset_index(drop=True)


def epoch_stats(ref_batches: DataFrame) -> pd.DataFrame:
    """Per epoch of the reference replica's batch rows (Spark): first and last offset, first
    and last timestamp, records, batches and bytes."""
    return ref_batches.groupBy("epoch").agg(
        F.min("batch_base_offset").alias("start_offset"),
        F.max("batch_last_offset").alias("end_offset"),
        F.min("timestamp").alias("start_ms"), F.max("timestamp").alias("end_ms"),
        F.sum("batch_records").alias("records"), F.count(F.lit(1)).alias("batches"),
        F.sum("batch_size").alias("bytes"),
    ).toPandas()


def time_gaps(ref_batches: DataFrame, min_time_gap_ms: int = 60_000, top: int = 10
              ) -> list[dict[str, Any]]:
    """The longest pauses between consecutive batches of the reference replica (Spark): at
    least `min_time_gap_ms`, longest `top` first."""
    w = Window.orderBy("batch_base_offset")
    d = (ref_batches.select("batch_base_offset", "timestamp",
                            (F.col("timestamp") - F.lag("timestamp").over(w)).alias("gap_ms"))
         .filter(F.col("gap_ms") >= min_time_gap_ms)
         .orderBy(F.desc("gap_ms"), "batch_base_offset").limit(top).collect())
    return [{
        "from": _iso(int(r["timestamp"]) - int(r["gap_ms"])), "to": _iso(r["timestamp"]),
        "seconds": float(r["gap_ms"]) / 1000.0, "at_offset": int(r["batch_base_offset"]),
    } for r in d]


def leader_epochs(changes: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """One row per epoch seen in the reference replica's log: leader, offsets, time, records.

    Epochs come from the batches (every batch carries its leader's epoch: `stats` is
    `epoch_stats`); the leader id comes from the epoch's LEADER_CHANGE record when there is
    one.
    """
    cols = ["epoch", "leader_id", "start_offset", "end_offset", "start_time", "end_time",
            "duration_s", "records", "batches", "bytes"]
    if stats.empty:
        return pd.DataFrame(columns=cols)
    leaders = {int(e): lid for e, lid in zip(changes["epoch"], changes["leader_id"])}
    g = stats.sort_values("epoch")
    rows = []
    for r in g.itertuples(index=False):
        rows.append({
            "epoch": int(r.epoch), "leader_id": leaders.get(int(r.epoch)),
            "start_offset": int(r.start_offset), "end_offset": int(r.end_offset) + 1,
            "start_time": _iso(r.start_ms), "end_time": _iso(r.end_ms),
            "duration_s": (int(r.end_ms) - int(r.start_ms)) / 1000.0,
            "records": int(r.records), "batches": int(r.batches), "bytes": int(r.bytes),
        })
    return pd.DataFrame(rows, columns=cols)


def voter_changes(control: pd.DataFrame) -> pd.DataFrame:
    """Every distinct voter set (KRAFT_VOTERS) in log and snapshots, with what changed."""
    vr = control[control["control_type"] == "KRAFT_VOTERS"].copy()
    cols = ["source", "offset", "epoch", "timestamp", "time", "voters", "added", "removed",
            "committed", "replicas"]
    if vr.empty:
        return pd.DataFrame(columns=cols)
    # A snapshot's voter set is in force at its end offset; order snapshots there.
    vr["effective_offset"] = vr.apply(
        lambda r: int(r.snapshot_end_offset) - 1 if r.source == "snapshot" else int(r.offset),
        axis=1,
    )
    vr = vr.sort_values(["effective_offset", "source"])
    rows = []
    previous: list[int] | None = None
    for r in vr.itertuples(index=False):
        detail = json.loads(r.control_detail) if r.control_detail else {}
        ids = _ids(detail.get("voters"), "voter_id")
        if r.source == "snapshot" and previous == ids:
            continue
        rows.append({
            "source": r.source, "offset": int(r.effective_offset), "epoch": int(r.epoch),
            "timestamp": int(r.timestamp), "time": _iso(r.timestamp), "voters": ids,
            "added": sorted(set(ids) - set(previous or [])) if previous is not None else ids,
            "removed": sorted(set(previous or []) - set(ids)),
            "committed": bool(r.committed), "replicas": list(r.replicas),
        })
        previous = ids
    return pd.DataFrame(rows, columns=cols)


def elections_per_hour(changes: pd.DataFrame) -> pd.DataFrame:
    """Number of leader changes per UTC hour (hours without one are listed with 0)."""
    if changes.empty:
        return pd.DataFrame(columns=["hour", "elections"])
    hours = (changes["timestamp"] // HOUR_MS).astype("int64")
    counts = hours.value_counts().sort_index()
    full = range(int(counts.index.min()), int(counts.index.max()) + 1)
    return pd.DataFrame({
        "hour": [_iso(h * HOUR_MS) for h in full],
        "elections": [int(counts.get(h, 0)) for h in full],
    })


def gaps(
    changes: pd.DataFrame, pauses: list[dict[str, Any]],
    offset_holes: dict[str, list[tuple[int, int]]],
) -> dict[str, Any]:
    """Gaps in the history.

    - `epochs`: epoch numbers skipped between consecutive LEADER_CHANGE records (elections
      that produced no leader, or whose leader never wrote);
    - `offsets`: per replica, offset ranges missing inside its log;
    - `time`: the longest pauses between consecutive batches of the reference replica
      (`time_gaps`).
    """
    epoch_gaps = []
    epochs = sorted(set(int(e) for e in changes["epoch"])) if not changes.empty else []
    for a, b in itertools.pairwise(epochs):
        if b > a + 1:
            epoch_gaps.append({"after_epoch": a, "next_epoch": b, "skipped": b - a - 1})
    return {
        "epochs": epoch_gaps,
        "offsets": {k: [{"from": a, "to": b} for a, b in v] for k, v in offset_holes.items() if v},
        "time": list(pauses),
    }
