"""Plain manifests of a KRaft quorum, written by hand rather than by the operator.

    python -m kraft_sandbox.manual_quorum [--replicas 3] [--name kraft] > quorum.yaml
    kubectl apply -f quorum.yaml

A headless Service (`publishNotReadyAddresses`, so the pods find each other before any is
ready), a ConfigMap with one `server-N.properties` per node, one PersistentVolumeClaim and one
Pod per node. Each Pod formats its claim in an init container (`kraft format
--initial-controllers` with the per-pod DNS names and directory ids chosen here, idempotent
with `--ignore-formatted`) and runs `kraft run`, with readiness on `/readyz` and liveness on
`/healthz` of its HTTP port. The same manifests run on a real cluster given an image whose
entrypoint is `kraft`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kraft.protocol.uuid import Uuid

CONTROLLER_PORT = 9093
HTTP_PORT = 8080


def quorum_manifests(name: str = "kraft", replicas: int = 3, namespace: str = "default",
                     image: str = "kraft-quorum:dev", cluster_id: str | None = None,
                     directory_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """The objects of a `replicas`-voter quorum (see the module docstring)."""
    cluster_id = cluster_id or str(Uuid.random())
    dirs = directory_ids or [str(Uuid.random()) for _ in range(replicas)]
    labels = {"app.kubernetes.io/name": "kraft", "app.kubernetes.io/instance": name}
    fqdn = [f"{name}-{i}.{name}.{namespace}.svc.cluster.local" for i in range(replicas)]
    initial = ",".join(f"{i}@{name}-{i}.{name}.{namespace}.svc:{CONTROLLER_PORT}:{dirs[i]}"
                       for i in range(replicas))
    props = {}
    for i in range(replicas):
        props[f"server-{i}.properties"] = "\n".join([
            f"node.id={i}",
            "process.roles=controller",
            f"listeners=CONTROLLER://0.0.0.0:{CONTROLLER_PORT}",
            f"advertised.listeners=CONTROLLER://{fqdn[i]}:{CONTROLLER_PORT}",
            "controller.listener.names=CONTROLLER",
            "controller.quorum.bootstrap.servers="
            + ",".join(f"{h}:{CONTROLLER_PORT}" for h in fqdn),
            "metadata.log.dir=/var/lib/kraft/data",
            f"http.listener=0.0.0.0:{HTTP_PORT}",
            "http.peers=" + ",".join(f"{j}@{name}-{j}.{name}:{HTTP_PORT}"
                                     for j in range(replicas)),
            "",
        ])
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels,
                  "ports": [{"name": "controller", "port": CONTROLLER_PORT},
                            {"name": "http", "port": HTTP_PORT}]}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": f"{name}-config", "namespace": namespace, "labels": labels},
         "data": props},
    ]
    for i in range(replicas):
        pod = f"{name}-{i}"
        config = f"/etc/kraft/server-{i}.properties"
        mounts = [{"name": "data", "mountPath": "/var/lib/kraft"},
                  {"name": "config", "mountPath": "/etc/kraft"}]
        objects.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-{pod}", "namespace": namespace, "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}})
        objects.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace,
                         "labels": {**labels, "kraft.dev/node-id": str(i)}},
            "spec": {
                "hostname": pod, "subdomain": name, "terminationGracePeriodSeconds": 10,
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName":
                                                                        f"data-{pod}"}},
                            {"name": "config", "configMap": {"name": f"{name}-config"}}],
                "initContainers": [{
                    "name": "format", "image": image,
                    "command": ["kraft", "format", "--config", config, "--cluster-id",
                                cluster_id, "--initial-controllers", initial,
                                "--ignore-formatted"],
                    "volumeMounts": mounts}],
                "containers": [{
                    "name": "kraft", "image": image,
                    "command": ["kraft", "run", "--config", config],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {
                        "fieldPath": "metadata.name"}}}],
                    "ports": [{"name": "controller", "containerPort": CONTROLLER_PORT},
                              {"name": "http", "containerPort": HTTP_PORT}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"},
                                       "periodSeconds": 1, "failureThreshold": 2},
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                                      "periodSeconds": 5, "failureThreshold": 6,
                                      "initialDelaySeconds": 5},
                    "volumeMounts": mounts}]}})
    return objects


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="kraft")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--image", default="kraft-quorum:dev")
    args = parser.parse_args(argv)
    docs = quorum_manifests(args.name, args.replicas, args.namespace, args.image)
    # JSON is YAML: one document per object.
    print("\n---\n".join(json.dumps(doc, indent=2) for doc in docs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
