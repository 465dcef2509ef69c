"""Durable writes of `.properties` files (meta.properties, server.properties): the text is
`kraft.config`'s, written atomically (`.tmp`, fsync, rename, fsync dir)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kraft.config.properties import format_properties
from kraft.config.server_properties import ServerProperties
from kraft.storage.durability import atomic_write


def write_properties(path: Path | str, props: Mapping[str, str], comment: str | None = "") -> None:
    """Write a properties file atomically and durably (`.tmp`, fsync, rename, fsync dir)."""
    atomic_write(path, format_properties(props, comment).encode("utf-8"))


def write_server_properties(path: Path | str, properties: ServerProperties,
                            comment: str | None = None) -> None:
    """Write `properties.render(comment)` to `path` atomically (temporary file, fsync, rename)."""
    atomic_write(path, properties.render(comment).encode("utf-8"))
