"""fsyncs started by the kernel (`kraft.storage.uring`: io_uring; `kraft.storage.aio`: native
AIO) and the log's use of them: a durable end offset is published only once the kernel reports
the fdatasync done, and every operation that needs the files settled waits for it."""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraft.storage import aio, uring
from kraft.storage.aio import KernelSync
from kraft.storage.engine_choice import open_engine
from kraft.storage.errors import StorageError
from kraft.storage.log import SegmentedLog
from kraft.storage.sync_engine import SyncEngine
from kraft.storage.uring import UringSync

Batches = Callable[..., list[bytes]]

_ENGINES = {"uring": (UringSync, uring.available()), "aio": (KernelSync, aio.available())}


@pytest.fixture(params=sorted(_ENGINES))
def engine_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    if not _ENGINES[kind][1]:
        pytest.skip(f"{kind} fsync is not available here")
    return kind


@pytest.fixture
def engine(engine_kind: str) -> Iterator[KernelSync | UringSync]:
    opened = _ENGINES[engine_kind][0].open()
    assert opened is not None
    yield opened
    opened.close()


def _readable(fd: int, timeout: float = 5.0) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_submit_signals_the_eventfd_and_reaps_the_result(tmp_path: Path,
                                                        engine: SyncEngine) -> None:
    ks = engine
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
        for token in range(3 * ks.capacity):  # the queues wrap around
            os.write(fd, b"y")
            ks.submit(fd, token)
            assert ks.wait() == [(token, 0)]
        assert ks.in_flight == 0 and ks.reap() == []
    finally:
        ks.close()
        os.close(fd)
    assert ks.closed
    with pytest.raises(OSError, match="closed"):
        ks.submit(fd, 1)


def test_requests_that_cannot_sync_leave_nothing_in_flight(tmp_path: Path, engine_kind: str,
                                                           engine: SyncEngine) -> None:
    """A descriptor without an fsync, or no open file at all: native AIO refuses the request at
    submit (nothing started), io_uring takes it and completes it with the error; either way
    nothing stays in flight, and a full engine refuses one more request."""
    ks = engine
    r, w = os.pipe()  # a pipe has no fsync
    try:
        for fd, err in ((r, errno.EINVAL), (987_654, errno.EBADF)):  # the latter: not open
            if engine_kind == "aio":
                with pytest.raises(OSError) as refused:
                    ks.submit(fd, 1)
                assert refused.value.errno == err
            else:
                ks.submit(fd, 1)
                assert ks.wait() == [(1, -err)]
            assert ks.in_flight == 0
        fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            for token in range(ks.capacity):  # every slot is free again
                ks.submit(fd, token)
            with pytest.raises(OSError) as full:
                ks.submit(fd, 99)
            assert full.value.errno == errno.EAGAIN
            reaped: list[tuple[int, int]] = []
            while len(reaped) < ks.capacity:
                reaped += ks.wait()
            assert sorted(reaped) == [(t, 0) for t in range(ks.capacity)]
        finally:
            os.close(fd)
    finally:
        os.close(r)
        os.close(w)
    ks.close()
    assert ks.closed
    with pytest.raises(OSError, match="closed"):
        ks.submit(r, 1)


def test_the_engine_choice(engine_kind: str) -> None:
    """`auto` and `uring` open io_uring where it works here, `aio` native AIO; `off` none."""
    assert open_engine("off") == (None, "thread")
    engine, name = open_engine(engine_kind)  # type: ignore[arg-type]
    assert engine is not None and name == engine_kind
    assert isinstance(engine, _ENGINES[engine_kind][0])
    engine.close()
    if engine_kind == "uring":
        auto, name = open_engine("auto")
        assert isinstance(auto, UringSync) and name == "uring"
        auto.close()


class _Silent:
    """`select` of a sandbox whose io_uring never signals a completion on the eventfd."""

    def __init__(self, signalled: bool) -> None:
        self.signalled = signalled

    def select(self, r: list[int], w: list[int], x: list[int],
               timeout: float) -> tuple[list[int], list[int], list[int]]:
        if self.signalled:
            return r, [], []
        return [], [], []


@pytest.mark.skipif(not uring.available(), reason="io_uring fsync is not available here")
@pytest.mark.parametrize(("signalled", "reason"), [
    (False, "no completion was signalled within"),
    (True, "the eventfd was signalled with no completion")])
def test_a_ring_that_does_not_signal_its_completions_is_not_used(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, signalled: bool,
        reason: str) -> None:
    """`UringSync.open` proves the ring with one request before handing it out: when the
    eventfd does not say it is done (or says so with nothing done), the ring is released, and
    `auto` falls back to the flusher thread, with the reason logged."""
    fds = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(uring, "select", _Silent(signalled))
    if signalled:  # signalled before the kernel finished: nothing in the completion queue
        monkeypatch.setattr(UringSync, "reap", lambda self: [])
    with caplog.at_level("INFO", logger="kraft.storage.uring"):
        assert UringSync.open() is None
        assert open_engine("auto") == (None, "thread")
    assert any(reason in r.getMessage() for r in caplog.records)
    assert len(os.listdir("/proc/self/fd")) == fds  # the ring, its maps and eventfd released


def _kernel_log(tmp_path: Path, ks: SyncEngine, **kw: int) -> tuple[SegmentedLog, SyncEngine]:
    log = SegmentedLog.open(tmp_path, **kw)
    log.use_kernel_sync(ks)
    return log, ks


def _start_second_flush(log: SegmentedLog, batches: Batches) -> None:
    """One batch flushed, a second appended and its flush handed to the kernel."""
    log.append(batches(0, 1)[0])
    log.flush()
    log.append(batches(2, 1)[0])
    assert log.start_flush()


def _end_after_reopening(directory: Path) -> int:
    reopened = SegmentedLog.open(directory)
    try:
        return reopened.log_end_offset
    finally:
        reopened.close()


def _finish(log: SegmentedLog, ks: SyncEngine) -> int:
    assert _readable(ks.fileno())
    durable = log.finish_flush()
    assert durable is not None
    return durable


def test_durable_only_once_the_kernel_reports(tmp_path: Path, batches: Batches,
                                              engine: SyncEngine) -> None:
    log, ks = _kernel_log(tmp_path, engine)
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


def test_a_refused_kernel_flush_leaves_the_sync_to_flush(tmp_path: Path, batches: Batches,
                                                         engine: SyncEngine,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """The engine refuses the request (here: it was closed): `start_flush` declines and logs it,
    nothing is marked durable or in flight, and `flush` syncs the same appends."""
    log, ks = _kernel_log(tmp_path, engine)
    try:
        log.append(batches(0, 1)[0])
        assert log.flush() == 2
        log.append(batches(2, 2)[0])
        ks.close()
        with caplog.at_level("WARNING", logger="kraft.storage.log"):
            assert not log.start_flush()
        assert any("event=kernel_flush_refused" in r.getMessage() for r in caplog.records)
        assert not log.flush_in_flight and log.durable_end_offset == 2
        assert log.flush() == 4
    finally:
        log.close()
    assert _end_after_reopening(tmp_path) == 4


def test_a_kernel_flush_lost_with_its_engine_fails_the_log(tmp_path: Path, batches: Batches,
                                                           engine: SyncEngine) -> None:
    """The engine closed under a flush in flight (its completion consumed by the close): the
    log cannot tell whether the sync happened, so the next operation that settles it fails the
    log rather than wait for a completion that will not come."""
    log, ks = _kernel_log(tmp_path, engine)
    try:
        _start_second_flush(log, batches)
        ks.close()
        with pytest.raises(StorageError, match="lost"):
            log.flush()
        assert log.durable_end_offset == 2
        with pytest.raises(StorageError, match="failed earlier"):
            log.append(batches(4, 1)[0])
    finally:
        log.close()


def test_flush_truncate_and_close_wait_for_the_kernel(tmp_path: Path, batches: Batches,
                                                      engine: SyncEngine) -> None:
    log, ks = _kernel_log(tmp_path, engine)
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
    assert _end_after_reopening(tmp_path) == 14


def test_new_segments_and_epochs_take_the_full_flush(tmp_path: Path, batches: Batches,
                                                     engine: SyncEngine) -> None:
    log, ks = _kernel_log(tmp_path, engine, segment_bytes=1000)
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
                                               monkeypatch: pytest.MonkeyPatch,
                                               engine: SyncEngine) -> None:
    log, ks = _kernel_log(tmp_path, engine)
    try:
        _start_second_flush(log, batches)
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


def test_a_kernel_flush_reports_its_time_once(tmp_path: Path, batches: Batches,
                                              engine: SyncEngine) -> None:
    """A kernel flush is timed from its start until the log saw it done: once when finished
    on the eventfd's word, once when a truncation settled it (and not again at finish)."""
    log, ks = _kernel_log(tmp_path, engine)
    times: list[float] = []
    log.on_flush_time = times.append
    try:
        _start_second_flush(log, batches)
        assert len(times) == 1  # the first batch's flush, by `flush`
        assert _finish(log, ks) == 4
        assert len(times) == 2 and times[1] > 0
        assert log.finish_flush() is None and len(times) == 2
        for b in batches(4, 2):
            log.append(b)
        assert log.start_flush()
        assert log.truncate_to(6) == 6  # waits for the flush in flight
        assert len(times) == 3
        assert log.finish_flush() is None and len(times) == 3
    finally:
        log.close()
        ks.close()
