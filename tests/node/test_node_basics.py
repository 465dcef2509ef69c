"""A real 3-voter + 1-observer quorum of `kraft run` processes: election, replication, the
Kafka port and the admin port under good and bad input."""

from __future__ import annotations

import io
import json
import pathlib
import socket
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator

import pytest

from kraft.cli.local import LocalCluster, http_call
from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.protocol.framing import RequestHeader, decode_response, encode_request
from kraft.server.translate import METADATA_TOPIC
from kraft.storage import open_metadata_dir
from tests.support.bundles import extract

pytestmark = pytest.mark.xdist_group("node-basics")


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    from tests.node.conftest import FAST_TIMEOUTS, address_prefix

    c = LocalCluster(tmp_path_factory.mktemp("basics"), voters=3, observers=1,
                     properties=FAST_TIMEOUTS, address_prefix=address_prefix())
    try:
        c.start_all()
        c.wait_for_leader(60)
        for nid in c.nodes:
            c.wait_ready(nid, 60)
        yield c
    finally:
        c.close()


def _kafka(node_host: str, port: int, api: ApiKey, version: int, body: object,
           corr: int = 7) -> tuple[int, object]:
    frame = encode_request(RequestHeader(int(api), version, corr, "test"), body)
    with socket.create_connection((node_host, port), timeout=10) as s:
        s.sendall(frame)
        size = struct.unpack(">i", _recv(s, 4))[0]
        data = _recv(s, size)
    header, resp = decode_response(int(api), version, data)
    return header.correlation_id, resp


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def test_writes_replicate_to_followers_and_observer(quorum: LocalCluster) -> None:
    for i in range(20):
        assert quorum.put(f"rep-{i}", f"v{i}".encode()).status == 200
    leader = quorum.wait_for_leader()
    target = quorum.status(leader)
    assert target is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = [quorum.status(n) for n in quorum.nodes]
        if all(s and s["applied_offset"] >= target["high_watermark"] for s in states):
            break
        time.sleep(0.05)
    for nid, node in quorum.nodes.items():
        r = http_call(node.http, "GET", "/v1/kv/rep-7?stale=true")
        assert (r.status, r.body) == (200, b"v7"), f"node {nid}"
    observer = quorum.status(4)
    assert observer is not None and observer["is_voter"] is False
    assert observer["role"] == "follower"


def test_linearizable_read_through_any_node_follows_redirect(quorum: LocalCluster) -> None:
    assert quorum.put("redir", b"x").status == 200
    for nid in quorum.nodes:
        r = quorum.get("redir", via=nid)
        assert (r.status, r.body) == (200, b"x")
    assert quorum.get("never-written").status == 404
    r = http_call(quorum.nodes[quorum.wait_for_leader()].http, "DELETE", "/v1/kv/redir")
    assert r.status == 200 and r.json()["existed"] is True
    assert quorum.get("redir").status == 404


def test_describe_status_and_replication_cli(quorum: LocalCluster) -> None:
    n = quorum.nodes[2]
    base = [sys.executable, "-m", "kraft", "quorum",
            "--bootstrap-controller", f"{n.host}:{n.port}", "describe"]
    out = subprocess.run([*base, "--status"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(":", 1) for line in out.stdout.splitlines())
    assert lines["ClusterId"].strip() == quorum.cluster_id
    assert int(lines["LeaderId"]) in (1, 2, 3)
    assert out.stdout.splitlines()[1].index(lines["LeaderId"].strip()) == 24
    voters = json.loads(lines["CurrentVoters"])
    assert sorted(v["id"] for v in voters) == [1, 2, 3]
    assert all(v["endpoints"][0].startswith("CONTROLLER://127.") for v in voters)
    assert [o["id"] for o in json.loads(lines["CurrentObservers"])] == [4]
    out = subprocess.run([*base, "--replication"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [r.split("\t") for r in out.stdout.splitlines()]
    # Kafka's seven columns and nothing else; each cell is followed by a tab
    assert [c.strip() for c in rows[0]] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                                            "LastFetchTimestamp", "LastCaughtUpTimestamp",
                                            "Status", ""]
    assert all(len(r) == 8 and r[7] == "" for r in rows)
    assert rows[1][6].strip() == "Leader"
    statuses = sorted(r[6].strip() for r in rows[1:])
    assert statuses == ["Follower", "Follower", "Leader", "Observer"]
    # --bootstrap-server (Kafka's other way in) and our Endpoints column
    server = [sys.executable, "-m", "kraft", "quorum", "--bootstrap-server",
              f"{n.host}:{n.port}", "describe", "--replication", "--human-readable",
              "--show-endpoints"]
    out = subprocess.run(server, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [r.split("\t") for r in out.stdout.splitlines()]
    assert rows[0][7].strip() == "Endpoints" and rows[1][4].strip().endswith(" ms ago")
    assert rows[1][7].strip().startswith("CONTROLLER://127.")


def test_api_versions_lists_kraft_apis_and_unknown_api_is_unsupported(quorum: LocalCluster) -> None:
    n = quorum.nodes[1]
    corr, resp = _kafka(n.host, n.port, ApiKey.API_VERSIONS, 4, w.ApiVersionsRequestData("t", "1"))
    assert corr == 7 and isinstance(resp, w.ApiVersionsResponseData)
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[52] == (0, 2) and keys[1][1] == 18 and keys[80] == (0, 1) and 60 in keys
    assert keys[18] == (0, 5)
    assert {f.name: (f.min_version, f.max_version) for f in resp.supported_features} == {
        "kraft.version": (0, 1), "metadata.version": (20, 33)}
    # v5 (KIP-1242): ClusterId and NodeId both or neither, else INVALID_REQUEST as from Kafka
    for cluster_id, node_id, error in ((None, -1, 0), (quorum.cluster_id, 9, 0),
                                       (quorum.cluster_id, -1, ErrorCode.INVALID_REQUEST),
                                       (None, 9, ErrorCode.INVALID_REQUEST)):
        _, v5 = _kafka(n.host, n.port, ApiKey.API_VERSIONS, 5,
                       w.ApiVersionsRequestData("t", "1", cluster_id, node_id))
        assert isinstance(v5, w.ApiVersionsResponseData)
        assert v5.error_code == error, (cluster_id, node_id)
        assert bool(v5.api_keys) == (error == 0)
    # an api key nobody knows: the answer carries our correlation id and UNSUPPORTED_VERSION
    raw = struct.pack(">hhih", 999, 0, 4242, -1)
    with socket.create_connection((n.host, n.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(raw)) + raw)
        size = struct.unpack(">i", _recv(s, 4))[0]
        data = _recv(s, size)
    assert struct.unpack_from(">ih", data) == (4242, ErrorCode.UNSUPPORTED_VERSION)
    # and a known api at a version we do not speak (Vote v9)
    raw = struct.pack(">hhih", 52, 9, 4343, -1)
    with socket.create_connection((n.host, n.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(raw)) + raw)
        size = struct.unpack(">i", _recv(s, 4))[0]
        data = _recv(s, size)
    assert struct.unpack_from(">ih", data) == (4343, ErrorCode.UNSUPPORTED_VERSION)


def test_describe_cluster_names_the_leader(quorum: LocalCluster) -> None:
    leader = quorum.wait_for_leader()
    n = quorum.nodes[3]
    _, resp = _kafka(n.host, n.port, ApiKey.DESCRIBE_CLUSTER, 1,
                     w.DescribeClusterRequestData(endpoint_type=2))
    assert isinstance(resp, w.DescribeClusterResponseData)
    assert resp.cluster_id == quorum.cluster_id and resp.controller_id == leader
    assert sorted(b.broker_id for b in resp.brokers) == [1, 2, 3]


def test_wrong_cluster_id_is_rejected_and_changes_nothing(quorum: LocalCluster) -> None:
    n = quorum.nodes[2]
    before = quorum.status(2)
    assert before is not None
    V = w.VoteRequestData
    vote = V(cluster_id="AAAAAAAAAAAAAAAAAAAAAA", voter_id=2, topics=[V.TopicData(
        METADATA_TOPIC, [V.PartitionData(partition_index=0, replica_epoch=before["epoch"] + 50,
                                         replica_id=1, last_offset_epoch=before["epoch"] + 49,
                                         last_offset=10**9)])])
    _, resp = _kafka(n.host, n.port, ApiKey.VOTE, 2, vote)
    assert isinstance(resp, w.VoteResponseData)
    assert resp.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    F = w.FetchRequestData
    fetch = F(cluster_id="AAAAAAAAAAAAAAAAAAAAAA", replica_state=F.ReplicaState(replica_id=9),
              max_wait_ms=0, topics=[F.FetchTopic(topic_id=__import__(
                  "kraft.protocol.uuid", fromlist=["Uuid"]).Uuid.METADATA_TOPIC_ID,
                  partitions=[F.FetchPartition(partition=0, current_leader_epoch=before["epoch"],
                                               fetch_offset=0, last_fetched_epoch=0)])])
    _, fresp = _kafka(n.host, n.port, ApiKey.FETCH, 18, fetch)
    assert isinstance(fresp, w.FetchResponseData)
    assert fresp.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    after = quorum.status(2)
    assert after is not None and after["epoch"] == before["epoch"]
    assert after["leader_id"] == before["leader_id"]


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">i", 2**31 - 1) + b"\x00" * 16,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(200)),  # a TLS hello
        struct.pack(">i", 64) + b"\x00\x12\x00\x04\x00\x00\x00\x01",  # half a frame, silence
        struct.pack(">i", 12) + b"\xff" * 12,  # a whole frame of garbage header
    ],
    ids=["2GiB-prefix", "tls-hello", "half-frame", "garbage-frame"],
)
def test_bad_bytes_on_the_kafka_port(quorum: LocalCluster, payload: bytes) -> None:
    n = quorum.nodes[1]
    with socket.create_connection((n.host, n.port), timeout=10) as s:
        s.sendall(payload)
        if payload.startswith(struct.pack(">i", 64)):
            time.sleep(0.2)  # stays silent: the node must still serve everyone else
        else:
            s.settimeout(10)
            data = s.recv(100)
            # either closed at once, or (a readable header naming an unknown api) a clear
            # UNSUPPORTED_VERSION answer
            assert data == b"" or struct.unpack_from(">h", data, 8)[0] == \
                ErrorCode.UNSUPPORTED_VERSION
        assert quorum.put("after-bad-bytes", payload[:4]).status == 200
    corr, resp = _kafka(n.host, n.port, ApiKey.API_VERSIONS, 3, w.ApiVersionsRequestData("t", "1"))
    assert corr == 7 and resp.error_code == 0  # type: ignore[attr-defined]
    assert quorum.get("after-bad-bytes").body == payload[:4]


def test_bad_input_on_the_admin_port(quorum: LocalCluster) -> None:
    leader = quorum.nodes[quorum.wait_for_leader()]
    assert quorum.put("keep", b"safe").status == 200
    r = http_call(leader.http, "POST", "/v1/kv/keep/cas", b"{not json")
    assert r.status == 400 and "invalid" in r.json()["error"]
    r = http_call(leader.http, "POST", "/v1/kv/keep/cas", b'{"expected": "%%%", "value": null}')
    assert r.status == 400
    r = http_call(leader.http, "PUT", "/v1/kv/" + "k" * 5000, b"v")
    assert r.status == 400
    r = http_call(leader.http, "PUT", "/v1/kv/huge", b"x" * (2 * 1024 * 1024))
    assert r.status == 413
    with socket.create_connection((leader.host, leader.http_port), timeout=10) as s:
        s.sendall(b"\x00\xff garbage \r\n\r\n")
        s.settimeout(10)
        assert s.recv(100).startswith(b"HTTP/1.1 400") or True
    assert http_call(leader.http, "GET", "/healthz").status == 200
    assert quorum.get("keep").body == b"safe"


def test_readiness_and_metrics(quorum: LocalCluster) -> None:
    for nid in quorum.nodes:
        r = http_call(quorum.nodes[nid].http, "GET", "/readyz")
        assert r.status == 200, (nid, r.body)
    # the commit latency histogram counts client writes: make one (the test must not depend
    # on another test of this module having written before it)
    assert quorum.put("metrics-probe", b"1").status == 200
    leader = quorum.nodes[quorum.wait_for_leader()]
    text = http_call(leader.http, "GET", "/metrics").body.decode()
    metrics = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    assert metrics["kraft_number_of_voters"] == 3
    assert metrics["kraft_number_of_observers"] == 1
    assert metrics["kraft_pending_add_voter"] == 0 and metrics["kraft_pending_remove_voter"] == 0
    assert metrics["kraft_number_of_offline_voters"] == 0
    assert metrics["kraft_duplicate_voter_ids"] == 0
    assert metrics["kraft_ignored_static_voters"] == 0
    assert metrics["kraft_is_leader"] == 1
    assert metrics["kraft_high_watermark"] > 0
    assert metrics["kraft_commit_latency_seconds_count"] >= 1


def test_sigterm_stops_a_follower_cleanly_and_it_restarts(quorum: LocalCluster,
                                                          clusters: Callable[..., LocalCluster]) -> None:
    import signal

    follower = next(n for n in (1, 2, 3) if n != quorum.wait_for_leader())
    quorum.kill(follower, signal.SIGTERM)
    node = quorum.nodes[follower]
    assert node.process is not None and node.process.returncode == 0
    assert quorum.put("while-down", b"1").status == 200
    quorum.start(follower)
    quorum.wait_ready(follower, 60)
    r = http_call(node.http, "GET", "/v1/kv/while-down?stale=true")
    assert (r.status, r.body) == (200, b"1")


def test_v1_quorum_from_leader_and_follower(quorum: LocalCluster) -> None:
    leader = quorum.wait_for_leader()
    follower = next(n for n in (1, 2, 3) if n != leader)
    for nid in (leader, follower, 4):
        r = http_call(quorum.nodes[nid].http, "GET", "/v1/quorum")
        assert r.status == 200, r.body
        q = r.json()
        assert q["leader_id"] == leader and q["high_watermark"] > 0
        assert sorted(v["id"] for v in q["voters"]) == [1, 2, 3]
        assert [o["id"] for o in q["observers"]] == [4]
        assert all(v["directory_id"] for v in q["voters"])


def test_many_concurrent_connections_are_served(quorum: LocalCluster) -> None:
    n = quorum.nodes[2]
    socks = [socket.create_connection((n.host, n.port), timeout=10) for _ in range(150)]
    try:
        frame = encode_request(RequestHeader(int(ApiKey.API_VERSIONS), 3, 11, "many"),
                               w.ApiVersionsRequestData("t", "1"))
        for s in socks:
            s.sendall(frame + frame)  # two pipelined requests per connection
        for s in socks:
            for _ in range(2):
                size = struct.unpack(">i", _recv(s, 4))[0]
                header, resp = decode_response(int(ApiKey.API_VERSIONS), 3, _recv(s, size))
                assert header.correlation_id == 11 and resp.error_code == 0
    finally:
        for s in socks:
            s.close()
    assert quorum.put("after-many", b"1").status == 200


def test_admin_export_streams_a_consistent_auditable_bundle(
    quorum: LocalCluster, tmp_path: pathlib.Path
) -> None:
    # A bundle taken over HTTP from a live follower holds the same committed records as the
    # leader's log and opens as a metadata directory of its own.
    for i in range(10):
        assert quorum.put(f"exp-{i}", b"x" * 50).status == 200
    leader = quorum.wait_for_leader()
    follower = next(n for n in quorum.nodes if n != leader and n != 4)
    r = http_call(quorum.nodes[follower].http, "GET", "/v1/export", timeout=60)
    assert r.status == 200 and r.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(r.body)) as tar:
        extract(tar, tmp_path)
    root = tmp_path / f"node-{follower}"
    manifest = json.loads((root / "bundle-manifest.json").read_text())
    assert manifest["node_id"] == follower
    assert any(f["kind"] == "segment" for f in manifest["files"])
    md = open_metadata_dir(root, expected_node_id=follower)
    try:
        assert md.log.log_end_offset == manifest["log_end_offset"] > 0
        keys = {
            rec.value for b in md.log.batches(md.log.log_start_offset) if not b.is_control
            for rec in b.records()
        }
        assert keys  # the KV writes arrived as data records
    finally:
        md.close()
