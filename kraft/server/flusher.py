"""The node's log and flush service: the `LogPort` of the effect executor over the metadata
directory's `SegmentedLog` and quorum-state file, and the fsyncs that make appends durable.

Log writes go to the page cache at once, in the order of the effects; the fsync that makes
them durable runs beside the event loop and is reported to the core as `Persisted(end)` (a
`("flushed", (generation, durable))` item on the core's queue, `kraft.server.event_queue`, which
the core loop turns into `Persisted`). Three ways to fsync, per `kraft.log.flush.mode` and
`kraft.log.flush.kernel`:

- the flusher thread (`Flusher`): it calls `SegmentedLog.flush()` whenever appends are
  waiting (group commit: every append made while a flush runs is covered by the next one);
- the kernel (`kraft.storage.sync_engine`: io_uring or Linux AIO), started from the loop and
  completed through an eventfd the loop reads;
- inline, on the loop thread, once the events that arrived together are handled (`flush_inline`,
  called by the core loop when `LogService.flush_due` says so).

Each truncation bumps `Flusher.generation`: a flush report of an older generation is stale (the
log it covered is gone) and the core loop asks for a new flush instead of reporting it. A failed
fsync stops the node (fail-stop: the page cache can no longer be trusted). The quorum-state file
is written on the default executor and awaited: it is durable before the executor carries out
any later effect.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from kraft.config.node import NodeConfig
from kraft.raft import effects as fx
from kraft.records.batch import build_batch
from kraft.records.control import build_control_batch
from kraft.server.event_queue import EventQueue
from kraft.server.node_metrics import NodeMetrics
from kraft.server.writes import WriteBook
from kraft.storage.engine_choice import open_engine
from kraft.storage.errors import StorageError
from kraft.storage.loader import MetadataDir
from kraft.storage.quorum_state import QuorumStateData as StoredQuorumState
from kraft.storage.sync_engine import SyncEngine

log = logging.getLogger("kraft.server.node")

EARLY_FLUSH_MAX_RECORDS = 16
"""`kraft.log.flush.mode=auto`: a leader's append of at most this many records is fsynced by
the flusher thread as soon as it is written (see `LogService.append_records`)."""


class Flusher:
    """The disk writer thread: fsyncs the log on demand and reports the durable end."""

    def __init__(self, flush: Callable[[], int], report: Callable[[int, int], None]) -> None:
        self._flush = flush
        self._report = report
        self._wanted = threading.Event()
        self._stop = False
        self.generation = 0
        self._thread = threading.Thread(target=self._run, name="kraft-flusher", daemon=True)
        self.flushes = 0
        """Flushes done, on this thread, inline or by the kernel (`inline` of them on the loop,
        `kernel` of them started by the kernel, `kraft.storage.sync_engine`)."""
        self.inline = 0
        self.kernel = 0

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def request(self) -> None:
        """Ask for a flush of everything appended so far."""
        self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._stop:
                return
            generation = self.generation
            try:
                durable = self._flush()
            except StorageError as exc:
                # fail-stop: an fsync error means the page cache can no longer be trusted
                log.critical("event=flush_failed error=%r", str(exc))
                self._report(-1, -1)
                return
            self.flushes += 1
            self._report(generation, durable)

    def stop(self) -> None:
        """Stop the thread (after the flush in progress, if any), if it was started."""
        self._stop = True
        self._wanted.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)


class FlushHost(Protocol):
    """What the log service uses of the node: its configuration, the core's event queue (the
    flush reports), the writes in hand (those waiting on truncated offsets fail), its
    metrics (the log end offset) and its current epoch (log lines)."""

    config: NodeConfig
    queue: EventQueue
    writes: WriteBook
    metrics: NodeMetrics

    def epoch(self) -> int: ...


class LogService:
    """The `LogPort` of `kraft.server.executor.EffectExecutor` over one metadata directory,
    with the flusher thread, the kernel's sync engine and the inline flush."""

    def __init__(self, node: FlushHost, md: MetadataDir,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._node = node
        self._queue = node.queue
        self._writes = node.writes
        self._metrics = node.metrics
        self.md = md
        self._loop = loop
        self.flush_due = 0
        """Events the core loop handled since an append that the inline flush has not covered
        yet (0: none): the core loop counts them and flushes inline when it has nothing else
        queued, or after INLINE_FLUSH_EVERY of them; the leader's lane does not arm while one
        is due."""
        self.own_batches: dict[int, tuple[int, tuple[bytes, ...]]] = {}
        """base offset -> (epoch, values) of the batches this leader appended and has not
        applied yet: applying them needs no read back from the log and no decoding."""
        self.flusher = Flusher(md.log.flush, self.flushed_from_thread)
        self.kernel: SyncEngine | None = None
        # a flush was asked for while the kernel's was in flight; the flusher generation when
        # the kernel's flush in flight started
        self.kernel_again = False
        self.kernel_generation = 0
        cfg = node.config
        self._early_flush = cfg.fsync and cfg.flush_mode == "auto"

    def start(self) -> str:
        """Open the kernel's sync engine (when configured and available) or start the flusher
        thread; returns the engine's name."""
        cfg = self._node.config
        engine = "thread"
        if cfg.fsync and cfg.flush_mode != "inline":
            self.kernel, engine = open_engine(cfg.flush_kernel)
            if self.kernel is not None:
                self.md.log.use_kernel_sync(self.kernel)
                self._loop.add_reader(self.kernel.fileno(), self.kernel_flushed)
        if self.kernel is None:  # with an engine every flush is the kernel's or inline
            self.flusher.start()
        return engine

    def stop(self) -> None:
        """Stop the flusher thread and stop reading the kernel's completions."""
        self.flusher.stop()
        if self.kernel is not None:
            self._loop.remove_reader(self.kernel.fileno())

    def close_kernel(self) -> None:
        """Close the kernel's sync engine (after the log is closed)."""
        if self.kernel is not None:
            self.kernel.close()

    # ------------------------------------------------------------------ flushes

    def flushed_from_thread(self, generation: int, durable: int) -> None:
        """The flusher thread's report, taken to the loop."""
        self._loop.call_soon_threadsafe(self._queue.push, ("flushed", (generation, durable)))

    def request_flush(self) -> None:
        """Have what was appended so far fsynced while the loop goes on: by the kernel when it
        can (`kraft.log.flush.kernel`), else by the flusher thread; a `flushed` event reports."""
        if self.kernel is None:
            self.flusher.request()
            return
        log_ = self.md.log
        if log_.flush_in_flight:
            self.kernel_again = True  # started again when this one is done
            return
        self.kernel_again = False
        if log_.start_flush():
            self.kernel_generation = self.flusher.generation
        else:  # nothing the kernel can take alone (a new segment, a new epoch): on the loop
            self.flush_due = self.flush_due or 1

    def kernel_flushed(self) -> None:
        """The kernel's eventfd is readable: report a finished flush, start the next one."""
        queue = self._queue
        try:
            durable = self.md.log.finish_flush()
        except StorageError:
            queue.push(("flushed", (-1, -1)))  # fail-stop, as a failed fsync on the thread
            return
        if durable is not None:
            self.flusher.flushes += 1
            self.flusher.kernel += 1
            queue.push(("flushed", (self.kernel_generation, durable)))
        if self.kernel_again and not self.md.log.flush_in_flight:
            self.request_flush()
            if self.flush_due:  # left to an inline flush: the core loop may be asleep
                queue.wake()

    def flush_inline(self) -> None:
        """fsync the log on the loop thread (`kraft.log.flush.mode=inline`) and report it."""
        self.flush_due = 0
        self.kernel_again = False  # this flush covers everything appended so far
        try:
            durable = self.md.log.flush()
        except StorageError:
            self._queue.push(("flushed", (-1, -1)))
        else:
            self.flusher.flushes += 1
            self.flusher.inline += 1
            self._queue.push(("flushed", (self.flusher.generation, durable)))

    # ------------------------------------------------------------------ LogPort

    def append_records(self, e: fx.AppendRecords) -> bool:
        """Write a leader's data batch; False when its fsync started at once."""
        values = tuple(map(bytes, e.values))  # type: ignore[arg-type]  # bytes: no copy
        self.md.log.append(build_batch(e.base_offset, e.epoch, values, e.timestamp_ms))
        self.own_batches[e.base_offset] = (e.epoch, values)
        if self._early_flush and len(values) <= EARLY_FLUSH_MAX_RECORDS \
                and not self.flush_due:
            # A small write: its fsync starts now, on the flusher thread, and runs
            # while the answers to the followers' parked fetches are written (each
            # socket write wakes a follower, which often runs on this CPU first). The
            # leader's own durable offset is half of the majority that commits it.
            self.request_flush()
            return False
        return True

    def append_control(self, e: fx.AppendControl) -> None:
        """Write a leader's control batch."""
        self.md.log.append(build_control_batch(e.base_offset, e.epoch, e.timestamp_ms,
                                               list(e.control_records)))  # type: ignore[arg-type]

    def append_fetched(self, e: fx.AppendFetched) -> None:
        """Write a follower's fetched batches as they are."""
        # fsynced before the next fetch acknowledges it: written through when the log
        # preallocates (kraft.log.preallocate.bytes), so that flush has nothing left
        self.md.log.append(b"".join(bytes(b.payload) for b in e.batches),  # type: ignore[call-overload]
                           write_through=True)

    def truncate_to(self, e: fx.TruncateTo) -> None:
        """Remove the records at and after `e.end_offset`; their writers learn the outcome
        is unknown."""
        node = self._node
        self.flusher.generation += 1
        self.md.log.truncate_to(e.end_offset)
        self.own_batches.clear()  # the log changed under them: read it again
        self._writes.fail_waiting_from(e.end_offset, "truncated")
        log.warning("event=log_truncated replica=%d epoch=%d end_offset=%d",
                    node.config.node_id, node.epoch(), e.end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Replace the whole log by an empty one starting at `offset` (a snapshot installed)."""
        self.flusher.generation += 1
        self.md.log.truncate_fully_and_start_at(offset)

    def advance_log_start(self, offset: int) -> None:
        """Delete the records below `offset`."""
        self.md.log.advance_log_start_offset(offset)

    async def persist_quorum_state(self, e: fx.PersistQuorumState) -> None:
        """Write the quorum-state file on the default executor; return once durable."""
        data = StoredQuorumState(
            e.leader_epoch, e.leader_id, e.voted_id,
            e.voted_directory_id if e.data_version >= 1 else None, e.data_version,
            e.voter_ids if e.data_version == 0 else None)
        await asyncio.get_running_loop().run_in_executor(
            None, self.md.quorum_state_store.write, data)

    def effects_done(self, appended: bool, flush_later: bool) -> None:
        """Start the flush the list's appends wait for (or leave it to the inline flush), and
        report what a truncation or a log-start move settled of the kernel's flush."""
        md = self.md
        cfg = self._node.config
        if flush_later:
            if cfg.fsync and cfg.flush_mode != "thread":
                self.flush_due = self.flush_due or 1  # see KraftNode._core_loop
            elif cfg.fsync:
                self.request_flush()
            else:
                # kraft.log.fsync=false (tests, benchmarks only): page cache counts as durable
                self._queue.push(("flushed", (self.flusher.generation, md.log.log_end_offset)))
        if appended:
            self._metrics.log_end_offset.set(md.log.log_end_offset)
        if self.kernel is not None:
            # A truncation, a log-start advance or a snapshot install above waited for the
            # kernel's flush and consumed its completion: report it here, and start the flush
            # asked for meanwhile now.
            settled = md.log.take_settled()
            if settled is not None:
                self._queue.push(("flushed", (self.flusher.generation, settled)))
            if self.kernel_again and not md.log.flush_in_flight:
                self.request_flush()
