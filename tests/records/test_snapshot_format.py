"""Snapshot file bytes: layout as Kafka writes it, and every rule `read_snapshot` enforces."""

from __future__ import annotations

import pytest

from kraft.protocol.errors import CorruptRecordError, TruncatedInputError
from kraft.protocol.uuid import Uuid
from kraft.records.batch import RecordBatch, build_batch, iter_batches, rebase
from kraft.records.control import (
    ControlRecordType,
    Endpoint,
    KRaftVersionFeature,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    Voter,
    VotersRecord,
    build_control_batch,
    decode_control_batch,
)
from kraft.records.snapshot_format import build_snapshot, iter_snapshot_batches, read_snapshot

VOTERS = VotersRecord(
    (
        Voter(
            1, Uuid(b"\x01" * 16), (Endpoint("CONTROLLER", "a", 9093),), KRaftVersionFeature(0, 1)
        ),
        Voter(
            2, Uuid(b"\x02" * 16), (Endpoint("CONTROLLER", "b", 9093),), KRaftVersionFeature(0, 1)
        ),
    )
)


def test_layout_with_kraft_version_1() -> None:
    snap = build_snapshot(
        7, 1234, [[b"a", b"b"], [b"c"]], timestamp_ms=99, kraft_version=1, voters=VOTERS
    )
    batches = list(iter_batches(snap))
    assert [b.is_control for b in batches] == [True, False, False, True]
    assert [b.base_offset for b in batches] == [0, 3, 5, 6]
    assert {b.partition_leader_epoch for b in batches} == {7}
    assert decode_control_batch(batches[0]) == [
        SnapshotHeaderRecord(1234),
        KRaftVersionRecord(1),
        VOTERS,
    ]
    assert decode_control_batch(batches[-1]) == [SnapshotFooterRecord()]
    got = read_snapshot(snap, expected_epoch=7)
    assert got.header == SnapshotHeaderRecord(1234)
    assert got.kraft_version == KRaftVersionRecord(1) and got.voters == VOTERS
    assert list(got.values()) == [b"a", b"b", b"c"]
    assert [r.offset for r in got.records()] == [3, 4, 5]
    assert got.record_count == 7 and got.epoch == 7
    assert got.control_records == (
        SnapshotHeaderRecord(1234),
        KRaftVersionRecord(1),
        VOTERS,
        SnapshotFooterRecord(),
    )


def test_kraft_version_0_has_only_the_header() -> None:
    snap = build_snapshot(2, 5, [], timestamp_ms=0, voters=VOTERS)
    batches = list(iter_batches(snap))
    assert len(batches) == 2
    assert decode_control_batch(batches[0]) == [SnapshotHeaderRecord(5)]
    got = read_snapshot(snap)
    assert got.kraft_version is None and got.voters is None and got.data_batches == ()


def test_streaming_equals_whole() -> None:
    data = [[b"x" * 10] * 4, [b"y"]]
    assert b"".join(iter_snapshot_batches(1, 2, data, timestamp_ms=3)) == build_snapshot(
        1, 2, data, timestamp_ms=3
    )


def _parts() -> list[bytes]:
    return list(iter_snapshot_batches(4, 0, [[b"a"], [b"b"]], timestamp_ms=0))


def test_missing_footer() -> None:
    with pytest.raises(CorruptRecordError, match="without a SNAPSHOT_FOOTER"):
        read_snapshot(b"".join(_parts()[:-1]))


def test_header_must_come_first() -> None:
    parts = _parts()
    with pytest.raises(CorruptRecordError, match="not a control batch"):
        read_snapshot(b"".join([rebase(parts[1], 0), rebase(parts[2], 1), rebase(parts[3], 2)]))
    wrong_first = build_control_batch(0, 4, 0, [KRaftVersionRecord(1)])
    with pytest.raises(CorruptRecordError, match="not SNAPSHOT_HEADER"):
        read_snapshot(b"".join([wrong_first, *parts[1:]]))


def test_nothing_after_footer() -> None:
    parts = _parts()
    extra = build_batch(4, 4, [b"late"], 0)
    with pytest.raises(CorruptRecordError, match="SNAPSHOT_FOOTER is not the last record"):
        read_snapshot(b"".join([*parts, extra]))


def test_offsets_must_be_contiguous_from_zero() -> None:
    parts = _parts()
    with pytest.raises(CorruptRecordError, match="expected 2"):
        read_snapshot(b"".join([parts[0], parts[1], rebase(parts[2], 5), parts[3]]))


def test_epoch_must_match() -> None:
    snap = b"".join(_parts())
    with pytest.raises(CorruptRecordError, match="snapshot epoch 5"):
        read_snapshot(snap, expected_epoch=5)
    mixed = _parts()
    mixed[1] = build_batch(1, 3, [b"a"], 0)
    with pytest.raises(CorruptRecordError, match="epoch 3"):
        read_snapshot(b"".join(mixed))


def test_crc_is_checked() -> None:
    snap = bytearray(b"".join(_parts()))
    snap[len(_parts()[0]) + 65] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        read_snapshot(snap)


def test_empty_and_partial() -> None:
    with pytest.raises(TruncatedInputError):
        read_snapshot(b"")
    snap = b"".join(_parts())
    with pytest.raises(TruncatedInputError):
        read_snapshot(snap[:-3])


def test_footer_must_be_last_record() -> None:
    parts = _parts()
    bad_footer = build_control_batch(3, 4, 0, [SnapshotFooterRecord(), KRaftVersionRecord(1)])
    with pytest.raises(CorruptRecordError, match="not the last record"):
        read_snapshot(b"".join([*parts[:-1], bad_footer]))
    assert RecordBatch.parse(bad_footer).records_count == 2
    assert ControlRecordType.SNAPSHOT_FOOTER == 4
