"""One operator acts on a KRaftQuorum at a time, whatever Lease elected it: two Reconcilers
(two operators with Leases of their own) against the emulated API, with clocks the test
moves. The first pass takes the object's claim Lease; the other operator's pass says so (a log
line, one Warning Event, the condition OperatorConflict) and touches nothing else; the two
never fight over the status; a claim released on a clean stop, or not renewed for its
duration as the taker's clock measures it, is taken over."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kraft_operator import models
from kraft_operator.claims import Claims, lease_name
from kraft_operator.handlers import CLAIMED_ELSEWHERE, CONFLICT, Reconciler
from kraft_operator.kube import Kube
from kraft_sandbox.apiserver import serve
from kraft_sandbox.emulator import declare
from kubernetes import client

NS = "default"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with serve() as api:
        cfg = client.Configuration()
        cfg.host = api.url
        declare(api.emulator, [f"{models.API_VERSION}/{models.PLURAL}={models.KIND}"])
        yield Kube(client.ApiClient(cfg))


def operator(kube: Kube, identity: str, clock: Clock) -> Reconciler:
    claims = Claims(kube, identity, lease_duration_s=15, renew_deadline_s=10,
                    retry_period_s=2, clock=clock)
    return Reconciler(kube, identity=identity, claims=claims)


async def quorum(kube: Kube) -> dict[str, Any]:
    return await kube.get(models.API_VERSION, models.PLURAL, NS, "kq")


def conflict(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == CONFLICT), None)


async def children(kube: Kube) -> dict[str, list[str]]:
    """Every object of the quorum's, by kind, with its resourceVersion."""
    out = {}
    for api, plural in (("v1", "pods"), ("v1", "persistentvolumeclaims"), ("v1", "services"),
                        ("v1", "configmaps"), ("policy/v1", "poddisruptionbudgets")):
        out[plural] = sorted(f"{o['metadata']['name']}@{o['metadata']['resourceVersion']}"
                             for o in await kube.list(api, plural, NS))
    return out


async def refusals(kube: Kube) -> list[dict[str, Any]]:
    return [e for e in await kube.list("v1", "events", NS) if e["reason"] == CLAIMED_ELSEWHERE]


async def test_the_second_operator_says_so_touches_nothing_and_never_fights(
        kube: Kube, caplog: pytest.LogCaptureFixture) -> None:
    await kube.create(models.API_VERSION, models.PLURAL, NS, {
        "apiVersion": models.API_VERSION, "kind": models.KIND,
        "metadata": {"name": "kq", "namespace": NS}, "spec": {"replicas": 3}})
    a, b = operator(kube, "op-a", Clock()), operator(kube, "op-b", Clock())
    assert await a.reconcile(NS, "kq") == "RecordCluster"
    lease = await kube.get("coordination.k8s.io/v1", "leases", NS, lease_name("kq"))
    assert lease["metadata"]["name"] == "kq.kraftquorums.kraft.dev"
    assert lease["spec"]["holderIdentity"] == "op-a"
    obj = await quorum(kube)
    assert lease["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    before, status = await children(kube), obj["status"]

    with caplog.at_level(logging.INFO, logger="kraft_operator"):
        assert await b.reconcile(NS, "kq") == CLAIMED_ELSEWHERE
    assert "event=claimed_by_another_operator quorum=default/kq identity=op-b holder=op-a" \
        in caplog.text
    assert await children(kube) == before  # nothing touched
    obj = await quorum(kube)
    told = conflict(obj)
    assert told is not None and (told["status"], told["reason"]) == ("True", CLAIMED_ELSEWHERE)
    assert told["message"].startswith("operator op-b does nothing to this KRaftQuorum: "
                                      "operator op-a holds its claim")
    assert {k: v for k, v in obj["status"].items() if k != "conditions"} == \
        {k: v for k, v in status.items() if k != "conditions"}
    (event,) = await refusals(kube)
    assert event["type"] == "Warning" and "op-a" in event["message"]
    assert event["reportingInstance"] == "op-b" and event["source"]["component"] == "kraft-operator/op-b"

    # the holder goes on and keeps the condition as written; the other one writes nothing more
    for _ in range(3):
        assert await a.reconcile(NS, "kq") not in (None, CLAIMED_ELSEWHERE)
        after_a = await quorum(kube)
        assert conflict(after_a) == told
        assert await b.reconcile(NS, "kq") == CLAIMED_ELSEWHERE
        assert (await quorum(kube))["metadata"]["resourceVersion"] == \
            after_a["metadata"]["resourceVersion"]
    assert len(await refusals(kube)) == 1  # once per holder
    events = await kube.list("v1", "events", NS)
    assert {e["reportingInstance"] for e in events if e["reason"] != CLAIMED_ELSEWHERE} == \
        {"op-a"}

    # a clean stop of the holder releases the claim: the other one takes it at once, and the
    # condition that named it as refused turns False
    await a.stop()
    lease = await kube.get("coordination.k8s.io/v1", "leases", NS, lease_name("kq"))
    assert not lease["spec"].get("holderIdentity")
    assert await b.reconcile(NS, "kq") not in (None, CLAIMED_ELSEWHERE)
    now = conflict(await quorum(kube))
    assert now is not None and (now["status"], now["reason"]) == ("False", "ClaimHeld")
    # the old holder, back, is the one refused now; its clean stop withdraws its condition
    assert await a.reconcile(NS, "kq") == CLAIMED_ELSEWHERE
    assert conflict(await quorum(kube))["message"].startswith("operator op-a does nothing")
    assert len(await refusals(kube)) == 2
    await a.stop()
    assert conflict(await quorum(kube)) is None
    await b.stop()


async def test_a_claim_not_renewed_is_taken_over_after_its_duration_on_the_takers_clock(
        kube: Kube) -> None:
    await kube.create(models.API_VERSION, models.PLURAL, NS, {
        "apiVersion": models.API_VERSION, "kind": models.KIND,
        "metadata": {"name": "kq", "namespace": NS}, "spec": {"replicas": 1, "paused": True}})
    clock_b = Clock()
    a, b = operator(kube, "op-a", Clock()), operator(kube, "op-b", clock_b)
    assert await a.reconcile(NS, "kq") == "Wait"
    assert await b.reconcile(NS, "kq") == CLAIMED_ELSEWHERE
    clock_b.now += 14  # unchanged for 14 s as b measures it: still held
    assert await b.reconcile(NS, "kq") == CLAIMED_ELSEWHERE
    assert await a.reconcile(NS, "kq") == "Wait"  # renewed: b counts again from here
    clock_b.now += 14
    assert await b.reconcile(NS, "kq") == CLAIMED_ELSEWHERE
    clock_b.now += 16  # a is gone (no clean stop): 16 s without a change, as b measures it
    assert await b.reconcile(NS, "kq") == "Wait"
    lease = await kube.get("coordination.k8s.io/v1", "leases", NS, lease_name("kq"))
    assert lease["spec"]["holderIdentity"] == "op-b" and lease["spec"]["leaseTransitions"] == 1
    assert await a.reconcile(NS, "kq") == CLAIMED_ELSEWHERE  # a, back, sees b holding it
