"""The manifests the operator renders: labels, ownership, the format and run commands, the
server.properties of each node, the disruption budget, and Kubernetes' own schemas."""

from __future__ import annotations

import kubernetes_validate
import pytest
from kraft_operator import models, render
from kraft_operator.planner import CreatePod, FormatMode

from kraft.config.server_properties import ServerProperties
from tests.support import pod_security

BODY = {
    "apiVersion": models.API_VERSION, "kind": models.KIND,
    "metadata": {"name": "kq", "namespace": "ns1", "uid": "u-1",
                 "labels": {"argocd.argoproj.io/instance": "apps",
                            "app.kubernetes.io/instance": "argo-app", "team": "blue"}},
    "spec": {"replicas": 3, "image": "kraft-quorum:1",
             "config": {"controller.quorum.election.timeout.ms": "1500"},
             "podTemplate": {"labels": {"extra": "yes", "app.kubernetes.io/name": "mine"},
                             "annotations": {"note": "n"}},
             "storage": {"size": "2Gi"}},
}
D0, D1, D2 = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"
CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"


def ref(**spec: object) -> render.QuorumRef:
    body = {**BODY, "spec": {**BODY["spec"], **spec}}  # type: ignore[dict-item]
    return render.QuorumRef.from_body(body)


def initial_pod(r: render.QuorumRef) -> dict:
    action = CreatePod(1, D1, FormatMode.INITIAL, True, "h1",
                       initial_voters=((0, D0), (1, D1), (2, D2)))
    return render.pod(r, action, CLUSTER)


def test_initial_voter_pod_formats_with_every_initial_controller_by_dns_name() -> None:
    pod = initial_pod(ref())
    init = pod["spec"]["initContainers"][0]["command"]
    assert init[:2] == ["kraft", "format"] and "--ignore-formatted" in init
    assert init[init.index("--cluster-id") + 1] == CLUSTER
    controllers = init[init.index("--initial-controllers") + 1]
    assert controllers == ",".join(f"{n}@kq-{n}.kq.ns1.svc.cluster.local:9093:{d}"
                                   for n, d in ((0, D0), (1, D1), (2, D2)))
    assert pod["spec"]["hostname"] == "kq-1" and pod["spec"]["subdomain"] == "kq"
    run = pod["spec"]["containers"][0]
    script = run["command"][2]
    assert script.endswith("exec kraft run --config /etc/kraft/server-1.properties")
    assert "--no-initial-controllers" in script  # an emptied volume is a new incarnation
    assert run["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert run["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e.get("value") for e in run["env"]}
    assert env[render.AUTO_JOIN_ENV] == "true"
    notes = pod["metadata"]["annotations"]
    assert notes[models.DIRECTORY_ID_ANNOTATION] == D1
    assert notes[models.POD_SPEC_HASH_ANNOTATION] == "h1"
    assert notes["note"] == "n"


def test_joining_pod_formats_without_initial_controllers_and_auto_join_per_action() -> None:
    pod = render.pod(ref(), CreatePod(3, D0, FormatMode.JOIN, False, "h"), CLUSTER)
    init = pod["spec"]["initContainers"][0]["command"]
    assert "--no-initial-controllers" in init and "--initial-controllers" not in init
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env[render.AUTO_JOIN_ENV] == "false"
    assert pod["metadata"]["annotations"][models.AUTO_JOIN_ANNOTATION] == "false"


def test_labels_are_the_operators_and_never_the_resources_own() -> None:
    r = ref()
    pod = initial_pod(r)
    claim = render.pvc(r, 1, D1)
    for obj in (pod, claim, *render.standing_objects(r)):
        labels = obj["metadata"]["labels"]
        assert "argocd.argoproj.io/instance" not in labels, obj["kind"]
        assert "team" not in labels
        assert labels["app.kubernetes.io/instance"] == "kq"
        assert labels["app.kubernetes.io/managed-by"] == "kraft-operator"
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "kraft"  # not the user's
    assert pod["metadata"]["labels"]["extra"] == "yes"
    assert pod["metadata"]["labels"][models.NODE_ID_LABEL] == "1"
    assert claim["metadata"]["labels"][models.NODE_ID_LABEL] == "1"


def test_owner_references_on_everything_and_on_claims_only_when_deleted_with_it() -> None:
    r = ref()
    owner = {"apiVersion": "kraft.dev/v1alpha1", "kind": "KRaftQuorum", "name": "kq",
             "uid": "u-1", "controller": True, "blockOwnerDeletion": True}
    for obj in (initial_pod(r), *render.standing_objects(r)):
        assert obj["metadata"]["ownerReferences"] == [owner], obj["kind"]
    assert "ownerReferences" not in render.pvc(r, 0, D0)["metadata"]  # onDelete: Retain
    deleting = ref(storage={"size": "2Gi", "onDelete": "Delete"})
    assert render.pvc(deleting, 0, D0)["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    # the quorum that made it, owned or not: its ownership may follow a later onDelete
    assert render.pvc(r, 0, D0)["metadata"]["annotations"] == {
        models.DIRECTORY_ID_ANNOTATION: D0, render.QUORUM_UID_ANNOTATION: "u-1"}


@pytest.mark.parametrize(("replicas", "unavailable"), [(1, 0), (2, 0), (3, 1), (4, 1),
                                                       (5, 2), (9, 4)])
def test_disruption_budget_keeps_a_majority(replicas: int, unavailable: int) -> None:
    pdb = render.pod_disruption_budget(ref(replicas=replicas))
    assert pdb["spec"]["maxUnavailable"] == unavailable
    assert replicas - unavailable >= replicas // 2 + 1
    assert pdb["spec"]["selector"]["matchLabels"] == ref().selector_labels
    no_pdb = ref(podDisruptionBudget={"enabled": False})
    assert all(o["kind"] != "PodDisruptionBudget" for o in render.standing_objects(no_pdb))


def test_config_map_holds_each_nodes_server_properties() -> None:
    r = ref()
    cm = render.config_map(r, in_use=[4])
    assert sorted(cm["data"]) == [f"server-{i}.properties" for i in (0, 1, 2, 4)]
    props = ServerProperties.parse(cm["data"]["server-4.properties"])
    assert props.node_id == 4
    assert str(props.advertised_listeners[0]) == \
        "CONTROLLER://kq-4.kq.ns1.svc.cluster.local:9093"
    assert [str(b) for b in props.bootstrap_servers] == [
        f"kq-{i}.kq.ns1.svc.cluster.local:9093" for i in range(3)]
    assert props.auto_join_enable is True
    assert props.election_timeout_ms == 1500  # spec.config applied
    assert props.metadata_log_dir == render.METADATA_DIR
    off = ServerProperties.parse(render.config_map(ref(autoJoin=False))["data"]
                                 ["server-0.properties"])
    assert off.auto_join_enable is False


def test_config_problems_name_unknown_and_reserved_keys() -> None:
    problems = render.config_problems({"controller.quorum.fetch.timeout.msx": "1",
                                       "node.id": "3",
                                       "controller.quorum.election.timeout.ms": "1500"})
    text = "; ".join(problems)
    assert "controller.quorum.fetch.timeout.msx" in text and "did you mean" in text
    assert "node.id" in text
    assert "election" not in text
    assert render.config_problems({"controller.quorum.election.timeout.ms": "1500"}) == []


@pytest.mark.parametrize("version", ["1.30.0", "1.35.0"])
def test_every_rendered_object_passes_kubernetes_schemas(version: str) -> None:
    r = ref(podTemplate={"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "kq"}}}]}},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "priorityClassName": "high"},
        resources={"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}})
    objects = [initial_pod(r), render.pvc(r, 0, D0), *render.standing_objects(r)]
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def _restricted_violations(pod: dict) -> list[str]:
    """What Pod Security's "restricted" profile finds wrong (tests/support/pod_security.py)."""
    return pod_security.violations(pod["spec"], pod["metadata"])


def test_the_pods_meet_the_restricted_pod_security_profile() -> None:
    """A namespace labelled pod-security.kubernetes.io/enforce=restricted took none of the
    quorum's pods on a real API server (the emulator has no admission)."""
    r = ref()
    assert _restricted_violations(initial_pod(r)) == []
    recovery = render.recovery_pod(r, 1, D1, CLUSTER, "t1")
    assert [c["name"] for c in recovery["spec"]["initContainers"]] == [
        "format", render.RECOVERY_CONTAINER]
    assert _restricted_violations(recovery) == []
    assert recovery["spec"]["securityContext"]["runAsUser"] == render.IMAGE_UID
    # the checker does see a pod without them
    bare = initial_pod(r)
    del bare["spec"]["securityContext"]
    for c in bare["spec"]["containers"]:
        del c["securityContext"]["runAsNonRoot"]
    assert "runAsNonRoot: runAsNonRoot != true: kraft" in _restricted_violations(bare)


def migrating(phase: int, to_tls: bool = True) -> render.QuorumRef:
    """A quorum in phase `phase` of a TLS migration (from PLAINTEXT, or back from TLS)."""
    target = {"protocol": "SSL", "listener": "CONTROLLER_SSL", "port": 9094} if to_tls else \
        {"protocol": "PLAINTEXT", "listener": "CONTROLLER_PLAINTEXT", "port": 9094}
    body = {**BODY, "spec": {**BODY["spec"], "tls": {"enabled": to_tls}},  # type: ignore[dict-item]
            "status": {"clusterId": CLUSTER, "tls": {
                "enabled": not to_tls, "listener": "CONTROLLER", "port": 9093,
                "migration": {**target, "phase": phase}}}}
    return render.QuorumRef.from_body(body)


@pytest.mark.parametrize("to_tls", [True, False], ids=["to-tls", "to-plaintext"])
def test_each_phase_of_a_tls_migration_renders_a_config_the_node_accepts(to_tls: bool) -> None:
    """The three server.properties changes of each roll (docs/security.md), as the node's own
    configuration model checks them; the authorizer only where TLS is alone."""
    from kraft.config.node import build_config

    old, new = ("CONTROLLER", "CONTROLLER_SSL") if to_tls else ("CONTROLLER",
                                                                "CONTROLLER_PLAINTEXT")
    expected = {0: (old,), 1: (old, new), 2: (new, old), 3: (new,)}
    for phase, names in expected.items():
        r = migrating(phase, to_tls)
        props = ServerProperties.parse(render.config_map(r)["data"]["server-1.properties"])
        cfg = build_config(props.to_properties())
        assert tuple(cfg.controller_listener_names) == names, phase
        ports = {"CONTROLLER": 9093, new: 9094}
        assert [(a.name, a.port) for a in cfg.controller_listeners] == \
            [(n, ports[n]) for n in names]
        assert [a.host for a in cfg.advertised_controller_listeners] == \
            ["kq-1.kq.ns1.svc.cluster.local"] * len(names)
        for n in names:
            tls = (n == "CONTROLLER") != to_tls
            assert (cfg.listener_ssl(n) is not None) == tls, (phase, n)
        # the peers are dialled on the first listener's port
        assert {b.port for b in cfg.bootstrap_servers} == {ports[names[0]]}
        alone_tls = len(names) == 1 and cfg.listener_ssl(names[0]) is not None
        assert cfg.authorizer.enabled == alone_tls, phase
        pod = render.pod(r, CreatePod(1, D1, FormatMode.JOIN, True, "h"), CLUSTER)
        container = pod["spec"]["containers"][0]
        assert sorted(p["containerPort"] for p in container["ports"]) == \
            sorted([ports[n] for n in names] + [8080])
        assert pod["metadata"]["annotations"][render.LISTENERS_ANNOTATION].split(",")[0] \
            .startswith(names[0] + ":")
        mounts = {m["name"] for m in container["volumeMounts"]}
        assert ("tls" in mounts) == ((to_tls and phase > 0) or (not to_tls and phase < 3)), phase
        # the Service and the NetworkPolicy open both ports for the whole migration
        service = render.headless_service(r)
        assert {p["port"] for p in service["spec"]["ports"]} == {9093, 9094, 8080}
        rules = render.network_policy(r, render.OperatorPolicy())["spec"]["ingress"]
        assert {p["port"] for p in rules[0]["ports"]} == {9093, 9094}
    steady = ref()
    assert [p["port"] for p in render.headless_service(steady)["spec"]["ports"]] == [9093, 8080]
