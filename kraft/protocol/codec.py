"""Specialised message codecs, generated from `schema.py` once per (message, version).

For every (message, version) that is asked for, this module writes Python source for one
encoder and one decoder per struct of that message (runs of consecutive fixed-width fields
become a single precompiled `struct.Struct` pack/unpack), compiles it with `exec` once and
caches the functions. Nothing is interpreted field by field per message.

Decoders work on `(buf, pos, end)` and check every length against `end` before reading or
allocating, raising `TruncatedInputError` / `MalformedInputError` whose message names the
message and version, the struct and field, and the byte offset.

Encoders raise `UnsupportedVersionError` when a field that the target version lacks holds a
non-default value and the schema does not mark it ignorable (ignorable fields are dropped
silently), and `ValueError` for values that cannot be represented (null in a non-nullable
field, integer out of range, string longer than 32767 bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, TypeVar

from kraft.protocol import messages
from kraft.protocol.errors import MalformedInputError, TruncatedInputError, UnsupportedVersionError
from kraft.protocol.gen_messages import scalar_default
from kraft.protocol.primitives import encode_uvarint
from kraft.protocol.schema import MESSAGES, FieldSpec, MessageSpec
from kraft.protocol.uuid import Uuid

__all__ = [
    "PartsBuffer",
    "Spliced",
    "codec_source",
    "decode",
    "decode_from",
    "encode",
    "encode_into",
    "spec_for_class",
]

T = TypeVar("T")

_FIXED: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# -------------------------------------------------------------------------------------
# Runtime helpers used by the generated code
# -------------------------------------------------------------------------------------


def _where(ctx: str, fld: str, pos: int) -> str:
    return f"{ctx}: field {fld!r} at byte offset {pos}"


def _trunc(ctx: str, fld: str, pos: int, need: int, end: int) -> TruncatedInputError:
    return TruncatedInputError(
        f"{_where(ctx, fld, pos)}: needs {need} bytes, only {max(end - pos, 0)} remain"
    )


def _trunc_run(
    ctx: str, names: tuple[tuple[str, int], ...], pos: int, end: int
) -> TruncatedInputError:
    """Name the first field of a fixed-width run that does not fit."""
    p = pos
    for name, width in names:
        if p + width > end:
            return _trunc(ctx, name, p, width, end)
        p += width
    return _trunc(ctx, names[-1][0], pos, p - pos, end)  # pragma: no cover


def _malf(ctx: str, fld: str, pos: int, detail: str) -> MalformedInputError:
    return MalformedInputError(f"{_where(ctx, fld, pos)}: {detail}")


def _unsup(ctx: str, fld: str) -> UnsupportedVersionError:
    return UnsupportedVersionError(
        f"{ctx}: field {fld!r} holds a non-default value but does not exist in this version"
    )


def _null(ctx: str, fld: str) -> ValueError:
    return ValueError(f"{ctx}: field {fld!r} is not nullable in this version")


def _r_uv(buf: Any, pos: int, end: int, ctx: str, fld: str) -> tuple[int, int]:
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    result = 0
    shift = 0
    p = pos
    for _ in range(5):
        if p >= end:
            raise _trunc(ctx, fld, pos, p - pos + 1, end)
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result > 0xFFFFFFFF:
                raise _malf(ctx, fld, pos, "unsigned varint exceeds 32 bits")
            return result, p
        shift += 7
    raise _malf(ctx, fld, pos, "unsigned varint longer than 5 bytes")


def _utf8(buf: Any, pos: int, n: int, ctx: str, fld: str) -> str:
    try:
        return str(buf[pos : pos + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise _malf(ctx, fld, pos, f"invalid UTF-8 ({exc.reason})") from None


def _r_str(buf: Any, pos: int, end: int, ctx: str, fld: str, nullable: bool) -> tuple[Any, int]:
    if end - pos < 2:
        raise _trunc(ctx, fld, pos, 2, end)
    n = _I16.unpack_from(buf, pos)[0]
    if n < 0:
        if n == -1 and nullable:
            return None, pos + 2
        raise _malf(ctx, fld, pos, f"invalid string length {n}")
    pos += 2
    if end - pos < n:
        raise _trunc(ctx, fld, pos, n, end)
    return _utf8(buf, pos, n, ctx, fld), pos + n


def _r_cstr(buf: Any, pos: int, end: int, ctx: str, fld: str, nullable: bool) -> tuple[Any, int]:
    start = pos
    n, pos = _r_uv(buf, pos, end, ctx, fld)
    if n == 0:
        if nullable:
            return None, pos
        raise _malf(ctx, fld, start, "null in a non-nullable string")
    n -= 1
    if n > 0x7FFF:
        raise _malf(ctx, fld, start, f"string length {n} exceeds 32767")
    if end - pos < n:
        raise _trunc(ctx, fld, pos, n, end)
    return _utf8(buf, pos, n, ctx, fld), pos + n


def _r_bytes(
    buf: Any, pos: int, end: int, ctx: str, fld: str, nullable: bool, view: bool
) -> tuple[Any, int]:
    if end - pos < 4:
        raise _trunc(ctx, fld, pos, 4, end)
    n = _I32.unpack_from(buf, pos)[0]
    if n < 0:
        if n == -1 and nullable:
            return None, pos + 4
        raise _malf(ctx, fld, pos, f"invalid bytes length {n}")
    pos += 4
    if end - pos < n:
        raise _trunc(ctx, fld, pos, n, end)
    v = buf[pos : pos + n]
    return (v if view else bytes(v)), pos + n


def _r_cbytes(
    buf: Any, pos: int, end: int, ctx: str, fld: str, nullable: bool, view: bool
) -> tuple[Any, int]:
    start = pos
    n, pos = _r_uv(buf, pos, end, ctx, fld)
    if n == 0:
        if nullable:
            return None, pos
        raise _malf(ctx, fld, start, "null in non-nullable bytes")
    n -= 1
    if end - pos < n:
        raise _trunc(ctx, fld, pos, n, end)
    v = buf[pos : pos + n]
    return (v if view else bytes(v)), pos + n


def _r_alen(
    buf: Any, pos: int, end: int, ctx: str, fld: str, nullable: bool, minsize: int
) -> tuple[int, int]:
    if end - pos < 4:
        raise _trunc(ctx, fld, pos, 4, end)
    n = _I32.unpack_from(buf, pos)[0]
    if n < 0:
        if n == -1 and nullable:
            return -1, pos + 4
        raise _malf(ctx, fld, pos, f"invalid array length {n}")
    pos += 4
    if n * minsize > end - pos:
        raise _malf(
            ctx, fld, pos - 4, f"array of {n} elements cannot fit in the {end - pos} bytes left"
        )
    return n, pos


def _r_calen(
    buf: Any, pos: int, end: int, ctx: str, fld: str, nullable: bool, minsize: int
) -> tuple[int, int]:
    start = pos
    n, pos = _r_uv(buf, pos, end, ctx, fld)
    if n == 0:
        if nullable:
            return -1, pos
        raise _malf(ctx, fld, start, "null in a non-nullable array")
    n -= 1
    if n * minsize > end - pos:
        raise _malf(
            ctx, fld, start, f"array of {n} elements cannot fit in the {end - pos} bytes left"
        )
    return n, pos


def _w_uv(out: bytearray, n: int) -> None:
    if 0 <= n < 0x80:
        out.append(n)
    else:
        out += encode_uvarint(n)


def _w_str(out: bytearray, v: str | None, ctx: str, fld: str, nullable: bool) -> None:
    if v is None:
        if not nullable:
            raise _null(ctx, fld)
        out += b"\xff\xff"
        return
    b = v.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError(f"{ctx}: field {fld!r}: string of {len(b)} bytes exceeds 32767")
    out += _I16.pack(len(b))
    out += b


def _w_cstr(out: bytearray, v: str | None, ctx: str, fld: str, nullable: bool) -> None:
    if v is None:
        if not nullable:
            raise _null(ctx, fld)
        out.append(0)
        return
    b = v.encode("utf-8")
    n = len(b)
    if n > 0x7FFF:
        raise ValueError(f"{ctx}: field {fld!r}: string of {n} bytes exceeds 32767")
    if n < 0x7F:
        out.append(n + 1)
    else:
        out += encode_uvarint(n + 1)
    out += b


class Spliced:
    """A bytes field value the encoder leaves where it is: encoding into a `PartsBuffer`
    writes its length and notes its place, so the value goes to the socket as a part of its
    own (an 8 MiB snapshot chunk or a fetch's records are not copied into the frame).
    Encoded into a plain bytearray it is copied like any bytes value."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


class PartsBuffer(bytearray):
    """An encoding target that keeps `Spliced` values out of its bytes: `splices` lists
    (position in the buffer, value) in order; `parts()` gives the whole encoding as the
    buffer's pieces between them and the values themselves, to be written in order."""

    __slots__ = ("splices",)

    def __init__(self, initial: bytes = b"") -> None:
        super().__init__(initial)
        self.splices: list[tuple[int, bytes | memoryview]] = []

    def parts(self) -> tuple[bytes | memoryview, ...]:
        """The whole encoding as parts (copies of the buffer's pieces between the spliced
        values, and the values themselves, uncopied)."""
        out: list[bytes | memoryview] = []
        start = 0
        for pos, data in self.splices:
            if pos > start:
                out.append(bytes(self[start:pos]))
            out.append(data)
            start = pos
        out.append(bytes(self[start:]))
        return tuple(out)


def _put_bytes(out: bytearray, v: Any) -> None:
    if type(v) is Spliced:
        if type(out) is PartsBuffer:
            out.splices.append((len(out), v.data))
            return
        v = v.data
    out += v


def _w_bytes(out: bytearray, v: Any, ctx: str, fld: str, nullable: bool) -> None:
    if v is None:
        if not nullable:
            raise _null(ctx, fld)
        out += b"\xff\xff\xff\xff"
        return
    out += _I32.pack(len(v))
    _put_bytes(out, v)


def _w_cbytes(out: bytearray, v: Any, ctx: str, fld: str, nullable: bool) -> None:
    if v is None:
        if not nullable:
            raise _null(ctx, fld)
        out.append(0)
        return
    _w_uv(out, len(v) + 1)
    _put_bytes(out, v)


def _w_tags(out: bytearray, tags: dict[int, Any]) -> None:
    if not tags:
        out.append(0)
        return
    _w_uv(out, len(tags))
    for tag in sorted(tags):
        value = tags[tag]
        _w_uv(out, tag)
        _w_uv(out, len(value))
        out += value


def _uuid(raw: Any) -> Uuid:
    return Uuid(raw)


_HELPERS: dict[str, Any] = {
    name: obj
    for name, obj in globals().items()
    if name.startswith(("_r_", "_w_", "_trunc", "_malf", "_unsup", "_null", "_uuid"))
}
_HELPERS.update({"_I16": _I16, "_I32": _I32, "_unpack_from": struct.unpack_from})


# -------------------------------------------------------------------------------------
# Code generation
# -------------------------------------------------------------------------------------


class _Builder:
    """Writes the source of one (message, version) codec."""

    def __init__(self, spec: MessageSpec, version: int) -> None:
        self.spec = spec
        self.v = version
        self.flex = version in spec.flexible
        self.ctx = f"{spec.name} v{version}"
        self.top = getattr(messages, spec.class_name)
        self.ns: dict[str, Any] = dict(_HELPERS)
        self.ns["CTX"] = self.ctx
        self.lines: list[str] = []
        self.fns: dict[str, tuple[str, str]] = {}
        self.n = 0

    # -- small utilities ---------------------------------------------------------------

    def const(self, value: object) -> str:
        """Register a constant in the exec namespace and return its name."""
        self.n += 1
        name = f"K{self.n}"
        self.ns[name] = value
        return name

    def tmp(self, prefix: str = "t") -> str:
        """A fresh local variable name."""
        self.n += 1
        return f"_{prefix}{self.n}"

    def present(self, fs: FieldSpec) -> bool:
        return self.v in fs.versions

    def is_tagged(self, fs: FieldSpec) -> bool:
        return self.flex and self.present(fs) and self.v in fs.tagged and fs.tag is not None

    def nullable(self, fs: FieldSpec) -> bool:
        return self.v in fs.nullable

    def struct_cls(self, name: str) -> type:
        return getattr(self.top, name)  # type: ignore[no-any-return]

    def default_value(self, fs: FieldSpec) -> object:
        """The field's default as a value (lists/structs freshly built)."""
        if fs.is_array:
            return None if fs.default is None else []
        if fs.is_struct:
            return self.struct_cls(fs.struct_name)()
        return scalar_default(fs)

    def default_expr(self, fs: FieldSpec) -> str:
        """Source expression that yields a (fresh if mutable) default."""
        if fs.is_array:
            return "None" if fs.default is None else "[]"
        if fs.is_struct:
            return f"{self.const(self.struct_cls(fs.struct_name))}()"
        return self.const(self.default_value(fs))

    def nondefault_expr(self, fs: FieldSpec, expr: str) -> str:
        """Source expression true when `expr` differs from the field default."""
        if fs.is_array:
            return f"{expr} is not None" if fs.default is None else f"{expr}"
        d = self.default_value(fs)
        if d is None:
            return f"{expr} is not None"
        return f"{expr} != {self.const(d)}"

    def min_size(self, fields: tuple[FieldSpec, ...]) -> int:
        """Smallest possible encoding of a struct at this version."""
        size = 1 if self.flex else 0
        for fs in fields:
            if not self.present(fs) or self.is_tagged(fs):
                continue
            if fs.is_array:
                size += 1 if self.flex else 4
            elif fs.is_struct:
                size += self.min_size(fs.fields)
            elif fs.type in _FIXED:
                size += _FIXED[fs.type][1]
            elif fs.type == "string":
                size += 1 if self.flex else 2
            else:
                size += 1 if self.flex else 4
        return size

    # -- struct functions --------------------------------------------------------------

    def struct_fns(self, name: str, fields: tuple[FieldSpec, ...], cls: type) -> tuple[str, str]:
        """Generate (once) the encoder and decoder of one struct; return their names."""
        if name in self.fns:
            return self.fns[name]
        enc, dec = f"e_{name}", f"d_{name}"
        self.fns[name] = (enc, dec)
        for fs in fields:
            if fs.is_struct and self.present(fs):
                self.struct_fns(fs.struct_name, fs.fields, self.struct_cls(fs.struct_name))
        self.gen_encoder(enc, name, fields)
        self.gen_decoder(dec, name, fields, cls)
        return enc, dec

    def _runs(self, fields: tuple[FieldSpec, ...]) -> list[list[FieldSpec] | FieldSpec]:
        """Group consecutive regular fixed-width fields present in this version."""
        out: list[list[FieldSpec] | FieldSpec] = []
        run: list[FieldSpec] = []
        for fs in fields:
            if not self.present(fs) or self.is_tagged(fs):
                continue
            if not fs.is_array and fs.type in _FIXED:
                run.append(fs)
                continue
            if run:
                out.append(run)
                run = []
            out.append(fs)
        if run:
            out.append(run)
        return out

    # -- encoder -----------------------------------------------------------------------

    def gen_encoder(self, fn: str, sname: str, fields: tuple[FieldSpec, ...]) -> None:
        L = [f"def {fn}(m, out):"]
        ind = "    "
        for fs in fields:
            if not self.present(fs) and not fs.ignorable:
                cond = self.nondefault_expr(fs, f"m.{fs.attr}")
                L.append(f"{ind}if {cond}:")
                L.append(f"{ind}    raise _unsup(CTX, {sname + '.' + fs.attr!r})")
        for item in self._runs(fields):
            if isinstance(item, list):
                fmt = ">" + "".join(_FIXED[fs.type][0] for fs in item)
                s = self.const(struct.Struct(fmt))
                args = ", ".join(
                    f"m.{fs.attr}.bytes" if fs.type == "uuid" else f"m.{fs.attr}" for fs in item
                )
                L.append(f"{ind}out += {s}.pack({args})")
            else:
                L += self.enc_value(item, f"m.{item.attr}", "out", ind, sname)
        if self.flex:
            tagged = sorted((fs for fs in fields if self.is_tagged(fs)), key=lambda x: x.tag or 0)
            if not tagged:
                L.append(f"{ind}_w_tags(out, m.unknown_tagged_fields)")
            else:
                L.append(f"{ind}_tg = m.unknown_tagged_fields")
                L.append(f"{ind}_tg = dict(_tg) if _tg else {{}}")
                for fs in tagged:
                    L.append(f"{ind}if {self.nondefault_expr(fs, f'm.{fs.attr}')}:")
                    b = self.tmp("b")
                    L.append(f"{ind}    {b} = bytearray()")
                    L += self.enc_value(fs, f"m.{fs.attr}", b, ind + "    ", sname)
                    L.append(f"{ind}    _tg[{fs.tag}] = {b}")
                L.append(f"{ind}_w_tags(out, _tg)")
        else:
            L.append(f"{ind}if m.unknown_tagged_fields:")
            L.append(
                f"{ind}    raise UnsupportedVersionError(CTX + ': tagged fields set in "
                f"{sname} but this version is not flexible')"
            )
        self.lines += L
        self.lines.append("")

    def enc_value(self, fs: FieldSpec, expr: str, out: str, ind: str, sname: str) -> list[str]:
        """Lines that append the value `expr` of field `fs` to bytearray `out`."""
        fld = f"{sname}.{fs.attr}"
        nullable = self.nullable(fs)
        L: list[str] = []
        if fs.is_array:
            a = self.tmp("a")
            L.append(f"{ind}{a} = {expr}")
            L.append(f"{ind}if {a} is None:")
            if nullable:
                null = b"\x00" if self.flex else b"\xff\xff\xff\xff"
                L.append(f"{ind}    {out} += {null!r}")
            else:
                L.append(f"{ind}    raise _null(CTX, {fld!r})")
            L.append(f"{ind}else:")
            if self.flex:
                L.append(f"{ind}    _w_uv({out}, len({a}) + 1)")
            else:
                L.append(f"{ind}    {out} += _I32.pack(len({a}))")
            et = fs.element_type
            if fs.is_struct:
                enc, _ = self.fns[fs.struct_name]
                e = self.tmp("e")
                L.append(f"{ind}    for {e} in {a}:")
                L.append(f"{ind}        {enc}({e}, {out})")
            elif et in _FIXED and et not in ("uuid", "bool"):
                code = _FIXED[et][0]
                L.append(f"{ind}    {out} += struct_pack('>%d{code}' % len({a}), *{a})")
                self.ns["struct_pack"] = struct.pack
            else:
                e = self.tmp("e")
                elem = FieldSpec(fs.name, et, fs.versions, fs.nullable.__class__(1, 0),
                                 fs.tagged, None, None, False, ())
                L.append(f"{ind}    for {e} in {a}:")
                L += self.enc_value(elem, e, out, ind + "        ", sname)
            return L
        if fs.is_struct:
            enc, _ = self.fns[fs.struct_name]
            return [f"{ind}{enc}({expr}, {out})"]
        t = fs.type
        if t in _FIXED:
            if t == "uuid":
                return [f"{ind}{out} += {expr}.bytes"]
            s = self.const(struct.Struct(">" + _FIXED[t][0]))
            return [f"{ind}{out} += {s}.pack({expr})"]
        if t == "string":
            w = "_w_cstr" if self.flex else "_w_str"
        else:
            w = "_w_cbytes" if self.flex else "_w_bytes"
        return [f"{ind}{w}({out}, {expr}, CTX, {fld!r}, {nullable})"]

    # -- decoder -----------------------------------------------------------------------

    def gen_decoder(
        self, fn: str, sname: str, fields: tuple[FieldSpec, ...], cls: type
    ) -> None:
        L = [f"def {fn}(buf, pos, end):"]
        ind = "    "
        var = {fs.attr: f"f_{i}" for i, fs in enumerate(fields)}
        for fs in fields:
            if not self.present(fs) or self.is_tagged(fs):
                L.append(f"{ind}{var[fs.attr]} = {self.default_expr(fs)}")
        for item in self._runs(fields):
            if isinstance(item, list):
                fmt = ">" + "".join(_FIXED[fs.type][0] for fs in item)
                st = struct.Struct(fmt)
                s = self.const(st)
                names = self.const(tuple((f"{sname}.{fs.attr}", _FIXED[fs.type][1])
                                         for fs in item))
                L.append(f"{ind}if end - pos < {st.size}:")
                L.append(f"{ind}    raise _trunc_run(CTX, {names}, pos, end)")
                targets = ", ".join(var[fs.attr] for fs in item)
                L.append(f"{ind}{targets}{',' if len(item) == 1 else ''} = {s}.unpack_from(buf, pos)")
                L.append(f"{ind}pos += {st.size}")
                for fs in item:
                    if fs.type == "uuid":
                        L.append(f"{ind}{var[fs.attr]} = _uuid({var[fs.attr]})")
            else:
                L += self.dec_value(item, var[item.attr], "end", ind, sname)
        unknown = "{}"
        if self.flex:
            unknown = "_unk"
            L.append(f"{ind}_unk = {{}}")
            # fast path: an empty tagged section is the single byte 0
            L.append(f"{ind}if pos < end and buf[pos] == 0:")
            L.append(f"{ind}    pos += 1")
            L.append(f"{ind}else:")
            i1 = ind + "    "
            L.append(f"{i1}_nt, pos = _r_uv(buf, pos, end, CTX, {sname + '.<tagged fields>'!r})")
            L.append(f"{i1}if _nt:")
            i2 = i1 + "    "
            L.append(f"{i2}_last = -1")
            L.append(f"{i2}for _ in range(_nt):")
            i3 = i2 + "    "
            L.append(f"{i3}_tp = pos")
            L.append(f"{i3}_tag, pos = _r_uv(buf, pos, end, CTX, {sname + '.<tag>'!r})")
            L.append(f"{i3}if _tag <= _last:")
            L.append(f"{i3}    raise _malf(CTX, {sname + '.<tag>'!r}, _tp, "
                     f"'tag %d out of order or repeated' % _tag)")
            L.append(f"{i3}_last = _tag")
            L.append(f"{i3}_sz, pos = _r_uv(buf, pos, end, CTX, {sname + '.<tag size>'!r})")
            L.append(f"{i3}if end - pos < _sz:")
            L.append(f"{i3}    raise _trunc(CTX, {sname + '.<tag %d>'!r} % _tag, pos, _sz, end)")
            L.append(f"{i3}_te = pos + _sz")
            first = True
            for fs in sorted((x for x in fields if self.is_tagged(x)), key=lambda x: x.tag or 0):
                kw = "if" if first else "elif"
                first = False
                L.append(f"{i3}{kw} _tag == {fs.tag}:")
                L += self.dec_value(fs, var[fs.attr], "_te", i3 + "    ", sname)
                L.append(f"{i3}    if pos != _te:")
                L.append(f"{i3}        raise _malf(CTX, {sname + '.' + fs.attr!r}, pos, "
                         f"'tagged value is %d bytes but the field used %d' % (_sz, pos - _te + _sz))")
            if first:
                L.append(f"{i3}if True:")
            else:
                L.append(f"{i3}else:")
            L.append(f"{i3}    _unk[_tag] = bytes(buf[pos:_te])")
            L.append(f"{i3}    pos = _te")
        c = self.const(cls)
        args = ", ".join([var[fs.attr] for fs in fields] + [unknown])
        L.append(f"{ind}return {c}({args}), pos")
        self.lines += L
        self.lines.append("")

    def dec_value(self, fs: FieldSpec, target: str, end: str, ind: str, sname: str) -> list[str]:
        """Lines that read one value of field `fs` into local `target`."""
        fld = f"{sname}.{fs.attr}"
        nullable = self.nullable(fs)
        L: list[str] = []
        if fs.is_array:
            n = self.tmp("n")
            et = fs.element_type
            if fs.is_struct:
                minsize = self.min_size(fs.fields)
            elif et in _FIXED:
                minsize = _FIXED[et][1]
            else:
                minsize = 1 if self.flex else (2 if et == "string" else 4)
            rd = "_r_calen" if self.flex else "_r_alen"
            L.append(f"{ind}{n}, pos = {rd}(buf, pos, {end}, CTX, {fld!r}, {nullable}, "
                     f"{max(minsize, 1)})")
            L.append(f"{ind}if {n} < 0:")
            L.append(f"{ind}    {target} = None")
            L.append(f"{ind}else:")
            if fs.is_struct:
                _, dec = self.fns[fs.struct_name]
                e = self.tmp("e")
                ap = self.tmp("ap")
                L.append(f"{ind}    {target} = []")
                L.append(f"{ind}    {ap} = {target}.append")
                L.append(f"{ind}    for _ in range({n}):")
                L.append(f"{ind}        {e}, pos = {dec}(buf, pos, {end})")
                L.append(f"{ind}        {ap}({e})")
            elif et in _FIXED and et not in ("uuid", "bool"):
                code = _FIXED[et][0]
                L.append(f"{ind}    {target} = list(_unpack_from('>%d{code}' % {n}, buf, pos))")
                L.append(f"{ind}    pos += {n} * {minsize}")
            else:
                e = self.tmp("e")
                elem = FieldSpec(fs.name, et, fs.versions, fs.nullable.__class__(1, 0),
                                 fs.tagged, None, None, False, ())
                L.append(f"{ind}    {target} = []")
                L.append(f"{ind}    for _ in range({n}):")
                L += self.dec_value(elem, e, end, ind + "        ", sname)
                L.append(f"{ind}        {target}.append({e})")
            return L
        if fs.is_struct:
            _, dec = self.fns[fs.struct_name]
            return [f"{ind}{target}, pos = {dec}(buf, pos, {end})"]
        t = fs.type
        if t in _FIXED:
            code, width = _FIXED[t]
            s = self.const(struct.Struct(">" + code))
            L.append(f"{ind}if {end} - pos < {width}:")
            L.append(f"{ind}    raise _trunc(CTX, {fld!r}, pos, {width}, {end})")
            if t == "uuid":
                L.append(f"{ind}{target} = _uuid(buf[pos:pos + 16])")
            else:
                L.append(f"{ind}{target} = {s}.unpack_from(buf, pos)[0]")
            L.append(f"{ind}pos += {width}")
            return L
        if t == "string":
            rd = "_r_cstr" if self.flex else "_r_str"
            return [f"{ind}{target}, pos = {rd}(buf, pos, {end}, CTX, {fld!r}, {nullable})"]
        rd = "_r_cbytes" if self.flex else "_r_bytes"
        view = t == "records"
        return [f"{ind}{target}, pos = {rd}(buf, pos, {end}, CTX, {fld!r}, {nullable}, {view})"]

    # -- whole message -----------------------------------------------------------------

    def build(self) -> tuple[str, Callable[..., None], Callable[..., Any]]:
        """Generate, compile and return (source, encoder, decoder)."""
        self.ns["UnsupportedVersionError"] = UnsupportedVersionError
        enc, dec = self.struct_fns(self.spec.name, self.spec.fields, self.top)
        source = "\n".join(self.lines)
        code = compile(source, f"<codec {self.ctx}>", "exec")
        exec(code, self.ns)
        return source, self.ns[enc], self.ns[dec]


_SPEC_BY_CLASS: dict[type, MessageSpec] = {
    getattr(messages, m.class_name): m for m in MESSAGES
}
_CACHE: dict[tuple[type, int], tuple[str, Callable[..., None], Callable[..., Any]]] = {}


def spec_for_class(cls: type) -> MessageSpec:
    """The schema of a generated message class; raises TypeError for other classes."""
    try:
        return _SPEC_BY_CLASS[cls]
    except KeyError:
        raise TypeError(f"{cls!r} is not a generated Kafka message class") from None


def _codec(cls: type, version: int) -> tuple[str, Callable[..., None], Callable[..., Any]]:
    key = (cls, version)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    spec = spec_for_class(cls)
    if version not in spec.valid:
        raise UnsupportedVersionError(
            f"{spec.name} v{version} is not supported (versions {spec.valid})",
            api_key=spec.api_key,
            api_version=version,
        )
    built = _Builder(spec, version).build()
    _CACHE[key] = built
    return built


def codec_source(cls: type, version: int) -> str:
    """The generated Python source of the codec for (cls, version), for inspection."""
    return _codec(cls, version)[0]


def encode_into(message: object, version: int, out: bytearray) -> None:
    """Append the body encoding of `message` at `version` to `out`."""
    enc = _codec(type(message), version)[1]
    try:
        enc(message, out)
    except (struct.error, OverflowError) as exc:
        spec = _SPEC_BY_CLASS[type(message)]
        raise ValueError(f"{spec.name} v{version}: value out of range: {exc}") from None


def encode(message: object, version: int) -> bytes:
    """Encode a message body (no header, no size prefix) at `version`."""
    out = bytearray()
    encode_into(message, version, out)
    return bytes(out)


def decode_from(
    cls: type[T], buf: bytes | bytearray | memoryview, pos: int, end: int, version: int
) -> tuple[T, int]:
    """Decode a body of type `cls` from `buf[pos:end]`; returns (message, new position)."""
    dec = _codec(cls, version)[2]
    return dec(buf, pos, end)  # type: ignore[no-any-return]


def decode(cls: type[T], data: bytes | bytearray | memoryview, version: int) -> T:
    """Decode a complete body; trailing bytes are rejected with MalformedInputError."""
    if isinstance(data, bytearray):
        data = bytes(data)
    end = len(data)
    msg, pos = decode_from(cls, data, 0, end, version)
    if pos != end:
        spec = _SPEC_BY_CLASS[cls]
        raise MalformedInputError(
            f"{spec.name} v{version}: {end - pos} unexpected trailing bytes at byte offset {pos}"
        )
    return msg
