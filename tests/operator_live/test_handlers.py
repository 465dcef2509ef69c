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
from kraft_sandbox.apiserver import serve
from kraft_sandbox.emulator import declare
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


async def test_asking_for_tls_is_a_condition_naming_the_key_and_nothing_else(kube: Kube) -> None:
    """The nodes serve PLAINTEXT only: a spec asking for TLS gets a condition that says so,
    never pods that would serve plaintext."""
    await make(kube, {"replicas": 3, "config": {"ssl.client.auth": "required"}})
    assert await Reconciler(kube).reconcile("default", "kq") == "ReportDegraded"
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    degraded = condition(obj, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidConfig")
    assert "ssl.client.auth" in degraded["message"]
    assert "TLS and SASL are not implemented" in degraded["message"]
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


def _voters(time_0: str, time_1: str, caught_up_1: bool = True) -> list[dict[str, Any]]:
    return [{"id": 0, "directoryId": "AAAAAAAAAAAAAAAAAAAAAQ", "caughtUp": True,
             "lastCaughtUpTime": time_0},
            {"id": 1, "directoryId": "AAAAAAAAAAAAAAAAAAAAAg", "caughtUp": caught_up_1,
             "lastCaughtUpTime": time_1}]


def test_a_quiet_quorum_rebuilds_the_status_it_has_stored() -> None:
    from kraft_operator.handlers import status_unchanged, steady_caught_up_times

    stored = {"voters": _voters("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"), "leader": None,
              "votersReady": "2/2"}
    # five seconds later the leader reports both caught up at a later time
    rebuilt = {"voters": _voters("2026-01-01T00:00:05Z", "2026-01-01T00:00:05Z"),
               "leader": None, "votersReady": "2/2"}
    steady_caught_up_times(stored, rebuilt)
    assert rebuilt["voters"] == stored["voters"]
    assert status_unchanged(stored, rebuilt)
    # a replica that falls behind is a change, with the leader's time as it is
    lagging = {"voters": _voters("2026-01-01T00:00:05Z", "2026-01-01T00:00:03Z", False),
               "leader": None, "votersReady": "1/2"}
    steady_caught_up_times(stored, lagging)
    assert lagging["voters"][1]["lastCaughtUpTime"] == "2026-01-01T00:00:03Z"
    assert lagging["voters"][0]["lastCaughtUpTime"] == "2026-01-01T00:00:00Z"
    assert not status_unchanged(stored, lagging)
    # a field the patch removes counts only when it is stored
    assert not status_unchanged({"currentOperation": {"type": "Rolling"}},
                                {"currentOperation": None})


async def test_a_pass_that_changes_nothing_does_not_write_the_status(kube: Kube) -> None:
    await make(kube, {"replicas": 3, "paused": True})
    reconciler = Reconciler(kube)
    await reconciler.reconcile("default", "kq")
    first = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    writes: list[str] = []
    patch = kube.patch

    async def counted(*args: Any, **kwargs: Any) -> Any:
        writes.append(str(kwargs.get("subresource")))
        return await patch(*args, **kwargs)

    kube.patch = counted  # type: ignore[method-assign]
    await reconciler.reconcile("default", "kq")
    second = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    assert second["status"] == first["status"]
    assert "status" not in writes


class Refusing(Kube):
    """The emulated API (which has no authorizer) behind an RBAC rule set short of some
    (verb, resource) pairs: those calls get the 403 kube-apiserver answers, in its words."""

    def __init__(self, inner: Kube, refused: set[tuple[str, str]]) -> None:
        super().__init__(inner.api)
        self.refused = refused

    def _call(self, method: str, url: str, query: Any = None, body: Any = None,
              content_type: str | None = None) -> Any:
        from kraft_operator.kube import Forbidden

        parts = url.split("/")
        named = parts[-2] in ("nodes", "pods", "persistentvolumeclaims", "persistentvolumes")
        resource = parts[-2] if named else parts[-1]
        verb = {"GET": "get" if named else "list", "POST": "create", "PATCH": "patch",
                "DELETE": "delete", "PUT": "update"}[method]
        if (verb, resource) in self.refused:
            where = (f'in the namespace "{parts[4]}"' if parts[3] == "namespaces"
                     else "at the cluster scope")
            raise Forbidden(403, "Forbidden", (
                f'{resource} is forbidden: User "system:serviceaccount:default:kraft-operator" '
                f'cannot {verb} resource "{resource}" in API group "" {where}'))
        return super()._call(method, url, query, body, content_type)


async def test_a_refused_read_of_nodes_is_reported_not_silent(
        kube: Kube, caplog: pytest.LogCaptureFixture) -> None:
    """Without `list nodes` a pass goes on (no Node failure is assumed), but says so: the
    condition Forbidden naming the verb and the resource, one Warning Event, an error log line
    at every pass; once the permission is back the condition turns False."""
    await make(kube, {"replicas": 3})
    refusing = Refusing(kube, {("list", "nodes")})
    reconciler = Reconciler(refusing)
    assert await reconciler.reconcile("default", "kq") == "RecordCluster"
    await reconciler.reconcile("default", "kq")
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    forbidden = condition(obj, "Forbidden")
    assert forbidden["status"] == "True" and forbidden["reason"] == "Forbidden"
    assert forbidden["message"].startswith("the operator may not list nodes:")
    warnings = [e for e in await kube.list("v1", "events", "default") if e["type"] == "Warning"]
    assert [(e["reason"], e["message"]) for e in warnings] == [
        ("Forbidden", forbidden["message"])]
    lines = [r for r in caplog.records if "event=forbidden" in r.getMessage()]
    assert len(lines) == 2 and all(r.levelname == "ERROR" for r in lines)
    assert "verb=list resource=nodes" in lines[0].getMessage()
    refusing.refused.clear()
    await reconciler.reconcile("default", "kq")
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    assert (condition(obj, "Forbidden")["status"],
            condition(obj, "Forbidden")["reason"]) == ("False", "Permitted")


async def test_a_refused_write_fails_the_pass_loudly(kube: Kube) -> None:
    """Without `create persistentvolumeclaims` every pass fails at its action: the condition
    Forbidden names that verb and resource (kept, not flapping, over the passes) and one
    Warning Event says it; granting it again lets the quorum go on."""
    await make(kube, {"replicas": 3})
    refusing = Refusing(kube, {("create", "persistentvolumeclaims")})
    reconciler = Reconciler(refusing)
    assert await reconciler.reconcile("default", "kq") == "RecordCluster"
    for _ in range(3):
        assert await reconciler.reconcile("default", "kq") is None
        obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
        forbidden = condition(obj, "Forbidden")
        assert forbidden["status"] == "True"
        assert "may not create persistentvolumeclaims" in forbidden["message"]
    assert await kube.list("v1", "persistentvolumeclaims", "default") == []
    reasons = [e["reason"] for e in await kube.list("v1", "events", "default")
               if e["type"] == "Warning"]
    assert reasons == ["Forbidden"]
    refusing.refused.clear()
    assert await reconciler.reconcile("default", "kq") == "CreatePVC"
    await reconciler.reconcile("default", "kq")
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    assert condition(obj, "Forbidden")["status"] == "False"


async def test_changes_of_a_quorums_pods_are_coalesced_into_one_pass(kube: Kube) -> None:
    """A burst of pod or claim events makes one pass, not one per event; an unknown quorum's
    events make none."""
    import asyncio

    await make(kube, {"replicas": 3, "paused": True})
    reconciler = Reconciler(kube)
    passes: list[str] = []
    run = reconciler.reconcile

    async def counted(namespace: str, name: str, trigger: str = "timer") -> Any:
        passes.append(trigger)
        return await run(namespace, name, trigger)

    reconciler.reconcile = counted  # type: ignore[method-assign]
    reconciler.poke("default", "kq")  # not followed yet (no watch event of it): nothing
    reconciler.watch("default", "kq", "ADDED", interval_s=3600)
    for _ in range(5):
        reconciler.poke("default", "kq", delay_s=0.1)
    await asyncio.sleep(0.5)
    assert passes == ["watch"]
    reconciler.poke("default", "kq", delay_s=0.1)
    await asyncio.sleep(0.5)
    assert passes == ["watch", "watch"]
    await reconciler.stop()
