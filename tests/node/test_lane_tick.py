"""The lanes' bookkeeping tick (`kraft.lane.ticker.LaneTicker`): its base pace while the
lane makes progress, its back-off while the lane is quiet, and its stop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from kraft.lane.ticker import IDLE_S, LaneTicker


def run_ticker(base_s: float, answers: Iterator[bool]) -> list[float]:
    """The wait that came before each check, until `answers` runs out (the check then stops
    the ticker); then a pause in which no further check may come."""

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        seen: list[float] = []
        done: asyncio.Future[None] = loop.create_future()

        def check() -> bool:
            seen.append(ticker.wait_s)
            try:
                return next(answers)
            except StopIteration:
                ticker.stop()
                done.set_result(None)
                return True
        ticker = LaneTicker(loop, base_s, check)
        await asyncio.wait_for(done, 10)
        count = len(seen)
        await asyncio.sleep(3 * max(base_s, IDLE_S))
        assert len(seen) == count, "a check came after the ticker was stopped"
        return seen

    return asyncio.run(run())


def test_a_quiet_lane_is_checked_less_and_less_often_up_to_the_idle_wait() -> None:
    seen = run_ticker(0.001, iter([False] * 7 + [True] + [False] * 2))
    assert seen == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, IDLE_S, IDLE_S,
                    0.001, 0.002, 0.004]


def test_a_lane_with_progress_at_every_check_keeps_the_base_pace() -> None:
    assert run_ticker(0.002, iter([True] * 6)) == [0.002] * 7


def test_a_base_period_above_the_idle_wait_never_changes() -> None:
    assert run_ticker(0.08, iter([False, False, True])) == [0.08] * 4


def test_a_stopped_ticker_checks_no_more() -> None:
    async def run() -> int:
        loop = asyncio.get_running_loop()
        calls = []
        ticker = LaneTicker(loop, 0.001, lambda: calls.append(1) is None)
        await asyncio.sleep(0.02)
        ticker.stop()
        count = len(calls)
        await asyncio.sleep(0.05)
        assert len(calls) == count
        ticker.stop()  # twice is harmless
        return count

    assert asyncio.run(run()) >= 1
