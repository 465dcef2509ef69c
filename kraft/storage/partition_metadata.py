"""`partition.metadata`: the metadata topic id of `__cluster_metadata-0`."""

from __future__ import annotations

from pathlib import Path

from kraft.protocol.uuid import Uuid
from kraft.storage.durability import atomic_write
from kraft.storage.errors import NotFormattedError
from kraft.storage.layout import PARTITION_METADATA


def write_partition_metadata(partition_dir: Path | str, topic_id: Uuid = Uuid.METADATA_TOPIC_ID) -> Path:
    """Write `version: 0` / `topic_id: <base64>` atomically; returns the path."""
    path = Path(partition_dir) / PARTITION_METADATA
    atomic_write(path, f"version: 0\ntopic_id: {topic_id}\n".encode())
    return path


def read_partition_metadata(partition_dir: Path | str) -> Uuid | None:
    """The topic id stored in partition.metadata, or None when the file does not exist."""
    path = Path(partition_dir) / PARTITION_METADATA
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    if fields.get("version") != "0":
        raise NotFormattedError(f"{path}: unsupported version {fields.get('version')!r}")
    try:
        return Uuid.parse(fields.get("topic_id", ""))
    except ValueError as exc:
        raise NotFormattedError(f"{path}: topic_id: {exc}") from None
