"""The run history is maintained like any table: old rows deleted, small files rewritten."""
import time

import pytest

from lakecleaner.spark.history import record_history
from lakecleaner.core.housekeeping import DAY_MS, run_history_due
from lakecleaner.spark.housekeeping import maintain_run_history

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


@pytest.fixture
def new_york_driver(monkeypatch):
    """This driver's local time zone is New York's (UTC-4/-5) for the test: PySpark turns a naive
    datetime into an instant through the Python process's local zone, not the session's."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_started_at_is_the_runs_instant_whatever_the_drivers_time_zone(spark, lake_config, table_name,
                                                                       new_york_driver):
    from lakecleaner.core.history import read_history

    assert time.localtime().tm_gmtoff in (-4 * 3600, -5 * 3600)
    before_us = time.time_ns() // 1000
    record_history(spark, lake_config, {"table": table_name, "run_id": "tz", "status": "committed",
                                         "now_ms": before_us // 1000, "dry_run": False})
    after_us = time.time_ns() // 1000
    (stored,) = spark.sql(f"SELECT unix_micros(started_at) AS us FROM {lake_config.history_table} "
                          f"WHERE table_name = '{table_name}'").collect()
    assert before_us <= stored["us"] <= after_us
    (row,) = read_history(lake_config, table_name)  # pyiceberg, as the DAG and the UI read it
    assert before_us <= round(row["started_at"].timestamp() * 1_000_000) <= after_us
