"""A table's records as the rules see them (partition, offset, key, tombstone, version: the
strategy's roles, strategies.Strategy), the dirty scan, and the small Spark building blocks the
plans share: predicates by partition, broadcast sides, the MERGE that deletes."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import reduce
from typing import Any, Iterable, Sequence

from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import ArrayType, DataType, DoubleType, FloatType, MapType, StructType, _parse_datatype_string

from lakecleaner.core.table import TableRef
from lakecleaner.core.config import TableConfig
from lakecleaner.core.keyhash import PADS_VIEW, KeyHasher
from lakecleaner.core.sparkconf import ARROW_ENABLED
from lakecleaner.core.strategies import Strategy, checkpoint_sql, ident
from lakecleaner.spark.files import dirty_split_size

# Up to this many keys (or removals) are broadcast to the scan of the clean part instead of
# shuffling the clean part: the clean side then streams at scan speed. Above it the run falls back
# to a shuffle join (with Spark's runtime Bloom filter), so memory stays bounded for any key count.
BROADCAST_ROWS_MAX = 2_000_000
LONG_MIN = -(2**63)


def local_frame(spark, rows: Iterable[Sequence[Any]], schema: StructType | str) -> DataFrame:
    """A few Python rows (history, audit, file times, test batches) as a local relation the JVM reads
    directly. PySpark 3.5 re-pickles a list's rows in Python workers (pyspark.daemon) before the JVM
    sees them: 0.23 CPU s a call, against 0.07 through Arrow (six rows; benchmarks/bench_overheads.py).
    The rows go as a pandas frame of plain objects (no dtype guessing: an int64 never becomes a float),
    the path PySpark itself takes for pandas. Timestamps must be aware datetimes, as everywhere here.
    The plain path is kept where Arrow is off in the session, and for rows holding a floating-point
    NaN, since pandas reads NaN as null."""
    struct = _parse_datatype_string(schema) if isinstance(schema, str) else schema
    data = [tuple(row) for row in rows]
    if not data or spark.conf.get(ARROW_ENABLED, "false") != "true" or (_has_floating(struct) and _holds_nan(data)):
        return spark.createDataFrame(data, struct)
    import pandas as pd  # the spark extra's (pyproject)

    return spark.createDataFrame(pd.DataFrame(data, columns=struct.names, dtype=object), struct)


def detached(df: DataFrame) -> DataFrame:
    """A small frame's rows as a local relation, no longer a read of its tables: Spark recaches every
    cached frame over a table it writes to, and a recache racing the frame's own unpersist (another
    thread's write) puts the cache back for good. Copied in the JVM, so values (timestamps above all)
    do not make a round trip through Python."""
    jdf = df._jdf
    return DataFrame(df.sparkSession._jsparkSession.createDataFrame(jdf.collectAsList(), jdf.schema()), df.sparkSession)


def _has_floating(dt: DataType) -> bool:
    if isinstance(dt, (FloatType, DoubleType)):
        return True
    if isinstance(dt, StructType):
        return any(_has_floating(f.dataType) for f in dt.fields)
    if isinstance(dt, ArrayType):
        return _has_floating(dt.elementType)
    return isinstance(dt, MapType) and (_has_floating(dt.keyType) or _has_floating(dt.valueType))


def _holds_nan(value: Any) -> bool:
    """Whether a float NaN lies anywhere in ``value`` (rows, and the lists, maps and structs in them)."""
    if isinstance(value, float):
        return value != value
    if isinstance(value, dict):
        return any(_holds_nan(k) or _holds_nan(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds_nan(v) for v in value)
    return False


class Frames:
    """Column expressions for one table's roles, so every phase speaks of p, o, key, version. The
    roles and the keep rule are the strategy's (strategies.Strategy), parsed from its SQL."""

    def __init__(self, tc: TableConfig):
        self.tc = tc
        self.strategy = s = Strategy(tc)
        self.p_raw = F.col(ident(tc.partition_column)) if tc.partition_column else None
        self.o_raw = F.col(ident(tc.offset_column))
        self.k_raw = [F.col(ident(k)) for k in tc.key_columns]
        self.p = F.expr(s.partition_sql)
        self.o = F.expr(s.offset_sql)
        self.key = F.struct(*[c.alias(f"k{i}") for i, c in enumerate(self.k_raw)])
        self.tomb = F.expr(s.tombstone_sql)
        self.tomb_pushdown = F.expr(s.tombstone_pushdown_sql)
        self.version, self.has_version = F.expr(s.version_sql), F.expr(s.has_version_sql)
        self.bad = F.expr(s.bad_sql)
        reason = F.lit(None).cast("string")
        for cond, text in reversed(s.bad_conditions):
            reason = F.when(F.expr(cond), F.lit(text)).otherwise(reason)
        self.bad_reason = reason
        self.match = [("m_o", self.o_raw)] + ([("m_p", self.p_raw)] if self.p_raw is not None else []) + [
            (f"m_k{i}", c) for i, c in enumerate(self.k_raw)]

    def narrow(self, df, extra=(), with_tomb: bool = True):
        """The columns the rules need, plus the raw key/offset/partition values the MERGE matches on.
        The clean-part lookup leaves the tombstone out: deciding it reads the value column, the
        widest one, for the whole clean part; expired clean tombstones come from their own scan."""
        tomb = self.tomb if with_tomb else F.lit(False)
        return df.select(self.p.alias("p"), self.o.alias("o"), self.key.alias("key"), tomb.alias("tomb"),
                         self.version.alias("ver"), self.has_version.alias("has_ver"),
                         *[c.alias(n) for n, c in self.match], *extra)


def dirty_scan(spark, ref: TableRef, snapshot: int, fr: Frames, ckpt_offsets: dict, files):
    """The records past the checkpoint: pushed down to Iceberg so that only the files that may hold
    such records are planned, in splits spread over the cores."""
    tc = fr.tc
    pred = partition_pred(_partition_ident(tc), ident(tc.offset_column), ckpt_offsets, ">", True)
    split_size = dirty_split_size(files, ckpt_offsets, fr.p_raw is None, fr.tc.read_split,
                                   spark.sparkContext.defaultParallelism)
    scan = spark.read.option("snapshot-id", snapshot).option("split-size", split_size).table(ref.sql())
    return scan.where(pred & ~fr.bad)


def clean_pred(tc: TableConfig, ckpt_offsets: dict):
    """The records at or below the checkpoint, as a predicate on the table's own columns. Written
    as such, not as NOT the dirty scan's predicate: Iceberg's metrics rule a file out on
    (p = X AND o <= c), never on NOT (p = X), so the negation would open every dirty file too."""
    return partition_pred(_partition_ident(tc), ident(tc.offset_column), ckpt_offsets, "<=", False)


def _partition_ident(tc: TableConfig) -> str | None:
    return ident(tc.partition_column) if tc.partition_column else None


def partition_pred(p_col: str | None, o_col: str, bounds: dict, op: str, unbounded_default: bool):
    """OR over partitions of (p = X AND o <op> bound) (strategies.checkpoint_sql); partitions absent
    from bounds take the default."""
    pred = checkpoint_sql(p_col, o_col, bounds, op)
    if pred is None:
        return F.lit(unbounded_default)
    if unbounded_default and None not in bounds:
        pred = f"{pred} OR {outside(p_col, bounds)}"
    return F.expr(pred)


def outside(p_col: str, values) -> str:
    """p not in values, as ranges around runs of consecutive values rather than NOT IN: Iceberg's
    metrics evaluator can never rule a file out on NOT IN, so with it every clean data file would
    be planned into the dirty scan (and have its footer read) however far the checkpoint is."""
    runs: list[list[int]] = []
    for v in sorted(values):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    terms = [f"{p_col} < {runs[0][0]}", f"{p_col} > {runs[-1][1]}"]
    terms += [f"({p_col} > {a[1]} AND {p_col} < {b[0]})" for a, b in zip(runs, runs[1:])]
    return "(" + " OR ".join(terms) + ")"


def small_df(spark, rows: dict, value_name: str):
    """Per-partition figures (p, ``value_name``, both bigint) as an inline table, which Spark plans
    as a local relation and broadcasts from the driver. A DataFrame made from a Python list is an RDD
    instead, and every plan that reads it runs a job of its own to scan it (about 0.3-0.5 s each in a
    versioned run, where the log ends join the MERGE's source).
    ``rows`` is never empty: every caller joins it only where it has rows (VALUES needs one)."""
    values = ", ".join(f"({int(k if k is not None else 0)}L, {int(v)}L)" for k, v in rows.items())
    return spark.sql(f"SELECT * FROM VALUES {values} AS t(p, {value_name})")


def at_positions(p_col, o_col, positions: dict):
    """Records at these (partition, offset) positions; false, never null, for a null partition or
    offset, so that its negation keeps such a record. An OR of equalities, which Iceberg can prune
    files by: the filter for scans of a few positions (at_log_ends tests many rows)."""
    if not positions:
        return F.lit(False)
    at = reduce(lambda a, b: a | b, [(p_col == F.lit(p)) & (o_col == F.lit(o)) for p, o in positions.items()])
    return F.coalesce(at, F.lit(False))


def at_log_ends(p_col, o_col, log_end: dict):
    """at_positions for one position per partition, as a per-row test over many rows (the key map's
    1M keys): the offset is one of them (a hash-set look-up, which few rows pass), then its
    partition's own (a map look-up, for those few); false, never null. at_positions' OR of equalities
    costs a comparison per position per row, but Iceberg can prune files by it, which these look-ups
    do not allow: it stays the filter for scans. The key map's MERGE source then needs no job to
    broadcast the log ends."""
    if not log_end:
        return F.lit(False)
    ends = F.expr("map(" + ", ".join(f"{int(p)}L, {int(o)}L" for p, o in log_end.items()) + ")")
    return F.coalesce(o_col.isin(sorted({int(o) for o in log_end.values()})) & (F.element_at(ends, p_col) == o_col),
                      F.lit(False))


def join_side(df, rows: int):
    """The small side of a join with the table: broadcast up to BROADCAST_ROWS_MAX rows (the table
    then streams at scan speed), else a sort-merge join, which spills: memory stays bounded."""
    return F.broadcast(df) if rows <= BROADCAST_ROWS_MAX else df.hint("merge")


def temp_view(df, prefix: str) -> str:
    view = f"{prefix}_{uuid.uuid4().hex[:12]}"
    df.createOrReplaceTempView(view)
    return view


@dataclass(frozen=True)
class SameValues:
    """A match by equal values of ``columns`` (the table's and the source's names alike), deleted
    with DELETE ... WHERE (columns) IN (source): for a table a MERGE does not resolve against (a
    quarantine, whose schema accepts any)."""
    columns: tuple[str, ...]

    def delete_sql(self, table: str, view: str) -> str:
        cols = ", ".join(ident(c) for c in self.columns)
        return f"DELETE FROM {table} WHERE ({cols}) IN (SELECT {cols} FROM {view})"


def merge_delete(spark, ref: TableRef, source: DataFrame, on: str | SameValues, alias: str = "s",
                 name: str = "lakecleaner_removals") -> None:
    """Delete the table's records that match a row of ``source``, in one commit through a temp
    view (named after ``name``, dropped after). ``on``: the MERGE's condition, the table as t and
    the source as ``alias``; or SameValues."""
    view = temp_view(source, name)
    try:
        if isinstance(on, SameValues):
            spark.sql(on.delete_sql(ref.sql(), view))
        else:
            spark.sql(f"MERGE INTO {ref.sql()} t USING {view} {alias} ON {on} WHEN MATCHED THEN DELETE")
    finally:
        spark.catalog.dropTempView(view)


def match_columns(tc: TableConfig) -> list[tuple[str, str]]:
    cols = [("m_o", tc.offset_column)]
    if tc.partition_column:
        cols.append(("m_p", tc.partition_column))
    cols += [(f"m_k{i}", k) for i, k in enumerate(tc.key_columns)]
    return cols


def register_pads(spark, hasher: KeyHasher) -> None:
    """The session's PADS_VIEW: one row of the hasher's HMAC pads, from Python data."""
    if hasher.keyed:
        ipad, opad = hasher.pads()
        local_frame(spark, [(bytearray(ipad), bytearray(opad))], "ipad binary, opad binary").createOrReplaceTempView(
            PADS_VIEW)
