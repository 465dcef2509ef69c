"""A 3-voter kraft quorum from plain Pod manifests (no operator) comes up in the sandbox:
formatted by init containers with per-pod DNS names, ready, one leader, and a KV write made
through one pod is read through another; another pod's kraft process reaches the quorum by
its DNS names."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from kraft_sandbox.dns import Resolver
from kraft_sandbox.handle import SandboxHandle
from kraft_sandbox.manual_quorum import HTTP_PORT, quorum_manifests

from tests.sandbox.conftest import wait_for

pytestmark = pytest.mark.slow


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


OPENER = urllib.request.build_opener(_NoRedirect)


def kv(resolver: Resolver, method: str, host: str, key: str,
       body: bytes | None = None) -> tuple[int, bytes, list[str]]:
    """One KV call to a pod, following the 307s to the leader by cluster DNS; returns the
    status, the body and the hosts visited."""
    url = f"http://{host}:{HTTP_PORT}/v1/kv/{key}"
    visited = []
    for _ in range(5):
        parts = urllib.parse.urlsplit(url)
        name = parts.hostname or ""
        visited.append(name)
        ips = resolver.lookup(name)
        address = ips[0] if ips else name
        req = urllib.request.Request(url.replace(f"//{name}:", f"//{address}:", 1), data=body,
                                     method=method)
        try:
            with OPENER.open(req, timeout=10) as resp:
                return resp.status, resp.read(), visited
        except urllib.error.HTTPError as exc:
            if exc.code == 307:
                url = exc.headers["Location"]
                continue
            return exc.code, exc.read(), visited
    raise AssertionError(f"too many redirects: {visited}")


def node_status(ip: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:{HTTP_PORT}/v1/status", timeout=5) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except OSError:
        return None


def test_three_pods_form_a_quorum_by_dns_names(sandbox: SandboxHandle) -> None:
    objects = quorum_manifests("kq", replicas=3)
    sandbox.kubectl("apply", "--validate=false", "-f", "-",
                    input="\n---\n".join(json.dumps(o) for o in objects))

    def pods() -> list[dict[str, Any]]:
        out = sandbox.kubectl("get", "pods", "-l", "app.kubernetes.io/instance=kq", "-o",
                              "json").stdout
        return list(json.loads(out)["items"])

    def all_ready() -> list[dict[str, Any]] | None:
        items = pods()
        ready = [p for p in items if any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in p["status"].get("conditions") or [])]
        return items if len(items) == 3 and len(ready) == 3 else None

    items = wait_for("three ready pods (readiness probe /readyz)", all_ready, timeout_s=120)
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in items}
    assert len(set(ips.values())) == 3
    assert {p["spec"]["nodeName"] for p in items} == set(sandbox.nodes)

    statuses = {name: node_status(ip) for name, ip in ips.items()}
    leaders = {s["leader_id"] for s in statuses.values() if s}
    assert len(leaders) == 1 and -1 not in leaders
    leader_id = leaders.pop()
    roles = sorted(s["role"] for s in statuses.values() if s)
    assert roles == ["follower", "follower", "leader"]
    for s in statuses.values():
        assert s is not None
        endpoints = [e for v in s["voters"] for e in v["endpoints"]]
        assert all(".kq.default.svc" in e for e in endpoints), endpoints

    resolver = sandbox.resolver("default")
    for i in range(3):
        assert resolver.lookup(f"kq-{i}.kq") == [ips[f"kq-{i}"]]
        assert resolver.lookup(f"kq-{i}.kq.default.svc.cluster.local") == [ips[f"kq-{i}"]]
    writer = next(f"kq-{i}" for i in range(3) if i != leader_id)
    reader = next(f"kq-{i}" for i in range(3) if i != leader_id and f"kq-{i}" != writer)
    status, body, visited = kv(resolver, "PUT", f"{writer}.kq", "greeting", b"hello")
    assert status == 200, body
    # the follower answered, or sent the client on to the leader by its DNS name
    assert visited[0] == f"{writer}.kq"
    assert set(visited[1:]) <= {f"kq-{leader_id}.kq"}, visited
    status, body, _ = kv(resolver, "GET", f"{reader}.kq", "greeting")
    assert (status, body) == (200, b"hello")

    def replicated() -> bool:
        try:
            with urllib.request.urlopen(
                    f"http://{ips[reader]}:{HTTP_PORT}/v1/kv/greeting?stale=true",
                    timeout=5) as resp:
                return bool(resp.read() == b"hello")
        except OSError:
            return False

    wait_for("the value applied on the reader itself", replicated)

    # another pod's kraft process finds the quorum by a per-pod DNS name
    sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "describe"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "describe", "image": "kraft-quorum:dev",
            "command": ["kraft", "quorum", "--bootstrap-controller", f"{reader}.kq:9093",
                        "describe", "--status"]}]}}))

    def finished() -> str | None:
        out = sandbox.kubectl("get", "pod", "describe", "-o", "jsonpath={.status.phase}").stdout
        return out if out in ("Succeeded", "Failed") else None

    assert wait_for("the describe pod to finish", finished) == "Succeeded", \
        sandbox.log_of("default", "describe", "describe")
    log = sandbox.log_of("default", "describe", "describe")
    assert f"LeaderId:               {leader_id}" in log

    # and from outside the pods: a program run with the cluster's DNS, and this process
    done = sandbox.run("kraft", "quorum", "--bootstrap-controller",
                       "kq-2.kq.default.svc:9093", "describe", "--status")
    assert done.returncode == 0, done.stderr
    assert f"LeaderId:               {leader_id}" in done.stdout
    with sandbox.cluster_dns("default"):
        status = json.loads(urllib.request.urlopen(
            f"http://{reader}.kq:{HTTP_PORT}/v1/status", timeout=5).read())
    assert status["node_id"] == int(reader.rsplit("-", 1)[1])
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{reader}.kq:{HTTP_PORT}/v1/status", timeout=5)
