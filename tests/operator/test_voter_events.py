"""Every change of the voter set is an Event, whoever made it: told from the status the last
pass stored and the one this pass writes (both from DescribeQuorum)."""

from __future__ import annotations

from kraft_operator.voter_events import VOTER_ADDED, VOTER_REMOVED, voter_set_changes

A, B, C, D = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw", \
    "AAAAAAAAAAAAAAAAAAAABA"


def voters(*keys: tuple[int, str]) -> list[dict[str, object]]:
    return [{"id": i, "directoryId": d, "caughtUp": True} for i, d in keys]


def test_a_voter_added_by_auto_join_is_an_event() -> None:
    stored = {"voters": voters((0, A), (1, B), (2, C))}
    [event] = voter_set_changes(stored, {"voters": voters((0, A), (1, B), (2, C), (3, D))})
    assert event.reason == VOTER_ADDED and not event.warning
    assert f"voter 3:{D} joined" in event.message and "auto-join" in event.message
    assert "voters now 0, 1, 2, 3" in event.message


def test_a_wiped_disk_is_a_removal_and_an_add() -> None:
    stored = {"voters": voters((0, A), (1, B), (2, C))}
    events = voter_set_changes(stored, {"voters": voters((0, A), (1, D), (2, C))})
    assert [(e.reason, e.message.split()[1]) for e in events] == [
        (VOTER_REMOVED, f"1:{B}"), (VOTER_ADDED, f"1:{D}")]


def test_the_operators_own_change_is_named_as_its() -> None:
    stored = {"voters": voters((0, A), (1, B), (2, C)),
              "currentOperation": {"type": "RemovingVoter", "target": f"2:{C}"}}
    [event] = voter_set_changes(stored, {"voters": voters((0, A), (1, B))})
    assert event.reason == VOTER_REMOVED and "by the operator (RemoveRaftVoter)" in event.message


def test_nothing_when_unchanged_or_when_no_quorum_answered() -> None:
    stored = {"voters": voters((0, A), (1, B), (2, C))}
    assert voter_set_changes(stored, {"voters": voters((2, C), (1, B), (0, A))}) == []
    assert voter_set_changes(stored, {"leader": None}) == []  # no answer: not a removal


def test_a_new_quorums_voters_are_its_initial_ones() -> None:
    stored = {"initialVoters": [{"id": 0, "directoryId": A}]}
    [event] = voter_set_changes(stored, {"voters": voters((0, A))})
    assert event.reason == VOTER_ADDED and "as formatted" in event.message
