"""Apache Kafka's own processes for the interop tests: launchers for its server and tools.

The jars come from `make kafka` (tools/kafka_jars.py), one classpath directory per version
under ~/.cache/kraft-quorum/kafka/<version>/. `kafka_dist(version)` returns a `KafkaDist`
(fetching the jars first when the cache lacks them, under a lock so parallel test workers
fetch once); its `tool(...)` runs one of the equivalents of Kafka's bin/ scripts:

| `TOOLS` name      | bin/ script              | main class                                  |
| ----------------- | ------------------------ | ------------------------------------------- |
| server-start      | kafka-server-start.sh    | kafka.Kafka                                 |
| storage           | kafka-storage.sh         | kafka.tools.StorageTool                     |
| metadata-quorum   | kafka-metadata-quorum.sh | org.apache.kafka.tools.MetadataQuorumCommand |
| dump-log          | kafka-dump-log.sh        | kafka.tools.DumpLogSegments (4.1), org.apache.kafka.tools.DumpLogSegments (4.4) |
| cluster           | kafka-cluster.sh         | org.apache.kafka.tools.ClusterTool          |
| features          | kafka-features.sh        | org.apache.kafka.tools.FeatureCommand       |
| test-raft-server  | kafka-run-class.sh kafka.tools.TestRaftServer | kafka.tools.TestRaftServer |

`KafkaController` is one `process.roles=controller` node on a loopback address: its
server.properties, `kafka-storage format`, `kafka.Kafka` as a child process, kill.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

_TOOLS_DIR = Path(__file__).resolve().parents[2] / "tools"
if str(_TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(_TOOLS_DIR))

import kafka_jars  # noqa: E402  (tools/ is not a package)

VERSIONS = kafka_jars.VERSIONS
OLDEST, NEWEST = VERSIONS[0], VERSIONS[-1]

# JVM flags for short-lived test processes: C1 only and a small serial heap start a controller
# in a few seconds on 2 cores. A benchmark passes its own (`jvm_opts=`).
TEST_JVM_OPTS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-Djava.awt.headless=true")

TOOLS = {
    "server-start": ("kafka.Kafka",),
    "storage": ("kafka.tools.StorageTool",),
    "metadata-quorum": ("org.apache.kafka.tools.MetadataQuorumCommand",),
    "dump-log": ("org.apache.kafka.tools.DumpLogSegments", "kafka.tools.DumpLogSegments"),
    "cluster": ("org.apache.kafka.tools.ClusterTool",),
    "features": ("org.apache.kafka.tools.FeatureCommand",),
    "test-raft-server": ("kafka.tools.TestRaftServer",),
}
"""Each tool's main class, newest name first: the first one the jars hold is used."""


class KafkaUnavailable(RuntimeError):
    """The Kafka jars are not in the cache and could not be fetched (no mvn, no java...)."""


@dataclass(frozen=True)
class KafkaDist:
    """One Kafka version's classpath directory and the launchers over it."""

    version: str
    home: Path

    @property
    def libs(self) -> Path:
        """The directory of jars (the tarball's libs/)."""
        return self.home / "libs"

    @property
    def log4j2_config(self) -> Path:
        """Our log4j2 config (stderr at WARN, a file at INFO in kafka.logs.dir)."""
        return self.home / "log4j2.xml"

    def main_class(self, tool: str) -> str:
        """The main class of `tool` (a `TOOLS` name) in this version's jars."""
        if tool not in TOOLS:
            raise ValueError(f"unknown Kafka tool {tool!r} (known: {', '.join(TOOLS)})")
        for cls in TOOLS[tool]:
            if _class_in(self.libs, cls):
                return cls
        raise KafkaUnavailable(f"Kafka {self.version}: none of {TOOLS[tool]} in {self.libs}")

    def command(self, tool: str, args: list[str], *, logs_dir: Path,
                jvm_opts: tuple[str, ...] = TEST_JVM_OPTS) -> list[str]:
        """The java command line running `tool` with `args` (logs under `logs_dir`)."""
        logs_dir.mkdir(parents=True, exist_ok=True)
        return ["java", *jvm_opts, f"-Dlog4j2.configurationFile={self.log4j2_config}",
                f"-Dkafka.logs.dir={logs_dir}", "-cp", f"{self.libs}/*",
                self.main_class(tool), *args]

    def tool(self, tool: str, *args: str, logs_dir: Path, timeout: float = 120.0,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a tool to completion; raises with its output when it fails and `check`."""
        cmd = self.command(tool, list(args), logs_dir=logs_dir)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"kafka {self.version} {tool} {' '.join(args)} exited "
                                 f"{done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done


def _class_in(libs: Path, cls: str) -> bool:
    entry = cls.replace(".", "/") + ".class"
    for jar in sorted(libs.glob("kafka*.jar")):
        with zipfile.ZipFile(jar) as z:
            try:
                z.getinfo(entry)
            except KeyError:
                continue
            return True
    return False


def kafka_dist(version: str) -> KafkaDist:
    """The classpath of Kafka `version`, fetched into the cache first when missing (once
    across processes: an exclusive lock on a file in the cache)."""
    if shutil.which("java") is None:
        raise KafkaUnavailable("`java` is not on PATH: Kafka's servers and tools need Java 17 "
                               "or newer (Debian: apt-get install openjdk-17-jre-headless)")
    cache = kafka_jars.DEFAULT_CACHE
    home = cache / version
    if not kafka_jars.is_complete(home, version):
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                kafka_jars.fetch(version, cache)
            except kafka_jars.FetchError as err:
                raise KafkaUnavailable(str(err)) from err
    return KafkaDist(version, home)


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None,
              log: Path | None = None) -> None:
    """Poll until something accepts TCP on host:port; raises (with the log's tail) on timeout
    or when `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited {proc.returncode} before listening on "
                                 f"{host}:{port}\n{_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s\n{_tail(log)}")


def _tail(log: Path | None, lines: int = 40) -> str:
    if log is None or not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


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
                                            start_new_session=True, env=_java_env())
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


def _java_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KAFKA_OPTS", None)
    env.pop("JAVA_TOOL_OPTIONS", None)
    return env
