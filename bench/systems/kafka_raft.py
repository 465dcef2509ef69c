"""Apache Kafka's own raft benchmark as a benchmarked system: three `kafka.tools.TestRaftServer`
JVMs (Kafka 4.4.0 by default) on 127.0.0.1, with the jars of `make kafka`.

What TestRaftServer is (read from Kafka's core/src/main/scala/kafka/tools/TestRaftServer.scala
and the 4.4.0 classes): a KRaft replica (`KafkaRaftManager`, the controller's raft client and
log) on the partition `__raft_performance_test-0` (topic id 0...02) with a workload generator
thread in each process. Options: `--config FILE` (server.properties; `process.roles` is forced
to controller), `--replica-directory-id UUID` (required), `--throughput` (records/s the leader
writes, default 5000), `--record-size` (bytes of each record's value, default 256). Its
request handler serves ApiVersions, Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and
FetchSnapshot only (no DescribeQuorum; followers' UpdateRaftVoter requests are logged as
unsupported, which does not stop replication).

- Load: open loop at a fixed rate. On the leader only, one `scheduleAppend` of one record per
  turn, paced by a throttler (`records sent / throughput` seconds after the epoch began); the
  raft client gathers appends into a batch for `controller.quorum.append.linger.ms` (25 ms)
  or until 8 MiB, then writes it.
- fsync: the leader flushes its log (`FileChannel.force`) after each batch it writes; a voter
  flushes after each Fetch answer it appends, before its next Fetch says how far it has. The
  high watermark advances over voters' fetched offsets: a commit is a majority with the
  record on disk.
- What it reports: every 5 s the leader prints `Throughput (bytes/second): B, Latency (ms): X
  p75 Y p99 Z p999`. Latency is append (the generator's `scheduleAppend`) to commit (the
  committed batch reaching the generator), from `Time.milliseconds()` on both ends, so whole
  milliseconds; the histogram has 250 buckets of 1 ms (values over 250 ms pinned to 250) and
  reports no p50. Both figures come from Kafka metrics with two samples of 30 s: a line
  covers the records committed since the start of the previous 30-second sample
  (`histogram_span`).

The leader and its high watermark are read with a Fetch of an observer (replica id -1) that
asks for an offset past the log's end: the answer carries the leader, its epoch and high
watermark and no records (`probe`). The first commit of an epoch is Kafka's own log line
`High watermark set to ... for the first time for epoch N` (LeaderState, INFO), with its
millisecond timestamp (`first_commits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.systems.peers import HOST, VALUE_SIZE, die_with_parent, free_port, key_of, kill_proc

_TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)

import kafka_launch  # noqa: E402  (tools/ is not a package)
from kafka_launch import KafkaDist, KafkaUnavailable  # noqa: E402

__all__ = ["KAFKA_JVM_OPTS", "RECORD_SIZE", "KafkaRaftCluster", "KafkaUnavailable", "RaftReport",
           "first_commits", "histogram_span", "parse_report", "probe"]

VERSION = kafka_launch.NEWEST
TOPIC = "__raft_performance_test"
TOPIC_ID_RAW = bytes(15) + b"\x02"
"""TestRaftServer's topic id, `new Uuid(0L, 2L)`."""
PAST_THE_END = 1 << 62
"""The offset the probe fetches from: past any log's end."""
SAMPLE_S = 30.0
"""The length of one of the two samples of Kafka's default `MetricConfig` (30 s windows)."""

KAFKA_JVM_OPTS = ("-Xms1G", "-Xmx1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                  "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                  "-Djava.awt.headless=true")
"""The JVM flags Kafka's scripts give a server: the 1 GiB heap of kafka-server-start.sh and the
G1 settings of kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS."""


def _record_size() -> int:
    from kraft.statemachine.kv import encode_put

    return len(encode_put(key_of(0), b"v" * VALUE_SIZE))


RECORD_SIZE = _record_size()
"""The bytes of one record's value in kraft-quorum's log for a PUT of a 100-byte value to one
of the workload's keys (format byte, op, length-prefixed key and value): 117. TestRaftServer
runs with `--record-size RECORD_SIZE`, so both logs hold records of the same size."""


# ============================================================================ its output

_REPORT = re.compile(r"Throughput \(bytes/second\): (\S+), Latency \(ms\): (\S+) p75 (\S+) p99 "
                     r"(\S+) p999")


@dataclass(frozen=True)
class RaftReport:
    """One line TestRaftServer's leader printed, and when this process read it."""

    at: float
    """Wall-clock seconds (time.time()) the line was read (it is flushed as printed)."""
    bytes_per_s: float
    p75_ms: float
    p99_ms: float
    p999_ms: float

    def records_per_s(self, record_size: int) -> float:
        """Committed records per second (its figure is bytes of record values)."""
        return self.bytes_per_s / record_size


def _number(text: str) -> float:
    # Java's %.1f prints NaN and (-)Infinity as words, and a decimal comma under some locales
    if text == "NaN":
        return float("nan")
    return float(text.replace("Infinity", "inf").replace(",", "."))


def parse_report(line: str, at: float = 0.0) -> RaftReport | None:
    """The figures of one `Throughput (bytes/second): ...` line, None for any other line."""
    m = _REPORT.search(line)
    if m is None:
        return None
    b, p75, p99, p999 = (_number(g) for g in m.groups())
    return RaftReport(at, b, p75, p99, p999)


_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")
_FIRST_COMMIT = re.compile(r"High watermark set to LogOffsetMetadata\(offset=(\d+),.* for the first "
                           r"time for epoch (\d+) .*\(org\.apache\.kafka\.raft\.LeaderState\)$")


def log_time(line: str) -> float | None:
    """Wall-clock seconds of a log4j line of our pattern (`[yyyy-MM-dd HH:mm:ss,SSS] ...`, the
    machine's local time), None for a line without it."""
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000


def first_commits(log_text: str) -> list[tuple[int, int, float]]:
    """(epoch, high watermark, wall-clock seconds) of every first commit of an epoch this
    replica made as leader: Kafka's `High watermark set to ... for the first time for epoch N`
    line of LeaderState."""
    out = []
    for line in log_text.splitlines():
        m = _FIRST_COMMIT.search(line)
        t = log_time(line) if m else None
        if m and t is not None:
            out.append((int(m.group(2)), int(m.group(1)), t))
    return out


def histogram_span(first_record_at: float, printed_at: float) -> tuple[float, float]:
    """(from, to) wall-clock seconds of the records a report line printed at `printed_at`
    covers, for a leader whose first record was committed at `first_record_at`: Kafka's
    metrics keep two samples of 30 s, so a line covers the current sample and the one before."""
    k = max(0, int((printed_at - first_record_at) // SAMPLE_S))
    return first_record_at + SAMPLE_S * max(0, k - 1), printed_at


# ============================================================================ its quorum


@dataclass(frozen=True)
class QuorumView:
    """What one Fetch of an observer learned: the leader as the asked node knows it and, when
    the asked node leads, its high watermark (-1 before the epoch's first commit)."""

    asked: int
    leader_id: int
    epoch: int
    high_watermark: int | None


async def probe(host: str, port: int, asked: int, epoch: int = 0,
                timeout_s: float = 2.0) -> QuorumView | None:
    """Ask one TestRaftServer for the leader and (if it leads) its high watermark; None when
    it does not answer.

    The Fetch is an observer's (replica id -1) at an offset past any log's end, in the epoch
    `epoch`: a node that does not lead answers NOT_LEADER_OR_FOLLOWER or an epoch error with
    the leader it knows; the leader answers a diverging epoch with its high watermark and no
    records (a Fetch it does not count as a replica's progress). A wrong `epoch` costs one
    more round trip."""
    from kraft.admin.connection import AdminConnection, WireError
    from kraft.protocol import messages as w
    from kraft.protocol.api import ApiKey
    from kraft.protocol.errors import ErrorCode
    from kraft.protocol.uuid import Uuid

    conn = AdminConnection(host, port, client_id="kraft-bench-probe")
    F = w.FetchRequestData
    try:
        await conn.connect(timeout_s)
        for _ in range(3):
            body = F(replica_state=F.ReplicaState(replica_id=-1), max_wait_ms=0, min_bytes=0,
                     max_bytes=1, topics=[F.FetchTopic(
                         topic=TOPIC, topic_id=Uuid(TOPIC_ID_RAW), partitions=[F.FetchPartition(
                             partition=0, current_leader_epoch=epoch, fetch_offset=PAST_THE_END,
                             last_fetched_epoch=epoch, partition_max_bytes=1)])])
            _, resp = await conn.request(ApiKey.FETCH, body, timeout_s)
            parts = [p for t in resp.responses for p in t.partitions]
            if resp.error_code != ErrorCode.NONE or not parts:
                return None
            part = parts[0]
            if part.error_code == ErrorCode.NONE:
                return QuorumView(asked, asked, epoch, part.high_watermark)
            leader = part.current_leader
            if leader.leader_id == asked and leader.leader_epoch != epoch:
                epoch = leader.leader_epoch  # it leads, in another epoch: ask in that one
                continue
            return QuorumView(asked, leader.leader_id, leader.leader_epoch, None)
        return None
    except WireError:
        return None
    finally:
        conn.close()


# ============================================================================ the system


@dataclass
class RaftNode:
    """One TestRaftServer replica."""

    node_id: int
    port: int
    base: Path
    directory_id: str
    process: subprocess.Popen[bytes] | None = None
    reports: list[RaftReport] | None = None

    @property
    def config_path(self) -> Path:
        """Its server.properties."""
        return self.base / "server.properties"

    @property
    def data_dir(self) -> Path:
        """log.dirs (the partition's directory is inside)."""
        return self.base / "data"

    @property
    def kafka_log(self) -> Path:
        """Kafka's own log at INFO (our log4j2 config)."""
        return self.base / "logs" / "kafka.log"

    @property
    def stdout_path(self) -> Path:
        """Its printed reports, each line prefixed with the wall-clock time it was read."""
        return self.base / "stdout.log"

    @property
    def alive(self) -> bool:
        """True while the JVM runs."""
        return self.process is not None and self.process.poll() is None

    def log_bytes(self) -> int:
        """Bytes of the partition's segment files (its log's length on disk)."""
        return sum(p.stat().st_size for p in self.data_dir.glob(f"{TOPIC}-0/*.log"))


class KafkaRaftCluster:
    """Three TestRaftServer voters on 127.0.0.1 (static `controller.quorum.voters`, Kafka's
    defaults otherwise), the leader writing `throughput` records/s of `record_size` bytes."""

    name = "kafka-raft"

    def __init__(self, workdir: Path, *, throughput: int, record_size: int = RECORD_SIZE,
                 version: str = VERSION, properties: dict[str, str] | None = None,
                 jvm_opts: tuple[str, ...] = KAFKA_JVM_OPTS, dist: KafkaDist | None = None) -> None:
        if throughput <= 0 or record_size <= 0:
            raise ValueError(f"kafka-raft: --throughput ({throughput}) and --record-size "
                             f"({record_size}) must be positive")
        self.workdir = Path(workdir)
        self.throughput = throughput
        self.record_size = record_size
        self.version = version
        self.properties = dict(properties or {})
        self.jvm_opts = jvm_opts
        self.dist = dist
        self.nodes: dict[int, RaftNode] = {}
        self._readers: list[threading.Thread] = []

    def info(self) -> dict[str, Any]:
        """Version and configuration (for the results)."""
        return {"system": "kafka-raft", "version": f"Apache Kafka {self.version} "
                "kafka.tools.TestRaftServer",
                "config": {"throughput": self.throughput, "record_size": self.record_size,
                           "jvm": " ".join(self.jvm_opts), **self.props(1),
                           "fsync": "the leader after each batch it writes, a voter after each "
                                    "Fetch answer it appends (KafkaRaftClient)"}}

    def props(self, nid: int) -> dict[str, str]:
        """The server.properties of node `nid` (its own ports and directories)."""
        voters = ",".join(f"{n.node_id}@{HOST}:{n.port}" for n in self.nodes.values())
        node = self.nodes.get(nid)
        return {
            "node.id": str(nid),
            "process.roles": "controller",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"CONTROLLER://{HOST}:{node.port if node else 0}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": voters,
            "log.dirs": str(node.data_dir if node else ""),
            **self.properties,
        }

    # ------------------------------------------------------------------ processes

    def start(self, timeout: float = 180.0) -> None:
        """Write the three configurations and start the JVMs; returns once a leader has made
        its first commit (JVM start-up takes 10-30 s on 2 busy cores)."""
        from kraft.protocol.uuid import Uuid

        if self.dist is None:
            self.dist = kafka_launch.cached_dist(self.version)
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        self.nodes = {nid: RaftNode(nid, free_port(), self.workdir / f"node{nid}",
                                    str(Uuid.random())) for nid in (1, 2, 3)}
        for nid in self.nodes:
            self.start_node(nid)
        self.wait_leader(timeout)

    def start_node(self, nid: int) -> None:
        """Start (or restart, on the same directories and directory id) node `nid`."""
        assert self.dist is not None
        node = self.nodes[nid]
        node.base.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.props(nid).items()))
        cmd = self.dist.command("test-raft-server", [
            "--config", str(node.config_path), "--replica-directory-id", node.directory_id,
            "--throughput", str(self.throughput), "--record-size", str(self.record_size)],
            logs_dir=node.base / "logs", jvm_opts=self.jvm_opts)
        with open(node.base / "stderr.log", "ab") as err:
            node.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                            stdin=subprocess.DEVNULL, env=kafka_launch.java_env(),
                                            preexec_fn=die_with_parent)
        node.reports = []
        reader = threading.Thread(target=self._read, args=(node, node.process), daemon=True)
        reader.start()
        self._readers.append(reader)

    @staticmethod
    def _read(node: RaftNode, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with open(node.stdout_path, "a") as out:
            for raw in proc.stdout:
                at = time.time()
                line = raw.decode(errors="replace").rstrip("\n")
                out.write(f"{at:.3f} {line}\n")
                out.flush()
                report = parse_report(line, at)
                if report is not None and node.reports is not None:
                    node.reports.append(report)

    def stop(self) -> None:
        """Kill every JVM by PID."""
        for node in self.nodes.values():
            kill_proc(node.process, graceful_s=0)
        for reader in self._readers:
            reader.join(timeout=5)
        self._readers.clear()

    def kill(self, nid: int) -> float:
        """kill -9 of node `nid`; returns the wall-clock time of the signal."""
        node = self.nodes[nid]
        assert node.process is not None
        at = time.time()
        os.kill(node.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.process.wait(timeout=10)
        return at

    def pids(self) -> dict[str, int]:
        """label -> pid of the live JVMs."""
        return {f"node{nid}": n.process.pid for nid, n in self.nodes.items()
                if n.process is not None and n.alive}

    # ------------------------------------------------------------------ queries

    def views(self) -> list[QuorumView]:
        """What every live node answers to the observer's Fetch (`probe`)."""
        async def ask() -> list[QuorumView | None]:
            return await asyncio.gather(*(probe(HOST, n.port, nid) for nid, n in self.nodes.items()
                                          if n.alive))
        return [v for v in asyncio.run(ask()) if v is not None]

    def leader_view(self) -> QuorumView | None:
        """The view of the node that leads (its high watermark set), None when none does."""
        for v in self.views():
            if v.leader_id == v.asked and v.high_watermark is not None:
                return v
        return None

    def wait_leader(self, timeout: float = 60.0, exclude: int | None = None) -> QuorumView:
        """A leader (not `exclude`) that has committed in its epoch (bounded wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for nid, n in self.nodes.items():
                if n.process is not None and n.process.poll() is not None and nid != exclude \
                        and n.process.returncode != -signal.SIGKILL:
                    raise RuntimeError(f"TestRaftServer node {nid} exited rc={n.process.returncode}; "
                                       f"see {n.base}/stderr.log and {n.kafka_log}:\n"
                                       f"{kafka_launch.log_tail(n.base / 'stderr.log', 15)}")
            v = self.leader_view()
            if v is not None and v.asked != exclude and v.high_watermark is not None \
                    and v.high_watermark >= 0:
                return v
            time.sleep(0.2)
        raise RuntimeError(f"kafka-raft: no leader with a commit within {timeout:.0f} s; logs in "
                           f"{self.workdir}")

    def first_commit(self, nid: int, epoch: int) -> float | None:
        """Wall-clock time of node `nid`'s first commit as leader of `epoch`, from its log."""
        try:
            text = self.nodes[nid].kafka_log.read_text(errors="replace")
        except OSError:
            return None
        return next((t for e, _, t in first_commits(text) if e == epoch), None)

    def wait_caught_up(self, nid: int, timeout: float = 120.0) -> bool:
        """Bounded wait until node `nid`'s log is as long on disk as the leader's was when the
        wait began (replicas hold the leader's batches byte for byte)."""
        lead = self.leader_view()
        if lead is None:
            return False
        target = self.nodes[lead.leader_id].log_bytes()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.nodes[nid].log_bytes() >= target:
                return True
            time.sleep(0.2)
        return False

    def reports(self, nid: int) -> list[RaftReport]:
        """The report lines node `nid` printed so far (only a leader prints)."""
        return list(self.nodes[nid].reports or [])
