"""The scheduler's plain helpers the DAG wires together (no Airflow, no Spark)."""
import pytest

from lakecleaner.core import scheduler
from lakecleaner.core.records import ApplicationPlan, ApplicationReport


def _jobs(*sizes):
    return [scheduler.Job(f"a.t{i}", i + 1, "r", size) for i, size in enumerate(sizes)]


def test_packing_deals_jobs_in_plan_order_to_the_least_loaded_application():
    apps = scheduler.pack(_jobs(100, 90, 80, 10, 10, 10, 5), threads=3)
    # loads after each deal: 100/0/0, 100/90/0, 100/90/80, +10 -> app 2, +10 -> app 1, +10 -> app 2, +5 -> app 0
    assert [a.tables for a in apps] == [["a.t0", "a.t6"], ["a.t1", "a.t4"], ["a.t2", "a.t3", "a.t5"]]
    # the filthiest tables start first, one per application, and each runs its tables in plan order
    assert [a.jobs[0].priority for a in apps] == [1, 2, 3]
    assert all([j.priority for j in a.jobs] == sorted(j.priority for j in a.jobs) for a in apps)
    assert [a.work_bytes for a in apps] == [105, 100, 100]


def test_packing_never_makes_more_applications_than_threads_or_tables():
    assert [len(a.jobs) for a in scheduler.pack(_jobs(1, 1, 1, 1, 1), threads=2)] == [3, 2]
    assert [a.tables for a in scheduler.pack(_jobs(5), threads=4)] == [["a.t0"]]
    assert scheduler.pack([], threads=4) == []
    assert sum(len(a.jobs) for a in scheduler.pack(_jobs(*range(200)), threads=3)) == 200


def test_a_tables_expected_work_is_what_its_run_scans_plus_a_fixed_cost():
    from lakecleaner.core.evaluate import Evaluation

    ev = Evaluation("a.t", "eligible", "r", clean_bytes=1000, cleanable_bytes=500, uncleanable_bytes=7)
    assert scheduler.plan([ev])[0].work_bytes == scheduler.TABLE_OVERHEAD_BYTES + 1500


def test_an_application_is_named_by_its_tables_within_airflows_limit():
    assert scheduler.table_label(["a.x", "a.y"]) == "a.x, a.y"
    many = [f"namespace.table_{i:03d}" for i in range(100)]
    label = scheduler.table_label(many)
    assert len(label) <= scheduler.LABEL_MAX and label.startswith("namespace.table_000, namespace.table_001")
    shown = label.split(" +")[0].split(", ")
    assert label.endswith(f" +{100 - len(shown)} more")
    assert scheduler.table_label(["x" * 300]) == "x" * 300  # one table is always named whole


def test_clean_args_carry_the_runs_now_budget_report_and_tables_in_order():
    app = scheduler.Application(0, tuple(_jobs(1, 1)))
    args = scheduler.clean_args(app, "/c.yaml", 1_700_000_000_000, run_name="2026-01-01T00:00:00+00:00",
                                interval_ms=900_000, budget_s=600, report="batches/r/app-0.json")
    assert args == ["--config", "/c.yaml", "--now-ms", "1700000000000", "--run-name", "2026-01-01T00:00:00+00:00",
                    "--interval-ms", "900000", "--budget-s", "600", "--report", "batches/r/app-0.json",
                    "--record-outcomes", "a.t0", "a.t1"]
    dry = scheduler.clean_args(app, "/c.yaml", 5, run_name="r", interval_ms=1, budget_s=0.5, report="x", dry_run=True)
    assert dry[-3:] == ["--dry-run", "a.t0", "a.t1"] and "0.5" in dry


def test_an_application_never_outlives_the_interval_by_its_budget():
    from lakecleaner.core.config import CleanerConfig, LakecleanerConfig

    cfg = LakecleanerConfig(cleaner=CleanerConfig(application_budget_s=600))
    assert scheduler.application_budget_s(cfg, 15 * 60_000) == 600
    assert scheduler.application_budget_s(cfg, 5 * 60_000) == 300


def test_report_names_are_safe_paths_per_run_and_application():
    assert (scheduler.report_name("scheduled__2026-11-26T07:00:00+00:00", 3)
            == "batches/scheduled__2026-11-26T07_00_00_00_00/app-3.json")
    assert scheduler.report_name("manual__2026-11-23T07:00:00.123+00:00", 0).startswith("batches/manual__2026")
    assert scheduler.report_name("..x", 1) == "batches/..x/app-1.json"
    long = scheduler.report_name("manual__" + "x" * 300, 0).split("/")
    assert len(long) == 3 and len(long[1]) <= 255


@pytest.mark.parametrize("run_id, problem", [
    ("..", "only dots"), (".", "only dots"), ("", "empty"), ("a/../../x", "path separator"),
    ("../x", "path separator"), ("a\\b", "path separator"), ("a\0b", "control character"), ("a\nb", "control character"),
])
def test_a_run_id_that_would_leave_batches_is_refused_by_name(run_id, problem):
    with pytest.raises(ValueError, match="^run id ") as err:
        scheduler.report_name(run_id, 0)
    assert problem in str(err.value) and repr(run_id) in str(err.value)


def test_the_late_tasks_get_ids_from_xcom_and_derive_the_paths_they_open():
    """XCom can be edited by users with XCom edit rights: evaluate puts no path in it, and an
    application index read back from it names a report only when it is an index."""
    apps = scheduler.pack([scheduler.Job("a.one", 1, "r", 10), scheduler.Job("a.two", 2, "r", 5)], 2)
    planned = [a.to_dict() for a in scheduler.planned_applications(apps, 7)]
    assert planned == [{"index": 0, "tables": ["a.one"], "priorities": [1], "work_bytes": 10, "now_ms": 7},
                       {"index": 1, "tables": ["a.two"], "priorities": [2], "work_bytes": 5, "now_ms": 7}]
    assert [scheduler.report_name("run", a["index"]) for a in planned] == ["batches/run/app-0.json",
                                                                           "batches/run/app-1.json"]
    for index in ("../../etc/x", "0", -1, True, 1.0, None):
        with pytest.raises(ValueError, match="is not a non-negative integer"):
            scheduler.report_name("run", index)


def _summarize(evaluations, apps, reports, states, history=()) -> dict:
    """summarize on what the summary task reads: XCom dicts and report documents (of any version)."""
    verdict = scheduler.summarize(
        scheduler.evaluations_of(evaluations), [ApplicationPlan.from_dict(a) for a in apps],
        {i: r and ApplicationReport.from_dict(r) for i, r in reports.items()}, states, history)
    return {**verdict.to_dict(), "text": verdict.text}


def test_summary_tells_each_tables_outcome_from_its_applications_report():
    apps = [{"index": 0, "tables": ["a.ok", "a.dq", "a.late"], "priorities": [1, 3, 5]},
            {"index": 1, "tables": ["a.bad", "a.dying", "a.never"], "priorities": [2, 4, 6]},
            {"index": 2, "tables": ["a.unstarted"], "priorities": [7]}]
    reports = {
        0: {"finished": True, "in_progress": [], "outcomes": [
            {"table": "a.ok", "status": "ok"},
            {"table": "a.dq", "status": "failed", "failed_step": "validate", "error": "table a.dq: rule failed"},
            {"table": "a.late", "status": "deferred", "error": "budget spent"}]},
        1: {"finished": False, "in_progress": ["a.dying"], "outcomes": [
            {"table": "a.bad", "status": "failed", "failed_step": "compact", "error": "table a.bad: broken"}]},
        2: None}
    states = {"clean_0": "failed", "clean_1": "failed", "clean_2": "upstream_failed"}
    evaluations = [{"table": "a.cfg", "status": "invalid config", "reason": "table a.cfg: x=1 is invalid"},
                   {"table": "a.fine", "status": "not eligible", "reason": "clean"}]
    history = [{"table_name": "a.ok", "status": "failed", "error": "old"},
               {"table_name": "a.ok", "status": "committed", "error": None, "records_read": 4, "records_kept": 2,
                "removed_superseded": 2, "removed_expired_tombstones": 0}]
    report = _summarize(evaluations, apps, reports, states, history)
    rows = {r["table"]: r for r in report["tables"]}
    assert [r["table"] for r in report["tables"]] == ["a.ok", "a.bad", "a.dq", "a.dying", "a.late", "a.never",
                                                      "a.unstarted"]  # plan order
    assert report["failed"] == ["a.bad", "a.dq", "a.dying"]
    assert report["deferred"] == ["a.late", "a.never", "a.unstarted"]
    assert report["failed_applications"] == [0, 1, 2]
    assert rows["a.ok"]["status"] == "ok" and rows["a.ok"]["run"] == "committed"  # the latest history row
    assert rows["a.dying"]["failed_step"] == "application" and "died while cleaning it" in rows["a.dying"]["error"]
    assert rows["a.never"]["status"] == "not run" and rows["a.unstarted"]["application"] == 2
    assert report["not_run"] == [{"table": "a.cfg", "status": "invalid config", "reason": "table a.cfg: x=1 is invalid"}]
    assert "#2 a.bad (application 1): failed compact: table a.bad: broken" in report["text"]
    assert "#1 a.ok (application 0): ok run=committed read=4 kept=2" in report["text"]
    quiet = _summarize([], [], {}, {})
    assert quiet["failed"] == [] and quiet["failed_applications"] == []


def test_a_finished_application_whose_tables_all_did_well_fails_nothing():
    apps = [{"index": 0, "tables": ["a.x"], "priorities": [1]}]
    report = _summarize([], apps, {0: {"finished": True, "outcomes": [{"table": "a.x", "status": "ok"}]}},
                        {"clean_0": "success"})
    assert report["failed"] == [] and report["failed_applications"] == [] and report["deferred"] == []


def test_table_states_read_each_table_and_an_unreadable_one_does_not_stop_the_others(tmp_path):
    from lakecleaner.core.config import CatalogConfig, LakecleanerConfig
    from lakecleaner.core.state import StateStore

    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path)))
    StateStore(cfg).record_success("a.ok", now_ms=1_000)
    (tmp_path / "_lakecleaner" / "state" / "a.bad.json").write_text("{not json")
    states = scheduler.table_states(cfg, ["a.ok", "a.bad", "a.new"])
    assert states["a.ok"].last_success_ms == 1_000 and states["a.new"].last_success_ms is None
    assert states["a.bad"].last_success_ms is None and "table a.bad" in states["a.bad"].last_error


def test_an_invalid_checkpoint_fails_the_run():
    evaluations = [{"table": "a.ck", "status": "invalid checkpoint", "reason": "table a.ck: invalid checkpoint: x"}]
    report = _summarize(evaluations, [], {}, {})
    assert report["failed"] == ["a.ck"] and report["not_run"][0]["status"] == "invalid checkpoint"


def test_evaluate_json_rows_carry_the_plan_in_plan_order():
    from lakecleaner.core.evaluate import Evaluation

    evs = [Evaluation("a.clean", "not eligible", "clean"),
           Evaluation("a.dirty", "eligible", "dirty", dirty_ratio=0.9),
           Evaluation("a.bad", "invalid config", "x"),
           Evaluation("a.late", "eligible", "must", dirty_ratio=0.6, must_clean_ratio=0.2)]
    rows = scheduler.plan_rows(evs)
    assert [(r["table"], r["plan_rank"]) for r in rows] == [
        ("a.late", 1), ("a.dirty", 2), ("a.clean", None), ("a.bad", None)]
    assert set(evs[0].as_dict()) <= set(rows[0])  # every field of today's rows is kept


class _Lake:
    """MetadataReader's stand-in over a few tables' metadata."""

    tables: dict = {}

    def __init__(self, cfg, cache=None):
        pass

    def list_tables(self, namespaces=()):
        return sorted(self.tables)

    def read(self, name):
        return self.tables[name]


def test_one_hostile_table_never_stops_the_evaluation_of_the_others(tmp_path, monkeypatch):
    """A checkpoint of nested brackets is its table's invalid checkpoint, a table whose evaluation
    fails in any other way its unreadable row; every other table is evaluated as usual."""
    from lakecleaner.core import evaluate
    from lakecleaner.core.config import CatalogConfig, LakecleanerConfig
    from lakecleaner.core.datafiles import Bounds, DataFile
    from lakecleaner.core.evaluate import TableMetadata

    columns = {"key": "string", "offset": "bigint", "value": "string"}
    compacted = {"cleanup.policy": "compact"}
    files = [DataFile(size=100, offsets=Bounds(0, 9))]
    _Lake.tables = {
        "a.hostile": TableMetadata("a.hostile", {**compacted, "lakecleaner.checkpoint": "[" * 3000 + "]" * 3000},
                                   columns, files),
        "a.broken": TableMetadata("a.broken", compacted, columns, files),
        "a.fine": TableMetadata("a.fine", compacted, columns, files)}
    real = evaluate.evaluate_table

    def evaluate_table(meta, *args):
        if meta.table == "a.broken":
            raise RecursionError("maximum recursion depth exceeded")
        return real(meta, *args)

    from lakecleaner.core import metadata

    monkeypatch.setattr(metadata, "MetadataReader", _Lake)
    monkeypatch.setattr(scheduler, "evaluate_table", evaluate_table)
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path)))
    rows = {e.table: e for e in scheduler.evaluate_all(cfg, now_ms=10_000)}
    assert rows["a.fine"].eligible
    assert rows["a.hostile"].status == "invalid checkpoint"
    assert rows["a.hostile"].reason.startswith("table a.hostile: invalid checkpoint: nested too deeply")
    assert "lakecleaner.checkpoint" in rows["a.hostile"].reason and "[[" not in rows["a.hostile"].reason
    assert rows["a.broken"].status == "unreadable"
    assert rows["a.broken"].reason == "table a.broken: cannot evaluate: RecursionError: maximum recursion depth exceeded"


def test_a_backfills_evaluation_never_replaces_a_later_one(tmp_path):
    from lakecleaner.core.config import CatalogConfig, LakecleanerConfig
    from lakecleaner.core.evaluate import Evaluation

    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path)))
    scheduler.record_evaluation(cfg, [Evaluation("a.t", "eligible", "now")], now_ms=2_000)
    assert scheduler.record_evaluation(cfg, [Evaluation("a.t", "not eligible", "then")], now_ms=1_000) is None
    assert scheduler.last_evaluation(cfg).now_ms == 2_000
    assert scheduler.record_evaluation(cfg, [Evaluation("a.t", "not eligible", "later")], now_ms=3_000)
    assert scheduler.last_evaluation(cfg).row("a.t")["reason"] == "later"


def test_the_interval_comes_from_the_cron_expression_where_runs_have_zero_length_intervals():
    import datetime as dt

    at = dt.datetime(2026, 11, 26, 7, 0, tzinfo=dt.timezone.utc)
    assert scheduler.schedule_interval_ms("0 * * * *", at, at) == 3_600_000  # Airflow 3's cron timetable
    assert scheduler.schedule_interval_ms("*/15 * * * *", at, at) == 900_000
    assert scheduler.schedule_interval_ms("0 9 * * 1-5", at, at) == 2 * 3_600_000  # to the next run, 09:00
    assert scheduler.schedule_interval_ms("0 * * * *", at - dt.timedelta(hours=2), at) == 7_200_000  # an interval
    assert scheduler.schedule_interval_ms(None, at, at) == scheduler.DEFAULT_INTERVAL_MS  # triggered only


def test_a_tables_unreadable_version_hint_is_its_own_row_not_the_end_of_the_listing(tmp_path):
    """A Hadoop warehouse is listed by its tables' directories; one table's version hint that names
    no version (a torn write, a stray editor) makes that table unreadable, naming the file, and the
    others are evaluated (it used to stop the evaluation of every table, naming none)."""
    from lakecleaner.core.config import CatalogConfig, LakecleanerConfig

    _hadoop_table(tmp_path, "good", {"cleanup.policy": "compact"})
    _hadoop_table(tmp_path, "torn", {"cleanup.policy": "compact"}, hint=b"\xff\xfe1")
    rows = {e.table: e for e in scheduler.evaluate_all(LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path))),
                                                       None, 10**12)}
    assert rows["ns.good"].status == "not eligible", rows["ns.good"]
    torn = rows["ns.torn"]
    assert torn.status == "unreadable" and torn.reason.startswith("table ns.torn: cannot read metadata"), torn
    assert "version-hint.text names no metadata version" in torn.reason


def _hadoop_table(warehouse, name, properties, hint=b"1\n"):
    """An empty table's metadata under a Hadoop warehouse's namespace ns, written by pyiceberg."""
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import SortOrder
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "key", StringType()), NestedField(2, "offset", LongType()),
                    NestedField(3, "value", StringType()))
    metadata = warehouse / "ns" / name / "metadata"
    metadata.mkdir(parents=True)
    table = new_table_metadata(schema, PartitionSpec(), SortOrder(), str(metadata.parent), properties)
    (metadata / "v1.metadata.json").write_text(table.model_dump_json())
    (metadata / "version-hint.text").write_bytes(hint)


def test_a_cleanup_policy_kafka_would_refuse_is_said_not_taken_for_another_policy(tmp_path):
    """cleanup.policy=Compact (or compacted) left a table uncleaned for ever without a word."""
    from lakecleaner.core.config import CatalogConfig, LakecleanerConfig

    for name, policy in (("cased", "Compact"), ("typo", "compacted"), ("mixed", "compact,Delete"),
                         ("kafkas", "compact, delete"), ("deleted", "delete")):
        _hadoop_table(tmp_path, name, {"cleanup.policy": policy})
    _hadoop_table(tmp_path, "plain", {})
    rows = {e.table: e for e in scheduler.evaluate_all(LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path))),
                                                       None, 10**12)}
    assert {t: e.status for t, e in rows.items()} == {
        "ns.cased": "invalid config", "ns.typo": "invalid config", "ns.mixed": "invalid config",
        "ns.kafkas": "not eligible"}  # delete only, or no policy: not the cleaner's, not listed
    assert rows["ns.cased"].reason == ("table ns.cased: cleanup.policy='Compact' is invalid: 'Compact' is not one of "
                                       "compact, delete (Kafka's values, lower case)")
    assert "'Delete' is not one of" in rows["ns.mixed"].reason
