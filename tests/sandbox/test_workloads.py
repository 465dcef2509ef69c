"""Strategic merge patches and the Deployment controller: `kubectl set env` changes one
container and keeps the rest, a Deployment keeps its replicas (replacing a deleted pod),
rolls to a new template, scales, and takes its pods with it when deleted."""

from __future__ import annotations

import json
import sys

from kraft_sandbox.handle import SandboxHandle
from kraft_sandbox.strategic import strategic_merge

from tests.sandbox.conftest import wait_for


def test_strategic_merge_merges_keyed_lists() -> None:
    pod = {"spec": {"containers": [
        {"name": "a", "image": "x", "command": ["run"], "env": [{"name": "K", "value": "1"}],
         "ports": [{"containerPort": 80}]},
        {"name": "b", "image": "y"}],
        "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"key": "t"}]},
        "metadata": {"finalizers": ["f1"], "labels": {"l": "1", "m": "2"}}}
    patched = strategic_merge(pod, {
        "metadata": {"labels": {"m": None, "n": "3"}, "finalizers": ["f2"]},
        "spec": {"containers": [{"name": "a", "env": [{"name": "K2", "value": "2"}]},
                                {"name": "b", "$patch": "delete"},
                                {"name": "c", "image": "z"}],
                 "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
                 "tolerations": [{"key": "u"}]}})
    a = next(c for c in patched["spec"]["containers"] if c["name"] == "a")
    assert [c["name"] for c in patched["spec"]["containers"]] == ["c", "a"]
    assert a["command"] == ["run"] and a["image"] == "x" and a["ports"] == [
        {"containerPort": 80}]
    assert a["env"] == [{"name": "K", "value": "1"}, {"name": "K2", "value": "2"}]
    assert patched["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]
    assert patched["spec"]["tolerations"] == [{"key": "u"}]  # no merge key: replaced
    assert patched["metadata"] == {"finalizers": ["f1", "f2"], "labels": {"l": "1", "n": "3"}}
    assert pod["spec"]["containers"][0]["env"] == [{"name": "K", "value": "1"}]  # untouched
    gone = strategic_merge(patched, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]},
                                     "spec": {"volumes": [{"name": "v", "$patch": "delete"}]}})
    assert gone["metadata"]["finalizers"] == ["f2"] and gone["spec"]["volumes"] == []


def deployment(replicas: int = 2) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "c", "image": "x", "command": [
                             "dumb-init", "--", sys.executable, "-c",
                             "import time; time.sleep(3600)"]}]}}}}


def pods(sb: SandboxHandle) -> list[dict]:
    return list(json.loads(sb.kubectl("get", "pods", "-l", "app=web", "-o",
                                      "json").stdout)["items"])


def test_deployment_keeps_rolls_scales_and_cascades(sandbox: SandboxHandle) -> None:
    sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(deployment()))
    sandbox.kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    first = pods(sandbox)
    assert len(first) == 2
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "Deployment" for p in first)
    # the init wrapper of the image ran the command after `--`
    assert all(c["state"].get("running") for p in first
               for c in p["status"]["containerStatuses"])
    sandbox.kubectl("delete", "pod", first[0]["metadata"]["name"])
    wait_for("a replacement pod", lambda: len(names := {p["metadata"]["name"] for p in pods(
        sandbox) if not p["metadata"].get("deletionTimestamp")}) == 2
        and first[0]["metadata"]["name"] not in names)
    sandbox.kubectl("set", "env", "deployment/web", "COLOUR=blue")
    sandbox.kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    spec = json.loads(sandbox.kubectl("get", "deployment", "web", "-o", "json").stdout)[
        "spec"]["template"]["spec"]["containers"][0]
    assert spec["command"][:2] == ["dumb-init", "--"]  # kept by the strategic merge
    assert spec["env"] == [{"name": "COLOUR", "value": "blue"}]
    rolled = wait_for("two pods of the new template", lambda: (ps := [
        p for p in pods(sandbox) if not p["metadata"].get("deletionTimestamp")])
        and len(ps) == 2 and all(p["spec"]["containers"][0].get("env") for p in ps) and ps)
    assert {p["metadata"]["labels"]["pod-template-hash"] for p in rolled} != {
        p["metadata"]["labels"]["pod-template-hash"] for p in first}
    assert "scaled" in sandbox.kubectl("scale", "deployment/web", "--replicas=1").stdout
    wait_for("one pod", lambda: len([p for p in pods(sandbox)
                                     if not p["metadata"].get("deletionTimestamp")]) == 1)
    status = wait_for("the status caught up", lambda: (st := json.loads(sandbox.kubectl(
        "get", "deployment", "web", "-o", "json").stdout)["status"]).get("replicas") == 1
        and st)
    assert status["observedGeneration"] == 3 and status["readyReplicas"] == 1
    sandbox.kubectl("delete", "deployment", "web")
    wait_for("no pods", lambda: pods(sandbox) == [])
