"""Workload: records and bytes over time, batch sizes, and key-space statistics.

Computed on the *reference replica* (see `audit.pick_reference`) below the high watermark,
so each committed record counts once. Time series and batch sizes come from the batch table
(one row per batch); key statistics decode record values with the built-in KV state
machine's codec (`kraft.statemachine.kv.decode_command`) in Spark. Records with a non-null
Kafka record key are counted by that key too (KRaft data records normally have none).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

KV_SCHEMA = StructType([
    StructField("op", StringType()),
    StructField("kv_key", StringType()),
    StructField("kv_value_len", IntegerType()),
    StructField("kv_error", StringType()),
])
_OPS = {1: "PUT", 2: "DELETE", 3: "CAS", 4: "BARRIER"}
BUCKETS_MS = [1_000, 10_000, 60_000, 600_000, 3_600_000, 21_600_000, 86_400_000]


def _decode_series(values: pd.Series) -> pd.DataFrame:
    from kraft.statemachine.kv import CommandError, decode_command

    rows: list[tuple[str | None, str | None, int | None, str | None]] = []
    for v in values:
        if v is None:
            rows.append((None, None, None, "null value"))
            continue
        try:
            cmd = decode_command(bytes(v))
        except CommandError as exc:
            rows.append(("INVALID", None, None, str(exc)))
            continue
        rows.append((
            _OPS.get(cmd.op, str(cmd.op)),
            cmd.key if cmd.op != 4 else None,
            len(cmd.value) if cmd.value is not None else None,
            None,
        ))
    return pd.DataFrame(rows, columns=["op", "kv_key", "kv_value_len", "kv_error"])


def kv_available() -> bool:
    """True when the KV codec (kraft.statemachine.kv) can be imported."""
    try:
        import kraft.statemachine.kv  # noqa: F401
    except ImportError:
        return False
    return True


def decode_kv(records: DataFrame) -> DataFrame:
    """`records` plus op, kv_key, kv_value_len, kv_error decoded from each value in Spark."""
    udf = pandas_udf(_decode_series, KV_SCHEMA)  # type: ignore[call-overload]
    return records.withColumn("kv", udf(F.col("value"))).select("*", "kv.*").drop("kv")


def bucket_ms(span_ms: int, max_points: int = 400) -> int:
    """The smallest bucket from BUCKETS_MS that keeps a time series under `max_points`."""
    for b in BUCKETS_MS:
        if span_ms // b < max_points:
            return b
    return BUCKETS_MS[-1]


def timeline(ref_batches: pd.DataFrame) -> pd.DataFrame:
    """Records, bytes and batches per time bucket (data and control batches apart)."""
    cols = ["bucket_start", "bucket_ms", "records", "bytes", "batches", "control_records"]
    if ref_batches.empty:
        return pd.DataFrame(columns=cols)
    lo, hi = int(ref_batches["timestamp"].min()), int(ref_batches["timestamp"].max())
    b = bucket_ms(hi - lo)
    t = ref_batches.assign(bucket=(ref_batches["timestamp"] // b) * b)
    t = t.assign(control_records=t["batch_records"].where(t["is_control"], 0),
                 data_records=t["batch_records"].where(~t["is_control"], 0))
    g = t.groupby("bucket").agg(records=("data_records", "sum"), bytes=("batch_size", "sum"),
                                batches=("batch_size", "size"),
                                control_records=("control_records", "sum"))
    full = pd.RangeIndex(lo // b * b, hi // b * b + b, b)
    g = g.reindex(full, fill_value=0)
    out = pd.DataFrame({
        "bucket_start": pd.to_datetime(g.index, unit="ms", utc=True),
        "bucket_ms": b,
        "records": g["records"].astype("int64").values,
        "bytes": g["bytes"].astype("int64").values,
        "batches": g["batches"].astype("int64").values,
        "control_records": g["control_records"].astype("int64").values,
    })
    return out


def _describe(series: pd.Series) -> dict[str, float]:
    if series.empty:
        return {}
    q = series.quantile([0.5, 0.9, 0.99])
    return {"count": int(series.size), "min": float(series.min()), "mean": float(series.mean()),
            "p50": float(q[0.5]), "p90": float(q[0.9]), "p99": float(q[0.99]),
            "max": float(series.max())}


def batch_sizes(ref_batches: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A histogram table (power-of-two byte bins) and summary stats of data batch sizes."""
    data = ref_batches[~ref_batches["is_control"].astype(bool)]
    stats = {"records_per_batch": _describe(data["batch_records"]),
             "bytes_per_batch": _describe(data["batch_size"])}
    if data.empty:
        return pd.DataFrame(columns=["bytes_from", "bytes_to", "batches", "records"]), stats
    bins = 2 ** np.arange(6, max(7, int(np.ceil(np.log2(data["batch_size"].max() + 1))) + 1))
    idx = np.searchsorted(bins, data["batch_size"].to_numpy(), side="right")
    hist = (data.assign(bin=idx).groupby("bin")
            .agg(batches=("batch_size", "size"), records=("batch_records", "sum")).reset_index())
    hist["bytes_from"] = [int(bins[i - 1]) if i > 0 else 0 for i in hist["bin"]]
    hist["bytes_to"] = [int(bins[i]) if i < len(bins) else None for i in hist["bin"]]
    return hist[["bytes_from", "bytes_to", "batches", "records"]], stats


def key_space(data_records: DataFrame, top: int = 20) -> tuple[dict[str, Any], pd.DataFrame]:
    """Key-space statistics of committed KV commands and the `top` most written keys.

    `data_records` holds the reference replica's committed data records (value, key columns).
    Without the KV codec only Kafka record keys are counted (`codec: "none"`).
    """
    stats: dict[str, Any] = {}
    if kv_available():
        df = decode_kv(data_records).withColumn(
            "k", F.coalesce(F.col("kv_key"), F.col("key").cast("string"))
        )
        stats["codec"] = "kraft.statemachine.kv"
    else:
        df = data_records.withColumn("k", F.col("key").cast("string")).withColumn(
            "op", F.lit(None).cast("string")
        ).withColumn("kv_value_len", F.length("value"))
        stats["codec"] = "none"
    df = df.cache()
    ops = {r["op"] or "unknown": int(r["n"]) for r in
           df.groupBy("op").agg(F.count(F.lit(1)).alias("n")).collect()}
    agg = df.filter(F.col("k").isNotNull()).agg(
        F.countDistinct("k").alias("distinct_keys"),
        F.count(F.lit(1)).alias("keyed_records"),
        F.avg(F.length("k")).alias("key_len_mean"),
        F.max(F.length("k")).alias("key_len_max"),
        F.avg("kv_value_len").alias("value_len_mean"),
        F.max("kv_value_len").alias("value_len_max"),
    ).collect()[0]
    last = (df.filter(F.col("k").isNotNull())
            .groupBy("k").agg(F.max_by("op", "offset").alias("last_op")))
    live = last.filter(F.col("last_op") != "DELETE").count() if stats["codec"] != "none" else None
    top_keys = (df.filter(F.col("k").isNotNull()).groupBy("k")
                .agg(F.count(F.lit(1)).alias("writes"),
                     F.sum(F.when(F.col("op") == "DELETE", 1).otherwise(0)).alias("deletes"),
                     F.max("offset").alias("last_offset"))
                .orderBy(F.desc("writes"), "k").limit(top).toPandas()
                .rename(columns={"k": "key"}))
    df.unpersist()
    stats.update({
        "records": int(sum(ops.values())), "ops": ops,
        "distinct_keys": int(agg["distinct_keys"] or 0),
        "keyed_records": int(agg["keyed_records"] or 0),
        "live_keys_at_high_watermark": live,
        "key_len_mean": float(agg["key_len_mean"] or 0.0),
        "key_len_max": int(agg["key_len_max"] or 0),
        "value_len_mean": float(agg["value_len_mean"] or 0.0),
        "value_len_max": int(agg["value_len_max"] or 0),
    })
    return stats, top_keys
