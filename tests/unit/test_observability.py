"""The pure parts of metrics, alerts and asset events: which figures, alerts and events one run
yields, and the ``notifiers:`` section of the YAML. No Airflow here (tests/airflow sends them)."""
from __future__ import annotations

import re

import pytest

from lakecleaner.airflow import assets, metrics, notify
from lakecleaner.core.config import ALERT_KINDS, CatalogConfig, ConfigError, NotifierSpec, load_config, parse_notifiers
from lakecleaner.airflow.metrics import COUNT, GAUGE, TIMING, Metric

EVALUATIONS = [
    {"table": "a.ok", "status": "not eligible", "dirty_ratio": 0.25, "max_compaction_delay_ms": 0,
     "max_compaction_lag_ms": None},
    {"table": "a.late", "status": "eligible", "dirty_ratio": 0.9, "max_compaction_delay_ms": 5_000,
     "max_compaction_lag_ms": 1_000},
    {"table": "a.stuck", "status": "uncleanable", "dirty_ratio": 0.5, "max_compaction_delay_ms": 7_000,
     "max_compaction_lag_ms": 2_000},
    {"table": "a.broken", "status": "invalid config", "reason": "table a.broken: ..."},
]
REPORT = {
    "tables": [
        {"table": "a.late", "status": "ok", "run": "committed", "removed_superseded": 7,
         "removed_expired_tombstones": 2, "quarantined": 1, "bytes_read": 1000, "bytes_written": 200,
         "duration_ms": 1500, "records_read": 20},
        {"table": "a.dry", "status": "ok", "run": "dry_run", "removed_superseded": 3, "duration_ms": 10},
        {"table": "a.failing", "status": "failed", "failed_step": "compact", "run": "failed",
         "error": "table a.failing: compact failed: FileNotFound"},
        {"table": "a.dupes", "status": "failed", "failed_step": "validate", "run": "committed",
         "error": "table a.dupes: data-quality rule failed: offsets unique per partition: ..."},
    ],
    "failed": ["a.failing", "a.dupes"],
}


def test_evaluation_metrics_are_kafkas_gauges_per_table_and_over_all_tables():
    figures = metrics.evaluation_metrics(EVALUATIONS)
    assert Metric("dirty-percent", GAUGE, 90.0, "a.late") in figures
    assert Metric("compaction-delay-secs", GAUGE, 5.0, "a.late") in figures
    assert not [m for m in figures if m.table == "a.broken"]  # no figures for a table that has none
    assert metrics.overall(figures) == {"max-dirty-percent": 90.0, "max-compaction-delay-secs": 7.0,
                                        "uncleanable-partitions-count": 1}
    assert {m.stat for m in figures} >= {"lakecleaner.max-dirty-percent", "lakecleaner.dirty-percent"}
    assert Metric("dirty-percent", GAUGE, 90.0, "a.late").tags == {"table": "a.late"}
    assert metrics.overall(metrics.evaluation_metrics([]))["max-dirty-percent"] == 0.0


def test_run_metrics_count_only_committed_compactions_and_time_since_each_tables_last_success():
    figures = metrics.run_metrics(REPORT, {"a.late": 10_000, "a.ok": 4_000, "a.new": None}, now_ms=10_000)
    late = {m.name: (m.kind, m.value) for m in figures if m.table == "a.late"}
    assert late == {"records-removed": (COUNT, 9), "records-quarantined": (COUNT, 1), "bytes-read": (COUNT, 1000),
                    "bytes-written": (COUNT, 200), "run-duration-ms": (TIMING, 1500),
                    "time-since-last-run-ms": (GAUGE, 0)}
    assert not [m for m in figures if m.table == "a.dry"]  # a dry run removed nothing
    assert Metric("time-since-last-run-ms", GAUGE, 6_000, "a.ok") in figures
    assert not [m for m in figures if m.table == "a.new"]  # never cleaned: no figure rather than a made-up one
    assert metrics.overall(figures) == {"max-time-since-last-run-ms": 6_000, "failed-tables-count": 2}


def test_alerts_new_uncleanable_marks_failed_quality_and_tables_still_past_their_lag():
    now_ms = 50_000
    alerts = notify.run_alerts(EVALUATIONS, REPORT, {"a.failing": now_ms, "a.dupes": None}, now_ms)
    assert [(a.kind, a.table) for a in alerts] == [
        ("uncleanable", "a.failing"), ("quality_failed", "a.dupes"), ("compaction_lag", "a.stuck")]
    assert "lakecleaner clear-uncleanable a.failing" in alerts[0].message
    assert alerts[1].message.startswith("table a.dupes: data-quality rule failed: offsets unique per partition")
    assert alerts[2].details == {"max_compaction_delay_ms": 7_000, "max_compaction_lag_ms": 2_000,
                                 "outcome": "uncleanable"}
    assert alerts[0].as_dict()["subject"] == "lakecleaner: uncleanable: a.failing"
    # a mark set by an earlier run does not alert again; a.late was past its lag but compacted: no alert
    assert [a.kind for a in notify.run_alerts(EVALUATIONS, REPORT, {"a.failing": now_ms - 900_000}, now_ms)] == [
        "quality_failed", "compaction_lag"]


def test_an_asset_event_per_table_compacted_and_verified_this_run():
    compacted = {"status": "committed", "records_read": 20, "records_kept": 11, "removed_superseded": 7,
                 "removed_expired_tombstones": 2, "quarantined": 0, "bytes_read": 1000, "bytes_written": 200,
                 "duration_ms": 1500, "checkpoint": {"0": 19}}
    outcomes = [{"table": "a.late", "status": "ok", "steps": {"compact": compacted, "validate": {"success": True}}},
                {"table": "a.dry", "status": "ok", "steps": {"compact": {**compacted, "status": "dry_run"}}},
                {"table": "a.dupes", "status": "failed", "failed_step": "validate", "steps": {"compact": compacted}},
                {"table": "a.failing", "status": "failed", "failed_step": "compact", "steps": {}},
                {"table": "a.later", "status": "deferred", "steps": {}}]
    catalog = CatalogConfig(name="lake", type="rest", properties={"uri": "https://cat.example.com/api/catalog"})
    (event,) = assets.compaction_events(catalog, outcomes, now_ms=7)
    assert event.uri == "iceberg://cat.example.com/api/catalog/a/late"  # the catalog, not the alias
    assert event.extra == {"table": "a.late", "catalog": "lake", "now_ms": 7, "records_read": 20, "records_kept": 11,
                           "removed_superseded": 7, "removed_expired_tombstones": 2, "quarantined": 0,
                           "bytes_read": 1000, "bytes_written": 200, "duration_ms": 1500}
    with pytest.raises(ValueError, match="'nodots': expected namespace.table"):
        assets.table_uri(catalog, "nodots")


def test_notifiers_section_is_parsed_and_each_mistake_names_its_entry(tmp_path):
    (spec,) = parse_notifiers([{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
                                "kwargs": {"to": "oncall@example.com"}, "alerts": ["uncleanable"]}])
    assert spec == NotifierSpec("airflow.providers.smtp.notifications.smtp.SmtpNotifier",
                                {"to": "oncall@example.com"}, ("uncleanable",))
    assert parse_notifiers([{"class": "x.Y"}])[0].alerts == ALERT_KINDS and parse_notifiers(None) == ()
    for raw, where in (({"class": "x.Y"}, "notifiers: "), ([{"class": "NoModule"}], "notifiers[0].class"),
                       ([{"class": "x.Y"}, {"class": "x.Y", "kwargs": [1]}], "notifiers[1].kwargs"),
                       ([{"class": "x.Y", "alerts": ["pager"]}], "notifiers[0].alerts"),
                       ([{"class": "x.Y", "to": "a"}], "notifiers[0].to")):
        with pytest.raises(ConfigError, match="^lakecleaner config: " + re.escape(where)):
            parse_notifiers(raw)
    path = tmp_path / "lakecleaner.yaml"
    path.write_text("notifiers:\n  - class: pkg.mod.Notifier\n    kwargs: {channel: '#oncall'}\n")
    assert load_config(path).notifiers == (NotifierSpec("pkg.mod.Notifier", {"channel": "#oncall"}),)
