"""The cleaner's own tables kept to a bounded size (lakecleaner.core.housekeeping decides when), by
the Spark application that runs first on a new day: the run history, and the data-quality results
with their Data Docs pages."""
from __future__ import annotations

import os
import time

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.housekeeping import DAY_MS, HISTORY_MAINTENANCE, retention_cutoff_ms
from lakecleaner.core.state import write_document
from lakecleaner.core.table import TableRef
from lakecleaner.spark.frames import local_frame, merge_delete
from lakecleaner.spark.iceberg_ops import Expiry, Rewrite, older_than, rewrite_and_expire


def maintain_run_history(spark, cfg: LakecleanerConfig, now_ms: int) -> dict[str, int]:
    """Delete run-history rows older than the retention, rewrite its small files (one per run and
    table) and expire its old snapshots: the UI and the DAG's summary read this table."""
    from lakecleaner.spark.history import ensure_history_table

    ensure_history_table(spark, cfg)
    ref = TableRef.parse(cfg.history_table, cfg.catalog.name)
    cutoff = retention_cutoff_ms(cfg, now_ms)
    before = spark.table(cfg.history_table).where(f"now_ms < {cutoff}").count()
    if before:
        spark.sql(f"DELETE FROM {ref.sql()} WHERE now_ms < {cutoff}")
    figures = _compact(spark, ref)
    write_document(cfg, HISTORY_MAINTENANCE, {"last_ms": now_ms, "pid": os.getpid()})
    return {"rows_deleted": before, **figures}


def maintain_quality_results(spark, cfg: LakecleanerConfig, now_ms: int) -> dict[str, int]:
    """Delete data-quality results recorded before the retention, except each table's newest, and
    their Data Docs pages under the state root (through FileIO: no listing needed, each row names
    its pages; a page a kept row also names, a rerun's, stays); then rewrite the table's small files
    (one per validation) and expire its old snapshots."""
    import datetime as dt

    from pyspark.sql import functions as F

    from lakecleaner.core.quality_results import DOCS, KEY_FIELDS, results_table
    from lakecleaner.core.state import delete_file
    from lakecleaner.spark.quality import ensure_results_table

    ensure_results_table(spark, cfg)
    name = results_table(cfg)
    ref = TableRef.parse(name, cfg.catalog.name)
    cutoff = dt.datetime.fromtimestamp(retention_cutoff_ms(cfg, now_ms) / 1000, dt.timezone.utc)
    results = spark.table(name)
    newest = results.groupBy("table_name").agg(F.max("now_ms").alias("lc_newest_ms"))
    doomed = (results.join(newest, "table_name")
              .where((F.col("recorded_at") < F.lit(cutoff)) & (F.col("now_ms") < F.col("lc_newest_ms")))
              .select(*KEY_FIELDS, "docs_page", "run_history_docs_page").collect())
    pages_deleted = 0
    if doomed:
        keys = local_frame(spark, [tuple(r[f] for f in KEY_FIELDS) for r in doomed],
                           results.select(*KEY_FIELDS).schema)
        merge_delete(spark, ref, keys, "t.table_name = d.table_name AND t.run_name <=> d.run_name AND "
                     "t.now_ms = d.now_ms AND t.recorded_at = d.recorded_at", alias="d", name="lc_doomed_results")
        pages = {p for r in doomed for p in (r["docs_page"], r["run_history_docs_page"]) if p}
        kept = spark.table(name).where(F.col("docs_page").isin(*pages) | F.col("run_history_docs_page").isin(*pages))
        pages -= {p for r in kept.select("docs_page", "run_history_docs_page").collect() for p in r if p}
        for page in sorted(pages):
            delete_file(cfg, f"{DOCS}/{page}")
            pages_deleted += 1
    return {"rows_deleted": len(doomed), "data_docs_pages_deleted": pages_deleted, **_compact(spark, ref)}


# An own table's small files (a row per run, table and validation) are merged five at a time.
SMALL_FILES = Rewrite({"min-input-files": "5"})  # no dangling-delete pass: see iceberg_ops.DELETES_OUT


def _compact(spark, ref: TableRef) -> dict[str, int]:
    """Rewrite an own table's small files and expire its snapshots older than a day (the last one
    kept)."""
    done = rewrite_and_expire(spark, ref, SMALL_FILES, Expiry(older_than(lambda: int(time.time() * 1000) - DAY_MS)))
    return {"files_rewritten": done.files_rewritten, "snapshots_expired": done.snapshots_expired}
