"""`kraft audit`: read every replica's log and snapshots with Spark and check they agree.

    kraft audit --input DIR [DIR ...] --output OUT [--master URL] [--high-watermark N]
    python -m kraft_pipeline --input ... --output ...
    spark-submit pipeline/__main__.py --input ... --output ...

Steps (each logged as it starts, with counts and elapsed time):

1. discover replica directories; 2. ingest every segment and snapshot once through the
`kraft` data source (`rows=batches`) into the staging table `OUT/tables/batches` (Parquet,
one row per batch: its header, hash, CRC and place in its file, not its bytes); 3. corrupt
batches; 4. voters, the offset ranges (`OUT/tables/offsets`) and the high watermark (rules in
`kraft_pipeline.consistency`);
5. committed and uncommitted divergence; 6. snapshots against each other and against the
log; 7. history; 8. workload; 9. summary.json, Parquet tables and report.html with PNG
charts. A running step logs a progress line at least every 10 s.

The driver's memory does not depend on the size of the logs: every step is a Spark job
whose result is small (counts, one row per replica, snapshot, control record or epoch, the
first divergence per replica); nothing per record or per batch is collected, nothing cached.

Exit status: 0 when the audit ran (whatever it found; with `--strict`, 1 when it found a
committed divergence, a failed snapshot check or a corrupt batch), 2 for bad input (missing
directory, not a metadata directory, bad option), 3 when Spark failed (one line names the
step, the cause and the setting to change; the traceback goes to OUT/logs/audit-error.log and
the finished steps stay in OUT, listed in OUT/steps.json).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
from kraft_pipeline import consistency, history, report, workload
from kraft_pipeline.audit_args import UsageError, check_arguments, parse_args
from kraft_pipeline.consistency import top_epochs_at
from kraft_pipeline.datasource import SCHEMA_DDL, explode_batches
from kraft_pipeline.failure import EXIT_SPARK_FAILURE, explain
from kraft_pipeline.layout import AuditInputError, Replica, discover_replicas
from kraft_pipeline.session import DEFAULT_CONF, build_session
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

log = logging.getLogger("kraft_pipeline.audit")

STEPS = 9
PROGRESS_INTERVAL_S = 10.0
"""A running step logs a progress line at least this often."""


class Progress:
    """Numbered, timed progress lines on the `kraft_pipeline.audit` logger.

    While a step runs, a daemon thread logs a line every `interval` seconds with the step,
    its running time and the share of its Spark tasks done; during `ingest`, where a task
    reads one file (or a group of small ones), that is the share of the input read. Every
    finished step is recorded in OUT/steps.json (name, seconds), so a failed audit shows
    what it finished, with the CPU seconds every process of the audit spent in each
    (the driver JVM and its Python workers: on a busy machine, the figure to compare).
    """

    def __init__(self, out: Path | None = None, interval: float = PROGRESS_INTERVAL_S) -> None:
        self.t0 = time.monotonic()
        self.step = 0
        self.name: str | None = None
        self.out = out
        self.interval = interval
        self.finished: list[dict[str, Any]] = []
        self.input_files = 0
        self.input_bytes = 0
        self._step_t0 = self.t0
        self._step_cpu0 = _tree_cpu_s()
        self._spark: SparkSession | None = None
        self.spark_start_s: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, spark: SparkSession) -> None:
        """Report the Spark tasks of `spark` in the periodic lines (and note how long the
        session took to start, when this Progress was made before it)."""
        self._spark = spark
        if self.step == 0 and self.spark_start_s is None:
            self.spark_start_s = round(time.monotonic() - self.t0, 2)

    def start(self, name: str, **fields: Any) -> None:
        """Log the start of the next step (and record the previous one as finished)."""
        self._finish_step()
        self.step += 1
        self.name = name
        self._step_t0 = time.monotonic()
        self._step_cpu0 = _tree_cpu_s()
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        log.info("step=%d/%d name=%s elapsed=%.1fs %s", self.step, STEPS, name,
                 self._step_t0 - self.t0, extra)
        if self._thread is None and self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="kraft-audit-progress",
                                            daemon=True)
            self._thread.start()

    def note(self, **fields: Any) -> None:
        """Log a fact found during the current step."""
        log.info("step=%d/%d %s", self.step, STEPS, " ".join(f"{k}={v}" for k, v in fields.items()))

    def done(self) -> None:
        """The last step finished: record it and stop the periodic lines."""
        self._finish_step()
        self.name = None
        self.close()

    def close(self) -> None:
        """Stop the periodic lines (waiting a moment for a line being written, so that none
        follows the audit's last line)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def failed(self, cause: str) -> None:
        """Record in steps.json that the current step failed, with the cause."""
        self.close()
        self._write({"step": self.step, "name": self.name, "cause": cause,
                     "seconds": round(time.monotonic() - self._step_t0, 2)})

    def _finish_step(self) -> None:
        if self.name is None:
            return
        cpu = _tree_cpu_s()
        self.finished.append({
            "step": self.step, "name": self.name,
            "seconds": round(time.monotonic() - self._step_t0, 2),
            "cpu_s": (None if cpu is None or self._step_cpu0 is None
                      else round(cpu - self._step_cpu0, 1)),
        })
        self._write(None)

    def _write(self, failed: dict[str, Any] | None) -> None:
        if self.out is None or not self.out.is_dir():
            return
        body = {"finished": self.finished, "failed": failed,
                "elapsed_s": round(time.monotonic() - self.t0, 2)}
        (self.out / "steps.json").write_text(json.dumps(body, indent=2) + "\n")

    def tasks(self) -> tuple[int, int] | None:
        """(tasks done, tasks) of the Spark stages running now, or None."""
        spark = self._spark
        if spark is None:
            return None
        try:
            tracker = spark.sparkContext.statusTracker()
            done = total = 0
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
        except Exception:  # the JVM is gone or busy failing: the step will say why
            return None
        return (done, total) if total else None

    def line(self) -> str:
        """The periodic line for the running step."""
        running = time.monotonic() - self._step_t0
        text = (f"step={self.step}/{STEPS} name={self.name} running={running:.0f}s "
                f"elapsed={time.monotonic() - self.t0:.1f}s")
        tasks = self.tasks()
        if tasks is not None:
            done, total = tasks
            if self.name == "ingest":
                text += (f" read={done}/{total} partitions ({100 * done // total}% of "
                         f"{self.input_files} files, {self.input_bytes / 1e9:.2f} GB)")
            else:
                text += f" tasks={done}/{total} ({100 * done // total}%)"
        return text

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.name is not None:
                log.info("%s", self.line())


# ----------------------------------------------------------------------------- steps


def group_bytes(replicas: list[Replica], parallelism: int) -> int:
    """The data source's `groupSmallFilesBytes` for this input.

    Files under 4 MiB are packed together (per-task overhead dominates such tiny segments),
    but never into fewer than two partitions per core; larger files keep a partition each.
    """
    total = sum(f.size_bytes for r in replicas for f in r.files)
    return max(64 * 1024, min(4 * 1024 * 1024, total // max(1, 2 * parallelism)))


def copies_bytes(replicas: list[Replica], parallelism: int) -> int:
    """The data source's `groupCopiesBytes` for this input.

    The copies of a segment across replicas are read in one partition (so the record check
    frames each distinct batch once) while that partition holds at most half of one core's
    share of the input: enough partitions remain to keep every core busy. Replicas with few large
    segments keep a partition per file.
    """
    total = sum(f.size_bytes for r in replicas for f in r.files)
    return total // max(1, 2 * parallelism)


def ingest(spark: SparkSession, replicas: list[Replica], out: Path) -> DataFrame:
    """Read every file once through the `kraft` source (`rows=batches`, `batchBytes=false`)
    into the staging table OUT/tables/batches (Parquet, one row per batch: its header fields,
    hash, CRC and place in its file); return that table.

    Later steps read only the columns they need from it; the few that decode records (control
    records, ranges where replicas differ, snapshots, the reference replica's workload) read
    those batches' bytes back from the files by position, checked against the indexed CRC
    (`kraft_pipeline.datasource.BatchBytes`). Keeping the bytes out of the table spares the
    JVM from copying, compressing and decompressing every byte of every replica.
    """
    paths = [r.root for r in replicas]
    parallelism = spark.sparkContext.defaultParallelism
    df = (spark.read.format("kraft").option("paths", json.dumps(paths))
          .option("rows", "batches").option("batchBytes", "false")
          .option("groupSmallFilesBytes", str(group_bytes(replicas, parallelism)))
          .option("groupCopiesBytes", str(copies_bytes(replicas, parallelism))).load())
    target = out / "tables" / "batches"
    df.write.mode("overwrite").parquet(str(target))
    staged = sum(p.stat().st_size for p in target.glob("*.parquet"))
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(staging_split_bytes(staged,
                                                                                  parallelism)))
    return spark.read.parquet(str(target))


def staging_split_bytes(staged: int, parallelism: int) -> int:
    """`spark.sql.files.maxPartitionBytes` for reading the staging table back.

    Its Parquet compresses far better than the batches decode (agreeing replicas repeat
    one another, and metadata compresses well), so Spark's default split (the table's bytes
    per core) would give each core one task and a step that decodes one replica's records
    would run on as many cores as that replica's rows happen to span. A quarter of a core's
    share keeps every core busy; at most Spark's default of 128 MiB.
    """
    return max(1 << 20, min(128 << 20, staged // max(1, 4 * parallelism)))


def records_of(batches: DataFrame) -> DataFrame:
    """The record rows (the `kraft` source's record schema) of readable batch rows."""
    return batches.filter(F.col("error").isNull()).mapInArrow(explode_batches, SCHEMA_DDL)


MAX_CORRUPT_LISTED = 1000
"""Corrupt batches listed per replica in summary.json (all are counted)."""


def corrupt_batches(batches: DataFrame) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Unreadable batches per replica (file, position, base offset, kind, message; at most
    MAX_CORRUPT_LISTED each) and their total count."""
    bad = batches.filter(F.col("error").isNotNull())
    w = Window.partitionBy("replica").orderBy("file", "position")
    rows = (bad.select("replica", "file", "source", "position", "batch_base_offset", "epoch",
                       "error", F.row_number().over(w).alias("n"))
            .filter(F.col("n") <= MAX_CORRUPT_LISTED).orderBy("replica", "file", "position")
            .collect())
    total = bad.count() if rows else 0
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["replica"], []).append({
            "file": r["file"], "source": r["source"], "position": int(r["position"]),
            "base_offset": None if r["batch_base_offset"] is None else int(r["batch_base_offset"]),
            "epoch": None if r["epoch"] is None else int(r["epoch"]),
            "kind": str(r["error"]).split(":", 1)[0], "error": r["error"],
        })
    return out, total


def collect_control(batches: DataFrame) -> pd.DataFrame:
    """Distinct control records across replicas, with the replicas holding each."""
    cols = ["source", "offset", "epoch", "timestamp", "control_type", "control_detail",
            "snapshot_end_offset", "replicas"]
    c = (
        records_of(batches.filter(F.col("is_control")))
        .filter(F.col("error").isNull())
        .groupBy("source", "offset", "epoch", "timestamp", "control_type", "control_detail",
                 "snapshot_end_offset")
        .agg(F.sort_array(F.collect_list("replica")).alias("replicas"))
        .toPandas()
    )
    if c.empty:
        return pd.DataFrame(columns=cols)
    return c.sort_values(["source", "offset"]).reset_index(drop=True)


def offset_holes(batches: DataFrame) -> dict[str, list[tuple[int, int]]]:
    """Per replica, the [from, to) offset ranges missing inside its readable log batches."""
    w = Window.partitionBy("replica").orderBy("batch_base_offset", "batch_last_offset")
    reach = F.max("batch_last_offset").over(w.rowsBetween(Window.unboundedPreceding, -1))
    rows = (batches.filter(F.col("error").isNull() & (F.col("source") == "log"))
            .select("replica", "batch_base_offset", (reach + 1).alias("hole_from"))
            .filter(F.col("batch_base_offset") > F.col("hole_from"))
            .orderBy("replica", "hole_from").collect())
    out: dict[str, list[tuple[int, int]]] = {}
    for r in rows:
        out.setdefault(r["replica"], []).append((int(r["hole_from"]),
                                                 int(r["batch_base_offset"])))
    return out


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


def build_offsets(spark: SparkSession, batches: DataFrame, voter_replicas: list[str],
                  out: Path) -> dict[str, DataFrame]:
    """The per-range view of the logs (see `kraft_pipeline.consistency`), written to
    OUT/tables/{offsets,entries,variants} and read back from there by the later steps.

    `entries` and `variants` hold the refined offsets only (none when the replicas agree);
    `clean_spans` are the spans of the uniform ranges.
    """
    tables = out / "tables"
    span_df = consistency.spans(batches)
    plan = consistency.ranges(span_df)
    plan.write.mode("overwrite").parquet(str(tables / "ranges"))
    plan = spark.read.parquet(str(tables / "ranges"))
    refine = plan.filter(F.col("refine")).select(
        F.col("offset").alias("batch_base_offset"), F.col("last").alias("batch_last_offset"))
    to_decode = batches.filter(F.col("source") == "log").join(
        refine, ["batch_base_offset", "batch_last_offset"], "left_semi")
    consistency.entries(records_of(to_decode)).write.mode("overwrite").parquet(
        str(tables / "entries"))
    entry_df = spark.read.parquet(str(tables / "entries"))
    consistency.variants_by_offset(entry_df, voter_replicas).write.mode("overwrite").parquet(
        str(tables / "variants"))
    variants = spark.read.parquet(str(tables / "variants"))
    clean_spans = span_df.join(plan.filter(~F.col("refine")).select("offset", "last"),
                               ["offset", "last"], "left_semi")
    offsets = consistency.span_offsets(clean_spans, voter_replicas).withColumn(
        "refined", F.lit(False)).unionByName(
        consistency.per_offset(variants).withColumn("refined", F.lit(True)))
    offsets.write.mode("overwrite").parquet(str(tables / "offsets"))
    return {"offsets": spark.read.parquet(str(tables / "offsets")), "entries": entry_df,
            "variants": variants, "clean_spans": clean_spans}


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
    log_offsets = [int(o) for o, s in zip(control["offset"], control["source"]) if s == "log"]
    top = top_epochs_at(offsets, log_offsets) if hw is not None else {}
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
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the whole audit on an existing SparkSession; returns the summary it writes.

    Raises AuditInputError for bad inputs before any Spark work starts. Nothing per record
    or per batch is collected to the driver: the steps are Spark jobs whose results are
    counts, the first divergence per replica, a handful of control records and the small
    history and workload tables.
    """
    out = Path(output).expanduser().resolve()
    if progress is None:
        progress = Progress(out)
    progress.out = out
    progress.watch(spark)
    try:
        return _run_steps(spark, inputs, out, progress, high_watermark, voters, make_report)
    finally:
        progress.close()


def _run_steps(
    spark: SparkSession, inputs: list[str], out: Path, progress: Progress,
    high_watermark: int | None, voters: list[int] | None, make_report: bool,
) -> dict[str, Any]:
    progress.start("discover", inputs=",".join(inputs))
    replicas = discover_replicas(inputs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    files = sum(len(r.files) for r in replicas)
    size = sum(f.size_bytes for r in replicas for f in r.files)
    progress.input_files, progress.input_bytes = files, size
    progress.note(replicas=",".join(r.name for r in replicas), files=files, bytes=size)

    progress.start("ingest", files=files, bytes=size)
    batches = ingest(spark, replicas, out)
    totals = batches.agg(F.count(F.lit(1)).alias("batches"),
                         F.sum("batch_records").alias("records")).collect()[0]
    progress.note(batches=int(totals["batches"]), records=int(totals["records"] or 0))

    progress.start("corrupt_batches")
    corrupt, corrupt_total = corrupt_batches(batches)
    progress.note(corrupt_batches=corrupt_total)

    progress.start("high_watermark")
    control = collect_control(batches)
    if voters is not None:
        ids, voters_from = list(voters), "--voters"
    else:
        ids, voters_from = voter_ids(control)
    voter_replicas = [r.name for r in replicas if r.node_id is not None and r.node_id in ids]
    if not voter_replicas:
        voter_replicas = [r.name for r in replicas]
    ext = consistency.extents_of(batches, voter_replicas)
    for r in replicas:  # replicas with no readable batch at all
        ext.setdefault(r.name, consistency.ReplicaExtent(r.name, r.node_id,
                                                         r.name in voter_replicas, None, None, 0))
    view = build_offsets(spark, batches, voter_replicas, out)
    offsets = view["offsets"]
    newest = (batches.filter(F.col("error").isNull() & (F.col("source") == "log"))
              .agg(F.max("epoch").alias("e")).collect()[0]["e"])
    hw = consistency.derive_high_watermark(offsets, ext, None if newest is None else int(newest),
                                           ids, voter_replicas, high_watermark)
    progress.note(high_watermark=hw.value, rule=repr(hw.rule), voters=ids, majority=hw.majority)

    progress.start("divergence")
    committed: dict[str, dict[str, Any]] = {}
    uncommitted: dict[str, dict[str, Any]] = {}
    if hw.value is not None:
        committed, stale = consistency.committed_divergence(
            view["entries"], view["variants"], offsets, hw.value, hw.majority,
            clean_spans=view["clean_spans"])
        uncommitted = consistency.uncommitted_divergence(view["variants"], offsets, hw.value)
        uncommitted.update(stale)  # a stale tail starts below HW: it comes first
    progress.note(committed_divergent=sorted(committed), uncommitted_divergent=sorted(uncommitted))

    progress.start("snapshots")
    snap_records = records_of(batches.filter(F.col("source") == "snapshot"))
    snaps = consistency.snapshot_infos(snap_records)
    findings = consistency.snapshot_findings(snaps, offsets, hw.value)

    replica_summary: dict[str, dict[str, Any]] = {}
    read: dict[str, dict[str, int]] = {}
    for row in batches.filter(F.col("error").isNull()).groupBy("replica", "source").agg(
        F.sum("batch_records").alias("n")
    ).collect():
        read.setdefault(row["replica"], {})[row["source"]] = int(row["n"] or 0)
    holes = offset_holes(batches)
    for r in replicas:
        e = ext[r.name]
        replica_holes = holes.get(r.name, [])
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
                for a, b in replica_holes
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
        replay_findings, replayed = _replay_snapshots(batches, snap_records, snaps, reference,
                                                      ext[reference], hw.value)
        findings += replay_findings
    progress.note(snapshots=len(snaps), replayed_against_log=replayed, reference=reference)
    for f in findings:
        progress.note(finding=f["kind"], replica=f["replica"], end_offset=f["end_offset"])

    progress.start("history", reference=reference)
    control = _committed_flags(control, offsets, hw.value)
    ref_batches = batches.filter((F.col("replica") == (reference or "")) & (F.col("source") == "log")
                                 & F.col("error").isNull())
    if hw.value is not None:
        ref_batches = ref_batches.filter(F.col("batch_last_offset") < hw.value)
    ref_meta = ref_batches.select("epoch", "batch_base_offset", "batch_last_offset", "timestamp",
                                  "is_control", "batch_records", "batch_size")
    changes = history.leader_changes(control)
    epochs = history.leader_epochs(changes, history.epoch_stats(ref_meta))
    vchanges = history.voter_changes(control)
    per_hour = history.elections_per_hour(changes)
    gap_info = history.gaps(changes, history.time_gaps(ref_meta), holes)
    progress.note(leader_changes=len(changes), epochs=len(epochs), voter_sets=len(vchanges))

    progress.start("workload", reference=reference)
    tl = workload.timeline_of(ref_meta)
    hist, size_stats = workload.batch_sizes_of(ref_meta)
    key_rows = batches.filter((F.col("replica") == (reference or "")) & (F.col("source") == "log")
                              & F.col("error").isNull())
    key_stats, top_keys = workload.key_space_of(key_rows, hw.value,
                                                str(out / "tables" / "key_partials"))
    progress.note(records=key_stats["records"], distinct_keys=key_stats["distinct_keys"])

    progress.start("write", output=str(out))
    tables = {
        "batches": "tables/batches", "offsets": "tables/offsets",
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
        "corrupt_batches": corrupt_total,
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
    progress.done()
    summary["steps"] = progress.finished
    summary["spark_start_s"] = progress.spark_start_s
    summary["resources"] = driver_resources(spark, out / "logs" / "gc.log")
    summary["elapsed_s"] = round(time.monotonic() - progress.t0, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    log.info("done consistent=%s committed_divergent=%s corrupt=%s elapsed=%.1fs summary=%s",
             summary["consistent"], sorted(committed),
             sorted(k for k, v in corrupt.items() if v), summary["elapsed_s"],
             out / "summary.json")
    return summary


def python_peak_rss_mib() -> float:
    """This process's peak resident set (MiB) since it started running Python.

    Linux's `VmHWM` (/proc/self/status) is the high-water mark of this program's own address
    space. `getrusage().ru_maxrss`, the fallback elsewhere, also counts the parent's pages
    that a forked child carried until its exec: an audit started by a large process (the
    benchmark that wrote the input, a notebook) would report that process's size.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


_GC_LINE = re.compile(r"(\d+)M->(\d+)M\((\d+)M\)")


def driver_resources(spark: SparkSession, gc_log: Path | None = None) -> dict[str, Any]:
    """The driver's memory high-water marks: the Python process's peak RSS and the driver
    JVM's peak heap (the sum of its heap pools' peaks, which bounds the peak heap in use;
    in local mode the executors run in that JVM), with the JVM's maximum heap; from the GC
    log when there is one, the largest heap before and after a collection (the latter is
    the most the JVM held live); and the CPU seconds of every process of the audit."""
    out: dict[str, Any] = {"python_peak_rss_mib": python_peak_rss_mib(), "cpu_s": _tree_cpu_s()}
    try:
        jvm = spark.sparkContext._jvm
        mf = jvm.java.lang.management.ManagementFactory
        heap_type = jvm.java.lang.management.MemoryType.HEAP
        peak = old = 0
        for pool in mf.getMemoryPoolMXBeans():
            if pool.getType() == heap_type:
                used = pool.getPeakUsage().getUsed()
                peak += used
                if "Old" in pool.getName() or "Tenured" in pool.getName():
                    old = max(old, used)
        out["jvm_peak_heap_mib"] = round(peak / 2**20, 1)
        out["jvm_peak_old_gen_mib"] = round(old / 2**20, 1)
        out["jvm_max_heap_mib"] = round(jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**20, 1)
    except Exception as exc:  # a driver we cannot ask (e.g. Spark Connect): say so
        out["jvm_error"] = f"{type(exc).__name__}: {exc}"[:200]
    if gc_log is not None and gc_log.exists():
        pairs = [(int(a), int(b)) for a, b, _ in _GC_LINE.findall(gc_log.read_text())]
        if pairs:
            out["jvm_gc_max_before_mib"] = max(a for a, _ in pairs)
            out["jvm_gc_max_after_mib"] = max(b for _, b in pairs)
            out["jvm_gc_count"] = len(pairs)
    return out


def _tree_cpu_s() -> float | None:
    """CPU seconds used so far by this process and everything it started (the driver JVM,
    the Python workers; reaped children included), from /proc; None where there is none."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        parent: dict[int, int] = {}
        used: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            parent[int(entry)] = int(fields[1])
            used[int(entry)] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    except (OSError, ValueError):
        return None
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0)
        todo.extend(children.get(pid, []))
    return round(total / tick, 1)


def _replay_snapshots(
    batches: DataFrame, snap_records: DataFrame, snaps: list[consistency.SnapshotInfo],
    reference: str, ext: consistency.ReplicaExtent, hw: int,
) -> tuple[list[dict[str, Any]], int]:
    """Compare every snapshot's KV state with the reference replica's log replayed to its end.

    Returns the findings and how many snapshots were compared. The log is streamed to the
    driver a partition at a time; each snapshot's values are held while it is compared.
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
        base = (start, _snapshot_values(snap_records, own[0]))
    checked = [s for s in to_check if s.end_offset >= start]
    if not checked:
        return [], 0
    limit = max(s.end_offset for s in checked)
    pairs = ((s, _snapshot_values(snap_records, s)) for s in checked)
    log_batches = batches.filter((F.col("replica") == reference) & (F.col("source") == "log")
                                 & (F.col("batch_base_offset") < limit))
    log_rows = (
        records_of(log_batches).filter(F.col("offset") < limit)
        .select("offset", "is_control", "value").orderBy("offset")
    )
    stream = ((int(r[0]), bool(r[1]), r[2]) for r in log_rows.toLocalIterator())
    findings, compared = consistency.replay_check(list(pairs), stream, base)
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
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                            format="%(asctime)s kraft-audit %(message)s")
    logging.getLogger("kraft_pipeline").setLevel(logging.INFO)
    try:
        discover_replicas(args.input)  # fail fast, before a JVM starts
    except AuditInputError as exc:
        print(f"kraft audit: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output).expanduser().resolve()
    logs = out / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"kraft audit: error: --output {args.output}: {exc}", file=sys.stderr)
        return 2
    error_log = logs / "audit-error.log"
    # Py4J reports a dying JVM through logging, with tracebacks: those go to the log file,
    # and no handler on the terminal passes them on.
    py4j_log = logging.getLogger("py4j")
    py4j_log.propagate = False
    py4j_log.addHandler(logging.FileHandler(error_log))
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not record.name.startswith("py4j"))
    logging.raiseExceptions = False  # a failing log handler must not print a traceback
    with StrayOutput(error_log) as stray:
        return _run_session(args, out, logs, stray)


def _run_session(args: argparse.Namespace, out: Path, logs: Path, stray: StrayOutput) -> int:
    progress = Progress(out)
    spark = None
    master = args.master or "local[*]"
    memory = args.conf.get("spark.driver.memory", DEFAULT_CONF["spark.driver.memory"])
    try:
        spark = build_session(args.master, conf=args.conf, log_dir=logs)
        stray.quiet_accumulator_server(spark)
        master = spark.sparkContext.master
        memory = spark.sparkContext.getConf().get("spark.driver.memory", memory)
        summary = run_audit(spark, args.input, out, high_watermark=args.high_watermark,
                            voters=args.voters, make_report=not args.no_report,
                            progress=progress)
    except (KeyboardInterrupt, AuditInputError):
        raise
    except Exception as exc:
        step = (f"step {progress.step}/{STEPS} ({progress.name})" if progress.name
                else "Spark start-up")
        why = explain(step, exc, master, memory, logs / "spark.log")
        progress.failed(why.cause)
        stray.record(f"{step} failed", type(exc), exc, exc.__traceback__)
        print(f"kraft audit: {step} failed: {why.cause}; {why.remedy}. Finished steps are "
              f"kept in {out} (steps.json); details in {stray.path}", file=sys.stderr)
        stray.detach()  # that line is the last the terminal gets: the dying JVM says the rest
        _stop_quietly(spark)
        return EXIT_SPARK_FAILURE
    print(json.dumps({
        "consistent": summary["consistent"], "corrupt_batches": summary["corrupt_batches"],
        "high_watermark": summary["high_watermark"]["value"],
        "summary": str(Path(summary["output"]) / "summary.json"),
        "report": summary.get("report"),
    }))
    if args.strict and (not summary["consistent"] or summary["corrupt_batches"]):
        return 1
    return 0


class StrayOutput:
    """Sends what nobody asked to print during an audit to the error log, not the terminal.

    When the driver JVM dies, Python code the audit does not run itself finds out first and
    complains: a Py4J call on another thread raises (`threading.excepthook` prints it), the
    finaliser of a Java object's proxy fails to release it (`sys.unraisablehook`). Inside
    this context both hooks append the traceback to `path`. After a failure, `detach` points
    this process's stderr (file descriptor 2 and `sys.stderr`) at `path` for good: the
    audit's one-line explanation is then the last thing the terminal gets, whatever the
    interpreter prints on its way out. (The audit's callers exit right after a failure.)
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.detached = False
        self._saved: tuple[Any, Any] | None = None

    def __enter__(self) -> StrayOutput:
        self._saved = (threading.excepthook, sys.unraisablehook)
        threading.excepthook = self._thread_failed
        sys.unraisablehook = self._unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None and not self.detached:
            threading.excepthook, sys.unraisablehook = self._saved

    def record(self, title: str, exc_type: Any, value: Any, tb: Any) -> None:
        """Append `title` and the traceback of (`exc_type`, `value`, `tb`) to the log."""
        try:
            text = "".join(traceback.format_exception(exc_type, value, tb))
        except Exception:  # a Py4J error whose text needs the JVM that is gone
            text = (f"{getattr(exc_type, '__name__', exc_type)}: {getattr(value, 'errmsg', '')}"
                    f"\n" + "".join(traceback.format_tb(tb)))
        try:
            with self.path.open("a") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {title}\n{text}")
        except OSError:
            pass  # nowhere left to say it; never the terminal

    def _thread_failed(self, args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "?"
        self.record(f"uncaught in thread {name}", args.exc_type, args.exc_value,
                     args.exc_traceback)

    def _unraisable(self, args: Any) -> None:
        try:
            where = repr(args.object)
        except Exception:  # a Java object's proxy asks the JVM for its text
            where = type(args.object).__name__
        self.record(f"{args.err_msg or 'Exception ignored in'}: {where}", args.exc_type,
                     args.exc_value, args.exc_traceback)

    def detach(self) -> None:
        """From now on this process's stderr goes to the error log."""
        sys.stderr.flush()
        with self.path.open("ab") as f:
            os.dup2(f.fileno(), 2)
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 (stays open)
        self.detached = True

    def quiet_accumulator_server(self, spark: SparkSession) -> None:
        """PySpark's accumulator server prints a traceback to stderr itself (not through the
        hooks) when the JVM dies under it: send it to the log too."""
        server = getattr(spark.sparkContext, "_accumulatorServer", None)
        if server is None:
            return

        def handle_error(request: Any, client_address: Any) -> None:
            self.record(f"accumulator server: request from {client_address} failed",
                        *sys.exc_info())

        server.handle_error = handle_error


def _stop_quietly(spark: SparkSession | None) -> None:
    if spark is None:
        return
    try:
        spark.stop()
    except Exception:  # the JVM is already gone; nothing left to release
        log.debug("spark.stop() after a failure", exc_info=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m kraft_pipeline` and spark-submit (`kraft audit` uses
    `add_arguments` and `run_from_args` through the kraft CLI's command table)."""
    return run_from_args(parse_args(argv))
