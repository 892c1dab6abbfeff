"""Reading the run history (<catalog>.<meta namespace>.run_history) without Spark: for the DAG's
summary, failure reasons and the Airflow UI; and writing it, from the Spark application that ran
the run (``record_history``)."""
from __future__ import annotations

import json
import logging
from typing import Iterable

from .catalog import create_unless_exists, first_line
from .config import LakecleanerConfig
from .metadata import own_table

log = logging.getLogger("lakecleaner")


def read_history(cfg: LakecleanerConfig, table: str | None = None, limit: int | None = 500, *,
                 now_ms: int | None = None, tables: Iterable[str] | None = None,
                 newest_first: bool = True, since_ms: int | None = None) -> list[dict]:
    """Runs filtered by table(s), the run's now, or runs since ``since_ms`` (a filter Iceberg prunes
    files by, so a page reads a window, not the whole history); [] while no run has been recorded."""
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThanOrEqual, In

    tbl = own_table(cfg, "run_history")
    if tbl is None:
        return []
    where = AlwaysTrue()
    if table is not None:
        where = And(where, EqualTo("table_name", table))
    if tables is not None:
        where = And(where, In("table_name", tuple(tables)))
    if now_ms is not None:
        where = And(where, EqualTo("now_ms", int(now_ms)))
    if since_ms is not None:
        where = And(where, GreaterThanOrEqual("now_ms", int(since_ms)))
    rows = tbl.scan(row_filter=where).to_arrow().to_pylist()
    rows.sort(key=lambda r: (r["started_at"] is not None, r["started_at"]), reverse=newest_first)
    return rows[:limit] if limit else rows


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
    create_unless_exists(lambda: spark.sql(
        f"CREATE NAMESPACE IF NOT EXISTS `{cfg.catalog.name}`.`{cfg.cleaner.meta_namespace}`"))
    create_unless_exists(lambda: spark.sql(
        f"CREATE TABLE IF NOT EXISTS {cfg.history_table} ({HISTORY_SCHEMA}) USING iceberg"))
    have = {f.name for f in spark.table(cfg.history_table).schema.fields}
    added = [f"{f.name} {f.dataType.simpleString()}" for f in _parse_datatype_string(HISTORY_SCHEMA).fields
             if f.name not in have]
    if added:
        spark.sql(f"ALTER TABLE {cfg.history_table} ADD COLUMNS ({', '.join(added)})")


def record_history(spark, cfg: LakecleanerConfig, stats: dict) -> None:
    """Append the run's figures to <catalog>.lakecleaner.run_history (the UI charts it)."""
    import datetime as dt

    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(HISTORY_SCHEMA)
    row = {f.name: None for f in schema.fields}
    row.update({k: v for k, v in stats.items() if k in row and k != "checkpoint"})
    row["table_name"] = stats["table"]
    # aware: PySpark reads a naive datetime as the driver's local time, whatever the session's zone
    row["started_at"] = dt.datetime.now(dt.timezone.utc)
    row["checkpoint"] = json.dumps(stats.get("checkpoint")) if stats.get("checkpoint") is not None else None
    try:
        ensure_history_table(spark, cfg)
        spark.createDataFrame([tuple(row[f.name] for f in schema.fields)], schema).writeTo(cfg.history_table).append()
    except Exception as exc:  # noqa: BLE001 - history is secondary; never hide the run's own outcome
        print(f"lakecleaner: could not record run history for {stats['table']}: {first_line(exc)}", flush=True)
