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


# ---------------------------------------------------------------- hw_linger_ms (streaming writes)


def streaming_leader(linger: int = 2) -> tuple[CoreHarness, dict[int, int]]:
    """A leader of (1, 2, 3) with `hw_linger_ms=linger`, both followers caught up and parked.
    Returns the harness and each follower's fetch offset."""
    h = CoreHarness.leader(voters=(1, 2, 3), hw_linger_ms=linger)
    end = h.log_end
    h.fetch_from(2, end, h.epoch, max_wait_ms=0, correlation_id=1)
    assert hw(h) == end
    h.clear()
    for f in (2, 3):
        h.fetch_from(f, end, h.epoch, high_watermark=end, correlation_id=f * 100)
    assert not h.fetch_responses()
    return h, {2: end, 3: end}


_corr = iter(range(10_000, 1_000_000))


def write(h: CoreHarness, offsets: dict[int, int], append_id: int) -> list[SendFetchResponse]:
    """One write as a sequential client makes it: the append (answering the parked fetches),
    the leader's fsync, then each follower's acknowledging fetch (sending the high watermark
    it knows). Returns every fetch answer the write caused."""
    start = len(h.effects)
    h.handle(Append(append_id, ("v",)))
    h.persist()
    known = hw(h)
    for f in (2, 3):
        offsets[f] = h.log_end
        h.fetch_from(f, offsets[f], h.epoch, high_watermark=known, correlation_id=next(_corr))
    assert hw(h) == h.log_end
    return [e for e in h.effects[start:] if isinstance(e, SendFetchResponse)]


def one_write_then_parked(h: CoreHarness, offsets: dict[int, int], pause_ms: int) -> None:
    """After `pause_ms` without writes, one write; then both followers fetch again and park."""
    h.advance(pause_ms)
    write(h, offsets, 1)
    for f in (2, 3):
        h.fetch_from(f, offsets[f], h.epoch, high_watermark=hw(h), correlation_id=next(_corr))


def test_hw_linger_a_write_after_a_pause_is_not_held() -> None:
    h, offsets = streaming_leader()
    h.advance(10)
    answers = write(h, offsets, 1)
    # two answers with the records, then both acknowledgements answered at once with the new HW
    assert len(answers) == 4
    assert [a.response.high_watermark for a in answers[2:]] == [h.log_end, h.log_end]


def test_hw_linger_streaming_writes_carry_the_high_watermark_on_the_next_records() -> None:
    h, offsets = streaming_leader()
    one_write_then_parked(h, offsets, pause_ms=10)  # after a pause: answered at once
    second = write(h, offsets, 2)  # within the linger of the last commit: streaming
    # the records go out; the acknowledgements that moved the high watermark are held
    assert [a.read_offset for a in second] == [offsets[2] - 1, offsets[3] - 1]
    committed = hw(h)
    third_start = h.log_end
    third = write(h, offsets, 3)
    # the next append answers both held fetches: its records and the previous commit together
    assert [(a.read_offset, a.response.high_watermark) for a in third] == [
        (third_start, committed), (third_start, committed)]
    assert all(a.read_offset is not None for a in third)


def test_hw_linger_held_answer_goes_alone_when_no_write_follows() -> None:
    h, offsets = streaming_leader(linger=2)
    one_write_then_parked(h, offsets, pause_ms=10)
    write(h, offsets, 2)
    h.clear()
    h.advance(1)
    assert not h.fetch_responses()
    h.advance(1)
    answers = h.fetch_responses()
    assert len(answers) == 2
    assert all(a.read_offset is None and a.response.high_watermark == h.log_end for a in answers)


def test_hw_linger_never_holds_past_max_wait() -> None:
    h, offsets = streaming_leader(linger=50)
    one_write_then_parked(h, offsets, pause_ms=100)
    h.handle(Append(2, ("v",)))
    h.persist()
    known = hw(h)
    h.clear()
    h.fetch_from(2, h.log_end, h.epoch, high_watermark=known, max_wait_ms=5, correlation_id=7)
    assert not h.fetch_responses()  # held: writes stream in
    h.advance(5)
    assert [a.correlation_id for a in h.fetch_responses()] == [7]


def test_hw_linger_off_answers_at_once_while_writes_stream() -> None:
    h, offsets = streaming_leader(linger=0)
    one_write_then_parked(h, offsets, pause_ms=0)
    assert len(write(h, offsets, 2)) == 4
