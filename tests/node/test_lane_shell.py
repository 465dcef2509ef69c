"""The follower lane's I/O loop (`kraft.lane._native.FollowerShell`, docs/native-lane.md),
driven by a leader played by the test over a socket pair: answers encoded by
`kraft.server.fetch_fast`, the lane's fetches decoded by it, and the log file read back."""

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

from kraft.lane import native
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.records.batch import build_batch
from kraft.server.fetch_fast import decode_fetch_request, encode_fetch_response

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")

CLUSTER = "abcdefghijklmnopqrstuv"
DIR = Uuid(bytes(range(1, 17)))
EPOCH, LEADER = 3, 1


class Leader:
    """The leader's end of the connection: sends answers, reads the lane's fetches."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(10)

    def answer(self, corr: int, records: bytes | None, hw: int, **kw: Any) -> bytes:
        resp = m.FetchResponse(kw.pop("error", ErrorCode.NONE), LEADER, EPOCH, hw, 0, **kw)
        frame = encode_fetch_response(18, corr, resp, records)
        assert frame is not None
        return struct.pack(">I", len(frame)) + frame

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def fetch(self) -> tuple[int, m.FetchRequest]:
        size = struct.unpack(">I", self._exactly(4))[0]
        decoded = decode_fetch_request(self._exactly(size), CLUSTER)
        assert decoded is not None
        version, corr, req = decoded
        assert version == 18
        return corr, req

    def nothing_more(self) -> bool:
        return not select.select([self.sock], [], [], 0.2)[0]

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the lane closed the connection"
            out += chunk
        return out


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Any, Leader, int, Path]]:
    assert C is not None
    mine, theirs = socket.socketpair()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"h" * 100)  # the segment's bytes before the lane's: left alone
    fd = os.open(path, os.O_RDWR)
    lane = C.FollowerLane(EPOCH, LEADER, 7, 10, 8)  # the fetch in flight: 7; log end 10
    shell = C.FollowerShell(mine.fileno(), fd, 100, lane, EPOCH, 8, 18, "node-2", CLUSTER, 2,
                            DIR, 500, 1 << 20)
    try:
        yield shell, Leader(theirs), fd, path
    finally:
        with contextlib.suppress(RuntimeError):  # a test that never started it
            shell.stop()
        mine.close()
        theirs.close()
        os.close(fd)


def batch(base: int, n: int = 1) -> bytes:
    return build_batch(base, EPOCH, [b"v%03d" % i * 27 for i in range(n)], 1_700_000_000_000)


def test_each_answer_is_written_synced_and_acknowledged_by_the_next_fetch(setup: Any) -> None:
    shell, leader, _fd, path = setup
    shell.start()
    offset, corr, written = 10, 7, b""
    for i in range(40):
        records = batch(offset, 1 + i % 3)
        leader.send(leader.answer(corr, records, hw=offset))
        corr, req = leader.fetch()
        written += records
        offset += 1 + i % 3
        # the acknowledgement names the new end, and the bytes are in the file when it arrives
        assert (req.fetch_offset, req.last_fetched_epoch, req.current_leader_epoch) == (
            offset, EPOCH, EPOCH)
        assert req.replica_id == 2 and req.replica_directory_id == DIR
        assert req.high_watermark == min(offset - (1 + i % 3), offset)
        assert path.read_bytes() == b"h" * 100 + written
    report = shell.stop()
    assert report["reason"] == "stopped"
    assert (report["answers"], report["log_end"], report["write_pos"]) == (
        40, offset, 100 + len(written))
    assert report["fetch_correlation"] == corr and report["unread"] == b""


def test_an_answer_with_only_the_high_watermark_is_acknowledged_at_once(setup: Any) -> None:
    shell, leader, _fd, path = setup
    shell.start()
    leader.send(leader.answer(7, None, hw=10))
    corr, req = leader.fetch()
    assert (corr, req.fetch_offset, req.high_watermark) == (8, 10, 10)
    assert path.read_bytes() == b"h" * 100


def news(shell: Any, wait_s: float = 0.2) -> int:
    """The bytes on the shell's news_fd (taken) within `wait_s` (the loop writes its byte just
    after the fetch the test has read: a byte that is due gets a long wait, one that is not a
    short one)."""
    if not select.select([shell.news_fd], [], [], wait_s)[0]:
        return 0
    return len(os.read(shell.news_fd, 4096))


def test_news_comes_for_a_new_high_watermark_and_for_records_only_while_the_node_waits(
        setup: Any) -> None:
    shell, leader, _fd, _path = setup
    shell.start()
    # records while the node runs: no news (its tick or its next sleep takes them)
    leader.send(leader.answer(7, batch(10), hw=10))
    corr, _req = leader.fetch()
    assert news(shell) == 0
    # an answer with no records that moves the high watermark: news
    leader.send(leader.answer(corr, None, hw=11))
    corr, _req = leader.fetch()
    assert news(shell, 10) == 1
    # the same high watermark again: none
    leader.send(leader.answer(corr, None, hw=11))
    corr, _req = leader.fetch()
    assert news(shell) == 0
    # the node sleeps: the next records wake it, once, and after their acknowledgement left
    shell.waiting(True)
    leader.send(leader.answer(corr, batch(11), hw=11))
    corr, req = leader.fetch()
    assert req.fetch_offset == 12
    assert news(shell, 10) == 1
    leader.send(leader.answer(corr, batch(12), hw=11))
    corr, _req = leader.fetch()
    assert news(shell) == 0
    # waiting, then awake again before any records: none
    shell.waiting(True)
    shell.waiting(False)
    leader.send(leader.answer(corr, batch(13), hw=12))
    corr, _req = leader.fetch()
    assert news(shell) == 0
    assert shell.progress()[:3] == (6, 14, 100 + 4 * len(batch(10)))


@pytest.mark.parametrize(("why", "kw"), [
    ("an error", {"error": ErrorCode.NOT_LEADER_OR_FOLLOWER}),
    ("a divergence", {"diverging_epoch": m.OffsetAndEpoch(2, 5)}),
    ("a snapshot id", {"snapshot_id": m.OffsetAndEpoch(2, 5)}),
])
def test_an_answer_that_is_not_plain_is_handed_over_unread(setup: Any, why: str,
                                                           kw: dict[str, Any]) -> None:
    shell, leader, _fd, path = setup
    shell.start()
    first = leader.answer(7, batch(10), hw=10)
    leader.send(first)
    leader.fetch()
    odd = leader.answer(8, None, hw=11, **kw)
    after = leader.answer(9, batch(11), hw=11)
    leader.send(odd + after)
    assert select.select([shell.done_fd], [], [], 10)[0], why
    report = shell.stop()
    assert report["reason"] == "handover", why
    assert report["unread"] == odd + after  # for the general path, as it came
    assert report["answers"] == 1 and report["log_end"] == 11
    assert leader.nothing_more()  # no acknowledgement for what was not taken
    assert len(path.read_bytes()) == 100 + len(batch(10))


def test_records_that_do_not_continue_the_log_are_handed_over(setup: Any) -> None:
    shell, leader, _fd, path = setup
    shell.start()
    wrong = leader.answer(7, batch(11), hw=10)  # the log ends at 10
    leader.send(wrong)
    assert select.select([shell.done_fd], [], [], 10)[0]
    report = shell.stop()
    assert (report["reason"], report["unread"], report["answers"]) == ("handover", wrong, 0)
    assert path.read_bytes() == b"h" * 100 and leader.nothing_more()


def test_an_answer_arriving_a_byte_at_a_time_is_taken_whole(setup: Any) -> None:
    shell, leader, _fd, path = setup
    shell.start()
    data = leader.answer(7, batch(10, 3), hw=10)
    for i in range(len(data)):
        leader.send(data[i:i + 1])
    corr, req = leader.fetch()
    assert (corr, req.fetch_offset) == (8, 13)
    assert path.read_bytes() == b"h" * 100 + batch(10, 3)


def test_the_leader_closing_ends_the_loop(setup: Any) -> None:
    shell, leader, _fd, _path = setup
    shell.start()
    leader.send(leader.answer(7, batch(10), hw=10)[:30])  # part of an answer, then gone
    leader.sock.shutdown(socket.SHUT_WR)
    assert select.select([shell.done_fd], [], [], 10)[0]
    report = shell.stop()
    assert report["reason"] == "closed" and len(report["unread"]) == 30


@pytest.mark.parametrize(("log", "error_at", "errno_"), [
    # a descriptor that cannot be written (EBADF)
    ("read-only", "write", 9),
    # /dev/null takes the write and refuses fdatasync (EINVAL)
    ("/dev/null", "fdatasync", 22),
])
def test_no_acknowledgement_leaves_when_the_write_or_sync_fails(
        tmp_path: Path, log: str, error_at: str, errno_: int) -> None:
    # the loop ends with the failing call's error, and the leader never hears of records that
    # are not durable (rule 5: durable before acknowledged)
    assert C is not None
    mine, theirs = socket.socketpair()
    if log == "read-only":
        path = tmp_path / "segment.log"
        path.write_bytes(b"")
        fd = os.open(path, os.O_RDONLY)
    else:
        fd = os.open(log, os.O_WRONLY)
    try:
        shell = C.FollowerShell(mine.fileno(), fd, 0, C.FollowerLane(EPOCH, LEADER, 7, 10, None),
                                EPOCH, 8, 18, None, CLUSTER, 2, None, 500, 1 << 20)
        shell.start()
        leader = Leader(theirs)
        leader.send(leader.answer(7, batch(10), hw=10))
        assert select.select([shell.done_fd], [], [], 10)[0]
        report = shell.stop()
        assert (report["reason"], report["error_at"], report["error"]) == (
            "error", error_at, errno_)
        assert report["answers"] == 0 and leader.nothing_more()
    finally:
        mine.close()
        theirs.close()
        os.close(fd)


def test_a_bad_setup_is_refused_with_what_is_wrong(tmp_path: Path) -> None:
    assert C is not None
    lane = C.FollowerLane(EPOCH, LEADER, 7, 10, None)
    ok: dict[str, Any] = {"sock": 0, "log_fd": 0, "write_pos": 0, "lane": lane, "last_epoch": 3,
                          "next_correlation": 8, "version": 18, "client_id": None,
                          "cluster_id": CLUSTER, "replica_id": 2, "directory_id": None,
                          "max_wait_ms": 500, "max_bytes": 1 << 20}
    for field, bad, error, text in [
        ("lane", object(), TypeError, "lane must be a kraft.lane._native.FollowerLane"),
        ("write_pos", -1, ValueError, "must not be negative"),
        ("version", 16, ValueError, "version must be 17 or 18"),
        ("cluster_id", 5, TypeError, "cluster_id must be a str"),
    ]:
        with pytest.raises(error, match=text):
            C.FollowerShell(**{**ok, field: bad})
    shell = C.FollowerShell(**ok)
    with pytest.raises(RuntimeError, match="was not started"):
        shell.stop()


def test_progress_says_what_is_durable_and_the_fetch_in_flight_while_the_loop_runs(setup: Any) -> None:
    shell, leader, _fd, _path = setup
    assert shell.progress() == (0, 10, 100, 8, EPOCH, 7, None)  # as set up, before it starts
    shell.start()
    offset, corr, pos = 10, 7, 100
    for n in (1, 2, 3):
        records = batch(offset, n)
        leader.send(leader.answer(corr, records, hw=offset + 1))
        corr, req = leader.fetch()
        assert req.fetch_offset == offset + n
        offset += n
        pos += len(records)
        # the progress that covers a fetch is published before the fetch leaves
        answers, log_end, write_pos, hw, last_epoch, in_flight, leader_hw = shell.progress()
        assert (log_end, write_pos, last_epoch, in_flight) == (offset, pos, EPOCH, corr)
        assert answers == n and hw == min(offset - n + 1, offset)
        assert leader_hw == offset - n + 1
    report = shell.stop()
    assert shell.progress()[:3] == (report["answers"], report["log_end"], report["write_pos"])


def test_the_leaders_high_watermark_past_the_records_is_kept_apart_from_the_followers(
        setup: Any) -> None:
    # a follower still fetching its way up (after a snapshot, say) hears a high watermark far
    # past the records it has: its own is capped at its log's end, and the leader's is kept
    # as sent, for the node's readiness
    shell, leader, _fd, _path = setup
    shell.start()
    leader.send(leader.answer(7, batch(10, 2), hw=500))
    corr, req = leader.fetch()
    assert req.fetch_offset == 12
    assert req.high_watermark == 12  # KIP-1166: the follower's own
    _answers, log_end, _pos, hw, _epoch, _corr, leader_hw = shell.progress()
    assert (log_end, hw, leader_hw) == (12, 12, 500)
    leader.send(leader.answer(corr, batch(12), hw=501))
    leader.fetch()
    report = shell.stop()
    assert (report["log_end"], report["high_watermark"], report["leader_high_watermark"]) == (
        13, 13, 501)


def test_an_answer_past_the_write_limit_is_handed_over_unwritten(tmp_path: Path) -> None:
    assert C is not None
    mine, theirs = socket.socketpair()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"h" * 100)
    fd = os.open(path, os.O_RDWR)
    first, second = batch(10), batch(11)
    lane = C.FollowerLane(EPOCH, LEADER, 7, 10, 8)
    limit = 100 + len(first) + len(second) - 1  # room for the first batch, not the second
    shell = C.FollowerShell(mine.fileno(), fd, 100, lane, EPOCH, 8, 18, "node-2", CLUSTER, 2,
                            DIR, 500, 1 << 20, write_limit=limit)
    leader = Leader(theirs)
    try:
        shell.start()
        leader.send(leader.answer(7, first, hw=10))
        corr, _ = leader.fetch()
        over = leader.answer(corr, second, hw=11)
        leader.send(over)
        assert select.select([shell.done_fd], [], [], 10)[0]
        report = shell.stop()
        assert report["reason"] == "handover" and report["unread"] == over
        assert path.read_bytes() == b"h" * 100 + first
        assert leader.nothing_more()
        with pytest.raises(ValueError, match="write_limit"):
            C.FollowerShell(mine.fileno(), fd, 100, C.FollowerLane(EPOCH, LEADER, 7, 10, 8),
                            EPOCH, 8, 18, "node-2", CLUSTER, 2, DIR, 500, 1 << 20,
                            write_limit=99)
    finally:
        with contextlib.suppress(RuntimeError):
            shell.stop()
        mine.close()
        theirs.close()
        os.close(fd)


BIG = 2**31 - 1
"""The epoch limit: no lease is of it, so the lane never takes an answer naming it."""


@pytest.mark.parametrize("why", ["the answer's leader epoch", "a batch's epoch"])
def test_an_answer_naming_the_epoch_limit_is_handed_over_unread(setup: Any, why: str) -> None:
    shell, leader, _fd, path = setup
    shell.start()
    if why == "a batch's epoch":
        odd = leader.answer(7, build_batch(10, BIG, [b"x"], 1_700_000_000_000), hw=10)
    else:
        frame = encode_fetch_response(
            18, 7, m.FetchResponse(ErrorCode.NONE, LEADER, BIG, 10, 0), batch(10))
        assert frame is not None
        odd = struct.pack(">I", len(frame)) + frame
    leader.send(odd)
    assert select.select([shell.done_fd], [], [], 10)[0], why
    report = shell.stop()
    assert (report["reason"], report["unread"], report["answers"]) == ("handover", odd, 0)
    assert path.read_bytes() == b"h" * 100 and leader.nothing_more()


def test_a_follower_lease_at_the_epoch_limit_is_refused() -> None:
    assert C is not None
    with pytest.raises(ValueError, match="below the epoch limit"):
        C.FollowerLane(BIG, LEADER, 7, 10, 8)
