"""The clients the operator uses work against the emulated API: a real kopf operator
in-process (finalizers, create/update/delete handlers, status patches, events) and the
kubernetes Python client (typed create, custom objects, watch, replace)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

import aiohttp
import kopf
from kraft_sandbox.apiserver import RunningApi
from kubernetes import client, watch

from tests.sandbox.test_emulator import CRD

registry = kopf.OperatorRegistry()
SEEN: dict[str, Any] = {}
URL = [""]


@kopf.on.login(registry=registry)
def _login(**_: Any) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(server=URL[0], insecure=True)


@kopf.on.startup(registry=registry)
def _settings(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 30
    settings.posting.level = 0


@kopf.on.create("example.dev", "v1", "things", registry=registry)
def _created(spec: Any, patch: Any, body: Any, **_: Any) -> None:
    patch.status["doubled"] = spec["size"] * 2
    kopf.info(body, reason="Doubled", message="size doubled")


@kopf.on.update("example.dev", "v1", "things", registry=registry)
def _updated(spec: Any, patch: Any, **_: Any) -> None:
    patch.status["doubled"] = spec["size"] * 2


@kopf.on.delete("example.dev", "v1", "things", registry=registry)
def _deleted(name: str, **_: Any) -> None:
    SEEN["deleted"] = name


async def _until(check: Any, what: str, timeout_s: float = 30) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_kopf_operator_runs_its_handlers(api: RunningApi) -> None:
    URL[0] = api.url
    SEEN.clear()
    things = "/apis/example.dev/v1/namespaces/ns1/things"
    async with aiohttp.ClientSession(base_url=api.url) as http:
        async with http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                             json=CRD) as resp:
            assert resp.status == 201
        async with http.post("/api/v1/namespaces", json={"metadata": {"name": "ns1"}}) as resp:
            assert resp.status == 201
        task = asyncio.create_task(kopf.operator(registry=registry, clusterwide=True,
                                                 standalone=True))
        try:
            async with http.post(things, json={"metadata": {"name": "t1"},
                                               "spec": {"size": 21}}) as resp:
                assert resp.status == 201

            async def get() -> dict[str, Any]:
                async with http.get(f"{things}/t1") as resp:
                    return dict(await resp.json()) if resp.status == 200 else {}

            obj = await _until(lambda: _status(get, 42), "the create handler's status")
            assert obj["metadata"]["finalizers"], "kopf adds its finalizer"
            async with http.patch(f"{things}/t1", json={"spec": {"size": 5}},
                                  headers={"Content-Type": "application/merge-patch+json"}):
                pass
            await _until(lambda: _status(get, 10), "the update handler's status")
            async with http.get("/api/v1/namespaces/ns1/events") as resp:
                events = (await resp.json())["items"]
            assert any(e.get("reason") == "Doubled" for e in events)
            async with http.delete(f"{things}/t1") as resp:
                assert resp.status == 200

            async def gone() -> bool:
                async with http.get(f"{things}/t1") as resp:
                    return resp.status == 404

            await _until(gone, "the object removed once kopf released its finalizer")
            assert SEEN["deleted"] == "t1"
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _status(get: Any, doubled: int) -> dict[str, Any] | None:
    obj: dict[str, Any] = await get()
    return obj if obj.get("status", {}).get("doubled") == doubled else None


def _sync_client(url: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = url
    return client.ApiClient(cfg)


async def test_kubernetes_client_create_watch_and_replace(api: RunningApi) -> None:
    def work() -> dict[str, Any]:
        api_client = _sync_client(api.url)
        core = client.CoreV1Api(api_client)
        custom = client.CustomObjectsApi(api_client)
        ext = client.ApiextensionsV1Api(api_client)
        ext.create_custom_resource_definition(copy.deepcopy(CRD))
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="ns1")))
        made = custom.create_namespaced_custom_object(
            "example.dev", "v1", "ns1", "things", {"apiVersion": "example.dev/v1",
                                                   "kind": "Thing", "metadata": {"name": "a"},
                                                   "spec": {"size": 1}})
        cm = core.create_namespaced_config_map("ns1", client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="c", labels={"k": "v"}), data={"x": "1"}))
        cm.data["x"] = "2"
        replaced = core.replace_namespaced_config_map("c", "ns1", cm)
        events = []
        w = watch.Watch()
        for event in w.stream(core.list_namespaced_config_map, "ns1", label_selector="k=v",
                              resource_version="0", _request_timeout=10):
            events.append((event["type"], event["object"].metadata.name))
            w.stop()
        status = custom.patch_namespaced_custom_object_status(
            "example.dev", "v1", "ns1", "things", "a", {"status": {"ready": True}})
        return {"made": made, "replaced": replaced.data, "events": events, "status": status}

    out = await asyncio.to_thread(work)
    assert out["made"]["metadata"]["uid"]  # the client deserializes create only on 201
    assert out["replaced"] == {"x": "2"}
    assert out["events"] == [("ADDED", "c")]
    assert out["status"]["status"] == {"ready": True}
