"""A quorum whose nodes are either `kraft run` processes or Apache Kafka controllers.

`MixedQuorum` wraps a `LocalCluster` (addresses, ports, server.properties, directory ids): the
nodes named in `kafka_ids` are formatted by Kafka's `kafka-storage format` and run by
`kafka.Kafka` on the same server.properties (Kafka ignores the kraft-only keys with a warning);
the others are formatted and run by kraft. Every node finds the leader through
`controller.quorum.bootstrap.servers` (the initial voters), so one description covers voters
and observers of either kind.

The quorum's view is asked of the leader over the Kafka protocol (`kraft.admin.QuorumClient`
DescribeQuorum), the same for either kind of leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kraft.admin import QuorumClient
from kraft.admin.models import ClusterInfo, QuorumInfo
from kraft.cli.local import LocalCluster, LocalNode
from kraft.config.properties import read_properties
from kraft.protocol.uuid import Uuid
from kraft.storage.layout import partition_dir
from tests.support.kafka import KafkaDist, java_env, wait_port


def batches_of(metadata_dir: Path) -> dict[int, bytes]:
    """base offset -> the bytes of every whole record batch in the replica's segments."""
    out: dict[int, bytes] = {}
    for seg in sorted(partition_dir(metadata_dir).glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            base = int.from_bytes(data[pos:pos + 8], "big")
            end = pos + 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
            if end > len(data) or end == pos + 12:
                break
            out[base] = data[pos:end]
            pos = end
    return out


KAFKA_CONTROLLER_PROPS = {
    # a NoOpRecord (KIP-835) every 200 ms: Kafka's active controller writes on its own
    "metadata.max.idle.interval.ms": "200",
}


class MixedQuorum:
    """Nodes 1..voters are the initial voters, the rest observers; `kafka_ids` run Kafka."""

    def __init__(self, base: Path, dist: KafkaDist, *, voters: int, observers: int = 0,
                 kafka_ids: set[int], address_prefix: str,
                 properties: dict[str, str] | None = None,
                 kafka_properties: dict[str, str] | None = None) -> None:
        self.dist = dist
        self.kafka_ids = set(kafka_ids)
        self.cluster = LocalCluster(base, voters=voters, observers=observers,
                                    address_prefix=address_prefix, properties=properties)
        self.kafka_properties = {**KAFKA_CONTROLLER_PROPS, **(kafka_properties or {})}
        self._kafka: dict[int, subprocess.Popen[bytes]] = {}
        self.last_error = ""
        """Why the last `describe` failed on the last node it asked."""
        for nid, node in self.cluster.nodes.items():
            node.overrides["log.dirs"] = str(node.dir)
            if nid in self.kafka_ids:
                node.overrides.update(self.kafka_properties)

    # ------------------------------------------------------------------ layout

    @property
    def nodes(self) -> dict[int, LocalNode]:
        """Every node's description."""
        return self.cluster.nodes

    @property
    def cluster_id(self) -> str:
        """The cluster id both formats were given."""
        return self.cluster.cluster_id

    @property
    def bootstrap(self) -> str:
        """controller.quorum.bootstrap.servers: the initial voters' listeners."""
        return ",".join(f"{self.nodes[i].host}:{self.nodes[i].port}"
                        for i in self.cluster.initial_voters)

    def initial_controllers(self) -> str:
        """--initial-controllers of both formats."""
        return ",".join(f"{n.node_id}@{n.host}:{n.port}:{n.directory_id}"
                        for n in (self.nodes[i] for i in self.cluster.initial_voters))

    def is_kafka(self, nid: int) -> bool:
        """True when node `nid` runs Kafka."""
        return nid in self.kafka_ids

    def format(self, nid: int, *, join_later: bool | None = None) -> None:
        """Format one node with its own kind's tool."""
        if not self.is_kafka(nid):
            self.cluster.format(nid, join_later=join_later)
            return
        node = self.nodes[nid]
        self.cluster.write_config(node)
        initial = nid in self.cluster.initial_voters if join_later is None else not join_later
        args = (["--initial-controllers", self.initial_controllers()] if initial
                else ["--no-initial-controllers"])
        self.dist.tool("storage", "format", "-t", self.cluster_id, "-c", str(node.config_path),
                       *args, logs_dir=node.dir.parent / "kafka-logs")
        meta = read_properties(node.dir / "meta.properties")
        node.directory_id = Uuid.parse(meta["directory.id"])

    def format_all(self) -> None:
        """Format every node (Kafka's formats in parallel: each is a JVM start)."""
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(self.format, list(self.nodes)))

    # ------------------------------------------------------------------ processes

    def start(self, nid: int) -> None:
        """Start node `nid` (formatted) with its own kind's server."""
        if not self.is_kafka(nid):
            self.cluster.start(nid)
            return
        node = self.nodes[nid]
        self.cluster.write_config(node)
        cmd = self.dist.command("server-start", [str(node.config_path)],
                                logs_dir=node.dir.parent / "kafka-logs")
        with open(node.log_path, "ab") as log:
            self._kafka[nid] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True, env=java_env())

    def wait_listening(self, nid: int, timeout: float = 90.0) -> None:
        """Until node `nid`'s controller listener accepts TCP."""
        node = self.nodes[nid]
        wait_port(node.host, node.port, timeout, self._kafka.get(nid) or node.process,
                  node.log_path)

    def start_all(self) -> None:
        """Format (when needed) and start every node; returns once all listen."""
        unformatted = [n for n in self.nodes if not (self.nodes[n].dir / "meta.properties").exists()]
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(self.format, unformatted))
        for nid in self.nodes:
            self.start(nid)
        for nid in self.nodes:
            self.wait_listening(nid)

    def process(self, nid: int) -> subprocess.Popen[bytes] | None:
        """Node `nid`'s process (JVM or Python)."""
        return self._kafka.get(nid) if self.is_kafka(nid) else self.nodes[nid].process

    def alive(self, nid: int) -> bool:
        """True while node `nid`'s process runs."""
        proc = self.process(nid)
        return proc is not None and proc.poll() is None

    def send(self, nid: int, sig: int) -> None:
        """Send `sig` to node `nid` (SIGSTOP and SIGCONT return at once)."""
        proc = self.process(nid)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)

    def kill(self, nid: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (SIGKILL by default) and wait for node `nid` to exit."""
        proc = self.process(nid)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def close(self) -> None:
        """SIGKILL every node still running."""
        for nid in self._kafka:
            self.kill(nid)
        self.cluster.close()

    # ------------------------------------------------------------------ the quorum's view

    def describe(self, timeout_s: float = 3.0, among: list[int] | None = None) -> QuorumInfo | None:
        """DescribeQuorum of the leader (found through any live node); None when none answers."""
        # DescribeQuorum straight to each node, not through DescribeCluster: a Kafka
        # controller's DescribeCluster names only controllers registered with its
        # QuorumController (KIP-919), never a kraft voter, and it named the leader -1 for a
        # minute after a kraft node had led (docs/raft.md, "Kafka in the loop")
        live = sorted((n for n in (among or list(self.nodes)) if self.alive(n)),
                      key=lambda n: (self.is_kafka(n), n))
        cluster_id = self.cluster_id

        class Direct(QuorumClient):
            async def _leader(self) -> tuple[ClusterInfo, tuple[str, int]]:
                return ClusterInfo(cluster_id=cluster_id, leader_id=-1, controllers=[]), \
                    self.bootstrap[0]

        async def ask(address: str) -> QuorumInfo:
            async with Direct([address], timeout_s=timeout_s) as client:
                return await client.describe_quorum()

        for nid in live:
            try:
                return asyncio.run(ask(f"{self.nodes[nid].host}:{self.nodes[nid].port}"))
            except Exception as exc:  # no leader yet, a node starting, stopped or not knowing it
                self.last_error = f"node {nid}: {exc!r}"
                continue
        return None

    def wait_for_leader(self, timeout: float = 60.0, exclude: int | None = None,
                        min_epoch: int = 0) -> QuorumInfo:
        """Until a live node other than `exclude` leads an epoch of at least `min_epoch`."""
        deadline = time.monotonic() + timeout
        info = None
        while time.monotonic() < deadline:
            info = self.describe()
            if (info is not None and info.leader_id >= 0 and info.leader_id != exclude
                    and info.leader_epoch >= min_epoch and self.alive(info.leader_id)
                    and info.high_watermark >= 0):
                return info
            time.sleep(0.2)
        raise TimeoutError(f"no leader within {timeout}s (last view {info}, last error "
                           f"{self.last_error}); logs in "
                           f"{self.cluster.base}")

    def log_tail(self, nid: int, lines: int = 60) -> str:
        """The last lines of node `nid`'s output (and Kafka's own log)."""
        out = []
        for path in (self.nodes[nid].log_path, self.nodes[nid].dir.parent / "kafka-logs" / "kafka.log"):
            if path.exists():
                out.append(f"== {path}\n" + "\n".join(
                    path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)
