"""What the core refuses or ignores from its peers, counted and logged at a bounded rate.

A forged or broken request costs the sender one packet; a line in the log for each would let
anyone fill a disk and drown the lines that matter. `Refusals` counts every one by kind and
reason (the node exposes the counts as `kraft_raft_refused_total{kind,reason}`) and logs the
first `BURST` of each kind in every `INTERVAL_MS`; the next one after the interval first says
how many were left out. Pure: the time is the core's `now`, no timer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

logger = logging.getLogger("kraft.raft")

BURST = 10
"""Lines of one kind logged per interval."""
INTERVAL_MS = 60_000
"""The interval, in the core's milliseconds."""


@dataclass(slots=True)
class _Window:
    start_ms: int
    logged: int = 0
    left_out: int = 0


@dataclass(slots=True)
class Refusals:
    """The counts and the log windows of one core's refusals."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    """(kind, reason) -> how many, since the core started."""
    _windows: dict[str, _Window] = field(default_factory=dict)

    def note(self, now_ms: int, kind: str, reason: str, level: int, message: str,
             *args: object) -> None:
        """One refusal of `kind` (a short code, e.g. `request_epoch`) for `reason` (a short
        code: the metric's label); `message % args` is its line when it is logged."""
        key = (kind, reason)
        self.counts[key] = self.counts.get(key, 0) + 1
        w = self._windows.get(kind)
        if w is None or now_ms - w.start_ms >= INTERVAL_MS:
            if w is not None and w.left_out:
                logger.log(level, "raft refusals not logged kind=%s count=%d interval_ms=%d",
                           kind, w.left_out, INTERVAL_MS)
            w = self._windows[kind] = _Window(now_ms)
        if w.logged < BURST:
            w.logged += 1
            logger.log(level, message, *args)
        else:
            w.left_out += 1
