"""The follower's lane reading the leader's answers (`kraft.lane._native.read_fetch_answer`,
docs/native-lane.md): exactly what `kraft.server.fetch_fast` decodes for a plain answer,
and nothing for anything else. kafka-python's record batches are the independent oracle for
the batches and their CRC-32C."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sysconfig
import warnings
from pathlib import Path
from typing import Any

import crc32c as crc32c_package
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.lane import native
from kraft.protocol.errors import ErrorCode, ProtocolError
from kraft.protocol.kv_wire import OP_PUT, encode_request
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.records.batch import build_batch
from kraft.records.control import KRaftVersionRecord, build_control_batch
from kraft.server.fetch_fast import (
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.support.damage import damaged

ROOT = Path(__file__).resolve().parents[2]
C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")


def read(frame: bytes, corr: int) -> Any:
    assert C is not None
    return C.read_fetch_answer(frame, corr)


def python_view(frame: bytes, corr: int) -> Any:
    """What the lane must read in `frame`, from the Python decoder: None where the answer is
    not plain (or the decoder refuses or raises)."""
    try:
        r = decode_fetch_response(frame, 18, corr, "CONTROLLER")
    except ProtocolError:
        return None
    if (r is None or r.error_code != ErrorCode.NONE or r.diverging_epoch is not None
            or r.snapshot_id is not None or r.leader_endpoints
            or any(b.is_control for b in r.batches)):
        return None
    return r


def agree(frame: bytes, corr: int) -> Any:
    """The lane's reading of `frame`; when it takes it, it must be the Python decoder's."""
    got = read(frame, corr)
    if got is None:
        return None
    want = python_view(frame, corr)
    assert want is not None, "the lane took an answer the Python decoder does not take"
    leader_id, leader_epoch, hw, log_start, batches = got
    assert (leader_id, leader_epoch, hw, log_start) == (
        want.leader_id, want.leader_epoch, want.high_watermark, want.log_start_offset)
    assert [(b[0], b[1], b[2]) for b in batches] == [
        (b.base_offset, b.last_offset, b.epoch) for b in want.batches]
    assert [frame[b[3]:b[3] + b[4]] for b in batches] == [bytes(b.payload) for b in want.batches]
    return got


def answer(records: bytes | None, corr: int = 5, hw: int = 10, leader: tuple[int, int] = (1, 3),
           **kw: Any) -> bytes:
    resp = m.FetchResponse(kw.pop("error", ErrorCode.NONE), leader[0], leader[1], hw, 0, **kw)
    frame = encode_fetch_response(18, corr, resp, records)
    assert frame is not None
    return frame


values = st.lists(st.binary(max_size=120), min_size=1, max_size=6)


@st.composite
def batch_runs(draw: st.DrawFn) -> bytes:
    base = draw(st.integers(0, 2**40))
    epoch = draw(st.integers(0, 2**31 - 1))
    out = b""
    for _ in range(draw(st.integers(0, 4))):
        vs = draw(values)
        out += build_batch(base, epoch, vs, draw(st.integers(0, 2**41)))
        base += len(vs)
    return out


# ---------------------------------------------------------------- CRC-32C


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000))
def test_the_crc_is_crc32c(data: bytes) -> None:
    assert C is not None
    assert C.crc32c(data) == crc32c_package.crc32c(data)


def test_the_crc_of_the_check_string() -> None:
    assert C is not None
    assert C.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


# ---------------------------------------------------------------- plain answers


@settings(max_examples=300, deadline=None)
@given(batch_runs(), st.integers(-1, 2**40), st.integers(-1, 2**31 - 1),
       st.integers(0, 2**31 - 1), st.booleans())
def test_a_plain_answer_reads_as_the_python_decoder_reads_it(
        records: bytes, hw: int, corr: int, leader_epoch: int, null_records: bool) -> None:
    frame = answer(None if null_records and not records else records, corr, hw,
                   (2, leader_epoch))
    got = agree(frame, corr)
    assert got is not None  # a plain answer is taken
    assert got[2] == hw
    assert sum(b[4] for b in got[4]) == len(records)  # every batch of the answer, whole


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=30), st.none() | st.binary(max_size=200)),
                min_size=1, max_size=8), st.integers(0, 2**40), st.integers(0, 2**31 - 1))
def test_kafka_pythons_batches_are_read_with_their_crc(records: list[tuple[Any, Any]],
                                                       base: int, epoch: int) -> None:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**30)
    for i, (k, v) in enumerate(records):
        assert builder.append(i, 1_700_000_000_000, k, v, []) is not None
    theirs = bytearray(builder.build())
    struct.pack_into(">q", theirs, 0, base)  # the leader assigns offsets and its epoch, which
    struct.pack_into(">i", theirs, 12, epoch)  # the CRC does not cover
    got = agree(answer(bytes(theirs)), 5)
    assert got is not None
    assert [b[:3] for b in got[4]] == [(base, base + len(records) - 1, epoch)]


# ---------------------------------------------------------------- everything else


ONE = build_batch(7, 3, [b"x" * 20], 0)


@pytest.mark.parametrize(("why", "frame", "corr"), [
    ("another correlation id", answer(ONE, corr=5), 6),
    ("an error", answer(None, error=ErrorCode.FENCED_LEADER_EPOCH), 5),
    ("a divergence", answer(None, diverging_epoch=m.OffsetAndEpoch(2, 40)), 5),
    ("a snapshot id", answer(None, snapshot_id=m.OffsetAndEpoch(2, 40)), 5),
    ("the leader's endpoints", answer(None, leader_endpoints=(m.Endpoint("C", "h", 1),)), 5),
    ("a control batch", answer(build_control_batch(7, 3, 0, [KRaftVersionRecord(1)])), 5),
    ("a cut-off batch", answer(ONE[:-1]), 5),
    ("a batch whose CRC fails", answer(ONE[:-1] + bytes([ONE[-1] ^ 1])), 5),
    ("a cut-off frame", answer(ONE)[:-1], 5),
    ("a frame with bytes after it", answer(ONE) + b"\x00", 5),
    ("an empty frame", b"", 5),
])
def test_anything_but_a_plain_answer_is_handed_over(why: str, frame: bytes, corr: int) -> None:
    assert read(frame, corr) is None, why


def raw_answer(tags: list[tuple[int, bytes]], corr: int = 5, records: bytes = b"") -> bytes:
    """An answer laid out by hand, with the partition's tagged fields `tags` as given (tag,
    value), in that order."""
    head = struct.pack(">iBihiB16s", corr, 0, 0, 0, 0, 2, bytes(15) + b"\x01")
    part = struct.pack(">Bihqqq", 2, 0, 0, 10, -1, 0) + b"\x01\xff\xff\xff\xff"
    body = bytes([len(records) + 1]) + records if len(records) < 127 else None
    assert body is not None
    fields = bytes([len(tags)]) + b"".join(bytes([t, len(v)]) + v for t, v in tags)
    return head + part + body + fields + b"\x00\x00"


LEADER = struct.pack(">iiB", 1, 3, 0)
NO_DIVERGENCE = struct.pack(">iqB", -1, -1, 0)
NO_SNAPSHOT = struct.pack(">qiB", -1, -1, 0)


@pytest.mark.parametrize("tags", [
    [(1, LEADER)],
    [(0, NO_DIVERGENCE), (1, LEADER), (2, NO_SNAPSHOT)],
    [(0, NO_DIVERGENCE)],
    [],
])
def test_tagged_fields_naming_nothing_are_a_plain_answer(tags: list[tuple[int, bytes]]) -> None:
    assert agree(raw_answer(tags, records=ONE), 5) is not None


@pytest.mark.parametrize(("why", "tags"), [
    ("tags out of order", [(1, LEADER), (0, NO_DIVERGENCE)]),
    ("a tag twice", [(1, LEADER), (1, LEADER)]),
    ("an unknown tag", [(3, b"\x00")]),
    ("a known tag of the wrong size", [(1, LEADER + b"\x00")]),
    ("tags inside the divergence", [(0, NO_DIVERGENCE[:-1] + b"\x01")]),
    ("tags inside the leader", [(1, LEADER[:-1] + b"\x01")]),
    ("tags inside the snapshot id", [(2, NO_SNAPSHOT[:-1] + b"\x01")]),
    ("a divergence", [(0, struct.pack(">iqB", 2, 40, 0))]),
    ("a snapshot id", [(2, struct.pack(">qiB", 40, 2, 0))]),
])
def test_tagged_fields_the_lane_does_not_take(why: str, tags: list[tuple[int, bytes]]) -> None:
    frame = raw_answer(tags, records=ONE)
    assert read(frame, 5) is None, why
    assert agree(raw_answer([(1, LEADER)], records=ONE), 5) is not None  # the same, plain


def test_a_bad_argument_is_named() -> None:
    assert C is not None
    with pytest.raises(TypeError):
        C.read_fetch_answer("not bytes", 5)
    with pytest.raises(TypeError):
        C.read_fetch_answer(b"", "5")


@settings(max_examples=1500, deadline=None)
@given(batch_runs(), st.data())
def test_a_damaged_answer_is_handed_over_or_read_as_python_reads_it(records: bytes,
                                                                    data: st.DataObject) -> None:
    # never taken unless the Python decoder takes it the same way
    agree(damaged(data, answer(records)), 5)


def test_damaged_answers_under_the_address_sanitizer(tmp_path: Path) -> None:
    # the C readings of frames (an answer, a voter's fetch, a run of client PUTs), compiled with
    # AddressSanitizer and UBSan, each over 300,000 damaged copies: a read outside the frame's
    # exact buffer, or undefined behaviour, ends the run with the sanitizer's report
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc here")
    include = sysconfig.get_paths()["include"]
    harness = tmp_path / "lane_fuzz"
    built = subprocess.run(
        [gcc, "-O1", "-g", "-std=c11", "-no-pie", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all", f"-I{include}", f"-I{ROOT / 'kraft' / 'lane' / 'csrc'}",
         str(ROOT / "tools" / "lane_fuzz.c"),
         "-o", str(harness), "-Wl,--unresolved-symbols=ignore-all"],
        capture_output=True, text=True, check=False)
    if built.returncode != 0 and "sanitize" in built.stderr:
        pytest.skip(f"gcc cannot build with the sanitizers here: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr
    seed = tmp_path / "answer.bin"
    seed.write_bytes(answer(build_batch(7, 3, [b"x" * 20, b"y" * 5], 0)
                            + build_batch(9, 3, [b"z" * 40], 0)))
    request = tmp_path / "request.bin"
    fetch = m.FetchRequest(2, Uuid(bytes(range(16))), 3, 10, 3, 500, 1 << 20, 9)
    request.write_bytes(encode_fetch_request(fetch, "abcdefghijklmnopqrstuv", 18, 5, "node-2")
                        or b"")
    client = tmp_path / "puts.bin"
    client.write_bytes(b"".join(encode_request(i, OP_PUT, f"key{i}", b"v" * (i * 7))
                                for i in range(6)))
    for frame, kind in ((seed, "answer"), (request, "request"), (client, "puts")):
        done = subprocess.run([str(harness), str(frame), "300000", "7", kind],
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith("iterations=300000 taken="), kind
        assert int(done.stdout.split("taken=")[1]) > 0, kind  # the intact frames were read


# ---------------------------------------------------------------- the follower's next fetch

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=40)
long_text = st.text(max_size=40) | st.text(st.characters(max_codepoint=0x7FF), min_size=130,
                                           max_size=250)
"""Past 126 UTF-8 bytes, a compact string's length takes a second varint byte (and the lane's
template holds up to 511 bytes: 250 characters of at most 2 bytes each)."""


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([17, 18]), i32, st.none() | long_text, long_text, i32,
       st.none() | st.sampled_from([Uuid(bytes(16)), Uuid(bytes(range(16))), Uuid(b"\xff" * 16)]),
       i32, i32, i32, i64, i32, st.none() | i64)
def test_the_next_fetch_is_written_as_the_python_encoder_writes_it(
        version: int, corr: int, client: str | None, cluster: str, replica: int,
        directory: Uuid | None, wait: int, max_bytes: int, epoch: int, offset: int,
        last_epoch: int, hw: int | None) -> None:
    assert C is not None
    req = m.FetchRequest(replica_id=replica, replica_directory_id=directory,
                         current_leader_epoch=epoch, fetch_offset=offset,
                         last_fetched_epoch=last_epoch, max_wait_ms=wait, max_bytes=max_bytes,
                         high_watermark=hw)
    want = encode_fetch_request(req, cluster, version, corr, client)
    got = C.fetch_request(version, corr, client, cluster, replica, directory, wait, max_bytes,
                          epoch, offset, last_epoch, hw)
    assert got == want
    if replica >= 0 and cluster:  # and the leader reads it back as the fetch it is
        back = decode_fetch_request(got, cluster)
        assert back is not None and back[2].fetch_offset == offset


def test_a_bad_fetch_field_is_named() -> None:
    assert C is not None
    ok: dict[str, Any] = {"version": 18, "correlation_id": 1, "client_id": None,
                          "cluster_id": "c", "replica_id": 2, "directory_id": None,
                          "max_wait_ms": 500, "max_bytes": 1 << 20, "current_leader_epoch": 3,
                          "fetch_offset": 10, "last_fetched_epoch": 3, "high_watermark": 9}
    assert C.fetch_request(**ok)
    for field, bad, error, text_ in [
        ("version", 16, ValueError, "version must be 17 or 18"),
        ("fetch_offset", "10", TypeError, "fetch_offset must be an int"),
        ("max_wait_ms", 1 << 31, OverflowError, "max_wait_ms out of the int32 range"),
        ("cluster_id", "x" * 600, ValueError, "cluster_id is longer than"),
        ("client_id", 5, TypeError, "client_id must be a str"),
    ]:
        with pytest.raises(error, match=text_):
            C.fetch_request(**{**ok, field: bad})
