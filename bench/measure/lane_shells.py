"""The lanes' C shells alone, end to end: the sequential commit latency of a three-voter quorum
whose steady state runs only in C (`kraft.lane._native.LeaderShell` and `FollowerShell`), with
the node's wire and on-disk formats, against the Python floor.

    .venv/bin/python -m bench.measure.lane_shells [--writes N] [--rounds R] [--json]

Four processes on 127.0.0.1, as in `bench.measure.latency_floor` and the benchmark's quorums: a
leader, two followers and a client. The leader's lane takes the client's PUT frames, builds
their batch, writes it, answers the followers' parked fetches with it and syncs it; each
follower's lane reads the answer, writes and syncs its batches and sends its next fetch; the
leader counts the fetches and answers each PUT once a majority holds it. Every sync is an `fdatasync` on the
machine's temporary directory. Only the steady state runs: the lanes are armed by hand (epoch
1, the LeaderChange at offset 0), not by cores, and nothing hands over. So this measures what
docs/native-lane.md's design can reach on this machine, not the node.

Each round runs the shells (`prototype` in the output) and then the floor
(`bench.measure.latency_floor`, Python, the same hops and syncs with no work); p50/p90/p99 in
ms over N writes after 200 of warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kraft.lane import LeaderLane, native, to_native
from kraft.protocol.kv_wire import OK, OP_PUT, RESPONSE_HEAD, encode_request
from kraft.protocol.uuid import Uuid
from kraft.raft.lease import LeaseVoter
from kraft.raft.messages import ReplicaKey
from kraft.records.batch import iter_batches
from kraft.statemachine.kv import encode_put

CLUSTER = "abcdefghijklmnopqrstuv"
DIRS = {2: Uuid(bytes([2]) * 16), 3: Uuid(bytes([3]) * 16)}
VALUE = b"v" * 100


def _leader(voter_fd: int, client_fd: int, directory: str) -> None:
    lane_c = native()
    assert lane_c is not None
    voter_server = socket.socket(fileno=voter_fd)
    client_server = socket.socket(fileno=client_fd)
    voters = []
    for _ in DIRS:
        conn, _ = voter_server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rid = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]  # the follower's hello
        voters.append((conn, rid))
    client, _ = client_server.accept()
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    fd = os.open(os.path.join(directory, "leader.log"), os.O_RDWR | os.O_CREAT)
    lease = LeaderLane(1, 0, 0, 1, 1, None, [LeaseVoter(1, None, True)] + [
        LeaseVoter(rid, ReplicaKey(rid, DIRS[rid]), False, -1) for _, rid in voters])
    shell = lane_c.LeaderShell(client.fileno(), [(c.fileno(), rid) for c, rid in voters], fd, 0,
                               to_native(lease, lane_c), 1, CLUSTER, 0, int(time.time() * 1000))
    shell.start()
    os.read(shell.done_fd, 1)
    report = shell.stop()
    if report["reason"] not in ("closed", "stopped"):
        sys.exit(f"lane shells: the leader's loop ended: {report}")


def _follower(rid: int, port: int, directory: str) -> None:
    lane_c = native()
    assert lane_c is not None
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(struct.pack(">i", rid))
    first = lane_c.fetch_request(18, 1, None, CLUSTER, rid, DIRS[rid], 500, 1 << 20, 1, 1, 1, -1)
    fd = os.open(os.path.join(directory, f"follower{rid}.log"), os.O_RDWR | os.O_CREAT)
    shell = lane_c.FollowerShell(sock.fileno(), fd, 0, lane_c.FollowerLane(1, 1, 1, 1, None), 1, 2,
                                 18, None, CLUSTER, rid, DIRS[rid], 500, 1 << 20)
    sock.sendall(struct.pack(">I", len(first)) + first)  # the fetch in flight when armed
    shell.start()
    os.read(shell.done_fd, 1)
    report = shell.stop()
    if report["reason"] not in ("closed", "stopped"):
        sys.exit(f"lane shells: follower {rid}'s loop ended: {report}")


def sequential(writes: int) -> dict[str, Any]:
    """One run: p50/p90/p99 of `writes` sequential PUTs after 200 of warm-up."""
    with tempfile.TemporaryDirectory(prefix="lane-shells-", dir=os.environ.get("TMPDIR")) as d:
        voter_srv = socket.create_server(("127.0.0.1", 0))
        client_srv = socket.create_server(("127.0.0.1", 0))
        for s in (voter_srv, client_srv):
            s.set_inheritable(True)
        me = [sys.executable, "-m", "bench.measure.lane_shells", "--dir", d]
        procs = [subprocess.Popen([*me, "--role", "leader", "--fds",
                                   f"{voter_srv.fileno()},{client_srv.fileno()}"],
                                  pass_fds=(voter_srv.fileno(), client_srv.fileno()))]
        port = voter_srv.getsockname()[1]
        procs += [subprocess.Popen([*me, "--role", str(rid), "--port", str(port)])
                  for rid in DIRS]
        times: list[float] = []
        try:
            with socket.create_connection(client_srv.getsockname()) as c:
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c.settimeout(30)
                for n in range(writes + 200):
                    frame = encode_request(n, OP_PUT, f"k{n % 1000}", VALUE)
                    t0 = time.perf_counter()
                    c.sendall(frame)
                    answer = c.recv(RESPONSE_HEAD.size, socket.MSG_WAITALL)
                    times.append(time.perf_counter() - t0)
                    _, rid, status, offset, _ = RESPONSE_HEAD.unpack(answer)
                    if (rid, status, offset) != (n, OK, n + 1):
                        raise RuntimeError(f"write {n}: answered {(rid, status, offset)}")
        finally:
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            voter_srv.close()
            client_srv.close()
        if any(p.returncode for p in procs):
            raise RuntimeError("a replica's loop did not end cleanly (see above)")
        check_logs(d, writes + 200)
    kept = sorted(times[200:])

    def q(p: float) -> float:
        return round(1000 * kept[min(len(kept) - 1, int(p * len(kept)))], 4)

    return {"p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99), "n": len(kept)}


def check_logs(directory: str, writes: int) -> None:
    """Every replica's log holds the same bytes: batches of epoch 1 from offset 1 on, with valid
    CRCs, whose records are the KV records of the PUTs in order (the last ones may be missing
    on a follower that had not fetched them when the client left)."""
    logs = {name: Path(directory, name).read_bytes()
            for name in ("leader.log", "follower2.log", "follower3.log")}
    leader = logs["leader.log"]
    values: list[bytes] = []
    expected = 1
    for batch in iter_batches(leader):
        if (not batch.is_valid() or batch.base_offset != expected
                or batch.partition_leader_epoch != 1):
            raise RuntimeError(f"the leader's log is wrong at offset {expected}")
        values += [bytes(v) for v in batch.values()]
        expected = batch.next_offset
    if values != [encode_put(f"k{n % 1000}", VALUE) for n in range(writes)]:
        raise RuntimeError("the leader's log does not hold the PUTs in order")
    for name, data in logs.items():
        if not leader.startswith(data):
            raise RuntimeError(f"{name} is not a prefix of the leader's log")


def floor(writes: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "bench.measure.latency_floor", "--writes",
                           str(writes + 200), "--json"], capture_output=True, text=True,
                          timeout=300, check=True)
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return {"p50_ms": r["p50_ms"], "p90_ms": r["p90_ms"], "p99_ms": r["p99_ms"], "n": r["n"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--fds", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "leader":
        v, c = (int(x) for x in args.fds.split(","))
        _leader(v, c, args.dir)
        return
    if args.role:
        _follower(int(args.role), args.port, args.dir)
        return
    if native() is None:
        sys.exit("lane shells: kraft.lane._native was not built (no C compiler at install)")
    if args.writes < 100:
        ap.error("--writes must be at least 100")
    runs = [{"prototype": sequential(args.writes), "floor": floor(args.writes)}
            for _ in range(args.rounds)]
    if args.json:
        print(json.dumps(runs))
        return
    for kind in ("prototype", "floor"):
        p50 = [r[kind]["p50_ms"] for r in runs]
        print(f"{kind:9s} p50 {min(p50):.3f}-{max(p50):.3f} ms (mean {statistics.mean(p50):.3f}), "
              f"p99 mean {statistics.mean(r[kind]['p99_ms'] for r in runs):.3f} ms, "
              f"{args.rounds} rounds of {args.writes} writes")


if __name__ == "__main__":
    main()
