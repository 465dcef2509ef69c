"""The simulator's faults of bytes and disks: partial reads, short writes, fsync errors.

These are the faults the node's I/O paths (the Python one and the native lane) meet below the
level of whole messages and whole records. They are off unless `SimParams.faults` asks for
them (`kraft.sim.params.SimFaults`): a seed run without them draws nothing here, so its trace
is what it always was. With them, they draw from a random stream of their own (seeded from the
seed), so a seed still reproduces its run exactly.

- **Partial reads** (`partial_reads`): every message between two replicas travels as a
  size-prefixed frame on a byte stream per connection (a connection lasts as long as both
  ends' incarnations), and a share of the frames arrive in pieces, cut at random bytes, each
  piece after its own delay; the receiver reassembles them with the protocol's frame splitter
  (`kraft.protocol.framing.FrameDecoder`) and acts on a message only once its last byte is in.
  A stream is ordered and does not duplicate, as TCP: with this fault on, messages between
  replicas are still lost and delayed, but no longer reordered or doubled. A crash of either
  end closes the connection: the pieces still in flight and a partial frame in the receiver's
  buffer are dropped, never delivered as a message. Every frame delivered is checked equal to
  the message sent (`frame_intact`).
- **Short writes** (`short_writes`): a crash may leave more than the durable log on disk, as
  page-cache writeback does: a random prefix of the records appended since the last fsync
  survives whole, and the record after them is torn (only part of its bytes reached the
  disk). On the next start, recovery checks every record's checksum (the chain hash stands
  for a batch's CRC) and truncates the log at the first that fails, as
  `kraft.storage.log_recovery` truncates a torn tail; a torn record that survived recovery
  would be a violation (`torn_tail_truncated`).
- **fsync errors** (`fsync_errors`): a flush fails, the core's or a lane's. The node does what the real one does
  (`kraft.server.node`, `kraft.storage.log_durability`): the log is failed, nothing appended
  since the last good flush is reported durable, and the node stops (`fsync_policy="stop"`);
  what its page cache held is then lost as in any crash, and the node starts again later from
  its disk. `fsync_policy="retry"` is the unsafe policy a runtime must not have, kept to show
  that the checker catches it: the error is ignored and the flush retried, and, as Linux does
  after a failed fsync, the pages that failed are dropped from what reaches the disk while the
  retry reports success, so the node acknowledges records that a crash then loses.
"""

from __future__ import annotations

import pickle
import random
import struct
from collections import deque
from dataclasses import dataclass, field

from kraft.protocol.framing import FrameDecoder
from kraft.raft.events import Event
from kraft.sim.disk import SimDisk, chain_hash
from kraft.sim.host import SimHost
from kraft.sim.node import SimNode
from kraft.sim.params import SimFaults

_SIZE = struct.Struct(">i")

@dataclass(frozen=True, slots=True)
class TornRecord:
    """The bytes of a record that a crash cut short: its checksum no longer matches."""

    kept: int
    """How many of its bytes reached the disk."""


@dataclass(slots=True)
class _Stream:
    """One connection's byte stream from one replica to another."""

    ident: int
    src_incarnation: int
    dst_incarnation: int
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    sent: deque[Event] = field(default_factory=deque)
    """The messages whose frames are on the stream and not delivered yet, oldest first."""
    last_at: int = 0
    """When its last piece arrives (a stream is ordered)."""


@dataclass(slots=True)
class _LostPages:
    """After an ignored fsync error: the first record whose pages will not reach the disk."""

    directory_id: object
    offset: int
    chain: int


class FaultModel:
    """The faults of one simulation, taken through its host protocol (made only when some
    fault is on)."""

    def __init__(self, sim: SimHost, faults: SimFaults) -> None:
        self.sim = sim
        self.faults = faults
        self.rng = random.Random(sim.seed * 1_000_003 + 0xFA17)
        self._streams: dict[tuple[int, int], _Stream] = {}
        self._stream_seq = 0
        self._lost: dict[int, _LostPages] = {}
        self._torn_next = False
        """The crash under way came in the middle of a log write."""

    # ------------------------------------------------------------------ partial reads

    def send(self, src: int, dst: int, event: Event) -> bool:
        """Put a message between two replicas on their stream; False when it is not for a
        stream (partial reads off, or the admin client at either end)."""
        sim = self.sim
        if not self.faults.partial_reads or src not in sim.nodes or dst not in sim.nodes:
            return False
        if (src, dst) in sim.blocked or self.rng.random() < sim.loss:
            return True  # cut or lost before it reached the stream
        a, b = sim.nodes[src], sim.nodes[dst]
        stream = self._streams.get((src, dst))
        if (stream is None or stream.src_incarnation != a.incarnation
                or stream.dst_incarnation != b.incarnation):
            self._stream_seq += 1
            stream = _Stream(self._stream_seq, a.incarnation, b.incarnation)
            self._streams[(src, dst)] = stream
        body = pickle.dumps(event)
        frame = _SIZE.pack(len(body)) + body
        cuts: list[int] = []
        if len(frame) > 1 and sim.healed_at is None \
                and self.rng.random() < self.faults.partial_reads:
            pieces = min(len(frame), self.rng.randint(2, 4))
            cuts = sorted(self.rng.sample(range(1, len(frame)), pieces - 1))
            sim.stats["frames_in_pieces"] = sim.stats.get("frames_in_pieces", 0) + 1
        stream.sent.append(event)
        at = max(stream.last_at, sim.now + self.rng.randint(1, sim.params.max_delay_ms))
        start = 0
        for end in [*cuts, len(frame)]:
            sim.piece_later(at, dst, (src, stream.ident, frame[start:end]), b.incarnation)
            start = end
            at += self.rng.randint(0, 3)
        stream.last_at = at
        return True

    def piece(self, dst: int, payload: object) -> list[Event]:
        """A piece of a stream arrived at `dst` (still the incarnation it was sent to): the
        messages it completes, in order (none when the connection was closed meanwhile)."""
        sim = self.sim
        assert isinstance(payload, tuple)
        src, ident, data = payload
        stream = self._streams.get((src, dst))
        sender = sim.nodes[src]
        if stream is None or stream.ident != ident:
            return []  # a connection closed since
        if sender.incarnation != stream.src_incarnation:
            # the sender crashed: its kernel reset the connection; a partial frame is dropped
            if stream.decoder.buffered():
                sim.stats["partial_frames_dropped"] = sim.stats.get("partial_frames_dropped", 0) + 1
            del self._streams[(src, dst)]
            return []
        out: list[Event] = []
        for frame in stream.decoder.feed(data):
            event = pickle.loads(frame)
            sent = stream.sent.popleft()
            sim.inv.checks += 1
            if event != sent:
                sim.inv.fail("frame_intact", f"node {dst} read {event!r} from node {src}, "
                             f"which sent {sent!r}")
            out.append(event)
        return out

    # ------------------------------------------------------------------ short writes

    def crash_disk(self, n: SimNode) -> None:
        """What a crash leaves of `n`'s disk (instead of `SimDisk.crash`). A crash in the middle
        of a write (`flush_failed`) always leaves a short write when anything is unsynced."""
        torn, self._torn_next = self._torn_next, False
        disk = n.disk
        durable = disk.durable_len
        unsynced = disk.entries[durable:]
        disk.crash()
        lost = self._lost.pop(n.node_id, None)
        if lost is not None and lost.directory_id == disk.directory_id:
            if disk.chain_at(lost.offset + 1) == lost.chain:
                # the pages a failed fsync dropped never reach the disk: the log ends before them
                disk.truncate(lost.offset)
                self.sim.stats["fsync_pages_lost"] = self.sim.stats.get("fsync_pages_lost", 0) + 1
            return
        if not unsynced or not self.faults.short_writes:
            return
        if not torn and self.rng.random() >= self.faults.short_writes:
            return
        keep = self.rng.randint(0, len(unsynced) - 1)
        disk.entries.extend(unsynced[:keep])
        disk.durable_len = len(disk.entries)  # on the disk now, whatever it acknowledged
        epoch, _value, _h, is_control = unsynced[keep]
        disk.entries.append((epoch, TornRecord(self.rng.randint(1, 60)), 0, is_control))
        self.sim.stats["torn_tails"] = self.sim.stats.get("torn_tails", 0) + 1
        self.sim.note(n.node_id, "SHORT-WRITE",
                      f"{keep} unsynced records kept, record at {disk.end_offset - 1} torn")

    def recover(self, n: SimNode) -> None:
        """The start-up scan of `n`'s log: truncate at the first record whose checksum fails."""
        disk = n.disk
        end = recover_log(disk)
        if end is not None:
            self.sim.stats["torn_tails_truncated"] = \
                self.sim.stats.get("torn_tails_truncated", 0) + 1
            self.sim.note(n.node_id, "RECOVER", f"torn tail truncated at {end}")
        if any(isinstance(e[1], TornRecord) for e in disk.entries):
            self.sim.inv.fail("torn_tail_truncated", f"node {n.node_id} starts with a torn record")

    # ------------------------------------------------------------------ fsync errors

    def flush_failed(self, n: SimNode) -> bool:
        """Whether `n`'s flush, due now, does not happen: the node crashes in the middle of
        the write before it (a short write) or the fsync fails. True when the caller must not
        report it (the node stopped, or retries)."""
        sim = self.sim
        disk = n.disk
        if sim.healed_at is not None:
            return False
        faults = self.faults
        if faults.short_writes and disk.durable_len < len(disk.entries) \
                and self.rng.random() < faults.short_writes:
            sim.note(n.node_id, "CRASH-MID-WRITE", "")
            self._torn_next = True
            sim.crash(n)
            return True
        if not faults.fsync_errors or self.rng.random() >= faults.fsync_errors:
            return False
        sim.stats["fsync_errors"] = sim.stats.get("fsync_errors", 0) + 1
        if self.faults.fsync_policy == "stop":
            sim.note(n.node_id, "FSYNC-ERROR", "the log failed: the node stops")
            sim.crash(n)
            return True
        # "retry": the failed pages are dropped from the page cache's writeback for good
        if disk.durable_len < len(disk.entries) and n.node_id not in self._lost:
            offset = disk.start_offset + disk.durable_len
            chain = disk.chain_at(offset + 1)
            assert chain is not None
            self._lost[n.node_id] = _LostPages(disk.directory_id, offset, chain)
        sim.note(n.node_id, "FSYNC-ERROR", "ignored: flushing again")
        sim.schedule_flush(n)
        return True

    def lane_sync_failed(self, n: SimNode) -> bool:
        """Whether the sync a lane started on `n` fails, or `n` crashes in the middle of the
        lane's write: the lane's failed write or fdatasync stops the node as the Python path's
        does (`kraft.lane.follower`, `kraft.lane.leader`), so it is `flush_failed` with the
        node's own policy (the unsafe retry has no lane counterpart)."""
        if self.faults.fsync_policy != "stop":
            return False
        before = self.sim.stats.get("fsync_errors", 0)
        if not self.flush_failed(n):
            return False
        if self.sim.stats.get("fsync_errors", 0) > before:
            self.sim.stats["lane_fsync_errors"] = self.sim.stats.get("lane_fsync_errors", 0) + 1
        return True


def recover_log(disk: SimDisk) -> int | None:
    """Check every record's checksum from the log start; truncate the log at the first one
    that fails. Returns the new end offset, or None when every record was whole."""
    prev = disk.start_chain
    for i, (epoch, value, h, _is_control) in enumerate(disk.entries):
        if isinstance(value, TornRecord) or chain_hash(prev, epoch, value) != h:
            end = disk.start_offset + i
            disk.truncate(end)
            return end
        prev = h
    return None
