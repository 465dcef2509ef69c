"""Quorum-loss recovery as the core sees it: a replica started on a log whose latest voters
set, written past any high watermark it knew by `kraft recover force-single-voter`, is itself
alone. KIP-853 counts the latest set, committed or not, so it elects itself without asking
the lost voters and commits everything its log holds once its epoch starts."""

from __future__ import annotations

from kraft.raft.config import LogState, QuorumStateData
from kraft.raft.effects import Committed, SendRequest
from kraft.raft.messages import VoteRequest
from kraft.raft.records import voters_from_record, voters_record
from kraft.raft.state import Role
from kraft.records.control import KRaftVersionFeature
from kraft.sim.harness import CoreHarness, dir_id, endpoint, voter_set
from kraft.storage.recover import single_voter_record


def forced_log(end: int = 25, forced_epoch: int = 3) -> LogState:
    """Three voters bootstrapped, epochs 1 and 2 in the log, then at offset end-1 the forced
    batch of epoch `forced_epoch` naming voter 1 alone; quorum-state at that epoch."""
    forced = voters_from_record(single_voter_record(
        1, dir_id(1), endpoint(1), KRaftVersionFeature(0, 1)))
    return LogState(
        quorum_state=QuorumStateData(leader_epoch=forced_epoch),
        log_end_offset=end,
        epoch_cache=((1, 0), (2, 10), (forced_epoch, end - 1)),
        voters_history=((-1, voter_set((1, 2, 3))), (end - 1, forced)),
        kraft_version_history=((-1, 1),),
    )


def test_forced_single_voter_elects_itself_alone_and_commits_its_whole_log() -> None:
    h = CoreHarness(1, (1, 2, 3), log_state=forced_log())
    assert h.core.voters().ids() == frozenset({1})
    h.advance(2 * h.config.election_timeout_ms)
    assert h.role is Role.LEADER and h.epoch == 4
    votes = [e for e in h.effects if isinstance(e, SendRequest)
             and isinstance(e.request, VoteRequest)]
    assert votes == []  # nobody else is asked: the lost voters are not voters any more
    h.persist()
    committed = [e.high_watermark for e in h.of_type(Committed)]
    assert committed and committed[-1] == h.log_end and h.log_end > 25


def test_single_voter_record_round_trips_through_the_core_encoding() -> None:
    record = single_voter_record(1, dir_id(1), endpoint(1), KRaftVersionFeature(0, 1))
    assert voters_record(voters_from_record(record)) == record
