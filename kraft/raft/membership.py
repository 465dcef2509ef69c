"""Membership (KIP-853): the voters set in the log and the requests that change it.

Functions over one `RaftCore`'s state, called by its dispatcher (`kraft.raft.core`). Owns:

- the leader's AddRaftVoter (catch-up check, ApiVersions probe of the new voter),
  RemoveRaftVoter and UpdateRaftVoter, one change at a time, each answered when its voters
  record commits (or when the leader changes, or it times out);
- the kraft.version upgrade (UpdateFeatures of kraft.version) and the observers'
  ControllerRegistration it checks;
- the follower's self-service requests: UpdateRaftVoter with its endpoints and supported range,
  auto-join (remove a stale self, then add), and an observer's registration;
- reading the voters set and kraft.version from control records (`read_control_records`);
- DescribeQuorum, which reports the voters and observers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kraft.protocol.errors import ErrorCode
from kraft.raft import elections, replication
from kraft.raft.effects import SendApiVersions
from kraft.raft.events import ApiVersionsReceived
from kraft.raft.leader import (
    CAUGHT_UP_WINDOW_MS,
    OBSERVER_SESSION_TIMEOUT_MS,
    VOTER_CHANGE_TIMEOUT_MS,
    ChangeKind,
    LeaderState,
    PendingChange,
)
from kraft.raft.messages import (
    AddRaftVoterRequest,
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
    DescribeQuorumResponse,
    Endpoint,
    RemoveRaftVoterRequest,
    ReplicaDescription,
    ReplicaKey,
    Request,
    Response,
    UpdateKRaftVersionRequest,
    UpdateKRaftVersionResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoterChangeResponse,
)
from kraft.raft.records import kraft_version_record, scan_control, voters_record
from kraft.raft.state import FollowerState
from kraft.raft.voters import VoterNode, VoterSet

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore

logger = logging.getLogger("kraft.raft")


def wants_admin(core: RaftCore, s: FollowerState) -> bool:
    """Does this follower need to send UpdateRaftVoter or auto-join requests?"""
    cfg = core.config
    if core._is_voter():
        if s.update_voter_done or not cfg.listeners:
            return False
        own = core._voters().get(core.key.id)
        assert own is not None
        if core.kraft_version == 0:
            return True
        if own.endpoints == cfg.listeners and own.kraft_version == cfg.kraft_version_range:
            # Nothing to publish to this leader; a new leader means a new FollowerState.
            s.update_voter_done = True
            return False
        return True
    caught_up = core.high_watermark is not None and core.high_watermark >= core.log.end_offset
    if core.kraft_version == 0:
        # a caught-up observer (it knows the quorum is at kraft.version 0) tells the leader
        # its supported range, which a kraft.version upgrade checks (Kafka's controllers
        # register with the active controller)
        return not s.registered and caught_up
    if not cfg.auto_join or not cfg.listeners:
        return False
    return caught_up


def send_admin(core: RaftCore, s: FollowerState) -> None:
    """Send the follower's admin request: registration (an observer at kraft.version 0),
    UpdateRaftVoter (a voter), or auto-join (remove a stale self, then add itself)."""
    cfg = core.config
    voters = core._voters()
    s.next_admin_at = core._now + cfg.update_voter_period_ms
    request: Request
    if not voters.is_voter(core.key) and core.kraft_version == 0:
        request = ControllerRegistrationRequest(core.key.id, core.key.directory_id,
                                                cfg.listeners, cfg.kraft_version_range)
    elif voters.is_voter(core.key):
        request = UpdateRaftVoterRequest(
            current_leader_epoch=s.epoch,
            voter_id=core.key.id,
            voter_directory_id=core.key.directory_id,
            listeners=cfg.listeners,
            kraft_version_feature=cfg.kraft_version_range,
        )
    else:
        stale = voters.get(core.key.id)
        if stale is not None:
            # Auto-join: our id is a voter under an old directory id (a lost disk); remove
            # that stale replica first, then add ourselves.
            request = RemoveRaftVoterRequest(core.key.id, stale.key.directory_id)
        else:
            request = AddRaftVoterRequest(core.key.id, core.key.directory_id, cfg.listeners)
    core._admin_corr = core._send(s.leader_id, s.leader_endpoints, request)


def read_control_records(core: RaftCore, base_offset: int, records: tuple[object, ...]) -> None:
    """Note the voters sets and kraft.versions set by the control records starting at
    `base_offset`, each at its own offset (a truncation reverts them)."""
    for i, record in enumerate(records):
        voters, version = scan_control((record,))
        if version is not None:
            core.kraft_version_history.add(base_offset + i, version)
        if voters is not None:
            core.voters_history.add(base_offset + i, voters)


def change_precondition_error(core: RaftCore, s: LeaderState) -> tuple[ErrorCode, str] | None:
    """Why no voter change or upgrade may start now: one is pending, or this leader's epoch
    start or the latest voters record is not committed yet (None when one may)."""
    if s.pending_change is not None:
        return ErrorCode.REQUEST_TIMED_OUT, "another voter change is in progress"
    if s.high_watermark is None or s.high_watermark <= s.epoch_start_offset:
        return ErrorCode.REQUEST_TIMED_OUT, "the leader has not committed its epoch start yet"
    if core.voters_history.latest_offset() >= s.high_watermark:
        return ErrorCode.REQUEST_TIMED_OUT, "the latest voters record is not committed yet"
    return None


def voter_change_refusal(core: RaftCore) -> tuple[ErrorCode, str] | None:
    """Why an AddRaftVoter/RemoveRaftVoter cannot start now (None when it can)."""
    s = core.state
    if not isinstance(s, LeaderState) or core._shutting_down:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader"
    pre = change_precondition_error(core, s)
    if pre is not None:
        return pre
    if core.kraft_version < 1:
        return ErrorCode.UNSUPPORTED_VERSION, "kraft.version 0 does not support voter changes"
    return None


def reply_change(core: RaftCore, pc: PendingChange, err: ErrorCode, message: str | None) -> None:
    """Answer the request of a pending voter change or kraft.version upgrade (once: an
    AddRaftVoter with AckWhenCommitted false was answered at its append)."""
    if pc.answered:
        return
    pc.answered = True
    response: Response
    if pc.kind is ChangeKind.UPGRADE:
        response = UpdateKRaftVersionResponse(err, message)
    else:
        response = VoterChangeResponse(err, message)
    core._respond(pc.source, pc.correlation_id, response)


def append_voters(core: RaftCore, s: LeaderState, voters: VoterSet) -> int:
    """Append a voters record of `voters`; its offset."""
    replication.append_control(core, (voters_record(voters),))
    return core.log.end_offset - 1


def missing_controller_listener(core: RaftCore, endpoints: tuple[Endpoint, ...]) -> str | None:
    """The cluster's controller listener (the first of this replica's listeners) when
    `endpoints` have none by that name, else None. Kafka refuses AddRaftVoter and
    UpdateRaftVoter without it: no voter could reach the new endpoints."""
    if not core.config.listeners:
        return None
    name = core.config.listeners[0].name
    if any(e.name.upper() == name.upper() for e in endpoints):
        return None
    return name


def _voter_change_reply(core: RaftCore, src: int, corr: int) -> Callable[[ErrorCode, str], None]:
    """Answer an AddRaftVoter/RemoveRaftVoter request from `src` with an error and a message."""

    def fail(err: ErrorCode, msg: str) -> None:
        core._respond(src, corr, VoterChangeResponse(err, msg))

    return fail


def _leader_for_voter_change(
    core: RaftCore, fail: Callable[[ErrorCode, str], None]
) -> LeaderState | None:
    """The leader's state when an AddRaftVoter/RemoveRaftVoter can start now; else None, the
    request refused with `voter_change_refusal`'s reason."""
    refused = voter_change_refusal(core)
    if refused is not None:
        fail(*refused)
        return None
    s = core.state
    assert isinstance(s, LeaderState)
    return s


def on_add_voter(core: RaftCore, src: int, corr: int, req: AddRaftVoterRequest) -> None:
    """AddRaftVoter: refuse what is invalid, a duplicate, or a replica that has not caught up;
    else probe the new voter's ApiVersions before writing the voters record."""
    fail = _voter_change_reply(core, src, corr)
    s = _leader_for_voter_change(core, fail)
    if s is None:
        return
    if req.voter_id < 0 or req.voter_directory_id is None or req.voter_directory_id.is_zero():
        fail(ErrorCode.INVALID_REQUEST, "the new voter needs an id and a directory id")
        return
    if not req.listeners:
        fail(ErrorCode.INVALID_REQUEST, "the new voter has no endpoint")
        return
    missing = missing_controller_listener(core, req.listeners)
    if missing is not None:
        fail(ErrorCode.INVALID_REQUEST,
             f"the new voter's endpoints {[e.name for e in req.listeners]} do not include "
             f"the controller listener {missing}")
        return
    voters = core._voters()
    if voters.is_voter_id(req.voter_id):
        fail(ErrorCode.DUPLICATE_VOTER, f"node {req.voter_id} is already a voter")
        return
    key = ReplicaKey(req.voter_id, req.voter_directory_id)
    p = s.progress.get(key)
    hw = s.high_watermark or 0
    lag: str | None = None
    if p is None:
        lag = "the leader has had no fetch from it"
    elif p.last_caught_up_ms < 0:
        lag = f"it has not reached the leader's log end (fetched to {p.end_offset})"
    elif p.last_fetch_ms < core._now - CAUGHT_UP_WINDOW_MS:
        lag = f"its last fetch was {core._now - p.last_fetch_ms} ms ago"
    elif p.end_offset < hw:
        lag = f"it fetched to {p.end_offset}, behind the high watermark {hw}"
    if lag is not None:
        logger.info(
            "raft add-voter refused node=%s replica=%s reason=%r log_end=%s hw=%s",
            core.key.id, key, lag, core.log.end_offset, hw,
        )
        fail(ErrorCode.REQUEST_TIMED_OUT, f"replica {key} has not caught up: {lag}")
        return
    s.pending_change = PendingChange(
        ChangeKind.ADD,
        src,
        corr,
        core._now + core.config.request_timeout_ms,
        key,
        VoterNode(key, req.listeners),
        timeout_ms=max(req.timeout_ms, 1),
        ack_when_committed=req.ack_when_committed,
    )
    core._out.append(SendApiVersions(req.voter_id, req.listeners))


def on_api_versions(core: RaftCore, ev: ApiVersionsReceived) -> None:
    """The new voter's ApiVersions answered a pending AddRaftVoter: append the voters record
    when it supports kraft.version 1, else fail the change."""
    s = core.state
    if not isinstance(s, LeaderState):
        return
    pc = s.pending_change
    if pc is None or pc.kind is not ChangeKind.ADD or pc.record_offset is not None:
        return
    if pc.key.id != ev.node_id:
        return
    if ev.result.error_code != ErrorCode.NONE:
        s.pending_change = None
        reply_change(core, pc, ErrorCode.REQUEST_TIMED_OUT, "new voter unreachable")
        return
    if not ev.result.kraft_version.supports(1):
        s.pending_change = None
        reply_change(core, pc, ErrorCode.INVALID_REQUEST, "new voter lacks kraft.version 1")
        return
    assert pc.node is not None
    node = VoterNode(pc.key, pc.node.endpoints, ev.result.kraft_version)
    pc.record_offset = append_voters(core, s, core._voters().with_voter(node))
    pc.deadline = core._now + pc.timeout_ms
    if not pc.ack_when_committed:  # KIP-1186: answered now, still pending until committed
        reply_change(core, pc, ErrorCode.NONE, None)
    replication.maybe_advance_hw(core)


def on_remove_voter(core: RaftCore, src: int, corr: int, req: RemoveRaftVoterRequest) -> None:
    """RemoveRaftVoter: append the voters set without that replica (never the last voter)."""
    fail = _voter_change_reply(core, src, corr)
    s = _leader_for_voter_change(core, fail)
    if s is None:
        return
    if req.voter_directory_id is None or req.voter_directory_id.is_zero():
        fail(ErrorCode.INVALID_REQUEST, "a directory id is required")
        return
    key = ReplicaKey(req.voter_id, req.voter_directory_id)
    voters = core._voters()
    if not voters.has_exact(key) or len(voters) <= 1:
        fail(ErrorCode.VOTER_NOT_FOUND, f"replica {key} is not a removable voter")
        return
    offset = append_voters(core, s, voters.without(key))
    s.pending_change = PendingChange(
        ChangeKind.REMOVE, src, corr, core._now + VOTER_CHANGE_TIMEOUT_MS, key, None, offset
    )
    replication.maybe_advance_hw(core)


def on_update_voter(core: RaftCore, src: int, corr: int, req: UpdateRaftVoterRequest) -> None:
    """UpdateRaftVoter: a voter's endpoints and supported kraft.version range; remembered at
    kraft.version 0, written as a voters record at 1 when they changed."""
    s = core.state

    def reply(err: ErrorCode) -> None:
        st = core.state
        core._respond(src, corr, UpdateRaftVoterResponse(err, st.leader_id, st.epoch))

    err = core._leader_only_error(req.current_leader_epoch)
    if err is not None:
        reply(err)
        return
    assert isinstance(s, LeaderState)
    rng = req.kraft_version_feature
    if (
        req.voter_directory_id is None
        or req.voter_directory_id.is_zero()
        or rng.min_supported < 0
        or rng.max_supported < rng.min_supported
        or not req.listeners
    ):
        reply(ErrorCode.INVALID_REQUEST)
        return
    if not rng.supports(core.kraft_version) or missing_controller_listener(core,
            req.listeners) is not None:
        # Kafka's UpdateVoterHandler: the voter must still support the finalized
        # kraft.version and still listen on the controller listener; nothing is written,
        # nor remembered for a later upgrade
        reply(ErrorCode.INVALID_REQUEST)
        return
    voters = core._voters()
    current = voters.get(req.voter_id)
    key = ReplicaKey(req.voter_id, req.voter_directory_id)
    if current is None or not voters.is_voter(key):
        reply(ErrorCode.VOTER_NOT_FOUND)
        return
    p = s.progress_for(key)
    p.reported_range = rng
    p.reported_endpoints = req.listeners
    if core.kraft_version == 0:
        # kraft.version 0: nothing is written; the leader remembers the voter's directory
        # id and supported range so a later kraft.version upgrade can check them.
        reply(ErrorCode.NONE)
        return
    pre = change_precondition_error(core, s)
    if pre is not None:
        reply(pre[0])
        return
    node = VoterNode(key, req.listeners, rng)
    if node != current:
        append_voters(core, s, voters.replaced(node))
        replication.maybe_advance_hw(core)
    reply(ErrorCode.NONE)


def on_controller_registration(core: RaftCore, src: int, corr: int,
                                req: ControllerRegistrationRequest) -> None:
    """ControllerRegistration: remember the observer's supported kraft.version range for a
    later upgrade."""
    s = core.state
    if not isinstance(s, LeaderState) or core._shutting_down:
        core._respond(src, corr, ControllerRegistrationResponse(
            ErrorCode.NOT_CONTROLLER, "not the active controller"))
        return
    rng = req.kraft_version_feature
    if req.controller_id < 0 or rng.min_supported < 0 or rng.max_supported < rng.min_supported:
        core._respond(src, corr, ControllerRegistrationResponse(
            ErrorCode.INVALID_REQUEST, "bad controller id or kraft.version range"))
        return
    s.registered_ranges[req.controller_id] = rng
    core._respond(src, corr, ControllerRegistrationResponse(ErrorCode.NONE))


def observer_refusal(core: RaftCore, s: LeaderState, target: int) -> str | None:
    """Why an observer may not take kraft.version `target` (None when all may): every
    observer DescribeQuorum lists must have registered a range that holds it (Kafka checks
    the supported range of every registered controller and broker)."""
    voters = core._voters()
    for p in sorted(s.progress.values(), key=lambda p: p.key.id):
        if (voters.is_voter(p.key) or p.key.id == core.key.id
                or p.last_fetch_ms < core._now - OBSERVER_SESSION_TIMEOUT_MS):
            continue
        rng = s.registered_ranges.get(p.key.id)
        if rng is None:
            return (f"Invalid update version {target} for feature kraft.version. Observer "
                    f"{p.key.id} has not registered, and may not support this feature")
        if not rng.supports(target):
            return (f"Invalid update version {target} for feature kraft.version. Observer "
                    f"{p.key.id} only supports versions "
                    f"{rng.min_supported}-{rng.max_supported}")
    return None


def on_update_kraft_version(core: RaftCore, src: int, corr: int, req: UpdateKRaftVersionRequest) -> None:
    """Upgrade kraft.version (UpdateFeatures): every voter and registered observer must support
    the target; writes the kraft.version and voters records, answered when they commit."""
    s = core.state

    def reply(err: ErrorCode, msg: str | None = None) -> None:
        core._respond(src, corr, UpdateKRaftVersionResponse(err, msg))

    if not isinstance(s, LeaderState) or core._shutting_down:
        # an UpdateFeatures answer: Kafka's controllers say NOT_CONTROLLER
        reply(ErrorCode.NOT_CONTROLLER, "not the active controller")
        return
    current = core.kraft_version
    target = req.kraft_version
    if target < current:
        reply(ErrorCode.INVALID_UPDATE_VERSION, "kraft.version cannot be downgraded")
        return
    if target == current:
        reply(ErrorCode.NONE)
        return
    if target > 1 or not core.config.kraft_version_range.supports(target):
        reply(ErrorCode.INVALID_UPDATE_VERSION, f"kraft.version {target} is not supported")
        return
    observer = observer_refusal(core, s, target)
    if observer is not None:
        reply(ErrorCode.INVALID_UPDATE_VERSION, observer)
        return
    pre = change_precondition_error(core, s)
    if pre is not None:
        reply(*pre)
        return
    upgraded: list[VoterNode] = []
    for v in core._voters().voters:
        if v.id == core.key.id:
            upgraded.append(VoterNode(core.key, core.config.listeners or v.endpoints,
                                      core.config.kraft_version_range))
            continue
        p = s.voter_progress(v)
        why = None
        if p is None or p.reported_range is None:
            why = f"voter {v.id} has not reported its supported range"
        elif not p.reported_range.supports(target):
            rng = p.reported_range
            why = f"voter {v.id} supports {rng.min_supported}-{rng.max_supported}"
        elif p.key.directory_id is None:
            why = f"the directory id of voter {v.id} is not known"
        if why is not None or p is None or p.reported_range is None:
            reply(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid upgrade of kraft.version to "
                  f"{target} because not all of the voters support it: {why}")
            return
        upgraded.append(VoterNode(p.key, p.reported_endpoints or v.endpoints, p.reported_range))
    if req.validate_only:
        reply(ErrorCode.NONE)
        return
    replication.append_control(core, (kraft_version_record(target), voters_record(VoterSet.of(upgraded))))
    s.pending_change = PendingChange(
        ChangeKind.UPGRADE, src, corr, core._now + VOTER_CHANGE_TIMEOUT_MS, core.key, None,
        core.log.end_offset - 1,
    )
    replication.maybe_advance_hw(core)


def on_describe(core: RaftCore, src: int, corr: int) -> None:
    """DescribeQuorum: the leader reports its epoch, high watermark, the voters' and the recent
    observers' progress, and the voters' endpoints."""
    s = core.state
    if not isinstance(s, LeaderState):
        core._respond(
            src,
            corr,
            DescribeQuorumResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, s.leader_id, s.epoch, -1,
                error_message="not the leader",
            ),
        )
        return
    voters = core._voters()
    rows: list[ReplicaDescription] = []
    for v in voters.voters:
        if v.id == core.key.id and (v.key.directory_id in (None, core.key.directory_id)):
            rows.append(
                ReplicaDescription(
                    core.key.id, core.key.directory_id, core.log.end_offset, core._now, core._now
                )
            )
            continue
        p = s.voter_progress(v)
        rows.append(
            ReplicaDescription(
                v.id,
                p.key.directory_id if p else v.key.directory_id,
                p.end_offset if p else -1,
                p.last_fetch_ms if p else -1,
                p.last_caught_up_ms if p else -1,
            )
        )
    observers = [
        ReplicaDescription(
            p.key.id, p.key.directory_id, p.end_offset, p.last_fetch_ms, p.last_caught_up_ms
        )
        for p in sorted(s.progress.values(), key=lambda p: (p.key.id, str(p.key.directory_id)))
        if not voters.is_voter(p.key)
        and p.last_fetch_ms >= core._now - OBSERVER_SESSION_TIMEOUT_MS
    ]
    if not voters.is_voter(core.key):
        observers.append(
            ReplicaDescription(
                core.key.id, core.key.directory_id, core.log.end_offset, core._now, core._now
            )
        )
    hw = s.high_watermark if s.high_watermark is not None else -1
    core._respond(
        src,
        corr,
        DescribeQuorumResponse(
            ErrorCode.NONE,
            s.leader_id,
            s.epoch,
            hw,
            tuple(rows),
            tuple(observers),
            tuple((v.id, v.endpoints) for v in voters.voters),
        ),
    )


def on_controller_registration_response(
    core: RaftCore, destination: int, resp: ControllerRegistrationResponse
) -> None:
    """An observer's registration answered: registered once its leader took it."""
    s = core.state
    if (resp.error_code == ErrorCode.NONE and isinstance(s, FollowerState)
            and destination == s.leader_id):
        s.registered = True


def on_update_voter_response(core: RaftCore, resp: UpdateRaftVoterResponse) -> None:
    """A voter's UpdateRaftVoter answered: done for this leader, or the answer names a newer
    epoch (and leader) to move to."""
    s = core.state
    if resp.error_code == ErrorCode.NONE and isinstance(s, FollowerState):
        s.update_voter_done = True
    elif not elections.maybe_transition_on_epoch(core, resp.leader_epoch, resp.leader_id, ()):
        pass
