"""The shape of one simulated run: the quorum, its timings, its lanes, and the byte and disk
faults it injects (`kraft.sim.faults`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FAULT_KINDS = ("partial-reads", "short-writes", "fsync-errors")
"""The names of the faults (the command line's `--faults`)."""


@dataclass(frozen=True, slots=True)
class SimFaults:
    """Which byte and disk faults a run injects, and how often (each 0 = off)."""

    partial_reads: float = 0.0
    """Share of the frames between replicas that arrive in pieces (2 to 4)."""
    short_writes: float = 0.0
    """Share of the crashes that leave part of the unsynced tail on disk, the last record torn."""
    fsync_errors: float = 0.0
    """Share of the log flushes that fail."""
    fsync_policy: Literal["stop", "retry"] = "stop"
    """What a replica does on a failed flush: `stop` (the node's behaviour) or `retry` (unsafe:
    ignore the error, as a runtime must not; for the test that shows the checker sees it)."""

    def __post_init__(self) -> None:
        for name in ("partial_reads", "short_writes", "fsync_errors"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"SimFaults.{name}={value}: a share between 0 and 1")
        if self.fsync_policy not in ("stop", "retry"):
            raise ValueError(f"SimFaults.fsync_policy={self.fsync_policy!r}: 'stop' or 'retry'")

    @property
    def any(self) -> bool:
        """True when some fault is on."""
        return bool(self.partial_reads or self.short_writes or self.fsync_errors)

    @staticmethod
    def parse(text: str, share: float = 0.05) -> SimFaults:
        """`partial-reads,short-writes,fsync-errors` (any of them) at `share` each; `all` for
        the three. An unknown name raises ValueError naming it."""
        names = [t.strip() for t in text.split(",") if t.strip()]
        if names == ["all"]:
            names = list(FAULT_KINDS)
        unknown = [n for n in names if n not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault {unknown[0]!r} (known: {', '.join(FAULT_KINDS)}, all)")
        return SimFaults(
            partial_reads=share if "partial-reads" in names else 0.0,
            short_writes=share if "short-writes" in names else 0.0,
            fsync_errors=share if "fsync-errors" in names else 0.0,
        )


@dataclass(frozen=True, slots=True)
class SimParams:
    """Shape of one simulated run."""

    nodes: int = 3
    spares: int = 1
    fault_ms: int = 40_000
    liveness_ms: int = 15_000
    max_delay_ms: int = 15
    fetch_batch_entries: int = 16
    dynamic: bool | None = None
    """Force a dynamic (True) or static (False) quorum; None picks by seed."""
    snapshot_every: int | None = None
    """Records between automatic snapshots; None picks by seed."""
    auto_join: bool | None = None
    """controller.quorum.auto.join.enable; None = on for dynamic quorums."""
    retention_bytes: int | None = None
    """metadata.max.retention.bytes of every replica (`kraft.raft.retention`); None picks by
    seed: 0 for three seeds in four (each retention check deletes every snapshot but the
    latest, with the log below it, unless a FetchSnapshot is reading it), else -1 (no limit)."""
    retention_check_ms: int = 1000
    """How often a leader runs its retention check (Kafka: every 60 s)."""
    snapshot_pad_bytes: int = 0
    """Bytes added to every snapshot file, for a snapshot that takes many FetchSnapshot
    round trips to download (`fetch_snapshot_bytes` at a time)."""
    fetch_snapshot_bytes: int = 96
    """FetchSnapshot's MaxBytes (`fetch_snapshot_max_bytes`), also given as Fetch's MaxBytes
    (which the simulator's reads do not use: `fetch_batch_entries` bounds them)."""
    connections: bool | None = None
    """Model what TCP tells a real runtime: a request to a crashed replica is refused
    (`RequestFailed(unreachable=True)`), and a crash fails the requests in flight to it
    (`RequestFailed(disconnected=True)`, the kernel closing the dead process's sockets), each
    unless a partition cuts the path. Off, a crashed replica is as silent as a partitioned one.
    None picks by seed (on for four seeds in five)."""
    hw_linger_ms: int | None = None
    """The leaders' `hw_linger_ms` (a new high watermark waits for the next records while
    writes stream in); None picks by seed: 0, 20 or 50 ms."""
    lane_shadow: bool = True
    """Run the native lane's rules beside every core and check them against it
    (`kraft.sim.lane_shadow`); they draw no randomness, so a seed runs the same either way."""
    lane_native: bool = False
    """The lanes are the rules' C implementation (`kraft.lane.native()`), not the Python
    one; a RuntimeError when it was not built."""
    lane_drive: bool = False
    """The followers' lanes do the work of the steady state (`kraft.sim.lane_drive`): they
    take the leader's answers, append, sync and fetch, and report to their cores."""
    leader_drive: bool = False
    """The leaders' lanes do the work of the steady state (`kraft.sim.leader_drive`): they
    take the voters' fetches, the clients' appends and their own syncs, answer them, and
    report to their cores."""
    faults: SimFaults | None = None
    """Partial reads, short writes and fsync errors (`kraft.sim.faults`); None: none."""
    forged_every_ms: int | None = None
    """During the fault phase, a request from outside the quorum (a Vote, pre-vote,
    BeginQuorumEpoch or EndQuorumEpoch naming 1 to 1000 epochs above the highest epoch of
    the replicas) reaches a random running replica every 1 to 2x this many ms, drawn from
    a random stream of its own (None: none, and nothing is drawn). A replica that hears a
    live leader must not take its epoch (`sticky`, `kraft.raft.elections.live_leader`)."""
