"""The core loop's timer (`KraftNode._core_loop`): one timer handle kept across sleeps while it
fires no later than the core's next deadline, re-armed when an earlier deadline appears."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kraft.protocol.errors import ErrorCode
from kraft.server.node import KraftNode

from .test_append_batches import _leader
from .test_frame_timeouts import parked_fetch


async def _idle(node: KraftNode) -> None:
    """Until the core loop sleeps with nothing queued."""
    for _ in range(500):
        await asyncio.sleep(0.01)
        if node.queue.waiter is not None and not node.queue.events:
            return
    raise AssertionError("the core loop never went to sleep")


async def test_an_earlier_deadline_rearms_the_core_timer_and_a_later_one_keeps_it(
        tmp_path: Path) -> None:
    # the leader's own deadlines (check-quorum, BeginQuorumEpoch resends) 30 s or more away, so
    # that none of them fires while the test looks at the timer
    node = await _leader(tmp_path, **{"controller.quorum.fetch.timeout.ms": "60000"})
    try:
        core = node.core
        assert core is not None
        await _idle(node)
        armed, timer = node._core_timer_at, node._core_timer
        assert timer is not None and armed == core.next_deadline()
        # a fetch that may wait ten minutes: its deadline is later, the same timer is kept
        slow = await parked_fetch(node, 1, max_wait_ms=600_000)
        await _idle(node)
        assert node._core_timer is timer and node._core_timer_at == armed
        # a fetch that may wait 50 ms: the earliest deadline now, the timer is re-armed for it
        quick = await parked_fetch(node, 2, max_wait_ms=50)
        await _idle(node)
        deadline = core.next_deadline()
        assert deadline is not None and deadline < armed
        assert node._core_timer is not None and node._core_timer_at == deadline
        # and it fires: the parked fetch is answered when its MaxWaitMs is up
        resp = await asyncio.wait_for(quick, 10)
        assert resp.error_code == ErrorCode.NONE and not slow.done()
        slow.cancel()
    finally:
        await node.stop()
