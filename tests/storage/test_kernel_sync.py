"""fsyncs started by the kernel (`kraft.storage.aio`) and the log's use of them: a durable end
offset is published only once the kernel reports the fdatasync done, and every operation that
needs the files settled waits for it."""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.storage import aio
from kraft.storage.aio import KernelSync
from kraft.storage.errors import StorageError
from kraft.storage.log import SegmentedLog

Batches = Callable[..., list[bytes]]

pytestmark = pytest.mark.skipif(not aio.available(), reason="native AIO fsync is not available")


def _readable(fd: int, timeout: float = 5.0) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_submit_signals_the_eventfd_and_reaps_the_result(tmp_path: Path) -> None:
    ks = KernelSync.open()
    assert ks is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert ks.reap() == [] and ks.wait() == []  # nothing in flight: nothing to wait for
        os.write(fd, b"x" * 4096)
        ks.submit(fd, 41)
        assert ks.in_flight == 1
        assert _readable(ks.fileno())
        assert ks.reap() == [(41, 0)]
        assert ks.in_flight == 0
        ks.submit(fd, 42)
        assert ks.wait() == [(42, 0)]  # blocking wait, same result
    finally:
        ks.close()
        os.close(fd)
    assert ks.closed
    with pytest.raises(OSError, match="closed"):
        ks.submit(fd, 1)


def test_refused_requests_leave_nothing_in_flight(tmp_path: Path) -> None:
    ks = KernelSync.open()
    assert ks is not None
    r, w = os.pipe()  # a pipe has no fsync: the kernel refuses the request at submit
    try:
        with pytest.raises(OSError) as refused:
            ks.submit(r, 1)
        assert refused.value.errno == errno.EINVAL
        with pytest.raises(OSError) as bad:
            ks.submit(987_654, 2)  # not an open file
        assert bad.value.errno == errno.EBADF
        assert ks.in_flight == 0
        fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            for token in range(aio.MAX_IN_FLIGHT):  # every slot came back
                ks.submit(fd, token)
            with pytest.raises(OSError) as full:
                ks.submit(fd, 99)
            assert full.value.errno == errno.EAGAIN
            reaped: list[tuple[int, int]] = []
            while len(reaped) < aio.MAX_IN_FLIGHT:
                reaped += ks.wait()
            assert sorted(reaped) == [(t, 0) for t in range(aio.MAX_IN_FLIGHT)]
        finally:
            os.close(fd)
    finally:
        ks.close()
        os.close(r)
        os.close(w)


def _kernel_log(tmp_path: Path, **kw: int) -> tuple[SegmentedLog, KernelSync]:
    log = SegmentedLog.open(tmp_path, **kw)
    ks = KernelSync.open()
    assert ks is not None
    log.use_kernel_sync(ks)
    return log, ks


def _finish(log: SegmentedLog, ks: KernelSync) -> int:
    assert _readable(ks.fileno())
    durable = log.finish_flush()
    assert durable is not None
    return durable


def test_durable_only_once_the_kernel_reports(tmp_path: Path, batches: Batches) -> None:
    log, ks = _kernel_log(tmp_path)
    try:
        assert not log.start_flush()  # nothing appended: nothing to sync
        first = batches(0, 3)
        log.append(first[0])
        assert log.flush() == 2
        for b in first[1:]:
            log.append(b)
        assert log.start_flush()
        assert log.flush_in_flight and log.durable_end_offset == 2
        assert not log.start_flush()  # one at a time
        for b in batches(6, 2):  # appends go on meanwhile
            log.append(b)
        assert _finish(log, ks) == 6  # what was appended when it started
        assert not log.flush_in_flight and log.durable_end_offset == 6
        assert log.start_flush()
        assert _finish(log, ks) == 10
        assert log.finish_flush() is None  # a readiness with nothing finished is ignored
    finally:
        log.close()
        ks.close()


def test_flush_truncate_and_close_wait_for_the_kernel(tmp_path: Path, batches: Batches) -> None:
    log, ks = _kernel_log(tmp_path)
    try:
        for b in batches(0, 5):
            log.append(b)
        log.flush()
        log.append(batches(10, 1)[0])
        assert log.start_flush()
        log.append(batches(12, 1)[0])
        assert log.flush() == 14  # waited for the kernel's flush, then synced the rest
        assert not log.flush_in_flight
        assert log.take_settled() is None  # flush's own result covers it
        log.append(batches(14, 1)[0])
        assert log.start_flush()
        assert log.truncate_to(12) == 12  # settles the flush first, then lowers the end
        assert not log.flush_in_flight and log.durable_end_offset == 12
        assert log.finish_flush() is None  # its completion was consumed by the truncation
        assert log.take_settled() == 12  # ... so the log hands out the durable end instead
        assert log.take_settled() is None  # once
        log.append(batches(12, 1)[0])
        assert log.start_flush()
    finally:
        log.close()  # waits for it as well
        ks.close()
    reopened = SegmentedLog.open(tmp_path)
    assert reopened.log_end_offset == 14
    reopened.close()


def test_new_segments_and_epochs_take_the_full_flush(tmp_path: Path, batches: Batches) -> None:
    log, ks = _kernel_log(tmp_path, segment_bytes=1000)
    try:
        first = batches(0, 3)
        log.append(first[0])
        assert not log.start_flush()  # epoch 1 is new: the leader-epoch checkpoint changes
        assert log.flush() == 2
        for b in first[1:]:
            log.append(b)
        assert log.start_flush()
        assert _finish(log, ks) == 6
        for b in batches(log.log_end_offset, 6):  # rolls into a second segment
            log.append(b)
        assert len(log.segments) > 1
        assert not log.start_flush()  # the new segment's directory entry must be synced too
        assert log.flush() == log.log_end_offset
        log.append(batches(log.log_end_offset, 1, epoch=2)[0])  # a new leader epoch
        assert not log.start_flush()  # the leader-epoch checkpoint changes with it
        assert log.flush() == log.log_end_offset
        log.append(batches(log.log_end_offset, 1, epoch=2)[0])
        assert log.start_flush()
        assert _finish(log, ks) == log.log_end_offset
    finally:
        log.close()
        ks.close()


def test_a_failed_kernel_fsync_poisons_the_log(tmp_path: Path, batches: Batches,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    log, ks = _kernel_log(tmp_path)
    try:
        log.append(batches(0, 1)[0])
        log.flush()
        log.append(batches(2, 1)[0])
        assert log.start_flush()
        assert _readable(ks.fileno())
        real = ks.reap()  # the kernel's own result, then the one a failing disk gives
        assert [result for _, result in real] == [0]
        monkeypatch.setattr(ks, "reap", lambda: [(real[0][0], -errno.EIO)])
        with pytest.raises(StorageError, match="fsync failed"):
            log.finish_flush()
        assert log.durable_end_offset == 2
        with pytest.raises(StorageError, match="failed earlier"):
            log.append(batches(4, 1)[0])
        with pytest.raises(StorageError, match="failed earlier"):
            log.start_flush()
    finally:
        log.close()
        ks.close()
