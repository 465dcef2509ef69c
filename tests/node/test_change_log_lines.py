"""Every change of membership or features asked of a node, and every export, is one INFO line
naming the address it came from: a voter removed by a stranger leaves a line on the node that
was asked, whatever it answered.

The requests come from a process of their own, as hand-built frames bound to a source address
of the test's, so the line is checked for exactly that address."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kraft.cli.local import LocalCluster
from tests.node.conftest import FAST_TIMEOUTS, address_prefix

# A client of its own: raw Kafka frames (request header v2, flexible bodies), written by hand.
CLIENT = textwrap.dedent('''
    import socket, struct, sys, uuid

    def uvarint(n):
        out = b""
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                out += bytes([b | 0x80])
            else:
                return out + bytes([b])

    def cstr(s):
        if s is None:
            return uvarint(0)
        raw = s.encode()
        return uvarint(len(raw) + 1) + raw

    def listeners(host, port):
        return uvarint(2) + cstr("CONTROLLER") + cstr(host) + struct.pack(">H", port) + b"\\0"

    def call(host, port, source, api, version, body):
        head = struct.pack(">hhi", api, version, 7) + struct.pack(">h", 4) + b"evil" + b"\\0"
        frame = head + body
        with socket.create_connection((host, port), timeout=20,
                                      source_address=(source, 0)) as s:
            s.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            answer = s.recv(size, socket.MSG_WAITALL)
        # response header v1: correlation id, tagged fields; then the body
        assert struct.unpack(">i", answer[:4])[0] == 7
        return answer

    host, port, source, what = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    directory = uuid.UUID("0123456789abcdef0123456789abcdef").bytes
    if what == "remove":  # RemoveRaftVoter v0 of a voter that does not exist
        body = cstr(None) + struct.pack(">i", 99) + directory + b"\\0"
        call(host, port, source, 81, 0, body)
    elif what == "add":  # AddRaftVoter v0 of a node nobody runs, given 1 s
        body = (cstr(None) + struct.pack(">ii", 1000, 98) + directory
                + listeners("127.0.0.1", 1) + b"\\0")
        call(host, port, source, 80, 0, body)
    elif what == "update":  # UpdateRaftVoter v0 moving voter 97 elsewhere
        body = (cstr(None) + struct.pack(">ii", 1, 97) + directory
                + listeners("127.0.0.1", 2) + struct.pack(">hh", 0, 1) + b"\\0" + b"\\0")
        call(host, port, source, 82, 0, body)
    elif what == "features":  # UpdateFeatures v1: kraft.version to 1, validate only
        body = (struct.pack(">i", 1000) + uvarint(2) + cstr("kraft.version")
                + struct.pack(">hb", 1, 1) + b"\\0" + b"\\1" + b"\\0")
        call(host, port, source, 57, 1, body)
''')


def _ask(cluster: LocalCluster, node_id: int, source: str, what: str) -> None:
    node = cluster.nodes[node_id]
    subprocess.run([sys.executable, "-c", CLIENT, node.host, str(node.port), source, what],
                   check=True, timeout=60)


def _lines(cluster: LocalCluster, node_id: int, event: str) -> list[str]:
    text = cluster.nodes[node_id].log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if f"event={event}" in line]


def _wait_line(cluster: LocalCluster, node_id: int, event: str, timeout: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _lines(cluster, node_id, event)
        if found:
            return found
        time.sleep(0.05)
    return []


def test_each_change_asked_is_one_info_line_naming_the_peer(tmp_path: Path) -> None:
    prefix = address_prefix()
    source = prefix + "200"  # the stranger's own address: the line must name it
    cluster = LocalCluster(tmp_path, voters=3, properties=FAST_TIMEOUTS, address_prefix=prefix)
    try:
        cluster.start_all()
        leader = cluster.wait_for_leader()
        follower = next(i for i in cluster.nodes if i != leader)
        for node_id, what, event, result in [
            (leader, "remove", "remove_voter_request", "VOTER_NOT_FOUND"),
            (follower, "remove", "remove_voter_request", "NOT_LEADER_OR_FOLLOWER"),
            (leader, "update", "update_voter_request", None),
            (leader, "features", "update_features_request", None),
            (follower, "features", "update_features_request", "NOT_CONTROLLER"),
            (leader, "add", "add_voter_request", None),
        ]:
            before = len(_lines(cluster, node_id, event))
            _ask(cluster, node_id, source, what)
            lines = _wait_line(cluster, node_id, event)
            assert len(lines) == before + 1, (what, node_id, lines)
            line = lines[-1]
            assert "level=INFO" in line
            assert re.search(rf"peer={re.escape(source)}:\d+ ", line + " "), line
            assert "result=" in line, line
            if result is not None:
                assert f"result={result}" in line, line
        for name in ("remove", "add", "update"):  # what was asked is named too
            line = _lines(cluster, leader, f"{name}_voter_request")[-1]
            assert "directory_id=01234567-89ab-cdef-0123-456789abcdef" in line \
                or "directory_id=ASNFZ4mrze8BI0VniavN7w" in line, line
        assert "features=kraft.version=1" in _lines(cluster, leader, "update_features_request")[-1]
        # nothing changed: the voters are the three they were
        status = cluster.status(leader)
        assert status is not None
        assert sorted(v["id"] for v in status["voters"]) == sorted(cluster.nodes)
    finally:
        cluster.close()


def test_an_export_is_one_info_line_naming_the_peer(tmp_path: Path) -> None:
    prefix = address_prefix()
    cluster = LocalCluster(tmp_path, voters=1, properties=FAST_TIMEOUTS, address_prefix=prefix)
    try:
        cluster.start_all()
        leader = cluster.wait_for_leader()
        assert cluster.put("k", b"v").status == 200
        source = prefix + "200"
        node = cluster.nodes[leader]
        conn = http.client.HTTPConnection(node.host, node.http_port, timeout=30,
                                          source_address=(source, 0))
        try:
            conn.request("GET", "/v1/export")
            resp = conn.getresponse()
            assert resp.status == 200 and len(resp.read()) > 0
        finally:
            conn.close()
        lines = _wait_line(cluster, leader, "exported")
        assert len(lines) == 1 and "level=INFO" in lines[0]
        assert f"peer={source} " in lines[0] + " ", lines[0]
    finally:
        cluster.close()
