"""`spark.read.format("kraft")`: a PySpark Python Data Source over KRaft replica directories.

Usage::

    from kraft_pipeline.datasource import KraftDataSource
    spark.dataSource.register(KraftDataSource)
    df = spark.read.format("kraft").load("/data/node-1")              # one replica
    df = spark.read.format("kraft").option("paths", "/a,/b,/c").load()  # several replicas

`path` (or `paths`, comma-separated) may name a replica directory, its
`__cluster_metadata-0/` directory, or a folder of replica directories (see
`kraft_pipeline.layout`). Each segment (`*.log`) and each snapshot (`*.checkpoint`) becomes
one Spark partition, so the read spreads over every core or executor.

One row per record (columns in `SCHEMA`; see docs/audit.md for the full table):

=====================  ========  ===================================================
column                 type      meaning
=====================  ========  ===================================================
replica                string    `node-<node.id>` (or the directory name)
node_id                int       node.id from meta.properties (null when absent)
directory_id           string    directory.id from meta.properties (base64 uuid)
source                 string    `log` or `snapshot`
file                   string    absolute path of the segment or snapshot file
snapshot_end_offset    long      snapshot id end offset (exclusive); null for `log`
snapshot_epoch         int       snapshot id epoch; null for `log`
position               long      byte position of the batch in its file
batch_base_offset      long      base offset of the batch (snapshot batches start at 0)
batch_last_offset      long      last offset of the batch
offset                 long      the record's offset (null on error rows)
epoch                  int       partition leader epoch of the batch
timestamp              long      record timestamp, milliseconds since the epoch
is_control             boolean   control batch
control_type           string    LEADER_CHANGE, KRAFT_VOTERS, ... (null for data)
control_detail         string    decoded control record as JSON (null for data)
key                    binary    record key (null in KRaft data records)
value                  binary    record value
batch_crc              long      stored CRC-32C of the batch
batch_size             int       batch size in bytes, header included
batch_records          int       records count of the batch header
error                  string    null, or why this batch could not be read
=====================  ========  ===================================================

A batch that cannot be read becomes one row with `error` set (and whatever header fields
could be decoded) instead of failing the job: a CRC mismatch or malformed records (the scan
skips the batch by its length and goes on), a torn batch at the end of a file or an
impossible header (the rest of the file cannot be framed, so the scan stops there). Zeros
from the end of a segment's last batch to the end of the file are not an error: they are the
space a replica with `kraft.log.preallocate.bytes` keeps ahead of its log, left by a crash.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from collections.abc import Iterator
from dataclasses import asdict, is_dataclass
from enum import Enum
from typing import Any

import crc32c
from kraft_pipeline.layout import LogFile, discover_replicas
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kraft.protocol.errors import ProtocolError
from kraft.protocol.uuid import Uuid
from kraft.records.batch import Record, RecordBatch, TailKind, scan_batches, zero_tail
from kraft.records.control import ControlRecordType, decode_control_record, parse_control_key

SCHEMA_DDL = (
    "replica string, node_id int, directory_id string, source string, file string, "
    "snapshot_end_offset long, snapshot_epoch int, position long, "
    "batch_base_offset long, batch_last_offset long, offset long, epoch int, timestamp long, "
    "is_control boolean, control_type string, control_detail string, "
    "key binary, value binary, batch_crc long, batch_size int, batch_records int, "
    "error string"
)
"""The data source's schema as a Spark DDL string (also `SCHEMA`)."""

COLUMNS = [c.strip().split(" ")[0] for c in SCHEMA_DDL.split(",")]
ARROW_BATCH_ROWS = 32768
"""Rows per Arrow record batch handed to Spark."""

BATCH_SCHEMA_DDL = (
    "replica string, node_id int, directory_id string, source string, file string, "
    "snapshot_end_offset long, snapshot_epoch int, position long, "
    "batch_base_offset long, batch_last_offset long, epoch int, timestamp long, "
    "max_timestamp long, is_control boolean, batch_crc long, batch_size int, "
    "batch_records int, batch_hash long, error string, data binary"
)
"""The schema of `option("rows", "batches")`: one row per batch, with the batch's bytes."""

BATCH_COLUMNS = [c.strip().split(" ")[0] for c in BATCH_SCHEMA_DDL.split(",")]
BATCH_INDEX_DDL = BATCH_SCHEMA_DDL.rsplit(",", 1)[0]
"""The schema of `option("rows", "batches").option("batchBytes", "false")`: the batch rows
without their bytes, an index into the files (`file`, `position`, `batch_size`); the bytes
are read back where needed with `read_batch_bytes`."""
ARROW_BATCH_BYTES = 16 * 1024 * 1024
"""With `rows=batches`: at most about this many bytes of `data` per Arrow record batch."""


def schema() -> StructType:
    """The schema of `spark.read.format("kraft")` as a StructType."""
    parsed = StructType.fromDDL(SCHEMA_DDL)
    assert isinstance(parsed, StructType)
    return parsed


def batch_schema() -> StructType:
    """The schema of `option("rows", "batches")` as a StructType."""
    parsed = StructType.fromDDL(BATCH_SCHEMA_DDL)
    assert isinstance(parsed, StructType)
    return parsed


def _arrow_batch_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("replica", pa.string()), ("node_id", pa.int32()), ("directory_id", pa.string()),
            ("source", pa.string()), ("file", pa.string()),
            ("snapshot_end_offset", pa.int64()), ("snapshot_epoch", pa.int32()),
            ("position", pa.int64()), ("batch_base_offset", pa.int64()),
            ("batch_last_offset", pa.int64()), ("epoch", pa.int32()),
            ("timestamp", pa.int64()), ("max_timestamp", pa.int64()), ("is_control", pa.bool_()),
            ("batch_crc", pa.int64()), ("batch_size", pa.int32()), ("batch_records", pa.int32()),
            ("batch_hash", pa.int64()), ("error", pa.string()), ("data", pa.binary()),
        ]
    )


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("replica", pa.string()), ("node_id", pa.int32()), ("directory_id", pa.string()),
            ("source", pa.string()), ("file", pa.string()),
            ("snapshot_end_offset", pa.int64()), ("snapshot_epoch", pa.int32()),
            ("position", pa.int64()), ("batch_base_offset", pa.int64()),
            ("batch_last_offset", pa.int64()), ("offset", pa.int64()), ("epoch", pa.int32()),
            ("timestamp", pa.int64()), ("is_control", pa.bool_()),
            ("control_type", pa.string()), ("control_detail", pa.string()),
            ("key", pa.binary()), ("value", pa.binary()), ("batch_crc", pa.int64()),
            ("batch_size", pa.int32()), ("batch_records", pa.int32()), ("error", pa.string()),
        ]
    )


# ----------------------------------------------------------------------------- control records


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Uuid):
        return str(obj)
    if isinstance(obj, Enum):
        return obj.name
    if isinstance(obj, bytes):
        return obj.hex()
    if is_dataclass(obj) and not isinstance(obj, type):
        return {
            k: _jsonable(v) for k, v in asdict(obj).items() if k != "unknown_tags" or v
        }
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


def control_type_name(key: bytes | None) -> str:
    """The ControlRecordType name from a control record key (`UNKNOWN(<n>)` if unknown)."""
    try:
        type_id = parse_control_key(key)
    except ProtocolError:
        return "INVALID_KEY"
    try:
        return ControlRecordType(type_id).name
    except ValueError:
        return f"UNKNOWN({type_id})"


def describe_control(record: Record) -> str:
    """The decoded control record as JSON (`{"decode_error": ...}` when it does not decode)."""
    try:
        decoded = decode_control_record(record)
    except ProtocolError as exc:
        return json.dumps({"decode_error": str(exc)})
    return json.dumps(_jsonable(decoded), sort_keys=True)


# ----------------------------------------------------------------------------- file scan


def _error_row(f: LogFile, position: int, batch: RecordBatch | None, message: str) -> tuple[Any, ...]:
    return (
        f.replica, f.node_id, f.directory_id, f.source, f.path,
        f.snapshot_end_offset, f.snapshot_epoch, position,
        batch.base_offset if batch else None, batch.last_offset if batch else None, None,
        batch.partition_leader_epoch if batch else None,
        batch.base_timestamp if batch else None, batch.is_control if batch else None,
        None, None, None, None,
        batch.crc if batch else None, batch.size_in_bytes if batch else None,
        batch.records_count if batch else None, message,
    )


def _batch_records(batch: RecordBatch) -> list[Record]:
    """The records of one CRC-valid batch; raises ProtocolError when they do not parse."""
    records = list(batch.records())
    if len(records) != batch.records_count:
        raise ProtocolError(
            f"record batch at byte position {batch.position} (base offset {batch.base_offset}):"
            f" header announces {batch.records_count} records, {len(records)} found"
        )
    return records


PER_RECORD = (10, 12, 14, 15, 16, 17)
"""Indexes in `COLUMNS` of the values that change from record to record (offset, timestamp,
control_type, control_detail, key, value); every other column is constant within a batch."""


class ColumnBuffer:
    """Rows gathered column by column, ready to become one Arrow record batch.

    Columns constant within a batch (replica, file, epoch, CRC, ...) are kept once per batch
    as *runs* and expanded by Arrow's `take` kernel; only the per-record columns hold one
    Python value per record. Building 22-field tuples per record, or Arrow arrays from long
    lists of repeated strings, costs several times more.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.runs: list[list[Any]] = [[] for _ in COLUMNS]  # constant columns: one per run
        self.counts: list[int] = []
        self.values: dict[int, list[Any]] = {i: [] for i in PER_RECORD}
        self.rows = 0

    def add_row(self, row: tuple[Any, ...]) -> None:
        """Add one row given as a tuple in `COLUMNS` order."""
        for i, value in enumerate(row):
            if i in self.values:
                self.values[i].append(value)
            else:
                self.runs[i].append(value)
        self.counts.append(1)
        self.rows += 1

    def take(self, f: LogFile, batch: RecordBatch) -> None:
        """Add a CRC-valid batch: one row per record, or one error row when its records do
        not parse."""
        try:
            records = _batch_records(batch)
        except ProtocolError as exc:
            self.add_row(_error_row(f, batch.position, batch, f"invalid_records: {exc}"))
            return
        self.add_batch(f, batch, records)

    def add_batch(self, f: Any, batch: RecordBatch, records: list[Record],
                  position: int | None = None) -> None:
        """Add one row per record of a readable batch.

        `f` is the LogFile (or anything with its replica, node_id, directory_id, source, path,
        snapshot_end_offset and snapshot_epoch); `position` overrides `batch.position` (the
        batch's byte position in its file) when the batch was parsed from a copy.
        """
        n = len(records)
        if n == 0:
            return
        control = batch.is_control
        constants = (
            f.replica, f.node_id, f.directory_id, f.source, f.path,
            f.snapshot_end_offset, f.snapshot_epoch,
            batch.position if position is None else position,
            batch.base_offset, batch.last_offset, None, batch.partition_leader_epoch, None,
            control, None, None, None, None, batch.crc, batch.size_in_bytes,
            batch.records_count, None,
        )
        for i, value in enumerate(constants):
            self.runs[i].append(value)
        self.counts.append(n)
        v = self.values
        v[10].extend([r.offset for r in records])
        v[12].extend([r.timestamp for r in records])
        if control:
            v[14].extend([control_type_name(r.key) for r in records])
            v[15].extend([describe_control(r) for r in records])
        else:
            v[14].extend([None] * n)
            v[15].extend([None] * n)
        v[16].extend([r.key for r in records])
        v[17].extend([r.value for r in records])
        self.rows += n

    def to_arrow(self, arrow_schema: Any) -> Any:
        """The buffered rows as one pyarrow RecordBatch; empties the buffer."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        index = pa.array(np.repeat(np.arange(len(self.counts), dtype=np.int64), self.counts))
        arrays = []
        for i, field in enumerate(arrow_schema):
            if i in self.values:
                arrays.append(pa.array(self.values[i], type=field.type))
            else:
                arrays.append(pc.take(pa.array(self.runs[i], type=field.type), index))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    def to_rows(self) -> list[tuple[Any, ...]]:
        """The buffered rows as tuples in `COLUMNS` order; empties the buffer."""
        columns: list[list[Any]] = []
        for i in range(len(COLUMNS)):
            if i in self.values:
                columns.append(self.values[i])
            else:
                expanded: list[Any] = []
                for value, n in zip(self.runs[i], self.counts, strict=True):
                    expanded.extend([value] * n)
                columns.append(expanded)
        self._reset()
        return list(zip(*columns, strict=True))


FRAMED_MAX = 1 << 20
"""At most this many batches are remembered as framed by one buffer (the set is cleared when
full), so a worker's memory does not grow with the log."""


class BatchBuffer:
    """Rows of `rows=batches`: one per batch, with its header fields, a 64-bit hash and a copy
    of its bytes (`data`), gathered until they make one Arrow record batch.

    A CRC-valid batch is also checked record by record (`RecordBatch.values()`, which frames
    every record); when its records do not parse it becomes an `invalid_records` error row.
    Replicas that agree hold the same batches byte for byte, so that record check runs once
    per distinct batch a buffer sees: a batch whose hash, stored CRC-32C and size equal those
    of a batch this buffer already framed without error (`framed`) is not framed again. Its
    CRC is still checked, and a batch that failed the check is checked again. The reader
    plans the copies of one segment into one partition (one buffer) for this.
    """

    def __init__(self, keep_bytes: bool = True) -> None:
        self.framed: set[tuple[int, int, int]] = set()
        self.keep_bytes = keep_bytes
        self._reset()

    def _reset(self) -> None:
        self.columns: list[list[Any]] = [[] for _ in BATCH_COLUMNS[:-1]]
        self.data = bytearray()
        self.ends: list[int] = [0]
        self.valid: list[bool] = []
        self.rows = 0

    @property
    def nbytes(self) -> int:
        """Bytes of batch data buffered."""
        return len(self.data)

    def add_row(self, row: tuple[Any, ...]) -> None:
        """Add an error row given as a tuple in the record schema's `COLUMNS` order."""
        by_name = dict(zip(COLUMNS, row, strict=True))
        by_name["max_timestamp"] = None
        by_name["batch_hash"] = None
        for i, name in enumerate(BATCH_COLUMNS[:-1]):
            self.columns[i].append(by_name[name])
        self.ends.append(len(self.data))
        self.valid.append(False)
        self.rows += 1

    def take(self, f: LogFile, batch: RecordBatch) -> None:
        """Add one CRC-valid batch (or its `invalid_records` error row)."""
        raw = batch.raw
        digest = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big",
                                signed=True)
        seen = (digest, batch.crc, batch.size_in_bytes)
        if seen not in self.framed:
            try:
                values = batch.values()
                if len(values) != batch.records_count:
                    raise ProtocolError(
                        f"record batch at byte position {batch.position} (base offset "
                        f"{batch.base_offset}): header announces {batch.records_count} "
                        f"records, {len(values)} found"
                    )
            except ProtocolError as exc:
                self.add_row(_error_row(f, batch.position, batch, f"invalid_records: {exc}"))
                return
            del values
            if len(self.framed) >= FRAMED_MAX:
                self.framed.clear()
            self.framed.add(seen)
        row = (
            f.replica, f.node_id, f.directory_id, f.source, f.path, f.snapshot_end_offset,
            f.snapshot_epoch, batch.position, batch.base_offset, batch.last_offset,
            batch.partition_leader_epoch, batch.base_timestamp, batch.max_timestamp,
            batch.is_control, batch.crc, batch.size_in_bytes, batch.records_count, digest, None,
        )
        for i, value in enumerate(row):
            self.columns[i].append(value)
        if self.keep_bytes:
            self.data += raw
        del raw
        self.ends.append(len(self.data))
        self.valid.append(True)
        self.rows += 1

    def to_arrow(self, arrow_schema: Any) -> Any:
        """The buffered rows as one pyarrow RecordBatch; empties the buffer."""
        import numpy as np
        import pyarrow as pa

        n = self.rows
        if not self.keep_bytes:
            arrays = [pa.array(self.columns[i], type=field.type)
                      for i, field in enumerate(arrow_schema)]
            self._reset()
            return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
        arrays = [pa.array(self.columns[i], type=field.type)
                  for i, field in enumerate(list(arrow_schema)[:-1])]
        offsets = np.asarray(self.ends, dtype=np.int32)
        validity = None
        if not all(self.valid):
            validity = pa.array(self.valid, type=pa.bool_()).buffers()[1]
        data = pa.Array.from_buffers(
            pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(self.data)]
        )
        arrays.append(data)
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def scan_file(f: LogFile, buffer: Any, max_rows: int) -> Iterator[None]:
    """Decode one segment or snapshot file into `buffer`, yielding whenever it holds at least
    `max_rows` rows (the caller drains it then) and once more at the end of the file.

    Never raises for bad content: every problem becomes an error row (see the module
    docstring). A missing or unreadable file is one error row at position 0.
    """
    try:
        fd = os.open(f.path, os.O_RDONLY)
    except OSError as exc:
        buffer.add_row(_error_row(f, 0, None, f"cannot open: {exc}"))
        yield None
        return
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                yield from _scan_buffer(f, view, buffer, max_rows)
            finally:
                view.release()
    finally:
        os.close(fd)


def _scan_buffer(
    f: LogFile, view: memoryview, buffer: Any, max_rows: int
) -> Iterator[None]:
    pos = 0
    end = len(view)
    while pos < end:
        result = scan_batches(view, start=pos)
        batches, tail = result.batches, result.tail
        del result
        for index in range(len(batches)):
            buffer.take(f, batches[index])
            if buffer.rows >= max_rows or getattr(buffer, "nbytes", 0) >= ARROW_BATCH_BYTES:
                yield None
        batches = ()  # drop the views into the mapping before it is released
        if tail is None:
            break
        if tail.kind in (TailKind.CORRUPT_CRC, TailKind.INVALID_RECORDS):
            # The header framed the batch: report it and resume right after it.
            bad = RecordBatch.parse(view, tail.position)
            buffer.add_row(_error_row(f, tail.position, bad, f"{tail.kind.value}: {tail.message}"))
            pos = tail.position + bad.size_in_bytes
            del bad
            continue
        if f.source == "log" and zero_tail(view, tail.position):
            break  # space preallocated after a segment's last batch, left by a crash
        # Torn or unframeable: nothing after this position can be located.
        bad_batch: RecordBatch | None = None
        try:
            bad_batch = RecordBatch.parse(view, tail.position)
        except ProtocolError:
            bad_batch = None
        buffer.add_row(_error_row(
            f, tail.position, bad_batch,
            f"{tail.kind.value}: {tail.message} ({end - tail.position} bytes unread)",
        ))
        del bad_batch
        break
    yield None


def scan_file_rows(f: LogFile) -> list[tuple[Any, ...]]:
    """All rows of one file as tuples in `COLUMNS` order (for tests and small tools)."""
    buffer = ColumnBuffer()
    for _ in scan_file(f, buffer, 1 << 62):
        pass
    return buffer.to_rows()


# ----------------------------------------------------------------------------- Spark API


def plan_partitions(files: list[LogFile], group_bytes: int = 0, copies_bytes: int = 0
                    ) -> list[list[LogFile]]:
    """Spark input partitions for `files`, largest first: one file each by default.

    With `copies_bytes`, the copies of one file across replicas (the same source and file
    name: a segment's name is its base offset, a snapshot's its end offset and epoch) share a
    partition while they hold at most that many bytes together, so the batch rows' record
    check frames each distinct batch once (`BatchBuffer`). With `group_bytes`, the remaining
    files smaller than that are packed together, up to that many bytes per partition.
    """
    groups: list[list[LogFile]] = []
    single: list[LogFile] = []
    if copies_bytes > 0:
        copies: dict[tuple[str, str], list[LogFile]] = {}
        for lf in files:
            copies.setdefault((lf.source, os.path.basename(lf.path)), []).append(lf)
        for same in copies.values():
            if len(same) > 1 and sum(lf.size_bytes for lf in same) <= copies_bytes:
                groups.append(sorted(same, key=lambda lf: lf.path))
            else:
                single.extend(same)
    else:
        single = list(files)
    single.sort(key=lambda lf: (-lf.size_bytes, lf.path))
    group: list[LogFile] = []
    size = 0
    for lf in single:
        if group_bytes <= 0 or lf.size_bytes >= group_bytes:
            groups.append([lf])
            continue
        if group and size + lf.size_bytes > group_bytes:
            groups.append(group)
            group, size = [], 0
        group.append(lf)
        size += lf.size_bytes
    if group:
        groups.append(group)
    groups.sort(key=lambda g: (-sum(lf.size_bytes for lf in g), g[0].path))
    return groups


class KraftFilePartition(InputPartition):
    """One Spark input partition: one segment or snapshot file (or a few small ones).

    By default each partition holds exactly one file. With the `groupSmallFilesBytes` option,
    files smaller than that are packed together (up to that many bytes per partition), which
    saves per-task overhead when a quorum has many tiny segments.
    """

    def __init__(self, files: list[LogFile]) -> None:
        super().__init__([f.path for f in files])
        self.files = files


def _options(options: Any) -> dict[str, str]:
    """The source's options with their names in lower case, as Spark hands them over (its
    options are case-insensitive: `dict()` of them has lower-case keys)."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _paths_option(options: dict[str, str]) -> list[str]:
    raw = options.get("paths") or options.get("path") or ""
    if raw.startswith("["):
        return [str(p) for p in json.loads(raw)]
    return [p for p in (s.strip() for s in raw.split(",")) if p]


def _bytes_option(options: dict[str, str], name: str) -> int:
    raw = options.get(name.lower(), "0")
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"option {name}={raw!r}: expected a number of bytes (0 or more)")
    return value


def _batch_bytes(options: dict[str, str]) -> bool:
    keep = (options.get("batchbytes") or "true").lower()
    if keep not in ("true", "false"):
        raise ValueError(f"option batchBytes={keep!r}: expected 'true' or 'false'")
    return keep == "true"


def _batch_rows(options: dict[str, str]) -> bool:
    rows = (options.get("rows") or "records").lower()
    if rows not in ("records", "batches"):
        raise ValueError(f"option rows={rows!r}: expected 'records' or 'batches'")
    return rows == "batches"


class KraftDataSource(DataSource):
    """The `kraft` data source: records of KRaft replica logs and snapshots (read only)."""

    @classmethod
    def name(cls) -> str:
        """Format name for `spark.read.format(...)`."""
        return "kraft"

    def schema(self) -> str:
        """`SCHEMA_DDL`, or `BATCH_SCHEMA_DDL` with `rows=batches` (`BATCH_INDEX_DDL` with
        `batchBytes=false` as well)."""
        options = _options(self.options)
        if not _batch_rows(options):
            return SCHEMA_DDL
        return BATCH_SCHEMA_DDL if _batch_bytes(options) else BATCH_INDEX_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader over the replica directories named by `path`/`paths`."""
        return KraftReader(_options(self.options))


class KraftReader(DataSourceReader):
    """Plans one partition per file and decodes it into Arrow record batches."""

    def __init__(self, options: dict[str, str]) -> None:
        options = _options(options)
        self.paths = _paths_option(options)
        self.include_snapshots = options.get("snapshots", "true").lower() != "false"
        self.include_log = options.get("log", "true").lower() != "false"
        self.group_bytes = _bytes_option(options, "groupSmallFilesBytes")
        self.copies_bytes = _bytes_option(options, "groupCopiesBytes")
        self.batch_rows = _batch_rows(options)
        self.batch_bytes = _batch_bytes(options)

    def partitions(self) -> list[InputPartition]:
        """The files, planned by `plan_partitions`."""
        files: list[LogFile] = []
        for replica in discover_replicas(self.paths):
            if self.include_log:
                files.extend(replica.segments)
            if self.include_snapshots:
                files.extend(replica.snapshots)
        return [KraftFilePartition(group)
                for group in plan_partitions(files, self.group_bytes, self.copies_bytes)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Yield pyarrow RecordBatches of about ARROW_BATCH_ROWS rows for one partition."""
        assert isinstance(partition, KraftFilePartition)
        arrow_schema = _arrow_batch_schema() if self.batch_rows else _arrow_schema()
        if self.batch_rows and not self.batch_bytes:
            arrow_schema = arrow_schema.remove(arrow_schema.get_field_index("data"))
        buffer: Any = (BatchBuffer(keep_bytes=self.batch_bytes) if self.batch_rows
                       else ColumnBuffer())
        for file in partition.files:
            for _ in scan_file(file, buffer, ARROW_BATCH_ROWS):
                if buffer.rows >= ARROW_BATCH_ROWS or (
                    self.batch_rows and buffer.nbytes >= ARROW_BATCH_BYTES
                ):
                    yield buffer.to_arrow(arrow_schema)
        if buffer.rows:
            yield buffer.to_arrow(arrow_schema)


def register(spark: Any) -> None:
    """Register the `kraft` format with a SparkSession."""
    spark.dataSource.register(KraftDataSource)


# ----------------------------------------------------------------------------- batch rows back to records


class _FileOf:
    """The per-file constants of a batch row, shaped like a LogFile for `ColumnBuffer`."""

    __slots__ = (
        "directory_id",
        "node_id",
        "path",
        "replica",
        "snapshot_end_offset",
        "snapshot_epoch",
        "source",
    )

    def __init__(self, row: dict[str, Any]) -> None:
        self.replica = row["replica"]
        self.node_id = row["node_id"]
        self.directory_id = row["directory_id"]
        self.source = row["source"]
        self.path = row["file"]
        self.snapshot_end_offset = row["snapshot_end_offset"]
        self.snapshot_epoch = row["snapshot_epoch"]


def explode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """`mapInArrow` function: batch rows (`rows=batches`) to record rows in the record schema
    (`SCHEMA_DDL`), as the record reader would have made them. Rows without a `data` column
    (the index of `batchBytes=false`) have their bytes read back with `BatchBytes`."""
    arrow_schema = _arrow_schema()
    buffer = ColumnBuffer()
    with BatchBytes() as reader:
        for table in batches:
            if "data" in table.column_names:
                data = table.column("data").to_pylist()
                meta = table.drop_columns(["data"]).to_pylist()
            else:
                meta = table.to_pylist()
                data = [reader.read(row) for row in meta]
            for i, row in enumerate(meta):
                raw = data[i]
                if raw is None or row["error"] is not None:
                    continue
                batch = RecordBatch.parse(raw, 0)
                buffer.add_batch(_FileOf(row), batch, _batch_records(batch), row["position"])
                if buffer.rows >= ARROW_BATCH_ROWS:
                    yield buffer.to_arrow(arrow_schema)
    if buffer.rows:
        yield buffer.to_arrow(arrow_schema)


class FileChangedError(RuntimeError):
    """A file no longer holds, at an indexed position, the batch read there at ingest."""


class BatchBytes:
    """Reads indexed batches' bytes back from their files (`file`, `position`, `batch_size`)
    and checks each against the CRC-32C recorded when it was indexed (`batch_crc`).

    A file that changed meanwhile (a live node's log truncated, cleaned or rewritten under
    the audit) raises FileChangedError naming the file and position, never wrong bytes.
    Files are memory-mapped once each and unmapped by `close()` (or on leaving `with`).
    """

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}

    def __enter__(self) -> BatchBytes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmap every file."""
        for m in self._maps.values():
            m.close()
        self._maps.clear()

    def read(self, row: dict[str, Any]) -> bytes | None:
        """The bytes of the batch row `row` (None for an error row)."""
        if row.get("error") is not None or row.get("batch_size") is None:
            return None
        path, position, size = row["file"], int(row["position"]), int(row["batch_size"])
        m = self._maps.get(path)
        if m is None:
            try:
                with open(path, "rb") as f:
                    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise FileChangedError(
                    f"{path}: cannot be read back ({exc}); it changed since the audit indexed "
                    f"it: audit a copy of the directory, or a stopped node's") from exc
            self._maps[path] = m
        raw = m[position:position + size]
        crc = int(row["batch_crc"])
        if len(raw) != size or int.from_bytes(raw[17:21], "big") != crc or (
                crc32c.crc32c(raw[21:]) != crc):
            raise FileChangedError(
                f"{path}: the batch at byte position {position} ({size} bytes, CRC {crc}) is "
                f"no longer there; the file changed since the audit indexed it: audit a copy "
                f"of the directory, or a stopped node's")
        return raw
