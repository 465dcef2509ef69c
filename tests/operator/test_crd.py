"""The KRaftQuorum CRD: generated from the models, structural, valid, and small enough to apply."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kraft_operator import crdgen, models
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "kraftquorums.kraft.dev.yaml"
SAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
K8S_VERSIONS = ("1.30.0", "1.35.0")


def _crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


def _open_api(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _samples() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, doc) for p in SAMPLES for doc in yaml.safe_load_all(p.read_text()) if doc]


def test_crd_file_matches_the_models() -> None:
    assert CRD_PATH.read_text() == crdgen.render(), (
        "crds/ drifted from operator/models.py: run python -m kraft_operator.crdgen"
    )


def test_drift_check_notices_a_changed_file(tmp_path: Path) -> None:
    stale = tmp_path / "crd.yaml"
    stale.write_text(crdgen.render().replace("default: 3", "default: 5"))
    assert crdgen.main([str(stale), "--check"]) == 1
    stale.write_text(crdgen.render())
    assert crdgen.main([str(stale), "--check"]) == 0


def test_crd_fits_client_side_apply_annotation() -> None:
    assert len(CRD_PATH.read_bytes()) < crdgen.ANNOTATION_LIMIT_BYTES


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_crd_passes_kubernetes_validate_strict(version: str) -> None:
    kubernetes_validate.validate(_crd(), version, strict=True)


def test_kubernetes_validate_strict_refuses_an_unknown_field() -> None:
    crd = _crd()
    crd["spec"]["bogusField"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(crd, "1.35.0", strict=True)


def _structural_problems(node: dict[str, Any], path: str) -> list[str]:
    """Kubernetes' structural-schema rules that kubernetes-validate does not check."""
    problems = []
    for banned in ("$ref", "allOf", "oneOf", "not", "nullable", "title", "definitions", "$defs"):
        if banned in node:
            problems.append(f"{path}: {banned}")
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: anyOf outside int-or-string")
    # a node of any type is one that keeps unknown fields (or is int-or-string)
    if "type" not in node and not node.get("x-kubernetes-int-or-string") \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path}: no type")
    if "description" not in node and path.count(".") > 1 and not path.endswith(("[]", ".*")):
        problems.append(f"{path}: no description")
    if node.get("type") == "object":
        has_props = "properties" in node or "additionalProperties" in node
        if not has_props and not node.get("x-kubernetes-preserve-unknown-fields") \
                and not path.endswith(".metadata"):
            problems.append(f"{path}: object without fields would be pruned empty")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{path}: properties and additionalProperties")
        for name, sub in node.get("properties", {}).items():
            problems += _structural_problems(sub, f"{path}.{name}")
        for req in node.get("required", []):
            if req not in node.get("properties", {}):
                problems.append(f"{path}: required {req} has no property")
        if isinstance(node.get("additionalProperties"), dict):
            problems += _structural_problems(node["additionalProperties"], f"{path}.*")
    if node.get("type") == "array":
        problems += _structural_problems(node["items"], f"{path}[]")
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in node["items"].get("required", []):
                problems.append(f"{path}: list-map key {key} not required")
    return problems


def test_schema_is_structural_with_descriptions() -> None:
    assert _structural_problems(_open_api(_crd()), "") == []


def test_structural_check_catches_a_bare_object() -> None:
    schema = copy.deepcopy(_open_api(_crd()))
    schema["properties"]["spec"]["properties"]["podTemplate"]["properties"]["affinity"].pop(
        "x-kubernetes-preserve-unknown-fields"
    )
    assert any("affinity" in p for p in _structural_problems(schema, ""))


def test_crd_names_subresources_and_columns() -> None:
    crd = _crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "kraftquorums.kraft.dev"
    assert spec["group"] == "kraft.dev" and spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "kraftquorums" and spec["names"]["shortNames"] == ["kq"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == [
        "Ready", "Quorate", "Leader", "Epoch", "Voters", "Desired", "Healthy", "High-Watermark",
        "Age"]
    # each count a number of its own: a scale-down reads Voters 5, Desired 3, never "5/3"
    counts = {c["name"]: c for c in columns if c["name"] in ("Voters", "Desired", "Healthy")}
    assert {c["type"] for c in counts.values()} == {"integer"}
    assert counts["Desired"]["jsonPath"] == ".spec.replicas"
    assert counts["Voters"]["jsonPath"] == ".status.replicas"
    assert [c["name"] for c in columns if c.get("priority") == 1] == ["Cluster-Id", "Operation"]
    status = _open_api(crd)["properties"]["status"]["properties"]
    spec_fields = _open_api(crd)["properties"]["spec"]["properties"]
    for column in version["additionalPrinterColumns"]:
        first = column["jsonPath"].split(".")[1:3]
        if first[0] == "spec":
            assert first[1] in spec_fields, column
        if first[0] == "status":
            assert first[1].split("[")[0] in status, column


def test_replicas_bounds_and_cluster_id_rule_in_schema() -> None:
    spec = _open_api(_crd())["properties"]["spec"]
    replicas = spec["properties"]["replicas"]
    assert (replicas["minimum"], replicas["maximum"], replicas["default"]) == (1, 9, 3)
    rules = [r["rule"] for r in _open_api(_crd())["x-kubernetes-validations"]]
    assert any("oldSelf.spec.clusterId" in r for r in rules)


def _admit(doc: dict[str, Any], old: dict[str, Any] | None = None):
    """What an API server does with a write: defaults, pruning, schema and CEL rules."""
    from kraft_sandbox.schema import StructuralSchema

    return StructuralSchema(_open_api(_crd())).admit(doc, old)


def _drop_empty(value: Any) -> Any:
    """Empty maps and lists left out (the model writes them, the API server has none)."""
    if isinstance(value, dict):
        kept = {k: _drop_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ({}, [])}
    if isinstance(value, list):
        return [_drop_empty(v) for v in value]
    return value


def _quorum(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kraft.dev/v1alpha1", "kind": "KRaftQuorum",
            "metadata": {"name": "demo"}, "spec": spec}


def test_cluster_id_is_immutable_once_set_by_its_cel_rule() -> None:
    cid, other = "MkU3OEVBNTcwNTJENDM2Qg", "A" * 22
    old, problems = _admit(_quorum({"clusterId": cid}))
    assert problems == []
    assert _admit(_quorum({"clusterId": cid, "replicas": 5}), old)[1] == []
    immutable = ("spec.clusterId", "spec.clusterId is immutable once set (a wrong one can "
                 "only be corrected to status.clusterId)")
    changed = _admit(_quorum({"clusterId": other}), old)[1]
    assert changed == [immutable]
    dropped = _admit(_quorum({}), old)[1]
    assert dropped == [immutable]
    unset, _ = _admit(_quorum({}))
    assert _admit(_quorum({"clusterId": cid}), unset)[1] == []  # setting it once is allowed


def test_api_server_defaults_an_empty_spec_to_the_model_defaults() -> None:
    admitted, problems = _admit(_quorum({}))
    assert problems == []
    assert _drop_empty(admitted["spec"]) == _drop_empty(models.KRaftQuorumSpec().to_k8s())


@pytest.mark.parametrize(("name", "doc"), _samples(), ids=[n for n, _ in _samples()])
def test_samples_are_admitted_unchanged_but_for_defaults(name: str, doc: dict[str, Any]) -> None:
    admitted, problems = _admit(doc)
    assert problems == []
    model = models.KRaftQuorum.model_validate(doc)
    # nothing pruned, and the defaults filled in are the model's
    assert _drop_empty(admitted["spec"]) == _drop_empty(model.spec.to_k8s())


def test_samples_exist() -> None:
    names = {p.name for p in SAMPLES}
    assert {"minimal.yaml", "production.yaml"} <= names


@pytest.mark.parametrize(("name", "doc"), _samples(), ids=[n for n, _ in _samples()])
def test_sample_matches_crd_schema_and_model(name: str, doc: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(_open_api(_crd())).validate(doc)
    model = models.KRaftQuorum.model_validate(doc)
    assert models.check_config(model.spec.config) == []


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("name", "doc"), _samples(), ids=[n for n, _ in _samples()])
def test_sample_pod_overrides_are_valid_pod_fields(name: str, doc: dict[str, Any],
                                                   version: str) -> None:
    """kubernetes-validate knows no KRaftQuorum, so check the overrides as a real Pod's fields."""
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(doc, version)  # it knows no custom kinds
    template = models.KRaftQuorum.model_validate(doc).spec.pod_template
    pod_spec: dict[str, Any] = {"containers": [{"name": "kraft", "image": "x"}]}
    overrides = template.to_k8s()
    for key in ("affinity", "tolerations", "topologySpreadConstraints", "nodeSelector",
                "priorityClassName", "serviceAccountName"):
        if key in overrides:
            pod_spec[key] = overrides[key]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "labels": overrides.get("labels", {}),
                        "annotations": overrides.get("annotations", {})},
           "spec": pod_spec}
    kubernetes_validate.validate(pod, version, strict=True)


def test_production_sample_has_the_promised_shape() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "production.yaml").read_text())
    spec = models.KRaftQuorum.model_validate(doc).spec
    assert spec.replicas == 5
    assert spec.pod_template.affinity and "podAntiAffinity" in spec.pod_template.affinity
    assert spec.pod_template.topology_spread_constraints
    assert spec.pod_disruption_budget.enabled
    assert spec.resources.requests and spec.resources.limits


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"replicas": 0}, "minimum"),
        ({"replicas": 10}, "maximum"),
        ({"replicas": "three"}, "not of type"),
        ({"storage": {"size": "ten gigs"}}, "does not match"),
        ({"storage": {"onScaleDown": "Shred"}}, "is not one of"),
        ({"clusterId": "short"}, "does not match"),
    ],
)
def test_crd_schema_refuses_bad_specs(patch: dict[str, Any], message: str) -> None:
    doc = {"apiVersion": "kraft.dev/v1alpha1", "kind": "KRaftQuorum",
           "metadata": {"name": "x"}, "spec": patch}
    with pytest.raises(jsonschema.ValidationError, match=message):
        jsonschema.Draft7Validator(_open_api(_crd())).validate(doc)
    with pytest.raises(ValidationError):
        models.KRaftQuorumSpec.model_validate(patch)


def test_defaults_match_between_model_and_schema() -> None:
    """Every default the API server fills in is the model's default."""
    schema = _open_api(_crd())["properties"]["spec"]
    model_defaults = models.KRaftQuorumSpec().to_k8s()

    def walk(node: dict[str, Any], values: dict[str, Any], path: str) -> None:
        for name, sub in node.get("properties", {}).items():
            if "default" in sub and sub["default"] not in ({}, []):
                assert values.get(name) == sub["default"], f"{path}.{name}"
            if sub.get("type") == "object" and "properties" in sub:
                walk(sub, values.get(name, {}), f"{path}.{name}")

    walk(schema, model_defaults, "spec")


def test_config_seam_refuses_operator_keys_and_bad_keys() -> None:
    problems = models.check_config({"node.id": "3", "bad key": "x",
                                    "controller.quorum.fetch.timeout.ms": "2000"})
    assert [p.key for p in problems] == ["bad key", "node.id"]
    assert "set by the operator" in str(problems[1])


def test_config_refuses_the_http_ports_tls_and_token_keys_it_cannot_render() -> None:
    """They name files the pods do not have and need HTTPS probes: refused by both seams
    rather than a node that cannot start."""
    from kraft_operator import render

    config = {"kraft.http.auth.token.file": "/etc/kraft/tokens.csv",
              "kraft.http.ssl.keystore.location": "/etc/kraft/http.pem",
              "kraft.http.max.connections": "100"}
    problems = models.check_config(config)
    assert [p.key for p in problems] == ["kraft.http.auth.token.file",
                                         "kraft.http.ssl.keystore.location"]
    assert "does not render yet" in str(problems[0])
    assert [p.split("=")[0] for p in render.config_problems(config)] == [
        "kraft.http.auth.token.file", "kraft.http.ssl.keystore.location"]


def test_config_seam_delegates_to_a_property_checker() -> None:
    def check(key: str, value: str) -> str | None:
        return None if value.isdigit() else f"{value!r} is not an integer"

    checker = models.ConfigChecker(property_check=check)
    problems = models.check_config({"controller.quorum.fetch.timeout.ms": "soon"}, checker)
    assert [str(p) for p in problems] == [
        "spec.config['controller.quorum.fetch.timeout.ms']: 'soon' is not an integer"
    ]


def test_a_cluster_id_set_later_must_be_the_recorded_one_by_its_cel_rule() -> None:
    recorded, other = "MkU3OEVBNTcwNTJENDM2Qg", "A" * 22
    created, problems = _admit(_quorum({}))
    assert problems == []
    old = {**created, "status": {"clusterId": recorded}}  # the operator recorded its id
    changed = _admit({**_quorum({"clusterId": other}), "status": old["status"]}, old)[1]
    assert changed == [("spec.clusterId", models.CLUSTER_ID_FIXED)]
    # the rule's words send a user where the ForeignVolume condition does: a new object
    assert "delete the KRaftQuorum and create it again" in models.CLUSTER_ID_FIXED
    pinned = _admit({**_quorum({"clusterId": recorded}), "status": old["status"]}, old)[1]
    assert pinned == []  # a GitOps source pinning the quorum's own id
    # Before any id is recorded, any id may be set; and a mismatch stored before the rule
    # existed does not block the operator's status writes.
    assert _admit(_quorum({"clusterId": other}), created)[1] == []
    stored = {**_quorum({"clusterId": other}), "status": {"clusterId": recorded}}
    rewritten = {**stored, "status": {"clusterId": recorded, "replicas": 3}}
    assert _admit(rewritten, stored)[1] == []
    # Such a stored mismatch can be corrected to the recorded id, and to nothing else.
    corrected = {**_quorum({"clusterId": recorded}), "status": stored["status"]}
    assert _admit(corrected, stored)[1] == []
    third = {**_quorum({"clusterId": "B" * 22}), "status": stored["status"]}
    assert [f for f, _ in _admit(third, stored)[1]] == ["spec.clusterId", "spec.clusterId"]


def test_config_takes_strings_integers_and_booleans_as_kafka_writes_them() -> None:
    """Strimzi users write numbers and booleans in config; the API takes them and the operator
    renders them as Kafka writes them (it refused `1500 is not of type 'string'`)."""
    config = {"controller.quorum.fetch.timeout.ms": 1500, "kraft.lane.follower": False,
              "kraft.log.flush.mode": "auto"}
    admitted, problems = _admit(_quorum({"config": config}))
    assert problems == []
    assert admitted["spec"]["config"] == config
    spec = models.KRaftQuorumSpec.model_validate(admitted["spec"])
    assert spec.config == {"controller.quorum.fetch.timeout.ms": "1500",
                           "kraft.lane.follower": "false", "kraft.log.flush.mode": "auto"}
    assert models.check_config(spec.config) == []
    for bad in (1.5, [1], {"a": 1}):
        # the API takes it (no CEL rule can check untyped values: a real API server refuses
        # the CRD that has one); the operator refuses it, Degraded with reason InvalidSpec
        assert _admit(_quorum({"config": {"k": bad}}))[1] == []
        with pytest.raises(ValidationError, match="not a string, an integer or a boolean"):
            models.KRaftQuorumSpec.model_validate({"config": {"k": bad}})


def test_every_cel_rule_has_a_cel_type_so_a_real_api_server_takes_the_crd() -> None:
    """kube-apiserver refuses a CRD whose x-kubernetes-validations sit on an untyped node
    ("unable to convert structural schema to CEL declarations"): it refused this one when
    spec.config's rule walked its untyped values."""
    from kraft_sandbox.schema import untyped_rules

    assert untyped_rules(_open_api(_crd())) == []


def test_a_network_policy_peer_is_either_an_address_block_or_selectors() -> None:
    """The CRD's CEL rule on spec.networkPolicy.httpFrom, as the models' own check: a peer
    mixing ipBlock with a selector, or naming nothing, is refused by both."""
    good = [{"podSelector": {"matchLabels": {"app": "client"}}},
            {"namespaceSelector": {}, "podSelector": {}},
            {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]
    assert _admit(_quorum({"networkPolicy": {"httpFrom": good}}))[1] == []
    models.KRaftQuorumSpec.model_validate({"networkPolicy": {"httpFrom": good}})
    for bad in ({"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}, {}):
        problems = _admit(_quorum({"networkPolicy": {"httpFrom": [bad]}}))[1]
        assert any("a peer is either an ipBlock" in message for _path, message in problems), \
            problems
        with pytest.raises(ValidationError):
            models.KRaftQuorumSpec.model_validate({"networkPolicy": {"httpFrom": [bad]}})
    assert _admit(_quorum({}))[0]["spec"]["networkPolicy"] == {"enabled": True}
