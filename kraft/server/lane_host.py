"""What the node lends its leader's native lane of its Kafka request frames
(`kraft.lane.leader.ParkedFetchFrames`).

A fetch the core holds parked waits as a `FrameAnswer` in the node's table of inbound frames.
When the leader's lane is armed, it is lent those fetches as the request frames its loop reads;
when it stops, it hands back the ones it still holds, and each is registered again as a frame
waiting for the core's answer. The lane package itself knows nothing of the frame server or
its codecs: this module is where the two meet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kraft.protocol.api import ApiKey
from kraft.raft import messages as m
from kraft.server.fetch_fast import decode_fetch_request, encode_fetch_request
from kraft.server.frame_answer import FRAME_ANSWER_TIMEOUT_S, FrameAnswer
from kraft.server.frames import DeferredReply

if TYPE_CHECKING:
    from kraft.server.node import KraftNode


class NodeFetchFrames:
    """One node's parked fetch frames, as its leader's lane takes and hands them back."""

    __slots__ = ("_node",)

    def __init__(self, node: KraftNode) -> None:
        self._node = node

    def parked(self, correlation_id: int) -> tuple[int, int, int] | None:
        """The frame waiting under `correlation_id`: (its connection, version, wire
        correlation id), None when none waits (or the waiter is not a frame)."""
        answer = self._node._inbound.get(correlation_id)
        if type(answer) is not FrameAnswer:
            return None
        return answer.peer, answer.version, answer.corr

    def encode(self, request: m.FetchRequest, version: int, correlation_id: int
               ) -> bytes | None:
        """The request frame of `request` (`kraft.server.fetch_fast`), None for a shape the
        direct codec does not serve."""
        return encode_fetch_request(request, self._node.cluster_id, version, correlation_id,
                                    None)

    def take_back(self, frame: bytes, peer: int) -> tuple[int, m.FetchRequest, Any] | None:
        """Register a handed-back fetch frame as waiting for the core's answer on `peer`:
        (its id, the request, the reply the connection writes); None when it cannot be read."""
        node = self._node
        assert node._loop is not None
        got = decode_fetch_request(frame, node.cluster_id)
        if got is None:
            return None
        version, wire_corr, req = got
        node._inbound_ids += 1
        key = node._inbound_ids
        reply = DeferredReply()
        answer = FrameAnswer(ApiKey.FETCH, version, wire_corr, reply,
                             node._loop.time() + FRAME_ANSWER_TIMEOUT_S, peer)
        node._inbound[key] = answer
        node._sweep.ask(answer.deadline)
        return key, req, reply
