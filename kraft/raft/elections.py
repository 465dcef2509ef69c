"""Elections (KIP-595, KIP-996): the epoch transitions, Vote and pre-vote, BeginQuorumEpoch and
EndQuorumEpoch, check-quorum and the election timers.

Functions over one `RaftCore`'s state, called by its dispatcher (`kraft.raft.core`). Owns:

- the transitions between the epoch states (`set_state` and the `to_*` functions) and the
  quorum-state persisted with each (a vote is on disk before it is answered);
- the prospective replica's pre-vote and the candidate's vote rounds, their timeouts, the
  candidate's randomized backoff, and the vote requests asked again after a failure;
- the answers to Vote, BeginQuorumEpoch and EndQuorumEpoch, and the epoch (and leader)
  learnt from any peer's answer;
- leader stickiness: a replica that hears a live leader takes no higher epoch from those
  requests (`live_leader`, Raft thesis 4.2.3);
- the leader's BeginQuorumEpoch resend, check-quorum, and resignation;
- a follower's reaction to a dead leader (the survivors' staggered pre-votes).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kraft.protocol.errors import ErrorCode
from kraft.protocol.uuid import Uuid
from kraft.raft import membership, replication
from kraft.raft.effects import AbortSnapshotDownload, AppendCommitted
from kraft.raft.epochs import EPOCH_LIMIT, MAX_EPOCH
from kraft.raft.leader import LeaderState
from kraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    OffsetAndEpoch,
    ReplicaKey,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.quorum import VoteResult, majority_size, vote_result
from kraft.raft.records import kraft_version_record, leader_change, voters_record
from kraft.raft.state import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from kraft.raft.voters import VoterNode, VoterSet

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore, State

logger = logging.getLogger("kraft.raft")

RETRY_BACKOFF_BASE_MS = 100
"""Base of the candidate's randomized exponential backoff after a lost election."""

CHECK_QUORUM_FACTOR = 1.5
"""The leader resigns if a majority has not fetched within this many fetch timeouts."""


def set_state(core: RaftCore, new: State) -> None:
    """Enter state `new`: forget the requests in flight, hand back what a leader held, abort a
    snapshot download, and tell the runtime."""
    old = core.state
    core.state = new
    core._inflight.clear()
    core._fetch_corr = None
    core._fetch_backoff_until = 0
    core._admin_corr = None
    if isinstance(old, LeaderState):
        abandon_leadership(core, old)
    if isinstance(old, FollowerState) and old.download is not None and not old.download.complete:
        core._out.append(AbortSnapshotDownload(old.download.snapshot_id))
    if isinstance(new, LeaderState | FollowerState):
        core._election_retries = 0
    core._emit_state()
    logger.debug(
        "raft transition node=%s from=%s to=%s epoch=%s leader=%s",
        core.key.id,
        old.role.value,
        new.role.value,
        new.epoch,
        new.leader_id,
    )


def to_unattached(core: RaftCore, epoch: int, voted: ReplicaKey | None) -> None:
    """Become Unattached in `epoch` (keeping `voted`); a voter arms its election timeout."""
    core._persist(-1, epoch, voted)
    deadline = core._now + core._election_timeout() if core._is_voter() else None
    set_state(core, UnattachedState(epoch, voted, deadline))


def to_follower(core: RaftCore, epoch: int, leader_id: int, endpoints: tuple[Endpoint, ...]) -> None:
    """Follow `leader_id` in `epoch` (its endpoints, else those of the voters set); the fetch
    timeout starts now."""
    old = core.state
    voted = voted_of(core, old) if old.epoch == epoch else None
    if not endpoints:
        endpoints = core._endpoints_of(leader_id)
    core._persist(leader_id, epoch, voted)
    set_state(core,
        FollowerState(
            epoch, leader_id, endpoints, voted, core._now + core.config.fetch_timeout_ms
        )
    )


def voted_of(core: RaftCore, s: State) -> ReplicaKey | None:
    """Whom this replica voted for in the current epoch."""
    if isinstance(s, CandidateState):
        return core.key
    return s.voted


def election_blocked(core: RaftCore) -> bool:
    """True (logged, and the current state's timer armed again) when no election can start:
    its epoch would be at or above `EPOCH_LIMIT`, which no replica accepts. The replica stays
    where it is instead; only a new cluster (or a reset of every voter to a lower epoch, when
    the logs allow one) gets the quorum electing again."""
    s = core.state
    if s.epoch < MAX_EPOCH:
        return False
    logger.error(
        "raft election impossible node=%s epoch=%s role=%s: the next epoch %s is at or above "
        "the epoch limit %s, which no replica accepts; to elect again, every voter must be "
        "stopped and reset (see `kraft recover reset-epoch --help`)",
        core.key.id, s.epoch, s.role.value, s.epoch + 1, EPOCH_LIMIT,
    )
    again = core._now + core._election_timeout()
    if isinstance(s, UnattachedState | ResignedState | ProspectiveState):
        s.election_deadline = again
    elif isinstance(s, FollowerState):
        s.fetch_deadline = again
        s.leader_gone_at = None
        s.waiting_turn = False
    elif isinstance(s, CandidateState):
        s.backoff_until = again
    return True


def to_prospective(core: RaftCore, leader_gone: bool = False) -> None:
    """Start a pre-vote. `leader_gone`: the leader refused a connection, so it is not
    retained (this replica grants votes, and a voter that still sees that leader alive
    pulls it back to following it through its pre-vote rejection). Nothing starts when the
    next epoch would be unusable (`election_blocked`)."""
    if election_blocked(core):
        return
    old = core.state
    voted = voted_of(core, old)
    retained: int = -1
    endpoints: tuple[Endpoint, ...] = ()
    if isinstance(old, FollowerState) and not leader_gone:
        retained, endpoints = old.leader_id, old.leader_endpoints
    elif isinstance(old, ResignedState | ProspectiveState):
        retained = old.node_id if isinstance(old, ResignedState) else old.retained_leader
    new = ProspectiveState(
        old.epoch, voted, retained, endpoints, core._now + core._election_timeout()
    )
    new.granted.add(core.key.id)
    set_state(core, new)
    voters = core._voters()
    result = vote_result(voters.ids(), new.granted, new.rejected)
    if result is VoteResult.WON:
        to_candidate(core)
        return
    request_votes(core, voters, new.epoch, pre_vote=True)


def request_votes(core: RaftCore, voters: VoterSet, epoch: int, *, pre_vote: bool,
                   only: int | None = None) -> None:
    """Ask every other voter (or just `only`) for a (pre-)vote in `epoch` with this
    replica's log end."""
    last = core.log.end_position()
    for v in voters.voters:
        if v.id == core.key.id or (only is not None and v.id != only):
            continue
        core._send(
            v.id,
            v.endpoints,
            VoteRequest(
                replica_epoch=epoch,
                replica_id=core.key.id,
                replica_directory_id=core.key.directory_id,
                voter_id=v.id,
                voter_directory_id=v.key.directory_id,
                last_offset_epoch=last.epoch,
                last_offset=last.offset,
                pre_vote=pre_vote,
            ),
        )


def prospective_lost(core: RaftCore, s: ProspectiveState) -> None:
    """The pre-vote round was lost or timed out: back to the retained leader, else Unattached."""
    if s.retained_leader >= 0 and s.retained_leader != core.key.id:
        to_follower(core, s.epoch, s.retained_leader, s.retained_endpoints)
    else:
        to_unattached(core, s.epoch, s.voted)


def to_candidate(core: RaftCore) -> None:
    """Start an election in the next epoch: vote for itself (persisted) and ask the voters
    (not when that epoch would be unusable: `election_blocked`)."""
    if election_blocked(core):
        return
    epoch = core.state.epoch + 1
    core._persist(-1, epoch, core.key)
    new = CandidateState(epoch, core._now + core._election_timeout(), core._election_retries)
    new.granted.add(core.key.id)
    set_state(core, new)
    voters = core._voters()
    if vote_result(voters.ids(), new.granted, new.rejected) is VoteResult.WON:
        to_leader(core)
        return
    request_votes(core, voters, epoch, pre_vote=False)


def candidate_backoff(core: RaftCore, s: CandidateState) -> None:
    """The election was lost or timed out: wait a randomized, exponentially growing backoff."""
    core._election_retries += 1
    s.retries = core._election_retries
    span = 1 << min(core._election_retries, 21)
    s.backoff_until = core._now + min(
        RETRY_BACKOFF_BASE_MS * core._rng.randrange(0, span),
        core.config.election_backoff_max_ms,
    )


def to_leader(core: RaftCore) -> None:
    """Won the election: lead, and append this epoch's LeaderChange (with the kraft.version and
    voters records a kraft.version 1 quorum still lacks, or this voter's updated endpoints),
    then send BeginQuorumEpoch to the other voters."""
    cand = core.state
    assert isinstance(cand, CandidateState)
    epoch = cand.epoch
    cfg = core.config
    leader = LeaderState(
        epoch=epoch,
        node_key=core.key,
        epoch_start_offset=core.log.end_offset,
        granting=frozenset(cand.granted),
        check_quorum_deadline=core._now + int(CHECK_QUORUM_FACTOR * cfg.fetch_timeout_ms),
        begin_quorum_resend_at=core._now + cfg.fetch_timeout_ms // 2,
        voted=core.key,
    )
    core._persist(core.key.id, epoch, core.key)
    set_state(core, leader)
    logger.info(
        "raft elected node=%s epoch=%s epoch_start=%s voters=%s",
        core.key.id,
        epoch,
        leader.epoch_start_offset,
        core._voters(),
    )
    voters = core._voters()
    records: list[object] = [leader_change(core.key.id, voters, leader.granting)]
    kv = core.kraft_version
    if kv >= 1:
        own = voters.get(core.key.id)
        if not core.voters_history.has_log_entry():
            records += [kraft_version_record(kv), voters_record(voters)]
        elif (
            own is not None
            and own.key == core.key
            and cfg.listeners
            and (own.endpoints != cfg.listeners or own.kraft_version != cfg.kraft_version_range)
        ):
            updated = voters.replaced(VoterNode(core.key, cfg.listeners, cfg.kraft_version_range))
            records.append(voters_record(updated))
    replication.append_control(core, tuple(records))
    for v in voters.voters:
        if v.id != core.key.id:
            send_begin_quorum(core, v)


def send_begin_quorum(core: RaftCore, v: VoterNode) -> None:
    """Tell voter `v` that this replica leads the current epoch."""
    core._send(
        v.id,
        v.endpoints,
        BeginQuorumEpochRequest(
            leader_id=core.key.id,
            leader_epoch=core.state.epoch,
            voter_id=v.id,
            voter_directory_id=v.key.directory_id,
            leader_endpoints=core.config.listeners,
        ),
    )


def resign(core: RaftCore, reason: str) -> None:
    """Step down (`reason` is logged) and send EndQuorumEpoch naming the most caught-up voters
    first as the preferred successors."""
    s = core.state
    assert isinstance(s, LeaderState)
    voters = core._voters()
    # Best candidates first: the most caught-up voters are the likeliest to win quickly.
    others = [v for v in voters.voters if v.key != core.key and v.id != core.key.id]
    others.sort(key=lambda v: -(p.end_offset if (p := s.voter_progress(v)) else -1))
    preferred = tuple(v.key for v in others)
    logger.info("raft resign node=%s epoch=%s reason=%s", core.key.id, s.epoch, reason)
    set_state(core,
        ResignedState(
            s.epoch, core._now + core._election_timeout(), preferred, core.key.id, core.key
        )
    )
    for v in others:
        core._send(
            v.id,
            v.endpoints,
            EndQuorumEpochRequest(
                leader_id=core.key.id,
                leader_epoch=s.epoch,
                preferred_candidates=preferred,
                leader_endpoints=core.config.listeners,
            ),
        )


def abandon_leadership(core: RaftCore, old: LeaderState) -> None:
    """A leader's state ends: its pending appends and voter change fail with
    NOT_LEADER_OR_FOLLOWER, and its parked fetches are answered as a non-leader."""
    for append_id in sorted(old.pending_appends):
        core._out.append(AppendCommitted(append_id, ErrorCode.NOT_LEADER_OR_FOLLOWER))
    old.pending_appends.clear()
    if old.pending_change is not None:
        pc = old.pending_change
        membership.reply_change(core, pc, ErrorCode.NOT_LEADER_OR_FOLLOWER, "leader changed")
        old.pending_change = None
    parked, old.parked = old.parked, []
    for p in parked:
        replication.on_fetch(core, p.source, p.correlation_id, p.request)


def maybe_transition_on_epoch(core: RaftCore, epoch: int, leader_id: int, endpoints: tuple[Endpoint, ...]
) -> bool:
    """React to (epoch, leader) learnt from a peer; True when the state changed."""
    s = core.state
    if epoch > s.epoch:
        if leader_id >= 0 and leader_id != core.key.id:
            to_follower(core, epoch, leader_id, endpoints)
        else:
            to_unattached(core, epoch, None)
        return True
    # A Prospective replica that came from following a leader keeps that leader: hearing
    # about it again from the voters it asks must not pull it back (it already timed out).
    if (
        epoch == s.epoch
        and leader_id >= 0
        and leader_id != core.key.id
        and (
            isinstance(s, UnattachedState | CandidateState)
            or (isinstance(s, ProspectiveState) and s.retained_leader < 0)
        )
    ):
        to_follower(core, epoch, leader_id, endpoints)
        return True
    return False


def begin_quorum_due_at(core: RaftCore, s: LeaderState, v: VoterNode) -> int:
    """When voter `v` is due a BeginQuorumEpoch: fetch timeout / 2 after its last fetch
    (at once when it has not fetched in this epoch)."""
    p = s.voter_progress(v)
    if p is None or p.last_fetch_ms < 0:
        return -1
    return p.last_fetch_ms + core.config.fetch_timeout_ms // 2


def begin_quorum_next(core: RaftCore, s: LeaderState) -> int | None:
    """When the BeginQuorumEpoch resend has work (`RaftCore._leader_timers`): the resend timer, or
    later when no other voter is due by then (None for a single voter). Voters that keep
    fetching keep it in the future, so a steady leader gets no Tick for it."""
    own = core.key.id
    due = [begin_quorum_due_at(core, s, v) for v in core._voters().voters if v.id != own]
    if not due:
        return None
    return max(s.begin_quorum_resend_at, min(due))


def check_quorum_ok(core: RaftCore, s: LeaderState) -> bool:
    """Whether a majority of the voters (this one included) fetched since the last check."""
    voters = core._voters()
    count = len(s.fetched_since_check & voters.ids())
    if core._is_voter():
        count += 1
    return count >= majority_size(len(voters))


def reset_check_quorum(core: RaftCore, s: LeaderState, at: int | None = None) -> None:
    """Restart the check-quorum window from `at` (default now), never earlier than it ends."""
    s.fetched_since_check.clear()
    start = core._now if at is None else min(at, core._now)
    s.check_quorum_deadline = max(
        s.check_quorum_deadline,
        start + int(CHECK_QUORUM_FACTOR * core.config.fetch_timeout_ms))


def vote_unanswered(core: RaftCore, req: VoteRequest) -> None:
    """A vote request got no answer (the connection was refused or cut, or it timed out).
    Like Kafka's candidates, ask that voter again after `retry_backoff_ms` for as long as
    this round lasts: a voter that was restarting, or that this replica could briefly not
    reach, still counts in this epoch instead of the next one (an election timeout later).

    Pre-vote requests are not asked again. Granting a pre-vote records nothing, so two
    prospective replicas can win each other's pre-votes and then split the real vote; the
    survivors of a dead leader avoid that by starting one `election_timeout / 10` apart
    (`leader_unreachable`), and a pre-vote retried into a voter the moment it comes back
    (itself prospective by then) undoes that spacing. A real vote is recorded, so asking
    again can only win a vote that was not cast yet."""
    s = core.state
    if req.pre_vote or not isinstance(s, CandidateState):
        return
    if req.replica_epoch == s.epoch and s.backoff_until is None:
        # one request per voter is in flight, and a failed one is never answered
        s.vote_retry[req.voter_id] = core._now + core.config.retry_backoff_ms


def retry_votes(core: RaftCore, s: CandidateState) -> None:
    """Send the vote requests whose retry is due (see `vote_unanswered`)."""
    due = [v for v, at in s.vote_retry.items() if at <= core._now]
    for vid in due:
        del s.vote_retry[vid]
        request_votes(core, core._voters(), s.epoch, pre_vote=False, only=vid)


def leader_unreachable(core: RaftCore, s: FollowerState) -> None:
    """The leader refused a connection: its process is gone. Stop protecting it from
    pre-votes (this replica no longer fetches from a live leader) and, as a voter, start a
    pre-vote soon instead of after the fetch timeout. Pre-vote keeps this safe: voters that
    still fetch from a live leader reject it. Survivors go in voter-id order, one
    `election_timeout / 10` apart, so two of them rarely split the vote."""
    s.has_fetched = False
    if not core._is_voter() or s.leader_gone_at is not None:
        return
    delay = 0 if s.refused_shorter_log else survivor_rank(core, s) * survivor_step(core)
    s.leader_gone_at = core._now + delay
    logger.info(
        "raft leader unreachable node=%s leader=%s epoch=%s pre-vote in %sms",
        core.key.id, s.leader_id, s.epoch, delay,
    )


def survivor_rank(core: RaftCore, s: FollowerState) -> int:
    """This replica's place among the voters other than its leader, by id."""
    others = sorted(i for i in core._voters().ids() if i != s.leader_id)
    return others.index(core.key.id) if core.key.id in others else 0


def survivor_step(core: RaftCore) -> int:
    """The delay between the survivors' pre-votes after their leader died."""
    return max(1, core.config.election_timeout_ms // 10)


def refusal_decides(core: RaftCore, asker: int) -> bool:
    """Whether this replica refusing `asker` loses it the round when the leader is gone:
    the other voters, the asker included, are short of a majority (3 or 4 voters)."""
    ids = core._voters().ids()
    return asker in ids and len(ids) - 2 < len(ids) // 2 + 1


def live_leader(core: RaftCore) -> bool:
    """Whether this replica hears from a live leader (Raft thesis 4.2.3's leader stickiness,
    etcd's CheckQuorum lease): a follower whose leader answered a Fetch or FetchSnapshot of
    this epoch less than the fetch timeout ago and that still protects it from pre-votes
    (the leader did not resign, refuse a connection or cut a fetch off), or a leader that a
    majority of the voters, itself counted, fetched from within the last fetch timeout.

    Such a replica does not move to a higher epoch on a Vote, pre-vote, BeginQuorumEpoch or
    EndQuorumEpoch request (`stays_with_leader`): one forged packet cannot depose a leader
    that its quorum hears. Ignoring a request is as safe as losing it; a real successor's
    epoch still arrives through the answers to this replica's own requests."""
    s = core.state
    window = core.config.fetch_timeout_ms
    if isinstance(s, FollowerState):
        return (s.has_fetched and not s.disconnected and s.leader_gone_at is None
                and s.heard_at is not None and core._now - s.heard_at < window)
    if isinstance(s, LeaderState) and not core._shutting_down:
        voters = core._voters()
        since = core._now - window
        count = 1 if core._is_voter() else 0
        for v in voters.voters:
            if v.id == core.key.id:
                continue
            p = s.voter_progress(v)
            if p is not None and p.last_fetch_ms > since:
                count += 1
        return count >= majority_size(len(voters))
    return False


def stays_with_leader(core: RaftCore, src: int, kind: str, epoch: int) -> bool:
    """True (logged) when a `kind` request from `src` names an `epoch` above this replica's
    while it hears from a live leader (`live_leader`): the request is answered without any
    change of state."""
    s = core.state
    if epoch <= s.epoch or not live_leader(core):
        return False
    core.refusals.note(
        core._now, "live_leader", kind, logging.INFO,
        "raft request ignored node=%s source=%s request=%s epoch=%s: leader %s of epoch %s "
        "is live", core.key.id, src, kind, epoch, s.leader_id, s.epoch,
    )
    return True


def vote_response(core: RaftCore, error: ErrorCode, granted: bool) -> VoteResponse:
    """This replica's answer to a Vote, with what it knows of the epoch and leader."""
    return VoteResponse(
        error, core.state.leader_id, core.state.epoch, granted, core._leader_endpoints()
    )


def own_voter_key(core: RaftCore, voter_id: int, voter_directory_id: Uuid | None) -> bool:
    """Whether a Vote / BeginQuorumEpoch names this replica as its receiver. A VoterId
    below 0 (v0 requests have none) is no key and names nobody in particular, as in Kafka
    (`RaftUtil.voteRequestVoterKey`); a key without a directory id matches by id."""
    if voter_id < 0:
        return True
    return voter_id == core.key.id and (
        voter_directory_id is None or voter_directory_id == core.key.directory_id)


def on_vote(core: RaftCore, src: int, corr: int, req: VoteRequest) -> None:
    """Answer a Vote or pre-vote (KIP-595, KIP-996): validate, fence old epochs, and grant only
    to an up-to-date log, at most one vote per epoch, never while a live leader is known."""
    bad_epoch = (
        req.last_offset_epoch > req.replica_epoch
        if req.pre_vote
        else req.last_offset_epoch >= req.replica_epoch
    )
    if req.replica_id < 0 or req.last_offset < 0 or req.last_offset_epoch < 0 or bad_epoch:
        core._respond(src, corr, vote_response(core, ErrorCode.INVALID_REQUEST, False))
        return
    if not own_voter_key(core, req.voter_id, req.voter_directory_id):
        core._respond(src, corr, vote_response(core, ErrorCode.INVALID_VOTER_KEY, False))
        return
    if req.replica_epoch < core.state.epoch:
        core._respond(src, corr, vote_response(core, ErrorCode.FENCED_LEADER_EPOCH, False))
        return
    if stays_with_leader(core, src, "PreVote" if req.pre_vote else "Vote", req.replica_epoch):
        core._respond(src, corr, vote_response(core, ErrorCode.NONE, False))
        return
    if req.replica_epoch > core.state.epoch:
        to_unattached(core, req.replica_epoch, None)
    s = core.state
    candidate = ReplicaKey(req.replica_id, req.replica_directory_id)
    up_to_date = OffsetAndEpoch(req.last_offset_epoch, req.last_offset) >= core.log.end_position()
    granted = False
    if req.pre_vote:
        if isinstance(s, UnattachedState | ProspectiveState | CandidateState | ResignedState):
            granted = up_to_date
        elif isinstance(s, FollowerState):
            # A follower that hears from a live leader protects it (KIP-996).
            granted = up_to_date and (not s.has_fetched or s.disconnected)
            if not granted and core._is_voter() and refusal_decides(core, req.replica_id):
                # The asker cannot win without this replica. One whose fetch timed out
                # waits in Prospective for its election timeout without asking again (it
                # retains the silent leader that this answer names), so if this one's
                # fetch times out within that time nobody goes first: no turn to wait.
                s.refused_prevote_at = core._now
                if not up_to_date:
                    # Refused for its shorter log: this replica is the one that can win.
                    # It does not wait its turn after a refused connection either, and
                    # ends a turn it is waiting. (A refused asker whose log is not shorter
                    # and which asks again once a refusal sent it back to a dead leader
                    # is granted then: going at once would make two candidates.)
                    s.refused_shorter_log = True
                    if s.leader_gone_at is not None:
                        s.leader_gone_at = min(s.leader_gone_at, core._now)
                    if s.waiting_turn:
                        s.fetch_deadline = min(s.fetch_deadline, core._now)
        if (
            isinstance(s, ProspectiveState)
            and not granted
            and req.replica_epoch == s.epoch
            and req.replica_id in s.rejected
        ):
            # That voter refused our pre-vote while it still fetched from the leader; now it
            # asks for pre-votes itself, so it no longer does, and we refuse it (our log is
            # longer): ask it again at once instead of waiting out the election timeout (two
            # followers that time out together, the one with the longer log asking first,
            # would otherwise both lose the round). Had we granted it, it wins with our
            # vote: asking again would only make us a second candidate and split the vote.
            s.rejected.discard(req.replica_id)
            request_votes(core, core._voters(), s.epoch, pre_vote=True, only=req.replica_id)
    elif isinstance(s, UnattachedState | ProspectiveState):
        leader_known = isinstance(s, ProspectiveState) and s.retained_leader >= 0
        voted = s.voted
        same = voted is not None and voted.id == candidate.id and (
            voted.directory_id is None or voted.directory_id == candidate.directory_id
        )
        if up_to_date and not leader_known and (voted is None or same):
            granted = True
            if voted is None:
                core._persist(-1, s.epoch, candidate)
                set_state(core,
                    UnattachedState(s.epoch, candidate, core._now + core._election_timeout())
                )
            elif isinstance(s, UnattachedState):
                s.election_deadline = core._now + core._election_timeout()
    core._respond(src, corr, vote_response(core, ErrorCode.NONE, granted))


def on_vote_response(core: RaftCore, req: VoteRequest, resp: VoteResponse) -> None:
    """Count a (pre-)vote answer: a newer epoch ends the round; a majority moves on (to
    candidate, to leader), a lost round goes back or backs off."""
    s = core.state
    # A granted pre-vote in our epoch means the voter does not fetch from a live leader,
    # even if it still names one (its leader refused connections): count it rather than
    # going back to follow that leader.
    granted_prevote = (
        req.pre_vote and resp.vote_granted and resp.error_code == ErrorCode.NONE
        and resp.leader_epoch == s.epoch and isinstance(s, ProspectiveState)
    )
    if not granted_prevote and maybe_transition_on_epoch(core,
        resp.leader_epoch, resp.leader_id, resp.leader_endpoints
    ):
        return
    s = core.state
    if resp.leader_epoch != s.epoch:
        return
    if req.pre_vote and isinstance(s, ProspectiveState) and req.replica_epoch == s.epoch:
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # The peer cannot pre-vote (Vote < v2): skip straight to a real election.
            to_candidate(core)
            return
        if resp.error_code != ErrorCode.NONE:
            return
        (s.granted if resp.vote_granted else s.rejected).add(req.voter_id)
        result = vote_result(core._voters().ids(), s.granted, s.rejected)
        if result is VoteResult.WON:
            to_candidate(core)
        elif result is VoteResult.LOST:
            prospective_lost(core, s)
    elif not req.pre_vote and isinstance(s, CandidateState) and req.replica_epoch == s.epoch:
        if resp.error_code != ErrorCode.NONE or s.backoff_until is not None:
            return
        (s.granted if resp.vote_granted else s.rejected).add(req.voter_id)
        result = vote_result(core._voters().ids(), s.granted, s.rejected)
        if result is VoteResult.WON:
            to_leader(core)
        elif result is VoteResult.LOST:
            candidate_backoff(core, s)


def on_begin_quorum(core: RaftCore, src: int, corr: int, req: BeginQuorumEpochRequest) -> None:
    """A leader announces its epoch: follow it when the epoch is new or no leader is known."""
    if not own_voter_key(core, req.voter_id, req.voter_directory_id):
        err = ErrorCode.INVALID_VOTER_KEY
    elif req.leader_epoch < core.state.epoch:
        err = ErrorCode.FENCED_LEADER_EPOCH
    elif stays_with_leader(core, src, "BeginQuorumEpoch", req.leader_epoch):
        # the answer names the live leader and its epoch; a real successor's followers
        # learn the new epoch from the old leader once it is fenced, or once it falls silent
        err = ErrorCode.UNKNOWN_LEADER_EPOCH
    else:
        err = ErrorCode.NONE
        s = core.state
        if req.leader_epoch > s.epoch or (
            s.leader_id < 0 and not isinstance(s, LeaderState | ResignedState)
        ):
            to_follower(core, req.leader_epoch, req.leader_id, req.leader_endpoints)
    s = core.state
    core._respond(src, corr, BeginQuorumEpochResponse(err, s.leader_id, s.epoch))


def on_end_quorum(core: RaftCore, src: int, corr: int, req: EndQuorumEpochRequest) -> None:
    """The leader resigns: its followers start their elections after a backoff by their rank
    among its preferred successors."""
    s = core.state
    if req.leader_epoch < s.epoch:
        core._respond(
            src, corr, EndQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, s.leader_id, s.epoch)
        )
        return
    if stays_with_leader(core, src, "EndQuorumEpoch", req.leader_epoch):
        core._respond(src, corr, EndQuorumEpochResponse(
            ErrorCode.UNKNOWN_LEADER_EPOCH, s.leader_id, s.epoch))
        return
    if req.leader_epoch > s.epoch:
        to_follower(core, req.leader_epoch, req.leader_id, req.leader_endpoints)
    s = core.state
    if isinstance(s, FollowerState) and s.leader_id == req.leader_id:
        s.fetch_deadline = core._now + end_quorum_backoff(core, req.preferred_candidates)
        s.has_fetched = False
    core._respond(src, corr, EndQuorumEpochResponse(ErrorCode.NONE, s.leader_id, s.epoch))


def end_quorum_backoff(core: RaftCore, preferred: tuple[ReplicaKey, ...]) -> int:
    """Strict exponential backoff by rank among the resigning leader's preferred
    candidates: the best one starts its election at once."""
    cap = core.config.election_backoff_max_ms
    own = core.key
    # this replica by id and, where the entry names one, directory id (Kafka's
    # endEpochElectionBackoff): an entry of this id with another directory is another replica
    pos = next((i for i, k in enumerate(preferred) if k.id == own.id and (
        k.directory_id is None or k.directory_id == own.directory_id)), None)
    if pos is None:
        return cap
    if pos == 0:
        return 0
    n = len(preferred)
    return min((cap >> (n - 1)) << (pos - 1), cap)


def expire_election_timers(core: RaftCore, s: State) -> None:
    """The timers of every state but the leader's: an unattached voter's election timeout, the
    pre-vote and vote rounds' timeouts, the candidate's backoff and vote retries, a follower's
    fetch timeout (staggered among the survivors of a silent leader) and a dead leader's
    successor, a resigned leader's wait for its successor."""
    now = core._now
    if isinstance(s, UnattachedState):
        if core._is_voter():
            if s.election_deadline is None:
                s.election_deadline = now + core._election_timeout()
            elif s.election_deadline <= now:
                to_prospective(core)
        else:
            s.election_deadline = None
    elif isinstance(s, ProspectiveState):
        if s.election_deadline <= now:
            prospective_lost(core, s)
    elif isinstance(s, CandidateState):
        if s.backoff_until is not None:
            if s.backoff_until <= now:
                to_prospective(core)
        elif s.election_deadline <= now:
            candidate_backoff(core, s)
        elif s.vote_retry:
            retry_votes(core, s)
    elif isinstance(s, FollowerState):
        # While the runtime installs a downloaded snapshot this replica sends no fetch by
        # design: the leader's silence then says nothing, so the fetch timeout waits for
        # the install and restarts when it ends (a long install must not turn a follower
        # of a live leader into a candidate, or an observer into one that lost its leader).
        if core._installing is None and s.fetch_deadline <= now:
            refused = s.refused_prevote_at
            stagger = survivor_rank(core, s) * survivor_step(core) if s.has_fetched and (
                refused is None or now - refused >= core.config.election_timeout_ms) else 0
            if core._is_voter() and stagger > 0:
                # The leader went silent for every follower at once, so their fetch
                # timeouts expire together; if they all started a pre-vote together each
                # would grant the other's and both would split the real vote. Stop
                # protecting the leader now (grant pre-votes) and start our own one
                # `election_timeout / 10` later per rank.
                s.has_fetched = False
                s.waiting_turn = True
                s.fetch_deadline = now + stagger
            elif core._is_voter():
                to_prospective(core)
            else:
                to_unattached(core, s.epoch, s.voted)
        elif s.leader_gone_at is not None and s.leader_gone_at <= now and core._is_voter():
            to_prospective(core, leader_gone=True)
    elif isinstance(s, ResignedState) and s.election_deadline <= now:
        if core._is_voter():
            to_prospective(core)
        else:
            to_unattached(core, s.epoch, s.voted)
