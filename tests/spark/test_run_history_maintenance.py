"""The run history is maintained like any table: old rows deleted, small files rewritten."""
import time

import pytest

from lakecleaner.history import record_history
from lakecleaner.housekeeping import DAY_MS, maintain_run_history, run_history_due

pytestmark = pytest.mark.spark


def test_run_history_keeps_the_retention_and_few_files(spark, lake_config, table_name):
    now = int(time.time() * 1000)
    for i, age_days in enumerate((45, 40, 2, 1, 0, 0)):
        record_history(spark, lake_config, {"table": table_name, "run_id": f"r{i}", "status": "committed",
                                             "now_ms": now - age_days * DAY_MS, "dry_run": False})
    mine = f"table_name = '{table_name}'"
    assert spark.table(lake_config.history_table).where(mine).count() == 6
    out = maintain_run_history(spark, lake_config, now)
    left = sorted(r["run_id"] for r in spark.table(lake_config.history_table).where(mine).collect())
    assert left == ["r2", "r3", "r4", "r5"] and out["rows_deleted"] >= 2
    files = spark.sql(f"SELECT count(*) AS n FROM {lake_config.history_table}.files").collect()[0]["n"]
    assert files < 6 and out["files_rewritten"] >= 0 and out["snapshots_expired"] >= 0
    assert not run_history_due(lake_config, now) and run_history_due(lake_config, now + DAY_MS)
