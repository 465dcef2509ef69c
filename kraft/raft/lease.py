"""The native lane's lease (docs/native-lane.md): the one interface between the consensus core
and the lane. What a core hands the lane, and how it takes back the lane's work.

The lane (`kraft.lane`) implements what is leased here: it builds its rules from a
`LeaderLease` or a `FollowerLease`, runs them (in Python or in C, beside an I/O loop), and
reports what it did as events of the core (`kraft.raft.events.LeaderLaneReport`,
`kraft.raft.events.FollowerLaneReport`). This package never imports the lane: the lease is
plain data, and the reports are events like any other.

Functions over one `RaftCore`'s state, called by its dispatcher (`kraft.raft.core`). Owns:

- the lease a leader or follower would give the lane now (`leader_lease`, `follower_lease`,
  `lane_fetch`), and the parked fetches a leader lends it;
- the lane's reports, taken as the fetches, appends, answers and syncs they stand for, and
  `RaftFatalError` when a report could only come from a lane writing without a lease.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraft.protocol.errors import ErrorCode
from kraft.raft import elections, replication
from kraft.raft.effects import AppendCommitted, FetchAdopted
from kraft.raft.errors import RaftFatalError
from kraft.raft.events import FollowerLaneReport, LeaderLaneReport
from kraft.raft.leader import LeaderState, ParkedFetch
from kraft.raft.messages import FetchRequest, ReplicaKey
from kraft.raft.quorum import majority_size
from kraft.raft.state import FollowerState, InFlight

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore


@dataclass(frozen=True, slots=True)
class LeaseVoter:
    """One voter of a leader's lease.

    `key` is the replica whose fetches count for this voter. For a voter with a directory id,
    it is the voter's own key. In a set without directory ids (kraft.version 0), it is the
    latest replica of that id that the core has counted, or None before any. `matched` is the
    offset the voter last acknowledged (-1 before any). For the leader itself, `key` is None and
    its own durable end counts instead.

    The lane's rules keep their voters as rows of this type (`kraft.lane.rules.LeaderLane`,
    which moves `matched` by putting a new row in its place); the C rules read the same fields.
    """

    id: int
    key: ReplicaKey | None
    is_leader: bool
    matched: int = -1


@dataclass(frozen=True, slots=True)
class LeaderLease:
    """What a leader leases the lane: the steady state of its epoch from this log on. The lane
    counts its voters' fetches at the tail, its appends and its own syncs, and moves the high
    watermark from here; anything else it hands back."""

    epoch: int
    epoch_start: int
    """The offset of this epoch's first record (its LeaderChange)."""
    log_start: int
    log_end: int
    durable: int
    """The log's durable end offset."""
    high_watermark: int | None
    voters: tuple[LeaseVoter, ...]


@dataclass(frozen=True, slots=True)
class FollowerLease:
    """What a follower leases the lane: the plain answers of its leader, in its epoch, to the
    fetch in flight (`fetch_correlation`) and to the ones the lane sends after it."""

    epoch: int
    leader_id: int
    fetch_correlation: int
    log_end: int
    high_watermark: int | None


logger = logging.getLogger("kraft.raft")


def leader_lease(core: RaftCore) -> LeaderLease | None:
    """The lease this leader would give the native lane now (docs/native-lane.md), or None
    when it would not arm one: only in the steady state of its epoch, with this epoch's
    LeaderChange and the voters set committed, no voter change or resignation pending, and
    itself a voter."""
    s = core.state
    if not isinstance(s, LeaderState) or core._shutting_down:
        return None
    hw = s.high_watermark
    if hw is None or hw <= s.epoch_start_offset or core.log.last_epoch() != s.epoch:
        return None
    if s.pending_change is not None or s.resign_when_committed is not None:
        return None
    if core.voters_history.latest_offset() >= hw or not core._is_voter():
        return None
    own = s.node_key
    lane_voters = []
    for v in core._voters().voters:
        if v.id == own.id and (v.key.directory_id is None or v.key == own):
            lane_voters.append(LeaseVoter(v.id, None, True))
            continue
        key = v.key if v.key.directory_id is not None else s.latest_key_by_id.get(v.id)
        row = s.voter_progress(v)
        lane_voters.append(LeaseVoter(v.id, key, False, row.end_offset if row else -1))
    return LeaderLease(s.epoch, s.epoch_start_offset, core.log.start_offset,
                       core.log.end_offset, core.log.persisted_end, hw, tuple(lane_voters))


def lend_parked(core: RaftCore) -> list[ParkedFetch]:
    """The fetches this leader holds parked, handed to the native lane it arms now (from
    `leader_lease()`): the lane answers them by the same rules, and hands back the ones it
    still holds when it stops (`LeaderLaneReport.parked`)."""
    s = core.state
    if not isinstance(s, LeaderState):
        return []
    parked, s.parked = s.parked, []
    return parked


def follower_lease(core: RaftCore) -> FollowerLease | None:
    """The lease this follower would give the native lane now, or None when it would not
    arm one: only with a fetch in flight to its leader, and no snapshot being downloaded
    or installed."""
    s = core.state
    if not isinstance(s, FollowerState) or core._shutting_down:
        return None
    if s.download is not None or core._installing is not None or core._fetch_corr is None:
        return None
    return FollowerLease(s.epoch, s.leader_id, core._fetch_corr, core.log.end_offset,
                         core.high_watermark)


def lane_fetch(core: RaftCore) -> FetchRequest | None:
    """The fetch this follower would send its leader now, None when it follows none.

    A follower's lane sends its fetches from this template. The lane keeps the replica,
    its directory id, the epoch, MaxWaitMs and MaxBytes, and sets the fetch offset, the
    last fetched epoch and the high watermark of each one.
    """
    s = core.state
    if not isinstance(s, FollowerState):
        return None
    return replication.fetch_request(core, s.epoch)


def on_follower_lane_report(core: RaftCore, ev: FollowerLaneReport) -> None:
    """The follower lane's work since it was armed (or last reported), taken as the
    answers and syncs it stands for: the records appended, the durable end, the high
    watermark, the fetch deadline, and the lane's fetch in flight as this core's."""
    s = core.state
    if (not isinstance(s, FollowerState) or s.epoch != ev.epoch
            or s.leader_id != ev.leader_id or core._fetch_corr is None):
        # the lane wrote to the log under a lease this core no longer holds: the runtime
        # broke its contract (a report before any other event), and the log is suspect
        raise RaftFatalError(
            f"node {core.key.id}: a follower lane's report for epoch {ev.epoch}, leader "
            f"{ev.leader_id}, reached a {s.role.value} of epoch {s.epoch} "
            f"(fetch in flight: {core._fetch_corr})"
        )
    take_lane_appended(core, "follower", ev.appended, ev.appended_bytes, ev.epoch)
    if ev.answered_ms is not None:
        replication.leader_answered(core, s, ev.answered_ms)
    if ev.durable_end > core.log.persisted_end:
        core.log.persisted_end = min(ev.durable_end, core.log.end_offset)
    if ev.high_watermark is not None and ev.high_watermark >= 0:
        new = min(ev.high_watermark, core.log.end_offset)
        if core.high_watermark is None or new > core.high_watermark:
            replication.set_hw(core, new)
    core._inflight.pop(core._fetch_corr, None)
    core._fetch_corr = None
    if ev.fetch is not None:
        corr = core._next_corr()
        core._inflight[corr] = InFlight(
            s.leader_id, ev.fetch, ev.fetch_sent_ms + core.config.request_timeout_ms
        )
        core._fetch_corr = corr
        core._out.append(FetchAdopted(corr))


def take_lane_appended(core: RaftCore, side: str, appended: tuple[tuple[int, int], ...],
                        size: int, epoch: int) -> None:
    """The batches a lane appended, each continuing the log, into the log's metadata."""
    for base, last in appended:
        if base != core.log.end_offset or last < base:
            raise RaftFatalError(
                f"node {core.key.id}: a {side} lane appended {base}-{last}, but the log "
                f"ends at {core.log.end_offset}"
            )
        core.log.append(base, last, epoch)
    core._bytes_since_snapshot += size


def on_leader_lane_report(core: RaftCore, ev: LeaderLaneReport) -> None:
    """The leader lane's work since it was armed (or last reported), taken as the fetches,
    appends and syncs it stands for: the records appended, the voters' rows and
    check-quorum, the durable end and the high watermark, then the appends and fetches
    the lane hands over."""
    s = core.state
    if not isinstance(s, LeaderState) or s.epoch != ev.epoch or core._shutting_down:
        raise RaftFatalError(
            f"node {core.key.id}: a leader lane's report for epoch {ev.epoch} reached a "
            f"{s.role.value} of epoch {s.epoch}"
        )
    take_lane_appended(core, "leader", ev.appended, ev.appended_bytes, ev.epoch)
    if ev.voters:
        voters = core._voters()
        fetched: list[int] = []
        for v in ev.voters:
            row = s.progress_for(v.key)
            if v.last_fetch_ms < row.last_fetch_ms:
                continue  # the core counted a later fetch itself: keep its row
            row.end_offset = v.end_offset
            row.last_fetch_ms = row.prev_fetch_ms = v.last_fetch_ms
            row.prev_fetch_leader_end = v.prev_fetch_leader_end
            row.last_caught_up_ms = max(row.last_caught_up_ms, v.last_caught_up_ms)
            if voters.is_voter(v.key):
                s.fetched_since_check.add(v.key.id)
                fetched.append(v.last_fetch_ms)
        if fetched and elections.check_quorum_ok(core, s):
            # the window restarts when the last of the fetches that made the majority
            # came, not at the report: a report's lag does not lengthen the lease
            needed = majority_size(len(voters)) - (1 if core._is_voter() else 0)
            fetched.sort(reverse=True)
            at = fetched[min(needed, len(fetched)) - 1] if needed > 0 else core._now
            elections.reset_check_quorum(core, s, at)
    end = min(ev.durable_end, core.log.end_offset)
    if end > core.log.persisted_end:
        core.log.persisted_end = end
    replication.maybe_advance_hw(core)
    if ev.high_watermark is not None and (
            s.high_watermark is None or s.high_watermark < ev.high_watermark):
        # the lane answered commits (to clients, to fetchers) the core cannot back
        raise RaftFatalError(
            f"node {core.key.id}: a leader lane reported high watermark "
            f"{ev.high_watermark}; its rows give {s.high_watermark}"
        )
    s.hw_advanced_at = max(s.hw_advanced_at, ev.hw_advanced_ms)
    s.writes_streaming = ev.writes_streaming
    hw = s.high_watermark if s.high_watermark is not None else -1
    for append_id, last in ev.pending:
        if last < hw:
            core._out.append(AppendCommitted(append_id, ErrorCode.NONE))
        else:
            s.pending_appends[append_id] = last
    if ev.parked:
        s.parked.extend(ParkedFetch(p.source, p.correlation_id, p.request, p.deadline)
                        for p in ev.parked)
