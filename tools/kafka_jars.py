"""Resolve Apache Kafka's server and tools jars from Maven Central into a classpath directory.

    python tools/kafka_jars.py [--cache DIR] [--version V ...] [--offline]

For each Kafka version (by default the two the interop tests run against, `VERSIONS`) this
writes a small pom listing `org.apache.kafka:kafka_2.13`, `org.apache.kafka:kafka-tools` and
the logging jars that only Kafka's release tarball ships (no POM lists them): the SLF4J 1.7
binding `org.apache.logging.log4j:log4j-slf4j-impl` (Kafka 4.x logs through slf4j-api 1.7.36),
with log4j-core. (The tarball's `log4j-1.2-api` and `jackson-dataformat-yaml` serve log4j 1
and YAML configs; ours is XML, so they are left out.) `mvn dependency:copy-dependencies` then fills
`<cache>/<version>/libs/`, the equivalent of the tarball's libs/. Maven's local repository is
`<cache>/m2`, outside the clone, so a clean clone reuses it.

A directory that holds a stamp naming exactly the jars it should is left alone: a rerun is
offline and instant. The java command lines that run these jars are `tools/kafka_launch.py`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

# 4.1: KIP-1166's release (the newest 4.1.x); 4.4: the newest Kafka on Maven Central.
VERSIONS = ("4.1.2", "4.4.0")
LOG4J_VERSION = "2.25.3"
STAMP = ".kafka-jars"
DEFAULT_CACHE = Path(os.environ.get("KRAFT_KAFKA_CACHE",
                                    Path.home() / ".cache" / "kraft-quorum" / "kafka"))

POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <!-- written by kraft-quorum's tools/kafka_jars.py: Kafka {kafka} for the interop tests -->
  <groupId>kraft-quorum</groupId>
  <artifactId>kafka-classpath</artifactId>
  <version>{kafka}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

# Our log4j2 config: everything at INFO to one file per process, WARN and up on stderr too.
LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<!-- kraft-quorum's log4j2 config for Kafka processes run by the interop tests -->
<Configuration status="WARN">
  <Appenders>
    <Console name="stderr" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <ThresholdFilter level="WARN"/>
    </Console>
    <File name="file" fileName="${sys:kafka.logs.dir}/kafka.log">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="INFO">
      <AppenderRef ref="stderr"/>
      <AppenderRef ref="file"/>
    </Root>
    <Logger name="org.apache.kafka.raft" level="INFO"/>
  </Loggers>
</Configuration>
"""


class FetchError(RuntimeError):
    """Maven or Java is missing, or Maven could not resolve the jars."""


def require_tools() -> tuple[str, str]:
    """The paths of `mvn` and `java` (17 or newer), or a FetchError saying which is missing."""
    mvn = shutil.which("mvn")
    java = shutil.which("java")
    if mvn is None:
        raise FetchError("`mvn` (Apache Maven 3.6+) is not on PATH: install it (Debian: "
                         "apt-get install maven) to fetch Kafka's jars")
    if java is None:
        raise FetchError("`java` is not on PATH: Kafka's servers and tools need Java 17 or "
                         "newer (Debian: apt-get install openjdk-17-jre-headless)")
    return mvn, java


def stamp_text(version: str) -> str:
    """What the stamp of a complete classpath directory says: every input that shaped it."""
    return f"kafka={version} log4j={LOG4J_VERSION}\n"


def is_complete(vdir: Path, version: str) -> bool:
    """True when `vdir` was filled for exactly this version and its jars are still there."""
    stamp = vdir / STAMP
    libs = vdir / "libs"
    return (stamp.is_file() and stamp.read_text() == stamp_text(version)
            and libs.is_dir() and any(libs.glob("kafka_2.13-*.jar"))
            and (vdir / "log4j2.xml").is_file())


def fetch(version: str, cache: Path, offline: bool = False) -> Path:
    """Fill `<cache>/<version>/` (libs/, log4j2.xml, pom.xml); returns the directory."""
    if not re.fullmatch(r"4\.\d+\.\d+", version):
        raise FetchError(f"Kafka version {version!r}: expected 4.MINOR.PATCH (this tool "
                         f"knows Kafka 4's classpath)")
    vdir = cache / version
    if is_complete(vdir, version):
        print(f"kafka {version}: cached in {vdir}", flush=True)
        return vdir
    mvn, _ = require_tools()
    vdir.mkdir(parents=True, exist_ok=True)
    (vdir / "pom.xml").write_text(POM.format(kafka=version, log4j=LOG4J_VERSION))
    (vdir / "log4j2.xml").write_text(LOG4J2)
    libs = vdir / "libs"
    if libs.exists():
        shutil.rmtree(libs)
    cmd = [mvn, "--batch-mode", "--no-transfer-progress", "-f", str(vdir / "pom.xml"),
           f"-Dmaven.repo.local={cache / 'm2'}", "dependency:copy-dependencies",
           f"-DoutputDirectory={libs}", "-DincludeScope=runtime"]
    if offline:
        cmd.insert(1, "--offline")
    print(f"kafka {version}: resolving kafka_2.13, kafka-tools and log4j2 from Maven "
          f"Central into {libs} (about a minute the first time)", flush=True)
    started = time.monotonic()
    with open(vdir / "mvn.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        copied = 0
        for line in proc.stdout:
            log.write(line)
            if line.startswith("[INFO] Copying"):
                copied += 1
                if copied % 20 == 0:
                    print(f"  {copied} jars copied", flush=True)
            elif "BUILD" in line or "[ERROR]" in line:
                print(f"  {line.rstrip()}", flush=True)
        code = proc.wait()
    if code != 0:
        raise FetchError(f"kafka {version}: mvn failed (exit {code}); see {vdir / 'mvn.log'}")
    jars = sorted(p.name for p in libs.glob("*.jar"))
    slf4j = [j for j in jars if j.startswith("slf4j-api-")]
    if not slf4j or not slf4j[0].startswith("slf4j-api-1.7."):
        raise FetchError(f"kafka {version}: expected slf4j-api 1.7.x (what log4j-slf4j-impl "
                         f"binds), got {slf4j or 'none'}")
    (vdir / STAMP).write_text(stamp_text(version))
    print(f"kafka {version}: {len(jars)} jars in {time.monotonic() - started:.0f} s", flush=True)
    return vdir


def main(argv: list[str] | None = None) -> int:
    """Fetch every requested version; exit 1 with the reason when one cannot be fetched."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help=f"cache directory (default {DEFAULT_CACHE})")
    parser.add_argument("--version", action="append", dest="versions",
                        help=f"Kafka version (repeatable; default {' '.join(VERSIONS)})")
    parser.add_argument("--offline", action="store_true", help="pass --offline to mvn")
    args = parser.parse_args(argv)
    try:
        for version in args.versions or VERSIONS:
            fetch(version, args.cache, offline=args.offline)
    except FetchError as err:
        print(f"make kafka: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
