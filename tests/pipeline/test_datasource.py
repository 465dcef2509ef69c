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


def test_batch_rows_hold_each_batch_once_and_give_back_the_same_records(
    spark: Any, scenario: Any, rows: Any
) -> None:
    from kraft_pipeline.datasource import SCHEMA_DDL, batch_schema, explode_batches

    paths = ",".join(str(p) for p in scenario.replicas.values())
    batches = spark.read.format("kraft").option("paths", paths).option("rows", "batches").load()
    assert batches.schema == batch_schema()
    got = batches.collect()
    # one row per batch or unreadable batch, with the batch's bytes as they are in the file
    assert len(got) == rows.filter(
        F.col("offset").isNull() | (F.col("offset") == F.col("batch_base_offset"))).count()
    for r in got:
        if r["error"] is None:
            with open(r["file"], "rb") as f:
                f.seek(r["position"])
                assert bytes(r["data"]) == f.read(r["batch_size"])
        else:
            assert r["data"] is None
    # replicas holding the same batch bytes get the same hash; another batch another one
    by_range: dict[tuple[int, int], set[tuple[bytes, int]]] = {}
    for r in got:
        if r["error"] is None and r["source"] == "log":
            by_range.setdefault((r["batch_base_offset"], r["batch_last_offset"]), set()).add(
                (bytes(r["data"]), r["batch_hash"]))
    pairs = {p for v in by_range.values() for p in v}
    assert len({d for d, _ in pairs}) == len({h for _, h in pairs}) == len(pairs)
    assert any(len(v) > 1 for v in by_range.values())  # node-3's rewritten batch
    # decoding the batch rows again gives exactly the record reader's rows
    again = batches.filter(F.col("error").isNull()).mapInArrow(explode_batches, SCHEMA_DDL)
    ok = rows.filter(F.col("error").isNull())
    assert again.count() == ok.count()
    assert again.exceptAll(ok).count() == 0 and ok.exceptAll(again).count() == 0


def test_rows_option_is_checked(spark: Any, scenario: Any) -> None:
    with pytest.raises(Exception, match="rows='bogus'"):
        spark.read.format("kraft").option("rows", "bogus").load(
            str(scenario.replicas["node-1"])).collect()


def test_index_rows_read_back_the_same_records_from_the_files(
    spark: Any, scenario: Any, rows: Any
) -> None:
    """`batchBytes=false` keeps the bytes out of the rows; `explode_batches` reads them back
    from the files by position and gives exactly the record reader's rows."""
    from kraft_pipeline.datasource import BATCH_INDEX_DDL, SCHEMA_DDL, explode_batches

    paths = ",".join(str(p) for p in scenario.replicas.values())
    index = (spark.read.format("kraft").option("paths", paths).option("rows", "batches")
             .option("batchBytes", "false").load())
    assert "data" not in index.columns
    assert index.schema.simpleString() == spark.createDataFrame(
        [], BATCH_INDEX_DDL).schema.simpleString()
    again = index.filter(F.col("error").isNull()).mapInArrow(explode_batches, SCHEMA_DDL)
    ok = rows.filter(F.col("error").isNull())
    assert again.count() == ok.count()
    assert again.exceptAll(ok).count() == 0 and ok.exceptAll(again).count() == 0


def test_grouping_options_are_taken_whatever_their_case(spark: Any, scenario: Any) -> None:
    """Spark hands a source its options with lower-case names: the byte options still work."""
    files = [f for r in discover_replicas([str(scenario.root)]) for f in r.files]
    total = sum(f.size_bytes for f in files)
    paths = ",".join(str(p) for p in scenario.replicas.values())

    def partitions(**options: str) -> int:
        reader = spark.read.format("kraft").option("paths", paths)
        for k, v in options.items():
            reader = reader.option(k, v)
        return int(reader.load().rdd.getNumPartitions())

    assert partitions() == len(files)
    assert partitions(groupSmallFilesBytes=str(total + 1)) == 1
    copies = partitions(groupCopiesBytes=str(total + 1))
    names = {(f.source, f.path.rsplit("/", 1)[1]) for f in files}
    assert copies == len(names) < len(files)
    with pytest.raises(Exception, match="groupCopiesBytes='lots'"):
        partitions(groupCopiesBytes="lots")
