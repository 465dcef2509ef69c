"""The shipping docs: every shell command in docs/install.md, docs/gitops.md, docs/upgrade.md
and docs/runbook.md is run here (the real kubectl and helm against the sandbox's API,
kubernetes-validate, kubectl kustomize), in the order the document gives, unless it is listed in
NOT_RUN with the reason it cannot run here; docs/configuration.md is what the models generate.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kraft_sandbox.handle import find_tool, start_sandbox

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# The sections of each document run in one fresh sandbox, in order, after the setup commands
# (what a reader is assumed to have: Argo CD's namespace and ConfigMap, the CRD and a quorum).
SCENARIOS: dict[str, tuple[str, list[str], list[str]]] = {
    "install-kubectl": ("install.md", ["With kubectl", "Uninstalling"], []),
    "install-helm": ("install.md", ["With Helm"], []),
    "gitops": ("gitops.md", ["Setting it up"], [
        "kubectl create namespace argocd",
        "kubectl -n argocd create configmap argocd-cm",
        "kubectl apply --validate=false -f crds/",
        "kubectl create namespace kafka"]),
    "upgrade": ("upgrade.md", ["The CRD first", "Then the operator", "The quorum's nodes"], [
        "kubectl apply --validate=false -f crds/",
        "kubectl apply --validate=false -f examples/minimal.yaml"]),
    "runbook": ("runbook.md", ["First look", "Disk failure", "Node failure", "Quorum loss",
                               "The operator itself"], [
        "kubectl apply --validate=false -f crds/",
        "kubectl apply --validate=false -f examples/minimal.yaml"]),
}

# Commands that cannot run here, each with the reason.
NOT_RUN = {
    "kubectl apply -n argocd -f argocd/application.yaml":
        "needs Argo CD's Application CRD (argocd/ is checked by tests/shipping/test_argocd.py)",
    "kubectl logs deployment/kraft-operator -n kraft-system":
        "needs a Deployment controller, which the sandbox does not have",
    "kubectl exec demo-0 -- kraft quorum --bootstrap-controller localhost:9093 describe --status":
        "needs the quorum's running pods (the operator runs in tests/shipping/test_chart_live.py)",
    "kubectl delete pvc data-demo-2 --wait=false": "needs the operator's claims",
    "kubectl delete pod demo-2": "needs the operator's pods",
    "kubectl delete pod demo-0":
        "needs the operator's pods (tests/shipping/test_chart_live.py runs the step)",
    "kubectl logs demo-0-inspect":
        "needs the quorum's claim (tests/shipping/test_chart_live.py runs the inspect pod)",
    "kubectl logs demo-0 -c recover":
        "needs a recovery pod (tests/operator_live/test_recovery_live.py runs the recovery)",
    "kubectl -n kraft-system get lease kraft-operator -o jsonpath='{.spec.holderIdentity}{\"\\n\"}'":
        "needs a running operator (its Lease: tests/shipping/test_chart_live.py)",
    "kubectl get lease demo.kraftquorums.kraft.dev -o jsonpath='{.spec.holderIdentity}{\"\\n\"}'":
        "needs a running operator (the claim: tests/operator_live/test_live.py)",
}


def sections(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    title = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            title = line[3:].strip()
        out[title] = out.get(title, "") + line
    return out


def commands(text: str) -> list[str]:
    """The commands of the ```sh blocks: one per line, a heredoc kept with its command,
    trailing comments dropped."""
    out: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = re.sub(r"\s+#\s.*$", "", lines[i]).rstrip()
            i += 1
            if not line:
                continue
            heredoc = re.search(r"<<'(\w+)'$", line)
            if heredoc:
                body = []
                while lines[i] != heredoc.group(1):
                    body.append(lines[i])
                    i += 1
                i += 1
                line = "\n".join([line, *body, heredoc.group(1)])
            out.append(line)
    return out


def for_sandbox(command: str) -> str:
    """The sandbox serves no OpenAPI document (docs/sandbox.md)."""
    command = re.sub(r"^kubectl apply\b", "kubectl apply --validate=false", command)
    return re.sub(r"^helm (install|upgrade)\b", r"helm \1 --disable-openapi-validation", command)


def all_doc_commands() -> set[str]:
    found: set[str] = set()
    for doc, _sections, _setup in SCENARIOS.values():
        found |= set(commands((DOCS / doc).read_text()))
    return found


def test_command_extraction_keeps_heredocs_and_drops_comments() -> None:
    text = "```sh\nkubectl get kq   # the quorum\nkubectl apply -f - <<'EOF'\nkind: Pod\nEOF\n```\n"
    assert commands(text) == ["kubectl get kq", "kubectl apply -f - <<'EOF'\nkind: Pod\nEOF"]


def test_every_command_is_run_or_excused() -> None:
    """Each document section with commands belongs to a scenario, and every excuse is used."""
    for doc in ("install.md", "gitops.md", "upgrade.md", "runbook.md"):
        covered = {s for d, secs, _ in SCENARIOS.values() if d == doc for s in secs}
        for title, body in sections((DOCS / doc).read_text()).items():
            if commands(body):
                assert title in covered, f"docs/{doc} section {title!r} is run by no scenario"
    stale = set(NOT_RUN) - all_doc_commands()
    assert not stale, f"NOT_RUN names commands no document has: {stale}"


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_doc_commands_run(scenario: str, tmp_path: Path) -> None:
    doc, wanted, setup = SCENARIOS[scenario]
    parts = sections((DOCS / doc).read_text())
    work = tmp_path / "work"
    work.mkdir()
    for name in ("crds", "charts", "examples", "argocd"):
        (work / name).symlink_to(ROOT / name)
    tools = [Path(t).parent for t in (find_tool("kubectl"), find_tool("helm")) if t]
    if len(tools) < 2:
        pytest.fail("no kubectl or helm: run `make k8s-bins`")
    with start_sandbox(tmp_path / "sandbox", nodes=1) as sb:
        env = {**os.environ, "KUBECONFIG": str(sb.kubeconfig),
               "PATH": os.pathsep.join([str(tools[0]), str(tools[1]),
                                        str(Path(sys.executable).parent),
                                        os.environ.get("PATH", "")])}
        for key in ("CACHE", "CONFIG", "DATA"):
            env[f"HELM_{key}_HOME"] = str(tmp_path / "helm" / key.lower())
        ran = 0
        for command in setup + [c for s in wanted for c in commands(parts[s])]:
            if command in NOT_RUN:
                continue
            proc = subprocess.run(["bash", "-c", for_sandbox(command)], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=180)
            assert proc.returncode == 0, (
                f"docs/{doc}: `{command}` failed ({proc.returncode}):\n{proc.stdout}\n"
                f"{proc.stderr}")
            ran += 1
        assert ran > len(setup)


def test_configuration_reference_is_generated_from_the_models() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_config_docs.py"),
                           "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_configuration_reference_check_notices_drift(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text((DOCS / "configuration.md").read_text().replace("`3`", "`5`", 1))
    script = str(ROOT / "tools" / "gen_config_docs.py")
    proc = subprocess.run([sys.executable, script, str(stale), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "out of date" in proc.stderr
