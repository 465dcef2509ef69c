"""The Helm chart `charts/kraft-operator`, checked by the real tools: helm v4 (`helm lint
--strict`, `helm template` over a matrix of values, the values schema refusing bad values),
kubernetes-validate --strict against Kubernetes 1.30 and 1.35 for every rendered manifest,
the CRD schema (jsonschema) for every KRaftQuorum (the chart's optional one and examples/),
and checkov over the rendered chart (every skipped check justified in the chart itself).
The chart running in the sandbox is tests/shipping/test_chart_live.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kraft_sandbox.handle import find_tool

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kraft-operator"
CRD_PATH = ROOT / "crds" / "kraftquorums.kraft.dev.yaml"
K8S_VERSIONS = ("1.30.0", "1.35.0")
CHECKOV = ROOT / ".tools" / "checkov" / "bin" / "checkov"

# Values each rendering is checked with: the defaults and every optional part of the chart.
MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "watch-namespaces": {"watchNamespaces": ["kafka", "payments"]},
    "watch-all-namespaces": {"watchAllNamespaces": True,
                             "quorumPolicy": {"allowedImages": ["*"],
                                              "allowedServiceAccounts": ["kraft-*"]}},
    "everything": {
        "replicaCount": 2,
        "watchNamespaces": ["kafka"],
        "image": {"repository": "registry.example/kraft-quorum",
                  "digest": "sha256:" + "ab" * 32, "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry"}],
        "quorum": {"create": True, "name": "meta", "namespace": "kafka",
                   "labels": {"team": "platform"},
                   "spec": {"replicas": 5, "podDisruptionBudget": {"enabled": True},
                            "storage": {"size": "5Gi"}}},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                    "quorumPodMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "networkPolicy": {
            "enabled": True,
            "metricsFrom": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "monitoring"}}}],
            "apiServer": {"cidrs": ["10.0.0.1/32"], "ports": [443]}},
        "operator": {"logLevel": "DEBUG", "interval": 2, "extraArgs": ["--admin-timeout=20"],
                     "extraEnv": [{"name": "KRAFT_EXTRA", "value": "1"}]},
        "priorityClassName": "system-cluster-critical",
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops",
                         "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "podAnnotations": {"example.com/owner": "platform"},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {
                                           "app.kubernetes.io/name": "kraft-operator"}}}],
    },
    "no-rbac-own-account": {"rbac": {"create": False},
                            "serviceAccount": {"create": False, "name": "platform-ops"},
                            "metrics": {"service": {"enabled": False}}},
}


def helm_path() -> str:
    path = find_tool("helm")
    if path is None:
        pytest.fail("no helm: run `make k8s-bins` (the tests need the real helm v4)")
    return path


def helm(*args: str, check: bool = True, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real helm with its cache, config and data kept out of $HOME."""
    env = dict(os.environ)
    base = home or Path(tempfile.gettempdir()) / f"kraft-helm-{os.getuid()}"
    for key in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{key}_HOME"] = str(base / key.lower())
    proc = subprocess.run([helm_path(), *args], capture_output=True, text=True, env=env,
                          timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def render(tmp_path: Path, values: dict[str, Any], *extra: str,
           namespace: str = "kraft-system") -> list[dict[str, Any]]:
    out = helm("template", "kraft-operator", str(CHART), "--namespace", namespace,
               "--values", str(values_file(tmp_path, values)), *extra).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


def crd_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


# ------------------------------------------------------------------ Chart.yaml and crds/


def test_chart_version_and_app_version_are_the_package_version() -> None:
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == package, "Chart.yaml appVersion differs from pyproject.toml"
    assert chart["version"] == package, "Chart.yaml version differs from pyproject.toml"


def test_default_image_tag_is_the_app_version(tmp_path: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    deployment = by_kind(render(tmp_path, {}), "Deployment")[0]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"kraft-quorum:{chart['appVersion']}"


def test_chart_crds_are_the_generated_crds_byte_for_byte() -> None:
    top = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert top, "no CRD in crds/"
    assert chart == top, ("charts/kraft-operator/crds/ differs from crds/: "
                          "cp crds/*.yaml charts/kraft-operator/crds/")


def test_chart_refuses_a_kubernetes_older_than_1_30() -> None:
    proc = helm("template", "kraft-operator", str(CHART), "--kube-version", "1.29.0", check=False)
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr
    assert helm("template", "kraft-operator", str(CHART), "--kube-version", "1.30.0").stdout


# ------------------------------------------------------------------ helm lint and the schema


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_helm_lint_strict(case: str, tmp_path: Path) -> None:
    proc = helm("lint", "--strict", str(CHART), "--values",
                str(values_file(tmp_path, MATRIX[case])), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(("setting", "complaint"), [
    ("replicaCount=three", "/replicaCount"),
    ("http.port=http", "/http/port"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("quorum.spec.replicas=12", "/quorum/spec/replicas"),
    ("bogus=1", "additional properties 'bogus' not allowed"),
    ("metrics.serviceMonitor.interval=often", "/metrics/serviceMonitor/interval"),
    ("securityContext.runAsUsr=1", "additional properties 'runAsUsr' not allowed"),
    ("podSecurityContext.seccompProfile.type=Permissive", "/podSecurityContext/seccompProfile/type"),
])
def test_values_schema_refuses_a_wrong_value(setting: str, complaint: str) -> None:
    for command in (["template", "kraft-operator", str(CHART)], ["lint", "--strict", str(CHART)]):
        proc = helm(*command, "--set", setting, check=False)
        assert proc.returncode != 0, f"helm {command[0]} accepted --set {setting}"
        assert complaint in proc.stdout + proc.stderr


def test_values_schema_describes_every_default_key() -> None:
    """Every key of values.yaml is a property of the schema (none slips through as 'any')."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)

    def walk(value: Any, node: dict[str, Any], where: str) -> None:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
        if not isinstance(value, dict) or "properties" not in node:
            return
        for key, sub in value.items():
            assert key in node["properties"], f"values.yaml {where}{key} is not in the schema"
            walk(sub, node["properties"][key], f"{where}{key}.")

    walk(values, schema, "")


# ------------------------------------------------------------------ what helm template renders


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_rendered_manifest_passes_kubernetes_validate_strict(
        case: str, version: str, tmp_path: Path) -> None:
    docs = render(tmp_path, MATRIX[case], "--kube-version", version)
    assert docs
    for doc in docs:
        if doc["kind"] == "KRaftQuorum":  # not a built-in kind: the CRD's own schema
            errors = sorted(crd_validator().iter_errors(doc), key=str)
            assert not errors, f"{doc['metadata']['name']}: {errors[0].message}"
        elif doc["kind"] == "ServiceMonitor":  # prometheus-operator's kind: no bundled schema
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert doc["spec"]["endpoints"][0]["port"] == "http"
        elif doc["kind"] == "PodMonitor":  # the same
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert doc["spec"]["podMetricsEndpoints"][0]["port"] == "http"
        else:
            kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_validate_cli_strict_over_the_rendering(tmp_path: Path) -> None:
    """The same check with the command a user runs (docs/install.md), on a whole rendering."""
    rendered = tmp_path / "chart.yaml"
    rendered.write_text(helm("template", "kraft-operator", str(CHART), "-n",
                             "kraft-system").stdout)
    for version in K8S_VERSIONS:
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "kubernetes-validate"), "-k", version,
                               "--strict", "--quiet", str(rendered)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kubernetes_validate_strict_refuses_a_broken_deployment(tmp_path: Path) -> None:
    deployment = by_kind(render(tmp_path, {}), "Deployment")[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUsr"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.35.0", strict=True)


def _dockerfile_uid() -> int:
    match = re.search(r"^USER\s+(\d+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert match, "the Dockerfile names no numeric USER"
    return int(match.group(1))


def test_deployment_runs_hardened(tmp_path: Path) -> None:
    deployment = by_kind(render(tmp_path, {}), "Deployment")[0]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    uid = _dockerfile_uid()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == uid
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == uid
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    # /tmp is the one writable path, an emptyDir
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    # the probes reach the operator's --http port (its /healthz)
    port = next(p for p in container["ports"] if p["name"] == "http")["containerPort"]
    assert f"--http=0.0.0.0:{port}" in container["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    # the Lease namespace is the release's; leader election needs the pod's namespace too
    assert "--lease-namespace=kraft-system" in container["args"]
    assert container["command"][:3] == ["dumb-init", "--", "kraft-operator"]


def test_operator_arguments_are_ones_kraft_operator_accepts(tmp_path: Path) -> None:
    from kraft_operator.main import build_parser

    for case in sorted(MATRIX):
        deployment = by_kind(render(tmp_path, MATRIX[case]), "Deployment")[0]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[0] == "run"
        parsed = build_parser().parse_args(args[1:])  # exits (SystemExit) on an unknown flag
        assert parsed.http.endswith(":8080")
        if case == "watch-namespaces":
            assert parsed.namespace == ["kafka", "payments"] and not parsed.all_namespaces


def test_watch_namespaces_gives_roles_not_a_cluster_wide_role(tmp_path: Path) -> None:
    docs = render(tmp_path, MATRIX["watch-namespaces"])
    roles = {(d["metadata"].get("namespace"), d["metadata"]["name"]) for d in by_kind(docs, "Role")}
    assert ("kafka", "kraft-operator") in roles and ("payments", "kraft-operator") in roles
    cluster_roles = by_kind(docs, "ClusterRole")
    # only the cluster-scoped reads (nodes, persistent volumes, kopf's CRD and Namespace
    # watches) stay cluster-wide
    resources = {r for c in cluster_roles for rule in c["rules"] for r in rule["resources"]}
    assert resources == {"nodes", "persistentvolumes", "customresourcedefinitions",
                         "namespaces"}
    everywhere = render(tmp_path, MATRIX["watch-all-namespaces"])
    assert "namespaces" not in {r for c in by_kind(everywhere, "ClusterRole")
                                for rule in c["rules"] for r in rule["resources"]}


def _rules(docs: list[dict[str, Any]], kind: str) -> set[tuple[str, str]]:
    return {(g, r) for d in by_kind(docs, kind) for rule in d["rules"]
            for g in rule["apiGroups"] for r in rule["resources"]}


def test_the_default_scope_is_the_release_namespace(tmp_path: Path) -> None:
    """By default the operator reconciles its own namespace: a Role there, no cluster-wide
    right over pods or quorums, and kopf told that namespace alone."""
    from kraft_operator.main import build_parser

    docs = render(tmp_path, {})
    cluster = _rules(docs, "ClusterRole")
    assert {r for _g, r in cluster} == {"nodes", "persistentvolumes",
                                        "customresourcedefinitions", "namespaces"}
    roles = {d["metadata"]["name"]: d for d in by_kind(docs, "Role")}
    assert set(roles) == {"kraft-operator", "kraft-operator-lease"}
    assert {d["metadata"]["namespace"] for d in roles.values()} == {"kraft-system"}
    (binding,) = [b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["name"] ==
                  "kraft-operator"]
    assert binding["metadata"]["namespace"] == "kraft-system"
    args = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    parsed = build_parser().parse_args(args[1:])
    assert parsed.namespace == ["kraft-system"] and not parsed.all_namespaces
    # watchAllNamespaces: the quorum rules cluster-wide, kopf on every namespace
    wide = render(tmp_path, {"watchAllNamespaces": True})
    assert ("", "pods") in _rules(wide, "ClusterRole")
    args = by_kind(wide, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--all-namespaces" in args
    # watchNamespaces wins over watchAllNamespaces
    named = render(tmp_path, {"watchAllNamespaces": True, "watchNamespaces": ["kafka"]})
    assert ("", "pods") not in _rules(named, "ClusterRole")
    assert {d["metadata"]["namespace"] for d in by_kind(named, "Role")} == {
        "kafka", "kraft-system"}


def test_a_chart_quorum_outside_the_watched_namespaces_is_refused(tmp_path: Path) -> None:
    values = {"quorum": {"create": True, "namespace": "kafka"}}
    proc = helm("template", "kraft-operator", str(CHART), "--namespace", "kraft-system",
                "--values", str(values_file(tmp_path, values)), check=False)
    assert proc.returncode != 0
    assert "quorum.namespace kafka is not reconciled" in proc.stderr
    assert by_kind(render(tmp_path, {**values, "watchAllNamespaces": True}), "KRaftQuorum")


def test_the_operator_may_keep_network_policies_wherever_it_reconciles(tmp_path: Path) -> None:
    for case in ("defaults", "watch-namespaces", "watch-all-namespaces"):
        docs = render(tmp_path, MATRIX[case])
        kind = "ClusterRole" if case == "watch-all-namespaces" else "Role"
        rules = [rule for d in by_kind(docs, kind) for rule in d["rules"]
                 if "networkpolicies" in rule["resources"]]
        assert rules and all(rule["apiGroups"] == ["networking.k8s.io"] for rule in rules)
        assert {v for rule in rules for v in rule["verbs"]} == {"get", "create", "patch",
                                                                "delete"}, case


def test_the_operator_is_told_its_allow_lists_and_its_own_labels(tmp_path: Path) -> None:
    from kraft_operator.main import build_parser, operator_policy
    from kraft_operator.policy import OperatorPolicy

    def policy_of(values: dict[str, Any]) -> OperatorPolicy:
        deployment = by_kind(render(tmp_path, values), "Deployment")[0]
        pod = deployment["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        saved = dict(os.environ)
        try:
            os.environ.update({k: v for k, v in env.items() if v is not None},
                              POD_NAMESPACE="kraft-system")
            policy: OperatorPolicy = operator_policy(build_parser().parse_args(
                container["args"][1:]))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        # the labels the NetworkPolicies let in are the operator pods' own
        assert policy.operator_pod_labels.items() <= pod["metadata"]["labels"].items()
        assert policy.operator_namespace == "kraft-system"
        return policy

    default = policy_of({})
    assert default.allowed_images == ("kraft-quorum:*", "kraft-quorum@sha256:*")
    assert default.allowed_service_accounts == ()
    assert default.refusal(models_spec(image="kraft-quorum:0.1.0")) is None
    refused = default.refusal(models_spec(image="docker.io/library/busybox:1"))
    assert refused is not None and refused.reason == "ImageNotAllowed"
    custom = policy_of(MATRIX["watch-all-namespaces"])
    assert custom.allowed_images == ("*",)
    assert custom.refusal(models_spec(podTemplate={"serviceAccountName": "kraft-a"})) is None
    assert custom.refusal(models_spec(podTemplate={"serviceAccountName": "admin"})) is not None


def models_spec(**fields: Any) -> Any:
    from kraft_operator import models

    return models.KRaftQuorumSpec.model_validate(fields)


def test_the_operator_deployment_passes_restricted_with_every_option(tmp_path: Path) -> None:
    from tests.support import pod_security

    for case in sorted(MATRIX):
        (deployment,) = by_kind(render(tmp_path, MATRIX[case]), "Deployment")
        spec, meta = pod_security.template_spec(deployment)
        assert pod_security.violations(spec, meta) == [], case
    privileged = {"securityContext": {"privileged": True, "allowPrivilegeEscalation": True,
                                      "capabilities": {"add": ["SYS_ADMIN"]}}}
    (deployment,) = by_kind(render(tmp_path, privileged), "Deployment")
    found = {v.split(":")[0] for v in pod_security.violations(
        *pod_security.template_spec(deployment))}
    assert {"privileged", "allowPrivilegeEscalation", "capabilities_baseline"} <= found


def test_optional_parts_are_off_by_default_and_on_when_asked(tmp_path: Path) -> None:
    default = {d["kind"] for d in render(tmp_path, {})}
    assert not default & {"KRaftQuorum", "ServiceMonitor", "PodMonitor", "NetworkPolicy"}
    everything = render(tmp_path, MATRIX["everything"])
    kinds = {d["kind"] for d in everything}
    assert {"KRaftQuorum", "ServiceMonitor", "PodMonitor", "NetworkPolicy"} <= kinds
    # the quorums' pods scraped as the operator labels them, with their quorum's name
    (pods,) = by_kind(everything, "PodMonitor")
    assert pods["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kraft", "app.kubernetes.io/managed-by": "kraft-operator"}
    assert pods["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert pods["spec"]["namespaceSelector"] == {"matchNames": ["kafka"]}
    assert pods["metadata"]["labels"]["release"] == "prom"
    (pods,) = by_kind(render(tmp_path, {"metrics": {"quorumPodMonitor": {"enabled": True}}}),
                      "PodMonitor")
    assert pods["spec"]["namespaceSelector"] == {"matchNames": ["kraft-system"]}
    everywhere = render(tmp_path, {**MATRIX["watch-all-namespaces"],
                                   "metrics": {"quorumPodMonitor": {"enabled": True}}})
    (pods,) = by_kind(everywhere, "PodMonitor")
    assert pods["spec"]["namespaceSelector"] == {"any": True}
    scoped = render(tmp_path, {**MATRIX["watch-namespaces"],
                               "metrics": {"quorumPodMonitor": {"enabled": True}}})
    (pods,) = by_kind(scoped, "PodMonitor")
    assert pods["spec"]["namespaceSelector"] == {"matchNames": ["kafka", "payments"]}
    (quorum,) = by_kind(everything, "KRaftQuorum")
    assert quorum["metadata"]["namespace"] == "kafka" and quorum["spec"]["replicas"] == 5
    assert not any(k.startswith("argocd.argoproj.io") for k in quorum["metadata"]["labels"])
    image = by_kind(everything, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] == "registry.example/kraft-quorum@sha256:" + "ab" * 32


def test_a_quorum_spec_the_crd_refuses_is_caught_by_its_schema(tmp_path: Path) -> None:
    """The chart's KRaftQuorum goes through the CRD's schema here, so a bad spec fails the test
    (the values schema checks only replicas)."""
    values = {"quorum": {"create": True, "spec": {"replicas": 3, "storage": {"size": "lots"}}}}
    (quorum,) = by_kind(render(tmp_path, values), "KRaftQuorum")
    assert list(crd_validator().iter_errors(quorum))


def test_notes_name_the_next_commands(tmp_path: Path) -> None:
    proc = helm("install", "kraft-operator", str(CHART), "-n", "kraft-system",
                "--dry-run=client", "--set", "quorum.create=true")
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "kubectl -n kraft-system rollout status deployment/kraft-operator" in notes
    assert "kubectl -n kraft-system get lease kraft-operator" in notes
    assert "kubectl -n kraft-system wait kq/kraft --for=condition=Ready" in notes


# ------------------------------------------------------------------ examples/ and the CRD


def _example_docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        if path.name == "kustomization.yaml":  # kustomize's input (test_gitops_kustomization)
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((str(path.relative_to(ROOT)), doc))
    return out


def test_gitops_example_exists_and_has_a_quorum() -> None:
    names = {name for name, doc in _example_docs() if doc["kind"] == "KRaftQuorum"}
    assert any(n.startswith("examples/gitops/") for n in names)


@pytest.mark.parametrize(("name", "doc"), _example_docs(),
                         ids=[f"{n}:{d['kind']}" for n, d in _example_docs()])
def test_every_example_is_valid(name: str, doc: dict[str, Any]) -> None:
    if doc["kind"] == "KRaftQuorum":
        errors = sorted(crd_validator().iter_errors(doc), key=str)
        assert not errors, f"{name}: {errors[0].json_path}: {errors[0].message}"
    else:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_gitops_kustomization_renders_the_quorum_with_the_real_kubectl() -> None:
    """Argo CD renders examples/gitops with kustomize; so does `kubectl kustomize`."""
    kubectl = find_tool("kubectl")
    if kubectl is None:
        pytest.fail("no kubectl: run `make k8s-bins`")
    proc = subprocess.run([kubectl, "kustomize", str(ROOT / "examples" / "gitops")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert [d["kind"] for d in docs] == ["KRaftQuorum"]
    assert docs[0]["metadata"]["namespace"] == "kafka"
    assert not list(crd_validator().iter_errors(docs[0]))


def test_crd_schema_refuses_a_broken_example() -> None:
    name, doc = next((n, d) for n, d in _example_docs()
                     if n.startswith("examples/gitops/") and d["kind"] == "KRaftQuorum")
    doc["spec"]["replicas"] = "five"
    assert list(crd_validator().iter_errors(doc)), name


# ------------------------------------------------------------------ checkov


def checkov(path: Path, config: Path | None = None) -> dict[str, Any]:
    if not CHECKOV.exists():
        pytest.fail("no checkov: run `make checkov` (a virtual environment of its own in "
                    ".tools/checkov: its pins conflict with pytest's)")
    command = [str(CHECKOV), "--compact", "--framework", "kubernetes", "--output", "json",
               "--skip-download", "-f", str(path)]
    if config is not None:
        command += ["--config-file", str(config)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "BC_SKIP_MAPPING": "TRUE"})
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    reports = report if isinstance(report, list) else [report]
    merged: dict[str, Any] = {"passed_checks": [], "failed_checks": [], "skipped_checks": []}
    for r in reports:
        for key in merged:
            merged[key] += r.get("results", {}).get(key, [])
    return merged


def _assert_clean(result: dict[str, Any]) -> None:
    failed = [f"{c['check_id']} {c['check_name']} ({c['resource']})"
              for c in result["failed_checks"]]
    assert not failed, "checkov failed checks:\n" + "\n".join(failed)
    assert len(result["passed_checks"]) > 50, "checkov ran (almost) no check"
    for skipped in result["skipped_checks"]:
        reason = (skipped.get("check_result") or {}).get("suppress_comment") or ""
        assert len(reason) > 20, f"{skipped['check_id']} skipped without a reason"


@pytest.mark.slow
def test_checkov_finds_no_unexplained_failure_with_every_option(tmp_path: Path) -> None:
    """The NetworkPolicy on: no configuration, only the Deployment's inline skips."""
    rendered = tmp_path / "chart.yaml"
    rendered.write_text(helm("template", "kraft-operator", str(CHART), "-n", "kraft-system",
                             "--values", str(values_file(tmp_path, MATRIX["everything"]))).stdout)
    result = checkov(rendered)
    _assert_clean(result)
    assert {c["check_id"] for c in result["skipped_checks"]} == {"CKV_K8S_38"}
    assert "CKV2_K8S_6" in {c["check_id"] for c in result["passed_checks"]}


@pytest.mark.slow
def test_checkov_finds_no_unexplained_failure_with_the_defaults(tmp_path: Path) -> None:
    """The defaults: the chart's documented .checkov.yaml (the opt-in NetworkPolicy)."""
    rendered = tmp_path / "chart.yaml"
    rendered.write_text(helm("template", "kraft-operator", str(CHART), "-n",
                             "kraft-system").stdout)
    result = checkov(rendered, CHART / ".checkov.yaml")
    _assert_clean(result)
    assert {c["check_id"] for c in result["skipped_checks"]} == \
        {"CKV_K8S_38", "CKV_K8S_43", "CKV_K8S_15"}


@pytest.mark.slow
def test_checkov_fails_a_privileged_deployment(tmp_path: Path) -> None:
    """checkov really checks: the chart's Deployment made privileged fails."""
    docs = render(tmp_path, {})
    deployment = by_kind(docs, "Deployment")[0]
    sc = deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    sc.update({"privileged": True, "allowPrivilegeEscalation": True})
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(deployment))
    failed = {c["check_id"] for c in checkov(bad)["failed_checks"]}
    assert {"CKV_K8S_16", "CKV_K8S_20"} <= failed
