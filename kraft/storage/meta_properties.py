"""`meta.properties`: the identity of a formatted log directory (KRaft version 1)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kraft.config.properties import PropertiesSyntaxError, read_properties
from kraft.protocol.uuid import Uuid
from kraft.storage.errors import NotFormattedError
from kraft.storage.layout import META_PROPERTIES
from kraft.storage.properties import write_properties


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The keys of a version-1 meta.properties: cluster, node and directory identity."""

    cluster_id: str
    node_id: int
    directory_id: Uuid | None
    version: int = 1

    def to_properties(self) -> dict[str, str]:
        """The key/value pairs Kafka writes."""
        props = {
            "version": str(self.version),
            "cluster.id": self.cluster_id,
            "node.id": str(self.node_id),
        }
        if self.directory_id is not None:
            props["directory.id"] = str(self.directory_id)
        return props

    @staticmethod
    def from_properties(props: dict[str, str], source: str = META_PROPERTIES) -> MetaProperties:
        """Validate and build from parsed keys; raises NotFormattedError naming the bad key."""

        def need(key: str) -> str:
            if key not in props:
                raise NotFormattedError(f"{source}: missing key {key!r}")
            return props[key]

        try:
            version = int(need("version"))
        except ValueError:
            raise NotFormattedError(f"{source}: version {props['version']!r} is not an integer") from None
        if version != 1:
            raise NotFormattedError(
                f"{source}: version {version} is not supported (KRaft directories use version 1)"
            )
        try:
            node_id = int(need("node.id"))
        except ValueError:
            raise NotFormattedError(f"{source}: node.id {props['node.id']!r} is not an integer") from None
        dir_text = props.get("directory.id")
        try:
            directory_id = Uuid.parse(dir_text) if dir_text is not None else None
        except ValueError as exc:
            raise NotFormattedError(f"{source}: directory.id: {exc}") from None
        return MetaProperties(need("cluster.id"), node_id, directory_id, version)


def meta_properties_path(log_dir: Path | str) -> Path:
    """`<log dir>/meta.properties`."""
    return Path(log_dir) / META_PROPERTIES


def read_meta_properties(log_dir: Path | str) -> MetaProperties | None:
    """Read a directory's meta.properties, or None when the directory is not formatted."""
    path = meta_properties_path(log_dir)
    if not path.exists():
        return None
    try:
        props = read_properties(path)
    except PropertiesSyntaxError as exc:
        raise NotFormattedError(str(exc)) from None
    return MetaProperties.from_properties(props, str(path))


def write_meta_properties(log_dir: Path | str, meta: MetaProperties) -> Path:
    """Write meta.properties atomically and durably; returns its path."""
    path = meta_properties_path(log_dir)
    write_properties(path, meta.to_properties(), comment="")
    return path
