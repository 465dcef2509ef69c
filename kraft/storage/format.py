"""`kraft format`: what Kafka 4.1's `kafka-storage format` writes, from a server.properties.

For every configured directory (all of `log.dirs`, plus `metadata.log.dir`, which defaults to
the first of `log.dirs`): `bootstrap.checkpoint` (metadata.version and any `--feature`
levels), then for a *dynamic* metadata directory (`--standalone` or `--initial-controllers`)
`__cluster_metadata-0/00000000000000000000-0000000000.checkpoint` holding SnapshotHeader,
KRaftVersion(1) and the initial VotersRecord, and last `meta.properties` — so a format cut
short leaves a directory that is still "not formatted" and can be formatted again.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kraft.protocol.uuid import Uuid
from kraft.records.control import Endpoint, KRaftVersionFeature, Voter, VotersRecord
from kraft.records.snapshot_format import iter_snapshot_batches
from kraft.storage.bootstrap import (
    KRAFT_VERSION_1_MIN_LEVEL,
    KRAFT_VERSION_FEATURE,
    LATEST_PRODUCTION,
    METADATA_VERSION_FEATURE,
    FeatureLevelRecord,
    metadata_version_level,
    write_bootstrap_checkpoint,
)
from kraft.storage.durability import fsync_dir
from kraft.storage.errors import (
    AlreadyFormattedError,
    FormattedForAnotherError,
    StorageConfigError,
)
from kraft.storage.layout import BOOTSTRAP_SNAPSHOT_ID, LOG_SUFFIX, partition_dir
from kraft.storage.meta_properties import (
    MetaProperties,
    read_meta_properties,
    write_meta_properties,
)
from kraft.storage.snapshots import SnapshotStore


@dataclass(frozen=True, slots=True)
class InitialVoter:
    """One `id@host:port:directoryId` entry of `--initial-controllers`."""

    node_id: int
    host: str
    port: int
    directory_id: Uuid

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{self.directory_id}"


_VOTER_RE = re.compile(r"^(?P<id>[^@]*)@(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>[^:]*):(?P<dir>.*)$")


def parse_initial_controllers(text: str) -> tuple[InitialVoter, ...]:
    """Parse `id@host:port:dirId,...`; raises StorageConfigError naming the bad entry."""
    voters: list[InitialVoter] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            raise StorageConfigError(f"--initial-controllers {text!r}: empty entry")
        m = _VOTER_RE.match(entry)
        if m is None:
            raise StorageConfigError(
                f"--initial-controllers entry {entry!r}: expected id@host:port:directoryId"
            )
        try:
            node_id = int(m.group("id"))
        except ValueError:
            node_id = -1
        if node_id < 0:
            raise StorageConfigError(
                f"--initial-controllers entry {entry!r}: node id {m.group('id')!r} is not a "
                "non-negative integer"
            )
        host = m.group("host")
        if host.startswith("["):
            host = host[1:-1]
        if not host:
            raise StorageConfigError(f"--initial-controllers entry {entry!r}: empty host")
        try:
            port = int(m.group("port"))
        except ValueError:
            port = -1
        if not 0 < port < 65536:
            raise StorageConfigError(
                f"--initial-controllers entry {entry!r}: port {m.group('port')!r} is not in 1-65535"
            )
        try:
            dir_id = Uuid.parse(m.group("dir"))
        except ValueError as exc:
            raise StorageConfigError(
                f"--initial-controllers entry {entry!r}: bad directory id: {exc}"
            ) from None
        if dir_id.is_zero():
            raise StorageConfigError(
                f"--initial-controllers entry {entry!r}: the directory id must not be zero"
            )
        if any(v.node_id == node_id for v in voters):
            raise StorageConfigError(
                f"--initial-controllers: node id {node_id} appears more than once"
            )
        voters.append(InitialVoter(node_id, host, port, dir_id))
    return tuple(voters)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The server.properties keys `format` needs, validated."""

    node_id: int
    process_roles: tuple[str, ...]
    log_dirs: tuple[Path, ...]
    metadata_log_dir: Path
    controller_listener_names: tuple[str, ...]
    listeners: dict[str, tuple[str, int]]
    advertised_listeners: dict[str, tuple[str, int]]
    quorum_voters: str

    @property
    def is_controller(self) -> bool:
        """True when process.roles includes controller."""
        return "controller" in self.process_roles


def server_config(props: dict[str, str], source: str = "config") -> ServerConfig:
    """Validate the properties (every known key, with `ServerProperties`; unknown keys are
    tolerated, as Kafka does) and take the keys format needs; errors name the key and value."""
    from kraft.config.server_properties import ServerProperties, ServerPropertiesError

    try:
        sp = ServerProperties.from_mapping(props, source)
    except ServerPropertiesError as exc:
        raise StorageConfigError(str(exc)) from None
    metadata_dir = sp.metadata_directory
    if metadata_dir is None:
        raise StorageConfigError(
            f"{source}: no directory to format: set metadata.log.dir or log.dirs"
        )
    return ServerConfig(
        node_id=sp.node_id,
        process_roles=tuple(sp.process_roles),
        log_dirs=tuple(sp.log_directories),
        metadata_log_dir=metadata_dir,
        controller_listener_names=tuple(sp.controller_listener_names),
        listeners={a.name: (a.host, a.port) for a in sp.listeners},
        advertised_listeners={a.name: (a.host, a.port) for a in sp.advertised_listeners},
        quorum_voters=",".join(str(v) for v in sp.quorum_voters),
    )


@dataclass(frozen=True, slots=True)
class FormattedDirectory:
    """One directory `format` wrote: its kind (Kafka's wording), identity and files."""

    path: Path
    kind: str
    meta: MetaProperties
    files: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class FormatResult:
    """What `format_storage` did."""

    release_version: str
    kraft_version: int
    voters: tuple[InitialVoter, ...] | None
    formatted: tuple[FormattedDirectory, ...]
    skipped: tuple[Path, ...] = field(default=())


def _parse_features(features: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in features:
        name, sep, level = f.partition("=")
        name = name.strip()
        if not sep or not name:
            raise StorageConfigError(f"--feature {f!r}: expected name=level")
        try:
            out[name] = int(level)
        except ValueError:
            raise StorageConfigError(f"--feature {f!r}: level {level!r} is not an integer") from None
    return out


def _standalone_voter(cfg: ServerConfig) -> InitialVoter:
    if not cfg.controller_listener_names:
        raise StorageConfigError("--standalone: controller.listener.names is not set")
    name = cfg.controller_listener_names[0]
    found = cfg.advertised_listeners.get(name) or cfg.listeners.get(name)
    if found is None:
        raise StorageConfigError(
            f"--standalone: no listener named {name} (the first of controller.listener.names) "
            "in advertised.listeners or listeners"
        )
    host, port = found
    return InitialVoter(cfg.node_id, host or "localhost", port, Uuid.random())


def _check_identity(d: Path, meta: MetaProperties | None, cluster_id: str, node_id: int) -> None:
    """Refuse a directory formatted for another cluster or node (FormattedForAnotherError)."""
    if meta is None:
        return
    if meta.cluster_id != cluster_id:
        raise FormattedForAnotherError(
            f"{d / 'meta.properties'} is formatted for cluster {meta.cluster_id}, not "
            f"{cluster_id}: this volume holds another cluster's data. Give the cluster id it "
            "was formatted with, or empty the directory to start it anew (losing its data)."
        )
    if meta.node_id != node_id:
        raise FormattedForAnotherError(
            f"{d / 'meta.properties'} is formatted for node {meta.node_id}, not node.id "
            f"{node_id}: this volume belongs to another node. Mount the volume of node "
            f"{node_id}, or empty the directory to start it anew (losing its data)."
        )


def format_storage(
    props: dict[str, str],
    cluster_id: str,
    *,
    standalone: bool = False,
    initial_controllers: str | None = None,
    no_initial_controllers: bool = False,
    ignore_formatted: bool = False,
    release_version: str = LATEST_PRODUCTION,
    features: list[str] | None = None,
    out: TextIO | None = None,
    source: str = "config",
    timestamp_ms: int | None = None,
) -> FormatResult:
    """Format the directories named by `props` (a parsed server.properties).

    Raises StorageConfigError for bad input (before anything is written),
    FormattedForAnotherError when a directory is formatted for another cluster id or node id
    (whatever `ignore_formatted` says), and AlreadyFormattedError when a directory holds
    meta.properties and `ignore_formatted` is false. With `ignore_formatted` (Kafka's
    `--ignore-formatted`) formatted directories of this cluster and node are left as they
    are and the others are formatted: run again, it does nothing, which is what an init
    container needs. Directories already formatted are never modified.
    """
    stream = out if out is not None else sys.stdout
    try:
        Uuid.parse(cluster_id)
    except ValueError as exc:
        raise StorageConfigError(f"--cluster-id: {exc}") from None
    cfg = server_config(props, source)
    modes = sum([standalone, initial_controllers is not None, no_initial_controllers])
    if modes > 1:
        raise StorageConfigError(
            "--standalone, --initial-controllers and --no-initial-controllers are mutually exclusive"
        )
    if modes and not cfg.is_controller:
        raise StorageConfigError(
            "--standalone, --initial-controllers and --no-initial-controllers can only be used "
            "on a controller (process.roles must include controller)"
        )
    if modes and cfg.quorum_voters:
        raise StorageConfigError(
            "controller.quorum.voters is set (a static quorum): do not also give "
            "--standalone, --initial-controllers or --no-initial-controllers"
        )
    if cfg.is_controller and not cfg.quorum_voters and not modes:
        raise StorageConfigError(
            "controller.quorum.voters is not set on this controller: give one of "
            "--standalone, --initial-controllers or --no-initial-controllers"
        )
    release, mv_level = metadata_version_level(release_version)
    extra = _parse_features(features or [])
    if METADATA_VERSION_FEATURE in extra:
        raise StorageConfigError("use --release-version, not --feature metadata.version=...")
    kraft_version = 1 if modes else 0
    if KRAFT_VERSION_FEATURE in extra and extra.pop(KRAFT_VERSION_FEATURE) != kraft_version:
        raise StorageConfigError(
            f"--feature kraft.version contradicts the quorum type: it must be {kraft_version} "
            + ("with a dynamic quorum" if modes else "with a static quorum (controller.quorum.voters)")
        )
    if kraft_version >= 1 and mv_level < KRAFT_VERSION_1_MIN_LEVEL:
        # Kafka's feature dependency check: kraft.version 1 needs metadata.version 3.9-IV0.
        raise StorageConfigError(
            f"kraft.version could not be set to {kraft_version} because it depends on "
            f"metadata.version level {KRAFT_VERSION_1_MIN_LEVEL} (3.9-IV0); --release-version "
            f"{release} is level {mv_level}. Give --release-version 3.9-IV0 or later, or a "
            "static quorum (controller.quorum.voters)"
        )
    voters: tuple[InitialVoter, ...] | None = None
    if standalone:
        voters = (_standalone_voter(cfg),)
    elif initial_controllers is not None:
        voters = parse_initial_controllers(initial_controllers)
        if not cfg.controller_listener_names:
            raise StorageConfigError("--initial-controllers: controller.listener.names is not set")

    dirs: list[Path] = []
    for d in (cfg.metadata_log_dir, *cfg.log_dirs):
        if d not in dirs:
            dirs.append(d)
    for d in dirs:  # as Kafka: every formatted directory is checked before anything else
        if (d / "meta.properties").exists():
            _check_identity(d, read_meta_properties(d), cluster_id, cfg.node_id)
    to_format: list[Path] = []
    skipped: list[Path] = []
    for d in dirs:
        if (d / "meta.properties").exists():
            read_meta_properties(d)  # refuse loudly on a damaged file as well
            if not ignore_formatted:
                raise AlreadyFormattedError(
                    f"Log directory {d} is already formatted. Use --ignore-formatted to "
                    "ignore this directory and format the others."
                )
            skipped.append(d)
            continue
        pdir = partition_dir(d)
        if pdir.is_dir() and any(
            p.suffix == LOG_SUFFIX and p.stat().st_size > 0 for p in pdir.iterdir()
        ):
            raise AlreadyFormattedError(
                f"{d} has no meta.properties but {pdir} holds log segments with data; "
                "refusing to format over them"
            )
        to_format.append(d)
    if not to_format:
        print("All of the log directories are already formatted.", file=stream)
        return FormatResult(release, kraft_version, voters, (), tuple(skipped))

    feature_records = [FeatureLevelRecord(METADATA_VERSION_FEATURE, mv_level)]
    feature_records += [FeatureLevelRecord(n, lvl) for n, lvl in sorted(extra.items())]
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    my_voter = next((v for v in voters or () if v.node_id == cfg.node_id), None)
    results: list[FormattedDirectory] = []
    for d in to_format:
        is_meta = d == cfg.metadata_log_dir
        if not is_meta:
            kind = "data directory"
        elif voters is not None:
            kind = "dynamic metadata voter directory" if my_voter else "dynamic metadata directory"
        else:
            kind = "metadata directory"
        print(f"Formatting {kind} {d} with metadata.version {release}.", file=stream)
        d.mkdir(parents=True, exist_ok=True)
        files = [write_bootstrap_checkpoint(d, feature_records, timestamp_ms=now)]
        dir_id = my_voter.directory_id if (is_meta and my_voter) else Uuid.random()
        if is_meta and voters is not None:
            pdir = partition_dir(d)
            pdir.mkdir(exist_ok=True)
            store = SnapshotStore(pdir)
            stale = store.path(BOOTSTRAP_SNAPSHOT_ID)
            stale.unlink(missing_ok=True)  # left by an earlier, interrupted format
            store.recover()
            listener = cfg.controller_listener_names[0]
            record = VotersRecord(
                tuple(
                    Voter(
                        v.node_id,
                        v.directory_id,
                        (Endpoint(listener, v.host, v.port),),
                        KRaftVersionFeature(0, 1),
                    )
                    for v in voters
                )
            )
            files.append(
                store.write(
                    BOOTSTRAP_SNAPSHOT_ID,
                    iter_snapshot_batches(
                        0, now, [], timestamp_ms=now, kraft_version=1, voters=record
                    ),
                )
            )
        meta = MetaProperties(cluster_id, cfg.node_id, dir_id)
        files.append(write_meta_properties(d, meta))
        fsync_dir(d.parent if d.parent != d else d)
        results.append(FormattedDirectory(d, kind, meta, tuple(files)))
    return FormatResult(release, kraft_version, voters, tuple(results), tuple(skipped))
