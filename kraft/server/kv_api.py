"""The KV API's types, shared by every listener that takes KV calls (the HTTP API, the binary
client protocol, forwarding) and the KV front end (`kraft.server.kv_front`) that runs them:
the call and its answer, and the errors a call ends with."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class NotLeaderError(Exception):
    """This node is not the leader; `leader_id` is -1 when no leader is known."""

    def __init__(self, leader_id: int, leader_http: str | None) -> None:
        super().__init__(f"not the leader (leader is {leader_id})")
        self.leader_id = leader_id
        self.leader_http = leader_http


class OutcomeUnknownError(Exception):
    """A write was accepted but its fate is unknown (leader change, timeout)."""


class WriteRefusedError(ValueError):
    """A write refused before anything was proposed (a key, a value or a record above its
    limit): nothing was applied. `too_large` is set when a value or a record is too large
    (HTTP 413), not only its key (HTTP 400)."""

    def __init__(self, message: str, too_large: bool = True) -> None:
        super().__init__(message)
        self.too_large = too_large


class KafkaQuorumError(WriteRefusedError):
    """A KV call refused because the quorum has Apache Kafka controllers (HTTP 409): a KV
    record in their metadata log would be replayed by Kafka's QuorumController, which knows no
    such record (docs/node.md, "A quorum with Kafka controllers"). Nothing was proposed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, too_large=False)


class ForwardRefusedError(Exception):
    """The leader refused a forwarded call as invalid (nothing was applied)."""


class KvOp(enum.IntEnum):
    """The operations of the KV API (their codes travel in forwarded calls)."""

    GET = 0
    PUT = 1
    DELETE = 2
    CAS = 3


@dataclass(frozen=True, slots=True)
class KvCall:
    """One KV call: `value` is PUT's value and CAS's new value (None: delete), `expected`
    CAS's expected value (None: the key must be absent)."""

    op: KvOp
    key: str
    value: bytes | None = None
    expected: bytes | None = None


@dataclass(frozen=True, slots=True)
class KvAnswer:
    """The answer to a KvCall: `offset` is PUT's committed offset (-1 otherwise); `ok` is
    GET's "found", DELETE's "existed" and CAS's "swapped"; `value` GET's value and CAS's
    previous value."""

    offset: int = -1
    ok: bool = False
    value: bytes | None = None
