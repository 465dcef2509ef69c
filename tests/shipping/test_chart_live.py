"""The chart in the sandbox: `kubectl apply -f crds/`, then the rendered chart (`helm template |
kubectl apply --validate=false`), then the operator the chart's Deployment describes, run as the
Pod a ReplicaSet would make from its template, bringing up the chart's KRaftQuorum; then a
scale-down with the PodDisruptionBudget switched off.

Every request that reaches the emulated API is recorded; only kubectl (this test) and the
operator (kopf's own client and the kubernetes client under kraft_operator.kube) talk to it,
so the requests not made by kubectl are the operator's, and the chart's RBAC is compared with them both ways: every call is allowed by the
rules bound to the chart's ServiceAccount, and every rule is used by a call (least privilege),
except the few this run cannot reach, each named below with the code that needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from kraft_sandbox import apiserver
from kraft_sandbox.cli import claim_network
from kraft_sandbox.emulator import SandboxEmulator
from kraft_sandbox.handle import find_tool
from kraft_sandbox.kubelet import KubeletSettings
from kraft_sandbox.runtime import run_sandbox

from tests.shipping.test_chart import CHART, ROOT, helm

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operator_live")]

RELEASE_NS = "kraft-system"
QUORUM_NS = "kafka"
QUORUM = "meta"

# Granted by the chart, not reached by this run (the test fails if the run starts reaching one,
# so the list never hides a rule that is in use): each with the operator code that needs it.
NOT_REACHED = {
    ("", "pods", "get"):
        "operator/actions/pods.py: a pod create that conflicts is read back",
    ("", "persistentvolumeclaims", "get"):
        "operator/actions/volumes.py: a claim create that conflicts is read back",
    ("", "secrets", "patch"):
        "operator/actions/tls.py: a certificate is re-issued (renewal, a changed name or CA)",
}


# ------------------------------------------------------------------ recording the API's requests


@attrs.define(kw_only=True)
class RecordingEmulator(SandboxEmulator):
    """The sandbox's API server, keeping (User-Agent, method, path, query) of each request."""

    requests: list[tuple[str, str, str, dict[str, str]]] = attrs.field(factory=list, init=False)

    async def _handle(self, request: Any) -> Any:
        raw = request._raw_request
        self.requests.append((raw.headers.get("User-Agent") or "", raw.method, raw.path,
                              dict(raw.query)))
        return await super()._handle(request)


@dataclass(frozen=True)
class Call:
    """One API request as RBAC sees it."""

    group: str
    resource: str  # plural, or plural/subresource
    verb: str
    namespace: str | None
    name: str | None


def as_call(method: str, path: str, query: dict[str, str]) -> Call | None:
    """The RBAC attributes of a request; None for non-resource URLs (discovery, /version)."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], (rest[1] if len(rest) > 1 else None)
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("true", "1") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
        if method == "DELETE":
            verb = "delete" if name else "deletecollection"
    return Call(group, resource, verb, namespace, name)


def test_request_attributes_follow_kubernetes_rbac() -> None:
    assert as_call("GET", "/api/v1/namespaces/a/pods", {}) == Call("", "pods", "list", "a", None)
    assert as_call("GET", "/apis/kraft.dev/v1alpha1/kraftquorums", {"watch": "true"}) == \
        Call("kraft.dev", "kraftquorums", "watch", None, None)
    assert as_call("PATCH", "/apis/kraft.dev/v1alpha1/namespaces/a/kraftquorums/q/status",
                   {}) == Call("kraft.dev", "kraftquorums/status", "patch", "a", "q")
    assert as_call("DELETE", "/api/v1/namespaces/a/pods/p", {}).verb == "delete"
    assert as_call("GET", "/api/v1/nodes", {}) == Call("", "nodes", "list", None, None)
    assert as_call("GET", "/apis", {}) is None and as_call("GET", "/version", {}) is None


def bound_rules(docs: list[dict[str, Any]], account: str, account_ns: str
                ) -> list[tuple[str | None, dict[str, Any]]]:
    """(namespace or None for cluster-wide, rule) for every rule bound to the account."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out = []
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account
                   and s["namespace"] == account_ns for s in binding["subjects"]):
            continue
        ns = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"])]
        out += [(ns, rule) for rule in role["rules"]]
    return out


def allows(rule: dict[str, Any], call: Call) -> bool:
    if call.group not in rule["apiGroups"] or call.resource not in rule["resources"]:
        return False
    if call.verb not in rule["verbs"]:
        return False
    names = rule.get("resourceNames")
    return not names or call.name in names


def granted(rules: list[tuple[str | None, dict[str, Any]]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for _ns, rule in rules for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


def test_rbac_evaluation_refuses_what_no_rule_allows(tmp_path: Path) -> None:
    def rules_of(*extra: str) -> list[Any]:
        docs = [d for d in yaml.safe_load_all(helm(
            "template", "kraft-operator", str(CHART), "-n", RELEASE_NS, *extra).stdout) if d]
        return bound_rules(docs, "kraft-operator", RELEASE_NS)

    # by default the operator's rights over pods are in its own namespace alone
    scoped = rules_of()
    assert not any((ns is None or ns == "a") and allows(rule, Call("", "pods", "create", "a", None))
                   for ns, rule in scoped)
    assert any((ns is None or ns == RELEASE_NS)
               and allows(rule, Call("", "pods", "create", RELEASE_NS, None))
               for ns, rule in scoped)
    rules = rules_of("--set", "watchAllNamespaces=true")

    def ok(call: Call) -> bool:
        return any((ns is None or ns == call.namespace) and allows(rule, call)
                   for ns, rule in rules)

    assert ok(Call("", "pods", "create", "a", None))
    assert not ok(Call("", "secrets", "delete", "a", "s"))
    assert not ok(Call("", "secrets", "list", "a", None))  # its own Secrets by name only
    assert not ok(Call("", "pods", "update", "a", "p"))
    assert ok(Call("coordination.k8s.io", "leases", "patch", RELEASE_NS, "kraft-operator"))
    # the claims on the quorums, Leases beside them wherever they are (names not known before)
    assert ok(Call("coordination.k8s.io", "leases", "patch", "a", "q.kraftquorums.kraft.dev"))
    assert ok(Call("coordination.k8s.io", "leases", "create", "a", None))
    assert not ok(Call("coordination.k8s.io", "leases", "delete", "a", "q.kraftquorums.kraft.dev"))
    assert not ok(Call("coordination.k8s.io", "leases", "update", RELEASE_NS, "kraft-operator"))


# ------------------------------------------------------------------ an in-process sandbox


class Running:
    """A sandbox served by a thread of this process, with the recording emulator."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stop: asyncio.Event | None = None
        self.sandbox: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="sandbox", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self.stop = asyncio.Event()
            network, lock = claim_network(None)
            settings = KubeletSettings(state_dir=self.state_dir, nodes=3, network=network,
                                       backoff_base_s=0.2, heartbeat_s=0.5)
            try:
                async with run_sandbox(settings) as sandbox:
                    self.sandbox = sandbox
                    self.ready.set()
                    await self.stop.wait()
            finally:
                lock.close()

        try:
            self.loop.run_until_complete(main())
        except BaseException as exc:
            self.error = exc
            self.ready.set()
        finally:
            self.loop.close()

    @property
    def emulator(self) -> RecordingEmulator:
        api = self.sandbox.kubelet.api
        assert isinstance(api, RecordingEmulator)
        return api

    def kubectl(self, *args: str, input: str | None = None, check: bool = True
                ) -> subprocess.CompletedProcess[str]:
        kubectl = find_tool("kubectl")
        if kubectl is None:
            pytest.fail("no kubectl: run `make k8s-bins`")
        proc = subprocess.run([kubectl, "--kubeconfig", str(self.state_dir / "kubeconfig"),
                               *args], input=input, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc

    def get(self, *args: str) -> Any:
        proc = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None


@contextlib.contextmanager
def in_process_sandbox(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    monkeypatch.setattr(apiserver, "SandboxEmulator", RecordingEmulator)
    # the image has dumb-init on PATH; here it is the dev extra's, next to this interpreter
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    running = Running(state_dir)
    running.thread.start()
    running.ready.wait(60)
    if running.error is not None or running.sandbox is None:
        raise RuntimeError(f"the sandbox did not start: {running.error!r}")
    try:
        yield running
    finally:
        if running.stop is not None:
            running.loop.call_soon_threadsafe(running.stop.set)
        running.thread.join(60)


def wait_until(what: str, check: Any, timeout_s: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})")


def condition(obj: Any, name: str) -> str | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == name:
            return str(c.get("status"))
    return None


def pod_from_template(deployment: dict[str, Any]) -> dict[str, Any]:
    """The Pod a Deployment's ReplicaSet makes (the sandbox has no Deployment controller)."""
    template = deployment["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{deployment['metadata']['name']}-7d9f8c-x2x4k",
                         "namespace": deployment["metadata"]["namespace"],
                         "labels": template["metadata"]["labels"],
                         "annotations": template["metadata"].get("annotations") or {}},
            "spec": template["spec"]}


# ------------------------------------------------------------------ the test


def refused_calls(requests: list[tuple[str, str, str, dict[str, str]]],
                  docs: list[dict[str, Any]]) -> tuple[list[Call], list[str]]:
    """The operator's calls (all but kubectl's), and those its bound rules do not allow."""
    agents = {agent.split("/")[0] for agent, *_ in requests} - {"kubectl"}
    assert agents == {"kopf", "OpenAPI-Generator"}, f"unexpected API clients: {agents}"
    calls = [c for agent, method, path, query in requests if not agent.startswith("kubectl/")
             and (c := as_call(method, path, query)) is not None]
    rules = bound_rules(docs, "kraft-operator", RELEASE_NS)
    refused = sorted({f"{c.verb} {c.group or 'core'}/{c.resource} in {c.namespace or '(cluster)'}"
                      for c in calls if not any((ns is None or ns == c.namespace)
                                                and allows(rule, c) for ns, rule in rules)})
    return calls, refused


def runbook_inspect_pod() -> str:
    """The one-off pod of docs/runbook.md that runs `kraft recover inspect` on a claim."""
    text = (ROOT / "docs" / "runbook.md").read_text()
    match = re.search(r"<<'EOF'\n(.*?name: demo-0-inspect.*?)\nEOF\n", text, re.S)
    assert match, "docs/runbook.md has no inspect pod"
    return match.group(1)


def install(sb: Running, tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    """crds/, the namespaces, the rendered chart, and the operator's pod; returns the docs."""
    values_path = tmp_path / "values.yaml"
    values_path.write_text(yaml.safe_dump(values))
    rendered = helm("template", "kraft-operator", str(CHART), "-n", RELEASE_NS,
                    "--values", str(values_path)).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    (tmp_path / "operator.yaml").write_text(rendered)
    # the install steps of docs/install.md, with the real kubectl
    sb.kubectl("apply", "--validate=false", "-f", str(ROOT / "crds"))
    sb.kubectl("create", "namespace", RELEASE_NS)
    sb.kubectl("create", "namespace", QUORUM_NS)
    applied = sb.kubectl("apply", "--validate=false", "-f", str(tmp_path / "operator.yaml"))
    for doc in docs:
        assert f"{doc['kind'].lower()}" in applied.stdout.lower()
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = pod_from_template(deployment)
    sb.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(pod))
    name = pod["metadata"]["name"]
    wait_until("the operator pod to be Ready (its /healthz)", lambda: condition(
        sb.get("pod", "-n", RELEASE_NS, name), "Ready") == "True")
    return docs


def test_the_chart_watching_one_namespace_allows_what_the_operator_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """watchNamespaces: Roles in the watched namespace instead of a ClusterRole; kopf then
    watches that namespace alone, and every call is still allowed."""
    values = {"watchNamespaces": [QUORUM_NS], "operator": {"interval": 1, "adminTimeout": 5},
              "quorum": {"create": True, "name": QUORUM, "namespace": QUORUM_NS,
                         "spec": {"replicas": 1}}}
    with in_process_sandbox(tmp_path / "sandbox", monkeypatch) as sb:
        docs = install(sb, tmp_path, values)
        assert {d["kind"] for d in docs} >= {"Role", "RoleBinding"}
        wait_until("the chart's KRaftQuorum Ready", lambda: condition(
            sb.get("kq", "-n", QUORUM_NS, QUORUM), "Ready") == "True", timeout_s=240)
        requests = list(sb.emulator.requests)
    calls, refused = refused_calls(requests, docs)
    assert any(c.namespace == QUORUM_NS and c.resource == "pods" for c in calls)
    assert not refused, "the operator made calls the chart's RBAC refuses:\n" + "\n".join(refused)


def test_the_chart_runs_the_operator_that_brings_up_a_quorum(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"watchAllNamespaces": True, "operator": {"interval": 1, "adminTimeout": 5},
              "quorum": {"create": True, "name": QUORUM, "namespace": QUORUM_NS,
                         "spec": {"replicas": 3,
                                  "storage": {"size": "1Gi", "onScaleDown": "Delete"}}}}
    with in_process_sandbox(tmp_path / "sandbox", monkeypatch) as sb:
        docs = install(sb, tmp_path, values)
        assert sb.get("serviceaccount", "-n", RELEASE_NS, "kraft-operator")
        assert sb.get("clusterrole", "kraft-operator")
        assert sb.get("kq", "-n", QUORUM_NS, QUORUM)
        lease = wait_until("the operator's Lease", lambda: sb.get(
            "lease", "-n", RELEASE_NS, "kraft-operator"))
        assert lease["spec"]["holderIdentity"]

        quorum = wait_until("the chart's KRaftQuorum Ready", lambda: (
            (q := sb.get("kq", "-n", QUORUM_NS, QUORUM)) and condition(q, "Ready") == "True"
            and q), timeout_s=240)
        assert len(quorum["status"]["voters"]) == 3
        # the chart's labels on the KRaftQuorum (as Argo CD's would be) stay off its children
        for kind in ("pods", "pvc", "services", "configmaps"):
            for child in sb.get(kind, "-n", QUORUM_NS)["items"]:
                assert "helm.sh/chart" not in (child["metadata"].get("labels") or {}), kind

        # scale down: a pod and its claim deleted, the budget patched (no pod may go now)
        sb.kubectl("scale", "kq", QUORUM, "-n", QUORUM_NS, "--replicas=2")
        wait_until("the scale-down to 2 voters with its pod and claim gone", lambda: (
            (q := sb.get("kq", "-n", QUORUM_NS, QUORUM))
            and len((q.get("status") or {}).get("voters") or []) == 2
            and condition(q, "Ready") == "True"
            and len(sb.get("pods", "-n", QUORUM_NS)["items"]) == 2
            and len(sb.get("pvc", "-n", QUORUM_NS)["items"]) == 2
            and [p["spec"].get("maxUnavailable")
                 for p in sb.get("pdb", "-n", QUORUM_NS)["items"]] == [0]), timeout_s=240)
        # the quorum's NetworkPolicy, owned by it (the sandbox enforces none)
        (netpol,) = sb.get("networkpolicy", "-n", QUORUM_NS)["items"]
        assert netpol["metadata"]["ownerReferences"][0]["kind"] == "KRaftQuorum"
        # a rule added by hand (every namespace to every port) is taken out again
        wider = [*netpol["spec"]["ingress"], {"from": [{"namespaceSelector": {}}]}]
        sb.kubectl("patch", "networkpolicy", QUORUM, "-n", QUORUM_NS, "--type=merge", "-p",
                   json.dumps({"spec": {"ingress": wider}}))
        wait_until("the NetworkPolicy's rules restored", lambda: len(sb.get(
            "networkpolicy", "-n", QUORUM_NS, QUORUM)["spec"]["ingress"]) == 2)
        # the budget and the NetworkPolicy switched off: deleted
        sb.kubectl("patch", "kq", QUORUM, "-n", QUORUM_NS, "--type=merge", "-p",
                   json.dumps({"spec": {"podDisruptionBudget": {"enabled": False},
                                        "networkPolicy": {"enabled": False}}}))
        wait_until("the PodDisruptionBudget and the NetworkPolicy deleted",
                   lambda: not sb.get("pdb", "-n", QUORUM_NS)["items"]
                   and not sb.get("networkpolicy", "-n", QUORUM_NS)["items"])
        # a Service edited by hand: patched back to the rendering
        sb.kubectl("label", "service", f"{QUORUM}-client", "-n", QUORUM_NS,
                   "app.kubernetes.io/part-of-")
        wait_until("the client Service's label restored", lambda: (
            sb.get("service", "-n", QUORUM_NS, f"{QUORUM}-client")["metadata"]["labels"]
            .get("app.kubernetes.io/part-of") == "kraft-quorum"))
        requests = list(sb.emulator.requests)

        # docs/runbook.md's by-hand step: the quorum paused, a node's pod stopped, and
        # `kraft recover inspect` run in the runbook's one-off pod on its claim
        sb.kubectl("patch", "kq", QUORUM, "-n", QUORUM_NS, "--type=merge", "-p",
                   json.dumps({"spec": {"paused": True}}))
        wait_until("the quorum paused", lambda: condition(
            sb.get("kq", "-n", QUORUM_NS, QUORUM), "ReconciliationPaused") == "True")
        sb.kubectl("delete", "pod", f"{QUORUM}-0", "-n", QUORUM_NS, "--wait=true")
        sb.kubectl("apply", "--validate=false", "-n", QUORUM_NS, "-f", "-",
                   input=runbook_inspect_pod().replace("demo", QUORUM))
        wait_until("the inspect pod to finish", lambda: (
            sb.get("pod", "-n", QUORUM_NS, f"{QUORUM}-0-inspect") or {}).get(
                "status", {}).get("phase") == "Succeeded", timeout_s=120)
        inspected = json.loads(sb.kubectl("logs", "-n", QUORUM_NS, f"{QUORUM}-0-inspect").stdout)
        assert inspected["node_id"] == 0 and inspected["log_end_offset"] > 0
        assert inspected["is_voter"] is True
        assert sb.get("pod", "-n", QUORUM_NS, f"{QUORUM}-0") is None  # paused: not re-created

    calls, refused = refused_calls(requests, docs)
    rules = bound_rules(docs, "kraft-operator", RELEASE_NS)
    assert not refused, "the operator made calls the chart's RBAC refuses:\n" + "\n".join(refused)
    used = {(c.group, c.resource, c.verb) for c in calls}
    unused = granted(rules) - used
    assert unused == set(NOT_REACHED), (
        f"granted but never used: {sorted(unused - set(NOT_REACHED))}; "
        f"now used (drop from NOT_REACHED): {sorted(set(NOT_REACHED) - unused)}")
