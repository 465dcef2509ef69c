"""The manifests the operator owns for one KRaftQuorum, rendered from its spec.

Per quorum: a headless Service (stable per-pod DNS names, published before the pods are
ready so they can find each other), a client Service (ready pods only), one ConfigMap with a
`server-N.properties` per node id (written with kraft.config's ServerProperties), a
PodDisruptionBudget and a NetworkPolicy. Per node: one PersistentVolumeClaim and one Pod. Every object carries
the `app.kubernetes.io/*` labels and an owner reference to the KRaftQuorum (a claim only
when `storage.onDelete` is Delete); the resource's own labels are never copied (a GitOps
tool's tracking label on a pod or claim would make it look like part of the tool's app).

The pod formats its volume in an init container with `kraft format -g` (idempotent: an empty
directory is formatted, this cluster's is left alone, a foreign one stops the pod), with
`--initial-controllers` for a new quorum's initial voters and `--no-initial-controllers` for
a node that joins later. The kraft container runs the same `-N` format before `kraft run`, so
a volume emptied under a running pod (a replaced disk) comes back as a new incarnation with a
new directory id rather than a node that cannot start; a formatted volume is left alone.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraft_operator import models, pki
from kraft_operator.observed import ControllerListener, ListenerState
from kraft_operator.planner import CreatePod, FormatMode, majority, pod_spec_hash
from kraft_operator.planner.listeners import (
    HOME_PORT,
    Layout,
    dial_listener,
    layout_of,
    listener_state,
    wanted_ssl,
)
from kraft_operator.policy import OperatorPolicy

from kraft.config.server_properties import ServerProperties

CONTROLLER_PORT = HOME_PORT
"""The controller port of a quorum that never migrated (a migration adds 9094 beside it)."""
HTTP_PORT = 8080
LISTENER = "CONTROLLER"
LISTENERS_ANNOTATION = "kraft.dev/controller-listeners"
"""On a pod: the controller listeners its node binds, the dialled one first
(`NAME:PROTOCOL:PORT,...`): which one the operator may dial while pods run two layouts."""
CONFIG_DIR = "/etc/kraft"
DATA_DIR = "/var/lib/kraft"
METADATA_DIR = f"{DATA_DIR}/metadata"
TLS_DIR = "/etc/kraft-tls"
"""Where a node's Secret (its key and chain, the trusted CAs) is mounted, read-only."""
KEYSTORE_FILE = "node.pem"
TRUSTSTORE_FILE = "truststore.pem"
CLUSTER_DOMAIN = "cluster.local"
APP_NAME = "kraft"
MANAGED_BY = "kraft-operator"
COMPONENT = "controller"
FORMAT_MODE_ANNOTATION = "kraft.dev/format-mode"
DIRECTORY_CONFIRMED_ANNOTATION = "kraft.dev/directory-id-confirmed"
QUORUM_UID_ANNOTATION = "kraft.dev/quorum-uid"
"""On a claim: the uid of the KRaftQuorum that created it, owner reference or not (with
`storage.onDelete: Retain` it has none), so its ownership can follow a later change of
`storage.onDelete` without ever adopting a claim an earlier quorum of the same name kept."""
AUTO_JOIN_ENV = "KRAFT_CONTROLLER_QUORUM_AUTO_JOIN_ENABLE"
RECOVER_FROM_ANNOTATION = "kraft.dev/recovering-from"
RECOVERY_CONTAINER = "recover"

# The keys the operator renders itself: spec.config may not set them.
RESERVED_KEYS = models.ConfigChecker.OPERATOR_KEYS
IMAGE_UID = 10001
"""The image's user and group (Dockerfile: `USER 10001:10001`)."""
POD_SECURITY_CONTEXT = {"runAsNonRoot": True, "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID,
                        "fsGroup": IMAGE_UID, "fsGroupChangePolicy": "OnRootMismatch",
                        "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_CONTEXT = {"runAsNonRoot": True, "runAsUser": IMAGE_UID,
                              "runAsGroup": IMAGE_UID, "allowPrivilegeEscalation": False,
                              "privileged": False, "readOnlyRootFilesystem": True,
                              "capabilities": {"drop": ["ALL"]},
                              "seccompProfile": {"type": "RuntimeDefault"}}
"""What the Pod Security "restricted" profile asks of every pod and container (a namespace
that enforces it refuses a pod without these), and a read-only root file system besides: the
kraft node needs no privilege, capability or root, and writes only to its data volume and
/tmp. The container's fields repeat the pod's, so each container passes on its own (a
container the user adds later, or a tool that checks containers one by one). fsGroup makes
the data volume the image user's; OnRootMismatch skips the recursive chown of a large volume
whose root is already right."""
TMP_DIR = "/tmp"
TMP_VOLUME = "tmp"
TMP_SIZE_LIMIT = "64Mi"
"""The one writable path beside the data volume (the root file system is read-only): the
image's HOME and TMPDIR, where `sh -c` and Python's tempfile write. Nothing the node keeps
lives there."""
TMP_ENV = [{"name": "HOME", "value": TMP_DIR}, {"name": "TMPDIR", "value": TMP_DIR}]


@dataclass(frozen=True, slots=True)
class QuorumRef:
    """The KRaftQuorum the objects belong to: name, namespace, uid, spec and its labels."""

    name: str
    namespace: str
    uid: str
    spec: models.KRaftQuorumSpec
    listeners: ListenerState = field(default_factory=ListenerState)
    """The controller listeners recorded in status.tls (and a TLS migration's phase)."""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> QuorumRef:
        meta = body.get("metadata") or {}
        spec = models.KRaftQuorumSpec.model_validate(body.get("spec") or {})
        return cls(meta["name"], meta.get("namespace") or "default", meta.get("uid") or "", spec,
                   listener_state(spec, body.get("status") or {}))

    @property
    def layout(self) -> Layout:
        """The controller listeners the pods are to run (`kraft_operator.planner.listeners`)."""
        return layout_of(self.listeners)

    @property
    def tls(self) -> bool:
        """Some controller listener of the pods is TLS: the PKI is kept and mounted."""
        return self.layout.has_ssl

    @property
    def controller_ports(self) -> list[int]:
        """Every controller port the pods may bind now: both during a TLS migration."""
        ports = {self.listeners.steady.port}
        if self.listeners.migration is not None:
            ports.add(self.listeners.migration.target.port)
        return sorted(ports)

    def spec_hash(self, tls_generation: str = "") -> str:
        """The pods' spec hash with this trust generation and the layout."""
        return pod_spec_hash(self.spec, tls_generation, self.layout.key)

    def dial(self, pods: Iterable[Any] = ()) -> ControllerListener:
        """The listener the operator's admin calls use (`dial_listener`)."""
        return dial_listener(self.layout, pods, self.listeners.steady)

    # --- names -------------------------------------------------------------------------------

    @property
    def headless_service(self) -> str:
        return self.name

    @property
    def client_service(self) -> str:
        return f"{self.name}-client"

    @property
    def config_map(self) -> str:
        return f"{self.name}-config"

    @property
    def pdb(self) -> str:
        return self.name

    @property
    def network_policy(self) -> str:
        return self.name

    def pod_name(self, node_id: int) -> str:
        return f"{self.name}-{node_id}"

    def pvc_name(self, node_id: int) -> str:
        return f"data-{self.name}-{node_id}"

    def host(self, node_id: int) -> str:
        """The node's per-pod DNS name through the headless Service."""
        return (f"{self.pod_name(node_id)}.{self.headless_service}.{self.namespace}.svc."
                f"{CLUSTER_DOMAIN}")

    def controller_address(self, node_id: int, port: int | None = None) -> str:
        """host:port of the node's controller listener (by default the one it dials)."""
        return f"{self.host(node_id)}:{self.layout.dialled.port if port is None else port}"

    def http_address(self, node_id: int) -> str:
        return f"{self.host(node_id)}:{HTTP_PORT}"

    def host_names(self, node_id: int) -> list[str]:
        """Every DNS name of the node's pod through the headless Service, short to FQDN:
        the SANs of its certificate."""
        pod, svc = self.pod_name(node_id), self.headless_service
        return [pod, f"{pod}.{svc}", f"{pod}.{svc}.{self.namespace}",
                f"{pod}.{svc}.{self.namespace}.svc", self.host(node_id)]

    # --- the PKI's Secrets (Strimzi's names: <cluster>-cluster-ca, -cluster-ca-cert, ...) ---

    @property
    def cluster_ca_secret(self) -> str:
        return f"{self.name}-cluster-ca"

    @property
    def cluster_ca_cert_secret(self) -> str:
        return f"{self.name}-cluster-ca-cert"

    @property
    def clients_ca_secret(self) -> str:
        return f"{self.name}-clients-ca"

    @property
    def clients_ca_cert_secret(self) -> str:
        return f"{self.name}-clients-ca-cert"

    @property
    def operator_secret(self) -> str:
        return f"{self.name}-operator-certs"

    def node_secret(self, node_id: int) -> str:
        return f"{self.pod_name(node_id)}-certs"

    # --- labels and ownership ------------------------------------------------------------

    @property
    def selector_labels(self) -> dict[str, str]:
        """The labels that select this quorum's pods (and nothing the user labelled)."""
        return {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/instance": self.name,
                "app.kubernetes.io/managed-by": MANAGED_BY}

    @property
    def selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.selector_labels.items())

    @property
    def labels(self) -> dict[str, str]:
        return {**self.selector_labels, "app.kubernetes.io/component": COMPONENT,
                "app.kubernetes.io/part-of": "kraft-quorum"}

    def node_labels(self, node_id: int) -> dict[str, str]:
        return {**self.labels, models.NODE_ID_LABEL: str(node_id)}

    @property
    def owner_reference(self) -> dict[str, Any]:
        return {"apiVersion": models.API_VERSION, "kind": models.KIND, "name": self.name,
                "uid": self.uid, "controller": True, "blockOwnerDeletion": True}

    def _meta(self, name: str, labels: Mapping[str, str], owned: bool = True,
              annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace, "labels": dict(labels)}
        if annotations:
            meta["annotations"] = dict(annotations)
        if owned:
            meta["ownerReferences"] = [self.owner_reference]
        return meta


# --- configuration ---------------------------------------------------------------------------


def tls_enabled(spec: models.KRaftQuorumSpec, status: Mapping[str, Any]) -> bool:
    """Whether TLS is wanted (`kraft_operator.planner.listeners.wanted_ssl`); the pods serve
    it once a migration got there (`QuorumRef.tls`)."""
    return wanted_ssl(spec, status)


NODE_PRINCIPALS = ";".join(pki.principal(pki.node_cn(i)) for i in range(models.MAX_REPLICAS))
"""Every node id a quorum can have (0 to MAX_REPLICAS - 1), so a scaled quorum's grants stay
the same file (they are read at start): the authorizer binds each to its own id."""


def listener_properties(ref: QuorumRef, node_id: int) -> dict[str, str]:
    """The controller listeners of the layout: bound, advertised, their protocols, each TLS
    one's mTLS files, and the grants when the authorizer is on."""
    layout = ref.layout
    out = {
        "listeners": ",".join(f"{item.name}://0.0.0.0:{item.port}" for item in layout.listeners),
        "advertised.listeners": ",".join(f"{item.name}://{ref.host(node_id)}:{item.port}"
                                         for item in layout.listeners),
        "controller.listener.names": ",".join(layout.names),
    }
    if layout.has_ssl or len(layout.listeners) > 1 or layout.dialled.name != LISTENER:
        out["listener.security.protocol.map"] = ",".join(
            f"{item.name}:{item.protocol}" for item in layout.listeners)
    for item in layout.listeners:
        if item.ssl:
            prefix = f"listener.name.{item.name.lower()}."
            out.update({
                prefix + "ssl.keystore.type": "PEM",
                prefix + "ssl.keystore.location": f"{TLS_DIR}/{KEYSTORE_FILE}",
                prefix + "ssl.truststore.type": "PEM",
                prefix + "ssl.truststore.location": f"{TLS_DIR}/{TRUSTSTORE_FILE}",
                prefix + "ssl.client.auth": "required",
            })
    if layout.authorizer:
        operator = pki.principal(pki.OPERATOR_CN)
        alter = [operator, NODE_PRINCIPALS] if ref.spec.auto_join else [operator]
        out.update({
            "kraft.authorizer.cluster.action.principals": NODE_PRINCIPALS,
            # auto-join sends AddRaftVoter as the node; a follower's /v1/quorum asks Describe
            "kraft.authorizer.alter.principals": ";".join(alter),
            "kraft.authorizer.describe.principals": ";".join([operator, NODE_PRINCIPALS]),
        })
    return out



def config_problems(config: Mapping[str, str]) -> list[str]:
    """spec.config checked against the ServerProperties model: unknown keys (with a hint),
    keys the operator sets itself, bad values. Empty when the config is acceptable."""
    unrendered = [key for key in config if key.startswith(
        models.ConfigChecker.UNRENDERED_PREFIXES)]
    return [str(p) for p in ServerProperties.validate_overrides(
        config, reserved=RESERVED_KEYS | frozenset(unrendered))]


def node_ids(ref: QuorumRef, extra: Iterable[int] = ()) -> list[int]:
    """The node ids the ConfigMap holds a file for: every wanted one and every one in use."""
    return sorted(set(range(max(ref.spec.replicas, 1))) | set(extra))


def server_properties(ref: QuorumRef, node_id: int) -> ServerProperties:
    """One node's server.properties (before spec.config)."""
    bootstrap = ",".join(ref.controller_address(i) for i in range(max(ref.spec.replicas, 1)))
    base = ServerProperties.from_mapping({
        "node.id": node_id,
        "process.roles": "controller",
        **listener_properties(ref, node_id),
        "controller.quorum.bootstrap.servers": bootstrap,
        "metadata.log.dir": METADATA_DIR,
        "http.listener": f"0.0.0.0:{HTTP_PORT}",
        "controller.quorum.auto.join.enable": ref.spec.auto_join,
    }, source=f"{ref.name} node {node_id}")
    return base.with_overrides(dict(ref.spec.config), source=f"{ref.name} spec.config")


def config_map(ref: QuorumRef, in_use: Iterable[int] = ()) -> dict[str, Any]:
    data = {f"server-{i}.properties": server_properties(ref, i).render(
        comment=f"node {i} of KRaftQuorum {ref.namespace}/{ref.name}; managed by kraft-operator")
        for i in node_ids(ref, in_use)}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": ref._meta(ref.config_map, ref.labels), "data": data}


# --- services and the disruption budget ------------------------------------------------------


def controller_port_name(port: int) -> str:
    """The name of a controller port in the Service and the pods: `controller` for 9093,
    `controller-2` for the port a TLS migration adds."""
    return "controller" if port == CONTROLLER_PORT else "controller-2"


def headless_service(ref: QuorumRef) -> dict[str, Any]:
    ports = [{"name": controller_port_name(port), "port": port, "targetPort": port}
             for port in ref.controller_ports]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": ref._meta(ref.headless_service, ref.labels),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": ref.selector_labels,
                 "ports": [*ports,
                           {"name": "http", "port": HTTP_PORT, "targetPort": HTTP_PORT}]},
    }


def client_service(ref: QuorumRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": ref._meta(ref.client_service, ref.labels),
        "spec": {"type": "ClusterIP", "selector": ref.selector_labels,
                 "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": HTTP_PORT}]},
    }


def max_unavailable(replicas: int) -> int:
    """How many of the quorum's pods an eviction may take: the voters beyond a majority."""
    return max(0, replicas - majority(replicas))


def pod_disruption_budget(ref: QuorumRef) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": ref._meta(ref.pdb, ref.labels),
        "spec": {"maxUnavailable": max_unavailable(ref.spec.replicas),
                 "selector": {"matchLabels": ref.selector_labels}},
    }


def operator_peer(policy: OperatorPolicy) -> dict[str, Any]:
    """The operator's pods as a NetworkPolicyPeer: its labels in its own namespace only (a
    pod labelled like it elsewhere is not it)."""
    return {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": policy.operator_namespace}},
            "podSelector": {"matchLabels": dict(policy.operator_pod_labels)}}


def network_policy(ref: QuorumRef, policy: OperatorPolicy) -> dict[str, Any]:
    """Ingress to the quorum's pods: the controller port (both during a TLS migration) from
    the quorum's own pods and the operator's (its DescribeQuorum and membership calls), the
    HTTP port from those and from
    spec.networkPolicy.httpFrom (by default every pod of the namespace). Egress is left
    open: the nodes reach each other, DNS and nothing else, and a policy cannot name the
    cluster's DNS portably. Never an empty `from` (which NetworkPolicy reads as anyone)."""
    own = {"podSelector": {"matchLabels": ref.selector_labels}}
    operator = operator_peer(policy)
    http_from = ref.spec.network_policy.http_from
    extra = ([{"podSelector": {}}] if http_from is None
             else [p.to_k8s() for p in http_from])
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": ref._meta(ref.network_policy, ref.labels),
        "spec": {
            "podSelector": {"matchLabels": ref.selector_labels},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [own, operator],
                 "ports": [{"protocol": "TCP", "port": port} for port in ref.controller_ports]},
                {"from": [own, operator, *extra],
                 "ports": [{"protocol": "TCP", "port": HTTP_PORT}]},
            ],
        },
    }


# --- per node --------------------------------------------------------------------------------


def pvc(ref: QuorumRef, node_id: int, directory_id: str) -> dict[str, Any]:
    storage = ref.spec.storage
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": storage.size}}}
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    owned = storage.on_delete == models.VolumePolicy.DELETE
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": ref._meta(ref.pvc_name(node_id), ref.node_labels(node_id), owned=owned,
                              annotations={models.DIRECTORY_ID_ANNOTATION: directory_id,
                                           QUORUM_UID_ANNOTATION: ref.uid}),
        "spec": spec,
    }


def initial_controllers(ref: QuorumRef, voters: Iterable[tuple[int, str]]) -> str:
    """`--initial-controllers` text: id@host:port:directory-id for every initial voter."""
    port = ref.layout.dialled.port
    return ",".join(f"{n}@{ref.host(n)}:{port}:{d}" for n, d in sorted(voters))


def format_command(ref: QuorumRef, node_id: int, cluster_id: str, mode: FormatMode,
                   voters: Iterable[tuple[int, str]] = ()) -> list[str]:
    """`kraft format -g` for one node: formats an empty volume, leaves this cluster's alone."""
    cmd = ["kraft", "format", "--config", f"{CONFIG_DIR}/server-{node_id}.properties",
           "--cluster-id", cluster_id, "--ignore-formatted"]
    if mode == FormatMode.INITIAL:
        cmd += ["--initial-controllers", initial_controllers(ref, voters)]
    else:
        cmd += ["--no-initial-controllers"]
    return cmd


def pod(ref: QuorumRef, action: CreatePod, cluster_id: str) -> dict[str, Any]:
    """The node's Pod for a CreatePod action."""
    spec = ref.spec
    tmpl = spec.pod_template
    node_id = action.node_id
    config = f"{CONFIG_DIR}/server-{node_id}.properties"
    mounts = [{"name": "data", "mountPath": DATA_DIR},
              {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
              {"name": TMP_VOLUME, "mountPath": TMP_DIR}]
    if ref.tls:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    init_format = format_command(ref, node_id, cluster_id, action.format_mode,
                                 action.initial_voters)
    rejoin_format = format_command(ref, node_id, cluster_id, FormatMode.JOIN)
    run = ["kraft", "run", "--config", config]
    container: dict[str, Any] = {
        "name": "kraft", "image": spec.image, "imagePullPolicy": spec.image_pull_policy,
        "command": ["sh", "-c", f"{shlex.join(rejoin_format)} && exec {shlex.join(run)}"],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": AUTO_JOIN_ENV, "value": "true" if action.auto_join else "false"},
                *copy.deepcopy(TMP_ENV)],
        "ports": [*({"name": controller_port_name(item.port), "containerPort": item.port}
                    for item in sorted(ref.layout.listeners, key=lambda item: item.port)),
                  {"name": "http", "containerPort": HTTP_PORT}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"},
                           "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                          "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 5,
                          "failureThreshold": 6},
        "volumeMounts": mounts,
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
    }
    resources = spec.resources.to_k8s()
    if resources.get("requests") or resources.get("limits"):
        container["resources"] = {k: v for k, v in resources.items() if v}
    pod_spec: dict[str, Any] = {
        "hostname": ref.pod_name(node_id), "subdomain": ref.headless_service,
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        # the node never calls the Kubernetes API: no token in the pod
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName":
                                                                ref.pvc_name(node_id)}},
                    {"name": "config", "configMap": {"name": ref.config_map}},
                    {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}}],
        "initContainers": [{"name": "format", "image": spec.image,
                            "imagePullPolicy": spec.image_pull_policy,
                            "command": init_format, "volumeMounts": mounts,
                            "env": copy.deepcopy(TMP_ENV),
                            # kraft format's error (a volume of another cluster) becomes the
                            # terminated state's message, which the operator reports
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT)}],
        "containers": [container],
    }
    if ref.tls:  # no subPath: the kubelet updates the files when the Secret changes
        pod_spec["volumes"].append({"name": "tls", "secret": {
            "secretName": ref.node_secret(node_id), "defaultMode": 0o440}})
    if tmpl.affinity:
        pod_spec["affinity"] = tmpl.affinity
    if tmpl.tolerations:
        pod_spec["tolerations"] = list(tmpl.tolerations)
    if tmpl.topology_spread_constraints:
        pod_spec["topologySpreadConstraints"] = list(tmpl.topology_spread_constraints)
    if tmpl.node_selector:
        pod_spec["nodeSelector"] = dict(tmpl.node_selector)
    if tmpl.priority_class_name:
        pod_spec["priorityClassName"] = tmpl.priority_class_name
    if tmpl.service_account_name:
        pod_spec["serviceAccountName"] = tmpl.service_account_name
    labels = {**tmpl.labels, **ref.node_labels(node_id)}  # ours win over the user's extras
    annotations = {
        **tmpl.annotations,
        models.DIRECTORY_ID_ANNOTATION: action.directory_id,
        models.POD_SPEC_HASH_ANNOTATION: action.spec_hash,
        models.AUTO_JOIN_ANNOTATION: "true" if action.auto_join else "false",
        FORMAT_MODE_ANNOTATION: action.format_mode.value,
        LISTENERS_ANNOTATION: ref.layout.annotation(),
    }
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": ref._meta(ref.pod_name(node_id), labels, annotations=annotations),
            "spec": pod_spec}


def recovery_spec_hash(spec_hash: str) -> str:
    """The spec digest a recovery pod carries: never the current one, so once the quorum is
    whole again the pod is rolled to an ordinary one."""
    return f"{spec_hash}-recovery"


def recovery_command(ref: QuorumRef, node_id: int, directory_id: str, token: str) -> list[str]:
    """The recovery init container's command: `kraft recover force-single-voter` on the
    stopped survivor, once per recovery (a marker on the volume, named by `token`, makes a
    re-run of the same pod's init containers after the quorum grew again do nothing; the
    command itself changes nothing when the replica already is the only voter)."""
    marker = f"{DATA_DIR}/.recovered-{token}"
    force = ["kraft", "recover", "force-single-voter", "--config",
             f"{CONFIG_DIR}/server-{node_id}.properties", "--directory-id", directory_id,
             "--yes", "--json"]
    script = (f"if [ -e {shlex.quote(marker)} ]; then echo 'recovery {token} was done "
              f"already'; exit 0; fi; {shlex.join(force)} && touch {shlex.quote(marker)}")
    return ["sh", "-c", script]


def recovery_pod(ref: QuorumRef, node_id: int, directory_id: str, cluster_id: str,
                 token: str) -> dict[str, Any]:
    """The surviving replica's pod for quorum-loss recovery: the ordinary pod (auto-join off)
    with a one-shot init container forcing its voter set to itself alone before `kraft run`."""
    action = CreatePod(node_id, directory_id, FormatMode.JOIN, False,
                       recovery_spec_hash(ref.spec_hash()))
    obj = pod(ref, action, cluster_id)
    spec = obj["spec"]
    spec["initContainers"].append({
        "name": RECOVERY_CONTAINER, "image": ref.spec.image,
        "imagePullPolicy": ref.spec.image_pull_policy,
        "command": recovery_command(ref, node_id, directory_id, token),
        "volumeMounts": spec["initContainers"][0]["volumeMounts"],
        "env": copy.deepcopy(TMP_ENV),
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT)})
    obj["metadata"]["annotations"][RECOVER_FROM_ANNOTATION] = directory_id
    return obj


def standing_objects(ref: QuorumRef, in_use: Iterable[int] = (),
                     policy: OperatorPolicy | None = None) -> list[dict[str, Any]]:
    """The objects every quorum has whatever its pods do (the PDB and the NetworkPolicy only
    when enabled)."""
    objects = [headless_service(ref), client_service(ref), config_map(ref, in_use)]
    if ref.spec.pod_disruption_budget.enabled:
        objects.append(pod_disruption_budget(ref))
    if ref.spec.network_policy.enabled:
        objects.append(network_policy(ref, policy or OperatorPolicy()))
    return objects
