"""Reading a final snapshot at start-up: its control records alone, or all of it, checked once.

`read_snapshot_control` reads only the first batch (SnapshotHeader, KRaftVersion, KRaftVoters):
what `open_metadata_dir` needs for the voters history. `SnapshotStream.values()` streams the
data records' values for `StateMachine.load_snapshot` in one pass over the mapped file
(sequential read-ahead, no copy of the whole file), checking as it goes what `read_snapshot`
checks. Like Kafka's snapshot reader with CRC validation on, a start-up load reads every byte
once; before, the file was read whole twice (once for the voters, once for the state) and
every record was decoded into a `Record` twice.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kraft.protocol.errors import ProtocolError
from kraft.records.batch import BATCH_HEADER_SIZE, RecordBatch
from kraft.records.control import (
    ControlRecord,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    decode_control_batch,
)
from kraft.storage.errors import InvalidSnapshotError
from kraft.storage.layout import SnapshotId


@dataclass(frozen=True, slots=True)
class SnapshotControl:
    """The control records of a snapshot's first batch (SnapshotHeader first)."""

    header: SnapshotHeaderRecord
    kraft_version: KRaftVersionRecord | None
    voters: VotersRecord | None
    records: tuple[ControlRecord, ...]


def _first_batch(batch: RecordBatch, epoch: int, where: str) -> SnapshotControl:
    """Check the header batch of a snapshot; raises InvalidSnapshotError or ProtocolError."""
    batch.validate()
    if batch.partition_leader_epoch != epoch:
        raise InvalidSnapshotError(
            f"{where}: partition leader epoch {batch.partition_leader_epoch}, expected the "
            f"snapshot epoch {epoch}"
        )
    if batch.base_offset != 0:
        raise InvalidSnapshotError(f"{where}: base offset {batch.base_offset}, expected 0")
    if not batch.is_control:
        raise InvalidSnapshotError(f"{where}: first batch is not a control batch")
    records = decode_control_batch(batch)
    if not records or not isinstance(records[0], SnapshotHeaderRecord):
        first = type(records[0]).__name__ if records else "nothing"
        raise InvalidSnapshotError(f"{where}: first record is {first}, not SNAPSHOT_HEADER")
    for rec in records[1:]:
        if isinstance(rec, SnapshotHeaderRecord):
            raise InvalidSnapshotError(f"{where}: SNAPSHOT_HEADER is not the first record")
    kraft_version = next((r for r in records if isinstance(r, KRaftVersionRecord)), None)
    voters = next((r for r in records if isinstance(r, VotersRecord)), None)
    return SnapshotControl(records[0], kraft_version, voters, tuple(records))


def read_snapshot_control(path: Path, snapshot_id: SnapshotId) -> SnapshotControl:
    """The control records of a final snapshot's first batch, reading only that batch.

    Raises InvalidSnapshotError when it is not a valid SnapshotHeader batch. The rest of the
    file is checked when it is loaded (`SnapshotStream`).
    """
    where = f"invalid snapshot {path}: batch 0 at byte position 0"
    with open(path, "rb") as fh:
        head = os.pread(fh.fileno(), BATCH_HEADER_SIZE, 0)
        length = int.from_bytes(head[8:12], "big", signed=True) if len(head) >= 12 else 0
        data = os.pread(fh.fileno(), max(length + 12, BATCH_HEADER_SIZE), 0)
    try:
        return _first_batch(RecordBatch.parse(data, 0), snapshot_id.epoch, where)
    except ProtocolError as exc:
        raise InvalidSnapshotError(f"{where}: {exc}") from None


class SnapshotStream:
    """A final snapshot read front to back, one batch at a time, checked as it goes.

    `values()` yields the data records' values and checks every batch's header and CRC,
    offsets contiguous from 0, one epoch (the id's), SNAPSHOT_HEADER first, SNAPSHOT_FOOTER
    last with nothing after it, and every record's framing (`RecordBatch.values`). A problem
    raises InvalidSnapshotError naming the file and byte position when it is met, so a
    consumer must not publish what it built before the iteration ends (`KVStore` does not).
    After a complete iteration `control` holds the header batch's records and `complete` is
    True.
    """

    def __init__(self, path: Path, snapshot_id: SnapshotId) -> None:
        self.path = path
        self.snapshot_id = snapshot_id
        self.size = path.stat().st_size
        self.control: SnapshotControl | None = None
        self.record_count = 0
        self.complete = False

    def values(self) -> Iterator[bytes | None]:
        """The data records' values in order (see the class docstring)."""
        if self.size == 0:
            raise InvalidSnapshotError(f"invalid snapshot {self.path}: empty file")
        epoch = self.snapshot_id.epoch
        footer = False
        error: str | None = None
        # Errors are raised only once the mapping is closed: an exception's traceback would
        # keep views of it alive and make the close fail.
        with open(self.path, "rb") as fh, \
                mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            mm.madvise(mmap.MADV_SEQUENTIAL)
            view = memoryview(mm)
            pos = 0
            index = 0
            try:
                while pos < self.size:
                    where = f"invalid snapshot {self.path}: batch {index} at byte position {pos}"
                    if footer:
                        error = f"{where}: data after SNAPSHOT_FOOTER"
                        break
                    batch: RecordBatch | None = None
                    try:
                        batch = RecordBatch.parse(view, pos)
                        end = pos + batch.size_in_bytes
                        if index == 0:
                            self.control = _first_batch(batch, epoch, where)
                        else:
                            batch.validate()
                            if batch.base_offset != self.record_count:
                                raise InvalidSnapshotError(
                                    f"{where}: base offset {batch.base_offset}, expected "
                                    f"{self.record_count}"
                                )
                            if batch.partition_leader_epoch != epoch:
                                raise InvalidSnapshotError(
                                    f"{where}: partition leader epoch "
                                    f"{batch.partition_leader_epoch}, expected the snapshot "
                                    f"epoch {epoch}"
                                )
                            if batch.is_control:
                                footer = _check_control(batch, where, end == self.size)
                            else:
                                yield from batch.values()
                        self.record_count = batch.next_offset
                    except ProtocolError as exc:
                        error = f"{where}: {exc}"
                    except InvalidSnapshotError as exc:
                        error = str(exc)
                    finally:
                        batch = None  # its bytes are views of the mapping: let go first
                    if error is not None:
                        break
                    pos = end
                    index += 1
            finally:
                view.release()
        if error is not None:
            raise InvalidSnapshotError(error)
        if not footer:
            raise InvalidSnapshotError(
                f"invalid snapshot {self.path}: ends at byte {self.size} without a "
                "SNAPSHOT_FOOTER"
            )
        self.complete = True

    def present_values(self) -> Iterator[bytes]:
        """`values()` without null values (what `StateMachine.load_snapshot` takes)."""
        for value in self.values():
            if value is not None:
                yield value


def _check_control(batch: RecordBatch, where: str, last_batch: bool) -> bool:
    """Check a control batch after the first; True when it ends with the footer."""
    records = decode_control_batch(batch)
    for j, rec in enumerate(records):
        if isinstance(rec, SnapshotHeaderRecord):
            raise InvalidSnapshotError(f"{where}: SNAPSHOT_HEADER is not the first record")
        if isinstance(rec, SnapshotFooterRecord):
            if not last_batch or j != len(records) - 1:
                raise InvalidSnapshotError(f"{where}: SNAPSHOT_FOOTER is not the last record")
            return True
    return False
