"""Cross-check against kio, a second independent implementation of the protocol.

kio (github.com/Aiven-Open/kio) generates its message classes from Kafka's own JSON message
definitions and serializes them with its own native reader and writer. Unlike kafka-python,
it has every RPC this project speaks, the KRaft ones included (Vote, BeginQuorumEpoch,
EndQuorumEpoch, FetchSnapshot, AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter), and every
version of each. For each (message, version) pair:

* our schema table has the same fields as kio's classes, in the same order, with the same
  Kafka types, nullability and tags;
* kio reads our encoding of a random body to the same values;
* kio's encoding of those values is our encoding, byte for byte;
* we decode kio's bytes back to the same body.

Whole frames are checked the same way: the header version kio picks for each api version,
the header and the body.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import types
import typing
import uuid as std_uuid
from collections.abc import Callable
from dataclasses import Field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft.protocol.codec import decode, encode
from kraft.protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kraft.protocol.schema import FieldSpec, MessageSpec, snake_case
from tests.protocol.schema_strategies import (
    REFERENCE_IDS,
    REFERENCE_VERSIONS,
    TEXT,
    message_class,
    message_strategy,
)

kio_serial = pytest.importorskip("kio.serial")
kio_errors = pytest.importorskip("kio.schema.errors")

_KIND = (("Request", "request"), ("Response", "response"))


def kio_class(spec: MessageSpec, version: int) -> type:
    """kio's class for `spec` at `version`."""
    for suffix, kind in _KIND:
        if spec.name.endswith(suffix):
            module = importlib.import_module(
                f"kio.schema.{snake_case(spec.name[: -len(suffix)])}.v{version}.{kind}")
            cls: type = getattr(module, spec.name)
            return cls
    raise AssertionError(f"{spec.name} is neither a request nor a response")


_KIO_TYPES = {"error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64",
              "datetime_i64": "int64"}
"""kio's richer types for plain Kafka ints: an error code enum, durations and timestamps."""


def _our_name(field: dataclasses.Field[Any]) -> str:
    """Our attribute for kio's field: kio models millisecond counts as `timedelta` and drops
    their `_ms` suffix (`throttle_time_ms` is its `throttle_time`), and writes `KRaft` as
    `k_raft`."""
    name = field.name.replace("k_raft", "kraft")  # its snake case of "KRaft"
    return f"{name}_ms" if _kio_type(field).startswith("timedelta") else name


def _kio_type(field: dataclasses.Field[Any]) -> str:
    return str(field.metadata.get("kafka_type", ""))


def _present(fields: tuple[FieldSpec, ...], version: int) -> list[FieldSpec]:
    return [fs for fs in fields if version in fs.versions]


def _entity(field: dataclasses.Field[Any]) -> type:
    """The entity class of a struct field or an array of structs (kio annotates them as
    `X`, `X | None`, `tuple[X, ...]` or `tuple[X, ...] | None`)."""
    hint: Any = field.type
    if isinstance(hint, types.UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is tuple:
        hint = typing.get_args(hint)[0]
    assert dataclasses.is_dataclass(hint), field.name
    return hint


# -- schema comparison ---------------------------------------------------------------


def _compare(cls: type, fields: tuple[FieldSpec, ...], version: int,
             where: str) -> None:
    ours = _present(fields, version)
    theirs = dataclasses.fields(cls)
    assert [fs.attr for fs in ours] == [_our_name(f) for f in theirs], where
    for fs, f in zip(ours, theirs):
        w = f"{where}.{fs.name}"
        meta, hint = f.metadata, str(f.type)
        assert hint.startswith("tuple[") == fs.is_array, w
        if fs.is_struct:
            assert "kafka_type" not in meta, w
            assert ("| None" in hint) == (version in fs.nullable), w
            _compare(_entity(f), fs.fields, version, w)
            continue
        assert _KIO_TYPES.get(meta["kafka_type"], meta["kafka_type"]) == fs.element_type, w
        if fs.type == "uuid":
            continue  # kio reads the zero uuid as None whether or not the field is nullable
        assert ("| None" in hint) == (version in fs.nullable), w
        tagged = version in fs.tagged and fs.tag is not None
        assert meta.get("tag") == (fs.tag if tagged else None), w


@pytest.mark.parametrize(("spec", "version"), REFERENCE_VERSIONS, ids=REFERENCE_IDS)
def test_schema_table_matches_kio(spec: MessageSpec, version: int) -> None:
    cls = kio_class(spec, version)
    assert cls.__api_key__ == spec.api_key
    assert cls.__flexible__ == (version in spec.flexible)
    _compare(cls, spec.fields, version, spec.name)


# -- values: ours -> kio's and back ------------------------------------------------------


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ERROR_CODES = [int(c.value) for c in kio_errors.ErrorCode]
_MAX_TIMEDELTA_MS = 999_999_999 * 86_400_000
_DATETIME_MS = (-62_135_596_800_000, 253_402_300_799_999)  # years 1 to 9999


def _to_kio_scalar(kio_type: str, value: Any) -> Any:
    if kio_type == "uuid":
        return None if value.bytes == bytes(16) else std_uuid.UUID(bytes=value.bytes)
    if kio_type in ("bytes", "records"):
        return bytes(value)
    if kio_type == "error_code":
        return kio_errors.ErrorCode(value)
    if kio_type.startswith("timedelta"):
        return datetime.timedelta(milliseconds=value)
    if kio_type == "datetime_i64":
        return _EPOCH + datetime.timedelta(milliseconds=value)
    return value


def _convert(cls: type, obj: Any, fields: tuple[FieldSpec, ...], version: int,
             scalar: Callable[[str, Any], Any],
             build: Callable[[type, Any, dict[tuple[FieldSpec, Field], Any]], Any]) -> Any:
    """Walk our message `obj` beside kio's class `cls`: each non-null scalar through
    `scalar(kio type, value)`, each struct the same way; `build(cls, obj, values)` makes the
    result from the values by (our field, kio's field)."""
    values: dict[tuple[FieldSpec, Field], Any] = {}
    for fs, f in zip(_present(fields, version), dataclasses.fields(cls)):
        val = getattr(obj, fs.attr)
        if val is not None:
            items = val if fs.is_array else [val]
            if fs.is_struct:
                done = [_convert(_entity(f), x, fs.fields, version, scalar, build) for x in items]
            else:
                done = [scalar(_kio_type(f), x) for x in items]
            val = done if fs.is_array else done[0]
        values[(fs, f)] = val
    return build(cls, obj, values)


def _kio_entity(cls: type, _obj: Any, values: dict[tuple[FieldSpec, Field], Any]) -> Any:
    return cls(**{f.name: tuple(v) if fs.is_array and v is not None else v
                  for (fs, f), v in values.items()})


def _to_kio(cls: type, obj: Any, fields: tuple[FieldSpec, ...], version: int) -> Any:
    """Our message as kio's entity of class `cls`."""
    return _convert(cls, obj, fields, version, _to_kio_scalar, _kio_entity)


def _within_kio(kio_type: str, v: Any) -> Any:
    """`v`, or a value kio can hold in its place: an error code of its enum, a duration or a
    timestamp within `datetime`'s range (on the wire each is any int of its width)."""
    if kio_type == "error_code" and v not in _ERROR_CODES:
        return _ERROR_CODES[v % len(_ERROR_CODES)]
    if kio_type == "timedelta_i64" and abs(v) >= _MAX_TIMEDELTA_MS:
        return v % _MAX_TIMEDELTA_MS
    if kio_type == "datetime_i64" and not _DATETIME_MS[0] <= v <= _DATETIME_MS[1]:
        return v % _DATETIME_MS[1]
    return v


def _kio_holdable(cls: type, obj: Any, fields: tuple[FieldSpec, ...], version: int) -> Any:
    """`obj` with every value kio cannot hold replaced by one it can (`_within_kio`)."""
    return _convert(cls, obj, fields, version, _within_kio,
                    lambda _cls, o, values: dataclasses.replace(
                        o, **{fs.attr: v for (fs, _f), v in values.items()}))


def _messages(spec: MessageSpec, version: int, kcls: type) -> st.SearchStrategy[Any]:
    """Random bodies of `spec` at `version` that kio can hold."""
    return message_strategy(spec, version, with_unknown=False).map(
        lambda msg: _kio_holdable(kcls, msg, spec.fields, version))


@pytest.mark.parametrize(("spec", "version"), REFERENCE_VERSIONS, ids=REFERENCE_IDS)
def test_bytes_equal_kio(spec: MessageSpec, version: int) -> None:
    cls = message_class(spec)
    kcls = kio_class(spec, version)
    reader = kio_serial.entity_reader(kcls)
    writer = kio_serial.entity_writer(kcls)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_messages(spec, version, kcls))
    def check(msg: Any) -> None:
        ours = encode(msg, version)
        theirs, size = reader(ours, 0)
        assert size == len(ours)
        assert theirs == _to_kio(kcls, msg, spec.fields, version)
        out = io.BytesIO()
        writer(out, theirs)
        assert out.getvalue() == ours
        assert decode(cls, out.getvalue(), version) == msg

    check()


# -- whole frames: header and body -------------------------------------------------------

CLIENT_IDS = st.one_of(st.none(), TEXT)


@pytest.mark.parametrize(("spec", "version"), REFERENCE_VERSIONS, ids=REFERENCE_IDS)
def test_frames_equal_kio(spec: MessageSpec, version: int) -> None:
    """A whole frame (size prefix, the header version kio's class names, the body) as kio
    writes it is ours, and we decode it."""
    kcls = kio_class(spec, version)
    hcls = kcls.__header_schema__
    is_request = spec.name.endswith("Request")

    @settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_messages(spec, version, kcls), st.integers(-(2**31), 2**31 - 1), CLIENT_IDS)
    def check(msg: Any, corr: int, client_id: str | None) -> None:
        if is_request:
            header = hcls(request_api_key=spec.api_key, request_api_version=version,
                          correlation_id=corr, client_id=client_id)
            ours = encode_request(RequestHeader(spec.api_key, version, corr, client_id), msg)
        else:
            header = hcls(correlation_id=corr)
            ours = encode_response(spec.api_key, version, corr, msg)
        out = io.BytesIO()
        kio_serial.entity_writer(hcls)(out, header)
        kio_serial.entity_writer(kcls)(out, _to_kio(kcls, msg, spec.fields, version))
        body = out.getvalue()
        assert ours == len(body).to_bytes(4, "big") + body
        if is_request:
            assert decode_request(ours, size_prefixed=True) == (
                RequestHeader(spec.api_key, version, corr, client_id), msg)
        else:
            got_header, got = decode_response(spec.api_key, version, ours, size_prefixed=True)
            assert (got_header.correlation_id, got) == (corr, msg)

    check()
