"""Every pod the operator renders passes Pod Security "restricted" (tests/support/pod_security.py,
the admission's own checks), for several specs and for the recovery pod; and the same checker
refuses a deliberately privileged variant of each kind, so it is not a checker that passes
anything."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from kraft_operator import models, render
from kraft_operator.planner import CreatePod, FormatMode

from tests.support import pod_security

D0, D1, D2 = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"
CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"
SPECS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "one voter": {"replicas": 1},
    "scheduling and resources": {
        "replicas": 5, "image": "registry.example.com/kraft-quorum@sha256:" + "a" * 64,
        "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}},
        "podTemplate": {"serviceAccountName": "kraft", "priorityClassName": "high",
                        "tolerations": [{"key": "k", "operator": "Exists"}],
                        "nodeSelector": {"disk": "ssd"}, "labels": {"team": "a"},
                        "annotations": {"note": "n"}}},
    "no auto-join, config": {"autoJoin": False,
                             "config": {"controller.quorum.election.timeout.ms": 1500}},
}


def ref(spec: dict[str, Any]) -> render.QuorumRef:
    return render.QuorumRef.from_body({
        "apiVersion": models.API_VERSION, "kind": models.KIND,
        "metadata": {"name": "kq", "namespace": "ns1", "uid": "u-1"}, "spec": spec})


def pods(spec: dict[str, Any]) -> list[dict[str, Any]]:
    r = ref(spec)
    initial = CreatePod(0, D0, FormatMode.INITIAL, True, "h",
                        initial_voters=((0, D0), (1, D1), (2, D2)))
    joining = CreatePod(3, D1, FormatMode.JOIN, False, "h")
    return [render.pod(r, initial, CLUSTER), render.pod(r, joining, CLUSTER),
            render.recovery_pod(r, 1, D1, CLUSTER, "t1")]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_rendered_pod_passes_restricted(name: str) -> None:
    for pod in pods(SPECS[name]):
        spec, meta = pod_security.template_spec(pod)
        assert pod_security.violations(spec, meta) == [], pod["metadata"]["name"]
        # and beyond the profile: no token, a read-only root with /tmp writable
        assert spec["automountServiceAccountToken"] is False
        assert {"name": "tmp", "emptyDir": {"sizeLimit": render.TMP_SIZE_LIMIT}} in spec["volumes"]
        for c in spec["initContainers"] + spec["containers"]:
            ctx = c["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True, c["name"]
            assert ctx["runAsUser"] == ctx["runAsGroup"] == render.IMAGE_UID
            writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
            assert writable == {render.DATA_DIR, render.TMP_DIR}, c["name"]
            env = {e["name"]: e.get("value") for e in c.get("env") or []}
            assert env["HOME"] == env["TMPDIR"] == render.TMP_DIR
        assert spec["securityContext"]["fsGroup"] == render.IMAGE_UID


def test_the_image_user_is_the_uid_the_pods_run_as() -> None:
    """The Dockerfile's USER and the uid the pods ask for are one number: a mismatch would
    leave the data volume (fsGroup) unwritable or the image's files unreadable."""
    from pathlib import Path

    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    assert f"USER {render.IMAGE_UID}:{render.IMAGE_UID}" in dockerfile
    assert f"--uid {render.IMAGE_UID} --gid {render.IMAGE_UID}" in dockerfile


Mutation = Callable[[dict[str, Any]], None]


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["containers"][0]


def _init(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["initContainers"][0]


def _drop_seccomp(spec: dict[str, Any]) -> None:
    del spec["securityContext"]["seccompProfile"]
    for c in spec["initContainers"] + spec["containers"]:
        del c["securityContext"]["seccompProfile"]


PRIVILEGED: dict[str, tuple[str, Mutation]] = {
    "privileged container": ("privileged",
                             lambda s: _container(s)["securityContext"].update(privileged=True)),
    "host network": ("hostNamespaces", lambda s: s.update(hostNetwork=True)),
    "host PID": ("hostNamespaces", lambda s: s.update(hostPID=True)),
    "hostPath volume": ("restrictedVolumes", lambda s: s["volumes"].append(
        {"name": "host", "hostPath": {"path": "/"}})),
    "root user in the init container": ("runAsUser", lambda s: _init(s)["securityContext"]
                                        .update(runAsUser=0)),
    "runAsNonRoot false": ("runAsNonRoot", lambda s: _container(s)["securityContext"]
                           .update(runAsNonRoot=False)),
    "privilege escalation": ("allowPrivilegeEscalation", lambda s: _init(s)["securityContext"]
                             .pop("allowPrivilegeEscalation")),
    "SYS_ADMIN added": ("capabilities_baseline", lambda s: _container(s)["securityContext"]
                        ["capabilities"].update(add=["SYS_ADMIN"])),
    "capabilities not dropped": ("capabilities_restricted", lambda s: _init(s)
                                 ["securityContext"].pop("capabilities")),
    "seccomp unconfined": ("seccompProfile_restricted", lambda s: _container(s)
                           ["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    "no seccomp anywhere": ("seccompProfile_restricted", lambda s: _drop_seccomp(s)),
    "host port": ("hostPorts", lambda s: _container(s)["ports"][0].update(hostPort=9093)),
    "unsafe sysctl": ("sysctls", lambda s: s["securityContext"].update(
        sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
    "unmasked /proc": ("procMount", lambda s: _container(s)["securityContext"].update(
        procMount="Unmasked")),
    "SELinux role": ("seLinuxOptions", lambda s: s["securityContext"].update(
        seLinuxOptions={"role": "sysadm_r"})),
}


@pytest.mark.parametrize("name", sorted(PRIVILEGED))
def test_a_privileged_variant_is_refused_by_the_same_checker(name: str) -> None:
    check, mutate = PRIVILEGED[name]
    pod = copy.deepcopy(pods({})[0])
    mutate(pod["spec"])
    found = pod_security.violations(pod["spec"], pod["metadata"])
    # the expected check refuses it (a baseline check may refuse it too: the admission
    # reports both)
    assert check in [f.split(":")[0] for f in found], found


def test_the_checker_reads_pod_level_fields_as_the_admission_does() -> None:
    """Container fields unset fall back to the pod's (runAsNonRoot, seccomp); an unset pod
    field with unset containers fails; a user-namespaced pod may run as uid 0 inside."""
    base = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "Localhost"}},
            "containers": [{"name": "c", "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}
    assert pod_security.violations(base) == []
    bare = copy.deepcopy(base)
    del bare["securityContext"]
    assert [v.split(":")[0] for v in pod_security.violations(bare)] == [
        "runAsNonRoot", "seccompProfile_restricted"]
    userns = copy.deepcopy(bare)
    userns.update(hostUsers=False, securityContext={"seccompProfile": {"type": "RuntimeDefault"},
                                                    "runAsUser": 0})
    assert pod_security.violations(userns) == []
    annotated = pod_security.violations(base, {"annotations": {
        pod_security.APPARMOR_ANNOTATION + "c": "unconfined"}})
    assert [v.split(":")[0] for v in annotated] == ["appArmorProfile"]
