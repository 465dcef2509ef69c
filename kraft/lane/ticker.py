"""The bookkeeping tick of an armed native lane (`kraft.lane.tick.ms`), backing off while the
lane is quiet.

A running lane tells its node nothing on its own, except through its `news_fd` where it has
one: the node's loop checks the lane's progress at each tick and hands a report to the core
when there is some. Every check wakes the node's interpreter. On a 2-core host those wakes,
500 a second per node at the default 2 ms, land among the few threads that carry a write's
path and take their CPU (docs/journal/perf-41-commit-to-read.md: the follower-visible latency's tail
fell when the tick was 20 ms). So the period doubles after each check that finds nothing, up
to `IDLE_S`, and goes back to the base period at the first check that finds progress: while
writes stream in the core hears of them every tick, and a quiet lane wakes its node about
twenty times a second. What a quiet spell delays is bookkeeping only: a local read takes the
lane's progress at once (`LaneArbiter.catch_up`), a follower's lane wakes its node for a
write while the node's loop sleeps (`FollowerShell.waiting`), and the check-quorum window is
seconds long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

IDLE_S = 0.05
"""The longest wait between two checks of a quiet lane (or the base period, if longer)."""


class LaneTicker:
    """Calls `check` every `base_s` while it returns True (the lane had progress, and `check`
    handed it on), and backs off to `max(base_s, IDLE_S)` by doubling while it returns False."""

    __slots__ = ("_base", "_check", "_idle", "_loop", "_timer", "_wait")

    def __init__(self, loop: asyncio.AbstractEventLoop, base_s: float,
                 check: Callable[[], bool]) -> None:
        self._loop = loop
        self._base = base_s
        self._idle = max(base_s, IDLE_S)
        self._wait = base_s
        self._check = check
        self._timer: Any = self._loop.call_later(base_s, self._fire)

    @property
    def wait_s(self) -> float:
        """The wait before the next check."""
        return self._wait

    def _fire(self) -> None:
        self._timer = None
        progress = self._check()
        if self._wait < 0:
            return  # stopped meanwhile
        self._wait = self._base if progress else min(self._wait * 2, self._idle)
        self._timer = self._loop.call_later(self._wait, self._fire)

    def stop(self) -> None:
        """No more checks (the lane stopped)."""
        self._wait = -1.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def stop_loop(loop: asyncio.AbstractEventLoop | None, shell: Any, fds: tuple[int, ...],
              ticker: LaneTicker | None, stops: dict[str, int], cause: str) -> dict[str, Any]:
    """Stop an armed lane's C loop the way both runners do: its descriptors off the event
    loop, its ticker stopped, the loop's last state taken (`shell.stop()`), and the stop
    counted in `stops` under `cause` (or under the loop's own reason when it ended by
    itself). Returns the loop's last state."""
    assert loop is not None
    for fd in fds:
        loop.remove_reader(fd)
    if ticker is not None:
        ticker.stop()
    r: dict[str, Any] = shell.stop()
    reason = str(r["reason"])
    key = cause if reason == "stopped" else reason
    stops[key] = stops.get(key, 0) + 1
    return r
