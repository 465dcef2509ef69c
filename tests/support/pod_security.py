"""The Pod Security Standards' "restricted" profile as kube-apiserver's PodSecurity admission
checks it (k8s.io/pod-security-admission, policy/check_*.go, at the latest version of each
check), over a pod spec as a dict.

Restricted is baseline plus its own checks, so both are here, each named by its check id and
the reason the admission prints (`ForbiddenReason`). Every container counts: containers,
initContainers and ephemeralContainers. Where a field may be set on the pod or the container
(runAsNonRoot, seccompProfile), the container's value wins and an unset one falls back to
the pod's. The checks for Windows pods (hostProcess) and user-namespace pods (`hostUsers:
false` relaxes runAsNonRoot and runAsUser) are as the admission has them.

`violations(pod_spec)` lists what the profile refuses (empty: a namespace enforcing
`pod-security.kubernetes.io/enforce: restricted` admits the pod); `template_spec(obj)` finds
the pod spec of a Pod, a Deployment, a StatefulSet, a Job or a DaemonSet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Obj = dict[str, Any]

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
"""capabilities_baseline: what a container may add (the container runtime's default set)."""
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
"""sysctls: the namespaced, isolated ones (1.0's five, 1.27's reserved ports, 1.29's TCP
keepalive and FIN timeouts)."""
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
RESTRICTED_VOLUME_SOURCES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret"})
"""restrictedVolumes: the volume sources a restricted pod may use (hostPath, nfs, iscsi,
gitRepo, every in-tree driver and anything new are refused)."""
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def containers(spec: Obj) -> Iterator[Obj]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _ctx(container: Obj) -> Obj:
    return container.get("securityContext") or {}


def _user_namespaced(spec: Obj) -> bool:
    return spec.get("hostUsers") is False


# --- baseline --------------------------------------------------------------------------------


def host_process(spec: Obj, _meta: Obj) -> str | None:
    bad = [c["name"] for c in containers(spec)
           if (_ctx(c).get("windowsOptions") or {}).get("hostProcess") is True]
    if ((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess"):
        bad.insert(0, "pod")
    return f"hostProcess: {', '.join(bad)}" if bad else None


def host_namespaces(spec: Obj, _meta: Obj) -> str | None:
    bad = [k for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k) is True]
    return f"host namespaces: {', '.join(f'{k}=true' for k in bad)}" if bad else None


def privileged(spec: Obj, _meta: Obj) -> str | None:
    bad = [c["name"] for c in containers(spec) if _ctx(c).get("privileged") is True]
    return f"privileged: {', '.join(bad)}" if bad else None


def capabilities_baseline(spec: Obj, _meta: Obj) -> str | None:
    bad = sorted({cap for c in containers(spec)
                  for cap in (_ctx(c).get("capabilities") or {}).get("add") or []
                  if cap not in BASELINE_CAPABILITIES})
    return f"non-default capabilities: {', '.join(bad)}" if bad else None


def host_path_volumes(spec: Obj, _meta: Obj) -> str | None:
    bad = [v["name"] for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    return f"hostPath volumes: {', '.join(bad)}" if bad else None


def host_ports(spec: Obj, _meta: Obj) -> str | None:
    bad = sorted({str(p["hostPort"]) for c in containers(spec) for p in c.get("ports") or []
                  if p.get("hostPort")})
    return f"hostPort: {', '.join(bad)}" if bad else None


def apparmor(spec: Obj, meta: Obj) -> str | None:
    def bad_type(profile: Obj | None) -> bool:
        return bool(profile) and profile.get("type") not in ("RuntimeDefault", "Localhost")

    bad = [k for k, v in (meta.get("annotations") or {}).items()
           if k.startswith(APPARMOR_ANNOTATION) and v != "runtime/default"
           and not v.startswith("localhost/")]
    if bad_type((spec.get("securityContext") or {}).get("appArmorProfile")):
        bad.append("pod")
    bad += [c["name"] for c in containers(spec) if bad_type(_ctx(c).get("appArmorProfile"))]
    return f"forbidden AppArmor profiles: {', '.join(bad)}" if bad else None


def selinux(spec: Obj, _meta: Obj) -> str | None:
    def bad(opts: Obj | None) -> bool:
        return bool(opts) and (opts.get("type", "") not in SELINUX_TYPES
                               or bool(opts.get("user")) or bool(opts.get("role")))

    found = ["pod"] if bad((spec.get("securityContext") or {}).get("seLinuxOptions")) else []
    found += [c["name"] for c in containers(spec) if bad(_ctx(c).get("seLinuxOptions"))]
    return f"seLinuxOptions: {', '.join(found)}" if found else None


def proc_mount(spec: Obj, _meta: Obj) -> str | None:
    bad = [c["name"] for c in containers(spec)
           if _ctx(c).get("procMount") not in (None, "Default")]
    return f"procMount: {', '.join(bad)}" if bad else None


def seccomp_baseline(spec: Obj, meta: Obj) -> str | None:
    def unconfined(ctx: Obj) -> bool:
        return (ctx.get("seccompProfile") or {}).get("type") == "Unconfined"

    bad = ["pod"] if unconfined(spec.get("securityContext") or {}) else []
    bad += [c["name"] for c in containers(spec) if unconfined(_ctx(c))]
    return f"seccompProfile: {', '.join(bad)} set Unconfined" if bad else None


def sysctls(spec: Obj, _meta: Obj) -> str | None:
    bad = [s["name"] for s in (spec.get("securityContext") or {}).get("sysctls") or []
           if s.get("name") not in SAFE_SYSCTLS]
    return f"forbidden sysctls: {', '.join(bad)}" if bad else None


def host_probes(spec: Obj, _meta: Obj) -> str | None:
    def hosts(handler: Obj | None) -> list[str]:
        handler = handler or {}
        return [h for h in ((handler.get("httpGet") or {}).get("host"),
                            (handler.get("tcpSocket") or {}).get("host")) if h]

    bad = []
    for c in containers(spec):
        life = c.get("lifecycle") or {}
        found = [h for p in ("livenessProbe", "readinessProbe", "startupProbe")
                 for h in hosts(c.get(p))] + \
                [h for p in ("postStart", "preStop") for h in hosts(life.get(p))]
        if found:
            bad.append(c["name"])
    return f"probe or lifecycle host: {', '.join(bad)}" if bad else None


# --- restricted ------------------------------------------------------------------------------


def restricted_volumes(spec: Obj, _meta: Obj) -> str | None:
    bad = [v["name"] for v in spec.get("volumes") or []
           if not any(v.get(k) is not None for k in RESTRICTED_VOLUME_SOURCES)]
    return f"restricted volume types: {', '.join(bad)}" if bad else None


def allow_privilege_escalation(spec: Obj, _meta: Obj) -> str | None:
    bad = [c["name"] for c in containers(spec)
           if _ctx(c).get("allowPrivilegeEscalation") is not False]
    return f"allowPrivilegeEscalation != false: {', '.join(bad)}" if bad else None


def run_as_non_root(spec: Obj, _meta: Obj) -> str | None:
    if _user_namespaced(spec):
        return None
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    bad = ["pod"] if pod is False else []
    for c in containers(spec):
        value = _ctx(c).get("runAsNonRoot")
        if value is False or (value is None and pod is not True):
            bad.append(c["name"])
    return f"runAsNonRoot != true: {', '.join(bad)}" if bad else None


def run_as_user(spec: Obj, _meta: Obj) -> str | None:
    if _user_namespaced(spec):
        return None
    bad = ["pod"] if (spec.get("securityContext") or {}).get("runAsUser") == 0 else []
    bad += [c["name"] for c in containers(spec) if _ctx(c).get("runAsUser") == 0]
    return f"runAsUser=0: {', '.join(bad)}" if bad else None


def seccomp_restricted(spec: Obj, _meta: Obj) -> str | None:
    allowed = ("RuntimeDefault", "Localhost")
    pod = (spec.get("securityContext") or {}).get("seccompProfile")
    bad = ["pod"] if pod is not None and pod.get("type") not in allowed else []
    pod_set = pod is not None and pod.get("type") in allowed
    for c in containers(spec):
        own = _ctx(c).get("seccompProfile")
        if (own is not None and own.get("type") not in allowed) or (own is None and not pod_set):
            bad.append(c["name"])
    return f"seccompProfile: {', '.join(bad)}" if bad else None


def capabilities_restricted(spec: Obj, _meta: Obj) -> str | None:
    found = []
    for c in containers(spec):
        caps = _ctx(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"{c['name']} must drop ALL")
        extra = [cap for cap in caps.get("add") or [] if cap != "NET_BIND_SERVICE"]
        if extra:
            found.append(f"{c['name']} adds {', '.join(extra)}")
    return f"unrestricted capabilities: {'; '.join(found)}" if found else None


Check = Callable[[Obj, Obj], "str | None"]
BASELINE: tuple[tuple[str, Check], ...] = (
    ("hostProcess", host_process), ("hostNamespaces", host_namespaces),
    ("privileged", privileged), ("capabilities_baseline", capabilities_baseline),
    ("hostPathVolumes", host_path_volumes), ("hostPorts", host_ports),
    ("appArmorProfile", apparmor), ("seLinuxOptions", selinux), ("procMount", proc_mount),
    ("seccompProfile_baseline", seccomp_baseline), ("sysctls", sysctls),
    ("hostProbesAndHostLifecycle", host_probes))
RESTRICTED: tuple[tuple[str, Check], ...] = (
    *BASELINE,
    ("restrictedVolumes", restricted_volumes),
    ("allowPrivilegeEscalation", allow_privilege_escalation),
    ("runAsNonRoot", run_as_non_root), ("runAsUser", run_as_user),
    ("seccompProfile_restricted", seccomp_restricted),
    ("capabilities_restricted", capabilities_restricted))


def violations(pod_spec: Obj, pod_meta: Obj | None = None,
               checks: tuple[tuple[str, Check], ...] = RESTRICTED) -> list[str]:
    """`check id: reason` for each check the pod fails; empty when the profile admits it."""
    meta = pod_meta or {}
    return [f"{check_id}: {found}" for check_id, check in checks
            if (found := check(pod_spec, meta)) is not None]


def template_spec(obj: Obj) -> tuple[Obj, Obj]:
    """The pod spec and pod metadata of a Pod or of a workload's pod template."""
    if obj.get("kind") == "Pod":
        return obj["spec"], obj.get("metadata") or {}
    template = obj["spec"]["template"]
    return template["spec"], template.get("metadata") or {}
