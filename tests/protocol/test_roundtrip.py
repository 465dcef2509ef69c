"""Property tests: every message, every version, decode(encode(m)) == m and bytes are stable."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft.protocol.codec import decode, encode
from kraft.protocol.schema import MessageSpec
from tests.protocol.schema_strategies import (
    IDS,
    MESSAGE_VERSIONS,
    message_class,
    message_strategy,
)

_SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize(("spec", "version"), MESSAGE_VERSIONS, ids=IDS)
def test_roundtrip(spec: MessageSpec, version: int) -> None:
    cls = message_class(spec)

    @_SETTINGS
    @given(message_strategy(spec, version))
    def check(msg: Any) -> None:
        wire = encode(msg, version)
        back = decode(cls, wire, version)
        assert back == msg
        assert encode(back, version) == wire
        # memoryview input decodes to the same message
        assert decode(cls, memoryview(wire), version) == msg

    check()


@pytest.mark.parametrize(("spec", "version"), MESSAGE_VERSIONS, ids=IDS)
def test_default_message_roundtrip(spec: MessageSpec, version: int) -> None:
    cls = message_class(spec)
    msg = cls()
    wire = encode(msg, version)
    assert decode(cls, wire, version) == msg


@given(st.data())
@settings(max_examples=50, deadline=None)
def test_decoding_inside_a_larger_buffer(data: st.DataObject) -> None:
    from kraft.protocol.codec import decode_from

    spec, version = data.draw(st.sampled_from(MESSAGE_VERSIONS))
    msg = data.draw(message_strategy(spec, version))
    wire = encode(msg, version)
    buf = b"\xaa" * 3 + wire + b"\xbb" * 5
    back, pos = decode_from(message_class(spec), buf, 3, 3 + len(wire), version)
    assert back == msg
    assert pos == 3 + len(wire)
