"""`kraft dump`: human-readable listing of segments, snapshots and metadata directories.

Every batch is printed with its header fields and CRC status, and every record as
`kafka-dump-log --print-data-log` prints it: offset, CreateTime, key and value sizes, header
keys, then the key, the headers and the payload. Control records are decoded by type; data
records are decoded as KV commands, else as metadata records (apiKey name, version, and the
decoded body for FeatureLevelRecord) when their value carries the metadata frame, else shown
as text or hex.

A tool over storage, records and the KV state machine, so it sits above those packages (as the
CLI does), not in `kraft.storage`.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TextIO

from kraft.protocol.errors import ProtocolError
from kraft.protocol.uuid import Uuid
from kraft.records.batch import Record, RecordBatch, zero_tail
from kraft.records.control import (
    ControlRecordType,
    UnknownControlRecord,
    decode_control_record,
)
from kraft.statemachine.kv import OP_CAS, OP_DELETE, OP_PUT, CommandError, decode_command
from kraft.storage.bootstrap import (
    FEATURE_LEVEL_RECORD_API_KEY,
    METADATA_RECORD_NAMES,
    decode_feature_level,
    decode_metadata_frame,
)
from kraft.storage.layout import (
    BOOTSTRAP_CHECKPOINT,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    META_PROPERTIES,
    METADATA_PARTITION_DIR,
    PARTITION_METADATA,
    QUORUM_STATE,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    parse_segment_file_name,
    parse_snapshot_file_name,
)


@dataclass(slots=True)
class DumpReport:
    """Files dumped and problems found (a problem makes `kraft dump` exit with 1)."""

    files: int = 0
    problems: list[str] = field(default_factory=list)


def _fmt(value: Any) -> str:
    if isinstance(value, Uuid):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if is_dataclass(value) and not isinstance(value, type):
        parts = [
            f"{f.name}={_fmt(getattr(value, f.name))}"
            for f in fields(value)
            if not (f.name == "unknown_tags" and not getattr(value, f.name))
        ]
        return f"{type(value).__name__}(" + ", ".join(parts) + ")"
    return repr(value)


def show_bytes(data: bytes | None) -> str:
    """A key, header value or field as Kafka's string decoder would show it, quoted: UTF-8
    text in JSON quotes, anything else as 0x-hex (cut after 64 bytes), null for none."""
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable():
        return json.dumps(text, ensure_ascii=False)
    shown = data[:64].hex()
    return f"0x{shown}" + (f"...({len(data)} bytes)" if len(data) > 64 else "")


def describe_kv_command(value: bytes) -> str | None:
    """The KV state machine's command in a record value, decoded; None if it is not one."""
    try:
        cmd = decode_command(value)
    except CommandError:
        return None
    if cmd.op == OP_PUT:
        return f"PUT key={show_bytes(cmd.key.encode())} value={show_bytes(cmd.value)}"
    if cmd.op == OP_DELETE:
        return f"DELETE key={show_bytes(cmd.key.encode())}"
    if cmd.op == OP_CAS:
        return (f"CAS key={show_bytes(cmd.key.encode())} expected={show_bytes(cmd.expected)} "
                f"new={show_bytes(cmd.value)}")
    return f"BARRIER token={show_bytes(cmd.value)}"


def describe_record(rec: Record, control: bool) -> str:
    """One record as `kafka-dump-log --print-data-log` shows it: offset, CreateTime, key and
    value sizes, header keys, then the key (when there is one), the headers and the payload,
    decoded (control records by type, KV commands, metadata records)."""
    key_size = -1 if rec.key is None else len(rec.key)
    value_size = -1 if rec.value is None else len(rec.value)
    parts = [f"offset={rec.offset} CreateTime={rec.timestamp} keySize={key_size} "
             f"valueSize={value_size} headerKeys=[{','.join(k for k, _ in rec.headers)}]"]
    if control:
        decoded = decode_control_record(rec)
        if isinstance(decoded, UnknownControlRecord):
            type_id = decoded.type_id
        else:
            type_id = int(decoded.record_type)
        try:
            name = ControlRecordType(type_id).name
        except ValueError:
            name = "UNKNOWN"
        parts.append(f"controlType={name}({type_id}) {_fmt(decoded)}")
        return " ".join(parts)
    if rec.key is not None:
        parts.append(f"key={show_bytes(rec.key)}")
    if rec.headers:
        parts.append("headers=[" + ", ".join(f"{k}={show_bytes(v)}" for k, v in rec.headers)
                     + "]")
    parts.append(f"payload={describe_data_value(rec.value)}")
    return " ".join(parts)


def describe_data_value(value: bytes | None) -> str:
    """One-line description of a data record value: a KV command, a metadata record, or
    its bytes."""
    if value is None:
        return "null"
    command = describe_kv_command(value)
    if command is not None:
        return command
    try:
        api_key, version, _ = decode_metadata_frame(value)
        name = METADATA_RECORD_NAMES.get(api_key, f"apiKey{api_key}")
        if api_key == FEATURE_LEVEL_RECORD_API_KEY and version == 0:
            rec = decode_feature_level(value)
            return f"{name} v{version} name={rec.name} featureLevel={rec.feature_level}"
        return f"{name} v{version} bytes={len(value)}"
    except (ProtocolError, UnicodeDecodeError):
        pass
    return show_bytes(value)


def dump_batches(data: bytes, source: str, report: DumpReport, *,
                 zeros_may_follow: bool = False) -> Iterator[str]:
    """Lines for every batch of a record-batch file (segment or snapshot). With
    `zeros_may_follow` (a segment), zeros after the last batch are preallocated space
    (`kraft.log.preallocate.bytes`, left by a crash), not a problem."""
    pos = 0
    while pos < len(data):
        try:
            batch = RecordBatch.parse(data, pos)
        except ProtocolError as exc:
            if zeros_may_follow and zero_tail(data, pos):
                yield (f"  {len(data) - pos} zero bytes from position {pos}: preallocated "
                       "space after the last batch")
                return
            report.problems.append(f"{source}: {exc}")
            yield f"  ERROR at position {pos}: {exc} ({len(data) - pos} bytes not shown)"
            return
        valid = batch.is_valid()
        yield (
            f"  batch base_offset={batch.base_offset} last_offset={batch.last_offset} "
            f"epoch={batch.partition_leader_epoch} records={batch.records_count} "
            f"control={str(batch.is_control).lower()} size={batch.size_in_bytes} "
            f"position={pos} crc={batch.crc:#010x} crc_valid={str(valid).lower()} "
            f"base_timestamp={batch.base_timestamp}"
        )
        if not valid:
            report.problems.append(f"{source}: CRC mismatch in batch at position {pos}")
        try:
            for rec in batch.records():
                yield f"    {describe_record(rec, batch.is_control)}"
        except ProtocolError as exc:
            report.problems.append(f"{source}: {exc}")
            yield f"    ERROR: {exc}"
        pos += batch.size_in_bytes


def _dump_index(path: Path, entry_size: int) -> Iterator[str]:
    base = parse_segment_file_name(path.name)
    base_offset = base[0] if base else 0
    data = path.read_bytes()
    for i in range(0, len(data) - len(data) % entry_size, entry_size):
        if entry_size == 8:
            rel, position = struct.unpack_from(">ii", data, i)
            yield f"  offset={base_offset + rel} position={position}"
        else:
            ts, rel = struct.unpack_from(">qi", data, i)
            yield f"  timestamp={ts} offset={base_offset + rel}"


def dump_file(path: Path, report: DumpReport) -> Iterator[str]:
    """Lines describing one file, chosen by its name."""
    report.files += 1
    name = path.name
    if name.endswith(LOG_SUFFIX):
        yield f"== segment {path} ({path.stat().st_size} bytes)"
        yield from dump_batches(path.read_bytes(), str(path), report, zeros_may_follow=True)
    elif name.endswith(SNAPSHOT_SUFFIX):
        sid = parse_snapshot_file_name(name)
        label = f"snapshot end_offset={sid.end_offset} epoch={sid.epoch}" if sid else "checkpoint"
        if name == BOOTSTRAP_CHECKPOINT:
            label = "bootstrap checkpoint"
        yield f"== {label} {path} ({path.stat().st_size} bytes)"
        yield from dump_batches(path.read_bytes(), str(path), report)
    elif name.endswith(INDEX_SUFFIX):
        yield f"== offset index {path}"
        yield from _dump_index(path, 8)
    elif name.endswith(TIME_INDEX_SUFFIX):
        yield f"== time index {path}"
        yield from _dump_index(path, 12)
    elif name == QUORUM_STATE:
        text = path.read_text(encoding="utf-8").strip()
        yield f"== quorum-state {path}"
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            report.problems.append(f"{path}: {exc}")
        yield f"  {text}"
    elif name in (META_PROPERTIES, LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA):
        yield f"== {name} {path}"
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            yield f"  {line}"
    else:
        yield f"== {path} ({path.stat().st_size} bytes, not a KRaft file)"


def _partition_files(pdir: Path) -> list[Path]:
    order = {QUORUM_STATE: 0, PARTITION_METADATA: 1, LEADER_EPOCH_CHECKPOINT: 2}
    files = sorted(p for p in pdir.iterdir() if p.is_file())

    def key(p: Path) -> tuple[int, str]:
        if p.name in order:
            return order[p.name], p.name
        if p.name.endswith(SNAPSHOT_SUFFIX):
            return 3, p.name
        if p.name.endswith(LOG_SUFFIX):
            return 4, p.name
        return 5, p.name

    return sorted((p for p in files if not p.name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX))), key=key)


def dump_path(path: Path | str, report: DumpReport | None = None) -> Iterator[str]:
    """Lines for a file, a `__cluster_metadata-0` directory or a whole metadata directory."""
    rep = report if report is not None else DumpReport()
    p = Path(path)
    if not p.exists():
        rep.problems.append(f"{p}: no such file or directory")
        yield f"ERROR: {p}: no such file or directory"
        return
    if p.is_file():
        yield from dump_file(p, rep)
        return
    pdir = p / METADATA_PARTITION_DIR
    if pdir.is_dir() or (p / META_PROPERTIES).exists():
        yield f"# metadata directory {p}"
        for name in (META_PROPERTIES, BOOTSTRAP_CHECKPOINT):
            if (p / name).exists():
                yield from dump_file(p / name, rep)
        if pdir.is_dir():
            yield f"# partition directory {pdir}"
            for f in _partition_files(pdir):
                yield from dump_file(f, rep)
        return
    yield f"# partition directory {p}"
    for f in _partition_files(p):
        yield from dump_file(f, rep)


def dump(path: Path | str, out: TextIO) -> DumpReport:
    """Write the dump of `path` to `out`; returns the report."""
    report = DumpReport()
    for line in dump_path(path, report):
        out.write(line + os.linesep)
    return report
