"""A forged or broken leader's Fetch answer: a batch that fails its CRC, is malformed, is
above MAX_BATCH_BYTES, does not follow the batch before it, or has an epoch below the batch
before it. Both decoders (`kraft.server.fetch_fast`, `kraft.server.translate`) refuse it with
a ProtocolError naming what is wrong, the follower's lane hands it over to them; a batch of an
epoch above the answer's leader epoch is refused as the answer arrives. The follower counts
it (kraft_fetch_errors_total), logs a rate-limited warning and fails only
that fetch (a RequestFailed: the core tries again after its backoff), never stopping.
(tests/node/test_limits.py has a real leader serve an oversized batch to a real follower.)"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from kraft.config.security import authorizer_settings
from kraft.lane import native
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode, ProtocolError
from kraft.protocol.framing import decode_response
from kraft.protocol.uuid import Uuid
from kraft.raft import effects as fx
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.records.batch import build_batch
from kraft.server.fetch_fast import decode_fetch_response, encode_fetch_response
from kraft.server.metrics import Registry
from kraft.server.node_metrics import NodeMetrics
from kraft.server.peers import Peers
from kraft.server.translate import response_to_core
from kraft.storage.log import MAX_BATCH_BYTES

LISTENER = "CONTROLLER"
TS = 1_700_000_000_000


def _answer(records: bytes, leader_epoch: int = 5) -> bytes:
    resp = m.FetchResponse(ErrorCode.NONE, 1, leader_epoch, 101, 0)
    return encode_fetch_response(18, 7, resp, records)


def _crc_bad() -> bytes:
    b = bytearray(build_batch(100, 5, (b"v",), TS))
    b[-1] ^= 0xFF
    return bytes(b)


def _malformed() -> bytes:
    b = bytearray(build_batch(100, 5, (b"v",), TS))
    b[16] = 9  # magic
    return bytes(b)


BAD = {
    "crc": (_crc_bad, "fails its CRC"),
    "malformed": (_malformed, "magic"),
    "oversized": (lambda: build_batch(100, 5, (b"o" * (MAX_BATCH_BYTES + 1),), TS),
                  f"above the {MAX_BATCH_BYTES}-byte batch limit"),
    "gap": (lambda: build_batch(100, 5, (b"a",), TS) + build_batch(102, 5, (b"b",), TS),
            "does not follow"),
    "epoch going back": (lambda: build_batch(100, 4, (b"a",), TS) + build_batch(101, 3, (b"b",), TS),
                         "below the 4"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_both_decoders_refuse_the_batch_naming_what_is_wrong(kind: str) -> None:
    make, why = BAD[kind]
    frame = _answer(make())
    with pytest.raises(ProtocolError) as fast:
        decode_fetch_response(frame, 18, 7, LISTENER)
    assert why in str(fast.value).lower() or why in str(fast.value)
    with pytest.raises(ProtocolError) as general:
        response_to_core(decode_response(1, 18, frame)[1], LISTENER)
    assert str(general.value) == str(fast.value)


@pytest.mark.skipif(native() is None, reason="kraft.lane._native was not built")
@pytest.mark.parametrize("kind", ["crc", "malformed", "oversized"])
def test_the_follower_lane_hands_the_answer_over(kind: str) -> None:
    """The lane's reader hands over a batch that is bad in itself (its rules hand over
    batches that do not continue its log in its epoch: `follower_answer`)."""
    C = native()
    assert C is not None
    assert C.read_fetch_answer(_answer(BAD[kind][0]()), 7) is None
    good = build_batch(100, 5, (b"o" * (MAX_BATCH_BYTES - 200),), TS)
    assert len(good) <= MAX_BATCH_BYTES
    assert C.read_fetch_answer(_answer(good), 7) is not None  # at the limit: its own


def test_a_batch_at_the_limit_is_taken() -> None:
    batch = build_batch(100, 5, (b"o" * (MAX_BATCH_BYTES - 200),), TS)
    got = decode_fetch_response(_answer(batch), 18, 7, LISTENER)
    assert got is not None and [b.base_offset for b in got.batches] == [100]


class _Queue:
    def __init__(self) -> None:
        self.items: list[Any] = []

    def push(self, item: Any) -> None:
        self.items.append(item)


def _peers() -> tuple[Peers, _Queue, NodeMetrics]:
    queue = _Queue()
    metrics = NodeMetrics(Registry())
    config = SimpleNamespace(node_id=2, controller_listener=SimpleNamespace(name=LISTENER),
                             quorum_voters=(), authorizer=authorizer_settings({}))
    host = SimpleNamespace(config=config, queue=queue, metrics=metrics, cluster_id="c",
                           tls_client=None, note_leader_high_watermark=lambda hw, epoch: None)
    return Peers(host), queue, metrics  # type: ignore[arg-type]


REQUEST = m.FetchRequest(2, Uuid.random(), 5, 100, 4, 500, 8 << 20, 90, "c")


def test_a_batch_of_an_epoch_above_the_leaders_fails_the_fetch(
        caplog: pytest.LogCaptureFixture) -> None:
    """(The core stopped the node on such a batch: it never reaches the core now.)"""
    peers, queue, metrics = _peers()
    above = decode_fetch_response(_answer(build_batch(100, 6, (b"a",), TS)), 18, 7, LISTENER)
    good = decode_fetch_response(_answer(build_batch(100, 5, (b"a",), TS)), 18, 7, LISTENER)
    assert above is not None and good is not None

    async def scenario() -> None:
        peers._answered(fx.SendRequest(1, (), 21, REQUEST), ApiKey.FETCH)(18, above, None)
        peers._answered(fx.SendRequest(1, (), 22, REQUEST), ApiKey.FETCH)(18, good, None)

    with caplog.at_level(logging.WARNING, logger="kraft.server.node"):
        asyncio.run(scenario())
    assert [type(i) for i in queue.items] == [ev.RequestFailed, ev.ResponseReceived]
    assert metrics.fetch_errors.value == 1
    assert any("above the leader's epoch 5" in r.getMessage() for r in caplog.records)


def test_a_refused_answer_fails_that_fetch_only_counted_and_logged_once_a_while(
        caplog: pytest.LogCaptureFixture) -> None:
    peers, queue, metrics = _peers()
    request = REQUEST

    async def scenario() -> None:
        for corr in (11, 12, 13):
            try:
                decode_fetch_response(_answer(BAD["oversized"][0]()), 18, 7, LISTENER)
            except ProtocolError as exc:
                error: BaseException = exc
            answered = peers._answered(fx.SendRequest(1, (), corr, request), ApiKey.FETCH)
            answered(18, None, error)

    with caplog.at_level(logging.WARNING, logger="kraft.server.node"):
        asyncio.run(scenario())
    assert [type(i) for i in queue.items] == [ev.RequestFailed] * 3
    assert [i.correlation_id for i in queue.items] == [11, 12, 13]
    assert metrics.fetch_errors.value == 3
    warnings = [r.getMessage() for r in caplog.records if "event=fetch_refused" in r.getMessage()]
    assert len(warnings) == 1, warnings  # rate-limited: the next ones are counted only
    assert "batch limit" in warnings[0] and "leader=1" in warnings[0]
    assert "kraft_fetch_errors_total 3" in "\n".join(
        line for metric in [metrics.fetch_errors] for line in metric.render())
