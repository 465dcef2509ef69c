"""A cluster id set after creation, through the real reconciler against the emulated API
(no kraft pods): a different one is reported as Degraded=ClusterIdMismatch with one Warning
Event and nothing is created or changed; the quorum's own id pinned later is accepted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kraft_operator import models
from kraft_operator.handlers import Reconciler
from kraft_operator.kube import Kube
from kraft_sandbox.apiserver import serve
from kraft_sandbox.emulator import declare
from kubernetes import client

OTHER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with serve() as api:
        declare(api.emulator, [f"{models.API_VERSION}/{models.PLURAL}={models.KIND}"])
        cfg = client.Configuration()
        cfg.host = api.url
        yield Kube(client.ApiClient(cfg))


async def quorum(kube: Kube) -> dict[str, Any]:
    return await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


async def owned(kube: Kube) -> dict[str, list[tuple[str, str]]]:
    """Every pod and claim, by name and resourceVersion."""
    return {plural: sorted((o["metadata"]["name"], o["metadata"]["resourceVersion"])
                           for o in await kube.list("v1", plural, "default"))
            for plural in ("pods", "persistentvolumeclaims")}


async def test_a_cluster_id_set_after_creation_must_be_the_quorums(kube: Kube) -> None:
    await kube.create(models.API_VERSION, models.PLURAL, "default", {
        "apiVersion": models.API_VERSION, "kind": models.KIND,
        "metadata": {"name": "kq", "namespace": "default"}, "spec": {"replicas": 3}})
    # one operator (one identity: the holder of the object's claim), a pass at a time first
    reconciler = Reconciler(kube, identity="op", chain=10)
    assert await Reconciler(kube, identity="op").reconcile("default", "kq") == "RecordCluster"
    formatted = (await quorum(kube))["status"]["clusterId"]
    assert formatted != OTHER_ID
    before = await owned(kube)

    await kube.patch(models.API_VERSION, models.PLURAL, "default", "kq",
                     {"spec": {"clusterId": OTHER_ID}})
    for _ in range(3):
        assert await reconciler.reconcile("default", "kq") == "ReportDegraded"
    obj = await quorum(kube)
    degraded = condition(obj, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ClusterIdMismatch")
    assert OTHER_ID in degraded["message"] and formatted in degraded["message"]
    assert f"until spec.clusterId is set to {formatted}" in degraded["message"]
    assert condition(obj, "Ready")["status"] == "False"
    assert obj["status"]["clusterId"] == formatted
    assert await owned(kube) == before  # nothing created, nothing changed
    warnings = [e for e in await kube.list("v1", "events", "default")
                if e["reason"] == "ClusterIdMismatch"]
    assert [e["type"] for e in warnings] == ["Warning"]  # once, not every pass
    assert OTHER_ID in warnings[0]["message"]

    # A GitOps source pinning the quorum's own id: accepted, formatting goes on with it.
    await kube.patch(models.API_VERSION, models.PLURAL, "default", "kq",
                     {"spec": {"clusterId": formatted}})
    assert await reconciler.reconcile("default", "kq") == "Wait"
    obj = await quorum(kube)
    assert condition(obj, "Degraded")["status"] == "False"
    pods = await kube.list("v1", "pods", "default")
    assert len(pods) == 3
    for pod in pods:
        command = pod["spec"]["initContainers"][0]["command"]
        assert command[command.index("--cluster-id") + 1] == formatted
