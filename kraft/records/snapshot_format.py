"""The bytes of a KRaft snapshot (`.checkpoint`) file: building them and checking them.

A snapshot is a sequence of record batches (KIP-630, Kafka's `RecordsSnapshotWriter`):

1. a control batch whose first record is SNAPSHOT_HEADER, followed (when kraft.version >= 1)
   by KRAFT_VERSION and, if a voter set is known, KRAFT_VOTERS;
2. data batches holding the state machine's records;
3. a control batch holding SNAPSHOT_FOOTER, the last batch of the file.

Offsets inside a snapshot are its own: the header batch has base offset 0 and each batch
continues where the previous one ended. Every batch's partition leader epoch is the snapshot's
epoch. Everything here works on bytes; opening, fsyncing and renaming files is the storage
layer's job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from kraft.protocol.errors import CorruptRecordError, ProtocolError, TruncatedInputError
from kraft.records.batch import Record, RecordBatch, build_batch, iter_batches
from kraft.records.control import (
    ControlRecord,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    build_control_batch,
    decode_control_batch,
)


def iter_snapshot_batches(
    snapshot_epoch: int,
    last_contained_log_timestamp: int,
    data: Iterable[Sequence[bytes]],
    *,
    timestamp_ms: int,
    kraft_version: int = 0,
    voters: VotersRecord | None = None,
) -> Iterator[bytes]:
    """Yield the encoded batches of a snapshot one by one (for streaming to a file).

    `data` yields one sequence of record values per data batch (empty sequences are
    skipped). A KRaftVersion record is written when `kraft_version >= 1`, and the voters
    record only then too, as Kafka does.
    """
    header: list[ControlRecord] = [SnapshotHeaderRecord(last_contained_log_timestamp)]
    if kraft_version >= 1:
        header.append(KRaftVersionRecord(kraft_version))
        if voters is not None:
            header.append(voters)
    offset = 0
    yield build_control_batch(offset, snapshot_epoch, timestamp_ms, header)
    offset += len(header)
    for values in data:
        if not values:
            continue
        yield build_batch(offset, snapshot_epoch, values, timestamp_ms)
        offset += len(values)
    yield build_control_batch(offset, snapshot_epoch, timestamp_ms, [SnapshotFooterRecord()])


def build_snapshot(
    snapshot_epoch: int,
    last_contained_log_timestamp: int,
    data: Iterable[Sequence[bytes]],
    *,
    timestamp_ms: int,
    kraft_version: int = 0,
    voters: VotersRecord | None = None,
) -> bytes:
    """The complete bytes of a snapshot file; see `iter_snapshot_batches`."""
    return b"".join(
        iter_snapshot_batches(
            snapshot_epoch,
            last_contained_log_timestamp,
            data,
            timestamp_ms=timestamp_ms,
            kraft_version=kraft_version,
            voters=voters,
        )
    )


@dataclass(frozen=True, slots=True)
class SnapshotContents:
    """A checked snapshot: its control records and its data batches (views into the buffer)."""

    header: SnapshotHeaderRecord
    footer: SnapshotFooterRecord
    kraft_version: KRaftVersionRecord | None
    voters: VotersRecord | None
    control_records: tuple[ControlRecord, ...]
    data_batches: tuple[RecordBatch, ...]
    epoch: int
    """Partition leader epoch of the batches (the snapshot's epoch)."""
    record_count: int
    """Records in the snapshot, control records included (= the next offset)."""

    def records(self) -> Iterator[Record]:
        """The data records, in order."""
        for batch in self.data_batches:
            yield from batch.records()

    def values(self) -> Iterator[bytes | None]:
        """The data records' values, in order."""
        for batch in self.data_batches:
            for rec in batch.records():
                yield rec.value


class SnapshotChecker:
    """The checks of `read_snapshot`, one batch at a time, for a snapshot read piece by piece
    (a file far larger than one buffer). `add` each batch in file order, then `finish`.

    Batches are only kept (as `SnapshotContents.data_batches`) with `keep_data=True`; a
    streaming reader leaves it off and gets the control records and the record count.
    """

    def __init__(self, *, expected_epoch: int | None = None, keep_data: bool = False) -> None:
        self._epoch = expected_epoch
        self._keep = keep_data
        self._index = 0
        self._next_offset = 0
        self._control: list[ControlRecord] = []
        self._data: list[RecordBatch] = []
        self._header: SnapshotHeaderRecord | None = None
        self._footer: SnapshotFooterRecord | None = None
        self._footer_where = ""
        self._kraft_version: KRaftVersionRecord | None = None
        self._voters: VotersRecord | None = None
        self._end_position = 0

    def add(self, batch: RecordBatch) -> None:
        """Check the next batch; raises CorruptRecordError naming its byte position."""
        i = self._index
        self._index += 1
        where = f"snapshot batch {i} at byte position {batch.position}"
        if self._footer is not None:
            raise CorruptRecordError(f"{self._footer_where}: SNAPSHOT_FOOTER is not the last record")
        if self._epoch is None:
            self._epoch = batch.partition_leader_epoch
        batch.validate(records=True)
        if batch.base_offset != self._next_offset:
            raise CorruptRecordError(
                f"{where}: base offset {batch.base_offset}, expected {self._next_offset}"
            )
        if batch.partition_leader_epoch != self._epoch:
            raise CorruptRecordError(
                f"{where}: partition leader epoch {batch.partition_leader_epoch}, "
                f"expected the snapshot epoch {self._epoch}"
            )
        self._next_offset = batch.next_offset
        self._end_position = batch.position + batch.size_in_bytes
        if not batch.is_control:
            if i == 0:
                raise CorruptRecordError(f"{where}: first batch is not a control batch")
            if self._keep:
                self._data.append(batch)
            return
        try:
            decoded = decode_control_batch(batch)
        except ProtocolError as exc:
            raise CorruptRecordError(f"{where}: {exc}") from None
        for j, rec in enumerate(decoded):
            if i == 0 and j == 0:
                if not isinstance(rec, SnapshotHeaderRecord):
                    raise CorruptRecordError(
                        f"{where}: first record is {type(rec).__name__}, not SNAPSHOT_HEADER"
                    )
                self._header = rec
            elif isinstance(rec, SnapshotHeaderRecord):
                raise CorruptRecordError(f"{where}: SNAPSHOT_HEADER is not the first record")
            elif isinstance(rec, SnapshotFooterRecord):
                if j != len(decoded) - 1:
                    raise CorruptRecordError(f"{where}: SNAPSHOT_FOOTER is not the last record")
                self._footer = rec
                self._footer_where = where
            elif isinstance(rec, KRaftVersionRecord):
                self._kraft_version = rec
            elif isinstance(rec, VotersRecord):
                self._voters = rec
            self._control.append(rec)
        if self._header is None:
            raise CorruptRecordError(f"{where}: first batch holds no SNAPSHOT_HEADER")

    def finish(self) -> SnapshotContents:
        """The contents once every batch was added; raises if the snapshot is incomplete."""
        if self._index == 0:
            raise TruncatedInputError("snapshot is empty: no SNAPSHOT_HEADER batch")
        if self._header is None:  # pragma: no cover - add() raised for the first batch
            raise CorruptRecordError("snapshot has no SNAPSHOT_HEADER")
        if self._footer is None:
            raise CorruptRecordError(
                f"snapshot ends at byte {self._end_position} without a SNAPSHOT_FOOTER"
            )
        assert self._epoch is not None
        return SnapshotContents(
            header=self._header,
            footer=self._footer,
            kraft_version=self._kraft_version,
            voters=self._voters,
            control_records=tuple(self._control),
            data_batches=tuple(self._data),
            epoch=self._epoch,
            record_count=self._next_offset,
        )


def read_snapshot(
    buf: bytes | bytearray | memoryview, *, expected_epoch: int | None = None
) -> SnapshotContents:
    """Check a whole snapshot and return its contents.

    Checked: every batch's header, CRC and records; the first batch is a control batch that
    starts with SNAPSHOT_HEADER; the last batch is a control batch holding SNAPSHOT_FOOTER and
    nothing follows it; offsets start at 0 and are contiguous; all batches share one partition
    leader epoch (equal to `expected_epoch` when given). Raises TruncatedInputError for a file
    cut short and CorruptRecordError for anything else, naming the byte position.
    """
    checker = SnapshotChecker(expected_epoch=expected_epoch, keep_data=True)
    for batch in iter_batches(buf):
        checker.add(batch)
    return checker.finish()
