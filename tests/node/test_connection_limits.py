"""Connection limits of a real node, attacked from a process of its own (raw sockets and
kafka-python's codec, never the node's client code): `max.connections`,
`max.connections.per.ip`, `connections.max.idle.ms`, `socket.request.max.bytes`,
`kraft.socket.buffered.max.bytes`, the HTTP deadlines and cap, and the rate-limited log of
closed connections (`kraft.server.connection_limits`). Each test then checks that the quorum
still serves and that nothing acknowledged was lost.
"""

from __future__ import annotations

import asyncio
import json
import re
import resource
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from kraft.admin.kv_client import KvClient
from kraft.cli.local import LocalCluster, LocalNode, http_call
from kraft.lane import native
from kraft.storage.layout import partition_dir
from tests.support.lane_mode import lane_off

MiB = 1 << 20

_PRELUDE = r'''
import json, resource, socket, struct, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < 2200:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
def out(**kw):
    print(json.dumps(kw), flush=True)
def connect(host, port, source=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    if source:
        s.bind((source, 0))
    s.connect((host, port))
    return s
def closed_by_peer(s):
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
'''

FLOOD = _PRELUDE + r'''
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
source = sys.argv[4] if len(sys.argv) > 4 else None
socks = [connect(host, port, source) for _ in range(count)]
time.sleep(1.5)  # the node closes what it refuses at accept
held = [s for s in socks if not closed_by_peer(s)]
out(held=len(held), refused=count - len(held))
sys.stdin.readline()  # hold the connections until told to go
'''

BAD_PREFIXES = _PRELUDE + r'''
host, port, count, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4])
closed = 0
answer = b""
for _ in range(count):
    s = connect(host, port)
    s.sendall(prefix + b"\0" * 8)
    s.settimeout(10)
    answer = b""
    try:
        while chunk := s.recv(65536):  # what the node says, then its close
            answer += chunk
        closed += 1
    except OSError:
        closed += 1
    s.close()
out(closed=closed, answer=answer.hex())
'''

HALF_FRAMES = _PRELUDE + r'''
# targets: "host:port:declared_size:bytes_to_send" ...; the frames are sent 1 MiB at a time, by turns
conns = []
for t in sys.argv[1:]:
    host, port, size, total = t.split(":")
    s = connect(host, int(port))
    s.sendall(struct.pack(">I", int(size)))
    conns.append([s, int(total), 0, False])
chunk = b"x" * (1 << 20)
while any(not c[3] and c[2] < c[1] for c in conns):
    for c in conns:
        if c[3] or c[2] >= c[1]:
            continue
        try:
            c[0].sendall(chunk[: min(len(chunk), c[1] - c[2])])
            c[2] += min(len(chunk), c[1] - c[2])
        except OSError:
            c[3] = True
time.sleep(1.0)
out(dropped=[c[3] or closed_by_peer(c[0]) for c in conns], sent=[c[2] for c in conns])
'''

SLOW_HTTP = _PRELUDE + r'''
# sends `head` then `trickle` a byte every 50 ms; reports whether the node closed the connection
host, port = sys.argv[1], int(sys.argv[2])
head, trickle = sys.argv[3].encode(), sys.argv[4].encode()
s = connect(host, port)
s.sendall(head)
start = time.monotonic()
closed_after = None
answer = b""
for i in range(400):  # 20 s at most
    try:
        s.sendall(trickle[i % len(trickle):i % len(trickle) + 1])
    except OSError:
        closed_after = time.monotonic() - start
        break
    time.sleep(0.05)
    s.setblocking(False)
    try:
        while chunk := s.recv(65536):
            answer += chunk
        closed_after = time.monotonic() - start
        break
    except BlockingIOError:
        pass
    except OSError:
        closed_after = time.monotonic() - start
        break
    s.setblocking(True)
    s.settimeout(10)
out(closed_after=closed_after, answer=answer.decode(errors="replace"))
'''

IDLE = _PRELUDE + r'''
# one idle and one busy connection on each listener; reports which the node closed
host, controller, client, http, seconds = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                           int(sys.argv[4]), float(sys.argv[5]))
dq = bytes.fromhex(sys.argv[6])
idle = {"controller": connect(host, controller), "client": connect(host, client),
        "http": connect(host, http)}
busy_controller, busy_client = connect(host, controller), connect(host, client)
start = time.monotonic()
closed = {}
answers = {"controller": 0, "client": 0}
rid = 0
def read_frame(s):
    size = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
    return s.recv(size, socket.MSG_WAITALL)
try:
    while time.monotonic() - start < seconds:
        busy_controller.sendall(dq)
        if read_frame(busy_controller):
            answers["controller"] += 1
        rid += 1
        key, value = b"busy", b"v%d" % rid
        busy_client.sendall(struct.pack(">IIBH", 7 + len(key) + len(value), rid, 1, len(key))
                            + key + value)
        if read_frame(busy_client)[4] == 0:  # status OK
            answers["client"] += 1
        for name, s in idle.items():
            if name not in closed and closed_by_peer(s):
                closed[name] = time.monotonic() - start
        time.sleep(0.1)
    error = None
except OSError as exc:
    error = repr(exc)
out(closed=closed, answers=answers, error=error)
'''


def _attack(script: str, *args: object, timeout: float = 300) -> dict[str, Any]:
    """Run an attack in a process of its own; its one JSON line."""
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                          timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout.decode().splitlines()[-1])


def _metrics(node: LocalNode) -> str:
    return http_call(node.http, "GET", "/metrics").body.decode()


def _closed(node: LocalNode, listener: str, reason: str) -> float:
    """kraft_connections_closed_total{listener, reason} of `node`."""
    m = re.search(rf'^kraft_connections_closed_total{{listener="{listener}",reason="{reason}"}} '
                  r"(\S+)$", _metrics(node), re.M)
    return float(m.group(1)) if m else 0.0


def _open_connections(node: LocalNode, listener: str) -> float:
    """kraft_connections{listener} of `node`."""
    m = re.search(rf'^kraft_connections{{listener="{listener}"}} (\S+)$', _metrics(node), re.M)
    assert m is not None, f"no kraft_connections for {listener}"
    return float(m.group(1))


def _describe_quorum_frame(correlation_id: int = 1) -> bytes:
    """A framed DescribeQuorum v1 request, built by kafka-python (not the node's codec)."""
    from kafka.protocol.admin.cluster import DescribeQuorumRequest
    topic = DescribeQuorumRequest.TopicData
    req = DescribeQuorumRequest(topics=[topic(topic_name="__cluster_metadata", partitions=[
        topic.PartitionData(partition_index=0)])])
    req.with_header(correlation_id=correlation_id)
    return bytes(req.encode(version=1, header=True, framed=True))


def _describe_quorum(s: socket.socket) -> tuple[int, int]:
    """Send DescribeQuorum on `s`: the answer's (error code, leader id), decoded by
    kafka-python."""
    from kafka.protocol.admin.cluster import DescribeQuorumResponse
    s.sendall(_describe_quorum_frame())
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    r = DescribeQuorumResponse.decode(s.recv(size, socket.MSG_WAITALL), version=1, header=True)
    partition = r.topics[0].partitions[0]
    return int(partition.error_code), int(partition.leader_id)


def _fresh_describe_quorum(c: LocalCluster) -> int:
    """The leader id a leader answers DescribeQuorum with, on a new connection (retried while
    the node still takes in the closes of other connections, or while leadership moves on a
    loaded machine)."""
    deadline = time.monotonic() + 30
    while True:
        node = c.nodes[c.wait_for_leader()]
        try:
            with socket.create_connection((node.host, node.port), 5) as s:
                s.settimeout(5)
                error, leader_id = _describe_quorum(s)
                if error == 0:
                    return leader_id
        except (OSError, struct.error):
            pass
        assert time.monotonic() < deadline, "no DescribeQuorum answer"
        time.sleep(0.2)


def _need_descriptors(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < n:
        pytest.skip(f"needs {n} file descriptors, the hard limit is {hard}")
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def _rss(node: LocalNode, field: str) -> int:
    """VmRSS or VmHWM of the node's process, bytes."""
    assert node.process is not None
    with open(f"/proc/{node.process.pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def _one_node(clusters: Callable[..., LocalCluster], **props: str) -> tuple[LocalCluster, LocalNode]:
    c = clusters(1, properties=props)
    c.start_all()
    node = c.nodes[c.wait_for_leader()]
    c.wait_ready(node.node_id)
    return c, node


def test_max_connections_refuses_further_connections_while_the_quorum_serves(
        clusters: Callable[..., LocalCluster]) -> None:
    _need_descriptors(2200)
    c = clusters(3, properties={"max.connections": "500"})
    c.start_all()
    lid = c.wait_for_leader()
    leader = c.nodes[lid]
    assert c.put("before", b"1").status == 200
    operator = socket.create_connection((leader.host, leader.port), 5)  # opened before the flood
    operator.settimeout(10)
    flood = subprocess.Popen([sys.executable, "-c", FLOOD, leader.host, str(leader.port), "2000"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert flood.stdout is not None
        seen = json.loads(flood.stdout.readline())
        # the followers' fetch connections and the operator's are among the 500
        assert 0 < seen["held"] <= 497
        assert seen["refused"] >= 1500 and seen["held"] + seen["refused"] == 2000
        # while 500 connections are open and 1,500 more were refused, the quorum serves
        assert http_call(leader.http, "GET", "/healthz").status == 200
        assert c.put("during", b"2").status == 200
        error, leader_id = _describe_quorum(operator)
        # answered on the operator's connection: by the leader, or (should leadership move on
        # a loaded machine) with NOT_LEADER_OR_FOLLOWER naming who leads
        assert (error, leader_id) == (0, lid) or (error == 6 and leader_id in c.nodes)
        assert _closed(leader, "CONTROLLER", "max_connections") >= seen["refused"]
        assert seen["held"] < _open_connections(leader, "CONTROLLER") <= 500
    finally:
        if flood.stdin is not None:
            flood.stdin.close()
        flood.wait(30)
    operator.close()
    assert _fresh_describe_quorum(c) in c.nodes  # the flood's connections are counted out
    for key, value in (("before", b"1"), ("during", b"2")):
        assert c.get(key).body == value
        for node in c.nodes.values():  # every replica has them: the log is whole everywhere
            deadline = time.monotonic() + 20
            while http_call(node.http, "GET", f"/v1/kv/{key}?stale=true").body != value:
                assert time.monotonic() < deadline, f"node {node.node_id} lacks {key}"
                time.sleep(0.1)


def test_max_connections_per_ip_and_its_overrides(clusters: Callable[..., LocalCluster]) -> None:
    _need_descriptors(300)
    c = clusters(1)
    prefix = c.nodes[1].host.rpartition(".")[0]  # sources in the node's own /24
    noisy, banned, other = f"{prefix}.201", f"{prefix}.202", f"{prefix}.203"
    c.properties.update({"max.connections.per.ip": "20",
                         "max.connections.per.ip.overrides": f"{banned}:0"})
    c.start_all()
    node = c.nodes[c.wait_for_leader()]
    host, port = node.client
    flood = subprocess.Popen([sys.executable, "-c", FLOOD, host, str(port), "60", noisy],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert flood.stdout is not None
        seen = json.loads(flood.stdout.readline())
        assert seen == {"held": 20, "refused": 40}
        refused = _attack(FLOOD, host, port, 1, banned)
        assert refused == {"held": 0, "refused": 1}
        # another address still gets in and is served (a PUT on the binary protocol)
        s = socket.socket()
        s.bind((other, 0))
        s.settimeout(10)
        s.connect((host, port))
        key, value = b"k", b"v"
        s.sendall(struct.pack(">IIBH", 7 + len(key) + len(value), 9, 1, len(key)) + key + value)
        answer = s.recv(4, socket.MSG_WAITALL)
        answer += s.recv(struct.unpack(">I", answer)[0], socket.MSG_WAITALL)
        assert struct.unpack_from(">IIB", answer)[1:] == (9, 0)
        s.close()
        assert _closed(node, "client", "max_connections_per_ip") == 41
    finally:
        if flood.stdin is not None:
            flood.stdin.close()
        flood.wait(30)
    assert c.get("k").body == b"v"


def test_idle_connections_close_and_busy_ones_stay(clusters: Callable[..., LocalCluster]) -> None:
    c, node = _one_node(clusters, **{"connections.max.idle.ms": "500"})
    seen = _attack(IDLE, node.host, node.port, node.client[1], node.http_port, 4.0,
                   _describe_quorum_frame().hex())
    assert seen["error"] is None, seen
    # each idle connection was closed, not before connections.max.idle.ms
    assert set(seen["closed"]) == {"controller", "client", "http"}, seen
    assert all(after >= 0.5 for after in seen["closed"].values()), seen
    # the busy ones were answered throughout (the binary one's PUTs may be the lane's)
    assert seen["answers"]["controller"] >= 10 and seen["answers"]["client"] >= 10, seen
    for listener in ("CONTROLLER", "client", "http"):
        assert _closed(node, listener, "idle") >= 1
    assert c.get("busy").body == b"v%d" % seen["answers"]["client"]


def test_idle_limit_spares_the_connections_lent_to_the_leader_lane(
        clusters: Callable[..., LocalCluster]) -> None:
    if lane_off() or native() is None:
        pytest.skip("no leader lane runs, so no connection is lent (the idle limit closes "
                    "the client's connection in the pauses, as it should)")
    c = clusters(3, properties={"connections.max.idle.ms": "300"})
    c.start_all()
    lid = c.wait_for_leader()
    leader = c.nodes[lid]
    for nid in c.nodes:
        c.wait_ready(nid)
    s = socket.create_connection(leader.client, 5)
    s.settimeout(10)
    for rid in range(1, 201):  # writes with pauses of several idle periods between some
        key, value = b"lent", b"v%d" % rid
        s.sendall(struct.pack(">IIBH", 7 + len(key) + len(value), rid, 1, len(key)) + key + value)
        answer = s.recv(4, socket.MSG_WAITALL)
        answer += s.recv(struct.unpack(">I", answer)[0], socket.MSG_WAITALL)
        assert struct.unpack_from(">IIB", answer)[1:] == (rid, 0)
        time.sleep(0.8 if rid % 50 == 0 else 0.005)
    s.close()
    lanes = http_call(leader.http, "GET", "/v1/status").json().get("leader_lane")
    assert lanes is not None and lanes["arms"] >= 1, lanes  # it had the voters' and the client's
    # a lent connection is in use: neither the voters' fetch connections nor the client's
    # were closed as idle under the lane's feet
    assert _closed(leader, "CONTROLLER", "idle") == 0
    assert _closed(leader, "client", "idle") == 0
    assert c.get("lent").body == b"v200"


def test_unfinished_frames_beyond_the_budget_are_dropped_and_rss_stays_bounded(
        clusters: Callable[..., LocalCluster]) -> None:
    budget = 32 * MiB
    c, node = _one_node(clusters, **{"kraft.socket.buffered.max.bytes": str(budget)})
    assert c.put("before", b"1").status == 200
    rss_before = _rss(node, "VmRSS")
    hwm_before = _rss(node, "VmHWM")
    host, port, client_port = node.host, node.port, node.client[1]
    # four controller connections each sending 95 MiB of a frame (without a budget: 380 MiB
    # held), and four binary client ones each 15 MiB of a 16 MiB frame
    targets = [f"{host}:{port}:{100 * MiB - 1}:{95 * MiB}"] * 4
    targets += [f"{host}:{client_port}:{16 * MiB - 1}:{15 * MiB}"] * 4
    seen = _attack(HALF_FRAMES, *targets)
    # The node held at most the budget in frames (plus a read chunk per connection); bytearray
    # growth and the allocator's arenas stay within the budget again, and 32 MiB covers the
    # interpreter's own churn: far below the 4 x 95 MiB a node without a budget takes in.
    assert _rss(node, "VmHWM") <= max(hwm_before, rss_before + 2 * budget + 32 * MiB)
    assert all(seen["dropped"][:4]), seen  # each holds more than the budget alone at some point
    assert sum(seen["dropped"][4:]) >= 2, seen  # 60 MiB over a 32 MiB budget
    m = re.search(r"^kraft_socket_buffered_bytes (\S+)$", _metrics(node), re.M)
    assert m and float(m.group(1)) <= budget
    assert _closed(node, "CONTROLLER", "buffered_bytes") >= 4
    assert c.put("after", b"2").status == 200
    assert c.get("before").body == b"1" and c.get("after").body == b"2"


def test_bad_prefixes_are_counted_and_their_log_lines_bounded(
        clusters: Callable[..., LocalCluster]) -> None:
    c, node = _one_node(clusters)
    seen = _attack(BAD_PREFIXES, node.host, node.port, 2000, "7fffffff")  # a 2 GiB frame
    assert seen == {"closed": 2000, "answer": ""}  # a Kafka frame that size has no answer
    seen = _attack(BAD_PREFIXES, node.host, node.client[1], 2000, "ffffffff")
    assert seen["closed"] == 2000
    # the binary client protocol says why: ERROR for the request id, naming the limit
    answer = bytes.fromhex(seen["answer"])
    assert struct.unpack_from(">IIB", answer)[1:] == (0, 4)
    assert b"frame length 4294967295 outside 7..16777216" in answer
    assert _closed(node, "CONTROLLER", "frame_size") == 2000
    assert _closed(node, "client", "frame_size") == 2000
    lines = [line for line in node.log_path.read_text(errors="replace").splitlines()
             if "event=connection_closed" in line and "reason=frame_size" in line]
    assert 1 <= len(lines) <= 20, len(lines)  # the first ten of each listener in a minute
    assert "socket.request.max.bytes" in lines[0]
    assert c.put("after", b"1").status == 200


def test_undecodable_requests_are_counted_and_their_log_lines_bounded(
        clusters: Callable[..., LocalCluster]) -> None:
    """2,000 whole frames whose Vote request breaks off after its header: each closes its
    connection, counted as undecodable, and the log holds the first ten (it held a warning
    for each, from the request handler)."""
    c, node = _one_node(clusters)
    seen = _attack(BAD_PREFIXES, node.host, node.port, 2000, "0000000800340000")
    assert seen == {"closed": 2000, "answer": ""}
    assert _closed(node, "CONTROLLER", "undecodable") == 2000
    text = node.log_path.read_text(errors="replace")
    lines = [line for line in text.splitlines() if "reason=undecodable" in line
             and "event=connection_closed" in line]
    assert 1 <= len(lines) <= 10, len(lines)
    assert "bad request" in lines[0]  # what was wrong, from the decoder
    assert "event=bad_request" not in text
    assert c.put("after", b"1").status == 200


def test_socket_request_max_bytes_holds_on_both_listeners(
        clusters: Callable[..., LocalCluster]) -> None:
    c, node = _one_node(clusters, **{"socket.request.max.bytes": "4096"})
    assert _attack(BAD_PREFIXES, node.host, node.port, 1, "00001001")["closed"] == 1
    seen = _attack(BAD_PREFIXES, node.host, node.client[1], 1, "00001001")
    assert seen["closed"] == 1
    assert b"outside 7..4096 (socket.request.max.bytes)" in bytes.fromhex(seen["answer"])
    assert _closed(node, "CONTROLLER", "frame_size") == 1
    assert _closed(node, "client", "frame_size") == 1
    assert _fresh_describe_quorum(c) == node.node_id  # a small request still goes through


def test_socket_request_max_bytes_holds_on_the_leader_lane(
        clusters: Callable[..., LocalCluster]) -> None:
    c = clusters(3, properties={"socket.request.max.bytes": "4096"})
    c.start_all()
    leader = c.nodes[c.wait_for_leader()]
    for nid in c.nodes:
        c.wait_ready(nid)
    s = socket.create_connection(leader.client, 5)
    s.settimeout(10)

    def put(rid: int, value: bytes) -> bytes:
        s.sendall(struct.pack(">IIBH", 8 + len(value), rid, 1, 1) + b"k" + value)
        answer = s.recv(4, socket.MSG_WAITALL)
        return answer + s.recv(struct.unpack(">I", answer)[0], socket.MSG_WAITALL)

    for rid in range(1, 101):  # the lane takes the connection once the leader is steady
        assert struct.unpack_from(">IIB", put(rid, b"small"))[1:] == (rid, 0)
        time.sleep(0.01)
    lanes = http_call(leader.http, "GET", "/v1/status").json().get("leader_lane")
    if lanes is not None:
        assert lanes["armed"], lanes  # the next PUT is the lane's to read
    answer = put(101, b"x" * 8000)  # above socket.request.max.bytes
    assert struct.unpack_from(">IIB", answer)[1:] == (101, 4), answer[:64]  # ERROR, saying why
    assert b"outside 7..4096 (socket.request.max.bytes)" in answer
    assert s.recv(1) == b""  # then the connection is closed
    s.close()
    assert _closed(leader, "client", "frame_size") == 1
    assert c.get("k").body == b"small"  # the large value was not written


def test_slow_http_headers_and_bodies_are_closed(clusters: Callable[..., LocalCluster]) -> None:
    c, node = _one_node(clusters, **{"kraft.http.header.timeout.ms": "500",
                                     "kraft.http.body.timeout.ms": "500"})
    seen = _attack(SLOW_HTTP, node.host, node.http_port, "GET /healthz HTTP/1.1\r\n",
                   "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")
    assert seen["closed_after"] is not None and seen["closed_after"] >= 0.5, seen
    assert seen["answer"].startswith("HTTP/1.1 408 "), seen
    assert "kraft.http.header.timeout.ms" in seen["answer"], seen
    seen = _attack(SLOW_HTTP, node.host, node.http_port,
                   "PUT /v1/kv/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", "v")
    assert seen["closed_after"] is not None and seen["closed_after"] >= 0.5, seen
    assert seen["answer"].startswith("HTTP/1.1 408 "), seen
    assert "kraft.http.body.timeout.ms" in seen["answer"], seen
    assert http_call(node.http, "GET", "/healthz").status == 200
    assert c.get("slow").status == 404  # the cut-off body stored nothing
    assert _closed(node, "http", "header_timeout") == 1
    assert _closed(node, "http", "body_timeout") == 1


def test_http_connections_are_capped(clusters: Callable[..., LocalCluster]) -> None:
    _need_descriptors(400)
    _c, node = _one_node(clusters, **{"kraft.http.max.connections": "50"})
    seen = _attack(FLOOD, node.host, node.http_port, 200)
    assert 45 <= seen["held"] <= 50 and seen["held"] + seen["refused"] == 200, seen
    assert _closed(node, "http", "max_connections") == seen["refused"]
    assert http_call(node.http, "GET", "/healthz").status == 200  # the flood is gone


def test_a_flood_past_the_open_files_limit_is_refused_and_the_log_still_rolls(
        clusters: Callable[..., LocalCluster]) -> None:
    """The node runs with 400 file descriptors, so its listeners may hold 144 connections
    (`socket_budget`). Raw connections flood the controller listener and the HTTP port: past
    the budget each is closed at accept, and the node still opens its segments as its log
    rolls every dozen writes. Before the budget, such a flood took the last descriptors and the
    next segment's fsync stopped the node."""
    c = clusters(1, properties={"metadata.log.segment.bytes": "65536"})
    node = c.nodes[1]
    c.command_prefix = ["prlimit", "--nofile=400:400", "--"]
    c.start_all()
    c.wait_for_leader()
    c.wait_ready(1)

    async def writes(kv: KvClient, prefix: str) -> list[int]:
        return [await kv.put(f"{prefix}{i}", b"w" * 5000) for i in range(40)]

    async def scenario() -> tuple[list[dict[str, Any]], list[int], list[int]]:
        kv = await KvClient(*node.client).connect()  # before the flood
        try:
            before = await writes(kv, "before")
            floods = [subprocess.Popen([sys.executable, "-c", FLOOD, node.host, str(port), "300"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                      for port in (node.port, node.http_port)]
            try:
                seen = []
                for f in floods:
                    assert f.stdout is not None
                    seen.append(json.loads(await asyncio.to_thread(f.stdout.readline)))
                during = await writes(kv, "during")  # 200 kB: new 64 KiB segments opened
            finally:
                for f in floods:
                    if f.stdin is not None:
                        f.stdin.close()
                    await asyncio.to_thread(f.wait, 30)
            return seen, before, during
        finally:
            await kv.close()

    seen, before, during = asyncio.run(scenario())
    assert node.alive, node.log_path.read_text()[-3000:]
    held = sum(s["held"] for s in seen)
    assert 0 < held <= 144 and all(s["refused"] > 0 for s in seen), seen
    assert during[-1] > during[0] > before[-1]  # acknowledged, in order, after the flood began
    assert _closed(node, "CONTROLLER", "open_files") > 0
    assert _closed(node, "http", "open_files") > 0
    assert c.get("during39").body == b"w" * 5000
    # segments were opened during the flood (the newest starts after the last write before it)
    bases = sorted(int(p.stem) for p in partition_dir(node.dir).glob("*.log"))
    assert bases[-1] > before[-1], bases
