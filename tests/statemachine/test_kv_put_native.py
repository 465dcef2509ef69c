"""The KV state machine's PUT in C (kraft/statemachine/csrc/kv_put.c, `kraft.lane._native.read_puts` and
`put_answer`) against its Python encodings: the leader's lane turns the binary client protocol's
PUT frames into the KV records `kraft.statemachine.kv.encode_put` makes, byte for byte, and
answers them as `kraft.server.client_protocol` does (docs/native-lane.md). A change to the
KV record's format that is not made in the C too fails here."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.lane import native
from kraft.protocol.kv_wire import (
    OK,
    OP_DELETE,
    OP_GET,
    OP_GET_STALE,
    OP_PUT,
    encode_request,
    encode_response,
)
from kraft.server.kv_front import MAX_APPEND_BYTES
from kraft.statemachine.kv import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    KVCommand,
    decode_command,
    encode_put,
)
from kraft.storage.log_segments import MAX_BATCH_BYTES

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")

keys = st.text(st.characters(max_codepoint=0x7F), max_size=60)
puts = st.lists(st.tuples(st.integers(0, 2**32 - 1), keys, st.binary(max_size=300)), max_size=20)


@settings(max_examples=400, deadline=None)
@given(puts, st.sampled_from(["nothing", "get", "delete", "stale", "partial", "unicode"]))
def test_the_puts_at_the_head_of_a_buffer_become_their_kv_records(
        frames: list[tuple[int, str, bytes]], then: str) -> None:
    assert C is not None
    head = b"".join(encode_request(rid, OP_PUT, k, v) for rid, k, v in frames)
    tail = {"nothing": b"", "get": encode_request(1, OP_GET, "k"),
            "delete": encode_request(1, OP_DELETE, "k"),
            "stale": encode_request(1, OP_GET_STALE, "k"),
            "partial": encode_request(1, OP_PUT, "k", b"v" * 50)[:-1],
            "unicode": encode_request(1, OP_PUT, "clé", b"v")}[then]
    used, got = C.read_puts(head + tail)
    assert used == len(head)
    assert got == [(rid, encode_put(k, v)) for rid, k, v in frames]


@pytest.mark.parametrize(("why", "frame"), [
    ("a length below the head", struct.pack(">IIBH", 6, 1, OP_PUT, 0)),
    ("a length past 16 MiB", struct.pack(">IIBH", 16 * 1024 * 1024 + 1, 1, OP_PUT, 0)),
    ("a key overrunning its frame", struct.pack(">IIBH", 7 + 2, 1, OP_PUT, 5) + b"ab"),
])
def test_a_bad_frame_stops_the_reading_for_the_python_protocol(why: str, frame: bytes) -> None:
    assert C is not None
    good = encode_request(9, OP_PUT, "k", b"v")
    used, got = C.read_puts(good + frame + good)
    assert (used, got) == (len(good), [(9, encode_put("k", b"v"))]), why


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(-(2**63), 2**63 - 1))
def test_a_put_is_answered_as_the_python_protocol_answers_it(rid: int, offset: int) -> None:
    assert C is not None
    assert C.put_answer(rid, offset) == encode_response(rid, OK, offset)


def test_a_bad_answer_argument_is_refused() -> None:
    assert C is not None
    with pytest.raises(OverflowError):
        C.put_answer(2**32, 0)
    with pytest.raises(TypeError):
        C.read_puts("not bytes")


@pytest.mark.parametrize(("key", "value"), [("", b""), ("k", b""), ("", b"v"),
                                            ("a/b c", bytes(range(256)))])
def test_the_c_record_of_a_put_is_the_state_machines_byte_for_byte(key: str, value: bytes) -> None:
    assert C is not None
    used, got = C.read_puts(frame := encode_request(3, OP_PUT, key, value))
    assert used == len(frame) and got == [(3, encode_put(key, value))]
    record = got[0][1]
    assert decode_command(record) == KVCommand(OP_PUT, key, value)


def test_the_c_limits_are_the_python_ones() -> None:
    assert C is not None
    assert (C.KV_MAX_KEY_BYTES, C.KV_MAX_VALUE_BYTES, C.MAX_APPEND_BYTES, C.MAX_BATCH_BYTES) == (
        MAX_KEY_BYTES, MAX_VALUE_BYTES, MAX_APPEND_BYTES, MAX_BATCH_BYTES)


@pytest.mark.parametrize(("why", "key", "value"), [
    ("a key above the limit", "k" * (MAX_KEY_BYTES + 1), b"v"),
    ("a value above the limit", "k", b"v" * (MAX_VALUE_BYTES + 1)),
    ("a 12 MiB value", "k", b"v" * (12 * 1024 * 1024)),
])
def test_a_put_above_a_limit_is_left_to_the_python_protocol(why: str, key: str,
                                                             value: bytes) -> None:
    assert C is not None
    good = encode_request(9, OP_PUT, "k", b"v")
    used, got = C.read_puts(good + encode_request(10, OP_PUT, key, value) + good)
    assert (used, got) == (len(good), [(9, encode_put("k", b"v"))]), why
    at_limit = encode_request(11, OP_PUT, "k" * MAX_KEY_BYTES, b"v" * MAX_VALUE_BYTES)
    used, got = C.read_puts(at_limit)
    assert used == len(at_limit) and len(got) == 1  # at the limits: the lane's


def test_the_puts_of_one_read_stay_within_one_batchs_budget() -> None:
    """At most MAX_APPEND_BYTES of records, or one PUT alone: a batch of them never reaches
    MAX_BATCH_BYTES (512 PUTs of 1 MiB made a 512 MiB batch)."""
    assert C is not None
    frames = [encode_request(i, OP_PUT, "k", b"v" * (MAX_VALUE_BYTES // 2)) for i in range(6)]
    buffer = b"".join(frames)
    taken = []
    while buffer:
        used, got = C.read_puts(buffer)
        assert got and sum(len(record) for _, record in got) <= MAX_APPEND_BYTES
        taken += got
        buffer = buffer[used:]
    assert [rid for rid, _ in taken] == list(range(6))
    whole = encode_request(1, OP_PUT, "k", b"v" * MAX_VALUE_BYTES)
    used, got = C.read_puts(whole + whole)
    assert used == len(whole) and len(got) == 1  # one alone, above the budget
