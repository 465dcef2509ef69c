"""Primitive encodings: hand-derived bytes, round-trips and malformed input."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.protocol.errors import MalformedInputError, ProtocolError, TruncatedInputError
from kraft.protocol.primitives import (
    Reader,
    Writer,
    decode_uvarint,
    decode_varint,
    decode_varlong,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    uvarint_size,
    varint_size,
    varlong_size,
)
from kraft.protocol.uuid import Uuid


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_uvarint_golden(value: int, wire: bytes) -> None:
    assert encode_uvarint(value) == wire
    assert decode_uvarint(wire, 0) == (value, len(wire))
    assert uvarint_size(value) == len(wire)


@pytest.mark.parametrize(
    ("value", "wire"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f"),
     (64, b"\x80\x01"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f")],
)
def test_varint_golden(value: int, wire: bytes) -> None:
    assert encode_varint(value) == wire
    assert decode_varint(wire, 0) == (value, len(wire))
    assert varint_size(value) == len(wire)


def test_varlong_extremes() -> None:
    assert encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert encode_varlong(2**63 - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert decode_varlong(b"\xff" * 9 + b"\x01", 0) == (-(2**63), 10)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_roundtrip(v: int) -> None:
    enc = encode_varint(v)
    assert decode_varint(b"xx" + enc, 2) == (v, 2 + len(enc))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_roundtrip(v: int) -> None:
    enc = encode_varlong(v)
    assert decode_varlong(enc, 0) == (v, len(enc))
    assert varlong_size(v) == len(enc)


def test_varint_errors() -> None:
    with pytest.raises(TruncatedInputError):
        decode_uvarint(b"\x80\x80", 0)
    with pytest.raises(MalformedInputError):
        decode_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(MalformedInputError):
        decode_uvarint(b"\xff\xff\xff\xff\x1f", 0)  # 35 bits
    with pytest.raises(TruncatedInputError):
        decode_varlong(b"", 0)
    with pytest.raises(ValueError):
        encode_uvarint(-1)


def test_writer_reader_all_primitives() -> None:
    u = Uuid(bytes(range(16)))
    w = Writer()
    w.int8(-2)
    w.int16(-300)
    w.uint16(65535)
    w.int32(-(2**31))
    w.uint32(2**32 - 1)
    w.int64(2**63 - 1)
    w.float64(1.5)
    w.bool(True)
    w.uuid(u)
    w.string("héllo")
    w.nullable_string(None)
    w.compact_string("")
    w.compact_nullable_string(None)
    w.bytes(b"ab")
    w.nullable_bytes(None)
    w.compact_bytes(b"xyz")
    w.compact_nullable_bytes(None)
    w.array_length(-1)
    w.compact_array_length(3)
    w.tagged_fields({5: b"\x01", 1: b""})
    w.varint(-5)
    w.varlong(-(2**40))
    r = Reader(w.getvalue(), context="T v0")
    assert r.int8() == -2
    assert r.int16() == -300
    assert r.uint16() == 65535
    assert r.int32() == -(2**31)
    assert r.uint32() == 2**32 - 1
    assert r.int64() == 2**63 - 1
    assert r.float64() == 1.5
    assert r.bool() is True
    assert r.uuid() == u
    assert r.string() == "héllo"
    assert r.nullable_string() is None
    assert r.compact_string() == ""
    assert r.compact_nullable_string() is None
    assert r.bytes() == b"ab"
    assert r.nullable_bytes() is None
    assert r.compact_bytes() == b"xyz"
    assert r.compact_nullable_bytes() is None
    assert r.array_length() == -1
    assert r.compact_array_length(min_element_size=0) == 3
    assert r.tagged_fields() == {1: b"", 5: b"\x01"}
    assert r.varint() == -5
    assert r.varlong() == -(2**40)
    r.expect_end()


def test_tagged_section_golden() -> None:
    w = Writer()
    w.tagged_fields({0: b"\xaa", 2: b"\xbb\xcc"})
    assert w.getvalue() == b"\x02\x00\x01\xaa\x02\x02\xbb\xcc"


def test_huge_length_prefix_does_not_allocate() -> None:
    r = Reader(b"\x7f\xff\xff\xff", context="X v1")
    with pytest.raises(TruncatedInputError, match=r"X v1: field 'records' at byte offset 4"):
        r.bytes("records")
    r = Reader(b"\x7f\xff\xff\xff")
    with pytest.raises(TruncatedInputError):
        r.array_length("topics")
    r = Reader(b"\xff\xff\xff\xff\x0f")
    with pytest.raises(TruncatedInputError):
        r.compact_array_length("topics")


def test_malformed_messages_name_field_and_offset() -> None:
    r = Reader(b"\x00\x00\x00\x02\xff\xfe", context="Vote v2")
    r.int32()
    with pytest.raises(MalformedInputError, match=r"Vote v2: field 'name' at byte offset 4"):
        r.string("name")
    with pytest.raises(MalformedInputError, match="non-nullable"):
        Reader(b"\xff\xff").string("s")
    with pytest.raises(MalformedInputError, match="out of order"):
        Reader(b"\x02\x01\x00\x01\x00").tagged_fields()
    with pytest.raises(MalformedInputError, match="trailing"):
        Reader(b"\x00").expect_end()


@given(st.binary(max_size=64))
def test_reader_never_raises_foreign_exceptions(data: bytes) -> None:
    ops = ["string", "nullable_string", "compact_string", "compact_nullable_string", "bytes",
           "nullable_bytes", "compact_bytes", "compact_nullable_bytes", "tagged_fields",
           "array_length", "compact_array_length", "uuid", "varint", "varlong", "int64"]
    for op in ops:
        r = Reader(data)
        with contextlib.suppress(ProtocolError):
            getattr(r, op)()
