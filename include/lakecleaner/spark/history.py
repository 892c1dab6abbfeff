"""Writing the run history (<catalog>.<meta namespace>.run_history), from the Spark application that
ran the run; reading it needs no Spark (lakecleaner.core.history). The cleaner's own tables are created
here (``ensure_own_table``)."""
from __future__ import annotations

import logging

from pyspark.sql.types import _parse_datatype_string

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.records import HISTORY_SCHEMA, CleanerStats
from lakecleaner.core.table import first_line
from lakecleaner.spark.catalog import create_own_table
from lakecleaner.spark.frames import local_frame

log = logging.getLogger("lakecleaner")


def ensure_history_table(spark, cfg: LakecleanerConfig) -> None:
    """Create the run history table, or add the columns a table from an earlier version lacks."""
    ensure_own_table(spark, cfg, cfg.history_table, HISTORY_SCHEMA)


def ensure_own_table(spark, cfg: LakecleanerConfig, table: str, schema: str) -> None:
    """Create one of the cleaner's own tables (run history, data-quality results) in its meta
    namespace, or add the columns a table from an earlier version lacks (Iceberg adds columns in
    metadata only; old rows read them as null)."""
    create_own_table(spark, cfg, table, schema)
    have = {f.name for f in spark.table(table).schema.fields}
    added = [f"{f.name} {f.dataType.simpleString()}" for f in _parse_datatype_string(schema).fields
             if f.name not in have]
    if added:
        spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({', '.join(added)})")


def record_history(spark, cfg: LakecleanerConfig, stats: CleanerStats) -> None:
    """Append the run's figures to <catalog>.lakecleaner.run_history (the UI charts it)."""
    import datetime as dt

    schema = _parse_datatype_string(HISTORY_SCHEMA)
    # aware: PySpark reads a naive datetime as the driver's local time, whatever the session's zone
    row = {**stats.history_row(), "started_at": dt.datetime.now(dt.timezone.utc)}
    try:
        ensure_history_table(spark, cfg)
        local_frame(spark, [tuple(row[f.name] for f in schema.fields)], schema).writeTo(cfg.history_table).append()
    except Exception as exc:  # noqa: BLE001 - history is secondary; never hide the run's own outcome
        print(f"lakecleaner: could not record run history for {stats.table}: {first_line(exc)}", flush=True)
