"""A quorum of three `kraft run` processes over mTLS with the authorizer on (docs/security.md):
it forms and commits; clients without a certificate the CA issued (none, another CA's, an
expired one, plaintext) are refused; a rotated certificate is served to the next connection
without a restart; and the attacks of a hostile peer — with no certificate, with a
Describe-only certificate, and with another node's certificate claiming to be the victim —
are each refused, leaving the voter set and the epoch as they were, and forged Fetches
cannot make the leader acknowledge a write while its followers are frozen.

One quorum and one PKI for the module (certificates by `cryptography`, tests/support/pki.py);
the hostile client is tests/support/tls_wire.py, in this process, over its own sockets."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kraft.admin import QuorumClient
from kraft.admin.errors import AdminError
from kraft.cli.local import LocalCluster
from tests.node.conftest import FAST_TIMEOUTS, address_prefix
from tests.support import tls_wire as tw
from tests.support.pki import Issued, TestCA

pytest.importorskip("cryptography")

AUTHZ_FAILED = 31
ORG = "kraft-test"


def principal(cn: str) -> str:
    return f"User:CN={cn},O={ORG}"


@dataclass
class World:
    cluster: LocalCluster
    ca: TestCA
    certs: dict[str, Issued]
    other_ca: TestCA
    expired: Issued
    foreign: Issued

    def ctx(self, who: str | None) -> ssl.SSLContext:
        """A client context trusting the cluster CA, presenting `who`'s certificate."""
        return tw.client_context(self.ca.truststore,
                                 None if who is None else self.certs[who].keystore)

    def wire(self, node: int, who: str | None) -> tw.Wire:
        n = self.cluster.nodes[node]
        return tw.Wire(n.host, n.port, self.ctx(who))

    def describe(self) -> Any:
        """DescribeQuorum's partition, asked of the leader as the operator."""
        leader = self.cluster.wait_for_leader(30)
        with self.wire(leader, "operator") as conn:
            data = conn.call(*tw.describe_quorum())
        assert data.error_code == 0, data
        return data.topics[0].partitions[0]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("tls-quorum")
    prefix = address_prefix()
    ca = TestCA(base / "pki")
    nodes_props = {
        "listener.security.protocol.map": "CONTROLLER:SSL",
        "listener.name.controller.ssl.truststore.location": str(ca.truststore),
        "listener.name.controller.ssl.client.auth": "required",
        "kraft.authorizer.cluster.action.principals": ";".join(
            principal(f"node-{i}") for i in (1, 2, 3)),
        "kraft.authorizer.describe.principals": ";".join(
            [principal("viewer"), *(principal(f"node-{i}") for i in (1, 2, 3))]),
        "kraft.authorizer.alter.principals": principal("operator"),
        "super.users": principal("admin"),
    }
    c = LocalCluster(base / "cluster", 3, properties={**FAST_TIMEOUTS, **nodes_props},
                     address_prefix=prefix)
    certs: dict[str, Issued] = {}
    for nid, node in c.nodes.items():
        certs[f"node-{nid}"] = ca.issue(f"node-{nid}.pem", f"node-{nid}", ips=(node.host,),
                                        dns=(), org=ORG)
        node.overrides["listener.name.controller.ssl.keystore.location"] = \
            str(certs[f"node-{nid}"].keystore)
    for who in ("operator", "viewer", "admin"):
        certs[who] = ca.issue(f"{who}.pem", who, ips=(), dns=(), org=ORG)
    other = TestCA(base / "other-pki", "other-ca")
    world = World(c, ca, certs, other,
                  expired=ca.issue("expired.pem", "operator", ips=(), dns=(), org=ORG,
                                   expired=True),
                  foreign=other.issue("foreign.pem", "operator", ips=(), dns=(), org=ORG))
    try:
        c.start_all()
        c.wait_for_leader(60)
        for nid in c.nodes:
            c.wait_ready(nid, 60)
        yield world
    finally:
        c.close()


def refused(make: Any) -> bool:
    """The connection or its first request fails (a TLS alert, a reset, a close)."""
    try:
        with make() as conn:
            conn.call(*tw.api_versions())
    except (OSError, ConnectionError):
        return True
    return False


def test_the_quorum_forms_and_commits_over_mtls(world: World) -> None:
    c = world.cluster
    for i in range(3):
        assert c.put(f"tls{i}", f"v{i}".encode()).status == 200
    assert c.get("tls2").body == b"v2"
    part = world.describe()
    assert sorted(v.replica_id for v in part.current_voters) == [1, 2, 3]
    for nid, node in c.nodes.items():  # the peers' links are TLS: nothing speaks plaintext
        text = node.log_path.read_text(errors="replace")
        assert "event=request_unauthorized" not in text, (nid, text[-2000:])
    # the node's own certificate is what it serves, checked against the address dialled
    with world.wire(1, "viewer") as conn:
        cert = conn.peer_certificate()
        assert (("commonName", "node-1"),) in cert["subject"]


def test_clients_without_a_certificate_the_ca_issued_are_refused(world: World) -> None:
    n = world.cluster.nodes[1]
    ca = world.ca.truststore
    assert not refused(lambda: tw.Wire(n.host, n.port, world.ctx("viewer")))  # the control
    assert refused(lambda: tw.Wire(n.host, n.port, None))  # plaintext
    assert refused(lambda: tw.Wire(n.host, n.port, tw.client_context(ca)))  # no certificate
    assert refused(lambda: tw.Wire(n.host, n.port,
                                   tw.client_context(ca, world.foreign.keystore)))
    assert refused(lambda: tw.Wire(n.host, n.port,
                                   tw.client_context(ca, world.expired.keystore)))
    # and a client does not trust a node it cannot verify (the node's CA unknown to it)
    assert refused(lambda: tw.Wire(n.host, n.port, tw.client_context(
        world.other_ca.truststore, world.certs["viewer"].keystore)))


def test_describe_needs_describe_and_the_cli_takes_command_config(world: World,
                                                                    tmp_path: Path) -> None:
    leader = world.cluster.wait_for_leader(30)
    with world.wire(leader, "viewer") as conn:
        assert conn.call(*tw.describe_quorum()).error_code == 0
        assert conn.call(*tw.update_features(1)).error_code == AUTHZ_FAILED
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SSL\n"
                     f"ssl.truststore.location={world.ca.truststore}\n"
                     f"ssl.keystore.location={world.certs['viewer'].keystore}\n")
    n = world.cluster.nodes[leader]
    done = subprocess.run([sys.executable, "-m", "kraft", "quorum", "--bootstrap-controller",
                           f"{n.host}:{n.port}", "--command-config", str(props), "describe",
                           "--status"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"LeaderId:               {leader}" in done.stdout

    async def describe() -> int:
        async with QuorumClient([(n.host, n.port)], command_config=props) as client:
            info = await client.describe_quorum()
        async with QuorumClient([(n.host, n.port)], tls=tw_plain_ctx(world)) as client:
            with pytest.raises(AdminError):  # no certificate: refused
                await client.describe_quorum()
        return info.leader_id

    assert asyncio.run(describe()) == leader


def tw_plain_ctx(world: World) -> Any:
    """A client context that trusts the cluster's CA and presents no certificate."""
    ctx = tw.client_context(world.ca.truststore)
    return lambda: ctx


def test_every_attack_is_refused_and_changes_nothing(world: World) -> None:
    c = world.cluster
    before = world.describe()
    voters = {v.replica_id: v.replica_directory_id for v in before.current_voters}
    leader, epoch = before.leader_id, before.leader_epoch
    victim = next(i for i in sorted(voters) if i != leader)
    impostor = next(i for i in sorted(voters) if i not in (leader, victim))
    cid = c.cluster_id
    attacks = {
        "remove_voter": tw.remove_voter(cid, victim, voters[victim]),
        "add_rogue_voter": tw.add_voter(cid, 99, "127.0.0.99", 9),
        "update_voter_redirect": tw.update_voter(cid, epoch, victim, voters[victim],
                                                 "127.0.0.99", 9),
        "update_features": tw.update_features(1),
        "begin_quorum_epoch": tw.begin_epoch(cid, epoch + 1, victim, leader),
        "end_quorum_epoch": tw.end_epoch(cid, epoch, victim),
        "vote": tw.vote(cid, epoch + 1, victim, 1 << 40, epoch),
        "fetch_as_voter": tw.fetch(cid, victim, voters[victim], epoch, 0, 0),
    }
    # no certificate: no TLS session at all, whatever the request
    n = c.nodes[leader]
    for name, (api, version, body) in attacks.items():
        try:
            with tw.Wire(n.host, n.port, tw.client_context(world.ca.truststore)) as conn:
                answer = conn.call(api, version, body)
        except (OSError, ConnectionError):
            continue
        raise AssertionError(f"{name} without a certificate was answered: {answer}")
    for who in ("viewer", f"node-{impostor}"):
        for target in (leader, victim):
            with world.wire(target, who) as conn:
                for name, (api, version, body) in attacks.items():
                    answer = conn.call(api, version, body)
                    assert answer.error_code == AUTHZ_FAILED, (who, target, name, answer)
    after = world.describe()
    assert (after.leader_id, after.leader_epoch) == (leader, epoch)
    assert {v.replica_id: v.replica_directory_id for v in after.current_voters} == voters
    assert not any(o.replica_id == 99 for o in after.observers)
    # refusals are logged once per connection and api, with the principal
    text = c.nodes[leader].log_path.read_text(errors="replace")
    line = next(x for x in text.splitlines() if "api=RemoveRaftVoter" in x
                and "event=request_unauthorized" in x and "viewer" in x)
    assert "principal='User:CN=viewer,O=kraft-test'" in line and "operation=Alter" in line
    # the operator's certificate may (the control: the same request is served)
    with world.wire(leader, "operator") as conn:
        answer = conn.call(*tw.update_features(1))
        assert answer.error_code == 0, answer
    # principals that are not nodes cannot Fetch as a voter: the operator (no ClusterAction)
    # nor a super user (it names no node), though the super user may describe
    for who in ("operator", "admin"):
        with world.wire(leader, who) as conn:
            answer = conn.call(*attacks["fetch_as_voter"])
            assert answer.error_code == AUTHZ_FAILED, (who, answer)
    with world.wire(leader, "admin") as conn:
        assert conn.call(*tw.describe_quorum()).error_code == 0
    assert c.put("after-attacks", b"ok").status == 200


def test_a_rotated_certificate_is_served_to_the_next_connection(world: World) -> None:
    c = world.cluster
    node = c.nodes[2]
    with world.wire(2, "viewer") as conn:
        old_serial = conn.peer_certificate()["serialNumber"]
        new = world.ca.issue("node-2.pem", "node-2", ips=(node.host,), dns=(), org=ORG)
        assert conn.call(*tw.api_versions()).error_code == 0  # the open one goes on
    assert new.cert.serial_number != int(old_serial, 16)
    with world.wire(2, "viewer") as conn:
        assert int(conn.peer_certificate()["serialNumber"], 16) == new.cert.serial_number
    assert node.alive
    assert c.put("after-rotation", b"ok").status == 200


def test_forged_fetches_ack_nothing_while_the_followers_are_frozen(world: World) -> None:
    """Last: freezing the followers may depose the leader (check-quorum)."""
    c = world.cluster
    part = world.describe()
    voters = {v.replica_id: v.replica_directory_id for v in part.current_voters}
    leader, epoch = part.leader_id, part.leader_epoch
    end = next(v.log_end_offset for v in part.current_voters if v.replica_id == leader)
    followers = [i for i in sorted(voters) if i != leader]
    victim, impostor = followers
    result: dict[str, Any] = {}

    def put() -> None:
        try:
            result["status"] = c.put("frozen", b"x", via=leader, timeout=3).status
        except OSError as exc:
            result["error"] = repr(exc)

    answers = []
    for f in followers:
        os.kill(c.nodes[f].process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        writer = threading.Thread(target=put)
        writer.start()
        conns = [world.wire(leader, "viewer"), world.wire(leader, f"node-{impostor}")]
        deadline = time.monotonic() + 2.5
        offset = end
        while time.monotonic() < deadline:
            for conn in conns:
                for at in (offset, offset + 1, offset + 2):  # as far as the write goes
                    answers.append(conn.call(*tw.fetch(c.cluster_id, victim, voters[victim],
                                                       epoch, at, epoch)).error_code)
            time.sleep(0.05)
        for conn in conns:
            conn.close()
        writer.join(10)
        assert not writer.is_alive()
        assert result.get("status") != 200, result  # nothing acknowledged while frozen
    finally:
        for f in followers:
            os.kill(c.nodes[f].process.pid, signal.SIGCONT)  # type: ignore[union-attr]
    assert answers and set(answers) == {AUTHZ_FAILED}
    c.wait_for_leader(30)
    deadline = time.monotonic() + 30
    while True:  # the quorum comes back and commits again
        try:
            if c.put("thawed", b"ok", timeout=5).status == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "no commit after the followers came back"
        time.sleep(0.2)
