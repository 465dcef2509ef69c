"""fdatasync started by the kernel through io_uring (`IORING_OP_FSYNC`), no thread of ours.

The same job as `kraft.storage.aio` (a leader's fsync starting the moment a write is in the
page cache, while its event loop goes on answering the followers) without native AIO's cost at
exit: a process holding an AIO context has its sockets closed only after the kernel tore the
context down (an RCU grace period, ~30 ms), where an io_uring instance is a file, released
with the process's other files (measured in docs/journal/perf-17-io-uring-fsync.md).

One ring of a few entries, set up with `io_uring_setup`; its submission and completion queues
are shared memory (`mmap`), written and read here with `struct`; `io_uring_enter` submits; the
completions are signalled on an eventfd registered with the ring, which the event loop
watches. The fsync itself runs on a kernel worker of the ring. The three system calls go
through `libc.syscall` (ctypes releases the GIL around them); no library is needed.
`UringSync.open()` returns None where this is unavailable (another OS or architecture, a kernel
before 5.2 or with io_uring disabled, a seccomp profile that forbids `io_uring_setup`, as some
container runtimes' default profiles do); callers then use a flusher thread.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import select
import struct

from kraft.storage.sync_engine import SyncEngine

log = logging.getLogger(__name__)

_SETUP, _ENTER, _REGISTER = 425, 426, 427  # the same numbers on x86_64 and aarch64
_MACHINES = ("x86_64", "aarch64")
IORING_OP_FSYNC = 3
IORING_FSYNC_DATASYNC = 1
IORING_REGISTER_EVENTFD = 4
IORING_FEAT_SINGLE_MMAP = 1
IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
ENTRIES = 8
"""Submission queue entries (one per segment file synced by one flush); the kernel makes the
completion queue twice as long."""
PROBE_S = 2.0
"""How long `open` waits for the completion of its probe request."""

_SQE = struct.Struct("<BBHiQQIIQHHiQQ")  # struct io_uring_sqe, 64 bytes
_CQE = struct.Struct("<QiI")  # struct io_uring_cqe, 16 bytes
_U32 = struct.Struct("<I")
# struct io_uring_params: 10 u32 (sq_entries .. resv[3]), then io_sqring_offsets (8 u32 and a
# u64) and io_cqring_offsets (8 u32 and a u64): 120 bytes
_PARAMS = struct.Struct("<10I8IQ8IQ")


class UringSync(SyncEngine):
    """One io_uring and its eventfd (`SyncEngine`)."""

    what = "io_uring ring"

    def __init__(self, libc: ctypes.CDLL, ring_fd: int, efd: int, params: tuple[int, ...],
                 maps: list[mmap.mmap]) -> None:
        sq_entries, cq_entries = params[0], params[1]
        super().__init__(efd, min(sq_entries, cq_entries))
        self._libc = libc
        self._ring_fd = ring_fd
        self._ring = ctypes.c_long(ring_fd)  # syscall(2)'s variadic arguments are longs
        self._maps = maps
        sq_off = params[10:19]  # head, tail, ring_mask, ring_entries, flags, dropped, array
        cq_off = params[19:28]  # head, tail, ring_mask, ring_entries, overflow, cqes
        self._sq = maps[0]
        self._cq = maps[1] if len(maps) == 3 else maps[0]
        self._sqes = maps[-1]
        self._sq_tail_at = sq_off[1]
        self._sq_mask = _U32.unpack_from(self._sq, sq_off[2])[0]
        self._sq_array_at = sq_off[6]
        self._sq_tail = _U32.unpack_from(self._sq, self._sq_tail_at)[0]
        self._cq_head_at = cq_off[0]
        self._cq_tail_at = cq_off[1]
        self._cq_mask = _U32.unpack_from(self._cq, cq_off[2])[0]
        self._cqes_at = cq_off[5]
        self._cq_head = _U32.unpack_from(self._cq, self._cq_head_at)[0]
        self._next_id = 0

    @classmethod
    def open(cls) -> UringSync | None:
        """A new ring, or None where io_uring fsync is not available here."""
        libc = cls._libc_here(_MACHINES)
        if libc is None:
            return None
        params = ctypes.create_string_buffer(_PARAMS.size)
        fd = libc.syscall(ctypes.c_long(_SETUP), ctypes.c_long(ENTRIES), params)
        if fd < 0:
            log.info("event=uring_sync_unavailable reason=%r", os.strerror(ctypes.get_errno()))
            return None
        maps: list[mmap.mmap] = []
        efd = -1
        try:
            p = _PARAMS.unpack(params.raw)
            sq_entries, cq_entries, features = p[0], p[1], p[5]
            sq_size = p[10 + 6] + sq_entries * 4  # the index array ends the submission ring
            cq_size = p[19 + 5] + cq_entries * _CQE.size  # the entries end the completion ring
            prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | mmap.MAP_POPULATE
            if features & IORING_FEAT_SINGLE_MMAP:
                maps.append(mmap.mmap(fd, max(sq_size, cq_size), flags, prot,
                                      offset=IORING_OFF_SQ_RING))
            else:
                maps.append(mmap.mmap(fd, sq_size, flags, prot, offset=IORING_OFF_SQ_RING))
                maps.append(mmap.mmap(fd, cq_size, flags, prot, offset=IORING_OFF_CQ_RING))
            maps.append(mmap.mmap(fd, sq_entries * _SQE.size, flags, prot,
                                  offset=IORING_OFF_SQES))
            efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            arg = ctypes.c_int32(efd)
            if libc.syscall(ctypes.c_long(_REGISTER), ctypes.c_long(fd),
                            ctypes.c_long(IORING_REGISTER_EVENTFD), ctypes.byref(arg),
                            ctypes.c_long(1)) != 0:
                raise OSError(ctypes.get_errno(), "io_uring_register(EVENTFD)")
        except (OSError, ValueError) as exc:
            log.info("event=uring_sync_unavailable reason=%r", str(exc))
            for m in maps:
                m.close()
            if efd >= 0:
                os.close(efd)
            os.close(fd)
            return None
        engine = cls(libc, fd, efd, p, maps)  # the kernel made fd close-on-exec
        if not engine._signals_completions():
            return None
        return engine

    def _signals_completions(self) -> bool:
        """Start one request (an fdatasync of the eventfd itself, which the kernel refuses
        with EINVAL on a worker of the ring, as it runs a file's) and see the eventfd
        signal its completion within PROBE_S: a ring that sets up but never says a sync is done
        (a sandbox that emulates io_uring in part) would leave every flush in flight. When it
        does not, the ring is released and False returned (logged)."""
        reason = None
        try:
            self.submit(self._efd, 0)
            if not select.select([self._efd], [], [], PROBE_S)[0]:
                reason = f"no completion was signalled within {PROBE_S:.0f} s"
            elif not self.reap():
                reason = "the eventfd was signalled with no completion"
        except OSError as exc:
            reason = str(exc)
        if reason is None:
            return True
        log.info("event=uring_sync_unavailable reason=%r", reason)
        self._token_of.clear()  # nothing will be reaped: the kernel drops it with the ring
        self.close()
        return False

    def submit(self, fd: int, token: int) -> None:
        self._admit()
        self._next_id += 1
        rid = self._next_id
        tail = self._sq_tail
        idx = tail & self._sq_mask
        # opcode, flags, ioprio, fd, off, addr, len, fsync_flags, user_data, buf_index,
        # personality, file_index, addr3, pad: the whole file, data only
        _SQE.pack_into(self._sqes, idx * _SQE.size, IORING_OP_FSYNC, 0, 0, fd, 0, 0, 0,
                       IORING_FSYNC_DATASYNC, rid, 0, 0, 0, 0, 0)
        _U32.pack_into(self._sq, self._sq_array_at + idx * 4, idx)
        # The entry is written before the tail moves; the kernel reads the tail only inside
        # our io_uring_enter below, on this thread (no polling thread), so program order holds.
        self._sq_tail = (tail + 1) & 0xFFFFFFFF
        _U32.pack_into(self._sq, self._sq_tail_at, self._sq_tail)
        while True:
            n = self._libc.syscall(_ENTER_NR, self._ring, _ONE, _ZERO,
                                   _ZERO, None, _ZERO)
            if n == 1:
                break
            err = ctypes.get_errno() if n < 0 else errno.EAGAIN
            if err == errno.EINTR:
                continue
            # not consumed: take the entry back (the kernel's head did not pass it)
            self._sq_tail = tail
            _U32.pack_into(self._sq, self._sq_tail_at, tail)
            raise OSError(err, f"io_uring_enter of fdatasync(fd {fd}): {os.strerror(err)}")
        self._token_of[rid] = token

    def reap(self) -> list[tuple[int, int]]:
        self._clear_readiness()
        return self._collect()

    def wait(self) -> list[tuple[int, int]]:
        while self._token_of:
            done = self.reap()
            if done:
                return done
            n = self._libc.syscall(_ENTER_NR, self._ring, _ZERO, _ONE,
                                   _GETEVENTS, None, _ZERO)
            if n < 0:
                err = ctypes.get_errno()
                if err != errno.EINTR:
                    raise OSError(err, f"io_uring_enter (wait): {os.strerror(err)}")
        return []

    def _collect(self) -> list[tuple[int, int]]:
        done = []
        cq = self._cq
        head = self._cq_head
        # The kernel writes an entry before it moves the tail (a release store); the tail is
        # read after the eventfd said so (a system call), or inside `wait` after one.
        tail = _U32.unpack_from(cq, self._cq_tail_at)[0]
        while head != tail:
            rid, res, _flags = _CQE.unpack_from(
                cq, self._cqes_at + (head & self._cq_mask) * _CQE.size)
            head = (head + 1) & 0xFFFFFFFF
            token = self._token_of.pop(rid, None)
            if token is not None:
                done.append((token, res))
        if head != self._cq_head:
            self._cq_head = head
            _U32.pack_into(cq, self._cq_head_at, head)
        return done

    def _release(self) -> None:
        for m in self._maps:
            m.close()
        os.close(self._ring_fd)


_ENTER_NR = ctypes.c_long(_ENTER)
_ONE = ctypes.c_long(1)
_ZERO = ctypes.c_long(0)
_GETEVENTS = ctypes.c_long(1)  # IORING_ENTER_GETEVENTS


available = UringSync.available
