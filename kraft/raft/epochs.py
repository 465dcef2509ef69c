"""The range of a usable epoch, and the epoch fields of every request and answer checked
against it.

Epochs are int32 on the wire (Kafka's `LeaderEpoch`, `ReplicaEpoch`, ...). A replica that
entered epoch 2**31 - 1 could never hold another election: the next epoch cannot be encoded,
and its quorum-state would keep it there across restarts. So `EPOCH_LIMIT` (2**31 - 1) is
the first epoch no replica enters: the core refuses any request that names an epoch at or
above it (INVALID_REQUEST, nothing of its state changed), treats an answer that names one as
a failed request, never starts an election into it, and the node refuses to start from a
quorum-state that holds one (`kraft recover reset-epoch` rewrites it).

Negative epochs are refused too, but for the -1 "unknown" of the fields whose schema
documents it (Fetch's CurrentLeaderEpoch and LastFetchedEpoch, FetchSnapshot's and
UpdateRaftVoter's CurrentLeaderEpoch, and the LeaderEpoch of an answer that knows no leader).

Pure functions over the core's messages: `kraft.raft.core` calls them first thing for every
request and answer, so every path into the core (the general wire path, the direct Fetch
codec, the frames the native lanes hand back, the simulator) goes through the same check.
"""

from __future__ import annotations

from kraft.protocol.primitives import EPOCH_LIMIT as EPOCH_LIMIT
from kraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Request,
    Response,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
)

MAX_EPOCH = EPOCH_LIMIT - 1
"""The highest usable epoch."""

UNKNOWN_EPOCH = -1
"""The wire's "epoch unknown", where a field's schema allows it."""


def usable(epoch: int) -> bool:
    """Whether a replica may be in `epoch` (0 <= epoch <= MAX_EPOCH)."""
    return 0 <= epoch <= MAX_EPOCH


def _field(name: str, value: int, unknown_ok: bool) -> str | None:
    """The complaint about one epoch field, None when it is in range."""
    if value > MAX_EPOCH:
        return f"{name} {value} is at or above the epoch limit {EPOCH_LIMIT}"
    if value < 0 and not (unknown_ok and value == UNKNOWN_EPOCH):
        allowed = f"{UNKNOWN_EPOCH} (unknown) or " if unknown_ok else ""
        return f"{name} {value} is negative (allowed: {allowed}0 to {MAX_EPOCH})"
    return None


def _first(*checks: str | None) -> str | None:
    return next((c for c in checks if c is not None), None)


def request_epoch_error(req: Request) -> str | None:
    """Why `req` names an epoch no replica may be in (a message naming the field), None when
    every epoch field it carries is usable. Requests without epoch fields always pass."""
    t = type(req)
    if t is FetchRequest:
        assert isinstance(req, FetchRequest)
        return _first(_field("CurrentLeaderEpoch", req.current_leader_epoch, True),
                      _field("LastFetchedEpoch", req.last_fetched_epoch, True))
    if t is VoteRequest:
        assert isinstance(req, VoteRequest)
        return _first(_field("ReplicaEpoch", req.replica_epoch, False),
                      _field("LastOffsetEpoch", req.last_offset_epoch, False))
    if t is BeginQuorumEpochRequest or t is EndQuorumEpochRequest:
        assert isinstance(req, BeginQuorumEpochRequest | EndQuorumEpochRequest)
        return _field("LeaderEpoch", req.leader_epoch, False)
    if t is FetchSnapshotRequest:
        assert isinstance(req, FetchSnapshotRequest)
        return _first(_field("CurrentLeaderEpoch", req.current_leader_epoch, True),
                      _field("SnapshotId.Epoch", req.snapshot_id.epoch, False))
    if t is UpdateRaftVoterRequest:
        assert isinstance(req, UpdateRaftVoterRequest)
        return _field("CurrentLeaderEpoch", req.current_leader_epoch, True)
    return None


def response_epoch_error(resp: Response) -> str | None:
    """Why the answer `resp` names an epoch no replica may be in (naming the field), None
    when it does not. A fetched batch must also not be of an epoch above the answer's
    leader epoch (no leader holds such a batch)."""
    t = type(resp)
    if t is FetchResponse:
        assert isinstance(resp, FetchResponse)
        found = _field("CurrentLeader.LeaderEpoch", resp.leader_epoch, True)
        if found is None and resp.diverging_epoch is not None:
            found = _field("DivergingEpoch.Epoch", resp.diverging_epoch.epoch, False)
        if found is None and resp.snapshot_id is not None:
            found = _field("SnapshotId.Epoch", resp.snapshot_id.epoch, False)
        if found is None:
            for b in resp.batches:
                if b.epoch < 0 or b.epoch > resp.leader_epoch:
                    return (f"the batch at offset {b.base_offset} has epoch {b.epoch}, outside "
                            f"0 to the leader epoch {resp.leader_epoch}")
        return found
    if t is VoteResponse or t is BeginQuorumEpochResponse or t is EndQuorumEpochResponse \
            or t is UpdateRaftVoterResponse:
        assert isinstance(resp, VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse
                          | UpdateRaftVoterResponse)
        return _field("LeaderEpoch", resp.leader_epoch, True)
    if t is FetchSnapshotResponse:
        assert isinstance(resp, FetchSnapshotResponse)
        snap = resp.snapshot_id
        return _first(_field("CurrentLeader.LeaderEpoch", resp.leader_epoch, True),
                      None if snap.epoch == UNKNOWN_EPOCH and snap.offset == -1
                      else _field("SnapshotId.Epoch", snap.epoch, False))
    return None
