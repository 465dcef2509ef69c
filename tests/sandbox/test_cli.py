"""`python -m kraft_sandbox up` prints the KUBECONFIG to use; `fault`, `pods` and `env`
talk to the running sandbox; pods die with a killed sandbox; two sandboxes never share a
pod network."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kraft_sandbox.handle import SandboxError, start_sandbox

from tests.sandbox.conftest import wait_for

SANDBOX = [sys.executable, "-m", "kraft_sandbox"]


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SANDBOX, *args], capture_output=True, text=True, timeout=60,
                          check=check)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_up_prints_kubeconfig_and_faults_work_from_the_command_line(
        tmp_path: Path, kubectl_path: str) -> None:
    state = tmp_path / "sbx"
    up = subprocess.Popen([*SANDBOX, "up", "--state-dir", str(state), "--nodes", "2"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
    try:
        assert up.stdout is not None
        kubeconfig = None
        for _ in range(10):
            line = up.stdout.readline()
            if line.startswith("export KUBECONFIG="):
                kubeconfig = line.strip().split("=", 1)[1]
                break
        assert kubeconfig is not None and Path(kubeconfig).is_file()
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "napper"},
               "spec": {"containers": [{"name": "c", "image": "x", "command": [
                   sys.executable, "-c", "import time; time.sleep(3600)"]}]}}
        subprocess.run([kubectl_path, "apply", "--validate=false", "-f", "-"], env=env,
                       input=json.dumps(pod), text=True, check=True, capture_output=True)

        def pid() -> int | None:
            pods = json.loads(run("pods", "--state-dir", str(state)).stdout)
            return next((p["processes"].get("c") for p in pods if p["name"] == "napper"),
                        None)

        first = wait_for("the pod's process", pid)
        out = run("--state-dir", str(state), "fault", "crash", "napper")
        assert json.loads(out.stdout) == [first]
        wait_for("a restarted process", lambda: (p := pid()) and p != first)
        bad = run("--state-dir", str(state), "fault", "crash", "nosuch", check=False)
        assert bad.returncode == 1 and "nosuch is not running" in bad.stderr
        bad = run("--state-dir", str(state), "fault", "node-down", "mars", check=False)
        assert bad.returncode == 1 and "no node named 'mars'" in bad.stderr
        bad = run("--state-dir", str(state), "fault", "wipe-pvc", "data-nosuch", check=False)
        assert bad.returncode == 1 and "no claim default/data-nosuch" in bad.stderr, bad.stderr
        assert run("env", "--state-dir", str(state)).stdout.strip() == \
            f"export KUBECONFIG={kubeconfig}"
        last = wait_for("the pod's process", pid)
        os.killpg(up.pid, signal.SIGKILL)  # the sandbox dies without cleaning up
        up.wait()
        wait_for("the pod's process to die with the sandbox", lambda: not _alive(last))
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def test_two_sandboxes_never_share_a_network(tmp_path: Path) -> None:
    first = subprocess.Popen([*SANDBOX, "--state-dir", str(tmp_path / "a"), "up", "--quiet"],
                             start_new_session=True)
    try:
        wait_for("the first sandbox", lambda: (tmp_path / "a" / "sandbox.json").exists())
        taken = json.loads((tmp_path / "a" / "sandbox.json").read_text())["network"]
        second = run("--state-dir", str(tmp_path / "b"), "up", "--network", taken,
                     check=False)
        assert second.returncode != 0 and "in use by another sandbox" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)


def test_sigterm_the_moment_it_is_up_stops_it_cleanly(tmp_path: Path) -> None:
    # a supervisor may stop the sandbox as soon as sandbox.json appears: the signal handlers
    # are in place by then, so it exits 0 and removes the file (the default action would end
    # it with -15 and leave the file behind)
    state = tmp_path / "sbx"
    up = subprocess.Popen([*SANDBOX, "--state-dir", str(state), "up", "--quiet", "--operator"],
                          start_new_session=True)
    try:
        wait_for("the sandbox", lambda: (state / "sandbox.json").exists(), every_s=0.001)
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 0
        assert not (state / "sandbox.json").exists()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


def test_no_running_sandbox_is_a_clear_error(tmp_path: Path) -> None:
    out = run("--state-dir", str(tmp_path), "pods", check=False)
    assert out.returncode != 0 and "no sandbox is running" in out.stderr


def test_sandbox_stops_its_pods_on_sigterm(tmp_path: Path, kubectl_path: str) -> None:
    state = tmp_path / "sbx"
    up = subprocess.Popen([*SANDBOX, "--state-dir", str(state), "up", "--quiet"],
                          start_new_session=True)
    try:
        wait_for("the sandbox", lambda: (state / "sandbox.json").exists())
        info = json.loads((state / "sandbox.json").read_text())
        env = {**os.environ, "KUBECONFIG": info["kubeconfig"]}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "napper"},
               "spec": {"containers": [{"name": "c", "image": "x", "command": [
                   sys.executable, "-c", "import time; time.sleep(3600)"]}]}}
        subprocess.run([kubectl_path, "apply", "--validate=false", "-f", "-"], env=env,
                       input=json.dumps(pod), text=True, check=True, capture_output=True)
        pid = wait_for("the pod's process", lambda: next(
            (p["processes"].get("c") for p in json.loads(
                run("--state-dir", str(state), "pods").stdout)), None))
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
        assert not (state / "sandbox.json").exists()
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def test_up_with_operator_serves_the_crd_and_runs_the_operator_pod(tmp_path: Path,
                                                                   kubectl_path: str) -> None:
    with start_sandbox(tmp_path / "sbx", backoff_base_s=0.2,
                       extra_args=["--operator"]) as sb:
        sb.kubectl("wait", "--for=condition=Established", "crd/kraftquorums.kraft.dev",
                   "--timeout=30s")
        assert "No resources found" in sb.kubectl("get", "kq").stderr
        def running() -> Any:
            pods = json.loads(sb.kubectl("get", "pods", "-l", "app.kubernetes.io/name="
                                         "kraft-operator", "-o", "json").stdout)["items"]
            return next((p for p in pods if p["status"].get("phase") == "Running"), None)

        pod = wait_for("the operator running", running)
        assert pod["spec"]["containers"][0]["command"][0] == "kraft-operator"
        # run as the chart runs it: a Deployment's pod, so a deleted one comes back
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" or \
            pod["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
        name = pod["metadata"]["name"]
        assert sb.faults.kill_operator() == [f"default/{name}"]
        assert sb.faults.kill_operator("default") == [f"default/{name}"]
        with pytest.raises(SandboxError, match="no running operator pod"):
            sb.faults.kill_operator("elsewhere")
        cli = subprocess.run([str(Path(sys.executable).parent / "kraft-sandbox"), "fault",
                              "--state-dir", str(tmp_path / "sbx"), "kill-operator", "-n",
                              "elsewhere"], capture_output=True, text=True, timeout=60)
        assert cli.returncode == 1 and "no running operator pod" in cli.stderr, cli  # -n kept
        sb.kubectl("delete", "pod", name, "--wait=true")
        again = wait_for("a new operator pod running", lambda: (p := running()) is not None
                         and p["metadata"]["name"] != name and p)
        assert again["metadata"]["labels"]["app.kubernetes.io/name"] == "kraft-operator"


def test_kraft_sandbox_is_a_subcommand_of_kraft() -> None:
    """`kraft sandbox ...` is `kraft-sandbox ...`: the plugin is in kraft's command table."""
    from kraft.cli.main import load_plugins
    from kraft.cli.table import COMMANDS

    load_plugins()
    assert "sandbox" in COMMANDS
    done = subprocess.run([str(Path(sys.executable).parent / "kraft"), "sandbox", "--help"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert "run PROGRAM" in " ".join(done.stdout.split()), done.stdout
