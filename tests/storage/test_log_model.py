"""Random operation sequences against SegmentedLog, checked against a list-of-batches model."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft.records.batch import build_batch
from kraft.storage import log_segments
from kraft.storage.epoch_cache import EpochEntry
from kraft.storage.log import SegmentedLog

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4), st.integers(1, 600), st.booleans()),
        st.tuples(st.just("truncate"), st.integers(0, 100)),
        st.tuples(st.just("advance"), st.integers(0, 100)),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("flush")),
        st.tuples(st.just("read"), st.integers(0, 100), st.sampled_from([1, 300, 1 << 20])),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_log_matches_model(ops: list[tuple[object, ...]]) -> None:
    # a small budget for the latest appends kept in memory: they fall out by size as well
    kept_bytes = log_segments.RECENT_BYTES
    log_segments.RECENT_BYTES = 1500
    try:
        _run_model(ops)
    finally:
        log_segments.RECENT_BYTES = kept_bytes


def _run_model(ops: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        log = SegmentedLog.open(path, segment_bytes=1200, index_interval_bytes=200)
        model: list[tuple[int, int, bytes]] = []  # (base, epoch, bytes)
        start = 0
        epoch = 1
        try:
            for op in ops:
                end = model[-1][0] + _count(model[-1][2]) if model else start
                if op[0] == "append":
                    _, n, size, bump = op
                    assert isinstance(n, int) and isinstance(size, int)
                    epoch += 1 if bump else 0
                    b = build_batch(end, epoch, [bytes([end % 256]) * size] * n, end)
                    assert log.append(b) == end + n
                    model.append((end, epoch, b))
                elif op[0] == "truncate":
                    target = start + int(op[1])  # type: ignore[call-overload]
                    if target >= end:
                        continue
                    kept = [m for m in model if m[0] + _count(m[2]) <= target]
                    # Kafka semantics: a batch containing the target goes entirely.
                    model = kept
                    new_end = model[-1][0] + _count(model[-1][2]) if model else start
                    assert log.truncate_to(target) == new_end
                elif op[0] == "advance":
                    target = start + int(op[1])  # type: ignore[call-overload]
                    if target > end or target <= start:
                        continue
                    log.advance_log_start_offset(target)
                    start = target
                elif op[0] == "reopen":
                    log.close()
                    log = SegmentedLog.open(path, segment_bytes=1200, index_interval_bytes=200)
                    # A reopened log starts at its first segment's base offset.
                    start = log.log_start_offset
                    model = [m for m in model if m[0] + _count(m[2]) > start]
                elif op[0] == "read":
                    # the latest appends are read from memory: the same bytes as the file's
                    offset = start + int(op[1])  # type: ignore[call-overload]
                    if offset >= end:
                        continue
                    got_bytes = log.read(offset, int(op[2]))  # type: ignore[call-overload]
                    kept = list(log._recent)
                    log._recent.clear()
                    assert log.read(offset, int(op[2])) == got_bytes  # type: ignore[call-overload]
                    log._recent[:] = kept
                else:
                    assert log.flush() == log.log_end_offset
                end = model[-1][0] + _count(model[-1][2]) if model else start
                assert log.log_end_offset == end
                assert log.log_start_offset == start
                got = list(log.batches(start)) if end > start else []
                visible = [m for m in model if m[0] + _count(m[2]) > start]
                assert [bytes(g.raw) for g in got] == [m[2] for m in visible]
                # Epoch cache (Kafka semantics): first offset of each epoch, then entries at
                # or below the log start collapse into (latest of them, log start).
                full: list[EpochEntry] = []
                for base, ep, _ in model:
                    if not full or full[-1].epoch != ep:
                        full.append(EpochEntry(ep, base))
                below = [e for e in full if e.start_offset <= start]
                want = [EpochEntry(below[-1].epoch, start)] if below else []
                want += [e for e in full if e.start_offset > start]
                assert list(log.epoch_cache.entries) == want
        finally:
            log.close()


def _count(batch: bytes) -> int:
    return int.from_bytes(batch[23:27], "big") + 1
