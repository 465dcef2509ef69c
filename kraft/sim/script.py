"""Data-driven interaction scripts over a simulated quorum (golden-transcript tests).

A script is a text file of commands, one per line, each introduced by `> `; the lines that
follow a command are its expected output. `run_script` executes the commands and returns the
transcript in the same format, so a test compares the whole text and a behaviour change shows
up as a diff. Targets are node ids or the words `leader` (the current leader) and `follower`
(the lowest-id live replica that is not the leader).

Commands:

    cluster voters=3 [spares=1] [static] [auto-join] [keep-log] [seed=7] [snapshot_every=N]
            [retention_bytes=N] [snapshot_pad=N]
                            keep-log: metadata.max.retention.bytes=-1 (else 0 unless given:
                            each retention check, every second, keeps only the latest
                            snapshot); snapshot_pad: filler bytes in each snapshot file
    run MS                  advance simulated time (no random faults, no random clients);
                            prints the answers the admin client received meanwhile
    append N                N client appends of one record each, to the leader
    status                  one line per replica: role, epoch, leader, log, HW, voters
    isolate T | heal        full partition of a replica / remove every partition
    crash T | restart T     crash (unflushed writes lost) / start again from disk
    shutdown T              graceful shutdown (a leader resigns with EndQuorumEpoch), then stop
    lose-disk T             whole-disk loss: the replica restarts with a new directory id
    snapshot T              the state machine of T asks for a snapshot
    add-voter T | remove-voter T      AddRaftVoter / RemoveRaftVoter sent to the leader
    upgrade-kraft-version   UpdateFeatures(kraft.version=1) sent to the leader
    forge KIND EPOCH [T]    a forged request from outside the quorum to T (default: every
                            running replica): KIND is vote, pre-vote, begin or end; EPOCH
                            a number, or +N for N above the highest epoch of the replicas.
                            Its sender is replica 99, with a log longer than any.
                            The answers are printed by the next `run`
    invariants              the number of violations found so far (always 0 when healthy)
"""

from __future__ import annotations

from kraft.raft.events import Shutdown, SnapshotRequested
from kraft.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    RemoveRaftVoterRequest,
    UpdateKRaftVersionRequest,
    VoteRequest,
)
from kraft.raft.state import Role
from kraft.sim.cluster import Simulation
from kraft.sim.invariants import InvariantViolation
from kraft.sim.node import SimNode, endpoint
from kraft.sim.params import SimParams

FORGER = 99
"""The replica id a forged request names as its sender (no replica of a script has it)."""


class ScriptError(ValueError):
    """A script line that cannot be executed; the message names the line."""


class ScriptRunner:
    """Executes script commands against one `Simulation`."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self._dirs: dict[object, str] = {}

    def _need(self) -> Simulation:
        if self.sim is None:
            raise ScriptError("the script must start with `cluster`")
        return self.sim

    def _target(self, word: str) -> SimNode:
        sim = self._need()
        if word == "leader":
            leaders = sim.leaders()
            if not leaders:
                raise ScriptError("no leader right now")
            return leaders[0]
        if word == "follower":
            leader_ids = {n.node_id for n in sim.leaders()}
            for i in sorted(sim.nodes):
                n = sim.nodes[i]
                if n.core is not None and i not in leader_ids:
                    return n
            raise ScriptError("no live follower")
        try:
            return sim.nodes[int(word)]
        except (ValueError, KeyError):
            raise ScriptError(f"unknown replica {word!r}") from None

    def _dir(self, uuid: object) -> str:
        """Directory ids are random; name them d0, d1, ... in order of appearance."""
        if uuid is None:
            return "-"
        if uuid not in self._dirs:
            self._dirs[uuid] = f"d{len(self._dirs)}"
        return self._dirs[uuid]

    def execute(self, line: str) -> list[str]:
        """Run one command; returns its output lines."""
        words = line.split()
        cmd, args = words[0], words[1:]
        if cmd == "cluster":
            opts = dict(a.split("=", 1) for a in args if "=" in a)
            params = SimParams(
                nodes=int(opts.get("voters", 3)),
                spares=int(opts.get("spares", 0)),
                dynamic="static" not in args,
                snapshot_every=int(opts.get("snapshot_every", 1 << 40)),
                auto_join="auto-join" in args,
                retention_bytes=int(opts.get("retention_bytes",
                                             -1 if "keep-log" in args else 0)),
                snapshot_pad_bytes=int(opts.get("snapshot_pad", 0)),
            )
            self.sim = Simulation(int(opts.get("seed", 1)), params)
            for n in self.sim.nodes.values():
                self._dir(n.disk.directory_id)
            return []
        sim = self._need()
        if cmd == "run":
            seen = len(sim.admin_log)
            sim.run_until(sim.now + int(args[0]))
            return sim.admin_log[seen:]
        if cmd == "append":
            leader = self._target("leader")
            for _ in range(int(args[0])):
                sim.deliver(leader, sim.new_append(1))
            return []
        if cmd == "status":
            return [self._status(sim.nodes[i]) for i in sorted(sim.nodes)]
        if cmd == "isolate":
            victim = self._target(args[0]).node_id
            for other in sim.nodes:
                if other != victim:
                    sim.blocked.update({(victim, other), (other, victim)})
            return [f"isolated n{victim}"]
        if cmd == "heal":
            sim.blocked.clear()
            return []
        if cmd == "crash":
            n = self._target(args[0])
            sim.crash(n)
            return [f"crashed n{n.node_id}"]
        if cmd == "shutdown":
            n = self._target(args[0])
            sim.deliver(n, Shutdown())
            sim.crash(n)
            return [f"n{n.node_id} shut down"]
        if cmd == "restart":
            n = self._target(args[0])
            if n.core is not None:
                raise ScriptError(f"n{n.node_id} is running; crash it first")
            sim.start_node(n)
            return []
        if cmd == "lose-disk":
            n = self._target(args[0])
            sim.lose_disk(n, restart=True)
            return [f"n{n.node_id} lost its disk: directory {self._dir(n.disk.directory_id)}"]
        if cmd == "snapshot":
            n = self._target(args[0])
            sim.deliver(n, SnapshotRequested())
            return []
        if cmd in ("add-voter", "remove-voter", "upgrade-kraft-version"):
            leader = self._target("leader")
            if cmd == "add-voter":
                n = self._target(args[0])
                request: object = AddRaftVoterRequest(
                    n.node_id, n.disk.directory_id, (endpoint(n.node_id),)
                )
            elif cmd == "remove-voter":
                n = self._target(args[0])
                request = RemoveRaftVoterRequest(n.node_id, n.disk.directory_id)
            else:
                request = UpdateKRaftVersionRequest(1)
            sim.admin(leader, request)
            return [f"sent to leader n{leader.node_id}"]
        if cmd == "forge":
            return self._forge(args)
        if cmd == "invariants":
            return [f"checks>0={sim.inv.checks > 0} violations={len(sim.inv.violations)}"]
        raise ScriptError(f"unknown command {cmd!r}")

    def _forge(self, args: list[str]) -> list[str]:
        """`forge KIND EPOCH [T]`: send the forged request (see the module docstring)."""
        sim = self._need()
        kind, at = args[0], args[1]
        live = [n for n in sim.nodes.values() if n.core is not None]
        epoch = (max(n.core.epoch for n in live if n.core is not None) + int(at[1:])
                 if at.startswith("+") else int(at))
        targets = [self._target(args[2])] if len(args) > 2 else live
        request: object
        if kind in ("vote", "pre-vote"):
            request = VoteRequest(epoch, FORGER, None, -1, None, epoch - 1, 1 << 62,
                                  pre_vote=kind == "pre-vote")
        elif kind == "begin":
            request = BeginQuorumEpochRequest(FORGER, epoch, -1, None, (endpoint(FORGER),))
        elif kind == "end":
            request = EndQuorumEpochRequest(FORGER, epoch, (), (endpoint(FORGER),))
        else:
            raise ScriptError(f"unknown request kind {kind!r}")
        for n in sorted(targets, key=lambda n: n.node_id):
            sim.admin(n, request)
        return [f"forged {kind} epoch={epoch} to "
                + ",".join(f"n{n.node_id}" for n in sorted(targets, key=lambda n: n.node_id))]

    def _status(self, n: SimNode) -> str:
        core = n.core
        if core is None:
            return f"n{n.node_id} down"
        voters = ",".join(
            f"{v.id}/{self._dir(v.key.directory_id)}" for v in core.voters().voters
        )
        hw = core.high_watermark if core.high_watermark is not None else "-"
        role = core.role.value + ("" if core.is_voter() or core.role is Role.LEADER
                                  else " (observer)")
        return (
            f"n{n.node_id} {role} epoch={core.epoch} leader={core.leader_id} "
            f"log=[{core.log.start_offset},{core.log.end_offset}) hw={hw} "
            f"kraft.version={core.kraft_version} voters={voters}"
        )


def run_script(text: str) -> str:
    """Execute a script; returns the transcript (commands and their actual output)."""
    runner = ScriptRunner()
    out: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("#") or (not raw.strip() and not out):
            out.append(raw)
            continue
        if not raw.startswith("> "):
            continue  # an expected-output line: replaced by the actual output
        line = raw[2:].strip()
        out.append(raw)
        try:
            out.extend(runner.execute(line))
        except InvariantViolation as exc:
            out.append(f"VIOLATION {exc}")
        except ScriptError as exc:
            out.append(f"ERROR {exc}")
    return "\n".join(out).rstrip("\n") + "\n"
