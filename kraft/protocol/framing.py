"""Request/response headers, size-prefixed frames and an incremental frame splitter.

On the socket every request and response is `int32 size` + header + body. Request header v1
is (api key int16, api version int16, correlation id int32, client id nullable int16-string);
v2 adds a tagged-field section and is used for flexible api versions. Response header v0 is
the correlation id; v1 adds a tagged-field section. ApiVersions responses always use v0.

`encode_request` / `encode_response` return complete frames *with* the size prefix.
`decode_request` / `decode_response` take one frame as `FrameDecoder` yields it, i.e.
*without* the size prefix (pass `size_prefixed=True` to decode the output of the encoders).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from kraft.protocol.api import ApiKey, api_spec
from kraft.protocol.codec import PartsBuffer, decode_from, encode_into
from kraft.protocol.errors import (
    ErrorCode,
    FrameTooLargeError,
    MalformedInputError,
    ProtocolError,
    TruncatedInputError,
    UnsupportedVersionError,
)
from kraft.protocol.primitives import Reader, Writer

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FrameDecoder",
    "RequestHeader",
    "ResponseHeader",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
]

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
"""Default frame limit (Kafka's `socket.request.max.bytes` default is 100 MiB)."""

_SIZE = struct.Struct(">i")
_REQ_FIXED = struct.Struct(">hhi")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A request header (v1 or v2; the version follows from the api version)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None
    unknown_tagged_fields: dict[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    """A response header (v0 or v1)."""

    correlation_id: int
    unknown_tagged_fields: dict[int, bytes] = field(default_factory=dict)


def _w_tags(out: bytearray, tags: dict[int, bytes]) -> None:
    w = Writer()
    w.tagged_fields(tags)
    out += w.buf


def _finish(out: bytearray) -> bytes:
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_request(header: RequestHeader, body: object) -> bytes:
    """Encode header + body as one size-prefixed request frame.

    The body must be an instance of the request class of `header.api_key`; the header
    version (v1/v2) is chosen from the api version.
    """
    spec = api_spec(header.api_key, header.api_version)
    if not isinstance(body, spec.request_class):
        raise TypeError(f"{spec.name} request body must be {spec.request_class.__name__}")
    out = bytearray(4)
    out += _REQ_FIXED.pack(header.api_key, header.api_version, header.correlation_id)
    if header.client_id is None:
        out += b"\xff\xff"
    else:
        cid = header.client_id.encode("utf-8")
        if len(cid) > 0x7FFF:
            raise ValueError("client id longer than 32767 bytes")
        out += struct.pack(">h", len(cid)) + cid
    if spec.request_header_version(header.api_version) >= 2:
        _w_tags(out, header.unknown_tagged_fields)
    encode_into(body, header.api_version, out)
    return _finish(out)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: object,
                    unknown_tagged_fields: dict[int, bytes] | None = None) -> bytes:
    """Encode a size-prefixed response frame (header v0/v1 chosen from the api version)."""
    out = bytearray(4)
    _encode_response_into(out, api_key, api_version, correlation_id, body, unknown_tagged_fields)
    return _finish(out)


def encode_response_parts(api_key: int, api_version: int, correlation_id: int, body: object,
                          unknown_tagged_fields: dict[int, bytes] | None = None,
                          ) -> tuple[bytes | memoryview, ...]:
    """`encode_response` without the size prefix, as parts to write in order: the value of
    each bytes field given as `Spliced` is a part of its own, not copied (joined, the parts
    are the frame body `encode_response` gives after its 4-byte size)."""
    out = PartsBuffer()
    _encode_response_into(out, api_key, api_version, correlation_id, body, unknown_tagged_fields)
    return out.parts()


def _encode_response_into(out: bytearray, api_key: int, api_version: int, correlation_id: int,
                          body: object, unknown_tagged_fields: dict[int, bytes] | None) -> None:
    spec = api_spec(api_key, api_version)
    if not isinstance(body, spec.response_class):
        raise TypeError(f"{spec.name} response body must be {spec.response_class.__name__}")
    out += _I32.pack(correlation_id)
    if spec.response_header_version(api_version) >= 1:
        _w_tags(out, unknown_tagged_fields or {})
    encode_into(body, api_version, out)


def _frame_view(frame: bytes | bytearray | memoryview, size_prefixed: bool,
                what: str) -> tuple[Any, int, int]:
    buf: Any = bytes(frame) if isinstance(frame, bytearray) else frame
    end = len(buf)
    if not size_prefixed:
        return buf, 0, end
    if end < 4:
        raise TruncatedInputError(f"{what}: size prefix truncated at byte offset 0")
    size = _SIZE.unpack_from(buf, 0)[0]
    if size != end - 4:
        raise MalformedInputError(
            f"{what}: size prefix says {size} bytes but {end - 4} follow (byte offset 0)"
        )
    return buf, 4, end


def decode_request(
    frame: bytes | bytearray | memoryview, *, size_prefixed: bool = False
) -> tuple[RequestHeader, Any]:
    """Decode one request frame into (header, body).

    An unknown api key or unsupported version raises UnsupportedVersionError carrying
    `api_key`, `api_version` and `correlation_id`, so the caller can still answer with
    UNSUPPORTED_VERSION. Any other bad input raises another ProtocolError.
    """
    buf, pos, end = _frame_view(frame, size_prefixed, "request")
    if end - pos < 8:
        # let the Reader name the field that is cut short
        r = Reader(buf, pos, context="request header")
        r.int16("api_key")
        r.int16("api_version")
        r.int32("correlation_id")
    api_key, api_version, correlation_id = _REQ_FIXED.unpack_from(buf, pos)
    try:
        spec = api_spec(api_key, api_version)
    except UnsupportedVersionError as exc:
        raise UnsupportedVersionError(
            str(exc), api_key=api_key, api_version=api_version, correlation_id=correlation_id
        ) from None
    version = spec.request_header_version(api_version)
    pos += 8
    client_id: str | None
    tags: dict[int, bytes] = {}
    if end - pos >= 2 and buf[pos] == 0xFF and buf[pos + 1] == 0xFF:
        client_id = None
        pos += 2
    else:
        r = Reader(buf, pos, context=f"request header v{version} ({spec.name} v{api_version})")
        client_id = r.nullable_string("client_id")
        pos = r.pos
    if version >= 2:
        if pos < end and buf[pos] == 0:
            pos += 1
        else:
            r = Reader(buf, pos,
                       context=f"request header v{version} ({spec.name} v{api_version})")
            tags = r.tagged_fields()
            pos = r.pos
    header = RequestHeader(api_key, api_version, correlation_id, client_id, tags)
    body: Any
    body, pos = decode_from(spec.request_class, buf, pos, end, api_version)
    if pos != end:
        raise MalformedInputError(
            f"{spec.name}Request v{api_version}: {end - pos} unexpected trailing bytes at "
            f"byte offset {pos}"
        )
    return header, body


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview, *,
    size_prefixed: bool = False,
) -> tuple[ResponseHeader, Any]:
    """Decode one response frame for a request sent as (api_key, api_version).

    For ApiVersions, a body carrying UNSUPPORTED_VERSION, or one that does not parse at the
    requested version, is decoded with the v0 layout (KIP-511: the server answers an
    ApiVersions version it does not know with a v0 body); an UNSUPPORTED_VERSION body that is
    not a v0 one is decoded at the requested version.
    """
    spec = api_spec(api_key, api_version)
    buf, pos, end = _frame_view(frame, size_prefixed, "response")
    hv = spec.response_header_version(api_version)
    r = Reader(buf, pos, context=f"response header v{hv} ({spec.name} v{api_version})")
    correlation_id = r.int32("correlation_id")
    tags: dict[int, bytes] = r.tagged_fields() if hv >= 1 else {}
    header = ResponseHeader(correlation_id, tags)
    body_pos = r.pos

    def body_at(version: int) -> Any:
        body: Any
        body, p = decode_from(spec.response_class, buf, body_pos, end, version)
        if p != end:
            raise MalformedInputError(
                f"{spec.name}Response v{version}: {end - p} unexpected trailing bytes at "
                f"byte offset {p}"
            )
        return body

    if spec.key == ApiKey.API_VERSIONS and api_version > 0:
        if end - body_pos >= 2 and \
                struct.unpack_from(">h", buf, body_pos)[0] == ErrorCode.UNSUPPORTED_VERSION:
            try:
                return header, body_at(0)
            except ProtocolError:
                # a server that knew the version and still answered UNSUPPORTED_VERSION in
                # its layout (Kafka's client parses the requested version first as well)
                return header, body_at(api_version)
        try:
            return header, body_at(api_version)
        except ProtocolError:
            return header, body_at(0)
    return header, body_at(api_version)


class FrameDecoder:
    """Splits a byte stream into frames (size prefix removed), bounded by `max_frame_bytes`.

    `feed(data)` returns the frames completed by `data`. A size prefix that is negative or
    larger than the limit raises (MalformedInputError / FrameTooLargeError) as soon as its
    four bytes arrive, before anything is allocated for it; the decoder then stays failed,
    since the stream can no longer be re-synchronised.
    """

    __slots__ = ("_buf", "_error", "_need", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need = -1
        self._error: ProtocolError | None = None

    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame they complete, in order."""
        if self._error is not None:
            raise self._error
        self._buf += data
        frames: list[bytes] = []
        buf = self._buf
        start = 0
        avail = len(buf)
        while True:
            if self._need < 0:
                if avail - start < 4:
                    break
                size = _SIZE.unpack_from(buf, start)[0]
                if size < 0:
                    self._error = MalformedInputError(
                        f"frame: negative size prefix {size} at stream offset {start}"
                    )
                    raise self._error
                if size > self.max_frame_bytes:
                    self._error = FrameTooLargeError(
                        f"frame: size prefix {size} exceeds the limit of "
                        f"{self.max_frame_bytes} bytes"
                    )
                    raise self._error
                self._need = size
                start += 4
            if avail - start < self._need:
                break
            frames.append(bytes(buf[start : start + self._need]))
            start += self._need
            self._need = -1
        if start:
            del buf[:start]
        return frames

class ReadBuffer:
    """The bytes of a stream received but not parsed yet (the tail of an unfinished frame).

    `feed(data)` returns what to parse: `data` itself when nothing was left over (the common
    case: no copy), else the leftover with `data` appended; `consumed(view, pos)` keeps what
    lies after `pos` of that view for the next chunk.
    """

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def __bool__(self) -> bool:
        return bool(self.buf)

    def feed(self, data: bytes) -> bytes | bytearray:
        """What to parse now."""
        if self.buf:
            self.buf += data
            return self.buf
        return data

    def consumed(self, view: bytes | bytearray, pos: int) -> None:
        """`pos` bytes of `view` (from `feed`) were parsed; keep the rest."""
        if view is self.buf:
            del self.buf[:pos]
        elif pos < len(view):
            self.buf += memoryview(view)[pos:]
