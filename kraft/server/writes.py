"""The client writes a node has in hand: `WriteBook`, from the moment a writer submits a value
until it is answered, and `Completion`, what each writer waits on.

A write goes through the book's stages in order:

1. `pending`: submitted to the KV front end (`kraft.server.kv_front`), not handed to the core
   yet; the front end cuts them into batches (`Append`).
2. `appends` and `uncommitted`: a batch handed to the core, under its append id, until the core
   gives it offsets (`AppendAccepted`) or refuses it; `uncommitted` keeps the id until the
   batch is committed or refused (the front end lingers the next batch while one is there).
3. `waiting`: offset -> (the epoch it was appended in, the writer's completion), filled by the
   front end at `AppendAccepted` and by the leader's native lane for the writes it appended
   (`kraft.server.lane_host`); the apply driver (`kraft.server.apply_driver`) answers each
   once its record is applied, and fails it when the log is truncated under it.

The node creates one book and hands it to the KV front end, the apply driver, the log service
and its lanes' host, which is all that touches it (all on the event loop's thread).
"""

from __future__ import annotations

from typing import Protocol

from kraft.server.kv_api import OutcomeUnknownError


class Completion(Protocol):
    """What waits for one submitted record: an `asyncio.Future`, or any object with the same
    three methods (the binary client protocol answers from `set_result` directly, without a
    future and a loop callback per write)."""

    def done(self) -> bool: ...
    def set_result(self, result: object, /) -> None: ...
    def set_exception(self, exc: BaseException, /) -> None: ...


class WriteBook:
    """The writes in hand on one node (see the module docstring)."""

    __slots__ = ("appends", "pending", "uncommitted", "waiting")

    def __init__(self) -> None:
        self.pending: list[tuple[bytes, Completion]] = []
        """Writes not handed to the core yet, in order (the front end replaces the list when
        it cuts a batch off its head)."""
        self.appends: dict[int, list[Completion]] = {}
        """append id -> the writers of a batch handed to the core, until `AppendAccepted`."""
        self.uncommitted: set[int] = set()
        """The append ids of the batches handed to the core and not committed or refused."""
        self.waiting: dict[int, tuple[int, Completion]] = {}
        """offset -> (the epoch it was appended in, the writer's completion)."""

    def fail_submitted(self, why: str) -> None:
        """Every writer handed to the core (waiting for its offset or its result) learns the
        outcome is unknown (`why`); the pending writes stay."""
        failed = [fut for _, fut in self.waiting.values()]
        failed += [fut for futures in self.appends.values() for fut in futures]
        self.waiting.clear()
        self.appends.clear()
        self.uncommitted.clear()
        for fut in failed:
            if not fut.done():
                fut.set_exception(OutcomeUnknownError(why))

    def fail_waiting_from(self, offset: int, why: str) -> None:
        """The log changed at `offset`: the writers waiting at or above it learn the outcome
        is unknown."""
        waiting = self.waiting
        for off in [o for o in waiting if o >= offset]:
            _, fut = waiting.pop(off)
            if not fut.done():
                fut.set_exception(OutcomeUnknownError(f"write {why} at offset {off}"))
