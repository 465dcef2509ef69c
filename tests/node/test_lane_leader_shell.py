"""The leader lane's I/O loop (`kraft.lane._native.LeaderShell`, docs/native-lane.md),
driven by a client and two voters played by the test over socket pairs, with the Python codecs
(`kraft.server.client_protocol`, `kraft.server.fetch_fast`) on the test's side."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraft.lane import LeaderLane, native, to_native
from kraft.protocol.errors import ErrorCode
from kraft.protocol.kv_wire import OK, OP_GET, OP_PUT, RESPONSE_HEAD, encode_request
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.raft.lease import LeaseVoter
from kraft.raft.messages import ReplicaKey
from kraft.records.batch import iter_batches
from kraft.server.fetch_fast import (
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_request,
)
from kraft.statemachine.kv import encode_put

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")

CLUSTER = "abcdefghijklmnopqrstuv"
DIRS = {2: Uuid(bytes([2]) * 16), 3: Uuid(bytes([3]) * 16)}


class Voter:
    """A voter's end: sends fetches, reads the leader's answers."""

    def __init__(self, rid: int, sock: socket.socket) -> None:
        self.rid, self.sock, self.corr = rid, sock, 0
        self.hw = 1  # the high watermark it last learned (the lease's, at first)
        sock.settimeout(10)

    def frame(self, offset: int, epoch: int = 1, last_epoch: int = 1, max_wait_ms: int = 500,
              version: int = 18) -> bytes:
        self.corr += 1
        req = m.FetchRequest(self.rid, DIRS[self.rid], epoch, offset, last_epoch, max_wait_ms,
                             1 << 20, self.hw if version >= 18 else None)
        frame = encode_fetch_request(req, CLUSTER, version, self.corr, None)
        assert frame is not None
        return struct.pack(">I", len(frame)) + frame

    def fetch(self, offset: int, epoch: int = 1, last_epoch: int = 1, max_wait_ms: int = 500,
              version: int = 18) -> int:
        self.sock.sendall(self.frame(offset, epoch, last_epoch, max_wait_ms, version))
        return self.corr

    def answer(self) -> m.FetchResponse:
        size = struct.unpack(">I", _exactly(self.sock, 4))[0]
        r = decode_fetch_response(_exactly(self.sock, size), 18, self.corr, "CONTROLLER")
        assert r is not None and r.error_code == ErrorCode.NONE
        self.hw = max(self.hw, r.high_watermark)
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


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair over loopback TCP (the loop's end first): unlike a socketpair's, its
    reads can carry the kernel's receive time (SO_TIMESTAMPNS)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        theirs = socket.create_connection(server.getsockname())
        mine, _ = server.accept()
    return mine, theirs


SO_TIMESTAMPNS = 35
"""Linux's (asm-generic) option number; the socket module does not name it."""


def wait_for_receive_times(timeout_s: float = 10.0) -> None:
    """Return once the kernel stamps received packets: setting SO_TIMESTAMPNS turns the
    stamping on through deferred work, so on a loaded machine the first packets after it can
    arrive unstamped. A throwaway pair of sockets shows when stamps come."""
    mine, theirs = _tcp_pair()
    with mine, theirs:
        mine.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        deadline = time.monotonic() + timeout_s
        while True:
            theirs.sendall(b"x")
            _data, anc, _flags, _addr = mine.recvmsg(1, socket.CMSG_SPACE(16))
            if anc:
                return
            assert time.monotonic() < deadline, "the kernel stamps no received packet"
            time.sleep(0.01)


def received_at(sock: socket.socket) -> int:
    """When the kernel received the next unread byte on `sock` (SO_TIMESTAMPNS set), in ns;
    the byte stays unread."""
    _data, anc, _flags, _addr = sock.recvmsg(1, socket.CMSG_SPACE(16), socket.MSG_PEEK)
    (level, kind, stamp), = anc
    assert (level, kind) == (socket.SOL_SOCKET, SO_TIMESTAMPNS)
    sec, nsec = struct.unpack("qq", stamp)
    return sec * 1_000_000_000 + nsec


@contextlib.contextmanager
def leader_shell(tmp_path: Path, extra_voters: int = 0, tcp: bool = False, **kw: Any,
                 ) -> Iterator[tuple[Any, socket.socket, dict[int, Voter], Path,
                                     dict[object, socket.socket]]]:
    """A LeaderShell of epoch 1 (log 0-0, committed) over a client and voters 2 and 3, with
    `extra_voters` more voters in the lease that have no connection (they never fetch). The
    last item holds the loop's ends of the sockets ("client", 2, 3). With `tcp`, the
    connections are loopback TCP instead of socketpairs."""
    assert C is not None
    make = _tcp_pair if tcp else socket.socketpair
    client_mine, client = make()
    pairs = {rid: make() for rid in DIRS}
    path = tmp_path / "leader.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    extra = [LeaseVoter(10 + i, ReplicaKey(10 + i, Uuid(bytes([10 + i]) * 16)), False, 1)
             for i in range(extra_voters)]
    lease = LeaderLane(1, 0, 0, 1, 1, 1, [LeaseVoter(1, None, True)] + [
        LeaseVoter(rid, ReplicaKey(rid, d), False, 1) for rid, d in DIRS.items()] + extra)
    for sock in [client_mine] + [mine for mine, _ in pairs.values()]:
        sock.setblocking(False)  # as the node's (asyncio's) sockets are
    voters = kw.pop("voters", None) or [(mine.fileno(), rid) for rid, (mine, _) in pairs.items()]
    shell = C.LeaderShell(client_mine.fileno(), voters, fd, 0, to_native(lease, C), 1, CLUSTER,
                          0, 1_700_000_000_000, **kw)
    client.settimeout(10)
    try:
        mine: dict[object, socket.socket] = {"client": client_mine}
        mine.update({rid: pair[0] for rid, pair in pairs.items()})
        yield (shell, client, {rid: Voter(rid, theirs) for rid, (_, theirs) in pairs.items()},
               path, mine)
    finally:
        with contextlib.suppress(RuntimeError):
            shell.stop()
        for a, b in [*pairs.values(), (client_mine, client)]:
            a.close()
            b.close()
        os.close(fd)


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[tuple[Any, socket.socket, dict[int, Voter], Path]]:
    with leader_shell(tmp_path) as q:
        yield q[:4]


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
    # its fetch asked with the old high watermark: answered at once with the new one (KIP-1166)
    r = voters[2].answer()
    assert (r.batches, r.high_watermark) == ((), 2)
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
        assert voters[2].answer().high_watermark == 2 + n  # the new high watermark, alone
        voters[2].fetch(2 + n)  # up to date: parked
    voters[3].fetch(1)
    assert [b.base_offset for b in voters[3].answer().batches] == [1, 2, 3]


@pytest.mark.parametrize(("why", "act"), [
    ("a GET from the client", lambda c, v: c.sendall(encode_request(1, OP_GET, "k"))),
    ("a fetch of another epoch", lambda c, v: v[2].fetch(1, epoch=2)),
    ("a fetch diverging from the epoch", lambda c, v: v[2].fetch(1, last_epoch=0)),
    ("a fetch naming the epoch limit", lambda c, v: v[2].fetch(1, epoch=2**31 - 1)),
    ("a fetch whose last epoch is the limit",
     lambda c, v: v[2].fetch(1, epoch=2**31 - 1, last_epoch=2**31 - 1)),
])
def test_what_the_lease_does_not_cover_is_handed_over(quorum: Any, why: str, act: Any) -> None:
    shell, client, voters, _path = quorum
    shell.start()
    act(client, voters)
    assert select.select([shell.done_fd], [], [], 10)[0], why
    assert shell.stop()["reason"] == "handover", why


def test_a_bad_setup_is_refused_with_what_is_wrong(tmp_path: Path) -> None:
    assert C is not None
    lane = to_native(LeaderLane(1, 0, 0, 1, 1, 1, [LeaseVoter(1, None, True)]), C)
    ok: dict[str, Any] = {"client": 0, "voters": [], "log_fd": 0, "write_pos": 0, "lane": lane,
                          "leader_id": 1, "cluster_id": CLUSTER, "log_start": 0,
                          "timestamp_ms": 0}
    for field, bad, error, text in [
        ("lane", object(), TypeError, "lane must be a kraft.lane._native.LeaderLane"),
        ("write_pos", -1, ValueError, "must not be negative"),
        ("voters", [(0, 2)] * 9, ValueError, "at most 8 voters"),
        ("voters", [(0,)], TypeError, ""),
    ]:
        with pytest.raises(error, match=text or None):
            C.LeaderShell(**{**ok, field: bad})
    with pytest.raises(RuntimeError, match="was not started"):
        C.LeaderShell(**ok).stop()
    with pytest.raises(ValueError, match="below the epoch limit"):
        C.LeaderLane(2**31 - 1, 0, 0, 1, 1, 1, [LeaseVoter(1, None, True)])


# ---------------------------------------------------------------- deadlines, KIP-1166, reports


def test_a_parked_fetch_is_answered_empty_at_its_deadline(quorum: Any) -> None:
    shell, _client, voters, _path = quorum
    shell.start()
    voters[2].fetch(1, max_wait_ms=2_000)
    assert voters[2].nothing()  # its deadline is 2 s away
    r = voters[2].answer()  # then answered, with nothing to read
    assert (r.batches, r.high_watermark) == ((), 1)
    voters[3].fetch(1, max_wait_ms=0)  # no wait at all: answered at once
    assert voters[3].answer().batches == ()


def test_the_high_watermark_goes_to_the_parked_fetches_that_asked_for_it(
        tmp_path: Path) -> None:
    # four voters (one without a connection): a majority is the leader and two others
    with leader_shell(tmp_path, extra_voters=1) as (shell, client, voters, _path, _mine):
        shell.start()
        voters[2].fetch(1)
        voters[3].fetch(1, version=17)  # an older fetch: no high watermark asked for
        client.sendall(encode_request(7, OP_PUT, "k", b"v"))
        for v in voters.values():
            assert v.answer().batches[0].base_offset == 1
        voters[2].fetch(2)  # the leader and voter 2: not a majority of four
        assert voters[2].nothing() and select.select([client], [], [], 0.2)[0] == []
        voters[3].fetch(2, version=17)  # the third: committed
        assert answers(client, 1) == [(7, OK, 1)]
        r = voters[2].answer()  # voter 2 asked for the high watermark: it gets it now
        assert (r.batches, r.high_watermark) == ((), 2)
        assert voters[3].nothing()  # voter 3 did not ask: it waits for records or its deadline


def test_the_voter_whose_fetch_commits_hears_the_high_watermark_before_the_client(
        tmp_path: Path) -> None:
    # the acknowledging fetch is answered (with the new high watermark) before the client's
    # answer leaves: a reader of that follower then sees the write sooner after its answer.
    # The kernel's receive times of the two answers tell their order
    with leader_shell(tmp_path, tcp=True, linger_ms=0) as (shell, client, voters, _path, _mine):
        for sock in (client, voters[2].sock):
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        wait_for_receive_times()
        shell.start()
        voters[2].fetch(1)
        for n in range(5):
            client.sendall(encode_request(n, OP_PUT, f"k{n}", b"v"))
            assert voters[2].answer().batches[0].base_offset == 1 + n
            voters[2].fetch(2 + n)  # the leader and voter 2: a majority of three
            client_at = received_at(client)
            assert answers(client, 1) == [(n, OK, 1 + n)]
            voter_at = received_at(voters[2].sock)
            r = voters[2].answer()
            assert (r.batches, r.high_watermark) == ((), 2 + n)
            assert voter_at < client_at, (n, client_at - voter_at)
            voters[2].fetch(2 + n)


def test_while_writes_stream_in_the_high_watermark_waits_for_the_next_records(
        tmp_path: Path) -> None:
    with leader_shell(tmp_path, linger_ms=5_000) as (shell, client, voters, _path, _mine):
        shell.start()
        voters[2].fetch(1)
        for n in range(2):
            client.sendall(encode_request(n, OP_PUT, f"k{n}", b"v"))
            assert voters[2].answer().batches[0].base_offset == 1 + n
            voters[2].fetch(2 + n)
            assert answers(client, 1) == [(n, OK, 1 + n)]
            if n == 0:  # the first write did not stream: the high watermark went alone
                assert voters[2].answer().high_watermark == 2
                voters[2].fetch(2)
        # the second came within the linger of the first commit: its commit's high watermark
        # waits for the next records, which carry it
        assert voters[2].nothing()
        client.sendall(encode_request(9, OP_PUT, "k9", b"v"))
        r = voters[2].answer()
        assert [b.base_offset for b in r.batches] == [3] and r.high_watermark == 3


def test_progress_tells_what_the_loop_did_once(quorum: Any) -> None:
    shell, client, voters, _path = quorum
    first = shell.progress()
    assert (first["log_end"], first["durable"], first["high_watermark"]) == (1, 1, 1)
    assert first["appended"] == [] and first["voters"] == []
    shell.start()
    voters[2].fetch(1)
    client.sendall(encode_request(40, OP_PUT, "k", b"v1"))
    voters[2].answer()
    voters[2].fetch(2)
    assert answers(client, 1) == [(40, OK, 1)]
    p = shell.progress()
    assert (p["log_end"], p["durable"], p["high_watermark"], p["answered"]) == (2, 2, 2, 1)
    assert p["appended"] == [(1, 1)] and p["appended_bytes"] == len(encode_put("k", b"v1"))
    assert [row[:2] for row in p["voters"]] == [(2, 2)]
    (_rid, _end, last_fetch, caught_up, leader_end) = p["voters"][0]
    assert caught_up == last_fetch > 0 and leader_end == 2
    assert p["write_pos"] > 0 and p["hw_advanced_ms"] > 0
    again = shell.progress()  # told once
    assert again["appended"] == [] and again["voters"] == [] and again["appended_bytes"] == 0


def test_a_stop_hands_over_the_parked_fetches_the_unanswered_puts_and_unread_bytes(
        tmp_path: Path) -> None:
    with leader_shell(tmp_path) as (shell, client, voters, _path, mine):
        _stop_and_hand_over(shell, client, voters, mine)


def _wait_for(done: Any) -> None:
    for _ in range(1000):
        if done():
            return
        time.sleep(0.01)
    raise AssertionError("the loop did not get there in 10 s")


def _unread(sock: socket.socket) -> bytes:
    """What the loop left in the socket (it stops before it reads what came with the stop)."""
    try:
        return sock.recv(1 << 16)
    except BlockingIOError:
        return b""


def _stop_and_hand_over(shell: Any, client: socket.socket, voters: dict[int, Voter],
                        mine: dict[object, socket.socket]) -> None:
    shell.start()
    voters[2].fetch(1)
    voters[3].fetch(1)
    client.sendall(encode_request(5, OP_PUT, "k", b"v"))
    for v in voters.values():
        v.answer()
    parked = voters[2].frame(2)  # acknowledges 2: committed
    voters[2].sock.sendall(parked)
    assert answers(client, 1) == [(5, OK, 1)]
    voters[2].answer()  # the new high watermark
    voters[2].fetch(2)  # up to date: parked
    voters[3].fetch(2)  # voter 3 catches up: told the high watermark at once,
    assert voters[3].answer().high_watermark == 2
    voters[3].fetch(2)  # then parked too
    client.sendall(encode_request(6, OP_PUT, "k2", b"w"))  # replicated, not acknowledged
    for v in voters.values():
        assert v.answer().batches[0].base_offset == 2
    voters[3].fetch(3)
    voters[3].answer()  # committed by voter 3 now; its own fetch answered with the hw
    voters[2].fetch(3)  # voter 2 acknowledges too, learns the high watermark,
    assert voters[2].answer().high_watermark == 3
    before = shell.version()
    voters[2].fetch(3)  # and waits for more: parked when the loop stops
    _wait_for(lambda: shell.version() > before)  # taken (the loop published its row)
    partial = encode_request(7, OP_PUT, "k3", b"x")[:5]
    client.sendall(partial)
    voters[2].sock.sendall(b"\x00\x00")
    r = shell.stop()
    assert r["reason"] == "stopped"
    assert r["client_unread"] + _unread(mine["client"]) == partial
    assert r["pending"] == [] and answers(client, 1) == [(6, OK, 2)]
    by_voter = {rid: (unread, p) for rid, unread, p in r["parked"]}
    assert by_voter[2][0] + _unread(mine[2]) == b"\x00\x00" and by_voter[3] == (b"", None)
    corr, frame, deadline, has_hw = by_voter[2][1]
    assert corr == voters[2].corr and has_hw and deadline > 0
    got = decode_fetch_request(frame, CLUSTER)
    assert got is not None and got[2].fetch_offset == 3 and got[2].replica_id == 2


def test_puts_not_committed_at_a_stop_are_handed_over(quorum: Any) -> None:
    shell, client, _voters, _path = quorum
    shell.start()
    before = shell.version()
    client.sendall(encode_request(11, OP_PUT, "a", b"1") + encode_request(12, OP_PUT, "b", b"2"))
    _wait_for(lambda: shell.version() > before)  # written and synced
    assert select.select([client], [], [], 0.2)[0] == []  # no voter acknowledged: no answer
    r = shell.stop()
    assert r["pending"] == [(11, 1), (12, 2)] and r["appended"] == [(1, 2)]
    assert (r["log_end"], r["durable"], r["high_watermark"]) == (3, 3, 1)


def test_a_fetch_parked_before_the_loop_is_completed_by_its_records(tmp_path: Path) -> None:
    # the core lent a fetch it held parked, voter 2's row, and the half of voter 2's next
    # fetch that its connection had already read
    mine2, theirs2 = socket.socketpair()
    mine3, theirs3 = socket.socketpair()
    v2 = Voter(2, theirs2)
    lent = v2.frame(1)[4:]
    lent_corr = v2.corr
    deadline = int(time.time() * 1000) + 60_000
    try:
        with leader_shell(tmp_path, voters=[
                (mine2.fileno(), 2, (1, 5, 5, 5, 1), (lent_corr, lent, deadline, True)),
                (mine3.fileno(), 3)]) as (shell, client, _voters, _path, _mine):
            shell.start()
            client.sendall(encode_request(1, OP_PUT, "k", b"v"))
            v2.corr = lent_corr
            r = v2.answer()  # the lent fetch gets the batch
            assert [b.base_offset for b in r.batches] == [1]
            report = shell.stop()
            assert report["reason"] == "stopped" and report["pending"] == [(1, 1)]
    finally:
        for sock in (mine2, theirs2, mine3, theirs3):
            sock.close()


def test_unread_bytes_handed_in_are_read_first(tmp_path: Path) -> None:
    mine2, theirs2 = socket.socketpair()
    mine3, theirs3 = socket.socketpair()
    v2 = Voter(2, theirs2)
    frame = v2.frame(1, max_wait_ms=0)
    try:
        with leader_shell(tmp_path, voters=[(mine2.fileno(), 2, None, None, frame[:9]),
                                            (mine3.fileno(), 3)]) as (shell, _c, _v, _p, _m):
            shell.start()
            theirs2.sendall(frame[9:])
            assert v2.answer().batches == ()  # the whole fetch, read across the handover
            assert shell.stop()["reason"] == "stopped"
    finally:
        for sock in (mine2, theirs2, mine3, theirs3):
            sock.close()


def test_a_voter_that_reads_nothing_does_not_keep_the_loop_from_stopping(
        tmp_path: Path) -> None:
    with leader_shell(tmp_path) as (shell, client, voters, path, mine):
        # a small send buffer toward voter 2: the batch cannot fit in it
        mine[2].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        _stuck_send(shell, client, voters, path)


def _stuck_send(shell: Any, client: socket.socket, voters: dict[int, Voter],
                path: Path) -> None:
    shell.start()
    # parked (for a minute: a MaxWaitMs of 500 could pass before the PUT is written on a
    # loaded machine, and the loop would have nothing to send); voter 2 then reads nothing more
    before = shell.version()  # read before the fetch: the loop may park it at once
    voters[2].fetch(1, max_wait_ms=60_000)
    _wait_for(lambda: shell.version() > before)
    client.sendall(encode_request(1, OP_PUT, "big", b"x" * 900_000))  # more than a socket holds
    # written: the loop now sends the batch to voter 2, which takes a fifth of it at most
    _wait_for(lambda: path.stat().st_size > 900_000)
    r = shell.stop()  # and still stops
    assert (r["reason"], r["error_at"]) == ("error", "send")
