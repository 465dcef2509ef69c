"""A follower given batches no leader of its epoch sends (a forged or broken leader): one
that does not follow the one before, an epoch above the leader's, or an epoch below the
log's last. The core refuses them without appending anything, without stopping (it raised
RaftFatalError on an epoch above the leader's, and the log model's ValueError stopped the
node on the others), and fetches again after its backoff."""

from __future__ import annotations

import pytest

from kraft.protocol.errors import ErrorCode
from kraft.raft.config import QuorumStateData
from kraft.raft.effects import AppendFetched
from kraft.raft.messages import FetchedBatch, FetchRequest, FetchResponse
from kraft.sim.harness import CoreHarness, log_state

UNFIT = {
    "a gap between batches": (FetchedBatch(3, 3, 2), FetchedBatch(5, 5, 2)),
    "an epoch above the leader's": (FetchedBatch(3, 3, 3),),
    "an epoch below the log's last": (FetchedBatch(3, 3, 0),),
    "an epoch going back": (FetchedBatch(3, 3, 2), FetchedBatch(4, 4, 1)),
    "a last offset below the base": (FetchedBatch(3, 2, 2),),
}


@pytest.mark.parametrize("kind", sorted(UNFIT))
def test_unfit_batches_are_refused_and_fetched_again(kind: str) -> None:
    h = CoreHarness(log_state=log_state(3, ((1, 0),), QuorumStateData(1)))
    h.begin_quorum(2, 2)
    h.advance(1)
    fetch = h.sent(FetchRequest)[-1]
    effects = h.respond(fetch, FetchResponse(ErrorCode.NONE, 2, 2, 3, 0, batches=UNFIT[kind]))
    assert not h.of_type(AppendFetched, effects), kind
    assert h.core.log.end_offset == 3
    h.advance(h.core.config.retry_backoff_ms + 1)
    again = h.sent(FetchRequest)[-1]
    assert again is not fetch and again.request.fetch_offset == 3  # type: ignore[attr-defined]
    good = (FetchedBatch(3, 3, 2),)
    effects = h.respond(again, FetchResponse(ErrorCode.NONE, 2, 2, 3, 0, batches=good))
    assert h.of_type(AppendFetched, effects) and h.core.log.end_offset == 4
