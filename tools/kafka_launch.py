"""Apache Kafka's jars as programs: one version's classpath and the java command lines over it.

The jars come from `make kafka` (tools/kafka_jars.py), one classpath directory per version
under ~/.cache/kraft-quorum/kafka/<version>/. Two ways to get a `KafkaDist`:

- `kafka_dist(version)` fetches the jars first when the cache lacks them (under a lock, so
  parallel test workers fetch once): what the interop tests use.
- `cached_dist(version)` never fetches: it raises `KafkaUnavailable` naming `make kafka` when
  the jars are not there (what a benchmark uses: it must not start a download mid-run).

`KafkaDist.command(...)` builds the java command line of one of the equivalents of Kafka's
bin/ scripts (`TOOLS`); `KafkaDist.tool(...)` runs one to completion:

| `TOOLS` name      | bin/ script              | main class                                  |
| ----------------- | ------------------------ | ------------------------------------------- |
| server-start      | kafka-server-start.sh    | kafka.Kafka                                 |
| storage           | kafka-storage.sh         | kafka.tools.StorageTool                     |
| metadata-quorum   | kafka-metadata-quorum.sh | org.apache.kafka.tools.MetadataQuorumCommand |
| dump-log          | kafka-dump-log.sh        | kafka.tools.DumpLogSegments (4.1), org.apache.kafka.tools.DumpLogSegments (4.4) |
| cluster           | kafka-cluster.sh         | org.apache.kafka.tools.ClusterTool          |
| features          | kafka-features.sh        | org.apache.kafka.tools.FeatureCommand       |
| test-raft-server  | test-kraft-server-start.sh | kafka.tools.TestRaftServer                |

The interop tests' controller launcher is tests/support/kafka.py; the benchmark's three
TestRaftServer voters are bench/systems/kafka_raft.py. tools/ is not a package: both put this
directory on sys.path and `import kafka_launch`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

_TOOLS_DIR = str(Path(__file__).resolve().parent)
if _TOOLS_DIR not in sys.path:
    sys.path.insert(0, _TOOLS_DIR)

import kafka_jars  # noqa: E402  (tools/ is not a package)

VERSIONS = kafka_jars.VERSIONS
OLDEST, NEWEST = VERSIONS[0], VERSIONS[-1]

SHORT_LIVED_JVM_OPTS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                        "-Djava.awt.headless=true")
"""JVM flags for short-lived processes (tools, test controllers): C1 only and a small serial
heap start a JVM in a few seconds on 2 cores. A long-running measured process passes its own
(`jvm_opts=`)."""

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
                jvm_opts: tuple[str, ...] = SHORT_LIVED_JVM_OPTS) -> list[str]:
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


def _require_java() -> None:
    if shutil.which("java") is None:
        raise KafkaUnavailable("`java` is not on PATH: Kafka's servers and tools need Java 17 "
                               "or newer (Debian: apt-get install openjdk-17-jre-headless)")


def cached_dist(version: str, cache: Path | None = None) -> KafkaDist:
    """Kafka `version` from the cache, never fetched: KafkaUnavailable naming `make kafka` when
    its jars are not there (or `java` is missing)."""
    _require_java()
    cache = kafka_jars.DEFAULT_CACHE if cache is None else cache
    home = cache / version
    if not kafka_jars.is_complete(home, version):
        known = ", ".join(VERSIONS)
        raise KafkaUnavailable(
            f"Kafka {version}'s jars are not in {home}: run `make kafka` first (it resolves "
            f"Kafka {known} with mvn into {cache}; about 40 s the first time)")
    return KafkaDist(version, home)


def kafka_dist(version: str) -> KafkaDist:
    """The classpath of Kafka `version`, fetched into the cache first when missing (once
    across processes: an exclusive lock on a file in the cache)."""
    _require_java()
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
                                 f"{host}:{port}\n{log_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s\n{log_tail(log)}")


def log_tail(log: Path | None, lines: int = 40) -> str:
    """The last `lines` lines of a process's log ("" when there is none)."""
    if log is None or not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def java_env() -> dict[str, str]:
    """This process's environment without KAFKA_OPTS and JAVA_TOOL_OPTIONS: a JVM started
    with it runs the flags of its command line only."""
    env = dict(os.environ)
    env.pop("KAFKA_OPTS", None)
    env.pop("JAVA_TOOL_OPTIONS", None)
    return env
