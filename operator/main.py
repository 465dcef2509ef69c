"""`kraft-operator`: run the operator, or print its CustomResourceDefinition.

    kraft-operator [run] [--namespace NS ... | --all-namespaces] [--kubeconfig PATH]
                   [--http 0.0.0.0:8080] [--interval 5] [--lease-name kraft-operator]
                   [--lease-namespace NS] [--lease-duration 15] [--renew-deadline 10]
                   [--retry-period 2] [--identity ID] [--log-level INFO]
                   [--allowed-images GLOB,...] [--allowed-service-accounts GLOB,...]
                   [--operator-pod-labels K=V,...]
    kraft-operator crd          (the CRD YAML, generated from the models)

`run` (the default) first acquires the coordination.k8s.io Lease (one active replica), then
runs kopf in this process with the KRaftQuorum handlers (each pass first claims its object:
one operator acts on a KRaftQuorum, whatever its Lease; `kraft_operator.claims`); it exits with code 3 as soon as the
Lease is lost, as a controller-runtime manager does, so its Deployment restarts it as a
standby. `--http` serves `/healthz` (liveness: the process runs and, when it leads, renews
its Lease) and `/metrics` (Prometheus). Without `--namespace`, every namespace is watched.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger("kraft_operator.main")

# the names kraft_operator.policy reads (not imported here: `--help` stays light)
ENV_ALLOWED_IMAGES = "KRAFT_OPERATOR_ALLOWED_IMAGES"
ENV_ALLOWED_SERVICE_ACCOUNTS = "KRAFT_OPERATOR_ALLOWED_SERVICE_ACCOUNTS"
ENV_POD_LABELS = "KRAFT_OPERATOR_POD_LABELS"

EXIT_LEASE_LOST = 3
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft-operator", description=__doc__.splitlines()[0],
        usage="kraft-operator [run] [options]   (run the operator; the default)\n"
              "       kraft-operator crd             (print the CRD YAML, from the models)")
    parser.add_argument("--namespace", "-n", action="append", default=[],
                        help="watch this namespace (repeatable); default: all namespaces")
    parser.add_argument("--all-namespaces", "-A", action="store_true",
                        help="watch every namespace (the default without --namespace)")
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the "
                             "in-cluster service account)")
    parser.add_argument("--http", default="0.0.0.0:8080", metavar="HOST:PORT",
                        help="liveness (/healthz) and metrics (/metrics) endpoint; '' for none "
                             "(default: 0.0.0.0:8080)")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="seconds between reconcile passes of each KRaftQuorum "
                             "(default: 5.0)")
    parser.add_argument("--lease-name", default="kraft-operator",
                        help="name of the coordination.k8s.io Lease (default: kraft-operator)")
    parser.add_argument("--lease-namespace", default=None,
                        help="namespace of the Lease (default: $POD_NAMESPACE, the service "
                             "account's namespace, the kubeconfig context's, or default)")
    parser.add_argument("--lease-duration", type=float, default=15.0,
                        help="seconds a standby waits after the last renewal before taking "
                             "the Lease (default: 15.0)")
    parser.add_argument("--renew-deadline", type=float, default=10.0,
                        help="seconds the leader keeps trying to renew before it exits "
                             "(code 3) (default: 10.0)")
    parser.add_argument("--retry-period", type=float, default=2.0,
                        help="seconds between Lease acquire and renew attempts (default: 2.0)")
    parser.add_argument("--identity", default=None,
                        help="this replica's name in the Lease (default: hostname + random)")
    parser.add_argument("--admin-timeout", type=float, default=10.0,
                        help="seconds a membership change may take to commit (default: 10.0)")
    parser.add_argument("--allowed-images", default=os.environ.get(ENV_ALLOWED_IMAGES),
                        metavar="GLOB,...",
                        help="spec.image must match one of these globs, e.g. "
                             "'registry.example.com/kraft-quorum:*' (default: "
                             f"${ENV_ALLOWED_IMAGES}; unset: any image)")
    parser.add_argument("--allowed-service-accounts",
                        default=os.environ.get(ENV_ALLOWED_SERVICE_ACCOUNTS), metavar="GLOB,...",
                        help="spec.podTemplate.serviceAccountName must match one of these "
                             f"(default: ${ENV_ALLOWED_SERVICE_ACCOUNTS}; unset: any; empty: "
                             "only the namespace's default)")
    parser.add_argument("--operator-pod-labels", default=os.environ.get(ENV_POD_LABELS),
                        metavar="K=V,...",
                        help="labels of the operator's own pods, which each quorum's "
                             "NetworkPolicy lets in (default: $" + ENV_POD_LABELS +
                             " or app.kubernetes.io/name=kraft-operator)")
    parser.add_argument("--log-level", default="INFO", type=str.upper,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                        help="default: INFO")
    return parser


def operator_policy(args: argparse.Namespace) -> Any:
    """The allow-lists and the operator's own pods (`kraft_operator.policy`) from the
    arguments, which default to the environment the chart sets."""
    from kraft_operator.policy import DEFAULT_POD_LABELS, OperatorPolicy, parse_labels, parse_list

    return OperatorPolicy(parse_list(args.allowed_images),
                          parse_list(args.allowed_service_accounts),
                          _own_namespace(args),
                          parse_labels(args.operator_pod_labels) or dict(DEFAULT_POD_LABELS))


def _own_namespace(args: argparse.Namespace) -> str:
    """The namespace the operator's pod runs in: $POD_NAMESPACE, the service account's
    namespace, the kubeconfig context's, or default."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        return SA_NAMESPACE.read_text().strip()
    with contextlib.suppress(Exception):
        from kubernetes import config

        _contexts, current = config.list_kube_config_contexts(config_file=args.kubeconfig)
        namespace = (current or {}).get("context", {}).get("namespace")
        if namespace:
            return str(namespace)
    return "default"


def _lease_namespace(args: argparse.Namespace) -> str:
    if args.lease_namespace:
        return str(args.lease_namespace)
    return _own_namespace(args)


async def _serve_http(address: str, metrics: Any, healthy: Any) -> Any:
    from aiohttp import web
    from kraft_operator.metrics import CONTENT_TYPE_LATEST

    from kraft.config.address import parse_host_port

    async def healthz(request: web.Request) -> web.Response:
        ok, why = healthy()
        return web.Response(status=200 if ok else 503, text=why + "\n")

    async def metrics_page(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = parse_host_port(address, "--http")
    site = web.TCPSite(runner, host or "0.0.0.0", port)
    await site.start()
    log.info("event=http_listening address=%s", address)
    return runner


async def run(args: argparse.Namespace) -> int:
    """Acquire the Lease, then run kopf with the handlers until stopped or the Lease is lost."""
    import kopf
    from kraft_operator.claims import Claims
    from kraft_operator.handlers import Reconciler, register
    from kraft_operator.kube import Kube
    from kraft_operator.lease import LeaderElector, LeaseLost
    from kraft_operator.metrics import Metrics

    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # for kopf's login through the client
    identity = args.identity or f"{os.environ.get('HOSTNAME') or socket.gethostname()}-" \
                                f"{uuid.uuid4().hex[:6]}"
    kube = Kube.from_kubeconfig(args.kubeconfig)
    policy = operator_policy(args)
    log.info("event=policy allowed_images=%s allowed_service_accounts=%s operator=%s/%s",
             "any" if policy.allowed_images is None else ",".join(policy.allowed_images),
             "any" if policy.allowed_service_accounts is None
             else ",".join(policy.allowed_service_accounts), policy.operator_namespace,
             ",".join(f"{k}={v}" for k, v in policy.operator_pod_labels.items()))
    metrics = Metrics()
    elector = LeaderElector(kube, _lease_namespace(args), args.lease_name, identity,
                            lease_duration_s=args.lease_duration,
                            renew_deadline_s=args.renew_deadline,
                            retry_period_s=args.retry_period)

    def healthy() -> tuple[bool, str]:
        if not elector.held:
            return True, f"standby {identity}: waiting for the lease"
        age = elector.clock() - (elector.last_renewed or 0.0)
        return age < elector.renew_deadline_s, f"leading {identity}: lease renewed {age:.1f} s ago"

    runner = await _serve_http(args.http, metrics, healthy) if args.http else None
    try:
        await elector.acquire()
        metrics.leader.set(1)
        log.info("event=leading identity=%s lease=%s/%s", identity, elector.namespace,
                 elector.name)
        registry = kopf.OperatorRegistry()
        claims = Claims(kube, identity, lease_duration_s=args.lease_duration,
                        renew_deadline_s=args.renew_deadline, retry_period_s=args.retry_period)
        reconciler = Reconciler(kube, metrics, identity=identity,
                                admin_timeout_s=args.admin_timeout, chain=8, claims=claims,
                                policy=policy)
        register(registry, reconciler, interval_s=args.interval)
        namespaces = list(args.namespace)
        operator = asyncio.ensure_future(kopf.operator(
            registry=registry, standalone=True, clusterwide=not namespaces,
            namespaces=namespaces))
        keeper = asyncio.ensure_future(elector.keep())
        claims_keeper = asyncio.ensure_future(claims.keep())
        done, _ = await asyncio.wait({operator, keeper}, return_when=asyncio.FIRST_COMPLETED)
        if keeper in done:
            exc = keeper.exception()
            if isinstance(exc, LeaseLost):
                metrics.leader.set(0)
                log.error("event=lease_lost identity=%s action=exit", identity)
                logging.shutdown()
                os._exit(EXIT_LEASE_LOST)  # stop acting at once, whatever kopf is doing
            raise exc if exc is not None else RuntimeError("lease keeper ended")
        keeper.cancel()
        claims_keeper.cancel()
        await reconciler.stop()  # the periodic passes ended, the claims released
        await elector.release()
        operator.result()
        return 0
    finally:
        if runner is not None:
            await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["crd"]:
        from kraft_operator import crdgen

        sys.stdout.write(crdgen.render())
        return 0
    if args_list[:1] == ["run"]:
        args_list = args_list[1:]
    args = build_parser().parse_args(args_list)
    if args.namespace and args.all_namespaces:
        print("kraft-operator: --namespace and --all-namespaces exclude each other",
              file=sys.stderr)
        return 2
    from kraft_operator.policy import parse_labels

    try:
        parse_labels(args.operator_pod_labels)
    except ValueError as exc:
        print(f"kraft-operator: --operator-pod-labels: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
                        stream=sys.stderr)
    if logging.getLogger().level > logging.DEBUG:  # kopf says "Timer succeeded" every pass
        logging.getLogger("kopf").setLevel(logging.WARNING)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
