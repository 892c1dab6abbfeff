"""The table in its catalog, seen from Spark: loading its settings, its current snapshot and
lineage (what happened since the run's pinned snapshot). Every failure names the table
(lakecleaner.core.table.CompactionError)."""
from __future__ import annotations

import os
import signal
import time
from typing import Iterable

from lakecleaner.core.table import (LAYOUT_PROPERTIES, CompactionError, ConcurrentCommitError, NoSuchTableError,
                                    TableRef, create_unless_exists, first_line)
from lakecleaner.core.config import ConfigError, LakecleanerConfig, TableConfig, is_compacted, resolve_table

def load_table_config(spark, cfg: LakecleanerConfig, ref: TableRef) -> tuple[TableConfig, dict[str, str]]:
    try:
        iceberg_table(spark, ref)  # refreshed: the checkpoint and the snapshot read next must agree
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}
    except Exception as exc:  # noqa: BLE001 - any failure to load is reported with the table's name
        if _known_missing(spark, ref):
            raise NoSuchTableError(ref.short, f"cannot load table: no such table in catalog {ref.catalog}") from exc
        raise CompactionError(ref.short, f"cannot load table: {first_line(exc)}") from exc
    if not is_compacted(props):
        raise ConfigError(ref.short, "cleanup.policy", props.get("cleanup.policy"), "not a compacted table (needs compact)")
    columns = {f.name: f.dataType.simpleString() for f in spark.table(ref.sql()).schema.fields}
    return resolve_table(ref.short, props, columns, cfg.defaults), props


def table_exists(spark, ref: TableRef) -> bool:
    """Spark's answer: false only on the catalog's own "no such table"; a catalog that cannot be
    asked raises."""
    return spark.catalog.tableExists(ref.sql().replace("`", ""))


def _known_missing(spark, ref: TableRef) -> bool:
    """Whether the catalog says the table does not exist (a catalog that cannot be asked says nothing)."""
    try:
        return not table_exists(spark, ref)
    except Exception:  # noqa: BLE001 - unknown, not missing
        return False


def current_snapshot(spark, ref: TableRef, refresh: bool = True) -> int | None:
    snap = iceberg_table(spark, ref, refresh).currentSnapshot()
    return None if snap is None else snap.snapshotId()


def snapshot_summary(spark, ref: TableRef) -> dict[str, str]:
    """The refreshed table's current snapshot summary (Iceberg's running totals: total-records,
    total-position-deletes, total-files-size, ...); {} for a table without snapshots. No Spark job."""
    snap = iceberg_table(spark, ref).currentSnapshot()
    return {} if snap is None else {str(k): str(v) for k, v in snap.summary().items()}


def iceberg_table(spark, ref: TableRef, refresh: bool = True):
    """The table's Iceberg (Java) object, refreshed from the catalog. Spark's Iceberg catalog caches
    tables (cache-enabled, 30 s) and hands this same object to later reads, so without the refresh a
    commit by another process could stay unseen by the checks before our commit. One catalog call
    also costs less than querying the refs and snapshots metadata tables (0.2 s of a run)."""
    table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, ref.sql())
    if refresh:
        table.refresh()
    return table


def swap_property(spark, ref: TableRef, name: str, expected: str | None, value: str, attempts: int = 5) -> bool:
    """Set a table property only if it still holds ``expected`` (None: unset): False, and nothing
    set, if it holds anything else. Iceberg's own property update (ALTER TABLE ... SET
    TBLPROPERTIES) re-applies itself to whatever the table holds when its commit retries, so two
    runs would each write their own; this one checks the value on the metadata it commits against,
    and the catalog's commit fails if that metadata is no longer current (then it reads again)."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    ops = iceberg_table(spark, ref, refresh=False).operations()
    for attempt in range(attempts):
        time.sleep(0.1 * (2 ** attempt - 1))  # as Iceberg's own commit retries back off: 0, 0.1, 0.3 s...
        base = ops.refresh()
        if base.properties().get(name) != expected:
            return False
        updated = jvm.org.apache.iceberg.TableMetadata.buildFrom(base).setProperties({name: value}).build()
        try:
            ops.commit(base, updated)
            return True
        except Py4JJavaError as exc:
            if "CommitFailedException" not in str(exc.java_exception.getClass().getName()):
                raise
    raise ConcurrentCommitError(ref.short, f"{name} could not be committed: the table's metadata kept changing "
                                           f"({attempts} attempts)")


def commit_times(spark, ref: TableRef, snapshot_ids: Iterable[int]) -> dict[int, int]:
    """The commit time (epoch ms) of each snapshot the table's metadata still holds (an expired one
    is absent), from the table object as last loaded: snapshots never change. No Spark job: joining
    a run's data files with the snapshots metadata table cost a fifth of a small table's run
    (2.4 -> 1.9 CPU s), and two py4j calls per snapshot cost little beside that."""
    table = iceberg_table(spark, ref, refresh=False)
    snapshots = {sid: table.snapshot(sid) for sid in set(snapshot_ids) if sid is not None}
    return {sid: int(snap.timestampMillis()) for sid, snap in snapshots.items() if snap is not None}


def format_version(spark, ref: TableRef) -> int:
    """The table's Iceberg format version (kept in its metadata, not among its properties), from
    the table object as last loaded: a table's version only ever goes up, and not mid-run."""
    return int(spark._jvm.org.apache.iceberg.TableUtil.formatVersion(iceberg_table(spark, ref, refresh=False)))


def create_own_table(spark, cfg: LakecleanerConfig, table: str, schema: str,
                     properties: dict[str, str] | None = None) -> None:
    """Create one of the cleaner's own tables (run history, forget audit, erasure requests,
    data-quality results) and its meta namespace unless they exist, in the format version the
    config chooses for them (cleaner.own_tables_format_version)."""
    from lakecleaner.core.strategies import ident, sql_string

    props = {"format-version": str(cfg.cleaner.own_tables_format_version), **(properties or {})}
    assignments = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in props.items())
    # IF NOT EXISTS is itself check-then-create inside Spark: another process can win in between
    create_unless_exists(lambda: spark.sql(
        f"CREATE NAMESPACE IF NOT EXISTS {ident(cfg.catalog.name)}.{ident(cfg.cleaner.meta_namespace)}"))
    create_unless_exists(lambda: spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({schema}) USING iceberg TBLPROPERTIES ({assignments})"))


def fail_point(name: str) -> None:
    """Crash injection for tests: LAKECLEANER_FAIL_AT=<name> makes the run fail at that point;
    LAKECLEANER_FAIL_AT=kill:<name> kills the whole process there (SIGKILL: nothing runs after)."""
    wanted = os.environ.get("LAKECLEANER_FAIL_AT")
    if wanted == name:
        raise RuntimeError(f"injected failure at {name}")
    if wanted == f"kill:{name}":
        os.kill(os.getpid(), signal.SIGKILL)


def set_layout_defaults(spark, ref: TableRef, props: dict[str, str]) -> None:
    """Set the write modes the MERGE relies on, where the table does not choose otherwise (unset,
    Iceberg's MERGE copies on write). Callers refuse a table's own contrary choice first
    (layout_problem)."""
    from lakecleaner.core.strategies import sql_string

    missing = {k: v for k, v in LAYOUT_PROPERTIES.items() if k not in props}
    if missing:
        assignments = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in missing.items())
        spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ({assignments})")


def committed_snapshot(spark, ref: TableRef, since: int) -> dict | None:
    """Our MERGE's snapshot: the first non-append on the current lineage after ``since`` (the
    table as it was checked just before the MERGE), whatever may have been committed after it."""
    _, after, _ = lineage_since(spark, ref, since)
    ours = next((row for row in reversed(after) if row["operation"] != "append"), None)
    return {"snapshot_id": ours["snapshot_id"], "summary": ours["summary"], "committed_ms": ours["committed_ms"]} \
        if ours else None


def lineage_since(spark, ref: TableRef, snapshot: int) -> tuple[int | None, list, bool]:
    """The current snapshot, the snapshots on its lineage after ``snapshot`` (newest first), and
    whether the walk reached ``snapshot``. Walked on one refreshed view of the table's metadata, so
    the current snapshot and its ancestors are consistent."""
    table = iceberg_table(spark, ref)
    node = table.currentSnapshot()
    current = None if node is None else node.snapshotId()
    lineage = []
    while node is not None and node.snapshotId() != snapshot:
        operation = node.operation()
        # a summary is only needed of what is not an append: our commit, or what stops the run
        summary = {} if operation == "append" else {str(k): str(v) for k, v in node.summary().items()}
        lineage.append({"snapshot_id": node.snapshotId(), "operation": operation, "summary": summary,
                        "committed_ms": node.timestampMillis()})
        parent = node.parentId()
        node = None if parent is None else table.snapshot(parent)
    return current, lineage, node is not None


