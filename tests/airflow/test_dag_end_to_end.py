"""The scheduler DAG on a real embedded lakehouse: Airflow 3 (``dag.test``: tasks run in this
process, each packed application is a real ``spark-submit`` of jobs/clean.py through
SparkSubmitOperator), Spark in local mode, Iceberg tables in a throwaway Hadoop warehouse.

Eight tables, one per state the scheduler must tell apart, all handled in one DAG run whose five
planned tables are packed into two applications (cleaner.threads=2); then the failing table's
uncleanable mark, an operator clearing it, and a forced dry run for a past interval (as of its end).

The first run is also the one whose metrics, alerts and asset events are checked (one lake and
first DAG run for both, issue 38):

- Airflow's StatsD client (``[metrics] statsd_on``, tags as InfluxDB-style ``statsd_influxdb_enabled``)
  sends Kafka's cleaner metrics to a UDP socket this module listens on;
- a real notifier class configured in the YAML (``recording_notifier.RecordingNotifier``) gets a
  new uncleanable mark, a failed fail-severity quality rule and a table still past its lag;
- the compacted tables get asset events (read back from Airflow's database) through the alias;
- the evaluate task records the evaluation the UI pages present.

A pending erasure request carried out by a DAG run (audited by hash, the key in no XCom or rendered
field of the run): tests/test_installed_wheel.py's run, which has one.
"""
from __future__ import annotations

from argparse import Namespace

import copy
import datetime as dt
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakecleaner.core import scheduler
from lakecleaner.core.config import CHECKPOINT_PROPERTY, load_config
from lakecleaner.spark.engine import compact_table
from lakecleaner.core.metadata import MetadataReader
from lakecleaner.core.model import compact
from lakecleaner.core.quality_results import list_results
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.state import StateStore, read_document
from lakecleaner.core.defaults import DEFAULT_INTERVAL_MINUTES
from lakecleaner_dev.schedule import next_tick
from lakecleaner_dev.tables import append, create_compacted_table, read_model_records, stored_checkpoint, record_ids
from statsd_listener import metrics, statsd_on

pytestmark = [pytest.mark.airflow, pytest.mark.spark,
              # dag.test talks to Airflow's execution API through starlette's TestClient
              pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")]

CATALOG = "dagtest"  # its own catalog and warehouse: other tests' tables must not be evaluated here
CLEAN, BELOW, ABOVE, PAST_LAG = "t.clean", "t.below_ratio", "t.above_ratio", "t.past_lag"
TOMBSTONES, BROKEN, FAILING, DUPES = "t.tombstones", "t.broken", "t.failing", "t.above_dupes"
ALERTS = "alerts.jsonl"  # beside the YAML: what the configured notifier got
INTERVAL = dt.timedelta(minutes=DEFAULT_INTERVAL_MINUTES)  # the default schedule's


def _rows(start, n, keys=5, partitions=2):
    """Kafka records: offsets start..start+n, every 7th a tombstone (null value, no flag)."""
    return [{"key": f"k{i % keys}", "offset": i, "partition": i % partitions,
             "value": None if i % 7 == 0 else f"v{i}"} for i in range(start, start + n)]


def _ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


@pytest.fixture(scope="module")
def dag_config(tmp_path_factory, airflow_db):
    """The YAML the DAG ([lakecleaner] config) and its spark-submit jobs read: a fresh warehouse,
    one failure marks a table uncleanable, two applications at most (the pool), alerts to a
    notifier class by its dotted path."""
    base = tmp_path_factory.mktemp("dag_lake")
    path = base / "lakecleaner.yaml"
    path.write_text(
        f"catalog:\n  name: {CATALOG}\n  type: hadoop\n  warehouse: {base / 'warehouse'}\n"
        "spark:\n  master: local[2]\n  driver_memory: 1g\n"
        "cleaner:\n  threads: 2\n  uncleanable_after_failures: 1\n"
        "notifiers:\n"
        "  - class: recording_notifier.RecordingNotifier\n"
        f"    kwargs: {{path: '{base / ALERTS}', message: '{{{{ alert.subject }}}} in {{{{ dag.dag_id }}}}'}}\n")
    old = os.environ.get("AIRFLOW__LAKECLEANER__CONFIG")
    os.environ["AIRFLOW__LAKECLEANER__CONFIG"] = str(path)
    yield load_config(path)
    if old is None:
        os.environ.pop("AIRFLOW__LAKECLEANER__CONFIG", None)
    else:
        os.environ["AIRFLOW__LAKECLEANER__CONFIG"] = old


@pytest.fixture(scope="module")
def pool(dag_config):
    from airflow.models.pool import Pool

    from lakecleaner.airflow.commands import DEFAULT_POOL as POOL, create_pool

    create_pool(Namespace(config=str(dag_config.source), pool=POOL))
    return Pool.get_pool(POOL)


@pytest.fixture(scope="module")
def dag_spark(spark, dag_config):
    """The test session's Spark, with the DAG's catalog added (uncached: the DAG's jobs commit to
    these tables from other JVMs)."""
    for key, value in dag_config.catalog.spark_conf().items():
        spark.conf.set(key, value)
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
    return spark


@pytest.fixture(scope="module")
def lakehouse(dag_spark, dag_config):
    """One table per state; returns the first scheduled tick after they were built."""
    spark, cfg = dag_spark, dag_config
    now = lambda: int(time.time() * 1000)  # noqa: E731

    def table(name, props=None, batches=2, per_batch=20):
        ref = create_compacted_table(spark, cfg, name, {"compaction.retain.log.end.record": "false", **(props or {})})
        for b in range(batches):
            append(spark, ref, _rows(b * per_batch, per_batch))
        return ref

    ref = table(CLEAN)
    compact_table(spark, cfg, CLEAN, now_ms=now())  # compacted, nothing new since: clean

    ref = table(BELOW, {"min.cleanable.dirty.ratio": "0.99"})
    compact_table(spark, cfg, BELOW, now_ms=now())
    append(spark, ref, _rows(1000, 2))  # a little dirty data, well below the ratio

    table(ABOVE)  # never cleaned: dirty ratio 1.0 > the default 0.5

    ref = table(PAST_LAG, {"min.cleanable.dirty.ratio": "0.99", "max.compaction.lag.ms": "1"})
    compact_table(spark, cfg, PAST_LAG, now_ms=now())
    append(spark, ref, _rows(1000, 2))  # below the ratio, but dirty for longer than max.compaction.lag.ms

    table(TOMBSTONES, {"min.cleanable.dirty.ratio": "0.99", "delete.retention.ms": "0"})
    compact_table(spark, cfg, TOMBSTONES, now_ms=now())  # cleans tombstones; they stay until retention passed
    assert spark.table(f"{CATALOG}.{TOMBSTONES}").where("value IS NULL").count() > 0

    table(BROKEN, {"compaction.strategy": "bogus"})

    # past max.compaction.lag.ms from metadata, but a data file is gone: the Spark job fails, and the
    # table stays past its lag
    ref = table(FAILING, {"max.compaction.lag.ms": "1"})
    victim = spark.sql(f"SELECT file_path FROM {ref.meta('files')} LIMIT 1").collect()[0][0]
    Path(victim.replace("file:", "")).unlink()

    ref = create_compacted_table(spark, cfg, DUPES, {"compaction.retain.log.end.record": "false"})
    # Kafka's contract broken: two records at offset 9 of partition 1 (compacted, then its quality suite fails)
    append(spark, ref, _rows(0, 10) + [{"key": "other", "offset": 9, "partition": 1, "value": "x"}])

    return next_tick(dt.datetime.now(dt.timezone.utc))


def _run(dagbag, logical_date, conf=None):
    """A dag.test run with every param given: dag.test keeps a run's conf in the DAG's params, so a
    param a run leaves out would be the previous run's, not its default."""
    from lakecleaner.airflow.dag import PARAMS

    dag = dagbag.dags["lakecleaner"]
    defaults = {k: copy.deepcopy(p.value) for k, p in PARAMS.items()}
    return dag.test(logical_date=logical_date, run_conf={**defaults, **(conf or {})})


def _xcom(dr, task_id, key="return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dr.dag_id, task_ids=task_id, key=key)).first()
        return XComModel.deserialize_value(row) if row is not None else None


def _task_states(dr) -> dict[tuple[str, int], str]:
    """(task_id, map index) -> state."""
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.scalars(select(TI).where(TI.dag_id == dr.dag_id, TI.run_id == dr.run_id)).all()
        return {(ti.task_id, ti.map_index): ti.state for ti in tis}


def _outcomes(dr) -> dict[str, dict]:
    """table -> its row of the run's summary report."""
    return {row["table"]: row for row in _xcom(dr, "summary", "report")["tables"]}


def _map_index_names(dr, task_id: str) -> dict[int, str | None]:
    """The names the UI shows for a mapped task's instances (rendered from map_index_template)."""
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.scalars(select(TI).where(TI.dag_id == dr.dag_id, TI.run_id == dr.run_id,
                                               TI.task_id == task_id)).all()
        return {ti.map_index: ti.rendered_map_index for ti in tis}


@dataclass(frozen=True)
class FirstRun:
    """The first run, and what it sent and recorded as it ended (later runs of this module add their own)."""
    dag_run: object
    tick: dt.datetime
    datagrams: tuple[str, ...]  # what StatsD got during it
    alerts: tuple[dict, ...]  # what the configured notifier got
    evaluation: object  # scheduler.last_evaluation: what the evaluate task recorded


@pytest.fixture(scope="module")
def first_run(dagbag, dag_config, pool, lakehouse):
    with statsd_on() as statsd:  # this run only
        # an erasure request id the table does not hold: said, and the run fails for it too (below)
        dr = _run(dagbag, lakehouse, {"tables": [], "force": False, "dry_run": False, "clear_uncleanable": [],
                                      "forget": [UNKNOWN_REQUEST]})
        datagrams = tuple(statsd.flush())
    alerts = Path(dag_config.source).parent / ALERTS
    lines = alerts.read_text().splitlines() if alerts.exists() else []  # no alert: no file
    return FirstRun(dr, lakehouse, datagrams, tuple(json.loads(line) for line in lines),
                    scheduler.last_evaluation(dag_config))


UNKNOWN_REQUEST = "no-such-request"


def test_an_unknown_erasure_request_id_is_named_and_fails_the_run_which_cleans_all_the_same(first_run, dag_config):
    """A typo in the forget param used to erase nothing without a word, the run succeeding."""
    from lakecleaner.core.erasure_requests import requests_ref

    dr = first_run.dag_run
    assert _xcom(dr, "forget_requests", "unknown_requests") == [
        f"erasure request {UNKNOWN_REQUEST!r}: no such request in {requests_ref(dag_config).short} (asked for in forget)"]
    states = _task_states(dr)
    assert states[("forget", -1)] == "skipped" and states[("summary", -1)] == "failed", states
    assert states[("evaluate", -1)] == "success" and dr.state == "failed"


def test_pool_is_sized_by_cleaner_threads(pool, dag_config):
    assert pool is not None and pool.slots == dag_config.cleaner.threads == 2


def test_one_run_packs_the_eligible_tables_filthiest_first_and_fails_for_the_broken_one(first_run, dag_config,
                                                                                        dag_spark):
    dr, tick = first_run.dag_run, first_run.tick
    now_ms = _ms(tick)
    assert dr.state == "failed"  # two tables failed: the run must say so

    evaluations = {e["table"]: e for e in _xcom(dr, "evaluate", "evaluations")}
    assert set(evaluations) == {CLEAN, BELOW, ABOVE, PAST_LAG, TOMBSTONES, BROKEN, FAILING, DUPES}
    assert evaluations[CLEAN]["status"] == "not eligible" and evaluations[CLEAN]["reason"] == "clean"
    assert evaluations[BELOW]["status"] == "not eligible" and evaluations[BELOW]["reason"].startswith("dirty ratio")
    assert evaluations[BROKEN]["status"] == "invalid config"
    assert f"table {BROKEN}: compaction.strategy='bogus' is invalid" in evaluations[BROKEN]["reason"]
    assert "must clean" in evaluations[PAST_LAG]["reason"] and "must clean" in evaluations[FAILING]["reason"]
    assert evaluations[TOMBSTONES]["reason"] == "tombstones past delete.retention.ms"

    # five tables, two threads: two applications; the two filthiest start first, one in each, and
    # each application takes its tables in plan order (must-clean ratio, then dirty ratio, then name)
    apps = _xcom(dr, "evaluate", "applications")
    ranked = [FAILING, PAST_LAG, DUPES, ABOVE, TOMBSTONES]
    assert len(apps) == 2 and [a["tables"][0] for a in apps] == ranked[:2]
    assert sorted(t for a in apps for t in a["tables"]) == sorted(ranked)
    assert all(a["tables"] == sorted(a["tables"], key=ranked.index) and a["now_ms"] == now_ms for a in apps)
    submitted = _xcom(dr, "evaluate")
    assert [s["application_args"][-len(a["tables"]):] for s, a in zip(submitted, apps)] == [a["tables"] for a in apps]
    assert all(f"--now-ms {now_ms}" in " ".join(s["application_args"]) for s in submitted)
    # each application's task instance is named after its tables in the UI
    assert _map_index_names(dr, "clean") == {a["index"]: ", ".join(a["tables"]) for a in apps}
    # an application fails where it holds a failing table (a compaction that failed, a quality suite that
    # failed) and still cleans its other tables; the other application is not touched by it
    failed = {FAILING, DUPES}
    states = _task_states(dr)
    assert {i: states[("clean", i)] for i in (0, 1)} == {
        a["index"]: "failed" if failed & set(a["tables"]) else "success" for a in apps}
    assert any(failed.isdisjoint(a["tables"]) for a in apps)  # as packed: both failing tables in one application
    assert states[("evaluate", -1)] == "success" and states[("summary", -1)] == "failed"
    outcomes = _outcomes(dr)
    assert {t: (r["status"], r["failed_step"]) for t, r in outcomes.items()} == {
        PAST_LAG: ("ok", None), ABOVE: ("ok", None), FAILING: ("failed", "compact"), TOMBSTONES: ("ok", None),
        DUPES: ("failed", "validate")}
    assert outcomes[FAILING]["error"].startswith(f"table {FAILING}: ")
    # the data-quality suite ran on every compacted table and its verdict was kept under the run's date
    verdicts = {t: list_results(dag_config, t) for t in (PAST_LAG, ABOVE, TOMBSTONES, DUPES)}
    assert all(v and v[0]["now_ms"] == now_ms for v in verdicts.values()), verdicts
    assert {t: v[0]["success"] for t, v in verdicts.items()} == {PAST_LAG: True, ABOVE: True, TOMBSTONES: True,
                                                                 DUPES: False}

    # what the jobs did, from run history (as of the run's now) and the tables themselves
    history = {r["table_name"]: r for r in scheduler.run_history(dag_config, now_ms)}
    assert {t: r["status"] for t, r in history.items()} == {
        PAST_LAG: "committed", ABOVE: "committed", TOMBSTONES: "committed", FAILING: "failed", DUPES: "committed"}
    assert history[ABOVE]["removed_superseded"] > 0
    assert history[TOMBSTONES]["removed_expired_tombstones"] > 0
    assert FAILING in history[FAILING]["error"]
    reader = MetadataReader(dag_config)
    for table in (PAST_LAG, ABOVE, TOMBSTONES, DUPES):
        assert CHECKPOINT_PROPERTY in reader.read(table).properties
    assert CHECKPOINT_PROPERTY not in reader.read(FAILING).properties
    assert CHECKPOINT_PROPERTY not in reader.read(BROKEN).properties  # reported, never run
    assert dag_spark.table(f"{CATALOG}.{TOMBSTONES}").where("value IS NULL").count() == 0

    # the failure was counted; with uncleanable_after_failures=1 it marked the table
    store = StateStore(dag_config)
    failing = store.get(FAILING)
    assert failing.consecutive_failures == 1 and failing.uncleanable
    assert failing.last_error.startswith(f"table {FAILING}: ")
    # a failed quality rule is no cleaning failure: nothing counted towards an uncleanable mark
    assert all(store.get(t).consecutive_failures == 0 and store.get(t).last_success_ms
               for t in (PAST_LAG, ABOVE, TOMBSTONES, DUPES))

    report = _xcom(dr, "summary", "report")
    assert report["failed"] == [FAILING, DUPES]
    assert report["failed_applications"] == [a["index"] for a in apps if failed & set(a["tables"])]
    gauges = _xcom(dr, "evaluate", "metrics")  # Kafka's cleaner metrics, also sent through Airflow's Stats
    assert _xcom(dr, "summary", "metrics")["failed-tables-count"] == 2 and gauges["max-compaction-delay-secs"] > 0
    assert gauges["max-dirty-percent"] == 100.0 and gauges["uncleanable-partitions-count"] == 0
    assert {r["table"]: r["status"] for r in report["not_run"]} == {BROKEN: "invalid config"}


def test_kafkas_cleaner_metrics_reach_statsd_with_the_table_as_tag(first_run):
    got = metrics(first_run.datagrams, "airflow.lakecleaner.")
    assert got, first_run.datagrams[-20:]

    def one(name, table=None):
        (value,) = got[(f"airflow.lakecleaner.{name}", table)]
        return value

    assert one("dirty-percent", ABOVE) == (100.0, "g")  # never cleaned: all dirty
    assert one("max-dirty-percent") == (100.0, "g")
    delays = {t: one("compaction-delay-secs", t)[0] for t in (PAST_LAG, FAILING)}
    assert all(d > 0 for d in delays.values()) and one("compaction-delay-secs", ABOVE) == (0.0, "g")
    assert one("max-compaction-delay-secs")[0] == max(delays.values())
    assert one("uncleanable-partitions-count") == (0.0, "g")  # marked by this run: counted from the next
    removed, kind = one("records-removed", ABOVE)
    assert kind == "c" and removed == 30  # 40 records of 10 (partition, key) pairs: all but the 10 winners
    assert one("bytes-read", ABOVE)[0] > 0 and one("bytes-written", ABOVE)[1] == "c"
    duration, kind = one("run-duration-ms", ABOVE)
    assert kind == "ms" and 0 < duration < 600_000
    assert one("time-since-last-run-ms", ABOVE) == (0.0, "g")  # cleaned by this run, on the run's clock
    assert one("failed-tables-count") == (2.0, "g")
    assert ("airflow.lakecleaner.records-removed", FAILING) not in got  # its compaction failed


def test_each_alert_goes_through_the_configured_notifier(first_run):
    got = first_run.alerts
    assert {(g["alert"]["kind"], g["alert"]["table"]) for g in got} == {
        ("uncleanable", FAILING), ("compaction_lag", FAILING), ("quality_failed", DUPES)}
    assert all(g["run_id"] == first_run.dag_run.run_id for g in got)
    by_kind = {g["alert"]["kind"]: g for g in got}
    assert by_kind["uncleanable"]["message"] == f"lakecleaner: uncleanable: {FAILING} in lakecleaner"  # rendered
    assert "offsets unique per partition" in by_kind["quality_failed"]["alert"]["message"]
    assert by_kind["compaction_lag"]["alert"]["details"]["max_compaction_lag_ms"] == 1


def test_the_compacted_tables_get_asset_events_with_the_runs_figures(first_run, dag_config):
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    dr = first_run.dag_run
    assert dr.state == "failed"  # two tables failed; announcing the others does not hide that
    with create_session() as session:
        events = session.execute(select(AssetModel.uri, AssetEvent.extra, AssetEvent.source_task_id)
                                 .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                                 .where(AssetEvent.source_run_id == dr.run_id)).all()
    warehouse = dag_config.catalog.warehouse  # the catalog's own address: its warehouse, not the alias
    # not the failed compaction's, nor the table whose quality suite failed
    assert sorted((uri, task) for uri, _, task in events) == sorted(
        (f"iceberg://localhost{warehouse}/{t.replace('.', '/')}", "announce") for t in (PAST_LAG, ABOVE, TOMBSTONES))
    (extra,) = [e for _, e, _ in events if e["table"] == ABOVE]
    assert extra["catalog"] == CATALOG and extra["now_ms"] == _ms(first_run.tick)
    assert extra["removed_superseded"] == 30 and extra["records_read"] == 40


def test_the_evaluate_task_records_the_evaluation_the_pages_present(first_run):
    recorded = first_run.evaluation
    assert recorded is not None and recorded.now_ms == _ms(first_run.tick)
    assert {r["table"] for r in recorded.tables} == {CLEAN, BELOW, ABOVE, PAST_LAG, TOMBSTONES, BROKEN, FAILING, DUPES}


def test_an_uncleanable_table_is_skipped_until_an_operator_clears_it(first_run, dagbag, dag_config):
    tick = first_run.tick
    second = _run(dagbag, tick + INTERVAL)
    evaluations = {e["table"]: e for e in _xcom(second, "evaluate", "evaluations")}
    assert evaluations[FAILING]["status"] == "uncleanable"
    assert "clear with: lakecleaner clear-uncleanable" in evaluations[FAILING]["reason"]
    assert FAILING not in [t for a in _xcom(second, "evaluate", "applications") for t in a["tables"]]
    assert second.state == "success"
    assert {r["table"]: r["status"] for r in _xcom(second, "summary", "report")["not_run"]} == {
        BROKEN: "invalid config", FAILING: "uncleanable"}
    assert _xcom(second, "evaluate", "metrics")["uncleanable-partitions-count"] == 1

    third = _run(dagbag, tick + 2 * INTERVAL, {"clear_uncleanable": [FAILING], "tables": [FAILING]})
    evaluations = {e["table"]: e for e in _xcom(third, "evaluate", "evaluations")}
    assert evaluations[FAILING]["status"] == "eligible"  # cleared before evaluation
    assert [a["tables"] for a in _xcom(third, "evaluate", "applications")] == [[FAILING]]
    assert third.state == "failed"  # the data file is still gone
    state = StateStore(dag_config).get(FAILING)
    assert state.consecutive_failures == 1 and state.uncleanable  # counted from zero again, marked again


def test_a_past_interval_forced_dry_run_applies_the_policy_as_of_its_end(first_run, dagbag, dag_config):
    """A run for a past interval (as a backfill makes them), forced and dry: the application's now is
    the interval's end. A live `airflow backfill create` over two intervals, each cleaned as of its
    own end, is test_airflow_on_postgres's."""
    tick = first_run.tick
    end = tick + 3 * INTERVAL
    run = _run(dagbag, end, {"tables": [CLEAN], "force": True, "dry_run": True})
    assert run.state == "success"
    (app,) = _xcom(run, "evaluate", "applications")
    assert app["tables"] == [CLEAN] and app["now_ms"] == _ms(end)
    assert _task_states(run)[("clean", 0)] == "success"
    (outcome,) = read_document(dag_config, scheduler.report_name(run.run_id, app["index"]))["outcomes"]
    assert outcome["status"] == "ok" and outcome["steps"]["compact"]["status"] == "dry_run"
    assert outcome["steps"]["maintain"]["status"] == outcome["steps"]["validate"]["status"] == "skipped"
    history = scheduler.run_history(dag_config, tables=[CLEAN])
    assert [(r["now_ms"], r["status"]) for r in history if r["dry_run"]] == [(_ms(end), "dry_run")]


def test_an_application_that_dies_mid_table_has_that_table_counted(first_run, dagbag, dag_config, dag_spark,
                                                                    monkeypatch):
    """The application is killed (SIGKILL) after a table's MERGE: it cannot record anything, so the
    task's failure callback counts the table it was cleaning, from the application's report."""
    tick = first_run.tick
    table = "t.dies"
    ref = create_compacted_table(dag_spark, dag_config, table, {"compaction.retain.log.end.record": "false"})
    append(dag_spark, ref, _rows(0, 40))
    monkeypatch.setenv("LAKECLEANER_FAIL_AT", "kill:after_merge")
    run = _run(dagbag, tick + 5 * INTERVAL, {"tables": [table], "force": False, "dry_run": False,
                                             "clear_uncleanable": []})
    assert run.state == "failed" and _task_states(run)[("clean", 0)] == "failed"
    (app,) = _xcom(run, "evaluate", "applications")
    report = read_document(dag_config, scheduler.report_name(run.run_id, app["index"]))
    assert report["in_progress"] == [table] and not report["finished"]
    row = _outcomes(run)[table]
    assert row["status"] == "failed" and row["failed_step"] == "application"
    assert "the Spark application died while cleaning it" in row["error"]
    state = StateStore(dag_config).get(table)
    assert state.consecutive_failures == 1 and "died while cleaning it" in state.last_error


def test_the_dag_runs_on_a_real_spark_standalone_cluster(first_run, dagbag, dag_config, dag_spark, pool,
                                                         spark_cluster, monkeypatch):
    """spark_default pointed at a real master (and worker) on 127.0.0.1: the DAG's jobs (compaction,
    maintenance, validation) run as one cluster application, whose executors read and write the
    table through the Iceberg jars and catalog settings the submission gives them; the table ends as
    the model says."""
    import json
    import urllib.request

    tick = first_run.tick
    table = "t.on_cluster"
    ref = create_compacted_table(dag_spark, dag_config, table, {"compaction.retain.log.end.record": "false"})
    append(dag_spark, ref, _rows(0, 40))
    records, tc = read_model_records(dag_spark, dag_config, table)
    host, port = spark_cluster["url"].rsplit(":", 1)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": host, "port": int(port)}))
    end = tick + 6 * INTERVAL
    # every param explicit: dag.test in one process carries an earlier run's conf (the forced dry run's)
    run = _run(dagbag, end, {"tables": [table], "force": False, "dry_run": False, "clear_uncleanable": []})
    assert run.state == "success", _task_states(run)
    assert _outcomes(run)[table]["status"] == "ok"
    committed = [r for r in scheduler.run_history(dag_config, _ms(end), [table]) if r["status"] == "committed"]
    assert committed and committed[0]["removed_superseded"] > 0
    cluster = json.load(urllib.request.urlopen(f"{spark_cluster['ui']}/json/", timeout=5))
    apps = [a["name"] for a in cluster.get("completedapps", []) + cluster.get("activeapps", [])]
    assert "lakecleaner-clean" in apps, apps  # the whole chain in one cluster application
    [(committed_ms, _, _)] = stored_checkpoint(dag_spark, f"{CATALOG}.{table}").history  # dates what it cleaned
    expected = compact(records, Checkpoint(), tc, _ms(end), committed_ms)
    assert expected.stats["removed_superseded"] > 0
    assert record_ids(dag_spark, f"{CATALOG}.{table}") == sorted(r.id for r in expected.survivors(records))
