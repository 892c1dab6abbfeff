"""The records that cross a process, XCom or document boundary: each reads what earlier versions
wrote (documents, XComs, run-history rows) and writes it back in the same shape; the DAG's evaluate
and summary steps (plan_run, finish_run) are plain functions on them."""
from __future__ import annotations

import json

import pytest

from lakecleaner.core import records, scheduler
from lakecleaner.core.config import CatalogConfig, LakecleanerConfig
from lakecleaner.core.evaluate import Evaluation
from lakecleaner.core.records import (ApplicationPlan, ApplicationReport, CleanerStats, EvaluationStatus, QualityStatus,
                                      RunStatus, RunVerdict, TableOutcome, TableStatus)
from lakecleaner.core.state import StateStore, read_document, write_document

# The run history's columns as every earlier version created them: a table keeps its columns'
# order and types, so the record's fields must keep deriving exactly these.
PERSISTED_HISTORY_SCHEMA = (
    "run_id string, table_name string, status string, error string, dry_run boolean, now_ms bigint, "
    "started_at timestamp, strategy string, records_read bigint, records_kept bigint, removed_superseded bigint, "
    "removed_expired_tombstones bigint, quarantined bigint, anomalous bigint, dirty_records_in_run bigint, "
    "bytes_read bigint, bytes_written bigint, files_rewritten bigint, delete_files_written bigint, "
    "duration_ms bigint, snapshot_id bigint, committed_snapshot_id bigint, checkpoint string, "
    "delete_retention_ms bigint, expired_tombstone_latest_cleaned_ms bigint"
)

# A committed run's figures as compact_table returned them (and reports kept them) before the record.
STATS = {"table": "a.t", "run_id": "abc", "now_ms": 10, "dry_run": False, "strategy": "offset",
         "delete_retention_ms": 86400000, "records_read": 9, "records_kept": 5, "removed_superseded": 3,
         "removed_expired_tombstones": 1, "quarantined": 0, "anomalous": 0, "dirty_records_in_run": 9, "bytes_read": 100,
         "bytes_written": 40, "files_rewritten": 0, "delete_files_written": 1, "expired_tombstone_latest_cleaned_ms": 7,
         "snapshot_id": 1, "committed_snapshot_id": 2, "checkpoint": {"0": 8, "1": 4}, "phases": {"setup_s": 0.1},
         "cleaned_at_ms": 11, "status": "committed", "duration_ms": 1200}


def test_the_run_history_columns_are_the_statistics_fields_as_persisted():
    from lakecleaner.core.history import HISTORY_SCHEMA

    assert records.HISTORY_SCHEMA == HISTORY_SCHEMA == PERSISTED_HISTORY_SCHEMA


def test_a_runs_statistics_read_and_write_as_the_engine_returned_them():
    stats = CleanerStats.from_dict(STATS)
    assert stats.as_result() == STATS  # no key the engine did not return (error, reason, checkpoint_reset)
    assert stats.status is RunStatus.COMMITTED and CleanerStats.from_dict(stats.to_dict()) == stats
    row = stats.history_row()
    assert row["table_name"] == "a.t" and "table" not in row and json.loads(row["checkpoint"]) == {"0": 8, "1": 4}
    assert set(row) | {"started_at"} == {c for c, _ in records.HISTORY_COLUMNS}
    failed_early = CleanerStats(run_id="r", table="a.t", status=RunStatus.FAILED, error="table a.t: boom")
    assert failed_early.history_row()["records_read"] is None  # a run that read nothing knows no figure


def test_figures_keep_what_the_run_did_not_remove():
    stats = CleanerStats(run_id="r", table="a.t").with_figures(10, superseded=4, expired=2, bad_removed=1,
                                                               phases={"merge_s": 1.5})
    assert (stats.records_read, stats.records_kept, stats.phases) == (10, 3, {"merge_s": 1.5})


def test_an_application_report_an_earlier_version_wrote_still_reads_and_writes_back_the_same(tmp_path):
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path)))
    written = {"tables": ["a.t", "a.u", "a.v"], "now_ms": 10, "in_progress": [], "finished": True, "outcomes": [
        {"table": "a.t", "status": "ok", "failed_step": None, "error": None,
         "steps": {"compact": STATS, "validate": {"success": True, "warnings": []}},
         "step_ms": {"compact": 5, "validate": 3}, "duration_ms": 8},
        {"table": "a.u", "status": "failed", "failed_step": "maintain", "error": "table a.u: x", "steps": {},
         "step_ms": {"maintain": 1}, "duration_ms": 1},
        {"table": "a.v", "status": "deferred", "failed_step": None, "error": "budget", "steps": {}, "step_ms": {},
         "duration_ms": 0}]}
    write_document(cfg, scheduler.report_name("run", 0), written)
    report = scheduler.read_report(cfg, "run", 0)
    assert report.to_dict() == written
    assert report.outcome("a.u").status is TableStatus.FAILED and not report.outcome("a.u").cleaned
    assert scheduler.read_report(cfg, "run", 1) is None
    # the oldest reports had only these keys; a test's (or a crashed writer's) even fewer
    minimal = ApplicationReport.from_dict({"finished": True, "outcomes": [{"table": "a.t", "status": "ok"}]})
    assert minimal.outcome("a.t") == TableOutcome(table="a.t", status=TableStatus.OK)


def test_the_plan_through_xcom_keeps_its_keys_and_ignores_what_an_edit_added():
    plan = ApplicationPlan(index=1, tables=("a.t",), priorities=(2,), work_bytes=5, now_ms=7)
    assert plan.to_dict() == {"index": 1, "tables": ["a.t"], "priorities": [2], "work_bytes": 5, "now_ms": 7}
    assert ApplicationPlan.from_dict({**plan.to_dict(), "config": "/elsewhere.yaml", "report": "x.json"}) == plan
    for index in ("0", True, -1, 1.0, "../x"):  # only an index names a report
        with pytest.raises(ValueError):
            ApplicationPlan.from_dict({**plan.to_dict(), "index": index})


def test_statuses_are_the_strings_documents_hold():
    assert [s.value for s in EvaluationStatus] == ["eligible", "not eligible", "invalid config", "invalid checkpoint",
                                                   "unreadable", "uncleanable", "not found"]
    assert [s.value for s in TableStatus] == ["ok", "failed", "deferred", "yielded", "skipped", "not run"]
    assert json.dumps({"status": TableStatus.NOT_RUN, "q": QualityStatus.of(False)}) == \
        '{"status": "not run", "q": "failed"}'
    assert f"{RunStatus.DRY_RUN}" == "dry_run" and EvaluationStatus("invalid config") == "invalid config"


def test_the_verdict_round_trips_through_the_summarys_xcom():
    xcom = {"tables": [{"table": "a.t", "status": "ok", "failed_step": None, "error": None, "priority": 1,
                        "application": 0, "run": "committed", "records_read": 4, "records_kept": 2,
                        "removed_superseded": 2, "removed_expired_tombstones": 0, "quarantined": 0, "bytes_read": 9,
                        "bytes_written": 3, "duration_ms": 5},
                       {"table": "a.u", "status": "not run", "failed_step": None, "error": "x", "priority": 2,
                        "application": 1}],
            "not_run": [{"table": "a.c", "status": "invalid config", "reason": "bad"}],
            "failed": ["a.x"], "deferred": ["a.u"], "failed_applications": [1]}
    verdict = RunVerdict.from_dict(xcom)
    assert verdict.to_dict() == xcom and verdict.tables[1].figures is None
    assert verdict.failure() == "lakecleaner: 1 table(s) failed: a.x; application(s) [1] did not end well"
    assert RunVerdict().failure() is None and RunVerdict().failure(["smtp down"]).endswith("not sent: smtp down")


@pytest.fixture
def cfg(tmp_path):
    return LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path)))


def test_plan_run_clears_the_marks_asked_evaluates_records_and_packs(cfg, monkeypatch):
    StateStore(cfg).record_failure("a.fixed", "boom", now_ms=1)
    seen = []

    def evaluate_all(c, tables, now_ms, ignore_marks=()):  # as the real one: every table, or a row for each name asked
        if tables:
            return [Evaluation(t, "invalid config", f"table {t}: invalid") for t in tables]
        seen.append(StateStore(c).uncleanable_reason("a.fixed"))
        return [Evaluation("a.one", "eligible", "dirty", dirty_ratio=0.9, must_clean_ratio=0.1),
                Evaluation("a.two", "eligible", "dirty", dirty_ratio=0.5),
                Evaluation("a.idle", "not eligible", "clean"), Evaluation("a.fixed", "not eligible", "clean")]

    monkeypatch.setattr(scheduler, "evaluate_all", evaluate_all)
    run = scheduler.plan_run(cfg, 1_000, clear_uncleanable=["a.fixed", "../bad"])
    assert seen == [None] and [j.table for j in run.jobs] == ["a.one", "a.two"]
    assert [(e.table, e.status) for e in run.evaluations if e.status == "not found"] == [("../bad", "not found")]
    assert "../bad" not in scheduler.listed_tables(run.evaluations)  # housekeeping never takes it for a table
    assert scheduler.listed_tables(run.evaluations) == ["a.one", "a.two", "a.idle", "a.fixed"]
    assert [a.to_dict() for a in run.planned()] == [
        {"index": 0, "tables": ["a.one", "a.two"], "priorities": [1, 2], "work_bytes": run.applications[0].work_bytes,
         "now_ms": 1_000}]
    assert scheduler.last_evaluation(cfg).row("a.idle")["status"] == "not eligible"
    forced = scheduler.plan_run(cfg, 2_000, tables=["a.idle"], force=True)
    assert [j.table for j in forced.jobs] == ["a.idle"] and forced.jobs[0].reason == "forced"


def test_a_dry_run_clears_no_mark_and_evaluates_the_tables_as_if_cleared(cfg, monkeypatch):
    """dry_run commits nothing: clear_uncleanable beside it leaves the mark and the failures counted
    (the next scheduled run must still skip the table), while the preview evaluates it as cleared."""
    store = StateStore(cfg)
    for _ in range(3):
        store.record_failure("a.stuck", "boom", now_ms=1)
    assert store.uncleanable_reason("a.stuck")
    asked = []

    def evaluate_all(c, tables, now_ms, ignore_marks=()):
        asked.append((set(ignore_marks), StateStore(c).uncleanable_reason("a.stuck") is not None))
        return [Evaluation("a.stuck", "eligible", "dirty", dirty_ratio=0.9)]

    monkeypatch.setattr(scheduler, "evaluate_all", evaluate_all)
    run = scheduler.plan_run(cfg, 1_000, clear_uncleanable=["lake.a.stuck"], dry_run=True)
    assert asked == [({"a.stuck"}, True)] and [j.table for j in run.jobs] == ["a.stuck"]
    state = StateStore(cfg).get("a.stuck")
    assert state.uncleanable and state.consecutive_failures == 3  # nothing cleared
    scheduler.plan_run(cfg, 2_000, clear_uncleanable=["a.stuck"])  # the real thing clears it
    assert asked[-1] == (set(), False) and StateStore(cfg).uncleanable_reason("a.stuck") is None


def test_finish_run_reads_the_reports_named_from_the_run_and_the_history_of_its_interval(cfg, monkeypatch):
    apps = [ApplicationPlan(index=0, tables=("a.ok", "a.bad"), priorities=(1, 2), now_ms=5),
            ApplicationPlan(index=1, tables=("a.never",), priorities=(3,), now_ms=5)]
    write_document(cfg, scheduler.report_name("run", 0), ApplicationReport(finished=True, outcomes=(
        TableOutcome(table="a.ok", status="ok"),
        TableOutcome(table="a.bad", status="failed", failed_step="compact", error="table a.bad: x"))).to_dict())
    asked = []

    def run_history(c, now_ms, tables):
        asked.append((now_ms, tables))
        return [{"table_name": "a.ok", "status": "committed", "records_read": 3, "records_kept": 1}]

    monkeypatch.setattr(scheduler, "run_history", run_history)
    evaluations = [Evaluation("a.ck", "invalid checkpoint", "table a.ck: bad")]
    verdict = scheduler.finish_run(cfg, "run", evaluations, apps, {"clean_0": "failed"}, now_ms=5)
    assert asked == [(5, ["a.ok", "a.bad", "a.never"])]
    assert [(t.table, t.status) for t in verdict.tables] == [("a.ok", "ok"), ("a.bad", "failed"), ("a.never", "not run")]
    assert verdict.tables[0].figures.run is RunStatus.COMMITTED and verdict.tables[0].figures.records_kept == 1
    assert verdict.failed == ("a.bad", "a.ck") and verdict.failed_applications == (0, 1)
    assert verdict.deferred == ("a.never",) and verdict.not_run[0].status is EvaluationStatus.INVALID_CHECKPOINT
    assert "#2 a.bad (application 0): failed compact: table a.bad: x" in verdict.text
    assert read_document(cfg, scheduler.report_name("run", 1)) is None  # application 1 wrote none: not run

    def unreadable(*args):
        raise OSError("catalog down")

    monkeypatch.setattr(scheduler, "run_history", unreadable)  # figures are a courtesy: the reports decide
    assert scheduler.finish_run(cfg, "run", [], apps, {}, now_ms=5).tables[0].figures is None
