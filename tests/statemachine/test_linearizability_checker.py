"""The WGL linearizability checker accepts linearizable KV histories and rejects the others."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.linearizability import CAS, DELETE, GET, PUT, Op, check_history


def test_sequential_history_is_linearizable() -> None:
    h = [
        Op(1, PUT, "k", 0, 1, value=b"a"),
        Op(1, GET, "k", 2, 3, output=b"a"),
        Op(1, DELETE, "k", 4, 5),
        Op(1, GET, "k", 6, 7, output=None),
    ]
    assert check_history(h).ok


def test_stale_read_after_acknowledged_write_is_rejected() -> None:
    # the write of b"2" returned at t=3; a read called at t=4 still sees b"1"
    h = [
        Op(1, PUT, "k", 0, 1, value=b"1"),
        Op(1, PUT, "k", 2, 3, value=b"2"),
        Op(2, GET, "k", 4, 5, output=b"1"),
    ]
    result = check_history(h)
    assert not result.ok
    assert result.key == "k"


def test_concurrent_read_may_see_either_value() -> None:
    for seen in (b"1", b"2"):
        h = [
            Op(1, PUT, "k", 0, 1, value=b"1"),
            Op(1, PUT, "k", 2, 6, value=b"2"),
            Op(2, GET, "k", 3, 4, output=seen),
        ]
        assert check_history(h).ok


def test_reads_going_back_in_time_are_rejected() -> None:
    # both writes overlap the reads, but once a read saw b"2" a later read cannot see b"1"
    h = [
        Op(1, PUT, "k", 0, 10, value=b"1"),
        Op(2, PUT, "k", 0, 10, value=b"2"),
        Op(3, GET, "k", 1, 2, output=b"1"),
        Op(3, GET, "k", 3, 4, output=b"2"),
        Op(3, GET, "k", 5, 6, output=b"1"),
    ]
    assert not check_history(h).ok


def test_value_never_written_is_rejected() -> None:
    assert not check_history([Op(1, GET, "k", 0, 1, output=b"ghost")]).ok


def test_cas_outcomes_must_match_the_register() -> None:
    ok = [
        Op(1, PUT, "k", 0, 1, value=b"a"),
        Op(1, CAS, "k", 2, 3, expected=b"a", value=b"b", output=True),
        Op(1, CAS, "k", 4, 5, expected=b"a", value=b"c", output=False),
        Op(1, GET, "k", 6, 7, output=b"b"),
    ]
    assert check_history(ok).ok
    bad = [*ok[:2], Op(1, CAS, "k", 4, 5, expected=b"b", value=b"c", output=False)]
    assert not check_history(bad).ok


def test_unknown_outcome_write_may_or_may_not_have_happened() -> None:
    lost = [Op(1, PUT, "k", 0, None, value=b"x"), Op(2, GET, "k", 5, 6, output=None)]
    applied = [Op(1, PUT, "k", 0, None, value=b"x"), Op(2, GET, "k", 5, 6, output=b"x")]
    assert check_history(lost).ok
    assert check_history(applied).ok
    # but once it was seen, it cannot disappear again
    flicker = [*applied, Op(2, GET, "k", 7, 8, output=None)]
    assert not check_history(flicker).ok


def test_keys_are_checked_independently() -> None:
    h = [
        Op(1, PUT, "a", 0, 1, value=b"1"),
        Op(1, PUT, "b", 0, 1, value=b"2"),
        Op(1, GET, "a", 2, 3, output=b"1"),
        Op(1, GET, "b", 2, 3, output=b"1"),
    ]
    result = check_history(h)
    assert not result.ok and result.key == "b"


def _simulate(seed: int, n_ops: int, n_clients: int) -> list[Op]:
    """A linearizable history by construction: each op takes effect at a point in its interval."""
    rng = random.Random(seed)
    state: bytes | None = None
    events = []
    t = 0.0
    for i in range(n_ops):
        t += rng.random()
        kind = rng.choice([PUT, GET, DELETE, CAS])
        value = bytes([rng.randrange(3)])
        expected = rng.choice([None, bytes([rng.randrange(3)])])
        if kind == PUT:
            state, out = value, None
        elif kind == GET:
            out = state
        elif kind == DELETE:
            state, out = None, None
        else:
            out = state == expected
            if out:
                state = value
        call = t - rng.random() * 3
        ret = t + rng.random() * 3
        if kind != GET and rng.random() < 0.1:
            ret = None  # the client timed out: unknown outcome
        events.append(Op(i % n_clients, kind, "k", call, ret, value=value, expected=expected,
                         output=out))
    return events


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_histories_linearizable_by_construction_are_accepted(seed: int) -> None:
    assert check_history(_simulate(seed, 40, 5)).ok


def test_corrupted_histories_are_mostly_rejected() -> None:
    # flipping one read's output to an impossible value must always be caught
    rejected = 0
    for seed in range(50):
        h = _simulate(seed, 30, 4)
        reads = [i for i, op in enumerate(h) if op.kind == GET]
        if not reads:
            continue
        i = reads[0]
        h[i] = Op(h[i].client, GET, "k", h[i].call, h[i].ret, output=b"never-written")
        assert not check_history(h).ok
        rejected += 1
    assert rejected > 40
