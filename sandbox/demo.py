"""`make run`: the operator managing a real quorum in the sandbox, start to finish.

1. start the sandbox (emulated Kubernetes API, three nodes whose kubelet runs every pod as
   real processes) with the operator as a pod;
2. `kubectl apply` a 3-voter KRaftQuorum and show its status as `kubectl get kq -w` shows it
   (the real kubectl, streaming);
3. write keys through the KV API, and keep writing;
4. wipe one voter's disk (the sandbox's disk-failure fault) and let the operator heal it: the
   node comes back with a new directory id, joins as a voter (AddRaftVoter) and the stale
   incarnation is removed (RemoveRaftVoter), as the Events tell;
5. read every acknowledged key back, stop everything and print the time taken.

Every wait is bounded; on a failure everything is stopped and the exit code is 1. With
`--keep-running` the sandbox stays up at the end (Ctrl-C stops it) and its KUBECONFIG is
printed for `kubectl`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kraft_operator import models
from kraft_sandbox.handle import SandboxHandle, find_kubectl, start_sandbox

NAME = "demo"
NS = "default"
STEP_TIMEOUT_S = 120.0
KV_PORT = 8080


class DemoError(RuntimeError):
    """A step of the demo did not complete in its bound."""


def say(text: str) -> None:
    print(text, flush=True)


def manifest(name: str = NAME, replicas: int = 3) -> str:
    """The KRaftQuorum the demo applies: three voters, every other field at its default."""
    return (f"apiVersion: {models.API_VERSION}\nkind: {models.KIND}\n"
            f"metadata:\n  name: {name}\n  namespace: {NS}\nspec:\n  replicas: {replicas}\n")


def get_json(sb: SandboxHandle, *what: str) -> Any:
    done = sb.kubectl("get", *what, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def condition(obj: Any, type_: str) -> str:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return str(c.get("status"))
    return ""


def wait(what: str, check: Any, timeout_s: float = STEP_TIMEOUT_S, every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every_s)
    raise DemoError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def ready_quorum(sb: SandboxHandle, replicas: int) -> Any:
    obj = get_json(sb, "kq", NAME)
    if condition(obj, "Ready") != "True" or condition(obj, "Quorate") != "True":
        return None
    if len(obj["status"].get("voters") or []) != replicas:
        return None
    return obj


def pod_addresses(sb: SandboxHandle) -> list[str]:
    pods = (get_json(sb, "pods", "-l", f"app.kubernetes.io/instance={NAME}") or {}).get(
        "items", [])
    return [f"{p['status']['podIP']}:{KV_PORT}" for p in pods
            if (p.get("status") or {}).get("podIP")]


def kv(address: str, method: str, key: str, value: bytes | None = None,
       timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{address}/v1/kv/{key}", data=value, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Writer(threading.Thread):
    """Writes keys one after the other through any pod (a follower forwards to the leader)
    and remembers each acknowledged one; a write that failed or timed out is retried under a
    new key (its outcome is unknown, so it is never counted)."""

    def __init__(self, addresses: list[str], prefix: str) -> None:
        super().__init__(daemon=True)
        self.addresses = addresses
        self.prefix = prefix
        self.acked: dict[str, bytes] = {}
        self.failed = 0
        self.stop_event = threading.Event()
        self._n = 0

    def write_one(self) -> bool:
        key = f"{self.prefix}-{self._n:05d}"
        value = f"value-{self._n}".encode()
        address = self.addresses[self._n % len(self.addresses)]
        self._n += 1
        try:
            status, _ = kv(address, "PUT", key, value)
        except OSError:
            status = 0
        if status == 200:
            self.acked[key] = value
            return True
        self.failed += 1
        return False

    def run(self) -> None:
        while not self.stop_event.is_set():
            if not self.write_one():
                time.sleep(0.1)
            else:
                time.sleep(0.02)


class StatusWatch(threading.Thread):
    """`kubectl get kq -w`, each new row printed (rows differing only in AGE skipped)."""

    def __init__(self, sb: SandboxHandle) -> None:
        super().__init__(daemon=True)
        kubectl = find_kubectl()
        assert kubectl is not None
        self.proc = subprocess.Popen([kubectl, "get", "kq", "-w"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "KUBECONFIG": str(sb.kubeconfig)})

    def run(self) -> None:
        assert self.proc.stdout is not None
        last = None
        for line in self.proc.stdout:
            row = line.rstrip("\n")
            key = row.rsplit(None, 1)[0] if row.strip() else row
            if key != last:
                say(f"  | {row}")
                last = key

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class VoterWatch(threading.Thread):
    """The voter set as the quorum's leader reports it (`/v1/status`), each change printed:
    a voter added (AddRaftVoter) or removed (RemoveRaftVoter), with its directory id."""

    def __init__(self, addresses: list[str], started: float) -> None:
        super().__init__(daemon=True)
        self.addresses = addresses
        self.started = started
        self.stop_event = threading.Event()
        self.changes: list[str] = []

    def voters(self) -> set[tuple[int, str]] | None:
        for address in self.addresses:
            try:
                with urllib.request.urlopen(f"http://{address}/v1/status", timeout=2) as resp:
                    status = json.loads(resp.read())
            except (OSError, ValueError):
                continue
            if status.get("role") == "leader":
                return {(v["id"], v["directory_id"]) for v in status["voters"]}
        return None

    def run(self) -> None:
        last = None
        while not self.stop_event.wait(0.1):
            now = self.voters()
            if now is None:
                continue
            if last is not None:
                for vid, dir_id in sorted(now - last):
                    self.note(f"AddRaftVoter {vid}:{dir_id} (the voters: {len(now)})")
                for vid, dir_id in sorted(last - now):
                    self.note(f"RemoveRaftVoter {vid}:{dir_id} (the voters: {len(now)})")
            last = now

    def note(self, text: str) -> None:
        self.changes.append(text)
        say(f"[{time.monotonic() - self.started:5.1f} s] the quorum: {text}")


def quorum_events(sb: SandboxHandle) -> list[dict[str, Any]]:
    items = (get_json(sb, "events") or {}).get("items", [])
    mine = [e for e in items if e["involvedObject"].get("kind") == models.KIND]
    return sorted(mine, key=lambda e: int(e["metadata"]["resourceVersion"]))


def run_demo(sb: SandboxHandle, started: float, wipe_leader: bool = False) -> None:
    def at() -> str:
        return f"[{time.monotonic() - started:5.1f} s]"

    sb.kubectl("wait", "--for=condition=Established", f"crd/{models.CRD_NAME}",
               "--timeout=60s")
    wait("the operator pod running", lambda: any(
        p.get("status", {}).get("phase") == "Running" for p in (get_json(
            sb, "pods", "-l", "app.kubernetes.io/name=kraft-operator") or {}).get("items", [])))
    say(f"{at()} sandbox up: API {sb.url}, nodes {', '.join(sb.nodes)}, operator running")
    say(f"{at()} kubectl apply -f - <<EOF\n{manifest()}EOF")
    sb.kubectl("apply", "-f", "-", input=manifest())
    watch = StatusWatch(sb)
    watch.start()
    try:
        applied = time.monotonic()
        obj = wait("3 voters Ready and Quorate", lambda: ready_quorum(sb, 3))
        say(f"{at()} Ready and Quorate in {time.monotonic() - applied:.1f} s: leader "
            f"{obj['status']['leader']['id']}, epoch {obj['status']['leader']['epoch']}")
        addresses = pod_addresses(sb)
        writer = Writer(addresses, "key")
        for _ in range(50):
            writer.write_one()
        say(f"{at()} wrote {len(writer.acked)} keys through {', '.join(addresses)}; "
            f"writing on in the background")
        writer.start()

        leader = obj["status"]["leader"]["id"]
        voters = {v["id"]: v["directoryId"] for v in obj["status"]["voters"]}
        node = leader if wipe_leader else max(i for i in voters if i != leader)
        old = voters[node]
        claim = f"data-{NAME}-{node}"
        role = "leader" if node == leader else "follower"
        say(f"{at()} disk failure: wiping {claim} of voter {node} ({role}, directory id {old})")
        voter_watch = VoterWatch(addresses, started)
        voter_watch.start()
        time.sleep(0.3)
        wiped = time.monotonic()
        sb.faults.wipe_pvc(NS, claim)

        def healed() -> Any:
            got = ready_quorum(sb, 3)
            if got is None:
                return None
            now = {v["id"]: v["directoryId"] for v in got["status"]["voters"]}
            return got if now.get(node) not in (None, old) else None

        obj = wait(f"voter {node} healed with a new directory id", healed)
        voter_watch.stop_event.set()
        voter_watch.join(timeout=10)
        new = {v["id"]: v["directoryId"] for v in obj["status"]["voters"]}[node]
        say(f"{at()} healed in {time.monotonic() - wiped:.1f} s: voter {node} now has directory "
            f"id {new}; the voters are "
            + ", ".join(f"{v['id']}:{v['directoryId'][:8]}" for v in obj["status"]["voters"]))
        writer.stop_event.set()
        writer.join(timeout=30)
    finally:
        watch.stop()
    say(f"{at()} what the operator did (kubectl get events, {models.KIND} {NAME}):")
    for e in quorum_events(sb):
        say(f"    {e['type']:<8} {e['reason']:<28} {e.get('message', '')}")
    addresses = pod_addresses(sb)
    missing = []
    for i, (key, value) in enumerate(sorted(writer.acked.items())):
        got = None
        for attempt in range(20):
            try:
                status, body = kv(addresses[(i + attempt) % len(addresses)], "GET", key)
            except OSError:
                status, body = 0, b""
            if status in (200, 404):
                got = body if status == 200 else None
                break
            time.sleep(0.2)
        if got != value:
            missing.append(key)
    if missing:
        raise DemoError(f"{len(missing)} acknowledged keys not read back: {missing[:5]}")
    say(f"{at()} read back all {len(writer.acked)} acknowledged keys "
        f"({writer.failed} writes unacknowledged during the failure, retried under new keys)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kraft_sandbox.demo",
                                description=__doc__.splitlines()[0])
    p.add_argument("--keep-running", action="store_true",
                   help="leave the sandbox running at the end (Ctrl-C stops it)")
    p.add_argument("--wipe-leader", action="store_true",
                   help="wipe the leader's disk instead of a follower's")
    p.add_argument("--state-dir", type=Path, default=None,
                   help="the sandbox's directory (default: a temporary one)")
    p.add_argument("--control-plane", choices=["emulator", "real"], default="emulator",
                   help="the emulated API, or the real Kubernetes control plane (`make "
                        "k8s-control-plane` builds it once; `make run` uses it) (default: "
                        "emulator)")
    args = p.parse_args(argv)
    if find_kubectl() is None:
        say("no kubectl: run `make k8s-bins` (the demo drives the sandbox with the real kubectl)")
        return 1
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kraft-demo-") as tmp:
        state = args.state_dir or Path(tmp) / "sandbox"
        code = 0
        try:
            with start_sandbox(state, nodes=3, heartbeat_s=1.0,
                               control_plane=args.control_plane, startup_timeout_s=120,
                               extra_args=["--operator"]) as sb:
                try:
                    run_demo(sb, started, wipe_leader=args.wipe_leader)
                except (DemoError, OSError, RuntimeError) as exc:
                    say(f"demo failed: {exc} (the sandbox's log: {state / 'sandbox.log'})")
                    code = 1
                if args.keep_running:
                    say(f"the sandbox keeps running; in another shell:\n"
                        f"  export KUBECONFIG={sb.kubeconfig}\n"
                        f"  {find_kubectl()} get kq,pods -o wide\n(Ctrl-C stops it)")
                    try:
                        while sb.process is None or sb.process.poll() is None:
                            time.sleep(1)
                    except KeyboardInterrupt:
                        pass
                say("stopping the operator, the pods and the API")
        except KeyboardInterrupt:
            return 130
    say(f"done in {time.monotonic() - started:.1f} s" + ("" if code == 0 else " (failed)"))
    return code


if __name__ == "__main__":
    sys.exit(main())
