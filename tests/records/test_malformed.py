"""Malformed input: random bytes, truncations and bit flips raise only ProtocolError subclasses.

Never IndexError, struct.error, UnicodeDecodeError or ValueError, and never an allocation
sized by an untrusted length or count.
"""

from __future__ import annotations

import contextlib
import random
import struct
import tracemalloc

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft.protocol.errors import ProtocolError, TruncatedInputError
from kraft.protocol.uuid import Uuid
from kraft.records.batch import Record, RecordBatch, build_batch, iter_batches, scan_batches
from kraft.records.control import (
    ControlRecordType,
    Endpoint,
    KRaftVersionFeature,
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    Voter,
    VotersRecord,
    build_control_batch,
    decode_control_batch,
    decode_control_value,
)
from kraft.records.snapshot_format import build_snapshot, read_snapshot


def _sample_log() -> bytes:
    voters = VotersRecord(
        (Voter(1, Uuid(bytes(range(16))), (Endpoint("C", "h", 9093),), KRaftVersionFeature(0, 1)),)
    )
    return b"".join(
        [
            build_control_batch(
                0,
                1,
                5,
                [LeaderChangeMessage(1, (LeaderChangeVoter(1),)), KRaftVersionRecord(1), voters],
            ),
            build_batch(3, 1, [b"value-%d" % i for i in range(5)], 6),
            build_batch(
                8,
                1,
                [Record(0, 7, b"k", b"v", (("h", b"x"), ("n", None))), Record(0, 9, None, None)],
                0,
            ),
        ]
    )


SAMPLE = _sample_log()


def exercise(buf: bytes | bytearray) -> None:
    """Every read path; must raise nothing but ProtocolError."""
    scan_batches(buf, check_records=True)  # never raises at all
    try:
        for batch in iter_batches(buf):
            batch.validate(records=True)
            if batch.is_control:
                decode_control_batch(batch)
            else:
                list(batch.records())
    except ProtocolError:
        pass
    with contextlib.suppress(ProtocolError):
        read_snapshot(buf)


def exercise_body(buf: bytearray) -> None:
    """Recompute every CRC first, so the record and control-record parsers see the damage."""
    pos = 0
    while pos + 61 <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        end = pos + 12 + length
        if length < 49 or end > len(buf):
            break
        struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(bytes(buf[pos + 21 : end])))
        pos = end
    exercise(buf)


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_random_bytes(data: bytes) -> None:
    exercise(data)


@given(st.binary(min_size=61, max_size=300))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_bodies_behind_a_plausible_header(body: bytes) -> None:
    # a sane header (magic 2, right length, small count) over random record bytes
    count = body[0] % 8
    raw = bytearray(build_batch(0, 0, [b""], 0)[:61]) + body[61:]
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">i", raw, 57, count)
    struct.pack_into(">i", raw, 23, max(count - 1, 0))
    struct.pack_into(">h", raw, 21, body[1] & 0x20)  # sometimes a control batch
    exercise_body(raw)


def test_every_truncation_of_each_batch_is_truncated_input() -> None:
    for batch in iter_batches(SAMPLE):
        raw = bytes(batch.raw)
        for cut in range(len(raw)):
            with pytest.raises(TruncatedInputError):
                RecordBatch.parse(raw[:cut])


def test_every_truncation_of_a_snapshot() -> None:
    snap = build_snapshot(3, 10, [[b"a" * 20] * 3, [b"b"]], timestamp_ms=1, kraft_version=1)
    read_snapshot(snap)
    for cut in range(len(snap)):
        with pytest.raises(ProtocolError):
            read_snapshot(snap[:cut])


def test_single_bit_flips_with_and_without_crc_repair() -> None:
    rng = random.Random(20251122)
    for _ in range(1500):
        buf = bytearray(SAMPLE)
        for _ in range(rng.choice((1, 1, 2, 5))):
            bit = rng.randrange(len(buf) * 8)
            buf[bit // 8] ^= 1 << (bit % 8)
        exercise(buf)
        exercise_body(buf)


def test_bit_flips_under_the_crc_are_always_detected() -> None:
    rng = random.Random(7)
    first = RecordBatch.parse(SAMPLE)
    for _ in range(300):
        buf = bytearray(SAMPLE)
        bit = rng.randrange(21 * 8, first.size_in_bytes * 8)
        buf[bit // 8] ^= 1 << (bit % 8)
        res = scan_batches(buf)
        assert res.tail is not None and res.valid_bytes == 0


def test_control_values_from_random_bytes() -> None:
    rng = random.Random(99)
    for _ in range(3000):
        raw = rng.randbytes(rng.randrange(40))
        for t in ControlRecordType:
            with contextlib.suppress(ProtocolError):
                decode_control_value(t, raw)


@pytest.mark.parametrize(
    ("field_at", "fmt", "value"),
    [(8, ">i", 2**31 - 1), (57, ">i", 2**31 - 1), (23, ">i", 2**31 - 1)],
    ids=["length", "records_count", "last_offset_delta"],
)
def test_hostile_header_numbers_allocate_nothing_big(field_at: int, fmt: str, value: int) -> None:
    raw = bytearray(build_batch(0, 0, [b"x" * 50], 0))
    struct.pack_into(fmt, raw, field_at, value)
    tracemalloc.start()
    try:
        exercise(raw)
        exercise_body(bytearray(raw))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_hostile_record_lengths_allocate_nothing_big() -> None:
    raw = bytearray(build_batch(0, 0, [b"x" * 50], 0))
    # record length varint -> 2**31-1 (zig-zag 0xfffffffe, 5 bytes) overwriting the record
    raw[61:66] = bytes.fromhex("feffffff0f")
    tracemalloc.start()
    try:
        exercise_body(raw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
