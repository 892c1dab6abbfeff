"""The run history and the data-quality results are maintained like any table: old rows deleted
(each table's newest result kept, with its Data Docs pages), small files rewritten."""
import time

import pytest

from lakecleaner.core.records import CleanerStats
from lakecleaner.spark.history import record_history
from lakecleaner.core.housekeeping import DAY_MS, run_history_due
from lakecleaner.spark.housekeeping import maintain_run_history

pytestmark = pytest.mark.spark


def test_run_history_keeps_the_retention_and_few_files(spark, lake_config, table_name):
    now = int(time.time() * 1000)
    for i, age_days in enumerate((45, 40, 2, 1, 0, 0)):
        record_history(spark, lake_config, CleanerStats(table=table_name, run_id=f"r{i}", status="committed",
                                                        now_ms=now - age_days * DAY_MS))
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
    record_history(spark, lake_config, CleanerStats(table=table_name, run_id="tz", status="committed",
                                                    now_ms=before_us // 1000))
    after_us = time.time_ns() // 1000
    (stored,) = spark.sql(f"SELECT unix_micros(started_at) AS us FROM {lake_config.history_table} "
                          f"WHERE table_name = '{table_name}'").collect()
    assert before_us <= stored["us"] <= after_us
    (row,) = read_history(lake_config, table_name)  # pyiceberg, as the DAG and the UI read it
    assert before_us <= round(row["started_at"].timestamp() * 1_000_000) <= after_us


def test_quality_results_keep_the_retention_each_tables_newest_and_their_pages(spark, lake_config, table_name):
    import datetime as dt

    from lakecleaner.core.quality_results import list_results, read_docs_file
    from lakecleaner.core.state import put_file
    from lakecleaner.spark.housekeeping import maintain_quality_results
    from lakecleaner.spark.quality import ensure_results_table, record_result

    cfg = lake_config
    other = f"{table_name}_other"
    ensure_results_table(spark, cfg)
    now = int(time.time() * 1000)
    rows = [(table_name, "old", 50, "p-old"), (table_name, "rerun", 40, "p-shared"), (table_name, "rerun", 1, "p-shared"),
            (table_name, "new", 0, "p-new"), (other, "only", 60, "p-only")]
    for table, run, age_days, page in rows:
        record_result(spark, cfg, {"table": table, "run_name": run, "now_ms": now - age_days * DAY_MS, "success": True,
                                   "warnings": 0, "rules": [], "docs_page": f"validations/{page}.html"},
                      f"validations/{page}-history.html")
        for name in (page, f"{page}-history"):
            put_file(cfg, f"quality/docs/validations/{name}.html", b"page")
    recorded = dt.datetime.now(dt.timezone.utc)
    # recorded_at is the wall clock of the write: make the old ones old
    for table, _run, age_days, _ in rows:
        if age_days > 30:
            at = (recorded - dt.timedelta(days=age_days)).strftime("%Y-%m-%d %H:%M:%S")
            spark.sql(f"UPDATE {cfg.catalog.name}.lakecleaner.quality_results SET recorded_at = TIMESTAMP '{at}' "
                      f"WHERE table_name = '{table}' AND now_ms = {now - age_days * DAY_MS}")
    out = maintain_quality_results(spark, cfg, now)
    left = sorted((r["table"], r["run_name"], r["now_ms"]) for r in list_results(cfg, tables=[table_name, other]))
    assert left == sorted([(table_name, "rerun", now - DAY_MS), (table_name, "new", now), (other, "only", now - 60 * DAY_MS)])
    assert out["rows_deleted"] >= 2
    pages = {p: read_docs_file(cfg, f"validations/{p}.html") is not None
             for p in ("p-old", "p-old-history", "p-shared", "p-shared-history", "p-new", "p-only")}
    assert pages == {"p-old": False, "p-old-history": False, "p-shared": True, "p-shared-history": True,
                     "p-new": True, "p-only": True}  # a page a kept row names stays; a table's newest stays


def test_the_cleaners_own_tables_take_the_configured_format_version(spark, lake_config, table_name):
    """cleaner.own_tables_format_version=3: the run history, the forget audit, the erasure requests
    and the data-quality results are created as v3 tables (the requests keeping their own write
    modes); the run history is maintained and read back by pyiceberg as on v2."""
    import dataclasses

    from lakecleaner.core.erasure_requests import requests_ref
    from lakecleaner.core.history import read_history
    from lakecleaner.core.table import TableRef
    from lakecleaner.spark.catalog import format_version
    from lakecleaner.spark.erasure_requests import ensure_requests_table
    from lakecleaner.spark.forget import audit_table, ensure_audit_table
    from lakecleaner.spark.quality import ensure_results_table

    cfg = dataclasses.replace(lake_config, cleaner=dataclasses.replace(
        lake_config.cleaner, meta_namespace=f"own_v3_{int(time.time() * 1000) % 10**8}", own_tables_format_version=3))
    now = int(time.time() * 1000)
    for i, age_days in enumerate((45, 0)):
        record_history(spark, cfg, CleanerStats(table=table_name, run_id=f"r{i}", status="committed",
                                                now_ms=now - age_days * DAY_MS, dry_run=False))
    ensure_audit_table(spark, cfg)
    ensure_requests_table(spark, cfg)
    ensure_results_table(spark, cfg)
    own = [cfg.history_table, audit_table(cfg).replace("`", ""), f"{cfg.catalog.name}.{cfg.cleaner.meta_namespace}"
           ".quality_results"]
    refs = [TableRef.parse(t, cfg.catalog.name) for t in own] + [requests_ref(cfg)]
    assert [format_version(spark, ref) for ref in refs] == [3, 3, 3, 3]
    assert spark.sql(f"SHOW TBLPROPERTIES {requests_ref(cfg).sql()} ('write.delete.mode')").first()[1] == "copy-on-write"
    assert maintain_run_history(spark, cfg, now)["rows_deleted"] == 1
    assert [r["run_id"] for r in read_history(cfg, table_name)] == ["r1"]
