"""The built-in KV state machine: command encoding, apply semantics, snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.statemachine.base import CommittedBatch, StateMachine, chunk_values
from kraft.statemachine.kv import (
    OP_CAS,
    CommandError,
    KVResult,
    KVStore,
    decode_command,
    encode_barrier,
    encode_cas,
    encode_delete,
    encode_put,
)


def test_kvstore_implements_the_state_machine_protocol() -> None:
    assert isinstance(KVStore(), StateMachine)


def test_put_delete_cas_apply_in_order_and_report_results() -> None:
    kv = KVStore()
    values = (
        encode_put("a", b"1"),
        encode_cas("a", b"1", b"2"),
        encode_cas("a", b"1", b"3"),
        encode_delete("a"),
        encode_delete("a"),
        encode_cas("b", None, b"new"),
        encode_barrier(b"t"),
    )
    results = kv.apply(CommittedBatch(10, 1, values))
    assert kv.applied_offset == 17
    assert results == [
        KVResult(ok=True, value=None),
        KVResult(ok=True, value=b"1"),
        KVResult(ok=False, value=b"2"),
        KVResult(ok=True, value=b"2"),
        KVResult(ok=False, value=None),
        KVResult(ok=True, value=None),
        KVResult(ok=True),
    ]
    assert kv.get("a") is None
    assert kv.get("b") == b"new"


def test_cas_with_absent_new_value_deletes() -> None:
    kv = KVStore()
    kv.apply(CommittedBatch(0, 1, (encode_put("k", b"v"), encode_cas("k", b"v", None))))
    assert kv.get("k") is None


def test_undecodable_record_is_an_error_result_not_an_exception() -> None:
    kv = KVStore()
    results = kv.apply(CommittedBatch(0, 1, (b"\x01", b"\x07\x01", encode_put("x", b"y"))))
    assert isinstance(results[0], KVResult) and results[0].error
    assert isinstance(results[1], KVResult) and "version" in (results[1].error or "")
    assert kv.get("x") == b"y"
    assert kv.applied_offset == 3


def test_records_below_the_applied_offset_are_not_applied_twice() -> None:
    kv = KVStore()
    kv.load_snapshot(5, [encode_put("k", b"snap")])
    kv.apply(CommittedBatch(3, 1, (encode_put("k", b"old"), encode_put("k", b"o2"),
                                   encode_put("k", b"new"))))
    assert kv.get("k") == b"new"
    assert kv.applied_offset == 6
    quiet = KVStore()
    quiet.load_snapshot(5, [encode_put("k", b"snap")])
    quiet.apply_quietly(CommittedBatch(3, 1, (encode_put("k", b"old"), encode_put("k", b"o2"))))
    assert quiet.get("k") == b"snap" and quiet.applied_offset == 5


def test_decode_rejects_truncated_and_overrunning_fields() -> None:
    good = encode_cas("key", b"e", b"n")
    assert decode_command(good).op == OP_CAS
    for bad in (good[:-1], good[:5], good + b"\x00", b"\x01\x09" + good[2:]):
        with pytest.raises(CommandError):
            decode_command(bad)


@given(st.dictionaries(st.text(max_size=20), st.binary(max_size=50), max_size=30))
def test_snapshot_round_trip_restores_the_same_state(data: dict[str, bytes]) -> None:
    kv = KVStore()
    kv.apply(CommittedBatch(0, 1, tuple(encode_put(k, v) for k, v in data.items())))
    restored = KVStore()
    restored.load_snapshot(kv.applied_offset, kv.snapshot_values())
    assert restored.items() == kv.items() == sorted(data.items())
    assert restored.applied_offset == len(data)


def test_snapshot_values_are_a_stable_copy_encoded_when_read() -> None:
    kv = KVStore()
    kv.apply(CommittedBatch(0, 1, (encode_put("b", b"2"), encode_put("a", b"1"))))
    snap = kv.snapshot_values()
    kv.apply(CommittedBatch(2, 1, (encode_put("a", b"changed"), encode_delete("b"),
                                   encode_put("c", b"3"))))
    expected = [encode_put("a", b"1"), encode_put("b", b"2")]
    assert len(snap) == 2 and list(snap) == expected
    assert snap[0] == expected[0] and snap[-1] == expected[1] and list(snap[1:]) == expected[1:]
    assert list(chunk_values(snap, 1 << 20)) == [expected]


def test_snapshot_of_non_put_commands_is_rejected() -> None:
    with pytest.raises(CommandError):
        KVStore().load_snapshot(1, [encode_delete("a")])


def test_chunk_values_respects_the_byte_budget_and_keeps_order() -> None:
    values = [bytes([i]) * 10 for i in range(7)]
    chunks = list(chunk_values(values, 25))
    assert [len(c) for c in chunks] == [2, 2, 2, 1]
    assert [v for c in chunks for v in c] == values
    assert list(chunk_values([b"x" * 100], 10)) == [[b"x" * 100]]


def _reference_apply(store: KVStore, values: list[bytes]) -> list[object]:
    """Every command through the general decoder, one by one (the inline PUT path's oracle)."""
    return [store._apply_one(v) for v in values]


def _damaged(raw: bytes, cut: int | None, flip: int | None) -> bytes:
    out = bytearray(raw if cut is None else raw[:cut])
    if flip is not None and flip < len(out):
        out[flip] ^= 0xFF
    return bytes(out)


_put_like = st.builds(
    lambda key, value, cut, flip: _damaged(encode_put(key, value), cut, flip),
    st.text(max_size=10), st.binary(max_size=20), st.none() | st.integers(0, 40),
    st.none() | st.integers(0, 40),
)


@given(st.lists(_put_like | st.binary(max_size=40), max_size=40))
def test_inline_put_path_matches_the_general_decoder(values: list[bytes]) -> None:
    fast, slow = KVStore(), KVStore()
    got = fast.apply(CommittedBatch(0, 1, tuple(values)))
    want = _reference_apply(slow, values)
    assert got == want
    assert fast.items() == slow.items()
    assert fast.applied_offset == len(values)
    quiet = KVStore()  # a follower's apply: the same state, no results
    assert quiet.apply_quietly(CommittedBatch(0, 1, tuple(values))) is None
    assert quiet.items() == slow.items()
    assert quiet.applied_offset == len(values)


# Kafka 4.4's QuorumController records, as its controllers write them (framed metadata
# records: frame version 1, apiKey, version, body): a FeatureLevelRecord for metadata.version
# 33, a NoOpRecord (apiKey 17) and a RegisterControllerRecord head (apiKey 20).
KAFKA_FEATURE_LEVEL = bytes.fromhex("010c00") + b"\x11metadata.version" + b"\x00\x21\x00"
KAFKA_NO_OP = bytes.fromhex("01110000")
KAFKA_REGISTER_CONTROLLER = bytes.fromhex("0114000002") + bytes(16) + b"\x00\x01\x00\x00"


def test_kafka_metadata_records_in_a_snapshot_are_kept_out_of_the_state() -> None:
    """A snapshot of Kafka's QuorumController (a kraft observer of Kafka controllers installs
    one through FetchSnapshot) loads: its metadata records change nothing and are counted;
    before, `load_snapshot` raised CommandError and the node stopped."""
    kv = KVStore()
    kv.load_snapshot(208, [KAFKA_FEATURE_LEVEL, KAFKA_REGISTER_CONTROLLER, KAFKA_NO_OP])
    assert kv.applied_offset == 208
    assert kv.items() == []
    assert kv.foreign_records == 3


def test_kafka_metadata_records_in_the_log_change_nothing() -> None:
    kv = KVStore()
    kv.apply(CommittedBatch(0, 1, (encode_put("a", b"1"),)))
    results = kv.apply(CommittedBatch(1, 2, (KAFKA_NO_OP, KAFKA_FEATURE_LEVEL)))
    assert [r.ok for r in results] == [False, False]  # type: ignore[attr-defined]
    assert kv.items() == [("a", b"1")]
    assert kv.applied_offset == 3
    assert kv.foreign_records == 2


def test_a_record_neither_kv_nor_kafka_is_still_refused_in_a_snapshot() -> None:
    with pytest.raises(CommandError):
        KVStore().load_snapshot(5, [b"\x07garbage"])
    assert KVStore().foreign_records == 0
