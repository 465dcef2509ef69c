"""The planner's input types line up with kraft.admin's answers."""

from __future__ import annotations

from kraft_operator.observed import Endpoint, QuorumInfo, ReplicaInfo

from kraft.admin import models as admin


def test_from_admin_keeps_every_field_of_a_describe_quorum_answer() -> None:
    replica = admin.ReplicaInfo(
        replica_id=2, directory_id="AAAAAAAAAAAAAAAAAAAAAg", log_end_offset=120,
        last_fetch_timestamp_ms=1_000, last_caught_up_timestamp_ms=900,
        endpoints=[admin.Endpoint(listener="CONTROLLER", host="kq-2.kq", port=9093)],
        lag=3, caught_up=False)
    leader = replica.model_copy(update={"replica_id": 0, "lag": 0, "caught_up": True,
                                        "directory_id": "AAAAAAAAAAAAAAAAAAAAAA"})
    info = admin.QuorumInfo(leader_id=0, leader_epoch=7, high_watermark=118, kraft_version=1,
                            voters=[leader, replica], observers=[])
    converted = QuorumInfo.from_admin(info)
    assert converted == QuorumInfo(
        leader_id=0, leader_epoch=7, high_watermark=118, kraft_version=1,
        voters=(
            ReplicaInfo(0, "AAAAAAAAAAAAAAAAAAAAAA", 120, 1_000, 900,
                        (Endpoint("CONTROLLER", "kq-2.kq", 9093),), 0, True),
            ReplicaInfo(2, "AAAAAAAAAAAAAAAAAAAAAg", 120, 1_000, 900,
                        (Endpoint("CONTROLLER", "kq-2.kq", 9093),), 3, False),
        ),
        observers=(),
    )
    assert converted.voters[1].key == (2, "AAAAAAAAAAAAAAAAAAAAAg")
