"""KIP-320 / KIP-595 Fetch: leader-epoch fencing and log divergence."""

from __future__ import annotations

import pytest

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import QuorumStateData
from kraft.raft.core import RaftFatalError
from kraft.raft.effects import Committed, TruncateTo
from kraft.raft.events import Shutdown
from kraft.raft.messages import FetchRequest, OffsetAndEpoch
from kraft.raft.state import Role
from kraft.sim.harness import CoreHarness, log_state


def last_error(h: CoreHarness) -> ErrorCode:
    return h.fetch_responses()[-1].response.error_code


def test_kip320_fetch_with_older_epoch_is_fenced_leader_epoch() -> None:
    h = CoreHarness.leader()
    h.fetch_from(2, 0, 0, epoch=h.epoch - 1)
    assert last_error(h) == ErrorCode.FENCED_LEADER_EPOCH
    assert h.fetch_responses()[-1].response.leader_id == 1


def test_kip320_fetch_with_newer_epoch_is_unknown_leader_epoch() -> None:
    h = CoreHarness.leader()
    h.fetch_from(2, 0, 0, epoch=h.epoch + 1)
    assert last_error(h) == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_kip320_fetch_to_a_non_leader_is_not_leader_or_follower_with_leader_hint() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=3)
    h.fetch_from(3, 0, 0, epoch=3)
    r = h.fetch_responses()[-1].response
    assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (r.leader_id, r.leader_epoch) == (2, 3)


def test_kip595_fetch_to_a_resigned_leader_is_not_leader_or_follower() -> None:
    h = CoreHarness.leader(voters=(1,))
    h.handle(Shutdown())
    assert h.role is Role.RESIGNED
    h.fetch_from(2, 0, 0, epoch=h.epoch)
    assert last_error(h) == ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize(("offset", "last_epoch", "epoch_delta"), [(-1, 0, 0), (0, -1, 0), (0, 5, -4)])
def test_kip595_malformed_fetch_is_invalid_request(offset: int, last_epoch: int, epoch_delta: int) -> None:
    h = CoreHarness.leader()
    h.fetch_from(2, offset, last_epoch, epoch=h.epoch + epoch_delta)
    assert last_error(h) == ErrorCode.INVALID_REQUEST


def leader_with_history() -> CoreHarness:
    # log: epoch 1 at [0, 5), epoch 3 at [5, 10); then elected in epoch 4 (LeaderChange at 10)
    h = CoreHarness(log_state=log_state(10, ((1, 0), (3, 5)), QuorumStateData(3)))
    h.elect()
    return h


def test_kip320_fetch_from_diverged_log_answers_diverging_epoch() -> None:
    h = leader_with_history()
    # the follower has epoch 2 records up to offset 8 that the leader never had
    h.fetch_from(2, 8, 2)
    r = h.fetch_responses()[-1]
    assert r.response.error_code == ErrorCode.NONE
    assert r.response.diverging_epoch == OffsetAndEpoch(1, 5)
    assert r.read_offset is None


def test_kip320_fetch_past_the_end_of_its_epoch_answers_diverging_epoch() -> None:
    h = leader_with_history()
    h.fetch_from(2, 7, 1)  # epoch 1 ends at 5 on the leader
    assert h.fetch_responses()[-1].response.diverging_epoch == OffsetAndEpoch(1, 5)


def test_kip320_matching_fetch_reads_from_fetch_offset() -> None:
    h = leader_with_history()
    h.fetch_from(2, 5, 1)
    r = h.fetch_responses()[-1]
    assert r.response.diverging_epoch is None and r.read_offset == 5


def test_kip320_follower_truncates_to_diverging_epoch_and_refetches() -> None:
    h = CoreHarness(log_state=log_state(8, ((1, 0), (2, 5)), QuorumStateData(2)))
    h.begin_quorum(3, 4)
    h.advance(1)
    fetch = h.sent(FetchRequest)[-1]
    assert fetch.request.fetch_offset == 8 and fetch.request.last_fetched_epoch == 2
    h.fetch_response(fetch, diverging_epoch=OffsetAndEpoch(1, 5))
    truncs = h.of_type(TruncateTo)
    assert truncs and truncs[-1].end_offset == 5
    h.advance(1)
    again = h.sent(FetchRequest)[-1]
    assert again.request.fetch_offset == 5 and again.request.last_fetched_epoch == 1


def test_kip320_follower_never_truncates_below_its_high_watermark() -> None:
    h = CoreHarness(log_state=log_state(8, ((1, 0), (2, 5)), QuorumStateData(2)))
    h.begin_quorum(3, 2)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], high_watermark=7)
    assert h.core.high_watermark == 7
    h.advance(1)
    with pytest.raises(RaftFatalError):
        h.fetch_response(h.sent(FetchRequest)[-1], diverging_epoch=OffsetAndEpoch(1, 5))


def test_kip595_follower_appends_fetched_batches_and_fetches_after_flush() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], batches=[(0, 1), (1, 1)], high_watermark=1)
    assert h.log_end == 2
    n = len(h.sent(FetchRequest))
    h.advance(1)
    assert len(h.sent(FetchRequest)) == n  # not flushed yet: no new fetch
    h.persist()
    assert h.sent(FetchRequest)[-1].request.fetch_offset == 2


def test_kip320_a_diverging_answer_does_not_advance_the_high_watermark() -> None:
    # The follower's log: epoch 1 at [0, 5), epoch 2 at [5, 12). The leader's: epoch 2 at
    # [5, 6), epoch 3 at [6, 7), later epochs after. Asked from (12, epoch 2) the leader
    # answers "epoch 3 ends at 7"; the follower has no epoch 3 and truncates to 7 only: offset
    # 6 is still its own epoch-2 record, which the leader never had. The leader's high
    # watermark (30) must not be taken: min(30, 7) would commit, and apply, record 6 (found by
    # the simulator, seed 500172).
    h = CoreHarness(log_state=log_state(12, ((1, 0), (2, 5)), QuorumStateData(2)))
    h.begin_quorum(3, 4)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], high_watermark=30,
                     diverging_epoch=OffsetAndEpoch(3, 7))
    assert h.of_type(TruncateTo)[-1].end_offset == 7
    assert h.core.high_watermark is None
    assert not h.of_type(Committed)
    h.advance(1)
    again = h.sent(FetchRequest)[-1]
    assert again.request.fetch_offset == 7 and again.request.last_fetched_epoch == 2
    h.fetch_response(again, high_watermark=30, diverging_epoch=OffsetAndEpoch(2, 6))
    assert h.of_type(TruncateTo)[-1].end_offset == 6
    assert h.core.high_watermark is None
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], batches=[(6, 3)], high_watermark=7)
    assert h.core.high_watermark == 7


def test_kip630_a_snapshot_answer_does_not_advance_the_high_watermark() -> None:
    h = CoreHarness(log_state=log_state(12, ((1, 0), (2, 5)), QuorumStateData(2)))
    h.begin_quorum(3, 4)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], high_watermark=30,
                     snapshot_id=OffsetAndEpoch(3, 20))
    assert h.core.high_watermark is None
    assert not h.of_type(Committed)
