"""Record batch v2 (magic 2): building, parsing, validating and scanning, byte-exact with Kafka.

Layout of one batch (all integers big-endian)::

    0  BaseOffset int64          27 BaseTimestamp int64
    8  Length int32 (= size-12)  35 MaxTimestamp int64
    12 PartitionLeaderEpoch int32 43 ProducerId int64
    16 Magic int8 (2)            51 ProducerEpoch int16
    17 CRC uint32                53 BaseSequence int32
    21 Attributes int16          57 RecordsCount int32
    23 LastOffsetDelta int32     61 records...

The CRC is CRC-32C over bytes 21..end, so BaseOffset and PartitionLeaderEpoch can change
without recomputing it (see `rebase`). Records use zig-zag varints::

    Length varint | Attributes int8 | TimestampDelta varlong | OffsetDelta varint |
    KeyLength varint | Key | ValueLength varint | Value | HeaderCount varint |
    (HeaderKeyLength varint | HeaderKey utf-8 | HeaderValueLength varint | HeaderValue)*

Every decoding failure raises a `kraft.protocol.errors.ProtocolError` subclass: a batch cut
short raises TruncatedInputError, anything else wrong raises CorruptRecordError naming the
batch's base offset and byte position. Nothing is allocated from an untrusted length before
the length is checked against the bytes that are actually there.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import crc32c as _crc32c_mod

from kraft.frozen import slot_setter
from kraft.protocol.errors import (
    CorruptRecordError,
    MalformedInputError,
    ProtocolError,
    TruncatedInputError,
)
from kraft.protocol.primitives import decode_uvarint, decode_uvarlong, encode_varint, encode_varlong

_crc32c = _crc32c_mod.crc32c

HEADER: Final = struct.Struct(">qiibIhiqqqhii")
"""The 61-byte batch header, field by field."""

BATCH_HEADER_SIZE: Final = 61
"""Bytes before the first record (Kafka's RECORD_BATCH_OVERHEAD)."""

LOG_OVERHEAD: Final = 12
"""BaseOffset + Length: the bytes not counted by the Length field."""

MAGIC: Final = 2
"""The only record format this module reads and writes."""

CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
"""The CRC covers the batch from here to its end."""

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG: Final = 0x10
CONTROL_FLAG: Final = 0x20
DELETE_HORIZON_FLAG: Final = 0x40

_MIN_RECORD_SIZE: Final = 7
"""Smallest possible encoded record: length, attributes, 3 zero varints, null key... 7 bytes."""

_LENGTH_AT: Final = struct.Struct(">qi")
_INT64: Final = struct.Struct(">q")
_UINT32: Final = struct.Struct(">I")
_INT32_MAX: Final = (1 << 31) - 1


class Compression(enum.IntEnum):
    """Compression codec ids (attributes bits 0-2). KRaft writes NONE."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class UnsupportedCompressionError(CorruptRecordError):
    """A batch compressed with a codec this module does not decode (only NONE is supported)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch: absolute offset, timestamp, key, value and headers.

    As input to `build_batch`, `offset` is ignored (records get consecutive offsets from the
    batch's base offset) and `timestamp` is used as the record's CreateTime.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


# ----------------------------------------------------------------------------- varints


def _zigzag_table(limit: int) -> tuple[bytes, ...]:
    return tuple(encode_varint(i) for i in range(limit))


_VARINT_SMALL: Final = _zigzag_table(1 << 14)
"""Zig-zag varint encodings of 0..16383, the lengths and deltas of ordinary records."""

_NULL_LEN: Final = b"\x01"  # zig-zag(-1)


def _varint_bytes(value: int) -> bytes:
    if 0 <= value < 16384:
        return _VARINT_SMALL[value]
    return encode_varint(value)


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Zig-zag int32 varint at `pos` (5 bytes at most, truncated to 32 bits like Kafka)."""
    raw, pos = decode_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = decode_uvarlong(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


# ----------------------------------------------------------------------------- header


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61 header bytes of one batch, decoded, plus where the batch starts.

    Only the header is read: nothing here says the CRC or the records are good.
    """

    position: int
    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_in_bytes(self) -> int:
        """Total bytes of the batch, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset after the batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_control(self) -> bool:
        """True for a control batch."""
        return bool(self.attributes & CONTROL_FLAG)


def _check_header_fields(
    base_offset: int,
    length: int,
    magic: int,
    attributes: int,
    count: int,
    last_delta: int,
) -> str | None:
    """Problem with header values that make the batch unparseable, or None."""
    if length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        return f"length {length} is smaller than the minimum {BATCH_HEADER_SIZE - LOG_OVERHEAD}"
    if magic != MAGIC:
        return f"magic {magic} is not {MAGIC}"
    if count < 0:
        return f"negative records count {count}"
    if attributes & COMPRESSION_MASK == Compression.NONE:
        body = length + LOG_OVERHEAD - BATCH_HEADER_SIZE
        if count * _MIN_RECORD_SIZE > body:
            return f"records count {count} cannot fit in {body} bytes of records"
    if last_delta < 0 or (count > 0 and last_delta < count - 1):
        return f"last offset delta {last_delta} is impossible for {count} records"
    if base_offset < 0:
        return f"negative base offset {base_offset}"
    return None


def batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the 61-byte header of the batch at `pos` without touching its records or CRC.

    Raises TruncatedInputError when fewer than 61 bytes remain and CorruptRecordError when the
    header announces an impossible length or magic. Suited to building offset indexes.
    """
    if len(buf) - pos < BATCH_HEADER_SIZE or pos < 0:
        raise TruncatedInputError(
            f"record batch header at byte position {pos}: needs {BATCH_HEADER_SIZE} bytes, "
            f"only {max(len(buf) - pos, 0)} remain"
        )
    f = HEADER.unpack_from(buf, pos)
    problem = _check_header_fields(f[0], f[1], f[3], f[5], f[12], f[6])
    if problem is not None:
        raise CorruptRecordError(
            f"record batch at byte position {pos} (base offset {f[0]}): {problem}"
        )
    return BatchHeader(pos, *f)


# ----------------------------------------------------------------------------- batch view


class RecordBatch:
    """A parsed, zero-copy view over one record batch (magic 2).

    Construct with `RecordBatch.parse(buf, pos)` (or through `iter_batches`). Construction
    decodes the header and checks the batch's bytes are all there and its header is sane;
    `validate()` additionally checks the CRC (and optionally every record). `raw` is a
    memoryview of the whole batch inside the caller's buffer: keep the buffer alive and do
    not mutate it while the view is in use.
    """

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "crc",
        "last_offset_delta",
        "length",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "raw",
        "records_count",
    )

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int
    raw: memoryview

    @classmethod
    def parse(
        cls, buf: bytes | bytearray | memoryview, pos: int = 0, *, base_position: int = 0
    ) -> RecordBatch:
        """View the batch starting at `pos` in `buf`.

        `position` of the result is `base_position + pos` (e.g. the file position of `buf`'s
        first byte plus `pos`). Raises TruncatedInputError if the batch is cut short and
        CorruptRecordError if its header is impossible; the CRC is not checked here.
        """
        end = len(buf)
        where = base_position + pos
        if pos < 0 or end - pos < BATCH_HEADER_SIZE:
            raise TruncatedInputError(
                f"record batch at byte position {where}: header needs {BATCH_HEADER_SIZE} "
                f"bytes, only {max(end - pos, 0)} remain"
            )
        f = HEADER.unpack_from(buf, pos)
        base_offset, length = f[0], f[1]
        problem = _check_header_fields(base_offset, length, f[3], f[5], f[12], f[6])
        if problem is not None:
            raise CorruptRecordError(
                f"record batch at byte position {where} (base offset {base_offset}): {problem}"
            )
        size = length + LOG_OVERHEAD
        if size > end - pos:
            raise TruncatedInputError(
                f"record batch at byte position {where} (base offset {base_offset}): "
                f"{size} bytes announced, only {end - pos} remain"
            )
        self = cls.__new__(cls)
        (
            self.base_offset,
            self.length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = f
        self.position = where
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.raw = mv[pos : pos + size]
        return self

    # -- derived properties ---------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """Offset of the last record of the batch."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset right after this batch (its last offset + 1)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        """Total size of the batch in bytes, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def is_control(self) -> bool:
        """True when the control attribute bit is set."""
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def is_transactional(self) -> bool:
        """True when the transactional attribute bit is set (never for KRaft batches)."""
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def compression(self) -> Compression | int:
        """The compression codec (an int for the undefined ids 5-7)."""
        codec = self.attributes & COMPRESSION_MASK
        try:
            return Compression(codec)
        except ValueError:
            return codec

    @property
    def timestamp_type(self) -> int:
        """0 for CreateTime, 1 for LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    def compute_crc(self) -> int:
        """CRC-32C of the bytes the CRC field covers (attributes to the end)."""
        return int(_crc32c(self.raw[ATTRIBUTES_OFFSET:]))

    def is_valid(self) -> bool:
        """True when the stored CRC matches the batch's bytes."""
        return self.compute_crc() == self.crc

    def _where(self) -> str:
        return f"record batch at byte position {self.position} (base offset {self.base_offset})"

    def validate(self, *, records: bool = False) -> None:
        """Check the CRC-32C and, with `records=True`, the structure of every record.

        Raises CorruptRecordError naming the base offset, position and what is wrong: a CRC
        mismatch, an unknown compression codec, and (records=True) a record that does not
        parse, a record count that disagrees with the bytes, or offset deltas beyond the
        header's last offset delta.
        """
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordError(
                f"{self._where()}: CRC mismatch: stored {self.crc:#010x}, computed {computed:#010x}"
            )
        if self.attributes & COMPRESSION_MASK > Compression.ZSTD:
            raise CorruptRecordError(
                f"{self._where()}: unknown compression codec {self.attributes & COMPRESSION_MASK}"
            )
        if records:
            last = self.last_offset
            for rec in self.records():
                if rec.offset > last:
                    raise CorruptRecordError(
                        f"{self._where()}: record offset {rec.offset} is past the batch's "
                        f"last offset {last}"
                    )

    def records(self) -> Iterator[Record]:
        """Iterate the records; raises CorruptRecordError on any malformed record.

        Only uncompressed batches can be read (KRaft never compresses); a compressed batch
        raises UnsupportedCompressionError.
        """
        codec = self.attributes & COMPRESSION_MASK
        if codec != Compression.NONE:
            raise UnsupportedCompressionError(
                f"{self._where()}: compression codec {codec} is not supported"
            )
        return _iter_records(
            bytes(self.raw[BATCH_HEADER_SIZE:]),
            self.records_count,
            self.base_offset,
            self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None,
            self.base_timestamp,
            self._where,
        )

    def values(self) -> list[bytes | None]:
        """The values of all records, in order (the common read path of data batches).

        Records of the shape KRaft writes (null key, no headers, lengths and deltas of one or
        two varint bytes) are sliced out directly, without a `Record` per record; a batch
        holding anything else, or anything malformed, goes through `records()`, which reads
        every shape and raises the same CorruptRecordError it always does.
        """
        codec = self.attributes & COMPRESSION_MASK
        if codec == Compression.NONE:
            view = self.raw[BATCH_HEADER_SIZE:]
            # small records: one copy of the body, then cheap slices of bytes; large ones: each
            # value copied once straight out of the caller's buffer
            body = bytes(view) if len(view) < _LARGE_BODY else view
            fast = _plain_values(body, self.records_count)
            if fast is not None:
                return fast  # type: ignore[return-value]
        return [r.value for r in self.records()]

    def header(self) -> BatchHeader:
        """The header fields as a BatchHeader."""
        return BatchHeader(
            self.position,
            self.base_offset,
            self.length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"epoch={self.partition_leader_epoch}, records={self.records_count}, "
            f"control={self.is_control}, size={self.size_in_bytes}, position={self.position})"
        )


_LARGE_BODY: Final = 1 << 20


def _plain_values(data: bytes | memoryview, count: int) -> list[bytes] | None:
    """The values of `count` plain records filling exactly `data`, or None when any record is
    not plain (non-null key, headers, null value, a timestamp or offset delta of more than one
    or two varint bytes) or anything does not add up: the caller then takes the general path,
    which also names what is wrong. Record and value lengths of any size are read (large values
    have lengths of three or more varint bytes)."""
    n = len(data)
    pos = 0
    out: list[bytes] = []
    append = out.append
    copy = type(data) is not bytes  # a slice of bytes already is bytes; of a view, it is not
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    length = (raw >> 1) ^ -(raw & 1)
                    pos += 2
                else:
                    length, pos = _read_varint(data, pos)
            rec_end = pos + length
            # attributes (any), timestamp delta (one byte), offset delta, key -1
            if length < 6 or rec_end > n or data[pos + 1] >= 0x80:
                return None
            p = pos + 2
            b = data[p]
            if b < 0x80:
                if b & 1:
                    return None  # negative offset delta
                p += 1
            else:
                b2 = data[p + 1]
                if b2 >= 0x80 or b & 1:
                    return None
                p += 2
            if data[p] != 1:
                return None  # a key
            b = data[p + 1]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                b2 = data[p + 2]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    vlen = (raw >> 1) ^ -(raw & 1)
                    p += 3
                else:
                    vlen, p = _read_varint(data, p + 1)
            vend = p + vlen
            if vlen < 0 or vend + 1 != rec_end or data[vend] != 0:
                return None  # a null value, headers, or lengths that disagree
            append(bytes(data[p:vend]) if copy else data[p:vend])  # type: ignore[arg-type]
            pos = rec_end
    except (IndexError, TruncatedInputError, MalformedInputError):
        return None
    return out if pos == n else None


_SET_OFFSET: Final = slot_setter(Record, "offset")
_SET_TIMESTAMP: Final = slot_setter(Record, "timestamp")
_SET_KEY: Final = slot_setter(Record, "key")
_SET_VALUE: Final = slot_setter(Record, "value")
_SET_HEADERS: Final = slot_setter(Record, "headers")


def _iter_records(
    data: bytes,
    count: int,
    base_offset: int,
    log_append_time: int | None,
    base_timestamp: int,
    describe: Callable[[], str],
) -> Iterator[Record]:
    """Parse `count` records filling exactly `data` (the batch body).

    This is the hot read path, so varints of one and two bytes (every length and delta of an
    ordinary record) are decoded inline; longer ones go through `kraft.protocol.primitives`.
    Records are built through their slot descriptors, which skips the frozen dataclass's
    per-field `object.__setattr__` calls but yields an identical, immutable object.
    """
    n = len(data)
    pos = 0
    index = 0
    new = object.__new__
    set_offset = _SET_OFFSET
    set_timestamp = _SET_TIMESTAMP
    set_key = _SET_KEY
    set_value = _SET_VALUE
    set_headers = _SET_HEADERS
    no_headers: tuple[tuple[str, bytes | None], ...] = ()
    try:
        while index < count:
            start = pos
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = _read_varint(data, pos)
            rec_end = pos + length
            if length < 6 or rec_end > n:
                raise CorruptRecordError(
                    f"{describe()}: record {index} at body byte {start} has invalid length {length}"
                    f" ({n - pos} bytes left)"
                )
            pos += 1  # attributes: unused
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = _read_varlong(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                offset_delta, pos = _read_varint(data, pos)
            b = data[pos]
            if b == 1:  # null key, the KRaft case
                key: bytes | None = None
                pos += 1
            else:
                klen, pos = _read_varint(data, pos)
                if klen < 0:
                    raise _bad_record(describe(), index, start, f"invalid key length {klen}")
                if pos + klen > rec_end:
                    raise _bad_record(
                        describe(), index, start, f"key length {klen} overruns record"
                    )
                key = data[pos : pos + klen]
                pos += klen
            b = data[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                vlen = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                vlen, pos = _read_varint(data, pos)
            if vlen >= 0:
                if pos + vlen > rec_end:
                    raise _bad_record(
                        describe(), index, start, f"value length {vlen} overruns record"
                    )
                value: bytes | None = data[pos : pos + vlen]
                pos += vlen
            elif vlen == -1:
                value = None
            else:
                raise _bad_record(describe(), index, start, f"invalid value length {vlen}")
            if data[pos] == 0:
                headers = no_headers
                pos += 1
            else:
                headers, pos = _read_headers(data, pos, rec_end, describe, index, start)
            if pos != rec_end:
                raise _bad_record(
                    describe(),
                    index,
                    start,
                    f"record length {length} disagrees with its fields ({pos - rec_end:+d})",
                )
            if offset_delta < 0:
                raise _bad_record(describe(), index, start, f"negative offset delta {offset_delta}")
            rec = new(Record)
            set_offset(rec, base_offset + offset_delta)
            set_timestamp(
                rec, base_timestamp + ts_delta if log_append_time is None else log_append_time
            )
            set_key(rec, key)
            set_value(rec, value)
            set_headers(rec, headers)
            yield rec
            index += 1
    except IndexError:
        # A varint ran off the end of the body: the record claimed more bytes than exist.
        raise CorruptRecordError(
            f"{describe()}: record {index} runs past the end of the batch"
        ) from None
    except (TruncatedInputError, MalformedInputError) as exc:
        raise CorruptRecordError(f"{describe()}: record {index}: {exc}") from None
    if pos != n:
        raise CorruptRecordError(
            f"{describe()}: {n - pos} bytes left over after the {count} records the header announces"
        )


def _bad_record(where: str, index: int, start: int, what: str) -> CorruptRecordError:
    return CorruptRecordError(f"{where}: record {index} at body byte {start}: {what}")


def _read_headers(
    data: bytes, pos: int, rec_end: int, describe: Callable[[], str], index: int, start: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = _read_varint(data, pos)
    if count < 0 or count * 2 > rec_end - pos:
        raise _bad_record(describe(), index, start, f"invalid header count {count}")
    out: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        klen, pos = _read_varint(data, pos)
        if klen < 0 or pos + klen > rec_end:
            raise _bad_record(describe(), index, start, f"invalid header key length {klen}")
        try:
            hkey = data[pos : pos + klen].decode("utf-8")
        except UnicodeDecodeError:
            raise _bad_record(describe(), index, start, "header key is not UTF-8") from None
        pos += klen
        vlen, pos = _read_varint(data, pos)
        if vlen >= 0:
            if pos + vlen > rec_end:
                raise _bad_record(describe(), index, start, f"invalid header value length {vlen}")
            hval: bytes | None = data[pos : pos + vlen]
            pos += vlen
        elif vlen == -1:
            hval = None
        else:
            raise _bad_record(describe(), index, start, f"invalid header value length {vlen}")
        out.append((hkey, hval))
    return tuple(out), pos


# ----------------------------------------------------------------------------- building


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> bytes:
    parts: list[bytes | bytearray | memoryview] = [
        b"\x00",
        # zig-zag varint and varlong encodings agree on small non-negative values
        _VARINT_SMALL[timestamp_delta]
        if 0 <= timestamp_delta < 16384
        else encode_varlong(timestamp_delta),
        _varint_bytes(offset_delta),
    ]
    if key is None:
        parts.append(_NULL_LEN)
    else:
        parts.append(_varint_bytes(len(key)))
        parts.append(key)
    if value is None:
        parts.append(_NULL_LEN)
    else:
        parts.append(_varint_bytes(len(value)))
        parts.append(value)
    parts.append(_varint_bytes(len(headers)))
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        parts.append(_varint_bytes(len(kb)))
        parts.append(kb)
        if hval is None:
            parts.append(_NULL_LEN)
        else:
            parts.append(_varint_bytes(len(hval)))
            parts.append(hval)
    body = b"".join(parts)
    return _varint_bytes(len(body)) + body


BatchInput = Sequence[bytes] | Sequence[Record]
"""What `build_batch` accepts: values (null keys, no headers) or full records."""


def build_batch(
    base_offset: int,
    partition_leader_epoch: int,
    values_or_records: Sequence[bytes | bytearray | memoryview] | Sequence[Record],
    timestamp_ms: int,
    *,
    control: bool = False,
) -> bytes:
    """Build one KRaft-style batch: magic 2, no compression, CreateTime, producer id/epoch/seq -1.

    `values_or_records` is either a sequence of value bytes (each becomes a record with a null
    key, no headers and `timestamp_ms`) or a sequence of `Record` (key, value, headers and
    timestamp used; `offset` ignored). Records get offsets `base_offset`, `base_offset + 1`,
    ... The base timestamp is the first record's timestamp and the max timestamp the largest,
    which for plain values are both `timestamp_ms` (as Kafka's KRaft BatchBuilder writes).
    Raises ValueError for an empty batch or an out-of-range field.
    """
    count = len(values_or_records)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    if count > _INT32_MAX:
        raise ValueError(f"too many records for one batch: {count}")
    first = values_or_records[0]
    if isinstance(first, Record):
        records = values_or_records
        parts: list[bytes] = []
        base_ts = first.timestamp
        max_ts = base_ts
        for i, rec in enumerate(records):
            if not isinstance(rec, Record):
                raise TypeError(f"record {i} is {type(rec).__name__}, expected Record")
            ts = rec.timestamp
            if ts > max_ts:
                max_ts = ts
            parts.append(_encode_record(i, ts - base_ts, rec.key, rec.value, rec.headers))
        body = b"".join(parts)
    else:
        base_ts = max_ts = timestamp_ms
        body = _encode_values(values_or_records)  # type: ignore[arg-type]
    attributes = CONTROL_FLAG if control else 0
    return _finish_batch(
        base_offset, partition_leader_epoch, attributes, count - 1, base_ts, max_ts, count, body
    )


def _encode_values(values: Sequence[bytes | bytearray | memoryview]) -> bytes:
    """Records for plain values: attributes 0, timestamp delta 0, null key, no headers."""
    small = _VARINT_SMALL
    parts: list[bytes | bytearray | memoryview] = []
    append = parts.append
    for i, v in enumerate(values):
        if v is None:
            raise TypeError(f"value {i} is None; use Record(...) for null values")
        n = len(v)
        od = small[i] if i < 16384 else encode_varint(i)
        vl = small[n] if n < 16384 else encode_varint(n)
        # attributes(1) + ts delta(1) + offset delta + key -1 (1) + value length + value
        # + header count (1)
        body_len = 4 + len(od) + len(vl) + n
        append(small[body_len] if body_len < 16384 else encode_varint(body_len))
        append(b"\x00\x00")
        append(od)
        append(_NULL_LEN)
        append(vl)
        append(v)
        append(b"\x00")
    return b"".join(parts)


def _finish_batch(
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_ts: int,
    max_ts: int,
    count: int,
    body: bytes,
) -> bytes:
    length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body)
    if length > _INT32_MAX:
        raise ValueError(f"batch of {length + LOG_OVERHEAD} bytes is too large")
    out = bytearray(BATCH_HEADER_SIZE)
    try:
        HEADER.pack_into(
            out,
            0,
            base_offset,
            length,
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            count,
        )
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    out += body
    crc = _crc32c(memoryview(out)[ATTRIBUTES_OFFSET:])
    _UINT32.pack_into(out, CRC_OFFSET, crc)
    return bytes(out)


def _check_offset(new_base_offset: int) -> None:
    if not 0 <= new_base_offset < 1 << 63:
        raise ValueError(f"base offset {new_base_offset} is outside 0..2**63-1")


def rebase(batch: bytes | bytearray | memoryview, new_base_offset: int) -> bytes:
    """A copy of `batch` with its base offset replaced; the CRC stays valid (it skips it).

    Only the first 8 bytes change, so this is how a leader assigns offsets to a batch built
    before it knew them. Raises TruncatedInputError for fewer than 61 bytes and ValueError
    for a negative offset.
    """
    if len(batch) < BATCH_HEADER_SIZE:
        raise TruncatedInputError(
            f"record batch of {len(batch)} bytes is shorter than its {BATCH_HEADER_SIZE}-byte "
            "header"
        )
    _check_offset(new_base_offset)
    return _INT64.pack(new_base_offset) + bytes(batch[8:])


def rebase_in_place(buf: bytearray | memoryview, pos: int, new_base_offset: int) -> None:
    """Overwrite the base offset of the batch at `pos` inside a writable buffer."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise TruncatedInputError(
            f"no {BATCH_HEADER_SIZE}-byte batch header at byte position {pos} of a "
            f"{len(buf)}-byte buffer"
        )
    _check_offset(new_base_offset)
    _INT64.pack_into(buf, pos, new_base_offset)


# ----------------------------------------------------------------------------- iteration


def iter_batches(
    buf: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    end: int | None = None,
    base_position: int = 0,
) -> Iterator[RecordBatch]:
    """Yield each batch of `buf[start:end]` in order (headers checked, CRCs not).

    `RecordBatch.position` is `base_position + offset in buf`. A batch cut short at the end
    raises TruncatedInputError; an impossible header raises CorruptRecordError. Use
    `scan_batches` to stop cleanly at the first problem instead.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if end is None:
        end = len(mv)
    mv = mv[:end]
    pos = start
    while pos < end:
        batch = RecordBatch.parse(mv, pos, base_position=base_position)
        yield batch
        pos += batch.size_in_bytes


class TailKind(enum.Enum):
    """Why a scan stopped before the end of its region."""

    TRUNCATED = "truncated"
    """The last batch is cut short (a partial write): its bytes end before its length says."""
    CORRUPT_CRC = "corrupt_crc"
    """A complete batch whose CRC-32C does not match its bytes."""
    INVALID_HEADER = "invalid_header"
    """A header that cannot be a batch (bad length, magic, count...)."""
    INVALID_RECORDS = "invalid_records"
    """CRC good but the records do not parse (only with `check_records=True`)."""


@dataclass(frozen=True, slots=True)
class TailProblem:
    """The first problem a scan found: what, at which byte position, and a description."""

    kind: TailKind
    position: int
    message: str


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Outcome of `scan_batches`.

    `batches` are the valid batches before the first problem; `valid_bytes` is the number of
    bytes from the scan start that they occupy (truncate there to recover); `tail` is None
    when the whole region was valid.
    """

    batches: tuple[RecordBatch, ...]
    valid_bytes: int
    tail: TailProblem | None

    @property
    def next_offset(self) -> int | None:
        """The offset after the last valid batch, or None when there is none."""
        return self.batches[-1].next_offset if self.batches else None


PREALLOCATION_BLOCK = 4096
"""A segment with preallocated space ends on a multiple of this (its writes cover whole blocks)."""


def zero_tail(buf: bytes | bytearray | memoryview, pos: int) -> bool:
    """Whether `buf` (a whole segment file) ends in the space a segment keeps ahead of its last
    batch with `kraft.log.preallocate.bytes`, which a crash leaves behind: only zero bytes
    from `pos` (at least one) to an end on a multiple of PREALLOCATION_BLOCK. A reader stops
    there without reporting a torn batch; anything else after the last batch is torn."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = mv.nbytes
    if pos >= end or end % PREALLOCATION_BLOCK:
        return False
    step = 1 << 20
    for at in range(pos, end, step):
        chunk = mv[at:min(at + step, end)].tobytes()
        if chunk.count(0) != len(chunk):
            return False
    return True


def scan_batches(
    buf: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    end: int | None = None,
    base_position: int = 0,
    check_records: bool = False,
) -> ScanResult:
    """Validate batches from `start` and stop at the first problem; for log recovery.

    Every batch's header and CRC are checked (and, with `check_records`, every record).
    Positions in the result (`TailProblem.position`) include `base_position`.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if end is None:
        end = len(mv)
    mv = mv[:end]
    pos = start
    found: list[RecordBatch] = []
    tail: TailProblem | None = None
    while pos < end:
        where = base_position + pos
        try:
            batch = RecordBatch.parse(mv, pos, base_position=base_position)
        except TruncatedInputError as exc:
            tail = TailProblem(TailKind.TRUNCATED, where, str(exc))
            break
        except ProtocolError as exc:
            tail = TailProblem(TailKind.INVALID_HEADER, where, str(exc))
            break
        if not batch.is_valid():
            tail = TailProblem(
                TailKind.CORRUPT_CRC,
                where,
                f"{batch._where()}: CRC mismatch: stored {batch.crc:#010x}, "
                f"computed {batch.compute_crc():#010x}",
            )
            break
        if check_records:
            try:
                batch.validate(records=True)
            except ProtocolError as exc:
                tail = TailProblem(TailKind.INVALID_RECORDS, where, str(exc))
                break
        found.append(batch)
        pos += batch.size_in_bytes
    return ScanResult(tuple(found), pos - start, tail)


def concat(batches: Iterable[bytes | bytearray | memoryview]) -> bytes:
    """Concatenate encoded batches into one records blob (as in a Fetch response)."""
    return b"".join(batches)
