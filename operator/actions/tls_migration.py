"""A TLS migration's phase: recorded in status.tls by the status write that comes before
every action (`kraft_operator.planner.tls_migration` decides it), so carrying it out is the
Event that says which phase starts (or that the migration is over)."""

from __future__ import annotations

from kraft_operator.actions.base import Outcome
from kraft_operator.planner import AdvanceTlsMigration


def advance(action: AdvanceTlsMigration) -> Outcome:
    """The phase is on record: its Event (reason TlsMigrationPhase, or TlsMigrationComplete
    at the end)."""
    reason = "TlsMigrationComplete" if action.complete else "TlsMigrationPhase"
    return Outcome(True, reason, action.message)
