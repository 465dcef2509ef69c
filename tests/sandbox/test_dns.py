"""Cluster DNS of the sandbox: the records Kubernetes would serve, and a pod process that
resolves them (and binds its own address) through the launcher, without /etc/hosts."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from kraft_sandbox.dns import Resolver, records, write_hosts


def pod(name: str, ip: str, ready: bool, hostname: str | None = None,
        subdomain: str | None = None, ns: str = "default") -> dict[str, Any]:
    spec = {k: v for k, v in (("hostname", hostname), ("subdomain", subdomain)) if v}
    return {"metadata": {"name": name, "namespace": ns, "labels": {"app": "q"}}, "spec": spec,
            "status": {"podIP": ip, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}


def service(name: str, headless: bool, publish: bool, ns: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"app": "q"}, "publishNotReadyAddresses": publish,
                            "clusterIP": "None" if headless else "10.96.0.9"}
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def test_records_follow_the_kubernetes_dns_rules() -> None:
    pods = [pod("q-0", "127.9.1.1", True, "q-0", "hl"),
            pod("q-1", "127.9.1.2", False, "q-1", "hl"),
            pod("q-2", "127.9.1.3", True),                  # no hostname: no per-pod name
            pod("other", "127.9.1.4", True, "q-0", "hl", ns="elsewhere")]
    got = set(records(pods, [service("hl", True, True), service("strict", True, False),
                             service("client", False, False)]))
    base = "svc.cluster.local"
    assert (f"q-0.hl.default.{base}", "127.9.1.1") in got
    assert (f"q-1.hl.default.{base}", "127.9.1.2") in got     # published while not ready
    assert not any(name.startswith("q-2.") for name, _ in got)
    assert (f"hl.default.{base}", "127.9.1.2") in got
    assert (f"strict.default.{base}", "127.9.1.2") not in got  # not ready, not published
    assert (f"strict.default.{base}", "127.9.1.1") in got
    assert {ip for name, ip in got if name == f"client.default.{base}"} == {
        "127.9.1.1", "127.9.1.3"}
    assert not any("elsewhere" in name or ip == "127.9.1.4" for name, ip in got)


def test_resolver_uses_the_pod_namespace_search_path(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    write_hosts(hosts, [("q-0.hl.default.svc.cluster.local", "127.9.1.1"),
                        ("hl.default.svc.cluster.local", "127.9.1.1")])
    r = Resolver(hosts, "default")
    for name in ("q-0.hl", "q-0.hl.default", "q-0.hl.default.svc",
                 "q-0.hl.default.svc.cluster.local", "Q-0.HL.default.svc.cluster.local."):
        assert r.lookup(name) == ["127.9.1.1"], name
    assert r.lookup("q-1.hl") == []            # a cluster name with no record: NXDOMAIN
    assert r.lookup("nope.default.svc") == []
    assert r.lookup("example.com") is None     # not a cluster name: the system resolver's
    assert Resolver(hosts, "other").lookup("q-0.hl") == []
    assert Resolver(hosts, "other").lookup("q-0.hl.default") == ["127.9.1.1"]
    write_hosts(hosts, [("q-1.hl.default.svc.cluster.local", "127.9.1.2")])
    assert r.lookup("q-1.hl") == ["127.9.1.2"]  # the file is re-read when it changes


PROBE = """
import asyncio, json, os, socket, sys
from kraft_sandbox.dns import Resolver
from kraft_sandbox.launch import install
install(os.environ["SANDBOX_POD_IP"], Resolver(os.environ["SANDBOX_HOSTS"], "default"))
out = {"q0": sorted({a[4][0] for a in socket.getaddrinfo("q-0.hl", 9093)})}
try:
    socket.getaddrinfo("q-9.hl", 9093)
    out["q9"] = "resolved"
except socket.gaierror:
    out["q9"] = "nxdomain"
async def main():
    server = await asyncio.start_server(lambda r, w: w.close(), "0.0.0.0", 0)
    out["bound"] = server.sockets[0].getsockname()[0]
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("q-0.hl", port)
    out["peer"], out["local"] = writer.get_extra_info("peername")[0], writer.get_extra_info("sockname")[0]
    writer.close()
    server.close()
asyncio.run(main())
print(json.dumps(out))
"""


def test_launcher_resolves_cluster_names_and_binds_the_pod_address(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    pod_ip = "127.9.1.1"
    write_hosts(hosts, [("q-0.hl.default.svc.cluster.local", pod_ip)])
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env={"SANDBOX_POD_IP": pod_ip, "SANDBOX_HOSTS": str(hosts),
                               "PATH": "/usr/bin:/bin"}, timeout=60, check=True)
    out = json.loads(done.stdout)
    assert out == {"q0": [pod_ip], "q9": "nxdomain", "bound": pod_ip, "peer": pod_ip,
                   "local": pod_ip}
    # the machine's resolver never learnt the name
    try:
        socket.getaddrinfo("q-0.hl.default.svc.cluster.local", 1)
        system_knows = True
    except socket.gaierror:
        system_knows = False
    assert not system_knows
