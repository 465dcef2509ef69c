"""The node's apply driver: committed records into the state machine, and its snapshots.

It is the `ApplyPort` and the `SnapshotPort` of the effect executor (`kraft.server.executor`):

- `committed(hw)` (the effect `Committed`) only raises the apply `target`; the core loop
  (`KraftNode._core_loop`) applies up to it in steps of APPLY_CHUNK records (`step`) once the
  events that arrived with it are handled, so replication and applying overlap. Nothing at or
  above the high watermark is ever applied.
- `apply_to(offset)` applies the committed records below `offset` not applied yet (a batch may
  be applied in parts). A batch this leader built is applied from the values it appended
  (`own_batches`, filled by the log service), without reading the log back or decoding it.
  Each writer waiting on an offset (`WriteBook.waiting`, `kraft.server.writes`) gets the state
  machine's result, or `OutcomeUnknownError` when its record was replaced by another leader's.
- Snapshots: `create_snapshot` captures the state machine exactly at the snapshot's offset (the
  executor applies up to it first) and writes the file on an executor thread
  (`SnapshotCreated` follows); `install_snapshot` freezes a downloaded snapshot, replaces the
  log by it and loads the state machine from it, and its answer is the core's next event;
  downloads are written chunk by chunk on one thread of their own; served snapshots are read
  one chunk per FetchSnapshot; deleted ones are renamed at once and removed later.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from kraft.config.node import NodeConfig
from kraft.protocol.errors import ErrorCode, ProtocolError
from kraft.raft import effects as fx
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.raft.core import RaftCore
from kraft.raft.records import voters_from_record, voters_record
from kraft.records.control import VotersRecord
from kraft.records.snapshot_format import iter_snapshot_batches
from kraft.server.event_queue import EventQueue
from kraft.server.flusher import LogService
from kraft.server.kv_api import OutcomeUnknownError
from kraft.server.node_metrics import NodeMetrics
from kraft.server.writes import WriteBook
from kraft.statemachine.base import CommittedBatch, StateMachine, chunk_values
from kraft.storage.errors import StorageError
from kraft.storage.layout import SnapshotId
from kraft.storage.loader import MetadataDir
from kraft.storage.snapshot_load import SnapshotStream, read_snapshot_control
from kraft.storage.snapshots import SnapshotChunkReader, SnapshotWriter, iter_snapshot_values

log = logging.getLogger("kraft.server.node")

SNAPSHOT_BATCH_BYTES = 1024 * 1024
APPLY_CHUNK = 8192
"""Committed records applied in one step of the core loop; the loop handles what arrived
meanwhile (fetches, acknowledgements, new writes) between two steps."""
SNAPSHOT_DELETE_DELAY_S = 60.0
"""A deleted snapshot stays as `.checkpoint.deleted` this long before it is removed (Kafka's
file.delete.delay.ms for the metadata log, 60 s)."""


def now_ms() -> int:
    """Wall-clock milliseconds (Kafka reports wall-clock timestamps in DescribeQuorum)."""
    return int(time.time() * 1000)


class ApplyHost(Protocol):
    """What the apply driver uses of the node: its configuration, state machine and core, the
    writes in hand (the writers waiting on offsets, which the leader's lane fills too), its
    metrics, the core's event queue (snapshots created and installed, the retention
    measured), and its way to run a task."""

    config: NodeConfig
    sm: StateMachine
    core: RaftCore | None
    writes: WriteBook
    queue: EventQueue
    metrics: NodeMetrics

    def spawn(self, coro: Any) -> None: ...


class ApplyDriver:
    """The `ApplyPort` and `SnapshotPort` of one node (see the module docstring)."""

    def __init__(self, node: ApplyHost, md: MetadataDir, logs: LogService,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._node = node
        self._writes = node.writes
        self._queue = node.queue
        self._metrics = node.metrics
        self.md = md
        self._logs = logs
        self._loop = loop
        self._apply_quietly: Callable[[CommittedBatch], None] | None = getattr(
            node.sm, "apply_quietly", None)
        self.target = 0
        """The highest high watermark the core reported (`Committed`): the core loop applies up
        to it in steps of APPLY_CHUNK records, after the replication work queued before it."""
        self.waited = 0
        """Events handled since a step of applying while records waited to be applied."""
        self._decoded: tuple[int, int, Sequence[bytes | None]] | None = None
        """(base offset, epoch, values) of a batch applied in part: the rest needs no decoding."""
        self.own_batches = logs.own_batches
        """base offset -> (epoch, values) of the batches this leader appended and has not
        applied yet (filled by the log service): applying them needs no read back from the log
        and no decoding."""
        self.last_applied_ts = -1
        self._snapshot_readers: dict[m.OffsetAndEpoch, SnapshotChunkReader] = {}
        self._snapshot_times: dict[m.OffsetAndEpoch, int] = {}
        """Each snapshot's LastContainedLogTimestamp, for the retention check."""
        self.downloads: dict[m.OffsetAndEpoch, SnapshotWriter] = {}
        # FetchSnapshot chunks are written, frozen and aborted in order on one thread, so the
        # loop goes on receiving the next chunk while the previous one reaches the disk
        self._snapshot_io = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="kraft-snapshot-io")

    def load_latest_snapshot(self) -> None:
        """At start: load the state machine from the latest snapshot, if any."""
        md = self.md
        node = self._node
        latest = md.latest_snapshot
        if latest is None:
            return
        # One checked pass over the file (CRC, offsets, header/footer) feeding the state
        # machine; a corrupt snapshot raises before the state is published.
        started = time.perf_counter()
        stream = SnapshotStream(md.snapshots.path(latest), latest)
        values = stream.present_values()
        # The (0, 0) snapshot holds no log entries: its data records are the format's bootstrap
        # metadata records (Kafka 4.4 writes its feature levels there), not state.
        node.sm.load_snapshot(latest.end_offset, () if latest.end_offset == 0 else values)
        for _ in values:  # a state machine that stopped early: still check the rest
            pass
        elapsed = time.perf_counter() - started
        self._metrics.snapshot_load.observe(elapsed)
        self._metrics.snapshot_size.set(stream.size)
        log.info("event=snapshot_loaded replica=%d snapshot=%s bytes=%d records=%d "
                 "load_ms=%.0f", node.config.node_id, latest, stream.size, stream.record_count,
                 elapsed * 1000)

    def close(self) -> None:
        """Abort the downloads in progress."""
        for writer in self.downloads.values():
            writer.abort()

    # ------------------------------------------------------------------ ApplyPort

    def behind(self) -> bool:
        """True while committed records wait to be applied."""
        return self.target > self._node.sm.applied_offset

    def apply_committed(self) -> None:
        """Apply every committed record not applied yet."""
        self.apply_to(self.target)

    def committed(self, high_watermark: int) -> None:
        """Raise the apply target (applied by the core loop's steps)."""
        if high_watermark > self.target:
            self.target = high_watermark  # applied by the core loop
            self._metrics.high_watermark.set(high_watermark)

    def step(self) -> None:
        """Apply the next APPLY_CHUNK committed records."""
        self.waited = 0
        before = self._node.sm.applied_offset
        self.apply_to(min(self.target, before + APPLY_CHUNK))
        if self._node.sm.applied_offset == before:
            self.target = before  # nothing can be applied (logged); the next Committed retries

    def apply_to(self, hw: int) -> None:
        """Apply the committed records below `hw` not applied yet (a batch may be applied in
        parts: the records from the applied offset to `hw`)."""
        md = self.md
        node = self._node
        sm = node.sm
        start = sm.applied_offset
        if start >= hw:
            return
        if start < md.log.log_start_offset:
            log.error("event=apply_gap replica=%d applied=%d log_start=%d", node.config.node_id,
                      start, md.log.log_start_offset)
            return
        for batch in md.log.batches(start):
            base = batch.base_offset
            if base >= hw:
                break
            end = min(batch.next_offset, hw)
            self.last_applied_ts = batch.max_timestamp
            if batch.is_control:
                sm.skip_to(end)
                continue
            epoch = batch.partition_leader_epoch
            whole = end == batch.next_offset
            own = self.own_batches.get(base) if self.own_batches else None
            values: Sequence[bytes | None]
            if own is not None and own[0] == epoch and len(own[1]) == batch.next_offset - base:
                # the batch this leader built (one epoch, one base offset: the same batch)
                values = own[1]
                if whole:
                    del self.own_batches[base]
            else:
                decoded = self._decoded
                if decoded is not None and decoded[0] == base and decoded[1] == epoch:
                    values = decoded[2]  # the rest of a batch applied in part
                else:
                    values = batch.values()
                    if None in values:
                        values = [v if v is not None else b"" for v in values]
                self._decoded = None if whole else (base, epoch, values)
            first = max(start, base)
            if first > base or not whole:
                values = values[first - base:end - base]
            committed = CommittedBatch(first, epoch, tuple(values))  # type: ignore[arg-type]
            waiting = self._writes.waiting
            if not waiting and self._apply_quietly is not None:
                # nobody waits on this node (a follower, the replay at start-up): no results
                self._apply_quietly(committed)
            else:
                results = sm.apply(committed)
                # only a leader (or a deposed one) has writers waiting
                pop = waiting.pop
                for offset, result in enumerate(results, start=first):
                    waiter = pop(offset, None)
                    if waiter is None:
                        continue
                    w_epoch, fut = waiter
                    if fut.done():
                        continue
                    if w_epoch == epoch:
                        fut.set_result((offset, result))
                    else:
                        fut.set_exception(OutcomeUnknownError("write replaced by another leader"))
            if not whole:
                break
        self._metrics.applied_offset.set(sm.applied_offset)

    def fail_waiters_from(self, offset: int, why: str) -> None:
        """The log changed at `offset`: the writers waiting at or above it learn the outcome
        is unknown."""
        self.own_batches.clear()  # the log changed under them: read it again
        self._writes.fail_waiting_from(offset, why)

    # ------------------------------------------------------------------ SnapshotPort

    def snapshot_chunk(self, e: fx.SendFetchSnapshotResponse) -> bytes:
        """The bytes a FetchSnapshot answer carries (empty on an error or a missing file)."""
        md = self.md
        if e.response.error_code != ErrorCode.NONE:
            return b""
        sid = e.response.snapshot_id
        reader = self._snapshot_readers.get(sid)
        if reader is None:
            try:  # one pread per chunk from here on; the file is never read whole
                reader = md.snapshots.open_chunk_reader(SnapshotId(sid.offset, sid.epoch))
            except StorageError:
                return b""
            self._snapshot_readers[sid] = reader
        try:
            return reader.read_chunk(e.response.position, e.max_bytes)
        except StorageError:
            return b""

    def delete_snapshot(self, e: fx.DeleteSnapshot) -> None:
        """As Kafka: renamed `.checkpoint.deleted` at once (no longer served, and gone at the
        next start if the node stops first), removed SNAPSHOT_DELETE_DELAY_S later."""
        md = self.md
        sid = e.snapshot_id
        self._snapshot_times.pop(sid, None)
        served = self._snapshot_readers.pop(sid, None)
        snapshot_id = SnapshotId(sid.offset, sid.epoch)
        if not md.snapshots.mark_deleted(snapshot_id):
            if served is not None:
                served.close()
            return
        store = md.snapshots

        def remove() -> None:
            if served is not None:
                served.close()
            store.remove_marked(snapshot_id)

        self._loop.call_later(SNAPSHOT_DELETE_DELAY_S, remove)

    def measure_retention(self) -> None:
        """Queue what the leader's retention check needs (`RetentionMeasured`)."""
        self._queue.push(self._measure_retention())

    def _measure_retention(self) -> ev.RetentionMeasured:
        """What the leader's retention check needs: the segments' sizes and each snapshot's
        LastContainedLogTimestamp (read from its header once, then remembered)."""
        md = self.md
        node = self._node
        assert node.core is not None
        times: list[tuple[m.OffsetAndEpoch, int]] = []
        for sid in node.core.log.snapshots:
            ts = self._snapshot_times.get(sid)
            if ts is None:
                snapshot_id = SnapshotId(sid.offset, sid.epoch)
                try:
                    header = read_snapshot_control(md.snapshots.path(snapshot_id), snapshot_id)
                except (StorageError, OSError) as exc:
                    log.warning("event=snapshot_header_unreadable replica=%d snapshot=%s "
                                "error=%r", node.config.node_id, sid, str(exc))
                    continue
                ts = header.header.last_contained_log_timestamp
                self._snapshot_times[sid] = ts
            times.append((sid, ts))
        segments = tuple((seg.base_offset, seg.size) for seg in md.log.segments)
        return ev.RetentionMeasured(segments, tuple(times))

    def create_snapshot(self, e: fx.CreateSnapshot) -> None:
        """Capture the state now (it must be exactly at the snapshot's end offset) and write
        the file on an executor thread; `SnapshotCreated` follows."""
        node = self._node
        sid = e.snapshot_id
        # the executor applied up to the offset first (committed records may wait to be
        # applied by the core loop's steps)
        if node.sm.applied_offset != sid.offset:
            log.error("event=snapshot_skipped replica=%d snapshot=%s applied=%d",
                      node.config.node_id, sid, node.sm.applied_offset)
            return
        foreign = getattr(node.sm, "foreign_records", 0)
        if foreign:
            # a snapshot of the KV state would drop the Kafka metadata records the log holds:
            # only the leader's (Kafka's) snapshots are installed (docs/node.md)
            log.info("event=snapshot_skipped replica=%d snapshot=%s reason=kafka_metadata "
                     "foreign_records=%d", node.config.node_id, sid, foreign)
            return
        values = node.sm.snapshot_values()
        voters = voters_record(e.voters) if e.voters is not None else None
        node.spawn(self._write_snapshot(sid, values, voters, e.kraft_version,
                                         self.last_applied_ts))

    async def _write_snapshot(self, sid: m.OffsetAndEpoch, values: Sequence[bytes],
                              voters: VotersRecord | None, kraft_version: int,
                              last_ts: int) -> None:
        md = self.md
        node = self._node
        started = time.perf_counter()

        def write() -> Path:
            batches = iter_snapshot_batches(
                sid.epoch, last_ts, chunk_values(values, SNAPSHOT_BATCH_BYTES),
                timestamp_ms=now_ms(), kraft_version=kraft_version, voters=voters,
            )
            return md.snapshots.write(SnapshotId(sid.offset, sid.epoch), batches)

        try:
            path = await asyncio.get_running_loop().run_in_executor(None, write)
        except (StorageError, OSError) as exc:
            log.error("event=snapshot_failed replica=%d snapshot=%s error=%r",
                      node.config.node_id, sid, str(exc))
            return
        size = path.stat().st_size
        self._metrics.snapshot_generation.observe(time.perf_counter() - started)
        self._metrics.snapshot_size.set(size)
        log.info("event=snapshot_created replica=%d epoch=%d offset=%d bytes=%d records=%d",
                 node.config.node_id, sid.epoch, sid.offset, size, len(values))
        self._snapshot_times[sid] = last_ts
        self._queue.push(ev.SnapshotCreated(sid, size))

    def write_snapshot_chunk(self, e: fx.WriteSnapshotChunk) -> None:
        """Queue one downloaded chunk for the download's thread."""
        writer = self.downloads.get(e.snapshot_id)
        if writer is None:
            writer = self.md.snapshots.create_writer(
                SnapshotId(e.snapshot_id.offset, e.snapshot_id.epoch))
            self.downloads[e.snapshot_id] = writer
        chunk = e.data
        assert isinstance(chunk, bytes | bytearray | memoryview)
        # a failed write fails the freeze (SnapshotInstallFailed), not the node
        self._snapshot_io.submit(writer.write_at, e.position, chunk)

    def abort_snapshot_download(self, e: fx.AbortSnapshotDownload) -> None:
        """Drop a partial snapshot (after the writes already queued)."""
        dl = self.downloads.pop(e.snapshot_id, None)
        if dl is not None:
            self._snapshot_io.submit(dl.abort)  # after the writes already queued

    async def install_snapshot(self, e: fx.InstallSnapshot) -> None:
        """Freeze the downloaded file and load it into the state machine, both on an executor
        thread: the core waits for `SnapshotInstalled` (it handles nothing else meanwhile,
        so nothing is applied concurrently), but the loop keeps serving. The file is checked
        and then streamed batch by batch; it is never held in memory whole."""
        node = self._node
        sid = e.snapshot_id
        writer = self.downloads.pop(sid, None)
        if writer is None:
            self._queue.push(ev.SnapshotInstallFailed(sid, "no download in progress"))
            return
        loop = asyncio.get_running_loop()
        try:  # on the download's thread: after every chunk queued before it
            path = await loop.run_in_executor(self._snapshot_io, writer.freeze)
        except (StorageError, ProtocolError, OSError) as exc:
            log.warning("event=snapshot_install_failed replica=%d snapshot=%s error=%r",
                        node.config.node_id, sid, str(exc))
            self._queue.push(ev.SnapshotInstallFailed(sid, str(exc)))
            return
        c = writer.contents
        assert c is not None
        size = writer.position
        started = time.perf_counter()
        self._logs.truncate_fully_and_start_at(sid.offset)
        self.fail_waiters_from(0, "replaced by a snapshot")
        await loop.run_in_executor(None, node.sm.load_snapshot, sid.offset,
                                   iter_snapshot_values(path))
        self._metrics.snapshot_load.observe(time.perf_counter() - started)
        self._metrics.snapshot_size.set(size)
        voters = voters_from_record(c.voters) if c.voters is not None else None
        kv = c.kraft_version.kraft_version if c.kraft_version is not None else 0
        log.info("event=snapshot_installed replica=%d epoch=%d offset=%d bytes=%d load_ms=%.0f",
                 node.config.node_id, sid.epoch, sid.offset, size,
                 (time.perf_counter() - started) * 1000)
        self._queue.push(ev.SnapshotInstalled(sid, size, voters, kv))
