"""Crashes and pauses the test does not script: a nemesis picks at random, from a seed, which node
(the leader half of the time) to kill -9, stop with SIGTERM, or freeze with SIGSTOP (shorter and
longer than the fetch timeout), or kills or freezes every node at once, or loses a node's disk
(kill -9, the metadata directory deleted, formatted again without initial controllers: the node
comes back as a new replica of the same id and auto-join replaces its old self in the voters
set), or kills one with a torn, never-fsynced batch at the end of its log (a power loss), while
clients read and write through every node. Snapshots and segment rolls happen throughout (small
thresholds). Afterwards: the whole history is linearizable, every node converges on the leader's
state, the voters set holds every node with its current directory, and no node logged a fatal
error.

`KRAFT_NEMESIS_SECONDS` (default 20) sets how long the nemesis runs, `KRAFT_NEMESIS_SEEDS`
(default "7,8") which seeds and `KRAFT_NEMESIS_VOTERS` (default 3) the quorum's size: a soak
sets minutes and more seeds. `KRAFT_NEMESIS_PREALLOCATE` (bytes; unset: off) runs the nodes
with `kraft.log.preallocate.bytes`, so that followers write through into zero-filled space
and every crash leaves zeros for recovery to trim. `KRAFT_NEMESIS_LANE=1` runs them with the
followers' native lane (`kraft.lane.follower`). `KRAFT_NEMESIS_LEADER_LANE=1` runs the leaders'
native lane (`kraft.lane.leader`) too, and adds a client of the binary protocol to the workload
(one connection that follows the leader, as the lane serves it), with three HTTP clients
instead of six.

`KRAFT_NEMESIS_TLS=1` runs the controller listeners over mTLS with the authorizer on
(tests/support/pki.py; the nodes are super users, as auto-join needs Alter): the hostile
client's Kafka frames then meet a TLS handshake they cannot pass.

`KRAFT_NEMESIS_HOSTILE` (default 1; 0 turns it off) runs a hostile client beside the nemesis for
the whole time it runs (tests/support/hostile.py: its own process, seeded with the seed, sending
garbage, forged epochs, oversized and truncated frames to every port of every node). Afterwards
every node process still runs or was stopped by the nemesis itself: none exited on its own.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.admin.errors import AdminError
from kraft.cli.local import LocalCluster, http_call
from kraft.cli.quorum import describe_quorum
from kraft.protocol.uuid import Uuid
from tests.node.test_failover import _final_reads
from tests.support.hostile import HostileClient, targets_of
from tests.support.kvclient import KVWorkload
from tests.support.linearizability import check_history, dump_history
from tests.support.pki import admin_tls, enable_mtls

NEMESIS_SECONDS = float(os.environ.get("KRAFT_NEMESIS_SECONDS", "20"))
NEMESIS_SEEDS = [int(s) for s in os.environ.get("KRAFT_NEMESIS_SEEDS", "7,8").split(",")]
NEMESIS_VOTERS = int(os.environ.get("KRAFT_NEMESIS_VOTERS", "3"))
HOSTILE = os.environ.get("KRAFT_NEMESIS_HOSTILE", "1") != "0"

SMALL_LOG = {
    "metadata.log.max.record.bytes.between.snapshots": "16384",
    "metadata.log.segment.bytes": "32768",
    # old snapshots and the log below them go soon (Kafka's rule, checked every 0.5 s): a node
    # that comes back late catches up through FetchSnapshot, as it did when every snapshot
    # moved the log start
    "metadata.max.retention.bytes": "65536",
    "kraft.metadata.retention.check.interval.ms": "500",
}
NEMESIS_PROPERTIES = {**SMALL_LOG, "controller.quorum.auto.join.enable": "true"}
if os.environ.get("KRAFT_NEMESIS_PREALLOCATE"):  # followers write through (bytes ahead)
    NEMESIS_PROPERTIES["kraft.log.preallocate.bytes"] = os.environ["KRAFT_NEMESIS_PREALLOCATE"]
if os.environ.get("KRAFT_NEMESIS_LANE") == "1":  # followers hand the steady state to C
    NEMESIS_PROPERTIES["kraft.lane.follower"] = "true"
LEADER_LANE = os.environ.get("KRAFT_NEMESIS_LEADER_LANE") == "1"
TLS = os.environ.get("KRAFT_NEMESIS_TLS") == "1"
if LEADER_LANE:  # the leader too, for a binary-protocol client that joins the workload
    NEMESIS_PROPERTIES["kraft.lane.leader"] = "true"


async def _voters_whole(cluster: LocalCluster, patience: float = 2.0) -> tuple[bool, str]:
    """Is every node a voter under its current directory id, and does every voter hold what the
    leader's log held when asked (so the voters-set record too)? Only then may one disk be lost:
    the other two hold every committed record and the voters set (two lost disks, or one lost
    before the previous loss was repaired, lose data in any Raft). Under load a follower's
    reported log end trails the leader's, so it is polled for up to `patience` seconds."""
    bootstrap = [(n.host, n.port) for n in cluster.nodes.values()]
    want = {nid: n.directory_id for nid, n in cluster.nodes.items()}
    target: int | None = None
    deadline = time.monotonic() + patience
    while True:
        try:
            resp = await describe_quorum(bootstrap, timeout_s=3.0, tls=admin_tls(cluster))
        except (AdminError, OSError, TimeoutError) as exc:
            return False, f"describe-quorum failed: {exc}"
        voters = {r.replica_id: r for r in resp.voters}
        got = {nid: Uuid.parse(r.directory_id) for nid, r in voters.items()}
        if got != want:
            return False, f"voters {got} != nodes {want}"
        if target is None:
            target = max(r.log_end_offset for r in voters.values())
        behind = [nid for nid, r in voters.items() if r.log_end_offset < target]
        if not behind:
            return True, "whole"
        if time.monotonic() > deadline:
            return False, f"voters {behind} not at offset {target} after {patience} s"
        await asyncio.sleep(0.05)


def _tear_tail(metadata_dir: Path, rng: random.Random) -> str:
    """What a power loss leaves after a write that was never fsynced (and so never counted):
    a torn record batch at the end of the newest segment, either cut short or whole with a
    payload byte changed (its CRC then fails). Returns what was done."""
    segments = sorted((metadata_dir / "__cluster_metadata-0").glob("*.log"))
    if not segments:
        return "no segment"
    path = segments[-1]
    data = path.read_bytes()
    pos, last = 0, None
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8:pos + 12], "big")
        end = pos + 12 + length
        if length < 49 or end > len(data):  # the end, or preallocated zeros after it
            break
        last, pos = (pos, end), end
    if last is None:
        return f"{path.name} holds no whole batch"
    batch = bytearray(data[last[0]:last[1]])
    # the torn batch would have followed the last one
    next_offset = int.from_bytes(batch[0:8], "big") + int.from_bytes(batch[23:27], "big") + 1
    batch[0:8] = next_offset.to_bytes(8, "big")
    if rng.random() < 0.5:
        torn = bytes(batch[:rng.randrange(1, len(batch))])
        how = f"{len(torn)} of {len(batch)} bytes"
    else:
        at = rng.randrange(61, len(batch)) if len(batch) > 61 else len(batch) - 1
        batch[at] ^= 0xFF
        torn, how = bytes(batch), f"whole, byte {at} flipped"
    with path.open("r+b") as f:  # over the zeros a preallocating node keeps, if any
        f.seek(last[1])
        f.write(torn)
    return f"{path.name} +{how} at offset {next_offset}"


class Exits:
    """Which node processes ended without the nemesis stopping them (a crash, a fatal error):
    `check` before every signal the nemesis sends, `kill` in place of `cluster.kill`."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.stopped: set[int] = set()  # pids the nemesis signalled to end
        self.by_themselves: list[str] = []
        self._seen: set[int] = set()

    def check(self) -> None:
        """Note every node process that ended and was not told to."""
        for nid, node in self.cluster.nodes.items():
            proc = node.process
            if proc is None or proc.poll() is None or proc.pid in self.stopped | self._seen:
                continue
            self._seen.add(proc.pid)
            self.by_themselves.append(f"node{nid} pid {proc.pid} exited {proc.returncode}")

    def kill(self, node_id: int, sig: int) -> None:
        """`cluster.kill`, once a process that already ended is noted."""
        self.check()
        proc = self.cluster.nodes[node_id].process
        if proc is not None and proc.poll() is None:
            self.stopped.add(proc.pid)
        self.cluster.kill(node_id, sig)


async def _nemesis(cluster: LocalCluster, rng: random.Random, seconds: float,
                   exits: Exits) -> list[str]:
    """Fault one node at a time until `seconds` passed; returns what it did."""
    done: list[str] = []
    ids = sorted(cluster.nodes)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(rng.uniform(0.3, 1.5))
        exits.check()
        leader = await asyncio.to_thread(cluster.leader)
        victim = leader if leader is not None and rng.random() < 0.5 else rng.choice(ids)
        node = cluster.nodes[victim]
        if not node.alive:
            continue
        assert node.process is not None
        action = rng.choice(("kill9", "kill9", "term", "pause", "pause_long", "kill9_all",
                             "disk_loss", "torn_tail", "pause_all"))
        if action == "disk_loss":
            whole, why = await _voters_whole(cluster)
            if not whole or not all(n.alive for n in cluster.nodes.values()):
                done.append(f"{time.monotonic():.3f} skip disk_loss node{victim} ({why})")
                continue
        done.append(f"{time.monotonic():.3f} {action} node{victim}"
                    f"{' (leader)' if victim == leader else ''}")
        if action == "torn_tail":
            await asyncio.to_thread(exits.kill, victim, signal.SIGKILL)
            done.append(f"  {_tear_tail(node.dir, rng)}")
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            await asyncio.to_thread(cluster.start, victim)
        elif action == "disk_loss":
            await asyncio.to_thread(exits.kill, victim, signal.SIGKILL)
            await asyncio.to_thread(cluster.wipe, victim)
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            await asyncio.to_thread(cluster.format, victim, join_later=True)
            await asyncio.to_thread(cluster.start, victim)
        elif action == "pause_all":
            # every process frozen at once (a VM or node stall): all timers expire together
            frozen = [n.process for n in cluster.nodes.values() if n.alive and n.process]
            for proc in frozen:
                proc.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(rng.uniform(0.5, 3.0))
            finally:
                for proc in frozen:
                    proc.send_signal(signal.SIGCONT)
        elif action == "kill9_all":
            # every process at once (what a node-wide crash does to a colocated quorum)
            for nid in ids:
                await asyncio.to_thread(exits.kill, nid, signal.SIGKILL)
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            for nid in ids:
                await asyncio.to_thread(cluster.start, nid)
        elif action in ("kill9", "term"):
            sig = signal.SIGKILL if action == "kill9" else signal.SIGTERM
            await asyncio.to_thread(exits.kill, victim, sig)
            await asyncio.sleep(rng.uniform(0.1, 2.0))
            await asyncio.to_thread(cluster.start, victim)
        else:
            # a pause longer than the fetch timeout (1 s here) costs a frozen leader its term
            pause = rng.uniform(0.1, 0.8) if action == "pause" else rng.uniform(1.2, 3.0)
            node.process.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(pause)
            finally:
                node.process.send_signal(signal.SIGCONT)
    return done


def _converged(cluster: LocalCluster, keys: list[str], timeout: float = 30.0) -> None:
    """Every node's local state equals the leader's (polled: followers apply asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        leader = cluster.wait_for_leader(30)
        want = {k: http_call(cluster.nodes[leader].http, "GET", f"/v1/kv/{k}") for k in keys}
        diff = []
        for nid, node in cluster.nodes.items():
            for k in keys:
                got = http_call(node.http, "GET", f"/v1/kv/{k}?stale=true")
                w = want[k]
                if not ((got.status, got.body) == (w.status, w.body)
                        or got.status == w.status == 404):
                    diff.append((nid, k, got.status, w.status))
        if not diff:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"nodes differ from leader {leader}: {diff}")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", NEMESIS_SEEDS)
async def test_random_crashes_and_pauses_stay_linearizable_and_converge(
    clusters: Callable[..., LocalCluster], seed: int,
) -> None:
    cluster = clusters(NEMESIS_VOTERS, properties=NEMESIS_PROPERTIES)
    if TLS:
        enable_mtls(cluster)
    await asyncio.to_thread(cluster.start_all)
    await asyncio.to_thread(cluster.wait_for_leader, 60)
    binary = {nid: n.client for nid, n in cluster.nodes.items()} if LEADER_LANE else None
    workload = KVWorkload([n.http for n in cluster.nodes.values()], keys=5,
                          clients=3 if LEADER_LANE else 6, seed=seed, timeout=5.0,
                          binary=binary)
    runner = asyncio.ensure_future(workload.run())
    attacker = HostileClient(targets_of(cluster.nodes.values()), seed=seed,
                             seconds=NEMESIS_SECONDS + 60, cluster_id=cluster.cluster_id,
                             workdir=cluster.base)
    exits = Exits(cluster)
    if HOSTILE:
        attacker.start()
    try:
        actions = await _nemesis(cluster, random.Random(seed), NEMESIS_SECONDS, exits)
    finally:
        report = attacker.stop() if HOSTILE else None
    exits.check()
    # heal: every node running, none frozen (SIGCONT was sent after every pause)
    for nid, node in cluster.nodes.items():
        if not node.alive:
            await asyncio.to_thread(cluster.start, nid)
    try:
        for nid in cluster.nodes:
            await asyncio.to_thread(cluster.wait_ready, nid, 60)
    except TimeoutError as exc:
        hostile = report.summary() if report is not None else "no hostile client"
        raise AssertionError(f"{exc}; exited by themselves {exits.by_themselves}; {hostile}; "
                             f"{actions}") from None
    ok_at_heal = workload.stats.ok
    # writes go on once healed (an election may still be under way: wait for it, bounded)
    deadline = time.monotonic() + 30
    while workload.stats.ok < ok_at_heal + 20 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    workload.stop()
    await runner
    await _final_reads(cluster, workload)
    (cluster.base / "nemesis.txt").write_text("\n".join(actions) + "\n")
    # progress during the faults and after them
    assert ok_at_heal > 0 and workload.stats.ok > ok_at_heal, (ok_at_heal, workload.stats)
    result = check_history(workload.history.ops)
    if not result.ok:
        dump_history(result.bad_ops, str(cluster.base / "bad-history.jsonl"))
    assert result.ok, (result.detail, str(cluster.base / "bad-history.jsonl"), actions)
    await asyncio.to_thread(_converged, cluster, workload.keys)
    # a node that lost its disk is a voter again under its new directory (auto-join)
    deadline = time.monotonic() + 90
    while not (whole := await _voters_whole(cluster))[0] and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert whole[0], (whole[1], actions)
    exits.check()
    assert not exits.by_themselves, (exits.by_themselves, str(cluster.base), actions)
    for nid, node in cluster.nodes.items():
        text = node.log_path.read_text(errors="replace")
        assert "event=fatal" not in text and "Traceback" not in text, (nid, str(node.log_path))
    snapshots = sum(len(list(n.dir.rglob("*.checkpoint"))) for n in cluster.nodes.values())
    assert snapshots > 0, "the run was meant to take snapshots"
    lanes = ""
    if NEMESIS_PROPERTIES.get("kraft.lane.follower") == "true":
        # the lanes did the followers' work since their nodes' last starts
        stats = [(await asyncio.to_thread(cluster.status, nid) or {}).get("lane", {})
                 for nid in cluster.nodes]
        reports = sum(s.get("reports", 0) for s in stats)
        assert reports > 0, stats
        lanes = f"; lanes armed {sum(s.get('arms', 0) for s in stats)}, reports {reports}"
    if LEADER_LANE:
        stats = [(await asyncio.to_thread(cluster.status, nid) or {}).get("leader_lane", {})
                 for nid in cluster.nodes]
        lanes += (f"; leader lanes armed {sum(s.get('arms', 0) for s in stats)}, "
                  f"reports {sum(s.get('reports', 0) for s in stats)}")
    print(f"nemesis seed {seed}: {len(actions)} faults; ops ok={workload.stats.ok} "
          f"unknown={workload.stats.unknown} checked={result.ops_checked}; "
          f"snapshot files {snapshots}{lanes}")
    if report is not None:
        print(report.summary())
