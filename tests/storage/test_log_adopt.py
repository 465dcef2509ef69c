"""SegmentedLog.adopt_written: batches another writer (the follower's native lane) wrote and
synced at the end of the active segment, taken by the log as appended and durable."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.storage.errors import InvalidAppendError
from kraft.storage.log import SegmentedLog
from tests.support.direct_io import o_direct_supported
from tests.support.segments import rebuilt_index

Batches = Callable[..., list[bytes]]


def write_behind(log: SegmentedLog, data: bytes) -> int:
    """Write `data` at the active segment's end as the lane does (pwrite, fdatasync); the new
    write position."""
    active = log.segments[-1]
    pos = active.size
    os.pwrite(active.fd, data, pos)
    os.fdatasync(active.fd)
    return pos + len(data)


def test_adopted_batches_read_index_and_reopen_as_appended_ones(tmp_path: Path,
                                                                batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, index_interval_bytes=500,
                            recovery_checkpoint_interval_s=None)
    first = batches(0, 3)
    for b in first:
        log.append(b)
    log.flush()
    later = batches(6, 12)
    end = 6
    for i in range(0, 12, 4):  # three adoptions of four batches each
        pos = write_behind(log, b"".join(later[i:i + 4]))
        end += 8
        assert log.adopt_written(pos) == end
        assert (log.log_end_offset, log.durable_end_offset) == (end, end)
    assert log.adopt_written(log.segments[-1].size) == end  # nothing new: nothing changes
    made = first + later
    assert log.read(0, 1 << 20) == b"".join(made)
    assert [b.base_offset for b in log.batches()] == list(range(0, 30, 2))
    # the index is the one an append of the same batches builds
    log.close()
    rebuilt = rebuilt_index((tmp_path / "00000000000000000000.log").read_bytes(), 0, 500)
    assert (tmp_path / "00000000000000000000.index").read_bytes() == rebuilt.offset_index_bytes()
    again = SegmentedLog.open(tmp_path, recovery_checkpoint_interval_s=None)
    assert again.log_end_offset == 30 and again.recovery.truncated_bytes == 0
    assert again.read(0, 1 << 20) == b"".join(made)
    again.close()


def test_appends_go_on_after_an_adoption(tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, recovery_checkpoint_interval_s=None)
    log.append(batches(0, 1)[0])
    log.adopt_written(write_behind(log, batches(2, 1)[0]))
    log.append(batches(4, 1)[0])
    assert log.flush() == 6
    assert [b.base_offset for b in log.batches()] == [0, 2, 4]
    log.close()


def test_bytes_that_do_not_continue_the_log_are_refused_and_nothing_moves(
        tmp_path: Path, batches: Batches) -> None:
    log = SegmentedLog.open(tmp_path, recovery_checkpoint_interval_s=None)
    log.append(batches(0, 1)[0])
    log.flush()
    size = log.segments[-1].size
    with pytest.raises(InvalidAppendError, match="does not continue the log at 2"):
        log.adopt_written(write_behind(log, batches(8, 1)[0]))
    bad = bytearray(batches(2, 1)[0])
    bad[-1] ^= 1
    os.pwrite(log.segments[-1].fd, bytes(bad), size)
    with pytest.raises(InvalidAppendError, match="CRC"):
        log.adopt_written(size + len(bad))
    with pytest.raises(InvalidAppendError, match="before the end"):
        log.adopt_written(size - 1)
    with pytest.raises(InvalidAppendError, match="holds"):
        log.adopt_written(size + 10 * len(bad))
    assert (log.log_end_offset, log.durable_end_offset, log.segments[-1].size) == (2, 2, size)
    log.close()


def test_with_preallocation_the_write_through_goes_on_from_the_adopted_end(
        tmp_path: Path, batches: Batches) -> None:
    if not o_direct_supported(tmp_path):
        pytest.skip("the test directory's filesystem refuses O_DIRECT")
    log = SegmentedLog.open(tmp_path, preallocate_bytes=64 * 1024,
                            recovery_checkpoint_interval_s=None)
    made = batches(0, 3)
    log.append(made[0], write_through=True)  # the writer keeps a copy of the last block
    log.adopt_written(write_behind(log, made[1]))
    log.append(made[2], write_through=True)  # must not write that stale block back
    assert log.read(0, 1 << 20) == b"".join(made)
    log.close()
    again = SegmentedLog.open(tmp_path, recovery_checkpoint_interval_s=None)
    assert again.read(0, 1 << 20) == b"".join(made)
    again.close()
