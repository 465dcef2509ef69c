"""Record batch v2 throughput: encode, and decode + CRC-validate, of 100-byte values.

MB here is 10**6 bytes of encoded batches. Each figure is the best of several timed rounds
(the least disturbed by the rest of the machine). kafka-python's independent implementation
is measured on the same input for context.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import Any

from kraft.records.batch import build_batch, iter_batches, scan_batches

VALUE_SIZE = 100
ROUNDS = 11


def _best_seconds(fn: Callable[[], object], min_time: float = 0.08) -> float:
    """Best per-call time over ROUNDS rounds, each repeating `fn` for at least `min_time`."""
    best = float("inf")
    for _ in range(ROUNDS):
        n = 0
        start = time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        best = min(best, elapsed / n)
    return best


def _case(records_per_batch: int, batches: int) -> dict[str, float]:
    values = [os.urandom(VALUE_SIZE) for _ in range(records_per_batch)]

    def encode() -> bytes:
        return b"".join(
            build_batch(i * records_per_batch, 1, values, 1_700_000_000_000) for i in range(batches)
        )

    log = encode()

    def decode() -> int:
        res = scan_batches(log)  # header + CRC-32C of every batch
        assert res.tail is None
        n = 0
        for batch in res.batches:
            for _ in batch.records():
                n += 1
        return n

    def header_scan() -> int:
        return sum(1 for _ in iter_batches(log))

    assert decode() == records_per_batch * batches
    mb = len(log) / 1e6
    out = {
        "batch_bytes": len(log) / batches,
        "encode_mb_s": mb / _best_seconds(encode),
        "decode_validate_mb_s": mb / _best_seconds(decode),
        "header_scan_mb_s": mb / _best_seconds(header_scan),
    }
    out["encode_records_s"] = out["encode_mb_s"] * 1e6 / out["batch_bytes"] * records_per_batch
    out["decode_records_s"] = (
        out["decode_validate_mb_s"] * 1e6 / out["batch_bytes"] * records_per_batch
    )
    out.update(_kafka_python(values, batches, mb))
    return out


def _kafka_python(values: list[bytes], batches: int, mb: float) -> dict[str, float]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from kafka.record.default_records import (
                DefaultRecordBatch,
                DefaultRecordBatchBuilder,
            )
    except ImportError:  # kafka-python is a dev extra
        return {}

    def encode() -> list[bytes]:
        out = []
        for _ in range(batches):
            b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**30)
            for i, v in enumerate(values):
                b.append(i, 1_700_000_000_000, None, v, [])
            out.append(bytes(b.build()))
        return out

    built = encode()

    def decode() -> int:
        n = 0
        for raw in built:
            batch = DefaultRecordBatch(raw)
            assert batch.validate_crc()
            for _ in batch:
                n += 1
        return n

    return {
        "kafka_python_encode_mb_s": mb / _best_seconds(encode),
        "kafka_python_decode_validate_mb_s": mb / _best_seconds(decode),
    }


def run() -> dict[str, Any]:
    """Measure and return {case: {metric: value}} for 1, 100 and 1000 records per batch."""
    return {
        "values_100B_x1_per_batch": _case(1, 2000),
        "values_100B_x100_per_batch": _case(100, 50),
        "values_100B_x1000_per_batch": _case(1000, 5),
    }


if __name__ == "__main__":
    for case, metrics in run().items():
        print(case)
        for name, value in metrics.items():
            print(f"  {name:36s} {value:14,.1f}")
