"""The cleaner's own tables kept to a bounded size (lakecleaner.core.housekeeping decides when), by
the Spark application that runs first on a new day: the run history, and the data-quality results
with their Data Docs pages."""
from __future__ import annotations

import os
import time

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.housekeeping import DAY_MS, HISTORY_MAINTENANCE, retention_cutoff_ms
from lakecleaner.core.state import write_document


def maintain_run_history(spark, cfg: LakecleanerConfig, now_ms: int) -> dict[str, int]:
    """Delete run-history rows older than the retention, rewrite its small files (one per run and
    table) and expire its old snapshots: the UI and the DAG's summary read this table."""
    from lakecleaner.core.table import TableRef
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
    from lakecleaner.core.table import TableRef
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
        keys = spark.createDataFrame([tuple(r[f] for f in KEY_FIELDS) for r in doomed],
                                     results.select(*KEY_FIELDS).schema)
        view = f"lc_doomed_results_{os.getpid()}_{int(time.time() * 1000)}"
        keys.createOrReplaceTempView(view)
        try:
            spark.sql(f"MERGE INTO {ref.sql()} t USING {view} d ON t.table_name = d.table_name AND "
                      "t.run_name <=> d.run_name AND t.now_ms = d.now_ms AND t.recorded_at = d.recorded_at "
                      "WHEN MATCHED THEN DELETE")
        finally:
            spark.catalog.dropTempView(view)
        pages = {p for r in doomed for p in (r["docs_page"], r["run_history_docs_page"]) if p}
        kept = spark.table(name).where(F.col("docs_page").isin(*pages) | F.col("run_history_docs_page").isin(*pages))
        pages -= {p for r in kept.select("docs_page", "run_history_docs_page").collect() for p in r if p}
        for page in sorted(pages):
            delete_file(cfg, f"{DOCS}/{page}")
            pages_deleted += 1
    return {"rows_deleted": len(doomed), "data_docs_pages_deleted": pages_deleted, **_compact(spark, ref)}


def _compact(spark, ref) -> dict[str, int]:
    """Rewrite an own table's small files (a row per run, table and validation) and expire its
    snapshots older than a day (the last one kept)."""
    from lakecleaner.spark.catalog import iceberg_table

    res = spark.sql(f"CALL `{ref.catalog}`.system.rewrite_data_files(table => '{ref.short}', "
                    "options => map('min-input-files', '5', 'remove-dangling-deletes', 'true'))").collect()
    table = iceberg_table(spark, ref)
    snapshots = len(list(table.snapshots()))
    table.expireSnapshots().expireOlderThan(int(time.time() * 1000) - DAY_MS).retainLast(1).commit()
    table.refresh()
    return {"files_rewritten": int(res[0]["rewritten_data_files_count"]) if res else 0,
            "snapshots_expired": snapshots - len(list(table.snapshots()))}
