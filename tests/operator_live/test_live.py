"""The real operator (`kraft-operator`, kopf underneath, as a pod of the sandbox: a process
of its own with the cluster's DNS) against the emulated Kubernetes API, with the sandbox's
kubelet running every pod as real `kraft` processes.

Scenarios: a 3-voter KRaftQuorum becomes Ready and Quorate with its status read from the live
quorum; `kubectl scale` to 5 (the operator SIGKILLed while a voter is being added: it
restarts, waits for its Lease to expire, and resumes) and back to 3 (the removed voters stay
removed, although their pods ran with auto-join); a follower's volume wiped under it (it comes
back with a new directory id and the stale voter is removed); a Node that goes down and comes
back Ready without its node-local volumes (the pod gets a new claim after the grace period); a
quorum created again under the same name over its kept claims (Degraded=ForeignVolume, nothing
deleted); a bad spec (an unknown config
key) reported with nothing touched; two operators, one Lease: one acts, the other waits and
takes over, and a leader that lost its Lease exits; two operators with a Lease each (the
sandbox's and a second installation's): one takes the KRaftQuorum's claim and acts alone, the
other says so (its log, one Warning Event, the condition OperatorConflict) and does nothing,
the two never fight over the status, and the other takes over once the holder stops.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kraft_operator import crdgen, models
from kraft_sandbox.handle import SandboxHandle, find_kubectl, start_sandbox

from tests.sandbox.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operator_live")]

NS = "default"
OPERATOR_HTTP_PORT = 8081
LEASE_S = 4  # short, so a restarted operator takes its Lease back quickly


def operator_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"app.kubernetes.io/name": "kraft-operator"}},
            "spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "operator", "image": "kraft-quorum",
                                     "command": ["kraft-operator", "--interval", "1",
                                                 "--http", f"0.0.0.0:{OPERATOR_HTTP_PORT}",
                                                 "--lease-duration", str(LEASE_S),
                                                 "--renew-deadline", "3",
                                                 "--retry-period", "0.5",
                                                 "--admin-timeout", "5"]}]}}


def quorum(name: str = "kq", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": models.API_VERSION, "kind": models.KIND,
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"argocd.argoproj.io/instance": "apps"}},
            "spec": {"replicas": 3, **spec}}


def apply(sb: SandboxHandle, *objects: dict[str, Any]) -> None:
    # one object per call: kubectl reads input starting with `{` as a JSON stream, in which
    # a `---` separator is a syntax error
    for o in objects:
        sb.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(o))


@contextlib.contextmanager
def crd_sandbox(base: Path) -> Iterator[SandboxHandle]:
    """A 3-node sandbox under `base` with the KRaftQuorum CRD established (the operator's
    live tests' world; the test applies its operator and quorums)."""
    if find_kubectl() is None:
        pytest.fail("no kubectl: run `make k8s-bins` (the tests need the real kubectl)")
    with start_sandbox(base / "sandbox", nodes=3, backoff_base_s=0.2,
                       heartbeat_s=0.5) as handle:
        handle.kubectl("apply", "--validate=false", "-f", "-", input=crdgen.render())
        handle.kubectl("wait", "--for=condition=Established", "crd/kraftquorums.kraft.dev")
        yield handle


@pytest.fixture
def sb(tmp_path: Path) -> Iterator[SandboxHandle]:
    with crd_sandbox(tmp_path) as handle:
        yield handle


def get(sb: SandboxHandle, kind: str, name: str | None = None) -> Any:
    args = ["get", kind] + ([name] if name else []) + ["-o", "json"]
    done = sb.kubectl(*args, check=False)
    if done.returncode != 0:
        return None
    return json.loads(done.stdout)


def cond(obj: dict[str, Any] | None, type_: str) -> tuple[str, str, str]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return c["status"], c["reason"], c.get("message", "")
    return "", "", ""


def ready(sb: SandboxHandle, name: str, replicas: int) -> dict[str, Any] | None:
    obj = get(sb, "kq", name)
    if cond(obj, "Ready")[0] != "True" or cond(obj, "Quorate")[0] != "True":
        return None
    status = obj["status"]
    if len(status.get("voters") or []) != replicas:
        return None
    return dict(obj)


def events(sb: SandboxHandle) -> list[dict[str, Any]]:
    items = get(sb, "events")["items"]
    return [e for e in items if e["involvedObject"].get("kind") == models.KIND]


def node_status(ip: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:8080/v1/status", timeout=5) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except OSError:
        return None


def pod_ips(sb: SandboxHandle, name: str = "kq") -> dict[str, str]:
    pods = get(sb, "pods")["items"]
    return {p["metadata"]["name"]: p["status"].get("podIP", "") for p in pods
            if p["metadata"]["labels"].get("app.kubernetes.io/instance") == name}


def operator_log(sb: SandboxHandle, pod: str) -> str:
    return sb.log_of(NS, pod, "operator")


def test_create_scale_up_with_the_operator_killed_and_scale_down(sb: SandboxHandle) -> None:
    apply(sb, operator_pod("op-a"), quorum())
    obj = wait_for("a 3-voter quorum Ready and Quorate", lambda: ready(sb, "kq", 3),
                   timeout_s=120)
    status = obj["status"]
    # status comes from the live quorum: the initial voters with their directory ids
    assert {(v["id"], v["directoryId"]) for v in status["voters"]} == \
        {(v["id"], v["directoryId"]) for v in status["initialVoters"]}
    assert status["leader"]["id"] in (0, 1, 2) and status["leader"]["epoch"] >= 1
    assert status["highWatermark"] >= 1 and status["votersReady"] == "3/3"
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert all(v["caughtUp"] and v["pod"] == f"kq-{v['id']}" and
               v["endpoint"] == f"kq-{v['id']}.kq.default.svc.cluster.local:9093"
               for v in status["voters"])
    # the owned objects: labels of the operator's, never the resource's own
    pods = {p["metadata"]["name"]: p for p in get(sb, "pods")["items"]}
    claims = get(sb, "pvc")["items"]
    assert len(claims) == 3
    for item in [pods["kq-0"], *claims]:
        labels = item["metadata"]["labels"]
        assert "argocd.argoproj.io/instance" not in labels
        assert labels["app.kubernetes.io/instance"] == "kq"
    assert pods["kq-0"]["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    assert get(sb, "svc", "kq")["spec"]["clusterIP"] == "None"
    assert get(sb, "svc", "kq-client") is not None
    assert get(sb, "configmap", "kq-config") is not None
    assert get(sb, "pdb", "kq")["spec"]["maxUnavailable"] == 1
    reasons = [e["reason"] for e in events(sb)]
    assert "RecordedCluster" in reasons and reasons.count("CreatedPod") == 3
    op_ip = get(sb, "pod", "op-a")["status"]["podIP"]
    with urllib.request.urlopen(f"http://{op_ip}:{OPERATOR_HTTP_PORT}/metrics",
                                timeout=5) as resp:
        metrics = resp.read().decode()
    assert 'kraft_operator_actions_total{action="CreatePod"' in metrics
    assert "kraft_operator_leader 1.0" in metrics
    with urllib.request.urlopen(f"http://{op_ip}:{OPERATOR_HTTP_PORT}/healthz",
                                timeout=5) as resp:
        assert resp.status == 200

    # scale up; kill the operator while the first new voter is being added
    sb.kubectl("scale", "kq/kq", "--replicas=5")

    def adding() -> Any:
        op = (get(sb, "kq", "kq").get("status") or {}).get("currentOperation") or {}
        return op if op.get("type") == "AddingVoter" else None

    wait_for("an AddingVoter operation", adding, timeout_s=60, every_s=0.05)
    sb.faults.kill_operator(NS)
    obj = wait_for("5 voters Ready after the operator's restart", lambda: ready(sb, "kq", 5),
                   timeout_s=150)
    assert sorted(v["id"] for v in obj["status"]["voters"]) == [0, 1, 2, 3, 4]
    assert get(sb, "pod", "op-a")["status"]["containerStatuses"][0]["restartCount"] >= 1
    assert operator_log(sb, "op-a").count("event=leading") >= 2
    assert any(e["reason"] == "SpecWarning" for e in events(sb)) is False  # 5 is odd
    # auto-join added them, and the voter set's change is an Event all the same, once each
    added = [e["message"].split()[1].split(":")[0] for e in events(sb)
             if e["reason"] == "VoterAdded"]
    assert sorted(added) == ["0", "1", "2", "3", "4"], added

    # scale down: the voters 3 and 4 leave and stay out (their pods ran with auto-join); the
    # operator is killed again once a leaving voter's pod was stopped, before its
    # RemoveRaftVoter (the window in which auto-join would re-add it were its pod running)
    sb.kubectl("scale", "kq/kq", "--replicas=3")
    wait_for("a leaving voter's pod stopped",
             lambda: any(e["reason"] == "DeletedPodStopBeforeRemove" for e in events(sb)),
             timeout_s=60, every_s=0.05)
    sb.faults.kill_operator(NS)
    obj = wait_for("3 voters Ready again", lambda: ready(sb, "kq", 3), timeout_s=150)
    assert sorted(v["id"] for v in obj["status"]["voters"]) == [0, 1, 2]

    def leftovers() -> bool:
        names = {p["metadata"]["name"] for p in get(sb, "pods")["items"]}
        claims = {c["metadata"]["name"] for c in get(sb, "pvc")["items"]}
        return not ({"kq-3", "kq-4"} & names) and not ({"data-kq-3", "data-kq-4"} & claims)

    wait_for("the removed nodes' pods and claims gone", leftovers, timeout_s=60)
    assert get(sb, "pdb", "kq")["spec"]["maxUnavailable"] == 1
    removed = [e for e in events(sb) if e["reason"] == "RemovedVoter"]
    assert {e["message"].split()[1].split(":")[0] for e in removed} >= {"3", "4"}
    # KAFKA-19850: a removed voter is not re-added, as the quorum itself reports it
    for name, ip in pod_ips(sb).items():
        wait_for(f"{name} serving", lambda ip=ip: node_status(ip), timeout_s=30)

    time.sleep(6)  # several auto-join periods and reconcile passes
    for ip in pod_ips(sb).values():
        status = node_status(ip)
        assert status is not None
        assert sorted(v["id"] for v in status["voters"]) == [0, 1, 2], status["voters"]
    assert ready(sb, "kq", 3) is not None


def test_a_wiped_follower_comes_back_as_a_new_incarnation(sb: SandboxHandle) -> None:
    apply(sb, operator_pod("op-a"), quorum())
    obj = wait_for("a 3-voter quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=120)
    leader = obj["status"]["leader"]["id"]
    node = next(i for i in (2, 1, 0) if i != leader)
    old = {v["id"]: v["directoryId"] for v in obj["status"]["voters"]}[node]
    sb.faults.wipe_pvc(NS, f"data-kq-{node}")

    def healed() -> Any:
        got = ready(sb, "kq", 3)
        if got is None:
            return None
        ids = {v["id"]: v["directoryId"] for v in got["status"]["voters"]}
        return got if ids.get(node) not in (None, old) else None

    obj = wait_for(f"node {node} back as a new incarnation", healed, timeout_s=150)
    new = {v["id"]: v["directoryId"] for v in obj["status"]["voters"]}[node]
    assert (node, old) not in {(v["id"], v["directoryId"]) for v in obj["status"]["voters"]}
    claim = get(sb, "pvc", f"data-kq-{node}")
    assert claim["metadata"]["annotations"][models.DIRECTORY_ID_ANNOTATION] == new
    replaced = [e for e in events(sb) if e["reason"] == "DiskReplaced"]
    assert replaced and old in replaced[0]["message"] and new in replaced[0]["message"]
    assert replaced[0]["type"] == "Warning"
    # the stale incarnation's removal and the new one's add, as the voter set changed
    told = [(e["reason"], e["message"].split()[1]) for e in events(sb)
            if e["reason"] in ("VoterAdded", "VoterRemoved")]
    assert ("VoterRemoved", f"{node}:{old}") in told and ("VoterAdded", f"{node}:{new}") in told


def test_a_node_back_without_its_local_volume_gets_a_new_one(sb: SandboxHandle) -> None:
    apply(sb, operator_pod("op-a"), quorum(nodeFailureGracePeriodSeconds=8))
    obj = wait_for("a 3-voter quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=120)
    leader = obj["status"]["leader"]["id"]
    hosts = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in get(sb, "pods")["items"]}
    node = next(i for i in (2, 1, 0)
                if i != leader and hosts.get(f"kq-{i}") not in (None, hosts.get("op-a")))
    old = {v["id"]: v["directoryId"] for v in obj["status"]["voters"]}[node]
    host = hosts[f"kq-{node}"]
    sb.faults.node_down(host)
    sb.faults.node_up(host)  # back at once, Ready, its node-local volumes gone

    def healed() -> Any:
        got = ready(sb, "kq", 3)
        if got is None:
            return None
        ids = {v["id"]: v["directoryId"] for v in got["status"]["voters"]}
        return got if ids.get(node) not in (None, old) else None

    obj = wait_for(f"node {node} back on a new volume", healed, timeout_s=180)
    assert (node, old) not in {(v["id"], v["directoryId"]) for v in obj["status"]["voters"]}
    assert any(e["reason"] == "DeletedVolume" and f"data-kq-{node}" in e["message"]
               for e in events(sb))


def test_a_quorum_created_again_over_kept_claims_is_degraded_foreign_volume(
        sb: SandboxHandle) -> None:
    apply(sb, operator_pod("op-a"), quorum())
    obj = wait_for("a 3-voter quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=120)
    old = obj["status"]["clusterId"]
    sb.kubectl("delete", "kq", "kq", "--wait=true")
    wait_for("the pods gone", lambda: not pod_ips(sb) or None, timeout_s=60)
    apply(sb, quorum())  # a new cluster id; the claims keep the old one's volumes

    def foreign() -> Any:
        # the pods' format containers refuse their volumes one by one; the condition names
        # each claim as its refusal is seen
        got = cond(get(sb, "kq", "kq"), "Degraded")
        named = all(f"data-kq-{i}" in (got[2] or "") for i in range(3))
        return got if got[:2] == ("True", "ForeignVolume") and named else None

    _, _, message = wait_for("Degraded=ForeignVolume naming the three claims", foreign,
                             timeout_s=90)
    # kraft format's own words, kept by the kubelet as the container's termination message
    # (FallbackToLogsOnError), give the cluster id the volumes hold: the fix is named
    assert f"spec.clusterId: {old}" in message, message
    assert all(get(sb, "pvc", f"data-kq-{i}") is not None for i in range(3))  # nothing deleted
    assert get(sb, "kq", "kq")["status"]["clusterId"] != old


def test_bad_spec_is_reported_and_two_operators_share_one_lease(sb: SandboxHandle) -> None:
    apply(sb, operator_pod("op-a"), operator_pod("op-b"))

    def holder() -> str | None:
        lease = get(sb, "lease", "kraft-operator")
        return (lease or {}).get("spec", {}).get("holderIdentity") or None

    first = wait_for("one operator holding the Lease", holder, timeout_s=60)
    leader_pod = "op-a" if first.startswith("op-a") else "op-b"
    standby_pod = "op-b" if leader_pod == "op-a" else "op-a"
    apply(sb, quorum(config={"controller.quorum.fetch.timeout.msx": "2000"}))

    def reported() -> Any:
        obj = get(sb, "kq", "kq")
        status, reason, _ = cond(obj, "Degraded")
        return obj if status == "True" and reason == "InvalidConfig" else None

    obj = wait_for("Degraded=InvalidConfig", reported, timeout_s=60)
    message = cond(obj, "Degraded")[2]
    assert "controller.quorum.fetch.timeout.msx" in message and "did you mean" in message
    assert cond(obj, "Ready")[0] == "False"
    warned = [e for e in events(sb) if e["reason"] == "InvalidConfig"]
    assert warned and warned[0]["type"] == "Warning"
    # nothing touched: no pod, claim, service or config map of the quorum
    assert [p["metadata"]["name"] for p in get(sb, "pods")["items"]] == ["op-a", "op-b"]
    assert get(sb, "pvc")["items"] == []
    assert get(sb, "svc", "kq") is None and get(sb, "configmap", "kq-config") is None
    assert "event=reconcile" in operator_log(sb, leader_pod)
    assert "event=reconcile" not in operator_log(sb, standby_pod)
    assert "event=lease_waiting" in operator_log(sb, standby_pod)

    # the leader stops answering (SIGSTOP) past the Lease: the standby takes over and acts
    sb.faults.pause(NS, leader_pod)
    second = wait_for("the standby holding the Lease",
                      lambda: (h := holder()) and h != first and h, timeout_s=60)
    assert second.startswith(standby_pod)
    sb.kubectl("patch", "kq", "kq", "--type=merge", "-p",
               json.dumps({"spec": {"config": {"controller.quorum.fetch.timeout.msy": "1"}}}))

    def new_message() -> bool:
        return "timeout.msy" in cond(get(sb, "kq", "kq"), "Degraded")[2]

    wait_for("the new leader reporting the new spec", new_message, timeout_s=60)
    # the old leader wakes up, finds its Lease gone and exits (then waits as a standby)
    sb.faults.resume(NS, leader_pod)

    def restarted() -> bool:
        pod = get(sb, "pod", leader_pod)
        return pod["status"]["containerStatuses"][0]["restartCount"] >= 1

    wait_for(f"{leader_pod} exiting once it lost the Lease", restarted, timeout_s=60)
    assert "event=lease_lost" in operator_log(sb, leader_pod)
    assert holder() == second


def test_without_auto_join_the_operator_adds_the_voters_itself(sb: SandboxHandle) -> None:
    apply(sb, operator_pod("op-a"), quorum(autoJoin=False))
    wait_for("a 3-voter quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=120)
    sb.kubectl("scale", "kq/kq", "--replicas=4")
    obj = wait_for("4 voters Ready", lambda: ready(sb, "kq", 4), timeout_s=120)
    assert sorted(v["id"] for v in obj["status"]["voters"]) == [0, 1, 2, 3]
    added = [e for e in events(sb) if e["reason"] == "AddedVoter"]
    assert len(added) == 1 and added[0]["message"].startswith("AddRaftVoter 3:")
    new_id = added[0]["message"].split()[1].split(":")[1]
    assert (3, new_id) in {(v["id"], v["directoryId"]) for v in obj["status"]["voters"]}
    pod = get(sb, "pod", "kq-3")
    assert pod["metadata"]["annotations"][models.AUTO_JOIN_ANNOTATION] == "false"
    assert pod["metadata"]["annotations"][models.DIRECTORY_ID_ANNOTATION] == new_id
    warned = [e for e in events(sb) if e["reason"] == "SpecWarning"]
    assert warned and "even" in warned[0]["message"]  # 4 voters tolerate one failure, as 3


def test_a_config_change_rolls_one_pod_at_a_time_and_the_leader_last(
        sb: SandboxHandle) -> None:
    apply(sb, operator_pod("op-a"), quorum())
    obj = wait_for("a 3-voter quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=120)
    leader = obj["status"]["leader"]["id"]
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in get(sb, "pods")["items"]}
    sb.kubectl("patch", "kq", "kq", "--type=merge", "-p", json.dumps(
        {"spec": {"config": {"controller.quorum.election.timeout.ms": "1500"}}}))

    def rolled() -> Any:
        got = ready(sb, "kq", 3)
        if got is None or got["status"].get("observedGeneration") != \
                got["metadata"]["generation"]:
            return None
        pods = {p["metadata"]["name"]: p for p in get(sb, "pods")["items"]}
        fresh = all(pods.get(f"kq-{i}", {}).get("metadata", {}).get("uid") not in
                    (None, uids[f"kq-{i}"]) for i in range(3))
        return got if fresh else None

    wait_for("every pod restarted with the new config", rolled, timeout_s=180)
    in_order = sorted(events(sb), key=lambda e: int(e["metadata"]["resourceVersion"]))
    steps = [e for e in in_order if e["reason"] in ("DeletedPodRolling", "LeaderResigning")]
    followers = [e for e in steps if e["reason"] == "DeletedPodRolling"]
    assert len(followers) == 2 and f"kq-{leader}" not in " ".join(e["message"] for e in followers)
    assert steps[-1]["reason"] == "LeaderResigning"
    assert steps[-1]["message"].startswith(f"leader {leader} ")
    config = get(sb, "configmap", "kq-config")["data"]["server-0.properties"]
    assert "controller.quorum.election.timeout.ms=1500" in config


CLAIM = "kq.kraftquorums.kraft.dev"


def second_operator(name: str) -> dict[str, Any]:
    """An operator with a Lease of another name: it leads as well as the first one does."""
    pod = operator_pod(name)
    pod["spec"]["containers"][0]["command"] += ["--lease-name", "another-kraft-operator"]
    return pod


def claim_holder(sb: SandboxHandle) -> str | None:
    lease = get(sb, "lease", CLAIM)
    return (lease or {}).get("spec", {}).get("holderIdentity") or None


def test_two_operators_one_acts_the_other_says_so(sb: SandboxHandle) -> None:
    apply(sb, operator_pod("op-a"), second_operator("op-b"))
    for pod in ("op-a", "op-b"):
        wait_for(f"{pod} leading its own Lease",
                 lambda pod=pod: "event=leading" in operator_log(sb, pod), timeout_s=60)
    apply(sb, quorum())
    obj = wait_for("a 3-voter quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=120)
    # one operator made the quorum: each step once, every Event of the steps from it
    steps = [e for e in events(sb) if e["reason"] in ("CreatedPod", "CreatedVolume",
                                                      "RecordedCluster")]
    assert sorted(e["reason"] for e in steps) == \
        ["CreatedPod"] * 3 + ["CreatedVolume"] * 3 + ["RecordedCluster"]
    (first,) = {e["reportingInstance"] for e in steps}
    assert {e["source"]["component"] for e in steps} == {f"kraft-operator/{first}"}
    acting = "op-a" if first.startswith("op-a") else "op-b"
    refused = "op-b" if acting == "op-a" else "op-a"
    # it holds the claim, a Lease owned by the KRaftQuorum
    assert claim_holder(sb) == first
    lease = get(sb, "lease", CLAIM)
    assert lease["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    assert len(get(sb, "pods")["items"]) == 5 and len(get(sb, "pvc")["items"]) == 3
    # the other one: a log line, one Warning Event, a condition; nothing else
    told = operator_log(sb, refused)
    assert "event=claimed_by_another_operator quorum=default/kq" in told
    assert f"holder={first}" in told and " event=reconcile " not in told
    (warning,) = [e for e in events(sb) if e["reason"] == "ClaimedByAnotherOperator"]
    assert warning["type"] == "Warning" and first in warning["message"]
    assert warning["reportingInstance"].startswith(refused)
    second = warning["reportingInstance"]
    status, reason, message = cond(obj, "OperatorConflict")
    assert (status, reason) == ("True", "ClaimedByAnotherOperator"), (status, reason)
    assert message.startswith(f"operator {second} does nothing") and first in message
    # kubectl tells the two apart
    described = sb.kubectl("describe", "kq", "kq").stdout
    assert f"kraft-operator/{first}" in described and f"kraft-operator/{second}" in described

    # the two do not fight over the status: several passes of both change nothing
    version = get(sb, "kq", "kq")["metadata"]["resourceVersion"]
    time.sleep(5)  # five intervals of both operators
    again = get(sb, "kq", "kq")
    assert again["metadata"]["resourceVersion"] == version, again["status"]

    # the holder stops: the other one takes the claim over and acts (a voter's pod deleted is
    # made again, by it)
    sb.kubectl("delete", "pod", acting, "--wait=true")
    wait_for("the other operator holding the claim", lambda: claim_holder(sb) == second,
             timeout_s=60)
    wait_for("OperatorConflict False once its holder is the refused one", lambda: cond(
        get(sb, "kq", "kq"), "OperatorConflict")[:2] == ("False", "ClaimHeld"), timeout_s=60)
    assert "event=claim_taken" in operator_log(sb, refused)
    sb.kubectl("delete", "pod", "kq-0", "--wait=true")
    wait_for("kq-0 made again by the new holder", lambda: any(
        e["reason"] == "CreatedPod" and e["reportingInstance"] == second
        for e in events(sb)), timeout_s=60)
    wait_for("the quorum Ready again", lambda: ready(sb, "kq", 3), timeout_s=120)


KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


def test_a_quorum_is_deleted_at_once_without_an_operator(sb: SandboxHandle) -> None:
    # kept: Retain (the default); gone: Delete. kept carries the finalizer an older operator's
    # kopf timer put on every object: this operator's kopf removes it
    kept = quorum("kept", replicas=1)
    kept["metadata"]["finalizers"] = [KOPF_FINALIZER]
    apply(sb, operator_pod("op-a"), kept, quorum("gone", replicas=1,
                                                 storage={"onDelete": "Delete"}))
    for name in ("kept", "gone"):
        wait_for(f"{name} Ready", lambda name=name: ready(sb, name, 1), timeout_s=120)
    wait_for("no finalizer on either KRaftQuorum", lambda: not any(
        get(sb, "kq", name)["metadata"].get("finalizers") for name in ("kept", "gone")),
        timeout_s=60)
    assert get(sb, "lease", "kept.kraftquorums.kraft.dev") is not None

    # the operator uninstalled: deleting the quorums needs nothing of it
    sb.kubectl("delete", "pod", "op-a", "--wait=true")
    assert get(sb, "pod", "op-a") is None
    done = sb.kubectl("delete", "kq", "kept", "gone", "--wait=true", "--timeout=60s",
                      check=False)
    assert done.returncode == 0, done.stderr
    assert get(sb, "kq", "kept") is None and get(sb, "kq", "gone") is None

    def collected() -> bool:  # the garbage collector follows the owner references
        names = {p["metadata"]["name"] for p in get(sb, "pods")["items"]}
        leases = {x["metadata"]["name"] for x in get(sb, "lease")["items"]}
        services = {x["metadata"]["name"] for x in get(sb, "svc")["items"]}
        return not names and not leases & {"kept.kraftquorums.kraft.dev",
                                           "gone.kraftquorums.kraft.dev"} \
            and not services & {"kept", "kept-client", "gone", "gone-client"}

    wait_for("the pods, Services and claims Leases gone with their quorums", collected,
             timeout_s=60)
    wait_for("the Delete quorum's claim gone", lambda: get(sb, "pvc", "data-gone-0") is None,
             timeout_s=60)
    assert get(sb, "pvc", "data-kept-0") is not None  # Retain: the volume outlives it
    assert get(sb, "configmap", "kept-config") is None and get(sb, "pdb", "gone") is None
