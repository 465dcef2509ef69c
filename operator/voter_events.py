"""The Events of the voter set's changes, observed: every voter added or removed between the
status the last pass stored and the one this pass writes, whoever changed it (the operator's
AddRaftVoter / RemoveRaftVoter, a node's auto-join, another client).

Both sides are what DescribeQuorum reported and the status keeps, so a change made while no
operator ran is told by the next one, once. Pure: the handler posts what this returns.
"""

from __future__ import annotations

from typing import Any

from kraft_operator.actions.base import Outcome

Obj = dict[str, Any]

VOTER_ADDED = "VoterAdded"
VOTER_REMOVED = "VoterRemoved"


def _keys(status: Obj) -> list[tuple[int, str]]:
    return sorted((int(v["id"]), str(v.get("directoryId") or ""))
                  for v in status.get("voters") or [])


def _by(stored: Obj, kind: str, key: tuple[int, str]) -> str:
    initial = {(int(v["id"]), str(v.get("directoryId") or ""))
               for v in stored.get("initialVoters") or []}
    if "voters" not in stored and key in initial:
        return "as formatted (an initial voter)"
    op = stored.get("currentOperation") or {}
    if op.get("type") == kind and op.get("target") == f"{key[0]}:{key[1]}":
        verb = "AddRaftVoter" if kind == "AddingVoter" else "RemoveRaftVoter"
        return f"by the operator ({verb})"
    return "not by this operator (the node's auto-join or another client)"


def voter_set_changes(stored: Obj, written: Obj) -> list[Outcome]:
    """One Event for each voter in `written` but not `stored` and each one the other way.
    Nothing when this pass saw no voters (no quorum answered: the stored set stays)."""
    if "voters" not in written:
        return []
    before, after = _keys(stored), _keys(written)
    now = ", ".join(str(i) for i, _ in after) or "none"
    events = []
    for key in sorted(set(before) - set(after)):
        events.append(Outcome(True, VOTER_REMOVED,
                              f"voter {key[0]}:{key[1]} left the voter set "
                              f"{_by(stored, 'RemovingVoter', key)}; voters now {now}"))
    for key in sorted(set(after) - set(before)):
        events.append(Outcome(True, VOTER_ADDED,
                              f"voter {key[0]}:{key[1]} joined the voter set "
                              f"{_by(stored, 'AddingVoter', key)}; voters now {now}"))
    return events
