"""Observe: Kubernetes objects and what the live nodes say -> the planner's input, and the
corrections that make the operator's directory-id records match the volumes."""

from __future__ import annotations

from kraft_operator import models, observe, render
from kraft_operator.observed import PodPhase, PvcPhase, QuorumInfo, ReplicaInfo

D_OLD, D_NEW, D_PLAN = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"
BODY = {
    "metadata": {"name": "kq", "namespace": "ns1", "uid": "u", "generation": 4,
                 "annotations": {models.PAUSE_ANNOTATION: "true"}},
    "spec": {"replicas": 3},
    "status": {"clusterId": "QF8mVzcRaw30atEJTDbDUQ",
               "initialVoters": [{"id": 0, "directoryId": D_OLD}],
               "voters": [{"id": 0, "directoryId": D_OLD, "lag": 0}],
               "currentOperation": {"type": "AddingVoter", "target": f"1:{D_PLAN}",
                                    "startedAt": "2026-01-02T03:04:05Z", "attempt": 2}},
}
REF = render.QuorumRef.from_body(BODY)


def pod(node_id: int, directory: str, confirmed: bool = False, **status: object) -> dict:
    notes = {models.DIRECTORY_ID_ANNOTATION: directory, models.POD_SPEC_HASH_ANNOTATION: "h",
             models.AUTO_JOIN_ANNOTATION: "true"}
    if confirmed:
        notes[render.DIRECTORY_CONFIRMED_ANNOTATION] = "true"
    return {"metadata": {"name": f"kq-{node_id}", "creationTimestamp": "2026-01-02T03:04:05Z",
                         "labels": REF.node_labels(node_id), "annotations": notes},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "127.0.0.9",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "kraft", "restartCount": 2, "state": {
                           "waiting": {"reason": "CrashLoopBackOff"}}}], **status}}


def pvc(node_id: int, directory: str, confirmed: bool = False, volume: str = "pv-1") -> dict:
    notes = {models.DIRECTORY_ID_ANNOTATION: directory,
             "volume.kubernetes.io/selected-node": "n1"}
    if confirmed:
        notes[render.DIRECTORY_CONFIRMED_ANNOTATION] = "true"
    return {"metadata": {"name": f"data-kq-{node_id}", "labels": REF.node_labels(node_id),
                         "annotations": notes},
            "spec": {"volumeName": volume}, "status": {"phase": "Bound"}}


LOCAL_PV = {"metadata": {"name": "pv-1"}, "spec": {"local": {"path": "/x"}, "nodeAffinity": {
    "required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}
NETWORK_PV = {"metadata": {"name": "pv-2"}, "spec": {"csi": {"driver": "ebs"}}}
NODES = [{"metadata": {"name": "n1"}, "status": {"conditions": [
    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-02T03:04:05Z"}]}}]


def test_objects_and_status_become_the_planners_input() -> None:
    snap = observe.Snapshot(BODY, [pod(0, D_OLD, confirmed=True)],
                            [pvc(0, D_OLD, confirmed=True), pvc(1, D_PLAN, volume="pv-2")],
                            NODES, {"pv-1": LOCAL_PV, "pv-2": NETWORK_PV})
    quorum = QuorumInfo(0, 3, 10, 1, (ReplicaInfo(0, D_OLD),))
    obs = observe.build(REF, snap, quorum, {}, now=5.0, fresh_ids=["x"]).observed
    assert obs.generation == 4 and obs.now == 5.0 and obs.fresh_ids == ("x",)
    (p,) = obs.pods
    assert (p.name, p.node_id, p.directory_id, p.phase, p.ready) == \
        ("kq-0", 0, D_OLD, PodPhase.RUNNING, True)
    assert (p.restart_count, p.waiting_reason, p.spec_hash, p.auto_join) == \
        (2, "CrashLoopBackOff", "h", True)
    claims = {c.node_id: c for c in obs.pvcs}
    assert claims[0].node_name == "n1" and claims[0].phase == PvcPhase.BOUND
    assert claims[1].node_name is None  # network-attached: not lost with a Node
    assert obs.nodes[0].ready is False and obs.nodes[0].since > 0
    assert obs.cluster_id == "QF8mVzcRaw30atEJTDbDUQ"
    assert obs.initial_voters == ((0, D_OLD),) and obs.last_known_voters == ((0, D_OLD),)
    assert obs.operation is not None and obs.operation.attempt == 2
    assert obs.operation.target == f"1:{D_PLAN}"
    assert obs.annotations[models.PAUSE_ANNOTATION] == "true"
    assert obs.quorum is quorum


def test_a_joining_nodes_reported_directory_id_replaces_the_placeholder() -> None:
    snap = observe.Snapshot(BODY, [pod(1, D_PLAN)], [pvc(1, D_PLAN)], NODES, {})
    said = {"kq-1": observe.Reported(1, D_NEW, "QF8mVzcRaw30atEJTDbDUQ")}
    result = observe.build(REF, snap, None, said, now=1.0)
    assert result.observed.pods[0].directory_id == D_NEW
    assert result.observed.pvcs[0].directory_id == D_NEW
    assert {(c.kind, c.name, c.old, c.new, c.replaced) for c in result.corrections} == {
        ("pod", "kq-1", D_PLAN, D_NEW, False), ("pvc", "data-kq-1", D_PLAN, D_NEW, False)}


def test_a_confirmed_id_that_changes_is_a_replaced_disk() -> None:
    snap = observe.Snapshot(BODY, [pod(2, D_OLD, confirmed=True)],
                            [pvc(2, D_OLD, confirmed=True)], NODES, {})
    said = {"kq-2": observe.Reported(2, D_NEW, None)}
    result = observe.build(REF, snap, None, said, now=1.0)
    assert all(c.replaced and c.old == D_OLD and c.new == D_NEW for c in result.corrections)
    assert len(result.corrections) == 2
    # once the records hold it, nothing is left to correct
    settled = observe.Snapshot(BODY, [pod(2, D_NEW, confirmed=True)],
                               [pvc(2, D_NEW, confirmed=True)], NODES, {})
    assert observe.build(REF, settled, None, said, now=1.0).corrections == ()


def test_a_report_of_another_node_or_cluster_is_ignored() -> None:
    snap = observe.Snapshot(BODY, [pod(1, D_PLAN), pod(2, D_OLD, confirmed=True)],
                            [pvc(1, D_PLAN)], NODES, {})
    said = {"kq-1": observe.Reported(7, D_NEW, None),
            "kq-2": observe.Reported(2, D_NEW, "AnotherClusterIdAAAAAA")}
    result = observe.build(REF, snap, None, said, now=1.0)
    assert {p.directory_id for p in result.observed.pods} == {D_PLAN, D_OLD}
    assert result.corrections == ()


def test_objects_without_a_node_id_are_not_nodes() -> None:
    stray = pod(0, D_OLD)
    stray["metadata"]["labels"] = {"app": "other"}
    snap = observe.Snapshot(BODY, [stray], [], [], {})
    assert observe.build(REF, snap, None, {}, now=1.0).observed.pods == ()


def test_random_ids_are_kafka_uuid_text() -> None:
    ids = {observe.random_kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert all(set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
               for i in ids)


def test_without_permission_to_read_nodes_no_node_failure_is_assumed() -> None:
    from kraft_operator.planner import plan

    body = {**BODY, "metadata": {**BODY["metadata"], "annotations": {}}}
    snap = observe.Snapshot(body, [pod(0, D_OLD, confirmed=True)],
                            [pvc(0, D_OLD, confirmed=True)], None, {"pv-1": LOCAL_PV})
    obs = observe.build(REF, snap, None, {}, now=10_000.0).observed
    assert [(n.name, n.ready) for n in obs.nodes] == [("n1", True)]
    spec = models.KRaftQuorumSpec(replicas=1)
    assert type(plan(spec, obs).action).__name__ == "Wait"
    # an empty list would read as "every Node is gone", its node-local volume with it
    gone = observe.build(REF, observe.Snapshot(body, snap.pods, snap.pvcs, [], snap.volumes),
                         None, {}, now=10_000.0).observed
    assert type(plan(spec, gone).action).__name__ != "Wait"


async def test_describe_names_the_error_once() -> None:
    """No node resolves: the reason reported under Quorate=False names the Kafka error once."""
    quorum, why = await observe.describe(REF, [0, 1], None, 1.0)
    assert quorum is None and why is not None
    assert why.startswith("NETWORK_EXCEPTION: no bootstrap controller answered"), why
    assert why.count("NETWORK_EXCEPTION") == 1, why


def test_a_pod_reporting_its_volume_gone_carries_since_when_it_is_not_ready() -> None:
    message = 'the local volume of claim "data-kq-0" is gone (its node lost its disks)'
    stuck = pod(0, D_OLD, phase="Pending", message=message, conditions=[
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-02T03:05:05Z"}])
    running = pod(1, D_NEW)
    snap = observe.Snapshot(BODY, [stuck, running], [pvc(0, D_OLD)], [], {"pv-1": LOCAL_PV})
    obs = observe.build(REF, snap, None, {}, now=5.0).observed
    by_id = {p.node_id: p for p in obs.pods}
    assert by_id[0].volume_gone_since == observe.parse_time("2026-01-02T03:05:05Z")
    assert by_id[1].volume_gone_since is None


def test_a_format_init_container_that_exits_3_reports_a_foreign_volume() -> None:
    text = "error: meta.properties is formatted for cluster A, not B: this volume holds ..."
    init = {"name": "format", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "message": text}}}
    other = {"name": "format", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    refused = observe.pod_state(pod(0, D_OLD, phase="Pending", initContainerStatuses=[init]))
    failed = observe.pod_state(pod(1, D_OLD, phase="Pending", initContainerStatuses=[other]))
    bare = dict(init, lastState={"terminated": {"exitCode": 3}})
    silent = observe.pod_state(pod(2, D_OLD, phase="Pending", initContainerStatuses=[bare]))
    assert refused is not None and refused.format_refused == text
    assert failed is not None and failed.format_refused is None
    assert silent is not None and silent.format_refused == ""
