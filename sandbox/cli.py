"""`kraft-sandbox` (also `python -m kraft_sandbox`): run the sandbox, inject faults.

    kraft-sandbox up [--state-dir DIR] [--nodes 3] [--port 0] [--operator]
                     [--control-plane emulator|real]
    kraft-sandbox fault crash POD [--container C] [--signal TERM] [-n NS]
    kraft-sandbox fault pause POD | resume POD
    kraft-sandbox fault wipe-pvc CLAIM [--no-crash]
    kraft-sandbox fault node-down NODE | node-up NODE
    kraft-sandbox fault kill-operator
    kraft-sandbox pods | claims
    kraft-sandbox env            (prints `export KUBECONFIG=...` of the running sandbox)
    kraft-sandbox run PROGRAM ARGS   (an installed program with the cluster's DNS and KUBECONFIG,
                                      e.g. `run kraft quorum --bootstrap-controller kraft-0.kraft:9093
                                      describe --status`, or `run kraft-operator`)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import random
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import kmock

DEFAULT_STATE_DIR = Path(tempfile.gettempdir()) / f"kraft-sandbox-{os.getuid()}"

OPERATOR_LABELS = {"app.kubernetes.io/name": "kraft-operator"}
OPERATOR_DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "kraft-operator", "namespace": "default", "labels": OPERATOR_LABELS},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": OPERATOR_LABELS},
        "template": {
            "metadata": {"labels": OPERATOR_LABELS},
            "spec": {
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 5,
                # a Lease of 6 s, not 15: a killed operator's successor takes over in about
                # 6 s (a sandbox has one operator; a cluster keeps the chart's defaults)
                "containers": [{"name": "operator", "image": "kraft-quorum",
                                "command": ["kraft-operator", "--lease-duration", "6",
                                            "--renew-deadline", "4", "--retry-period", "1"]}],
            },
        },
    },
}
"""The sandbox's own operator, run as the chart runs it: a Deployment, so a deleted pod
comes back."""


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("SANDBOX_STATE_DIR") or DEFAULT_STATE_DIR)


def _info(args: argparse.Namespace) -> dict[str, Any]:
    path = _state_dir(args) / "sandbox.json"
    try:
        info: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"kraft-sandbox: no sandbox is running with state in {path.parent} "
                         "(start one with `kraft-sandbox up`)") from None
    return info


async def _up(args: argparse.Namespace) -> int:
    from kraft_sandbox.kubelet import KubeletSettings
    from kraft_sandbox.runtime import run_sandbox

    network, lock = claim_network(args.network)
    settings = KubeletSettings(
        state_dir=_state_dir(args).resolve(), nodes=args.nodes, network=network,
        backoff_base_s=args.backoff_base, heartbeat_s=args.heartbeat,
        control_plane=args.control_plane)
    if settings.real:
        from kraft_sandbox.controlplane import find_binaries

        find_binaries()  # a clear error before anything starts
    # the handlers are in place before the sandbox says it is up (sandbox.json): a SIGTERM
    # sent as soon as it is seen stops the pods too, instead of ending the process outright
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    def prepare(sandbox: Any) -> None:
        if args.operator:
            _install_operator(sandbox.admin, real=settings.real)

    async with run_sandbox(settings, api_port=args.port, prepare=prepare) as sandbox:
        if not args.quiet:
            what = ("the real control plane (kube-apiserver, etcd, kube-controller-manager, "
                    "kube-scheduler)" if settings.real else "the emulated API")
            print(f"kraft sandbox: {what} at {sandbox.api_url}, {args.nodes} nodes, pod "
                  f"addresses {settings.network}.x.y, state in {settings.state_dir}",
                  flush=True)
            print(f"export KUBECONFIG={settings.kubeconfig}", flush=True)
            print("(Ctrl-C stops the sandbox and every pod)", flush=True)
        await stop.wait()
    lock.close()
    return 0


def _install_operator(api: Any, real: bool = False) -> None:
    """The KRaftQuorum CRD (from the operator's models) and the operator's Deployment; on a
    real API server also the chart's ServiceAccount and RBAC (`chart_rbac`), which the
    operator's pod then runs as."""
    import copy

    from kraft_operator import crdgen
    from kraft_sandbox.deployments import DEPLOYMENTS

    crds = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    crd = crdgen.build_crd()
    if api.read_object(crds, None, crd["metadata"]["name"]) is None:
        api.create_object(crds, None, crd)
    deployment = copy.deepcopy(OPERATOR_DEPLOYMENT)
    if real:
        for obj in chart_rbac("default"):
            res = _resource_of(obj)
            ns = obj["metadata"].get("namespace")
            if api.read_object(res, ns, obj["metadata"]["name"]) is None:
                api.create_object(res, ns, obj)
        deployment["spec"]["template"]["spec"]["serviceAccountName"] = CHART_RELEASE
    api.create_object(DEPLOYMENTS, "default", deployment)


CHART_RELEASE = "kraft-operator"
"""The release name the chart's RBAC is rendered with: its ServiceAccount, ClusterRoles
and Lease name are then all `kraft-operator`, the operator's default Lease name."""

_PLURALS = {"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
            "ClusterRoleBinding": "clusterrolebindings", "Role": "roles",
            "RoleBinding": "rolebindings"}


def _resource_of(obj: dict[str, Any]) -> Any:
    return kmock.resource(f"{obj['apiVersion']}/{_PLURALS[obj['kind']]}")


def chart_rbac(namespace: str) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC objects (charts/kraft-operator), rendered by the
    real helm (`make k8s-bins`) for a release `kraft-operator` in `namespace`: the rights
    the operator has on a cluster, so that the sandbox's operator has exactly those."""
    import subprocess

    import yaml
    from kraft_sandbox.handle import find_tool

    helm = find_tool("helm")
    if helm is None:
        raise SystemExit("kraft-sandbox: --operator with the real control plane renders the "
                         "chart's RBAC with helm: run `make k8s-bins`")
    chart = Path(__file__).resolve().parents[1] / "charts" / "kraft-operator"
    if not chart.is_dir():
        raise SystemExit(f"kraft-sandbox: the operator's chart is not at {chart}")
    done = subprocess.run(
        # every namespace, as the sandbox's operator watches (the chart's default is its own)
        [helm, "template", CHART_RELEASE, str(chart), "--namespace", namespace,
         "--set", "watchAllNamespaces=true", "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml"],
        capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"kraft-sandbox: helm template of {chart} failed: {done.stderr}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def claim_network(wanted: str | None) -> tuple[str, Any]:
    """A pod network (127.N) no other sandbox on this machine uses: each sandbox holds an
    flock on a file named for its network for as long as it runs."""
    locks = Path(tempfile.gettempdir()) / "kraft-sandbox-networks"
    locks.mkdir(exist_ok=True)
    choices = [wanted] if wanted else [f"127.{n}" for n in random.sample(range(64, 250), 186)]
    for network in choices:
        handle = open(locks / network, "a")  # noqa: SIM115 - held open while the sandbox runs
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return network, handle
    raise SystemExit(f"kraft-sandbox: network {wanted} is in use by another sandbox"
                     if wanted else "kraft-sandbox: no free pod network")


def _fault(args: argparse.Namespace) -> int:
    from kraft_sandbox.handle import FaultClient, SandboxError

    faults = FaultClient(_info(args)["control"])
    kind = args.kind
    call: dict[str, Any] = {}
    namespace = args.namespace or "default"
    if kind in ("crash", "pause", "resume"):
        call = {"namespace": namespace, "pod": args.target}
        if kind == "crash":
            call.update(container=args.container, sig=args.signal)
    elif kind == "wipe-pvc":
        call = {"namespace": namespace, "claim": args.target, "crash": not args.no_crash}
    elif kind in ("node-down", "node-up"):
        call = {"node": args.target}
    elif kind == "kill-operator":
        call = {"namespace": args.namespace}  # every namespace unless -n names one
    if kind not in ("kill-operator",) and not args.target:
        raise SystemExit(f"kraft-sandbox fault {kind}: a target is required")
    try:
        result = faults.call(kind, **call)
    except SandboxError as exc:
        print(f"kraft-sandbox: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kraft-sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", default=None,
                        help=f"the sandbox's directory (default $SANDBOX_STATE_DIR or "
                             f"{DEFAULT_STATE_DIR})")
    subs = parser.add_subparsers(dest="command", required=True)
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument("--state-dir", default=argparse.SUPPRESS,
                       help="the sandbox's directory (also accepted before the command)")
    up = subs.add_parser("up", help="run the API server and the nodes until interrupted",
                         parents=[state])
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--port", type=int, default=0, help="API port (0: any free port)")
    up.add_argument("--network", default=None,
                    help="first two octets of pod addresses, e.g. 127.42 (default: random)")
    up.add_argument("--backoff-base", type=float, default=1.0,
                    help="first crash-restart back-off in seconds (doubles per crash)")
    up.add_argument("--heartbeat", type=float, default=5.0, help="node heartbeat in seconds")
    up.add_argument("--operator", action="store_true",
                    help="also run kraft-operator as a pod (label app.kubernetes.io/name="
                         "kraft-operator)")
    up.add_argument("--control-plane", choices=["emulator", "real"], default="emulator",
                    help="the API: the emulator (default; starts in a second) or the real "
                         "control plane, etcd + kube-apiserver + kube-controller-manager + "
                         "kube-scheduler on loopback (`make k8s-control-plane` builds it)")
    up.add_argument("--quiet", action="store_true")
    up.add_argument("--log-level", default="WARNING")
    fault = subs.add_parser("fault", help="inject a fault into the running sandbox",
                            parents=[state])
    fault.add_argument("kind", choices=["crash", "pause", "resume", "wipe-pvc", "node-down",
                                        "node-up", "kill-operator"])
    fault.add_argument("target", nargs="?", default=None, help="pod, claim or node name")
    fault.add_argument("-n", "--namespace", default=None,
                       help="the target's namespace (default: default; for kill-operator: "
                            "every namespace)")
    fault.add_argument("--container", default=None)
    fault.add_argument("--signal", default="KILL", help="for crash: KILL (default), TERM, ...")
    fault.add_argument("--no-crash", action="store_true",
                       help="for wipe-pvc: leave the pods using the claim running")
    subs.add_parser("pods", help="the pods the nodes run, with their process ids",
                    parents=[state])
    subs.add_parser("claims", help="each bound claim's directory", parents=[state])
    subs.add_parser("env", help="print `export KUBECONFIG=...` for the running sandbox",
                    parents=[state])
    run = subs.add_parser("run", help="run an installed program (kraft, kraft-operator, kopf) "
                                      "with the cluster's DNS and KUBECONFIG", parents=[state])
    run.add_argument("-n", "--namespace", default="default",
                     help="the namespace whose search path short names use")
    run.add_argument("program")
    run.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "up":
        logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.WARNING),
                            format="%(asctime)s level=%(levelname)s logger=%(name)s "
                                   "%(message)s")
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(_up(args))
        return 0
    if args.command == "fault":
        return _fault(args)
    if args.command in ("pods", "claims"):
        from kraft_sandbox.handle import FaultClient

        print(json.dumps(FaultClient(_info(args)["control"]).call(args.command), indent=2))
        return 0
    if args.command == "env":
        print(f"export KUBECONFIG={_info(args)['kubeconfig']}")
        return 0
    if args.command == "run":
        info = _info(args)
        env = {**os.environ, "KUBECONFIG": info["kubeconfig"], "SANDBOX_HOSTS": info["hosts"],
               "SANDBOX_NAMESPACE": args.namespace}
        env.pop("SANDBOX_POD_IP", None)
        os.execvpe(sys.executable, [sys.executable, "-m", "kraft_sandbox.launch",
                                    args.program, *args.args], env)
    return 2
