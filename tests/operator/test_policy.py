"""The operator's allow-lists and its own pods' labels (kraft_operator.policy): parsed from
the settings, matched as globs (never as prefixes), and what the planner does with a refusal."""

from __future__ import annotations

import pytest
from kraft_operator import models
from kraft_operator.planner import ReportDegraded, plan
from kraft_operator.policy import OperatorPolicy, parse_labels, parse_list

from tests.operator.world import World


def spec(**fields: object) -> models.KRaftQuorumSpec:
    return models.KRaftQuorumSpec.model_validate(fields)


def test_settings_parse_lists_and_labels_and_name_a_bad_label() -> None:
    assert parse_list(None) is None
    assert parse_list("") == ()
    assert parse_list(" a:* ,\nb@sha256:*,,") == ("a:*", "b@sha256:*")
    assert parse_labels("app.kubernetes.io/name=kraft-operator, x=y") == {
        "app.kubernetes.io/name": "kraft-operator", "x": "y"}
    with pytest.raises(ValueError, match="'oops' is not key=value"):
        parse_labels("a=b,oops")
    env = {"KRAFT_OPERATOR_ALLOWED_IMAGES": "r/kraft:*", "KRAFT_OPERATOR_POD_LABELS": "a=b"}
    policy = OperatorPolicy.from_env(env, operator_namespace="ops")
    assert policy.allowed_images == ("r/kraft:*",)
    assert policy.allowed_service_accounts is None
    assert (policy.operator_namespace, dict(policy.operator_pod_labels)) == ("ops", {"a": "b"})


@pytest.mark.parametrize(("image", "allowed"), [
    ("r.example.com/kraft-quorum:0.1.0", True),
    ("r.example.com/kraft-quorum@sha256:" + "0" * 64, True),
    ("r.example.com/kraft-quorum", False),           # no tag: not the pattern
    ("r.example.com/kraft-quorum-evil:1", False),    # a longer name is not a prefix match
    ("evil.example.com/r.example.com/kraft-quorum:1", False),
    ("R.EXAMPLE.COM/kraft-quorum:1", False),         # case matters
])
def test_images_match_the_globs_exactly(image: str, allowed: bool) -> None:
    policy = OperatorPolicy(allowed_images=("r.example.com/kraft-quorum:*",
                                            "r.example.com/kraft-quorum@sha256:*"))
    refusal = policy.refusal(spec(image=image))
    assert (refusal is None) == allowed
    if refusal is not None:
        assert refusal.reason == "ImageNotAllowed" and image in refusal.message


def test_service_accounts_unset_and_default_always_pass_an_empty_list_admits_no_other() -> None:
    none_else = OperatorPolicy(allowed_service_accounts=())
    assert none_else.refusal(spec()) is None
    assert none_else.refusal(spec(podTemplate={"serviceAccountName": "default"})) is None
    refusal = none_else.refusal(spec(podTemplate={"serviceAccountName": "admin"}))
    assert refusal is not None and refusal.reason == "ServiceAccountNotAllowed"
    assert "only the default" in refusal.message
    globbed = OperatorPolicy(allowed_service_accounts=("kraft-*",))
    assert globbed.refusal(spec(podTemplate={"serviceAccountName": "kraft-a"})) is None
    assert OperatorPolicy().refusal(spec(image="x", podTemplate={
        "serviceAccountName": "anything"})) is None  # no settings: nothing refused


def test_the_planner_reports_a_refusal_before_anything_else_but_a_pause() -> None:
    policy = OperatorPolicy(allowed_images=("ok:*",))
    refused = spec(image="bad:1", config={"no.such.key": "1"})
    result = plan(refused, World().observe(), policy)
    assert isinstance(result.action, ReportDegraded)
    assert result.action.reason == "ImageNotAllowed"
    degraded = result.condition("Degraded")
    assert (degraded.status, degraded.reason) == ("True", "ImageNotAllowed")
    paused = plan(spec(image="bad:1", paused=True), World().observe(), policy)
    assert paused.condition("ReconciliationPaused").status == "True"
    assert not isinstance(paused.action, ReportDegraded)
    assert not isinstance(plan(spec(image="ok:1"), World().observe(), policy).action,
                          ReportDegraded)
