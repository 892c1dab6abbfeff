"""What judging an erasure on disk costs (lakecleaner.spark.forget): reading the key, partition and offset
columns of every data file any snapshot reaches whose key bounds admit a requested key, deletes
ignored, against a plain scan of the table's key column, on the benchmark table of
bench_compaction (a checkpointed clean part of one record per key plus a dirty part of updates).

The clean part's keys (key-<id>) were written in id order, so its files' key bounds are narrow and
prune; the dirty part's updates hit random keys, so each dirty file's bounds admit nearly every key
and the check reads those files' three columns whatever the key. A table whose keys are hashed or
random in every file costs the check about a scan of those columns.

Medians of --repeats, all in one process: the on-disk check for 1 and for 1,000 keys, a scan of the
key column (max(key): every value read, no shuffle), and a whole request of one key (delete, quarantine, forced maintenance, the check, the
audit), undone between repeats by rebuilding nothing: each repeat forgets a different key.

Usage: python benchmarks/bench_erasure.py [--records 20000000] [--dirty 0.05] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_compaction import build, settle  # noqa: E402

from lakecleaner.core.config import CatalogConfig, LakecleanerConfig, SparkConfig  # noqa: E402
from lakecleaner.spark.forget import ForgetRequest, _candidate_files, _files_still_holding, forget  # noqa: E402
from lakecleaner.spark.catalog import load_table_config  # noqa: E402
from lakecleaner.spark.session import get_spark  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=20_000_000)
    p.add_argument("--dirty", type=float, default=0.05)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warehouse", default=str(RESULTS / "warehouse-erasure"))
    args = p.parse_args(argv)
    cfg = LakecleanerConfig(catalog=CatalogConfig(name="bench", type="hadoop", warehouse=args.warehouse),
                            spark=SparkConfig(master="local[2]", driver_memory="4g"))
    spark = get_spark(cfg, "bench-erasure")
    dirty = int(args.records * args.dirty)
    ref = build(spark, cfg, "b.erasure", args.records - dirty, dirty)
    from pyspark.sql import functions as F

    tc, _ = load_table_config(spark, cfg, ref)
    keys = [r[0] for r in spark.table(ref.sql()).select("key").distinct().limit(1_000 + args.repeats).collect()]

    def key_frame(ks):
        from pyspark.sql import functions as F

        return spark.createDataFrame([(k,) for k in ks], "key string").withColumn("lc_key_hash", F.lit("x"))

    figures: dict[str, list[float]] = {"scan_key_column_s": [], "check_1_key_s": [], "check_1000_keys_s": [],
                                       "forget_1_key_s": []}
    for i in range(args.repeats):
        settle(spark)
        figures["scan_key_column_s"].append(timed(lambda: spark.table(ref.sql()).agg(F.max("key")).collect()))
        settle(spark)
        figures["check_1_key_s"].append(timed(lambda: _files_still_holding(spark, ref, tc, key_frame(keys[:1]), None)))
        settle(spark)
        figures["check_1000_keys_s"].append(timed(
            lambda: _files_still_holding(spark, ref, tc, key_frame(keys[:1000]), None)))
        settle(spark)
        request = ForgetRequest(ref.short, ({"key": keys[1000 + i]},))
        figures["forget_1_key_s"].append(timed(lambda r=request: forget(spark, cfg, r)))
    files = spark.sql(f"SELECT count(*) FROM {ref.meta('all_data_files')}").collect()[0][0]
    candidates = len(_candidate_files(spark, ref, tc, key_frame(keys[:1])))
    report = {"records": args.records, "dirty": args.dirty, "reachable_data_files": files,
              "files_read_for_1_key": candidates,
              **{name: round(statistics.median(v), 2) for name, v in figures.items()}}
    report["check_1_key_over_scan"] = round(report["check_1_key_s"] / report["scan_key_column_s"], 2)
    print(json.dumps(report, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "erasure.json").write_text(json.dumps(report, indent=2))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
