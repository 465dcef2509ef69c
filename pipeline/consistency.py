"""Cross-replica consistency: the high watermark rule, divergence and snapshot checks.

Terms used in the audit's output:

- *entry* — what a replica holds at one log offset: `(epoch, record hash)`, the hash being
  xxhash64 over the control flag, key, value and timestamp of the record (`record_hash`).
- *agreed prefix* — the longest run of offsets, from the lowest offset any replica holds,
  where a majority of the voters hold the same entry. A voter whose log starts above an offset
  (it replaced that prefix by a snapshot) counts as agreeing there.
- *high watermark used* (the log on disk carries no high watermark, so the audit derives one,
  conservatively):

  1. `--high-watermark N` wins when given.
  2. Otherwise HW = end of the agreed prefix, provided its newest entry's epoch is the newest
     epoch in any replica's log: then a leader of that epoch had its own entry on a majority,
     which is when Raft (section 5.4.2) counts everything before it as committed.
  3. If a replica's log holds a newer epoch than the agreed prefix reaches, the prefix's last
     epoch might still be overwritten (Raft's "figure 8"), so HW = the first offset of the
     prefix's newest epoch.

  Each replica is checked up to `min(HW, its log end)`.
- *committed divergence* — an offset below the replica's high watermark where its entry differs
  from the majority's in a way no correct replica can show: the same epoch with other bytes,
  a newer epoch than the majority's, or a difference after which the replica agrees again.
  A safety violation or corruption.
- *uncommitted divergence* — (a) an offset at or above HW where replicas hold different
  entries, or (b) a replica whose log, from some offset on, holds only entries of older epochs
  than the majority's (a *stale tail*: a deposed leader's unreplicated entries, or a follower
  that missed elections). Both are normal Raft states that the leader's next Fetch response
  truncates (KIP-320); they are reported separately and never counted as corruption.

*Offset ranges.* Replicas of a healthy quorum hold the leader's batches byte for byte, so the
rules run on ranges of offsets, not on single offsets: every batch is a *span*
`(replica, first, last, epoch, h)` where `h` is the hash of the batch's bytes
(`batch_hash`). A range `[first, last]` whose spans all have the same bytes, and which no
span of other bounds overlaps, has one entry per offset held by exactly those replicas: it is
kept as one row. Every other range (other bytes, or batches cut at other offsets) is
*refined*: its batches are decoded and compared record by record, with the entry hash above.
The result, `offsets`, has one row per uniform range or refined offset
(`offset`..`last`, `variants`, `top`, `holders`); the rules below give the same answers as
on single offsets, and only the refined offsets (none when the replicas agree) cost work per
record.

Everything runs as Spark joins and aggregations; what reaches the driver is a handful of
rows: counts, the first divergence per replica, the variants at a few offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

log = logging.getLogger(__name__)


def record_hash() -> Column:
    """xxhash64 of one record's identity: control flag, key, value and timestamp.

    Lengths are hashed as well because xxhash64 skips nulls: a null key and an empty key, or
    bytes moving between key and value, must not hash alike.
    """
    return F.xxhash64(
        F.col("is_control"),
        F.coalesce(F.length("key"), F.lit(-1)),
        F.col("key"),
        F.coalesce(F.length("value"), F.lit(-1)),
        F.col("value"),
        F.col("timestamp"),
    )


@dataclass
class ReplicaExtent:
    """What one replica holds: log range, record count, snapshots, voter status."""

    name: str
    node_id: int | None
    is_voter: bool
    log_start: int | None
    log_end: int | None
    records: int
    snapshots: list[tuple[int, int]] = field(default_factory=list)

    @property
    def end(self) -> int:
        """The end of what the replica holds, by log or by snapshot (0 when empty)."""
        snap_end = max((e for e, _ in self.snapshots), default=0)
        return max(self.log_end or 0, snap_end)


@dataclass
class HighWatermark:
    """The derived high watermark and how it was obtained."""

    value: int | None
    rule: str
    agreed_prefix_end: int | None
    newest_log_epoch: int | None
    majority: int
    voters: list[int]
    voter_replicas: list[str]


def extents_of(batches: DataFrame, voters: Iterable[str]) -> dict[str, ReplicaExtent]:
    """Per-replica extents from the batch table in Spark: one aggregate row per replica and
    one row per snapshot reach the driver."""
    voter_set = set(voters)
    ok = batches.filter(F.col("error").isNull())
    is_log = F.col("source") == "log"
    per = ok.groupBy("replica").agg(
        F.first("node_id", ignorenulls=True).alias("node_id"),
        F.min(F.when(is_log, F.col("batch_base_offset"))).alias("log_start"),
        F.max(F.when(is_log, F.col("batch_last_offset"))).alias("log_last"),
        F.sum(F.when(is_log, F.col("batch_records")).otherwise(0)).alias("records"),
    ).collect()
    snaps = (ok.filter(F.col("source") == "snapshot")
             .select("replica", "snapshot_end_offset", "snapshot_epoch").distinct().collect())
    by_replica: dict[str, list[tuple[int, int]]] = {}
    for r in snaps:
        by_replica.setdefault(r["replica"], []).append(
            (int(r["snapshot_end_offset"]), int(r["snapshot_epoch"])))
    node_ids = {r["replica"]: r["node_id"] for r in per}
    out: dict[str, ReplicaExtent] = {}
    for r in sorted(per, key=lambda r: r["replica"]):
        name = r["replica"]
        out[name] = ReplicaExtent(
            name=name,
            node_id=None if node_ids[name] is None else int(node_ids[name]),
            is_voter=name in voter_set,
            log_start=None if r["log_start"] is None else int(r["log_start"]),
            log_end=None if r["log_last"] is None else int(r["log_last"]) + 1,
            records=int(r["records"] or 0),
            snapshots=sorted(by_replica.get(name, [])),
        )
    return out


def extents(batches: pd.DataFrame, voters: Iterable[str]) -> dict[str, ReplicaExtent]:
    """Per-replica extents from a small batch table in pandas (valid batches only)."""
    voter_set = set(voters)
    out: dict[str, ReplicaExtent] = {}
    for name, group in batches.groupby("replica", sort=True):
        node_id = group["node_id"].dropna()
        ok = group[group["error"].isna()]
        log_rows = ok[ok["source"] == "log"]
        snaps = ok[ok["source"] == "snapshot"][["snapshot_end_offset", "snapshot_epoch"]]
        snaps = snaps.drop_duplicates()
        out[str(name)] = ReplicaExtent(
            name=str(name),
            node_id=int(node_id.iloc[0]) if len(node_id) else None,
            is_voter=str(name) in voter_set,
            log_start=int(log_rows["batch_base_offset"].min()) if len(log_rows) else None,
            log_end=int(log_rows["batch_last_offset"].max()) + 1 if len(log_rows) else None,
            records=int(log_rows["batch_records"].sum()) if len(log_rows) else 0,
            snapshots=sorted(
                (int(e), int(p))
                for e, p in zip(snaps["snapshot_end_offset"], snaps["snapshot_epoch"])
            ),
        )
    return out


def first_hole(intervals: Iterable[tuple[int, int]], start: int | None = None) -> int | None:
    """The first offset >= start covered by no [first, last] interval, below the last covered.

    Returns None when the union of the intervals is contiguous from `start` to its end.
    """
    spans = sorted(intervals)
    if not spans:
        return None
    cursor = spans[0][0] if start is None else start
    for first, last in spans:
        if first > cursor:
            return cursor
        cursor = max(cursor, last + 1)
    return None


def holes(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Every [first, end) range missing between the union of [first, last] intervals."""
    spans = sorted(intervals)
    found: list[tuple[int, int]] = []
    if not spans:
        return found
    cursor = spans[0][1] + 1
    for first, last in spans[1:]:
        if first > cursor:
            found.append((cursor, first))
        cursor = max(cursor, last + 1)
    return found


def entries(records: DataFrame) -> DataFrame:
    """(replica, offset, epoch, h) of every readable log record."""
    return records.filter(F.col("error").isNull() & (F.col("source") == "log")).select(
        "replica", "offset", "epoch", record_hash().alias("h")
    )


def variants_by_offset(entry_df: DataFrame, voter_replicas: list[str]) -> DataFrame:
    """One row per (offset, epoch, h) with how many replicas (and voters) hold it, and which."""
    is_voter = F.col("replica").isin(voter_replicas) if voter_replicas else F.lit(True)
    return entry_df.groupBy("offset", "epoch", "h").agg(
        F.sum(F.when(is_voter, 1).otherwise(0)).alias("votes"),
        F.count(F.lit(1)).alias("n"),
        F.sort_array(F.collect_list("replica")).alias("replicas"),
    )


def per_offset(variants: DataFrame) -> DataFrame:
    """One row per offset: number of distinct entries and the entry most voters hold (`top`).

    Rows have the shape of `offsets` (see the module docstring) with `last` = `offset`.
    """
    return variants.groupBy("offset").agg(
        F.count(F.lit(1)).alias("variants"),
        # Ties between entries are broken by the entry itself so reruns pick the same one.
        F.max_by(F.struct("epoch", "h", "replicas", "votes"),
                 F.struct("votes", "n", "epoch", "h")).alias("top"),
        F.sum("n").alias("holders"),
    ).select("offset", F.col("offset").alias("last"), "variants", "top", "holders")


def spans(batches: DataFrame) -> DataFrame:
    """(replica, offset, last, epoch, h) of every readable log batch that holds records:
    `offset`..`last` are its first and last offsets and `h` the hash of its bytes."""
    return batches.filter(
        F.col("error").isNull() & (F.col("source") == "log") & (F.col("batch_records") > 0)
    ).select("replica", F.col("batch_base_offset").alias("offset"),
             F.col("batch_last_offset").alias("last"), "epoch", F.col("batch_hash").alias("h"))


def ranges(span_df: DataFrame) -> DataFrame:
    """One row per distinct span range (`offset`, `last`) with `refine`: true when its spans
    differ in bytes or epoch, or a span of other bounds overlaps it.

    The overlap test orders every distinct range once (a window over all of them): one row
    per batch, never per record.
    """
    r = span_df.groupBy("offset", "last").agg(
        F.count_distinct("epoch", "h").alias("kinds"))
    w = Window.orderBy("offset", "last")
    before = F.max("last").over(w.rowsBetween(Window.unboundedPreceding, -1))
    after = F.lead("offset").over(w)
    return r.select(
        "offset", "last",
        ((F.col("kinds") > 1) | (F.coalesce(before >= F.col("offset"), F.lit(False)))
         | F.coalesce(after <= F.col("last"), F.lit(False))).alias("refine"),
    )


def span_offsets(clean_spans: DataFrame, voter_replicas: list[str]) -> DataFrame:
    """`offsets` rows of uniform ranges: one entry, held by every replica with the span."""
    is_voter = F.col("replica").isin(voter_replicas) if voter_replicas else F.lit(True)
    return clean_spans.groupBy("offset", "last", "epoch", "h").agg(
        F.sum(F.when(is_voter, 1).otherwise(0)).alias("votes"),
        F.count(F.lit(1)).alias("n"),
        F.sort_array(F.collect_list("replica")).alias("replicas"),
    ).select(
        "offset", "last", F.lit(1).cast("long").alias("variants"),
        F.struct("epoch", "h", "replicas", "votes").alias("top"),
        F.col("n").alias("holders"),
    )


def top_epochs_at(offsets: DataFrame, wanted: Iterable[int]) -> dict[int, int]:
    """The majority entry's epoch (`top.epoch`) at each wanted offset that some replica holds."""
    points = sorted({int(o) for o in wanted})
    if not points:
        return {}
    spark = offsets.sparkSession
    p = spark.createDataFrame([(o,) for o in points], "at long")
    rows = F.broadcast(p).join(
        offsets, (F.col("at") >= F.col("offset")) & (F.col("at") <= F.col("last"))
    ).select("at", F.col("top.epoch").alias("e")).collect()
    return {int(r["at"]): int(r["e"]) for r in rows}


def derive_high_watermark(
    offsets: DataFrame,
    ext: dict[str, ReplicaExtent],
    newest_epoch: int | None,
    voters: list[int],
    voter_replicas: list[str],
    override: int | None,
) -> HighWatermark:
    """Apply the high watermark rule of the module docstring.

    `offsets` has one row per range (see the module docstring); `newest_epoch` is the newest
    epoch of any readable log batch (None when there is none).
    """
    majority = len(voters) // 2 + 1 if voters else len(ext) // 2 + 1
    if override is not None:
        return HighWatermark(override, "override (--high-watermark)", None, newest_epoch,
                             majority, voters, voter_replicas)
    if newest_epoch is None:
        return HighWatermark(None, "no readable log records", None, None, majority, voters,
                             voter_replicas)
    # A voter whose log starts above an offset (a snapshot replaced it) agrees there. The
    # count of such voters only drops at their log starts, so within a range the first
    # offset short of a majority is the range's first offset or one of those starts.
    starts = [ext[n].log_start for n in voter_replicas if ext[n].log_start]

    def short_at(at: Column) -> Column:
        compacted = F.lit(0)
        for start in starts:
            compacted = compacted + F.when(at < F.lit(start), 1).otherwise(0)
        return F.col("top.votes") + compacted < majority

    candidates = [F.when(short_at(F.col("offset")), F.col("offset"))]
    for start in sorted(set(starts)):
        at = F.lit(start).cast("long")
        candidates.append(F.when((at > F.col("offset")) & (at <= F.col("last")) & short_at(at),
                                 at))
    first_short = F.least(*candidates) if len(candidates) > 1 else candidates[0]
    # The first offset no replica holds: a range starting after everything before it ends.
    w = Window.orderBy("offset")
    reach = F.max("last").over(w.rowsBetween(Window.unboundedPreceding, -1))
    stats = (
        offsets.select("offset", "last", first_short.alias("short"),
                       F.when(F.col("offset") > reach + 1, reach + 1).alias("hole"))
        .agg(F.min("short").alias("bad"), F.min("hole").alias("hole"),
             F.min("offset").alias("lo"), F.max("last").alias("hi"))
        .collect()[0]
    )
    if stats["lo"] is None:
        return HighWatermark(None, "no readable log records", None, None, majority, voters,
                             voter_replicas)
    end = stats["bad"] if stats["bad"] is not None else stats["hi"] + 1
    if stats["hole"] is not None and stats["hole"] < end:
        end = stats["hole"]
    if end <= stats["lo"]:
        return HighWatermark(int(stats["lo"]), "no agreed prefix: nothing is known committed",
                             end, newest_epoch, majority, voters, voter_replicas)
    prefix_epoch = (
        offsets.filter(F.col("offset") < end).agg(F.max("top.epoch").alias("e")).collect()[0]["e"]
    )
    if prefix_epoch >= newest_epoch:
        return HighWatermark(int(end), "end of the majority-agreed prefix", int(end),
                             newest_epoch, majority, voters, voter_replicas)
    start_of_epoch = (
        offsets.filter((F.col("offset") < end) & (F.col("top.epoch") == prefix_epoch))
        .agg(F.min("offset").alias("s"))
        .collect()[0]["s"]
    )
    return HighWatermark(
        int(start_of_epoch),
        f"start of epoch {prefix_epoch}: epoch {newest_epoch} exists but is not on a majority",
        int(end), newest_epoch, majority, voters, voter_replicas,
    )


def _other_holders(
    variants: DataFrame, firsts: dict[str, int]
) -> dict[int, list[Any]]:
    """The variants (entries with their replicas) at each of the given offsets."""
    wanted = sorted(set(firsts.values()))
    by_offset: dict[int, list[Any]] = {}
    for v in variants.filter(F.col("offset").isin(wanted)).collect():
        by_offset.setdefault(int(v["offset"]), []).append(v)
    for rows in by_offset.values():
        rows.sort(key=lambda v: (-v["votes"], -v["n"], v["replicas"][0]))
    return by_offset


def committed_divergence(
    entry_df: DataFrame, variants: DataFrame, offsets: DataFrame, hw: int, majority: int,
    clean_spans: DataFrame | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Divergence below HW, split into (committed divergence, stale tails).

    For each replica, the first offset below HW where its entry differs from the majority's,
    or where replicas disagree and no entry has a majority (possible only below an HW given
    with `--high-watermark`): there every holder diverges. From that offset on, if every
    entry the replica holds below HW is from an *older* epoch than the majority's entry at
    the same offset, the replica carries a stale suffix that was never committed (a deposed
    leader's or a partitioned follower's tail; the leader truncates it on the next Fetch,
    KIP-320): reported as uncommitted divergence. Anything else — the same epoch with other
    bytes, a newer epoch, or agreeing again later — is a committed divergence.
    `other_replica` holds the majority entry, or (when the replica holds it) another entry.

    `entry_df`, `variants` and `offsets` cover the refined offsets (see the module
    docstring); `clean_spans` are the spans of the uniform ranges, where every holder holds
    the majority's entry: they never differ, but a replica holding one after its first
    difference agrees with the majority again.
    """
    top = offsets.filter(F.col("offset") == F.col("last")).select("offset", "variants", F.col("top.epoch").alias("ref_epoch"),
                         F.col("top.h").alias("ref_h"), F.col("top.votes").alias("ref_votes"))
    joined = entry_df.filter(F.col("offset") < hw).join(top, "offset")
    contested = (F.col("variants") > 1) & (F.col("ref_votes") < majority)
    diff = joined.filter(
        (F.col("epoch") != F.col("ref_epoch")) | (F.col("h") != F.col("ref_h")) | contested
    )
    first_rows = diff.groupBy("replica").agg(
        F.min(F.struct("offset", "epoch", "ref_epoch")).alias("first"),
        F.count(F.lit(1)).alias("count"),
    ).collect()
    if not first_rows:
        return {}, {}
    starts = {r["replica"]: int(r["first"]["offset"]) for r in first_rows}
    cond = F.lit(False)
    for name, off in starts.items():
        cond = cond | ((F.col("replica") == name) & (F.col("offset") >= off))
    not_older = {
        r["replica"]: int(r["n"])
        for r in joined.filter(cond).groupBy("replica").agg(
            F.sum(F.when(F.col("epoch") >= F.col("ref_epoch"), 1).otherwise(0)).alias("n")
        ).collect()
    }
    if clean_spans is not None:
        for r in clean_spans.filter(cond & (F.col("offset") < hw)).groupBy("replica").agg(
            F.count(F.lit(1)).alias("n")
        ).collect():
            not_older[r["replica"]] = not_older.get(r["replica"], 0) + int(r["n"])
    at = _other_holders(variants, starts)
    committed: dict[str, dict[str, Any]] = {}
    stale: dict[str, dict[str, Any]] = {}
    for row in first_rows:
        f = row["first"]
        name = row["replica"]
        others = [v for v in at.get(int(f["offset"]), []) if name not in v["replicas"]]
        entry = {
            "offset": int(f["offset"]),
            "epoch": int(f["epoch"]),
            "other_replica": others[0]["replicas"][0] if others else None,
            "other_epoch": int(others[0]["epoch"]) if others else int(f["ref_epoch"]),
            "divergent_offsets": int(row["count"]),
        }
        if not_older.get(name, 0) == 0:
            entry["kind"] = "stale_tail"
            stale[name] = entry
        else:
            entry["kind"] = "committed"
            committed[name] = entry
    return committed, stale


def uncommitted_divergence(
    variants: DataFrame, offsets: DataFrame, hw: int
) -> dict[str, dict[str, Any]]:
    """First offset at or above HW where a replica's entry differs from another replica's."""
    contested = offsets.filter((F.col("offset") >= hw) & (F.col("variants") > 1)
                               & (F.col("offset") == F.col("last"))).select("offset")
    held = (
        variants.join(contested, "offset")
        .select("offset", "epoch", F.explode("replicas").alias("replica"))
    )
    first = held.groupBy("replica").agg(
        F.min(F.struct("offset", "epoch")).alias("first"), F.count(F.lit(1)).alias("count")
    ).collect()
    if not first:
        return {}
    wanted = sorted({int(r["first"]["offset"]) for r in first})
    at = variants.filter(F.col("offset").isin(wanted)).collect()
    by_offset: dict[int, list[Any]] = {}
    for v in at:
        by_offset.setdefault(int(v["offset"]), []).append(v)
    out: dict[str, dict[str, Any]] = {}
    for row in first:
        name = row["replica"]
        off = int(row["first"]["offset"])
        others = [v for v in by_offset.get(off, []) if name not in v["replicas"]]
        others.sort(key=lambda v: (-v["n"], v["replicas"][0]))
        out[name] = {
            "offset": off,
            "epoch": int(row["first"]["epoch"]),
            "other_replica": others[0]["replicas"][0] if others else None,
            "other_epoch": int(others[0]["epoch"]) if others else None,
            "divergent_offsets": int(row["count"]),
            "kind": "above_high_watermark",
        }
    return out


@dataclass
class SnapshotInfo:
    """One snapshot file as read: id, record count and content hash."""

    replica: str
    file: str
    end_offset: int
    epoch: int
    data_records: int
    content_hash: int


def snapshot_infos(records: DataFrame) -> list[SnapshotInfo]:
    """Id, data record count and order-sensitive content hash of every readable snapshot."""
    snap = records.filter((F.col("source") == "snapshot") & F.col("error").isNull())
    rows = (
        snap.groupBy("replica", "file", "snapshot_end_offset", "snapshot_epoch")
        .agg(
            F.sum(F.when(~F.col("is_control"), 1).otherwise(0)).alias("data_records"),
            F.bit_xor(
                F.when(~F.col("is_control"), F.xxhash64(F.col("offset"), record_hash()))
            ).alias("content_hash"),
        )
        .collect()
    )
    return sorted(
        (
            SnapshotInfo(r["replica"], r["file"], int(r["snapshot_end_offset"]),
                         int(r["snapshot_epoch"]), int(r["data_records"] or 0),
                         int(r["content_hash"] or 0))
            for r in rows
        ),
        key=lambda s: (s.end_offset, s.replica),
    )


def snapshot_findings(
    snaps: list[SnapshotInfo], offsets: DataFrame, hw: int | None
) -> list[dict[str, Any]]:
    """Snapshot checks that need no state machine.

    - `snapshot_epoch_mismatch`: the majority's entry at `end_offset - 1` has another epoch
      than the snapshot id says (a snapshot must end on a committed log entry);
    - `snapshot_content_mismatch`: replicas hold snapshots with the same id but other data;
    - `snapshot_beyond_high_watermark` (warning): the snapshot ends above the derived HW.
    """
    findings: list[dict[str, Any]] = []
    ends = sorted({s.end_offset - 1 for s in snaps if s.end_offset > 0})
    ref_epoch = top_epochs_at(offsets, ends)
    by_id: dict[tuple[int, int], list[SnapshotInfo]] = {}
    for s in snaps:
        by_id.setdefault((s.end_offset, s.epoch), []).append(s)
        if s.end_offset == 0:
            continue
        expected = ref_epoch.get(s.end_offset - 1)
        if expected is not None and expected != s.epoch:
            findings.append({
                "kind": "snapshot_epoch_mismatch", "severity": "error", "replica": s.replica,
                "file": s.file, "end_offset": s.end_offset, "epoch": s.epoch,
                "log_epoch_at_end": expected,
            })
        if hw is not None and s.end_offset > hw:
            findings.append({
                "kind": "snapshot_beyond_high_watermark", "severity": "warning",
                "replica": s.replica, "file": s.file, "end_offset": s.end_offset,
                "epoch": s.epoch, "high_watermark": hw,
            })
    for (end, epoch), group in sorted(by_id.items()):
        counts: dict[int, list[SnapshotInfo]] = {}
        for s in group:
            counts.setdefault(s.content_hash, []).append(s)
        if len(counts) < 2:
            continue
        majority_hash = min(counts, key=lambda h: (-len(counts[h]), counts[h][0].replica))
        ref = counts[majority_hash][0]
        for h, members in counts.items():
            if h == majority_hash:
                continue
            for s in members:
                findings.append({
                    "kind": "snapshot_content_mismatch", "severity": "error",
                    "replica": s.replica, "file": s.file, "end_offset": end, "epoch": epoch,
                    "other_replica": ref.replica,
                })
    return findings


def replay_check(
    snapshots: list[tuple[SnapshotInfo, list[bytes]]],
    log_records: Iterator[tuple[int, bool, bytes | None]],
    base: tuple[int, list[bytes]] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Replay committed KV commands and compare the state with each snapshot's contents.

    `snapshots` are (info, data values) in end-offset order; `log_records` yields
    (offset, is_control, value) of committed log records in offset order; `base` optionally
    starts from a loaded snapshot (end offset, values) when the log does not begin at 0.
    A snapshot the log does not reach is skipped. Returns the `snapshot_state_mismatch`
    findings (naming the first key that differs) and how many snapshots were compared.
    """
    from kraft.statemachine.base import CommittedBatch
    from kraft.statemachine.kv import CommandError, KVStore

    store = KVStore()
    if base is not None:
        store.load_snapshot(base[0], base[1])
    findings: list[dict[str, Any]] = []
    compared = 0
    pending: tuple[int, bool, bytes | None] | None = None
    it = iter(log_records)
    for info, values in snapshots:
        if info.end_offset < store.applied_offset:
            continue
        while True:
            if pending is None:
                pending = next(it, None)
                if pending is None:
                    break
            off, control, value = pending
            if off >= info.end_offset:
                break
            if off >= store.applied_offset:
                store.skip_to(off)
                if control:
                    store.skip_to(off + 1)
                else:
                    store.apply(CommittedBatch(off, 0, (value or b"",)))
            pending = None
        if store.applied_offset < info.end_offset:
            continue  # the log does not reach this snapshot's end: nothing to compare
        compared += 1
        expected = KVStore()
        try:
            expected.load_snapshot(info.end_offset, values)
        except CommandError as exc:
            findings.append({
                "kind": "snapshot_state_undecodable", "severity": "error",
                "replica": info.replica, "file": info.file, "end_offset": info.end_offset,
                "epoch": info.epoch, "detail": str(exc),
            })
            continue
        got, want = dict(store.items()), dict(expected.items())
        if got != want:
            keys = sorted(set(got) | set(want))
            first = next(k for k in keys if got.get(k) != want.get(k))
            findings.append({
                "kind": "snapshot_state_mismatch", "severity": "error",
                "replica": info.replica, "file": info.file, "end_offset": info.end_offset,
                "epoch": info.epoch, "first_key": first,
                "in_log": None if got.get(first) is None else len(got[first]),
                "in_snapshot": None if want.get(first) is None else len(want[first]),
            })
    return findings, compared
