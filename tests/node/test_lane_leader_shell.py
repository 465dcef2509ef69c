"""The leader lane's I/O loop (`kraft.raft._lane.LeaderShell`, docs/native-lane.md step 3),
driven by a client and two voters played by the test over socket pairs, with the Python codecs
(`kraft.server.client_protocol`, `kraft.server.fetch_fast`) on the test's side."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.raft.lane import LaneVoter, LeaderLane, native, to_native
from kraft.raft.messages import ReplicaKey
from kraft.records.batch import iter_batches
from kraft.server.client_protocol import (
    OK,
    OP_GET,
    OP_PUT,
    RESPONSE_HEAD,
    encode_request,
)
from kraft.server.fetch_fast import decode_fetch_response, encode_fetch_request
from kraft.statemachine.kv import encode_put

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.raft._lane was not built (no C compiler)")

CLUSTER = "abcdefghijklmnopqrstuv"
DIRS = {2: Uuid(bytes([2]) * 16), 3: Uuid(bytes([3]) * 16)}


class Voter:
    """A voter's end: sends fetches, reads the leader's answers."""

    def __init__(self, rid: int, sock: socket.socket) -> None:
        self.rid, self.sock, self.corr = rid, sock, 0
        sock.settimeout(10)

    def fetch(self, offset: int, epoch: int = 1, last_epoch: int = 1) -> int:
        self.corr += 1
        req = m.FetchRequest(self.rid, DIRS[self.rid], epoch, offset, last_epoch, 500, 1 << 20,
                             -1)
        frame = encode_fetch_request(req, CLUSTER, 18, self.corr, None)
        assert frame is not None
        self.sock.sendall(struct.pack(">I", len(frame)) + frame)
        return self.corr

    def answer(self) -> m.FetchResponse:
        size = struct.unpack(">I", _exactly(self.sock, 4))[0]
        r = decode_fetch_response(_exactly(self.sock, size), 18, self.corr, "CONTROLLER")
        assert r is not None and r.error_code == ErrorCode.NONE
        return r

    def nothing(self) -> bool:
        return not select.select([self.sock], [], [], 0.2)[0]


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the leader closed the connection"
        out += chunk
    return out


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[tuple[Any, socket.socket, dict[int, Voter], Path]]:
    assert C is not None
    client_mine, client = socket.socketpair()
    pairs = {rid: socket.socketpair() for rid in DIRS}
    path = tmp_path / "leader.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    lease = LeaderLane(1, 0, 0, 1, 1, 1, [LaneVoter(1, None, True)] + [
        LaneVoter(rid, ReplicaKey(rid, d), False, 1) for rid, d in DIRS.items()])
    shell = C.LeaderShell(client_mine.fileno(), [(mine.fileno(), rid)
                                                 for rid, (mine, _) in pairs.items()],
                          fd, 0, to_native(lease, C), 1, CLUSTER, 0, 1_700_000_000_000)
    client.settimeout(10)
    try:
        yield shell, client, {rid: Voter(rid, theirs) for rid, (_, theirs) in pairs.items()}, path
    finally:
        with contextlib.suppress(RuntimeError):
            shell.stop()
        for a, b in [*pairs.values(), (client_mine, client)]:
            a.close()
            b.close()
        os.close(fd)


def answers(client: socket.socket, n: int) -> list[tuple[int, int, int]]:
    out = []
    for _ in range(n):
        _length, rid, status, offset, _leader = RESPONSE_HEAD.unpack(
            _exactly(client, RESPONSE_HEAD.size))
        out.append((rid, status, offset))
    return out


def test_a_put_is_replicated_to_the_parked_fetches_and_answered_at_commit(quorum: Any) -> None:
    shell, client, voters, path = quorum
    shell.start()
    for v in voters.values():
        v.fetch(1)  # caught up: parked
    client.sendall(encode_request(40, OP_PUT, "k", b"v1"))
    got = {rid: v.answer() for rid, v in voters.items()}
    for r in got.values():
        assert [(b.base_offset, b.last_offset, b.epoch) for b in r.batches] == [(1, 1, 1)]
        assert r.leader_id == 1 and r.leader_epoch == 1
    assert select.select([client], [], [], 0.2)[0] == []  # not committed yet: no answer
    voters[2].fetch(2)  # one acknowledgement: with the leader, a majority
    assert answers(client, 1) == [(40, OK, 1)]
    batch = bytes(got[2].batches[0].payload)  # type: ignore[arg-type]
    assert path.read_bytes() == batch
    assert [bytes(v) for b in iter_batches(batch) for v in b.values()] == [encode_put("k", b"v1")]
    report = shell.stop()
    assert (report["reason"], report["batches"], report["answered"]) == ("stopped", 1, 1)
    assert (report["log_end"], report["durable"], report["high_watermark"]) == (2, 2, 2)


def test_a_voter_behind_gets_every_batch_it_lacks_in_one_answer(quorum: Any) -> None:
    shell, client, voters, _path = quorum
    shell.start()
    voters[2].fetch(1)
    for n in range(3):  # voter 2 alone keeps up; voter 3 has not fetched since offset 1
        client.sendall(encode_request(n, OP_PUT, f"k{n}", b"v"))
        assert voters[2].answer().batches[0].base_offset == 1 + n
        voters[2].fetch(2 + n)
        assert answers(client, 1) == [(n, OK, 1 + n)]
    voters[3].fetch(1)
    assert [b.base_offset for b in voters[3].answer().batches] == [1, 2, 3]


@pytest.mark.parametrize(("why", "act"), [
    ("a GET from the client", lambda c, v: c.sendall(encode_request(1, OP_GET, "k"))),
    ("a fetch of another epoch", lambda c, v: v[2].fetch(1, epoch=2)),
    ("a fetch diverging from the epoch", lambda c, v: v[2].fetch(1, last_epoch=0)),
])
def test_what_the_lease_does_not_cover_is_handed_over(quorum: Any, why: str, act: Any) -> None:
    shell, client, voters, _path = quorum
    shell.start()
    act(client, voters)
    assert select.select([shell.done_fd], [], [], 10)[0], why
    assert shell.stop()["reason"] == "handover", why


def test_a_bad_setup_is_refused_with_what_is_wrong(tmp_path: Path) -> None:
    assert C is not None
    lane = to_native(LeaderLane(1, 0, 0, 1, 1, 1, [LaneVoter(1, None, True)]), C)
    ok: dict[str, Any] = {"client": 0, "voters": [], "log_fd": 0, "write_pos": 0, "lane": lane,
                          "leader_id": 1, "cluster_id": CLUSTER, "log_start": 0,
                          "timestamp_ms": 0}
    for field, bad, error, text in [
        ("lane", object(), TypeError, "lane must be a kraft.raft._lane.LeaderLane"),
        ("write_pos", -1, ValueError, "must not be negative"),
        ("voters", [(0, 2)] * 9, ValueError, "at most 8 voters"),
        ("voters", [(0,)], TypeError, ""),
    ]:
        with pytest.raises(error, match=text or None):
            C.LeaderShell(**{**ok, field: bad})
    with pytest.raises(RuntimeError, match="was not started"):
        C.LeaderShell(**ok).stop()
