"""The claims' owner references follow `storage.onDelete`, against the emulated API: a claim
the quorum made is owned by it exactly while onDelete is Delete (so deleting the KRaftQuorum
does what its spec says now, with no operator running), and a claim it did not make (one an
earlier quorum of the same name kept) is never adopted."""

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

NS = "default"
UID_ANNOTATION = "kraft.dev/quorum-uid"  # the quorum that made a claim


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with serve() as api:
        declare(api.emulator, [f"{models.API_VERSION}/{models.PLURAL}={models.KIND}"])
        cfg = client.Configuration()
        cfg.host = api.url
        yield Kube(client.ApiClient(cfg))


def kept_claim(node_id: int, annotations: dict[str, str]) -> dict[str, Any]:
    """A claim of node `node_id` left by an earlier quorum named kq (Retain: no owner)."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-kq-{node_id}", "namespace": NS,
                         "labels": {"app.kubernetes.io/name": "kraft",
                                    "app.kubernetes.io/instance": "kq",
                                    "app.kubernetes.io/managed-by": "kraft-operator",
                                    models.NODE_ID_LABEL: str(node_id)},
                         "annotations": annotations},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}


async def claims(kube: Kube) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c
            for c in await kube.list("v1", "persistentvolumeclaims", NS)}


def owners(claim: dict[str, Any]) -> list[str]:
    return [r["uid"] for r in claim["metadata"].get("ownerReferences") or []]


async def set_on_delete(kube: Kube, policy: str) -> None:
    await kube.patch(models.API_VERSION, models.PLURAL, NS, "kq",
                     {"spec": {"storage": {"onDelete": policy}}})


async def test_claims_are_owned_exactly_while_on_delete_is_delete(kube: Kube) -> None:
    # node 0's claim kept by an earlier quorum kq (its uid on it), node 1's by one made before
    # claims carried a uid
    await kube.create("v1", "persistentvolumeclaims", NS, kept_claim(0, {
        models.DIRECTORY_ID_ANNOTATION: "AAAAAAAAAAAAAAAAAAAAAQ",
        UID_ANNOTATION: "an-earlier-uid"}))
    await kube.create("v1", "persistentvolumeclaims", NS, kept_claim(1, {
        models.DIRECTORY_ID_ANNOTATION: "AAAAAAAAAAAAAAAAAAAAAg"}))
    obj = await kube.create(models.API_VERSION, models.PLURAL, NS, {
        "apiVersion": models.API_VERSION, "kind": models.KIND,
        "metadata": {"name": "kq", "namespace": NS},
        "spec": {"replicas": 3, "storage": {"onDelete": "Retain"}}})
    uid = obj["metadata"]["uid"]
    reconciler = Reconciler(kube, chain=10)
    await reconciler.reconcile(NS, "kq")
    made = await claims(kube)
    assert set(made) == {"data-kq-0", "data-kq-1", "data-kq-2"}
    assert all(owners(c) == [] for c in made.values())  # Retain: no claim is owned
    kept = {n: made[n]["metadata"]["resourceVersion"] for n in ("data-kq-0", "data-kq-1")}

    await set_on_delete(kube, "Delete")
    await reconciler.reconcile(NS, "kq")
    now = await claims(kube)
    assert owners(now["data-kq-2"]) == [uid]  # the claim it made is owned now
    assert now["data-kq-2"]["metadata"]["annotations"][UID_ANNOTATION] == uid
    assert {n: now[n]["metadata"]["resourceVersion"] for n in kept} == kept  # never adopted

    await set_on_delete(kube, "Retain")
    await reconciler.reconcile(NS, "kq")
    now = await claims(kube)
    assert owners(now["data-kq-2"]) == []  # released: deleting the quorum keeps it
    assert now["data-kq-2"]["metadata"]["annotations"][UID_ANNOTATION] == uid
    assert {n: now[n]["metadata"]["resourceVersion"] for n in kept} == kept
