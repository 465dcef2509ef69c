"""Apache Kafka's own controller for the interop tests: `KafkaController`, one
`process.roles=controller` node on a loopback address (its server.properties,
`kafka-storage format`, `kafka.Kafka` as a child process, kill).

The classpath of each Kafka version and the java command lines of its tools (`KafkaDist`,
`kafka_dist`, `wait_port`, `java_env`) are tools/kafka_launch.py, shared with the benchmarks
(bench/systems/kafka_raft.py); this module re-exports them for the tests.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

_TOOLS_DIR = Path(__file__).resolve().parents[2] / "tools"
if str(_TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(_TOOLS_DIR))

from kafka_launch import (  # noqa: E402  (tools/ is not a package)
    NEWEST,
    OLDEST,
    SHORT_LIVED_JVM_OPTS,
    TOOLS,
    VERSIONS,
    KafkaDist,
    KafkaUnavailable,
    java_env,
    kafka_dist,
    wait_port,
)

__all__ = ["NEWEST", "OLDEST", "SHORT_LIVED_JVM_OPTS", "TOOLS", "VERSIONS", "KafkaController",
           "KafkaDist", "KafkaUnavailable", "java_env", "kafka_dist", "wait_port"]


@dataclass
class KafkaController:
    """One Kafka controller (`process.roles=controller`) on a loopback address."""

    dist: KafkaDist
    node_id: int
    host: str
    port: int
    base: Path
    bootstrap_servers: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def dir(self) -> Path:
        """The metadata log directory (metadata.log.dir and log.dirs)."""
        return self.base / "metadata"

    @property
    def config_path(self) -> Path:
        """Its server.properties."""
        return self.base / "server.properties"

    @property
    def log_path(self) -> Path:
        """stdout and stderr of the JVM."""
        return self.base / "stdout.log"

    @property
    def endpoint(self) -> str:
        """host:port of its controller listener."""
        return f"{self.host}:{self.port}"

    def props(self) -> dict[str, str]:
        """The server.properties this controller runs with."""
        return {
            "process.roles": "controller",
            "node.id": str(self.node_id),
            "controller.listener.names": "CONTROLLER",
            "listeners": f"CONTROLLER://{self.endpoint}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            "controller.quorum.bootstrap.servers": self.bootstrap_servers or self.endpoint,
            "log.dirs": str(self.dir),
            "metadata.log.dir": str(self.dir),
            "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.fetch.timeout.ms": "2000",
            "controller.quorum.request.timeout.ms": "2000",
            **self.properties,
        }

    def write_config(self) -> Path:
        """Write server.properties; returns its path."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.props().items()))
        return self.config_path

    def format(self, cluster_id: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`kafka-storage format -t cluster_id -c server.properties ARGS` (e.g. --standalone,
        --initial-controllers ..., --no-initial-controllers, --release-version ...)."""
        self.write_config()
        return self.dist.tool("storage", "format", "-t", cluster_id, "-c",
                              str(self.config_path), *args, logs_dir=self.base / "logs")

    def start(self, timeout: float = 60.0) -> KafkaController:
        """Start `kafka.Kafka server.properties`; returns once its listener accepts TCP."""
        self.write_config()
        cmd = self.dist.command("server-start", [str(self.config_path)],
                                logs_dir=self.base / "logs")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, env=java_env())
        wait_port(self.host, self.port, timeout, self.process, self.log_path)
        return self

    @property
    def alive(self) -> bool:
        """True while the JVM runs."""
        return self.process is not None and self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (SIGKILL by default) and wait for the JVM to exit."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def server_log(self) -> str:
        """Kafka's own log (our log4j2 config writes it to logs/kafka.log)."""
        path = self.base / "logs" / "kafka.log"
        return path.read_text(errors="replace") if path.exists() else ""

