"""The leader's lane on the wire (`kraft.lane._native.read_fetch_request` and `fetch_answer`,
docs/native-lane.md): a voter's fetch read as `kraft.server.fetch_fast` reads it (or
handed over), and a plain answer written byte for byte as it writes one."""

from __future__ import annotations

import struct
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.lane import native
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.records.batch import build_batch
from kraft.server.fetch_fast import (
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
)
from tests.support.damage import damaged

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")

CLUSTER = "abcdefghijklmnopqrstuv"
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
dirs = st.none() | st.sampled_from([Uuid(bytes(16)), Uuid(bytes(range(16))), Uuid(b"\xfe" * 16)])


def agree(frame: bytes, cluster: str = CLUSTER) -> Any:
    """The lane's reading of a fetch; when it takes it, it must be the Python decoder's."""
    assert C is not None
    got = C.read_fetch_request(frame, cluster)
    if got is None:
        return None
    want = decode_fetch_request(frame, cluster)
    assert want is not None, "the lane took a fetch the Python decoder does not take"
    version, corr, req = want
    d = req.replica_directory_id
    assert got == (version, corr, req.replica_id, None if d is None else d.bytes,
                   req.current_leader_epoch, req.fetch_offset, req.last_fetched_epoch,
                   req.max_wait_ms, req.max_bytes, req.high_watermark)
    return got


def fetch(version: int = 18, replica: int = 2, client: str | None = "node-2",
          cluster: str = CLUSTER, **kw: Any) -> bytes:
    fields: dict[str, Any] = {"replica_directory_id": Uuid(bytes(range(16))),
                              "current_leader_epoch": 3, "fetch_offset": 10,
                              "last_fetched_epoch": 3, "high_watermark": 9}
    fields.update(kw)
    frame = encode_fetch_request(m.FetchRequest(replica_id=replica, **fields), cluster, version,
                                 5, client)
    assert frame is not None
    return frame


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([17, 18]), i32, st.none() | st.text(max_size=30), st.integers(0, 2**31 - 1),
       dirs, i32, i64, i32, i32, i32, st.none() | i64)
def test_a_voters_fetch_reads_as_the_python_decoder_reads_it(
        version: int, corr: int, client: str | None, replica: int, directory: Uuid | None,
        epoch: int, offset: int, last_epoch: int, wait: int, max_bytes: int,
        hw: int | None) -> None:
    req = m.FetchRequest(replica, directory, epoch, offset, last_epoch, wait, max_bytes, hw)
    frame = encode_fetch_request(req, CLUSTER, version, corr, client)
    assert frame is not None
    got = agree(frame)
    if client is None or client.isascii():
        assert got is not None  # every voter's fetch with an ASCII client id is taken


@pytest.mark.parametrize(("why", "frame", "cluster"), [
    ("another cluster", fetch(), "another-cluster-id-xx"),
    ("an observer (no replica state)", fetch(replica=-1), CLUSTER),
    ("a client id that is not ASCII", fetch(client="nœud-2"), CLUSTER),
    ("version 16", fetch()[:2] + struct.pack(">h", 16) + fetch()[4:], CLUSTER),
    ("another api", struct.pack(">h", 0) + fetch()[2:], CLUSTER),
    ("a cut-off frame", fetch()[:-1], CLUSTER),
    ("a frame with bytes after it", fetch() + b"\x00", CLUSTER),
    ("an empty frame", b"", CLUSTER),
])
def test_anything_but_a_voters_fetch_is_handed_over(why: str, frame: bytes, cluster: str) -> None:
    assert C is not None
    assert C.read_fetch_request(frame, cluster) is None, why


def test_a_high_watermark_on_version_17_is_handed_over() -> None:
    # version 17 has no HighWatermark tag: a frame naming one is not a v17 fetch
    frame = bytearray(fetch(version=17))
    assert agree(bytes(frame)) is not None
    at = frame.index(bytes(range(16))) - 3  # the partition's tag count, before the directory
    assert frame[at] == 1
    frame[at] = 2
    hw = b"\x01\x08" + struct.pack(">q", 9)
    end = at + 1 + 2 + 16
    frame[end:end] = hw
    assert C is not None and C.read_fetch_request(bytes(frame), CLUSTER) is None


def _partition_tags(frame: bytes) -> tuple[int, bytes, bytes]:
    """Where a v18 fetch's partition tags start (their count), and its two tags as written:
    the directory id (tag 0) and the high watermark (tag 1)."""
    at = frame.index(bytes(range(16))) - 3
    assert frame[at:at + 3] == b"\x02\x00\x10"
    directory, hw = frame[at + 1:at + 19], frame[at + 19:at + 29]
    assert hw[:2] == b"\x01\x08"
    return at, directory, hw


@pytest.mark.parametrize(("why", "order"), [
    ("tags out of order", lambda d, h: h + d),
    ("a tag twice", lambda d, h: d + d),
])
def test_partition_tags_out_of_order_are_handed_over(why: str, order: Any) -> None:
    frame = fetch(version=18)
    assert agree(frame) is not None
    at, directory, hw = _partition_tags(frame)
    bad = frame[:at + 1] + order(directory, hw) + frame[at + 29:]
    assert C is not None and C.read_fetch_request(bad, CLUSTER) is None, why


@settings(max_examples=1500, deadline=None)
@given(st.data())
def test_a_damaged_fetch_is_handed_over_or_read_as_python_reads_it(data: st.DataObject) -> None:
    agree(damaged(data, fetch(version=data.draw(st.sampled_from([17, 18])))))


# ---------------------------------------------------------------- the answer


@st.composite
def records(draw: st.DrawFn) -> bytes:
    base, epoch, out = draw(st.integers(0, 2**40)), draw(st.integers(0, 100)), b""
    for _ in range(draw(st.integers(0, 3))):
        n = draw(st.integers(1, 4))
        epoch += draw(st.integers(0, 3))  # a log's epochs never go back
        out += build_batch(base, epoch, [b"v" * draw(st.integers(0, 300))] * n, 0)
        base += n
    return out


@settings(max_examples=500, deadline=None)
@given(i32, st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1), i64, i64, records())
def test_a_plain_answer_is_written_as_the_python_encoder_writes_it(
        corr: int, leader: int, epoch: int, hw: int, log_start: int, recs: bytes) -> None:
    assert C is not None
    resp = m.FetchResponse(ErrorCode.NONE, leader, epoch, hw, log_start)
    assert C.fetch_answer(corr, leader, epoch, hw, log_start, recs) == encode_fetch_response(
        18, corr, resp, recs)
    back = decode_fetch_response(C.fetch_answer(corr, leader, epoch, hw, log_start, recs), 18,
                                 corr, "CONTROLLER")
    assert back is not None and back.high_watermark == hw


def test_a_bad_answer_argument_is_refused() -> None:
    assert C is not None
    with pytest.raises(TypeError):
        C.fetch_answer(5, 1, 3, "10", 0, b"")
    with pytest.raises(OverflowError):
        C.fetch_answer(1 << 40, 1, 3, 10, 0, b"")


# ---------------------------------------------------------------- a batch of client PUTs

values = (st.lists(st.binary(max_size=300) | st.just(b"w" * 20_000), min_size=1, max_size=40)
          | st.lists(st.binary(max_size=20), min_size=64, max_size=200))
"""From offset delta 64 on, a record's zig-zag offset delta takes two bytes; from 64 bytes, its
value length does; past 8,191 bytes, a record's length takes three."""


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**63 - 1), st.integers(-1, 2**31 - 1), values, st.integers(-(2**63), 2**63 - 1))
def test_a_batch_of_values_is_built_as_the_python_builder_builds_it(
        base: int, epoch: int, vs: list[bytes], ts: int) -> None:
    assert C is not None
    assert C.value_batch(base, epoch, vs, ts) == build_batch(base, epoch, vs, ts)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=10), st.integers(0, 2**41))
def test_kafka_python_builds_the_same_bytes(vs: list[bytes], ts: int) -> None:
    # kafka-python's builder writes base offset 0 and epoch 0, as a producer does
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**30)
    for i, v in enumerate(vs):
        assert builder.append(i, ts, None, v, []) is not None
    assert C is not None
    assert C.value_batch(0, 0, vs, ts) == bytes(builder.build())


def test_a_built_batch_is_read_back_by_the_followers_reading() -> None:
    assert C is not None
    batch = C.value_batch(10, 3, [b"v" * 108] * 5, 1_700_000_000_000)
    answer = C.fetch_answer(5, 1, 3, 10, 0, batch)
    got = C.read_fetch_answer(answer, 5)
    assert got is not None and got[4] == ((10, 14, 3, got[4][0][3], len(batch)),)


def test_a_bad_batch_is_refused_with_what_is_wrong() -> None:
    assert C is not None
    with pytest.raises(ValueError, match="at least one record"):
        C.value_batch(0, 3, [], 0)
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        C.value_batch(-1, 3, [b"x"], 0)
    with pytest.raises(TypeError, match="value 1 is str, not bytes"):
        C.value_batch(0, 3, [b"x", "y"], 0)
    with pytest.raises(OverflowError):
        C.value_batch(0, 2**31, [b"x"], 0)
