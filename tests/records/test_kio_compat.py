"""The KRaft control records against kio, an implementation generated from Kafka's own message
definitions (LeaderChangeMessage v0 and v1, SnapshotHeaderRecord, SnapshotFooterRecord,
KRaftVersionRecord, VotersRecord).

For random records of each type: kio reads our value bytes to the same fields, its encoding
of them is ours byte for byte, and we decode its bytes to the record we started from.
"""

from __future__ import annotations

import dataclasses
import io
import uuid as std_uuid
from typing import Any

import pytest
from hypothesis import given, settings

from kraft.protocol.uuid import Uuid
from kraft.records.control import (
    ControlRecord,
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    control_record_type,
    decode_control_value,
    encode_control_value,
)
from tests.records.test_control import any_control

kio_serial = pytest.importorskip("kio.serial")
from kio.schema.k_raft_version_record.v0 import data as kio_kraft_version  # noqa: E402
from kio.schema.leader_change_message.v0 import data as kio_leader_change_v0  # noqa: E402
from kio.schema.leader_change_message.v1 import data as kio_leader_change_v1  # noqa: E402
from kio.schema.snapshot_footer_record.v0 import data as kio_footer  # noqa: E402
from kio.schema.snapshot_header_record.v0 import data as kio_header  # noqa: E402
from kio.schema.voters_record.v0 import data as kio_voters  # noqa: E402


def _kio_uuid(u: Uuid | None) -> std_uuid.UUID | None:
    return None if u is None or u == Uuid.ZERO else std_uuid.UUID(bytes=u.bytes)


def _without_unknown_tags(value: Any) -> Any:
    """`value` with every `unknown_tags` emptied: kio's classes have no place for them."""
    if isinstance(value, tuple):
        return tuple(_without_unknown_tags(x) for x in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{
            f.name: () if f.name == "unknown_tags" else _without_unknown_tags(getattr(value, f.name))
            for f in dataclasses.fields(value) if f.init})
    return value


RECORDS = any_control.map(_without_unknown_tags)
"""Random control records of every type `test_control.py` generates, without unknown tags."""


def _lc_voters(module: Any, voters: tuple[LeaderChangeVoter, ...], v1: bool) -> Any:
    if v1:
        return tuple(module.Voter(voter_id=v.voter_id,
                                  voter_directory_id=_kio_uuid(v.voter_directory_id))
                     for v in voters)
    return tuple(module.Voter(voter_id=v.voter_id) for v in voters)


def as_kio(record: ControlRecord) -> Any:
    """`record` as kio's entity of the same message and schema version."""
    if isinstance(record, LeaderChangeMessage):
        v1 = record.version >= 1
        module = kio_leader_change_v1 if v1 else kio_leader_change_v0
        return module.LeaderChangeMessage(
            version=record.version, leader_id=record.leader_id,
            voters=_lc_voters(module, record.voters, v1),
            granting_voters=_lc_voters(module, record.granting_voters, v1))
    if isinstance(record, SnapshotHeaderRecord):
        return kio_header.SnapshotHeaderRecord(
            version=record.version, last_contained_log_timestamp=record.last_contained_log_timestamp)
    if isinstance(record, SnapshotFooterRecord):
        return kio_footer.SnapshotFooterRecord(version=record.version)
    if isinstance(record, KRaftVersionRecord):
        return kio_kraft_version.KRaftVersionRecord(
            version=record.version, k_raft_version=record.kraft_version)
    assert isinstance(record, VotersRecord)
    return kio_voters.VotersRecord(version=record.version, voters=tuple(
        kio_voters.Voter(
            voter_id=v.voter_id, voter_directory_id=_kio_uuid(v.voter_directory_id),
            endpoints=tuple(kio_voters.Endpoint(name=e.name, host=e.host, port=e.port)
                            for e in v.endpoints),
            k_raft_version_feature=kio_voters.KRaftVersionFeature(
                min_supported_version=v.kraft_version_feature.min_supported_version,
                max_supported_version=v.kraft_version_feature.max_supported_version))
        for v in record.voters))


@settings(max_examples=300, deadline=None)
@given(RECORDS)
def test_control_record_values_equal_kio(record: ControlRecord) -> None:
    theirs = as_kio(record)
    ours = encode_control_value(record)
    value, size = kio_serial.entity_reader(type(theirs))(ours, 0)
    assert size == len(ours)
    assert value == theirs
    out = io.BytesIO()
    kio_serial.entity_writer(type(theirs))(out, theirs)
    assert out.getvalue() == ours
    assert decode_control_value(control_record_type(record), out.getvalue()) == record

