"""The sandbox's nodes run Pods as processes: env, volumes, init containers, probes, restarts,
graceful deletion, and the faults (crash, pause, wipe a claim, node down, kill the operator).

Each test applies plain manifests with the real kubectl and watches the Pod's status through
the kubernetes client, as a user or the operator would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from kraft_sandbox.handle import SandboxError, SandboxHandle

from tests.sandbox.conftest import wait_for

PY = sys.executable


def apply(sb: SandboxHandle, *objects: dict[str, Any]) -> None:
    sb.kubectl("apply", "--validate=false", "-f", "-",
               input="\n---\n".join(json.dumps(o) for o in objects))


def pod(name: str, script: str, **extra: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "command": [PY, "-c", script]}
    container.update(extra.pop("container", {}))
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 5}
    spec.update(extra)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


def claim(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}


def status_of(sb: SandboxHandle, name: str) -> dict[str, Any]:
    done = sb.kubectl("get", "pod", name, "-o", "json", check=False)
    if done.returncode != 0:
        return {}
    return dict(json.loads(done.stdout).get("status") or {})


def condition(status: dict[str, Any], kind: str) -> str | None:
    for cond in status.get("conditions") or []:
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def container(status: dict[str, Any], name: str = "main") -> dict[str, Any]:
    for c in status.get("containerStatuses") or []:
        if c["name"] == name:
            return dict(c)
    return {}


def pid_of(sb: SandboxHandle, name: str, cont: str = "main") -> int | None:
    for p in sb.faults.pods():
        if p["name"] == name and cont in p["processes"]:
            return int(p["processes"][cont])
    return None


SERVE = ("import http.server, os\n"
         "http.server.HTTPServer((os.environ['POD_IP'], 8080),"
         " http.server.SimpleHTTPRequestHandler).serve_forever()\n")
POD_IP_ENV = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


def test_pod_gets_env_volumes_and_runs_init_first(sandbox: SandboxHandle) -> None:
    script = (
        "import json, os, sys\n"
        "init = open('/data/init.txt').read()\n"
        "conf = open('/etc/app/app.conf').read()\n"
        "json.dump({'init': init, 'conf': conf, 'env': dict(os.environ), 'argv': sys.argv[1:]},"
        " open('/data/out.json', 'w'))\n" + SERVE)
    apply(sandbox, claim("data-web"),
          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"},
           "data": {"app.conf": "dir=/data/logs\n", "LEVEL": "debug"}},
          pod("web", script,
              initContainers=[{"name": "init", "image": "x", "command": [
                  PY, "-c", "import sys; open(sys.argv[1], 'w').write('done')",
                  "/data/init.txt"],
                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
              volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data-web"}},
                       {"name": "conf", "configMap": {"name": "web"}}],
              container={
                  "args": ["/data/arg", "$(POD_NAME)"],
                  "env": [*POD_IP_ENV,
                          {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                              "fieldPath": "metadata.name"}}},
                          {"name": "NS", "valueFrom": {"fieldRef": {
                              "fieldPath": "metadata.namespace"}}},
                          {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {
                              "name": "web", "key": "LEVEL"}}},
                          {"name": "DATA", "value": "/data/x"}],
                  "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                   {"name": "conf", "mountPath": "/etc/app"}],
                  "readinessProbe": {"httpGet": {"path": "/", "port": 8080},
                                     "periodSeconds": 1},
                  # the API server's class for it, which status writes may not change
                  "resources": {"requests": {"cpu": "10m"}}}))
    status = wait_for("web Ready", lambda: (s := status_of(sandbox, "web"))
                      and condition(s, "Ready") == "True" and s)
    assert status["phase"] == "Running"
    assert status["qosClass"] == "Burstable"
    assert condition(status, "Initialized") == "True"
    assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    ip = status["podIP"]
    assert ip.startswith(sandbox.info["network"] + ".")
    data = Path(sandbox.faults.claims()["default/data-web"])
    out = json.loads((data / "out.json").read_text())
    assert out["init"] == "done"
    assert out["conf"] == f"dir={data}/logs\n"  # the mount path rewritten in the file
    env = out["env"]
    assert (env["POD_IP"], env["POD_NAME"], env["NS"], env["LEVEL"]) == (
        ip, "web", "default", "debug")
    assert env["DATA"] == f"{data}/x"
    assert out["argv"] == [f"{data}/arg", "web"]
    pv = json.loads(sandbox.kubectl("get", "pvc", "data-web", "-o", "json").stdout)
    assert pv["status"]["phase"] == "Bound"
    node = pv["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
    assert str(data).startswith(str(sandbox.state_dir.resolve() / "nodes" / node))
    nodes = json.loads(sandbox.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [condition(n["status"], "Ready") for n in nodes] == ["True"] * 3


def test_crash_restarts_with_backoff_and_restart_count(sandbox: SandboxHandle) -> None:
    apply(sandbox, pod("crashy", "import time; time.sleep(3600)"))
    first = wait_for("a process", lambda: pid_of(sandbox, "crashy"))
    sandbox.faults.crash("default", "crashy")
    st = wait_for("restart 1", lambda: (c := container(status_of(sandbox, "crashy")))
                  and c["restartCount"] == 1 and "running" in c["state"] and c)
    assert st["lastState"]["terminated"]["exitCode"] == 137
    assert pid_of(sandbox, "crashy") != first
    events = json.loads(sandbox.kubectl("get", "events", "--field-selector",
                                        "involvedObject.name=crashy", "-o", "json").stdout)
    reasons = [e["reason"] for e in events["items"]]
    assert reasons.count("Started") == 2 and "BackOff" in reasons and "Scheduled" in reasons
    apply(sandbox, pod("oneshot", "raise SystemExit(3)", restartPolicy="Never"))
    final = wait_for("Failed", lambda: (s := status_of(sandbox, "oneshot"))
                     and s.get("phase") == "Failed" and s)
    assert container(final)["state"]["terminated"]["exitCode"] == 3
    assert container(final)["restartCount"] == 0


def test_a_failed_container_logs_become_its_termination_message(sandbox: SandboxHandle) -> None:
    # FallbackToLogsOnError: the last 80 lines (or 2048 bytes) of the run that failed, as a
    # kubelet keeps them; a container that succeeds, or has no such policy, gets no message
    many = "for i in range(100): print('line', i)\nraise SystemExit(3)"
    apply(sandbox,
          pod("tells", many, restartPolicy="Never",
              container={"terminationMessagePolicy": "FallbackToLogsOnError"}),
          pod("long", "print('x' * 5000)\nraise SystemExit(1)", restartPolicy="Never",
              container={"terminationMessagePolicy": "FallbackToLogsOnError"}),
          pod("fine", "print('done')", restartPolicy="Never",
              container={"terminationMessagePolicy": "FallbackToLogsOnError"}),
          pod("silent", many, restartPolicy="Never"))
    ended = {}
    for name in ("tells", "long", "fine", "silent"):
        ended[name] = wait_for(f"{name} ended", lambda n=name: (  # type: ignore[misc]
            c := container(status_of(sandbox, n))) and "terminated" in c["state"]
            and c["state"]["terminated"])
    message = ended["tells"]["message"]
    assert ended["tells"]["exitCode"] == 3
    assert message.splitlines() == [f"line {i}" for i in range(20, 100)]
    assert ended["long"]["message"] == "x" * 2047  # the last 2048 bytes, the newline stripped
    assert "message" not in ended["fine"] and "message" not in ended["silent"]


def test_failing_liveness_probe_restarts_the_container(sandbox: SandboxHandle) -> None:
    apply(sandbox, pod("deaf", "import time; time.sleep(3600)", container={
        "livenessProbe": {"tcpSocket": {"port": 9999}, "periodSeconds": 1,
                          "failureThreshold": 2}}))
    wait_for("a liveness restart", lambda: container(status_of(sandbox, "deaf"))
             .get("restartCount", 0) >= 1)
    events = json.loads(sandbox.kubectl("get", "events", "-o", "json").stdout)["items"]
    assert any(e["reason"] == "Unhealthy" and e["involvedObject"]["name"] == "deaf"
               for e in events)


def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period(
        sandbox: SandboxHandle, tmp_path: Path) -> None:
    mark = tmp_path / "got-term"
    # each says it is ready once its handler is in place: a SIGTERM before that would end the
    # interpreter by the default action, which is not what is tested
    polite = ("import signal, sys, time\n"
              f"signal.signal(signal.SIGTERM, lambda *a: (open({str(mark)!r}, 'w').write('x'),"
              " sys.exit(0)))\n"
              f"open({str(tmp_path / 'polite-ready')!r}, 'w').close()\n"
              "time.sleep(3600)\n")
    stubborn = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                f"open({str(tmp_path / 'stubborn-ready')!r}, 'w').close()\n"
                "time.sleep(3600)\n")
    apply(sandbox, pod("polite", polite), pod("stubborn", stubborn,
                                              terminationGracePeriodSeconds=1))
    p1 = wait_for("polite runs", lambda: pid_of(sandbox, "polite"))
    p2 = wait_for("stubborn runs", lambda: pid_of(sandbox, "stubborn"))
    wait_for("both handlers in place", lambda: all(
        (tmp_path / f"{name}-ready").exists() for name in ("polite", "stubborn")))
    sandbox.kubectl("delete", "pod", "polite", "stubborn")  # waits for the pods to be gone
    assert mark.read_text() == "x"
    for pid in (p1, p2):
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    assert status_of(sandbox, "polite") == {} and status_of(sandbox, "stubborn") == {}


def test_pause_and_resume_stop_and_continue_the_process(sandbox: SandboxHandle) -> None:
    apply(sandbox, pod("sleeper", "import time; time.sleep(3600)"))
    pid = wait_for("a process", lambda: pid_of(sandbox, "sleeper"))

    def state() -> str:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]

    sandbox.faults.pause("default", "sleeper")
    wait_for("stopped", lambda: state() == "T")
    sandbox.faults.resume("default", "sleeper")
    wait_for("running again", lambda: state() in ("S", "R"))


def test_wipe_pvc_empties_the_disk_and_restarts_its_pod(sandbox: SandboxHandle) -> None:
    writer = "import time\nopen('/d/keep', 'a').write('x')\ntime.sleep(3600)\n"
    apply(sandbox, claim("disk"), pod("writer", writer, volumes=[
        {"name": "d", "persistentVolumeClaim": {"claimName": "disk"}}],
        container={"volumeMounts": [{"name": "d", "mountPath": "/d"}]}))
    wait_for("a process", lambda: pid_of(sandbox, "writer"))
    path = Path(sandbox.faults.claims()["default/disk"])
    wait_for("the file", lambda: (path / "keep").exists())
    (path / "old").write_text("lost")
    result = sandbox.faults.wipe_pvc("default", "disk")
    assert result["crashed"] == ["writer"]
    wait_for("restart", lambda: container(status_of(sandbox, "writer"))
             .get("restartCount", 0) == 1)
    wait_for("the new file", lambda: (path / "keep").exists())
    assert not (path / "old").exists()
    assert (path / "keep").read_text() == "x"


def test_node_down_stops_its_pods_and_loses_its_volumes(sandbox: SandboxHandle) -> None:
    apply(sandbox, claim("local"), pod("victim", "import time; time.sleep(3600)", volumes=[
        {"name": "d", "persistentVolumeClaim": {"claimName": "local"}}],
        container={"volumeMounts": [{"name": "d", "mountPath": "/d"}]}))
    pid = wait_for("a process", lambda: pid_of(sandbox, "victim"))
    wait_for("Ready", lambda: condition(status_of(sandbox, "victim"), "Ready") == "True")
    node = json.loads(sandbox.kubectl("get", "pod", "victim", "-o", "json").stdout)[
        "spec"]["nodeName"]
    volume = Path(sandbox.faults.claims()["default/local"])
    assert sandbox.faults.node_down(node) == ["default/victim"]
    node_obj = json.loads(sandbox.kubectl("get", "node", node, "-o", "json").stdout)
    assert condition(node_obj["status"], "Ready") == "Unknown"
    assert condition(status_of(sandbox, "victim"), "Ready") == "False"
    wait_for("the process gone", lambda: not Path(f"/proc/{pid}").exists()
             or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z")
    assert not volume.exists()
    # a new pod bound to the lost node's claim cannot be placed elsewhere
    apply(sandbox, pod("heir", "import time; time.sleep(3600)", volumes=[
        {"name": "d", "persistentVolumeClaim": {"claimName": "local"}}]))
    st = wait_for("unschedulable", lambda: condition(status_of(sandbox, "heir"),
                                                      "PodScheduled") == "False"
                  and status_of(sandbox, "heir"))
    assert st["phase"] == "Pending"
    # a graceful delete waits for the node; a forced one removes the pod
    sandbox.kubectl("delete", "pod", "victim", "--wait=false")
    assert status_of(sandbox, "victim") != {}
    sandbox.kubectl("delete", "pod", "victim", "--grace-period=0", "--force")
    assert status_of(sandbox, "victim") == {}
    sandbox.faults.node_up(node)
    node_obj = json.loads(sandbox.kubectl("get", "node", node, "-o", "json").stdout)
    assert condition(node_obj["status"], "Ready") == "True"
    with pytest.raises(SandboxError, match="no node named"):
        sandbox.faults.node_down("nowhere")


def test_kill_operator_kills_the_operator_pod_which_restarts(sandbox: SandboxHandle) -> None:
    op = pod("kraft-operator", "import time; time.sleep(3600)")
    op["metadata"]["labels"] = {"app.kubernetes.io/name": "kraft-operator"}
    with pytest.raises(SandboxError, match="no running operator"):
        sandbox.faults.kill_operator()
    apply(sandbox, op)
    first = wait_for("a process", lambda: pid_of(sandbox, "kraft-operator"))
    assert sandbox.faults.kill_operator() == ["default/kraft-operator"]
    wait_for("a new process", lambda: (p := pid_of(sandbox, "kraft-operator"))
             and p != first)


def test_kubectl_get_watch_streams_pod_changes(sandbox: SandboxHandle,
                                              kubectl_path: str) -> None:
    env = {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)}
    watch = subprocess.Popen(
        [kubectl_path, "get", "pods", "-w", "-o",
         "custom-columns=NAME:.metadata.name,PHASE:.status.phase,READY:.status.conditions"
         "[?(@.type=='Ready')].status"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killer = threading.Timer(60, watch.kill)  # a bound, should the line never come
    killer.start()
    try:
        apply(sandbox, pod("watched", SERVE, container={
            "env": POD_IP_ENV, "readinessProbe": {"httpGet": {"path": "/", "port": 8080},
                                                  "periodSeconds": 1}}))
        assert watch.stdout is not None
        seen = []
        for line in watch.stdout:
            seen.append(line.split())
            if seen[-1] == ["watched", "Running", "True"]:
                break
        assert seen[-1] == ["watched", "Running", "True"], seen
        # the stream showed the pod before it was ready, then the change
        assert len([row for row in seen if row[0] == "watched"]) >= 2, seen
    finally:
        killer.cancel()
        watch.kill()
        watch.wait()


def test_a_claim_in_use_goes_only_after_its_pod(sandbox: SandboxHandle) -> None:
    apply(sandbox, claim("held"), pod("holder", "import time; time.sleep(3600)", volumes=[
        {"name": "d", "persistentVolumeClaim": {"claimName": "held"}}],
        container={"volumeMounts": [{"name": "d", "mountPath": "/d"}]}))
    wait_for("a process", lambda: pid_of(sandbox, "holder"))
    path = Path(sandbox.faults.claims()["default/held"])
    pv_name = json.loads(sandbox.kubectl("get", "pvc", "held", "-o", "json").stdout)[
        "spec"]["volumeName"]
    sandbox.kubectl("delete", "pvc", "held", "--wait=false")
    pvc = json.loads(sandbox.kubectl("get", "pvc", "held", "-o", "json").stdout)
    assert pvc["metadata"]["deletionTimestamp"]
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert path.is_dir() and pid_of(sandbox, "holder")
    apply(sandbox, pod("latecomer", "import time; time.sleep(3600)", volumes=[
        {"name": "d", "persistentVolumeClaim": {"claimName": "held"}}]))
    wait_for("latecomer unschedulable", lambda: condition(status_of(sandbox, "latecomer"),
                                                          "PodScheduled") == "False")
    sandbox.kubectl("delete", "pod", "holder", "latecomer")
    wait_for("the claim gone", lambda: sandbox.kubectl("get", "pvc", "held",
                                                       check=False).returncode != 0)
    assert sandbox.kubectl("get", "pv", pv_name, check=False).returncode != 0
    assert not path.exists()


def test_an_unschedulable_pod_says_why_each_node_was_refused(sandbox: SandboxHandle) -> None:
    spread = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"group": "one-per-node"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    pods = [pod(f"spread-{i}", "import time; time.sleep(3600)", affinity=spread)
            for i in range(4)]
    for p in pods:
        p["metadata"]["labels"]["group"] = "one-per-node"
    apply(sandbox, *pods)
    pending = wait_for("one pod unschedulable", lambda: [
        p["metadata"]["name"] for p in pods
        if condition(status_of(sandbox, p["metadata"]["name"]), "PodScheduled") == "False"])
    message = next(c["message"] for c in status_of(sandbox, pending[0])["conditions"]
                   if c["type"] == "PodScheduled")
    assert message == ("0/3 nodes are available: "
                       "3 node(s) didn't match pod anti-affinity rules."), message


def test_mount_paths_are_rewritten_once_even_when_a_host_path_starts_with_one() -> None:
    """A pod with an emptyDir at /tmp in a sandbox whose state is under /tmp: /etc/kraft
    became /tmp/state/.../config and was then rewritten again as a path under /tmp (the
    operator's pods, with their /tmp volume, could not find their config)."""
    from kraft_sandbox.containers import ContainerSetup

    mounts = [("/var/lib/kraft", "/tmp/st/p/volumes/data"),
              ("/etc/kraft", "/tmp/st/p/volumes/config"), ("/tmp", "/tmp/st/p/volumes/tmp")]
    text = "kraft format -c /etc/kraft/s.properties HOME=/tmp TMPDIR=/tmp/x /tmpfoo /var/lib/kraft"
    assert ContainerSetup._rewrite(text, mounts) == (
        "kraft format -c /tmp/st/p/volumes/config/s.properties HOME=/tmp/st/p/volumes/tmp "
        "TMPDIR=/tmp/st/p/volumes/tmp/x /tmpfoo /tmp/st/p/volumes/data")
