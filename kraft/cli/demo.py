"""`make run`: a short scripted demo on a local quorum of real processes.

1. start 3 voters on 127.0.0.1-3 (a dynamic quorum, kraft.version 1) and wait for a leader;
2. write keys through the KV API and remember every acknowledged one;
3. `kill -9` the leader, time the re-election, and read every acknowledged key back
   (linearizable reads through the new leader);
4. restart the killed node, which catches up as a follower;
5. start a fourth node as an observer and make it a voter (AddRaftVoter);
6. remove one voter (RemoveRaftVoter) and show the final quorum;
7. stop every process and exit — or keep running with `--keep-running` (Ctrl-C stops).

Every wait is bounded; on any failure the processes are killed and the exit code is 1.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from pathlib import Path

from kraft.cli.local import LocalCluster, http_call
from kraft.cli.node import status_table
from kraft.cli.quorum import (
    add_voter,
    describe_quorum,
    format_status,
    remove_voter,
)

STEP_TIMEOUT_S = 60.0


def say(text: str) -> None:
    """Print one demo line."""
    print(text, flush=True)


def _write_keys(cluster: LocalCluster, prefix: str, count: int, acked: dict[str, bytes]) -> None:
    for i in range(count):
        key, value = f"{prefix}-{i:03d}", f"value-{prefix}-{i}".encode()
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while True:
            try:
                r = cluster.put(key, value, timeout=10)
                if r.status == 200:
                    acked[key] = value
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not write {key}")
            time.sleep(0.1)


def _check_keys(cluster: LocalCluster, acked: dict[str, bytes]) -> int:
    lid = cluster.wait_for_leader(STEP_TIMEOUT_S)
    bad = 0
    for key, value in acked.items():
        r = http_call(cluster.nodes[lid].http, "GET", f"/v1/kv/{key}", timeout=10)
        if r.status != 200 or r.body != value:
            bad += 1
            say(f"   MISSING {key}: status {r.status} body {r.body[:40]!r}")
    return bad


def _wait(predicate: object, what: str, timeout: float = STEP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}")


def run_demo(base: Path, keep_running: bool) -> int:
    """Run the scripted demo in `base`; returns the exit code."""
    cluster = LocalCluster(base, voters=3, properties={
        "controller.quorum.election.timeout.ms": "500",
        "controller.quorum.fetch.timeout.ms": "1000",
        "controller.quorum.request.timeout.ms": "1000",
    })
    acked: dict[str, bytes] = {}
    try:
        say(f"== 1. starting 3 voters in {base} (cluster id {cluster.cluster_id})")
        cluster.start_all()
        leader = cluster.wait_for_leader(STEP_TIMEOUT_S)
        say(f"   leader is node {leader}")
        say(status_table(cluster))

        say("== 2. writing 30 keys")
        _write_keys(cluster, "before", 30, acked)
        say(f"   {len(acked)} writes acknowledged")

        say(f"== 3. kill -9 of the leader (node {leader})")
        killed_at = time.monotonic()
        cluster.kill(leader, signal.SIGKILL)
        survivors = [n for n in cluster.nodes if n != leader]
        new_leader = cluster.wait_for_leader(STEP_TIMEOUT_S, exclude=leader, among=survivors)
        elapsed = time.monotonic() - killed_at
        say(f"   node {new_leader} leads after {elapsed * 1000:.0f} ms")
        _write_keys(cluster, "after", 10, acked)
        bad = _check_keys(cluster, acked)
        say(f"   every acknowledged key readable: {len(acked) - bad}/{len(acked)}")
        if bad:
            return 1

        say(f"== 4. restarting node {leader}; it catches up as a follower")
        cluster.start(leader)
        cluster.wait_ready(leader, STEP_TIMEOUT_S)
        say(status_table(cluster))

        say("== 5. adding a fourth voter")
        node4 = cluster.add_node(4)
        cluster.format(4, join_later=True)
        cluster.start(4)
        cluster.wait_ready(4, STEP_TIMEOUT_S)
        bootstrap = [(cluster.nodes[n].host, cluster.nodes[n].port) for n in survivors]
        asyncio.run(add_voter(bootstrap, 4, node4.directory_id,
                              [("CONTROLLER", node4.host, node4.port)]))
        quorum = asyncio.run(describe_quorum(bootstrap))
        say(format_status(quorum))

        victim = next(n for n in survivors if n != new_leader)
        say(f"== 6. removing voter {victim}")
        asyncio.run(remove_voter(bootstrap, victim, cluster.nodes[victim].directory_id))
        quorum = asyncio.run(describe_quorum(bootstrap))
        say(format_status(quorum))
        bad = _check_keys(cluster, acked)
        say(f"   every acknowledged key still readable: {len(acked) - bad}/{len(acked)}")
        if bad:
            return 1
        if keep_running:
            say("== running; Ctrl-C stops every node")
            while True:
                say(status_table(cluster))
                time.sleep(2)
        say("== 7. stopping every node")
        return 0
    except KeyboardInterrupt:
        return 0
    except Exception as exc:
        say(f"demo failed: {type(exc).__name__}: {exc} (node logs in {base})")
        return 1
    finally:
        cluster.stop_all(timeout=10)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m kraft.cli.demo`."""
    p = argparse.ArgumentParser(prog="python -m kraft.cli.demo", description=__doc__.split("\n")[0])
    p.add_argument("--keep-running", action="store_true",
                   help="keep the quorum running after the script (Ctrl-C stops it)")
    p.add_argument("--dir", type=Path, default=None, help="directory for the nodes' files")
    args = p.parse_args(argv)
    base = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="kraft-demo-"))
    return run_demo(base, args.keep_running)


if __name__ == "__main__":
    sys.exit(main())
