"""Argo CD's health check for KRaftQuorum, run by a real Lua 5.1 interpreter.

Argo CD runs health checks in gopher-lua (Lua 5.1): the live object is the global `obj`, and the
script returns `{status=..., message=...}`. These tests run `health.lua` in the Lua 5.1 that the
`lupa` wheel bundles, over the samples in Argo CD's own layout (`health_test.yaml` naming
`testdata/*.yaml` and the health each must get), and check that the argocd-cm snippet carries
the same script and the Applications sync the CRD before the quorum.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

lua51 = pytest.importorskip("lupa.lua51")

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "argocd/resource_customizations/kraft.dev/KRaftQuorum"


def _to_lua(runtime: Any, value: Any) -> Any:
    """Build Lua tables as Argo CD does from the object's JSON: maps become tables with string
    keys, lists become tables indexed from 1, scalars stay scalars."""
    if isinstance(value, dict):
        return runtime.table_from({k: _to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, v) for v in value])
    return value


def health(obj: dict[str, Any]) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    assert runtime.eval("_VERSION") == "Lua 5.1"
    runtime.globals().obj = _to_lua(runtime, obj)
    result = runtime.execute((CHECK / "health.lua").read_text())
    return {"status": result["status"], "message": result["message"]}


CASES = yaml.safe_load((CHECK / "health_test.yaml").read_text())["tests"]


@pytest.mark.parametrize("case", CASES, ids=[Path(c["inputPath"]).stem for c in CASES])
def test_health_of_each_sample(case: dict[str, Any]) -> None:
    obj = yaml.safe_load((CHECK / case["inputPath"]).read_text())
    assert health(obj) == case["healthStatus"]


def test_every_health_status_is_covered() -> None:
    seen = {c["healthStatus"]["status"] for c in CASES}
    assert seen == {"Healthy", "Progressing", "Degraded", "Suspended"}


def test_a_rollout_is_progressing_even_while_a_voter_lags() -> None:
    """argo-cd's `app wait` breaks on a Degraded resource during an ordinary rolling update."""
    obj = yaml.safe_load((CHECK / "testdata/rolling.yaml").read_text())
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conds["Degraded"]["status"] == "True" and conds["Progressing"]["status"] == "True"
    assert health(obj)["status"] == "Progressing"
    conds["Progressing"]["status"] = "False"
    obj["metadata"]["generation"] = obj["status"]["observedGeneration"]
    assert health(obj)["status"] == "Degraded"


def test_quorum_loss_shows_even_when_paused() -> None:
    obj = yaml.safe_load((CHECK / "testdata/quorum-lost.yaml").read_text())
    paused = [c for c in obj["status"]["conditions"] if c["type"] == "ReconciliationPaused"]
    assert paused and paused[0]["status"] == "True"
    assert health(obj)["status"] == "Degraded"


def test_argocd_cm_carries_the_same_script() -> None:
    cm = yaml.safe_load((ROOT / "argocd/argocd-cm.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    assert cm["data"]["resource.customizations.health.kraft.dev_KRaftQuorum"] == (
        CHECK / "health.lua").read_text()
    # the operator's pods and volumes never carry a tracking label Argo CD would prune by
    assert cm["data"]["application.resourceTrackingMethod"] == "annotation"


def test_applications_sync_the_operator_before_the_quorum() -> None:
    apps = {a["metadata"]["name"]: a
            for a in yaml.safe_load_all((ROOT / "argocd/application.yaml").read_text())}
    wave = {n: int(a["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
            for n, a in apps.items()}
    assert wave["kraft-operator"] < wave["kraft-quorum"]
    quorum = apps["kraft-quorum"]["spec"]
    # the operator reconciles the namespace the quorum is synced to
    watched = apps["kraft-operator"]["spec"]["source"]["helm"]["valuesObject"]["watchNamespaces"]
    assert quorum["destination"]["namespace"] in watched
    assert "SkipDryRunOnMissingResource=true" in quorum["syncPolicy"]["syncOptions"]
    assert quorum["syncPolicy"]["automated"]["prune"] is False
