"""Compact, readable renderings of events and messages for the simulator's traces."""

from __future__ import annotations

from dataclasses import fields, is_dataclass

from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft.messages import Endpoint, FetchedBatch, OffsetAndEpoch


def brief(obj: object, named: bool = True) -> str:
    """A compact, readable rendering of an event or message for traces."""
    if isinstance(obj, ErrorCode):
        return obj.name
    if isinstance(obj, Uuid):
        return str(obj)[:4]
    if isinstance(obj, OffsetAndEpoch):
        return f"{obj.offset}@{obj.epoch}"
    if isinstance(obj, Endpoint):
        return f"{obj.host}:{obj.port}"
    if isinstance(obj, tuple):
        if obj and all(isinstance(b, FetchedBatch) for b in obj):
            first, last = obj[0], obj[-1]
            assert isinstance(first, FetchedBatch) and isinstance(last, FetchedBatch)
            return f"[{first.base_offset}..{last.last_offset}]"
        return "(" + ",".join(brief(x) for x in obj) + ")"
    if is_dataclass(obj) and not isinstance(obj, type):
        parts = []
        for f in fields(obj):
            if f.name in ("unknown_tags", "cluster_id", "max_bytes"):
                continue
            v = getattr(obj, f.name)
            if v is None or v == () or v == b"":
                continue
            parts.append(f"{f.name}={brief(v)}")
        inner = " ".join(parts)
        return f"{type(obj).__name__}({inner})" if named else inner
    return repr(obj)
