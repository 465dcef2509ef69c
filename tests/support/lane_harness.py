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
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import random
import select
import socket
import struct
import termios
import time
from dataclasses import dataclass, field
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


@dataclass(slots=True)
class Outcome:
    """What one run did and what survived its crash."""

    seed: int
    report: dict[str, Any]
    counts: dict[str, Any]
    sent: list[bytes] = field(default_factory=list)
    """The batches the leader sent, in offset order from 0."""
    acks: list[int] = field(default_factory=list)
    """The fetch offsets of the lane's acknowledgements, in order."""
    synced_size: int = 0
    crashed_size: int = 0
    recovered_end: int = 0
    invariants: Invariants = field(default_factory=Invariants)


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


def run_follower(seed: int, workdir: Path, faults: Faults, answers: int = 24) -> Outcome:
    """Run the follower lane's C loop for one seed (see the module docstring) and check it."""
    c = native()
    if c is None:
        raise HarnessError("kraft.lane._native was not built")
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / SEGMENT
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR)
    mine, theirs = socket.socketpair()
    theirs.settimeout(WAIT_S)
    sent: list[bytes] = []
    acks: list[int] = []
    leader_end = 0
    c.io_faults(seed, faults.fail_write, faults.tear_write, faults.fail_sync, faults.delay_us)
    try:
        lane = c.FollowerLane(EPOCH, LEADER, 7, 0, None)
        shell = c.FollowerShell(mine.fileno(), fd, 0, lane, EPOCH, 8, 18, "node-2", CLUSTER,
                                FOLLOWER, DIR, 500, 1 << 20)
        shell.start()
        corr, fetch_offset, hw = 7, 0, 0
        ended = False
        for _ in range(answers):
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
            for piece in pieces:
                if ended:
                    break
                theirs.sendall(piece)
                ended = _wait_read(mine, shell.done_fd)
            if ended:
                break
            ready = select.select([theirs, shell.done_fd], [], [], WAIT_S)[0]
            if not ready:
                raise HarnessError(f"seed {seed}: neither a fetch nor the loop's end came")
            if theirs not in ready:
                break
            size = struct.unpack(">I", _exactly(theirs, 4))[0]
            decoded = decode_fetch_request(_exactly(theirs, size), CLUSTER)
            if decoded is None:
                raise HarnessError(f"seed {seed}: the lane sent a fetch the leader cannot read")
            _version, corr, req = decoded
            fetch_offset = req.fetch_offset
            acks.append(fetch_offset)
            hw = min(leader_end, max(hw, fetch_offset))  # the follower's ack commits it
        report = shell.stop()
        # anything the loop sent after the harness stopped reading is an acknowledgement too
        while select.select([theirs], [], [], 0)[0]:
            head = theirs.recv(4)
            if len(head) < 4:
                break
            decoded = decode_fetch_request(_exactly(theirs, struct.unpack(">I", head)[0]),
                                           CLUSTER)
            if decoded is not None:
                acks.append(decoded[2].fetch_offset)
        counts = c.io_fault_counts()
    finally:
        c.io_faults(None)
        mine.close()
        theirs.close()
        os.close(fd)
    out = Outcome(seed, report, counts, sent, acks)
    _crash(out, path, rng)
    check(out, path, workdir)
    return out


def _wait_read(sock: socket.socket, done_fd: int) -> bool:
    """Wait until the loop has read all that was sent on `sock` (True: the loop ended)."""
    deadline = time.monotonic() + WAIT_S
    while _unread(sock) > 0:
        if select.select([done_fd], [], [], 0.0005)[0]:
            return True
        if time.monotonic() > deadline:
            raise HarnessError("the loop did not read what was sent")
    return bool(select.select([done_fd], [], [], 0)[0])


def _crash(out: Outcome, path: Path, rng: random.Random) -> None:
    """Drop what no successful fdatasync covered, but for a seeded prefix of it."""
    data = path.read_bytes()
    out.synced_size = max(0, int(out.counts["synced_size"]))
    kept = out.synced_size + rng.randint(0, max(0, len(data) - out.synced_size))
    out.crashed_size = min(kept, len(data))
    with open(path, "r+b") as f:
        f.truncate(out.crashed_size)


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
    # the first failed write or sync ends the loop, with that call's error
    write_faults = out.counts["failed_writes"] + out.counts["torn_writes"]
    sync_faults = out.counts["failed_syncs"]
    if write_faults + sync_faults > 1:
        inv.fail("fault_stops_the_loop", f"seed {out.seed}: the loop went on after a failed "
                                         f"call: {out.counts}")
    if write_faults + sync_faults == 1:
        want = "write" if write_faults else "fdatasync"
        if (out.report["reason"], out.report["error_at"]) != ("error", want):
            inv.fail("fault_stops_the_loop",
                     f"seed {out.seed}: a failed {want} ended the loop as {out.report}")
    # the crashed file: whole valid batches up to the acknowledged end, torn only after it
    crashed = path.read_bytes()
    scan = scan_batches(crashed)
    if scan.valid_bytes < ends[acked]:
        inv.fail("torn_tail_after_durable",
                 f"seed {out.seed}: the crashed file is valid to byte {scan.valid_bytes} only, "
                 f"below the acknowledged end's byte {ends[acked]} ({scan.tail})")
    # recovery, as a node's open does it
    log = SegmentedLog.open(workdir, full_scan=True, recovery_checkpoint_interval_s=None)
    try:
        out.recovered_end = log.log_end_offset
    finally:
        log.close()
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
class LeaderOutcome:
    """What one run of the leader's loop did and what survived its crash."""

    seed: int
    report: dict[str, Any]
    counts: dict[str, Any]
    puts: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    """The client's PUTs by request id: (key, value)."""
    answered: dict[int, int] = field(default_factory=dict)
    """The PUTs the lane answered OK (committed): request id -> offset."""
    replicated: list[bytes] = field(default_factory=list)
    """The batches voter 2 received, in order."""
    synced_size: int = 0
    crashed_size: int = 0
    recovered_end: int = 0
    invariants: Invariants = field(default_factory=Invariants)


def run_leader(seed: int, workdir: Path, faults: Faults, turns: int = 12) -> LeaderOutcome:
    """Run the leader lane's C loop for one seed over a client and one fetching voter of three
    (voter 3 never fetches, so every commit needs the leader's own durable end), with the file
    layer's faults, then crash it and check what its segment recovers to."""
    from kraft.lane import LeaderLane, to_native
    from kraft.raft.lease import LeaseVoter
    from kraft.raft.messages import ReplicaKey
    from kraft.server.client_protocol import OK, OP_PUT, RESPONSE_HEAD, encode_request
    from kraft.server.fetch_fast import decode_fetch_response, encode_fetch_request

    c = native()
    if c is None:
        raise HarnessError("kraft.lane._native was not built")
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LEADER_SEGMENT
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR)
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
    voter_end, voter_hw, corr = 1, 1, 0

    def fetch() -> None:
        nonlocal corr
        corr += 1
        req = m.FetchRequest(2, dirs[2], 1, voter_end, 1, 500, 1 << 20, voter_hw)
        frame = encode_fetch_request(req, CLUSTER, 18, corr, None)
        assert frame is not None
        voter.sendall(struct.pack(">I", len(frame)) + frame)

    c.io_faults(seed, faults.fail_write, faults.tear_write, faults.fail_sync, faults.delay_us)
    try:
        shell = c.LeaderShell(client_mine.fileno(), [(voter_mine.fileno(), 2)], fd, 0,
                              to_native(lease, c), 1, CLUSTER, 0, 1_700_000_000_000)
        shell.start()
        fetch()
        rid, ended = 0, False
        for _ in range(turns):
            blob = b""
            for _ in range(rng.randint(1, 4)):
                rid += 1
                key, value = f"k{rng.randrange(50)}", rng.randbytes(rng.randint(0, 60))
                out.puts[rid] = (key, value)
                blob += encode_request(rid, OP_PUT, key, value)
            cuts = sorted(rng.sample(range(1, len(blob)), min(rng.randint(0, 3), len(blob) - 1)))
            for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True):
                client.sendall(blob[a:b])
                if _wait_read(client_mine, shell.done_fd):
                    ended = True
                    break
            # the voter keeps fetching; the turn ends when every PUT so far is answered
            deadline = time.monotonic() + WAIT_S
            while not ended and len(out.answered) < len(out.puts):
                ready = select.select([client, voter, shell.done_fd], [], [], 0.05)[0]
                if voter in ready:
                    size = struct.unpack(">I", _exactly(voter, 4))[0]
                    r = decode_fetch_response(_exactly(voter, size), 18, corr, "CONTROLLER")
                    if r is None or r.error_code != ErrorCode.NONE:
                        raise HarnessError(f"seed {seed}: an answer the voter cannot read")
                    for b in r.batches:
                        out.replicated.append(bytes(b.payload))  # type: ignore[arg-type]
                        voter_end = b.last_offset + 1
                    voter_hw = max(voter_hw, r.high_watermark)
                    fetch()
                if client in ready:
                    head = RESPONSE_HEAD.unpack(_exactly(client, RESPONSE_HEAD.size))
                    _length, answered, status, offset, _leader = head
                    if status != OK:
                        raise HarnessError(f"seed {seed}: PUT {answered} answered {status}")
                    out.answered[answered] = offset
                if shell.done_fd in ready and not (client in ready or voter in ready):
                    ended = True
                if time.monotonic() > deadline:
                    raise HarnessError(f"seed {seed}: PUTs unanswered: {out.answered}")
            if ended:
                break
        out.report = shell.stop()
        while select.select([client], [], [], 0)[0]:  # answers sent as it stopped
            data = client.recv(RESPONSE_HEAD.size, socket.MSG_WAITALL)
            if len(data) < RESPONSE_HEAD.size:
                break
            _length, answered, status, offset, _leader = RESPONSE_HEAD.unpack(data)
            if status == OK:
                out.answered[answered] = offset
        out.counts = c.io_fault_counts()
    finally:
        c.io_faults(None)
        for s in (client_mine, client, voter_mine, voter):
            s.close()
        os.close(fd)
    data = path.read_bytes()
    out.synced_size = max(0, int(out.counts["synced_size"]))
    out.crashed_size = min(len(data), out.synced_size
                           + rng.randint(0, max(0, len(data) - out.synced_size)))
    with open(path, "r+b") as f:
        f.truncate(out.crashed_size)
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
    write_faults = out.counts["failed_writes"] + out.counts["torn_writes"]
    sync_faults = out.counts["failed_syncs"]
    if write_faults + sync_faults > 1:
        inv.fail("fault_stops_the_loop", f"seed {out.seed}: the loop went on after a failed "
                                         f"call: {out.counts}")
    if write_faults + sync_faults == 1:
        want = "write" if write_faults else "fdatasync"
        if (out.report["reason"], out.report["error_at"]) != ("error", want):
            inv.fail("fault_stops_the_loop",
                     f"seed {out.seed}: a failed {want} ended the loop as {out.report}")
    log = SegmentedLog.open(workdir, full_scan=True, recovery_checkpoint_interval_s=None,
                            initial_offset=1)
    try:
        out.recovered_end = log.log_end_offset
    finally:
        log.close()
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
