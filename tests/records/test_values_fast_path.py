"""`RecordBatch.values()` slices plain records directly; it must agree with `records()` on every
batch, and on damaged bytes fail exactly as `records()` does (never return wrong values)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.protocol.errors import CorruptRecordError
from kraft.records import batch as batch_mod
from kraft.records.batch import BATCH_HEADER_SIZE, Record, RecordBatch, build_batch

from .test_batch import records_st


def _slow(b: RecordBatch) -> list[bytes | None]:
    return [r.value for r in b.records()]


@given(values=st.lists(st.binary(max_size=20000), min_size=1, max_size=30))
@settings(max_examples=100, deadline=None)
def test_plain_values_of_every_size_agree(values: list[bytes]) -> None:
    b = RecordBatch.parse(build_batch(7, 2, values, 1))
    assert b.values() == values == _slow(b)


def test_plain_values_take_the_fast_path_and_other_shapes_do_not() -> None:
    plain = bytes(RecordBatch.parse(build_batch(0, 1, [b"a" * 100] * 300, 0)).raw[BATCH_HEADER_SIZE:])
    assert batch_mod._plain_values(plain, 300) == [b"a" * 100] * 300
    large = [b"b" * 1_000_000, b"c" * 20_000, b"d"]  # lengths of three and four varint bytes
    body = bytes(RecordBatch.parse(build_batch(0, 1, large, 0)).raw[BATCH_HEADER_SIZE:])
    assert batch_mod._plain_values(body, 3) == large
    # values are bytes whether sliced from bytes or from a view of the caller's buffer (a
    # memoryview compares equal to its bytes, so the types are checked); a body of 1 MiB or
    # more is read through a view
    for data, count in ((body, 3), (memoryview(body), 3), (plain, 300), (memoryview(plain), 300)):
        got = batch_mod._plain_values(data, count)
        assert got is not None and {type(v) for v in got} == {bytes}
    huge = RecordBatch.parse(build_batch(0, 1, [b"e" * (1 << 20), b"f"], 0))
    assert [type(v) for v in huge.values()] == [bytes, bytes]
    for rec in (Record(0, 0, b"k", b"v", ()), Record(0, 0, None, None, ()),
                Record(0, 0, None, b"v", (("h", b"x"),))):
        body = bytes(RecordBatch.parse(build_batch(0, 1, [rec], 0)).raw[BATCH_HEADER_SIZE:])
        assert batch_mod._plain_values(body, 1) is None


@given(records=records_st)
@settings(max_examples=100, deadline=None)
def test_any_record_shape_agrees(records: list[Record]) -> None:
    b = RecordBatch.parse(build_batch(0, 3, records, 0))
    assert b.values() == [r.value for r in records] == _slow(b)


@given(values=st.lists(st.binary(max_size=200), min_size=1, max_size=8), data=st.data())
@settings(max_examples=300, deadline=None)
def test_damaged_body_fails_like_records(values: list[bytes], data: st.DataObject) -> None:
    raw = bytearray(build_batch(0, 1, values, 0))
    pos = data.draw(st.integers(BATCH_HEADER_SIZE, len(raw) - 1))
    raw[pos] = data.draw(st.integers(0, 255))
    b = RecordBatch.parse(bytes(raw))  # the CRC is not checked here, as on the apply path
    try:
        want: list[bytes | None] | None = _slow(b)
    except CorruptRecordError as exc:
        with pytest.raises(CorruptRecordError) as got:
            b.values()
        assert str(got.value) == str(exc)
        return
    assert b.values() == want
