"""Actions that only write status or report: RecordCluster, ReportDegraded."""

from __future__ import annotations

from kraft_operator.actions.base import Outcome
from kraft_operator.planner import RecordCluster, ReportDegraded


def record_cluster(action: RecordCluster) -> Outcome:
    """The ids are in the status the handler writes before any action runs."""
    voters = ", ".join(f"{n}:{d}" for n, d in action.initial_voters)
    return Outcome(True, "RecordedCluster",
                   f"new quorum: cluster id {action.cluster_id}, initial voters {voters}")


def degraded(action: ReportDegraded) -> Outcome:
    return Outcome(False, action.reason, action.message, warning=True)
