"""The scheduler's plain helpers the DAG wires together (no Airflow, no Spark)."""
import zipfile

from lakecleaner import scheduler


def test_job_args_carry_the_runs_now_and_dry_run():
    assert scheduler.job_args("db.t", "/c.yaml", 1_700_000_000_000) == [
        "db.t", "--config", "/c.yaml", "--now-ms", "1700000000000"]
    assert scheduler.job_args("db.t", "/c.yaml", 5, dry_run=True)[-1] == "--dry-run"


def test_the_package_zip_is_named_after_its_content_and_rebuilt_in_place(tmp_path):
    first = scheduler.ship_package(tmp_path / "pkg")
    second = scheduler.ship_package(tmp_path / "pkg")
    assert first == second and first.endswith(".zip")
    assert [p.name for p in (tmp_path / "pkg").iterdir()] == [first.rsplit("/", 1)[1]]  # no leftovers
    with zipfile.ZipFile(first) as zf:
        assert "lakecleaner/scheduler.py" in zf.namelist() and "lakecleaner/engine.py" in zf.namelist()


def test_summary_fails_a_table_whose_compact_maintain_or_validate_did_not_end_well():
    jobs = [{"table": t, "priority": i + 1} for i, t in enumerate(["a.ok", "a.bad", "a.dry", "a.maint", "a.dq"])]
    states = {"compact_0": "success", "maintain_0": "success", "validate_0": "success",
              "compact_1": "failed", "maintain_1": "upstream_failed", "validate_1": "upstream_failed",
              "compact_2": "success", "maintain_2": "skipped", "validate_2": "success",  # dry run
              "compact_3": "success", "maintain_3": "failed", "validate_3": "upstream_failed",
              "compact_4": "success", "maintain_4": "success", "validate_4": "failed"}  # a data-quality rule
    evaluations = [{"table": "a.cfg", "status": "invalid config", "reason": "table a.cfg: x=1 is invalid"},
                   {"table": "a.fine", "status": "not eligible", "reason": "clean"}]
    history = [{"table_name": "a.ok", "status": "failed", "error": "old"},
               {"table_name": "a.ok", "status": "committed", "error": None, "records_read": 4, "records_kept": 2,
                "removed_superseded": 2, "removed_expired_tombstones": 0}]
    report = scheduler.summarize(evaluations, jobs, states, history)
    assert report["failed"] == ["a.bad", "a.maint", "a.dq"]
    assert report["not_run"] == [{"table": "a.cfg", "status": "invalid config", "reason": "table a.cfg: x=1 is invalid"}]
    assert report["tables"][0]["status"] == "committed"  # the latest history row of the table
    assert "#2 a.bad: compact=failed maintain=upstream_failed validate=upstream_failed" in report["text"]
    assert scheduler.summarize([], [], {})["failed"] == []


def test_cleaner_metrics_per_table_and_overall_are_kept(tmp_path):
    import json

    from lakecleaner.config import CatalogConfig, LakecleanerConfig
    from lakecleaner.state import StateStore

    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path)))
    StateStore(cfg).record_success("a.ok", now_ms=1_000)
    evaluations = [
        {"table": "a.ok", "status": "not eligible", "dirty_ratio": 0.25, "max_compaction_delay_ms": 0},
        {"table": "a.late", "status": "eligible", "dirty_ratio": 0.9, "max_compaction_delay_ms": 5_000},
        {"table": "a.stuck", "status": "uncleanable", "dirty_ratio": 0.0, "max_compaction_delay_ms": 0},
    ]
    report = {"tables": [{"table": "a.late", "compact": "success", "removed_superseded": 7}], "failed": []}
    metrics = scheduler.cleaner_metrics(cfg, evaluations, report, now_ms=11_000)
    assert metrics["overall"] == {"tables": 3, "max_dirty_percent": 90.0, "max_compaction_delay_ms": 5_000,
                                  "uncleanable_count": 1, "failed_this_run": 0}
    assert metrics["tables"]["a.ok"]["time_since_last_success_ms"] == 10_000
    assert metrics["tables"]["a.late"]["last_run"] == {"compact": "success", "removed_superseded": 7}
    kept = json.loads((tmp_path / "_lakecleaner" / "metrics" / "11000.json").read_text())
    assert kept["overall"] == metrics["overall"]
