"""Hypothesis strategies derived from the schema table, and the list of (message, version)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kraft.protocol import messages
from kraft.protocol.schema import MESSAGES, FieldSpec, MessageSpec
from kraft.protocol.uuid import Uuid

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
UUIDS = st.binary(min_size=16, max_size=16).map(Uuid)

MESSAGE_VERSIONS: list[tuple[MessageSpec, int]] = [
    (spec, v) for spec in MESSAGES for v in range(spec.valid.lo, spec.valid.hi + 1)
]
"""Every (message, version) pair the package supports."""

IDS = [f"{spec.name}-v{v}" for spec, v in MESSAGE_VERSIONS]

NEWER_THAN_REFERENCES = {("ApiVersionsRequest", 5), ("ApiVersionsResponse", 5)}
"""Versions newer than kio and kafka-python know (Kafka 4.4's); test_golden checks them
against bytes of Kafka 4.4.0's own codec instead."""

REFERENCE_VERSIONS = [(s, v) for s, v in MESSAGE_VERSIONS
                      if (s.name, v) not in NEWER_THAN_REFERENCES]
"""MESSAGE_VERSIONS that the reference codecs can check."""

REFERENCE_IDS = [f"{spec.name}-v{v}" for spec, v in REFERENCE_VERSIONS]


def message_class(spec: MessageSpec) -> type:
    """The generated dataclass of `spec`."""
    cls: type = getattr(messages, spec.class_name)
    return cls


def _scalar(fs: FieldSpec, t: str, version: int) -> st.SearchStrategy[Any]:
    nullable = version in fs.nullable
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        base: st.SearchStrategy[Any] = st.one_of(
            st.integers(lo, hi), st.sampled_from([x for x in (lo, hi, -1, 0, 1) if lo <= x <= hi])
        )
    elif t == "bool":
        base = st.booleans()
    elif t == "float64":
        base = st.floats(allow_nan=False)
    elif t == "uuid":
        base = st.one_of(UUIDS, st.just(Uuid.ZERO))
    elif t == "string":
        base = TEXT
    elif t in ("bytes", "records"):
        base = st.binary(max_size=40)
    else:
        raise AssertionError(t)
    if nullable:
        base = st.one_of(st.none(), base)
    return base


def _unknown_tags(flexible: bool, with_unknown: bool) -> st.SearchStrategy[dict[int, bytes]]:
    if not (flexible and with_unknown):
        return st.just({})
    return st.dictionaries(st.integers(10, 300), st.binary(max_size=6), max_size=2)


def struct_strategy(
    top: type,
    cls: type,
    fields: tuple[FieldSpec, ...],
    version: int,
    flexible: bool,
    with_unknown: bool,
    depth: int = 0,
) -> st.SearchStrategy[Any]:
    """Instances of `cls` whose fields present at `version` are random, the rest default."""
    kw: dict[str, st.SearchStrategy[Any]] = {}
    size = 2 if depth < 2 else 1
    for fs in fields:
        if version not in fs.versions:
            continue
        if fs.is_struct:
            sub = struct_strategy(top, getattr(top, fs.struct_name), fs.fields, version,
                                  flexible, with_unknown, depth + 1)
            if fs.is_array:
                s: st.SearchStrategy[Any] = st.lists(sub, max_size=size)
                if version in fs.nullable:
                    s = st.one_of(st.none(), s)
            else:
                s = sub
        elif fs.is_array:
            s = st.lists(_scalar(fs, fs.element_type, -1), max_size=size)
            if version in fs.nullable:
                s = st.one_of(st.none(), s)
        else:
            s = _scalar(fs, fs.type, version)
        kw[fs.attr] = s
    kw["unknown_tagged_fields"] = _unknown_tags(flexible, with_unknown)
    return st.builds(cls, **kw)


def message_strategy(
    spec: MessageSpec, version: int, with_unknown: bool = True
) -> st.SearchStrategy[Any]:
    """Random bodies of `spec` valid for `version`."""
    top = message_class(spec)
    return struct_strategy(top, top, spec.fields, version, version in spec.flexible,
                           with_unknown)
