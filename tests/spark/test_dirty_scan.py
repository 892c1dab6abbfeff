"""The dirty scan on Iceberg: only files past the checkpoint are planned, spread over the cores."""
import pytest

from lakecleaner.core.config import CHECKPOINT_PROPERTY
from lakecleaner.spark.catalog import current_snapshot, load_table_config
from lakecleaner.spark.engine import compact_table
from lakecleaner.spark.files import data_files
from lakecleaner.spark.frames import Frames, dirty_scan, outside
from lakecleaner.core.rules import Checkpoint
from lakecleaner_dev.tables import append, create_compacted_table

from iceberg_scans import iceberg_scans

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("values", [[0], [0, 1, 2, 3], [3, 1, 0, 7, 8, 5], [-2, 4]])
def test_outside_is_not_in(spark, values):
    from pyspark.sql import functions as F

    df = spark.range(-5, 12).select(F.col("id").cast("int").alias("p"))
    got = sorted(r["p"] for r in df.where(F.expr(outside("p", values))).collect())
    assert got == [v for v in range(-5, 12) if v not in values]


def test_dirty_scan_plans_only_dirty_files_one_split_each(spark, lake_config, table_name):
    from pyspark.sql import functions as F

    ref = create_compacted_table(spark, lake_config, table_name)
    for batch in range(3):  # clean files in partitions 0, 1 and 3
        append(spark, ref, [{"key": f"k{i}", "offset": 10 * batch + i, "partition": p, "value": "v"}
                            for p in (0, 1, 3) for i in range(3)])
    compact_table(spark, lake_config, table_name)
    dirty = [(0, 30), (1, 31), (2, 0)]  # partition 2 is new: the checkpoint has not seen it
    for p, o in dirty:
        append(spark, ref, [{"key": "k0", "offset": o, "partition": p, "value": "w"}])

    tc, props = load_table_config(spark, lake_config, ref)
    snapshot = current_snapshot(spark, ref)
    files = data_files(spark, ref, tc, snapshot)
    ckpt = Checkpoint.from_json(props[CHECKPOINT_PROPERTY])
    assert sorted(ckpt.offsets) == [0, 1, 3] and len(files) > len(dirty)
    scan = dirty_scan(spark, ref, snapshot, Frames(tc), ckpt.offsets, files)
    assert sorted((r["partition"], r["offset"]) for r in scan.collect()) == dirty
    # each dirty file its own read task; no clean file planned (NOT IN would plan them all)
    assert scan.rdd.getNumPartitions() == len(dirty)
    assert scan.select(F.spark_partition_id().alias("task")).distinct().count() == len(dirty)


def test_the_clean_part_is_read_without_opening_dirty_files(spark, lake_config, table_name):
    """A versioned run reads its keys' cleaned records; Iceberg plans only the files at or below
    the checkpoint for it, not the dirty files (which NOT of the dirty scan's predicate would)."""
    ref = create_compacted_table(spark, lake_config, table_name, {
        "compaction.strategy": "timestamp", "compaction.retain.log.end.record": "false"})
    for batch in range(3):  # three clean files in each of partitions 0 and 1
        append(spark, ref, [{"key": f"k{i}", "offset": 10 * batch + i, "partition": p, "value": "v",
                             "timestamp": 100 + 10 * batch + i} for p in (0, 1) for i in range(3)])
    compact_table(spark, lake_config, table_name, now_ms=10**13)
    for p in (0, 1):  # late lower timestamps: each run key's cleaned record must be looked up
        append(spark, ref, [{"key": "k1", "offset": 30, "partition": p, "value": "w", "timestamp": 1}])
    with iceberg_scans(spark) as scans:
        stats = compact_table(spark, lake_config, table_name, now_ms=10**13)
    assert stats["removed_superseded"] == 2
    clean_scans = [s for s in scans if "offset <= 22" in s["desc"]]
    assert clean_scans and max(s["number of result data files"] for s in clean_scans) == 2 * 3, clean_scans
