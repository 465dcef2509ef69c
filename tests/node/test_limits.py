"""The size limits hold on every write path, and a peer's bad batch is a fetch error, against
real 3-voter `kraft run` quorums attacked from a process of their own
(`tests/support/attacker.py`, frames built by hand: none of the node's client code).

After each attack every node is still up, the quorum still commits, every acknowledged write
reads back, no node's log holds a batch above MAX_BATCH_BYTES (nor the refused value), and
every node starts again. With `TEST_LANE=off` the same tests run the pure-Python path."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kraft.cli.local import LocalCluster, http_call
from kraft.records.batch import build_batch
from kraft.statemachine.kv import MAX_KEY_BYTES, MAX_VALUE_BYTES, encode_put
from kraft.storage.layout import partition_dir
from kraft.storage.log import MAX_BATCH_BYTES, SegmentedLog
from tests.support.lane_mode import lane_off
from tests.support.lanes import lane_stats

ATTACKER = Path(__file__).resolve().parents[1] / "support" / "attacker.py"
LANES = {"kraft.lane.leader": "true", "kraft.lane.follower": "true"}
PUT, GET, DELETE = 1, 2, 3
OK, ERROR = 0, 4


def _attack(mode: str, host: str, port: int, spec: object) -> object:
    """Run the attacker in its own process; its JSON answer."""
    done = subprocess.run([sys.executable, str(ATTACKER), mode, host, str(port),
                           json.dumps(spec)], capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout)


def _quorum(clusters: Callable[..., LocalCluster]) -> tuple[LocalCluster, int]:
    c = clusters(3, properties=LANES)
    c.start_all()
    leader = c.wait_for_leader(60)
    for nid in c.nodes:
        c.wait_ready(nid, 60)
    return c, leader


def _write(c: LocalCluster, acked: dict[str, bytes], key: str, value: bytes) -> None:
    r = c.put(key, value, timeout=30)
    assert r.status == 200, (r.status, r.body)
    acked[key] = value


def _fatal_free(c: LocalCluster) -> None:
    for nid, node in c.nodes.items():
        assert node.alive, f"node {nid} stopped; log {node.log_path}"
        text = node.log_path.read_text(errors="replace")
        assert "event=fatal" not in text, f"node {nid}: {node.log_path}"


def _largest_batch(node_dir: Path) -> tuple[int, bool]:
    """A stopped node's largest batch, and whether the log holds a refused value (a run of
    `v` above MAX_VALUE_BYTES)."""
    log = SegmentedLog.open(partition_dir(node_dir), recovery_checkpoint_interval_s=None)
    try:
        largest, refused = 0, False
        for b in log.batches():
            largest = max(largest, b.size_in_bytes)
            refused = refused or b"v" * (MAX_VALUE_BYTES + 1) in bytes(b.raw)
        return largest, refused
    finally:
        log.close()


def _intact(c: LocalCluster, acked: dict[str, bytes]) -> None:
    """Every node up, a new write commits, every acknowledged write reads back; then, stopped,
    no log holds a batch above the limit or a refused value; started again, all of it still
    reads back."""
    _fatal_free(c)
    _write(c, acked, "after-attack", b"still serving")
    for key, value in acked.items():
        got = c.get(key, timeout=30)
        assert got.status == 200 and got.body == value, (key, got.status, len(got.body))
    c.stop_all(timeout=30)
    for nid, node in c.nodes.items():
        largest, refused = _largest_batch(node.dir)
        assert largest <= MAX_BATCH_BYTES, f"node {nid} holds a {largest}-byte batch"
        assert not refused, f"node {nid}'s log holds a refused value"
    c.start_all()
    c.wait_for_leader(60)
    for nid in c.nodes:
        c.wait_ready(nid, 60)
    for key, value in acked.items():
        got = c.get(key, timeout=30)
        assert got.status == 200 and got.body == value, (key, got.status)
    _write(c, acked, "after-restart", b"x")
    _fatal_free(c)


def test_the_client_port_refuses_keys_and_values_above_the_limits(
        clusters: Callable[..., LocalCluster]) -> None:
    """A 12 MiB PUT, a value one byte above MAX_VALUE_BYTES and a 30 KB key on the binary
    client port are each answered ERROR naming the limit, between writes that commit: the
    value of exactly MAX_VALUE_BYTES is taken. The first writes arm the leader's lane (with
    lanes on), so the large PUTs reach its C reader first."""
    c, leader = _quorum(clusters)
    acked: dict[str, bytes] = {}
    host, port = c.nodes[leader].client
    warm = [[PUT, -1, 3]] * 30
    got = _attack("client", host, port, warm)
    assert all(a[0] == OK for a in got), got  # type: ignore[union-attr]
    spec = [[PUT, -1, 3], [PUT, 30_000, 3], [PUT, 3, 12 * 1024 * 1024],
            [PUT, 3, MAX_VALUE_BYTES + 1], [PUT, 4, MAX_VALUE_BYTES], [PUT, -1, 3],
            [GET, 30_000, 0], [DELETE, MAX_KEY_BYTES + 1, 0], [PUT, -1, 3]]
    answers = _attack("client", host, port, spec)
    assert isinstance(answers, list)
    statuses = [a[0] for a in answers]
    assert statuses == [OK, ERROR, ERROR, ERROR, OK, OK, ERROR, ERROR, OK], answers
    assert "above the 4096-byte limit" in answers[1][2], answers[1]
    assert f"above the {MAX_VALUE_BYTES}-byte limit" in answers[2][2], answers[2]
    assert f"above the {MAX_VALUE_BYTES}-byte limit" in answers[3][2], answers[3]
    assert _metric(c, leader, "kraft_requests_refused_total") >= 4  # counted
    if not lane_off():  # the lane read the frames first
        assert lane_stats(c, leader, "leader_lane")["arms"] >= 1
    for i in (0, 5, 8):
        acked[f"ok{i}"] = b"v" * 3
    acked["kkkk"] = b"v" * MAX_VALUE_BYTES
    _intact(c, acked)


def test_http_takes_exactly_the_value_limit_and_refuses_one_byte_more(
        clusters: Callable[..., LocalCluster]) -> None:
    c, leader = _quorum(clusters)
    follower = next(n for n in c.nodes if n != leader)
    acked: dict[str, bytes] = {}
    for via in (leader, follower):
        _write(c, acked, f"full{via}", b"f" * MAX_VALUE_BYTES)
        r = http_call(c.nodes[via].http, "PUT", f"/v1/kv/over{via}",
                      b"v" * (MAX_VALUE_BYTES + 1), timeout=30)
        assert r.status == 413, (via, r.status, r.body)
        assert str(MAX_VALUE_BYTES) in r.json()["error"], r.body
        r = http_call(c.nodes[via].http, "PUT", "/v1/kv/" + "k" * (MAX_KEY_BYTES + 1), b"v")
        assert r.status == 400 and "4096" in r.json()["error"], (r.status, r.body)
        r = http_call(c.nodes[via].http, "PUT", "/v1/kv/" + "k" * 30_000, b"v")
        assert r.status == 400, (r.status, r.body[:300])  # the request line, too long
        over = base64.b64encode(b"v" * (MAX_VALUE_BYTES + 1)).decode()
        cas = json.dumps({"expected": None, "value": over})
        r = http_call(c.nodes[via].http, "POST", f"/v1/kv/cas{via}/cas", cas.encode(),
                      timeout=30)
        assert r.status == 413 and str(MAX_VALUE_BYTES) in r.json()["error"], (r.status,
                                                                               r.body[:300])
    assert c.get(f"over{leader}").status == 404
    _intact(c, acked)


FORWARD_ATTACKS = [
    (3, 8 * 1024 * 1024, 10),  # MESSAGE_TOO_LARGE
    (3, MAX_VALUE_BYTES + 1, 10),
    (30_000, 3, 42),  # INVALID_REQUEST
]
"""(key bytes, value bytes, the error code answered) of the forwarded calls refused."""


def test_a_forwarded_call_above_the_limits_is_refused_on_the_controller_port(
        clusters: Callable[..., LocalCluster]) -> None:
    c, leader = _quorum(clusters)
    acked: dict[str, bytes] = {}
    _write(c, acked, "before", b"b")
    node = c.nodes[leader]
    for key_bytes, value_bytes, error in FORWARD_ATTACKS:  # one after another, on one quorum
        got = _attack("forward", node.host, node.port,
                      {"cluster_id": c.cluster_id, "op": 1, "key_bytes": key_bytes,
                       "value_bytes": value_bytes})
        assert isinstance(got, dict)
        assert got["error"] == error, (key_bytes, value_bytes, got)
        assert "limit" in str(got["message"]), got
        _intact(c, acked)


def _plant_oversized_batch(node_dir: Path) -> int:
    """Write a valid (CRC-good) batch above MAX_BATCH_BYTES at the end of a stopped node's
    log, in its last epoch; returns its base offset."""
    log = SegmentedLog.open(partition_dir(node_dir), recovery_checkpoint_interval_s=None)
    try:
        seg = log.segments[-1]
        path, pos, base, epoch = seg.path, seg.size, log.log_end_offset, log.last_epoch
    finally:
        log.close()
    batch = build_batch(base, epoch, [encode_put("planted", b"p" * (MAX_BATCH_BYTES + 4096))],
                        int(time.time() * 1000))
    assert len(batch) > MAX_BATCH_BYTES
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(batch)
    log = SegmentedLog.open(partition_dir(node_dir), recovery_checkpoint_interval_s=None)
    try:
        assert log.log_end_offset == base + 1, "recovery dropped the planted batch"
    finally:
        log.close()
    return base


def _log_end(node_dir: Path) -> int:
    log = SegmentedLog.open(partition_dir(node_dir), recovery_checkpoint_interval_s=None)
    try:
        return log.log_end_offset
    finally:
        log.close()


def _metric(c: LocalCluster, nid: int, name: str) -> float:
    text = http_call(c.nodes[nid].http, "GET", "/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name}")


def _fetch_errors(c: LocalCluster, nid: int) -> float:
    return _metric(c, nid, "kraft_fetch_errors_total")


def test_a_planted_oversized_batch_on_one_node_is_truncated_without_a_crash_loop(
        clusters: Callable[..., LocalCluster]) -> None:
    """A CRC-good batch above MAX_BATCH_BYTES at the end of a follower's log (never
    committed): the node opens its log and starts; the quorum moves on without the batch,
    its holder truncating it, and every node stays up."""
    c, leader = _quorum(clusters)
    acked: dict[str, bytes] = {}
    _write(c, acked, "before", b"b")
    target = next(n for n in c.nodes if n != leader)
    c.stop_all(timeout=30)
    _plant_oversized_batch(c.nodes[target].dir)
    c.start_all()
    c.wait_for_leader(60)
    _write(c, acked, "after-plant", b"a")
    for nid in c.nodes:
        c.wait_ready(nid, 60)
    assert c.get("planted").status == 404
    _intact(c, acked)


def test_a_leader_serving_an_oversized_batch_leaves_the_follower_refusing_it_and_up(
        clusters: Callable[..., LocalCluster]) -> None:
    """The same batch planted in two of the three logs: one of those two leads (the third's
    log is shorter), serves the batch, and commits it with the other; the third node refuses
    the batch at each fetch (kraft_fetch_errors_total grows), never appends it, and stays up,
    fetching again; the quorum still commits and every node starts again."""
    c, leader = _quorum(clusters)
    acked: dict[str, bytes] = {}
    _write(c, acked, "before", b"b")
    # the followers first: no election meanwhile, so the three logs end alike
    for nid in sorted(c.nodes, key=lambda n: n == leader):
        c.kill(nid, signal.SIGTERM)
    c.close()
    ends = {nid: _log_end(node.dir) for nid, node in c.nodes.items()}
    assert len(set(ends.values())) == 1, ends
    # with the batch, the two holders' logs are longer than the third's: it is never elected
    third = next(n for n in c.nodes if n != leader)
    holders = [n for n in c.nodes if n != third]
    for nid in holders:
        _plant_oversized_batch(c.nodes[nid].dir)
    c.start_all()
    for nid in holders:
        c.wait_ready(nid, 60)
    assert c.wait_for_leader(60) in holders
    _write(c, acked, "after-plant", b"a")
    deadline = time.monotonic() + 60
    while _fetch_errors(c, third) < 1:
        assert time.monotonic() < deadline, "the third node never refused the batch"
        time.sleep(0.1)
    first = _fetch_errors(c, third)
    while _fetch_errors(c, third) <= first:  # it fetches again, and refuses again
        assert time.monotonic() < deadline, "the third node stopped fetching"
        time.sleep(0.1)
    _fatal_free(c)
    text = c.nodes[third].log_path.read_text(errors="replace")
    assert "event=fetch_refused" in text and "-byte batch limit" in text
    for key, value in acked.items():
        got = c.get(key, timeout=30)
        assert got.status == 200 and got.body == value, key
    c.stop_all(timeout=30)
    largest, _ = _largest_batch(c.nodes[third].dir)
    assert largest <= MAX_BATCH_BYTES
    c.start_all()
    c.wait_for_leader(60)
    for nid in holders:
        c.wait_ready(nid, 60)
    _write(c, acked, "after-restart", b"x")
    time.sleep(1.0)
    _fatal_free(c)


MARK = b"corrupt-me:" + b"m" * 200


def _corrupt_marked_batch(node_dir: Path) -> None:
    """Flip one byte of the marked value in a stopped node's log: its batch fails its CRC
    (below the recovery point, a clean start does not check it)."""
    (path,) = sorted(partition_dir(node_dir).glob("*.log"))
    data = bytearray(path.read_bytes())
    at = data.index(MARK)
    data[at + 20] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_leader_serving_a_crc_bad_batch_leaves_the_follower_refusing_it_and_up(
        clusters: Callable[..., LocalCluster]) -> None:
    """A batch in the middle of two logs corrupted on disk (the leader's and one follower's),
    the third node's log cut before it: one of the two leads and serves the bad bytes; the
    third refuses them at each fetch (fails its CRC, counted, logged), never appends them and
    stays up; the quorum still commits."""
    c, leader = _quorum(clusters)
    acked: dict[str, bytes] = {}
    _write(c, acked, "before", b"b")
    r = c.put("marked", MARK, timeout=30)
    assert r.status == 200
    for i in range(20):  # more batches after it: it is not the last of its segment
        _write(c, acked, f"after{i}", b"a" * 1024)
    for nid in sorted(c.nodes, key=lambda n: n == leader):
        c.kill(nid, signal.SIGTERM)
    c.close()
    third = next(n for n in c.nodes if n != leader)
    holders = [n for n in c.nodes if n != third]
    for nid in holders:
        _corrupt_marked_batch(c.nodes[nid].dir)
    log = SegmentedLog.open(partition_dir(c.nodes[third].dir), recovery_checkpoint_interval_s=None)
    try:
        base = next(b.base_offset for b in log.batches() if MARK in bytes(b.raw))
        log.truncate_to(base)
    finally:
        log.close()
    c.start_all()
    for nid in holders:
        c.wait_ready(nid, 60)
    assert c.wait_for_leader(60) in holders
    _write(c, acked, "after-corrupt", b"c")
    deadline = time.monotonic() + 60
    while _fetch_errors(c, third) < 2:  # refused, fetched again, refused again
        assert time.monotonic() < deadline, "the third node did not refuse the batch twice"
        time.sleep(0.1)
    _fatal_free(c)
    text = c.nodes[third].log_path.read_text(errors="replace")
    assert "event=fetch_refused" in text and "fails its CRC" in text
    assert _log_end_alive(c, third) == base  # nothing of it, nor after it, appended
    for key, value in acked.items():  # (the marked value itself is the disk's damage)
        got = c.get(key, timeout=30)
        assert got.status == 200 and got.body == value, key


def _log_end_alive(c: LocalCluster, nid: int) -> int:
    status = c.status(nid)
    assert status is not None
    return int(status["log_end_offset"])
