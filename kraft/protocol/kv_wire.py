"""The binary KV client protocol's frames: its ops, statuses, heads and encoders.

The node's side is `kraft.server.client_protocol`, the client's `kraft.admin.kv_client`; both
take the format from here, so neither imports the other.

Request frame:  u32 length | u32 id | u8 op | u16 key length | key (UTF-8) | value (the rest)
Response frame: u32 length | u32 id | u8 status | i64 offset | i32 leader id | payload

`length` counts the bytes after itself. Ops: PUT (1), GET (2, linearizable: read barrier),
DELETE (3), GET_STALE (4, local state, no barrier), AUTH (5: the key is the mechanism,
`bearer`, the value the token; answered OK with the principal and its scope as payload,
`token:<name> write`). Statuses: OK (0), NOT_FOUND (1, GET of a missing key or DELETE of one),
NOT_LEADER (2: `leader id` is the leader or -1, the payload its HTTP address if known),
UNKNOWN_OUTCOME (3: the write may or may not have been applied), ERROR (4: payload is the
message), UNAUTHENTICATED (5: the port needs a credential and the connection has none, or an
AUTH named an unknown token, after which the server closes the connection), FORBIDDEN (6: the
connection's credential lacks the op's scope: read for GET and GET_STALE, write for PUT and
DELETE). `offset` is the record's log offset for writes, else -1.
"""

from __future__ import annotations

import struct

OP_PUT, OP_GET, OP_DELETE, OP_GET_STALE, OP_AUTH = 1, 2, 3, 4, 5
OK, NOT_FOUND, NOT_LEADER, UNKNOWN_OUTCOME, ERROR, UNAUTHENTICATED, FORBIDDEN = range(7)
AUTH_BEARER = "bearer"
"""The one AUTH mechanism: the value is a token of the node's token file."""
REQUEST_HEAD = struct.Struct(">IBH")  # id, op, key length (after the u32 length)
RESPONSE_HEAD = struct.Struct(">IIBqi")  # length, id, status, offset, leader id
REQUEST_FRAME_HEAD = struct.Struct(">IIBH")  # length, id, op, key length: a request's first bytes


def encode_request(request_id: int, op: int, key: str, value: bytes = b"") -> bytes:
    """One request frame (the length and the head packed in one call: this runs per write)."""
    k = key.encode()
    return REQUEST_FRAME_HEAD.pack(REQUEST_HEAD.size + len(k) + len(value), request_id, op,
                                   len(k)) + k + value


def encode_response(request_id: int, status: int, offset: int = -1, leader_id: int = -1,
                    payload: bytes = b"") -> bytes:
    """One response frame."""
    return RESPONSE_HEAD.pack(RESPONSE_HEAD.size - 4 + len(payload), request_id, status, offset,
                              leader_id) + payload
