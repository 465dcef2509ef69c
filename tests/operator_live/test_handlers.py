"""One reconcile pass against the emulated API (no kraft pods): a spec the models refuse and
a spec.config the ServerProperties model refuses are reported as conditions with a Warning
Event, and nothing is created; a valid new quorum gets its ids recorded and its standing
objects."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kraft_operator import models
from kraft_operator.handlers import Reconciler
from kraft_operator.kube import Kube
from kraft_operator.sandbox.apiserver import serve
from kraft_operator.sandbox.emulator import declare
from kubernetes import client


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with serve() as api:
        # served without the CRD's schema, so a spec the models refuse can be stored
        declare(api.emulator, [f"{models.API_VERSION}/{models.PLURAL}={models.KIND}"])
        cfg = client.Configuration()
        cfg.host = api.url
        yield Kube(client.ApiClient(cfg))


async def make(kube: Kube, spec: dict[str, Any]) -> dict[str, Any]:
    return await kube.create(models.API_VERSION, models.PLURAL, "default", {
        "apiVersion": models.API_VERSION, "kind": models.KIND,
        "metadata": {"name": "kq", "namespace": "default"}, "spec": spec})


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


async def untouched(kube: Kube) -> None:
    for plural in ("pods", "persistentvolumeclaims", "services", "configmaps"):
        assert await kube.list("v1", plural, "default") == [], plural


async def test_a_spec_the_models_refuse_is_a_condition_and_nothing_else(kube: Kube) -> None:
    await make(kube, {"replicas": 0})
    assert await Reconciler(kube).reconcile("default", "kq") == "InvalidSpec"
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    degraded = condition(obj, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert "spec.replicas" in degraded["message"]
    assert condition(obj, "Ready")["status"] == "False"
    events = await kube.list("v1", "events", "default")
    assert [(e["reason"], e["type"]) for e in events] == [("InvalidSpec", "Warning")]
    await untouched(kube)


async def test_an_unknown_config_key_is_a_condition_and_nothing_else(kube: Kube) -> None:
    await make(kube, {"replicas": 3, "config": {"controller.quorum.fetch.timeout.msx": "1"}})
    reconciler = Reconciler(kube)
    assert await reconciler.reconcile("default", "kq") == "ReportDegraded"
    assert await reconciler.reconcile("default", "kq") == "ReportDegraded"
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    degraded = condition(obj, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidConfig")
    assert "controller.quorum.fetch.timeout.msx" in degraded["message"]
    assert "did you mean" in degraded["message"]
    assert "clusterId" not in obj["status"]
    events = await kube.list("v1", "events", "default")
    assert [e["reason"] for e in events] == ["InvalidConfig"]  # once, not every pass
    await untouched(kube)


async def test_a_new_quorum_records_its_ids_and_gets_its_standing_objects(kube: Kube) -> None:
    await make(kube, {"replicas": 3})
    reconciler = Reconciler(kube)
    assert await reconciler.reconcile("default", "kq") == "RecordCluster"
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    status = obj["status"]
    assert len(status["clusterId"]) == 22 and len(status["initialVoters"]) == 3
    assert condition(obj, "Progressing")["reason"] == "Formatting"
    assert status["selector"] == ("app.kubernetes.io/name=kraft,app.kubernetes.io/instance=kq,"
                                  "app.kubernetes.io/managed-by=kraft-operator")
    names = {s["metadata"]["name"] for s in await kube.list("v1", "services", "default")}
    assert names == {"kq", "kq-client"}
    assert await reconciler.reconcile("default", "kq") == "CreatePVC"
    claims = await kube.list("v1", "persistentvolumeclaims", "default")
    first = status["initialVoters"][0]
    assert claims[0]["metadata"]["annotations"][models.DIRECTORY_ID_ANNOTATION] == \
        first["directoryId"]
    since = condition(obj, "Progressing")["lastTransitionTime"]
    again = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    assert condition(again, "Progressing")["lastTransitionTime"] == since
    assert sorted(e["reason"] for e in await kube.list("v1", "events", "default")) == [
        "CreatedVolume", "RecordedCluster"]


async def test_passes_chain_while_actions_are_carried_out(kube: Kube) -> None:
    await make(kube, {"replicas": 3})
    assert await Reconciler(kube, chain=10).reconcile("default", "kq") == "Wait"
    reasons = sorted(e["reason"] for e in await kube.list("v1", "events", "default"))
    assert reasons == ["CreatedPod"] * 3 + ["CreatedVolume"] * 3 + ["RecordedCluster"]
    pods = await kube.list("v1", "pods", "default")
    assert all("--initial-controllers" in p["spec"]["initContainers"][0]["command"]
               for p in pods)
