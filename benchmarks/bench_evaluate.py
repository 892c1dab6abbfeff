"""Evaluation cost per table, from metadata, vs deciding by counting dirty rows with Spark.

Builds one real table with many snapshots (appends, a compaction, more appends), copies its
metadata tree into N tables (each copy is a complete Iceberg table: its own metadata files,
manifest lists and manifests), then times `evaluate_all` over 1/4 of them and over all of them
(time per table, and Python peak memory: flat in the number of tables means the run holds no
per-table state), and, in the same run, Spark counting each table's dirty rows.

Usage: python benchmarks/bench_evaluate.py [--tables 1000] [--snapshots 12] [--spark-sample 40]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import tracemalloc
from pathlib import Path

from lakecleaner.config import CHECKPOINT_PROPERTY, CatalogConfig, CleanerConfig, LakecleanerConfig, SparkConfig
from lakecleaner.engine import TableRef, compact_table
from lakecleaner.maintenance import maintain_table
from lakecleaner.rules import Checkpoint
from lakecleaner.scheduler import evaluate_all
from lakecleaner.spark import get_spark
from lakecleaner.tables import append, create_compacted_table


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--snapshots", type=int, default=12)
    parser.add_argument("--spark-sample", type=int, default=40)
    args = parser.parse_args()
    wh = Path(__file__).resolve().parent / "results" / "eval_warehouse"
    shutil.rmtree(wh, ignore_errors=True)
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(wh)), spark=SparkConfig(driver_memory="2g"),
                            cleaner=CleanerConfig(namespaces=("evalbench",)))
    spark = get_spark(cfg, "lakecleaner-bench-evaluate")
    def template(name: str) -> TableRef:
        ref = create_compacted_table(spark, cfg, name)
        offset = 0
        for i in range(args.snapshots):
            append(spark, ref, [{"key": f"k{j % 50}", "offset": offset + j, "partition": j % 2, "value": "v"}
                                for j in range(100)])
            offset += 100
            if i == args.snapshots // 2:
                compact_table(spark, cfg, name)
        return ref

    ref = template("template.t")  # one manifest per append: a table nobody has maintained
    template("template.m")
    maintain_table(spark, cfg, "template.m")  # merges the manifests
    for prefix in ("t", "m"):
        for n in range(args.tables):
            shutil.copytree(wh / "template" / prefix, wh / "evalbench" / f"{prefix}{n:05d}",
                            ignore=shutil.ignore_patterns("data"))
    results = {}
    for prefix, count in (("t", args.tables // 4), ("t", args.tables), ("m", args.tables)):
        names = [f"evalbench.{prefix}{n:05d}" for n in range(count)]
        tracemalloc.start()
        t0 = time.perf_counter()
        evs = evaluate_all(cfg, names)
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert all(e.status in ("eligible", "not eligible") for e in evs), evs[0]
        key = (prefix, count)
        results[key] = {"tables": count, "manifests": "one per append" if prefix == "t" else "merged by maintenance",
                        "seconds": round(elapsed, 2), "ms_per_table": round(1000 * elapsed / count, 2),
                        "python_peak_mb": round(peak / 2**20, 1)}
        print(json.dumps(results[key]), flush=True)
    # Deciding by counting dirty rows with Spark, on a sample of the same tables.
    ckpt = Checkpoint.from_json(dict((r["key"], r["value"]) for r in spark.sql(
        f"SHOW TBLPROPERTIES {ref.sql()}").collect())[CHECKPOINT_PROPERTY])
    pred = " OR ".join(f"(`partition` = {p} AND `offset` > {o})" for p, o in ckpt.offsets.items())
    sample = [TableRef.parse(f"evalbench.t{n:05d}", "lake") for n in range(args.spark_sample)]
    spark.table(sample[0].sql()).where(pred).count()  # warm up the JVM
    t0 = time.perf_counter()
    for r in sample:
        spark.table(r.sql()).where(pred).count()
    spark_ms = 1000 * (time.perf_counter() - t0) / len(sample)
    spark.stop()
    full = results[("t", args.tables)]
    quarter = results[("t", args.tables // 4)]
    merged = results[("m", args.tables)]
    print(f"\nmetadata evaluation: {full['ms_per_table']} ms/table over {args.tables} tables with a manifest per "
          f"append ({args.snapshots} appends), {merged['ms_per_table']} ms/table once maintenance merged them "
          "(target < 20 ms)")
    print(f"python peak memory: {quarter['python_peak_mb']} MB for {quarter['tables']} tables, "
          f"{full['python_peak_mb']} MB for {full['tables']} (flat = per-table state is not kept)")
    print(f"spark dirty-row count: {spark_ms:.1f} ms/table; metadata evaluation is "
          f"{spark_ms / full['ms_per_table']:.1f}x / {spark_ms / merged['ms_per_table']:.1f}x faster")
    out = Path(__file__).resolve().parent / "results"
    (out / f"evaluate-{int(time.time())}.json").write_text(json.dumps(
        {"runs": list(results.values()), "spark_count_ms_per_table": round(spark_ms, 2)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
