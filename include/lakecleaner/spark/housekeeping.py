"""The run history kept to a bounded size (lakecleaner.core.housekeeping decides when), by the Spark
application that runs first on a new day."""
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
    from lakecleaner.spark.catalog import iceberg_table
    from lakecleaner.spark.history import ensure_history_table

    ensure_history_table(spark, cfg)
    ref = TableRef.parse(cfg.history_table, cfg.catalog.name)
    cutoff = retention_cutoff_ms(cfg, now_ms)
    before = spark.table(cfg.history_table).where(f"now_ms < {cutoff}").count()
    if before:
        spark.sql(f"DELETE FROM {ref.sql()} WHERE now_ms < {cutoff}")
    res = spark.sql(f"CALL `{ref.catalog}`.system.rewrite_data_files(table => '{ref.short}', "
                    "options => map('min-input-files', '5', 'remove-dangling-deletes', 'true'))").collect()
    table = iceberg_table(spark, ref)
    snapshots = len(list(table.snapshots()))
    table.expireSnapshots().expireOlderThan(int(time.time() * 1000) - DAY_MS).retainLast(1).commit()
    table.refresh()
    write_document(cfg, HISTORY_MAINTENANCE, {"last_ms": now_ms, "pid": os.getpid()})
    return {"rows_deleted": before, "files_rewritten": int(res[0]["rewritten_data_files_count"]) if res else 0,
            "snapshots_expired": snapshots - len(list(table.snapshots()))}
