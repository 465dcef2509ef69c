"""`spark.read.format("kraft")` throughput next to a plain single-process Python scan.

Writes one replica with a ~1 GiB log (KV PUT batches of 100 records, 128 MiB segments, so
8 Spark partitions) through kraft.storage, then measures:

- `python_scan`: one process, for every segment: read it, `scan_batches` (header + CRC-32C of
  every batch) and `records()` of every batch — what a one-off script would do;
- `spark_local2`: `spark.read.format("kraft").load(dir)` on `local[2]`, every column
  materialised by writing to Spark's `noop` sink (cold = first read in a fresh session, with
  Python worker start-up; warm = second read).

Rows are records; MB/s counts segment bytes (10^6 bytes). `BENCH_QUICK=1` uses 64 MiB.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from kraft.records.batch import scan_batches
from kraft.storage.layout import partition_dir

GIB = 1 << 30


def python_scan(pdir: Path) -> tuple[int, int]:
    """(records, bytes) of every segment in `pdir`, read in this process."""
    rows = size = 0
    for seg in sorted(pdir.glob("*.log")):
        result = scan_batches(seg.read_bytes())
        for batch in result.batches:
            for _ in batch.records():
                rows += 1
        size += result.valid_bytes
    return rows, size


def run(size_bytes: int | None = None) -> dict[str, Any]:
    """Measure both readers over a fresh log of `size_bytes` (default 1 GiB)."""
    if size_bytes is None:
        size_bytes = 64 << 20 if os.environ.get("BENCH_QUICK") else GIB
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from kraft_pipeline.session import build_session
    from kraft_pipeline.synthetic import write_large_log

    work = Path(tempfile.mkdtemp(prefix="kraft-bench-pipeline-"))
    try:
        t = time.perf_counter()
        root = write_large_log(work / "node-1", size_bytes)
        write_s = time.perf_counter() - t
        pdir = partition_dir(root)
        seg_bytes = sum(p.stat().st_size for p in pdir.glob("*.log"))
        segments = len(list(pdir.glob("*.log")))

        t = time.perf_counter()
        rows, _ = python_scan(pdir)
        py_s = time.perf_counter() - t

        spark = build_session("local[2]", app_name="bench-pipeline",
                              conf={"spark.driver.memory": "2g"})
        try:
            runs = []
            for _ in range(2):
                df = spark.read.format("kraft").option("log", "true").load(str(root))
                t = time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                runs.append(time.perf_counter() - t)
            spark_rows = spark.read.format("kraft").load(str(root)).count()
        finally:
            spark.stop()
        if spark_rows != rows:
            raise RuntimeError(f"spark read {spark_rows} rows, the plain scan {rows}")
        mb = seg_bytes / 1e6
        return {
            "log_bytes": seg_bytes,
            "segments": segments,
            "records": rows,
            "write_log_s": round(write_s, 2),
            "python_scan": {"seconds": round(py_s, 2), "rows_per_s": round(rows / py_s),
                            "mb_per_s": round(mb / py_s, 1)},
            "spark_local2_cold": {"seconds": round(runs[0], 2),
                                  "rows_per_s": round(spark_rows / runs[0]),
                                  "mb_per_s": round(mb / runs[0], 1)},
            "spark_local2_warm": {"seconds": round(runs[1], 2),
                                  "rows_per_s": round(spark_rows / runs[1]),
                                  "mb_per_s": round(mb / runs[1], 1)},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m bench.bench_pipeline",
                                 description="Both log readers of the pipeline over a fresh log.")
    ap.add_argument("size_bytes", nargs="?", type=int, default=None,
                    help="bytes of log to read (default 1 GiB)")
    size = ap.parse_args().size_bytes
    print(json.dumps(run(size), indent=2))
