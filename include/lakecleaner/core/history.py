"""Reading the run history (<catalog>.<meta namespace>.run_history) without Spark: for the DAG's
summary, failure reasons and the Airflow UI; and writing it, from the Spark application that ran
the run (``record_history``)."""
from __future__ import annotations

import logging
from typing import Iterable

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.metadata import own_table
from lakecleaner.core.records import HISTORY_SCHEMA

__all__ = ["HISTORY_SCHEMA", "read_history"]  # the columns: lakecleaner.core.records.CleanerStats

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
