"""Child process for test_crash_kill9: appends batches forever, printing each durable offset.

Usage: python crash_child.py DIR SEED [CHECKPOINT_INTERVAL_S]. Batch contents are a pure function of the offset, so
the parent can check every byte it reads back after killing this process with SIGKILL.
"""

from __future__ import annotations

import random
import sys

from kraft.records.batch import build_batch
from kraft.storage.log import SegmentedLog


def value_for(offset: int, size: int) -> bytes:
    """Deterministic record value for an offset."""
    return (offset.to_bytes(8, "big") * (size // 8 + 1))[:size]


def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    interval = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    rng = random.Random(seed)
    log = SegmentedLog.open(directory, segment_bytes=64 * 1024, index_interval_bytes=1024,
                            recovery_checkpoint_interval_s=interval)
    epoch = max(1, log.last_epoch)
    print(f"start {log.log_end_offset}", flush=True)
    while True:
        for _ in range(rng.randint(1, 8)):
            off = log.log_end_offset
            n = rng.randint(1, 5)
            size = rng.randint(10, 3000)
            if rng.random() < 0.05:
                epoch += 1
            log.append(build_batch(off, epoch, [value_for(off + i, size) for i in range(n)], off))
        durable = log.flush()
        print(f"durable {durable}", flush=True)


if __name__ == "__main__":
    main()
