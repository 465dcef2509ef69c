"""Replication and the high watermark (KIP-595, KIP-320, KIP-1166): Fetch on both sides.

Functions over one `RaftCore`'s state, called by its dispatcher (`kraft.raft.core`). Owns:

- the leader's answer to Fetch: validation, the snapshot-or-divergence decision (KIP-320),
  the voters' progress and check-quorum counting, and parking (long-poll; KIP-1166 answers a
  parked fetch when only the high watermark moved, lingering while writes stream in);
- the high watermark: its advance over the voters' persisted offsets, and what it completes
  (client appends, a pending voter change, parked fetches, a removed leader's resignation);
- the follower's fetch loop (`poll`) and its handling of the answer: truncation on divergence,
  appending fetched batches, taking the leader's high watermark and log start;
- local appends (client records and the leader's control records) and `Persisted`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kraft.protocol.errors import ErrorCode
from kraft.raft import elections, membership, snapshots
from kraft.raft.effects import (
    AppendAccepted,
    AppendCommitted,
    AppendControl,
    AppendFetched,
    AppendRecords,
    AppendRejected,
    Committed,
    SendFetchResponse,
    TruncateTo,
)
from kraft.raft.errors import RaftFatalError
from kraft.raft.events import Append
from kraft.raft.leader import LeaderState, ParkedFetch
from kraft.raft.messages import (
    FetchedBatch,
    FetchRequest,
    FetchResponse,
    OffsetAndEpoch,
    ReplicaKey,
)
from kraft.raft.state import FollowerState, SnapshotDownload, UnattachedState

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore

logger = logging.getLogger("kraft.raft")


def poll(core: RaftCore) -> None:
    """Send what a follower (or a bootstrapping observer) owes now: its next Fetch or
    FetchSnapshot (a Fetch only once what it has is durable), and its admin request."""
    if core._installing is not None:
        return  # the log is being replaced underneath us: no fetch until that is done
    s = core.state
    if isinstance(s, FollowerState):
        if core._fetch_corr is None and core._now >= core._fetch_backoff_until:
            if s.download is not None:
                if not s.download.complete:
                    core._fetch_corr = core._send(
                        s.leader_id,
                        s.leader_endpoints,
                        snapshots.fetch_snapshot_request(core, s, s.download),
                    )
            elif core.log.persisted_end >= core.log.end_offset:
                core._fetch_corr = core._send(
                    s.leader_id, s.leader_endpoints, fetch_request(core, s.epoch)
                )
        if core._admin_corr is None and core._now >= s.next_admin_at and membership.wants_admin(core, s):
            membership.send_admin(core, s)
    elif (
        isinstance(s, UnattachedState)
        and not core._is_voter()
        and core.config.bootstrap_servers
        and core._fetch_corr is None
        and core._now >= core._fetch_backoff_until
    ):
        servers = core.config.bootstrap_servers
        i = core._bootstrap_index % len(servers)
        core._bootstrap_index += 1
        core._fetch_corr = core._send(-2 - i, (servers[i],), fetch_request(core, s.epoch))
        # Bootstrap servers may not answer (not the leader, unreachable): pace the discovery.
        core._fetch_backoff_until = core._now + core.config.retry_backoff_ms * 5


def fetch_request(core: RaftCore, epoch: int) -> FetchRequest:
    """The follower's Fetch from its log end in `epoch`, carrying its high watermark (KIP-1166)."""
    return FetchRequest(
        replica_id=core.key.id,
        replica_directory_id=core.key.directory_id,
        current_leader_epoch=epoch,
        fetch_offset=core.log.end_offset,
        last_fetched_epoch=core.log.last_epoch(),
        max_wait_ms=core.config.max_fetch_wait_ms,
        max_bytes=core.config.max_fetch_bytes,
        high_watermark=core.high_watermark if core.high_watermark is not None else -1,
    )


def on_fetch(core: RaftCore, src: int, corr: int, req: FetchRequest) -> None:
    """Answer a Fetch as leader: validate, record the fetcher's progress (a voter's may move the
    high watermark), then answer, or park the fetch until records or a newer high watermark come."""
    if (
        req.max_wait_ms < 0
        or req.fetch_offset < 0
        or req.last_fetched_epoch < 0
        or req.last_fetched_epoch > req.current_leader_epoch
    ):
        fetch_error(core, src, corr, ErrorCode.INVALID_REQUEST)
        return
    err = core._leader_only_error(req.current_leader_epoch)
    if err is not None:
        fetch_error(core, src, corr, err)
        return
    s = core.state
    assert isinstance(s, LeaderState)
    resp, read = fetch_answer(core, s, req)
    if resp.diverging_epoch is not None or resp.snapshot_id is not None:
        core._out.append(SendFetchResponse(src, corr, resp, None, req.max_bytes))
        return
    hw_before = s.high_watermark
    key = ReplicaKey(req.replica_id, req.replica_directory_id)
    if req.replica_id >= 0:
        p = s.progress_for(key)
        p.record_fetch(req.fetch_offset, core.log.end_offset, core._now)
        voters = core._voters()
        if voters.is_voter(key):
            s.fetched_since_check.add(key.id)
            if elections.check_quorum_ok(core, s):
                elections.reset_check_quorum(core, s)
            maybe_advance_hw(core)
            if core.state is not s:
                fetch_error(core, src, corr, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                return
    hw = s.high_watermark
    follower_hw_behind = (
        req.high_watermark is not None and hw is not None and req.high_watermark < hw
    )
    if read is None and req.max_wait_ms > 0 and (
            not follower_hw_behind or s.writes_streaming):
        wait = req.max_wait_ms
        if follower_hw_behind:
            # only the new high watermark to tell, while writes stream in: it rides on the
            # next records (one answer and one refetch fewer per write), or goes alone
            # when the linger runs out (`hold_for_records`)
            wait = min(wait, core.config.hw_linger_ms)
        s.parked.append(ParkedFetch(src, corr, req, core._now + wait))
        return
    if hw != hw_before:
        # this fetch moved the high watermark: the answer carries the new one (what is
        # read is unchanged: the log's end and start do not move while the core runs)
        resp = FetchResponse(ErrorCode.NONE, s.leader_id, s.epoch,
                             hw if hw is not None else -1, core.log.start_offset)
    core._out.append(SendFetchResponse(src, corr, resp, read, req.max_bytes))


def fetch_error(core: RaftCore, dest: int, corr: int, err: ErrorCode) -> None:
    """Answer a Fetch with error `err` and what this replica knows of the epoch and leader."""
    s = core.state
    hw = core.high_watermark if core.high_watermark is not None else -1
    resp = FetchResponse(
        err, s.leader_id, s.epoch, hw, core.log.start_offset,
        leader_endpoints=core._leader_endpoints(),
    )
    core._out.append(SendFetchResponse(dest, corr, resp, None, 0))


def fetch_answer(core: RaftCore, s: LeaderState, req: FetchRequest) -> tuple[FetchResponse, int | None]:
    """Decide what a valid Fetch gets: a snapshot id, a diverging epoch, or records."""
    log = core.log
    hw = s.high_watermark if s.high_watermark is not None else -1
    base = (ErrorCode.NONE, s.leader_id, s.epoch, hw, log.start_offset)
    if not log.inside_latest_epoch(req.fetch_offset, req.last_fetched_epoch):
        # not the steady state: the fetcher may need a snapshot or have diverged
        latest = log.latest_snapshot()
        if req.fetch_offset == 0 and latest is not None and latest.offset > 0:
            return FetchResponse(*base, snapshot_id=latest), None
        if not (log.start_offset == 0 and req.fetch_offset == 0):
            oldest = log.oldest_snapshot()
            if latest is not None and oldest is not None and (
                req.fetch_offset < log.start_offset
                or (
                    req.fetch_offset == log.start_offset
                    and oldest.offset == log.start_offset
                    and req.last_fetched_epoch != oldest.epoch
                )
                or req.last_fetched_epoch < oldest.epoch
            ):
                return FetchResponse(*base, snapshot_id=latest), None
            end = log.end_offset_for_epoch(req.last_fetched_epoch)
            if end.epoch != req.last_fetched_epoch or end.offset < req.fetch_offset:
                return FetchResponse(*base, diverging_epoch=end), None
    read = req.fetch_offset if req.fetch_offset < log.end_offset else None
    return FetchResponse(*base), read


def answer_fetch(core: RaftCore, src: int, corr: int, req: FetchRequest) -> None:
    """Answer a fetch that was parked (anew, as a non-leader, when the epoch moved on)."""
    s = core.state
    if not isinstance(s, LeaderState) or req.current_leader_epoch != s.epoch:
        on_fetch(core, src, corr, req)
        return
    resp, read = fetch_answer(core, s, req)
    core._out.append(SendFetchResponse(src, corr, resp, read, req.max_bytes))


def complete_parked(core: RaftCore, s: LeaderState, hw_moved_only: bool) -> None:
    """Answer the parked fetches (only those that carried a high watermark when
    `hw_moved_only`): new records or a new high watermark came."""
    if not s.parked:
        return
    if hw_moved_only:
        done = [p for p in s.parked if p.request.high_watermark is not None]
        s.parked = [p for p in s.parked if p.request.high_watermark is None]
    else:
        done, s.parked = s.parked, []
    for p in done:
        answer_fetch(core, p.source, p.correlation_id, p.request)


def hold_for_records(core: RaftCore, s: LeaderState) -> None:
    """The high watermark moved while writes stream in: the parked fetches it would
    complete (KIP-1166) wait up to `hw_linger_ms` more for the next append, whose answer
    carries the records and the new high watermark together; a fetch the linger outlasts
    is answered with the high watermark alone when its deadline comes."""
    due = core._now + core.config.hw_linger_ms
    for p in s.parked:
        if p.request.high_watermark is not None and p.deadline > due:
            p.deadline = due


def maybe_advance_hw(core: RaftCore) -> None:
    """Move the leader's high watermark over the voters' persisted offsets, and complete what
    it commits: client appends, a pending voter change, parked fetches, and a removed leader's
    resignation."""
    s = core.state
    if not isinstance(s, LeaderState):
        return
    new = s.compute_high_watermark(core._voters(), core.log.persisted_end)
    if new is None or (s.high_watermark is not None and new <= s.high_watermark):
        return
    s.high_watermark = new
    s.hw_advanced_at = core._now
    set_hw(core, new)
    for append_id in sorted(a for a, last in s.pending_appends.items() if last < new):
        del s.pending_appends[append_id]
        core._out.append(AppendCommitted(append_id, ErrorCode.NONE))
    pc = s.pending_change
    if pc is not None and pc.record_offset is not None and pc.record_offset < new:
        s.pending_change = None
        membership.reply_change(core, pc, ErrorCode.NONE, None)
    if s.writes_streaming:
        hold_for_records(core, s)
    else:
        complete_parked(core, s, hw_moved_only=True)
    if (
        not core._voters().is_voter(core.key)
        and 0 <= core.voters_history.latest_offset() < new
    ):
        # A leader that removed itself serves until the removal commits, then steps down.
        elections.resign(core, "removed from the voters set")


def set_hw(core: RaftCore, hw: int) -> None:
    """Take high watermark `hw` (never backwards): commit up to it, and maybe snapshot."""
    if core.high_watermark is not None and hw <= core.high_watermark:
        return
    core.high_watermark = hw
    core._out.append(Committed(hw))
    snapshots.maybe_snapshot(core, force=False)


def on_fetch_response(core: RaftCore, resp: FetchResponse) -> None:
    """A follower takes its leader's answer: a newer epoch, an error (back off), a divergence
    (truncate), a snapshot to download, or records, the high watermark and the log start."""
    if elections.maybe_transition_on_epoch(core, resp.leader_epoch, resp.leader_id, resp.leader_endpoints):
        return
    s = core.state
    if (
        not isinstance(s, FollowerState)
        or resp.leader_epoch != s.epoch
        or resp.error_code != ErrorCode.NONE
    ):
        # An error, or an answer from an older epoch: retry after the backoff.
        core._fetch_backoff_until = core._now + core.config.retry_backoff_ms
        return
    leader_answered(core, s, core._now)
    if resp.diverging_epoch is not None:
        # Nothing of our log is known to match the leader's yet (the truncation may stop
        # short of the divergence when we lack the epoch it names): the high watermark in
        # this answer is not ours to take until a fetch is answered without divergence.
        truncate_diverging(core, resp.diverging_epoch)
        return
    elif resp.snapshot_id is not None:
        if s.download is None:
            s.download = SnapshotDownload(resp.snapshot_id)
            logger.info(
                "raft snapshot download node=%s snapshot=%s", core.key.id, resp.snapshot_id
            )
        return
    elif resp.batches and not append_fetched(core, s, resp.batches):
        return
    if resp.high_watermark >= 0:
        new = min(resp.high_watermark, core.log.end_offset)
        if core.high_watermark is None or new > core.high_watermark:
            set_hw(core, new)
    if resp.log_start_offset > s.leader_log_start:
        s.leader_log_start = resp.log_start_offset
        snapshots.follow_leader_log_start(core, s)


def leader_answered(core: RaftCore, s: FollowerState, at_ms: int) -> None:
    """The leader answered a fetch of this epoch without an error at `at_ms`: the fetch
    timeout runs from then, and the leader counts as alive."""
    s.fetch_deadline = at_ms + core.config.fetch_timeout_ms
    s.has_fetched = True
    s.heard_at = at_ms if s.heard_at is None else max(s.heard_at, at_ms)
    s.disconnected = False
    s.leader_gone_at = None
    s.waiting_turn = s.refused_shorter_log = False
    s.refused_prevote_at = None


def truncate_diverging(core: RaftCore, diverging: OffsetAndEpoch) -> None:
    """Truncate to where this log and the leader's agree for the diverging epoch (KIP-320);
    never below the high watermark."""
    own = core.log.end_offset_for_epoch(diverging.epoch)
    target = min(diverging.offset, own.offset, core.log.end_offset)
    if core.high_watermark is not None and target < core.high_watermark:
        raise RaftFatalError(
            f"node {core.key.id}: truncation to {target} is below the high watermark "
            f"{core.high_watermark} (diverging epoch {diverging})"
        )
    if target < core.log.end_offset:
        truncate(core, target)


def truncate(core: RaftCore, target: int) -> None:
    """Cut the log, and the voters and kraft.version read from it, at `target`."""
    core.log.truncate_to(target)
    core.voters_history.truncate_to(target)
    core.kraft_version_history.truncate_to(target)
    core._out.append(TruncateTo(target))
    logger.info("raft truncate node=%s end_offset=%s", core.key.id, target)


def unfit_batches(core: RaftCore, s: FollowerState, batches: tuple[FetchedBatch, ...]
                  ) -> str | None:
    """Why the fetched batches, which start at this log's end, cannot be appended (None: they
    can): one that does not follow the one before, an epoch below this log's last or the batch
    before, or above the leader's. No leader of this epoch sends such batches; a peer that
    does gets its fetch refused, and this node stays up."""
    end, epoch = core.log.end_offset, core.log.last_epoch()
    for b in batches:
        if b.base_offset != end or b.last_offset < b.base_offset:
            return f"batch [{b.base_offset}, {b.last_offset}] does not follow offset {end - 1}"
        if b.epoch > s.epoch:
            return f"batch at {b.base_offset} has epoch {b.epoch} > leader epoch {s.epoch}"
        if b.epoch < epoch:
            return f"batch at {b.base_offset} has epoch {b.epoch} < epoch {epoch} before it"
        end, epoch = b.last_offset + 1, b.epoch
    return None


def append_fetched(core: RaftCore, s: FollowerState, batches: tuple[FetchedBatch, ...]) -> bool:
    """Append the fetched batches when they continue this log (False when they do not: the
    fetch is tried again, after the backoff when they are unfit, see `unfit_batches`)."""
    if batches[0].base_offset != core.log.end_offset:
        return False
    why = unfit_batches(core, s, batches)
    if why is not None:
        core.refusals.note(core._now, "fetched_batches", "unfit", logging.WARNING,
                           "raft fetched batches refused node=%s leader=%s: %s", core.key.id,
                           s.leader_id, why)
        core._fetch_backoff_until = core._now + core.config.retry_backoff_ms
        return False
    for b in batches:
        core.log.append(b.base_offset, b.last_offset, b.epoch)
        if b.is_control:
            membership.read_control_records(core, b.base_offset, b.control_records)
        elif isinstance(b.payload, bytes | bytearray | memoryview):
            core._bytes_since_snapshot += len(b.payload)
        else:
            core._bytes_since_snapshot += b.last_offset - b.base_offset + 1
    core._out.append(AppendFetched(batches))
    return True


def append_control(core: RaftCore, records: tuple[object, ...]) -> None:
    """Append the leader's control records (LeaderChange, voters, kraft.version) and wake the
    parked fetches."""
    s = core.state
    assert isinstance(s, LeaderState)
    base = core.log.end_offset
    core.log.append(base, base + len(records) - 1, s.epoch)
    membership.read_control_records(core, base, records)
    core._out.append(AppendControl(base, s.epoch, records, core._now))
    complete_parked(core, s, hw_moved_only=False)


def on_append(core: RaftCore, ev: Append) -> None:
    """A client's records: a leader appends them (answered when committed); anyone else rejects
    them."""
    s = core.state
    if not isinstance(s, LeaderState) or core._shutting_down or not ev.values:
        err = (
            ErrorCode.INVALID_REQUEST
            if isinstance(s, LeaderState) and not ev.values
            else ErrorCode.NOT_LEADER_OR_FOLLOWER
        )
        core._out.append(AppendRejected(ev.append_id, err, s.leader_id, s.epoch))
        return
    base = core.log.end_offset
    last = base + len(ev.values) - 1
    core.log.append(base, last, s.epoch)
    core._bytes_since_snapshot += ev.size_bytes or len(ev.values)
    core._out.append(AppendRecords(base, s.epoch, ev.values, core._now))
    core._out.append(AppendAccepted(ev.append_id, base, last, s.epoch))
    s.pending_appends[ev.append_id] = last
    # writes stream in when this one came within the linger of the last commit: the next
    # commit's high watermark may then wait for the write after it (`hold_for_records`)
    linger = core.config.hw_linger_ms
    s.writes_streaming = linger > 0 and core._now - s.hw_advanced_at <= linger
    complete_parked(core, s, hw_moved_only=False)


def on_persisted(core: RaftCore, end: int) -> None:
    """The log is durable up to `end`: a leader counts itself up to there."""
    end = min(end, core.log.end_offset)
    if end > core.log.persisted_end:
        core.log.persisted_end = end
        maybe_advance_hw(core)
