"""The follower's decision on one leader answer: the Python path against the native lane's C.

For a sequential write, a follower gets one answer carrying one batch (one 108-byte value) and
answers with its next fetch. Measured per answer (best of several repetitions, one thread):
* `python_read_us`: `fetch_fast.decode_fetch_response` (header, tags, the batch and its
  CRC-32C);
* `python_rules_us`: `kraft.lane.rules.FollowerLane.answer` on what it decoded;
* `python_next_fetch_us`: `fetch_fast.encode_fetch_request`;
* `python_core_us`: what the node runs instead of the last two, the follower core's handling of
  the answer and of its sync (`RaftCore.handle` of `ResponseReceived`, then `Persisted`);
* `native_step_us`: the three in C (`kraft.lane._native.time_follower_step`: read, rules and the
  next fetch frame, without the Python calls around them);
* `python_path_us`: read + core + next fetch, the Python side of what the lane replaces.

No I/O is timed in these: the write, the sync and the socket are the same for both. A benchmark
of the decision, which is what docs/native-lane.md's model puts at 10 + 5 µs for the native lane.

`follower_rtt`: the same step with its I/O, as a leader sees it. A leader process (this one)
sends an answer over loopback TCP and times until the follower's next fetch arrives. The
follower is another process: `c`, the lane's loop (`FollowerShell`: read, rules, `pwrite`,
`fdatasync`, the next fetch); `python`, the same steps in Python on uvloop (the fast decoder,
the lane's rules, `os.pwrite`, `os.fdatasync`, the fast encoder); `floor`, Python reading the
answer and syncing it with no decoding or encoding (as `bench.measure.latency_floor`'s
followers do). p50 and p90 in ms over the answers after a warm-up.

`prototype_sequential`: the whole path in C, end to end (`bench.measure.lane_shells`: a
leader, two followers and a client in four processes), p50/p90/p99 of sequential PUTs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.measure import lane_shells
from bench.measure.bench_protocol import _best_seconds
from kraft.lane import FollowerLane, native
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.raft.effects import SendRequest
from kraft.raft.events import Persisted, ResponseReceived
from kraft.records.batch import build_batch
from kraft.server.fetch_fast import (
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
)
from kraft.sim.harness import CoreHarness

VALUE = b"v" * 108
CLUSTER = "c" * 22


def _best_us(fn: Callable[[], object], number: int) -> float:
    return _best_seconds(fn, repeat=5, number=number) * 1e6


def _answer(offset: int, epoch: int, hw: int, corr: int) -> bytes:
    frame = encode_fetch_response(18, corr, m.FetchResponse(ErrorCode.NONE, 1, epoch, hw, 0),
                                  build_batch(offset, epoch, [VALUE], 1_700_000_000_000))
    assert frame is not None
    return frame


def _core_us(number: int) -> float:
    """The follower core's handling of one answer and its sync, per answer, over a stream."""
    h = CoreHarness.follower(node_id=2, leader_id=1, epoch=1)
    h.advance(1)
    core = h.core
    corr = h.sent(m.FetchRequest)[-1].correlation_id
    offset = core.log.end_offset
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(number):
            resp = m.FetchResponse(ErrorCode.NONE, 1, 1, offset, 0, batches=(
                m.FetchedBatch(offset, offset, 1, payload=VALUE),))
            core.handle(ResponseReceived(1, corr, resp), h.now)
            offset += 1
            out = core.handle(Persisted(offset), h.now)
            corr = next(e.correlation_id for e in out if isinstance(e, SendRequest))
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1e6


FIRST_CORR, FIRST_OFFSET = 7, 10


def _frames(rounds: int) -> list[bytes]:
    """The leader's answers, size-prefixed: one batch of one value each, in order."""
    out = []
    for i in range(rounds):
        frame = _answer(FIRST_OFFSET + i, 3, FIRST_OFFSET + i, FIRST_CORR + i)
        out.append(struct.pack(">I", len(frame)) + frame)
    return out


def _follower(kind: str, port: int, directory: str) -> None:
    """A follower process for `follower_rtt` (see the module docstring)."""
    fd = os.open(os.path.join(directory, "segment.log"), os.O_RDWR | os.O_CREAT)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if kind == "c":
        lane = native()
        assert lane is not None
        shell = lane.FollowerShell(sock.fileno(), fd, 0, lane.FollowerLane(3, 1, FIRST_CORR,
                                   FIRST_OFFSET, None), 3, FIRST_CORR + 1, 18, None, CLUSTER, 2,
                                   None, 500, 1 << 20)
        shell.start()
        os.read(shell.done_fd, 1)  # until the leader closes
        shell.stop()
        return

    async def python_follower() -> None:
        reader, writer = await asyncio.open_connection(sock=sock)
        follower = FollowerLane(3, 1, FIRST_CORR, FIRST_OFFSET, None)
        pos, corr = 0, FIRST_CORR + 1
        while True:
            try:
                size = struct.unpack(">I", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
            except asyncio.IncompleteReadError:
                return
            if kind == "floor":
                os.pwrite(fd, frame, pos)
                pos += len(frame)
                os.fdatasync(fd)
                writer.write(frame[:4])
                continue
            resp = decode_fetch_response(frame, 18, follower.fetch_correlation, "CONTROLLER")
            assert resp is not None
            taken = follower.answer(follower.fetch_correlation, 0, resp.leader_id,
                                    resp.leader_epoch, resp.high_watermark, False, False,
                                    resp.batches)
            assert taken is not None
            for b in resp.batches:
                payload = bytes(b.payload)  # type: ignore[arg-type]
                os.pwrite(fd, payload, pos)
                pos += len(payload)
            os.fdatasync(fd)
            req = m.FetchRequest(2, None, 3, follower.log_end, 3, 500, 1 << 20,
                                 follower.high_watermark)
            out = encode_fetch_request(req, CLUSTER, 18, corr, None)
            assert out is not None
            follower.fetch_correlation = corr
            corr += 1
            writer.write(struct.pack(">I", len(out)) + out)

    try:
        import uvloop

        uvloop.run(python_follower())
    except ImportError:
        asyncio.run(python_follower())


def follower_rtt(kind: str, rounds: int, warmup: int = 200) -> dict[str, Any]:
    """Leader-side round trips to a `kind` follower process (see the module docstring)."""
    frames = _frames(rounds + warmup)
    with tempfile.TemporaryDirectory(prefix="bench-lane-", dir=os.environ.get("TMPDIR")) as d, \
            socket.create_server(("127.0.0.1", 0)) as server:
        child = subprocess.Popen([sys.executable, "-m", "bench.measure.bench_lane", "--follower", kind,
                                  "--port", str(server.getsockname()[1]), "--dir", d])
        try:
            server.settimeout(30)
            conn, _ = server.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(30)
                times = []
                for frame in frames:
                    t0 = time.perf_counter()
                    conn.sendall(frame)
                    head = conn.recv(4, socket.MSG_WAITALL)
                    size = struct.unpack(">I", head)[0] if kind != "floor" else 0
                    if size:
                        conn.recv(size, socket.MSG_WAITALL)
                    times.append(time.perf_counter() - t0)
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    kept = sorted(times[warmup:])
    return {"p50_ms": round(statistics.median(kept) * 1000, 4),
            "p90_ms": round(kept[int(0.9 * len(kept))] * 1000, 4), "n": len(kept)}


def run() -> dict[str, Any]:
    quick = os.environ.get("BENCH_QUICK") == "1"
    number = 2_000 if quick else 20_000
    frame = _answer(100, 3, 100, 5)
    decoded = decode_fetch_response(frame, 18, 5, "CONTROLLER")
    assert decoded is not None and len(decoded.batches) == 1

    def rules() -> object:
        return FollowerLane(3, 1, 5, 100, 99).answer(5, 0, 1, 3, 100, False, False,
                                                      decoded.batches)

    request = m.FetchRequest(2, Uuid(bytes(range(16))), 3, 101, 3, 500, 1 << 20, 100)
    out: dict[str, Any] = {
        "python_read_us": round(_best_us(
            lambda: decode_fetch_response(frame, 18, 5, "CONTROLLER"), number), 3),
        "python_rules_us": round(_best_us(rules, number), 3),
        "python_next_fetch_us": round(_best_us(
            lambda: encode_fetch_request(request, CLUSTER, 18, 6, None), number), 3),
        "python_core_us": round(_core_us(number), 3),
    }
    out["python_path_us"] = round(out["python_read_us"] + out["python_core_us"]
                                  + out["python_next_fetch_us"], 3)
    lane = native()
    if lane is None:
        out["native_step_us"] = None
        out["native"] = "kraft.lane._native was not built"
        return out
    ns = min(lane.time_follower_step(frame, 5, 3, 100, number * 10) for _ in range(5))
    if ns < 0:
        raise RuntimeError("the C lane did not take the benchmark's answer")
    out["native_step_us"] = round(ns / 1000, 4)
    out["python_over_native"] = round(out["python_path_us"] / out["native_step_us"], 1)
    rounds = 300 if quick else 3000
    out["follower_rtt"] = {kind: follower_rtt(kind, rounds) for kind in ("floor", "python", "c")}
    # the whole path in C, end to end in four processes (bench.measure.lane_shells)
    out["prototype_sequential"] = lane_shells.sequential(rounds)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--follower", choices=("c", "python", "floor"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.follower:
        _follower(args.follower, args.port, args.dir)
        return
    import json

    print(json.dumps(run(), indent=1))


if __name__ == "__main__":
    main()
