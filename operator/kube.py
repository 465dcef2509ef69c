"""A small async client of the Kubernetes API for the operator's reads and writes.

Objects go in and come out as plain dicts (the API's JSON), whatever their kind, over the
kubernetes package's ApiClient (so a kubeconfig, an in-cluster service account, tokens and
certificates work as they do for kubectl). Calls run in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

Obj = dict[str, Any]


class ApiError(Exception):
    """The API server refused a call: its HTTP status, reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


class NotFound(ApiError):
    """404: the object does not exist."""


class Conflict(ApiError):
    """409: the object exists already, or changed meanwhile."""


class Forbidden(ApiError):
    """403: the operator may not do this (RBAC)."""


def path(api_version: str, plural: str, namespace: str | None, name: str | None = None,
         subresource: str | None = None) -> str:
    """The URL path of a collection, an object or a subresource."""
    out = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespace:
        out += f"/namespaces/{namespace}"
    out += f"/{plural}"
    if name:
        out += f"/{name}"
    if subresource:
        out += f"/{subresource}"
    return out


class Kube:
    """The API calls the operator makes (see the module docstring)."""

    ApiError = ApiError
    NotFound = NotFound
    Conflict = Conflict
    Forbidden = Forbidden

    def __init__(self, api_client: Any, timeout_s: float = 15.0) -> None:
        self.api = api_client
        self.timeout_s = timeout_s

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None) -> Kube:
        """A client from a kubeconfig file (KUBECONFIG or ~/.kube/config when None), or the
        in-cluster service account when there is no kubeconfig."""
        from kubernetes import client, config

        configuration = client.Configuration()
        try:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except config.ConfigException:
            if kubeconfig is not None:
                raise
            config.load_incluster_config(client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    def _call(self, method: str, url: str, query: list[tuple[str, Any]] | None = None,
              body: Any = None, content_type: str | None = None) -> Obj:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            _m, full, hdrs, data, _ = self.api.param_serialize(
                method=method, resource_path=url, query_params=query or [],
                header_params=headers, body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(method, full, header_params=hdrs, body=data,
                                     _request_timeout=self.timeout_s)
            resp.read()
        except ApiException as exc:
            raise _error(exc.status or 0, exc.reason or "", exc.body) from None
        raw = resp.data
        if resp.status >= 400:
            raise _error(resp.status, resp.reason or "", raw)
        return json.loads(raw) if raw else {}

    async def call(self, method: str, url: str, query: list[tuple[str, Any]] | None = None,
                   body: Any = None, content_type: str | None = None) -> Obj:
        return await asyncio.to_thread(self._call, method, url, query, body, content_type)

    async def list(self, api_version: str, plural: str, namespace: str | None,
                   label_selector: str | None = None) -> list[Obj]:
        query = [("labelSelector", label_selector)] if label_selector else []
        listed = await self.call("GET", path(api_version, plural, namespace), query)
        return list(listed.get("items") or [])

    async def get(self, api_version: str, plural: str, namespace: str | None, name: str,
                  subresource: str | None = None) -> Obj:
        return await self.call("GET", path(api_version, plural, namespace, name, subresource))

    async def create(self, api_version: str, plural: str, namespace: str | None,
                     obj: Obj) -> Obj:
        return await self.call("POST", path(api_version, plural, namespace), body=obj)

    async def patch(self, api_version: str, plural: str, namespace: str | None, name: str,
                    patch: Obj, subresource: str | None = None) -> Obj:
        """A JSON merge patch (RFC 7386: null removes a key, lists are replaced)."""
        return await self.call("PATCH", path(api_version, plural, namespace, name, subresource),
                               body=patch, content_type="application/merge-patch+json")

    async def replace(self, api_version: str, plural: str, namespace: str | None, name: str,
                      obj: Obj) -> Obj:
        return await self.call("PUT", path(api_version, plural, namespace, name), body=obj)

    async def delete(self, api_version: str, plural: str, namespace: str | None, name: str,
                     grace_period_s: int | None = None) -> Obj:
        query: list[tuple[str, Any]] = [("propagationPolicy", "Background")]
        if grace_period_s is not None:
            query.append(("gracePeriodSeconds", grace_period_s))
        return await self.call("DELETE", path(api_version, plural, namespace, name), query)


def _error(status: int, reason: str, body: Any) -> ApiError:
    message = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        loaded = json.loads(message)
        message = str(loaded.get("message") or message)
        reason = str(loaded.get("reason") or reason)
    except (ValueError, AttributeError):
        pass
    cls = {403: Forbidden, 404: NotFound, 409: Conflict}.get(status, ApiError)
    return cls(status, reason, message)
