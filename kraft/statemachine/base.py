"""The interface between the runtime and an application state machine.

The runtime (`kraft.server.node`) owns the log and the consensus core. It calls a state machine
in exactly three ways, never concurrently with each other:

1. `apply(batch)` for the committed records of every data batch, in log order, each record
   exactly once per incarnation of the state (control batches are not passed; their offsets
   are still skipped over). A large batch may come in consecutive parts, each a
   `CommittedBatch` whose `base_offset` is the offset of its first record. It returns one
   result per record value; the runtime hands each result to the client that proposed that
   record, if that client is still waiting on this node.
2. `snapshot_values()` when the consensus core asks for a snapshot at the offset the state
   machine has applied up to (`applied_offset`). The values it yields are written as data
   records of the snapshot file (KIP-630 layout: header, data batches, footer) by the runtime.
   It must return a stable copy: the runtime may write it on another thread while `apply` goes
   on. It is called on the event loop thread, so it should be cheap (copy references, and let
   the sequence produce the encoded values when it is read, on the writer's thread).
3. `load_snapshot(end_offset, values)` on start-up (latest local snapshot) and after a snapshot
   was downloaded from the leader with FetchSnapshot; it replaces the whole state with the one
   the values describe, as of `end_offset`. After a download it runs on a worker thread while
   the consensus core waits for it (no `apply` meanwhile); the event loop may still read the
   state (status, stale reads), so build the new state aside and swap it in at the end.

A state machine may also have `apply_quietly(batch)`: the same as `apply` but returning
nothing, for batches no client on this node waits on (every batch a follower applies, and the
replay at start-up). The runtime calls it when present, so a state machine need not build
results nobody reads.

`apply`, `apply_quietly` and `skip_to` are called on the event loop thread.

`apply` must be deterministic: every replica applies the same records in the same order and must
reach the same state, so it may not read the clock, randomness or local configuration. A value
it cannot decode is an answer (an error result), not an exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kraft.frozen import fast_init


@fast_init
@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """One committed data batch: its first offset, leader epoch and record values in order."""

    base_offset: int
    epoch: int
    values: tuple[bytes, ...]

    @property
    def end_offset(self) -> int:
        """The offset just after this batch's last record."""
        return self.base_offset + len(self.values)


@runtime_checkable
class StateMachine(Protocol):
    """What the runtime needs from an application state machine (see the module docstring)."""

    @property
    def applied_offset(self) -> int:
        """The offset after the last record applied (or loaded from a snapshot); 0 when empty."""
        ...

    def apply(self, batch: CommittedBatch) -> list[object]:
        """Apply one committed batch; return one result per record value."""
        ...

    def skip_to(self, offset: int) -> None:
        """Record that every offset below `offset` has been seen (control batches)."""
        ...

    def snapshot_values(self) -> Sequence[bytes]:
        """A stable copy of the state, as record values, as of `applied_offset`."""
        ...

    def load_snapshot(self, end_offset: int, values: Iterable[bytes]) -> None:
        """Replace the state with the one `values` describe, as of `end_offset`."""
        ...


def chunk_values(values: Iterable[bytes], max_batch_bytes: int) -> Iterator[list[bytes]]:
    """Group record values into batches of at most `max_batch_bytes` of payload (one at least)."""
    batch: list[bytes] = []
    size = 0
    for value in values:
        if batch and size + len(value) > max_batch_bytes:
            yield batch
            batch, size = [], 0
        batch.append(value)
        size += len(value)
    if batch:
        yield batch
