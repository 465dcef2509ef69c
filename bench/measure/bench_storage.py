"""Metadata log storage: append throughput with fsync, group commit, and recovery time.

* `append_fsync_per_batch`: every batch is appended and then flushed (one fsync per batch).
* `append_group_commit_64`: 64 appends, then one flush (what the runtime's disk writer does
  when appends arrive faster than fsyncs complete).
* `recovery`: time for `SegmentedLog.open(full_scan=True)` to validate every batch (header,
  CRC, offsets, epochs), rebuild the in-memory indexes and the epoch cache of a log of
  `log_bytes` bytes (default 1 GiB), generated in a temporary directory that is deleted
  afterwards; and the time of a clean reopen, which trusts what lies below the recovery point.

MB is 10**6 bytes of encoded batches. Numbers depend heavily on the disk's fsync latency.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from kraft.lane import append_scan
from kraft.records.batch import build_batch, rebase
from kraft.storage.log import SegmentedLog

BATCH_VALUES = 8
VALUE_SIZE = 2000  # ~16 KB batches: a busy controller's batch


def _template(epoch: int = 1) -> bytes:
    return build_batch(0, epoch, [os.urandom(VALUE_SIZE) for _ in range(BATCH_VALUES)], 1)


def _append_case(directory: Path, total_batches: int, per_flush: int) -> dict[str, float]:
    log = SegmentedLog.open(directory, segment_bytes=1 << 30)
    log.use_native_scan(append_scan())  # as the node's log scans appends
    template = _template()
    size = len(template)
    flushes = 0
    start = time.perf_counter()
    for i in range(total_batches):
        log.append(rebase(template, log.log_end_offset))
        if (i + 1) % per_flush == 0:
            log.flush()
            flushes += 1
    log.flush()
    elapsed = time.perf_counter() - start
    log.close()
    total = size * total_batches
    return {
        "batch_bytes": size,
        "batches": total_batches,
        "fsyncs": flushes,
        "mb_per_s": total / elapsed / 1e6,
        "batches_per_s": total_batches / elapsed,
        "ms_per_flush": elapsed / max(flushes, 1) * 1000,
    }


def _recovery_case(directory: Path, log_bytes: int) -> dict[str, float]:
    segment_bytes = 256 * 1024 * 1024
    log = SegmentedLog.open(directory, segment_bytes=segment_bytes)
    log.use_native_scan(append_scan())
    template = _template()
    gen_start = time.perf_counter()
    while log.size_in_bytes() < log_bytes:
        chunk = bytearray()
        for _ in range(64):
            chunk += rebase(template, log.log_end_offset + len(chunk) // len(template) * BATCH_VALUES)
        log.append(bytes(chunk))
        if log.size_in_bytes() % (64 * 1024 * 1024) < len(chunk):
            log.flush()
    log.close()
    gen_seconds = time.perf_counter() - gen_start
    actual = sum(p.stat().st_size for p in directory.glob("*.log"))
    # Drop the index files so the open also rebuilds them (worst case after a crash).
    for p in directory.glob("*.index"):
        p.unlink()
    start = time.perf_counter()
    reopened = SegmentedLog.open(directory, segment_bytes=segment_bytes)
    open_seconds = time.perf_counter() - start
    end = reopened.log_end_offset
    reopened.close()
    start = time.perf_counter()
    reopened = SegmentedLog.open(directory, segment_bytes=segment_bytes, full_scan=True)
    warm_seconds = time.perf_counter() - start
    reopened.close()
    # a clean reopen trusts what lies below the recovery point (docs/storage.md)
    start = time.perf_counter()
    reopened = SegmentedLog.open(directory, segment_bytes=segment_bytes)
    trusted_seconds = time.perf_counter() - start
    scanned = reopened.recovery.segments_scanned if reopened.recovery is not None else None
    reopened.close()
    return {
        "log_bytes": actual,
        "batches": end // BATCH_VALUES,
        "segments": len(list(directory.glob("*.log"))),
        "generate_seconds": gen_seconds,
        "open_seconds_index_rebuild": open_seconds,
        "open_seconds": warm_seconds,
        "open_mb_per_s": actual / warm_seconds / 1e6,
        "open_seconds_clean_recovery_point": trusted_seconds,
        "segments_scanned_clean_recovery_point": scanned,
    }


def run(log_bytes: int = 1 << 30, fsync_batches: int = 500, group_batches: int = 4096) -> dict[str, Any]:
    """Run the three storage benchmarks; the temporary logs are always deleted."""
    results: dict[str, Any] = {}
    base = Path(tempfile.mkdtemp(prefix="kraft-bench-storage-"))
    try:
        results["append_fsync_per_batch"] = _append_case(base / "a", fsync_batches, 1)
        results["append_group_commit_64"] = _append_case(base / "b", group_batches, 64)
        results["recovery"] = _recovery_case(base / "c", log_bytes)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.measure.bench_storage",
                                 description="Append, group-commit and recovery figures of the log.")
    ap.add_argument("log_bytes", nargs="?", type=int, default=1 << 30,
                    help="bytes of log for the recovery case (default 1 GiB)")
    size = ap.parse_args().log_bytes
    for case, metrics in run(log_bytes=size).items():
        print(case)
        for name, value in metrics.items():
            print(f"  {name:30s} {value:14,.2f}")
