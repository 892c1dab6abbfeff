"""Many tables in one Spark application (lakecleaner.spark.batch): the chain per table, one table's failure
contained, the budget, memory released between tables, and the CLI over several tables."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lakecleaner.spark.batch import ADAPTIVE, BatchRequest, clean_tables
from lakecleaner.core.config import CHECKPOINT_PROPERTY
from lakecleaner.core.sparkconf import SHUFFLE_PARTITIONS, SHUFFLE_PARTITIONS_DEFAULT
from lakecleaner.core.table import TableRef
from lakecleaner_dev.generator import CDC_SCHEMA
from lakecleaner.core.model import compact
from lakecleaner.core.quality_results import list_results
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.scheduler import evaluate_all, pack, plan
from lakecleaner.core.state import StateStore, read_document
from lakecleaner_dev.tables import append, create_compacted_table, read_model_records, record_ids

pytestmark = pytest.mark.spark


def _rows(start, n, keys=6, partitions=2):
    return [{"key": f"k{i % keys}", "offset": i, "partition": i % partitions, "timestamp": (i * 37) % 23,
             "value": None if i % 9 == 0 else f"v{i}"} for i in range(start, start + n)]


def _table(spark, cfg, name, props=None, batches=2, per_batch=30):
    ref = create_compacted_table(spark, cfg, name, {"compaction.retain.log.end.record": "false", **(props or {})})
    for b in range(batches):
        append(spark, ref, _rows(b * per_batch, per_batch))
    return ref


def _cdc_table(spark, cfg, name):
    ref = create_compacted_table(spark, cfg, name, {
        "compaction.strategy": "column", "compaction.strategy.column": "lsn", "compaction.key.columns": "tenant,id",
        "compaction.value.column": "payload", "compaction.retain.log.end.record": "false"}, schema=CDC_SCHEMA)
    rows = [{"tenant": f"t{i % 2}", "id": i % 5, "lsn": (i * 7) % 40, "offset": i, "partition": i % 2,
             "op": "u", "payload": f"p{i}"} for i in range(40)]
    append(spark, ref, rows, CDC_SCHEMA)
    return ref


def _expected(spark, cfg, table, now_ms):
    records, tc = read_model_records(spark, cfg, table)
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {TableRef.parse(table, 'lake').sql()}").collect()}
    outcome = compact(records, Checkpoint.from_json(props.get(CHECKPOINT_PROPERTY)), tc, now_ms)
    return sorted(r.id for r in outcome.survivors(records))


def _persisted(spark) -> int:
    return spark.sparkContext._jsc.getPersistentRDDs().size()


def _results_snapshots(spark, cfg) -> int:
    from lakecleaner.core.quality_results import results_table
    from lakecleaner.spark.quality import ensure_results_table

    ensure_results_table(spark, cfg)
    return spark.sql(f"SELECT count(*) AS n FROM {results_table(cfg)}.snapshots").collect()[0]["n"]


def test_one_application_cleans_every_good_table_and_contains_each_broken_one(codegen, lake_config, table_name):
    spark = codegen  # Spark's defaults, as a caller's session has them: the application turns it off and back
    cfg, ns = lake_config, table_name.replace("t.", "b_")
    good = [f"{ns}.offsets", f"{ns}.stamps", f"{ns}.cdc"]
    invalid, corrupt, breaking = f"{ns}.invalid", f"{ns}.corrupt", f"{ns}.breaking"
    refs = {good[0]: _table(spark, cfg, good[0]),
            good[1]: _table(spark, cfg, good[1], {"compaction.strategy": "timestamp"}),
            good[2]: _cdc_table(spark, cfg, good[2])}
    _table(spark, cfg, invalid, {"min.cleanable.dirty.ratio": "lots"})
    ref = _table(spark, cfg, corrupt)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('{CHECKPOINT_PROPERTY}' = '{{\"history\":[[1]]}}')")
    ref = _table(spark, cfg, breaking)  # eligible from metadata, but a data file is gone: fails mid-run
    victim = spark.sql(f"SELECT file_path FROM {ref.meta('files')} LIMIT 1").collect()[0][0]
    Path(victim.replace("file:", "")).unlink()
    now = int(time.time() * 1000)
    expected = {t: _expected(spark, cfg, t, now) for t in good}
    misnamed, elsewhere = "no_namespace", f"other.{ns}.x"  # no table could have either name (a typo)
    order = (good[0], invalid, misnamed, good[1], corrupt, breaking, elsewhere, good[2])

    lines: list[str] = []
    results_commits = _results_snapshots(spark, cfg)
    persisted = _persisted(spark)  # the shared session's, from the tests before (a worker runs many modules)
    outcomes = clean_tables(spark, cfg, BatchRequest(order, now, record_outcomes=True, report=f"batches/{ns}.json"),
                            emit=lines.append, workers=2)
    # the three validations' results are kept in one commit of the results table, not one each
    assert _results_snapshots(spark, cfg) == results_commits + 1

    assert [o.table for o in outcomes] == list(order)  # reported in the order asked, whatever finished first
    status = {o.table: (o.status, o.failed_step) for o in outcomes}
    assert status == {good[0]: ("ok", None), good[1]: ("ok", None), good[2]: ("ok", None),
                      invalid: ("failed", "compact"), corrupt: ("failed", "compact"), breaking: ("failed", "compact"),
                      misnamed: ("failed", "compact"), elsewhere: ("failed", "compact")}
    errors = {o.table: o.error for o in outcomes}
    assert errors[misnamed].startswith(f"table {misnamed}: ") and "namespace.table" in errors[misnamed]
    assert errors[elsewhere].startswith(f"table {elsewhere}: ") and "'other' is not the configured" in errors[elsewhere]
    assert errors[invalid].startswith(f"table {invalid}: min.cleanable.dirty.ratio='lots' is invalid")
    assert errors[corrupt].startswith(f"table {corrupt}: invalid checkpoint: history[0]: expected [run time")
    assert errors[breaking].startswith(f"table {breaking}: ")
    for table in good:  # compacted exactly as the reference model says, made physical, validated
        assert record_ids(spark, refs[table]) == expected[table], table
        result = {o.table: o for o in outcomes}[table]
        assert set(result.steps) == {"compact", "maintain", "validate"} and result.steps["validate"]["success"]
        assert list_results(cfg, table)[0]["now_ms"] == now
    store = StateStore(cfg)  # each broken table's failure counted; the good ones reset
    assert all(store.get(t).consecutive_failures == 1 and store.get(t).last_error.startswith(f"table {t}: ")
               for t in (invalid, corrupt, breaking))
    assert all(store.get(t).consecutive_failures == 0 and store.get(t).last_success_ms for t in good)
    history = {r["table_name"]: r["status"] for r in spark.table(cfg.history_table).where(f"now_ms = {now}").collect()}
    assert {t: history.get(t) for t in (*good, corrupt, breaking)} == {
        **dict.fromkeys(good, "committed"), corrupt: "failed", breaking: "failed"}
    report = read_document(cfg, f"batches/{ns}.json")
    assert report["finished"] and report["in_progress"] == []
    assert [o["status"] for o in report["outcomes"]] == [o.status for o in outcomes]
    for table in order:  # one delimited section per table in the log
        assert sum(line.startswith(f"============ lakecleaner: {table} (") for line in lines) == 1
    assert _persisted(spark) == persisted  # nothing of any table stays cached
    # small tables: the application ran without code generation, and restored the session
    assert any("code generation off" in line for line in lines)
    assert spark.conf.get("spark.sql.codegen.wholeStage", "true") == "true"
    assert spark.conf.get("spark.sql.codegen.factoryMode", "FALLBACK") == "FALLBACK"
    assert spark.conf.get(SHUFFLE_PARTITIONS) == str(SHUFFLE_PARTITIONS_DEFAULT)  # sparkconf's, not Spark's 200
    assert spark.conf.get(ADAPTIVE) == "true"


def test_a_spent_budget_leaves_the_rest_in_plan_order_for_the_next_run(spark, lake_config, table_name):
    cfg, ns = lake_config, table_name.replace("t.", "g_")
    tables = [f"{ns}.a{i}" for i in range(4)]
    for i, table in enumerate(tables):
        _table(spark, cfg, table, per_batch=10 + 5 * i)  # different sizes, so a definite plan order
    now = int(time.time() * 1000)
    jobs = plan(evaluate_all(cfg, tables, now))
    ranked = [j.table for j in jobs]
    assert sorted(ranked) == tables
    (app,) = pack(jobs, threads=1)

    first = clean_tables(spark, cfg, BatchRequest(tuple(app.tables), now, steps=("compact",), budget_s=1e-6),
                         emit=lambda line: None, workers=2)
    assert [(o.table, o.status) for o in first] == [(ranked[0], "ok")] + [(t, "deferred") for t in ranked[1:]]
    assert all("budget of 1e-06 s was spent" in o.error for o in first[1:])

    later = now + 1000  # the next interval: the deferred tables are still eligible, still ranked
    jobs = plan(evaluate_all(cfg, tables, later))
    assert [j.table for j in jobs] == ranked[1:]
    second = clean_tables(spark, cfg, BatchRequest(tuple(j.table for j in jobs), later, steps=("compact",)),
                          emit=lambda line: None)
    assert [(o.table, o.status) for o in second] == [(t, "ok") for t in ranked[1:]]


def test_the_cli_validates_several_tables_in_one_application(config_file, spark, lake_config, table_name):
    """`lakecleaner validate` over tables compacted here. The CLI's `compact` over several tables, a
    missing one among them (its line, exit 1): tests/spark/test_failures.py."""
    from lakecleaner.spark.engine import compact_table

    ns = table_name.replace("t.", "c_")
    tables = [f"{ns}.one", f"{ns}.two"]
    for table in tables:
        _table(spark, lake_config, table)
        compact_table(spark, lake_config, table)
    out = subprocess.run([sys.executable, "-m", "lakecleaner.cli", "--config", str(config_file), "validate",
                          *tables], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [(r["table"], r["status"], r["success"]) for r in results] == [
        (tables[0], "passed", True), (tables[1], "passed", True)]
    assert f"ok   {tables[0]}: one record per key" in out.stdout


def test_an_unreadable_quality_context_fails_validation_only(spark, lake_config, table_name, tmp_path, monkeypatch):
    """A great-expectations context that cannot be opened (in the application's scratch space) stops
    no compaction: each table is still compacted and maintained, and its validation fails naming the
    problem."""
    from dataclasses import replace

    import great_expectations as gx

    def broken(**kwargs):
        raise ValueError("config_version: not a number")

    monkeypatch.setattr(gx, "get_context", broken)
    scratch = tmp_path / "driver-tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    cfg = replace(lake_config, cleaner=replace(lake_config.cleaner, state_location=str(tmp_path / "state")))
    ref = _table(spark, cfg, table_name)
    now = int(time.time() * 1000)
    expected = _expected(spark, cfg, table_name, now)
    (outcome,) = clean_tables(spark, cfg, BatchRequest((table_name,), now), emit=lambda line: None)
    assert (outcome.status, outcome.failed_step) == ("failed", "validate")
    assert outcome.error.startswith(f"table {table_name}: the data-quality context cannot be opened")
    assert outcome.steps["compact"]["status"] == "committed" and "maintain" in outcome.steps
    assert outcome.cleaned and record_ids(spark, ref) == expected
    assert list(scratch.iterdir()) == []  # the context's scratch directory went all the same


def test_a_broken_run_history_table_stops_no_table(spark, lake_config, table_name):
    """The run history is secondary (history.record_history): a history table whose metadata cannot
    be read used to end the application before its first table."""
    from dataclasses import replace

    meta = f"brokenmeta{int(time.time() * 1000) % 10**8}"
    cfg = replace(lake_config, cleaner=replace(lake_config.cleaner, meta_namespace=meta))
    metadata = Path(lake_config.catalog.warehouse.removeprefix("file:")) / meta / "run_history" / "metadata"
    metadata.mkdir(parents=True)
    (metadata / "version-hint.text").write_text("1")
    (metadata / "v1.metadata.json").write_text("{not json")  # torn
    ref = _table(spark, cfg, table_name)
    now = int(time.time() * 1000)
    expected, said = _expected(spark, cfg, table_name, now), []
    (outcome,) = clean_tables(spark, cfg, BatchRequest((table_name,), now, steps=("compact",)), emit=said.append)
    assert outcome.status == "ok" and outcome.steps["compact"]["status"] == "committed", outcome
    assert record_ids(spark, ref) == expected
    assert any(line.startswith(f"lakecleaner: the run history table {cfg.history_table} cannot be prepared")
               for line in said), said


def test_a_dry_run_of_an_overdue_table_records_nothing_and_passes(spark, lake_config, table_name):
    """A dry run commits nothing: it neither resets a table's failures nor counts one, validates
    nothing (the untouched table would fail freshness, being overdue) and keeps no result."""
    _table(spark, lake_config, table_name, {"max.compaction.lag.ms": "1000"})
    store = StateStore(lake_config)
    store.record_failure(table_name, "an earlier run failed", int(time.time() * 1000))
    time.sleep(1.1)  # its records are now overdue: the table must be cleaned
    now = int(time.time() * 1000)
    (outcome,) = clean_tables(spark, lake_config, BatchRequest((table_name,), now, dry_run=True, record_outcomes=True,
                                                               run_name="dry"), emit=lambda line: None)
    assert outcome.status == "ok" and outcome.steps["compact"]["status"] == "dry_run", outcome
    assert [outcome.steps[s]["status"] for s in ("maintain", "validate")] == ["skipped", "skipped"]
    assert store.get(table_name).consecutive_failures == 1
    assert list_results(lake_config, table_name) == []


def test_an_application_that_validates_nothing_opens_no_quality_context(spark, lake_config, monkeypatch):
    """Great expectations is imported and its context opened by an application's first validation,
    not at its start (an application that validates nothing: 18.3 -> 10.6 CPU s): one whose table
    fails before validation opens none (the test above: one that validates opens it)."""
    import great_expectations as gx

    opened = []
    real = gx.get_context
    monkeypatch.setattr(gx, "get_context", lambda **kwargs: opened.append(kwargs) or real(**kwargs))
    (outcome,) = clean_tables(spark, lake_config, BatchRequest(("lc.no_such_table",), int(time.time() * 1000)),
                              emit=lambda line: None)
    assert (outcome.status, outcome.failed_step) == ("failed", "compact")
    assert opened == []


def test_a_small_table_application_keeps_the_operators_own_spark_settings(codegen, lake_config):
    """Small tables: code generation and adaptive execution off and 2 shuffle partitions, except
    where the operator's spark.conf says otherwise; the session gets back what it had."""
    from dataclasses import replace

    from lakecleaner.spark.batch import CODEGEN, _choose_small_table_conf, restore_session_conf

    spark = codegen
    for given, expected, adaptive in ((None, "2", "off"), ("5", "5", "on")):
        conf = {SHUFFLE_PARTITIONS: given, ADAPTIVE: "true"} if given else {}
        cfg = replace(lake_config, spark=replace(lake_config.spark, conf=conf))
        spark.conf.set(SHUFFLE_PARTITIONS, given or str(SHUFFLE_PARTITIONS_DEFAULT))  # as the application started
        lines: list[str] = []
        replaced = _choose_small_table_conf(spark, cfg, (), lines.append)
        assert (spark.conf.get(CODEGEN), spark.conf.get(SHUFFLE_PARTITIONS), spark.conf.get(ADAPTIVE)) == (
            "false", expected, "true" if given else "false")
        assert lines == [f"lakecleaner: every table is at most 32 MB: code generation off, {expected} shuffle "
                         f"partitions, adaptive execution {adaptive}"]
        restore_session_conf(spark, replaced)
        assert (spark.conf.get(CODEGEN, None), spark.conf.get(SHUFFLE_PARTITIONS), spark.conf.get(ADAPTIVE)) == (
            None, given or str(SHUFFLE_PARTITIONS_DEFAULT), "true")
