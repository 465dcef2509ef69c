"""Malformed-input fuzzing: decoders raise ProtocolError and nothing else, never hang.

Across all (message, version) pairs this runs several thousand cases: random bytes,
truncations and byte/bit mutations of valid encodings, plus every prefix of one valid
encoding per pair, which must raise TruncatedInputError-family errors.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft.protocol.codec import decode, encode
from kraft.protocol.errors import ProtocolError
from kraft.protocol.framing import decode_request, decode_response
from kraft.protocol.schema import MessageSpec
from tests.protocol.schema_strategies import (
    IDS,
    MESSAGE_VERSIONS,
    message_class,
    message_strategy,
)

_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _try_decode(cls: type, data: bytes, version: int) -> None:
    try:
        msg = decode(cls, data, version)
    except ProtocolError as exc:
        assert " v" in str(exc) and "byte offset" in str(exc), str(exc)
        return
    # Whatever decodes must re-encode.
    encode(msg, version)


@pytest.mark.parametrize(("spec", "version"), MESSAGE_VERSIONS, ids=IDS)
def test_random_bytes(spec: MessageSpec, version: int) -> None:
    cls = message_class(spec)

    @_SETTINGS
    @given(st.binary(max_size=80))
    def check(data: bytes) -> None:
        _try_decode(cls, data, version)

    check()


@pytest.mark.parametrize(("spec", "version"), MESSAGE_VERSIONS, ids=IDS)
def test_mutated_valid_encodings(spec: MessageSpec, version: int) -> None:
    cls = message_class(spec)

    @_SETTINGS
    @given(message_strategy(spec, version), st.data())
    def check(msg: Any, data: st.DataObject) -> None:
        wire = bytearray(encode(msg, version))
        kind = data.draw(st.sampled_from(["truncate", "flip", "byte", "insert"]))
        if kind == "truncate" or not wire:
            cut = data.draw(st.integers(0, max(len(wire) - 1, 0)))
            mutated = bytes(wire[:cut])
        elif kind == "flip":
            for _ in range(data.draw(st.integers(1, 3))):
                i = data.draw(st.integers(0, len(wire) - 1))
                wire[i] ^= 1 << data.draw(st.integers(0, 7))
            mutated = bytes(wire)
        elif kind == "byte":
            i = data.draw(st.integers(0, len(wire) - 1))
            wire[i] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
            mutated = bytes(wire)
        else:
            i = data.draw(st.integers(0, len(wire)))
            mutated = bytes(wire[:i]) + data.draw(st.binary(min_size=1, max_size=4)) + bytes(
                wire[i:]
            )
        _try_decode(cls, mutated, version)

    check()


@pytest.mark.parametrize(("spec", "version"), MESSAGE_VERSIONS, ids=IDS)
def test_every_prefix_is_rejected(spec: MessageSpec, version: int) -> None:
    cls = message_class(spec)

    @settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(message_strategy(spec, version, with_unknown=True))
    def check(msg: Any) -> None:
        wire = encode(msg, version)
        for cut in range(len(wire)):
            with pytest.raises(ProtocolError):
                decode(cls, wire[:cut], version)

    check()


@given(st.binary(max_size=120))
@settings(max_examples=400, deadline=None)
def test_request_frames_from_random_bytes(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(data)


@given(st.sampled_from(MESSAGE_VERSIONS), st.binary(max_size=80))
@settings(max_examples=400, deadline=None)
def test_response_frames_from_random_bytes(pair: tuple[MessageSpec, int], data: bytes) -> None:
    spec, version = pair
    with contextlib.suppress(ProtocolError):
        decode_response(spec.api_key, version, data)
