"""`kraft audit`: read every replica's log and snapshots with Spark and check they agree.

    kraft audit --input DIR [DIR ...] --output OUT [--master URL] [--high-watermark N]
    python -m kraft_pipeline --input ... --output ...
    spark-submit pipeline/__main__.py --input ... --output ...

Steps (each logged as it starts, with counts and elapsed time):

1. discover replica directories; 2. ingest every segment and snapshot through the `kraft`
data source into `OUT/tables/records` (Parquet), and the batch table; 3. corrupt batches;
4. voters and the high watermark (rule in `kraft_pipeline.consistency`); 5. committed and
uncommitted divergence; 6. snapshots against each other and against the log; 7. history;
8. workload; 9. summary.json, Parquet tables and report.html with PNG charts.

Exit status: 0 when the audit ran (whatever it found; with `--strict`, 1 when it found a
committed divergence, a failed snapshot check or a corrupt batch), 2 for bad input (missing
directory, not a metadata directory, bad option).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
from kraft_pipeline import consistency, history, report, workload
from kraft_pipeline.audit_args import UsageError, check_arguments, parse_args
from kraft_pipeline.layout import AuditInputError, Replica, discover_replicas
from kraft_pipeline.session import build_session
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

log = logging.getLogger("kraft_pipeline.audit")

BATCH_COLUMNS = [
    "replica", "node_id", "source", "file", "snapshot_end_offset", "snapshot_epoch", "position",
    "batch_base_offset", "batch_last_offset", "epoch", "timestamp", "is_control",
    "control_type", "batch_crc", "batch_size", "batch_records", "error",
]
STEPS = 9


class Progress:
    """Numbered, timed progress lines on the `kraft_pipeline.audit` logger."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.step = 0

    def start(self, name: str, **fields: Any) -> None:
        """Log the start of the next step."""
        self.step += 1
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        log.info("step=%d/%d name=%s elapsed=%.1fs %s", self.step, STEPS, name,
                 time.monotonic() - self.t0, extra)

    def note(self, **fields: Any) -> None:
        """Log a fact found during the current step."""
        log.info("step=%d/%d %s", self.step, STEPS, " ".join(f"{k}={v}" for k, v in fields.items()))


# ----------------------------------------------------------------------------- steps


def group_bytes(replicas: list[Replica], parallelism: int) -> int:
    """The data source's `groupSmallFilesBytes` for this input.

    Files under 4 MiB are packed together (per-task overhead dominates such tiny segments),
    but never into fewer than two partitions per core; larger files keep a partition each.
    """
    total = sum(f.size_bytes for r in replicas for f in r.files)
    return max(64 * 1024, min(4 * 1024 * 1024, total // max(1, 2 * parallelism)))


def ingest(spark: SparkSession, replicas: list[Replica], out: Path) -> DataFrame:
    """Read all files through the `kraft` source into OUT/tables/records; return that table."""
    paths = [r.root for r in replicas]
    grouping = group_bytes(replicas, spark.sparkContext.defaultParallelism)
    df = (spark.read.format("kraft").option("paths", json.dumps(paths))
          .option("groupSmallFilesBytes", str(grouping)).load())
    target = out / "tables" / "records"
    df.write.mode("overwrite").parquet(str(target))
    return spark.read.parquet(str(target))


def batch_table(records: DataFrame, out: Path) -> pd.DataFrame:
    """One row per batch (and per unreadable batch), written to OUT/tables/batches."""
    b = records.filter(
        F.col("offset").isNull() | (F.col("offset") == F.col("batch_base_offset"))
    ).select(*BATCH_COLUMNS)
    target = out / "tables" / "batches"
    b.write.mode("overwrite").parquet(str(target))
    if (records.sparkSession.sparkContext.master or "").startswith("local"):
        pdf = pd.read_parquet(target)  # same machine: no second Spark job
    else:
        pdf = b.toPandas()
    pdf["is_control"] = pdf["is_control"].astype("boolean").fillna(False).astype(bool)
    return pdf


def corrupt_batches(batches: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """Unreadable batches per replica: file, position, base offset, kind and message."""
    bad = batches[batches["error"].notna()].sort_values(["replica", "file", "position"])
    out: dict[str, list[dict[str, Any]]] = {}
    for r in bad.itertuples(index=False):
        kind = str(r.error).split(":", 1)[0]
        out.setdefault(r.replica, []).append({
            "file": r.file, "source": r.source, "position": int(r.position),
            "base_offset": None if pd.isna(r.batch_base_offset) else int(r.batch_base_offset),
            "epoch": None if pd.isna(r.epoch) else int(r.epoch),
            "kind": kind, "error": r.error,
        })
    return out


def collect_control(records: DataFrame) -> pd.DataFrame:
    """Distinct control records across replicas, with the replicas holding each."""
    c = (
        records.filter(F.col("is_control") & F.col("error").isNull())
        .groupBy("source", "offset", "epoch", "timestamp", "control_type", "control_detail",
                 "snapshot_end_offset")
        .agg(F.sort_array(F.collect_list("replica")).alias("replicas"))
        .toPandas()
    )
    return c.sort_values(["source", "offset"]).reset_index(drop=True)


def voter_ids(control: pd.DataFrame) -> tuple[list[int], str]:
    """Voter ids from the newest KRAFT_VOTERS record, else the newest LEADER_CHANGE."""
    for ctype, key in (("KRAFT_VOTERS", "voters"), ("LEADER_CHANGE", "voters")):
        rows = control[control["control_type"] == ctype].copy()
        if rows.empty:
            continue
        rows["eff"] = [
            (int(s) - 1 if src == "snapshot" else int(o))
            for src, o, s in zip(rows["source"], rows["offset"], rows["snapshot_end_offset"])
        ]
        newest = rows.sort_values(["eff", "epoch"]).iloc[-1]
        detail = json.loads(newest["control_detail"] or "{}")
        ids = sorted(int(v["voter_id"]) for v in detail.get(key, []) if "voter_id" in v)
        if ids:
            return ids, f"{ctype} at offset {int(newest['eff'])}"
    return [], "none found: every audited replica counts as a voter"


def pick_reference(replicas: dict[str, dict[str, Any]]) -> str | None:
    """The replica workload and history are computed on.

    A voter without committed divergence or corrupt batches, holding the most committed
    offsets (then the lowest name); relaxed step by step when none qualifies.
    """
    def score(item: tuple[str, dict[str, Any]]) -> tuple[Any, ...]:
        name, r = item
        return (
            r["first_divergence"] is None, r["is_voter"], not r["corrupt_batches"],
            r["high_watermark_used"] or 0, -r["log_start_offset"] if r["log_start_offset"]
            is not None else 0, [-ord(c) for c in name],
        )
    if not replicas:
        return None
    return max(replicas.items(), key=score)[0]


def _committed_flags(control: pd.DataFrame, offsets: DataFrame, hw: int | None) -> pd.DataFrame:
    control = control.copy()
    log_offsets = sorted({int(o) for o, s in zip(control["offset"], control["source"])
                          if s == "log"})
    top: dict[int, int] = {}
    if log_offsets and hw is not None:
        for r in offsets.filter(F.col("offset").isin(log_offsets)).select(
            "offset", F.col("top.epoch").alias("e")
        ).collect():
            top[int(r["offset"])] = int(r["e"])
    control["committed"] = [
        src == "snapshot" or (hw is not None and int(o) < hw and top.get(int(o)) == int(e))
        for src, o, e in zip(control["source"], control["offset"], control["epoch"])
    ]
    return control


def _write_table(df: pd.DataFrame, out: Path, name: str) -> str:
    path = out / "tables" / f"{name}.parquet"
    df.to_parquet(path, index=False)
    return str(path.relative_to(out))


# ----------------------------------------------------------------------------- main flow


def run_audit(
    spark: SparkSession,
    inputs: list[str],
    output: str | Path,
    *,
    high_watermark: int | None = None,
    voters: list[int] | None = None,
    make_report: bool = True,
) -> dict[str, Any]:
    """Run the whole audit on an existing SparkSession; returns the summary it writes.

    Raises AuditInputError for bad inputs before any Spark work starts.
    """
    progress = Progress()
    out = Path(output).expanduser().resolve()
    progress.start("discover", inputs=",".join(inputs))
    replicas = discover_replicas(inputs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    files = sum(len(r.files) for r in replicas)
    size = sum(f.size_bytes for r in replicas for f in r.files)
    progress.note(replicas=",".join(r.name for r in replicas), files=files, bytes=size)

    progress.start("ingest", files=files)
    records = ingest(spark, replicas, out)
    batches = batch_table(records, out)
    progress.note(batches=len(batches), records=int(batches["batch_records"].fillna(0).sum()))

    progress.start("corrupt_batches")
    corrupt = corrupt_batches(batches)
    progress.note(corrupt_batches=sum(len(v) for v in corrupt.values()))

    progress.start("high_watermark")
    control = collect_control(records)
    if voters is not None:
        ids, voters_from = list(voters), "--voters"
    else:
        ids, voters_from = voter_ids(control)
    voter_replicas = [r.name for r in replicas if r.node_id is not None and r.node_id in ids]
    if not voter_replicas:
        voter_replicas = [r.name for r in replicas]
    ext = consistency.extents(batches, voter_replicas)
    for r in replicas:  # replicas with no readable batch at all
        ext.setdefault(r.name, consistency.ReplicaExtent(r.name, r.node_id,
                                                         r.name in voter_replicas, None, None, 0))
    entry_df = consistency.entries(records)
    variants = consistency.variants_by_offset(entry_df, voter_replicas).persist()
    offsets = consistency.per_offset(variants).persist()
    hw = consistency.derive_high_watermark(offsets, ext, batches, ids, voter_replicas,
                                           high_watermark)
    progress.note(high_watermark=hw.value, rule=repr(hw.rule), voters=ids, majority=hw.majority)

    progress.start("divergence")
    committed: dict[str, dict[str, Any]] = {}
    uncommitted: dict[str, dict[str, Any]] = {}
    if hw.value is not None:
        committed, stale = consistency.committed_divergence(entry_df, variants, offsets,
                                                            hw.value, hw.majority)
        uncommitted = consistency.uncommitted_divergence(variants, offsets, hw.value)
        uncommitted.update(stale)  # a stale tail starts below HW: it comes first
    progress.note(committed_divergent=sorted(committed), uncommitted_divergent=sorted(uncommitted))

    progress.start("snapshots")
    snaps = consistency.snapshot_infos(records)
    findings = consistency.snapshot_findings(snaps, offsets, hw.value)

    replica_summary: dict[str, dict[str, Any]] = {}
    counts = records.groupBy("replica", "source").agg(
        F.sum(F.when(F.col("error").isNull(), 1).otherwise(0)).alias("n")
    ).collect()
    read: dict[str, dict[str, int]] = {}
    for row in counts:
        read.setdefault(row["replica"], {})[row["source"]] = int(row["n"])
    offset_holes: dict[str, list[tuple[int, int]]] = {}
    for r in replicas:
        e = ext[r.name]
        ok_log = batches[(batches["replica"] == r.name) & (batches["source"] == "log")
                         & batches["error"].isna()]
        offset_holes[r.name] = consistency.holes(
            zip(ok_log["batch_base_offset"].astype(int), ok_log["batch_last_offset"].astype(int))
        )
        hw_used = None if hw.value is None else min(hw.value, e.end)
        first = committed.get(r.name)
        replica_summary[r.name] = {
            "replica": r.name, "root": r.root, "node_id": r.node_id,
            "directory_id": r.directory_id, "is_voter": r.name in voter_replicas,
            "records_read": sum(read.get(r.name, {}).values()),
            "log_records_read": read.get(r.name, {}).get("log", 0),
            "snapshot_records_read": read.get(r.name, {}).get("snapshot", 0),
            "log_start_offset": e.log_start, "log_end_offset": e.log_end,
            "snapshots": [{"end_offset": a, "epoch": b} for a, b in e.snapshots],
            "high_watermark_used": hw_used,
            "first_divergence": (
                None if first is None else
                {k: first[k] for k in ("offset", "epoch", "other_replica", "other_epoch")}
            ),
            "committed_divergent_offsets": 0 if first is None else first["divergent_offsets"],
            "first_uncommitted_divergence": uncommitted.get(r.name),
            "uncommitted_records": (
                0 if hw.value is None or e.log_end is None else max(0, e.log_end - hw.value)
            ),
            "offset_gaps": [
                {"from": a, "to": b, "explained_by_corrupt_batch": any(
                    c["base_offset"] == a and c["source"] == "log"
                    for c in corrupt.get(r.name, []))}
                for a, b in offset_holes[r.name]
            ],
            "corrupt_batches": corrupt.get(r.name, []),
            "quorum_state": (
                None if r.quorum_state is None else
                {"leader_epoch": r.quorum_state.leader_epoch,
                 "leader_id": r.quorum_state.leader_id, "voted_id": r.quorum_state.voted_id}
            ),
        }

    reference = pick_reference(replica_summary)
    replayed = 0
    if reference is not None and hw.value is not None and workload.kv_available():
        replay_findings, replayed = _replay_snapshots(records, snaps, reference,
                                                      ext[reference], hw.value)
        findings += replay_findings
    progress.note(snapshots=len(snaps), replayed_against_log=replayed, reference=reference)
    for f in findings:
        progress.note(finding=f["kind"], replica=f["replica"], end_offset=f["end_offset"])

    progress.start("history", reference=reference)
    control = _committed_flags(control, offsets, hw.value)
    ref_batches = batches[(batches["replica"] == reference) & (batches["source"] == "log")
                          & batches["error"].isna()]
    if hw.value is not None:
        ref_batches = ref_batches[ref_batches["batch_last_offset"] < hw.value]
    changes = history.leader_changes(control)
    epochs = history.leader_epochs(changes, ref_batches)
    vchanges = history.voter_changes(control)
    per_hour = history.elections_per_hour(changes)
    gap_info = history.gaps(changes, ref_batches, offset_holes)
    progress.note(leader_changes=len(changes), epochs=len(epochs), voter_sets=len(vchanges))

    progress.start("workload", reference=reference)
    tl = workload.timeline(ref_batches)
    hist, size_stats = workload.batch_sizes(ref_batches)
    data_records = records.filter(
        (F.col("replica") == (reference or "")) & (F.col("source") == "log")
        & F.col("error").isNull() & ~F.col("is_control")
    )
    if hw.value is not None:
        data_records = data_records.filter(F.col("offset") < hw.value)
    key_stats, top_keys = workload.key_space(data_records)
    progress.note(records=key_stats["records"], distinct_keys=key_stats["distinct_keys"])

    progress.start("write", output=str(out))
    tables = {
        "records": "tables/records", "batches": "tables/batches",
        "leader_changes": _write_table(changes, out, "leader_changes"),
        "leader_epochs": _write_table(epochs, out, "leader_epochs"),
        "voter_changes": _write_table(vchanges, out, "voter_changes"),
        "elections_per_hour": _write_table(per_hour, out, "elections_per_hour"),
        "workload_timeline": _write_table(tl, out, "workload_timeline"),
        "batch_sizes": _write_table(hist, out, "batch_sizes"),
        "top_keys": _write_table(top_keys, out, "top_keys"),
        "snapshots": _write_table(pd.DataFrame([asdict(s) for s in snaps],
                                               columns=["replica", "file", "end_offset", "epoch",
                                                        "data_records", "content_hash"]),
                                  out, "snapshots"),
    }
    variants.unpersist()
    offsets.unpersist()
    errors = [f for f in findings if f.get("severity") == "error"]
    summary: dict[str, Any] = {
        "generated_at": pd.Timestamp.now(tz="UTC").isoformat(),
        "inputs": [str(Path(i).expanduser().resolve()) for i in inputs],
        "output": str(out),
        "spark": {"version": spark.version, "master": spark.sparkContext.master},
        "high_watermark": {
            "value": hw.value, "rule": hw.rule, "agreed_prefix_end": hw.agreed_prefix_end,
            "newest_log_epoch": hw.newest_log_epoch, "majority": hw.majority,
            "voters": hw.voters, "voters_from": voters_from, "voter_replicas": hw.voter_replicas,
        },
        "reference_replica": reference,
        "replicas": replica_summary,
        "findings": findings,
        "consistent": not committed and not errors,
        "corrupt_batches": sum(len(v) for v in corrupt.values()),
        "history": {
            "leader_changes": len(changes), "epochs": len(epochs),
            "voter_sets": vchanges["voters"].tolist() if len(vchanges) else [],
            "elections_max_per_hour": int(per_hour["elections"].max()) if len(per_hour) else 0,
            "gaps": gap_info,
        },
        "workload": {"batch_sizes": size_stats, "key_space": key_stats,
                     "timeline_bucket_ms": int(tl["bucket_ms"].iloc[0]) if len(tl) else None},
        "tables": tables,
    }
    if make_report:
        summary["report"] = str(report.write_report(out, summary, {
            "leader_changes": changes, "leader_epochs": epochs, "voter_changes": vchanges,
            "elections_per_hour": per_hour, "workload_timeline": tl, "batch_sizes": hist,
            "top_keys": top_keys,
        }).relative_to(out))
    summary["elapsed_s"] = round(time.monotonic() - progress.t0, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    log.info("done consistent=%s committed_divergent=%s corrupt=%s elapsed=%.1fs summary=%s",
             summary["consistent"], sorted(committed),
             sorted(k for k, v in corrupt.items() if v), summary["elapsed_s"],
             out / "summary.json")
    return summary


def _replay_snapshots(
    records: DataFrame, snaps: list[consistency.SnapshotInfo], reference: str,
    ext: consistency.ReplicaExtent, hw: int,
) -> tuple[list[dict[str, Any]], int]:
    """Compare every snapshot's KV state with the reference replica's log replayed to its end.

    Returns the findings and how many snapshots were compared.
    """
    to_check = [s for s in snaps if 0 < s.end_offset <= hw]
    if not to_check:
        return [], 0
    base: tuple[int, list[bytes]] | None = None
    start = ext.log_start or 0
    if start > 0:
        # Start from the reference's own snapshot at its log start, if it has one.
        own = [s for s in snaps if s.replica == reference and s.end_offset == start]
        if not own:
            return [], 0
        base = (start, _snapshot_values(records, own[0]))
    pairs = [(s, _snapshot_values(records, s)) for s in to_check if s.end_offset >= start]
    limit = max(s.end_offset for s, _ in pairs) if pairs else 0
    log_rows = (
        records.filter((F.col("replica") == reference) & (F.col("source") == "log")
                       & F.col("error").isNull() & (F.col("offset") < limit))
        .select("offset", "is_control", "value").orderBy("offset")
    )
    stream = ((int(r[0]), bool(r[1]), r[2]) for r in log_rows.toLocalIterator())
    findings, compared = consistency.replay_check(pairs, stream, base)
    return findings, compared


def _snapshot_values(records: DataFrame, s: consistency.SnapshotInfo) -> list[bytes]:
    rows = (
        records.filter((F.col("file") == s.file) & F.col("error").isNull() & ~F.col("is_control"))
        .select("offset", "value").orderBy("offset").collect()
    )
    return [bytes(r["value"] or b"") for r in rows]


def run_from_args(args: argparse.Namespace) -> int:
    """Run the audit for parsed options; returns the exit status (see the module docstring)."""
    try:
        check_arguments(args)
    except UsageError as exc:
        print(f"kraft audit: error: {exc}", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s kraft-audit %(message)s")
    log.setLevel(logging.INFO)
    try:
        discover_replicas(args.input)  # fail fast, before a JVM starts
    except AuditInputError as exc:
        print(f"kraft audit: error: {exc}", file=sys.stderr)
        return 2
    spark = build_session(args.master, conf=args.conf)
    summary = run_audit(spark, args.input, args.output, high_watermark=args.high_watermark,
                        voters=args.voters, make_report=not args.no_report)
    print(json.dumps({
        "consistent": summary["consistent"], "corrupt_batches": summary["corrupt_batches"],
        "high_watermark": summary["high_watermark"]["value"],
        "summary": str(Path(summary["output"]) / "summary.json"),
        "report": summary.get("report"),
    }))
    if args.strict and (not summary["consistent"] or summary["corrupt_batches"]):
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m kraft_pipeline` and spark-submit (`kraft audit` uses
    `add_arguments` and `run_from_args` through the kraft CLI's command table)."""
    return run_from_args(parse_args(argv))
