"""Just enough of Kubernetes' protobuf encoding to read what `kubectl create` sends.

`kubectl create namespace|configmap|secret|serviceaccount` encodes its request body as
protobuf (`application/vnd.kubernetes.protobuf`: the magic `k8s\\0`, then a
`runtime.Unknown` holding the type and the object's bytes) and does not fall back to JSON.
This module decodes those four kinds (the metadata's name, generateName, namespace, labels
and annotations, and the kinds' data fields) into the JSON form; anything else is refused
with a message that names `kubectl apply`, which always sends JSON.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"

Obj = dict[str, Any]


class ProtobufError(ValueError):
    """A protobuf body the sandbox cannot read."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of a message: ints for varints, bytes for length-delimited."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            size, pos = _varint(data, pos)
            out.append((number, data[pos:pos + size]))
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _map_entry(value: int | bytes) -> tuple[str, bytes]:
    key, val = "", b""
    for number, item in fields(value if isinstance(value, bytes) else b""):
        if number == 1:
            key = _text(item)
        elif number == 2 and isinstance(item, bytes):
            val = item
    return key, val


def _metadata(data: bytes) -> Obj:
    meta: Obj = {}
    names = {1: "name", 2: "generateName", 3: "namespace"}
    for number, value in fields(data):
        if number in names:
            meta[names[number]] = _text(value)
        elif number in (11, 12):
            key, val = _map_entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = val.decode()
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


def _object(kind: str, data: bytes) -> Obj:
    obj: Obj = {}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _metadata(value)
        elif kind == "ConfigMap" and number in (2, 3):
            key, val = _map_entry(value)
            if number == 2:
                obj.setdefault("data", {})[key] = val.decode()
            else:
                obj.setdefault("binaryData", {})[key] = base64.b64encode(val).decode()
        elif kind == "Secret" and number in (2, 4):
            key, val = _map_entry(value)
            if number == 2:
                obj.setdefault("data", {})[key] = base64.b64encode(val).decode()
            else:
                obj.setdefault("stringData", {})[key] = val.decode()
        elif kind == "Secret" and number == 3:
            obj["type"] = _text(value)
        elif kind in ("ConfigMap", "Secret") and number in (4, 5) and isinstance(value, int):
            obj["immutable"] = bool(value)
    return obj


KINDS = ("Namespace", "ConfigMap", "Secret", "ServiceAccount")


def decode(body: bytes) -> Obj:
    """The JSON form of a protobuf-encoded Namespace, ConfigMap, Secret or ServiceAccount."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (no k8s\\0 prefix)")
    api_version = kind = ""
    raw = b""
    for number, value in fields(body[len(MAGIC):]):
        if number == 1 and isinstance(value, bytes):
            for sub, item in fields(value):
                if sub == 1:
                    api_version = _text(item)
                elif sub == 2:
                    kind = _text(item)
        elif number == 2 and isinstance(value, bytes):
            raw = value
    if kind not in KINDS:
        raise ProtobufError(f"the sandbox reads protobuf bodies of {', '.join(KINDS)} only, "
                            f"not {kind or 'this kind'}: use kubectl apply (JSON)")
    obj = _object(kind, raw)
    obj["apiVersion"], obj["kind"] = api_version or "v1", kind
    obj.setdefault("metadata", {})
    return obj
