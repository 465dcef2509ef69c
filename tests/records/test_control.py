"""Control records: hand-derived value bytes, round-trips, unknown tags and types, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.protocol.errors import CorruptRecordError, ProtocolError, TruncatedInputError
from kraft.protocol.uuid import Uuid
from kraft.records.batch import Record, RecordBatch, build_batch
from kraft.records.control import (
    ControlRecord,
    ControlRecordType,
    Endpoint,
    KRaftVersionFeature,
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    UnknownControlRecord,
    Voter,
    VotersRecord,
    build_control_batch,
    control_record_type,
    decode_control_batch,
    decode_control_record,
    decode_control_value,
    encode_control_key,
    encode_control_value,
)

DIR1 = Uuid(bytes(range(1, 17)))
DIR1_HEX = "0102030405060708090a0b0c0d0e0f10"

GOLDEN: list[tuple[ControlRecord, str]] = [
    (
        LeaderChangeMessage(
            1, (LeaderChangeVoter(1), LeaderChangeVoter(2)), (LeaderChangeVoter(1),)
        ),
        "0000"  # Version 0
        "00000001"  # LeaderId 1
        "03"  # Voters: compact array of 2
        "00000001"
        "00"  # VoterId 1, no tags
        "00000002"
        "00"  # VoterId 2, no tags
        "02"  # GrantingVoters: 1
        "00000001"
        "00"
        "00",  # no top-level tags
    ),
    (
        LeaderChangeMessage(3, (LeaderChangeVoter(3, DIR1),), (), version=1),
        "0001000000030200000003" + DIR1_HEX + "000100",
    ),
    (SnapshotHeaderRecord(123), "0000000000000000007b00"),
    (SnapshotFooterRecord(), "000000"),
    (KRaftVersionRecord(1), "0000000100"),
    (
        VotersRecord(
            (
                Voter(
                    1,
                    DIR1,
                    (Endpoint("CONTROLLER", "localhost", 9093),),
                    KRaftVersionFeature(0, 1),
                ),
            )
        ),
        "0000"  # Version
        "02"  # 1 voter
        "00000001" + DIR1_HEX + "02"  # VoterId, VoterDirectoryId, 1 endpoint
        "0b"
        "434f4e54524f4c4c4552"  # Name "CONTROLLER"
        "0a"
        "6c6f63616c686f7374"  # Host "localhost"
        "2385"
        "00"  # Port 9093 (uint16), endpoint tags
        "0000"
        "0001"
        "00"  # KRaftVersionFeature 0..1, its tags
        "00"  # voter tags
        "00",  # top-level tags
    ),
]


@pytest.mark.parametrize(("record", "wire"), GOLDEN, ids=lambda x: type(x).__name__)
def test_golden_values(record: ControlRecord, wire: str) -> None:
    assert encode_control_value(record).hex() == wire
    assert decode_control_value(control_record_type(record), bytes.fromhex(wire)) == record


def test_keys() -> None:
    assert encode_control_key(ControlRecordType.LEADER_CHANGE) == bytes.fromhex("00000002")
    assert encode_control_key(ControlRecordType.KRAFT_VOTERS) == bytes.fromhex("00000006")


def test_control_batch_round_trip_and_layout() -> None:
    recs = [g[0] for g in GOLDEN]
    raw = build_control_batch(50, 9, 4242, recs)
    batch = RecordBatch.parse(raw)
    batch.validate(records=True)
    assert batch.is_control and batch.attributes == 0x20
    assert batch.partition_leader_epoch == 9 and batch.base_timestamp == 4242
    inner = list(batch.records())
    assert [r.key for r in inner] == [encode_control_key(control_record_type(r)) for r in recs]
    assert [r.value.hex() if r.value else None for r in inner] == [g[1] for g in GOLDEN]
    assert all(r.timestamp == 4242 and r.headers == () for r in inner)
    assert decode_control_batch(batch) == recs


def test_decode_control_batch_rejects_data_batch() -> None:
    with pytest.raises(CorruptRecordError, match="not a control batch"):
        decode_control_batch(RecordBatch.parse(build_batch(0, 0, [b"x"], 0)))


def test_unknown_tags_are_kept_and_rewritten() -> None:
    # Endpoint with tag 3 = b"\xaa\xbb", voter with tag 0 = b"", top level tags 1 and 7
    wire = bytes.fromhex(
        "0000"
        "02"
        "00000001" + DIR1_HEX + "02"  # version, 1 voter, id, dir id, 1 endpoint
        "0243"
        "0268"
        "0001"  # name "C", host "h", port 1
        "01"
        "03"
        "02"
        "aabb"  # endpoint tags: one, tag 3, 2 bytes
        "0000"
        "0001"
        "00"  # feature 0..1, no tags
        "01"
        "00"
        "00"  # voter tags: one, tag 0, empty
        "02"
        "01"
        "01"
        "ff"
        "07"
        "00"  # top-level tags: tag 1 = ff, tag 7 = empty
    )
    rec = decode_control_value(ControlRecordType.KRAFT_VOTERS, wire)
    assert isinstance(rec, VotersRecord)
    voter = rec.voters[0]
    assert voter.endpoints[0].unknown_tags == ((3, b"\xaa\xbb"),)
    assert voter.unknown_tags == ((0, b""),)
    assert rec.unknown_tags == ((1, b"\xff"), (7, b""))
    assert encode_control_value(rec) == wire


def test_unknown_and_transaction_types_are_placeholders() -> None:
    for type_id in (0, 1, 7, 300, -2):
        key = bytes.fromhex("0000") + type_id.to_bytes(2, "big", signed=True)
        got = decode_control_record(Record(10, 0, key, b"\x01\x02", ()))
        assert got == UnknownControlRecord(type_id, key, b"\x01\x02")
    # placeholders can be written back unchanged
    raw = build_control_batch(0, 0, 0, [UnknownControlRecord(77, b"\x00\x00\x00\x4d", b"zz")])
    rec = next(RecordBatch.parse(raw).records())
    assert (rec.key, rec.value) == (b"\x00\x00\x00\x4d", b"zz")


def test_key_version_is_not_checked_beyond_sign_and_extra_key_bytes_are_ignored() -> None:
    value = encode_control_value(SnapshotFooterRecord())
    assert decode_control_record(Record(0, 0, b"\x00\x05\x00\x04\xff", value, ())) == (
        SnapshotFooterRecord()
    )


@pytest.mark.parametrize(
    "key", [None, b"", b"\x00\x00\x00", b"\xff\xff\x00\x02"], ids=["null", "0", "3", "neg"]
)
def test_bad_keys(key: bytes | None) -> None:
    with pytest.raises(CorruptRecordError, match="offset 12"):
        decode_control_record(Record(12, 0, key, b"\x00\x00\x00", ()))


def test_null_value_for_known_type() -> None:
    with pytest.raises(CorruptRecordError):
        decode_control_record(Record(0, 0, encode_control_key(4), None, ()))


@pytest.mark.parametrize(("record", "wire"), GOLDEN, ids=lambda x: type(x).__name__)
def test_every_strict_prefix_is_rejected(record: ControlRecord, wire: str) -> None:
    raw = bytes.fromhex(wire)
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            decode_control_value(control_record_type(record), raw[:cut])


def test_trailing_bytes_are_ignored_like_kafka() -> None:
    raw = encode_control_value(KRaftVersionRecord(1)) + b"\x99\x98"
    assert decode_control_value(5, raw) == KRaftVersionRecord(1)


def test_hostile_array_counts_fail_before_allocating() -> None:
    # 2**32-2 voters announced in a 10-byte value
    with pytest.raises(TruncatedInputError):
        decode_control_value(6, bytes.fromhex("0000ffffffff0f") + b"\x00" * 4)
    with pytest.raises(TruncatedInputError):
        decode_control_value(2, bytes.fromhex("000000000001ffffffff0f"))


def test_null_arrays_are_malformed() -> None:
    with pytest.raises(ProtocolError, match="null"):
        decode_control_value(2, bytes.fromhex("000000000001000100"))


def test_encode_rejects_out_of_range_fields() -> None:
    ep = Endpoint("C", "h", 70000)
    with pytest.raises(ValueError, match="port"):
        encode_control_value(VotersRecord((Voter(1, DIR1, (ep,), KRaftVersionFeature(0, 1)),)))
    with pytest.raises(ValueError):
        encode_control_value(KRaftVersionRecord(40000))
    with pytest.raises(ValueError, match="version=1"):
        encode_control_value(LeaderChangeMessage(1, (LeaderChangeVoter(1, DIR1),)))


def test_records_are_hashable() -> None:
    recs = {g[0] for g in GOLDEN}
    assert len(recs) == len(GOLDEN)


# ----------------------------------------------------------------------------- properties

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
uuids = st.binary(min_size=16, max_size=16).map(Uuid)
nonzero_uuids = uuids.filter(lambda u: not u.is_zero())
tags = st.dictionaries(st.integers(0, 2**31), st.binary(max_size=8), max_size=3).map(
    lambda d: tuple(sorted(d.items()))
)
names = st.text(max_size=12)


def lc_voter(v1: bool) -> st.SearchStrategy[LeaderChangeVoter]:
    return st.builds(
        LeaderChangeVoter,
        i32,
        (st.none() | nonzero_uuids) if v1 else st.none(),
        unknown_tags=tags,
    )


leader_change = st.integers(0, 1).flatmap(
    lambda v: st.builds(
        LeaderChangeMessage,
        i32,
        st.lists(lc_voter(v == 1), max_size=5).map(tuple),
        st.lists(lc_voter(v == 1), max_size=5).map(tuple),
        version=st.just(v),
        unknown_tags=tags,
    )
)
voters_record = st.builds(
    VotersRecord,
    st.lists(
        st.builds(
            Voter,
            i32,
            uuids,
            st.lists(
                st.builds(Endpoint, names, names, st.integers(0, 65535), unknown_tags=tags),
                max_size=3,
            ).map(tuple),
            st.builds(KRaftVersionFeature, i16, i16, unknown_tags=tags),
            unknown_tags=tags,
        ),
        max_size=4,
    ).map(tuple),
    version=i16,
    unknown_tags=tags,
)
any_control = st.one_of(
    leader_change,
    st.builds(
        SnapshotHeaderRecord,
        st.integers(-(2**63), 2**63 - 1),
        version=i16,
        unknown_tags=tags,
    ),
    st.builds(SnapshotFooterRecord, version=i16, unknown_tags=tags),
    st.builds(KRaftVersionRecord, i16, version=i16, unknown_tags=tags),
    voters_record,
)


@given(any_control)
@settings(max_examples=200, deadline=None)
def test_value_round_trip(record: ControlRecord) -> None:
    raw = encode_control_value(record)
    back = decode_control_value(control_record_type(record), raw)
    assert back == record
    assert encode_control_value(back) == raw


@given(st.lists(any_control, min_size=1, max_size=5), st.integers(0, 2**40), i32)
@settings(max_examples=60, deadline=None)
def test_batch_round_trip(records: list[ControlRecord], base: int, epoch: int) -> None:
    batch = RecordBatch.parse(build_control_batch(base, epoch, 1, records))
    batch.validate(records=True)
    assert decode_control_batch(batch) == records
