"""The executors against the emulated Kubernetes API: each is idempotent (run twice, the
second finds it done), and the standing objects converge to the rendering."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kraft_operator import models, render
from kraft_operator.actions import Env, execute, records, standing
from kraft_operator.kube import Kube
from kraft_operator.observe import Correction
from kraft_operator.observed import Observed, PodState
from kraft_operator.planner import (
    ClearRecoveryAnnotation,
    CreatePod,
    CreatePVC,
    DeletePod,
    FormatMode,
    ResignLeader,
    Wait,
)
from kraft_sandbox.apiserver import serve
from kubernetes import client

D0 = "AAAAAAAAAAAAAAAAAAAAAQ"
BODY = {"apiVersion": models.API_VERSION, "kind": models.KIND,
        "metadata": {"name": "kq", "namespace": "default", "uid": "u-1",
                     "annotations": {models.RECOVER_ANNOTATION: "0"}},
        "spec": {"replicas": 3}}


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with serve() as api:
        cfg = client.Configuration()
        cfg.host = api.url
        yield Kube(client.ApiClient(cfg))


def env(kube: Kube, observed: Observed | None = None) -> Env:
    ref = render.QuorumRef.from_body(BODY)
    return Env(kube, ref, BODY, observed or Observed(generation=1, cluster_id="QF8mVzcRaw30atEJTDbDUQ"))


async def test_create_pvc_and_pod_twice_is_done_once(kube: Kube) -> None:
    e = env(kube)
    for _ in range(2):
        out = await execute(CreatePVC(0, D0), e)
        assert out is not None and out.done, out
    claim = await kube.get("v1", "persistentvolumeclaims", "default", "data-kq-0")
    assert claim["metadata"]["annotations"][models.DIRECTORY_ID_ANNOTATION] == D0
    action = CreatePod(0, D0, FormatMode.JOIN, True, "h")
    for _ in range(2):
        out = await execute(action, e)
        assert out is not None and out.done, out
    pod = await kube.get("v1", "pods", "default", "kq-0")
    assert pod["metadata"]["labels"][models.NODE_ID_LABEL] == "0"
    out = await execute(DeletePod(0, "kq-0", "Rolling", force=True), e)
    assert out is not None and out.done and out.reason == "DeletedPodRolling"
    out = await execute(DeletePod(0, "kq-0", "Rolling", force=True), e)  # already gone
    assert out is not None and out.done
    assert await execute(Wait("Settling"), e) is None


async def test_a_pod_needs_a_recorded_cluster_id(kube: Kube) -> None:
    out = await execute(CreatePod(0, D0, FormatMode.JOIN, True, "h"),
                        env(kube, Observed(generation=1)))
    assert out is not None and not out.done and out.reason == "NoClusterId"
    assert await kube.list("v1", "pods", "default") == []


async def test_resign_is_refused_when_stopping_the_leader_loses_the_majority(kube: Kube) -> None:
    from kraft_operator.observed import QuorumInfo, ReplicaInfo

    voters = tuple(ReplicaInfo(i, D0, caught_up=i == 0) for i in range(3))
    pods = tuple(PodState(f"kq-{i}", i, D0) for i in range(3))
    observed = Observed(generation=1, pods=pods, quorum=QuorumInfo(0, 1, 5, 1, voters))
    out = await execute(ResignLeader(0), env(kube, observed))
    assert out is not None and not out.done and out.warning


async def test_standing_objects_converge_and_then_stay_put(kube: Kube) -> None:
    ref = render.QuorumRef.from_body(BODY)
    first = await standing.ensure(kube, ref, [])
    assert sorted(first) == ["created ConfigMap kq-config", "created NetworkPolicy kq",
                             "created PodDisruptionBudget kq", "created Service kq",
                             "created Service kq-client"]
    service = await kube.get("v1", "services", "default", "kq")
    assert {p["protocol"] for p in service["spec"]["ports"]} == {"TCP"}  # the server's default
    assert await standing.ensure(kube, ref, []) == []  # which is no difference
    assert await standing.ensure(kube, ref, [4]) == ["updated ConfigMap kq-config"]
    cm = await kube.get("v1", "configmaps", "default", "kq-config")
    assert "server-4.properties" in cm["data"]
    await standing.ensure(kube, ref, [])
    cm = await kube.get("v1", "configmaps", "default", "kq-config")
    assert "server-4.properties" not in cm["data"]  # a key no longer rendered goes
    body = {**BODY, "spec": {"replicas": 5, "podDisruptionBudget": {"enabled": False}}}
    changed = await standing.ensure(kube, render.QuorumRef.from_body(body), [])
    assert "deleted PodDisruptionBudget kq" in changed


async def test_records_and_the_recovery_annotation(kube: Kube) -> None:
    await kube.create("apiextensions.k8s.io/v1",
                      "customresourcedefinitions", None, _crd())
    await kube.create(models.API_VERSION, models.PLURAL, "default",
                      {k: v for k, v in BODY.items() if k != "status"})
    await execute(CreatePVC(0, D0), env(kube))
    out = await records.apply(kube, "default", Correction("pvc", "data-kq-0", 0, D0, "X" * 22,
                                                           replaced=True))
    assert out is not None and out.reason == "DiskReplaced" and out.warning
    claim = await kube.get("v1", "persistentvolumeclaims", "default", "data-kq-0")
    assert claim["metadata"]["annotations"][models.DIRECTORY_ID_ANNOTATION] == "X" * 22
    assert await records.apply(kube, "default", Correction("pod", "gone", 0, None, D0,
                                                           replaced=False)) is None
    out = await execute(ClearRecoveryAnnotation(), env(kube))
    assert out is not None and out.done
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    assert models.RECOVER_ANNOTATION not in (obj["metadata"].get("annotations") or {})


def _crd() -> dict:
    import yaml
    from kraft_operator import crdgen

    return dict(yaml.safe_load(crdgen.render()))
