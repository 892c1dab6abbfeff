"""Benchmarks shaped like the users' tables: CDC tables under versioned strategies, realistic values,
and the driver-memory bound (issue 13, item 3).

Series, each timed on one snapshot in one process, medians of --repeats runs interleaved job by job
(naive, then each strategy, the strategies in turn first; the incremental runs undone in between), so
ratios compare like with like:

- ``column``: a CDC table (composite key tenant + id, two strings; bigint ``lsn`` as the version;
  op/tombstone/payload), ``timestamp``: a Kafka-shaped table with the record timestamp as the version.
  Each is built as a compacted table is between runs: the first (1 - dirty) of the records, one per
  key, cleaned by a real run (which writes the checkpoint), then the dirty part appended: updates of
  random keys (10% deletes), of which --late are late lower versions (lower than the key's cleaned
  winner: they must lose). --late-shape ``replay`` (the default) is a CDC table's: the late records
  replay changes of the newest 1% of keys, as a connector restarting from its last committed
  position sends them, and the clean part landed in 20 appends, as a landing job writes it over
  time. ``adversarial`` is a stress shape: late versions anywhere below their key's winner and the
  clean part in one append, so no clean file can be ruled out by its version bounds and a
  versioned run reads every clean key once more than an offset run does (--late-window and
  --clean-batches set either part alone). Timed: the naive rewrite
  (``row_number() OVER (PARTITION BY key ORDER BY version DESC, offset DESC) = 1`` written as a new
  table), the versioned strategy, and the offset strategy on the same table (the table property
  switched), for the ratios strategy/naive and strategy/offset.
- ``values``: the offset strategy vs its naive rewrite on a Kafka-shaped table whose values are about
  1 KB of hex digests (half the bytes' entropy: zstd gets about 2x, not the 100 identical bytes of
  bench_compaction.py, which flatter the naive rewrite).
- ``memory``: a run over --memory-keys distinct dirty keys (plus 10% updates) in a child process whose
  driver has --memory-driver (1g) of heap; peak RSS of its JVM and Python, sampled from here.

At up to --check-max records the engine's result is compared with the reference model
(lakecleaner.core.model) after the first run of every strategy; a difference stops the benchmark.

Usage: python benchmarks/bench_cdc.py [--series column,timestamp,values,memory] [--records 20000000]
       [--value-records 5000000] [--memory-keys 10000000] [--dirty 0.05] [--late 0.03] [--repeats 4]
       [--late-shape replay|adversarial] [--late-window W] [--clean-batches N]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from bench_compaction import PeakRss, jvm_pid, settle
from lakecleaner.core.table import TableRef
from lakecleaner.spark.catalog import load_table_config
from lakecleaner.core.config import CHECKPOINT_PROPERTY, CatalogConfig, LakecleanerConfig, SparkConfig
from lakecleaner.spark.engine import compact_table
from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint
from lakecleaner.spark.session import get_spark
from lakecleaner_dev.tables import KAFKA_SCHEMA, create_compacted_table, record_from_row

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 4
TENANTS = 7
VERSION_BASE = 1_700_000_000_000  # versions (LSNs, epoch ms) start here; a clean key k has BASE + k
SHORT_VALUE_BYTES = 100  # as bench_compaction.py, so the CDC series compare with its offset series
CHILD_MARKER = "BENCH_CDC_CHILD "
CDC_SCHEMA = ("`tenant` string, `id` string, `lsn` bigint, `op` string, `tombstone` boolean, `payload` string, "
              "`offset` bigint, `partition` int")


@dataclass(frozen=True)
class Shape:
    """A table layout: its schema and properties, and how a generated record becomes its columns."""

    name: str
    schema: str
    properties: dict[str, str]
    key_columns: tuple[str, ...]
    version_column: str  # what the naive rewrite orders by (the offset, for the offset strategy)
    value_column: str
    columns: Callable  # (key_id, offset, version, value, deleted) -> list of Columns


def _cdc_columns(key_id, offset, version, value, deleted):
    from pyspark.sql import functions as F
    return [F.format_string("tenant-%02d", key_id % TENANTS).alias("tenant"),
            F.format_string("%012d", (key_id / TENANTS).cast("bigint")).alias("id"),  # ids repeat across tenants
            version.alias("lsn"), F.when(deleted, "d").otherwise("u").alias("op"), deleted.alias("tombstone"),
            F.when(deleted, F.lit(None)).otherwise(value).alias("payload"), offset.alias("offset"),
            (key_id % PARTITIONS).cast("int").alias("partition")]


def _kafka_columns(key_id, offset, version, value, deleted):
    from pyspark.sql import functions as F
    return [F.format_string("key-%012d", key_id).alias("key"), offset.alias("offset"),
            (key_id % PARTITIONS).cast("int").alias("partition"), version.alias("timestamp"),
            F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
            F.lit(None).cast("boolean").alias("tombstone"),
            F.when(deleted, F.lit(None)).otherwise(value).alias("value")]


CDC_COLUMN = Shape("column", CDC_SCHEMA, {
    "compaction.strategy": "column", "compaction.strategy.column": "lsn", "compaction.key.columns": "tenant,id",
    "compaction.value.column": "payload"}, ("tenant", "id"), "lsn", "payload", _cdc_columns)
KAFKA_TIMESTAMP = Shape("timestamp", KAFKA_SCHEMA, {"compaction.strategy": "timestamp"},
                        ("key",), "timestamp", "value", _kafka_columns)
KAFKA_OFFSET = Shape("offset", KAFKA_SCHEMA, {"compaction.strategy": "offset"}, ("key",), "offset", "value",
                     _kafka_columns)


def short_value():
    from pyspark.sql import functions as F
    return F.lit("x" * SHORT_VALUE_BYTES)


def realistic_value(n_bytes: int = 1024):
    """About ``n_bytes`` of hex SHA-512 digests of the record id: different in every record and as
    random as hex text gets (4 bits a byte), so columnar compression halves it, no more."""
    from pyspark.sql import functions as F
    parts = max(1, n_bytes // 128)
    return F.concat(*[F.sha2(F.concat_ws("/", F.col("id").cast("string"), F.lit(str(j))), 512) for j in range(parts)])


@dataclass
class Built:
    ref: TableRef
    shape: Shape
    clean: int
    dirty: int
    snapshot: int  # after the dirty append: every timed run starts here
    checkpoint: str  # the checkpoint the setup run wrote
    build_s: float
    setup_run_s: float


@dataclass(frozen=True)
class LateShape:
    """Where the dirty part's late lower versions lie. ``window`` 1.0: below the cleaned winner of
    any key, anywhere in the history, so no clean file can be ruled out by its version bounds
    (adversarial). A smaller window: replays of the changes of the newest ``window`` of the keys, as
    a CDC connector that restarts from its last committed position sends them; with the clean part
    landed in ``batches`` appends, as a landing job writes it over time (LATE_SHAPES["replay"])."""

    share: float  # of the dirty records (--late)
    window: float  # LATE_SHAPES holds the named shapes' window and batches, main() the defaults
    batches: int


LATE_SHAPES = {"replay": (0.01, 20), "adversarial": (1.0, 1)}  # (window, batches)


def build(spark, cfg: LakecleanerConfig, table: str, shape: Shape, clean: int, dirty: int, late: LateShape,
          value) -> Built:
    """The clean part (one record per key, keys spread over partitions by key as Kafka's partitioner
    does) cleaned by a real run, then the dirty part appended: updates of random clean keys in their
    key's partition with offsets past every clean one, 10% deletes; a ``late.share`` of them carries
    a version just below the key's cleaned winner."""
    from pyspark.sql import functions as F

    t0 = time.time()
    ref = create_compacted_table(spark, cfg, table, {"compaction.retain.log.end.record": "true", **shape.properties},
                                 schema=shape.schema)
    key_id = F.col("id")
    for i in range(late.batches):
        spark.range(clean * i // late.batches, clean * (i + 1) // late.batches).select(*shape.columns(
            key_id, (key_id / PARTITIONS).cast("bigint"), F.lit(VERSION_BASE) + key_id, value, F.lit(False))
        ).sortWithinPartitions("partition").writeTo(ref.sql()).append()
    t1 = time.time()
    setup = compact_table(spark, cfg, ref.short, now_ms=int(time.time() * 1000))
    setup_s = time.time() - t1
    if setup.get("status") != "committed" or setup.get("removed_superseded"):
        raise RuntimeError(f"{ref.short}: the setup run did not clean the clean part as expected: {setup}")
    checkpoint = _property(spark, ref, CHECKPOINT_PROPERTY)
    updated = F.abs(F.xxhash64("id")) % F.lit(clean)
    is_late = (F.abs(F.xxhash64("id", F.lit("late"))) % 10_000) < int(late.share * 10_000)
    if late.window < 1.0:
        recent = F.lit(clean - 1) - F.abs(F.xxhash64("id", F.lit("recent"))) % F.lit(max(1, int(late.window * clean)))
        updated = F.when(is_late, recent).otherwise(updated)
    version = F.when(is_late, F.lit(VERSION_BASE - 1) + updated).otherwise(F.lit(VERSION_BASE) + F.col("id"))
    spark.range(clean, clean + dirty).select(*shape.columns(updated, F.col("id"), version, value, F.col("id") % 10 == 0)) \
        .sortWithinPartitions("partition", "offset").writeTo(ref.sql()).append()
    snapshot = spark.sql(f"SELECT snapshot_id FROM {ref.meta('refs')} WHERE name = 'main'").collect()[0][0]
    return Built(ref, shape, clean, dirty, snapshot, checkpoint, time.time() - t0 - setup_s, setup_s)


def _property(spark, ref: TableRef, name: str) -> str:
    return spark.sql(f"SHOW TBLPROPERTIES {ref.sql()} ('{name}')").collect()[0]["value"]


def reset(spark, cfg: LakecleanerConfig, built: Built, strategy: Shape) -> None:
    """Undo a timed run: the dirty snapshot, the setup run's checkpoint, ``strategy``'s properties."""
    ref = built.ref
    spark.sql(f"CALL `{cfg.catalog.name}`.system.rollback_to_snapshot('{ref.short}', {built.snapshot})")
    props = {**strategy.properties, CHECKPOINT_PROPERTY: built.checkpoint}
    assignments = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ({assignments})")


def naive_rewrite(spark, built: Built, out: str) -> None:
    """What a user writes without lakecleaner: each key's winner by version, then offset, over the
    whole table, written as a new table."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    shape = built.shape
    spark.sql(f"DROP TABLE IF EXISTS {out} PURGE")
    order = [F.col(shape.version_column).desc()] + ([F.col("offset").desc()] if shape.version_column != "offset" else [])
    w = Window.partitionBy(*shape.key_columns).orderBy(*order)
    latest = spark.table(built.ref.sql()).withColumn("rn", F.row_number().over(w)).where("rn = 1").drop("rn")
    latest.writeTo(out).using("iceberg").partitionedBy(F.col("partition")).create()


def check_against_model(spark, cfg: LakecleanerConfig, built: Built, now_ms: int, stats: dict) -> dict:
    """The table after a run must hold exactly the reference model's survivors of the dirty snapshot
    under the table's current configuration (values reduced to null or not: all the rules read)."""
    from pyspark.sql import functions as F

    tc, _ = load_table_config(spark, cfg, built.ref)
    at_start = spark.sql(f"SELECT * FROM {built.ref.sql()} VERSION AS OF {built.snapshot}")
    value = built.shape.value_column
    rows = at_start.withColumn(value, F.when(F.col(value).isNotNull(), F.lit(""))).collect()
    records = [record_from_row(r.asDict(recursive=True), tc, 0) for r in rows]
    expected = compact(records, Checkpoint.from_json(built.checkpoint), tc, now_ms)
    want = sorted(r.id for r in expected.survivors(records))
    got = sorted((r["partition"], r["offset"]) for r in spark.table(built.ref.sql()).select("partition", "offset").collect())
    figures = {f: (stats.get(f), expected.stats.get(f)) for f in ("removed_superseded", "removed_expired_tombstones")}
    if got != want or any(a != b for a, b in figures.values()):
        raise RuntimeError(f"{built.ref.short} ({tc.strategy}): the run disagrees with the reference model: "
                           f"{len(set(got) - set(want))} survivors too many, {len(set(want) - set(got))} missing, "
                           f"figures (run, model) {figures}")
    return {"survivors": len(got), "removed_superseded": stats.get("removed_superseded")}


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def measure(spark, cfg: LakecleanerConfig, built: Built, strategies: list[Shape], pid: int, repeats: int,
            check: bool) -> dict:
    """Median seconds of the naive rewrite and of each strategy's run on the built snapshot; the jobs
    take turns within each repeat, so a slow spell of the machine hits all of them."""
    out = f"`{cfg.catalog.name}`.`bench`.`naive_out`"
    times: dict[str, list[float]] = {"naive": []}
    peaks: dict[str, int] = {}
    result: dict = {"checks": {}, "phases": {}}
    for i in range(repeats):
        settle(spark)  # each measured job starts from a collected heap, nothing left to flush
        with PeakRss(pid) as mem:
            t0 = time.time()
            naive_rewrite(spark, built, out)
            times["naive"].append(time.time() - t0)
        peaks["naive"] = max(peaks.get("naive", 0), mem.peak)
        if i == 0:
            result["naive_rows"] = spark.table(out).count()
        # The strategies swap places every repeat, so that neither is always the one timed right after
        # the naive rewrite, which leaves the JVM's heap and the page cache in another state.
        for strategy in (strategies if i % 2 == 0 else strategies[::-1]):
            reset(spark, cfg, built, strategy)
            settle(spark)
            now_ms = int(time.time() * 1000) + 1
            with PeakRss(pid) as mem:
                t0 = time.time()
                stats = compact_table(spark, cfg, built.ref.short, now_ms=now_ms)
                times.setdefault(strategy.name, []).append(time.time() - t0)
            peaks[strategy.name] = max(peaks.get(strategy.name, 0), mem.peak)
            result["phases"][strategy.name] = stats.get("phases")
            if i == 0 and check:
                result["checks"][strategy.name] = check_against_model(spark, cfg, built, now_ms, stats)
    spark.sql(f"DROP TABLE IF EXISTS {out} PURGE")
    spark.sql(f"DROP TABLE IF EXISTS {built.ref.sql()} PURGE")
    medians = {job: _median(ts) for job, ts in times.items()}
    return {"records": built.clean + built.dirty, "dirty": built.dirty, "build_s": round(built.build_s, 2),
            "setup_run_s": round(built.setup_run_s, 2), "median_s": medians,
            "runs_s": {job: [round(t, 2) for t in ts] for job, ts in times.items()},
            "over_naive": {job: round(medians[job] / medians["naive"], 3) for job in medians if job != "naive"},
            "peak_rss_mb": {job: p // 2**20 for job, p in peaks.items()}, **result}


# ---------------------------------------------------------------- the memory bound, in a child process
@dataclass
class TreeRss:
    """Peak RSS of a child process and of the JVM it starts, sampled every 0.1 s."""

    proc: psutil.Process
    peak_python: int = 0
    peak_jvm: int = 0
    peak_total: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        while not self._stop.wait(0.1):
            try:
                py = self.proc.memory_info().rss
                jvm = sum(c.memory_info().rss for c in self.proc.children(recursive=True))
            except psutil.Error:
                continue
            self.peak_python, self.peak_jvm = max(self.peak_python, py), max(self.peak_jvm, jvm)
            self.peak_total = max(self.peak_total, py + jvm)


def memory_bound(spark, cfg: LakecleanerConfig, warehouse: str, keys: int, driver_memory: str,
                 max_records: int | None, strategies: list[Shape]) -> list[dict]:
    """A table of ``keys`` distinct keys plus 10% updates, all dirty, each strategy compacting it in a
    child process with ``driver_memory``; the table is put back between strategies."""
    from pyspark.sql import functions as F

    ref = create_compacted_table(spark, cfg, f"bench.mem_{keys}", {
        "compaction.retain.log.end.record": "true", **CDC_COLUMN.properties,
        **({"compaction.max.records.per.run": str(max_records)} if max_records else {})}, schema=CDC_SCHEMA)
    t0 = time.time()
    updates = keys // 10
    ids = F.col("id")
    key_id = F.when(ids < keys, ids).otherwise(F.abs(F.xxhash64("id")) % F.lit(keys))
    spark.range(0, keys + updates).select(*_cdc_columns(key_id, ids, F.lit(VERSION_BASE) + ids, short_value(),
                                                         (ids >= keys) & (ids % 10 == 0))) \
        .sortWithinPartitions("partition", "offset").writeTo(ref.sql()).append()
    build_s = time.time() - t0
    snapshot = spark.sql(f"SELECT snapshot_id FROM {ref.meta('refs')} WHERE name = 'main'").collect()[0][0]
    results = []
    for strategy in strategies:
        spark.sql(f"CALL `{cfg.catalog.name}`.system.rollback_to_snapshot('{ref.short}', {snapshot})")
        spark.sql(f"ALTER TABLE {ref.sql()} UNSET TBLPROPERTIES IF EXISTS ('{CHECKPOINT_PROPERTY}')")
        spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('compaction.strategy' = '{strategy.name}')")
        cmd = [sys.executable, __file__, "--child-compact", ref.short, "--warehouse", warehouse,
               "--memory-driver", driver_memory]
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rss = TreeRss(psutil.Process(proc.pid))
        sampler = threading.Thread(target=rss.sample, daemon=True)
        sampler.start()
        out, err = proc.communicate()
        rss._stop.set()
        sampler.join()
        lines = [ln[len(CHILD_MARKER):] for ln in out.splitlines() if ln.startswith(CHILD_MARKER)]
        child = json.loads(lines[-1]) if lines else {"status": "failed", "error": err.strip().splitlines()[-5:]}
        spark.sql(f"REFRESH TABLE {ref.sql()}")  # the child committed: drop this session's cached metadata
        results.append({"strategy": strategy.name, "distinct_keys": keys, "records": keys + updates,
                        "build_s": round(build_s, 2), "driver_memory": driver_memory,
                        "max_records_per_run": max_records, "exit_code": proc.returncode,
                        "wall_s": round(time.time() - t0, 2), "peak_rss_jvm_mb": rss.peak_jvm // 2**20,
                        "peak_rss_python_mb": rss.peak_python // 2**20, "peak_rss_total_mb": rss.peak_total // 2**20,
                        **child})
        print(json.dumps(results[-1]), flush=True)
    spark.sql(f"DROP TABLE IF EXISTS {ref.sql()} PURGE")
    return results


def child_compact(table: str, warehouse: str, driver_memory: str) -> int:
    """One compaction in this process, with ``driver_memory``: prints its figures after CHILD_MARKER."""
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=warehouse),
                            spark=SparkConfig(master="local[2]", driver_memory=driver_memory))
    spark = get_spark(cfg, "lakecleaner-bench-memory")
    max_heap = int(spark._jvm.java.lang.Runtime.getRuntime().maxMemory())
    t0 = time.time()
    try:
        stats = compact_table(spark, cfg, table, now_ms=int(time.time() * 1000))
        figures = {f: stats.get(f) for f in ("status", "dirty_records_in_run", "records_read", "removed_superseded",
                                              "checkpoint", "phases")}
    except Exception as exc:  # noqa: BLE001 - the parent reports it
        figures = {"status": "failed", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:500]}"}
    figures.update(run_s=round(time.time() - t0, 2), jvm_max_heap_mb=max_heap // 2**20)
    print(CHILD_MARKER + json.dumps(figures), flush=True)
    spark.stop()
    return 0 if figures["status"] == "committed" else 1


# ---------------------------------------------------------------- report
def report(results: dict, late: LateShape) -> None:
    print(f"\nlate records: {late.share:.0%} of the dirty part, window {late.window}, clean part in {late.batches} "
          f"append(s)")
    print("\n| series | records | dirty | naive s | strategy s | offset s | strategy/naive | strategy/offset | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    replay = (late.window, late.batches) == LATE_SHAPES["replay"]  # the shape the targets are set on
    targets = {"column": "column <= 0.25x naive, <= 1.3x offset", "timestamp": "(as column)"} if replay else \
        {"column": "(targets: replay shape)", "timestamp": "(targets: replay shape)"}
    targets["values"] = "offset <= 0.15x naive"
    for name in ("column", "timestamp", "values"):
        r = results.get(name)
        if not r:
            continue
        m, strat = r["median_s"], ("offset" if name == "values" else name)
        vs_offset, offset_s = (round(m[strat] / m["offset"], 3), m["offset"]) if name != "values" else ("", "")
        print(f"| {name} | {r['records']:,} | {r['dirty']:,} | {m['naive']} | {m[strat]} | {offset_s} | "
              f"{r['over_naive'][strat]} | {vs_offset} | {targets[name]} |")
    for m in results.get("memory", []):
        print(f"\nmemory bound ({m['strategy']}): {m['distinct_keys']:,} distinct dirty keys, driver {m['driver_memory']} "
              f"(max heap {m.get('jvm_max_heap_mb')} MB): {m['status']} in {m.get('run_s')} s, "
              f"{m.get('dirty_records_in_run')} records in the run; peak RSS JVM {m['peak_rss_jvm_mb']} MB, "
              f"Python {m['peak_rss_python_mb']} MB")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", default="column,timestamp,values,memory")
    parser.add_argument("--records", type=int, default=20_000_000, help="records of the column/timestamp tables")
    parser.add_argument("--value-records", type=int, default=5_000_000, help="records of the 1 KB-value table")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--memory-keys", type=int, default=10_000_000)
    parser.add_argument("--memory-driver", default="1g")
    parser.add_argument("--memory-max-records", type=int, default=None,
                        help="compaction.max.records.per.run of the memory table (partial progress)")
    parser.add_argument("--memory-strategies", default="column,offset")
    parser.add_argument("--dirty", type=float, default=0.05)
    parser.add_argument("--late", type=float, default=0.03, help="share of dirty records with a late lower version")
    parser.add_argument("--late-shape", choices=sorted(LATE_SHAPES), default="replay",
                        help="replay: a CDC table's late records (the targets' shape); adversarial: a stress shape")
    parser.add_argument("--late-window", type=float, default=None,
                        help="late records replay changes of the newest this share of keys (1.0: any key); "
                             "overrides the shape's")
    parser.add_argument("--clean-batches", type=int, default=None,
                        help="appends the clean part lands in; overrides the shape's")
    parser.add_argument("--repeats", type=int, default=4,
                        help="timings per job (even: each strategy as often right after the naive rewrite as not); "
                             "the median is reported")
    parser.add_argument("--check-max", type=int, default=1_000_000,
                        help="compare with the reference model at up to this many records")
    parser.add_argument("--warehouse", default=str(RESULTS / "warehouse"))
    parser.add_argument("--child-compact", metavar="TABLE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_compact:
        return child_compact(args.child_compact, args.warehouse, args.memory_driver)
    series = args.series.split(",")
    if unknown := set(series) - {"column", "timestamp", "values", "memory"}:
        parser.error(f"unknown series {sorted(unknown)}")
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=args.warehouse),
                            spark=SparkConfig(master="local[2]", driver_memory="4g"))
    spark = get_spark(cfg, "lakecleaner-bench-cdc")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{cfg.catalog.name}`.`bench`")
    pid = jvm_pid(spark)
    results: dict = {"args": vars(args)}
    window, batches = LATE_SHAPES[args.late_shape]
    late = LateShape(args.late, window if args.late_window is None else args.late_window,
                     batches if args.clean_batches is None else args.clean_batches)
    results["late_shape"] = asdict(late)  # as built: --late-window or --clean-batches may override the named shape
    for name, shape in (("column", CDC_COLUMN), ("timestamp", KAFKA_TIMESTAMP)):
        if name in series:
            dirty = int(args.records * args.dirty)
            built = build(spark, cfg, f"bench.{name}_{args.records}", shape, args.records - dirty, dirty, late,
                          short_value())
            results[name] = measure(spark, cfg, built, [shape, KAFKA_OFFSET], pid, args.repeats,
                                    args.records <= args.check_max)
            print(json.dumps({"series": name, **results[name]}), flush=True)
    if "values" in series:
        dirty = int(args.value_records * args.dirty)
        built = build(spark, cfg, f"bench.values_{args.value_records}", KAFKA_OFFSET, args.value_records - dirty,
                      dirty, late, realistic_value(args.value_bytes))
        results["values"] = measure(spark, cfg, built, [KAFKA_OFFSET], pid, args.repeats,
                                    args.value_records <= args.check_max)
        print(json.dumps({"series": "values", **results["values"]}), flush=True)
    if "memory" in series:
        by_name = {s.name: s for s in (CDC_COLUMN, KAFKA_TIMESTAMP, KAFKA_OFFSET)}
        results["memory"] = memory_bound(spark, cfg, args.warehouse, args.memory_keys, args.memory_driver,
                                         args.memory_max_records,
                                         [by_name[s] for s in args.memory_strategies.split(",")])
    spark.stop()
    report(results, late)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"cdc-{int(time.time())}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"\nfigures: {path}")
    failed = [m["strategy"] for m in results.get("memory", []) if m.get("status") != "committed"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
