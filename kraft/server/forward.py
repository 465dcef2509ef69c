"""Forwarding of KV calls from a follower or an observer to the leader.

Only the leader can order a write or prove a read current, but a client behind a
load-balancing Service reaches any node. So a node that is not the leader does what an etcd
follower does with a proposal: it hands the call to the leader and relays the answer. It
reaches the leader the way it already does for replication, through the leader's controller
listener at the address the quorum gave it (the voters set, the leader's endpoints in a Fetch
or BeginQuorumEpoch, or `controller.quorum.voters`), so no address list is configured and a
voter added or moved is followed at once.

The call travels in one request of the project's own: `ForwardKv`, api key
`FORWARD_KV_API_KEY`, version 0, in Kafka's framing (a size-prefixed frame, request header
v1, response header v0) with a body of its own (below). It is not one of Kafka's RPCs and
Kafka's own RPCs are unchanged: ApiVersions does not list it. A leader of this project that
does not know it (an older version) answers UNSUPPORTED_VERSION as for any unknown api
(KIP-511), which the forwarder reports as "the leader cannot take forwarded calls"; a Java
controller closes the connection instead (a write is then of unknown outcome). The
forwarder keeps its own connection to the leader, apart from the replication connection, so a
call never waits behind a parked Fetch (a listener answers a connection's requests in order).

Request body (all big-endian): `string ClusterId | int8 Operation | string Key | bytes Value
| bytes Expected | int32 TimeoutMs`, where a string is an int16 length and UTF-8, and bytes an
int32 length (-1 = null). Operations: 0 GET, 1 PUT, 2 DELETE, 3 CAS (Expected null: the key
must be absent; Value null: CAS to delete).

Response body: `int16 ErrorCode | int32 LeaderId | int8 OutcomeUnknown | int64 Offset |
int8 Ok | bytes Value | nullable string ErrorMessage`. `Ok` is GET's "found", DELETE's
"existed" and CAS's "swapped"; `Value` is GET's value and CAS's previous value; `Offset` is
PUT's committed offset.

A key above `kraft.statemachine.kv.MAX_KEY_BYTES` is refused with INVALID_REQUEST, and a value
or expected value above MAX_VALUE_BYTES with MESSAGE_TOO_LARGE, both naming the limit; nothing
of such a call is proposed.

What keeps it linearizable and every write applied at most once as asked:
* The leader runs a forwarded call exactly as one made to it over HTTP: a write is proposed
  and answered once committed and applied, a read goes through the read barrier. A node that
  is not the leader never forwards a forwarded call again: it answers NOT_LEADER_OR_FOLLOWER.
* NOT_LEADER_OR_FOLLOWER means the call never reached the log (the leader refuses before
  proposing), so the forwarder tries again with the next leader, within the call's time.
* A write whose request may have been sent and whose answer was lost (connection reset,
  timeout), or that the leader reports as of unknown outcome (it lost leadership before the
  commit), is reported as of unknown outcome and never sent again: the client decides, as it
  would had it called the leader itself. A read has no effect, so it is simply tried again.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kraft.protocol.errors import ErrorCode
from kraft.server.frames import FrameConnection
from kraft.server.kv_api import (
    ForwardRefusedError,
    KvAnswer,
    KvCall,
    KvOp,
    NotLeaderError,
    OutcomeUnknownError,
    WriteRefusedError,
)
from kraft.statemachine.kv import call_refusal

log = logging.getLogger("kraft.server.forward")

__all__ = [
    "FORWARD_KV_API_KEY",
    "FORWARD_KV_VERSION",
    "BadForwardedCall",
    "ForwardedAnswer",
    "Forwarder",
    "Target",
    "decode_answer",
    "decode_call",
    "encode_answer",
    "encode_call",
    "is_forward_frame",
]

FORWARD_KV_API_KEY = 32000
"""The project's own api key for a forwarded KV call: far above Kafka's (below 100 today), so
it never meets one of Kafka's."""

FORWARD_KV_VERSION = 0

_KEY_PREFIX = struct.pack(">h", FORWARD_KV_API_KEY)
_HEADER = struct.Struct(">hhi")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ANSWER_HEAD = struct.Struct(">ihib")
_OFFSET_OK = struct.Struct(">qb")

_RETRY_WAIT_S = 0.1
"""How long the forwarder waits for news of the leader before trying again after a refused
connection or a NOT_LEADER answer (a new leader wakes it sooner)."""

_ANSWER_MARGIN_S = 1.0
"""The forwarder waits this much longer than the time it gives the leader, so the leader's
own timeout answer arrives before the connection is given up (which would fail every call
in flight on it)."""


class BadForwardedCall(ValueError):
    """A ForwardKv request that cannot be read; `correlation_id` is None when even the
    header could not be."""

    def __init__(self, message: str, correlation_id: int | None,
                 error: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id
        self.error = error


def is_forward_frame(frame: bytes | memoryview) -> bool:
    """True when a request frame (no size prefix) carries the ForwardKv api key."""
    return bytes(frame[:2]) == _KEY_PREFIX


def _string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def _bytes(data: bytes | None) -> bytes:
    return _I32.pack(-1) if data is None else _I32.pack(len(data)) + data


class _Reader:
    """Reads the fields of one frame; raises ValueError on a frame cut short."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = memoryview(data)
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"frame cut short: {n} bytes wanted at {self.pos} of {len(self.data)}")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def unpack(self, s: struct.Struct) -> int:
        value: int = s.unpack(self.take(s.size))[0]
        return value

    def string(self) -> str | None:
        n = self.unpack(_I16)
        return None if n == -1 else self.take(n).decode()

    def bytes_(self) -> bytes | None:
        n = self.unpack(_I32)
        return None if n == -1 else self.take(n)


def encode_call(correlation_id: int, client_id: str, cluster_id: str, call: KvCall,
                timeout_ms: int) -> bytes:
    """The ForwardKv request frame (without its size prefix)."""
    return b"".join((
        _HEADER.pack(FORWARD_KV_API_KEY, FORWARD_KV_VERSION, correlation_id), _string(client_id),
        _string(cluster_id), _I8.pack(int(call.op)), _string(call.key), _bytes(call.value),
        _bytes(call.expected), _I32.pack(timeout_ms)))


@dataclass(frozen=True, slots=True)
class DecodedCall:
    """A ForwardKv request as the leader reads it."""

    correlation_id: int
    version: int
    cluster_id: str | None
    call: KvCall | None
    """None when the version is not one this node speaks (the rest is not read)."""
    timeout_ms: int


def decode_call(frame: bytes | memoryview) -> DecodedCall:
    """Read a ForwardKv request frame; raises BadForwardedCall naming what is wrong."""
    r = _Reader(frame)
    try:
        _api, version, corr = (r.unpack(_I16), r.unpack(_I16), r.unpack(_I32))
    except ValueError as exc:
        raise BadForwardedCall(f"bad ForwardKv request header: {exc}", None) from None
    try:
        r.string()  # client id
        if version != FORWARD_KV_VERSION:
            return DecodedCall(corr, version, None, None, 0)
        cluster_id = r.string()
        op_code = r.unpack(_I8)
        try:
            op = KvOp(op_code)
        except ValueError:
            raise ValueError(f"unknown operation {op_code}") from None
        key = r.string()
        if not key:
            raise ValueError("the key is missing")
        value, expected, timeout_ms = r.bytes_(), r.bytes_(), r.unpack(_I32)
        if op == KvOp.PUT and value is None:
            raise ValueError("PUT without a value")
        if r.pos != len(r.data):
            raise ValueError(f"{len(r.data) - r.pos} bytes after the body")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadForwardedCall(f"bad ForwardKv request: {exc}", corr) from None
    refused = call_refusal(key, value, expected)
    if refused is not None:
        why, value_too_large = refused
        raise BadForwardedCall(f"ForwardKv {op.name} refused: {why}", corr,
                               ErrorCode.MESSAGE_TOO_LARGE if value_too_large
                               else ErrorCode.INVALID_REQUEST)
    return DecodedCall(corr, version, cluster_id, KvCall(op, key, value, expected),
                       max(0, timeout_ms))


def encode_answer(correlation_id: int, error: ErrorCode, leader_id: int = -1,
                  outcome_unknown: bool = False, answer: KvAnswer | None = None,
                  message: str | None = None) -> bytes:
    """The ForwardKv response frame (without its size prefix)."""
    offset, ok, value = (answer.offset, answer.ok, answer.value) if answer else (-1, False, None)
    return b"".join((
        _ANSWER_HEAD.pack(correlation_id, int(error), leader_id, int(outcome_unknown)),
        _OFFSET_OK.pack(offset, int(ok)), _bytes(value), _string(message)))


@dataclass(frozen=True, slots=True)
class ForwardedAnswer:
    """A ForwardKv response as the forwarder reads it."""

    error: int
    leader_id: int
    outcome_unknown: bool
    answer: KvAnswer | None
    message: str | None


def decode_answer(frame: bytes | memoryview, correlation_id: int) -> ForwardedAnswer:
    """Read a ForwardKv response frame; an UNSUPPORTED_VERSION answer (an ApiVersions v0 body
    from a leader that does not know the api) is returned with only its error code."""
    r = _Reader(frame)
    corr = r.unpack(_I32)
    if corr != correlation_id:
        raise ValueError(f"correlation id {corr} != {correlation_id}")
    error = r.unpack(_I16)
    if error == ErrorCode.UNSUPPORTED_VERSION:
        return ForwardedAnswer(error, -1, False, None, "the leader does not serve ForwardKv")
    leader_id, unknown = r.unpack(_I32), bool(r.unpack(_I8))
    offset, ok = r.unpack(_I64), bool(r.unpack(_I8))
    value, message = r.bytes_(), r.string()
    answer = KvAnswer(offset, ok, value) if error == ErrorCode.NONE else None
    return ForwardedAnswer(error, leader_id, unknown, answer, message)


@dataclass(frozen=True, slots=True)
class Target:
    """Where a call goes now: this node (`local`), the leader at `address`, or nowhere yet
    (`address` None: no leader known, or its address not known)."""

    local: bool
    leader_id: int
    address: tuple[str, int] | None


_READ_RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT,
                             ErrorCode.UNKNOWN_SERVER_ERROR})


class _NotSent(Exception):
    """The call was never written to a connection (the connection could not be made)."""


class Forwarder:
    """Sends KV calls to the leader (see the module docstring) for a node that is not it.

    `target()` says where a call goes now; `run_local(call)` runs it on this node when it is
    the leader (raising NotLeaderError, with nothing proposed, when it is not);
    `leader_news(timeout_s)` returns once this node's view of the leader changed, or after
    `timeout_s`.
    """

    def __init__(self, node_id: int, cluster_id: str, target: Callable[[], Target],
                 run_local: Callable[[KvCall], Awaitable[KvAnswer]],
                 leader_news: Callable[[float], Awaitable[None]],
                 tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        self.client_id = f"kraft-forward-{node_id}"
        self._tls = tls
        self.cluster_id = cluster_id
        self._target = target
        self._run_local = run_local
        self._leader_news = leader_news
        self._conns: dict[tuple[str, int], FrameConnection] = {}
        self._opening: dict[tuple[str, int], asyncio.Future[FrameConnection]] = {}
        self._corr = 0

    async def call(self, call: KvCall, timeout_s: float) -> KvAnswer:
        """Run `call` at the leader within `timeout_s`.

        Raises NotLeaderError when no leader took it in time (nothing was applied),
        OutcomeUnknownError when a write may or may not have been applied, ForwardRefusedError when
        the leader refused it as invalid.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_leader = -1
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise NotLeaderError(last_leader, None)
            target = self._target()
            if target.local:
                try:
                    return await self._run_local(call)
                except NotLeaderError:  # lost it since: nothing proposed, ask again
                    await self._leader_news(min(remaining, _RETRY_WAIT_S))
                    continue
            last_leader = target.leader_id
            if target.address is None:
                await self._leader_news(min(remaining, _RETRY_WAIT_S))
                continue
            try:
                answer = await self._send(target.address, call, remaining)
            except _NotSent as exc:
                log.debug("event=forward_not_sent leader=%d error=%r", target.leader_id,
                          str(exc))
                await self._leader_news(min(remaining, _RETRY_WAIT_S))
                continue
            except (ConnectionError, OSError, TimeoutError, ValueError) as exc:
                if call.op == KvOp.GET:  # no effect: try again
                    await self._leader_news(min(deadline - loop.time(), _RETRY_WAIT_S))
                    continue
                raise OutcomeUnknownError(
                    f"forwarded to leader {target.leader_id}, answer lost: {exc}") from None
            if answer.error == ErrorCode.NONE and answer.answer is not None:
                return answer.answer
            if call.op == KvOp.GET and answer.error in _READ_RETRIABLE:  # no effect: again
                await self._leader_news(min(deadline - loop.time(), _RETRY_WAIT_S))
                continue
            if answer.outcome_unknown:
                raise OutcomeUnknownError(answer.message or
                                          f"leader {target.leader_id}: outcome unknown")
            if answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                await self._leader_news(min(deadline - loop.time(), _RETRY_WAIT_S))
                continue
            if answer.error == ErrorCode.UNSUPPORTED_VERSION:
                raise NotLeaderError(target.leader_id, None)
            if answer.error == ErrorCode.REQUEST_TIMED_OUT:
                raise OutcomeUnknownError(answer.message or "timed out at the leader")
            if answer.error == ErrorCode.MESSAGE_TOO_LARGE:
                raise WriteRefusedError(answer.message or "too large for the leader")
            name = (ErrorCode(answer.error).name if answer.error in ErrorCode._value2member_map_
                    else str(answer.error))
            raise ForwardRefusedError(f"leader {target.leader_id} refused the call: {name}"
                               + (f" ({answer.message})" if answer.message else ""))

    async def _connection(self, address: tuple[str, int], timeout_s: float) -> FrameConnection:
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        opening = self._opening.get(address)
        if opening is not None:
            try:
                return await asyncio.wait_for(asyncio.shield(opening), timeout_s)
            except (OSError, TimeoutError) as exc:
                raise _NotSent(str(exc)) from None
        fut: asyncio.Future[FrameConnection] = asyncio.get_running_loop().create_future()
        self._opening[address] = fut
        conn = FrameConnection(address[0], address[1], tls=self._tls)
        try:
            await conn.open(timeout_s)
        except BaseException as exc:
            # also when this call is cancelled (its client went away): the calls waiting for
            # the same connection must not wait for an open nobody finishes
            conn.close()
            fut.set_exception(exc if isinstance(exc, OSError | TimeoutError)
                              else ConnectionError(f"connect abandoned: {exc!r}"))
            fut.exception()  # retrieved: waiters see it through shield
            if not isinstance(exc, OSError | TimeoutError):
                raise
            raise _NotSent(f"connect to {address[0]}:{address[1]}: {exc!r}") from None
        finally:
            self._opening.pop(address, None)
        fut.set_result(conn)
        self._conns[address] = conn
        return conn

    async def _send(self, address: tuple[str, int], call: KvCall,
                    timeout_s: float) -> ForwardedAnswer:
        conn = await self._connection(address, timeout_s)
        self._corr = (self._corr + 1) & 0x7FFFFFFF
        corr = self._corr
        frame = encode_call(corr, self.client_id, self.cluster_id, call, int(timeout_s * 1000))
        if conn.closed:  # closed since it was handed out: nothing written
            raise _NotSent(f"connection to {address[0]}:{address[1]} closed")
        raw = await conn.request(frame, timeout_s + _ANSWER_MARGIN_S)
        try:
            return decode_answer(raw, corr)
        except ValueError:
            conn.close()  # the stream position is not trusted any more
            raise

    def close(self) -> None:
        """Close every connection (calls in flight fail)."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
