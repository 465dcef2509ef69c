"""Record batch v2: hand-checked bytes, round-trips, header-only reads, scanning and rebase."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.protocol.errors import CorruptRecordError, TruncatedInputError
from kraft.records.batch import (
    BATCH_HEADER_SIZE,
    Compression,
    Record,
    RecordBatch,
    TailKind,
    batch_header,
    build_batch,
    iter_batches,
    rebase,
    rebase_in_place,
    scan_batches,
)


def crc32c_reference(data: bytes) -> int:
    """Bit-by-bit CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): independent of crc32c."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_reference_crc_matches_the_published_check_value() -> None:
    assert crc32c_reference(b"123456789") == 0xE3069283


# One record, value b"hi", at base offset 5, leader epoch 2, timestamp 1000, written by hand
# from the field table (the CRC is checked separately below with the reference CRC).
GOLDEN_HEADER_BEFORE_CRC = (
    "0000000000000005"  # base offset 5
    "0000003a"  # length = 70 - 12 = 58
    "00000002"  # partition leader epoch 2
    "02"  # magic 2
)
GOLDEN_AFTER_CRC = (
    "0000"  # attributes: no compression, CreateTime, not transactional, not control
    "00000000"  # last offset delta 0
    "00000000000003e8"  # base timestamp 1000
    "00000000000003e8"  # max timestamp 1000
    "ffffffffffffffff"  # producer id -1
    "ffff"  # producer epoch -1
    "ffffffff"  # base sequence -1
    "00000001"  # records count 1
    # record: length 8 (zig-zag 0x10), attributes 0, timestamp delta 0, offset delta 0,
    # key length -1 (zig-zag 0x01), value length 2 (zig-zag 0x04), "hi", 0 headers
    "10"
    "00"
    "00"
    "00"
    "01"
    "04"
    "6869"
    "00"
)
GOLDEN_CRC = crc32c_reference(bytes.fromhex(GOLDEN_AFTER_CRC))
GOLDEN = bytes.fromhex(GOLDEN_HEADER_BEFORE_CRC + f"{GOLDEN_CRC:08x}" + GOLDEN_AFTER_CRC)


def test_golden_batch_bytes() -> None:
    assert build_batch(5, 2, [b"hi"], 1000) == GOLDEN
    assert len(GOLDEN) == 70


def test_golden_batch_parses() -> None:
    b = RecordBatch.parse(GOLDEN)
    b.validate(records=True)
    assert (b.base_offset, b.length, b.partition_leader_epoch, b.magic) == (5, 58, 2, 2)
    assert b.crc == GOLDEN_CRC
    assert (b.attributes, b.last_offset_delta, b.records_count) == (0, 0, 1)
    assert (b.base_timestamp, b.max_timestamp) == (1000, 1000)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
    assert (b.last_offset, b.next_offset, b.size_in_bytes) == (5, 6, 70)
    assert not b.is_control and not b.is_transactional
    assert b.compression is Compression.NONE
    assert bytes(b.raw) == GOLDEN
    assert list(b.records()) == [Record(5, 1000, None, b"hi", ())]


def test_golden_control_flag_sets_attribute_bit_5() -> None:
    raw = build_batch(5, 2, [b"hi"], 1000, control=True)
    assert raw[21:23] == b"\x00\x20"
    assert RecordBatch.parse(raw).is_control
    RecordBatch.parse(raw).validate()


def test_raw_is_a_zero_copy_view() -> None:
    buf = bytearray(b"\xee" * 3 + GOLDEN)
    b = RecordBatch.parse(buf, 3)
    assert isinstance(b.raw, memoryview)
    buf[3 + 70 - 1] = 0x7F  # the view sees the caller's buffer
    assert b.raw[-1] == 0x7F


def test_multi_byte_varints_and_headers() -> None:
    big = b"x" * 20000  # value length needs a 3-byte varint
    recs = [
        Record(0, 10**12, b"k" * 200, big, (("h1", b"v"), ("h2", None), ("ü", b""))),
        Record(0, 10**12 - 5, None, None, ()),  # negative timestamp delta
        Record(0, 10**12 + 10**9, b"", b"", ()),  # large timestamp delta (varlong)
    ]
    raw = build_batch(100, 7, recs, 0)
    b = RecordBatch.parse(raw)
    b.validate(records=True)
    assert b.base_timestamp == 10**12 and b.max_timestamp == 10**12 + 10**9
    got = list(b.records())
    assert [r.offset for r in got] == [100, 101, 102]
    assert [(r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (r.timestamp, r.key, r.value, r.headers) for r in recs
    ]


def test_many_records_offset_delta_beyond_one_byte() -> None:
    values = [bytes([i % 256]) * (i % 7) for i in range(20000)]
    b = RecordBatch.parse(build_batch(0, 1, values, 5))
    b.validate(records=True)
    assert b.values() == values
    assert b.last_offset_delta == 19999


def test_build_rejects_empty_and_bad_ranges() -> None:
    with pytest.raises(ValueError):
        build_batch(0, 0, [], 0)
    with pytest.raises(ValueError):
        build_batch(2**63, 0, [b"x"], 0)
    with pytest.raises(ValueError):
        build_batch(0, 2**31, [b"x"], 0)


values_st = st.lists(st.binary(max_size=300), min_size=1, max_size=40)
records_st = st.lists(
    st.builds(
        Record,
        offset=st.just(0),
        timestamp=st.integers(0, 2**40),
        key=st.none() | st.binary(max_size=50),
        value=st.none() | st.binary(max_size=300),
        headers=st.lists(
            st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3
        ).map(tuple),
    ),
    min_size=1,
    max_size=20,
)


@given(
    base=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
    ts=st.integers(-1, 2**50),
    values=values_st,
    control=st.booleans(),
)
@settings(max_examples=100, deadline=None)
def test_values_round_trip(
    base: int, epoch: int, ts: int, values: list[bytes], control: bool
) -> None:
    raw = build_batch(base, epoch, values, ts, control=control)
    b = RecordBatch.parse(raw)
    b.validate(records=True)
    assert (b.base_offset, b.partition_leader_epoch, b.is_control) == (base, epoch, control)
    assert b.records_count == len(values) and b.last_offset == base + len(values) - 1
    assert list(b.records()) == [Record(base + i, ts, None, v, ()) for i, v in enumerate(values)]


@given(base=st.integers(0, 2**40), records=records_st)
@settings(max_examples=100, deadline=None)
def test_records_round_trip(base: int, records: list[Record]) -> None:
    b = RecordBatch.parse(build_batch(base, 3, records, 0))
    b.validate(records=True)
    assert b.base_timestamp == records[0].timestamp
    assert b.max_timestamp == max(r.timestamp for r in records)
    got = list(b.records())
    assert got == [
        Record(base + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]


# ----------------------------------------------------------------------------- header only


def test_batch_header_reads_only_61_bytes() -> None:
    h = batch_header(GOLDEN[:BATCH_HEADER_SIZE])
    assert (h.base_offset, h.last_offset, h.next_offset, h.size_in_bytes) == (5, 5, 6, 70)
    assert h.partition_leader_epoch == 2 and h.records_count == 1 and not h.is_control
    with pytest.raises(TruncatedInputError):
        batch_header(GOLDEN[:60])


def test_batch_header_rejects_bad_magic_and_length() -> None:
    bad_magic = GOLDEN[:16] + b"\x01" + GOLDEN[17:]
    with pytest.raises(CorruptRecordError, match="magic 1"):
        batch_header(bad_magic)
    bad_len = GOLDEN[:8] + struct.pack(">i", 10) + GOLDEN[12:]
    with pytest.raises(CorruptRecordError, match="length 10"):
        batch_header(bad_len)


# ----------------------------------------------------------------------------- validate


def test_validate_names_base_offset_on_crc_mismatch() -> None:
    raw = bytearray(GOLDEN)
    raw[-2] ^= 0x01  # flip a bit of the value
    b = RecordBatch.parse(raw)
    assert not b.is_valid()
    with pytest.raises(CorruptRecordError, match=r"base offset 5\).*CRC mismatch"):
        b.validate()


def test_crc_does_not_cover_base_offset_or_leader_epoch() -> None:
    raw = bytearray(GOLDEN)
    raw[0:8] = struct.pack(">q", 999)
    raw[12:16] = struct.pack(">i", 77)
    b = RecordBatch.parse(raw)
    b.validate()
    assert (b.base_offset, b.partition_leader_epoch) == (999, 77)


def test_records_count_disagreeing_with_bytes_is_corrupt() -> None:
    raw = bytearray(build_batch(0, 0, [b"a", b"b"], 0))
    struct.pack_into(">i", raw, 57, 1)  # claims 1 record, holds 2
    _fix_crc(raw)
    with pytest.raises(CorruptRecordError, match="left over"):
        list(RecordBatch.parse(raw).records())
    struct.pack_into(">i", raw, 57, 3)  # claims 3, holds 2
    _fix_crc(raw)
    with pytest.raises(CorruptRecordError):
        list(RecordBatch.parse(raw).records())


def test_offset_past_last_offset_delta_fails_deep_validation() -> None:
    raw = bytearray(build_batch(0, 0, [b"a", b"b"], 0))
    struct.pack_into(">i", raw, 23, 0)  # last offset delta 0 but record 1 has delta 1
    struct.pack_into(">i", raw, 57, 1)
    _fix_crc(raw)
    with pytest.raises(CorruptRecordError):
        RecordBatch.parse(raw).validate(records=True)


def _fix_crc(raw: bytearray) -> None:
    import crc32c

    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))


# ----------------------------------------------------------------------------- iterate/scan


def _log(n: int) -> tuple[bytes, list[int]]:
    parts, starts, pos, offset = [], [], 0, 0
    for i in range(n):
        values = [bytes([i]) * (10 + i)] * (i + 1)
        raw = build_batch(offset, 1 + i // 2, values, 1000 + i, control=(i == 0))
        parts.append(raw)
        starts.append(pos)
        pos += len(raw)
        offset += len(values)
    return b"".join(parts), starts


def test_iter_batches_positions_and_offsets() -> None:
    log, starts = _log(5)
    batches = list(iter_batches(log, base_position=4096))
    assert [b.position for b in batches] == [4096 + s for s in starts]
    assert [b.base_offset for b in batches] == [0, 1, 3, 6, 10]
    assert batches[0].is_control
    for b in batches:
        b.validate(records=True)
    # a region in the middle
    mid = list(iter_batches(log, start=starts[1], end=starts[3]))
    assert [b.base_offset for b in mid] == [1, 3]


def test_iter_batches_raises_on_partial_last_batch() -> None:
    log, starts = _log(3)
    with pytest.raises(TruncatedInputError, match=f"byte position {starts[2]}"):
        list(iter_batches(log[:-1]))


def test_scan_clean_log() -> None:
    log, _ = _log(4)
    res = scan_batches(log)
    assert res.tail is None and res.valid_bytes == len(log) and len(res.batches) == 4
    assert res.next_offset == 10


def test_scan_every_truncation_point() -> None:
    log, starts = _log(4)
    ends = [*starts[1:], len(log)]
    for cut in range(len(log)):
        res = scan_batches(log[:cut])
        complete = [e for e in ends if e <= cut]
        assert res.valid_bytes == (complete[-1] if complete else 0)
        assert len(res.batches) == len(complete)
        if cut == res.valid_bytes:
            assert res.tail is None
        else:
            assert res.tail is not None
            assert res.tail.kind is TailKind.TRUNCATED
            assert res.tail.position == res.valid_bytes


def test_scan_reports_crc_failure_position() -> None:
    log, starts = _log(4)
    bad = bytearray(log)
    bad[starts[2] + 70] ^= 0x40
    res = scan_batches(bad, base_position=1000)
    assert res.tail is not None and res.tail.kind is TailKind.CORRUPT_CRC
    assert res.tail.position == 1000 + starts[2]
    assert res.valid_bytes == starts[2] and len(res.batches) == 2
    assert "base offset 3" in res.tail.message


def test_scan_reports_invalid_header() -> None:
    log, starts = _log(3)
    bad = bytearray(log)
    bad[starts[1] + 16] = 1  # magic 1
    res = scan_batches(bad)
    assert res.tail is not None and res.tail.kind is TailKind.INVALID_HEADER
    assert res.tail.position == starts[1] and res.valid_bytes == starts[1]


def test_scan_zero_filled_tail_is_invalid_header() -> None:
    # preallocated files end in zeros: length 0 is below the minimum, not a truncation
    log, _ = _log(2)
    res = scan_batches(log + bytes(100))
    assert res.tail is not None and res.tail.kind is TailKind.INVALID_HEADER
    assert res.valid_bytes == len(log)


def test_scan_check_records_catches_structure_behind_a_good_crc() -> None:
    log, starts = _log(2)
    bad = bytearray(log)
    struct.pack_into(">i", bad, starts[1] + 57, 1)  # batch 1 holds 2 records, claims 1
    sub = bytearray(bad[starts[1] :])
    _fix_crc(sub)
    bad[starts[1] :] = sub
    assert scan_batches(bad).tail is None
    res = scan_batches(bad, check_records=True)
    assert res.tail is not None and res.tail.kind is TailKind.INVALID_RECORDS
    assert res.tail.position == starts[1]


# ----------------------------------------------------------------------------- rebase


def test_rebase_changes_only_base_offset_and_keeps_crc_valid() -> None:
    raw = build_batch(0, 4, [b"a", b"b", b"c"], 9)
    moved = rebase(raw, 1234)
    assert moved[8:] == raw[8:]
    b = RecordBatch.parse(moved)
    b.validate(records=True)
    assert b.base_offset == 1234 and [r.offset for r in b.records()] == [1234, 1235, 1236]
    assert moved == build_batch(1234, 4, [b"a", b"b", b"c"], 9)
    buf = bytearray(raw)
    rebase_in_place(buf, 0, 1234)
    assert bytes(buf) == moved


def test_rebase_rejects_short_input_and_bad_offsets() -> None:
    with pytest.raises(TruncatedInputError):
        rebase(GOLDEN[:60], 1)
    with pytest.raises(TruncatedInputError):
        rebase_in_place(bytearray(GOLDEN), 10, 1)
    with pytest.raises(ValueError):
        rebase(GOLDEN, -1)
    with pytest.raises(ValueError):
        rebase_in_place(bytearray(GOLDEN), 0, 2**63)
