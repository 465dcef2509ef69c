"""A linearizability checker for key-value histories (Wing & Gong / Lowe, porcupine style).

A history is a list of `Op`: each operation has a call time, a return time (None when the client
never learnt the outcome: timeout, connection reset) and, if it returned, an output. The checker
looks for a total order of the operations that (1) respects real time — an operation that
returned before another was called comes first — and (2) is legal for a sequential model.

The model is one register per key, so the history is split by key (linearizability is local,
Herlihy & Wing) and each key is checked separately with the WGL search: walk the list of call
and return events, tentatively linearize a called operation when the model accepts it, back
track when a return event is reached before its operation was linearized, and memoize visited
(set of linearized operations, model state) pairs so each configuration is explored once.

Operations with an unknown outcome may have taken effect at any moment after their call (or
never); they get an infinite return time and an unconstrained output, which models both.
Reads with an unknown outcome carry no information and are dropped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

PUT = "put"
GET = "get"
DELETE = "delete"
CAS = "cas"


@dataclass(frozen=True)
class Op:
    """One client operation on one key.

    `value` is the written value (put, cas new value; None for a cas that deletes);
    `expected` is the cas expected value (None = absent). `output` is what the client saw:
    get → the value or None (absent); cas → True/False; put/delete → ignored.
    `ret` is None when the outcome is unknown.
    """

    client: int
    kind: str
    key: str
    call: float
    ret: float | None
    value: bytes | None = None
    expected: bytes | None = None
    output: object = None


@dataclass
class CheckResult:
    """Outcome of a check: `ok`, and for a failure the key and the operations on it."""

    ok: bool
    key: str | None = None
    detail: str = ""
    ops_checked: int = 0
    states_explored: int = 0
    bad_ops: list[Op] = field(default_factory=list)


def _step(state: bytes | None, op: Op) -> tuple[bool, bytes | None]:
    """The sequential register model: is `op` legal in `state`, and the state after it."""
    if op.kind == PUT:
        return True, op.value
    if op.kind == GET:
        return op.output == state, state
    if op.kind == DELETE:
        return True, None
    if op.kind == CAS:
        matches = state == op.expected
        if op.ret is None:  # unknown outcome: whatever the model says
            return True, (op.value if matches else state)
        if op.output is True:
            return matches, (op.value if matches else state)
        return (not matches), state
    raise ValueError(f"unknown operation kind {op.kind!r}")


class _Entry:
    __slots__ = ("id", "is_call", "match", "next", "op", "prev", "time")

    def __init__(self, op_id: int, is_call: bool, time: float, op: Op) -> None:
        self.id = op_id
        self.is_call = is_call
        self.time = time
        self.op = op
        self.match: _Entry | None = None
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


def _check_key(ops: Sequence[Op], initial: bytes | None, budget: int) -> tuple[bool, int]:
    """WGL search over the operations of one key; returns (linearizable, states explored)."""
    events: list[_Entry] = []
    for i, op in enumerate(ops):
        call = _Entry(i, True, op.call, op)
        ret = _Entry(i, False, math.inf if op.ret is None else op.ret, op)
        call.match = ret
        events.append(call)
        events.append(ret)
    # at equal times calls sort first: that treats touching operations as concurrent (lenient)
    events.sort(key=lambda e: (e.time, 0 if e.is_call else 1))
    head = _Entry(-1, True, -math.inf, ops[0] if ops else Op(0, GET, "", 0, 0))
    prev = head
    for e in events:
        prev.next = e
        e.prev = prev
        prev = e

    def lift(entry: _Entry) -> None:
        assert entry.prev is not None and entry.match is not None
        entry.prev.next = entry.next
        if entry.next is not None:
            entry.next.prev = entry.prev
        m = entry.match
        assert m.prev is not None
        m.prev.next = m.next
        if m.next is not None:
            m.next.prev = m.prev

    def unlift(entry: _Entry) -> None:
        m = entry.match
        assert m is not None and m.prev is not None and entry.prev is not None
        m.prev.next = m
        if m.next is not None:
            m.next.prev = m
        entry.prev.next = entry
        if entry.next is not None:
            entry.next.prev = entry

    state = initial
    linearized = 0
    cache: set[tuple[int, bytes | None]] = set()
    stack: list[tuple[_Entry, bytes | None]] = []
    entry = head.next
    explored = 0
    while head.next is not None:
        if explored > budget:
            raise RuntimeError(f"linearizability search exceeded {budget} states")
        assert entry is not None
        if entry.is_call:
            ok, new_state = _step(state, entry.op)
            explored += 1
            if ok:
                bits = linearized | (1 << entry.id)
                if (bits, new_state) not in cache:
                    cache.add((bits, new_state))
                    stack.append((entry, state))
                    state = new_state
                    linearized = bits
                    lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:
            if not stack:
                return False, explored
            top, state = stack.pop()
            linearized &= ~(1 << top.id)
            unlift(top)
            entry = top.next
    return True, explored


def check_history(
    history: Sequence[Op], initial: dict[str, bytes] | None = None, budget: int = 5_000_000
) -> CheckResult:
    """Check a KV history; every key starts absent unless `initial` gives it a value."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        if op.kind == GET and op.ret is None:
            continue
        by_key[op.key].append(op)
    total_states = 0
    checked = 0
    for key, ops in sorted(by_key.items()):
        ok, explored = _check_key(ops, (initial or {}).get(key), budget)
        total_states += explored
        checked += len(ops)
        if not ok:
            return CheckResult(
                ok=False,
                key=key,
                detail=f"no linearization of the {len(ops)} operations on key {key!r}",
                ops_checked=checked,
                states_explored=total_states,
                bad_ops=sorted(ops, key=lambda o: o.call),
            )
    return CheckResult(ok=True, ops_checked=checked, states_explored=total_states)


class HistoryRecorder:
    """Collects operations as clients issue them (monotonic clock times, any float scale)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def record(self, op: Op) -> None:
        """Add one completed (or abandoned) operation."""
        self.ops.append(op)


def dump_history(ops: Sequence[Op], path: str) -> None:
    """Write operations as JSON lines (values as text) for offline analysis of a failure."""
    import json

    def enc(v: object) -> object:
        return v.decode(errors="replace") if isinstance(v, bytes) else v

    with open(path, "w") as f:
        for op in sorted(ops, key=lambda o: o.call):
            f.write(json.dumps({"client": op.client, "kind": op.kind, "key": op.key,
                                "call": op.call, "ret": op.ret, "value": enc(op.value),
                                "expected": enc(op.expected), "output": enc(op.output)}) + "\n")
