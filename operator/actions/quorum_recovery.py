"""Quorum recovery: ForceSingleVoter and ClearRecoveryAnnotation.

ForceSingleVoter works on the stopped survivor (the planner has deleted every pod before it):
the survivor's pod is re-created with a one-shot init container that runs `kraft recover
force-single-voter --directory-id ID --yes --json` before `kraft run`, so the node starts as
the only voter and elects itself. Each step is idempotent: a recovery pod that exists already
is left alone (its init container's failure, if any, is reported with what the exit code
means), an ordinary pod of the survivor is stopped first. Clearing the annotation removes it
from the resource once a quorum answers, so it cannot fire a second time.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kraft_operator import models, render
from kraft_operator.actions.base import Env, Outcome
from kraft_operator.kube import Conflict, NotFound
from kraft_operator.planner import ForceSingleVoter

# `kraft recover force-single-voter`'s exit codes (kraft/cli/recover.py)
EXIT_MEANINGS = {
    1: "failure (not formatted, corruption or I/O)",
    2: "usage or configuration error",
    3: "the volume holds another incarnation than the one named",
    4: "not confirmed",
    5: "the metadata directory is locked: a node runs on it",
    6: "a static quorum (kraft.version 0), which cannot be rewritten",
}


def _loss_warning(action: ForceSingleVoter) -> str:
    return (f"forcing the voter set to {action.node_id}:{action.directory_id} alone "
            f"(`kraft recover force-single-voter` before its `kraft run`): every record of its "
            "log becomes committed, writes never acknowledged included; records the other "
            f"replicas held beyond node {action.node_id}'s log are lost, acknowledged ones "
            "included; the other nodes re-join on new volumes")


def recovery_failure(pod: dict[str, Any]) -> str | None:
    """What went wrong in a recovery pod's init container (None while it runs or is done)."""
    for st in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if st.get("name") != render.RECOVERY_CONTAINER:
            continue
        for state in (st.get("state") or {}, st.get("lastState") or {}):
            done = state.get("terminated") or {}
            code = done.get("exitCode")
            if code:
                meaning = EXIT_MEANINGS.get(int(code), "unexpected exit code")
                return (f"`kraft recover force-single-voter` exited with {code}: {meaning} "
                        f"(kubectl logs {pod['metadata']['name']} -c "
                        f"{render.RECOVERY_CONTAINER})")
    return None


async def force_single_voter(action: ForceSingleVoter, env: Env) -> Outcome:
    ref = env.ref
    name = ref.pod_name(action.node_id)
    try:
        existing: dict[str, Any] | None = await env.kube.get("v1", "pods", ref.namespace, name)
    except NotFound:
        existing = None
    if existing is not None:
        meta = existing.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return Outcome(False, "PodStillStopping", f"pod {name} is still stopping")
        notes = meta.get("annotations") or {}
        if notes.get(render.RECOVER_FROM_ANNOTATION) != action.directory_id:
            with contextlib.suppress(NotFound):
                await env.kube.delete("v1", "pods", ref.namespace, name)
            return Outcome(False, "StoppingSurvivor",
                           f"pod {name} is stopped first: the recovery rewrites its log offline")
        failed = recovery_failure(existing)
        if failed is not None:
            return Outcome(False, "RecoveryFailed", failed, warning=True)
        return Outcome(True, "RecoveryPodRunning",
                       f"pod {name} runs the recovery of {action.node_id}:{action.directory_id}; "
                       "waiting for it to lead alone")
    cluster_id = env.observed.cluster_id
    if not cluster_id:
        return Outcome(False, "NoClusterId", "no cluster id is recorded in status yet")
    token = f"{int(env.observed.now)}"
    try:
        await env.kube.create("v1", "pods", ref.namespace, render.recovery_pod(
            ref, action.node_id, action.directory_id, cluster_id, token))
    except Conflict:
        return Outcome(False, "PodStillStopping", f"pod {name} exists again; checked next time")
    return Outcome(True, "ForcingSingleVoter", _loss_warning(action), warning=True)


async def clear_annotation(env: Env) -> Outcome:
    await env.kube.patch(models.API_VERSION, models.PLURAL, env.ref.namespace, env.ref.name,
                         {"metadata": {"annotations": {models.RECOVER_ANNOTATION: None}}})
    return Outcome(True, "RecoveryAnnotationCleared",
                   f"the quorum answers; {models.RECOVER_ANNOTATION} removed")
