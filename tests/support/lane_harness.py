"""A deterministic harness for the follower lane's C loop (`kraft.lane._native.FollowerShell`).

One run, from one seed:

* the loop runs on its own thread over a socket pair and a fresh segment file, with the C file
  layer's seeded faults installed (`_native.io_faults`: failed, torn and short writes, failed
  fdatasyncs, delays);
* the test plays the leader: it answers each of the lane's fetches with a scripted, seeded
  stream of record batches (Fetch v18 answers encoded by `kraft.server.fetch_fast`), and
  delivers each answer in pieces cut at seeded points, each piece read by the loop before the
  next is sent (the socket's receive queue is watched empty), so the loop's reads are partial
  where the seed says;
* every fetch the lane sends is its acknowledgement: its fetch offset is the end of what it
  says it holds durably;
* when the loop ends (an injected fault, or the script's end), the replica "crashes": the file
  keeps the bytes the last successful fdatasync covered (the file layer reports that size) and
  a seeded prefix of what was written after it (a crash may keep some of the page cache);
* the segment is then opened by `kraft.storage.log.SegmentedLog` (its crash recovery, full
  scan), and the result is checked with the simulator's invariants (`kraft.sim.invariants`):

  - `acknowledged_committed_lost`: the recovered log holds every record the lane acknowledged
    (`Invariants.check_durable_after_crash`, every record the leader sent counted committed);
  - `log_matching`: every recovered record is the leader's at its offset (`Invariants.on_record`
    with prefix hashes over the batches' bytes), and no recovered batch is one the leader did
    not send (offsets contiguous from the segment's base, CRCs valid: the recovery checks them);
  - `acknowledged_before_durable`: no acknowledgement names an end beyond the bytes an
    fdatasync that succeeded covered (rule 5, durable before acknowledged);
  - `torn_tail_after_durable`: the crashed file's batches are whole and valid up to the
    acknowledged end, anything torn only after it;
  - `fault_stops_the_loop`: the first failed write or fdatasync ends the loop with that call's
    error (no retry past a failed fdatasync, whose pages the kernel may have dropped), and no
    acknowledgement leaves after it.

The peers can fail too (`PeerFaults`, drawn from the seed on a stream of their own, so a run
without them is the run it always was): a peer closes its socket in the middle of a frame, or
resets the connection (closes it with the loop's bytes unread: the loop's next read fails with
ECONNRESET), or holds a frame back and then releases it, or delivers again a frame it sent
before (a late, stale frame). The loop must then end cleanly and hand the connection back as it
stands, which the checks hold it to:

  - `peer_fault_hands_back`: a closed or reset connection ends the loop as "closed" (a leader
    may also stop on the send its answer to a reset peer fails), a stale frame as "handover";
    the bytes of the frame it did not take are handed back unread, to the byte, and nothing of
    them reached the log;
  - `commit_without_quorum` (the leader): no PUT is answered before the voter's fetch that
    makes it committed was sent (a held-back fetch holds the commits back);
  - `acked_without_answer` (the follower): while an answer is held back, the loop sends nothing
    and makes no progress.

The leader's and the follower's runs end the same way: the loop's file layer's counts, the
crash (`_crash`), the checks of how the loop ended (`_check_loop_end`), and the recovery as a
node's open does it (`_recover`).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import random
import select
import shutil
import socket
import struct
import termios
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from kraft.lane import native
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.records.batch import build_batch, scan_batches
from kraft.server.fetch_fast import decode_fetch_request, encode_fetch_response
from kraft.sim.disk import chain_hash
from kraft.sim.invariants import Invariants
from kraft.storage.log import SegmentedLog

CLUSTER = "abcdefghijklmnopqrstuv"
DIR = Uuid(bytes(range(1, 17)))
EPOCH, LEADER, FOLLOWER = 3, 1, 2
SEGMENT = "00000000000000000000.log"
WAIT_S = 10.0  # a bound on a wait that is due (a hang), never a measure


@dataclass(frozen=True, slots=True)
class Faults:
    """The file layer's fault rates for one run (probabilities per call)."""

    fail_write: float = 0.0
    tear_write: float = 0.0
    fail_sync: float = 0.0
    delay_us: int = 0


@dataclass(frozen=True, slots=True)
class PeerFaults:
    """The peers' fault rates for one run (probabilities per frame a peer sends, or per turn of
    the leader's run); at most one peer fault ends a run, since a closed connection ends the
    loop."""

    close: float = 0.0
    """The peer closes its socket after part of a frame."""
    reset: float = 0.0
    """The peer resets the connection (closes it with bytes of the loop's unread)."""
    late: float = 0.0
    """The frame is held back a while, then released."""
    stale: float = 0.0
    """A frame sent before is delivered again, late."""

    def draw(self, rng: random.Random) -> str | None:
        """This frame's fault (None for none), one draw of `rng` whatever the rates."""
        u = rng.random()
        for kind in ("close", "reset", "late", "stale"):
            rate = float(getattr(self, kind))
            if u < rate:
                return kind
            u -= rate
        return None


NO_PEER_FAULTS = PeerFaults()
HOLD_S = 0.02
"""How long a held-back frame is held: a window in which the loop must stay quiet (a hang or a
slow machine cannot make a test fail through it; only something the loop sends)."""


@dataclass(slots=True)
class PeerFault:
    """A peer fault a run injected: its kind, where, and what the loop should hand back."""

    kind: str
    at: int
    """The answer (follower) or turn (leader) it came at."""
    peer: str = "leader"
    """Which peer: the follower's "leader", or the leader's "client" or "voter"."""
    unread: bytes | None = None
    """The bytes the loop must hand back unread (None: not checked)."""


def _peer_rng(seed: int) -> random.Random:
    """The peers' own stream of draws for a seed (the batches' and cuts' stream stays as it is
    without peer faults)."""
    return random.Random(seed * 7919 + 104729)


@dataclass(slots=True)
class RunEnd:
    """How a run of either loop ended, and what survived its crash."""

    seed: int
    report: dict[str, Any]
    """The loop's report (its `stop()`)."""
    counts: dict[str, Any]
    """The file layer's counts (`io_fault_counts()`)."""
    _: KW_ONLY
    synced_size: int = 0
    crashed_size: int = 0
    recovered_end: int = 0
    invariants: Invariants = field(default_factory=Invariants)
    peer_fault: PeerFault | None = None
    held: int = 0
    """Frames held back and then released (the leader's answers, or voter 2's fetches)."""


@dataclass(slots=True)
class Outcome(RunEnd):
    """What one run of the follower's loop did and what survived its crash."""

    sent: list[bytes] = field(default_factory=list)
    """The batches the leader sent, in offset order from 0."""
    acks: list[int] = field(default_factory=list)
    """The fetch offsets of the lane's acknowledgements, in order."""
    noise: list[str] = field(default_factory=list)
    """What the loop did while an answer was held back (nothing, when it keeps the rules)."""


class HarnessError(AssertionError):
    """The harness itself could not go on (a hang, a frame it cannot read)."""


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise HarnessError("the lane closed the connection mid-fetch")
        out += chunk
    return out


def _unread(sock: socket.socket) -> int:
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def _batch(rng: random.Random, base: int) -> bytes:
    n = rng.randint(1, 5)
    values = [rng.randbytes(rng.randint(1, 120)) for _ in range(n)]
    return build_batch(base, EPOCH, values, 1_700_000_000_000 + base)


def _record_chains(batches: list[bytes]) -> list[tuple[int, int]]:
    """(offset, prefix hash) of every record of `batches` (a log from offset 0)."""
    out: list[tuple[int, int]] = []
    chain, offset = 0, 0
    for data in batches:
        last_delta = struct.unpack_from(">i", data, 23)[0]
        digest = hashlib.blake2b(data, digest_size=8).hexdigest()
        for k in range(last_delta + 1):
            chain = chain_hash(chain, EPOCH, (digest, k))
            out.append((offset, chain))
            offset += 1
    return out


def _records(data: bytes) -> int:
    return int(struct.unpack_from(">i", data, 23)[0]) + 1


def _start(seed: int, workdir: Path, segment: str,
           faults: Faults) -> tuple[Any, random.Random, random.Random, Path, int]:
    """A run's start: the extension, the seed's two streams of draws (the run's, the peers'),
    a fresh segment opened for the loop, and the file layer's faults installed (the run takes
    them out, and closes the segment, when it ends)."""
    c = native()
    if c is None:
        raise HarnessError("kraft.lane._native was not built")
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / segment
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR)
    c.io_faults(seed, faults.fail_write, faults.tear_write, faults.fail_sync, faults.delay_us)
    return c, random.Random(seed), _peer_rng(seed), path, fd


def run_follower(seed: int, workdir: Path, faults: Faults, answers: int = 24,
                 peers: PeerFaults = NO_PEER_FAULTS) -> Outcome:
    """Run the follower lane's C loop for one seed (see the module docstring) and check it."""
    c, rng, prng, path, fd = _start(seed, workdir, SEGMENT, faults)
    mine, theirs = socket.socketpair()
    theirs.settimeout(WAIT_S)
    sent: list[bytes] = []
    acks: list[int] = []
    leader_end = 0
    fault: PeerFault | None = None
    held, noise = 0, []
    try:
        lane = c.FollowerLane(EPOCH, LEADER, 7, 0, None)
        shell = c.FollowerShell(mine.fileno(), fd, 0, lane, EPOCH, 8, 18, "node-2", CLUSTER,
                                FOLLOWER, DIR, 500, 1 << 20)
        shell.start()
        corr, fetch_offset, hw = 7, 0, 0
        unconsumed = 0  # the lane's last fetch, read but left in the socket (peeked)
        previous: bytes | None = None  # the last answer delivered whole
        ended = False
        for i in range(answers):
            # the leader answers from the fetch offset: new batches after what it sent (or
            # what it sent again, should the lane ask for it), sometimes none
            records = b""
            if fetch_offset == leader_end:
                for _ in range(rng.choice((0, 1, 1, 2, 3))):
                    data = _batch(rng, leader_end)
                    sent.append(data)
                    leader_end += _records(data)
            pos = 0
            for data in sent:
                if pos >= fetch_offset:
                    records += data
                pos += _records(data)
            resp = m.FetchResponse(ErrorCode.NONE, LEADER, EPOCH, hw, 0)
            frame = encode_fetch_response(18, corr, resp, records or None)
            if frame is None:
                raise HarnessError("fetch_fast did not encode the answer")
            frame = struct.pack(">I", len(frame)) + frame
            cuts = sorted(rng.sample(range(1, len(frame)), min(rng.randint(0, 3), len(frame) - 1)))
            pieces = [frame[a:b] for a, b in zip([0, *cuts], [*cuts, len(frame)], strict=True)]
            kind = peers.draw(prng)
            if kind == "stale" and previous is None:
                kind = None
            if kind != "reset" and unconsumed:
                _exactly(theirs, unconsumed)  # a reset leaves it unread: the kernel resets
                unconsumed = 0
            if kind in ("close", "reset"):
                cut = prng.randrange(1, len(frame))
                fault = PeerFault(kind, i, "leader", frame[:cut])
                theirs.sendall(frame[:cut])
                if not _wait_read(mine, shell.done_fd):
                    theirs.close()
                    _wait_end(shell.done_fd, seed)
                else:
                    fault = None  # the loop had ended already: nothing was injected
                break
            if kind == "stale":
                assert previous is not None
                fault = PeerFault(kind, i, "leader", previous)
                theirs.sendall(previous)  # the loop hands it over: its end is expected
                _wait_end(shell.done_fd, seed)
                break
            if kind == "late":
                # held back: the loop has nothing to answer, so it sends and does nothing
                before = shell.progress()
                ready = select.select([theirs, shell.done_fd], [], [], HOLD_S)[0]
                after = shell.progress()
                if theirs in ready or after != before:
                    noise.append(f"answer {i} held back: sent {_unread(theirs)} bytes, "
                                 f"progress {before} -> {after}")
                held += 1
            for piece in pieces:
                if ended:
                    break
                theirs.sendall(piece)
                ended = _wait_read(mine, shell.done_fd)
            if ended:
                break
            previous = frame
            ready = select.select([theirs, shell.done_fd], [], [], WAIT_S)[0]
            if not ready:
                raise HarnessError(f"seed {seed}: neither a fetch nor the loop's end came")
            if theirs not in ready:
                break
            fetch = _peek_frame(theirs)
            unconsumed = len(fetch)
            decoded = decode_fetch_request(fetch[4:], CLUSTER)
            if decoded is None:
                raise HarnessError(f"seed {seed}: the lane sent a fetch the leader cannot read")
            _version, corr, req = decoded
            fetch_offset = req.fetch_offset
            acks.append(fetch_offset)
            hw = min(leader_end, max(hw, fetch_offset))  # the follower's ack commits it
        report = shell.stop()
        if theirs.fileno() >= 0:
            if unconsumed:
                _exactly(theirs, unconsumed)
            # anything the loop sent after the harness stopped reading is an acknowledgement
            while select.select([theirs], [], [], 0)[0]:
                head = theirs.recv(4)
                if len(head) < 4:
                    break
                decoded = decode_fetch_request(
                    _exactly(theirs, struct.unpack(">I", head)[0]), CLUSTER)
                if decoded is not None:
                    acks.append(decoded[2].fetch_offset)
        counts = c.io_fault_counts()
    finally:
        c.io_faults(None)
        mine.close()
        theirs.close()
        os.close(fd)
    out = Outcome(seed, report, counts, sent, acks, peer_fault=fault, held=held, noise=noise)
    out.synced_size, out.crashed_size = _crash(path, counts, rng)
    check(out, path, workdir)
    return out


def _peek_frame(sock: socket.socket) -> bytes:
    """The size-prefixed frame at the head of `sock`'s input, left there (MSG_PEEK): a reset
    then finds the loop's bytes unread, as a peer that went away with them does."""
    deadline = time.monotonic() + WAIT_S
    while True:
        head = sock.recv(4, socket.MSG_PEEK)
        if not head:
            raise HarnessError("the lane closed the connection mid-fetch")
        if len(head) == 4:
            want = 4 + struct.unpack(">I", head)[0]
            data = sock.recv(want, socket.MSG_PEEK)
            if len(data) == want:
                return data
        if time.monotonic() > deadline:
            raise HarnessError("the lane's fetch did not come whole")
        time.sleep(0.0005)


def _wait_end(done_fd: int, seed: int) -> None:
    """Wait for the loop to end (a peer fault must end it)."""
    if not select.select([done_fd], [], [], WAIT_S)[0]:
        raise HarnessError(f"seed {seed}: the loop did not end after its peer went away")


def _wait_read(sock: socket.socket, done_fd: int) -> bool:
    """Wait until the loop has read all that was sent on `sock` (True: the loop ended)."""
    deadline = time.monotonic() + WAIT_S
    while _unread(sock) > 0:
        if select.select([done_fd], [], [], 0.0005)[0]:
            return True
        if time.monotonic() > deadline:
            raise HarnessError("the loop did not read what was sent")
    return bool(select.select([done_fd], [], [], 0)[0])


def _crash(path: Path, counts: dict[str, Any], rng: random.Random) -> tuple[int, int]:
    """The crash after a run: drop what no successful fdatasync covered, but for a seeded
    prefix of it (a crash may keep some of the page cache). Returns (the synced size, the
    crashed file's size)."""
    data = path.read_bytes()
    synced = max(0, int(counts["synced_size"]))
    crashed = min(len(data), synced + rng.randint(0, max(0, len(data) - synced)))
    with open(path, "r+b") as f:
        f.truncate(crashed)
    return synced, crashed


def _check_loop_end(inv: Invariants, seed: int, counts: dict[str, Any],
                    report: dict[str, Any]) -> None:
    """`fault_stops_the_loop`: the first failed write or fdatasync ends the loop with that
    call's error, and nothing after it."""
    write_faults = counts["failed_writes"] + counts["torn_writes"]
    sync_faults = counts["failed_syncs"]
    if write_faults + sync_faults > 1:
        inv.fail("fault_stops_the_loop", f"seed {seed}: the loop went on after a failed "
                                         f"call: {counts}")
    if write_faults + sync_faults == 1:
        want = "write" if write_faults else "fdatasync"
        if (report["reason"], report["error_at"]) != ("error", want):
            inv.fail("fault_stops_the_loop",
                     f"seed {seed}: a failed {want} ended the loop as {report}")


def _check_handed_back(inv: Invariants, seed: int, fault: PeerFault | None,
                       report: dict[str, Any], counts: dict[str, Any], unread: bytes) -> None:
    """`peer_fault_hands_back`: how a peer fault ended the loop, and the bytes it handed back
    (`unread`: the report's, for the faulted peer's connection). A failed write or fdatasync
    that came first ends the loop as `_check_loop_end` says instead."""
    if fault is None or fault.kind == "late":
        return
    if counts["failed_writes"] + counts["torn_writes"] + counts["failed_syncs"]:
        return
    ends = {"close": {("closed", "")}, "reset": {("closed", ""), ("error", "send")},
            "stale": {("handover", "")}}[fault.kind]
    if fault.peer == "leader":  # the follower's loop reads its one peer first: a reset is read
        ends = {e for e in ends if e[1] != "send"}
    if (report["reason"], report["error_at"]) not in ends:
        inv.fail("peer_fault_hands_back",
                 f"seed {seed}: the {fault.peer}'s {fault.kind} at {fault.at} ended the loop "
                 f"as {report['reason']} {report['error_at']!r}, not as one of {sorted(ends)}")
    if fault.unread is not None and unread != fault.unread:
        inv.fail("peer_fault_hands_back",
                 f"seed {seed}: the {fault.peer}'s {fault.kind} at {fault.at}: the loop handed "
                 f"back {len(unread)} unread bytes, not the {len(fault.unread)} of the frame "
                 f"it did not take")


def _recover(workdir: Path, initial_offset: int = 0) -> int:
    """Open the crashed segment as a node's open does (crash recovery, full scan): its end."""
    log = SegmentedLog.open(workdir, full_scan=True, recovery_checkpoint_interval_s=None,
                            initial_offset=initial_offset)
    try:
        return log.log_end_offset
    finally:
        log.close()


def check(out: Outcome, path: Path, workdir: Path) -> None:
    """Check a crashed run's segment and acknowledgements (the module docstring's invariants)."""
    inv = out.invariants
    leader_log = b"".join(out.sent)
    leader_end = sum(_records(d) for d in out.sent)
    acked = max(out.acks, default=0)
    # the byte position of each acknowledged end in the leader's log
    ends = {0: 0}
    pos, offset = 0, 0
    for data in out.sent:
        pos += len(data)
        offset += _records(data)
        ends[offset] = pos
    if any(a not in ends for a in out.acks):
        inv.fail("log_matching", f"seed {out.seed}: an acknowledgement {out.acks} names an "
                                 f"offset that ends no batch the leader sent")
    if ends[acked] > out.synced_size:
        inv.fail("acknowledged_before_durable",
                 f"seed {out.seed}: acknowledged offset {acked} (byte {ends[acked]}) beyond "
                 f"the last successful fdatasync's {out.synced_size} bytes")
    _check_loop_end(inv, out.seed, out.counts, out.report)
    if out.noise:
        inv.fail("acked_without_answer", f"seed {out.seed}: {out.noise}")
    _check_handed_back(inv, out.seed, out.peer_fault, out.report, out.counts,
                       bytes(out.report["unread"]))
    # nothing of a frame the loop did not take reached the log: it ends at the last ack
    if out.peer_fault is not None and out.peer_fault.kind != "late" and (
            out.report["log_end"] != acked or out.report["write_pos"] != ends[acked]):
        inv.fail("peer_fault_hands_back",
                 f"seed {out.seed}: after the {out.peer_fault.kind} the loop's log ends at "
                 f"{out.report['log_end']} (byte {out.report['write_pos']}), not at the last "
                 f"acknowledgement's {acked} (byte {ends[acked]})")
    # the crashed file: whole valid batches up to the acknowledged end, torn only after it
    crashed = path.read_bytes()
    scan = scan_batches(crashed)
    if scan.valid_bytes < ends[acked]:
        inv.fail("torn_tail_after_durable",
                 f"seed {out.seed}: the crashed file is valid to byte {scan.valid_bytes} only, "
                 f"below the acknowledged end's byte {ends[acked]} ({scan.tail})")
    out.recovered_end = _recover(workdir)
    recovered = (workdir / SEGMENT).read_bytes()
    batches = scan_batches(recovered)
    if batches.tail is not None or batches.valid_bytes != len(recovered):
        inv.fail("log_matching", f"seed {out.seed}: the recovered segment has a bad tail "
                                 f"{batches.tail}")
    inv.on_commit(LEADER, leader_end, None, EPOCH)  # every record sent counts as committed
    for offset, chain in _record_chains(out.sent):
        inv.on_record(LEADER, offset, EPOCH, chain)
    mine = [bytes(recovered[b.position:b.position + b.size_in_bytes]) for b in batches.batches]
    for offset, chain in _record_chains(mine):
        inv.on_record(FOLLOWER, offset, EPOCH, chain)
    if not leader_log.startswith(recovered) or out.recovered_end > leader_end:
        inv.fail("log_matching", f"seed {out.seed}: the recovered log ({len(recovered)} bytes, "
                                 f"end {out.recovered_end}) is no prefix of the leader's")
    inv.check_durable_after_crash(FOLLOWER, out.recovered_end, acked)


# ------------------------------------------------------------------------ the leader's loop

LEADER_SEGMENT = "00000000000000000001.log"  # the lease's log is 0-0, committed: the lane's from 1


@dataclass(slots=True)
class LeaderOutcome(RunEnd):
    """What one run of the leader's loop did and what survived its crash."""

    puts: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    """The client's PUTs by request id: (key, value)."""
    answered: dict[int, int] = field(default_factory=dict)
    """The PUTs the lane answered OK (committed): request id -> offset."""
    replicated: list[bytes] = field(default_factory=list)
    """The batches voter 2 received, in order."""
    commits: list[tuple[int, int, int]] = field(default_factory=list)
    """Each PUT answered OK as the client read it: (request id, offset, the highest fetch
    offset voter 2 had sent by then)."""


def run_leader(seed: int, workdir: Path, faults: Faults, turns: int = 12,
               peers: PeerFaults = NO_PEER_FAULTS) -> LeaderOutcome:
    """Run the leader lane's C loop for one seed over a client and one fetching voter of three
    (voter 3 never fetches, so every commit needs voter 2's fetch and the leader's own durable
    end), with the file layer's and the peers' faults, then crash it and check what its
    segment recovers to.

    A turn's peer fault, if any: the client closes or resets its connection, or voter 2 does,
    or voter 2's next fetch is held back (then released), or voter 2 sends an earlier fetch
    again (late, stale)."""
    from kraft.lane import LeaderLane, to_native
    from kraft.protocol.kv_wire import OK, OP_PUT, RESPONSE_HEAD, encode_request
    from kraft.raft.lease import LeaseVoter
    from kraft.raft.messages import ReplicaKey
    from kraft.server.fetch_fast import decode_fetch_response, encode_fetch_request

    c, rng, prng, path, fd = _start(seed, workdir, LEADER_SEGMENT, faults)
    client_mine, client = socket.socketpair()
    voter_mine, voter = socket.socketpair()
    for sock in (client_mine, voter_mine):
        sock.setblocking(False)  # as the node's (asyncio's) sockets are
    client.settimeout(WAIT_S)
    voter.settimeout(WAIT_S)
    dirs = {2: Uuid(bytes([2]) * 16), 3: Uuid(bytes([3]) * 16)}
    lease = LeaderLane(1, 0, 0, 1, 1, 1, [LeaseVoter(1, None, True)] + [
        LeaseVoter(rid, ReplicaKey(rid, d), False, 1) for rid, d in dirs.items()])
    out = LeaderOutcome(seed, {}, {})
    voter_end, voter_hw, corr, voter_acked = 1, 1, 0, 1
    fetches: list[bytes] = []  # every fetch frame voter 2 sent, in order

    def fetch_frame() -> bytes:
        nonlocal corr
        corr += 1
        req = m.FetchRequest(2, dirs[2], 1, voter_end, 1, 500, 1 << 20, voter_hw)
        frame = encode_fetch_request(req, CLUSTER, 18, corr, None)
        assert frame is not None
        return struct.pack(">I", len(frame)) + frame

    def send_fetch(frame: bytes) -> None:
        nonlocal voter_acked
        voter.sendall(frame)
        fetches.append(frame)
        voter_acked = max(voter_acked, voter_end)

    def read_answer() -> None:
        head = RESPONSE_HEAD.unpack(_exactly(client, RESPONSE_HEAD.size))
        _length, answered, status, offset, _leader = head
        if status != OK:
            raise HarnessError(f"seed {seed}: PUT {answered} answered {status}")
        out.answered[answered] = offset
        out.commits.append((answered, offset, voter_acked))

    def hang_up(sock: socket.socket, fault: PeerFault) -> None:
        """The fault's peer goes away; the loop must end."""
        out.peer_fault = fault
        sock.close()
        _wait_end(shell.done_fd, seed)

    try:
        shell = c.LeaderShell(client_mine.fileno(), [(voter_mine.fileno(), 2)], fd, 0,
                              to_native(lease, c), 1, CLUSTER, 0, 1_700_000_000_000)
        shell.start()
        send_fetch(fetch_frame())
        rid, ended = 0, False
        for turn in range(turns):
            kind = peers.draw(prng)
            if kind in ("close", "reset", "stale"):
                # whose: the client's connection, or voter 2's
                who = "client" if prng.random() < 0.5 and kind != "stale" else "voter"
            else:
                who = "voter"
            frames: list[bytes] = []
            for _ in range(rng.randint(1, 4)):
                rid += 1
                key, value = f"k{rng.randrange(50)}", rng.randbytes(rng.randint(0, 60))
                out.puts[rid] = (key, value)
                frames.append(encode_request(rid, OP_PUT, key, value))
            blob = b"".join(frames)
            cuts = sorted(rng.sample(range(1, len(blob)), min(rng.randint(0, 3), len(blob) - 1)))
            if kind == "close" and who == "client":
                # the client goes away in the middle of one of its frames: the PUTs before it
                # are the loop's, that one's bytes are handed back
                k = prng.randrange(len(frames))
                at = sum(len(f) for f in frames[:k])
                cut = at + prng.randrange(1, len(frames[k]))
                client.sendall(blob[:cut])
                for lost in range(rid - len(frames) + k + 1, rid + 1):
                    del out.puts[lost]  # never whole: no PUT
                if not _wait_read(client_mine, shell.done_fd):
                    hang_up(client, PeerFault("close", turn, "client", blob[at:cut]))
                break
            for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True):
                client.sendall(blob[a:b])
                if _wait_read(client_mine, shell.done_fd):
                    ended = True
                    break
            # the voter keeps fetching; the turn ends when every PUT so far is answered
            deadline = time.monotonic() + WAIT_S
            while not ended and len(out.answered) < len(out.puts):
                ready = select.select([client, voter, shell.done_fd], [], [], 0.05)[0]
                if voter in ready and kind == "reset" and who == "voter":
                    # voter 2 goes away with the loop's answer unread: the loop reads a reset
                    hang_up(voter, PeerFault("reset", turn, "voter", b""))
                    ended = True
                    break
                if client in ready and kind == "reset" and who == "client":
                    hang_up(client, PeerFault("reset", turn, "client", b""))
                    ended = True
                    break
                if voter in ready:
                    size = struct.unpack(">I", _exactly(voter, 4))[0]
                    r = decode_fetch_response(_exactly(voter, size), 18, corr, "CONTROLLER")
                    if r is None or r.error_code != ErrorCode.NONE:
                        raise HarnessError(f"seed {seed}: an answer the voter cannot read")
                    for batch in r.batches:
                        out.replicated.append(bytes(batch.payload))  # type: ignore[arg-type]
                        voter_end = batch.last_offset + 1
                    voter_hw = max(voter_hw, r.high_watermark)
                    frame = fetch_frame()
                    if kind == "close":  # voter 2 goes away in the middle of its fetch
                        cut = prng.randrange(1, len(frame))
                        voter.sendall(frame[:cut])
                        if not _wait_read(voter_mine, shell.done_fd):
                            hang_up(voter, PeerFault("close", turn, "voter", frame[:cut]))
                        ended = True
                        break
                    if kind == "stale" and voter_acked > 1:
                        # an earlier fetch again, late: the voter going back is the core's
                        old = fetches[0]
                        voter.sendall(old)  # the loop hands it over: its end is expected
                        out.peer_fault = PeerFault("stale", turn, "voter", old)
                        _wait_end(shell.done_fd, seed)
                        ended = True
                        break
                    if kind == "late":
                        # held back: the PUTs it would commit are not answered meanwhile
                        kind = None
                        out.held += 1
                        for got in select.select([client], [], [], HOLD_S)[0]:
                            if got is client:
                                read_answer()
                    send_fetch(frame)
                if client in ready:
                    read_answer()
                if shell.done_fd in ready and not (client in ready or voter in ready):
                    ended = True
                if time.monotonic() > deadline:
                    raise HarnessError(f"seed {seed}: PUTs unanswered: {out.answered}")
            if ended:
                break
        out.report = shell.stop()
        if client.fileno() >= 0:
            while select.select([client], [], [], 0)[0]:  # answers sent as it stopped
                data = client.recv(RESPONSE_HEAD.size, socket.MSG_WAITALL)
                if len(data) < RESPONSE_HEAD.size:
                    break
                _length, answered, status, offset, _leader = RESPONSE_HEAD.unpack(data)
                if status == OK:
                    out.answered[answered] = offset
                    out.commits.append((answered, offset, voter_acked))
        out.counts = c.io_fault_counts()
    finally:
        c.io_faults(None)
        for s in (client_mine, client, voter_mine, voter):
            s.close()
        os.close(fd)
    out.synced_size, out.crashed_size = _crash(path, out.counts, rng)
    check_leader(out, path, workdir)
    return out


def check_leader(out: LeaderOutcome, path: Path, workdir: Path) -> None:
    """Check a crashed leader run: every PUT answered OK survives, with the client's value, in
    a log that is a prefix of what the voter received (or it extended), durable before the
    answer."""
    from kraft.records.batch import iter_batches
    from kraft.statemachine.kv import encode_put

    inv = out.invariants
    acked = max(out.answered.values(), default=0) + 1 if out.answered else 1
    # the byte end of the batch holding each offset, in the leader's segment: the batches it
    # wrote are the ones it replicated, in order (log matching below checks that)
    ends: dict[int, int] = {}
    pos = 0
    for b in iter_batches(b"".join(out.replicated)):
        pos = b.position + b.size_in_bytes
        for o in range(b.base_offset, b.last_offset + 1):
            ends[o] = pos
    synced_end = max((o + 1 for o, e in ends.items() if e <= out.synced_size), default=1)
    if acked > synced_end:
        inv.fail("acknowledged_before_durable",
                 f"seed {out.seed}: PUT answered at offset {acked - 1}, beyond the last "
                 f"successful fdatasync's {out.synced_size} bytes (offsets below {synced_end})")
    _check_loop_end(inv, out.seed, out.counts, out.report)
    for rid, offset, voter_acked in out.commits:
        if offset >= voter_acked:
            inv.fail("commit_without_quorum",
                     f"seed {out.seed}: PUT {rid} answered at offset {offset} before voter 2 "
                     f"fetched past it (its fetches reached {voter_acked}; voter 3 never "
                     f"fetches)")
    fault = out.peer_fault
    if fault is not None:
        parked = {int(v[0]): bytes(v[1]) for v in out.report["parked"]}
        unread = out.report["client_unread"] if fault.peer == "client" else parked[2]
        _check_handed_back(inv, out.seed, fault, out.report, out.counts, bytes(unread))
        # every whole PUT sent is answered or handed back pending; none of a cut frame is
        # (answers sent to a client that reset are lost with it: only no PUT unknown then)
        pending = {int(i) for i, _o in out.report["pending"]}
        known = pending | set(out.answered)
        lost = fault.peer == "client" and fault.kind == "reset"
        if (not known <= set(out.puts) or (not lost and known != set(out.puts))
                or pending & set(out.answered)):
            inv.fail("peer_fault_hands_back",
                     f"seed {out.seed}: after the {fault.peer}'s {fault.kind} the PUTs "
                     f"answered {sorted(out.answered)} and pending {sorted(pending)} are not "
                     f"the whole ones sent {sorted(out.puts)}")
    out.recovered_end = _recover(workdir, initial_offset=1)
    recovered = (workdir / LEADER_SEGMENT).read_bytes()
    batches = scan_batches(recovered)
    inv.on_commit(1, acked, None, 1)
    records: dict[int, bytes] = {}
    for b in batches.batches:
        for o, v in zip(range(b.base_offset, b.last_offset + 1), b.values(), strict=True):
            records[o] = bytes(v)
    replicated = [bytes(v) for data in out.replicated for b in iter_batches(data)
                  for v in b.values()]
    # log matching between the leader's recovered log and what voter 2 received (both from 1)
    for node, values in ((2, replicated), (1, [records[o] for o in sorted(records)])):
        chain = 0
        for k, v in enumerate(values):
            chain = chain_hash(chain, 1, hashlib.blake2b(v, digest_size=8).hexdigest())
            inv.on_record(node, 1 + k, 1, chain)
    inv.check_durable_after_crash(1, out.recovered_end, acked)
    for rid, offset in out.answered.items():
        key, value = out.puts[rid]
        if records.get(offset) != encode_put(key, value):
            inv.fail("acknowledged_committed_lost",
                     f"seed {out.seed}: PUT {rid} answered at {offset} is not that record "
                     f"after the crash")


# ------------------------------------------------------------------------ the soak

SOAK_MIXES: tuple[tuple[str, Faults, PeerFaults], ...] = (
    ("peers", Faults(), PeerFaults(close=0.04, reset=0.04, late=0.1, stale=0.03)),
    ("files", Faults(fail_write=0.02, tear_write=0.05, fail_sync=0.02, delay_us=100),
     NO_PEER_FAULTS),
    ("both", Faults(fail_write=0.01, tear_write=0.03, fail_sync=0.01, delay_us=50),
     PeerFaults(close=0.03, reset=0.03, late=0.1, stale=0.02)),
    ("late", Faults(), PeerFaults(late=0.5)),
)
"""The soak's mixes of faults, one a seed in turn: the seed's follower and leader runs both
take it."""


def soak_seed(seed: int, workdir: Path) -> list[str]:
    """Run the follower's and the leader's loop for `seed` with its mix (`SOAK_MIXES`); the
    violations found (none when the invariants hold)."""
    _name, files, peers = SOAK_MIXES[seed % len(SOAK_MIXES)]
    found: list[str] = []
    for role, run in (("follower", run_follower), ("leader", run_leader)):
        where = workdir / f"{role}-{seed}"
        try:
            run(seed, where, files, peers=peers)
        except AssertionError as exc:  # an invariant broken, or the harness stuck
            found.append(f"{role} seed {seed}: {exc}")
        finally:
            shutil.rmtree(where, ignore_errors=True)
    return found


def main(argv: list[str] | None = None) -> int:
    """The lane harness's soak: seeds from --start, --seeds of them or for --seconds (or both:
    whichever ends first; neither: until interrupted), a summary line every 100 seeds; exit 1
    at the first violation, naming the seed (`--seed N` runs that one alone)."""
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m tests.support.lane_harness",
                                 description=main.__doc__)
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds to run")
    ap.add_argument("--seconds", type=float, default=None, help="stop starting seeds after this")
    ap.add_argument("--seed", type=int, default=None, help="run this one seed")
    args = ap.parse_args(argv)
    # the recovery's warnings of the torn tails the crashes leave are the expected case here
    logging.getLogger("kraft").setLevel(logging.ERROR)
    if native() is None:
        print("kraft.lane._native was not built: nothing to soak")
        return 1
    start, count = (args.seed, 1) if args.seed is not None else (args.start, args.seeds)
    began = time.monotonic()
    done = 0
    with tempfile.TemporaryDirectory(prefix="lane-soak-") as tmp:
        seed = start
        while count is None or done < count:
            if args.seconds is not None and time.monotonic() - began >= args.seconds:
                break
            found = soak_seed(seed, Path(tmp))
            done += 1
            if found:
                for line in found:
                    print(f"VIOLATION {line}")
                print(f"replay: python -m tests.support.lane_harness --seed {seed}")
                return 1
            if done % 100 == 0:
                print(f"lane harness: {done} seeds from {start} "
                      f"({time.monotonic() - began:.0f} s), no violation", flush=True)
            seed += 1
    print(f"lane harness: {done} seeds from {start} ({time.monotonic() - began:.1f} s): "
          f"every invariant held")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
