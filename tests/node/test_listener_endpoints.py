"""An answer names the leader's endpoint on the listener its request came on
(`kraft.server.frame_answer.endpoints_for_listener`), as Kafka's KafkaRaftClient answers with
the request's listener name: a peer that dialled the TLS listener is sent to the leader's
TLS endpoint, one that dialled plaintext to its plaintext one, whatever order the leader
lists its listeners in."""

from __future__ import annotations

from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.raft import messages as m
from kraft.server.frame_answer import FrameAnswer, endpoints_for_listener
from kraft.server.frames import DeferredReply
from kraft.server.translate import response_to_core

LEADER = (m.Endpoint("CONTROLLER", "10.0.0.1", 9093),
          m.Endpoint("CONTROLLER_SSL", "10.0.0.1", 9094))


def _vote(endpoints: tuple[m.Endpoint, ...]) -> m.VoteResponse:
    return m.VoteResponse(ErrorCode.NONE, 1, 4, False, endpoints)


def test_the_endpoint_of_the_requests_listener_is_kept() -> None:
    assert endpoints_for_listener(_vote(LEADER), "CONTROLLER_SSL").leader_endpoints == (
        LEADER[1],)
    assert endpoints_for_listener(_vote(LEADER), "controller").leader_endpoints == (LEADER[0],)
    # a listener the leader has no endpoint on: none (the peer takes the voters set's)
    assert endpoints_for_listener(_vote(LEADER), "OTHER").leader_endpoints == ()
    plain = _vote(())
    assert endpoints_for_listener(plain, "CONTROLLER") is plain


def test_a_fetch_answer_on_the_tls_listener_names_the_tls_port() -> None:
    from kraft.protocol.framing import decode_response

    for listener, port in (("CONTROLLER_SSL", 9094), ("CONTROLLER", 9093)):
        reply = DeferredReply()
        got: list[object] = []
        reply.bind(got.append)
        answer = FrameAnswer(ApiKey.FETCH, 17, 7, reply, 0.0, listener=listener)
        answer.finish(m.FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 1, 4, -1, 0,
                                      leader_endpoints=LEADER), None)
        body = got[0]
        assert isinstance(body, bytes)
        _, data = decode_response(ApiKey.FETCH, 17, body)
        core = response_to_core(data, listener)
        assert core.leader_endpoints == (m.Endpoint(listener, "10.0.0.1", port),), listener
