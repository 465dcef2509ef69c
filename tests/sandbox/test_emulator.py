"""The emulated API server behaves as kopf, the kubernetes client and kubectl need."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from kraft_sandbox.apiserver import RunningApi
from kraft_sandbox.emulator import field_matcher, label_matcher

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "things.example.dev"},
    "spec": {"group": "example.dev", "scope": "Namespaced",
             "names": {"plural": "things", "singular": "thing", "kind": "Thing",
                       "shortNames": ["th"]},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                           "subresources": {"status": {}, "scale": {
                               "specReplicasPath": ".spec.replicas",
                               "statusReplicasPath": ".status.replicas"}}}]},
}
THINGS = "/apis/example.dev/v1/namespaces/ns1/things"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


async def call(session: aiohttp.ClientSession, method: str, url: str, body: Any = None,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with session.request(method, url, data=None if body is None else json.dumps(body),
                               headers=headers or {"Content-Type": "application/json"}) as r:
        return r.status, await r.json()


@pytest.fixture
async def http(api: RunningApi) -> Any:
    async with aiohttp.ClientSession(base_url=api.url) as session:
        status, _ = await call(session, "POST",
                               "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
        assert status == 201
        status, _ = await call(session, "POST", "/api/v1/namespaces", {"metadata": {
            "name": "ns1"}})
        assert status == 201
        yield session


async def test_create_fills_metadata_and_answers_201(http: aiohttp.ClientSession) -> None:
    status, obj = await call(http, "POST", THINGS, {"metadata": {"generateName": "t-"},
                                                    "spec": {"size": 1}})
    assert status == 201
    meta = obj["metadata"]
    assert meta["name"].startswith("t-") and len(meta["name"]) > 2
    assert meta["namespace"] == "ns1"
    assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    assert obj["kind"] == "Thing" and obj["apiVersion"] == "example.dev/v1"
    again, err = await call(http, "POST", THINGS, {"metadata": {"name": meta["name"]}})
    assert again == 409 and err["reason"] == "AlreadyExists"


async def test_generation_moves_with_spec_only(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", THINGS, {"metadata": {"name": "t1"}, "spec": {"size": 1}})
    _, obj = await call(http, "PATCH", f"{THINGS}/t1", {"metadata": {"labels": {"a": "b"}}},
                        MERGE)
    assert obj["metadata"]["generation"] == 1
    _, obj = await call(http, "PATCH", f"{THINGS}/t1/status", {"status": {"ok": True}}, MERGE)
    assert obj["metadata"]["generation"] == 1
    _, obj = await call(http, "PATCH", f"{THINGS}/t1", {"spec": {"size": 2}}, MERGE)
    assert obj["metadata"]["generation"] == 2
    rv = obj["metadata"]["resourceVersion"]
    _, same = await call(http, "PATCH", f"{THINGS}/t1", {"spec": {"size": 2}}, MERGE)
    assert same["metadata"]["resourceVersion"] == rv  # a no-op write is not a new version


async def test_status_subresource_keeps_spec_and_status_apart(
        http: aiohttp.ClientSession) -> None:
    await call(http, "POST", THINGS, {"metadata": {"name": "t1"}, "spec": {"size": 1},
                                      "status": {"forged": True}})
    _, obj = await call(http, "GET", f"{THINGS}/t1")
    assert "status" not in obj  # status is not taken on create
    _, obj = await call(http, "PATCH", f"{THINGS}/t1",
                        {"spec": {"size": 2}, "status": {"phase": "x"}}, MERGE)
    assert obj["spec"] == {"size": 2} and "status" not in obj
    _, obj = await call(http, "PATCH", f"{THINGS}/t1/status",
                        {"spec": {"size": 3}, "status": {"phase": "y"}}, MERGE)
    assert obj["spec"] == {"size": 2} and obj["status"] == {"phase": "y"}


async def test_a_pods_qos_class_is_set_on_create_and_cannot_change(
        http: aiohttp.ClientSession) -> None:
    """The sandbox's kubelet wrote qosClass BestEffort in every status; kube-apiserver refused
    each such write of a pod with resources (its class is Burstable), so the pod stayed
    Pending while it ran."""
    pods = "/api/v1/namespaces/ns1/pods"
    container = {"name": "c", "image": "i"}
    for name, resources, qos in (
            ("none", None, "BestEffort"),
            ("some", {"requests": {"cpu": "10m"}}, "Burstable"),
            ("full", {"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
            ("less", {"requests": {"cpu": "500m", "memory": "1Gi"},
                      "limits": {"cpu": "1", "memory": "1Gi"}}, "Burstable")):
        spec = {"containers": [{**container, **({"resources": resources} if resources
                                                 else {})}]}
        status, obj = await call(http, "POST", pods, {"metadata": {"name": name},
                                                      "spec": spec})
        assert status == 201 and obj["status"]["qosClass"] == qos, (name, obj["status"])
    status, err = await call(http, "PATCH", f"{pods}/some/status",
                             {"status": {"qosClass": "BestEffort"}}, MERGE)
    assert status == 422, err
    assert err["message"] == ('Pod "some" is invalid: status.qosClass: Invalid value: '
                              '"BestEffort": field is immutable')
    status, obj = await call(http, "PATCH", f"{pods}/some/status",
                             {"status": {"phase": "Running"}}, MERGE)
    assert status == 200 and obj["status"]["qosClass"] == "Burstable"


async def test_stale_resource_version_is_a_conflict(http: aiohttp.ClientSession) -> None:
    _, obj = await call(http, "POST", THINGS, {"metadata": {"name": "t1"}, "spec": {"a": 1}})
    old_rv = obj["metadata"]["resourceVersion"]
    await call(http, "PATCH", f"{THINGS}/t1", {"spec": {"a": 2}}, MERGE)
    # kopf's finalizer patch: a JSON-patch that tests the resourceVersion it saw
    status, err = await call(http, "PATCH", f"{THINGS}/t1", [
        {"op": "test", "path": "/metadata/resourceVersion", "value": old_rv},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}], JSONPATCH)
    assert status == 409 and err["reason"] == "Conflict"
    status, err = await call(http, "PUT", f"{THINGS}/t1", {
        "apiVersion": "example.dev/v1", "kind": "Thing",
        "metadata": {"name": "t1", "resourceVersion": old_rv}, "spec": {"a": 9}})
    assert status == 409
    _, cur = await call(http, "GET", f"{THINGS}/t1")
    status, obj = await call(http, "PUT", f"{THINGS}/t1", {**cur, "spec": {"a": 9}})
    assert status == 200 and obj["spec"] == {"a": 9} and obj["metadata"]["generation"] == 3


async def test_scale_subresource_sets_spec_replicas(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", THINGS, {"metadata": {"name": "t1"}, "spec": {"replicas": 3}})
    _, scale = await call(http, "GET", f"{THINGS}/t1/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    _, scale = await call(http, "PATCH", f"{THINGS}/t1/scale", {"spec": {"replicas": 5}},
                          MERGE)
    assert scale["spec"]["replicas"] == 5
    _, obj = await call(http, "GET", f"{THINGS}/t1")
    assert obj["spec"]["replicas"] == 5 and obj["metadata"]["generation"] == 2


async def test_lists_filter_by_label_and_field(http: aiohttp.ClientSession) -> None:
    for name, app in (("a", "x"), ("b", "y"), ("c", "x")):
        await call(http, "POST", THINGS, {"metadata": {"name": name, "labels": {"app": app}}})
    _, lst = await call(http, "GET", f"{THINGS}?labelSelector=app%3Dx")
    assert [o["metadata"]["name"] for o in lst["items"]] == ["a", "c"]
    assert lst["kind"] == "ThingList" and lst["metadata"]["resourceVersion"]
    _, lst = await call(http, "GET", f"{THINGS}?fieldSelector=metadata.name%3Db")
    assert [o["metadata"]["name"] for o in lst["items"]] == ["b"]


async def read_events(resp: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    events = []
    while len(events) < count:
        line = await asyncio.wait_for(resp.content.readline(), 10)
        if line.strip():
            events.append(json.loads(line))
    return events


async def test_watch_resumes_from_a_resource_version(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", THINGS, {"metadata": {"name": "a"}})
    _, lst = await call(http, "GET", THINGS)
    since = lst["metadata"]["resourceVersion"]
    await call(http, "POST", THINGS, {"metadata": {"name": "b", "labels": {"k": "v"}}})
    await call(http, "PATCH", f"{THINGS}/a", {"spec": {"z": 1}}, MERGE)
    async with http.get(f"{THINGS}?watch=true&resourceVersion={since}") as resp:
        assert resp.headers["Content-Type"].startswith("application/json")
        events = await read_events(resp, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"), ("MODIFIED", "a")]
    async with http.get(f"{THINGS}?watch=true&labelSelector=k%3Dv") as resp:
        first = await read_events(resp, 1)
        await call(http, "PATCH", f"{THINGS}/a", {"spec": {"z": 2}}, MERGE)
        await call(http, "PATCH", f"{THINGS}/b", {"spec": {"z": 3}}, MERGE)
        second = await read_events(resp, 1)
    assert first[0]["object"]["metadata"]["name"] == "b"
    assert (second[0]["type"], second[0]["object"]["spec"]) == ("MODIFIED", {"z": 3})


async def test_watch_list_ends_initial_events_with_a_bookmark(
        http: aiohttp.ClientSession) -> None:
    await call(http, "POST", THINGS, {"metadata": {"name": "a"}})
    url = f"{THINGS}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true" \
          "&resourceVersionMatch=NotOlderThan&timeoutSeconds=5"
    async with http.get(url) as resp:
        events = await read_events(resp, 2)
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"


async def test_pod_deletion_is_graceful_once_scheduled(http: aiohttp.ClientSession) -> None:
    pods = "/api/v1/namespaces/default/pods"
    await call(http, "POST", pods, {"metadata": {"name": "p"}, "spec": {
        "nodeName": "n1", "terminationGracePeriodSeconds": 7, "containers": []}})
    status, obj = await call(http, "DELETE", f"{pods}/p")
    assert status == 200
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 7
    assert obj["metadata"]["deletionTimestamp"]
    status, _ = await call(http, "GET", f"{pods}/p")
    assert status == 200  # still there: the kubelet has not confirmed yet
    await call(http, "DELETE", f"{pods}/p", {"gracePeriodSeconds": 0})
    status, err = await call(http, "GET", f"{pods}/p")
    assert status == 404 and err["reason"] == "NotFound"
    await call(http, "POST", pods, {"metadata": {"name": "q"}, "spec": {"containers": []}})
    await call(http, "DELETE", f"{pods}/q")  # never scheduled: removed at once
    status, _ = await call(http, "GET", f"{pods}/q")
    assert status == 404


async def test_finalizers_hold_deletion(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", THINGS, {"metadata": {"name": "t", "finalizers": ["f"]}})
    await call(http, "DELETE", f"{THINGS}/t")
    _, obj = await call(http, "GET", f"{THINGS}/t")
    assert obj["metadata"]["deletionTimestamp"]
    await call(http, "PATCH", f"{THINGS}/t", {"metadata": {"finalizers": None}}, MERGE)
    status, _ = await call(http, "GET", f"{THINGS}/t")
    assert status == 404


async def test_owned_objects_are_garbage_collected(http: aiohttp.ClientSession) -> None:
    _, owner = await call(http, "POST", THINGS, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "example.dev/v1", "kind": "Thing", "name": "owner",
           "uid": owner["metadata"]["uid"]}
    cms = "/api/v1/namespaces/ns1/configmaps"
    await call(http, "POST", cms, {"metadata": {"name": "owned", "ownerReferences": [ref]}})
    await call(http, "POST", cms, {"metadata": {"name": "free"}})
    await call(http, "DELETE", f"{THINGS}/owner")
    assert (await call(http, "GET", f"{cms}/owned"))[0] == 404
    assert (await call(http, "GET", f"{cms}/free"))[0] == 200
    _, owner = await call(http, "POST", THINGS, {"metadata": {"name": "owner2"}})
    ref = {**ref, "name": "owner2", "uid": owner["metadata"]["uid"]}
    await call(http, "POST", cms, {"metadata": {"name": "kept", "ownerReferences": [ref]}})
    await call(http, "DELETE", f"{THINGS}/owner2", {"propagationPolicy": "Orphan"})
    assert (await call(http, "GET", f"{cms}/kept"))[0] == 200


async def test_pod_binding_and_eviction(http: aiohttp.ClientSession) -> None:
    pods = "/api/v1/namespaces/default/pods"
    await call(http, "POST", pods, {"metadata": {"name": "p"}, "spec": {"containers": []}})
    status, _ = await call(http, "POST", f"{pods}/p/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
    assert status == 201
    _, obj = await call(http, "GET", f"{pods}/p")
    assert obj["spec"]["nodeName"] == "n1"
    status, _ = await call(http, "POST", f"{pods}/p/binding", {"target": {"name": "n2"}})
    assert status == 409
    status, _ = await call(http, "POST", f"{pods}/p/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
    assert status == 201
    _, obj = await call(http, "GET", f"{pods}/p")
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 30


async def test_strategic_merge_directives_are_not_stored(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", THINGS, {"metadata": {"name": "t"}, "spec": {"l": [{"name": "a"}]}})
    _, obj = await call(http, "PATCH", f"{THINGS}/t", {
        "$setElementOrder/l": [{"name": "b"}], "spec": {"l": [{"name": "b"}]}},
        {"Content-Type": "application/strategic-merge-patch+json"})
    assert obj["spec"] == {"l": [{"name": "b"}]}
    assert not any(k.startswith("$") for k in obj)


async def test_discovery_serves_core_and_custom_resources(http: aiohttp.ClientSession) -> None:
    _, core = await call(http, "GET", "/api/v1")
    assert core["groupVersion"] == "v1"
    _, custom = await call(http, "GET", "/apis/example.dev/v1")
    names = {r["name"]: r for r in custom["resources"]}
    assert names["things"]["shortNames"] == ["th"] and names["things"]["kind"] == "Thing"
    assert {"things/status", "things/scale"} <= set(names)


def test_label_selector_forms() -> None:
    match = label_matcher("a=1,b!=2,c in (x, y),!d,e")
    assert match({"a": "1", "b": "3", "c": "y", "e": ""})
    assert not match({"a": "1", "b": "2", "c": "y", "e": ""})
    assert not match({"a": "1", "c": "z", "e": ""})
    assert not match({"a": "1", "c": "x", "d": "", "e": ""})
    assert not label_matcher("e")({"a": "1"})
    assert field_matcher("spec.nodeName=n1,status.phase!=Failed")(
        {"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert not field_matcher("spec.nodeName=n1")({"spec": {"nodeName": "n2"}})


TYPED_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "quorums.example.dev"},
    "spec": {"group": "example.dev", "scope": "Namespaced",
             "names": {"plural": "quorums", "singular": "quorum", "kind": "Quorum"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {
                                   "replicas": {"type": "integer", "minimum": 1,
                                                "maximum": 9, "default": 3},
                                   "clusterId": {"type": "string", "nullable": True},
                                   "config": {"type": "object",
                                              "additionalProperties": {"type": "string"}},
                                   "paused": {"type": "boolean", "default": False}},
                                   "x-kubernetes-validations": [{
                                       "rule": "!has(oldSelf.clusterId) || "
                                               "self.clusterId == oldSelf.clusterId",
                                       "message": "clusterId is immutable"}]},
                               "status": {"type": "object",
                                          "x-kubernetes-preserve-unknown-fields": True}}}}}]},
}
QUORUMS = "/apis/example.dev/v1/namespaces/ns1/quorums"


async def test_custom_resources_are_defaulted_pruned_and_validated(
        http: aiohttp.ClientSession) -> None:
    status, _ = await call(http, "POST",
                           "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", TYPED_CRD)
    assert status == 201
    status, obj = await call(http, "POST", QUORUMS, {
        "metadata": {"name": "q"}, "spec": {"clusterId": "abc", "bogus": 1,
                                            "config": {"a": "b"}}})
    assert status == 201
    assert obj["spec"] == {"replicas": 3, "clusterId": "abc", "config": {"a": "b"},
                           "paused": False}  # defaults filled, the unknown field pruned
    status, err = await call(http, "POST", QUORUMS, {"metadata": {"name": "r"},
                                                     "spec": {"replicas": 10}})
    assert status == 422 and err["reason"] == "Invalid"
    assert err["details"]["causes"][0]["field"] == "spec.replicas"
    assert "10 is greater than the maximum of 9" in err["message"]
    status, err = await call(http, "PATCH", f"{QUORUMS}/q", {"spec": {"clusterId": "xyz"}},
                             MERGE)
    assert status == 422 and "clusterId is immutable" in err["message"]
    status, err = await call(http, "PATCH", f"{QUORUMS}/q", {"spec": {"replicas": "five"}},
                             MERGE)
    assert status == 422 and "is not of type 'integer'" in err["message"]
    status, obj = await call(http, "PATCH", f"{QUORUMS}/q", {"spec": {"replicas": 5}}, MERGE)
    assert status == 200 and obj["spec"]["replicas"] == 5
    status, obj = await call(http, "PATCH", f"{QUORUMS}/q/status",
                             {"status": {"anything": {"goes": 1}}}, MERGE)
    assert status == 200 and obj["status"] == {"anything": {"goes": 1}}
    _, stored = await call(http, "GET", f"{QUORUMS}/q")
    assert stored["spec"]["clusterId"] == "abc" and stored["spec"]["replicas"] == 5


async def test_a_cel_rule_over_untyped_values_is_refused_as_a_real_api_server_does(
        http: aiohttp.ClientSession) -> None:
    """kube-apiserver 1.35 refused the KRaftQuorum CRD whose rule walked a map of untyped
    (x-kubernetes-preserve-unknown-fields) values: such a rule has no CEL type."""
    import copy

    crd = copy.deepcopy(TYPED_CRD)
    crd["metadata"]["name"] = "loose.example.dev"
    crd["spec"]["names"] = {"plural": "loose", "singular": "loose", "kind": "Loose"}
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["config"] = {
        "type": "object",
        "additionalProperties": {"x-kubernetes-preserve-unknown-fields": True},
        "x-kubernetes-validations": [{"rule": "self.all(k, type(self[k]) == string)"}]}
    status, err = await call(http, "POST",
                             "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status == 422, err
    assert ("spec.validation.openAPIV3Schema.properties[spec].properties[config]."
            "x-kubernetes-validations") in err["message"]
    assert "unable to convert structural schema to CEL declarations" in err["message"]
    status, _ = await call(http, "GET", "/apis/example.dev/v1/namespaces/ns1/loose")
    assert status == 404  # nothing was served
    # typed values (or int-or-string) give the rule its type: taken
    spec["properties"]["config"]["additionalProperties"] = {"x-kubernetes-int-or-string": True}
    status, _ = await call(http, "POST",
                           "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status == 201


async def test_namespaces_must_exist_and_take_their_content_when_deleted(
        http: aiohttp.ClientSession) -> None:
    status, err = await call(http, "POST", "/api/v1/namespaces/nowhere/configmaps",
                             {"metadata": {"name": "c"}})
    assert status == 404 and err["message"] == 'namespaces "nowhere" not found'
    await call(http, "POST", "/api/v1/namespaces", {"metadata": {"name": "gone"}})
    await call(http, "POST", "/api/v1/namespaces/gone/configmaps", {"metadata": {"name": "c"}})
    await call(http, "POST", "/api/v1/namespaces/gone/pods", {"metadata": {"name": "p"},
                                                              "spec": {"nodeName": "n1"}})
    status, space = await call(http, "DELETE", "/api/v1/namespaces/gone")
    assert status == 200 and space["status"]["phase"] == "Terminating"
    assert (await call(http, "GET", "/api/v1/namespaces/gone/configmaps/c"))[0] == 404
    status, err = await call(http, "POST", "/api/v1/namespaces/gone/configmaps",
                             {"metadata": {"name": "d"}})
    assert status == 403
    # the scheduled pod is still being stopped; once its kubelet confirms, all is gone
    await call(http, "DELETE", "/api/v1/namespaces/gone/pods/p", {"gracePeriodSeconds": 0})
    assert (await call(http, "GET", "/api/v1/namespaces/gone"))[0] == 404


async def test_an_internal_error_is_answered_and_the_server_goes_on(
        api: RunningApi, http: aiohttp.ClientSession) -> None:
    def broken(*_: Any) -> None:
        raise RuntimeError("hook failed")

    api.emulator.write_hooks.append(broken)
    status, err = await call(http, "POST", "/api/v1/namespaces/ns1/configmaps",
                             {"metadata": {"name": "c"}})
    assert status == 500 and err["reason"] == "InternalError" and "hook failed" in err["message"]
    api.emulator.write_hooks.remove(broken)
    status, _ = await call(http, "POST", "/api/v1/namespaces/ns1/configmaps",
                           {"metadata": {"name": "d"}})
    assert status == 201
    assert not api.emulator.errors  # nothing left for kmock to raise at exit
