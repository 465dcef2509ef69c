"""fdatasync started by the kernel: Linux native AIO (`IOCB_CMD_FDSYNC`), no thread of ours.

A leader wants its fsync to start the moment a write is in the page cache, while its event
loop goes on answering the followers. A Python flusher thread cannot do that promptly: once
woken it needs the GIL before it reaches `fdatasync`, and the loop holds the GIL until it
blocks (measured: p50 0.23 ms from the request to the start of the fsync on a busy leader).
`io_submit` of an `IOCB_CMD_FDSYNC` hands the sync to a kernel worker at once (Linux 4.18 and
later, any filesystem with an fsync operation); the completion is signalled on an eventfd
that the event loop watches, and `io_getevents` reaps its result.

The cost: a process holding an AIO context dies ~30 ms later after kill -9 (measured here:
2.5 ms from SIGKILL to the peer's EOF without a context, 31-34 ms with an idle one): the kernel
tears the context down, after an RCU grace period, before it closes the process's sockets, so
peers notice the death that much later. Hence this engine is used only when asked for
(`kraft.log.flush.kernel=aio`); the default is io_uring (`kraft.storage.uring`), which has no
such cost.

No library is needed: the three system calls go through `libc.syscall` (ctypes releases the
GIL around them). `KernelSync.open()` returns None where this is unavailable (another OS or
architecture, a seccomp profile that forbids `io_setup`, `fs.aio-max-nr` exhausted); callers
then use a flusher thread.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform

from kraft.storage.sync_engine import SyncEngine

log = logging.getLogger(__name__)

_SYSCALLS = {  # io_setup, io_destroy, io_getevents, io_submit
    "x86_64": (206, 207, 208, 209),
    "aarch64": (0, 1, 4, 2),
}
IOCB_CMD_FDSYNC = 3
IOCB_FLAG_RESFD = 1
MAX_IN_FLIGHT = 8
"""Requests the context holds at once (one per segment file synced by one flush)."""


_ONE = ctypes.c_long(1)
_MAX = ctypes.c_long(MAX_IN_FLIGHT)


class _IOCB(ctypes.Structure):
    # struct iocb of <linux/aio_abi.h> on a little-endian 64-bit machine (64 bytes)
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("key", ctypes.c_uint32),
        ("rw_flags", ctypes.c_int32),
        ("opcode", ctypes.c_uint16),
        ("reqprio", ctypes.c_int16),
        ("fildes", ctypes.c_uint32),
        ("buf", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
        ("offset", ctypes.c_int64),
        ("reserved2", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("resfd", ctypes.c_uint32),
    ]


class _Event(ctypes.Structure):
    # struct io_event (32 bytes)
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class KernelSync(SyncEngine):
    """One AIO context and its eventfd (`SyncEngine`)."""

    what = "native AIO context"

    def __init__(self, libc: ctypes.CDLL, calls: tuple[int, int, int, int], ctx: int,
                 efd: int) -> None:
        self._libc = libc
        # every argument as a C long: syscall(2) reads its variadic arguments as longs
        # (io_setup was called by `open`)
        _, self._destroy, self._getevents, self._submit = map(ctypes.c_long, calls)
        super().__init__(efd, MAX_IN_FLIGHT)
        self._ctx = ctypes.c_ulong(ctx)
        self._iocbs = [_IOCB() for _ in range(MAX_IN_FLIGHT)]
        self._free = list(range(MAX_IN_FLIGHT))
        self._one = (ctypes.POINTER(_IOCB) * 1)()
        self._events = (_Event * MAX_IN_FLIGHT)()
        self._zero = _Timespec(0, 0)

    @classmethod
    def open(cls) -> KernelSync | None:
        """A new context, or None where native AIO fsync is not available here."""
        libc = cls._libc_here(_SYSCALLS)
        if libc is None:
            return None
        calls = _SYSCALLS[platform.machine()]
        ctx = ctypes.c_ulong(0)
        if libc.syscall(ctypes.c_long(calls[0]), _MAX, ctypes.byref(ctx)) != 0:
            log.info("event=kernel_sync_unavailable reason=%r",
                     os.strerror(ctypes.get_errno()))
            return None
        efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return cls(libc, calls, ctx.value, efd)

    def submit(self, fd: int, token: int) -> None:
        self._admit()
        slot = self._free.pop()
        cb = self._iocbs[slot]
        ctypes.memset(ctypes.byref(cb), 0, ctypes.sizeof(cb))
        cb.data = slot
        cb.opcode = IOCB_CMD_FDSYNC
        cb.fildes = fd
        cb.flags = IOCB_FLAG_RESFD
        cb.resfd = self._efd
        self._one[0] = ctypes.pointer(cb)
        if self._libc.syscall(self._submit, self._ctx, _ONE, self._one) != 1:
            err = ctypes.get_errno()
            self._free.append(slot)
            raise OSError(err, f"io_submit of fdatasync(fd {fd}): {os.strerror(err)}")
        self._token_of[slot] = token

    def reap(self) -> list[tuple[int, int]]:
        return self._collect(0, self._zero)

    def wait(self) -> list[tuple[int, int]]:
        if not self._token_of:
            return []
        return self._collect(1, None)

    def _collect(self, min_nr: int, timeout: _Timespec | None) -> list[tuple[int, int]]:
        self._clear_readiness()
        if not self._token_of:
            return []
        while True:
            n = self._libc.syscall(self._getevents, self._ctx, ctypes.c_long(min_nr), _MAX,
                                   self._events,
                                   None if timeout is None else ctypes.byref(timeout))
            if n >= 0:
                break
            err = ctypes.get_errno()
            if err != errno.EINTR:
                raise OSError(err, f"io_getevents: {os.strerror(err)}")
        done = []
        for i in range(n):
            ev = self._events[i]
            slot = int(ev.data)
            token = self._token_of.pop(slot)
            self._free.append(slot)
            done.append((token, int(ev.res)))
        return done

    def _release(self) -> None:
        self._libc.syscall(self._destroy, self._ctx)


available = KernelSync.available
