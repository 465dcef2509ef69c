"""The real operator against the sandbox (real `kraft` processes as pods): a replaced disk
with auto-join off, and a lost quorum recovered through the recovery annotation.

Disk: with `autoJoin: false` a follower's volume is wiped under it; the leader would answer
DUPLICATE_VOTER to adding the new incarnation while the old one is a voter, so the operator
removes the stale voter first and then adds the new one once it is caught up.

Quorum loss: two of three volumes wiped (their pods crash and come back as new, empty
incarnations that cannot form a quorum with the survivor): the operator reports
Degraded=QuorumLost and touches nothing until the annotation names the survivor; then it
stops every pod, forces the survivor's voter set to itself alone with `kraft recover
force-single-voter` in a one-shot init container, and the others re-join on new volumes with
new directory ids. Every write acknowledged before the loss is read back.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from kraft_operator import models
from kraft_sandbox.handle import SandboxHandle

from tests.operator_live.test_live import (  # noqa: F401 (sb is a fixture)
    NS,
    apply,
    cond,
    events,
    get,
    operator_pod,
    pod_ips,
    quorum,
    ready,
    sb,
)
from tests.sandbox.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operator_live")]


def voter_keys(obj: dict[str, Any]) -> set[tuple[int, str]]:
    return {(v["id"], v["directoryId"]) for v in obj["status"]["voters"]}


def test_without_auto_join_a_wiped_follower_replaces_its_stale_voter(
        sb: SandboxHandle) -> None:  # noqa: F811
    apply(sb, operator_pod("op-a"), quorum(autoJoin=False))
    obj = wait_for("a 3-voter quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=120)
    leader = obj["status"]["leader"]["id"]
    node = next(i for i in (2, 1, 0) if i != leader)
    old = dict(voter_keys(obj))[node]
    sb.faults.wipe_pvc(NS, f"data-kq-{node}")

    def healed() -> Any:
        got = ready(sb, "kq", 3)
        if got is None:
            return None
        ids = dict(voter_keys(got))
        return got if ids.get(node) not in (None, old) else None

    obj = wait_for(f"node {node} back as a new incarnation", healed, timeout_s=150)
    new = dict(voter_keys(obj))[node]
    assert (node, old) not in voter_keys(obj)
    in_order = sorted(events(sb), key=lambda e: int(e["metadata"]["resourceVersion"]))
    reasons = [e["reason"] for e in in_order]
    assert "MembershipChangeFailed" not in reasons, [e["message"] for e in in_order
                                                     if e["reason"] == "MembershipChangeFailed"]
    removed = next(i for i, e in enumerate(in_order) if e["reason"] == "RemovedVoter")
    added = [i for i, e in enumerate(in_order) if e["reason"] == "AddedVoter"
             and e["message"].startswith(f"AddRaftVoter {node}:{new}")]
    assert in_order[removed]["message"].startswith(f"RemoveRaftVoter {node}:{old}")
    assert added and removed < added[0]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


OPENER = urllib.request.build_opener(_NoRedirect)


def kv(ips: dict[str, str], pod: str, method: str, key: str,
       value: bytes | None = None) -> tuple[int, bytes]:
    """One KV call to a pod; a 307 to the leader's DNS name is followed to that pod's IP."""
    url = f"http://{ips[pod]}:8080/v1/kv/{key}"
    for _ in range(3):
        req = urllib.request.Request(url, data=value, method=method)
        try:
            with OPENER.open(req, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code != 307:
                return exc.code, exc.read()
            parts = urllib.parse.urlsplit(exc.headers["Location"])
            target = (parts.hostname or "").split(".")[0]
            url = parts._replace(netloc=f"{ips[target]}:{parts.port}").geturl()
        except OSError:
            return 0, b""
    return 0, b""


def test_a_lost_quorum_waits_for_the_annotation_then_recovers_from_the_survivor(
        sb: SandboxHandle) -> None:  # noqa: F811
    apply(sb, operator_pod("op-a"), quorum())
    obj = wait_for("a 3-voter quorum Ready", lambda: ready(sb, "kq", 3), timeout_s=120)
    ips = pod_ips(sb)
    acknowledged: dict[str, bytes] = {}
    for i in range(20):
        key, value = f"k{i}", f"v{i}".encode()
        status, _ = kv(ips, f"kq-{i % 3}", "PUT", key, value)
        if status == 200:
            acknowledged[key] = value
    assert len(acknowledged) == 20
    obj = wait_for("a leader", lambda: ready(sb, "kq", 3), timeout_s=60)
    survivor = obj["status"]["leader"]["id"]  # it holds every acknowledged write
    before = dict(voter_keys(obj))
    lost = [n for n in (0, 1, 2) if n != survivor]
    for n in lost:
        sb.faults.wipe_pvc(NS, f"data-kq-{n}")

    def quorum_lost() -> Any:
        got = get(sb, "kq", "kq")
        return got if cond(got, "Degraded")[:2] == ("True", "QuorumLost") else None

    obj = wait_for("Degraded=QuorumLost", quorum_lost, timeout_s=120)
    assert cond(obj, "AwaitingApproval")[0] == "True"
    assert models.RECOVER_ANNOTATION in cond(obj, "Degraded")[2]
    pods_then = {p["metadata"]["name"]: p["metadata"]["uid"] for p in get(sb, "pods")["items"]}
    claims_then = {c["metadata"]["name"] for c in get(sb, "pvc")["items"]}
    # no action without the annotation: the same pods and claims a while later
    wait_for("a few reconciles", lambda: sum(e["reason"] == "QuorumLost"
                                             for e in events(sb)) >= 1, timeout_s=30)
    assert {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in get(sb, "pods")["items"]} == pods_then
    assert {c["metadata"]["name"] for c in get(sb, "pvc")["items"]} == claims_then
    assert quorum_lost() is not None

    sb.kubectl("annotate", "kq", "kq", f"{models.RECOVER_ANNOTATION}={survivor}")

    def recovered() -> Any:
        got = ready(sb, "kq", 3)
        if got is None:
            return None
        keys = voter_keys(got)
        fresh = all(dict(keys).get(n) not in (None, before[n]) for n in lost)
        return got if fresh and (survivor, before[survivor]) in keys else None

    obj = wait_for("3 voters again, the lost two with new directory ids", recovered,
                   timeout_s=240)
    assert models.RECOVER_ANNOTATION not in (obj["metadata"].get("annotations") or {})
    assert cond(obj, "Degraded")[0] == "False"
    ips = pod_ips(sb)
    for key, value in acknowledged.items():
        for name in sorted(ips):
            assert kv(ips, name, "GET", key) == (200, value), (key, name)
    reasons = [e["reason"] for e in sorted(events(sb),
                                           key=lambda e: int(e["metadata"]["resourceVersion"]))]
    assert "DeletedPodQuorumRecovery" in reasons and "RecoveryAnnotationCleared" in reasons
    forced = [e for e in events(sb) if e["reason"] == "ForcingSingleVoter"]
    assert forced and forced[0]["type"] == "Warning" and "lost" in forced[0]["message"]
    assert f"{survivor}:{before[survivor]}" in forced[0]["message"]
    log = sb.log_of(NS, f"kq-{survivor}", "recover")
    assert log, "the recovery init container ran"
