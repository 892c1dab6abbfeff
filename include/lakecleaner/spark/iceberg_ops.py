"""Rewrite-then-expire, written once: what makes a removed record leave disk (rewrite the data files
that carry its delete, then expire the snapshots that still reach the old files). The cleaner's
maintenance of a compacted table, an erasure's quarantine and request table, and the cleaner's own
tables (housekeeping) each do it, with their own rewrite options and expiry cut as parameters."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from lakecleaner.core.strategies import ident, sql_string
from lakecleaner.core.table import TableRef
from lakecleaner.spark.catalog import fail_point, iceberg_table

# Rewrite every data file that carries a delete.
#
# Without rewrite_data_files' remove-dangling-deletes pass unless a table has equality deletes
# (DANGLING_DELETES_OUT). Iceberg's own commits, this rewrite's too, drop every delete file older
# than all live data files (MergingSnapshotProducer, table-wide) and the deletion vectors of the
# files a rewrite replaces (v3). The pass adds, per partition of a partitioned table (it does
# nothing on an unpartitioned one), the position deletes older than every data file of their
# partition, the equality deletes no newer than those, and every delete of a partition with no
# data file left; it costs four Spark jobs over the metadata tables (every manifest) per rewrite:
# a small table's rewrite 1.74 against 0.68 CPU s (bench_overheads). A position delete or
# deletion vector names a file and a row position, never a record's content, so one left behind
# keeps nothing an erasure removes; an equality delete holds key values, so where one is live the
# pass runs (spark.maintenance).
DELETES_OUT: Mapping[str, str] = {"delete-file-threshold": "1"}
DANGLING_DELETES_OUT: Mapping[str, str] = {"remove-dangling-deletes": "true"}

SnapshotTimes = Mapping[int, int]  # snapshot id -> its commit time (epoch ms)
# Given the table (Iceberg's Java object) and its snapshots' times: expire those older than this (None: none).
ExpiryCut = Callable[[object, SnapshotTimes], int | None]


@dataclass(frozen=True)
class Rewrite:
    """A rewrite_data_files call: its options, and which records' files it selects (None: all)."""
    options: Mapping[str, str]
    where: str | None = None


@dataclass(frozen=True)
class Expiry:
    """Which snapshots go: older than ``cut``'s answer, the last ``retain_last`` of main kept (and
    whatever a ref keeps: Iceberg never expires those). ``before``: called with the table and the
    snapshots' times just before anything is expired (to keep what would be lost)."""
    cut: ExpiryCut
    retain_last: int = 1
    before: Callable[[object, SnapshotTimes], None] | None = None


@dataclass(frozen=True)
class RewriteAndExpire:
    files_rewritten: int
    snapshots_expired: int


def older_than(ms: Callable[[], int]) -> ExpiryCut:
    """Expire what was committed before ``ms()`` (asked when the expiry runs)."""
    return lambda table, times: ms()


def older_than_newest_at(ms: Callable[[], int]) -> ExpiryCut:
    """Expire what is older than the newest snapshot committed at or before ``ms()``: that one
    stays, the table as it was at ``ms()``."""
    def cut(table, times: SnapshotTimes) -> int | None:
        at = ms()
        return max((t for t in times.values() if t <= at), default=None)
    return cut


def older_than_current(table, times: SnapshotTimes) -> int | None:
    """Expire every snapshot older than the current one."""
    current = table.currentSnapshot()
    return None if current is None else current.timestampMillis()


def rewrite_data_files(spark, ref: TableRef, rewrite: Rewrite) -> int:
    """Iceberg's rewrite_data_files procedure; how many data files it rewrote."""
    args = [f"table => {sql_string(ref.short)}"]
    if rewrite.where:
        args.append(f"where => {sql_string(rewrite.where)}")
    options = ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in rewrite.options.items())
    args.append(f"options => map({options})")
    res = spark.sql(f"CALL {ident(ref.catalog)}.system.rewrite_data_files({', '.join(args)})").collect()
    return int(res[0]["rewritten_data_files_count"]) if res else 0


def expire_snapshots(spark, ref: TableRef, expiry: Expiry) -> int:
    """Iceberg's core expiry, in the driver (for a table whose files were just rewritten it costs
    far less than the expire_snapshots procedure's Spark jobs); how many snapshots it expired."""
    table = iceberg_table(spark, ref)
    times = {s.snapshotId(): s.timestampMillis() for s in table.snapshots()}
    cut = expiry.cut(table, times)
    if cut is None or not any(t < cut for t in times.values()):
        return 0
    if expiry.before is not None:
        expiry.before(table, times)
    table.expireSnapshots().expireOlderThan(cut).retainLast(expiry.retain_last).commit()
    table.refresh()
    return len(times) - len(list(table.snapshots()))


def rewrite_and_expire(spark, ref: TableRef, rewrite: Rewrite | None, expiry: Expiry,
                       fail_at: str | None = None) -> RewriteAndExpire:
    """Rewrite (None: no rewrite this time), then expire; ``fail_at``: the fail point between."""
    rewritten = 0
    if rewrite is not None:
        rewritten = rewrite_data_files(spark, ref, rewrite)
        if fail_at:
            fail_point(fail_at)
    return RewriteAndExpire(rewritten, expire_snapshots(spark, ref, expiry))


def purge_deleted(spark, ref: TableRef) -> RewriteAndExpire:
    """Rewrite every file carrying deletes and expire every older snapshot: what a table the
    cleaner owns outright (a quarantine, the request table) needs for a removed row to leave disk."""
    return rewrite_and_expire(spark, ref, Rewrite(DELETES_OUT), Expiry(older_than_current))
