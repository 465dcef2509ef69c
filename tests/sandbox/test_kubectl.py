"""The real kubectl (v1.35) against the sandbox: apply a CRD and its objects, print the CRD's
columns and the built-in kinds' columns, scale, wait, logs, and graceful delete."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from kraft_sandbox.handle import SandboxHandle
from kraft_sandbox.printing import human_age, jsonpath

from tests.sandbox.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.dev"},
    "spec": {"group": "example.dev", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                       "shortNames": ["wd"]},
             "versions": [{
                 "name": "v1", "served": True, "storage": True,
                 "schema": {"openAPIV3Schema": {"type": "object",
                                                "x-kubernetes-preserve-unknown-fields": True}},
                 "subresources": {"status": {}, "scale": {
                     "specReplicasPath": ".spec.replicas",
                     "statusReplicasPath": ".status.replicas"}},
                 "additionalPrinterColumns": [
                     {"name": "Ready", "type": "string",
                      "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                     {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                     {"name": "Age", "type": "date",
                      "jsonPath": ".metadata.creationTimestamp"}]}]},
}


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_kubectl_custom_resources_columns_and_scale(sandbox: SandboxHandle) -> None:
    sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(CRD))
    sandbox.kubectl("wait", "--for=condition=Established", "crd/widgets.example.dev",
                    "--timeout=30s")
    sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps({
        "apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "w1"},
        "spec": {"replicas": 3}}))
    sandbox.kubectl("patch", "wd", "w1", "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"conditions": [{"type": "Ready",
                                                           "status": "True"}]}}))
    table = rows(sandbox.kubectl("get", "wd").stdout)
    assert table[0] == ["NAME", "READY", "REPLICAS", "AGE"]
    assert table[1][:3] == ["w1", "True", "3"]
    out = sandbox.kubectl("scale", "widget/w1", "--replicas=5").stdout
    assert "scaled" in out
    obj = json.loads(sandbox.kubectl("get", "wd", "w1", "-o", "json").stdout)
    assert obj["spec"]["replicas"] == 5 and obj["metadata"]["generation"] == 2
    assert obj["status"]["conditions"][0]["status"] == "True"


def test_kubectl_pod_columns_logs_wait_and_delete(sandbox: SandboxHandle) -> None:
    script = ("import signal, sys, time\n"
              "print('hello from', sys.argv[1], flush=True)\n"
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
              "time.sleep(3600)\n")
    sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"},
        "spec": {"containers": [{"name": "main", "image": "x",
                                 "command": [sys.executable, "-c", script, "$(NAME)"],
                                 "env": [{"name": "NAME", "valueFrom": {"fieldRef": {
                                     "fieldPath": "metadata.name"}}}]}]}}))
    sandbox.kubectl("wait", "--for=condition=Ready", "pod/talker", "--timeout=60s")
    table = rows(sandbox.kubectl("get", "pods", "-o", "wide").stdout)
    assert table[0][:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[0][5:] == ["IP", "NODE"]
    assert table[1][:4] == ["talker", "1/1", "Running", "0"]
    assert table[1][6] in sandbox.nodes
    wait_for("the log line", lambda: "hello from talker" in sandbox.kubectl(
        "logs", "talker").stdout)
    assert sandbox.kubectl("logs", "talker", "--limit-bytes=5").stdout == "hello"
    # the flags that need a time per line are refused by name, never ignored
    for flag in ("--since=1m", "--since-time=2026-01-01T00:00:00Z", "--timestamps"):
        refused = sandbox.kubectl("logs", "talker", flag, check=False)
        assert refused.returncode != 0 and flag.split("=")[0] in refused.stderr, refused.stderr
    nodes = rows(sandbox.kubectl("get", "nodes").stdout)
    assert [r[1] for r in nodes[1:]] == ["Ready"] * 3
    pvc_class = json.loads(sandbox.kubectl("get", "storageclass", "-o", "json").stdout)
    assert [sc["metadata"]["name"] for sc in pvc_class["items"]] == ["sandbox-local"]
    sandbox.kubectl("delete", "pod", "talker", "--timeout=30s")
    assert "talker" not in sandbox.kubectl("get", "pods").stdout


def test_printing_helpers() -> None:
    obj = {"status": {"conditions": [{"type": "A", "status": "x"},
                                     {"type": "Ready", "status": "True"}]},
           "spec": {"l": [1, 2]}}
    assert jsonpath(obj, '.status.conditions[?(@.type=="Ready")].status') == "True"
    assert jsonpath(obj, ".spec.l[1]") == 2
    assert jsonpath(obj, ".spec.missing.deeper") is None
    assert jsonpath(obj, "{.spec.l[5]}") is None
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert human_age("2026-01-02T03:03:50Z", now) == "15s"
    assert human_age("2026-01-02T02:59:05Z", now) == "5m0s"
    assert human_age("2026-01-01T03:04:05Z", now) == "24h"
    assert human_age("2025-12-28T03:04:05Z", now) == "5d"


OPERATOR = '''
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.posting.level = 100

@kopf.on.create("example.dev", "v1", "widgets")
async def created(spec, patch, **_):
    import asyncio
    patch.status["replicas"] = spec.get("replicas", 0)
    patch.status["conditions"] = [{"type": "Ready", "status": "True"}]
    # the loop kopf's CLI chose: asyncio's (uvloop would bypass the cluster DNS)
    patch.status["loop"] = type(asyncio.get_running_loop()).__module__
'''


def test_a_kopf_operator_pod_reconciles_and_survives_kill_operator(
        sandbox: SandboxHandle, tmp_path: Path, kubectl_path: str) -> None:
    script = tmp_path / "widget_operator.py"
    script.write_text(OPERATOR)
    sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(CRD))
    sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "widget-operator",
                     "labels": {"app.kubernetes.io/name": "kraft-operator"}},
        "spec": {"terminationGracePeriodSeconds": 2, "containers": [{
            "name": "operator", "image": "kraft-quorum:dev",
            "command": ["kopf", "run", "--standalone", "--all-namespaces", str(script)]}]}}))
    watch = subprocess.Popen([kubectl_path, "get", "wd", "-w"],
                             env={**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killer = threading.Timer(90, watch.kill)  # a bound, should the line never come
    killer.start()
    try:
        for name in ("w1", "w2"):
            if name == "w2":  # the operator killed, restarted, and still reconciling
                assert sandbox.faults.kill_operator() == ["default/widget-operator"]
            sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps({
                "apiVersion": "example.dev/v1", "kind": "Widget",
                "metadata": {"name": name}, "spec": {"replicas": 3}}))
            assert watch.stdout is not None
            seen = []
            for line in watch.stdout:
                seen.append(line.split())
                if seen[-1][:3] == [name, "True", "3"]:
                    break
            assert seen[-1][:3] == [name, "True", "3"], (seen, sandbox.log_of(
                "default", "widget-operator", "operator"))
    finally:
        killer.cancel()
        watch.kill()
        watch.wait()
    pod = json.loads(sandbox.kubectl("get", "pod", "widget-operator", "-o", "json").stdout)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 1
    widget = json.loads(sandbox.kubectl("get", "wd", "w2", "-o", "json").stdout)
    assert widget["status"]["loop"].startswith("asyncio")


def test_kubectl_namespaces_come_and_go_with_their_pods(sandbox: SandboxHandle) -> None:
    sandbox.kubectl("create", "namespace", "scratch")  # kubectl create sends protobuf
    names = [r[0] for r in rows(sandbox.kubectl("get", "namespaces").stdout)[1:]]
    assert names == ["default", "kube-node-lease", "kube-system", "scratch"]
    sandbox.kubectl("create", "configmap", "-n", "scratch", "conf", "--from-literal=a=1",
                    "--from-literal=b=two")
    sandbox.kubectl("create", "secret", "generic", "-n", "scratch", "pw",
                    "--from-literal=password=s3cret")
    sandbox.kubectl("label", "configmap", "-n", "scratch", "conf", "tier=x")
    conf = json.loads(sandbox.kubectl("get", "cm", "-n", "scratch", "conf", "-o",
                                      "json").stdout)
    assert conf["data"] == {"a": "1", "b": "two"} and conf["metadata"]["labels"] == {
        "tier": "x"}
    secret = json.loads(sandbox.kubectl("get", "secret", "-n", "scratch", "pw", "-o",
                                        "json").stdout)
    assert secret["data"] == {"password": "czNjcmV0"} and secret["type"] == "Opaque"
    sandbox.kubectl("apply", "--validate=false", "-n", "scratch", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tenant"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "x",
            "command": [sys.executable, "-c", "import time; time.sleep(3600)"]}]}}))
    sandbox.kubectl("wait", "-n", "scratch", "--for=condition=Ready", "pod/tenant",
                    "--timeout=60s")
    pid = next(p["processes"]["main"] for p in sandbox.faults.pods() if p["name"] == "tenant")
    missing = sandbox.kubectl("apply", "--validate=false", "-n", "nowhere", "-f", "-",
                              check=False, input=json.dumps({
                                  "apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "c"}}))
    assert missing.returncode != 0 and 'namespaces "nowhere" not found' in missing.stderr
    sandbox.kubectl("delete", "namespace", "scratch", "--timeout=60s")  # waits until gone
    assert "scratch" not in sandbox.kubectl("get", "namespaces").stdout
    assert not Path(f"/proc/{pid}").exists() or \
        Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_kubectl_exec_runs_in_the_pods_context(sandbox: SandboxHandle) -> None:
    sandbox.kubectl("apply", "--validate=false", "-f", "-", input="\n---\n".join(json.dumps(o) for o in (
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "box"},
         "spec": {"accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": "1Gi"}}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shell"},
         "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "box"}}],
                  "containers": [{
                      "name": "main", "image": "x",
                      "command": [sys.executable, "-c",
                                  "import time; open('/data/f', 'w').write('in the claim');"
                                  " time.sleep(3600)"],
                      "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {
                          "fieldPath": "status.podIP"}}}],
                      "volumeMounts": [{"name": "d", "mountPath": "/data"}]}]}})))
    sandbox.kubectl("wait", "--for=condition=Ready", "pod/shell", "--timeout=60s")
    out = sandbox.kubectl("exec", "shell", "--", sys.executable, "-c",
                          "import os; print(open('/data/f').read(), os.environ['POD_IP'])").stdout
    ip = json.loads(sandbox.kubectl("get", "pod", "shell", "-o", "json").stdout)[
        "status"]["podIP"]
    assert out.split() == ["in", "the", "claim", ip]
    failed = sandbox.kubectl("exec", "shell", "--", sys.executable, "-c",
                             "import sys; print('oops', file=sys.stderr); sys.exit(3)",
                             check=False)
    assert failed.returncode == 3 and "oops" in failed.stderr
    echoed = sandbox.kubectl("exec", "-i", "shell", "--", "cat", input="through stdin\n")
    assert echoed.stdout == "through stdin\n"


def test_server_side_apply_creates_then_merges(sandbox: SandboxHandle) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
          "data": {"a": "1"}}
    out = sandbox.kubectl("apply", "--server-side", "--validate=false", "-f", "-",
                          input=json.dumps(cm)).stdout
    assert "serverside-applied" in out
    cm["data"] = {"a": "2", "b": "3"}
    sandbox.kubectl("apply", "--server-side", "--validate=false", "-f", "-",
                    input=json.dumps(cm))
    got = json.loads(sandbox.kubectl("get", "cm", "ssa", "-o", "json").stdout)
    assert got["data"] == {"a": "2", "b": "3"}


def test_helm_installs_upgrades_and_uninstalls_a_chart(sandbox: SandboxHandle,
                                                       tmp_path: Path) -> None:
    sandbox.helm("create", str(tmp_path / "demo"))
    sandbox.helm("install", "demo", str(tmp_path / "demo"))
    releases = json.loads(sandbox.helm("list", "-o", "json").stdout)
    assert [(r["name"], r["status"], r["revision"]) for r in releases] == [
        ("demo", "deployed", "1")]
    kinds = sandbox.kubectl("get", "service,serviceaccount,deployment", "-o", "name").stdout
    assert kinds.split() == ["service/demo", "serviceaccount/demo", "deployment.apps/demo"]
    sandbox.helm("upgrade", "demo", str(tmp_path / "demo"), "--set", "replicaCount=2")
    deployment = json.loads(sandbox.kubectl("get", "deployment", "demo", "-o", "json").stdout)
    assert deployment["spec"]["replicas"] == 2
    assert json.loads(sandbox.helm("list", "-o", "json").stdout)[0]["revision"] == "2"
    sandbox.helm("uninstall", "demo")
    assert sandbox.kubectl("get", "service,serviceaccount,deployment,secret", "-o",
                           "name").stdout.strip() == ""


def test_a_cordoned_node_gets_no_new_pods_and_drain_evicts(sandbox: SandboxHandle) -> None:
    keep, *others = sandbox.nodes
    for node in others:
        sandbox.kubectl("cordon", node)
    status = rows(sandbox.kubectl("get", "nodes").stdout)
    assert [r[1] for r in status[1:]] == ["Ready", "Ready,SchedulingDisabled",
                                          "Ready,SchedulingDisabled"]
    for i in range(2):
        sandbox.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "main", "image": "x",
                "command": [sys.executable, "-c", "import time; time.sleep(3600)"]}]}}))
        sandbox.kubectl("wait", "--for=condition=Ready", f"pod/p{i}", "--timeout=60s")
    placed = json.loads(sandbox.kubectl("get", "pods", "-o", "json").stdout)["items"]
    assert {p["spec"]["nodeName"] for p in placed} == {keep}
    sandbox.kubectl("drain", keep, "--force", "--timeout=60s")  # evicts the bare pods
    assert sandbox.kubectl("get", "pods", "-o", "name").stdout.strip() == ""


def test_kubectl_leaves_validation_to_the_server(sandbox: SandboxHandle) -> None:
    # no --validate=false: the OpenAPI v3 documents tell kubectl the server validates
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(CRD))
    sandbox.kubectl("wait", "--for=condition=Established", "crd/widgets.example.dev")
    typed = json.loads(json.dumps(CRD))
    typed["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = {
        "type": "object", "properties": {"spec": {"type": "object", "properties": {
            "replicas": {"type": "integer"}}}}}
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(typed))
    widget = {"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "w"},
              "spec": {"replicas": 1, "colour": "red"}}
    strict = sandbox.kubectl("apply", "-f", "-", input=json.dumps(widget), check=False)
    assert strict.returncode != 0
    assert 'strict decoding error: unknown field "spec.colour"' in strict.stderr
    warned = sandbox.kubectl("apply", "--validate=warn", "-f", "-", input=json.dumps(widget))
    assert 'Warning: unknown field "spec.colour"' in warned.stderr
    stored = json.loads(sandbox.kubectl("get", "widget", "w", "-o", "json").stdout)
    assert stored["spec"] == {"replicas": 1}  # pruned, as a cluster does
    sandbox.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"},
        "data": {"k": "v"}}))


def test_kubectl_logs_follow_streams_new_lines(sandbox: SandboxHandle,
                                               kubectl_path: str) -> None:
    script = ("import sys, time\n"
              "for i in range(1000):\n"
              "    print('line', i, flush=True)\n"
              "    time.sleep(0.05)\n"
              "time.sleep(3600)\n")
    sandbox.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "chatty"},
        "spec": {"containers": [{"name": "main", "image": "x",
                                 "command": [sys.executable, "-c", script]}]}}))
    sandbox.kubectl("wait", "--for=condition=Ready", "pod/chatty", "--timeout=60s")
    follow = subprocess.Popen([kubectl_path, "logs", "-f", "--tail=1", "chatty"],
                              env={**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killer = threading.Timer(60, follow.kill)  # a bound, should the lines never come
    killer.start()
    try:
        assert follow.stdout is not None
        numbers = []
        for line in follow.stdout:
            numbers.append(int(line.split()[1]))
            if len(numbers) == 20:
                break
        # one line of the past, then every new line, in order
        assert numbers == list(range(numbers[0], numbers[0] + 20))
    finally:
        killer.cancel()
        follow.kill()
        follow.wait()


def test_kubectl_explain_reads_the_crds_schema(sandbox: SandboxHandle) -> None:
    """`kubectl explain kq.spec` as on a cluster: the sandbox publishes each CRD's schema in
    its OpenAPI v3 document (it failed with "GVK ... not found in OpenAPI schema")."""
    sandbox.kubectl("apply", "-f", str(ROOT / "crds" / "kraftquorums.kraft.dev.yaml"))
    wait_for("the CRD served", lambda: sandbox.kubectl("get", "kq", check=False).returncode == 0)
    spec = sandbox.kubectl("explain", "kq.spec").stdout
    assert "KIND:       KRaftQuorum" in spec and "VERSION:    v1alpha1" in spec, spec
    assert "replicas\t<integer>" in spec and "config\t<map[string]Object>" in spec, spec
    deeper = sandbox.kubectl("explain", "kq.spec.storage.onDelete").stdout
    assert "Retain" in deeper, deeper
    assert sandbox.kubectl("explain", "kq.spec.nothere", check=False).returncode != 0
