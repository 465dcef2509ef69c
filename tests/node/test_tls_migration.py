"""Enabling TLS on a running plaintext quorum, and turning it off, as rolling restarts with
no lost writes (docs/security.md, "Moving a running quorum between PLAINTEXT and TLS").

Three `kraft run` processes on loopback are moved from PLAINTEXT to mTLS with the authorizer
on, then back, the way Kafka's controllers are: by rolls of one node at a time, the leader
last, each roll a change of `listeners` and `controller.listener.names` (the first of those
names is the listener a node dials its peers with):

  1. a second controller listener, CONTROLLER_SSL, beside CONTROLLER: every node accepts both
     and still dials plaintext;
  2. CONTROLLER_SSL first: every node dials TLS and still accepts plaintext from the nodes not
     rolled yet (a static quorum's `controller.quorum.voters` names the TLS ports now);
  3. CONTROLLER dropped, and the authorizer on (a plaintext peer is User:ANONYMOUS).

The way back walks the same layouts in reverse (the authorizer off at its first roll). A
write workload runs throughout; its history must be linearizable with a final read of every
key (no acknowledged write lost), and a leader must be elected after every restart. A dynamic
quorum (KIP-853) must also publish every node's new endpoints (UpdateRaftVoter) before the
roll that dials them; a static one dials the addresses of its `controller.quorum.voters`.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from kraft.admin import QuorumClient
from kraft.cli.local import LocalCluster, http_call
from tests.node.test_failover import _final_reads
from tests.support.kvclient import KVWorkload
from tests.support.linearizability import check_history
from tests.support.pki import TestCA

pytest.importorskip("cryptography")

PLAIN = "CONTROLLER"
TLS = "CONTROLLER_SSL"
PROTOCOL = {PLAIN: "PLAINTEXT", TLS: "SSL"}
ORG = "kraft-test"


@dataclass(frozen=True)
class Layout:
    """The controller listeners of one step, in the order of controller.listener.names."""

    names: tuple[str, ...]
    authorizer: bool = False


PLAINTEXT_ONLY = Layout((PLAIN,))
BOTH_DIAL_PLAIN = Layout((PLAIN, TLS))
BOTH_DIAL_TLS = Layout((TLS, PLAIN))
TLS_ONLY = Layout((TLS,), authorizer=True)

TO_TLS = (BOTH_DIAL_PLAIN, BOTH_DIAL_TLS, TLS_ONLY)
TO_PLAINTEXT = (BOTH_DIAL_TLS, BOTH_DIAL_PLAIN, PLAINTEXT_ONLY)
"""The three rolls each way: the way back walks the same layouts in reverse and turns the
authorizer off at its first roll (from then on a peer may dial plaintext)."""


class Migration:
    """One LocalCluster, its second port per node and its PKI; rolls it to a layout."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.static = cluster.static
        self.ca = TestCA(cluster.base / "pki")
        self.ports = {nid: {PLAIN: node.port, TLS: cluster.extra_port(nid)}
                      for nid, node in cluster.nodes.items()}
        self.keystores = {
            nid: self.ca.issue(f"node-{nid}.pem", f"node-{nid}", ips=(node.host,), dns=(),
                               org=ORG).keystore
            for nid, node in cluster.nodes.items()}
        self.layout = PLAINTEXT_ONLY
        self.restarts = 0
        self.elections: list[tuple[int, int]] = []
        """(leader, epoch) seen after every restart."""

    def properties(self, nid: int, layout: Layout) -> dict[str, str]:
        """Node `nid`'s server.properties overrides for `layout`: the three keys a hand-run
        node changes at each roll, and the peers' addresses on the listener it dials."""
        c = self.cluster
        host = c.nodes[nid].host
        out = {
            "listeners": ",".join(f"{n}://{host}:{self.ports[nid][n]}" for n in layout.names),
            "controller.listener.names": ",".join(layout.names),
            "listener.security.protocol.map": ",".join(f"{n}:{PROTOCOL[n]}"
                                                       for n in layout.names),
        }
        if TLS in layout.names:
            prefix = f"listener.name.{TLS.lower()}."
            out[prefix + "ssl.keystore.location"] = str(self.keystores[nid])
            out[prefix + "ssl.truststore.location"] = str(self.ca.truststore)
            out[prefix + "ssl.client.auth"] = "required"
        dial = layout.names[0]
        voters = {i: (c.nodes[i].host, self.ports[i][dial]) for i in c.initial_voters}
        if self.static:
            out["controller.quorum.voters"] = ",".join(f"{i}@{h}:{p}"
                                                       for i, (h, p) in voters.items())
        else:
            out["controller.quorum.bootstrap.servers"] = ",".join(f"{h}:{p}"
                                                                  for h, p in voters.values())
        if layout.authorizer:
            nodes = ";".join(f"User:CN=node-{i},O={ORG}" for i in c.nodes)
            out["kraft.authorizer.cluster.action.principals"] = nodes
            out["kraft.authorizer.describe.principals"] = nodes
        return out

    def roll(self, layout: Layout) -> None:
        """Restart every node with `layout`, one at a time, the leader last; each must be
        ready, and a leader elected, before the next goes down."""
        c = self.cluster
        leader = c.wait_for_leader(30)
        order = [n for n in sorted(c.nodes) if n != leader] + [leader]
        for nid in order:
            c.kill(nid, signal.SIGTERM)
            c.nodes[nid].overrides = self.properties(nid, layout)
            c.start(nid)
            c.wait_ready(nid, 30)
            now = c.wait_for_leader(30)
            status = c.status(now)
            self.elections.append((now, status["epoch"] if status else -1))
            self.restarts += 1
        self.layout = layout
        if not self.static:
            self.wait_endpoints_published(set(layout.names))

    def wait_endpoints_published(self, names: set[str], timeout: float = 30) -> None:
        """Until the leader's voters set holds exactly `names` for every voter (each node's
        UpdateRaftVoter committed): the next roll dials the first of them."""
        c = self.cluster
        deadline = time.monotonic() + timeout
        seen: object = None
        while time.monotonic() < deadline:
            leader = c.leader()
            status = c.status(leader) if leader is not None else None
            if status is not None:
                seen = {v["id"]: {e.split("://")[0] for e in v["endpoints"]}
                        for v in status["voters"]}
                if all(found == names for found in seen.values()):  # type: ignore[union-attr]
                    return
            time.sleep(0.1)
        raise AssertionError(f"the voters set never held {sorted(names)} for every voter: "
                             f"{seen}")

    def peer_connections(self, nid: int) -> dict[str, float]:
        """`kraft_connections` of node `nid` by listener."""
        r = http_call(self.cluster.nodes[nid].http, "GET", "/metrics", timeout=5)
        assert r.status == 200
        return {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^kraft_connections\{listener="([^"]+)"\} (\S+)$', r.body.decode(), re.M)}


def _plaintext_answered(host: str, port: int) -> bool:
    """A plaintext ApiVersions on (host, port) gets an answer."""
    frame = b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test"  # ApiVersions v0, client "test"
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.sendall(len(frame).to_bytes(4, "big") + frame)
            return len(s.recv(4)) == 4
    except OSError:
        return False


def _tls_refused_without_certificate(m: Migration, nid: int) -> bool:
    """A TLS client trusting the CA but presenting no certificate is refused (mTLS)."""
    ctx = ssl.create_default_context(cafile=str(m.ca.truststore))
    host = m.cluster.nodes[nid].host
    try:
        with socket.create_connection((host, m.ports[nid][TLS]), timeout=3) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as s:
            s.sendall(b"\x00\x00\x00\x08\x00\x12\x00\x00\x00\x00\x00\x08")
            return s.recv(4) == b""
    except (OSError, ssl.SSLError):
        return True


def _admin_sees(m: Migration, name: str) -> tuple[set[int], int]:
    """Through listener `name` of every node: the controller ports DescribeCluster names,
    and the leader DescribeQuorum (sent to the leader at the port DescribeCluster named)."""
    c = m.cluster
    tls = None
    if name == TLS:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cafile=str(m.ca.truststore))
        ctx.load_cert_chain(str(m.keystores[1]))  # a node's: it holds Describe

        def tls() -> ssl.SSLContext:
            return ctx

    async def ask() -> tuple[set[int], int]:
        bootstrap = [(n.host, m.ports[i][name]) for i, n in c.nodes.items()]
        async with QuorumClient(bootstrap, timeout_s=5, tls=tls) as admin:
            info = await admin.describe_cluster()
            quorum = await admin.describe_quorum()
        return {ctl.port for ctl in info.controllers}, quorum.leader_id

    return asyncio.run(ask())


def _check_listeners(m: Migration) -> None:
    """What the layout just rolled to means on the wire."""
    layout = m.layout
    # an admin client on either listener is sent to that listener's ports (a static quorum
    # knows its voters' addresses on the dialled listener only: controller.quorum.voters)
    for name in layout.names[:1] if m.static else layout.names:
        ports, leader_id = _admin_sees(m, name)
        assert ports == {m.ports[i][name] for i in m.cluster.nodes}, (name, ports)
        assert leader_id in m.cluster.nodes
    for nid, node in m.cluster.nodes.items():
        counts = m.peer_connections(nid)
        dial = layout.names[0]
        for name in layout.names[1:]:
            # every peer dials the first listener now: none is left on the other one
            assert counts.get(name, 0) == 0, (nid, name, counts)
        plain_open = _plaintext_answered(node.host, m.ports[nid][PLAIN])
        assert plain_open == (PLAIN in layout.names), (nid, layout)
        if dial == TLS and layout.names == (TLS,):
            assert _tls_refused_without_certificate(m, nid), nid
    leader = m.cluster.wait_for_leader(30)
    assert m.peer_connections(leader).get(layout.names[0], 0) >= 2, layout  # its followers


@pytest.mark.slow
@pytest.mark.parametrize(("static", "start", "rolls"), [
    (False, PLAINTEXT_ONLY, TO_TLS),
    (True, TLS_ONLY, TO_PLAINTEXT),
], ids=["dynamic-plaintext-to-mtls", "static-mtls-to-plaintext"])
async def test_a_migration_by_three_rolling_restarts_under_writes(
        clusters: Callable[..., LocalCluster], static: bool, start: Layout,
        rolls: tuple[Layout, ...]) -> None:
    """One direction for each kind of quorum (the two together take 18 restarts): a dynamic
    quorum (UpdateRaftVoter publishes the endpoints) from PLAINTEXT to mTLS, a static one
    (controller.quorum.voters names the ports dialled) from mTLS to PLAINTEXT."""
    cluster = clusters(3, static=static)
    m = Migration(cluster)
    for nid in cluster.nodes:
        cluster.nodes[nid].overrides = m.properties(nid, start)
    m.layout = start
    await asyncio.to_thread(cluster.start_all)
    await asyncio.to_thread(cluster.wait_for_leader, 60)
    for nid in cluster.nodes:
        await asyncio.to_thread(cluster.wait_ready, nid, 60)
    await asyncio.to_thread(_check_listeners, m)
    workload = KVWorkload([n.http for n in cluster.nodes.values()], keys=4, clients=4,
                          seed=29)
    runner = asyncio.ensure_future(workload.run())
    started = time.monotonic()
    acked_by_step = []
    try:
        for layout in rolls:
            await asyncio.to_thread(m.roll, layout)
            await asyncio.to_thread(_check_listeners, m)
            acked_by_step.append(workload.stats.ok)
    finally:
        workload.stop()
        await runner
    elapsed = time.monotonic() - started
    await _final_reads(cluster, workload)
    result = check_history(workload.history.ops)
    assert result.ok, (result.detail, result.bad_ops[:20])
    # writes went through during every roll, not only between them
    assert all(b > a for a, b in zip([0, *acked_by_step], acked_by_step, strict=False)), \
        acked_by_step
    assert m.restarts == 9 and len(m.elections) == 9
    print(f"\n{'static' if static else 'dynamic'} quorum {start.names} -> {m.layout.names}: "
          f"3 rolls, {m.restarts} restarts in {elapsed:.1f} s; {workload.stats.ok} "
          f"operations completed, {workload.stats.unknown} of unknown outcome, "
          f"{workload.stats.rejected} refused; epochs {[e for _, e in m.elections]}")
