"""A real `kraft run` process started on a directory whose meta.properties has no directory.id."""

from __future__ import annotations

from collections.abc import Callable

from kraft.cli.local import LocalCluster
from kraft.storage.meta_properties import read_meta_properties


def test_start_generates_a_missing_directory_id(clusters: Callable[..., LocalCluster]) -> None:
    c = clusters(voters=1, static=True)
    c.format(1)
    path = c.nodes[1].dir / "meta.properties"
    path.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                            if not line.startswith("directory.id=")))
    c.start(1)
    c.wait_ready(1, 60)
    meta = read_meta_properties(c.nodes[1].dir)
    assert meta is not None and meta.directory_id is not None
    status = c.status(1)
    assert status is not None and status["directory_id"] == str(meta.directory_id)
    # a restart keeps the one written
    c.stop_all()
    c.start(1)
    c.wait_ready(1, 60)
    status = c.status(1)
    assert status is not None and status["directory_id"] == str(meta.directory_id)
