"""High watermark rules (KIP-595) and KIP-1166 fetch parking on the follower's high watermark."""

from __future__ import annotations

from kraft.raft.config import QuorumStateData
from kraft.raft.effects import AppendCommitted, Committed, SendFetchResponse
from kraft.raft.events import Append
from kraft.raft.messages import FetchRequest
from kraft.sim.harness import CoreHarness, dir_id, log_state


def hw(h: CoreHarness) -> int | None:
    return h.core.high_watermark


def test_hw_needs_a_majority_of_voters() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3, 4, 5))
    end = h.log_end
    h.fetch_from(2, end, h.epoch, max_wait_ms=0)
    assert hw(h) is None  # leader + 1 of 5
    h.fetch_from(3, end, h.epoch, max_wait_ms=0)
    assert hw(h) == end  # leader + 2 of 5


def test_hw_only_after_a_record_of_the_current_epoch_is_covered() -> None:
    # 10 records of epoch 3 are already on every voter; the new leader of epoch 4 may not
    # commit them before its own LeaderChange record is replicated.
    h = CoreHarness(log_state=log_state(10, ((3, 0),), QuorumStateData(3)))
    h.elect()
    h.fetch_from(2, 10, 3, max_wait_ms=0)
    assert hw(h) is None
    h.fetch_from(2, 11, 4, max_wait_ms=0)
    assert hw(h) == 11


def test_hw_leader_counts_itself_only_up_to_its_persisted_offset() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.handle(Append(1, ("a", "b")))
    end = h.log_end
    h.fetch_from(2, end, h.epoch, max_wait_ms=0)
    h.fetch_from(3, end - 2, h.epoch, max_wait_ms=0)
    assert hw(h) == end - 2  # leader not flushed: only the followers' end - 2 is a majority
    h.persist()
    assert hw(h) == end
    done = h.of_type(AppendCommitted)
    assert done and done[-1].append_id == 1


def test_hw_single_voter_commits_on_fsync() -> None:
    h = CoreHarness.leader(voters=(1,))
    start = h.log_end
    assert hw(h) == start  # the epoch-start batch is committed once it is on disk
    h.handle(Append(7, (1,)))
    assert hw(h) == start
    h.persist()
    assert hw(h) == start + 1
    assert h.of_type(Committed)[-1].high_watermark == start + 1


def test_hw_observers_never_count() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.fetch_from(8, h.log_end, h.epoch, max_wait_ms=0)
    h.fetch_from(9, h.log_end, h.epoch, max_wait_ms=0)
    assert hw(h) is None


def test_hw_follower_takes_min_of_leader_hw_and_its_log_end() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], batches=[(0, 1), (1, 1)], high_watermark=50)
    assert hw(h) == 2


def test_hw_is_monotonic_on_a_follower() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    h.advance(1)
    h.fetch_response(h.sent(FetchRequest)[-1], batches=[(0, 1), (1, 1), (2, 1)], high_watermark=3)
    h.persist()
    h.fetch_response(h.sent(FetchRequest)[-1], high_watermark=1)
    assert hw(h) == 3
    assert [c.high_watermark for c in h.of_type(Committed)] == [3]


def test_kip1166_follower_sends_its_high_watermark_in_fetch() -> None:
    h = CoreHarness.follower(leader_id=2, epoch=1)
    h.advance(1)
    assert h.sent(FetchRequest)[-1].request.high_watermark == -1
    h.fetch_response(h.sent(FetchRequest)[-1], batches=[(0, 1)], high_watermark=1)
    h.persist()
    assert h.sent(FetchRequest)[-1].request.high_watermark == 1


def leader_with_hw() -> CoreHarness:
    h = CoreHarness.leader(voters=(1, 2, 3))
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0, correlation_id=1)
    assert hw(h) == h.log_end
    h.clear()
    return h


def test_kip1166_fetch_parked_when_nothing_new_and_follower_hw_current() -> None:
    h = leader_with_hw()
    h.fetch_from(3, h.log_end, h.epoch, high_watermark=hw(h))
    assert not h.fetch_responses()


def test_kip1166_fetch_answered_at_once_when_follower_hw_is_behind() -> None:
    h = leader_with_hw()
    h.fetch_from(3, h.log_end, h.epoch, high_watermark=0)
    r = h.fetch_responses()
    assert len(r) == 1 and r[0].response.high_watermark == hw(h)


def test_kip1166_parked_fetch_completed_by_an_append() -> None:
    h = leader_with_hw()
    h.fetch_from(3, h.log_end, h.epoch, high_watermark=hw(h), correlation_id=77)
    start = h.log_end
    h.handle(Append(1, ("x",)))
    r = h.fetch_responses()
    assert len(r) == 1 and r[0].correlation_id == 77 and r[0].read_offset == start


def test_kip1166_parked_fetch_completed_when_high_watermark_moves() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3, 4, 5))
    end = h.log_end
    h.fetch_from(3, end, h.epoch, high_watermark=-1, correlation_id=77)  # leader + 1 of 5
    assert hw(h) is None and not h.fetch_responses()  # parked: nothing new, HW not behind
    h.fetch_from(2, end, h.epoch, correlation_id=78, max_wait_ms=0)  # leader + 2 of 5
    assert hw(h) == end
    assert 77 in [r.correlation_id for r in h.fetch_responses()]


def test_kip1166_old_version_fetch_is_not_completed_by_hw_move() -> None:
    h = leader_with_hw()
    h.handle(Append(1, ("x",)))
    h.persist()
    end = h.log_end
    h.fetch_from(3, end, h.epoch, high_watermark=None, correlation_id=77)  # pre-v18: no field
    h.fetch_from(2, end, h.epoch, max_wait_ms=0, correlation_id=78)
    assert hw(h) == end
    assert 77 not in [r.correlation_id for r in h.fetch_responses()]
    h.advance(500)  # ... it waits out MaxWaitMs instead
    assert 77 in [r.correlation_id for r in h.fetch_responses()]


def test_kip1166_parked_fetch_answered_after_max_wait() -> None:
    h = leader_with_hw()
    h.fetch_from(3, h.log_end, h.epoch, high_watermark=hw(h), max_wait_ms=300, correlation_id=5)
    h.advance(299)
    assert not h.fetch_responses()
    h.advance(1)
    r = h.of_type(SendFetchResponse)
    assert [x.correlation_id for x in r] == [5]


def test_fetch_directory_id_distinguishes_replicas() -> None:
    h = CoreHarness.leader(voters=(1, 2, 3))
    # node 2 with a new disk (another directory id) is an observer, not voter 2
    h.fetch_from(2, h.log_end, h.epoch, max_wait_ms=0, directory_id=dir_id(2, generation=1))
    assert hw(h) is None


def test_hw_follows_the_row_of_a_static_voters_latest_directory() -> None:
    """A static voters set (no directory ids) matches a voter by id: the row the leader counts
    is the one of the directory that fetched last. The leader keeps each voter's row between
    acknowledgements; a voter fetching from another directory (a replaced disk) must switch
    it, or the old directory's offset would keep counting."""
    h = CoreHarness.leader(voters=(1, 2, 3), dynamic=False)
    start = h.log_end
    h.handle(Append(1, ("a", "b", "c")))
    h.persist()
    end = h.log_end
    h.fetch_from(2, end, h.epoch, max_wait_ms=0, directory_id=dir_id(2, generation=0))
    assert hw(h) == end  # leader + node 2 (its first directory)
    h.handle(Append(2, ("d",)))
    h.persist()
    # node 2's disk was replaced: its new directory starts empty, then reaches `end + 1`
    h.fetch_from(2, start, h.epoch, max_wait_ms=0, directory_id=dir_id(2, generation=1))
    h.fetch_from(2, end + 1, h.epoch, max_wait_ms=0, directory_id=dir_id(2, generation=1))
    assert hw(h) == end + 1
    # ... and the old directory's row no longer counts once the new one is the latest
    h.handle(Append(3, ("e",)))
    h.persist()
    h.fetch_from(2, end + 1, h.epoch, max_wait_ms=0, directory_id=dir_id(2, generation=1))
    h.fetch_from(3, start, h.epoch, max_wait_ms=0)
    assert hw(h) == end + 1


def test_the_fetch_that_moves_the_high_watermark_carries_the_new_one() -> None:
    h = leader_with_hw()
    h.handle(Append(1, ("a",)))
    h.persist()
    end = h.log_end
    before = hw(h)
    assert before is not None and before < end
    h.fetch_from(2, end, h.epoch, high_watermark=before, correlation_id=9)
    assert hw(h) == end
    r = [x for x in h.fetch_responses() if x.correlation_id == 9]
    assert len(r) == 1 and r[0].response.high_watermark == end and r[0].read_offset is None
