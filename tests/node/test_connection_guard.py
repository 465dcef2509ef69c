"""`kraft.server.connection_limits` on its own: the rate-limited log and its summary line, the
budget's choice of which connection to close, and the per-address counts."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kraft.server.connection_limits import (
    BadInputLog,
    ConnectionGuard,
    ConnectionLimits,
    ListenerGuard,
    Tracked,
)
from kraft.server.metrics import Registry


def test_bad_input_log_writes_a_burst_then_one_line_for_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    counters = Registry().counter_family("c_total", "help", ("listener", "reason"))
    log = BadInputLog(counters, burst=3, interval_s=0.05)

    async def flood() -> None:
        for i in range(500):
            log.report("L", "frame_size", f"peer{i}", "too big")
        log.report("L", "other", "peer", "another reason keeps its own burst")
        await asyncio.sleep(0.2)  # the interval ends: the summary line

    caplog.set_level(logging.INFO, logger="kraft.server.connections")
    asyncio.run(flood())
    lines = [r.getMessage() for r in caplog.records]
    assert sum("reason=frame_size" in line and "event=connection_closed" in line
               for line in lines) == 3
    assert sum("reason=other" in line for line in lines) == 1
    summaries = [line for line in lines if "event=connections_closed_not_logged" in line]
    assert summaries == ["event=connections_closed_not_logged listener=L reason=frame_size "
                         "suppressed=497 interval_s=0.05"]
    assert counters.value("L", "frame_size") == 500


def _admit(g: ListenerGuard, host: str, closed: list[Tracked]) -> Tracked | None:
    holder: list[Tracked] = []
    t = g.admit(host, 1, lambda: closed.append(holder[0]), lambda: False)
    if t is not None:
        holder.append(t)
    return t


def test_over_the_budget_the_largest_holder_is_closed() -> None:
    guard = ConnectionGuard(ConnectionLimits(buffered_max_bytes=100))
    g = guard.listener("L")
    closed: list[Tracked] = []

    async def run() -> None:
        small, big, grower = (_admit(g, h, closed) for h in ("a", "b", "c"))
        assert small and big and grower
        guard.buffered(small, 10)
        guard.buffered(big, 60)
        guard.buffered(grower, 20)
        assert not closed and guard.buffered_total == 90
        guard.buffered(grower, 40)  # 110 > 100: the one holding the most goes, not the newest
        assert closed == [big] and guard.buffered_total == 50
        guard.buffered(grower, 95)  # 105: now the grower holds the most
        assert closed == [big, grower] and guard.buffered_total == 10
        assert guard.closed.value("L", "buffered_bytes") == 2

    asyncio.run(run())


def test_connection_counts_per_listener_and_per_address() -> None:
    limits = ConnectionLimits(max_connections=3, max_connections_per_ip=2,
                              per_ip_overrides={"10.0.0.9": 0})
    guard = ConnectionGuard(limits)
    g = guard.listener("L")
    closed: list[Tracked] = []

    async def run() -> None:
        a1, a2 = _admit(g, "10.0.0.1", closed), _admit(g, "10.0.0.1", closed)
        assert a1 and a2
        assert _admit(g, "10.0.0.1", closed) is None  # a third from one address
        assert _admit(g, "10.0.0.9", closed) is None  # its override allows none
        assert _admit(g, "10.0.0.2", closed) is not None
        assert _admit(g, "10.0.0.3", closed) is None  # the listener is full
        assert _admit(guard.listener("other"), "10.0.0.3", closed) is not None  # its own count
        g.release(a1)
        assert _admit(g, "10.0.0.1", closed) is not None  # a closed one makes room
        assert guard.closed.value("L", "max_connections_per_ip") == 2
        assert guard.closed.value("L", "max_connections") == 1
        g.stop()
        guard.listener("other").stop()

    asyncio.run(run())
