"""Snapshots (KIP-630): FetchSnapshot on both sides, snapshot creation, log start and
retention.

Functions over one `RaftCore`'s state, called by its dispatcher (`kraft.raft.core`). Owns:

- the leader's answer to FetchSnapshot, and the follower's download and install (the fetch
  timeout stops while the runtime installs);
- when to ask the runtime for a snapshot (`CreateSnapshot`, never above the high watermark);
- the log start: the leader's retention check (`kraft.raft.retention`), and a follower's log
  start following its leader's, each deleting the snapshots below it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kraft.protocol.errors import ErrorCode
from kraft.raft import elections, replication
from kraft.raft.effects import (
    AbortSnapshotDownload,
    AdvanceLogStart,
    CreateSnapshot,
    DeleteSnapshot,
    InstallSnapshot,
    SendFetchSnapshotResponse,
    WriteSnapshotChunk,
)
from kraft.raft.errors import RaftFatalError
from kraft.raft.events import RetentionMeasured, SnapshotInstalled
from kraft.raft.leader import LeaderState
from kraft.raft.messages import (
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    ReplicaKey,
)
from kraft.raft.retention import RetainedSnapshot, follower_log_start, retention_log_start
from kraft.raft.state import FollowerState, SnapshotDownload

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore

logger = logging.getLogger("kraft.raft")

SNAPSHOT_STUCK_MS = 60_000
"""A snapshot not reported created after this long no longer blocks the next one."""


def on_fetch_snapshot(core: RaftCore, src: int, corr: int, req: FetchSnapshotRequest) -> None:
    """FetchSnapshot as leader: answer a chunk of a snapshot it holds, noting the reader (its
    snapshot is then kept from retention, and it counts as having fetched)."""
    s = core.state
    err = core._leader_only_error(req.current_leader_epoch)
    size = 0
    if err is None:
        assert isinstance(s, LeaderState)
        known = core.log.snapshots.get(req.snapshot_id)
        if known is None or req.snapshot_id.offset == 0:
            err = ErrorCode.SNAPSHOT_NOT_FOUND
        elif req.position < 0 or req.position >= known:
            err = ErrorCode.POSITION_OUT_OF_RANGE
        else:
            err = ErrorCode.NONE
            size = known
            key = ReplicaKey(req.replica_id, req.replica_directory_id)
            s.snapshot_reads[key] = (req.snapshot_id, core._now)
            p = s.progress_for(key)
            p.last_fetch_ms = core._now
            if core._voters().is_voter(key):
                s.fetched_since_check.add(key.id)
    resp = FetchSnapshotResponse(
        err,
        s.leader_id,
        s.epoch,
        req.snapshot_id,
        size=size,
        position=req.position,
        leader_endpoints=core._leader_endpoints(),
    )
    core._out.append(
        SendFetchSnapshotResponse(src, corr, resp, req.max_bytes if err == ErrorCode.NONE else 0)
    )


def on_fetch_snapshot_response(core: RaftCore, resp: FetchSnapshotResponse) -> None:
    """A follower takes a chunk of the snapshot it downloads; the last one asks the runtime to
    install it. A snapshot the leader no longer has sends it back to Fetch."""
    if elections.maybe_transition_on_epoch(core, resp.leader_epoch, resp.leader_id, resp.leader_endpoints):
        return
    s = core.state
    if not isinstance(s, FollowerState) or s.download is None or resp.leader_epoch != s.epoch:
        return
    d = s.download
    if resp.error_code in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE):
        # The leader no longer has it (a newer one replaced it): go back to Fetch, which
        # redirects us to the current snapshot.
        core._out.append(AbortSnapshotDownload(d.snapshot_id))
        s.download = None
        return
    if resp.error_code != ErrorCode.NONE:
        core._fetch_backoff_until = core._now + core.config.retry_backoff_ms
        return
    if resp.snapshot_id != d.snapshot_id or resp.position != d.position or d.complete:
        return
    data = resp.unaligned_records
    n = len(data) if isinstance(data, bytes | bytearray | memoryview) else 0
    if n == 0:
        core._out.append(AbortSnapshotDownload(d.snapshot_id))
        s.download = None
        return
    s.fetch_deadline = core._now + core.config.fetch_timeout_ms
    s.has_fetched = True
    s.heard_at = core._now
    s.disconnected = False
    s.waiting_turn = s.refused_shorter_log = False
    s.refused_prevote_at = None
    core._out.append(WriteSnapshotChunk(d.snapshot_id, d.position, data))
    d.position += n
    if d.position >= resp.size:
        d.complete = True
        core._installing = d.snapshot_id
        core._out.append(InstallSnapshot(d.snapshot_id))


def install_done(core: RaftCore, sid: OffsetAndEpoch) -> None:
    """The runtime answered InstallSnapshot: fetching resumes, and the fetch timeout
    (stopped during the install, see `elections.expire_election_timers`) starts again from now."""
    if core._installing != sid:
        return
    core._installing = None
    s = core.state
    if isinstance(s, FollowerState):
        s.fetch_deadline = max(s.fetch_deadline, core._now + core.config.fetch_timeout_ms)


def on_snapshot_installed(core: RaftCore, ev: SnapshotInstalled) -> None:
    """The runtime installed snapshot `ev.snapshot_id`: the log restarts at its end, older
    snapshots go, the voters and kraft.version are the snapshot's, and the high watermark
    reaches it."""
    sid = ev.snapshot_id
    install_done(core, sid)
    if sid.offset <= core.log.end_offset and sid in core.log.snapshots:
        return
    if core.high_watermark is not None and sid.offset < core.high_watermark:
        raise RaftFatalError(
            f"node {core.key.id}: installed snapshot {sid} below high watermark "
            f"{core.high_watermark}"
        )
    old_snapshots = [x for x in core.log.snapshots if x != sid]
    core.log.reset_to_snapshot(sid, ev.size_bytes)
    for x in old_snapshots:
        del core.log.snapshots[x]
        core._out.append(DeleteSnapshot(x))
    # The snapshot's sets stand at its last offset: they came from the log, so a later leader
    # need not write them again (that is only for the bootstrap checkpoint at -1).
    base = ev.voters if ev.voters is not None else core.config.static_voters
    core.voters_history.reset(sid.offset - 1, base)
    core.kraft_version_history.reset(sid.offset - 1, ev.kraft_version)
    core._bytes_since_snapshot = 0
    core._last_snapshot_ms = core._now
    s = core.state
    if isinstance(s, FollowerState) and s.download is not None and s.download.snapshot_id == sid:
        s.download = None
    logger.info("raft snapshot installed node=%s snapshot=%s", core.key.id, sid)
    if core.high_watermark is None or sid.offset > core.high_watermark:
        replication.set_hw(core, sid.offset)


def on_snapshot_install_failed(core: RaftCore, sid: OffsetAndEpoch) -> None:
    """The install failed: the download is dropped and fetching resumes."""
    install_done(core, sid)
    s = core.state
    if isinstance(s, FollowerState) and s.download is not None and s.download.snapshot_id == sid:
        s.download = None
    logger.warning("raft snapshot install failed node=%s snapshot=%s", core.key.id, sid)


def maybe_snapshot(core: RaftCore, force: bool, at: int | None = None) -> None:
    """Ask the runtime for a snapshot at the high watermark (or at `at`, never above it) when
    forced, or when enough bytes or time went by since the last one; one at a time."""
    hw = core.high_watermark
    if hw is None:
        return
    if (
        core._snapshot_in_progress is not None
        and core._now - core._snapshot_started_ms < SNAPSHOT_STUCK_MS
    ):
        return  # one at a time; a runtime that never reported back gets another chance
    if at is not None:
        if at > hw:
            logger.warning(
                "raft snapshot refused node=%s end_offset=%s high_watermark=%s",
                core.key.id, at, hw,
            )
            return
        hw = at
    latest = core.log.latest_snapshot()
    if latest is not None and latest.offset >= hw:
        return
    if hw <= core.log.start_offset or hw <= 0:
        return
    if not force:
        interval = core.config.snapshot_interval_ms
        due = core._bytes_since_snapshot >= core.config.snapshot_max_bytes_between or (
            interval > 0 and core._now - core._last_snapshot_ms >= interval
        )
        if not due:
            return
    sid = OffsetAndEpoch(core.log.epoch_at(hw), hw)
    core._snapshot_in_progress = sid
    core._snapshot_started_ms = core._now
    core._bytes_since_snapshot = 0
    core._last_snapshot_ms = core._now
    core._out.append(CreateSnapshot(sid, core.voters_at(hw), core.kraft_version_at(hw)))


def on_snapshot_created(core: RaftCore, sid: OffsetAndEpoch, size: int) -> None:
    """The runtime wrote snapshot `sid`: it is known from now on, and a follower's log start may
    follow its leader's."""
    if core._snapshot_in_progress == sid:
        core._snapshot_in_progress = None
    if sid.offset > core.log.end_offset:
        return
    core.log.snapshots[sid] = size
    logger.info("raft snapshot created node=%s snapshot=%s size=%s", core.key.id, sid, size)
    # The leader's log start waits for its retention check (`on_retention_measured`); a
    # follower's may now reach the leader's.
    s = core.state
    if isinstance(s, FollowerState):
        follow_leader_log_start(core, s)


def on_retention_measured(core: RaftCore, ev: RetentionMeasured) -> None:
    """The leader's retention check (`kraft.raft.retention`): delete the snapshots, and the
    log below them, that metadata.max.retention.bytes / .ms no longer keep, except one a
    FetchSnapshot is still reading."""
    s = core.state
    if not isinstance(s, LeaderState):
        return  # a follower's log start follows its leader's instead
    window = core.config.fetch_timeout_ms
    for key in [k for k, (_, at) in s.snapshot_reads.items() if core._now - at >= window]:
        del s.snapshot_reads[key]
    times = dict(ev.snapshot_timestamps)
    target = retention_log_start(
        (RetainedSnapshot(sid, size, times.get(sid)) for sid, size in core.log.snapshots.items()),
        core.log.start_offset,
        ev.log_segments,
        core._now,
        core.config.retention_max_bytes,
        core.config.retention_max_ms,
        {sid for sid, _ in s.snapshot_reads.values()},
    )
    if target is not None:
        move_log_start(core, target, "retention")


def follow_leader_log_start(core: RaftCore, s: FollowerState) -> None:
    """KIP-630: a follower's log start is min(the leader's log start, its own latest
    snapshot), at one of its own snapshots."""
    hw = core.high_watermark
    if hw is None or s.leader_log_start <= core.log.start_offset:
        return
    target = follower_log_start(core.log.snapshots, core.log.start_offset,
                                s.leader_log_start, hw)
    if target is not None:
        move_log_start(core, target, "leader log start")


def move_log_start(core: RaftCore, sid: OffsetAndEpoch, why: str) -> None:
    """Start the log at the end of snapshot `sid` (at or below the high watermark) and
    delete every older snapshot."""
    hw = core.high_watermark if core.high_watermark is not None else 0
    if not core.log.start_offset < sid.offset <= min(hw, core.log.end_offset):
        return
    core.log.advance_start(sid.offset)
    core._out.append(AdvanceLogStart(sid.offset))
    gone = sorted(x for x in core.log.snapshots if x.offset < sid.offset)
    for old in gone:
        del core.log.snapshots[old]
        core._out.append(DeleteSnapshot(old))
    logger.info("raft log start moved node=%s log_start=%s snapshot=%s deleted=%s why=%s",
                core.key.id, sid.offset, sid, [str(x) for x in gone], why)


def fetch_snapshot_request(
    core: RaftCore, s: FollowerState, download: SnapshotDownload
) -> FetchSnapshotRequest:
    """The follower's next FetchSnapshot of the snapshot it downloads, from where it is."""
    return FetchSnapshotRequest(
        replica_id=core.key.id,
        replica_directory_id=core.key.directory_id,
        current_leader_epoch=s.epoch,
        snapshot_id=download.snapshot_id,
        position=download.position,
        max_bytes=core.config.fetch_snapshot_max_bytes,
    )
