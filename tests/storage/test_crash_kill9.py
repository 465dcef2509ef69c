"""SIGKILL a process that appends and flushes; reopening never loses a flushed batch.

Half the seeds checkpoint the recovery point after every flush (the kill lands around
checkpoint writes), the others every second (the reopen mostly validates from an older one);
either way the reopened log must equal what a full scan of the same files derives.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.storage.log import SegmentedLog

CHILD = Path(__file__).with_name("crash_child.py")
ROOT = Path(__file__).resolve().parents[2]
RUNS = 32


def value_for(offset: int, size: int) -> bytes:
    return (offset.to_bytes(8, "big") * (size // 8 + 1))[:size]


@pytest.mark.parametrize("seed", range(RUNS))
def test_kill9_never_loses_a_flushed_batch(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    restarts = 2 if seed % 4 == 0 else 1  # some runs crash twice in the same directory
    durable_seen: list[int] = []
    for round_ in range(restarts):
        kill_after = rng.randint(1, 25)
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(tmp_path / "log"), str(seed * 10 + round_),
             "0" if seed % 2 == 0 else "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        lines = 0
        try:
            for line in proc.stdout:
                if line.startswith("durable "):
                    durable_seen.append(int(line.split()[1]))
                    lines += 1
                    if lines >= kill_after:
                        # A little more work so the kill lands mid-append at varying points.
                        for _ in range(rng.randint(0, 20000)):
                            pass
                        break
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""

    shutil.copytree(tmp_path / "log", tmp_path / "copy")
    full = SegmentedLog.open(tmp_path / "copy", segment_bytes=64 * 1024,
                             index_interval_bytes=1024, full_scan=True)
    log = SegmentedLog.open(tmp_path / "log", segment_bytes=64 * 1024, index_interval_bytes=1024)
    try:
        assert full.log_end_offset == log.log_end_offset
        assert full.epoch_cache.entries == log.epoch_cache.entries
        assert [(s.base_offset, s.size, s.next_offset, s.index_path.read_bytes(),
                 s.time_index_path.read_bytes()) for s in full.segments] == \
            [(s.base_offset, s.size, s.next_offset, s.index_path.read_bytes(),
              s.time_index_path.read_bytes()) for s in log.segments]
        assert durable_seen, "the child never reported a durable offset"
        assert log.log_end_offset >= max(durable_seen)
        # Every batch reads back intact, contiguous from 0, with the expected content.
        expected = 0
        for batch in log.batches(0):
            assert batch.base_offset == expected
            assert batch.is_valid()
            for rec in batch.records():
                assert rec.value == value_for(rec.offset, len(rec.value or b""))
            expected = batch.next_offset
        assert expected == log.log_end_offset
        # The tail is appendable right away.
        from kraft.records.batch import build_batch

        end = log.log_end_offset
        log.append(build_batch(end, log.last_epoch, [b"after-crash"], 0))
        assert log.flush() == end + 1
    finally:
        log.close()
        full.close()
