"""spark.read.format("kraft") over replica directories written by kraft.storage."""

from __future__ import annotations

from typing import Any

import pytest
from kraft_pipeline.datasource import COLUMNS, schema
from kraft_pipeline.layout import discover_replicas
from pyspark.sql import functions as F

from kraft.records.snapshot_format import read_snapshot
from kraft.storage.layout import partition_dir

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


@pytest.fixture(scope="module")
def rows(spark: Any, scenario: Any) -> Any:
    """Every row of the scenario, read once (each new query plans in fresh Python workers)."""
    paths = ",".join(str(p) for p in scenario.replicas.values())
    df = spark.read.format("kraft").option("paths", paths).load().persist()
    df.count()
    yield df
    df.unpersist()


def test_one_partition_per_segment_and_snapshot_file(rows: Any, scenario: Any) -> None:
    df = rows
    files = [f for r in discover_replicas([str(scenario.root)]) for f in r.files]
    on_disk = sorted(
        str(p) for r in scenario.replicas.values()
        for p in partition_dir(r).iterdir() if p.suffix in (".log", ".checkpoint")
    )
    assert sorted(f.path for f in files) == on_disk
    assert df.rdd.getNumPartitions() == len(on_disk)
    assert df.schema == schema()
    assert df.columns == COLUMNS


def test_rows_match_what_was_written(rows: Any, scenario: Any) -> None:
    df = rows.filter(F.col("replica") == "node-1")
    ok = df.filter(F.col("error").isNull())
    log = ok.filter(F.col("source") == "log")
    offsets = [r[0] for r in log.select("offset").orderBy("offset").collect()]
    assert offsets == list(range(scenario.uncommitted_end))
    assert {r["replica"] for r in df.select("replica").distinct().collect()} == {"node-1"}
    assert {r["node_id"] for r in df.select("node_id").distinct().collect()} == {1}

    snap_file = partition_dir(scenario.replicas["node-1"]) / scenario.snapshot_id.file_name()
    contents = read_snapshot(snap_file.read_bytes())
    snap = ok.filter(F.col("source") == "snapshot")
    assert snap.count() == contents.record_count
    row = snap.select("snapshot_end_offset", "snapshot_epoch").distinct().collect()
    assert [(r[0], r[1]) for r in row] == [(scenario.snapshot_id.end_offset,
                                            scenario.snapshot_id.epoch)]

    epochs = {r["epoch"]: r["t"] for r in log.filter("control_type = 'LEADER_CHANGE'")
              .select("epoch", F.col("control_detail").alias("t")).collect()}
    assert sorted(epochs) == sorted(scenario.epochs)
    assert all('"leader_id"' in t for t in epochs.values())


def test_corrupt_and_torn_batches_become_error_rows(rows: Any, scenario: Any) -> None:
    df = rows
    errors = df.filter(F.col("error").isNotNull()).select(
        "replica", "file", "position", "batch_base_offset", "error"
    ).orderBy("replica").collect()
    assert [(r["replica"], r["file"], r["position"]) for r in errors] == [
        ("node-2", str(scenario.flipped_file), scenario.flipped_position),
        ("node-4", str(scenario.truncated_file), scenario.truncated_position),
    ]
    assert errors[0]["error"].startswith("corrupt_crc:")
    assert errors[0]["batch_base_offset"] == scenario.flipped_base_offset
    assert errors[1]["error"].startswith("truncated:")
    # the scan went on after the corrupt batch: node-2 still has the records behind it
    after = df.filter((F.col("replica") == "node-2") & (F.col("offset") > scenario.flipped_base_offset + 20))
    assert after.count() > 0


def test_every_replica_named_by_the_paths_option_is_read(rows: Any, scenario: Any) -> None:
    names = sorted(r[0] for r in rows.select("replica").distinct().collect())
    assert names == sorted(scenario.replicas)


def test_load_path_names_a_single_replica(spark: Any, scenario: Any) -> None:
    df = spark.read.format("kraft").load(str(scenario.replicas["node-3"]))
    assert df.rdd.getNumPartitions() == len(discover_replicas([str(scenario.replicas["node-3"])])[0].files)
