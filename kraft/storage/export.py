"""Export a consistent bundle of one replica's metadata log and snapshots, for `kraft audit`.

    kraft export --dir METADATA_DIR --output BUNDLE.tar
    curl -o BUNDLE.tar http://ADMIN_HOST:PORT/v1/export      (from a running node)

The replica may be running while this runs. Consistency comes from three rules:

- every file is opened before anything is copied, so a segment or snapshot deleted meanwhile
  (snapshot cleanup, retention) is still read in full through its open descriptor;
- segments other than the last, and frozen snapshots, are immutable: copied as they are;
- the last (active) segment is copied only up to the end of its last complete, CRC-valid
  batch at the moment of the export, so a batch being appended is never cut in half.

A file that shrinks during the copy (a follower truncating its log after a divergence) makes
the attempt fail; the export retries from scratch (3 attempts).

The tar holds `node-<id>/meta.properties`, `node-<id>/__cluster_metadata-0/` (segments,
snapshots, quorum-state, leader-epoch-checkpoint, partition.metadata) and
`node-<id>/bundle-manifest.json`, so untarring several bundles into one folder gives the
layout `kraft audit --input FOLDER` reads.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import mmap
import os
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO

from kraft.records.batch import scan_batches
from kraft.storage.layout import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    META_PROPERTIES,
    METADATA_PARTITION_DIR,
    PARTITION_METADATA,
    QUORUM_STATE,
    parse_segment_file_name,
    parse_snapshot_file_name,
    partition_dir,
)
from kraft.storage.meta_properties import read_meta_properties

log = logging.getLogger(__name__)

MANIFEST = "bundle-manifest.json"
FORMAT = "kraft-audit-bundle/1"
ATTEMPTS = 3


class ExportError(RuntimeError):
    """The directory cannot be exported (names the directory and the reason)."""


@dataclass
class BundleFile:
    """One file in the bundle, with the bytes taken and what they hold."""

    name: str
    kind: str  # segment | snapshot | state
    bytes: int
    base_offset: int | None = None
    next_offset: int | None = None
    end_offset: int | None = None
    epoch: int | None = None


@dataclass
class BundleManifest:
    """What the bundle holds; written as `bundle-manifest.json` inside it."""

    format: str
    node_id: int
    directory_id: str | None
    cluster_id: str
    source: str
    created_at: str
    log_start_offset: int | None
    log_end_offset: int | None
    files: list[BundleFile] = field(default_factory=list)

    def to_json(self) -> str:
        """The manifest as indented JSON."""
        return json.dumps(asdict(self), indent=2) + "\n"


class _Opened:
    """A file opened for export, and how many of its bytes to take."""

    def __init__(self, path: Path, info: BundleFile) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self.info = info

    def close(self) -> None:
        os.close(self.fd)


def _valid_prefix(fd: int, size: int) -> tuple[int, int | None]:
    """(bytes, next offset) of the complete, CRC-valid batches at the start of a file."""
    if size == 0:
        return 0, None
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            result = scan_batches(view)
            valid, next_offset = result.valid_bytes, result.next_offset
            del result
        finally:
            view.release()
    return valid, next_offset


def _open_all(metadata_dir: Path) -> tuple[list[_Opened], int | None, int | None]:
    pdir = partition_dir(metadata_dir)
    opened: list[_Opened] = []
    try:
        segments = sorted(
            (parsed[0], name) for name in os.listdir(pdir)
            if (parsed := parse_segment_file_name(name)) is not None and parsed[1] == LOG_SUFFIX
        )
        snapshots = sorted(
            (sid, name) for name in os.listdir(pdir)
            if (sid := parse_snapshot_file_name(name)) is not None
        )
        for base, name in segments:
            opened.append(_Opened(pdir / name, BundleFile(name, "segment", 0, base_offset=base)))
        for sid, name in snapshots:
            opened.append(_Opened(pdir / name, BundleFile(
                name, "snapshot", 0, end_offset=sid.end_offset, epoch=sid.epoch)))
        log_start = segments[0][0] if segments else None
        log_end: int | None = None
        seg_files = [o for o in opened if o.info.kind == "segment"]
        for i, o in enumerate(seg_files):
            size = os.fstat(o.fd).st_size
            if i == len(seg_files) - 1:
                valid, next_offset = _valid_prefix(o.fd, size)
                o.info.bytes = valid
                o.info.next_offset = next_offset if next_offset is not None else o.info.base_offset
                log_end = o.info.next_offset
            else:
                o.info.bytes = size
                o.info.next_offset = seg_files[i + 1].info.base_offset
        for o in opened:
            if o.info.kind == "snapshot":
                o.info.bytes = os.fstat(o.fd).st_size
        return opened, log_start, log_end
    except BaseException:
        for o in opened:
            o.close()
        raise


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def export_bundle(
    metadata_dir: str | Path, output: str | Path | BinaryIO
) -> BundleManifest:
    """Write a consistent tar bundle of `metadata_dir` to `output` (a path or binary stream).

    Raises ExportError when the directory is not a formatted KRaft metadata directory or
    when three attempts all saw files change under them. The tar is streamed (`w|`), so
    `output` may be a socket or HTTP response body.
    """
    root = Path(metadata_dir).expanduser().resolve()
    if not partition_dir(root).is_dir():
        raise ExportError(f"{root}: not a KRaft metadata directory (no {METADATA_PARTITION_DIR}/)")
    meta = read_meta_properties(root)
    if meta is None:
        raise ExportError(f"{root}: no {META_PROPERTIES}; format the directory first")
    last_error: Exception | None = None
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _export_once(root, meta, output)
        except (OSError, tarfile.TarError) as exc:
            if not isinstance(output, str | Path):
                raise ExportError(f"{root}: export failed: {exc}") from exc
            last_error = exc
            log.warning("event=export_retry dir=%s attempt=%d error=%r", root, attempt, str(exc))
    raise ExportError(f"{root}: files kept changing during export: {last_error}")


def _export_once(root: Path, meta: object, output: str | Path | BinaryIO) -> BundleManifest:
    from kraft.storage.meta_properties import MetaProperties

    assert isinstance(meta, MetaProperties)
    prefix = f"node-{meta.node_id}"
    pdir = partition_dir(root)
    opened, log_start, log_end = _open_all(root)
    manifest = BundleManifest(
        format=FORMAT, node_id=meta.node_id,
        directory_id=str(meta.directory_id) if meta.directory_id is not None else None,
        cluster_id=meta.cluster_id, source=str(root),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        log_start_offset=log_start, log_end_offset=log_end,
    )
    small: list[tuple[str, bytes]] = [(META_PROPERTIES, (root / META_PROPERTIES).read_bytes())]
    for name in (QUORUM_STATE, LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA):
        path = pdir / name
        if path.is_file():
            small.append((f"{METADATA_PARTITION_DIR}/{name}", path.read_bytes()))
    if isinstance(output, str | Path):
        out_path = Path(output)
        tmp = out_path.with_name(out_path.name + ".part")
        stream: BinaryIO = open(tmp, "wb")  # noqa: SIM115
    else:
        out_path = tmp = None  # type: ignore[assignment]
        stream = output
    try:
        with tarfile.open(fileobj=stream, mode="w|") as tar:
            for name, data in small:
                _add_bytes(tar, f"{prefix}/{name}", data)
                manifest.files.append(BundleFile(name, "state", len(data)))
            for o in opened:
                info = tarfile.TarInfo(f"{prefix}/{METADATA_PARTITION_DIR}/{o.info.name}")
                info.size = o.info.bytes
                info.mtime = int(os.fstat(o.fd).st_mtime)
                info.mode = 0o644
                with os.fdopen(os.dup(o.fd), "rb") as f:
                    tar.addfile(info, f)
                manifest.files.append(o.info)
            _add_bytes(tar, f"{prefix}/{MANIFEST}", manifest.to_json().encode())
    finally:
        for o in opened:
            o.close()
        if tmp is not None:
            stream.close()
    if tmp is not None:
        os.replace(tmp, out_path)
    log.info("event=bundle_exported dir=%s node=%d files=%d log_end_offset=%s output=%s",
             root, meta.node_id, len(manifest.files), log_end, out_path or "<stream>")
    return manifest


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add `kraft export`'s options to a parser."""
    p.add_argument("--dir", required=True, help="the node's metadata log directory")
    p.add_argument("--output", required=True, help="bundle file to write (tar), or - for stdout")


def run_from_args(args: argparse.Namespace) -> int:
    """Export for parsed options; returns 0, or 2 when the directory cannot be exported."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    try:
        if args.output == "-":
            manifest = export_bundle(args.dir, sys.stdout.buffer)
        else:
            manifest = export_bundle(args.dir, args.output)
    except ExportError as exc:
        print(f"kraft export: error: {exc}", file=sys.stderr)
        return 2
    segs = sum(1 for f in manifest.files if f.kind == "segment")
    snaps = sum(1 for f in manifest.files if f.kind == "snapshot")
    print(f"exported node {manifest.node_id}: {segs} segments, {snaps} snapshots, "
          f"offsets [{manifest.log_start_offset}, {manifest.log_end_offset})", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m kraft.storage.export --dir METADATA_DIR --output BUNDLE.tar`."""
    p = argparse.ArgumentParser(prog="kraft export",
                                description="Export a consistent bundle of a replica's "
                                            "log segments and snapshots for `kraft audit`.")
    add_arguments(p)
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
