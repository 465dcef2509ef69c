"""Workload: records and bytes over time, batch sizes, and key-space statistics.

Computed on the *reference replica* (see `audit.pick_reference`) below the high watermark,
so each committed record counts once. Time series and batch sizes are Spark aggregations of
the batch table (one row per batch); key statistics decode record values with the built-in
KV state machine's codec (`kraft.statemachine.kv.decode_command`) in the Python workers,
which reduce them to one row per key before Spark adds them up. Records with a non-null
Kafka record key are counted by that key too (KRaft data records normally have none). Only
the small results (time buckets, histogram bins, the top keys and totals) reach the driver.
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


# ----------------------------------------------------------------------------- Spark versions


def timeline_of(ref_batches: DataFrame) -> pd.DataFrame:
    """`timeline` computed in Spark from the reference replica's batch rows."""
    cols = ["bucket_start", "bucket_ms", "records", "bytes", "batches", "control_records"]
    span = ref_batches.agg(F.min("timestamp").alias("lo"), F.max("timestamp").alias("hi"),
                           F.count(F.lit(1)).alias("n")).collect()[0]
    if not span["n"]:
        return pd.DataFrame(columns=cols)
    lo, hi = int(span["lo"]), int(span["hi"])
    b = bucket_ms(hi - lo)
    control = F.col("is_control")
    g = (ref_batches.groupBy((F.floor(F.col("timestamp") / b) * b).cast("long").alias("bucket"))
         .agg(F.sum(F.when(~control, F.col("batch_records")).otherwise(0)).alias("records"),
              F.sum("batch_size").alias("bytes"), F.count(F.lit(1)).alias("batches"),
              F.sum(F.when(control, F.col("batch_records")).otherwise(0)).alias("control_records"))
         .toPandas().set_index("bucket"))
    full = pd.RangeIndex(lo // b * b, hi // b * b + b, b)
    g = g.reindex(full, fill_value=0)
    return pd.DataFrame({
        "bucket_start": pd.to_datetime(g.index, unit="ms", utc=True),
        "bucket_ms": b,
        "records": g["records"].astype("int64").values,
        "bytes": g["bytes"].astype("int64").values,
        "batches": g["batches"].astype("int64").values,
        "control_records": g["control_records"].astype("int64").values,
    })


def batch_sizes_of(ref_batches: DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """`batch_sizes` computed in Spark: the histogram and the stats of data batch sizes."""
    data = ref_batches.filter(~F.col("is_control"))
    stats: dict[str, Any] = {}
    qs = [0.5, 0.9, 0.99]
    row = data.agg(*[
        e for c in ("batch_records", "batch_size") for e in (
            F.count(c).alias(f"{c}_n"), F.min(c).alias(f"{c}_min"),
            F.avg(c).alias(f"{c}_mean"), F.percentile(c, qs).alias(f"{c}_q"),
            F.max(c).alias(f"{c}_max"))
    ]).collect()[0]
    for name, c in (("records_per_batch", "batch_records"), ("bytes_per_batch", "batch_size")):
        if not row[f"{c}_n"]:
            stats[name] = {}
            continue
        q = row[f"{c}_q"]
        stats[name] = {"count": int(row[f"{c}_n"]), "min": float(row[f"{c}_min"]),
                       "mean": float(row[f"{c}_mean"]), "p50": float(q[0]),
                       "p90": float(q[1]), "p99": float(q[2]), "max": float(row[f"{c}_max"])}
    cols = ["bytes_from", "bytes_to", "batches", "records"]
    if not stats["bytes_per_batch"]:
        return pd.DataFrame(columns=cols), stats
    # power-of-two bins from 64 bytes: bin i > 0 holds sizes in [2^(i+5), 2^(i+6))
    size = F.col("batch_size")
    hist = (data.groupBy(F.when(size < 64, 0).otherwise(F.floor(F.log2(size)) - 5)
                         .cast("int").alias("bin"))
            .agg(F.count(F.lit(1)).alias("batches"), F.sum("batch_records").alias("records"))
            .orderBy("bin").toPandas())
    hist["bytes_from"] = [int(2 ** (i + 5)) if i > 0 else 0 for i in hist["bin"]]
    hist["bytes_to"] = [int(2 ** (i + 6)) for i in hist["bin"]]
    hist["records"] = hist["records"].astype("int64")
    return hist[cols], stats


KEY_PARTIALS = (
    "k string, op string, writes long, deletes long, last_offset long, last_op string, "
    "key_len int, vlen_sum long, vlen_n long, vlen_max int"
)
"""Rows of `_key_partials`: per key (`op` null) or per operation (`k` null), partial sums."""
MAX_KEYS_PER_PARTIAL = 200_000
"""A Python worker hands its per-key sums to Spark whenever it holds this many keys."""


def _key_partials(batches: Any, hw: int, codec: bool) -> Any:
    """`mapInArrow` body: decode the records of reference batch rows below `hw` and reduce
    them to per-key and per-operation partial sums.

    PUT and DELETE commands of the exact shape `kraft.statemachine.kv` encodes are read in
    place (op byte, key and value lengths); anything else goes through `decode_command`, so
    the verdicts (operation, key, INVALID) are the codec's.
    """
    import struct

    import pyarrow as pa
    from kraft_pipeline.datasource import BatchBytes

    from kraft.records.batch import RecordBatch

    decode: Any = None
    error: Any = Exception
    if codec:
        from kraft.statemachine.kv import FORMAT_VERSION, OP_DELETE, OP_PUT, CommandError
        from kraft.statemachine.kv import decode_command as decode
        error = CommandError
    else:
        FORMAT_VERSION = OP_PUT = OP_DELETE = -1
    absent = 0xFFFFFFFF
    length_at = struct.Struct(">I").unpack_from
    schema = pa.schema([("k", pa.string()), ("op", pa.string()), ("writes", pa.int64()),
                        ("deletes", pa.int64()), ("last_offset", pa.int64()),
                        ("last_op", pa.string()), ("key_len", pa.int32()),
                        ("vlen_sum", pa.int64()), ("vlen_n", pa.int64()),
                        ("vlen_max", pa.int32())])
    # UTF-8 key -> [writes, deletes, last_offset, last_op, value bytes, values, longest value]
    keys: dict[bytes, list[Any]] = {}
    ops: dict[str, int] = {}

    def flush() -> Any:
        names = [k.decode() for k in keys]
        cols = list(zip(*keys.values(), strict=True)) if keys else [()] * 7
        n_ops = len(ops)
        table = pa.RecordBatch.from_arrays([
            pa.array(names + [None] * n_ops, pa.string()),
            pa.array([None] * len(names) + list(ops), pa.string()),
            pa.array(list(cols[0]) + list(ops.values()), pa.int64()),
            pa.array(list(cols[1]) + [0] * n_ops, pa.int64()),
            pa.array(list(cols[2]) + [None] * n_ops, pa.int64()),
            pa.array(list(cols[3]) + [None] * n_ops, pa.string()),
            pa.array([len(k) for k in names] + [None] * n_ops, pa.int32()),
            pa.array(list(cols[4]) + [0] * n_ops, pa.int64()),
            pa.array(list(cols[5]) + [0] * n_ops, pa.int64()),
            pa.array(list(cols[6]) + [None] * n_ops, pa.int32()),
        ], schema=schema)
        keys.clear()
        ops.clear()
        return table

    def general(batch: Any, j: int, value: Any, offset: int, record_keys: Any) -> Any:
        """One record through the codec (or its record key); returns the batch's record keys
        once they were read."""
        op: str | None = None
        kb: bytes | None = None
        vlen: int | None = None
        n = 0 if value is None else len(value)
        if n >= 6 and value[0] == FORMAT_VERSION and value[1] in (OP_PUT, OP_DELETE):
            klen = length_at(value, 2)[0]
            kend = 6 + klen
            if value[1] == OP_DELETE:
                if klen != absent and kend == n:
                    op, kb = "DELETE", bytes(value[6:kend])
            elif kend + 4 <= n:
                vl = length_at(value, kend)[0]
                if klen != absent and vl != absent and kend + 4 + vl == n:
                    op, kb, vlen = "PUT", bytes(value[6:kend]), vl
            if kb is not None and kb not in keys:
                try:
                    kb.decode()
                except UnicodeDecodeError:
                    op = kb = vlen = None  # the codec calls it INVALID
        if op is None:
            if not codec:
                vlen = None if value is None else n
            elif value is not None:
                try:
                    cmd = decode(bytes(value))
                except error:
                    op = "INVALID"
                else:
                    op = _OPS.get(cmd.op, str(cmd.op))
                    if cmd.op != 4:
                        kb = cmd.key.encode()
                    vlen = len(cmd.value) if cmd.value is not None else None
        name = op or "unknown"
        ops[name] = ops.get(name, 0) + 1
        if kb is None:
            if record_keys is None:
                record_keys = [r.key for r in batch.records()]
            raw_key = record_keys[j]
            if raw_key is None:
                return record_keys
            kb = bytes(raw_key).decode("utf-8", "replace").encode()
        entry = keys.get(kb)
        if entry is None:
            entry = keys[kb] = [0, 0, -1, None, 0, 0, None]
        entry[0] += 1
        if op == "DELETE":
            entry[1] += 1
        if offset > entry[2]:
            entry[2] = offset
            entry[3] = op
        if vlen is not None:
            entry[4] += vlen
            entry[5] += 1
            if entry[6] is None or vlen > entry[6]:
                entry[6] = vlen
        return record_keys

    reader = BatchBytes()
    for table in batches:
        bases = table.column("batch_base_offset").to_pylist()
        lasts = table.column("batch_last_offset").to_pylist()
        if "data" in table.column_names:
            data = table.column("data").to_pylist()
        else:
            data = [reader.read(row) for row in table.to_pylist()]
        for i in range(table.num_rows):
            batch = RecordBatch.parse(data[i], 0)
            base, last = bases[i], lasts[i]
            record_keys: Any = None
            if not (codec and batch.records_count == last - base + 1):
                if batch.records_count == last - base + 1:
                    values = batch.values()
                    offsets: Any = range(base, base + len(values))
                else:
                    records = list(batch.records())
                    values = [r.value for r in records]
                    offsets = [r.offset for r in records]
                    record_keys = [r.key for r in records]
                for j, value in enumerate(values):
                    if offsets[j] >= hw:
                        break
                    record_keys = general(batch, j, value, offsets[j], record_keys)
            else:
                # Fast path: offsets are dense; PUT and DELETE of the codec's exact layout
                # (its key valid UTF-8) are counted in place, anything else goes to `general`.
                values = batch.values()
                puts = deletes = 0
                offset = base
                for j, value in enumerate(values):
                    if offset >= hw:
                        break
                    n = 0 if value is None else len(value)
                    if n >= 6 and value[0] == FORMAT_VERSION:
                        code = value[1]
                        klen = length_at(value, 2)[0]
                        kend = 6 + klen
                        if code == OP_PUT and klen != absent and kend + 4 <= n:
                            vl = length_at(value, kend)[0]
                            if vl != absent and kend + 4 + vl == n:
                                entry = keys.get(bytes(value[6:kend]))
                                if entry is not None:
                                    puts += 1
                                    entry[0] += 1
                                    if offset > entry[2]:
                                        entry[2] = offset
                                        entry[3] = "PUT"
                                    entry[4] += vl
                                    entry[5] += 1
                                    if entry[6] is None or vl > entry[6]:
                                        entry[6] = vl
                                    offset += 1
                                    continue
                        elif code == OP_DELETE and klen != absent and kend == n:
                            entry = keys.get(bytes(value[6:kend]))
                            if entry is not None:
                                deletes += 1
                                entry[0] += 1
                                entry[1] += 1
                                if offset > entry[2]:
                                    entry[2] = offset
                                    entry[3] = "DELETE"
                                offset += 1
                                continue
                    # a key not seen yet (its UTF-8 checked there) or another command
                    record_keys = general(batch, j, value, offset, record_keys)
                    offset += 1
                if puts:
                    ops["PUT"] = ops.get("PUT", 0) + puts
                if deletes:
                    ops["DELETE"] = ops.get("DELETE", 0) + deletes
            if len(keys) >= MAX_KEYS_PER_PARTIAL:
                yield flush()
    reader.close()
    if keys or ops:
        yield flush()


def key_space_of(ref_batches: DataFrame, hw: int | None, scratch: str, top: int = 20
                 ) -> tuple[dict[str, Any], pd.DataFrame]:
    """`key_space` of the reference replica's data batch rows below `hw` (with `data`, or the
    index of `batchBytes=false`, whose bytes are read back from the files).

    The records are decoded once: the per-key partial sums go to Parquet at `scratch`, and
    the totals, the live keys and the top keys are read from there.
    """
    codec = kv_available()
    limit = hw if hw is not None else (1 << 62)
    wanted = ["batch_base_offset", "batch_last_offset"] + (
        ["data"] if "data" in ref_batches.columns else
        ["file", "position", "batch_size", "batch_crc", "error"])
    rows = ref_batches.filter(~F.col("is_control") & (F.col("batch_base_offset") < limit)).select(
        *wanted)

    def partials(it: Any) -> Any:
        return _key_partials(it, limit, codec)

    spark = ref_batches.sparkSession
    rows.mapInArrow(partials, KEY_PARTIALS).write.mode("overwrite").parquet(scratch)
    parts = spark.read.parquet(scratch)
    ops = {r["op"]: int(r["n"]) for r in parts.filter(F.col("k").isNull()).groupBy("op")
           .agg(F.sum("writes").alias("n")).collect()}
    per_key = parts.filter(F.col("k").isNotNull()).groupBy("k").agg(
        F.sum("writes").alias("writes"), F.sum("deletes").alias("deletes"),
        F.max("last_offset").alias("last_offset"),
        F.max_by("last_op", "last_offset").alias("last_op"),
        F.first("key_len").alias("key_len"), F.sum("vlen_sum").alias("vlen_sum"),
        F.sum("vlen_n").alias("vlen_n"), F.max("vlen_max").alias("vlen_max"),
    )
    agg = per_key.agg(
        F.count(F.lit(1)).alias("distinct_keys"),
        F.sum("writes").alias("keyed_records"),
        F.sum(F.col("key_len") * F.col("writes")).alias("key_len_sum"),
        F.max("key_len").alias("key_len_max"),
        F.sum("vlen_sum").alias("vlen_sum"), F.sum("vlen_n").alias("vlen_n"),
        F.max("vlen_max").alias("value_len_max"),
        F.sum(F.when(F.col("last_op").isNotNull() & (F.col("last_op") != "DELETE"), 1)
              .otherwise(0)).alias("live"),
    ).collect()[0]
    top_keys = (per_key.orderBy(F.desc("writes"), "k").limit(top)
                .select(F.col("k").alias("key"), "writes", "deletes", "last_offset")
                .toPandas())
    keyed = int(agg["keyed_records"] or 0)
    stats: dict[str, Any] = {
        "codec": "kraft.statemachine.kv" if codec else "none",
        "records": int(sum(ops.values())), "ops": ops,
        "distinct_keys": int(agg["distinct_keys"] or 0),
        "keyed_records": keyed,
        "live_keys_at_high_watermark": int(agg["live"] or 0) if codec else None,
        "key_len_mean": float(agg["key_len_sum"] or 0) / keyed if keyed else 0.0,
        "key_len_max": int(agg["key_len_max"] or 0),
        "value_len_mean": (float(agg["vlen_sum"]) / int(agg["vlen_n"])
                           if agg["vlen_n"] else 0.0),
        "value_len_max": int(agg["value_len_max"] or 0),
    }
    return stats, top_keys
