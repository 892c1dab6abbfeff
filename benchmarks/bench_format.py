"""Iceberg format v2 against v3 (issue 37): the same compaction runs on a v2 table (position-delete
files) and a v3 table (deletion vectors in Puffin files), side by side in one process.

Both tables are built alike (bench_compaction.build: a checkpointed clean part, one record per key,
and a dirty part of updates to random keys, 5% of the table, offset strategy). Then three rounds,
each: compact (timed --repeats times on the same snapshot, the run undone in between, the last one
kept), count the table's live delete files and their bytes, time a full read of the compacted table
(count and the values' lengths, so deletes are applied), and append the next dirty batch. No
maintenance runs in between: on v2 every run adds position-delete files beside the earlier ones; on
v3 a run's deletion vector for a data file replaces the earlier one. The two formats take turns
within each round, so a noisy machine slows both alike; compare the ratios.

Usage: python benchmarks/bench_format.py [--records 20000000] [--dirty 0.05] [--rounds 3] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench_compaction import build, kafka_rows, settle
from lakecleaner.core.config import CHECKPOINT_PROPERTY, CatalogConfig, LakecleanerConfig, SparkConfig
from lakecleaner.core.table import TableRef
from lakecleaner.spark.engine import compact_table
from lakecleaner.spark.session import get_spark

FORMATS = (2, 3)


@dataclass(frozen=True)
class Round:
    """One format's figures after one compaction run."""
    format_version: int
    round: int
    compact_s: float
    compact_runs_s: list[float]
    removed: int
    bytes_written: int
    delete_files: int
    delete_bytes: int
    delete_formats: str
    read_s: float
    read_runs_s: list[float]


def current_snapshot(spark, ref: TableRef) -> int:
    return spark.sql(f"SELECT snapshot_id FROM {ref.meta('refs')} WHERE name = 'main'").collect()[0][0]


def checkpoint_of(spark, ref: TableRef) -> str:
    return spark.sql(f"SHOW TBLPROPERTIES {ref.sql()} ('{CHECKPOINT_PROPERTY}')").collect()[0]["value"]


def timed_compaction(spark, cfg, ref: TableRef, repeats: int) -> tuple[list[float], dict]:
    """``repeats`` runs on the same snapshot (rolled back with its checkpoint in between); the last stays."""
    snapshot, checkpoint = current_snapshot(spark, ref), checkpoint_of(spark, ref)
    times, stats = [], {}
    for i in range(repeats):
        if i:
            spark.sql(f"CALL `{cfg.catalog.name}`.system.rollback_to_snapshot('{ref.short}', {snapshot})")
            spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('{CHECKPOINT_PROPERTY}' = '{checkpoint}')")
        settle(spark)
        t0 = time.time()
        stats = compact_table(spark, cfg, ref.short, now_ms=int(time.time() * 1000) + 1)
        times.append(time.time() - t0)
    return times, stats


def live_delete_files(spark, ref: TableRef) -> tuple[int, int, str]:
    """The current snapshot's delete files: how many files, their bytes, and per file format the
    files and entries (a Puffin file holds a deletion vector for each of several data files, each
    listed with the whole file's size: counted once here)."""
    rows = spark.sql(
        f"SELECT file_format, count(*) AS files, sum(size) AS bytes, sum(entries) AS entries FROM ("
        f"SELECT file_format, file_path, max(file_size_in_bytes) AS size, count(*) AS entries "
        f"FROM {ref.meta('delete_files')} GROUP BY file_format, file_path) GROUP BY file_format").collect()
    return (sum(r["files"] for r in rows), sum(r["bytes"] or 0 for r in rows),
            ",".join(sorted(f"{r['file_format']}: {r['files']} files, {r['entries']} entries" for r in rows)))


def timed_read(spark, ref: TableRef, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        settle(spark)
        t0 = time.time()
        spark.sql(f"SELECT count(*), sum(length(value)) FROM {ref.sql()}").collect()
        times.append(time.time() - t0)
    return times


def append_dirty(spark, ref: TableRef, clean: int, dirty: int, batch: int) -> None:
    """The next dirty batch: updates of random keys, offsets past every earlier record."""
    from pyspark.sql import functions as F

    start = clean + dirty * batch
    updated = F.abs(F.xxhash64("id")) % F.lit(clean)
    kafka_rows(spark, start, dirty, updated, F.col("id"), clean).sortWithinPartitions(
        "partition", "offset").writeTo(ref.sql()).append()


def measure_round(spark, cfg, ref: TableRef, version: int, rnd: int, repeats: int) -> Round:
    compact_times, stats = timed_compaction(spark, cfg, ref, repeats)
    n, size, formats = live_delete_files(spark, ref)
    read_times = timed_read(spark, ref, repeats)
    return Round(format_version=version, round=rnd, compact_s=round(statistics.median(compact_times), 2),
                 compact_runs_s=[round(t, 2) for t in compact_times], removed=stats["removed_superseded"],
                 bytes_written=stats["bytes_written"], delete_files=n, delete_bytes=size, delete_formats=formats,
                 read_s=round(statistics.median(read_times), 2), read_runs_s=[round(t, 2) for t in read_times])


def table(results: list[Round]) -> str:
    lines = ["| round | format | compact s | removed | bytes written | live delete files | their bytes | read s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.round} | v{r.format_version} | {r.compact_s} | {r.removed:,} | {r.bytes_written:,} | "
                     f"{r.delete_files} ({r.delete_formats}) | {r.delete_bytes:,} | {r.read_s} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000_000)
    parser.add_argument("--dirty", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3, help="compaction runs per table, no maintenance between")
    parser.add_argument("--repeats", type=int, default=3, help="timings per run and read; the median is reported")
    parser.add_argument("--warehouse", default=str(Path(__file__).resolve().parent / "results" / "warehouse"))
    args = parser.parse_args()
    dirty = int(args.records * args.dirty)
    clean = args.records - dirty
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=args.warehouse),
                            spark=SparkConfig(master="local[2]", driver_memory="4g"))
    spark = get_spark(cfg, "lakecleaner-bench-format")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{cfg.catalog.name}`.`bench`")
    refs = {v: build(spark, cfg, f"bench.format_v{v}", clean, dirty, {"format-version": str(v)}) for v in FORMATS}
    results = []
    for rnd in range(1, args.rounds + 1):
        for v in FORMATS:
            if rnd > 1:
                append_dirty(spark, refs[v], clean, dirty, rnd - 1)
            results.append(measure_round(spark, cfg, refs[v], v, rnd, args.repeats))
            print(json.dumps(asdict(results[-1])), flush=True)
    for ref in refs.values():
        spark.sql(f"DROP TABLE IF EXISTS {ref.sql()} PURGE")
    spark.stop()
    print(f"\n{args.records:,} records, {args.dirty:.0%} dirty per round, offset strategy, medians of {args.repeats}\n")
    print(table(results))
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / f"format-{int(time.time())}.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
