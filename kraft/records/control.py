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
from dataclasses import dataclass, field
from typing import ClassVar

from kraft.protocol.uuid import Uuid

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
