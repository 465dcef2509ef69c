"""The sandbox on the real control plane (`kraft-sandbox up --control-plane real`): etcd,
kube-apiserver v1.35, kube-controller-manager and kube-scheduler as processes on loopback
(built once by `make k8s-control-plane`), the sandbox's kubelets registering real Nodes
with Leases, running the pods kube-scheduler bound, provisioning their claims' volumes,
serving their logs through the API server; the operator as a pod with its ServiceAccount's
token, under the chart's RBAC as the real authorizer enforces it. A KRaftQuorum it creates,
in a namespace whose Pod Security admission enforces the "restricted" profile, becomes
Ready."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kraft_sandbox.controlplane import ControlPlaneError, find_binaries
from kraft_sandbox.handle import SandboxHandle, start_sandbox

from tests.sandbox.conftest import wait_for

pytestmark = pytest.mark.slow

NS = "secure"


@pytest.fixture
def real_sandbox(tmp_path: Path, kubectl_path: str) -> Any:
    try:
        find_binaries()
    except ControlPlaneError as exc:
        pytest.fail(str(exc))
    with start_sandbox(tmp_path / "sandbox", nodes=3, backoff_base_s=0.2, heartbeat_s=0.5,
                       control_plane="real", startup_timeout_s=120,
                       extra_args=["--operator"]) as handle:
        yield handle


def _get(sb: SandboxHandle, *args: str) -> Any:
    return json.loads(sb.kubectl("get", *args, "-o", "json").stdout)


def _ready(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _as_pod(sb: SandboxHandle, pod: dict[str, Any], path: str) -> int:
    """GET `path` with the credentials the sandbox gave the pod's container: its status."""
    meta = pod["metadata"]
    config_path = next((sb.state_dir / "pods").glob(
        f"{meta['namespace']}_{meta['name']}_*/kubeconfig-operator"))
    config = json.loads(config_path.read_text())
    user = config["users"][0]["user"]
    assert set(user) == {"tokenFile"}, user  # a ServiceAccount token, no certificate
    token = Path(user["tokenFile"]).read_text()
    cluster = config["clusters"][0]["cluster"]
    ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
    req = urllib.request.Request(cluster["server"] + path,
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _as_node(sb: SandboxHandle, node: str, path: str,
             review: bool = False) -> tuple[int, Any]:
    """A GET with the kubelet certificate of `node` (with `review`, the POST of a
    SelfSubjectReview: who the API server takes the caller for)."""
    pki = sb.state_dir / "control-plane" / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / f"node-{node}.crt"), str(pki / f"node-{node}.key"))
    data = None if not review else json.dumps(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
    req = urllib.request.Request(sb.url + path, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), None


def test_a_quorum_the_operator_creates_is_ready_on_the_real_control_plane(
        real_sandbox: SandboxHandle) -> None:
    sb = real_sandbox
    version = json.loads(sb.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert version["gitVersion"] == "v1.35.4"  # the real kube-apiserver, not v0.0.0

    # real Nodes: Ready, with addresses, capacity and a node Lease each renews
    def ready_nodes() -> list[dict[str, Any]] | None:
        # Ready, and the not-ready taint that admission put on at registration taken off
        # by the node lifecycle controller
        ready = [n for n in _get(sb, "nodes")["items"]
                 if _ready(n) and not (n.get("spec") or {}).get("taints")]
        return ready if len(ready) == 3 else None

    nodes = wait_for("three Ready, untainted nodes", ready_nodes)
    for node in nodes:
        name = node["metadata"]["name"]
        assert {"type": "InternalIP", "address": node["status"]["addresses"][0]["address"]} \
            in node["status"]["addresses"]
        assert node["status"]["capacity"]["pods"] == "110"
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions == {"Ready": "True", "MemoryPressure": "False",
                              "DiskPressure": "False", "PIDPressure": "False"}
        lease = _get(sb, "lease", "-n", "kube-node-lease", name)
        assert lease["spec"]["holderIdentity"] == name
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]

    # each kubelet writes as its node, which the Node authorizer limits to its own objects
    status, who = _as_node(sb, "sandbox-node-0", "/apis/authentication.k8s.io/v1/"
                                                 "selfsubjectreviews", review=True)
    assert status == 201 and who["status"]["userInfo"]["username"] == \
        "system:node:sandbox-node-0"
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    assert _as_node(sb, "sandbox-node-0", f"{leases}/sandbox-node-0")[0] == 200
    assert _as_node(sb, "sandbox-node-0", f"{leases}/sandbox-node-1")[0] == 403

    # the operator's pod runs as the chart's ServiceAccount, whose RBAC the API enforces
    operator = wait_for("the operator's pod running", lambda: next(
        (p for p in _get(sb, "pods", "-l", "app.kubernetes.io/name=kraft-operator")["items"]
         if _ready(p)), None), timeout_s=90)
    assert operator["spec"]["serviceAccountName"] == "kraft-operator"
    assert _as_pod(sb, operator, "/apis/kraft.dev/v1alpha1/namespaces/default/"
                                 "kraftquorums") == 200
    assert _as_pod(sb, operator, "/api/v1/namespaces/default/secrets") == 403

    # in a namespace where Pod Security admission enforces the "restricted" profile
    sb.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest"}}}))
    sb.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps({
        "apiVersion": "kraft.dev/v1alpha1", "kind": "KRaftQuorum",
        "metadata": {"name": "demo"}, "spec": {
            "replicas": 3, "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}}}))
    quorum = wait_for("the KRaftQuorum Ready", lambda: next(
        (q for q in [_get(sb, "-n", NS, "kq", "demo")] if _ready(q)), None), timeout_s=150,
        every_s=0.5)
    assert quorum["status"]["leader"]["id"] in (0, 1, 2)

    # kube-scheduler bound the pods (the sandbox's own scheduler does not run here), and
    # kube-controller-manager bound each claim to the local volume the sandbox provisioned
    # on the pod's node
    pods = {p["metadata"]["name"]: p for p in _get(sb, "-n", NS, "pods", "-l",
                                                    "app.kubernetes.io/instance=demo")["items"]}
    assert sorted(pods) == ["demo-0", "demo-1", "demo-2"]
    assert {p["status"]["qosClass"] for p in pods.values()} == {"Burstable"}
    events = _get(sb, "-n", NS, "events.v1.events.k8s.io", "--field-selector",
                  "reason=Scheduled")
    scheduled = {e["regarding"]["name"]: e["reportingController"] for e in events["items"]}
    assert all(scheduled.get(name) == "default-scheduler" for name in pods), scheduled
    for name, pod in pods.items():
        claim = _get(sb, "-n", NS, "pvc", f"data-{name}")
        assert claim["status"]["phase"] == "Bound"
        volume = _get(sb, "pv", claim["spec"]["volumeName"])
        assert volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == \
            "kraft.dev/sandbox-local"
        term = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
        assert term["matchExpressions"][0]["values"] == [pod["spec"]["nodeName"]]
        assert Path(volume["spec"]["local"]["path"]).is_dir()

    # kubectl logs goes API server -> the node's kubelet endpoint
    logs = sb.kubectl("logs", "-n", NS, "demo-0", "-c", "format").stdout
    assert "Formatting" in logs

    # the standing objects, once made, stay put: nothing the real API server defaults (a
    # Service port's protocol) reads as a difference to patch on every pass
    operator_log = sb.kubectl("logs", operator["metadata"]["name"]).stdout
    assert "created Service demo-client" in operator_log
    assert "updated Service" not in operator_log
