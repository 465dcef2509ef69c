"""Forged epochs from a hostile process cannot stop a quorum: a Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch or FetchSnapshot naming epoch 2**31 - 1 (or a negative one), sent to
every voter of a 3-voter quorum of `kraft run` processes by a separate process with its own
codec (`forged_epochs.py`), is answered INVALID_REQUEST; the leader, the epoch and every
quorum-state file stay as they were, and the quorum still commits and serves every write it
acknowledged. (With TEST_LANE=off the same runs on the pure-Python path.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kraft.cli.local import LocalCluster, LocalNode

pytest.importorskip("kafka.protocol.consumer.fetch")

ATTACKER = Path(__file__).with_name("forged_epochs.py")
INVALID_REQUEST = 42
UNKNOWN_LEADER_EPOCH = 75
MAX_EPOCH = 2**31 - 2


def hostile(*args: str) -> Any:
    """Run the attacker in its own process; its JSON answer."""
    done = subprocess.run([sys.executable, str(ATTACKER), *args], capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def describe(c: LocalCluster) -> tuple[int, int]:
    """(leader, epoch) as the leader's DescribeQuorum reports them."""
    for node in c.nodes.values():
        d = hostile("describe", f"{node.host}:{node.port}")
        if d["error"] == 0:
            return d["leader_id"], d["leader_epoch"]
    raise AssertionError("no node answered DescribeQuorum")


def quorum_states(c: LocalCluster) -> dict[int, str]:
    return {nid: (n.dir / "__cluster_metadata-0" / "quorum-state").read_text()
            for nid, n in c.nodes.items()}


def test_forged_epochs_from_another_process_leave_the_quorum_serving(
        clusters: Callable[..., LocalCluster]) -> None:
    c = clusters(3)
    c.start_all()
    leader = c.wait_for_leader(60)
    for nid in c.nodes:
        c.wait_ready(nid, 60)
    acked = {}
    for i in range(5):
        assert c.put(f"k{i}", f"v{i}".encode()).status == 200
        acked[f"k{i}"] = f"v{i}"
    before = describe(c)
    assert before[0] == leader
    # the followers' quorum-state is on disk once they follow; read it as it is now
    states = quorum_states(c)

    answers: dict[int, dict[str, dict[str, int]]] = {}
    for nid, node in c.nodes.items():
        voter = next(i for i in c.nodes if i not in (nid, leader)) if nid != leader else \
            next(i for i in c.nodes if i != leader)
        answers[nid] = hostile("attack", f"{node.host}:{node.port}", str(leader), str(voter))
    for nid, per_node in answers.items():
        for name, answer in per_node.items():
            assert answer.get("error") == INVALID_REQUEST, (nid, name, answer)
            if "leader_epoch" in answer:  # the answer tells the node's own epoch
                assert answer["leader_epoch"] == before[1], (nid, name, answer)

    # a forged epoch would depose the leader at once, or within an election timeout
    time.sleep(2)
    assert describe(c) == before
    for nid in c.nodes:
        st = c.status(nid)
        assert st is not None and st["epoch"] == before[1] and st["leader_id"] == leader, st
    assert quorum_states(c) == states

    assert c.put("after", b"attack").status == 200
    acked["after"] = "attack"
    for key, value in acked.items():
        r = c.get(key)
        assert r.status == 200 and r.body == value.encode(), (key, r.status, r.body)
    assert _logs_name_the_field(c.nodes[leader])


def _logs_name_the_field(node: LocalNode) -> bool:
    text = node.log_path.read_text(errors="replace")
    return "request refused" in text and "ReplicaEpoch 2147483647" in text


def test_higher_epochs_from_another_process_leave_a_live_leader_in_place(
        clusters: Callable[..., LocalCluster]) -> None:
    """A Vote, a pre-vote, a BeginQuorumEpoch and an EndQuorumEpoch naming a usable but
    higher epoch (2**31 - 2, from which no election could follow; the current epoch +
    1000) reach every voter while its leader is live: each is refused with the leader and
    epoch as they are, nothing is written, and the quorum goes on. Once the leader is
    killed, its followers' fetch timeout ends the lease and they elect a successor."""
    c = clusters(3)
    c.start_all()
    leader = c.wait_for_leader(60)
    for nid in c.nodes:
        c.wait_ready(nid, 60)
    acked = {}
    for i in range(5):
        assert c.put(f"k{i}", f"v{i}".encode()).status == 200
        acked[f"k{i}"] = f"v{i}"
    before = describe(c)
    assert before[0] == leader
    states = quorum_state_bytes(c)

    for epoch in (MAX_EPOCH, before[1] + 1000):
        for nid, node in c.nodes.items():
            usurper = next(i for i in sorted(c.nodes) if i not in (nid, leader))
            answers = hostile("usurp", f"{node.host}:{node.port}", str(epoch), str(usurper))
            for name, answer in answers.items():
                assert answer["top_error"] == 0, (nid, name, answer)
                assert (answer["leader_id"], answer["leader_epoch"]) == before, \
                    (nid, name, answer)
                if name in ("vote", "pre_vote"):
                    assert answer["error"] == 0 and not answer["vote_granted"], (nid, answer)
                else:
                    assert answer["error"] == UNKNOWN_LEADER_EPOCH, (nid, name, answer)

    # a higher epoch taken would depose the leader at once, or within an election timeout
    time.sleep(2)
    assert describe(c) == before
    for nid in c.nodes:
        st = c.status(nid)
        assert st is not None and st["epoch"] == before[1] and st["leader_id"] == leader, st
    assert quorum_state_bytes(c) == states

    assert c.put("after", b"usurp").status == 200
    acked["after"] = "usurp"
    for key, value in acked.items():
        r = c.get(key)
        assert r.status == 200 and r.body == value.encode(), (key, r.status, r.body)
    text = c.nodes[leader].log_path.read_text(errors="replace")
    assert "request ignored" in text and f"epoch={MAX_EPOCH}" in text

    # the lease ends with the leader: its followers elect a successor
    c.kill(leader, signal.SIGKILL)
    successor = c.wait_for_leader(60, exclude=leader)
    st = c.status(successor)
    assert st is not None and before[1] < st["epoch"] < MAX_EPOCH, st
    assert c.put("successor", b"elected", via=successor).status == 200
    acked["successor"] = "elected"
    for key, value in acked.items():
        r = c.get(key, via=successor)
        assert r.status == 200 and r.body == value.encode(), (key, r.status, r.body)


def quorum_state_bytes(c: LocalCluster) -> dict[int, bytes]:
    return {nid: (n.dir / "__cluster_metadata-0" / "quorum-state").read_bytes()
            for nid, n in c.nodes.items()}


def test_a_flood_of_forged_epochs_is_counted_and_its_log_lines_bounded(
        clusters: Callable[..., LocalCluster]) -> None:
    """2,000 forged Votes from another process: every one refused and counted in
    kraft_raft_refused_total, the log holds a bounded number of lines for them (it held one
    each), and the quorum serves."""
    from kraft.raft.refusals import BURST

    c = clusters(1)
    c.start_all()
    leader = c.wait_for_leader(60)
    node = c.nodes[leader]
    codes = hostile("flood", f"{node.host}:{node.port}", "2000", str(leader))
    assert codes == {str(INVALID_REQUEST): 2000}, codes
    text = node.log_path.read_text(errors="replace")
    assert text.count("raft request refused") == BURST
    metrics = http_get(node, "/metrics")
    assert 'kraft_raft_refused_total{kind="request_epoch",reason="VoteRequest"} 2000' in metrics
    assert c.put("after", b"flood").status == 200


def http_get(node: LocalNode, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://{node.http}{path}", timeout=10) as resp:
        return str(resp.read().decode())
