"""KIP-630 retention in the simulator: a follower downloading a large snapshot while the
leader writes fast enough to take more snapshots still finishes the download and joins.

Before, every new snapshot moved each replica's log start up to it and deleted the older
ones: the leader deleted the snapshot being downloaded, the follower got SNAPSHOT_NOT_FOUND,
started over with the newest, and under sustained writes never finished."""

from __future__ import annotations

from kraft.raft.messages import OffsetAndEpoch
from kraft.sim.script import ScriptRunner


def run_download_under_writes(rounds: int) -> tuple[ScriptRunner, list[str]]:
    """n2 is down while the leader writes and snapshots; it restarts below the leader's log
    start and must download a snapshot of ~3 KB in 96-byte chunks (some 35 round trips)
    while a client keeps writing 100 records/s and the leader snapshots every 30 records."""
    runner = ScriptRunner()
    trace: list[str] = []
    runner.execute("cluster voters=3 seed=8 snapshot_every=30 snapshot_pad=3000")
    sim = runner.sim
    assert sim is not None
    sim.trace = trace.append
    runner.execute("run 3000")
    runner.execute("crash 2")
    for _ in range(10):
        runner.execute("append 10")
        runner.execute("run 100")
    runner.execute("run 1500")
    leader = runner.execute("status")[0]
    assert leader.startswith("n1 leader") and "log=[0," not in leader, leader
    runner.execute("restart 2")
    for _ in range(rounds):
        runner.execute("append 10")
        runner.execute("run 100")
    runner.execute("run 1500")
    return runner, trace


def test_follower_downloading_a_snapshot_finishes_while_the_leader_takes_two_more() -> None:
    runner, trace = run_download_under_writes(30)
    sim = runner.sim
    assert sim is not None
    restarted = next(i for i, t in enumerate(trace) if " n2 " in t and t.split()[2] == "start"
                     and "incarnation=3" in t)
    installs = [t for t in trace[restarted:] if " n2 " in t and t.split()[2] == "install"]
    assert installs, "n2 never finished downloading a snapshot"
    done = trace.index(installs[0])
    taken = [t for t in trace[restarted:done] if " n1 " in t and t.split()[2] == "snapshot"]
    assert len(taken) >= 2, f"the leader took {len(taken)} snapshots during the download"
    # one download, started once: never told SNAPSHOT_NOT_FOUND
    assert len(installs) == 1 and not any("SNAPSHOT_NOT_FOUND" in t for t in trace[restarted:])
    status = runner.execute("status")
    n1, n2 = (dict(w.split("=", 1) for w in line.split() if "=" in w) for line in status[:2])
    assert status[1].startswith("n2 follower"), status
    assert n2["log"].split(",")[1] == n1["log"].split(",")[1], status  # the same log end
    assert n2["hw"] == n1["hw"], status
    assert not sim.inv.violations


def test_the_snapshot_being_downloaded_goes_once_the_download_is_over() -> None:
    runner, trace = run_download_under_writes(30)
    sim = runner.sim
    assert sim is not None
    installed = next(t.split()[3] for t in trace if " n2 " in t and t.split()[2] == "install")
    deleted = [t for t in trace if " n1 " in t and t.split()[2] == "delete-snapshot"
               and t.split()[3] == installed]
    assert deleted, "the leader kept the downloaded snapshot for good"
    core = sim.nodes[1].core
    assert core is not None
    offset, epoch = installed.split("@")
    assert OffsetAndEpoch(int(epoch), int(offset)) not in core.log.snapshots
    assert len(core.log.snapshots) <= 2  # retention (0 bytes) keeps the latest (and a new one)
