"""The executors of the planner's actions: one module per operation, each idempotent.

`execute(action, env)` runs one action and says what happened (`Outcome`: the Event reason
and message, whether it is done, whether to try again). An executor never decides anything
the planner did not: it carries the step out, and when the world has already moved on (the
object exists, the voter was added by an earlier attempt whose answer was lost) it reports
the step as done, because the next reconcile re-observes anyway.
"""

from __future__ import annotations

from kraft_operator.actions.base import Env, Outcome
from kraft_operator.actions.dispatch import execute

__all__ = ["Env", "Outcome", "execute"]
