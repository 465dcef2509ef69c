"""Quorum recovery: ForceSingleVoter and ClearRecoveryAnnotation.

Forcing a surviving replica's voter set to itself alone needs a recovery command in `kraft`
that this build does not have; the step is reported (a Warning Event naming the replica)
instead of being pretended. Clearing the annotation removes it from the resource once a
quorum answers, so it cannot fire a second time.
"""

from __future__ import annotations

from kraft_operator import models
from kraft_operator.actions.base import Env, Outcome
from kraft_operator.planner import ForceSingleVoter


def force_single_voter(action: ForceSingleVoter) -> Outcome:
    return Outcome(False, "RecoveryNotAvailable",
                   f"forcing the voter set to {action.node_id}:{action.directory_id} alone "
                   "needs a kraft recovery command this build does not have; recover by hand",
                   warning=True)


async def clear_annotation(env: Env) -> Outcome:
    await env.kube.patch(models.API_VERSION, models.PLURAL, env.ref.namespace, env.ref.name,
                         {"metadata": {"annotations": {models.RECOVER_ANNOTATION: None}}})
    return Outcome(True, "RecoveryAnnotationCleared",
                   f"the quorum answers; {models.RECOVER_ANNOTATION} removed")
