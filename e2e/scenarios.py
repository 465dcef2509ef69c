"""The end-to-end scenarios: each creates a KRaftQuorum, runs KV traffic through it, does one
thing to it, waits for the operator to converge and returns its figures.

A scenario fails (raises) when the quorum does not converge in its bound, when the history of
the traffic is not linearizable (an acknowledged write lost), or when the operator did
something the scenario forbids. Figures (times, windows, counts) are measured, never
asserted: the targets are compared in docs/e2e.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kraft_operator import models

from e2e.backend import Backend, BackendError, wait_until
from e2e.traffic import Traffic

READY_TIMEOUT_S = 180.0
HEAL_TIMEOUT_S = 240.0


class ScenarioFailed(AssertionError):
    """A scenario's check did not hold."""


def check(ok: bool, what: str) -> None:
    if not ok:
        raise ScenarioFailed(what)


class Run:
    """One scenario's quorum, its clock and its figures."""

    def __init__(self, backend: Backend, scenario: str, name: str = "e2e") -> None:
        self.backend = backend
        self.scenario = scenario
        self.name = name
        self.t0 = time.monotonic()
        self.figures: dict[str, Any] = {"scenario": scenario, "backend": backend.name}
        self._event_floor = 0

    # the resource

    def quorum(self, replicas: int = 3, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": models.API_VERSION, "kind": models.KIND,
                "metadata": {"name": self.name, "namespace": self.backend.namespace},
                "spec": {**self.backend.spec_defaults, "replicas": replicas, **spec}}

    def kq(self) -> Any:
        return self.backend.get("kq", self.name)

    def cond(self, type_: str, obj: Any = None) -> tuple[str, str, str]:
        obj = obj if obj is not None else self.kq()
        for c in ((obj or {}).get("status") or {}).get("conditions") or []:
            if c["type"] == type_:
                return c["status"], c.get("reason", ""), c.get("message", "")
        return "", "", ""

    def ready(self, replicas: int) -> Any:
        obj = self.kq()
        if self.cond("Ready", obj)[0] != "True" or self.cond("Quorate", obj)[0] != "True":
            return None
        status = obj["status"]
        if len(status.get("voters") or []) != replicas:
            return None
        if status.get("observedGeneration") != obj["metadata"]["generation"]:
            return None
        return obj

    def voters(self, obj: Any) -> dict[int, str]:
        return {v["id"]: v["directoryId"] for v in obj["status"]["voters"]}

    def pods(self) -> dict[str, dict[str, Any]]:
        got = self.backend.get("pods", "-l", f"app.kubernetes.io/instance={self.name}")
        return {p["metadata"]["name"]: p for p in (got or {}).get("items", [])}

    def patch(self, body: dict[str, Any]) -> Any:
        return self.backend.kubectl("patch", "-n", self.backend.namespace, "kq", self.name,
                                    "--type=merge", "-p", json.dumps(body), check=False)

    # clocks and events

    def at(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def wait(self, what: str, check_: Callable[[], Any],
             timeout_s: float = READY_TIMEOUT_S) -> Any:
        return wait_until(what, check_, timeout_s)

    def create(self, replicas: int = 3, **spec: Any) -> Any:
        applied = time.monotonic()
        done = self.backend.apply(self.quorum(replicas, **spec))
        if done.returncode != 0:
            raise BackendError(f"kubectl apply: {done.stderr.strip()}")
        obj = self.wait(f"{replicas} voters Ready and Quorate", lambda: self.ready(replicas))
        self.figures["time_to_ready_s"] = round(time.monotonic() - applied, 1)
        return obj

    def events(self) -> list[dict[str, Any]]:
        items = (self.backend.get("events") or {}).get("items", [])
        mine = [e for e in items if e["involvedObject"].get("kind") == models.KIND
                and e["involvedObject"].get("name") == self.name]
        return sorted(mine, key=lambda e: int(e["metadata"]["resourceVersion"]))

    def mark_events(self) -> None:
        """Later `actions()` list only the Events after this point."""
        got = self.events()
        self._event_floor = int(got[-1]["metadata"]["resourceVersion"]) if got else 0

    def actions(self) -> list[str]:
        return [e["reason"] for e in self.events()
                if int(e["metadata"]["resourceVersion"]) > self._event_floor]

    def record(self, traffic: Traffic | None, **extra: Any) -> dict[str, Any]:
        self.figures.update(extra)
        self.figures["actions"] = self.actions()
        if traffic is not None:
            figures = traffic.check()
            self.figures.update(figures)
            check(figures["linearizable"], f"the KV history is not linearizable: "
                                           f"{figures['check_detail']}")
        self.figures["scenario_s"] = self.at()
        return self.figures


# the scenarios

def create(run: Run) -> dict[str, Any]:
    """3 voters -> Ready and Quorate, traffic for a few seconds."""
    obj = run.create(3)
    check(obj["status"]["leader"]["id"] in (0, 1, 2), "a leader among the voters")
    with Traffic(run.backend, run.name) as traffic:
        time.sleep(5)
    return run.record(traffic)


def scale(run: Run) -> dict[str, Any]:
    """`kubectl scale kq/NAME` 3 -> 5 -> 3 under traffic."""
    run.create(3)
    run.mark_events()
    with Traffic(run.backend, run.name) as traffic:
        t = time.monotonic()
        run.backend.kubectl("scale", "-n", run.backend.namespace, f"kq/{run.name}",
                            "--replicas=5")
        obj = run.wait("5 voters Ready", lambda: run.ready(5), HEAL_TIMEOUT_S)
        up = round(time.monotonic() - t, 1)
        check(sorted(run.voters(obj)) == [0, 1, 2, 3, 4], "voters 0..4")
        t = time.monotonic()
        run.backend.kubectl("scale", "-n", run.backend.namespace, f"kq/{run.name}",
                            "--replicas=3")
        obj = run.wait("3 voters Ready", lambda: run.ready(3), HEAL_TIMEOUT_S)
        down = round(time.monotonic() - t, 1)
        check(sorted(run.voters(obj)) == [0, 1, 2], "voters 0..2 after the scale-down")
        time.sleep(2)
    return run.record(traffic, time_to_5_voters_s=up, time_to_3_voters_s=down)


def _disk_failure(run: Run, leader: bool) -> dict[str, Any]:
    obj = run.create(3)
    with Traffic(run.backend, run.name) as traffic:
        time.sleep(3)
        obj = run.kq()
        lead = obj["status"]["leader"]["id"]
        node = lead if leader else max(i for i in run.voters(obj) if i != lead)
        old = run.voters(obj)[node]
        run.mark_events()
        t = time.monotonic()
        run.backend.wipe_claim(f"data-{run.name}-{node}", f"{run.name}-{node}")

        def healed() -> Any:
            got = run.ready(3)
            return got if got and run.voters(got).get(node) not in (None, old) else None

        obj = run.wait(f"voter {node} back with a new directory id", healed, HEAL_TIMEOUT_S)
        heal = round(time.monotonic() - t, 1)
        check(old not in run.voters(obj).values(), "the stale incarnation removed")
        time.sleep(2)
    return run.record(traffic, wiped_node=node, wiped_role="leader" if leader else "follower",
                      time_to_healed_s=heal)


def disk_failure_follower(run: Run) -> dict[str, Any]:
    """A follower's claim emptied under it -> a new incarnation replaces the stale voter."""
    return _disk_failure(run, leader=False)


def disk_failure_leader(run: Run) -> dict[str, Any]:
    """The leader's claim emptied under it -> re-election, then as for a follower."""
    return _disk_failure(run, leader=True)


def node_failure(run: Run) -> dict[str, Any]:
    """A follower's Node down (its node-local volume with it) -> after the grace period the
    pod is replaced on another Node with a new volume."""
    if not run.backend.node_local_storage:
        raise ScenarioFailed("node failure needs node-local storage (E2E_NODE_LOCAL_STORAGE=1)")
    obj = run.create(3, nodeFailureGracePeriodSeconds=10)
    with Traffic(run.backend, run.name) as traffic:
        time.sleep(3)
        obj = run.kq()
        lead = obj["status"]["leader"]["id"]
        ops = run.backend.get("pods", "-A", "-l", "app.kubernetes.io/name=kraft-operator")
        busy = {p["spec"].get("nodeName") for p in (ops or {}).get("items", [])}
        pods = run.pods()
        free = [i for i in run.voters(obj) if i != lead and
                pods[f"{run.name}-{i}"]["spec"].get("nodeName") not in busy]
        check(bool(free), "a follower on a Node without the operator")
        node = max(free)
        pod = pods[f"{run.name}-{node}"]
        host, old_uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
        claim = run.backend.get("pvc", f"data-{run.name}-{node}")["metadata"]["uid"]
        run.mark_events()
        t = time.monotonic()
        run.backend.node_down(host)

        def replaced() -> Any:
            got = run.ready(3)
            if not got:
                return None
            p = run.pods().get(f"{run.name}-{node}")
            c = run.backend.get("pvc", f"data-{run.name}-{node}")
            if not p or not c or p["metadata"]["uid"] == old_uid or \
                    c["metadata"]["uid"] == claim:
                return None
            return p if p["spec"].get("nodeName") not in (None, host) else None

        new_pod = run.wait(f"{run.name}-{node} replaced on another Node", replaced,
                           HEAL_TIMEOUT_S)
        heal = round(time.monotonic() - t, 1)
        time.sleep(2)
    run.backend.node_up(host)
    return run.record(traffic, failed_node=host, replaced_on=new_pod["spec"]["nodeName"],
                      grace_period_s=10, time_to_healed_s=heal)


def rolling_restart(run: Run) -> dict[str, Any]:
    """A config change -> every pod restarted, one at a time, the active controller last."""
    obj = run.create(3)
    with Traffic(run.backend, run.name) as traffic:
        time.sleep(3)
        obj = run.kq()
        leader = obj["status"]["leader"]["id"]
        uids = {n: p["metadata"]["uid"] for n, p in run.pods().items()}
        run.mark_events()
        t = time.monotonic()
        run.patch({"spec": {"config": {"controller.quorum.election.timeout.ms": "1500"}}})

        def rolled() -> Any:
            got = run.ready(3)
            if not got:
                return None
            now = run.pods()
            fresh = all(now.get(n, {}).get("metadata", {}).get("uid") not in (None, u)
                        for n, u in uids.items())
            return got if fresh else None

        run.wait("every pod restarted with the new config", rolled, HEAL_TIMEOUT_S)
        took = round(time.monotonic() - t, 1)
        time.sleep(2)
    steps = [e for e in run.events() if e["reason"] in ("DeletedPodRolling", "LeaderResigning")]
    check(bool(steps) and steps[-1]["reason"] == "LeaderResigning" and
          steps[-1]["message"].startswith(f"leader {leader} "), "the leader restarted last")
    return run.record(traffic, time_to_rolled_s=took,
                      order=[e["message"].split(":")[0] for e in steps])


def operator_killed(run: Run) -> dict[str, Any]:
    """The operator SIGKILLed during each membership change (add, remove, disk replacement)
    -> it resumes and the quorum converges, the removed voters staying out."""
    run.create(3)
    kills: list[str] = []

    def op_type() -> str:
        return str(((run.kq() or {}).get("status") or {}).get("currentOperation", {})
                   .get("type") or "")

    with Traffic(run.backend, run.name) as traffic:
        run.mark_events()
        t = time.monotonic()
        run.backend.kubectl("scale", "-n", run.backend.namespace, f"kq/{run.name}",
                            "--replicas=5")
        run.wait("an AddingVoter operation", lambda: op_type() == "AddingVoter", 120)
        run.backend.kill_operator()
        kills.append(f"AddingVoter at {round(time.monotonic() - t, 1)} s")
        obj = run.wait("5 voters Ready", lambda: run.ready(5), HEAL_TIMEOUT_S)
        up = round(time.monotonic() - t, 1)
        t = time.monotonic()
        run.backend.kubectl("scale", "-n", run.backend.namespace, f"kq/{run.name}",
                            "--replicas=3")
        run.wait("a voter leaving", lambda: op_type() == "RemovingVoter" or any(
            r in ("DeletedPodStopBeforeRemove", "RemovedVoter") for r in run.actions()), 120,)
        run.backend.kill_operator()
        kills.append(f"RemovingVoter at {round(time.monotonic() - t, 1)} s")
        obj = run.wait("3 voters Ready", lambda: run.ready(3), HEAL_TIMEOUT_S)
        down = round(time.monotonic() - t, 1)
        check(sorted(run.voters(obj)) == [0, 1, 2], "the removed voters stay out")
        lead = obj["status"]["leader"]["id"]
        node = max(i for i in run.voters(obj) if i != lead)
        old = run.voters(obj)[node]
        t = time.monotonic()
        run.backend.wipe_claim(f"data-{run.name}-{node}", f"{run.name}-{node}")
        run.backend.kill_operator()
        kills.append(f"ReplacingDisk at {round(time.monotonic() - t, 1)} s")

        def healed() -> Any:
            got = run.ready(3)
            return got if got and run.voters(got).get(node) not in (None, old) else None

        obj = run.wait(f"voter {node} replaced", healed, HEAL_TIMEOUT_S)
        heal = round(time.monotonic() - t, 1)
        check(old not in run.voters(obj).values(), "the stale incarnation removed")
        time.sleep(2)
    return run.record(traffic, operator_killed_during=kills, time_to_5_voters_s=up,
                      time_to_3_voters_s=down, time_to_healed_s=heal)


def quorum_loss(run: Run) -> dict[str, Any]:
    """Two of three disks wiped -> Degraded=QuorumLost and no action; the recovery annotation
    -> recovered from the survivor, with its data.

    The traffic stops once all three voters hold every acknowledged write and before the
    wipe (the survivor must hold them: a write acknowledged by the two lost replicas alone
    would be lost by design); the recovered quorum must then read every one of them."""
    obj = run.create(3)
    traffic = Traffic(run.backend, run.name)
    with traffic:
        time.sleep(5)
    time.sleep(2)  # the followers fetch the last writes
    obj = run.kq()
    lead = obj["status"]["leader"]["id"]
    survivor = lead
    lost = [i for i in run.voters(obj) if i != survivor]
    run.mark_events()
    t = time.monotonic()
    for node in lost:
        run.backend.wipe_claim(f"data-{run.name}-{node}", f"{run.name}-{node}")

    def quorum_lost() -> Any:
        return run.cond("Degraded")[:2] == ("True", "QuorumLost")

    run.wait("Degraded=QuorumLost", quorum_lost, HEAL_TIMEOUT_S)
    detected = round(time.monotonic() - t, 1)
    before = run.actions()
    time.sleep(10)  # nothing may happen without the annotation
    during = run.actions()[len(before):]
    check(not [a for a in during if a not in ("QuorumLost",)],
          f"no action while the quorum is lost (saw {during})")
    t = time.monotonic()
    run.backend.kubectl("annotate", "-n", run.backend.namespace, f"kq/{run.name}",
                        f"{models.RECOVER_ANNOTATION}={survivor}")
    obj = run.wait("3 voters Ready after the recovery", lambda: run.ready(3), HEAL_TIMEOUT_S)
    recovered = round(time.monotonic() - t, 1)
    return run.record(traffic, survivor=survivor, lost=lost, time_to_quorum_lost_s=detected,
                      time_to_recovered_s=recovered)


def cold_start(run: Run) -> dict[str, Any]:
    """Every pod deleted at once -> the quorum comes back with its data (same incarnations)."""
    obj = run.create(3)
    with Traffic(run.backend, run.name) as traffic:
        time.sleep(3)
        before = run.voters(run.kq())
        run.mark_events()
        t = time.monotonic()
        run.backend.kubectl("delete", "pods", "-n", run.backend.namespace, "-l",
                            f"app.kubernetes.io/instance={run.name}", "--wait=false")
        time.sleep(1)
        obj = run.wait("3 voters Ready again", lambda: run.ready(3) if all(
            p.get("metadata", {}).get("deletionTimestamp") is None
            for p in run.pods().values()) else None, HEAL_TIMEOUT_S)
        heal = round(time.monotonic() - t, 1)
        check(run.voters(obj) == before, "the same incarnations (no disk replaced)")
        time.sleep(2)
    return run.record(traffic, time_to_healed_s=heal)


def bad_spec(run: Run) -> dict[str, Any]:
    """A bad spec on a running quorum created without a `clusterId`: replicas 0, a `clusterId`
    set later to another id than the quorum's, then (once the quorum's own id is pinned) a
    changed one, and an unknown config key: each refused by the API or reported with a
    condition, and nothing touched (the same pods). Pinning the quorum's own id is accepted."""
    import base64
    import uuid

    def new_id() -> str:
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    obj = run.create(3)
    cluster_id = obj["status"]["clusterId"]
    refused: dict[str, str] = {}
    with Traffic(run.backend, run.name) as traffic:
        uids = {n: p["metadata"]["uid"] for n, p in run.pods().items()}
        run.mark_events()
        done = run.patch({"spec": {"replicas": 0}})
        check(done.returncode != 0, "replicas 0 refused by the API")
        refused["replicas: 0"] = done.stderr.strip().splitlines()[-1]
        other = new_id()
        done = run.patch({"spec": {"clusterId": other}})
        if done.returncode != 0:
            refused["clusterId set after creation"] = done.stderr.strip().splitlines()[-1]
        else:  # an API that does not run the CRD's rules: the operator must report it
            status = run.wait("Degraded=ClusterIdMismatch", lambda: (
                c := run.cond("Degraded"))[:2] == ("True", "ClusterIdMismatch") and c, 60)
            check(other in status[2] and cluster_id in status[2],
                  "the mismatch names both cluster ids")
            refused["clusterId set after creation"] = f"Degraded={status[1]}: {status[2]}"
        done = run.patch({"spec": {"clusterId": cluster_id}})
        check(done.returncode == 0, f"pinning the quorum's own clusterId accepted: "
                                    f"{done.stderr.strip()}")
        obj = run.wait("Ready with the quorum's clusterId pinned", lambda: run.ready(3), 120)
        check(obj["spec"].get("clusterId") == cluster_id == obj["status"]["clusterId"],
              "the pinned clusterId is the quorum's")
        done = run.patch({"spec": {"clusterId": new_id()}})
        check(done.returncode != 0, "a changed clusterId refused by the API")
        refused["clusterId changed"] = done.stderr.strip().splitlines()[-1]
        run.patch({"spec": {"config": {"controller.quorum.fetch.timeout.msx": "2000"}}})
        status = run.wait("Degraded=InvalidConfig", lambda: (
            c := run.cond("Degraded"))[:2] == ("True", "InvalidConfig") and c, 60)
        refused["unknown config key"] = f"Degraded={status[1]}: {status[2]}"
        time.sleep(5)
        now = {n: p["metadata"]["uid"] for n, p in run.pods().items()}
        check(now == uids, "no pod touched by a bad spec")
        run.patch({"spec": {"config": None}})
        run.wait("Ready again once the key is gone", lambda: run.ready(3), 120)
        check({n: p["metadata"]["uid"] for n, p in run.pods().items()} == uids,
              "no pod restarted once the bad key is removed")
    return run.record(traffic, refused=refused)


SCENARIOS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "create": create,
    "scale": scale,
    "disk-failure-follower": disk_failure_follower,
    "disk-failure-leader": disk_failure_leader,
    "node-failure": node_failure,
    "rolling-restart": rolling_restart,
    "operator-killed": operator_killed,
    "quorum-loss": quorum_loss,
    "cold-start": cold_start,
    "bad-spec": bad_spec,
}
