"""A request frame the core leaves unanswered gets REQUEST_TIMED_OUT after
FRAME_ANSWER_TIMEOUT_S: one timer sweeps every pending frame (`KraftNode._sweep_inbound`),
re-armed for a request whose deadline comes before the one it waits for."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

import kraft.server.frame_answer as frame_answer
from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.protocol.framing import RequestHeader, decode_response, encode_request
from kraft.protocol.uuid import Uuid
from kraft.server.node import KraftNode

from .test_append_batches import _leader

F = w.FetchRequestData


async def parked_fetch(node: KraftNode, corr: int, max_wait_ms: int = 60_000
                       ) -> asyncio.Task[w.FetchResponseData]:
    """Send, on a connection of its own, an observer's Fetch at the log's end that already
    knows the high watermark and may wait `max_wait_ms`: the leader's core parks it."""
    assert node.core is not None and node.md is not None
    hw = node.core.high_watermark
    assert hw is not None
    fetch = F(cluster_id=node.cluster_id, replica_state=F.ReplicaState(replica_id=7),
              max_wait_ms=max_wait_ms, topics=[F.FetchTopic(
                  topic_id=Uuid.METADATA_TOPIC_ID, partitions=[F.FetchPartition(
                      partition=0, current_leader_epoch=node.core.epoch,
                      fetch_offset=node.md.log.log_end_offset,
                      last_fetched_epoch=node.core.epoch, high_watermark=hw)])])
    bound = node.config.controller_listener
    host, port = bound.host, bound.port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(encode_request(RequestHeader(int(ApiKey.FETCH), 18, corr, "t"), fetch))

    async def answer() -> w.FetchResponseData:
        try:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            header, resp = decode_response(int(ApiKey.FETCH), 18, await reader.readexactly(size))
        finally:
            writer.close()
        assert header.correlation_id == corr
        assert isinstance(resp, w.FetchResponseData)
        return resp

    return asyncio.ensure_future(answer())


async def test_an_unanswered_frame_times_out_and_an_earlier_deadline_rearms_the_sweep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = await _leader(tmp_path)
    try:
        monkeypatch.setattr(frame_answer, "FRAME_ANSWER_TIMEOUT_S", 30.0)
        late = await parked_fetch(node, 1)
        await asyncio.sleep(0.3)
        assert node.peers.sweep.at < float("inf")  # armed for the first frame's deadline
        first_deadline = node.peers.sweep.at
        monkeypatch.setattr(frame_answer, "FRAME_ANSWER_TIMEOUT_S", 0.4)
        soon = await parked_fetch(node, 2)
        resp = await asyncio.wait_for(soon, 10)
        assert resp.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert not late.done()  # its own deadline is 30 s away
        # the sweep that answered the second frame re-armed for the first one's deadline
        assert node.peers.sweep.at == first_deadline
        assert node.core is not None and node.core.role.name == "LEADER"
        late.cancel()
    finally:
        await node.stop()
