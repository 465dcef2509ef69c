"""`kraft.log.preallocate.bytes` on a real 3-voter quorum: followers write what they fetch
through into zero-filled space, a kill -9 leaves zeros that the restart trims, and a clean stop
leaves every segment ending at its last batch."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.cli.local import LocalCluster, http_call
from kraft.protocol.errors import ProtocolError
from kraft.records.batch import RecordBatch
from kraft.storage.layout import partition_dir
from tests.support.direct_io import o_direct_supported

PREALLOCATE = 64 * 1024


def _segment(node_dir: Path) -> tuple[int, int, bool]:
    """The active segment: (bytes of batches, file size, whether the rest is all zeros)."""
    pdir = partition_dir(node_dir)
    path = sorted(pdir.glob("*.log"))[-1]
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        try:
            batch = RecordBatch.parse(data, pos)
        except ProtocolError:
            break
        if not batch.is_valid():
            break
        pos += batch.size_in_bytes
    rest = data[pos:]
    return pos, len(data), rest.count(0) == len(rest)


def _local(cluster: LocalCluster, nid: int, key: str) -> bytes | None:
    """What node `nid` itself has applied for `key` (a stale read: no leadership check)."""
    r = http_call(cluster.nodes[nid].http, "GET", f"/v1/kv/{key}?stale=true")
    return r.body if r.status == 200 else None


def _flush_count(cluster: LocalCluster, nid: int) -> int:
    text = http_call(cluster.nodes[nid].http, "GET", "/metrics").body.decode()
    match = re.search(r"^kraft_log_flush_seconds_count (\d+)", text, re.M)
    assert match is not None
    return int(match.group(1))


def test_followers_write_through_and_a_killed_one_restarts_with_its_zeros_trimmed(
    clusters: Callable[..., LocalCluster], tmp_path: Path,
) -> None:
    if not o_direct_supported(tmp_path):
        pytest.skip("the test directory's filesystem refuses O_DIRECT")
    # the Python path's write-through (the followers' native lane writes through the page
    # cache and its own fdatasync: tests/node/test_follower_lane.py)
    c = clusters(properties={"kraft.log.preallocate.bytes": str(PREALLOCATE),
                             "kraft.lane.follower": "false"})
    c.start_all()
    leader = c.wait_for_leader(60)
    followers = [n for n in c.nodes if n != leader]
    for i in range(120):  # one at a time: each a fetch the followers write through
        assert c.put(f"k{i}", b"v%d" % i).status in (200, 204)
    for nid in followers:
        deadline = time.monotonic() + 20
        while _local(c, nid, "k119") != b"v119":
            assert time.monotonic() < deadline, f"node {nid} never applied k119"
            time.sleep(0.05)
        batches, size, zeros = _segment(c.nodes[nid].dir)
        assert zeros and size > batches, f"node {nid}: no preallocated space after its batches"
        assert _flush_count(c, nid) >= 100  # each write-through append is timed as a flush
    victim = followers[0]
    c.kill(victim)  # kill -9: the zeros stay
    batches, size, zeros = _segment(c.nodes[victim].dir)
    assert zeros and size > batches
    for i in range(120, 150):
        assert c.put(f"k{i}", b"v%d" % i).status in (200, 204)
    c.start(victim)
    c.wait_ready(victim, 60)
    deadline = time.monotonic() + 30
    while _local(c, victim, "k149") != b"v149":
        assert time.monotonic() < deadline, "the restarted follower never caught up"
        time.sleep(0.05)
    for i in range(150):
        assert _local(c, victim, f"k{i}") == b"v%d" % i
    text = c.nodes[victim].log_path.read_text()
    assert "event=preallocated_tail_trimmed" in text
    assert "event=torn_tail_truncated" not in text
    c.stop_all(timeout=20)  # SIGTERM: a clean close leaves no zeros anywhere
    for nid, node in c.nodes.items():
        assert node.process is not None and node.process.returncode == 0, nid
        batches, size, zeros = _segment(node.dir)
        assert size == batches, f"node {nid}: {size - batches} bytes after its batches"
