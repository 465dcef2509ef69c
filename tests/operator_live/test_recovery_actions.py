"""The quorum-recovery executor against the emulated Kubernetes API: ForceSingleVoter stops an
ordinary survivor pod first, then creates the recovery pod (a one-shot init container running
`kraft recover force-single-voter` before `kraft run`), leaves an existing one alone, and
reports its init container's failure with what the exit code means."""

from __future__ import annotations

from kraft_operator import models, render
from kraft_operator.actions import execute
from kraft_operator.kube import Kube, NotFound
from kraft_operator.planner import CreatePod, ForceSingleVoter, FormatMode, pod_spec_hash

from tests.operator_live.test_actions import BODY, D0, env, kube  # noqa: F401 (fixture)


async def test_force_single_voter_stops_the_survivor_then_runs_the_recovery_once(
        kube: Kube) -> None:  # noqa: F811
    e = env(kube)
    ref = render.QuorumRef.from_body(BODY)
    ordinary = CreatePod(0, D0, FormatMode.JOIN, True, pod_spec_hash(ref.spec))
    assert (await execute(ordinary, e)).done
    action = ForceSingleVoter(0, D0)
    out = await execute(action, e)
    assert out is not None and not out.done and out.reason == "StoppingSurvivor", out
    try:
        gone = await kube.get("v1", "pods", "default", "kq-0")
    except NotFound:
        gone = None
    assert gone is None or gone["metadata"].get("deletionTimestamp")
    if gone is not None:
        await kube.delete("v1", "pods", "default", "kq-0", grace_period_s=0)
    out = await execute(action, e)
    assert out is not None and out.done and out.reason == "ForcingSingleVoter", out
    assert out.warning and "lost" in out.message and f"0:{D0}" in out.message
    pod = await kube.get("v1", "pods", "default", "kq-0")
    notes = pod["metadata"]["annotations"]
    assert notes[render.RECOVER_FROM_ANNOTATION] == D0
    assert notes[models.POD_SPEC_HASH_ANNOTATION] != pod_spec_hash(ref.spec)
    assert notes[models.AUTO_JOIN_ANNOTATION] == "false"
    inits = pod["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["format", render.RECOVERY_CONTAINER]
    script = inits[1]["command"][-1]
    assert "kraft recover force-single-voter --config /etc/kraft/server-0.properties " \
        f"--directory-id {D0} --yes --json" in script
    assert "/var/lib/kraft/.recovered-" in script  # one run per recovery, even on a re-run
    # run again: the recovery pod is left alone
    out = await execute(action, e)
    assert out is not None and out.done and out.reason == "RecoveryPodRunning", out
    assert (await kube.get("v1", "pods", "default", "kq-0"))["metadata"]["uid"] == \
        pod["metadata"]["uid"]
    # its init container failed: the exit code's meaning is reported
    await kube.patch("v1", "pods", "default", "kq-0", {"status": {"initContainerStatuses": [
        {"name": "format", "state": {"terminated": {"exitCode": 0}}},
        {"name": render.RECOVERY_CONTAINER,
         "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 3}}}]}}, subresource="status")
    out = await execute(action, e)
    assert out is not None and not out.done and out.reason == "RecoveryFailed", out
    assert out.warning and "another incarnation" in out.message and "exited with 3" in out.message
