"""A hostile peer or client, run as its own process (`python tests/support/attacker.py MODE
HOST PORT SPEC`): it builds its frames by hand with the standard library only (none of the
node's own client or codec code), sends them, and prints what came back as one JSON line.

Modes:

- `client`: SPEC is a JSON list of `[op, key length, value length]` requests of the binary
  client protocol (key `k` * length, value `v` * length; a key length below 0 names the key
  `ok<index>` instead); the answers, in request order: `[status, offset, payload text]`.
- `forward`: SPEC is `{"cluster_id", "op", "key_bytes", "value_bytes"}`: one ForwardKv
  request on the controller listener; the answer `{"error", "message"}` (`error` None when
  the connection closed without one).
"""

from __future__ import annotations

import json
import socket
import struct
import sys


def read_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from `sock`, or ConnectionError naming how many came first."""
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def client(host: str, port: int, spec: list[list[int]]) -> list[list[object]]:
    """Binary client protocol: u32 length | u32 id | u8 op | u16 key length | key | value;
    answer u32 length | u32 id | u8 status | i64 offset | i32 leader id | payload."""
    frames = []
    for i, (op, klen, vlen) in enumerate(spec):
        key = f"ok{i}".encode() if klen < 0 else b"k" * klen
        value = b"v" * vlen
        frames.append(struct.pack(">IIBH", 7 + len(key) + len(value), i + 1, op, len(key))
                      + key + value)
    answers: dict[int, list[object]] = {}
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(b"".join(frames))
        while len(answers) < len(spec):
            (length,) = struct.unpack(">I", read_exact(sock, 4))
            body = read_exact(sock, length)
            rid, status, offset, _leader = struct.unpack_from(">IBqi", body)
            answers[rid] = [status, offset, body[17:].decode(errors="replace")[:300]]
    return [answers[i + 1] for i in range(len(spec))]


def _string(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text


def _bytes(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def forward(host: str, port: int, spec: dict[str, object]) -> dict[str, object]:
    """ForwardKv (api key 32000, version 0), request header v1: api key, version, correlation
    id, client id; body: cluster id, op, key, value, expected, timeout ms. Answer (response
    header v0): correlation id | i16 error | i32 leader | i8 unknown | i64 offset | i8 ok |
    bytes value | nullable string message."""
    key = b"k" * int(spec["key_bytes"])  # type: ignore[call-overload]
    value = b"v" * int(spec["value_bytes"])  # type: ignore[call-overload]
    body = (struct.pack(">hhi", 32000, 0, 7) + _string(b"attacker")
            + _string(str(spec["cluster_id"]).encode()) + struct.pack(">b", int(spec["op"]))  # type: ignore[call-overload]
            + _string(key) + _bytes(value) + _bytes(None) + struct.pack(">i", 5000))
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        try:
            (length,) = struct.unpack(">i", read_exact(sock, 4))
            answer = read_exact(sock, length)
        except (ConnectionError, OSError):
            return {"error": None, "message": None}
    corr, error = struct.unpack_from(">ih", answer)
    assert corr == 7, corr
    pos = 6 + 4 + 1 + 8 + 1
    (vlen,) = struct.unpack_from(">i", answer, pos)
    pos += 4 + max(vlen, 0)
    (mlen,) = struct.unpack_from(">h", answer, pos)
    message = answer[pos + 2:pos + 2 + mlen].decode() if mlen >= 0 else None
    return {"error": error, "message": message}


def main(argv: list[str]) -> None:
    mode, host, port, spec = argv[1], argv[2], int(argv[3]), json.loads(argv[4])
    out = client(host, port, spec) if mode == "client" else forward(host, port, spec)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv)
