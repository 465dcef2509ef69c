"""The core's inbox: `EventQueue`, the one queue through which everything reaches the node's
core loop (`KraftNode._core_loop`), which takes the items one at a time.

Who puts what in it:

- the transport (`kraft.server.peers`): requests that came in, answers and failures of the
  requests the core sent, ApiVersions learnt;
- the log service (`kraft.server.flusher`): `("flushed", (generation, durable))` once an fsync
  is done, from the flusher thread through `loop.call_soon_threadsafe`, from the kernel's
  eventfd or from the inline flush; the core loop turns it into `Persisted`;
- the apply driver (`kraft.server.apply_driver`): snapshots created, installed or failed, the
  retention measured;
- the KV front end (`kraft.server.kv_front`): the `Append`s of client writes; a batch submitted
  with none of the leader's batches waiting for commit goes `ahead` of the queued events;
- the native lanes (`kraft.server.lane_host`) and the node itself: `("lane", None)`, a turn of
  the lane (the lane's report next), and `Shutdown`.

Every put wakes the core loop when it sleeps (`waiter`, the future it awaits while idle).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from kraft.raft import events as ev

QueueItem = ev.Event | tuple[str, Any]
"""A core event, or a `(kind, payload)` item the core loop turns into one: `("flushed",
(generation, durable))` or `("lane", None)`."""


class EventQueue:
    """What waits for the core loop (see the module docstring). Only the event loop's thread
    touches it; another thread hands its items over with `loop.call_soon_threadsafe(push, ...)`."""

    __slots__ = ("ahead", "events", "waiter")

    def __init__(self) -> None:
        self.events: collections.deque[QueueItem] = collections.deque()
        """The items in arrival order."""
        self.ahead: collections.deque[ev.Append] = collections.deque()
        """A batch of writes submitted with none of this leader's batches waiting for commit
        (at most one): the core loop handles it before the events queued with it."""
        self.waiter: asyncio.Future[None] | None = None
        """The future the core loop sleeps on while nothing is queued (None: it is awake);
        set and cleared by the core loop only, completed by any put."""

    def push(self, item: QueueItem) -> None:
        """Queue `item` behind the others and wake the core loop."""
        self.events.append(item)
        wake = self.waiter
        if wake is not None and not wake.done():
            wake.set_result(None)

    def push_first(self, item: QueueItem) -> None:
        """Queue `item` ahead of the queued events (a read waiting for the lane's progress)."""
        self.events.appendleft(item)
        wake = self.waiter
        if wake is not None and not wake.done():
            wake.set_result(None)

    def push_ahead(self, append: ev.Append) -> None:
        """Queue a lone batch of writes ahead of the events (see `ahead`)."""
        self.ahead.append(append)
        wake = self.waiter
        if wake is not None and not wake.done():
            wake.set_result(None)

    def wake(self) -> None:
        """Wake the core loop if it sleeps (its timer fired, or it has an inline flush due)."""
        wake = self.waiter
        if wake is not None and not wake.done():
            wake.set_result(None)
