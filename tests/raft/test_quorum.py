"""Exhaustive tests of the pure quorum arithmetic (majority high watermark, vote counting)."""

from __future__ import annotations

import itertools

from kraft.raft.quorum import (
    VoteResult,
    majority_offset,
    majority_size,
    next_high_watermark,
    quorum_reached_since,
    vote_result,
)


def test_majority_size() -> None:
    assert [majority_size(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]


def test_majority_offset_is_largest_offset_reached_by_a_majority_exhaustive() -> None:
    for n in range(1, 6):
        for offsets in itertools.product(range(-1, 4), repeat=n):
            got = majority_offset(offsets)
            # a majority has reached `got` ...
            assert sum(1 for o in offsets if o >= got) >= majority_size(n)
            # ... and no larger value is reached by a majority
            assert sum(1 for o in offsets if o >= got + 1) < majority_size(n)


def test_majority_offset_of_no_voters_is_minus_one() -> None:
    assert majority_offset([]) == -1


def test_next_high_watermark_needs_a_record_of_the_current_epoch() -> None:
    for start in range(0, 4):
        for cur in (None, 0, 1, 2, 3):
            for maj in range(-1, 6):
                got = next_high_watermark(cur, maj, start)
                if maj > start and (cur is None or maj > cur):
                    assert got == maj
                else:
                    assert got == cur


def test_vote_result_exhaustive() -> None:
    for n in range(1, 6):
        voters = list(range(n))
        # every voter answers yes (1), no (2) or not yet (0); a non-voter always says yes
        for answers in itertools.product((0, 1, 2), repeat=n):
            granted = [v for v, a in zip(voters, answers) if a == 1] + [99]
            rejected = [v for v, a in zip(voters, answers) if a == 2]
            got = vote_result(voters, granted, rejected)
            yes, no = answers.count(1), answers.count(2)
            if yes >= majority_size(n):
                assert got is VoteResult.WON
            elif n - no < majority_size(n):
                assert got is VoteResult.LOST
            else:
                assert got is VoteResult.PENDING


def test_vote_result_empty_voter_set_is_lost() -> None:
    assert vote_result([], [1], []) is VoteResult.LOST


def test_quorum_reached_since_exhaustive() -> None:
    for n in range(1, 6):
        voters = list(range(n))
        for times in itertools.product((-1, 5, 10), repeat=n):
            contact = dict(zip(voters, times))
            fresh = sum(1 for t in times if t >= 10)
            assert quorum_reached_since(contact, voters, 10) is (fresh >= majority_size(n))
