"""Finding replica directories and the log and snapshot files inside them.

A *replica directory* is a KRaft metadata log directory: it holds `meta.properties` and a
`__cluster_metadata-0/` partition directory with `<20-digit base offset>.log` segments and
`<20-digit end offset>-<10-digit epoch>.checkpoint` snapshots. The audit accepts, for each
input path, any of:

- a replica directory itself;
- its `__cluster_metadata-0/` partition directory;
- a directory whose immediate (or second-level) subdirectories are replica directories, e.g. a
  folder with one exported bundle per pod after `tar -x`.

Everything here is plain Python (no Spark) so the driver can plan partitions and tests can
check discovery without a JVM.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from kraft.storage.errors import StorageError
from kraft.storage.layout import (
    LOG_SUFFIX,
    METADATA_PARTITION_DIR,
    parse_segment_file_name,
    parse_snapshot_file_name,
)
from kraft.storage.meta_properties import read_meta_properties
from kraft.storage.quorum_state import QuorumStateData, QuorumStateStore

log = logging.getLogger(__name__)

PARTITION_DIR = METADATA_PARTITION_DIR


class AuditInputError(ValueError):
    """An input path is missing or is not a KRaft metadata directory (the message says which)."""


@dataclass(frozen=True, slots=True)
class LogFile:
    """One segment or snapshot file of a replica, as planned for one Spark partition."""

    replica: str
    node_id: int | None
    directory_id: str | None
    path: str
    source: str  # "log" or "snapshot"
    base_offset: int  # segment base offset, or 0 for a snapshot
    snapshot_end_offset: int | None = None
    snapshot_epoch: int | None = None
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica directory with its identity and the files to read from it."""

    name: str
    root: str
    node_id: int | None
    directory_id: str | None
    quorum_state: QuorumStateData | None
    segments: tuple[LogFile, ...]
    snapshots: tuple[LogFile, ...]

    @property
    def files(self) -> tuple[LogFile, ...]:
        """Segments (in offset order) followed by snapshots (in end-offset order)."""
        return self.segments + self.snapshots


def _read_quorum_state(partition_dir: Path) -> QuorumStateData | None:
    try:
        return QuorumStateStore(partition_dir).read()
    except (StorageError, ValueError) as exc:
        log.warning("event=quorum_state_unreadable dir=%s error=%s", partition_dir, exc)
        return None


def _is_replica_dir(path: Path) -> bool:
    return (path / PARTITION_DIR).is_dir()


def _files_of(
    partition_dir: Path, name: str, node_id: int | None, directory_id: str | None
) -> tuple[tuple[LogFile, ...], tuple[LogFile, ...]]:
    segments: list[LogFile] = []
    snapshots: list[LogFile] = []
    for entry in sorted(partition_dir.iterdir()):
        if not entry.is_file():
            continue
        seg = parse_segment_file_name(entry.name)
        if seg is not None and seg[1] == LOG_SUFFIX:
            segments.append(
                LogFile(name, node_id, directory_id, str(entry), "log", seg[0],
                        size_bytes=entry.stat().st_size)
            )
            continue
        snap = parse_snapshot_file_name(entry.name)
        if snap is not None:
            snapshots.append(
                LogFile(name, node_id, directory_id, str(entry), "snapshot", 0,
                        snap.end_offset, snap.epoch, size_bytes=entry.stat().st_size)
            )
    segments.sort(key=lambda f: f.base_offset)
    snapshots.sort(key=lambda f: (f.snapshot_end_offset or 0, f.snapshot_epoch or 0))
    return tuple(segments), tuple(snapshots)


def load_replica(root: Path, name: str | None = None) -> Replica:
    """Describe one replica directory (raises AuditInputError when it is not one)."""
    root = root.resolve()
    if root.name == PARTITION_DIR:
        root = root.parent
    partition_dir = root / PARTITION_DIR
    if not partition_dir.is_dir():
        raise AuditInputError(
            f"{root}: not a KRaft metadata directory (no {PARTITION_DIR}/ inside)"
        )
    node_id: int | None = None
    directory_id: str | None = None
    try:
        meta = read_meta_properties(root)
    except (StorageError, ValueError) as exc:
        raise AuditInputError(f"{root}: unreadable meta.properties: {exc}") from None
    if meta is not None:
        node_id = meta.node_id
        directory_id = str(meta.directory_id) if meta.directory_id is not None else None
    label = name or (f"node-{node_id}" if node_id is not None else root.name)
    segments, snapshots = _files_of(partition_dir, label, node_id, directory_id)
    quorum_state = _read_quorum_state(partition_dir)
    return Replica(label, str(root), node_id, directory_id, quorum_state, segments, snapshots)


def _candidate_roots(path: Path) -> list[Path]:
    if path.name == PARTITION_DIR and path.is_dir():
        return [path.parent]
    if _is_replica_dir(path):
        return [path]
    found: list[Path] = []
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        if _is_replica_dir(child):
            found.append(child)
        else:
            found.extend(sorted(g for g in child.iterdir() if g.is_dir() and _is_replica_dir(g)))
    return found


def discover_replicas(paths: list[str] | tuple[str, ...]) -> list[Replica]:
    """Find every replica directory under `paths` (see the module docstring for the shapes).

    Replica names are `node-<node.id>` from meta.properties, or the directory name when there
    is none; when two directories would get the same name, the directory name is appended so
    names stay unique. Raises AuditInputError naming the first path that is missing or holds
    no metadata directory.
    """
    if not paths:
        raise AuditInputError("no input paths given")
    roots: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise AuditInputError(f"{raw}: no such file or directory")
        if not path.is_dir():
            raise AuditInputError(f"{raw}: not a directory (extract bundles with tar -x first)")
        found = _candidate_roots(path.resolve())
        if not found:
            raise AuditInputError(
                f"{raw}: not a KRaft metadata directory and none below it "
                f"(expected {PARTITION_DIR}/ with *.log segments)"
            )
        roots.extend(r for r in found if r not in roots)
    replicas = [load_replica(r) for r in roots]
    counts: dict[str, int] = {}
    for r in replicas:
        counts[r.name] = counts.get(r.name, 0) + 1
    out: list[Replica] = []
    for r in replicas:
        if counts[r.name] > 1:
            r = load_replica(Path(r.root), f"{r.name}@{Path(r.root).name}")
        out.append(r)
    return out
