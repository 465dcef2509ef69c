"""`kraft.lane.follower` on a real 3-voter quorum: the followers hand the steady state to the
native lane (`kraft.lane.follower`), which writes, syncs and acknowledges the leader's
records; the core takes its reports; a leader's death, a follower's kill -9 and a clean stop
hand back what the lane did, and every replica ends with the leader's bytes."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections.abc import Callable

import pytest

from kraft.admin.kv_client import KvClient
from kraft.cli.local import LocalCluster, http_call
from kraft.lane import native
from kraft.lane.follower import next_fetch
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.storage.layout import partition_dir
from tests.support.lanes import (
    applied_everywhere,
    lane_stats,
    local_value,
    log_bytes,
    wait_lane_armed,
)

pytestmark = pytest.mark.skipif(native() is None,
                                reason="kraft.lane._native was not built (no C compiler)")

LANE = {"kraft.lane.follower": "true"}


@pytest.mark.parametrize("preallocate", [0, 64 * 1024])
def test_the_followers_lanes_carry_the_writes_and_every_log_is_the_leaders(
        clusters: Callable[..., LocalCluster], preallocate: int) -> None:
    # with preallocation the lane writes into the zero-filled space ahead of the end
    c = clusters(properties={**LANE, "kraft.log.preallocate.bytes": str(preallocate)})
    c.start_all()
    leader = c.wait_for_leader(60)
    followers = [n for n in c.nodes if n != leader]
    for i in range(150):
        assert c.put(f"k{i}", b"v%d" % i).status in (200, 204)
    applied_everywhere(c, "k149", b"v149")
    for nid in followers:
        lane = lane_stats(c, nid)
        # armed once for the whole run, and its work reached the core in reports
        assert lane["arms"] >= 1 and lane["reports"] >= 10, (nid, lane)
        for i in range(150):
            assert local_value(c, nid, f"k{i}") == b"v%d" % i
    assert lane_stats(c, leader)["arms"] == 0
    status = c.status(leader)
    assert status is not None
    end = status["high_watermark"]  # every write is below it, on every replica
    c.stop_all(timeout=20)  # a clean stop ends each lane and keeps what it wrote
    logs = {nid: log_bytes(node.dir, end) for nid, node in c.nodes.items()}
    start, leader_log = logs[leader]
    assert leader_log.count(b"v149") == 1
    for nid in followers:
        # the leader's bytes, batch for batch (what a later leader appended at the stop aside)
        assert logs[nid] == (start, leader_log), f"node {nid}'s log differs from the leader's"
    for nid, node in c.nodes.items():
        assert node.process is not None and node.process.returncode == 0, nid
        text = node.log_path.read_text()
        assert "event=fatal" not in text and "Traceback" not in text, nid


def test_segment_rolls_hand_over_to_python_and_the_lane_arms_on_the_new_segment(
        clusters: Callable[..., LocalCluster]) -> None:
    # 4 KiB segments: every few writes the next batch has no room, the lane hands its answer
    # over unwritten, the Python path rolls the segment, and the lane arms on the new one
    c = clusters(properties={**LANE, "metadata.log.segment.bytes": "4096"})
    c.start_all()
    leader = c.wait_for_leader(60)
    followers = [n for n in c.nodes if n != leader]
    for i in range(120):
        assert c.put(f"k{i}", b"v%03d" % i * 20).status in (200, 204)
    applied_everywhere(c, "k119", b"v119" * 20)
    for nid in followers:
        lane = lane_stats(c, nid)
        assert lane["stops"].get("handover", 0) >= 3 and lane["arms"] >= 4, (nid, lane)
    status = c.status(leader)
    assert status is not None
    end = status["high_watermark"]
    c.stop_all(timeout=20)
    logs = {nid: log_bytes(node.dir, end) for nid, node in c.nodes.items()}
    for nid in followers:
        assert logs[nid] == logs[leader], f"node {nid}'s log differs from the leader's"
        assert len(list(partition_dir(c.nodes[nid].dir).glob("*.log"))) >= 4, nid


def test_a_killed_leader_stops_the_lanes_and_they_arm_again_under_the_next(
        clusters: Callable[..., LocalCluster]) -> None:
    c = clusters(properties=LANE)
    c.start_all()
    first = c.wait_for_leader(60)
    for i in range(40):
        assert c.put(f"a{i}", b"x%d" % i).status in (200, 204)
    applied_everywhere(c, "a39", b"x39")
    c.kill(first)  # kill -9: the lanes see their connection closed
    second = c.wait_for_leader(60, exclude=first)
    survivor = next(n for n in c.nodes if n not in (first, second))
    for i in range(40):
        assert c.put(f"b{i}", b"y%d" % i, via=second).status in (200, 204)
    applied_everywhere(c, "b39", b"y39", nodes=[second, survivor])
    lane = lane_stats(c, survivor)
    assert lane["arms"] >= 2, lane  # stopped with the first leader, armed under the second
    assert sum(lane["stops"].values()) >= 1, lane
    c.start(first)
    c.wait_ready(first, 60)
    applied_everywhere(c, "b39", b"y39", nodes=[first])
    for i in range(40):
        assert local_value(c, first, f"a{i}") == b"x%d" % i
    assert lane_stats(c, first)["arms"] >= 1  # the old leader follows with its lane


def test_a_follower_killed_under_writes_restarts_with_what_its_lane_synced(
        clusters: Callable[..., LocalCluster]) -> None:
    c = clusters(properties=LANE)
    c.start_all()
    leader = c.wait_for_leader(60)
    victim = next(n for n in c.nodes if n != leader)
    for i in range(60):
        assert c.put(f"k{i}", b"v%d" % i).status in (200, 204)
    c.kill(victim)  # kill -9 while its lane runs
    for i in range(60, 100):
        assert c.put(f"k{i}", b"v%d" % i).status in (200, 204)
    c.start(victim)
    c.wait_ready(victim, 60)
    applied_everywhere(c, "k99", b"v99", nodes=[victim])
    for i in range(100):
        assert local_value(c, victim, f"k{i}") == b"v%d" % i
    assert lane_stats(c, victim)["arms"] >= 1
    text = c.nodes[victim].log_path.read_text()
    assert "event=fatal" not in text, text[-2000:]


def test_a_local_read_on_a_follower_takes_the_lanes_progress_first(
        clusters: Callable[..., LocalCluster]) -> None:
    # a tick far longer than the test: only a read's drain (or a stop) tells the core
    c = clusters(properties={**LANE, "kraft.lane.tick.ms": "60000"})
    c.start_all()
    leader = c.wait_for_leader(60)
    follower = next(n for n in c.nodes if n != leader)
    for i in range(3):  # the lane arms with the first fetch after the epoch's start
        assert c.put(f"w{i}", b"warm").status in (200, 204)
    wait_lane_armed(c, follower)
    before = lane_stats(c, follower)

    async def run() -> list[int]:
        polls = []
        async with KvClient(*c.nodes[leader].client) as lc, \
                KvClient(*c.nodes[follower].client) as fc:
            for i in range(20):
                value = b"r%d" % i
                await lc.put("r", value)
                n = 0
                stop_at = time.monotonic() + 10
                while await fc.get("r", stale=True) != value:
                    assert time.monotonic() < stop_at, f"write {i} never showed on the follower"
                    n += 1
                polls.append(n)
        return polls

    asyncio.run(run())
    after = lane_stats(c, follower)
    # every write showed through the reads' drains: the lane ran on, never stopped meanwhile
    assert after["armed"] and after["arms"] == before["arms"], (before, after)
    assert after["stops"] == before["stops"]
    assert after["reports"] >= before["reports"] + 20


def test_a_follower_catching_up_through_its_lane_is_not_ready_before_the_leaders_high_watermark(
        clusters: Callable[..., LocalCluster]) -> None:
    # a follower paused with its lane armed wakes far behind and fetches its way up in answers
    # that each carry the leader's high watermark; its own is capped at its log's end.
    # Readiness (and the status' leader_high_watermark) must use the leader's: else the
    # follower looks caught up after every answer, and an AddRaftVoter sent on its readiness
    # is refused as not caught up. The fetch timeout outlasts the pause, so it wakes a follower
    c = clusters(properties={**LANE, "controller.quorum.fetch.timeout.ms": "30000"})
    c.start_all()
    leader = c.wait_for_leader(60)
    victim = next(n for n in c.nodes if n != leader)
    process = c.nodes[victim].process
    assert process is not None
    behind_with_lane = 0
    for round_ in range(2):  # the lane carries only the last stretch: two looks at it
        # the lane arms with the first fetch after the epoch's start
        assert c.put(f"w{round_}", b"warm", via=leader).status in (200, 204)
        applied_everywhere(c, f"w{round_}", b"warm", nodes=[victim])
        wait_lane_armed(c, victim)
        before = c.status(victim)
        assert before is not None
        process.send_signal(signal.SIGSTOP)
        try:
            # the fetch it left in flight is answered empty (MaxWaitMs 500) before the writes:
            # an answer sent before them would carry the old high watermark with their first
            # records
            time.sleep(1.5)
            value = b"x" * 1_000_000
            for i in range(120):  # 120 MB: fifteen or so fetches of up to 8 MiB
                # through the leader named: finding it would ask the paused node too
                assert c.put(f"big{i}", value, via=leader, timeout=30).status in (200, 204)
            status = c.status(leader)
            assert status is not None
            hw = status["high_watermark"]
        finally:
            process.send_signal(signal.SIGCONT)
        samples = 0
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, "the follower never caught up"
            # the position before the readiness answer says whether records had been taken
            # when readiness was computed; the one after holds what was applied by then at most
            # (an answer with records may land between the two looks)
            taken = c.status(victim, timeout=5)
            ready = http_call(c.nodes[victim].http, "GET", "/readyz", timeout=5).status == 200
            s = c.status(victim, timeout=5)
            assert taken is not None and s is not None and s["role"] == "follower", s
            samples += 1
            # until it takes an answer with records it is as ready as before the pause (within
            # the fetch timeout); from the first on, it knows the leader's high watermark
            if s["log_end_offset"] > before["log_end_offset"]:
                assert s["leader_high_watermark"] >= hw, (round_, samples, s, hw)
            if taken["log_end_offset"] > before["log_end_offset"]:
                if ready:
                    # applied only grows: behind now means it was behind when it said ready
                    assert s["applied_offset"] >= hw, (round_, samples, s, hw)
                if s["log_end_offset"] < hw and s["lane"]["armed"]:
                    behind_with_lane += 1
                if ready:
                    break
    # the lane carried some of the catching up while the test looked: the checks above ran
    # on the path they are about
    assert behind_with_lane > 0


def test_a_report_carries_the_lease_fetch_with_only_the_lanes_fields_moved() -> None:
    """`next_fetch` builds the fetch field by field: every field of the lease's fetch is kept
    (a field added to FetchRequest and not carried over would fail here) but the three the
    lane moves."""
    template = m.FetchRequest(7, Uuid.random(), 12, 40, 11, max_wait_ms=321,
                              max_bytes=12345, high_watermark=33, cluster_id="c-1")
    assert all(getattr(template, f.name) != f.default for f in dataclasses.fields(m.FetchRequest))
    got = next_fetch(template, 55, 12, 50)
    assert got == dataclasses.replace(template, fetch_offset=55, last_fetched_epoch=12,
                                      high_watermark=50)
    assert next_fetch(template, 55, 12, None).high_watermark == -1
