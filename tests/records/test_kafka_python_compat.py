"""Byte compatibility both ways with kafka-python's independent record batch v2 code.

kafka-python's `DefaultRecordBatchBuilder` always writes base offset 0 and partition leader
epoch 0 (the broker assigns them); with producer id/epoch/sequence -1 and no compression it
writes the same header fields as KRaft, so for identical records our bytes must be identical.
"""

from __future__ import annotations

import struct
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():
    # kafka-python's protocol package loads its schemas with deprecated importlib calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

from kraft.protocol.errors import CorruptRecordError
from kraft.records.batch import (
    Compression,
    Record,
    RecordBatch,
    UnsupportedCompressionError,
    build_batch,
    iter_batches,
)
from kraft.records.control import (
    ControlRecordType,
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    build_control_batch,
)

record_st = st.builds(
    Record,
    offset=st.just(0),
    timestamp=st.integers(0, 2**45),
    key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=400),
    headers=st.lists(
        st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3
    ).map(tuple),
)


def their_batch(
    records: list[Record], *, compression: int = 0, transactional: bool = False
) -> bytes:
    pid, epoch, seq = (7, 1, 0) if transactional else (-1, -1, -1)
    builder = DefaultRecordBatchBuilder(2, compression, transactional, pid, epoch, seq, 2**30)
    for i, r in enumerate(records):
        meta = builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
        assert meta is not None
    return bytes(builder.build())


@given(records=st.lists(record_st, min_size=1, max_size=15))
@settings(max_examples=100, deadline=None)
def test_same_records_give_identical_bytes(records: list[Record]) -> None:
    assert build_batch(0, 0, records, 0) == their_batch(records)


@given(
    records=st.lists(record_st, min_size=1, max_size=10),
    base=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
)
@settings(max_examples=100, deadline=None)
def test_identical_after_the_broker_assigns_offset_and_epoch(
    records: list[Record], base: int, epoch: int
) -> None:
    theirs = bytearray(their_batch(records))
    struct.pack_into(">q", theirs, 0, base)
    struct.pack_into(">i", theirs, 12, epoch)
    assert build_batch(base, epoch, records, 0) == bytes(theirs)


@given(
    values=st.lists(st.binary(max_size=300), min_size=1, max_size=30),
    ts=st.integers(0, 2**45),
)
@settings(max_examples=100, deadline=None)
def test_fast_value_path_identical_to_their_builder(values: list[bytes], ts: int) -> None:
    records = [Record(0, ts, None, v, ()) for v in values]
    assert build_batch(0, 0, values, ts) == their_batch(records)


@given(
    records=st.lists(record_st, min_size=1, max_size=15),
    base=st.integers(0, 2**50),
    epoch=st.integers(0, 2**31 - 1),
)
@settings(max_examples=100, deadline=None)
def test_their_builder_our_reader(records: list[Record], base: int, epoch: int) -> None:
    raw = bytearray(their_batch(records))
    # the broker's job: assign base offset and leader epoch; neither is under the CRC
    struct.pack_into(">q", raw, 0, base)
    struct.pack_into(">i", raw, 12, epoch)
    ours = RecordBatch.parse(raw)
    ours.validate(records=True)
    theirs = DefaultRecordBatch(bytes(raw))
    assert theirs.validate_crc()
    assert ours.base_offset == theirs.base_offset == base
    assert ours.partition_leader_epoch == theirs.leader_epoch == epoch
    assert ours.crc == theirs.crc
    assert ours.size_in_bytes == theirs.size_in_bytes == len(raw)
    assert ours.attributes == theirs.attributes
    assert ours.last_offset_delta == theirs.last_offset_delta
    assert ours.base_timestamp == theirs.first_timestamp
    assert ours.max_timestamp == theirs.max_timestamp
    assert ours.producer_id == theirs.producer_id
    assert ours.producer_epoch == theirs.producer_epoch
    assert ours.base_sequence == theirs.base_sequence
    assert ours.records_count == theirs.records_count
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in ours.records()] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs
    ]


@given(
    records=st.lists(record_st, min_size=1, max_size=15),
    base=st.integers(0, 2**50),
    epoch=st.integers(-1, 2**31 - 1),
    control=st.booleans(),
)
@settings(max_examples=100, deadline=None)
def test_our_builder_their_reader(
    records: list[Record], base: int, epoch: int, control: bool
) -> None:
    raw = build_batch(base, epoch, records, 0, control=control)
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc()
    assert theirs.base_offset == base and theirs.leader_epoch == epoch
    assert theirs.is_control_batch == control
    assert theirs.producer_id == -1 and theirs.producer_epoch == -1
    assert theirs.base_sequence == -1 and not theirs.is_transactional
    assert theirs.compression_type == 0 and theirs.timestamp_type == 0
    assert theirs.last_offset_delta == len(records) - 1
    if control:
        return  # their ControlRecord insists on a 4-byte key; checked below with real keys
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs] == [
        (base + i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(records)
    ]


def test_their_memory_records_reads_our_log() -> None:
    log = b"".join(build_batch(off, 3, [b"v%d" % off] * 2, 100 + off) for off in range(0, 20, 2))
    seen = []
    mr = MemoryRecords(log)
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        seen += [(r.offset, r.value) for r in batch]
    assert seen == [(o, b"v%d" % (o - o % 2)) for o in range(20)]


def test_their_reader_sees_our_control_records() -> None:
    raw = build_control_batch(
        40,
        6,
        123,
        [
            LeaderChangeMessage(1, (LeaderChangeVoter(1), LeaderChangeVoter(2))),
            KRaftVersionRecord(1),
        ],
    )
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc() and theirs.is_control_batch
    recs = list(theirs)
    assert [(r.offset, r.version, r.type) for r in recs] == [
        (40, 0, ControlRecordType.LEADER_CHANGE),
        (41, 0, ControlRecordType.KRAFT_VERSION),
    ]


def test_transactional_flag_from_their_builder() -> None:
    raw = their_batch([Record(0, 1, None, b"x", ())], transactional=True)
    ours = RecordBatch.parse(raw)
    ours.validate(records=True)
    assert ours.is_transactional and ours.producer_id == 7 and ours.base_sequence == 0


def test_their_compressed_batch_is_crc_valid_but_not_decoded() -> None:
    raw = their_batch([Record(0, 1, None, b"a" * 1000, ())], compression=1)  # gzip
    ours = next(iter_batches(raw))
    assert ours.compression is Compression.GZIP
    ours.validate()
    with pytest.raises(UnsupportedCompressionError):
        list(ours.records())
    assert issubclass(UnsupportedCompressionError, CorruptRecordError)
