"""A Kafka request frame waiting for the core's answer (`FrameAnswer`), and how long it may
wait.

Shared by the node (`kraft.server.node`), which registers one per request frame it hands the
core, and what the node lends the leader's lane (`kraft.server.lane_host`), which registers one
per parked fetch the lane hands back: a module below both, so neither imports the other for it.
"""

from __future__ import annotations

import dataclasses
import logging

from kraft.protocol.api import ApiKey, api_spec
from kraft.protocol.codec import Spliced
from kraft.protocol.errors import ErrorCode
from kraft.protocol.framing import encode_response, encode_response_parts
from kraft.raft import messages as m
from kraft.server.features import core_answer, update_features_response
from kraft.server.fetch_fast import encode_fetch_response
from kraft.server.frames import DeferredReply, ReplyBody
from kraft.server.translate import remove_voter_response, response_to_wire

log = logging.getLogger("kraft.server.node")
"""The node's logger: what goes wrong answering a frame is logged as the node's, as before."""

SPLICE_RECORDS_BYTES = 64 * 1024
"""Records (a snapshot chunk, a fetch's batches) at least this large are written to the
socket as they were read, not copied into the encoded response."""
FRAME_ANSWER_TIMEOUT_S = 60.0
"""A request frame the core has not answered by then gets REQUEST_TIMED_OUT (AddRaftVoter:
its own TimeoutMs plus 5 s when longer)."""


class FrameAnswer:
    """A Kafka request frame waiting for the core's answer: encodes it into the frame body
    the listener writes back (or a REQUEST_TIMED_OUT answer when the core never answers)."""

    __slots__ = ("api", "audit", "corr", "deadline", "features", "future", "listener", "peer",
                 "version")

    def __init__(self, api: ApiKey, version: int, corr: int, future: DeferredReply,
                 deadline: float, peer: int = -1, features: tuple[str, ...] = (),
                 audit: str | None = None, listener: str = "") -> None:
        self.listener = listener
        """The name of the listener the frame came on ("": unknown): the answer carries the
        leader's endpoint of that listener only (`endpoints_for_listener`)."""
        self.audit = audit
        """A change of membership or features: what was asked and by whom (`audit_line`),
        logged once with its outcome when answered."""
        self.features = features
        """UpdateFeatures: the request's feature names, one result each on success."""
        self.api = api
        self.version = version
        self.corr = corr
        self.future = future
        self.deadline = deadline
        """Loop time after which it is answered REQUEST_TIMED_OUT (`Peers._sweep_inbound`)."""
        self.peer = peer
        """The listener's id of the connection the frame came on (-1: not kept)."""

    def finish(self, response: m.Response, records: bytes | None) -> None:
        if self.future.done():
            return
        if self.audit is not None:
            code = getattr(response, "error_code", ErrorCode.NONE)
            log.info("%s result=%s", self.audit, ErrorCode(code).name)
        if self.listener:
            response = endpoints_for_listener(response, self.listener)
        try:
            body: ReplyBody | None = None
            if self.api is ApiKey.FETCH and type(response) is m.FetchResponse and (
                    records is None or len(records) < SPLICE_RECORDS_BYTES):
                # a follower's fetch: straight from the core's answer to the frame
                body = encode_fetch_response(self.version, self.corr, response, records)
            if body is None:
                body = self._general(response, records)
        except Exception as exc:  # the listener closes the connection
            log.error("event=response_not_encoded api=%s version=%d error=%r", self.api.name,
                      self.version, str(exc))
            body = None
        self.future.set(body)

    def _general(self, response: m.Response, records: bytes | None) -> ReplyBody:
        """The answer's frame body through the wire dataclasses and the generated codecs."""
        wire: object
        if self.api == ApiKey.UPDATE_FEATURES and isinstance(response,
                                                             m.UpdateKRaftVersionResponse):
            code, message = core_answer(response.error_code, response.error_message)
            return encode_response(self.api, self.version, self.corr, update_features_response(
                self.version, code, message, self.features))[4:]
        if self.api == ApiKey.REMOVE_RAFT_VOTER and isinstance(response, m.VoterChangeResponse):
            return encode_response(self.api, self.version, self.corr,
                                   remove_voter_response(response))[4:]
        if records is not None and len(records) >= SPLICE_RECORDS_BYTES:
            # the records (a snapshot chunk, a fetch's batches) go out as they were read
            wire = response_to_wire(response, self.version, Spliced(records))
            return encode_response_parts(self.api, self.version, self.corr, wire)
        wire = response_to_wire(response, self.version, records)
        return encode_response(self.api, self.version, self.corr, wire)[4:]

    def timed_out(self) -> None:
        if not self.future.done():
            if self.audit is not None:
                log.info("%s result=%s", self.audit, ErrorCode.REQUEST_TIMED_OUT.name)
            body = api_spec(self.api).response_class(error_code=int(ErrorCode.REQUEST_TIMED_OUT))
            self.future.set(encode_response(self.api, self.version, self.corr, body)[4:])


def endpoints_for_listener(response: m.Response, listener: str) -> m.Response:
    """`response` with only the leader's endpoints named `listener`: an answer names the
    leader's endpoint on the listener the request came on, as Kafka's KafkaRaftClient builds
    its answers with the request's listener name, so a peer that dialled a TLS listener is
    not sent to a plaintext one (or the other way round) while a quorum migrates between
    them. None of that name: no endpoint (the peer then uses the voters set's, as Kafka's
    does)."""
    endpoints: tuple[m.Endpoint, ...] = getattr(response, "leader_endpoints", ())
    if not endpoints:
        return response
    wanted = listener.upper()
    if len(endpoints) == 1 and endpoints[0].name.upper() == wanted:
        return response
    kept = tuple(e for e in endpoints if e.name.upper() == wanted)
    return dataclasses.replace(response, leader_endpoints=kept)  # type: ignore[arg-type]


def audit_line(request: m.Request, peer: str) -> str | None:
    """The start of the one INFO line a change of membership gets (completed with
    its result when answered), naming the address it came from; None for any other request."""
    if isinstance(request, m.AddRaftVoterRequest):
        what = (f"event=add_voter_request voter={request.voter_id} "
                f"directory_id={request.voter_directory_id} "
                f"listeners={_endpoints(request.listeners)}")
    elif isinstance(request, m.RemoveRaftVoterRequest):
        what = (f"event=remove_voter_request voter={request.voter_id} "
                f"directory_id={request.voter_directory_id}")
    elif isinstance(request, m.UpdateRaftVoterRequest):
        what = (f"event=update_voter_request voter={request.voter_id} "
                f"directory_id={request.voter_directory_id} "
                f"listeners={_endpoints(request.listeners)}")
    else:
        return None
    return f"{what} peer={peer}"


def _endpoints(listeners: tuple[m.Endpoint, ...]) -> str:
    return ",".join(f"{e.name}://{e.host}:{e.port}" for e in listeners) or "-"
