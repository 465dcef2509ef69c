"""The follower's decision on one leader answer: the Python path against the native lane's C.

For a sequential write, a follower gets one answer carrying one batch (one 108-byte value) and
answers with its next fetch. Measured per answer (best of several repetitions, one thread):
* `python_read_us`: `fetch_fast.decode_fetch_response` (header, tags, the batch and its
  CRC-32C);
* `python_rules_us`: `kraft.raft.lane.FollowerLane.answer` on what it decoded;
* `python_next_fetch_us`: `fetch_fast.encode_fetch_request`;
* `python_core_us`: what the node runs instead of the last two, the follower core's handling of
  the answer and of its sync (`RaftCore.handle` of `ResponseReceived`, then `Persisted`);
* `native_step_us`: the three in C (`kraft.raft._lane.time_follower_step`: read, rules and the
  next fetch frame, without the Python calls around them);
* `python_path_us`: read + core + next fetch, the Python side of what the lane replaces.

No I/O is timed: the write, the sync and the socket are the same for both. A benchmark of the
decision, which is what docs/native-lane.md's model puts at 10 + 5 µs for the native lane.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from bench.bench_protocol import _best_seconds
from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.raft.effects import SendRequest
from kraft.raft.events import Persisted, ResponseReceived
from kraft.raft.lane import FollowerLane, native
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
        out["native"] = "kraft.raft._lane was not built"
        return out
    ns = min(lane.time_follower_step(frame, 5, 3, 100, number * 10) for _ in range(5))
    if ns < 0:
        raise RuntimeError("the C lane did not take the benchmark's answer")
    out["native_step_us"] = round(ns / 1000, 4)
    out["python_over_native"] = round(out["python_path_us"] / out["native_step_us"], 1)
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
