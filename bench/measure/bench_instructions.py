"""User-space instructions per sequential write of a whole quorum, counted by callgrind.

Timings on this two-core machine move by 5-10 % between runs of the same code, so a change
worth 2-3 % of the CPU per write cannot be told from noise in pairs of timed runs. Instruction
counts can: callgrind counts every user-space instruction of a process, whatever else the
machine does. This module runs three `KraftNode`s (a dynamic quorum, fsync on) and a binary
client writing one 100-byte value at a time, all in one process on one event loop, under
`valgrind --tool=callgrind`, twice: after the same warm-up, once with `short` writes and once
with `long`. The difference of the two totals divided by `long - short` is the quorum's
user-space instructions per write: start-up, formatting and the warm-up cancel out.

What it does not count: the kernel (socket writes, fsync, io_uring), which callgrind cannot see,
and the cost of four processes switching on two cores. It is a measure of the Python work per
write (the codecs, the core, the runtime, the event loop), for comparing two versions of the
code; repeated runs of the same code agree within about 0.5 %.

`python -m bench.measure.bench_instructions quorum WRITES WORKDIR` is the measured program
itself; `run()` (what `python -m bench instructions` calls) needs `valgrind` on the PATH.
`BENCH_QUICK=1` measures 50 writes instead of 500. It counts an export of HEAD's `kraft/`, or with
`BENCH_KRAFT_SRC=DIR` the `kraft/` package in DIR (an export of another commit).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.systems.peers import export_head

ROOT = Path(__file__).resolve().parents[2]
WARM_UP = 50
VALUE = b"v" * 100


async def _quorum(workdir: Path, writes: int) -> int:
    """Three nodes and a sequential client in this process; returns the high watermark."""
    from bench.systems.kraft_cluster import BENCH_PROPERTIES
    from kraft.admin.kv_client import KvClient
    from kraft.cli.local import LocalCluster
    from kraft.config.node import load_config
    from kraft.server.node import KraftNode

    # Generous timeouts: under callgrind everything runs some 50 times slower, and an
    # election in the middle of the measured writes would count its own work.
    lc = LocalCluster(workdir, voters=3, properties={
        **BENCH_PROPERTIES,  # the path the timed scenarios run
        "controller.quorum.election.timeout.ms": "3000",
        "controller.quorum.fetch.timeout.ms": "40000",
        "controller.quorum.request.timeout.ms": "40000"})
    for nid in lc.nodes:
        lc.format(nid)
    nodes = []
    for n in lc.nodes.values():
        lc.write_config(n)
        node = KraftNode(load_config(n.config_path))
        await node.start()
        nodes.append((n, node))
    try:
        for _ in range(6000):
            leaders = [(n, k) for n, k in nodes if k.core is not None
                       and k.core.role.name == "LEADER" and k.core.high_watermark]
            if leaders:
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("no leader elected")
        n, k = leaders[0]
        async with KvClient(n.host, n.client_port) as client:
            for i in range(WARM_UP + writes):
                await client.put(f"k{i % 1000}", VALUE)
            # the leader's lane answers a write at its commit and tells the core at its next
            # bookkeeping tick (which backs off while the lane is quiet); a local read takes
            # the lane's progress first, so the core's high watermark covers every write
            await client.get("k0", stale=True)
        assert k.core is not None and k.core.high_watermark is not None
        return k.core.high_watermark
    finally:
        for _, node in nodes:
            await node.stop(graceful=False)


def _count(writes: int, src: str) -> int:
    """User-space instructions of one run of the quorum program with `writes` measured writes,
    importing the `kraft/` package in `src`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src, str(ROOT)])
    with tempfile.TemporaryDirectory(prefix="kraft-instr-") as tmp:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/callgrind.out",
             sys.executable, "-m", "bench.measure.bench_instructions", "quorum", str(writes),
             f"{tmp}/quorum"],
            cwd=src, env=env, capture_output=True, text=True, timeout=1800, check=False)
        found = re.search(r"Collected : (\d+)", out.stderr)
        if out.returncode != 0 or found is None:
            raise RuntimeError(f"callgrind run failed (rc={out.returncode}): {out.stderr[-2000:]}")
        return int(found.group(1))


def run() -> dict[str, Any]:
    """Instructions per write (see the module docstring)."""
    if shutil.which("valgrind") is None:
        return {"skipped": "valgrind is not installed"}
    quick = os.environ.get("BENCH_QUICK") == "1"
    short, long_ = (20, 70) if quick else (100, 600)
    repeats = 1 if quick else 3
    per_write: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kraft-instr-src-") as tmp:
        # `BENCH_KRAFT_SRC`: a directory holding another version's `kraft/` to count; else an
        # export of HEAD, so that a run counts one committed version
        src = os.environ.get("BENCH_KRAFT_SRC") or ""
        source = src
        if not src:
            src = tmp
            source = f"git archive of HEAD {export_head(Path(tmp))}"
        for r in range(repeats):
            counts = {}
            for writes in (short, long_):
                print(f"instructions: callgrind, pair {r + 1}/{repeats}, {WARM_UP} + {writes} "
                      "writes ...", file=sys.stderr, flush=True)
                counts[writes] = _count(writes, src)
            per_write.append((counts[long_] - counts[short]) / (long_ - short))
    per_write.sort()
    return {
        "kraft_source": source,
        # the median pair: one pair in five or so lands 2-3 % off, when the three nodes'
        # exchanges interleave differently on the one event loop
        "instructions_per_write": round(per_write[len(per_write) // 2]),
        "pairs": [round(x) for x in per_write],
        "writes_measured": long_ - short,
        "note": "user space only, 3 nodes + client in one process, fsync on",
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "quorum":
        print("usage: python -m bench.measure.bench_instructions quorum WRITES WORKDIR", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:  # the node's own choice when uvloop is missing
        runner: Any = asyncio.run
    else:
        runner = uvloop.run
    print("high watermark", runner(_quorum(Path(argv[2]), int(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
