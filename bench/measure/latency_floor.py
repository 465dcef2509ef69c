"""The floor of a sequential commit on this machine for this runtime: the same hops and fsyncs
as a kraft-quorum write, with no work in between.

Four processes on 127.0.0.1, each on uvloop: a client sends a 108-byte write to a "leader",
which appends it to a file, forwards it to two "followers" and fdatasyncs; each follower
appends, fdatasyncs and acknowledges; the leader answers the client at the first
acknowledgement. That is a write's path through `kraft run` (client -> leader -> follower ->
leader -> client, three fsyncs on one disk) without any protocol, raft or state machine work.

    .venv/bin/python -m bench.measure.latency_floor [--writes N] [--no-leader-fsync] [--json]
        [--work A,B,C,D[,E,F[,G]]] [--leader-sync loop|thread|uring]
        [--off-path loop|thread] [--tick K]

`--work A,B,C,D[,E,F[,G]]` puts CPU work on the path, as a model of the node's own code: A µs in
the leader when a write arrives (before it goes to the followers), B µs in the leader on each
acknowledgement (before the answer, on the first), C µs in each follower when records arrive
(before its write) and D µs after its sync (before its acknowledgement); and off the path, E µs
in the leader after the answer and F µs in each follower after its acknowledgement (the node's
apply and bookkeeping, which compete for the same two CPUs); G µs in the leader when its
own sync is reported done (`--leader-sync uring` only). The work is CPU time of the
thread (`time.thread_time`), so a process that is switched out meanwhile does it later, as the
node's code would. `--leader-sync thread` moves the leader's fdatasync to a worker thread, as
the node starts its own through the kernel without waiting for it, and nothing tells the loop
when it is done; `--leader-sync uring` starts it as the node does (`IORING_OP_FSYNC` through
`kraft.storage.uring`, one in flight, the next started when it is done), and its eventfd wakes
the loop to reap the completion, as the node's does. The default waits for it on the loop.
With both options, the floor becomes a what-if: how the p50 moves when a step of the path gets
cheaper.

Two more options place the off-path work (E and F), as a model of a path served by native code
while the Python code catches up beside it. `--tick K` spends E and F once every K writes
instead of after every one (bookkeeping done in batches). `--off-path thread` spends them on a
second thread of the role that does not hold the GIL while it works (hashing, which releases
it), woken through a queue: the work then competes with the path for the two CPUs but never
holds up the role's loop. The default spends them on the loop, in line, as the node does.

Prints p50/p90/p99 in ms over N sequential writes (the first 200 dropped as warm-up), as one
JSON line with `--json` (`make bench` records it before each sequential window). With
`--leader-sync uring` the run also reports how many of the leader's fdatasyncs it reaped on its
loop and the CPU the work on their completions took (G each); an fdatasync that fails stops
the leader with its error, and the run with it. Every
process stops by itself: the client after N writes (bounded by a 60 s deadline), the servers
when the client is done (they are killed in a `finally`). The run binds its three listening
sockets itself, on ports the kernel picks, and hands them to the roles, so runs side by side
(or any other program on the machine) never collide on a port.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue

WRITE = 108
HEAD = struct.Struct(">q")
SYNC_STATS = "leader-syncs"
SYNC_STAT = struct.Struct("<qq")
"""With `--leader-sync uring`, the leader keeps in the run's directory how many of its
fdatasyncs it has reaped on its loop and the µs of CPU the work on their completions (G) took,
for the run's report."""


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    for _ in range(200):
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def _spend(us: int) -> None:
    """Spend `us` µs of this thread's CPU time (nothing for 0)."""
    if us <= 0:
        return
    end = time.thread_time() + us / 1e6
    while time.thread_time() < end:
        pass


_CHUNK = bytes(4096)  # hashed in steps of a few µs; hashlib lets go of the GIL from 2 KiB


def _spend_unlocked(us: int) -> None:
    """Spend `us` µs of this thread's CPU time mostly without the GIL (hashing a 4 KiB block at
    a time, which releases it), so the role's loop thread can run meanwhile."""
    if us <= 0:
        return
    end = time.thread_time() + us / 1e6
    while time.thread_time() < end:
        hashlib.sha256(_CHUNK)


def off_path(where: str, tick: int) -> Callable[[int], None]:
    """The function a role calls after each write with its off-path µs: it spends them once
    every `tick` calls, in line (`where` "loop") or on a thread of its own without the GIL
    ("thread")."""
    count = 0
    if where == "loop":
        def inline(us: int) -> None:
            nonlocal count
            count += 1
            if us and count % tick == 0:
                _spend(us)
        return inline
    work: SimpleQueue[int] = SimpleQueue()

    def worker() -> None:
        while True:
            _spend_unlocked(work.get())

    threading.Thread(target=worker, name="off-path", daemon=True).start()

    def handed(us: int) -> None:
        nonlocal count
        count += 1
        if us and count % tick == 0:
            work.put(us)
    return handed


def _listener() -> socket.socket:
    """A listening TCP socket on 127.0.0.1 at a port the kernel picks, inheritable by a child."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.set_inheritable(True)
    return sock


def _inherited(fd: int) -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM, fileno=fd)


async def _leader(directory: str, listen_fd: int, follower_ports: list[int], fsync: bool,
                  work: tuple[int, ...], sync: str, later: Callable[[int], None]) -> None:
    fd = os.open(os.path.join(directory, "leader.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    followers = [await _connect(port) for port in follower_ports]
    pending: dict[int, asyncio.StreamWriter] = {}
    on_write, on_ack, after_answer, on_flushed = work[0], work[1], work[4], work[6]
    syncer = concurrent.futures.ThreadPoolExecutor(1) if sync == "thread" else None
    engine = None
    again = False
    if sync == "uring":
        from kraft.storage.uring import UringSync

        engine = UringSync.open()
        if engine is None:
            raise RuntimeError("io_uring is not available here (--leader-sync uring)")

        # shared memory of a small file: the counts cost no system call on the loop
        stats_fd = os.open(os.path.join(directory, SYNC_STATS), os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(stats_fd, SYNC_STAT.size)
        stats = mmap.mmap(stats_fd, SYNC_STAT.size)
        reaped = spent_us = 0

        def flushed() -> None:
            nonlocal again, reaped, spent_us
            assert engine is not None
            for _token, result in engine.reap():
                if result < 0:  # the run would go on as if the leader did not sync: stop it
                    print(f"latency floor: the leader's fdatasync through io_uring failed: "
                          f"{os.strerror(-result)}", file=sys.stderr, flush=True)
                    os._exit(3)
                reaped += 1
                before = time.thread_time()
                _spend(on_flushed)
                spent_us += round((time.thread_time() - before) * 1e6)
                SYNC_STAT.pack_into(stats, 0, reaped, spent_us)
            if again and not engine.in_flight:
                again = False
                engine.submit(fd, 0)

        asyncio.get_running_loop().add_reader(engine.fileno(), flushed)

    async def acks(reader: asyncio.StreamReader) -> None:
        while True:
            head = await reader.readexactly(HEAD.size)
            _spend(on_ack)
            client = pending.pop(HEAD.unpack(head)[0], None)
            if client is not None:  # the first acknowledgement commits
                client.write(head)
                later(after_answer)

    readers = [asyncio.ensure_future(acks(reader)) for reader, _ in followers]  # noqa: F841

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal again
        while True:
            try:
                write = await reader.readexactly(WRITE)
            except asyncio.IncompleteReadError:
                return
            _spend(on_write)
            pending[HEAD.unpack_from(write)[0]] = writer
            os.write(fd, write)
            for _, follower in followers:
                follower.write(write)
            if fsync and engine is not None:
                if engine.in_flight:
                    again = True  # started when the one in flight is done, as the node does
                else:
                    engine.submit(fd, 0)
            elif fsync and syncer is not None:
                syncer.submit(os.fdatasync, fd)
            elif fsync:
                os.fdatasync(fd)

    await asyncio.start_server(client, sock=_inherited(listen_fd))
    await asyncio.sleep(120)


async def _follower(directory: str, index: int, listen_fd: int, work: tuple[int, ...],
                    later: Callable[[int], None]) -> None:
    fd = os.open(os.path.join(directory, f"follower{index}.log"),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    on_records, on_synced, after_ack = work[2], work[3], work[5]

    async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                write = await reader.readexactly(WRITE)
            except asyncio.IncompleteReadError:
                return
            _spend(on_records)
            os.write(fd, write)
            os.fdatasync(fd)
            _spend(on_synced)
            writer.write(write[:HEAD.size])
            later(after_ack)

    await asyncio.start_server(leader, sock=_inherited(listen_fd))
    await asyncio.sleep(120)


async def _client(port: int, writes: int) -> list[float]:
    reader, writer = await _connect(port)
    value = b"v" * (WRITE - HEAD.size)
    out: list[float] = []
    deadline = time.monotonic() + 60
    for n in range(writes):
        if time.monotonic() > deadline:
            break
        started = time.perf_counter()
        writer.write(HEAD.pack(n) + value)
        await reader.readexactly(HEAD.size)
        out.append(time.perf_counter() - started)
    writer.close()
    return out


def _sync_stats(directory: str) -> tuple[int, int]:
    """The leader's fdatasyncs reaped on its loop so far and the µs of work on them (the
    leader made the file before it took the client's first write)."""
    with open(os.path.join(directory, SYNC_STATS), "rb") as f:
        reaped, spent = SYNC_STAT.unpack(f.read(SYNC_STAT.size))
    return int(reaped), int(spent)


def parse_work(text: str) -> tuple[int, ...] | None:
    """`--work`'s seven µs figures (those not given 0), or None when it is not four, six or
    seven whole numbers in 0-100000."""
    parts = text.split(",")
    if len(parts) not in (4, 6, 7) or not all(p.strip().isascii() and p.strip().isdigit()
                                           for p in parts):
        return None
    work = tuple(int(p) for p in parts) + (0, 0, 0)[: 7 - len(parts)]
    if max(work) > 100_000:
        return None
    return work


def _run(coro: object) -> object:
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=4000)
    ap.add_argument("--no-leader-fsync", action="store_true",
                    help="the leader does not fsync (shows what the shared journal costs)")
    ap.add_argument("--work", default="0,0,0,0,0,0,0", metavar="A,B,C,D[,E,F[,G]]",
                    help="µs of CPU: leader on a write, leader on each acknowledgement, each "
                         "follower on records, each follower after its sync; off the path, "
                         "leader after the answer, each follower after its acknowledgement; "
                         "leader when its own sync is reported done (uring)")
    ap.add_argument("--leader-sync", choices=("loop", "thread", "uring"), default="loop",
                    help="the leader's fdatasync waits on its loop (default), runs on a thread, "
                         "or is started through io_uring with the completion reaped on the loop")
    ap.add_argument("--off-path", choices=("loop", "thread"), default="loop",
                    help="where E and F are spent: in line on the role's loop (default), or on "
                         "a thread of the role's own that does not hold the GIL meanwhile")
    ap.add_argument("--tick", type=int, default=1, metavar="K",
                    help="spend E and F once every K writes instead of after each one")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON line (p50_ms, p90_ms, p99_ms, n, leader_sync, work_us)")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--follower-ports", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writes < 300:
        ap.error("--writes must be at least 300 (the first 200 are warm-up)")
    work = parse_work(args.work)
    if work is None:
        ap.error("--work must be four, six or seven whole numbers of µs (A,B,C,D[,E,F[,G]]), "
                 f"each 0-100000; got {args.work!r}")
    if not 1 <= args.tick <= 10_000:
        ap.error(f"--tick must be a whole number of writes in 1-10000; got {args.tick}")
    if work[6] and args.leader_sync != "uring":
        ap.error("--work's seventh figure (G, the leader on its sync's completion) needs "
                 "--leader-sync uring")
    if args.role == "leader":
        ports = [int(p) for p in args.follower_ports.split(",")]
        _run(_leader(args.dir, args.listen_fd, ports, not args.no_leader_fsync, work,
                     args.leader_sync, off_path(args.off_path, args.tick)))
        return
    if args.role in ("1", "2"):
        _run(_follower(args.dir, int(args.role), args.listen_fd, work,
                       off_path(args.off_path, args.tick)))
        return
    with tempfile.TemporaryDirectory(prefix="latency-floor-", dir=os.environ.get("TMPDIR")) as d:
        me = [sys.executable, "-m", "bench.measure.latency_floor", "--dir", d, "--work", args.work,
              "--leader-sync", args.leader_sync, "--off-path", args.off_path,
              "--tick", str(args.tick)]
        leader, *followers = (_listener() for _ in range(3))
        servers: list[subprocess.Popen[bytes]] = []
        try:
            for role, sock in zip(("1", "2"), followers, strict=True):
                servers.append(subprocess.Popen(
                    [*me, "--role", role, "--listen-fd", str(sock.fileno())],
                    pass_fds=(sock.fileno(),)))
            servers.append(subprocess.Popen(
                [*me, "--role", "leader", "--listen-fd", str(leader.fileno()),
                 "--follower-ports", ",".join(str(s.getsockname()[1]) for s in followers),
                 *(["--no-leader-fsync"] if args.no_leader_fsync else [])],
                pass_fds=(leader.fileno(),)))
            port = leader.getsockname()[1]
            for sock in (leader, *followers):
                sock.close()  # the roles hold their own; connections queue until they accept
            try:
                times = sorted(_run(_client(port, args.writes))[200:])  # type: ignore[index]
            except (OSError, asyncio.IncompleteReadError) as exc:
                stopped = [f"{name} exited {p.returncode}" for name, p
                           in zip(("follower 1", "follower 2", "leader"), servers, strict=True)
                           if p.poll() is not None]
                sys.exit(f"latency floor: the client lost the leader ({exc!r}); "
                         f"{', '.join(stopped) or 'no role had exited'}")
            syncs = _sync_stats(d) if args.leader_sync == "uring" else None
        finally:
            for sock in (leader, *followers):
                sock.close()
            for p in servers:
                p.kill()
                p.wait()

    if not times:
        sys.exit("latency floor: no write after the 200 of warm-up was answered within the "
                 "run's 60 s deadline")

    def q(p: float) -> float:
        return 1000 * times[min(len(times) - 1, int(p * len(times)))]

    if args.json:
        print(json.dumps({"p50_ms": round(q(0.5), 4), "p90_ms": round(q(0.9), 4),
                          "p99_ms": round(q(0.99), 4), "n": len(times),
                          "leader_sync": None if args.no_leader_fsync else args.leader_sync,
                          "work_us": list(work), "off_path": args.off_path,
                          "tick": args.tick,
                          **({"leader_syncs_reaped": syncs[0], "leader_sync_work_us": syncs[1]}
                             if syncs is not None else {})}))
        return
    if syncs is not None:
        print(f"the leader reaped {syncs[0]} fdatasyncs on its loop, {syncs[1]} µs of CPU "
              "spent on their completions")
    sync = "no leader fsync" if args.no_leader_fsync else f"leader fsync on its {args.leader_sync}"
    where = ""
    if args.off_path != "loop" or args.tick != 1:
        where = f"; E and F on the {args.off_path}, once every {args.tick} writes"
    print(f"latency floor ({sync}, work {','.join(map(str, work))} µs{where}): "
          f"p50 {q(0.5):.3f} ms, p90 {q(0.9):.3f} ms, p99 {q(0.99):.3f} ms over {len(times)} writes")


if __name__ == "__main__":
    main()
