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


# --- the NetworkPolicy and the allow-lists --------------------------------------------------

NETPOL = ("networking.k8s.io/v1", "networkpolicies")


async def test_the_network_policy_is_created_owned_kept_exact_and_deleted_when_disabled(
        kube: Kube) -> None:
    from kraft_operator.policy import OperatorPolicy

    await make(kube, {"replicas": 3})
    policy = OperatorPolicy(operator_namespace="ops",
                            operator_pod_labels={"app.kubernetes.io/name": "kraft-operator",
                                                 "app.kubernetes.io/instance": "op"})
    reconciler = Reconciler(kube, policy=policy)
    await reconciler.reconcile("default", "kq")
    netpol = await kube.get(*NETPOL, "default", "kq")
    owner = netpol["metadata"]["ownerReferences"][0]
    quorum = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    assert (owner["kind"], owner["uid"]) == (models.KIND, quorum["metadata"]["uid"])
    controller, http = netpol["spec"]["ingress"]
    assert controller["ports"] == [{"protocol": "TCP", "port": 9093}]
    own = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "kraft",
                                           "app.kubernetes.io/instance": "kq",
                                           "app.kubernetes.io/managed-by": "kraft-operator"}}}
    operator = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kraft-operator",
                                                "app.kubernetes.io/instance": "op"}}}
    assert controller["from"] == [own, operator]
    assert http["from"] == [own, operator, {"podSelector": {}}]  # default: the namespace
    # a rule added by hand is taken out again: the policy is the spec's, exactly
    widened = {"spec": {"ingress": [*netpol["spec"]["ingress"], {"from": [
        {"namespaceSelector": {}}]}]}}
    await kube.patch(*NETPOL, "default", "kq", widened)
    await reconciler.reconcile("default", "kq")
    assert len((await kube.get(*NETPOL, "default", "kq"))["spec"]["ingress"]) == 2
    # httpFrom narrows the HTTP port: [] is the quorum and the operator only
    await kube.patch(models.API_VERSION, models.PLURAL, "default", "kq",
                     {"spec": {"networkPolicy": {"httpFrom": [
                         {"ipBlock": {"cidr": "10.0.0.0/8"}}]}}})
    await reconciler.reconcile("default", "kq")
    http = (await kube.get(*NETPOL, "default", "kq"))["spec"]["ingress"][1]
    assert http["from"] == [own, operator, {"ipBlock": {"cidr": "10.0.0.0/8"}}]
    await kube.patch(models.API_VERSION, models.PLURAL, "default", "kq",
                     {"spec": {"networkPolicy": {"httpFrom": []}}})
    await reconciler.reconcile("default", "kq")
    http = (await kube.get(*NETPOL, "default", "kq"))["spec"]["ingress"][1]
    assert http["from"] == [own, operator]
    await kube.patch(models.API_VERSION, models.PLURAL, "default", "kq",
                     {"spec": {"networkPolicy": {"enabled": False}}})
    await reconciler.reconcile("default", "kq")
    assert await kube.list(*NETPOL, "default") == []


@pytest.mark.parametrize(("spec", "reason", "named"), [
    ({"image": "evil.example.com/miner:1"}, "ImageNotAllowed", "evil.example.com/miner:1"),
    ({"image": "registry.example.com/kraft-quorum-evil:1"}, "ImageNotAllowed", "kraft-quorum-evil"),
    ({"image": "registry.example.com/kraft-quorum:1",
      "podTemplate": {"serviceAccountName": "cluster-admin"}},
     "ServiceAccountNotAllowed", "cluster-admin"),
])
async def test_a_spec_the_allow_lists_refuse_is_a_condition_and_nothing_else(
        kube: Kube, spec: dict[str, Any], reason: str, named: str) -> None:
    from kraft_operator.policy import OperatorPolicy

    policy = OperatorPolicy(allowed_images=("registry.example.com/kraft-quorum:*",
                                            "registry.example.com/kraft-quorum@sha256:*"),
                            allowed_service_accounts=("kraft-*",))
    await make(kube, {"replicas": 3, **spec})
    reconciler = Reconciler(kube, policy=policy, chain=5)
    assert await reconciler.reconcile("default", "kq") == "ReportDegraded"
    assert await reconciler.reconcile("default", "kq") == "ReportDegraded"
    obj = await kube.get(models.API_VERSION, models.PLURAL, "default", "kq")
    degraded = condition(obj, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", reason)
    assert named in degraded["message"]
    events = await kube.list("v1", "events", "default")
    assert [(e["reason"], e["type"]) for e in events] == [(reason, "Warning")]  # once
    await untouched(kube)
    assert await kube.list(*NETPOL, "default") == []


async def test_an_image_refused_after_the_quorum_ran_changes_no_pod(kube: Kube) -> None:
    """A quorum whose spec.image is changed to one the allow-list refuses keeps its pods as
    they are: no roll, no new pod, until the spec is allowed again."""
    from kraft_operator.policy import OperatorPolicy

    policy = OperatorPolicy(allowed_images=("kraft-quorum:*",))
    await make(kube, {"replicas": 3, "image": "kraft-quorum:1"})
    reconciler = Reconciler(kube, policy=policy, chain=10)
    await reconciler.reconcile("default", "kq")
    before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
              for p in await kube.list("v1", "pods", "default")}
    assert len(before) == 3
    await kube.patch(models.API_VERSION, models.PLURAL, "default", "kq",
                     {"spec": {"image": "other:1", "replicas": 5}})
    assert await reconciler.reconcile("default", "kq") == "ReportDegraded"
    after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
             for p in await kube.list("v1", "pods", "default")}
    assert after == before
    assert condition(await kube.get(models.API_VERSION, models.PLURAL, "default", "kq"),
                     "Degraded")["reason"] == "ImageNotAllowed"
    await kube.patch(models.API_VERSION, models.PLURAL, "default", "kq",
                     {"spec": {"image": "kraft-quorum:2"}})
    assert await reconciler.reconcile("default", "kq") != "ReportDegraded"


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
