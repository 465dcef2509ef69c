"""quorum-state JSON: Kafka's exact v1 shape, reading v0, atomic durable replace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kraft.protocol.uuid import Uuid
from kraft.storage.quorum_state import QuorumStateData, QuorumStateError, QuorumStateStore


def test_v1_json_matches_kafka_shape() -> None:
    state = QuorumStateData(leader_epoch=7, leader_id=1, voted_id=-1)
    assert state.to_json() == (
        '{"leaderId":1,"leaderEpoch":7,"votedId":-1,'
        '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}'
    )


def test_round_trip_with_voted_directory(tmp_path: Path) -> None:
    store = QuorumStateStore(tmp_path)
    assert store.read() is None
    state = QuorumStateData(leader_epoch=3, voted_id=2, voted_directory_id=Uuid.random())
    store.write(state)
    assert store.read() == state
    assert not (tmp_path / "quorum-state.tmp").exists()
    store.write(QuorumStateData(leader_epoch=4, leader_id=2))
    assert store.read() == QuorumStateData(leader_epoch=4, leader_id=2)


def test_reads_kafka_v0_file(tmp_path: Path) -> None:
    (tmp_path / "quorum-state").write_text(
        '{"clusterId":"","leaderId":1,"leaderEpoch":7,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    state = QuorumStateStore(tmp_path).read()
    assert state == QuorumStateData(
        leader_epoch=7, leader_id=1, voted_id=-1, data_version=0, current_voters=(1, 2, 3)
    )
    assert json.loads(state.to_json())["currentVoters"] == [
        {"voterId": 1}, {"voterId": 2}, {"voterId": 3}
    ]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"data_version":2}', "unsupported data_version"),
        ('{"leaderId":"1","data_version":1}', "'leaderId' must be an integer"),
        ('{"votedDirectoryId":"nope","data_version":1}', "votedDirectoryId"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "quorum-state").write_text(text)
    with pytest.raises(QuorumStateError, match=match):
        QuorumStateStore(tmp_path).read()
