"""The choice between the sync engines (`kraft.storage.sync_engine`): io_uring
(`kraft.storage.uring`), Linux native AIO (`kraft.storage.aio`), or none (the caller keeps its
flusher thread).

A module of its own because it needs both engines, and both build on
`kraft.storage.sync_engine.SyncEngine`: the base module then imports neither.
"""

from __future__ import annotations

import logging

from kraft.storage.aio import KernelSync
from kraft.storage.sync_engine import Choice, SyncEngine
from kraft.storage.uring import UringSync

log = logging.getLogger("kraft.storage.sync_engine")
"""The logger of the engines (the warning below keeps its name)."""


def open_engine(choice: Choice) -> tuple[SyncEngine | None, str]:
    """The engine `choice` names (`auto`: io_uring if it opens here), with its name; (None,
    "thread") when the choice is `off` or the engine cannot be opened here (logged)."""
    engine: SyncEngine | None = None
    name = "thread"
    if choice in ("auto", "uring"):
        engine = UringSync.open()
        name = "uring"
    elif choice == "aio":
        engine = KernelSync.open()
        name = "aio"
    if engine is not None:
        return engine, name
    if choice in ("uring", "aio"):
        log.warning("event=flush_engine_unavailable engine=%s fallback=thread", choice)
    return None, "thread"
