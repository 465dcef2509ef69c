"""The core's refusals: every one counted, the first BURST of a kind logged per interval, and
the next one after the interval first says how many were left out."""

from __future__ import annotations

import logging

import pytest

from kraft.raft.refusals import BURST, INTERVAL_MS, Refusals


def test_a_flood_is_counted_whole_and_logged_in_bursts(caplog: pytest.LogCaptureFixture) -> None:
    r = Refusals()
    caplog.set_level(logging.INFO, logger="kraft.raft")
    for i in range(500):
        r.note(1000 + i, "request_epoch", "VoteRequest", logging.WARNING, "refused %d", i)
    r.note(1500, "live_leader", "Vote", logging.INFO, "ignored")  # its own window
    assert r.counts == {("request_epoch", "VoteRequest"): 500, ("live_leader", "Vote"): 1}
    assert [m.getMessage() for m in caplog.records] == [
        *(f"refused {i}" for i in range(BURST)), "ignored"]
    caplog.clear()
    r.note(1000 + INTERVAL_MS, "request_epoch", "VoteRequest", logging.WARNING, "again")
    assert [m.getMessage() for m in caplog.records] == [
        f"raft refusals not logged kind=request_epoch count={500 - BURST} "
        f"interval_ms={INTERVAL_MS}", "again"]
