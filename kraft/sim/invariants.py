"""Safety invariants checked by the simulator after every step.

Each check is incremental (O(1) or O(new records)) so it can run after every event:

* `one_leader_per_epoch` - no two replicas are leader of the same epoch;
* `log_matching` - two records at the same offset with the same epoch close identical log
  prefixes (compared through prefix hashes);
* `leader_completeness` - a new leader holds every committed record;
* `committed_never_truncated` - no replica removes a committed record it holds, unless it
  follows the leader of an epoch older than the one that committed the record (a stale leader
  it has not yet learnt is deposed; the record is safe on the majority that committed it, and
  comes back when the replica follows the newer leader);
* `acknowledged_committed_lost` - a crash never loses a committed record the replica
  acknowledged (its FetchOffset is only sent after an fsync);
* `hw_monotonic` - a replica's high watermark never goes back;
* `state_machine_prefix` - every replica applies a prefix of one single history;
* `voter_change_single` - consecutive committed voters sets differ by at most one voter;
* `vote_durable_before_send` - a vote granted, or a candidate's own VoteRequest, leaves only
  once the quorum state recording that vote is durable (the executor's rule: persist before
  send).

Two more are checked by `kraft.sim.cluster.Simulation`, which sees the disks:

* `committed_durable_majority` - whenever a leader (its core, or its lane) moves its high
  watermark, a majority of its voters hold that prefix durably;
* `request_answered` - once the faults are healed, every request delivered to a replica is
  answered within a request timeout.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from kraft.raft.voters import VoterSet


class InvariantViolation(AssertionError):
    """A safety property was broken; the message names the rule, replica, offset."""


@dataclass(slots=True)
class Invariants:
    """The cross-replica knowledge the checks need."""

    leaders: dict[int, int] = field(default_factory=dict)
    by_offset_epoch: dict[tuple[int, int], int] = field(default_factory=dict)
    committed_chain: dict[int, int] = field(default_factory=dict)
    committed_end: int = 0
    commit_ends: list[int] = field(default_factory=list)
    commit_epochs: list[int] = field(default_factory=list)
    """`commit_epochs[i]`: the epoch of the replica whose high watermark first reached
    `commit_ends[i]` (the epoch in which the records below it, and above the previous end,
    became committed)."""
    committed_voters: list[tuple[int, VoterSet]] = field(default_factory=list)
    checks: int = 0
    violations: list[str] = field(default_factory=list)

    def fail(self, rule: str, message: str) -> None:
        """Record a violation and stop the run."""
        text = f"{rule}: {message}"
        self.violations.append(text)
        raise InvariantViolation(text)

    def on_leader(self, node: int, epoch: int) -> None:
        """A replica became leader of `epoch`."""
        self.checks += 1
        other = self.leaders.setdefault(epoch, node)
        if other != node:
            self.fail("one_leader_per_epoch", f"epoch {epoch} has leaders {other} and {node}")

    def on_record(self, node: int, offset: int, epoch: int, chain: int) -> None:
        """A replica holds a record at `offset` of `epoch` whose prefix hash is `chain`."""
        self.checks += 1
        key = (offset, epoch)
        seen = self.by_offset_epoch.setdefault(key, chain)
        if seen != chain:
            self.fail(
                "log_matching",
                f"node {node} offset {offset} epoch {epoch} differs from another replica's",
            )

    def on_applied(self, node: int, offset: int, chain: int) -> None:
        """A replica applied the record at `offset` (prefix hash `chain`)."""
        self.checks += 1
        seen = self.committed_chain.setdefault(offset, chain)
        if seen != chain:
            self.fail(
                "state_machine_prefix",
                f"node {node} applied a different record at offset {offset}",
            )
        if offset + 1 > self.committed_end:
            self.committed_end = offset + 1

    def on_commit(self, node: int, high_watermark: int, chain: int | None,
                  epoch: int = -1) -> None:
        """A replica in `epoch` reported its high watermark; `chain` is its prefix hash there."""
        self.checks += 1
        if high_watermark > self.committed_end:
            self.committed_end = high_watermark
        if high_watermark > (self.commit_ends[-1] if self.commit_ends else 0):
            self.commit_ends.append(high_watermark)
            self.commit_epochs.append(epoch)
        if chain is not None and high_watermark > 0:
            seen = self.committed_chain.setdefault(high_watermark - 1, chain)
            if seen != chain:
                self.fail(
                    "committed_changed",
                    f"node {node} committed a different record at {high_watermark - 1}",
                )

    def check_hw_monotonic(self, node: int, old: int, new: int) -> None:
        """A replica's high watermark moved from `old` to `new`."""
        self.checks += 1
        if new < old:
            self.fail("hw_monotonic", f"node {node} high watermark went back {old} -> {new}")

    def check_leader_complete(self, node: int, epoch: int, end: int, chain_at: object) -> None:
        """A new leader must hold every committed record (`chain_at(offset)` -> hash|None)."""
        self.checks += 1
        c = self.committed_end
        if c == 0:
            return
        assert callable(chain_at)
        if end < c:
            self.fail(
                "leader_completeness",
                f"node {node} leads epoch {epoch} with log end {end} < committed end {c}",
            )
        h = chain_at(c)
        want = self.committed_chain.get(c - 1)
        if h is not None and want is not None and h != want:
            self.fail(
                "leader_completeness",
                f"node {node} leads epoch {epoch} without the committed record at {c - 1}",
            )

    def check_truncation(self, node: int, target: int, chain_before: object,
                         epoch: int | None = None) -> None:
        """A replica in `epoch` truncates to `target`: it must not remove a committed record it
        holds, unless the record was committed in a later epoch than the one it follows."""
        self.checks += 1
        if target >= self.committed_end:
            return
        if epoch is not None:
            i = bisect.bisect_right(self.commit_ends, target)
            if i < len(self.commit_epochs) and epoch < self.commit_epochs[i]:
                return
        assert callable(chain_before)
        h = chain_before(target + 1)
        want = self.committed_chain.get(target)
        if h is not None and want is not None and h == want:
            self.fail(
                "committed_never_truncated",
                f"node {node} truncates committed record {target} (committed end "
                f"{self.committed_end})",
            )

    def check_quorum_state_durable(self, node: int, what: str, epoch: int, voted_id: int,
                                   durable_epoch: int, durable_voted_id: int) -> None:
        """`node` sends a message that tells of its vote for `voted_id` in `epoch` (a vote
        granted, or its own candidacy): its durable quorum state must hold that vote already,
        or a crash right after the send would let it vote again in the same epoch."""
        if durable_epoch != epoch or durable_voted_id != voted_id:
            self.fail("vote_durable_before_send",
                      f"node {node} sent a {what} for {voted_id} in epoch {epoch} while its "
                      f"durable quorum state holds epoch {durable_epoch}, voted "
                      f"{durable_voted_id}")

    def check_durable_after_crash(self, node: int, durable_end: int, acked_end: int) -> None:
        """After a crash a replica still holds every committed record it acknowledged."""
        self.checks += 1
        need = min(acked_end, self.committed_end)
        if durable_end < need:
            self.fail(
                "acknowledged_committed_lost",
                f"node {node} lost committed records it acknowledged: durable end "
                f"{durable_end} < {need}",
            )

    def on_committed_voters(self, offset: int, voters: VoterSet) -> None:
        """A voters record at `offset` became committed."""
        self.checks += 1
        if any(o == offset for o, _ in self.committed_voters):
            return
        self.committed_voters.append((offset, voters))
        self.committed_voters.sort(key=lambda x: x[0])
        for (_, a), (_, b) in zip(self.committed_voters, self.committed_voters[1:]):
            if not a.differs_by_at_most_one(b):
                self.fail("voter_change_single", f"committed voters {a} -> {b} differ by > 1")
