"""`format_storage`: the files Kafka 4.1 writes, read back with kraft.records and kafka-python."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kraft.protocol.uuid import Uuid
from kraft.records.snapshot_format import read_snapshot
from kraft.storage.bootstrap import (
    FeatureLevelRecord,
    read_bootstrap_checkpoint,
)
from kraft.storage.errors import AlreadyFormattedError, StorageConfigError
from kraft.storage.format import format_storage, parse_initial_controllers
from kraft.storage.meta_properties import read_meta_properties

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"
CHECKPOINT = "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"


def props(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {
        "process.roles": "controller",
        "node.id": "1",
        "controller.listener.names": "CONTROLLER",
        "listeners": "CONTROLLER://:9093",
        "advertised.listeners": "CONTROLLER://node1.example:9093",
        "log.dirs": f"{tmp_path}/data",
        "metadata.log.dir": f"{tmp_path}/meta",
    }
    base.update(extra)
    return base


def test_standalone(tmp_path: Path) -> None:
    out = io.StringIO()
    result = format_storage(props(tmp_path), CLUSTER, standalone=True, out=out, timestamp_ms=777)
    assert out.getvalue().splitlines() == [
        f"Formatting dynamic metadata voter directory {tmp_path}/meta with metadata.version 4.1-IV1.",
        f"Formatting data directory {tmp_path}/data with metadata.version 4.1-IV1.",
    ]
    meta = read_meta_properties(tmp_path / "meta")
    assert meta is not None and meta.cluster_id == CLUSTER and meta.node_id == 1
    data_meta = read_meta_properties(tmp_path / "data")
    assert data_meta is not None and data_meta.directory_id != meta.directory_id
    snap = read_snapshot((tmp_path / "meta" / CHECKPOINT).read_bytes(), expected_epoch=0)
    assert snap.header.last_contained_log_timestamp == 777
    assert snap.kraft_version is not None and snap.kraft_version.kraft_version == 1
    assert snap.voters is not None
    (voter,) = snap.voters.voters
    assert voter.voter_id == 1 and voter.voter_directory_id == meta.directory_id
    assert [(e.name, e.host, e.port) for e in voter.endpoints] == [
        ("CONTROLLER", "node1.example", 9093)
    ]
    assert (voter.kraft_version_feature.min_supported_version,
            voter.kraft_version_feature.max_supported_version) == (0, 1)
    assert snap.data_batches == ()
    assert not (tmp_path / "data" / "__cluster_metadata-0").exists()
    for d in ("meta", "data"):
        assert read_bootstrap_checkpoint(tmp_path / d / "bootstrap.checkpoint") == [
            FeatureLevelRecord("metadata.version", 27)
        ]
    assert result.kraft_version == 1


def test_initial_controllers_voter_and_non_voter(tmp_path: Path) -> None:
    d1, d2, d3 = Uuid.random(), Uuid.random(), Uuid.random()
    spec = f"1@h1:9093:{d1},2@[::1]:9094:{d2},3@h3:9095:{d3}"
    out = io.StringIO()
    format_storage(props(tmp_path), CLUSTER, initial_controllers=spec, out=out)
    assert "dynamic metadata voter directory" in out.getvalue()
    meta = read_meta_properties(tmp_path / "meta")
    assert meta is not None and meta.directory_id == d1
    snap = read_snapshot((tmp_path / "meta" / CHECKPOINT).read_bytes())
    assert snap.voters is not None
    assert [(v.voter_id, v.voter_directory_id, v.endpoints[0].host, v.endpoints[0].port)
            for v in snap.voters.voters] == [(1, d1, "h1", 9093), (2, d2, "::1", 9094), (3, d3, "h3", 9095)]
    # Node 4 is not in the list: a dynamic metadata directory with a fresh directory id.
    other = tmp_path / "n4"
    out = io.StringIO()
    format_storage(
        props(other, **{"node.id": "4"}), CLUSTER, initial_controllers=spec, out=out
    )
    assert f"Formatting dynamic metadata directory {other}/meta" in out.getvalue()
    m4 = read_meta_properties(other / "meta")
    assert m4 is not None and m4.directory_id not in (d1, d2, d3)
    assert (other / "meta" / CHECKPOINT).exists()


def test_no_initial_controllers_writes_no_checkpoint(tmp_path: Path) -> None:
    out = io.StringIO()
    format_storage(props(tmp_path), CLUSTER, no_initial_controllers=True, out=out)
    assert f"Formatting metadata directory {tmp_path}/meta" in out.getvalue()
    assert not (tmp_path / "meta" / CHECKPOINT).exists()
    assert (tmp_path / "meta" / "bootstrap.checkpoint").exists()
    assert read_meta_properties(tmp_path / "meta") is not None


def test_static_quorum_and_broker(tmp_path: Path) -> None:
    p = props(tmp_path, **{"controller.quorum.voters": "1@h1:9093"})
    format_storage(p, CLUSTER, out=io.StringIO())
    assert not (tmp_path / "meta" / CHECKPOINT).exists()
    broker = props(tmp_path / "b", **{"process.roles": "broker"})
    format_storage(broker, CLUSTER, out=io.StringIO(), release_version="4.0")
    assert read_bootstrap_checkpoint(tmp_path / "b" / "meta" / "bootstrap.checkpoint") == [
        FeatureLevelRecord("metadata.version", 25)
    ]


def test_already_formatted_is_refused_and_untouched(tmp_path: Path) -> None:
    format_storage(props(tmp_path), CLUSTER, standalone=True, out=io.StringIO())
    files = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(AlreadyFormattedError, match="already formatted"):
        format_storage(props(tmp_path), CLUSTER, standalone=True, out=io.StringIO())
    out = io.StringIO()
    format_storage(props(tmp_path), CLUSTER, standalone=True, ignore_formatted=True, out=out)
    assert out.getvalue() == "All of the log directories are already formatted.\n"
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == files


def test_ignore_formatted_formats_only_new_dirs(tmp_path: Path) -> None:
    format_storage(props(tmp_path), CLUSTER, standalone=True, out=io.StringIO())
    before = (tmp_path / "meta" / "meta.properties").read_bytes()
    p = props(tmp_path, **{"log.dirs": f"{tmp_path}/data,{tmp_path}/data2"})
    out = io.StringIO()
    result = format_storage(p, CLUSTER, standalone=True, ignore_formatted=True, out=out)
    assert [d.path for d in result.formatted] == [tmp_path / "data2"]
    assert (tmp_path / "meta" / "meta.properties").read_bytes() == before


@pytest.mark.parametrize(
    ("extra", "kwargs", "match"),
    [
        ({"node.id": "x"}, {"standalone": True}, "node.id='x': not an integer"),
        ({"node.id": ""}, {"standalone": True}, "node.id='': not an integer"),
        ({"process.roles": "broker"}, {"standalone": True}, "only be used on a controller"),
        ({"process.roles": "controller,wizard"}, {}, "unknown role 'wizard'"),
        ({}, {}, "controller.quorum.voters is not set"),
        ({"controller.quorum.voters": "1@h:1"}, {"standalone": True}, "static quorum"),
        ({"listeners": "CONTROLLER:9093"}, {"standalone": True}, "bad listener"),
        ({"advertised.listeners": "", "listeners": "OTHER://:1"}, {"standalone": True},
         "no listener named CONTROLLER"),
        ({}, {"standalone": True, "release_version": "9.9"}, "unknown release version"),
        # Kafka: kraft.version 1 depends on metadata.version 21 (3.9-IV0)
        ({}, {"standalone": True, "release_version": "3.8-IV0"},
         "kraft.version could not be set to 1 because it depends on metadata.version level 21"),
        ({}, {"initial_controllers": "1@h:9093:AAAAAAAAAAAAAAAAAAAAAQ", "release_version": "3.8"},
         r"metadata.version level 21 \(3.9-IV0\); --release-version 3.8-IV0 is level 20"),
        ({}, {"no_initial_controllers": True, "release_version": "3.8-IV0"}, "kraft.version"),
        ({}, {"standalone": True, "features": ["kraft.version=0"]}, "kraft.version"),
        ({}, {"standalone": True, "features": ["group.version"]}, "expected name=level"),
        ({}, {"initial_controllers": "1@h:9093"}, "expected id@host:port:directoryId"),
        ({}, {"initial_controllers": "x@h:9093:AAAAAAAAAAAAAAAAAAAAAQ"}, "node id 'x'"),
        ({}, {"initial_controllers": "1@h:99999:AAAAAAAAAAAAAAAAAAAAAQ"}, "port '99999'"),
        ({}, {"initial_controllers": "1@h:9093:not-a-uuid"}, "bad directory id"),
        ({}, {"initial_controllers": "1@h:9093:AAAAAAAAAAAAAAAAAAAAAA"}, "must not be zero"),
        ({}, {"initial_controllers": "1@h:1:AAAAAAAAAAAAAAAAAAAAAQ,1@g:2:AAAAAAAAAAAAAAAAAAAAAg"},
         "more than once"),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(
    tmp_path: Path, extra: dict[str, str], kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(StorageConfigError, match=match):
        format_storage(props(tmp_path, **extra), CLUSTER, out=io.StringIO(), **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "meta").exists() and not (tmp_path / "data").exists()


def test_bad_cluster_id(tmp_path: Path) -> None:
    with pytest.raises(StorageConfigError, match="--cluster-id: invalid uuid 'nope'"):
        format_storage(props(tmp_path), "nope", standalone=True, out=io.StringIO())


def test_parse_initial_controllers_round_trip() -> None:
    d = Uuid.random()
    (v,) = parse_initial_controllers(f"7@[fe80::1]:9093:{d}")
    assert (v.node_id, v.host, v.port, v.directory_id) == (7, "fe80::1", 9093, d)
    assert str(v) == f"7@[fe80::1]:9093:{d}"


def _kafka_python_batches(data: bytes) -> list[tuple[int, int, bool, list[tuple[bytes | None, bytes | None]]]]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        recs = [(r.key, r.value) for r in batch]
        out.append((batch.base_offset, batch.leader_epoch, batch.is_control_batch, recs))
    assert records.valid_bytes() == len(data)
    return out


def test_checkpoint_bytes_parse_with_kafka_python(tmp_path: Path) -> None:
    format_storage(props(tmp_path), CLUSTER, standalone=True, out=io.StringIO())
    batches = _kafka_python_batches((tmp_path / "meta" / CHECKPOINT).read_bytes())
    assert [(b[0], b[1], b[2], len(b[3])) for b in batches] == [(0, 0, True, 3), (3, 0, True, 1)]
    keys = [k for b in batches for k, _ in b[3]]
    # Control keys: int16 version 0 + int16 type (3 header, 5 kraft.version, 6 voters, 4 footer).
    assert keys == [b"\x00\x00\x00\x03", b"\x00\x00\x00\x05", b"\x00\x00\x00\x06", b"\x00\x00\x00\x04"]
    boot = _kafka_python_batches((tmp_path / "meta" / "bootstrap.checkpoint").read_bytes())
    assert [(b[0], b[2]) for b in boot] == [(0, True), (1, False), (2, True)]
    (_, value), = boot[1][3]
    # Frame v1, apiKey 12, version 0, compact "metadata.version", int16 27, no tags.
    assert value == b"\x01\x0c\x00\x11metadata.version\x00\x1b\x00"


def test_kraft_version_1_from_release_3_9_and_static_quorum_at_3_8(tmp_path: Path) -> None:
    result = format_storage(props(tmp_path / "a"), CLUSTER, standalone=True,
                            release_version="3.9-IV0", out=io.StringIO())
    assert (result.release_version, result.kraft_version) == ("3.9-IV0", 1)
    static = props(tmp_path / "b", **{"controller.quorum.voters": "1@localhost:9093"})
    result = format_storage(static, CLUSTER, release_version="3.8-IV0", out=io.StringIO())
    assert (result.release_version, result.kraft_version) == ("3.8-IV0", 0)
