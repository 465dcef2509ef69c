"""kraft.admin's models and errors, without a network."""

from __future__ import annotations

import pydantic
import pytest

from kraft.admin import (
    AdminConnectionError,
    AdminError,
    Endpoint,
    NodeHealth,
    QuorumInfo,
    ReplicaInfo,
)
from kraft.protocol.errors import ErrorCode


def _replica(rid: int, directory_id: str = "AAAAAAAAAAAAAAAAAAAAAA") -> ReplicaInfo:
    return ReplicaInfo(replica_id=rid, directory_id=directory_id, log_end_offset=10,
                       last_fetch_timestamp_ms=None, last_caught_up_timestamp_ms=5,
                       endpoints=[Endpoint(listener="CONTROLLER", host="h", port=9093)],
                       lag=0, caught_up=True)


def test_error_carries_the_kafka_name_and_whether_to_retry() -> None:
    err = AdminError(ErrorCode.REQUEST_TIMED_OUT, "AddRaftVoter 4 on node 1: pending change")
    assert (err.code, err.name, err.retriable, err.already_done) == (7, "REQUEST_TIMED_OUT",
                                                                     True, False)
    assert str(err) == "REQUEST_TIMED_OUT: AddRaftVoter 4 on node 1: pending change"
    done = AdminError(ErrorCode.DUPLICATE_VOTER, "x", retriable=False, already_done=True)
    assert (done.name, done.retriable, done.already_done) == ("DUPLICATE_VOTER", False, True)
    assert AdminError(ErrorCode.INVALID_REQUEST, "bad").retriable is False
    assert AdminError(999, "new").name == "ERROR_999"


def test_connection_error_is_retriable_and_tells_a_timeout() -> None:
    refused = AdminConnectionError("nobody home", addresses=("h:1",))
    assert isinstance(refused, AdminError)
    assert (refused.retriable, refused.timed_out, refused.name) == (True, False,
                                                                    "NETWORK_EXCEPTION")
    late = AdminConnectionError("slow", timed_out=True)
    assert (late.retriable, late.timed_out, late.name) == (True, True, "REQUEST_TIMED_OUT")


def test_models_are_frozen_and_check_directory_ids() -> None:
    r = _replica(1)
    with pytest.raises(pydantic.ValidationError):
        r.lag = 3  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="directory_id"):
        _replica(1, "not-a-uuid")
    with pytest.raises(pydantic.ValidationError, match="port"):
        Endpoint(listener="CONTROLLER", host="h", port=0)
    assert str(Endpoint(listener="C", host="::1", port=1)) == "C://[::1]:1"
    h = NodeHealth(live=True, ready=False, reason="starting")
    assert h.leader_id is None


def test_quorum_info_finds_replica_keys() -> None:
    q = QuorumInfo(leader_id=1, leader_epoch=2, high_watermark=10, kraft_version=1,
                   voters=[_replica(1, "F5bNbPzXQWa7XaHxJ6Hj4w")], observers=[_replica(4)])
    assert q.has_voter(1, "F5bNbPzXQWa7XaHxJ6Hj4w")
    assert not q.has_voter(1, "AAAAAAAAAAAAAAAAAAAAAA")
    assert q.voter(1) is not None and q.voter(4) is None
    assert q.observer(4) is not None
    assert QuorumInfo.model_validate_json(q.model_dump_json()) == q
