"""The sandbox on the real control plane (`kraft-sandbox up --control-plane real`): etcd,
kube-apiserver v1.35, kube-controller-manager and kube-scheduler as processes on loopback
(built once by `make k8s-control-plane`), the sandbox's kubelets registering real Nodes
with Leases, running the pods kube-scheduler bound, provisioning their claims' volumes,
serving their logs through the API server.

One control plane and one quorum for the whole module, in steps: the chart installed with
the real helm into a namespace whose Pod Security admission enforces the "restricted"
profile, its operator a pod under the chart's ServiceAccount (RBAC enforced by the real
authorizer); `kubectl explain kq.spec` from the CRD's OpenAPI schema; a KRaftQuorum Ready;
a follower's disk failure healed; a Node failure handled; and a verb taken out of the
operator's ClusterRole reported loudly (condition, Warning Event, log line), then granted
again."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kraft_sandbox.controlplane import ControlPlaneError, find_binaries
from kraft_sandbox.handle import SandboxHandle, find_kubectl, find_tool, start_sandbox

from tests.sandbox.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("real-control-plane")]

NS = "secure"
RELEASE = "kraft-operator"  # the chart's full name is then kraft-operator too
CHART = Path(__file__).resolve().parents[2] / "charts" / "kraft-operator"
QUORUM = "demo"


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    try:
        find_binaries()
    except ControlPlaneError as exc:
        pytest.fail(str(exc))
    if find_kubectl() is None or find_tool("helm") is None:
        pytest.fail("no kubectl or helm: run `make k8s-bins`")
    with start_sandbox(tmp_path_factory.mktemp("real") / "sandbox", nodes=3,
                       backoff_base_s=0.2, heartbeat_s=0.5, control_plane="real",
                       startup_timeout_s=120) as handle:
        yield handle


def _get(sb: SandboxHandle, *args: str) -> Any:
    return json.loads(sb.kubectl("get", *args, "-o", "json").stdout)


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == type_), {})


def _ready(obj: dict[str, Any]) -> bool:
    return _condition(obj, "Ready").get("status") == "True"


def _quorum(sb: SandboxHandle) -> dict[str, Any]:
    return _get(sb, "-n", NS, "kq", QUORUM)  # type: ignore[no-any-return]


def _voters(obj: dict[str, Any]) -> dict[int, str]:
    return {v["id"]: v["directoryId"] for v in (obj.get("status") or {}).get("voters") or []}


def _settled(sb: SandboxHandle) -> dict[str, Any] | None:
    """The quorum Ready, of three voters, for its current generation."""
    obj = _quorum(sb)
    status = obj.get("status") or {}
    if _ready(obj) and len(_voters(obj)) == 3 and \
            status.get("observedGeneration") == obj["metadata"]["generation"]:
        return obj
    return None


def _operator_pod(sb: SandboxHandle) -> dict[str, Any]:
    return wait_for("the operator's pod Ready", lambda: next(
        (p for p in _get(sb, "-n", NS, "pods", "-l",
                         "app.kubernetes.io/name=kraft-operator")["items"] if _ready(p)),
        None), timeout_s=90, every_s=0.5)


def _operator_log(sb: SandboxHandle) -> str:
    return sb.kubectl("logs", "-n", NS, _operator_pod(sb)["metadata"]["name"]).stdout


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


def test_real_nodes_each_written_by_its_own_kubelet(sb: SandboxHandle) -> None:
    version = json.loads(sb.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert version["gitVersion"] == "v1.35.4"  # the real kube-apiserver, not v0.0.0

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


def test_helm_installs_the_chart_into_a_restricted_namespace(sb: SandboxHandle) -> None:
    sb.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest"}}}))
    # Pod Security admission is on: a pod the restricted profile refuses is refused
    refused = sb.kubectl("run", "-n", NS, "rooted", "--image=busybox", "--restart=Never",
                         check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in \
        refused.stderr, refused.stderr
    sb.helm("install", RELEASE, str(CHART), "--namespace", NS)
    assert json.loads(sb.helm("list", "-n", NS, "-o", "json").stdout)[0]["status"] == \
        "deployed"

    # the operator's pod runs as the chart's ServiceAccount, whose RBAC the API enforces
    operator = _operator_pod(sb)
    assert operator["spec"]["serviceAccountName"] == RELEASE
    assert _as_pod(sb, operator, f"/apis/kraft.dev/v1alpha1/namespaces/{NS}/"
                                 "kraftquorums") == 200
    assert _as_pod(sb, operator, f"/api/v1/namespaces/{NS}/secrets") == 403
    assert _as_pod(sb, operator, "/api/v1/nodes") == 200

    # the CRD the chart installed is served (discovery, its short name) and published in
    # OpenAPI v3: kubectl explains its fields. (kubectl keeps discovery in a cache that
    # `explain` does not refresh when a name is missing: `api-resources` reads it afresh.)
    resources = sb.kubectl("api-resources", "--api-group=kraft.dev", "-o", "wide").stdout
    assert "kraftquorums" in resources and " kq " in resources, resources
    explained = sb.kubectl("explain", "kq.spec").stdout
    assert "KIND:       KRaftQuorum" in explained
    for field in ("replicas", "storage", "config", "nodeFailureGracePeriodSeconds"):
        assert f"  {field}\t" in explained, (field, explained)


def test_a_quorum_the_operator_creates_is_ready(sb: SandboxHandle) -> None:
    sb.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps({
        "apiVersion": "kraft.dev/v1alpha1", "kind": "KRaftQuorum",
        "metadata": {"name": QUORUM}, "spec": {
            "replicas": 3, "nodeFailureGracePeriodSeconds": 10,
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}}}))
    quorum = wait_for("the KRaftQuorum Ready", lambda: _settled(sb), timeout_s=150,
                      every_s=0.5)
    assert quorum["status"]["leader"]["id"] in (0, 1, 2)

    # kube-scheduler bound the pods (the sandbox's own scheduler does not run here), and
    # kube-controller-manager bound each claim to the local volume the sandbox provisioned
    # on the pod's node
    pods = {p["metadata"]["name"]: p for p in _get(
        sb, "-n", NS, "pods", "-l", f"app.kubernetes.io/instance={QUORUM}")["items"]}
    assert sorted(pods) == [f"{QUORUM}-0", f"{QUORUM}-1", f"{QUORUM}-2"]
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
    logs = sb.kubectl("logs", "-n", NS, f"{QUORUM}-0", "-c", "format").stdout
    assert "Formatting" in logs

    # the standing objects, once made, stay put: nothing the real API server defaults (a
    # Service port's protocol) reads as a difference to patch on every pass
    operator_log = _operator_log(sb)
    assert f"created Service {QUORUM}-client" in operator_log
    assert "updated Service" not in operator_log
    assert "event=forbidden" not in operator_log  # the chart grants all it needs


def _follower(sb: SandboxHandle, avoid_node: str | None = None) -> tuple[int, dict[str, Any]]:
    quorum = wait_for("the quorum settled", lambda: _settled(sb), timeout_s=120, every_s=0.5)
    leader = quorum["status"]["leader"]["id"]
    for node_id in sorted(_voters(quorum), reverse=True):
        pod = _get(sb, "-n", NS, "pod", f"{QUORUM}-{node_id}")
        if node_id != leader and pod["spec"].get("nodeName") != avoid_node:
            return node_id, pod
    pytest.fail(f"no follower off {avoid_node}: {quorum['status']}")


def test_a_followers_disk_failure_is_healed(sb: SandboxHandle) -> None:
    node_id, _pod = _follower(sb)
    before = _voters(_quorum(sb))[node_id]
    sb.faults.wipe_pvc(NS, f"data-{QUORUM}-{node_id}")

    def healed() -> dict[str, Any] | None:
        obj = _settled(sb)
        return obj if obj and _voters(obj).get(node_id) not in (None, before) else None

    quorum = wait_for(f"voter {node_id} back with a new directory id", healed,
                      timeout_s=120, every_s=0.5)
    assert sorted(_voters(quorum)) == [0, 1, 2]  # the stale incarnation removed
    reasons = {e["reason"] for e in _get(sb, "-n", NS, "events")["items"]}
    assert {"DiskReplaced", "VoterRemoved", "VoterAdded"} <= reasons


def test_a_node_failure_is_handled(sb: SandboxHandle) -> None:
    operator_node = _operator_pod(sb)["spec"]["nodeName"]
    node_id, pod = _follower(sb, avoid_node=operator_node)
    host, old_uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    claim_uid = _get(sb, "-n", NS, "pvc", f"data-{QUORUM}-{node_id}")["metadata"]["uid"]
    sb.faults.node_down(host)

    def replaced() -> dict[str, Any] | None:
        if not _settled(sb):
            return None
        new = _get(sb, "-n", NS, "pod", f"{QUORUM}-{node_id}")
        claim = _get(sb, "-n", NS, "pvc", f"data-{QUORUM}-{node_id}")
        if new["metadata"]["uid"] == old_uid or claim["metadata"]["uid"] == claim_uid:
            return None
        return new if new["spec"].get("nodeName") not in (None, host) else None

    try:
        wait_for(f"{QUORUM}-{node_id} replaced off the failed Node {host}", replaced,
                 timeout_s=150, every_s=0.5)
    finally:
        sb.faults.node_up(host)
    reasons = {e["reason"] for e in _get(sb, "-n", NS, "events")["items"]}
    assert "DeletedPodNodeFailed" in reasons


def test_a_verb_taken_from_the_clusterrole_fails_loudly(sb: SandboxHandle) -> None:
    """The operator needs `list nodes` to see a Node failure: without it a pass goes on but
    says so, on the KRaftQuorum, in a Warning Event and in its log; granted again, the
    condition turns False."""
    role = f"{RELEASE}-cluster"
    rules = _get(sb, "clusterrole", role)["rules"]
    index = next(i for i, r in enumerate(rules) if r["resources"] == ["nodes"])
    assert rules[index]["verbs"] == ["list"]
    sb.kubectl("patch", "clusterrole", role, "--type=json", "-p", json.dumps(
        [{"op": "remove", "path": f"/rules/{index}"}]))
    try:
        forbidden = wait_for("the Forbidden condition", lambda: next(
            (c for c in [_condition(_quorum(sb), "Forbidden")] if c.get("status") == "True"),
            None), timeout_s=60, every_s=0.5)
        assert forbidden["message"].startswith("the operator may not list nodes:"), forbidden
        assert f"system:serviceaccount:{NS}:{RELEASE}" in forbidden["message"]
        warnings = _get(sb, "-n", NS, "events", "--field-selector",
                        "type=Warning,reason=Forbidden")["items"]
        assert [e["message"] for e in warnings] == [forbidden["message"]]
        assert warnings[0]["involvedObject"]["name"] == QUORUM
        line = next(x for x in _operator_log(sb).splitlines() if "event=forbidden" in x)
        assert "level=ERROR" in line and "verb=list resource=nodes" in line, line
    finally:  # the chart's rule back
        sb.kubectl("patch", "clusterrole", role, "--type=json", "-p", json.dumps(
            [{"op": "add", "path": f"/rules/{index}", "value": rules[index]}]))
    wait_for("Forbidden False once granted again", lambda: _condition(
        _quorum(sb), "Forbidden").get("status") == "False", timeout_s=60, every_s=0.5)
    assert _settled(sb)
