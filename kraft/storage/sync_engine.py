"""The engines that start a log's fdatasync from the owner thread and signal its completion on
an eventfd (`SegmentedLog.start_flush` / `finish_flush`) and what they share; the choice
between them is `kraft.storage.engine_choice.open_engine`.

* `uring` (`kraft.storage.uring`): io_uring. The default where the kernel and the seccomp
  profile allow it.
* `aio` (`kraft.storage.aio`): Linux native AIO. Only when asked for: a process holding an AIO
  context takes ~30 ms longer to die after kill -9, so peers notice a killed leader later.
* neither: the caller keeps its flusher thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import platform
import sys
from collections.abc import Container
from typing import Literal, Self

log = logging.getLogger(__name__)

Choice = Literal["auto", "uring", "aio", "off"]


class SyncEngine:
    """One engine, owned by one thread (the event loop): `submit(fd, token)` starts an
    fdatasync of `fd`; when `fileno()` becomes readable, `reap()` returns `(token, result)`
    pairs, result 0 or a negative errno as the kernel's fdatasync returned it; `wait()` blocks
    until at least one request completes. An engine provides `open`, `submit`, `reap`, `wait`
    and `_release`."""

    what = "sync engine"
    """What the engine holds, for errors ("io_uring ring")."""

    def __init__(self, efd: int, capacity: int) -> None:
        self._efd = efd
        self.capacity = capacity
        """Requests that may be in flight at once."""
        self._token_of: dict[int, int] = {}  # request id -> the caller's token
        self.closed = False

    @classmethod
    def open(cls) -> Self | None:
        """A new engine, or None where it is not available here."""
        raise NotImplementedError

    @staticmethod
    def _libc_here(machines: Container[str]) -> ctypes.CDLL | None:
        """The C library, its `syscall` returning a long, on little-endian Linux on one of
        `machines` with `os.eventfd`; None elsewhere (no engine can open there)."""
        if not sys.platform.startswith("linux") or platform.machine() not in machines \
                or sys.byteorder != "little" or not hasattr(os, "eventfd"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
        except (OSError, AttributeError):
            return None
        return libc

    @classmethod
    def available(cls) -> bool:
        """True when `open()` works on this machine (opens and closes one)."""
        engine = cls.open()
        if engine is None:
            return False
        engine.close()
        return True

    def fileno(self) -> int:
        """The eventfd that becomes readable when a request completes."""
        return self._efd

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet reaped."""
        return len(self._token_of)

    def submit(self, fd: int, token: int) -> None:
        """Start an fdatasync of `fd`. Raises OSError when the kernel refuses the request
        (nothing was started then: the caller syncs another way)."""
        raise NotImplementedError

    def reap(self) -> list[tuple[int, int]]:
        """The requests completed so far, without blocking: `(token, result)` pairs."""
        raise NotImplementedError

    def wait(self) -> list[tuple[int, int]]:
        """Block until at least one request completes (none in flight: returns [])."""
        raise NotImplementedError

    def _admit(self) -> None:
        """Raise OSError unless one more request may be submitted."""
        if self.closed:
            raise OSError(errno.EBADF, f"{self.what} is closed")
        if len(self._token_of) >= self.capacity:
            raise OSError(errno.EAGAIN, f"{self.capacity} syncs already in flight")

    def _clear_readiness(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._efd)  # the engine's own queue tells what finished

    def close(self) -> None:
        """Wait for what is in flight, then release the engine and the eventfd."""
        if self.closed:
            return
        while self._token_of:
            self.wait()
        self.closed = True
        self._release()
        os.close(self._efd)

    def _release(self) -> None:
        raise NotImplementedError
