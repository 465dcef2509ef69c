"""KRaft control records: the record types, their value messages, and their encoding.

A control record lives in a record batch whose control attribute bit is set. Its key is four
bytes, `int16 version (0)` then `int16 type`; its value is one of the messages below, encoded
with the message's flexible schema (compact strings and arrays, and a tagged-fields section at
the end of every struct). Tagged fields this module does not know are kept, in order, in each
struct's `unknown_tags` so that a decoded record re-encodes to the same bytes.

The dataclasses are frozen, slotted and hashable (sequences are tuples). Each value message has
a `version` field: it is written as the message's leading `Version int16` and, for
LeaderChangeMessage, also selects the schema version (directory ids exist only in v1). Kafka
4.1 writes every control record at version 0.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from kraft.protocol.errors import CorruptRecordError, ProtocolError
from kraft.protocol.primitives import Reader, Writer
from kraft.protocol.uuid import Uuid
from kraft.records.batch import Record, RecordBatch, build_batch

TaggedFields = tuple[tuple[int, bytes], ...]
"""Unknown tagged fields of one struct: (tag, raw value bytes), in wire order."""


class ControlRecordType(enum.IntEnum):
    """The `type` in a control record's key (Kafka's `ControlRecordType`)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class LeaderChangeVoter:
    """One voter listed in a LeaderChangeMessage; the directory id exists on the wire only in v1."""

    voter_id: int
    voter_directory_id: Uuid | None = None
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """LEADER_CHANGE (2): written by a new leader as the first record of its epoch.

    `voters` are all voters of the epoch, `granting_voters` those that granted the vote.
    """

    record_type: ClassVar[ControlRecordType] = ControlRecordType.LEADER_CHANGE

    leader_id: int
    voters: tuple[LeaderChangeVoter, ...] = ()
    granting_voters: tuple[LeaderChangeVoter, ...] = ()
    version: int = field(default=0, kw_only=True)
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class SnapshotHeaderRecord:
    """SNAPSHOT_HEADER (3): the first record of every snapshot."""

    record_type: ClassVar[ControlRecordType] = ControlRecordType.SNAPSHOT_HEADER

    last_contained_log_timestamp: int
    version: int = field(default=0, kw_only=True)
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class SnapshotFooterRecord:
    """SNAPSHOT_FOOTER (4): the last record of every snapshot."""

    record_type: ClassVar[ControlRecordType] = ControlRecordType.SNAPSHOT_FOOTER

    version: int = field(default=0, kw_only=True)
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class KRaftVersionRecord:
    """KRAFT_VERSION (5): the finalized kraft.version feature level."""

    record_type: ClassVar[ControlRecordType] = ControlRecordType.KRAFT_VERSION

    kraft_version: int
    version: int = field(default=0, kw_only=True)
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a voter: listener name, host and port (uint16 on the wire)."""

    name: str
    host: str
    port: int
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class KRaftVersionFeature:
    """The kraft.version range a voter supports."""

    min_supported_version: int
    max_supported_version: int
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class Voter:
    """One voter of a VotersRecord: id, directory id, endpoints and supported kraft.version."""

    voter_id: int
    voter_directory_id: Uuid
    endpoints: tuple[Endpoint, ...]
    kraft_version_feature: KRaftVersionFeature
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class VotersRecord:
    """KRAFT_VOTERS (6): the complete voters set (KIP-853) as of this record."""

    record_type: ClassVar[ControlRecordType] = ControlRecordType.KRAFT_VOTERS

    voters: tuple[Voter, ...]
    version: int = field(default=0, kw_only=True)
    unknown_tags: TaggedFields = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class UnknownControlRecord:
    """A control record this module does not decode (ABORT, COMMIT, or an unknown type id).

    Kept as raw key and value so a reader can skip it, as Kafka's raft layer does.
    """

    type_id: int
    key: bytes
    value: bytes | None


ControlRecord = (
    LeaderChangeMessage
    | SnapshotHeaderRecord
    | SnapshotFooterRecord
    | KRaftVersionRecord
    | VotersRecord
    | UnknownControlRecord
)
"""Any decoded control record."""


# ----------------------------------------------------------------------------- encoding

_KEY = struct.Struct(">hh")
CONTROL_KEY_VERSION = 0
"""The version written in every control record key."""


def encode_control_key(record_type: int) -> bytes:
    """The 4-byte key of a control record: int16 version 0, int16 type."""
    return _KEY.pack(CONTROL_KEY_VERSION, int(record_type))


def _tags(w: Writer, unknown: TaggedFields) -> None:
    w.tagged_fields(dict(unknown))


def _leader_change_voters(
    w: Writer, voters: tuple[LeaderChangeVoter, ...], schema: int, field_name: str
) -> None:
    w.compact_array_length(len(voters))
    for v in voters:
        w.int32(v.voter_id)
        if schema >= 1:
            w.uuid(v.voter_directory_id if v.voter_directory_id is not None else Uuid.ZERO)
        elif v.voter_directory_id is not None and not v.voter_directory_id.is_zero():
            raise ValueError(
                f"LeaderChangeMessage v0 cannot carry {field_name} directory ids "
                f"(voter {v.voter_id}); use version=1"
            )
        _tags(w, v.unknown_tags)


def _write_value(w: Writer, record: ControlRecord) -> None:
    if isinstance(record, LeaderChangeMessage):
        schema = 1 if record.version >= 1 else 0
        w.int16(record.version)
        w.int32(record.leader_id)
        _leader_change_voters(w, record.voters, schema, "voters")
        _leader_change_voters(w, record.granting_voters, schema, "granting_voters")
    elif isinstance(record, SnapshotHeaderRecord):
        w.int16(record.version)
        w.int64(record.last_contained_log_timestamp)
    elif isinstance(record, SnapshotFooterRecord):
        w.int16(record.version)
    elif isinstance(record, KRaftVersionRecord):
        w.int16(record.version)
        w.int16(record.kraft_version)
    elif isinstance(record, VotersRecord):
        w.int16(record.version)
        w.compact_array_length(len(record.voters))
        for voter in record.voters:
            w.int32(voter.voter_id)
            w.uuid(voter.voter_directory_id)
            w.compact_array_length(len(voter.endpoints))
            for ep in voter.endpoints:
                if not 0 <= ep.port <= 0xFFFF:
                    raise ValueError(f"voter {voter.voter_id} endpoint {ep.name!r}: port {ep.port}")
                w.compact_string(ep.name)
                w.compact_string(ep.host)
                w.uint16(ep.port)
                _tags(w, ep.unknown_tags)
            feature = voter.kraft_version_feature
            w.int16(feature.min_supported_version)
            w.int16(feature.max_supported_version)
            _tags(w, feature.unknown_tags)
            _tags(w, voter.unknown_tags)
    else:
        raise TypeError(f"not an encodable control record: {type(record).__name__}")
    _tags(w, record.unknown_tags)


def encode_control_value(record: ControlRecord) -> bytes:
    """The value bytes of a control record (its message in flexible schema encoding).

    An UnknownControlRecord yields its raw value unchanged. Raises ValueError for a field
    out of its wire range (e.g. a port above 65535, an int16 above 32767).
    """
    if isinstance(record, UnknownControlRecord):
        return record.value if record.value is not None else b""
    w = Writer()
    try:
        _write_value(w, record)
    except struct.error as exc:
        raise ValueError(f"{type(record).__name__}: field out of range: {exc}") from None
    return w.getvalue()


def control_record_type(record: ControlRecord) -> int:
    """The type id written in the key of `record`."""
    if isinstance(record, UnknownControlRecord):
        return record.type_id
    return int(record.record_type)


def build_control_batch(
    base_offset: int,
    epoch: int,
    timestamp_ms: int,
    records: Sequence[ControlRecord],
) -> bytes:
    """A control batch (control bit set) holding `records`, each stamped `timestamp_ms`.

    `epoch` is the partition leader epoch (the leader's epoch, or the snapshot's epoch
    inside a snapshot). This is what Kafka writes at the start of an epoch (LeaderChange
    [+ KRaftVersion + Voters]), on a voter change, and at either end of a snapshot.
    """
    built = [
        Record(
            base_offset + i,
            timestamp_ms,
            record.key
            if isinstance(record, UnknownControlRecord)
            else encode_control_key(record.record_type),
            record.value
            if isinstance(record, UnknownControlRecord)
            else encode_control_value(record),
        )
        for i, record in enumerate(records)
    ]
    return build_batch(base_offset, epoch, built, timestamp_ms, control=True)


# ----------------------------------------------------------------------------- decoding


def _read_tags(r: Reader, where: str) -> TaggedFields:
    return tuple(sorted(r.tagged_fields(where).items()))


def _read_leader_change_voters(r: Reader, schema: int, name: str) -> tuple[LeaderChangeVoter, ...]:
    # each voter is at least an int32 id + an empty tag section
    n = r.compact_array_length(name, min_element_size=5)
    if n < 0:
        raise r.malformed(name, "null in a non-nullable array")
    out: list[LeaderChangeVoter] = []
    for _ in range(n):
        voter_id = r.int32(f"{name}.voter_id")
        directory: Uuid | None = None
        if schema >= 1:
            u = r.uuid(f"{name}.voter_directory_id")
            directory = None if u.is_zero() else u
        out.append(LeaderChangeVoter(voter_id, directory, unknown_tags=_read_tags(r, name)))
    return tuple(out)


def _read_value(record_type: ControlRecordType, value: bytes) -> ControlRecord:
    if record_type is ControlRecordType.LEADER_CHANGE:
        r = Reader(value, context="LeaderChangeMessage")
        version = r.int16("version")
        schema = 1 if version >= 1 else 0
        r.context = f"LeaderChangeMessage v{schema}"
        leader_id = r.int32("leader_id")
        voters = _read_leader_change_voters(r, schema, "voters")
        granting = _read_leader_change_voters(r, schema, "granting_voters")
        return LeaderChangeMessage(
            leader_id, voters, granting, version=version, unknown_tags=_read_tags(r, "tags")
        )
    if record_type is ControlRecordType.SNAPSHOT_HEADER:
        r = Reader(value, context="SnapshotHeaderRecord v0")
        version = r.int16("version")
        ts = r.int64("last_contained_log_timestamp")
        return SnapshotHeaderRecord(ts, version=version, unknown_tags=_read_tags(r, "tags"))
    if record_type is ControlRecordType.SNAPSHOT_FOOTER:
        r = Reader(value, context="SnapshotFooterRecord v0")
        version = r.int16("version")
        return SnapshotFooterRecord(version=version, unknown_tags=_read_tags(r, "tags"))
    if record_type is ControlRecordType.KRAFT_VERSION:
        r = Reader(value, context="KRaftVersionRecord v0")
        version = r.int16("version")
        level = r.int16("kraft_version")
        return KRaftVersionRecord(level, version=version, unknown_tags=_read_tags(r, "tags"))
    if record_type is ControlRecordType.KRAFT_VOTERS:
        r = Reader(value, context="VotersRecord v0")
        version = r.int16("version")
        # a voter is at least id(4) + uuid(16) + endpoints(1) + feature(4+1) + tags(1)
        n = r.compact_array_length("voters", min_element_size=27)
        if n < 0:
            raise r.malformed("voters", "null in a non-nullable array")
        voter_list: list[Voter] = []
        for _ in range(n):
            voter_id = r.int32("voters.voter_id")
            directory = r.uuid("voters.voter_directory_id")
            m = r.compact_array_length("voters.endpoints", min_element_size=5)
            if m < 0:
                raise r.malformed("voters.endpoints", "null in a non-nullable array")
            endpoints: list[Endpoint] = []
            for _ in range(m):
                name = r.compact_string("voters.endpoints.name")
                host = r.compact_string("voters.endpoints.host")
                port = r.uint16("voters.endpoints.port")
                endpoints.append(
                    Endpoint(name, host, port, unknown_tags=_read_tags(r, "voters.endpoints"))
                )
            lo = r.int16("voters.kraft_version_feature.min_supported_version")
            hi = r.int16("voters.kraft_version_feature.max_supported_version")
            feature = KRaftVersionFeature(
                lo, hi, unknown_tags=_read_tags(r, "voters.kraft_version_feature")
            )
            voter_list.append(
                Voter(
                    voter_id,
                    directory,
                    tuple(endpoints),
                    feature,
                    unknown_tags=_read_tags(r, "voters"),
                )
            )
        return VotersRecord(tuple(voter_list), version=version, unknown_tags=_read_tags(r, "tags"))
    raise AssertionError(record_type)  # pragma: no cover - callers pass decodable types only


_DECODABLE = frozenset(
    {
        ControlRecordType.LEADER_CHANGE,
        ControlRecordType.SNAPSHOT_HEADER,
        ControlRecordType.SNAPSHOT_FOOTER,
        ControlRecordType.KRAFT_VERSION,
        ControlRecordType.KRAFT_VOTERS,
    }
)


def parse_control_key(key: bytes | None, where: str = "control record") -> int:
    """The type id from a control record key; raises CorruptRecordError for a bad key.

    Like Kafka, any non-negative key version is read as version 0 and bytes after the first
    four are ignored.
    """
    if key is None or len(key) < 4:
        raise CorruptRecordError(
            f"{where}: key must be at least 4 bytes, got {'null' if key is None else len(key)}"
        )
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"{where}: invalid control key version {version}")
    return int(type_id)


def decode_control_value(type_id: int, value: bytes | None, key: bytes = b"") -> ControlRecord:
    """Decode a control record value of type `type_id`.

    ABORT, COMMIT and unknown type ids give an UnknownControlRecord (carrying `key` and the
    value). A known type with a null or malformed value raises a ProtocolError subclass
    (CorruptRecordError, TruncatedInputError or MalformedInputError). Bytes after the message
    are ignored, as Kafka's reader does.
    """
    try:
        record_type = ControlRecordType(type_id)
    except ValueError:
        return UnknownControlRecord(type_id, key, value)
    if record_type not in _DECODABLE:
        return UnknownControlRecord(type_id, key, value)
    if value is None:
        raise CorruptRecordError(f"control record {record_type.name}: null value")
    return _read_value(record_type, value)


def decode_control_record(record: Record) -> ControlRecord:
    """Decode one record of a control batch (type from the key, message from the value)."""
    where = f"control record at offset {record.offset}"
    type_id = parse_control_key(record.key, where)
    key = record.key if record.key is not None else b""
    try:
        return decode_control_value(type_id, record.value, key)
    except ProtocolError as exc:
        raise type(exc)(f"{where}: {exc}") from None


def decode_control_batch(batch: RecordBatch) -> list[ControlRecord]:
    """Decode every record of a control batch; raises CorruptRecordError if not a control batch."""
    if not batch.is_control:
        raise CorruptRecordError(f"batch at base offset {batch.base_offset} is not a control batch")
    return [decode_control_record(rec) for rec in batch.records()]
