"""Incremental compaction vs a naive full-table "latest per key" rewrite, on the same data.

Each table is built in the state a compacted table is in between runs: a clean part with one
record per key (already cleaned, checkpointed) plus a dirty part of updates to random keys, each in
its key's partition, appended since. Both jobs see the same snapshot and are timed --repeats times
(the incremental run undone in between); medians are reported, all from one process, so ratios
compare like with like on a noisy machine: incremental time, naive time, their ratio, records/s,
peak driver memory (RSS of the driver JVM, sampled) and the incremental run's phase timings.

Usage: python benchmarks/bench_compaction.py [--sizes 1250000,5000000,20000000] [--dirty 0.05] [--repeats 3]
       [--spark-conf KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil

from lakecleaner.core.config import CHECKPOINT_PROPERTY, CatalogConfig, LakecleanerConfig, SparkConfig
from lakecleaner.core.table import TableRef
from lakecleaner.spark.engine import compact_table
from lakecleaner.core.rules import Checkpoint
from lakecleaner.spark.session import get_spark
from lakecleaner_dev.tables import create_compacted_table

PARTITIONS = 4
VALUE_BYTES = 100


class PeakRss:
    """Peak resident memory of the driver JVM (local mode: driver and executors in one process)."""

    def __init__(self, pid: int):
        self.proc, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()

    def __enter__(self):
        self.peak = self.proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()



def settle(spark) -> None:
    """Before a timed job: the previous job's writes flushed to disk (a naive rewrite leaves about a
    GB of dirty pages, whose writeback would otherwise slow whichever job is timed next) and the
    JVM heap collected."""
    os.sync()
    spark._jvm.System.gc()

def jvm_pid(spark) -> int:
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


def kafka_rows(spark, start: int, n: int, key_id, offset, clean: int):
    """Records ``start .. start + n`` as Kafka's fields, each in its key's partition, values padded to
    VALUE_BYTES; every tenth record past the clean part has a null value (a delete)."""
    from pyspark.sql import functions as F

    pad = F.lit("x" * VALUE_BYTES)
    ids = spark.range(start, start + n)
    return ids.select(
        F.format_string("key-%012d", key_id).alias("key"), offset.alias("offset"),
        (key_id % PARTITIONS).cast("int").alias("partition"), F.col("id").alias("timestamp"),
        F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
        F.lit(None).cast("boolean").alias("tombstone"),
        F.when((F.col("id") % 10 == 0) & (F.col("id") >= clean), F.lit(None)).otherwise(pad).alias("value"))


def build(spark, cfg, table: str, clean: int, dirty: int, properties: dict | None = None) -> TableRef:
    """clean: one record per key, keys spread over partitions by key (as Kafka's partitioner does),
    checkpointed; dirty: updates of random existing keys in their key's partition (10% deletes),
    appended after the checkpoint with offsets past every clean one."""
    from pyspark.sql import functions as F

    ref = create_compacted_table(spark, cfg, table, {"compaction.retain.log.end.record": "true", **(properties or {})})

    def rows(start, n, key_id, offset):
        return kafka_rows(spark, start, n, key_id, offset, clean)

    key_of_id = F.col("id")
    rows(0, clean, key_of_id, (F.col("id") / PARTITIONS).cast("bigint")).sortWithinPartitions("partition").writeTo(
        ref.sql()).append()
    last = {p: (clean - 1 - ((clean - 1 - p) % PARTITIONS)) // PARTITIONS for p in range(PARTITIONS)}
    ckpt = Checkpoint().advanced(int(time.time() * 1000), last, {}, 86_400_000)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('{CHECKPOINT_PROPERTY}' = '{ckpt.to_json()}')")
    updated = F.abs(F.xxhash64("id")) % F.lit(clean)
    rows(clean, dirty, updated, F.col("id")).sortWithinPartitions("partition", "offset").writeTo(ref.sql()).append()
    return ref


def naive_rewrite(spark, ref: TableRef, out: str) -> None:
    """Latest per key by offset over the whole table, written as a new table."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark.sql(f"DROP TABLE IF EXISTS {out} PURGE")
    w = Window.partitionBy("partition", "key").orderBy(F.col("offset").desc())
    latest = spark.table(ref.sql()).withColumn("rn", F.row_number().over(w)).where("rn = 1").drop("rn")
    latest.writeTo(out).using("iceberg").partitionedBy(F.col("partition")).create()


def measure(spark, cfg, clean: int, dirty: int, pid: int, repeats: int) -> dict:
    """Median of ``repeats`` timings of each job on the same snapshot (one run is too noisy on 2
    cores); the incremental run is undone between repeats (rollback plus the built checkpoint)."""
    import statistics

    table = f"bench.t_{clean + dirty}_{dirty}"
    t0 = time.time()
    ref = build(spark, cfg, table, clean, dirty)
    built = time.time() - t0
    snapshot = spark.sql(f"SELECT snapshot_id FROM {ref.meta('refs')} WHERE name = 'main'").collect()[0][0]
    checkpoint = spark.sql(f"SHOW TBLPROPERTIES {ref.sql()} ('{CHECKPOINT_PROPERTY}')").collect()[0]["value"]
    naive_times, inc_times, stats = [], [], {}
    with PeakRss(pid) as mem_naive:
        for _ in range(repeats):
            settle(spark)  # each measured job starts from a collected heap, nothing left to flush
            t0 = time.time()
            naive_rewrite(spark, ref, f"`{cfg.catalog.name}`.`bench`.`naive_out`")
            naive_times.append(time.time() - t0)
    with PeakRss(pid) as mem_inc:
        for _ in range(repeats):
            spark.sql(f"CALL `{cfg.catalog.name}`.system.rollback_to_snapshot('{ref.short}', {snapshot})")
            spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('{CHECKPOINT_PROPERTY}' = '{checkpoint}')")
            settle(spark)
            t0 = time.time()
            stats = compact_table(spark, cfg, table, now_ms=int(time.time() * 1000) + 1)
            inc_times.append(time.time() - t0)
    spark.sql(f"DROP TABLE IF EXISTS {ref.sql()} PURGE")
    naive, incremental = statistics.median(naive_times), statistics.median(inc_times)
    return {"records": clean + dirty, "dirty": dirty, "dirty_fraction": round(dirty / (clean + dirty), 4),
            "build_s": round(built, 2), "naive_s": round(naive, 2), "incremental_s": round(incremental, 2),
            "naive_runs_s": [round(t, 2) for t in naive_times], "incremental_runs_s": [round(t, 2) for t in inc_times],
            "incremental_over_naive": round(incremental / naive, 3),
            "incremental_records_per_s": int((clean + dirty) / incremental),
            "naive_records_per_s": int((clean + dirty) / naive),
            "peak_rss_incremental_mb": mem_inc.peak // 2**20, "peak_rss_naive_mb": mem_naive.peak // 2**20,
            "removed": stats["removed_superseded"], "bytes_read": stats["bytes_read"],
            "bytes_written": stats["bytes_written"], "phases": stats.get("phases")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1250000,5000000,20000000")
    parser.add_argument("--dirty", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3, help="timings per job; the median is reported")
    parser.add_argument("--warehouse", default=str(Path(__file__).resolve().parent / "results" / "warehouse"))
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="override a Spark setting for both jobs (to compare settings run by run)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if any("=" not in kv for kv in args.spark_conf):
        parser.error("--spark-conf takes KEY=VALUE")
    overrides = dict(kv.split("=", 1) for kv in args.spark_conf)
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=args.warehouse),
                            spark=SparkConfig(master="local[2]", driver_memory="4g", conf=overrides))
    spark = get_spark(cfg, "lakecleaner-bench")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{cfg.catalog.name}`.`bench`")
    pid = jvm_pid(spark)
    results = []
    # growing tables, fixed dirty fraction
    for size in sizes:
        dirty = int(size * args.dirty)
        results.append({"series": "fixed dirty fraction", **measure(spark, cfg, size - dirty, dirty, pid, args.repeats)})
        print(json.dumps(results[-1]), flush=True)
    # the largest table's dirty volume in a table 4x smaller: how the run scales with the table
    big = sizes[-1]
    dirty = int(big * args.dirty)
    results.append({"series": "same dirty volume, table / 4", **measure(spark, cfg, big // 4 - dirty, dirty, pid, args.repeats)})
    print(json.dumps(results[-1]), flush=True)
    spark.stop()

    small, large = results[-1], results[-2]
    growth = large["incremental_s"] / small["incremental_s"]
    print("\n| series | records | dirty | naive s | incremental s | inc/naive | inc rec/s | peak RSS inc/naive MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['series']} | {r['records']:,} | {r['dirty']:,} | {r['naive_s']} | {r['incremental_s']} | "
              f"{r['incremental_over_naive']} | {r['incremental_records_per_s']:,} | "
              f"{r['peak_rss_incremental_mb']}/{r['peak_rss_naive_mb']} |")
    print(f"\ntarget 1: at {large['records']:,} records with {large['dirty_fraction']:.0%} dirty, incremental/naive = "
          f"{large['incremental_over_naive']} (target <= 0.2)")
    print(f"target 2: table x4 with the same dirty volume ({dirty:,}): incremental time x{growth:.2f} (target <= 1.5)")
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / f"compaction-{int(time.time())}.json").write_text(
        json.dumps({"spark_conf_overrides": overrides, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
