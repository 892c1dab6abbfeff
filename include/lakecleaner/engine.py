"""One compaction run of one Iceberg table, on Spark: the log cleaner's two phases as set operations.

Phase 1: read only the dirty part of the table (records past the checkpoint, pruned by Iceberg
file statistics) and find the run's range (old enough, within the budget, a prefix of each
partition in offset order). Phase 2 has two forms:
- offset strategy: Kafka's own cleaner. An offset map (each run key's highest offset in the run)
  and one MERGE deleting every record of those keys below it; the MERGE's scan is the only read of
  the clean part, since a run's record always beats the cleaned records of its key. When the whole
  dirty part is the run (nothing too young, within budget), phase 1 builds the map directly;
- versioned strategies (and runs with bad rows or a retained log end): look the run's keys up in
  the clean part, rank every candidate by the strategy, and delete the losers, expired tombstones
  and bad records by identity with one MERGE.
Nothing is held in driver memory but per-partition figures and, below BROADCAST_ROWS_MAX rows, the
broadcast side of a join; joins, aggregations and windows spill, so memory is bounded.

The table is read at one pinned snapshot. The MERGE writes position deletes (merge-on-read), so
clean data files are never rewritten and every record keeps the data file its append created: the
commit time of that append is the record's exact append time (rule 3).
"""
from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
import uuid
from dataclasses import dataclass
from functools import reduce
from typing import Any

from .append_times import read_append_times
from .config import (
    CHECKPOINT_PROPERTY, IDENT, ConfigError, LakecleanerConfig, TableConfig, is_compacted, resolve_table,
)
from .rules import (
    QUARANTINE_NULL_KEY, QUARANTINE_NULL_OFFSET, QUARANTINE_NULL_PARTITION, REASON_EXPIRED_TOMBSTONE,
    REASON_SUPERSEDED, Checkpoint, CheckpointError, allot_budget, bad_records_at_log_end, log_ends, run_ends,
)

log = logging.getLogger(__name__)

# Up to this many keys (or removals) are broadcast to the scan of the clean part instead of
# shuffling the clean part: the clean side then streams at scan speed. Above it the run falls back
# to a shuffle join (with Spark's runtime Bloom filter), so memory stays bounded for any key count.
BROADCAST_ROWS_MAX = 2_000_000
LONG_MIN = -(2**63)
SPLIT_SIZE_MIN = 2**20  # the dirty scan's splits go no smaller

# Table properties the MERGE relies on. Merge-on-read keeps files (and append times) intact and
# makes a run's writes proportional to what it removes; snapshot isolation lets appenders commit
# while a run is in flight (a run deletes only rows of its pinned snapshot: the offset-map run
# first checks that no file appended since may hold an offset inside its range).
LAYOUT_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.isolation-level": "snapshot",
}


class CompactionError(RuntimeError):
    """A run could not proceed. The message names the table and the reason; nothing was committed
    unless the message says so."""

    def __init__(self, table: str, problem: str):
        self.table = table
        super().__init__(f"table {table}: {problem}")


@dataclass(frozen=True)
class TableRef:
    catalog: str
    namespace: str
    name: str

    @classmethod
    def parse(cls, table: str, default_catalog: str) -> "TableRef":
        parts = table.split(".")
        if len(parts) == 2:
            parts = [default_catalog, *parts]
        if len(parts) != 3 or not all(IDENT.fullmatch(p) for p in parts):
            raise ConfigError(table, "table", table,
                              "expected namespace.table or catalog.namespace.table, letters/digits/_ only")
        if parts[0] != default_catalog:
            raise ConfigError(table, "table", table, f"catalog {parts[0]!r} is not the configured {default_catalog!r}")
        return cls(*parts)

    @property
    def short(self) -> str:
        return f"{self.namespace}.{self.name}"

    def sql(self, suffix: str = "") -> str:
        name = self.name + suffix
        return f"`{self.catalog}`.`{self.namespace}`.`{name}`"

    def meta(self, metadata_table: str) -> str:
        return f"{self.sql()}.`{metadata_table}`"


def q(name: str) -> str:
    return f"`{name}`"


def load_table_config(spark, cfg: LakecleanerConfig, ref: TableRef) -> tuple[TableConfig, dict[str, str]]:
    try:
        _iceberg_table(spark, ref)  # refreshed: the checkpoint and the snapshot read next must agree
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}
    except Exception as exc:  # noqa: BLE001 - any failure to load is reported with the table's name
        raise CompactionError(ref.short, f"cannot load table: {_first_line(exc)}") from exc
    if not is_compacted(props):
        raise ConfigError(ref.short, "cleanup.policy", props.get("cleanup.policy"), "not a compacted table (needs compact)")
    columns = {f.name: f.dataType.simpleString() for f in spark.table(ref.sql()).schema.fields}
    return resolve_table(ref.short, props, columns, cfg.defaults), props


def _first_line(exc: BaseException) -> str:
    """A one-line reason. For a Spark (Java) failure, the root cause: py4j's own first line only
    says which call failed ('An error occurred while calling o223.collectToPython')."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            while java.getCause() is not None and java.getCause() != java:
                java = java.getCause()
            return str(java.toString()).splitlines()[0][:500]
        except Exception:  # noqa: BLE001 - fall back to the Python text
            pass
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]


def current_snapshot(spark, ref: TableRef, refresh: bool = True) -> int | None:
    snap = _iceberg_table(spark, ref, refresh).currentSnapshot()
    return None if snap is None else snap.snapshotId()


def snapshot_summary(spark, ref: TableRef) -> dict[str, str]:
    """The refreshed table's current snapshot summary (Iceberg's running totals: total-records,
    total-position-deletes, total-files-size, ...); {} for a table without snapshots. No Spark job."""
    snap = _iceberg_table(spark, ref).currentSnapshot()
    return {} if snap is None else {str(k): str(v) for k, v in snap.summary().items()}


def _iceberg_table(spark, ref: TableRef, refresh: bool = True):
    """The table's Iceberg (Java) object, refreshed from the catalog. Spark's Iceberg catalog caches
    tables (cache-enabled, 30 s) and hands this same object to later reads, so without the refresh a
    commit by another process could stay unseen by the checks before our commit. One catalog call
    also costs less than querying the refs and snapshots metadata tables (0.2 s of a run)."""
    table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, ref.sql())
    if refresh:
        table.refresh()
    return table


class _Frames:
    """Column expressions for one table's roles, so every phase speaks of p, o, key, version."""

    def __init__(self, tc: TableConfig):
        from pyspark.sql import functions as F

        self.tc = tc
        self.p_raw = F.col(q(tc.partition_column)) if tc.partition_column else None
        self.o_raw = F.col(q(tc.offset_column))
        self.k_raw = [F.col(q(k)) for k in tc.key_columns]
        self.p = (self.p_raw.cast("bigint") if self.p_raw is not None else F.lit(0).cast("bigint"))
        self.o = self.o_raw.cast("bigint")
        self.key = F.struct(*[c.alias(f"k{i}") for i, c in enumerate(self.k_raw)])
        value_null = F.col(q(tc.value_column)).isNull() if tc.value_column else F.lit(False)
        if tc.tombstone_column:  # KIP-87: the flag decides where present
            self.tomb = F.coalesce(F.col(q(tc.tombstone_column)), value_null)
            self.tomb_pushdown = F.col(q(tc.tombstone_column)) | (F.col(q(tc.tombstone_column)).isNull() & value_null)
        else:
            self.tomb = value_null
            self.tomb_pushdown = value_null
        self.version, self.has_version = self._version(F)
        null_key = reduce(lambda a, b: a | b, [c.isNull() for c in self.k_raw])
        bad = [(self.o_raw.isNull(), QUARANTINE_NULL_OFFSET)]
        if self.p_raw is not None:
            bad.append((self.p_raw.isNull(), QUARANTINE_NULL_PARTITION))
        bad.append((null_key, QUARANTINE_NULL_KEY))
        self.bad = reduce(lambda a, b: a | b, [c for c, _ in bad])
        reason = F.lit(None).cast("string")
        for cond, text in reversed(bad):
            reason = F.when(cond, F.lit(text)).otherwise(reason)
        self.bad_reason = reason
        self.match = [("m_o", self.o_raw)] + ([("m_p", self.p_raw)] if self.p_raw is not None else []) + [
            (f"m_k{i}", c) for i, c in enumerate(self.k_raw)]

    def _version(self, F):
        tc = self.tc
        if tc.strategy == "offset":
            return F.lit(0).cast("bigint"), F.lit(True)
        if tc.strategy == "timestamp":
            v = F.col(q(tc.timestamp_column))
            return v, v.isNotNull()
        if tc.strategy == "column":
            v = F.col(q(tc.version_column))
            return v, v.isNotNull()
        # header: last occurrence of the exactly-named header, 8-byte big-endian signed long
        matching = F.filter(F.col(q(tc.headers_column)), lambda h: h["key"] == F.lit(tc.version_header))
        raw = F.try_element_at(matching, F.lit(-1))["value"]
        valid = raw.isNotNull() & (F.length(raw) == 8)
        unsigned = F.conv(F.hex(raw), 16, 10).cast("decimal(20,0)")
        # two's complement by hand: Spark has no binary-to-long cast (constants too big for lit())
        signed = F.when(unsigned >= F.expr(f"CAST('{2**63}' AS DECIMAL(20,0))"),
                        unsigned - F.expr(f"CAST('{2**64}' AS DECIMAL(21,0))")).otherwise(unsigned)
        return F.when(valid, signed.cast("bigint")), valid

    def narrow(self, df, extra=(), with_tomb: bool = True):
        """The columns the rules need, plus the raw key/offset/partition values the MERGE matches on.
        The clean-part lookup leaves the tombstone out: deciding it reads the value column, the
        widest one, for the whole clean part; expired clean tombstones come from their own scan."""
        from pyspark.sql import functions as F

        tomb = self.tomb if with_tomb else F.lit(False)
        return df.select(self.p.alias("p"), self.o.alias("o"), self.key.alias("key"), tomb.alias("tomb"),
                         self.version.alias("ver"), self.has_version.alias("has_ver"),
                         *[c.alias(n) for n, c in self.match], *extra)


def _dirty_scan(spark, ref: TableRef, snapshot: int, fr: _Frames, ckpt_offsets: dict, files):
    """The records past the checkpoint (and its predicate): pushed down to Iceberg so that only the
    files that may hold such records are planned, in splits spread over the cores."""
    from pyspark.sql import functions as F

    pred = _partition_pred(F, fr.p_raw, fr.o_raw, ckpt_offsets, ">", True)
    split_size = _dirty_split_size(files, ckpt_offsets, fr.p_raw is None, fr.tc.read_split,
                                   spark.sparkContext.defaultParallelism)
    scan = spark.read.option("snapshot-id", snapshot).option("split-size", split_size).table(ref.sql())
    return pred, scan.where(pred & ~fr.bad)


def _partition_pred(F, p_col, o_col, bounds: dict, op: str, unbounded_default: bool):
    """OR over partitions of (p = X AND o <op> bound); partitions absent from bounds take the default."""
    if not bounds:
        return F.lit(unbounded_default)
    if None in bounds:  # unpartitioned table
        return o_col > F.lit(bounds[None]) if op == ">" else o_col <= F.lit(bounds[None])
    terms = []
    for p, bound in bounds.items():
        cmp = o_col > F.lit(bound) if op == ">" else o_col <= F.lit(bound)
        terms.append((p_col == F.lit(p)) & cmp)
    pred = reduce(lambda a, b: a | b, terms)
    if unbounded_default:
        pred = pred | _outside(F, p_col, bounds)
    return pred


def _outside(F, p_col, values):
    """p not in values, as ranges around runs of consecutive values rather than NOT IN: Iceberg's
    metrics evaluator can never rule a file out on NOT IN, so with it every clean data file would
    be planned into the dirty scan (and have its footer read) however far the checkpoint is."""
    runs: list[list[int]] = []
    for v in sorted(values):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    terms = [p_col < F.lit(runs[0][0]), p_col > F.lit(runs[-1][1])]
    terms += [(p_col > F.lit(a[1])) & (p_col < F.lit(b[0])) for a, b in zip(runs, runs[1:])]
    return reduce(lambda a, b: a | b, terms)


def _small_df(spark, rows: dict, value_name: str):
    return spark.createDataFrame([(int(k if k is not None else 0), int(v)) for k, v in rows.items()],
                                 f"p bigint, {value_name} bigint")


def compact_table(spark, cfg: LakecleanerConfig, table: str, now_ms: int | None = None, dry_run: bool = False,
                  run_id: str | None = None) -> dict[str, Any]:
    """Run one compaction of ``table``; returns the run's statistics (also written to run history)."""
    ref = TableRef.parse(table, cfg.catalog.name)
    run_id = run_id or uuid.uuid4().hex[:12]
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    started = time.time()
    stats: dict[str, Any] = {"table": ref.short, "run_id": run_id, "now_ms": now_ms, "dry_run": dry_run}
    try:
        stats.update(_compact(spark, cfg, ref, now_ms, dry_run, run_id))
        stats["status"] = "dry_run" if dry_run else "committed"
    except Exception as exc:  # noqa: BLE001 - record the failure, then fail loudly
        if isinstance(exc, CommittedRunError):  # the history shows the commit and what it removed
            stats.update(exc.result)
        stats.update(status="committed" if isinstance(exc, CommittedRunError) else "failed",
                     error=str(exc) if isinstance(exc, (CompactionError, ConfigError))
                     else f"table {ref.short}: {type(exc).__name__}: {_first_line(exc)}")
        stats["duration_ms"] = int((time.time() - started) * 1000)
        _record_history(spark, cfg, stats)
        if isinstance(exc, (CompactionError, ConfigError)):
            raise
        raise CompactionError(ref.short, f"{type(exc).__name__}: {_first_line(exc)}") from exc
    stats["duration_ms"] = int((time.time() - started) * 1000)
    _record_history(spark, cfg, stats)
    return stats


def _fail_point(name: str) -> None:
    """Crash injection for tests: LAKECLEANER_FAIL_AT=<name> makes the run fail at that point;
    LAKECLEANER_FAIL_AT=kill:<name> kills the whole process there (SIGKILL: nothing runs after)."""
    wanted = os.environ.get("LAKECLEANER_FAIL_AT")
    if wanted == name:
        raise RuntimeError(f"injected failure at {name}")
    if wanted == f"kill:{name}":
        os.kill(os.getpid(), signal.SIGKILL)


def _compact(spark, cfg: LakecleanerConfig, ref: TableRef, now_ms: int, dry_run: bool, run_id: str) -> dict:
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    phase = _Phases()
    tc, props = load_table_config(spark, cfg, ref)
    result: dict[str, Any] = {"strategy": tc.strategy, "delete_retention_ms": tc.delete_retention_ms}
    if not dry_run:
        _ensure_layout(spark, ref, props)
    snapshot = current_snapshot(spark, ref, refresh=False)  # the version the properties came from
    try:
        ckpt = Checkpoint.from_json(props.get(CHECKPOINT_PROPERTY))
    except CheckpointError as exc:
        raise CompactionError(ref.short, f"{exc} ({CHECKPOINT_PROPERTY}; fix or unset it to clean the table from "
                                         f"its start); nothing committed") from None
    zero = dict(records_read=0, records_kept=0, removed_superseded=0, removed_expired_tombstones=0, quarantined=0,
                anomalous=0, dirty_records_in_run=0, bytes_read=0, bytes_written=0, files_rewritten=0,
                delete_files_written=0, expired_tombstone_latest_cleaned_ms=None, snapshot_id=snapshot, committed_snapshot_id=None,
                checkpoint=_ckpt_summary(ckpt))
    if snapshot is None:
        return {**result, **zero}
    fr = _Frames(tc)
    unpartitioned = tc.partition_column is None
    # Internally an unpartitioned table is partition 0; the checkpoint says None.
    to_int = lambda d: {(0 if p is None else p): v for p, v in d.items()}  # noqa: E731
    from_int = lambda d: {(None if unpartitioned else p): v for p, v in d.items()}  # noqa: E731
    base = spark.read.option("snapshot-id", snapshot).table(ref.sql())
    files = _data_files(spark, ref, tc, snapshot, read_append_times(cfg, ref.short))
    ckpt = _reset_past_log_end(ref, tc, ckpt, files, result)
    ckpt_offsets = ckpt.offsets if not unpartitioned else {None: ckpt.offsets[None]} if None in ckpt.offsets else {}
    cutoff = now_ms - tc.min_compaction_lag_ms
    phase("setup_s")
    held: list = []  # persisted frames, released when the run ends

    def hold(df):
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        held.append(df)
        return df

    try:
        # Rule 7: bad records, anywhere. Iceberg's null counts say where none can be: no scan then.
        retained = to_int(ckpt.retained)
        bad_rows = hold(base.where(fr.bad).select("*", fr.bad_reason.alias("quarantine_reason")))
        maybe_bad = any(r["identity_nulls_unknown"] or r["identity_nulls"] for r in files)
        bad = _bad_figures(fr, bad_rows, retained) if maybe_bad else []
        n_bad = sum(r["n"] for r in bad)
        quarantined = n_bad - sum(r["copied_before"] for r in bad)  # copied by this run
        bad_ends = {r["p"]: r["end"] for r in bad if r["p"] is not None and r["end"] is not None}
        phase("bad_rows_s")
        # Dirty part: past the checkpoint, pushed down to Iceberg so clean files are skipped. Records
        # are dated by their data file only when some file is young enough for the lag to matter.
        dirty_pred, dirty_scan = _dirty_scan(spark, ref, snapshot, fr, ckpt_offsets, files)
        offset_map_run = not tc.versioned and not retained and not n_bad
        any_young = any(r["appended_at"] > cutoff for r in files)
        if any_young:
            file_times = spark.createDataFrame([(r["_file"], r["appended_at"]) for r in files],
                                               "_file string, appended_at bigint")
            dirty = (fr.narrow(dirty_scan.select("*", "_file"), extra=[F.col("_file")])
                     .join(F.broadcast(file_times), "_file", "left").drop("_file"))
            young = F.coalesce(F.col("appended_at"), F.lit(0)) > cutoff
        else:
            dirty, young = fr.narrow(dirty_scan), F.lit(False)
        anom = F.sum(F.col("anom").cast("int")).alias("anom")
        # Not persisted: Iceberg prunes a rescan to the dirty files, which costs less than caching.
        dirty = dirty.withColumn("anom", ~F.col("has_ver") if tc.versioned else F.lit(False))

        # The common offset-strategy run: no record is younger than the lag, so the run is the whole
        # dirty part unless it is over budget. Its offset map is then built straight from the dirty
        # part, and summing the map per partition gives the figures the run needs: one aggregation
        # of the dirty part instead of two.
        omap, omap_sums, per_p = None, None, None
        if offset_map_run and not any_young:
            omap = hold(_offset_map(dirty))
            omap_sums = _offset_map_sums(omap)
            if sum(r["n"] for r in omap_sums) > tc.max_records_per_run:
                omap.unpersist()  # a partial run: its map is built from its range below
                omap = omap_sums = None
            else:  # nothing young, nothing anomalous (no versions under the offset strategy)
                per_p = [{**r, "young_min": None, "anom": 0} for r in omap_sums]
        # Rule 3: per partition, stop at the first record younger than the lag; then the budget.
        if per_p is None:
            per_p = dirty.groupBy("p").agg(F.min(F.when(young, F.col("o"))).alias("young_min"),
                                           F.max("o").alias("end"), F.count("*").alias("n"), anom).collect()
        young_min = {r["p"]: r["young_min"] for r in per_p if r["young_min"] is not None}
        log_end = {r["p"]: r["end"] for r in per_p}
        eligible, by_p = dirty, per_p
        if young_min:
            eligible = hold(dirty.join(F.broadcast(_small_df(spark, young_min, "young_min")), "p", "left").where(
                F.col("young_min").isNull() | (F.col("o") < F.col("young_min"))).drop("young_min"))
            by_p = eligible.groupBy("p").agg(F.max("o").alias("end"), F.count("*").alias("n"), anom).collect()
        counts = {r["p"]: int(r["n"]) for r in by_p if r["n"]}
        share = allot_budget(counts, tc.max_records_per_run)
        taken = [p for p, n in share.items() if n > 0]
        cut = {p: n for p, n in share.items() if 0 < n < counts[p]}
        ends = {r["p"]: r["end"] for r in by_p if r["p"] in taken and r["p"] not in cut}
        anomalous = sum(int(r["anom"] or 0) for r in by_p if r["p"] in taken and r["p"] not in cut)
        in_run = eligible
        if cut:
            ranked = (eligible.where(F.col("p").isin(list(cut))).select("p", "o")
                      .withColumn("rn", F.row_number().over(Window.partitionBy("p").orderBy("o"))))
            cut_rows = ranked.join(F.broadcast(_small_df(spark, cut, "rn")), ["p", "rn"]).collect()
            ends.update({r["p"]: r["o"] for r in cut_rows})
            in_run = in_run.join(F.broadcast(_small_df(spark, {p: ends[p] for p in cut}, "cut_end")), "p", "left").where(
                F.col("cut_end").isNull() | (F.col("o") <= F.col("cut_end"))).drop("cut_end")
        if len(taken) < len(counts):
            in_run = in_run.where(F.col("p").isin(taken))
        if cut or len(taken) < len(counts):
            in_run = hold(in_run)
        if cut:
            anomalous += int(in_run.where(F.col("p").isin(list(cut))).agg(anom).collect()[0]["anom"] or 0)
        in_run = in_run.drop("appended_at")
        n_run = sum(share.values())
        phase("dirty_s")

        clean_pred = ~dirty_pred & ~fr.bad if ckpt_offsets else F.lit(False)
        clean = fr.narrow(base.where(clean_pred), with_tomb=False)
        expired_through = {}
        for p in (ckpt_offsets or {}):
            h = ckpt.expired_through(p, now_ms, tc.delete_retention_ms)
            if h is not None:
                expired_through[0 if p is None else p] = h
        expired_pred = _partition_pred(F, F.col("p"), F.col("o"), expired_through, "<=", False)
        # Clean tombstones past their horizon, from a scan Iceberg prunes by null counts / flag bounds.
        expired_clean = None
        if expired_through:
            expired_clean = hold(fr.narrow(base.where(clean_pred & fr.tomb_pushdown)).where(F.col("tomb") & expired_pred))
        # Log end of partitions with no dirty record (only needed where something there may go), then
        # of every partition with bad records: those count too (rule 6 holds for a keyless record).
        idle = set(retained) | set(expired_through) | set(bad_ends)
        idle -= set(log_end)
        if idle and tc.retain_log_end_record:
            for r in clean.where(F.col("p").isin(list(idle))).groupBy("p").agg(F.max("o").alias("m")).collect():
                log_end[r["p"]] = r["m"]
        for p, end in bad_ends.items():
            log_end[p] = max(end, log_end.get(p, end))
        kept_bad = bad_records_at_log_end(bad_ends, log_end, tc.retain_log_end_record)
        dirty_parts = {r["p"] for r in per_p}
        ends = run_ends(ends, kept_bad, {p for p in kept_bad if p not in young_min and p not in cut
                                         and (p in taken or p not in dirty_parts)})
        log_end_df = F.broadcast(_small_df(spark, log_end or {0: -1}, "log_end"))
        protected = F.lit(tc.retain_log_end_record) & (F.col("o") == F.col("log_end"))
        ctx = _RunContext(spark, ref, tc, fr, snapshot, hold, in_run, n_run, ends, clean,
                          expired_clean=expired_clean, log_end_df=log_end_df, protected=protected)

        # Phase 2. Under the offset strategy a run's record beats every cleaned record of its key, so
        # Kafka's own algorithm applies: an offset map of the run's keys, and one MERGE that reads the
        # table once. Otherwise the cleaned records of the run's keys are looked up and ranked.
        if offset_map_run:
            plan = _offset_map_plan(ctx, omap, omap_sums)
            bytes_read = sum(f["size"] for f in files)  # its MERGE reads every file (keys and offsets)
        else:
            plan = _ranked_plan(ctx, retained, bad_rows.where(~_at(F, fr.p, fr.o, kept_bad)) if n_bad else None,
                                n_bad - len(kept_bad))
            bytes_read = _bytes_scanned(files, ckpt_offsets, unpartitioned)
        phase("plan_s")

        expired = plan.expired
        latest_cleaned = None  # see the run history's expired_tombstone_latest_cleaned_ms
        if plan.expired_by_partition:
            latest_cleaned = max(ckpt.first_cleaned_at(None if unpartitioned else p, o)
                                 for p, o in plan.expired_by_partition.items())
        new_ckpt = ckpt.advanced(now_ms, from_int(ends), from_int({**plan.new_retained, **kept_bad}),
                                 tc.delete_retention_ms, plan.new_tombstones)
        result.update(
            quarantined=quarantined, expired_tombstone_latest_cleaned_ms=latest_cleaned, anomalous=anomalous,
            dirty_records_in_run=n_run, bytes_read=bytes_read, bytes_written=0,
            files_rewritten=0, delete_files_written=0, snapshot_id=snapshot,
            committed_snapshot_id=None, checkpoint=_ckpt_summary(new_ckpt))
        if dry_run:
            superseded, read = plan.figures(None)
        else:
            current, appends = _check_no_concurrent_cleaner(spark, ref, snapshot)
            plan.guard(appends, current)
            if quarantined:  # not those an earlier run copied and kept as the log end
                _quarantine(spark, cfg, ref, bad_rows.where(~_at(F, fr.p, fr.o, retained)), run_id, now_ms)
            _fail_point("after_quarantine")
            phase("pre_merge_s")
            try:
                merged = plan.commit(run_id)
            except Exception as exc:
                raise _conflict_error(ref, exc) or exc
            try:  # past the MERGE: a failure must say it committed, and the run is recorded as such
                commit = merged and _committed_snapshot(spark, ref, current)
                phase("merge_s")
                superseded, read = plan.figures(commit["summary"] if commit else {})
                if commit:
                    summary = commit["summary"]
                    result.update(committed_snapshot_id=commit["snapshot_id"],
                                  bytes_written=int(summary.get("added-files-size", 0)),
                                  files_rewritten=int(summary.get("deleted-data-files", 0)),
                                  delete_files_written=int(summary.get("added-delete-files", 0)))
                _record_figures(result, read + n_bad, superseded, expired, n_bad - len(kept_bad), phase)
                _fail_point("after_merge")
                if new_ckpt.to_json() != ckpt.to_json():
                    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES "
                              f"('{CHECKPOINT_PROPERTY}' = '{new_ckpt.to_json()}')")
                phase("checkpoint_s")
            except Exception as exc:
                if not merged:
                    raise
                raise CommittedRunError(ref.short, result, exc) from exc
            return result
        _record_figures(result, read + n_bad, superseded, expired, n_bad - len(kept_bad), phase)
        return result
    finally:
        for frame in held:
            frame.unpersist()


# Iceberg refused the commit: another writer's commit conflicts with what the run read. Its metadata
# swap never happened (unlike CommitStateUnknownException, which is not matched here).
_CONFLICTS = ("org.apache.iceberg.exceptions.ValidationException", "org.apache.iceberg.exceptions.CommitFailedException")


def _conflict_error(ref: TableRef, exc: BaseException) -> CompactionError | None:
    text = str(exc)
    found = next((name for name in _CONFLICTS if name in text), None)
    if found is None:
        return None
    detail = text[text.index(found) + len(found):].lstrip(": ").splitlines()[0][:300]
    return CompactionError(ref.short, f"a concurrent commit conflicts with this run (another cleaner or writer: "
                                      f"{found.rsplit('.', 1)[1]}: {detail}); nothing committed, the next run "
                                      f"starts over")


def _record_figures(result: dict, read: int, superseded: int, expired: int, bad_removed: int, phase) -> None:
    result.update(records_read=read, records_kept=read - superseded - expired - bad_removed,
                  removed_superseded=superseded, removed_expired_tombstones=expired, phases=phase.times)


class CommittedRunError(CompactionError):
    """A step after the run's MERGE committed failed (finding its snapshot, writing the checkpoint).
    The table is cleaned as the run decided; only the checkpoint did not move, so the next run
    re-examines the same records (removing nothing twice). ``result`` holds the run's figures, so
    the history records the commit and the tombstone audit sees what it removed."""

    def __init__(self, table: str, result: dict, cause: BaseException):
        self.result = result
        snapshot = result.get("committed_snapshot_id")
        super().__init__(table, f"the run committed (snapshot {snapshot or 'not found'}) but a later step failed: "
                                f"{type(cause).__name__}: {_first_line(cause)}; the checkpoint was not advanced, "
                                f"the next run re-examines the same records")


@dataclass
class _RunContext:
    """What both ways of deciding a run share (the run's records, the clean part, the log ends)."""
    spark: Any
    ref: TableRef
    tc: TableConfig
    fr: _Frames
    snapshot: int
    hold: Any
    in_run: Any
    n_run: int
    ends: dict  # partition -> the run's last offset there
    clean: Any
    expired_clean: Any
    log_end_df: Any
    protected: Any


@dataclass
class _Plan:
    """A decided run. ``figures(summary)`` gives (removed as superseded, records read) from the
    commit's snapshot summary, or (summary None) for a dry run without committing."""
    expired: int
    expired_by_partition: dict  # partition -> highest offset of a tombstone removed as expired
    new_tombstones: int
    new_retained: dict
    commit: Any
    figures: Any
    guard: Any = lambda appends, current: None  # called with the appends since the pinned snapshot


def _ranked_plan(ctx: _RunContext, retained: dict, bad_rows, n_bad: int) -> _Plan:
    """Look up the cleaned records of the run's keys, rank every candidate by the strategy, and
    remove the losers (plus expired tombstones and ``bad_rows``, the bad records that go) by exact
    identity."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark, tc, fr, clean, in_run = ctx.spark, ctx.tc, ctx.fr, ctx.clean, ctx.in_run
    run_keys = in_run.select("p", "key")
    if retained:  # keys of records kept only as the log end are examined again
        run_keys = run_keys.unionByName(clean.where(_at(F, F.col("p"), F.col("o"), retained)).select("p", "key"))
    run_keys = run_keys.distinct()
    run_keys = _join_side(run_keys, ctx.n_run + len(retained))
    clean_cand = clean.join(run_keys, ["p", "key"], "left_semi")
    cands = (in_run.drop("anom").withColumn("in_run", F.lit(True))
             .unionByName(clean_cand.withColumn("in_run", F.lit(False))))
    # Clean tombstones past their horizon: those whose key has candidates are ranked with them; the
    # rest are winners by the clean-part invariant (one record per key), so they go without ranking.
    if ctx.expired_clean is not None:
        cands = cands.join(ctx.expired_clean.select("p", "o", F.lit(True).alias("expired_tomb")), ["p", "o"], "left")
    else:
        cands = cands.withColumn("expired_tomb", F.lit(None).cast("boolean"))
    w = Window.partitionBy("p", "key").orderBy(F.col("has_ver").desc(), F.col("ver").desc(), F.col("o").desc())
    ranked = (cands.withColumn("rn", F.row_number().over(w)).withColumn("winner_o", F.first("o").over(w))
              .join(ctx.log_end_df, "p", "left"))
    protected = ctx.protected
    decided = ranked.select(
        "p", "o", "in_run", *[n for n, _ in fr.match],
        F.when((F.col("rn") > 1) & ~protected & (F.col("o") != F.col("winner_o")), F.lit(REASON_SUPERSEDED))
        .when((F.col("rn") == 1) & F.coalesce("expired_tomb", F.lit(False)) & ~F.col("in_run") & ~protected,
              F.lit(REASON_EXPIRED_TOMBSTONE)).alias("reason"),
        ((F.col("rn") > 1) & protected).alias("retained"),
        ((F.col("rn") == 1) & F.col("tomb") & F.col("in_run")).alias("new_tombstone"))
    if ctx.expired_clean is not None:
        expiry_only = ctx.expired_clean.join(run_keys, ["p", "key"], "left_anti")
        decided = decided.unionByName(
            expiry_only.join(ctx.log_end_df, "p", "left").select(
                "p", "o", F.lit(False).alias("in_run"), *[n for n, _ in fr.match],
                F.when(~protected, F.lit(REASON_EXPIRED_TOMBSTONE)).alias("reason"),
                F.lit(False).alias("retained"), F.lit(False).alias("new_tombstone")))
    decided = ctx.hold(decided)
    figures = decided.agg(
        F.count("*").alias("read"),
        F.sum(F.when(F.col("reason") == REASON_SUPERSEDED, 1).otherwise(0)).alias("superseded"),
        F.sum(F.when(F.col("reason") == REASON_EXPIRED_TOMBSTONE, 1).otherwise(0)).alias("expired"),
        F.sum(F.col("new_tombstone").cast("int")).alias("new_tombstones")).collect()[0]
    new_retained = {r["p"]: r["o"] for r in decided.where("retained").select("p", "o").collect()}
    superseded, expired = int(figures["superseded"] or 0), int(figures["expired"] or 0)
    expired_by_partition = {}
    if expired:
        expired_by_partition = {r["p"]: r["o"] for r in decided.where(F.col("reason") == REASON_EXPIRED_TOMBSTONE)
                                .groupBy("p").agg(F.max("o").alias("o")).collect()}

    def commit(run_id: str) -> bool:
        removals = decided.where(F.col("reason").isNotNull()).select(*[n for n, _ in fr.match])
        if bad_rows is not None:
            removals = removals.unionByName(bad_rows.select(*[c.alias(n) for n, c in fr.match]))
        if not superseded + expired + n_bad:
            return False
        removals = _join_side(removals, superseded + expired + n_bad)
        on = " AND ".join(f"t.{q(col)} <=> r.{alias}" for alias, col in _match_columns(tc))
        _merge_delete(spark, ctx.ref, removals, run_id, on)
        return True

    return _Plan(expired=expired, expired_by_partition=expired_by_partition,
                 new_tombstones=int(figures["new_tombstones"] or 0), new_retained=new_retained, commit=commit,
                 figures=lambda summary: (superseded, int(figures["read"])))


def _at(F, p_col, o_col, positions: dict):
    """Records at these (partition, offset) positions; false, never null, for a null partition or
    offset, so that its negation keeps such a record."""
    if not positions:
        return F.lit(False)
    at = reduce(lambda a, b: a | b, [(p_col == F.lit(p)) & (o_col == F.lit(o)) for p, o in positions.items()])
    return F.coalesce(at, F.lit(False))


def _bad_figures(fr: _Frames, bad_rows, retained: dict) -> list[dict]:
    """Per partition (None: a null partition), the bad records, their highest offset, and how many
    of them an earlier run copied to quarantine and kept as the log end (those in ``retained``)."""
    from pyspark.sql import functions as F

    return [r.asDict() for r in bad_rows.groupBy(fr.p.alias("p")).agg(
        F.count("*").alias("n"), F.max(fr.o).alias("end"),
        F.sum(_at(F, fr.p, fr.o, retained).cast("int")).alias("copied_before")).collect()]


def _offset_map(in_run):
    """Kafka's offset map: each key's highest offset in the run (its winner), whether that winner is
    a tombstone, and how many records of the key the run holds."""
    from pyspark.sql import functions as F

    return in_run.groupBy("p", "key").agg(F.max("o").alias("winner_o"),
                                          F.max_by(F.col("tomb").cast("int"), "o").alias("winner_tomb"),
                                          F.count("*").alias("n"))


def _offset_map_sums(omap) -> list[dict]:
    """Per partition of an offset map: its last offset, records, keys and winning tombstones."""
    from pyspark.sql import functions as F

    return [{k: int(v or 0) for k, v in r.asDict().items()} for r in omap.groupBy("p").agg(
        F.max("winner_o").alias("end"), F.sum("n").alias("n"), F.count("*").alias("keys"),
        F.sum("winner_tomb").alias("new_tombstones")).collect()]


def _offset_map_plan(ctx: _RunContext, omap=None, sums=None) -> _Plan:
    """Kafka's cleaner: map each of the run's keys to its highest offset in the run, then delete
    every record of the key below it, cleaned or dirty, in one MERGE that reads the table once. No
    record of the run's range is above the map's offset (the run is a prefix of each partition),
    and none of a run key is a log end, so nothing is protected. Expired tombstones whose key has
    no record in the run join the map with their own offset + 1."""
    from pyspark.sql import functions as F

    spark, tc = ctx.spark, ctx.tc
    raw = [("lc_p", F.col("p"))] if tc.partition_column else []  # p is the partition as bigint
    raw += [(f"lc_k{i}", F.col("key").getField(f"k{i}")) for i in range(len(tc.key_columns))]
    if omap is None:  # otherwise built from the dirty part, which is the whole run (see _compact)
        omap = ctx.hold(_offset_map(ctx.in_run))  # feeds the figures and the MERGE: cheaper than a rebuild
        sums = _offset_map_sums(omap)
    # Every run record but its key's winner is below the winner's offset (offsets are unique per
    # partition: Kafka's contract, which the quality suite checks), so the MERGE removes it.
    dirty_superseded = ctx.n_run - sum(r["keys"] for r in sums)
    source = omap.select("p", "key", F.lit(LONG_MIN).alias("lc_from"), F.col("winner_o").alias("lc_below"))
    expired, expiry_read, expired_by_partition = 0, 0, {}
    if ctx.expired_clean is not None:  # read, but kept if it is its partition's log end
        expiry_only = ctx.hold(ctx.expired_clean.join(omap.select("p", "key"), ["p", "key"], "left_anti")
                               .join(ctx.log_end_df, "p", "left").select("p", "key", "o", (~ctx.protected).alias("goes")))
        rows = expiry_only.groupBy("p").agg(F.count("*").alias("read"), F.sum(F.col("goes").cast("int")).alias("n"),
                                            F.max(F.when(F.col("goes"), F.col("o"))).alias("o")).collect()
        expiry_read = sum(int(r["read"]) for r in rows)
        expired = sum(int(r["n"] or 0) for r in rows)
        expired_by_partition = {r["p"]: r["o"] for r in rows if r["o"] is not None}
        source = source.unionByName(expiry_only.where("goes").groupBy("p", "key").agg(
            F.max("o").alias("lc_from"), (F.max("o") + 1).alias("lc_below")))  # the tombstone alone
    source = source.select(*[c.alias(n) for n, c in raw], "lc_from", "lc_below")
    source = source.withColumn("lc_hash", F.xxhash64(*[F.col(n) for n, _ in raw]))
    # One 64-bit hash of partition and key is the join key; the columns themselves are checked with
    # >= and <= rather than '=' (Spark makes every '=' a hash key, and a join on one long probes
    # far faster than on strings: 3.8 s against 5.5 s for 20M rows in benchmarks/).
    target_cols = ([tc.partition_column] if tc.partition_column else []) + list(tc.key_columns)
    hashed = [f"CAST(t.{q(tc.partition_column)} AS BIGINT)"] if tc.partition_column else []
    hashed += [f"t.{q(c)}" for c in tc.key_columns]  # the same values and types as the source's
    on = " AND ".join([f"xxhash64({', '.join(hashed)}) = s.lc_hash"]
                      + [f"t.{q(c)} >= s.{n} AND t.{q(c)} <= s.{n}" for c, (n, _) in zip(target_cols, raw)]
                      + [f"t.{q(tc.offset_column)} >= s.lc_from AND t.{q(tc.offset_column)} < s.lc_below"])
    n_source = ctx.n_run + expired
    source = _join_side(source, n_source)

    def figures_of(summary):
        if summary is None:  # dry run: count what the MERGE would match, at the pinned snapshot
            view = _temp_view(source, "lakecleaner_offset_map")
            matched = spark.sql(f"SELECT count(*) FROM {ctx.ref.sql()} VERSION AS OF {ctx.snapshot} t "
                                f"JOIN {view} s ON {on}").collect()[0][0]
            spark.catalog.dropTempView(view)
        else:
            # net of delete files the commit replaced: Iceberg folds a data file's earlier
            # position deletes into the new delete file (and reports those as removed)
            matched = int(summary.get("added-position-deletes", 0)) - int(summary.get("removed-position-deletes", 0))
        superseded = max(matched - expired, 0)
        return superseded, ctx.n_run + (superseded - dirty_superseded) + expiry_read

    def guard(appends, current):
        """Records appended during the run at offsets inside its range (late arrivals) were never
        examined, and the MERGE reads the table as it is: it would remove them unseen. Stop."""
        if not appends:
            return
        added = set(appends)
        late = [f["_file"] for f in _data_files(spark, ctx.ref, tc, current)
                if f["snapshot_id"] in added and _may_hold_run_offsets(f, ctx.ends)]
        if late:
            raise CompactionError(ctx.ref.short, f"{len(late)} data file(s) appended during the run may hold offsets "
                                                 f"inside the run's range (late arrivals, e.g. {late[0]}); nothing "
                                                 f"committed, the next run includes them")

    def commit(run_id: str) -> bool:
        if not n_source:
            return False
        _merge_delete(spark, ctx.ref, source, run_id, on, alias="s")
        return True

    return _Plan(expired=expired, expired_by_partition=expired_by_partition,
                 new_tombstones=sum(r["new_tombstones"] for r in sums), new_retained={}, commit=commit,
                 figures=figures_of, guard=guard)


def _may_hold_run_offsets(f, ends: dict) -> bool:
    """From a data file's metrics: may it hold a record of a run partition at or below the run's
    last offset there? Unknown bounds count as yes."""
    bounds = f.asDict()
    p_lo, p_hi, o_lo = bounds.get("p_lower_bound"), bounds.get("p_upper_bound"), bounds.get("o_lower_bound")
    for p, end in ends.items():
        in_partition = p_lo is None or p_hi is None or p_lo <= p <= p_hi
        if in_partition and (o_lo is None or o_lo <= end):
            return True
    return False


def _join_side(df, rows: int):
    """The small side of a join with the table: broadcast up to BROADCAST_ROWS_MAX rows (the table
    then streams at scan speed), else a sort-merge join, which spills: memory stays bounded."""
    from pyspark.sql import functions as F

    return F.broadcast(df) if rows <= BROADCAST_ROWS_MAX else df.hint("merge")


def _temp_view(df, prefix: str) -> str:
    view = f"{prefix}_{uuid.uuid4().hex[:12]}"
    df.createOrReplaceTempView(view)
    return view


def _merge_delete(spark, ref: TableRef, source, run_id: str, on: str, alias: str = "r") -> None:
    view = _temp_view(source, f"lakecleaner_removals_{run_id}")
    try:
        spark.sql(f"MERGE INTO {ref.sql()} t USING {view} {alias} ON {on} WHEN MATCHED THEN DELETE")
    finally:
        spark.catalog.dropTempView(view)


class _Phases:
    """Seconds spent per phase of a run, reported with its statistics (where the time goes)."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self._last = time.time()

    def __call__(self, name: str) -> None:
        now = time.time()
        self.times[name] = round(now - self._last, 3)
        self._last = now


def _bytes_scanned(files, ckpt_offsets: dict, unpartitioned: bool) -> int:
    """Bytes of the data files the run's scans open, judged from Iceberg file statistics (Spark's
    inputFiles() is empty for Iceberg scans): a file is opened by the dirty scan if it may hold an
    offset past its partition's checkpoint, by the clean scan if it may hold one at or below it."""
    return sum(f["size"] for f in files if _may_be_dirty(f, ckpt_offsets, unpartitioned)
               or _may_be_clean(f, ckpt_offsets, unpartitioned))


def _checkpoint_bounds(f, ckpt_offsets: dict, unpartitioned: bool) -> list:
    """The checkpoint offsets that may apply to a data file's records (None: a partition the
    checkpoint has not seen, wholly dirty)."""
    if unpartitioned:
        return [ckpt_offsets.get(None)]
    if f["p_lower_bound"] is not None and f["p_lower_bound"] == f["p_upper_bound"]:
        return [ckpt_offsets.get(f["p_lower_bound"])]
    return list(ckpt_offsets.values()) + [None]


def _may_be_dirty(f, ckpt_offsets: dict, unpartitioned: bool) -> bool:
    o_hi = f["o_upper_bound"]
    return o_hi is None or any(b is None or o_hi > b for b in _checkpoint_bounds(f, ckpt_offsets, unpartitioned))


def _may_be_clean(f, ckpt_offsets: dict, unpartitioned: bool) -> bool:
    o_lo = f["o_lower_bound"]
    return o_lo is None or any(b is not None and o_lo <= b for b in _checkpoint_bounds(f, ckpt_offsets, unpartitioned))


def _dirty_split_size(files, ckpt_offsets: dict, unpartitioned: bool, read_split: tuple[int, int],
                      parallelism: int) -> int:
    """Iceberg packs small files into one read split (16 MB at least), so the few small files of a
    typical dirty part would be read and aggregated by one task while the other cores idle (1.0 s
    against 0.8 s for 1M records in 4 files on 2 cores). Size the dirty scan's splits for two per
    core, as Iceberg weighs files (with its open cost); never above the table's own split size."""
    open_cost, target = read_split
    weight = sum(max(f["size"], open_cost) for f in files if _may_be_dirty(f, ckpt_offsets, unpartitioned))
    return max(min(weight // (2 * max(parallelism, 1)), target), SPLIT_SIZE_MIN)


def _match_columns(tc: TableConfig) -> list[tuple[str, str]]:
    cols = [("m_o", tc.offset_column)]
    if tc.partition_column:
        cols.append(("m_p", tc.partition_column))
    cols += [(f"m_k{i}", k) for i, k in enumerate(tc.key_columns)]
    return cols


def _ckpt_summary(ckpt: Checkpoint) -> dict:
    return {("-" if p is None else str(p)): o for p, o in sorted(ckpt.offsets.items(), key=lambda kv: str(kv[0]))}


def _ensure_layout(spark, ref: TableRef, props: dict[str, str]) -> None:
    """Set the write modes the MERGE relies on, where the table does not choose otherwise."""
    missing = {k: v for k, v in LAYOUT_PROPERTIES.items() if k not in props}
    if "format-version" in props and props["format-version"] == "1":
        raise CompactionError(ref.short, "Iceberg format-version 1 has no row-level deletes; upgrade to 2")
    missing.pop("format-version", None)
    if missing:
        assignments = ", ".join(f"'{k}' = '{v}'" for k, v in missing.items())
        spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ({assignments})")


def _reset_past_log_end(ref: TableRef, tc: TableConfig, ckpt: Checkpoint, files: list, result: dict) -> Checkpoint:
    """The checkpoint, reset for partitions it claims cleaned past their log end (see
    Checkpoint.reset_past_log_end), with a warning and the reset partitions in the run's result."""
    if not tc.retain_log_end_record:
        return ckpt
    partitioned = tc.partition_column is not None
    by_file = (((f["p_lower_bound"] if f["p_lower_bound"] == f["p_upper_bound"] else None) if partitioned else None,
                f["o_upper_bound"]) for f in files)
    ckpt, reset = ckpt.reset_past_log_end(log_ends(by_file, partitioned))
    if reset:
        log.warning("lakecleaner: table %s: checkpoint past the log end of partition(s) %s (truncated or recreated?): "
                    "reset, those partitions are cleaned from their start", ref.short, reset)
        result["checkpoint_reset"] = ["-" if p is None else p for p in reset]
    return ckpt


def _data_files(spark, ref: TableRef, tc: TableConfig, snapshot: int,
                expired_times: dict[int, int] | None = None) -> list:
    """Live data files at ``snapshot`` with what the run needs from Iceberg's metrics: offset and
    partition bounds, null counts of the identity columns (unknown where a column has no metrics),
    size, and the commit time of the snapshot that added each (the records' append time; from
    ``expired_times``, see append_times, once maintenance expired that snapshot)."""
    from pyspark.sql import functions as F

    recorded = (F.element_at(F.create_map(*[F.lit(v) for kv in sorted(expired_times.items()) for v in kv]),
                             F.col("snapshot_id")) if expired_times else F.lit(None))

    entries = spark.read.option("snapshot-id", snapshot).table(ref.meta("entries"))
    with_metrics = set(entries.schema["readable_metrics"].dataType.fieldNames())
    identity = [c for c in (tc.offset_column, tc.partition_column, *tc.key_columns) if c]
    null_counts = [F.col("readable_metrics").getField(c).getField("null_value_count") for c in identity
                   if c in with_metrics]
    return (entries.where("status < 2 AND data_file.content = 0")
            .select(F.col("data_file.file_path").alias("_file"), "snapshot_id",
                    F.col("data_file.file_size_in_bytes").alias("size"),
                    *[(F.col("readable_metrics").getField(c).getField(b).cast("bigint") if c in with_metrics
                       else F.lit(None).cast("bigint")).alias(f"{n}_{b}")
                      for n, c in (("o", tc.offset_column), ("p", tc.partition_column)) if c
                      for b in ("lower_bound", "upper_bound")],
                    F.greatest(*[F.abs(c) for c in null_counts], F.lit(0), F.lit(0)).alias("identity_nulls"),
                    F.greatest(*[c.isNull() for c in null_counts], F.lit(len(null_counts) < len(identity)),
                               F.lit(False)).alias("identity_nulls_unknown"))
            .join(spark.table(ref.meta("snapshots")).select("snapshot_id", F.expr("unix_millis(committed_at)").alias("at")),
                  "snapshot_id", "left")
            .withColumn("appended_at", F.coalesce("at", recorded, F.lit(0)))).collect()


def _check_no_concurrent_cleaner(spark, ref: TableRef, snapshot: int) -> tuple[int | None, list[int]]:
    """Since the pinned snapshot, only appends may have happened; anything else (another cleaner, a
    user's DELETE) means our decisions may be stale: stop before committing anything. Returns the
    current snapshot and the appends since the pinned one."""
    current, since, reached = _lineage_since(spark, ref, snapshot)
    if not reached:
        raise CompactionError(ref.short, f"snapshot {snapshot}, which the run read, is no longer on the table's "
                                         f"current lineage (rolled back or expired); nothing committed, the next "
                                         f"run starts over")
    for row in since:
        if row["operation"] != "append":
            raise CompactionError(ref.short, f"table changed by a concurrent {row['operation']} (snapshot "
                                             f"{row['snapshot_id']}) since snapshot {snapshot}; nothing committed, "
                                             f"the next run starts over")
    return current, [row["snapshot_id"] for row in since]


def _committed_snapshot(spark, ref: TableRef, since: int) -> dict | None:
    """Our MERGE's snapshot: the first non-append on the current lineage after ``since`` (the
    table as it was checked just before the MERGE), whatever may have been committed after it."""
    _, after, _ = _lineage_since(spark, ref, since)
    ours = next((row for row in reversed(after) if row["operation"] != "append"), None)
    return {"snapshot_id": ours["snapshot_id"], "summary": ours["summary"]} if ours else None


def _lineage_since(spark, ref: TableRef, snapshot: int) -> tuple[int | None, list, bool]:
    """The current snapshot, the snapshots on its lineage after ``snapshot`` (newest first), and
    whether the walk reached ``snapshot``. Walked on one refreshed view of the table's metadata, so
    the current snapshot and its ancestors are consistent."""
    table = _iceberg_table(spark, ref)
    node = table.currentSnapshot()
    current = None if node is None else node.snapshotId()
    lineage = []
    while node is not None and node.snapshotId() != snapshot:
        operation = node.operation()
        # a summary is only needed of what is not an append: our commit, or what stops the run
        summary = {} if operation == "append" else {str(k): str(v) for k, v in node.summary().items()}
        lineage.append({"snapshot_id": node.snapshotId(), "operation": operation, "summary": summary})
        parent = node.parentId()
        node = None if parent is None else table.snapshot(parent)
    return current, lineage, node is not None


def quarantine_table(cfg: LakecleanerConfig, ref: TableRef) -> TableRef:
    return TableRef(ref.catalog, ref.namespace, ref.name + cfg.cleaner.quarantine_suffix)


def _quarantine(spark, cfg: LakecleanerConfig, ref: TableRef, bad_rows, run_id: str, now_ms: int) -> None:
    """Copy bad records to <table>__quarantine first; the MERGE removes them from the source after.
    A crash in between leaves a duplicate in quarantine, never a loss. The quarantine follows the
    source's schema (Iceberg's schema merge on write: added columns are added, dropped ones left
    null), so a source schema change does not fail every later run with bad rows."""
    from pyspark.sql import functions as F

    qref = quarantine_table(cfg, ref)
    rows = bad_rows.withColumn("quarantine_run_id", F.lit(run_id)).withColumn(
        "quarantined_at", F.lit(now_ms).cast("bigint"))
    created = _create_unless_exists(
        lambda: rows.limit(0).writeTo(qref.sql()).using("iceberg").tableProperty("format-version", "2")
        .tableProperty(ACCEPT_ANY_SCHEMA, "true").create())
    if not created and _iceberg_table(spark, qref).properties().get(ACCEPT_ANY_SCHEMA) != "true":  # an older one
        spark.sql(f"ALTER TABLE {qref.sql()} SET TBLPROPERTIES ('{ACCEPT_ANY_SCHEMA}' = 'true')")
    rows.writeTo(qref.sql()).option("merge-schema", "true").option("check-ordering", "false").append()


ACCEPT_ANY_SCHEMA = "write.spark.accept-any-schema"


def _create_unless_exists(create) -> bool:
    """Create a table or namespace the cleaner owns; False when it exists already. No check-then-create:
    two cleaners (or a cleaner and an operator) on a shared catalog may both find it missing, and the
    catalog's atomic create decides. Never create-or-replace, which would empty a quarantine that
    another process has just filled."""
    try:
        create()
        return True
    except Exception as exc:  # noqa: BLE001 - Spark's TableAlreadyExists or Iceberg's AlreadyExists via Py4J
        if _already_exists(exc):
            return False
        raise


def _already_exists(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(m in text for m in ("AlreadyExistsException", "TABLE_OR_VIEW_ALREADY_EXISTS",
                                   "SCHEMA_ALREADY_EXISTS", "already exists"))


HISTORY_SCHEMA = (
    "run_id string, table_name string, status string, error string, dry_run boolean, now_ms bigint, "
    "started_at timestamp, strategy string, records_read bigint, records_kept bigint, removed_superseded bigint, "
    "removed_expired_tombstones bigint, quarantined bigint, anomalous bigint, dirty_records_in_run bigint, "
    "bytes_read bigint, bytes_written bigint, files_rewritten bigint, delete_files_written bigint, "
    "duration_ms bigint, snapshot_id bigint, committed_snapshot_id bigint, checkpoint string, "
    "delete_retention_ms bigint, expired_tombstone_latest_cleaned_ms bigint"
)


def ensure_history_table(spark, cfg: LakecleanerConfig) -> None:
    """Create the run history table, or add the columns a table from an earlier version lacks
    (Iceberg adds columns in metadata only; old rows read them as null)."""
    from pyspark.sql.types import _parse_datatype_string

    # IF NOT EXISTS is itself check-then-create inside Spark: another process can win in between
    _create_unless_exists(lambda: spark.sql(
        f"CREATE NAMESPACE IF NOT EXISTS `{cfg.catalog.name}`.`{cfg.cleaner.meta_namespace}`"))
    _create_unless_exists(lambda: spark.sql(
        f"CREATE TABLE IF NOT EXISTS {cfg.history_table} ({HISTORY_SCHEMA}) USING iceberg"))
    have = {f.name for f in spark.table(cfg.history_table).schema.fields}
    added = [f"{f.name} {f.dataType.simpleString()}" for f in _parse_datatype_string(HISTORY_SCHEMA).fields
             if f.name not in have]
    if added:
        spark.sql(f"ALTER TABLE {cfg.history_table} ADD COLUMNS ({', '.join(added)})")


def _record_history(spark, cfg: LakecleanerConfig, stats: dict) -> None:
    """Append the run's figures to <catalog>.lakecleaner.run_history (the UI charts it)."""
    import datetime as dt

    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(HISTORY_SCHEMA)
    row = {f.name: None for f in schema.fields}
    row.update({k: v for k, v in stats.items() if k in row and k != "checkpoint"})
    row["table_name"] = stats["table"]
    row["started_at"] = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    row["checkpoint"] = json.dumps(stats.get("checkpoint")) if stats.get("checkpoint") is not None else None
    try:
        ensure_history_table(spark, cfg)
        spark.createDataFrame([tuple(row[f.name] for f in schema.fields)], schema).writeTo(cfg.history_table).append()
    except Exception as exc:  # noqa: BLE001 - history is secondary; never hide the run's own outcome
        print(f"lakecleaner: could not record run history for {stats['table']}: {_first_line(exc)}", flush=True)
