"""The C scan of an append (`kraft.lane._native.scan_appended`, handed to the log by
`SegmentedLog.use_native_scan`) against the Python scan of `SegmentedLog._scan_appended`: on whole, valid batches that continue the log they give the same
positions, offsets, epochs and timestamps; on anything the Python scan refuses, the C scan
takes nothing (None), so the Python scan runs and names what is wrong."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft.lane import append_scan, native
from kraft.records.batch import build_batch
from kraft.records.control import LeaderChangeMessage, LeaderChangeVoter, build_control_batch
from kraft.storage import log as log_module
from kraft.storage.errors import InvalidAppendError
from kraft.storage.log import SegmentedLog

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="the native lane is not built")


@pytest.fixture
def slog(tmp_path: Path) -> Iterator[SegmentedLog]:
    log = SegmentedLog.open(tmp_path, recovery_checkpoint_interval_s=None)
    log.use_native_scan(append_scan())
    log.append(build_batch(0, 3, [b"a", b"b"], 1_000))  # the log ends at 2, in epoch 3
    yield log
    log.close()


def python_scan(log: SegmentedLog, data: bytes, monkeypatch: pytest.MonkeyPatch) -> object:
    """The Python scan's result, or the InvalidAppendError it raises."""
    log.use_native_scan(None)
    try:
        return log._scan_appended(memoryview(data))
    except InvalidAppendError as exc:
        return exc
    finally:
        log.use_native_scan(append_scan())


def appends(rng: random.Random) -> bytes:
    """One to four batches continuing a log that ends at offset 2 in epoch 3: data batches of
    one to twenty records of varied sizes, now and then a control batch or a newer epoch."""
    out = []
    offset, epoch = 2, 3
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.2:
            epoch += rng.randint(1, 2)
        if rng.random() < 0.15:
            change = LeaderChangeMessage(1, (LeaderChangeVoter(1), LeaderChangeVoter(2)))
            out.append(build_control_batch(offset, epoch, 2_000 + offset, [change]))
            offset += 1
            continue
        values = [rng.randbytes(rng.choice((0, 1, 40, 100, 700))) for _ in range(rng.randint(1, 20))]
        out.append(build_batch(offset, epoch, values, 2_000 + offset))
        offset += len(values)
    return b"".join(out)


def test_both_scans_agree_on_valid_appends(slog: SegmentedLog,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    for _ in range(300):
        data = appends(rng)
        expected = python_scan(slog, data, monkeypatch)
        assert not isinstance(expected, InvalidAppendError), expected
        assert C.scan_appended(data, 2, 3, log_module.MAX_BATCH_BYTES) == expected
        assert slog._scan_appended(memoryview(data)) == expected  # the log takes the C path


def test_the_c_scan_takes_nothing_the_python_scan_refuses(
        slog: SegmentedLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Damaged appends: a byte flipped anywhere (the header fields outside the CRC included),
    a cut, a batch that does not continue the log, one over the size limit. Wherever the
    Python scan raises, the C scan answers None; wherever it takes the bytes (a flipped epoch
    that still does not go down), both give the same result."""
    rng = random.Random(11)
    refused = taken = 0
    for i in range(1500):
        data = bytearray(appends(rng))
        kind = i % 5
        limit = log_module.MAX_BATCH_BYTES
        if kind <= 1:  # one byte flipped, half the time in the first 21 (not under the CRC)
            at = rng.randrange(21) if kind == 0 else rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 2:
            del data[rng.randrange(1, len(data)):]
        elif kind == 3:
            data[7] ^= 1  # the first batch's base offset: it no longer continues the log
        else:
            limit = rng.randint(61, 400)  # a size limit some batches are over
        with monkeypatch.context() as m:
            m.setattr(log_module, "MAX_BATCH_BYTES", limit)
            python = python_scan(slog, bytes(data), monkeypatch)
            native = C.scan_appended(bytes(data), 2, 3, limit)
            logged = python if isinstance(python, InvalidAppendError) else \
                slog._scan_appended(memoryview(bytes(data)))
        if isinstance(python, InvalidAppendError):
            assert native is None, (kind, python)
            refused += 1
        else:
            assert native == python == logged, kind
            taken += 1
    assert refused > 1000 and taken > 20  # both outcomes were exercised


def test_the_log_names_what_the_c_scan_refused(slog: SegmentedLog) -> None:
    """Through the log's own append: the C scan refuses, and the error is the Python scan's."""
    bad = bytearray(build_batch(2, 3, [b"x" * 50], 3_000))
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidAppendError, match="fails its CRC check"):
        slog.append(bytes(bad))
    with pytest.raises(InvalidAppendError, match="does not continue the log at 2"):
        slog.append(build_batch(4, 3, [b"y"], 3_000))
    with pytest.raises(InvalidAppendError, match="below the log's last epoch 3"):
        slog.append(build_batch(2, 2, [b"z"], 3_000))
    assert slog.append(build_batch(2, 3, [b"ok"], 3_000)) == 3


def test_the_log_scans_in_c_only_with_the_scan_it_was_handed(tmp_path: Path) -> None:
    scan = append_scan()
    assert scan is not None
    calls: list[int] = []

    def counted(buf: memoryview, expected: int, last_epoch: int, max_batch: int
                ) -> tuple[list[tuple[int, int, int, int, int]], int] | None:
        calls.append(expected)
        return scan(buf, expected, last_epoch, max_batch)

    log = SegmentedLog.open(tmp_path, recovery_checkpoint_interval_s=None)
    try:
        log.append(build_batch(0, 3, [b"a"], 1_000))
        assert calls == []  # storage alone: the Python scan
        log.use_native_scan(counted)
        assert log.append(build_batch(1, 3, [b"b", b"c"], 1_000)) == 3
        assert calls == [1]
        log.use_native_scan(None)
        log.append(build_batch(3, 3, [b"d"], 1_000))
        assert calls == [1] and log.log_end_offset == 4
    finally:
        log.close()
