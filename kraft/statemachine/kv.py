"""The built-in key-value state machine: put, delete, compare-and-set, read barriers.

Every command is one record value in the log. Layout (all integers big-endian):

    u8 format version (1) | u8 op | field* ; field = u32 length + bytes, 0xFFFFFFFF = absent

| op | name    | fields                         | result                                   |
| -- | ------- | ------------------------------ | ---------------------------------------- |
| 1  | PUT     | key, value                     | `KVResult(ok=True, value=previous)`      |
| 2  | DELETE  | key                            | `KVResult(ok=existed, value=previous)`   |
| 3  | CAS     | key, expected (absent = none), new (absent = delete) | `ok` = swapped, `value` = value before |
| 4  | BARRIER | token                          | `KVResult(ok=True)`; changes nothing      |

A snapshot is the list of PUT commands of every key, in key order. Keys are UTF-8 text.

Records of Apache Kafka's QuorumController (a kraft node replicating a quorum with Kafka
controllers) are framed metadata records (`uvarint frame version 1 | uvarint apiKey | uvarint
version | body`, KIP-631) that are not KV commands: the store counts them (`foreign_records`)
and changes nothing, in the log and in a snapshot alike. The node keeps them byte for byte in
its log and snapshots; it writes no snapshot of its own while it holds any (a KV snapshot
would drop them), and refuses KV calls (docs/node.md, "A quorum with Kafka controllers").
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

from kraft.statemachine.base import CommittedBatch

FORMAT_VERSION = 1
OP_PUT = 1
OP_DELETE = 2
OP_CAS = 3
OP_BARRIER = 4
_ABSENT = 0xFFFFFFFF
MAX_KEY_BYTES = 4096
"""The longest key, in bytes of UTF-8, that any write path takes."""
MAX_VALUE_BYTES = 1024 * 1024
"""The longest value (PUT's value, CAS's expected and new values) that any write path takes."""


class CommandError(ValueError):
    """A record value that is not a valid KV command."""


def _uvarint(value: bytes | bytearray | memoryview, pos: int) -> tuple[int, int] | None:
    """(value, next position) of the unsigned varint at `pos`; None when cut or above 32 bits."""
    result = shift = 0
    while pos < len(value) and shift <= 28:
        b = value[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    return None


METADATA_FRAME_VERSION = 1
MAX_METADATA_API_KEY = 127
"""Kafka's metadata record types (apiKey) are small numbers: 0-25 through Kafka 4.4."""


def metadata_record_type(value: bytes | bytearray | memoryview) -> int | None:
    """The apiKey of a Kafka metadata record value (frame version 1, then apiKey and record
    version as unsigned varints, then at least the body's tagged-fields byte); None when
    `value` is not framed so."""
    frame = _uvarint(value, 0)
    if frame is None or frame[0] != METADATA_FRAME_VERSION:
        return None
    api_key = _uvarint(value, frame[1])
    if api_key is None or api_key[0] > MAX_METADATA_API_KEY:
        return None
    version = _uvarint(value, api_key[1])
    if version is None or version[1] >= len(value):
        return None
    return api_key[0]


@dataclass(frozen=True, slots=True)
class KVCommand:
    """A decoded KV command (see the module docstring for the meaning of each field)."""

    op: int
    key: str
    value: bytes | None = None
    expected: bytes | None = None


class KVResult(NamedTuple):
    """The outcome of applying one command; `error` is set for an undecodable record.

    A named tuple rather than a frozen dataclass: one is built for every record a leader
    applies, and a frozen dataclass's `__init__` costs about twice as much."""

    ok: bool
    value: bytes | None = None
    error: str | None = None


def _field(data: bytes | None) -> bytes:
    if data is None:
        return struct.pack(">I", _ABSENT)
    return struct.pack(">I", len(data)) + data


def encode_put(key: str, value: bytes) -> bytes:
    """The record value of PUT key=value."""
    return bytes([FORMAT_VERSION, OP_PUT]) + _field(key.encode()) + _field(value)


def encode_delete(key: str) -> bytes:
    """The record value of DELETE key."""
    return bytes([FORMAT_VERSION, OP_DELETE]) + _field(key.encode())


def encode_cas(key: str, expected: bytes | None, new: bytes | None) -> bytes:
    """The record value of CAS: set `key` to `new` iff its value is `expected` (None = absent)."""
    return bytes([FORMAT_VERSION, OP_CAS]) + _field(key.encode()) + _field(expected) + _field(new)


def encode_barrier(token: bytes = b"") -> bytes:
    """A record that changes nothing; committing it proves leadership for a linearizable read."""
    return bytes([FORMAT_VERSION, OP_BARRIER]) + _field(token)


def key_limit_error(key_bytes: int) -> str | None:
    """Why a key of `key_bytes` bytes is refused (None: it is not)."""
    if key_bytes > MAX_KEY_BYTES:
        return f"key is {key_bytes} bytes, above the {MAX_KEY_BYTES}-byte limit"
    return None


def value_limit_error(value_bytes: int) -> str | None:
    """Why a value of `value_bytes` bytes is refused (None: it is not)."""
    if value_bytes > MAX_VALUE_BYTES:
        return f"value is {value_bytes} bytes, above the {MAX_VALUE_BYTES}-byte limit"
    return None


def call_refusal(key: str, *values: bytes | None) -> tuple[str, bool] | None:
    """Why a call on `key` with `values` (a PUT's value, a CAS's expected and new ones; None
    for one not given) is refused, and whether a value (not the key) is what is too large;
    None when none breaks a limit. One check for every path that takes a KV call."""
    why = key_limit_error(len(key.encode()))
    if why is not None:
        return why, False
    for data in values:
        why = value_limit_error(len(data)) if data is not None else None
        if why is not None:
            return why, True
    return None


_SMALL_COMMAND = MAX_KEY_BYTES
"""A command no longer than this holds no key and no value above the limits."""


def command_limit_error(value: bytes | bytearray | memoryview) -> str | None:
    """Why the KV command `value` breaks the key or value limits (None: it does not, or it is
    not a well-formed command at all, which the state machine answers with its own error).

    A command of at most MAX_KEY_BYTES bytes cannot break them: one length check is all that
    most writes cost."""
    n = len(value)
    if n <= _SMALL_COMMAND or value[0] != FORMAT_VERSION or value[1] not in _LIMITED_OPS:
        return None
    pos = 2
    index = 0
    while pos + 4 <= n:
        (length,) = _U32.unpack_from(value, pos)
        pos += 4
        if length == _ABSENT:
            index += 1
            continue
        why = key_limit_error(length) if index == 0 else value_limit_error(length)
        if why is not None:
            return why
        pos += length
        index += 1
    return None


def decode_command(value: bytes) -> KVCommand:
    """Decode one record value; raises CommandError naming what is wrong."""
    if len(value) < 2:
        raise CommandError(f"KV command too short ({len(value)} bytes)")
    if value[0] != FORMAT_VERSION:
        raise CommandError(f"KV command format version {value[0]} unknown")
    op = value[1]
    pos = 2
    fields: list[bytes | None] = []
    while pos < len(value):
        if pos + 4 > len(value):
            raise CommandError(f"KV command truncated at byte {pos}")
        (length,) = struct.unpack_from(">I", value, pos)
        pos += 4
        if length == _ABSENT:
            fields.append(None)
            continue
        if pos + length > len(value):
            raise CommandError(f"KV command field at byte {pos - 4} overruns the record")
        fields.append(bytes(value[pos : pos + length]))
        pos += length
    want = {OP_PUT: 2, OP_DELETE: 1, OP_CAS: 3, OP_BARRIER: 1}.get(op)
    if want is None:
        raise CommandError(f"KV command op {op} unknown")
    if len(fields) != want:
        raise CommandError(f"KV command op {op} has {len(fields)} fields, expected {want}")
    if op == OP_BARRIER:
        return KVCommand(OP_BARRIER, "", fields[0])
    raw_key = fields[0]
    if raw_key is None:
        raise CommandError("KV command has no key")
    try:
        key = raw_key.decode()
    except UnicodeDecodeError:
        raise CommandError("KV command key is not UTF-8") from None
    if op == OP_PUT:
        if fields[1] is None:
            raise CommandError(f"PUT {key!r} has no value")
        return KVCommand(OP_PUT, key, fields[1])
    if op == OP_DELETE:
        return KVCommand(OP_DELETE, key)
    return KVCommand(OP_CAS, key, value=fields[2], expected=fields[1])


class PutCommands(Sequence[bytes]):
    """PUT commands of a fixed list of (key, value) pairs, each encoded when it is read."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[str, bytes]]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            return PutCommands(self._items[index])
        key, value = self._items[index]
        return encode_put(key, value)

    def __iter__(self) -> Iterator[bytes]:
        for key, value in self._items:
            yield encode_put(key, value)


_PUT_HEAD = bytes([FORMAT_VERSION, OP_PUT])
_PUT_FIXED = struct.Struct(">2sI")  # format version and op, key length
_U32 = struct.Struct(">I")
_PUT_MIN = _PUT_FIXED.size + _U32.size  # an empty key and an empty value
_ALREADY_APPLIED = KVResult(ok=False, error="already applied")
_LIMITED_OPS = frozenset({OP_PUT, OP_DELETE, OP_CAS})


class KVStore:
    """An in-memory map from text keys to byte values, driven by committed log records.

    Implements `kraft.statemachine.base.StateMachine`.
    """

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._applied = 0
        self._foreign = 0

    @property
    def foreign_records(self) -> int:
        """Kafka metadata records applied or loaded (module docstring): not KV state."""
        return self._foreign

    @property
    def applied_offset(self) -> int:
        """The offset after the last applied record."""
        return self._applied

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> bytes | None:
        """The value of `key` as of `applied_offset` (None when absent)."""
        return self._data.get(key)

    def items(self) -> list[tuple[str, bytes]]:
        """Every (key, value), sorted by key."""
        return sorted(self._data.items())

    def skip_to(self, offset: int) -> None:
        """Advance `applied_offset` over records that are not KV commands (control batches)."""
        self._applied = max(self._applied, offset)

    def apply(self, batch: CommittedBatch) -> list[object]:
        """Apply the batch's commands in order; one `KVResult` per record."""
        results: list[object] = []
        self._apply(batch, results.append)
        return results

    def apply_quietly(self, batch: CommittedBatch) -> None:
        """`apply` without building the results, for a batch nobody waits on (a follower's,
        or one replayed at start-up)."""
        self._apply(batch, None)

    def _apply(self, batch: CommittedBatch, answer: Callable[[object], None] | None) -> None:
        """Apply `batch`, handing each record's `KVResult` to `answer` (None: build none).

        A well-formed PUT (the bulk of any log) is decoded inline, its head and lengths with
        one struct call each, and its result built as the tuple it is (`KVResult(...)` goes
        through a Python-level `__new__`); every other command, and any PUT that is not
        exactly well-formed, goes through `decode_command`, which also names what is wrong.
        """
        data = self._data
        get = data.get
        put_head = _PUT_HEAD
        head = _PUT_FIXED.unpack_from
        u32 = _U32.unpack_from
        make = tuple.__new__
        offset = batch.base_offset
        skip = self._applied - offset
        for value in batch.values:
            if skip > 0:
                # already applied (e.g. covered by a loaded snapshot): answer, do not re-apply
                skip -= 1
                if answer is not None:
                    answer(_ALREADY_APPLIED)
                continue
            n = len(value) if type(value) is bytes else 0
            if n >= _PUT_MIN:
                op, klen = head(value)
                kend = klen + 6
                if (op == put_head and klen <= MAX_KEY_BYTES and klen <= n - _PUT_MIN
                        and u32(value, kend)[0] == n - kend - 4):
                    try:
                        key = value[6:kend].decode()
                    except UnicodeDecodeError:
                        pass
                    else:
                        if answer is not None:
                            answer(make(KVResult, (True, get(key), None)))
                        data[key] = value[kend + 4:]
                        continue
            result = self._apply_one(value)
            if answer is not None:
                answer(result)
        self._applied = max(self._applied, offset + len(batch.values))

    def _apply_one(self, value: bytes) -> KVResult:
        try:
            cmd = decode_command(value)
        except CommandError as exc:
            if metadata_record_type(value) is not None:
                self._foreign += 1
                return KVResult(ok=False, error="a Kafka metadata record, not a KV command")
            return KVResult(ok=False, error=str(exc))
        previous = self._data.get(cmd.key)
        if cmd.op == OP_PUT:
            assert cmd.value is not None
            self._data[cmd.key] = cmd.value
            return KVResult(ok=True, value=previous)
        if cmd.op == OP_DELETE:
            self._data.pop(cmd.key, None)
            return KVResult(ok=previous is not None, value=previous)
        if cmd.op == OP_CAS:
            if previous != cmd.expected:
                return KVResult(ok=False, value=previous)
            if cmd.value is None:
                self._data.pop(cmd.key, None)
            else:
                self._data[cmd.key] = cmd.value
            return KVResult(ok=True, value=previous)
        return KVResult(ok=True)

    def snapshot_values(self) -> Sequence[bytes]:
        """The state as PUT commands in key order: a stable copy of the (key, value) pairs
        (values are immutable bytes, so only references are copied), encoded when read. The
        caller's thread is not held for the size of the state: the snapshot writer encodes
        on its own thread."""
        return PutCommands(sorted(self._data.items()))

    def load_snapshot(self, end_offset: int, values: Iterable[bytes]) -> None:
        """Replace the state with the PUTs in `values`, counting (and skipping) Kafka metadata
        records (a snapshot of Kafka's QuorumController); raises CommandError on anything else.

        The state is replaced only once every value was read: an error while iterating
        (a bad command, or the snapshot reader finding corruption) leaves it untouched.
        A well-formed PUT is sliced inline (no `KVCommand` per record); anything else goes
        through `decode_command`, which names what is wrong.
        """
        data: dict[str, bytes] = {}
        foreign = 0
        for value in values:
            if type(value) is bytes and value[:2] == _PUT_HEAD:
                kend = 6 + int.from_bytes(value[2:6], "big")
                vstart = kend + 4
                if kend <= MAX_KEY_BYTES + 6 \
                        and int.from_bytes(value[kend:vstart], "big") == len(value) - vstart:
                    try:
                        data[value[6:kend].decode()] = value[vstart:]
                        continue
                    except UnicodeDecodeError:
                        pass
            try:
                cmd = decode_command(value)
            except CommandError:
                if metadata_record_type(value) is None:
                    raise
                foreign += 1
                continue
            if cmd.op != OP_PUT or cmd.value is None:
                raise CommandError(f"snapshot holds a non-PUT command (op {cmd.op})")
            data[cmd.key] = cmd.value
        self._data = data
        self._foreign += foreign
        self._applied = end_offset
