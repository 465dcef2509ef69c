"""Timestamps of a write's steps inside a running `kraft` node, for `bench.measure.write_path`.

Python imports `sitecustomize` at start-up from the first `sys.path` entry that has one, so a
node started with this directory first on `PYTHONPATH` and `BENCH_WRITE_TRACE=DIR` set wraps
the functions in `STEPS` once `kraft.server.node` is imported, and records
`(step, time.perf_counter_ns())` on every call: CLOCK_MONOTONIC, one clock for every process
of the machine, so the steps of different nodes line up. The records go to
`DIR/steps.<pid>.bin` (8-byte step codes and times) every `BLOCK` numbers or `EVERY_NS`,
whichever comes first, and at exit: a node killed with SIGKILL loses at most the last 0.2 s.

Without `BENCH_WRITE_TRACE` this module does nothing. A name in `STEPS` that no longer exists
stops the node with an error naming it (a renamed function must not leave a step silently
unrecorded).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import time
from array import array
from typing import Any

# (module, class, method, step at entry, step at return or ""): what a sequential write runs
# through, on the leader and on the followers.
STEPS: tuple[tuple[str, str, str, str, str], ...] = (
    ("kraft.server.client_protocol", "ClientProtocol", "data_received", "client_read", ""),
    ("kraft.server.client_protocol", "ClientProtocol", "_flush", "client_answer", ""),
    ("kraft.server.frames", "_FrameServerProtocol", "data_received", "request_read", ""),
    ("kraft.server.frames", "_FrameServerProtocol", "_write", "answer_written", ""),
    ("kraft.server.frames", "_FrameClientProtocol", "data_received", "response_read", ""),
    ("kraft.server.frames", "FrameConnection", "send", "request_sent", ""),
    ("kraft.server.peers", "_FetchCodec", "decode", "decode", "decoded"),
    ("kraft.server.node", "KraftNode", "_apply_step", "apply", "applied"),
    ("kraft.raft.core", "RaftCore", "handle", "core", "core_done"),
    ("kraft.storage.log", "SegmentedLog", "append", "append", "appended"),
    ("kraft.storage.log", "SegmentedLog", "start_flush", "flush_submit", "flush_submitted"),
    ("kraft.storage.log", "SegmentedLog", "_write_direct", "write", "written"),
    ("kraft.storage.log", "SegmentedLog", "flush", "sync", "synced"),
)
NAMES: tuple[str, ...] = tuple(sorted({s for row in STEPS for s in row[3:] if s}))
"""Step names by code (the code is the index)."""
BLOCK = 8192
EVERY_NS = 200_000_000


def _install(out_dir: str) -> None:
    codes = {name: i for i, name in enumerate(NAMES)}
    buf = array("q")
    path = os.path.join(out_dir, f"steps.{os.getpid()}.bin")
    clock = time.perf_counter_ns
    due = [clock() + EVERY_NS]

    def flush() -> None:
        due[0] = clock() + EVERY_NS
        if buf:
            with open(path, "ab") as f:
                buf.tofile(f)
            del buf[:]

    def wrap(fn: Any, enter: int, leave: int | None) -> Any:
        put = buf.append

        if leave is None:
            def entered(*args: Any, **kw: Any) -> Any:
                put(enter)
                now = clock()
                put(now)
                if len(buf) >= BLOCK or now > due[0]:
                    flush()
                return fn(*args, **kw)
            return entered

        def around(*args: Any, **kw: Any) -> Any:
            put(enter)
            put(clock())
            try:
                return fn(*args, **kw)
            finally:
                put(leave)
                now = clock()
                put(now)
                if len(buf) >= BLOCK or now > due[0]:
                    flush()
        return around

    def patch() -> None:
        for module, cls, method, enter, leave in STEPS:
            owner = getattr(importlib.import_module(module), cls, None)
            fn = getattr(owner, method, None) if owner is not None else None
            if fn is None:
                raise RuntimeError(f"write-path trace: {module}.{cls}.{method} does not exist")
            setattr(owner, method,
                    wrap(fn, codes[enter], codes[leave] if leave else None))

    class _AfterNode(importlib.abc.MetaPathFinder):
        """Patch right after `kraft.server.node` (which imports every module of STEPS) runs."""

        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name != "kraft.server.node":
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module: Any) -> None:
                run(module)
                patch()

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, _AfterNode())
    atexit.register(flush)


if __name__ == "sitecustomize" and os.environ.get("BENCH_WRITE_TRACE"):
    _install(os.environ["BENCH_WRITE_TRACE"])
