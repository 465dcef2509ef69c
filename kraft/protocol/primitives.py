"""Kafka wire primitives: a bounds-checked `Reader`, a `Writer`, and varint helpers.

Everything here follows `Type.java` of Apache Kafka: big-endian fixed-width integers,
unsigned varints (7 bits per byte, least significant group first), zig-zag signed
varints/varlongs (used inside record batches), classic int16/int32 length-prefixed strings,
bytes and arrays, their "compact" KIP-482 forms (uvarint length + 1, 0 = null), and
tagged-field sections.

Every decoding failure raises a `ProtocolError` subclass whose message names the context
(usually "ApiName vN"), the field and the byte offset. Lengths are checked against the bytes
that remain *before* anything is allocated, so a hostile length prefix of 2**31 costs nothing.
"""

from __future__ import annotations

import struct

from kraft.protocol.errors import MalformedInputError, TruncatedInputError
from kraft.protocol.uuid import Uuid

__all__ = [
    "Reader",
    "Writer",
    "decode_uvarint",
    "decode_uvarlong",
    "decode_varint",
    "decode_varlong",
    "encode_uvarint",
    "encode_uvarlong",
    "encode_varint",
    "encode_varlong",
    "uvarint_size",
    "varint_size",
    "varlong_size",
]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_UINT64_MAX = (1 << 64) - 1

EPOCH_LIMIT = _INT32_MAX
"""The first leader epoch no replica enters or accepts: the int32 maximum, whose next epoch
the wire cannot encode (the consensus core's rules: `kraft.raft.epochs`; the node's start:
`kraft.storage.quorum_state`)."""

# Aliases so annotations inside Reader/Writer (which have methods named `bytes` and `bool`)
# still refer to the builtins.
_Bytes = bytes
_Bool = bool
Buffer = bytes | bytearray | memoryview
"""Any buffer the readers accept."""


# --------------------------------------------------------------------------------------
# Module-level varint helpers (used by kraft.records for the record-batch body).
# --------------------------------------------------------------------------------------


def encode_uvarint(value: int) -> bytes:
    """Encode an unsigned 32-bit value as a Kafka unsigned varint (1-5 bytes)."""
    if value < 0 or value > _UINT32_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_uvarlong(value: int) -> bytes:
    """Encode an unsigned 64-bit value as an unsigned varlong (1-10 bytes)."""
    if value < 0 or value > _UINT64_MAX:
        raise ValueError(f"unsigned varlong out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_unsigned(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, what: str
) -> tuple[int, int]:
    end = len(buf)
    start = pos
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise TruncatedInputError(f"{what} truncated at byte offset {start}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise MalformedInputError(f"{what} longer than {max_bytes} bytes at byte offset {start}")


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint (at most 5 bytes) at `pos`; returns (value, new position).

    Raises TruncatedInputError if the buffer ends inside the varint and MalformedInputError if
    it is longer than 5 bytes or does not fit in 32 bits.
    """
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    value, newpos = _decode_unsigned(buf, pos, 5, "unsigned varint")
    if value > _UINT32_MAX:
        raise MalformedInputError(f"unsigned varint exceeds 32 bits at byte offset {pos}")
    return value, newpos


def decode_uvarlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varlong (at most 10 bytes) at `pos`; returns (value, new position)."""
    value, newpos = _decode_unsigned(buf, pos, 10, "unsigned varlong")
    if value > _UINT64_MAX:
        raise MalformedInputError(f"unsigned varlong exceeds 64 bits at byte offset {pos}")
    return value, newpos


def encode_varint(value: int) -> bytes:
    """Encode a signed 32-bit value with zig-zag + unsigned varint (as in record bodies)."""
    if value < _INT32_MIN or value > _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return encode_uvarint(((value << 1) ^ (value >> 31)) & _UINT32_MAX)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag signed 32-bit varint at `pos`; returns (value, new position)."""
    raw, newpos = decode_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), newpos


def encode_varlong(value: int) -> bytes:
    """Encode a signed 64-bit value with zig-zag + unsigned varlong (as in record bodies)."""
    if value < _INT64_MIN or value > _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return encode_uvarlong(((value << 1) ^ (value >> 63)) & _UINT64_MAX)


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag signed 64-bit varlong at `pos`; returns (value, new position)."""
    raw, newpos = decode_uvarlong(buf, pos)
    return (raw >> 1) ^ -(raw & 1), newpos


def uvarint_size(value: int) -> int:
    """Number of bytes `encode_uvarint(value)` (or uvarlong) produces."""
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


def varint_size(value: int) -> int:
    """Number of bytes `encode_varint(value)` produces."""
    return uvarint_size(((value << 1) ^ (value >> 31)) & _UINT32_MAX)


def varlong_size(value: int) -> int:
    """Number of bytes `encode_varlong(value)` produces."""
    return uvarint_size(((value << 1) ^ (value >> 63)) & _UINT64_MAX)


# --------------------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------------------


class Reader:
    """A bounds-checked cursor over wire bytes.

    `context` (e.g. "Vote v2") prefixes every error message; every method takes an optional
    `field` name so that errors read "Vote v2: field 'cluster_id': truncated ... at byte
    offset 7". `pos` is the current offset into the underlying buffer and may be read or set.
    """

    __slots__ = ("_buf", "_end", "context", "pos")

    def __init__(
        self, data: Buffer, pos: int = 0, context: str = ""
    ) -> None:
        self._buf = data if isinstance(data, _Bytes | memoryview) else bytes(data)
        self._end = len(self._buf)
        self.pos = pos
        self.context = context

    # -- error helpers -----------------------------------------------------------------

    def _where(self, field: str, pos: int) -> str:
        prefix = f"{self.context}: " if self.context else ""
        return f"{prefix}field {field!r} at byte offset {pos}"

    def truncated(self, field: str, need: int, pos: int | None = None) -> TruncatedInputError:
        """Build (not raise) the error for `need` bytes missing while reading `field`."""
        p = self.pos if pos is None else pos
        have = self._end - p
        return TruncatedInputError(
            f"{self._where(field, p)}: needs {need} bytes, only {max(have, 0)} remain"
        )

    def malformed(self, field: str, detail: str, pos: int | None = None) -> MalformedInputError:
        """Build (not raise) a MalformedInputError for `field` with a detail message."""
        p = self.pos if pos is None else pos
        return MalformedInputError(f"{self._where(field, p)}: {detail}")

    # -- position ----------------------------------------------------------------------

    @property
    def buffer(self) -> _Bytes | memoryview:
        """The underlying buffer."""
        return self._buf

    def remaining(self) -> int:
        """Bytes left between the position and the end of the buffer."""
        return self._end - self.pos

    def at_end(self) -> bool:
        """True when every byte has been consumed."""
        return self.pos >= self._end

    def expect_end(self, field: str = "<end>") -> None:
        """Raise MalformedInputError if bytes remain (trailing garbage after a message)."""
        if self.pos != self._end:
            raise self.malformed(field, f"{self._end - self.pos} unexpected trailing bytes")

    def _take(self, n: int, field: str) -> int:
        p = self.pos
        if n > self._end - p:
            raise self.truncated(field, n)
        self.pos = p + n
        return p

    def raw(self, n: int, field: str = "raw") -> _Bytes:
        """Read exactly `n` bytes as an immutable copy."""
        if n < 0:
            raise self.malformed(field, f"negative length {n}")
        p = self._take(n, field)
        return bytes(self._buf[p : p + n])

    def raw_view(self, n: int, field: str = "raw") -> memoryview:
        """Read exactly `n` bytes as a zero-copy memoryview."""
        if n < 0:
            raise self.malformed(field, f"negative length {n}")
        p = self._take(n, field)
        return memoryview(self._buf)[p : p + n]

    def skip(self, n: int, field: str = "skip") -> None:
        """Advance past `n` bytes."""
        if n < 0:
            raise self.malformed(field, f"negative length {n}")
        self._take(n, field)

    # -- fixed width -------------------------------------------------------------------

    def int8(self, field: str = "int8") -> int:
        """Read a signed byte."""
        p = self._take(1, field)
        return _I8.unpack_from(self._buf, p)[0]  # type: ignore[no-any-return]

    def int16(self, field: str = "int16") -> int:
        """Read a big-endian int16."""
        p = self._take(2, field)
        return _I16.unpack_from(self._buf, p)[0]  # type: ignore[no-any-return]

    def uint16(self, field: str = "uint16") -> int:
        """Read a big-endian uint16."""
        p = self._take(2, field)
        return _U16.unpack_from(self._buf, p)[0]  # type: ignore[no-any-return]

    def int32(self, field: str = "int32") -> int:
        """Read a big-endian int32."""
        p = self._take(4, field)
        return _I32.unpack_from(self._buf, p)[0]  # type: ignore[no-any-return]

    def uint32(self, field: str = "uint32") -> int:
        """Read a big-endian uint32."""
        p = self._take(4, field)
        return _U32.unpack_from(self._buf, p)[0]  # type: ignore[no-any-return]

    def int64(self, field: str = "int64") -> int:
        """Read a big-endian int64."""
        p = self._take(8, field)
        return _I64.unpack_from(self._buf, p)[0]  # type: ignore[no-any-return]

    def float64(self, field: str = "float64") -> float:
        """Read a big-endian IEEE-754 double."""
        p = self._take(8, field)
        return _F64.unpack_from(self._buf, p)[0]  # type: ignore[no-any-return]

    def bool(self, field: str = "bool") -> _Bool:
        """Read a boolean byte; any non-zero value is true (as Kafka's reader does)."""
        p = self._take(1, field)
        return self._buf[p] != 0

    def uuid(self, field: str = "uuid") -> Uuid:
        """Read 16 raw bytes as a Uuid."""
        p = self._take(16, field)
        return Uuid(bytes(self._buf[p : p + 16]))

    def unpack(self, fmt: struct.Struct, field: str = "fixed") -> tuple[object, ...]:
        """Read a run of fixed-width values with a precompiled `struct.Struct`."""
        p = self._take(fmt.size, field)
        return fmt.unpack_from(self._buf, p)

    # -- varints -----------------------------------------------------------------------

    def uvarint(self, field: str = "uvarint") -> int:
        """Read an unsigned varint (≤ 5 bytes, ≤ 2**32-1)."""
        p = self.pos
        if p < self._end:
            b = self._buf[p]
            if b < 0x80:
                self.pos = p + 1
                return b
        try:
            value, self.pos = decode_uvarint(self._buf, p)
        except TruncatedInputError:
            raise self.truncated(field, 1, self._end) from None
        except MalformedInputError as exc:
            raise self.malformed(field, str(exc), p) from None
        return value

    def uvarlong(self, field: str = "uvarlong") -> int:
        """Read an unsigned varlong (≤ 10 bytes)."""
        p = self.pos
        try:
            value, self.pos = decode_uvarlong(self._buf, p)
        except TruncatedInputError:
            raise self.truncated(field, 1, self._end) from None
        except MalformedInputError as exc:
            raise self.malformed(field, str(exc), p) from None
        return value

    def varint(self, field: str = "varint") -> int:
        """Read a zig-zag signed varint."""
        raw = self.uvarint(field)
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self, field: str = "varlong") -> int:
        """Read a zig-zag signed varlong."""
        raw = self.uvarlong(field)
        return (raw >> 1) ^ -(raw & 1)

    # -- strings -----------------------------------------------------------------------

    def _utf8(self, n: int, field: str) -> str:
        p = self._take(n, field)
        try:
            return str(self._buf[p : p + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise self.malformed(field, f"invalid UTF-8 ({exc.reason})", p) from None

    def string(self, field: str = "string") -> str:
        """Read a non-null int16-length string."""
        p = self.pos
        n = self.int16(field)
        if n < 0:
            raise self.malformed(field, f"non-nullable string has length {n}", p)
        return self._utf8(n, field)

    def nullable_string(self, field: str = "string") -> str | None:
        """Read an int16-length string; -1 means null."""
        p = self.pos
        n = self.int16(field)
        if n < 0:
            if n == -1:
                return None
            raise self.malformed(field, f"invalid string length {n}", p)
        return self._utf8(n, field)

    def compact_string(self, field: str = "string") -> str:
        """Read a non-null compact (uvarint length+1) string."""
        p = self.pos
        n = self.uvarint(field) - 1
        if n < 0:
            raise self.malformed(field, "null in a non-nullable compact string", p)
        if n > 0x7FFF:
            raise self.malformed(field, f"string length {n} exceeds 32767", p)
        return self._utf8(n, field)

    def compact_nullable_string(self, field: str = "string") -> str | None:
        """Read a compact string; a length of 0 on the wire means null."""
        p = self.pos
        n = self.uvarint(field) - 1
        if n < 0:
            return None
        if n > 0x7FFF:
            raise self.malformed(field, f"string length {n} exceeds 32767", p)
        return self._utf8(n, field)

    # -- bytes -------------------------------------------------------------------------

    def bytes(self, field: str = "bytes") -> _Bytes:
        """Read non-null int32-length bytes."""
        p = self.pos
        n = self.int32(field)
        if n < 0:
            raise self.malformed(field, f"non-nullable bytes have length {n}", p)
        return self.raw(n, field)

    def nullable_bytes(self, field: str = "bytes") -> _Bytes | None:
        """Read int32-length bytes; -1 means null."""
        p = self.pos
        n = self.int32(field)
        if n < 0:
            if n == -1:
                return None
            raise self.malformed(field, f"invalid bytes length {n}", p)
        return self.raw(n, field)

    def compact_bytes(self, field: str = "bytes") -> _Bytes:
        """Read non-null compact bytes."""
        p = self.pos
        n = self.uvarint(field) - 1
        if n < 0:
            raise self.malformed(field, "null in non-nullable compact bytes", p)
        return self.raw(n, field)

    def compact_nullable_bytes(self, field: str = "bytes") -> _Bytes | None:
        """Read compact bytes; a length of 0 on the wire means null."""
        n = self.uvarint(field) - 1
        if n < 0:
            return None
        return self.raw(n, field)

    # -- arrays ------------------------------------------------------------------------

    def array_length(self, field: str = "array", min_element_size: int = 1) -> int:
        """Read an int32 array count (-1 = null, returned as -1).

        The count is rejected when `count * min_element_size` exceeds the remaining bytes,
        so no caller ever pre-sizes a list from a hostile count.
        """
        p = self.pos
        n = self.int32(field)
        if n < 0:
            if n == -1:
                return -1
            raise self.malformed(field, f"invalid array length {n}", p)
        if n * min_element_size > self._end - self.pos:
            raise self.truncated(field, n * min_element_size)
        return n

    def compact_array_length(self, field: str = "array", min_element_size: int = 1) -> int:
        """Read a compact array count (uvarint count+1; wire 0 = null, returned as -1)."""
        n = self.uvarint(field) - 1
        if n > 0 and n * min_element_size > self._end - self.pos:
            raise self.truncated(field, n * min_element_size)
        return n

    # -- tagged fields -----------------------------------------------------------------

    def tagged_fields(self, field: str = "tagged_fields") -> dict[int, _Bytes]:
        """Read a whole tagged-field section into {tag: raw value bytes} (ascending tags)."""
        count = self.uvarint(field)
        if count == 0:
            return {}
        if count * 2 > self._end - self.pos:
            raise self.truncated(field, count * 2)
        out: dict[int, _Bytes] = {}
        last = -1
        for _ in range(count):
            p = self.pos
            tag = self.uvarint(field)
            if tag <= last:
                raise self.malformed(field, f"tag {tag} out of order or repeated", p)
            last = tag
            size = self.uvarint(field)
            out[tag] = self.raw(size, field)
        return out


# --------------------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------------------


class Writer:
    """An append-only builder of wire bytes; `getvalue()` returns the result."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def getvalue(self) -> _Bytes:
        """The bytes written so far."""
        return bytes(self.buf)

    def __len__(self) -> int:
        return len(self.buf)

    def raw(self, data: Buffer) -> None:
        """Append bytes unchanged."""
        self.buf += data

    def pack(self, fmt: struct.Struct, *values: object) -> None:
        """Append a run of fixed-width values with a precompiled `struct.Struct`."""
        self.buf += fmt.pack(*values)

    def int8(self, v: int) -> None:
        """Append a signed byte."""
        self.buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        """Append a big-endian int16."""
        self.buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        """Append a big-endian uint16."""
        self.buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        """Append a big-endian int32."""
        self.buf += _I32.pack(v)

    def uint32(self, v: int) -> None:
        """Append a big-endian uint32."""
        self.buf += _U32.pack(v)

    def int64(self, v: int) -> None:
        """Append a big-endian int64."""
        self.buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        """Append a big-endian IEEE-754 double."""
        self.buf += _F64.pack(v)

    def bool(self, v: _Bool) -> None:
        """Append a boolean as one byte 0/1."""
        self.buf.append(1 if v else 0)

    def uuid(self, v: Uuid) -> None:
        """Append a Uuid's 16 raw bytes."""
        self.buf += v.bytes

    def uvarint(self, v: int) -> None:
        """Append an unsigned varint."""
        if 0 <= v < 0x80:
            self.buf.append(v)
        else:
            self.buf += encode_uvarint(v)

    def uvarlong(self, v: int) -> None:
        """Append an unsigned varlong."""
        self.buf += encode_uvarlong(v)

    def varint(self, v: int) -> None:
        """Append a zig-zag signed varint."""
        self.buf += encode_varint(v)

    def varlong(self, v: int) -> None:
        """Append a zig-zag signed varlong."""
        self.buf += encode_varlong(v)

    def string(self, v: str) -> None:
        """Append an int16-length string."""
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise ValueError(f"string of {len(b)} bytes is longer than 32767")
        self.buf += _I16.pack(len(b))
        self.buf += b

    def nullable_string(self, v: str | None) -> None:
        """Append an int16-length string, -1 for None."""
        if v is None:
            self.buf += b"\xff\xff"
        else:
            self.string(v)

    def compact_string(self, v: str) -> None:
        """Append a compact string."""
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise ValueError(f"string of {len(b)} bytes is longer than 32767")
        self.uvarint(len(b) + 1)
        self.buf += b

    def compact_nullable_string(self, v: str | None) -> None:
        """Append a compact string, 0 for None."""
        if v is None:
            self.buf.append(0)
        else:
            self.compact_string(v)

    def bytes(self, v: Buffer) -> None:
        """Append int32-length bytes."""
        self.buf += _I32.pack(len(v))
        self.buf += v

    def nullable_bytes(self, v: Buffer | None) -> None:
        """Append int32-length bytes, -1 for None."""
        if v is None:
            self.buf += b"\xff\xff\xff\xff"
        else:
            self.bytes(v)

    def compact_bytes(self, v: Buffer) -> None:
        """Append compact bytes."""
        self.uvarint(len(v) + 1)
        self.buf += v

    def compact_nullable_bytes(self, v: Buffer | None) -> None:
        """Append compact bytes, 0 for None."""
        if v is None:
            self.buf.append(0)
        else:
            self.compact_bytes(v)

    def array_length(self, n: int) -> None:
        """Append an int32 array count (-1 for a null array)."""
        self.buf += _I32.pack(n)

    def compact_array_length(self, n: int) -> None:
        """Append a compact array count (pass -1 for a null array)."""
        self.uvarint(n + 1)

    def tagged_fields(self, fields: dict[int, _Bytes]) -> None:
        """Append a tagged-field section from {tag: already-encoded value} in tag order."""
        if not fields:
            self.buf.append(0)
            return
        self.uvarint(len(fields))
        for tag in sorted(fields):
            value = fields[tag]
            self.uvarint(tag)
            self.uvarint(len(value))
            self.buf += value
