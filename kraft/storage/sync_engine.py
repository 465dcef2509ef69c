"""The engines that start a log's fdatasync from the owner thread and signal its completion on
an eventfd (`SegmentedLog.start_flush` / `finish_flush`), and the choice between them.

* `uring` (`kraft.storage.uring`): io_uring. The default where the kernel and the seccomp
  profile allow it.
* `aio` (`kraft.storage.aio`): Linux native AIO. Only when asked for: a process holding an AIO
  context takes ~30 ms longer to die after kill -9, so peers notice a killed leader later.
* neither: the caller keeps its flusher thread.
"""

from __future__ import annotations

import logging
from typing import Literal, Protocol

from kraft.storage.aio import KernelSync
from kraft.storage.uring import UringSync

log = logging.getLogger(__name__)

Choice = Literal["auto", "uring", "aio", "off"]


class SyncEngine(Protocol):
    """What `SegmentedLog.use_kernel_sync` needs of an engine (owned by one thread)."""

    closed: bool
    capacity: int
    """Requests that may be in flight at once."""

    def fileno(self) -> int:
        """An eventfd that becomes readable when a request completes."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet reaped."""
        ...

    def submit(self, fd: int, token: int) -> None:
        """Start an fdatasync of `fd` (OSError: refused, nothing started)."""
        ...

    def reap(self) -> list[tuple[int, int]]:
        """`(token, result)` of the requests completed so far, without blocking."""
        ...

    def wait(self) -> list[tuple[int, int]]:
        """Block until at least one request completes (none in flight: [])."""
        ...

    def close(self) -> None:
        """Wait for what is in flight, then release the engine."""
        ...


def open_engine(choice: Choice) -> tuple[SyncEngine | None, str]:
    """The engine `choice` names (`auto`: io_uring if it opens here), with its name; (None,
    "thread") when the choice is `off` or the engine cannot be opened here (logged)."""
    engine: SyncEngine | None = None
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
