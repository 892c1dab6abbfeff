"""OpenLineage from a real DAG run (``dag.test``: real spark-submits of the cleaning and forget
applications on a throwaway Hadoop warehouse), sent by Airflow's OpenLineage provider through its
file transport and read back:

- the ``clean`` task's COMPLETE event has the compacted table as input and output, named by its
  location (``file`` + path, as openlineage-spark names it), with the symlinks facet (the Hadoop
  warehouse's identifier, and the asset's), the catalog facet, input/output statistics and the
  ``lakecleaner_compaction`` run facet with the run's figures; a table not compacted is not in it;
- the ``forget`` task's COMPLETE event names the table a request was carried out on; the request
  erased the key before evaluation, audited by its hash, and the key is in no XCom or rendered
  field of the run;
- an ``iceberg://`` asset converts to the identifier the datasets carry as a symlink.

The provider decides whether it is enabled when Airflow first loads it (its plugin and its cached
settings), so the run happens in a process of its own with ``AIRFLOW__OPENLINEAGE__TRANSPORT`` set;
the other DAG tests run with the provider installed and no transport: that run is unaffected.
Skipped where the provider is not installed.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakecleaner.core.config import load_config
from lakecleaner.core.erasure_requests import requests_table
from lakecleaner.spark.engine import compact_table
from lakecleaner.spark.erasure_requests import ensure_requests_table
from lakecleaner_dev.schedule import next_tick
from lakecleaner_dev.tables import append, create_compacted_table

pytest.importorskip("airflow.providers.openlineage")

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAGS = Path(__file__).resolve().parents[2] / "dags"
CATALOG = "oltest"
COMPACTED, CLEAN, FORGET = "l.orders", "l.clean", "l.forget_me"
ERASED = "erase-me-0l"

RUN = """
import datetime as dt, json, sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).dags["lakecleaner"]
dr = dag.test(logical_date=dt.datetime.fromisoformat(sys.argv[2]), run_conf={
    "tables": [], "force": False, "dry_run": False, "clear_uncleanable": [], "forget": []})
with open(sys.argv[3], "w") as out:  # not stdout: the provider's forked emitters log there too
    json.dump({"run_id": dr.run_id, "state": str(dr.state)}, out)
"""


def _rows(start, n, keys=5):
    return [{"key": f"k{i % keys}", "offset": i, "partition": 0, "value": f"v{i}"} for i in range(start, start + n)]


@pytest.fixture(scope="module")
def events(spark, tmp_path_factory, airflow_db):
    """One DAG run over a table to compact, a clean one and a pending erasure request, in a process
    whose OpenLineage provider writes every event to a file; the events read back."""
    base = tmp_path_factory.mktemp("ol_lake")
    config = base / "lakecleaner.yaml"
    config.write_text(f"catalog:\n  name: {CATALOG}\n  type: hadoop\n  warehouse: {base / 'warehouse'}\n"
                      "spark:\n  master: local[2]\n  driver_memory: 1g\ncleaner:\n  threads: 1\n")
    cfg = load_config(config)
    for key, value in cfg.catalog.spark_conf().items():
        spark.conf.set(key, value)
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
    props = {"compaction.retain.log.end.record": "false"}
    ref = create_compacted_table(spark, cfg, COMPACTED, props)
    append(spark, ref, _rows(0, 20))
    append(spark, ref, _rows(20, 20))
    for table in (CLEAN, FORGET):
        ref = create_compacted_table(spark, cfg, table, {**props, "min.cleanable.dirty.ratio": "0.99"})
        append(spark, ref, _rows(0, 10) + ([{"key": ERASED, "offset": 10, "partition": 0, "value": "x"}]
                                           if table == FORGET else []))
        compact_table(spark, cfg, table, now_ms=int(time.time() * 1000))  # nothing left to compact
    ensure_requests_table(spark, cfg)
    spark.sql(f"INSERT INTO {requests_table(cfg)} VALUES ('dpo-ol', '{FORGET}', map('key', '{ERASED}'), "
              "current_timestamp(), 'dpo@example.org', 'ticket', 'pending', NULL, NULL, NULL)")

    log = base / "openlineage.jsonl"
    env = {**os.environ, "AIRFLOW__LAKECLEANER__CONFIG": str(config), "AIRFLOW__OPENLINEAGE__NAMESPACE": "lakes",
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(log), "append": True})}
    tick = next_tick(dt.datetime.now(dt.timezone.utc))
    result = base / "run.json"
    proc = subprocess.run([sys.executable, "-c", RUN, str(DAGS), tick.isoformat(), str(result)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and result.exists(), proc.stdout[-3000:] + proc.stderr[-5000:]
    run = json.loads(result.read_text())
    assert run["state"] == "success", proc.stdout[-5000:]
    got = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return cfg, run, got


def _complete(events, task: str) -> list[dict]:
    return [e for e in events if e.get("eventType") == "COMPLETE" and e["job"]["name"] == f"lakecleaner.{task}"]


def _by_name(datasets: list[dict]) -> dict[str, dict]:
    return {d["name"]: d for d in datasets}


def test_the_clean_tasks_complete_event_names_the_compacted_table_with_its_figures(events):
    cfg, run, got = events
    (event,) = _complete(got, "clean")
    location = f"{cfg.catalog.warehouse}/l/orders"
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("file", location)]  # not the clean ones
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", location)]
    (table,) = event["outputs"]
    links = [(i["namespace"], i["name"], i["type"]) for i in table["facets"]["symlinks"]["identifiers"]]
    assert links == [(f"file:{cfg.catalog.warehouse}", COMPACTED, "TABLE"),
                     (f"iceberg://localhost{cfg.catalog.warehouse}", COMPACTED, "TABLE")]
    catalog = table["facets"]["catalog"]
    assert (catalog["framework"], catalog["type"], catalog["name"]) == ("iceberg", "hadoop", CATALOG)
    assert catalog["warehouseUri"] == f"file:{cfg.catalog.warehouse}"
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == 5  # 40 records of 5 keys
    assert event["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 40
    facet = event["run"]["facets"]["lakecleaner_compaction"]
    assert facet["_producer"] and facet["_schemaURL"].endswith("#/$defs/LakecleanerCompactionRunFacet")
    (figures,) = facet["tables"]
    assert figures["table"] == COMPACTED and figures["records_read"] == 40 and figures["removed_superseded"] == 35
    assert figures["bytes_written"] > 0 and figures["duration_ms"] > 0


def test_the_forget_tasks_complete_event_names_the_table_a_request_was_carried_out_on(events):
    cfg, run, got = events
    (event,) = _complete(got, "forget")
    location = f"{cfg.catalog.warehouse}/l/forget_me"
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", location)]
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("file", location)]
    assert event["run"]["facets"]["lakecleaner_forget"]["requests"] == [
        {"request_id": "dpo-ol", "table": FORGET, "status": "done"}]
    assert ERASED not in json.dumps(got)  # never a key


def test_a_pending_request_erases_the_key_before_evaluation_and_audits_its_hash(events, spark):
    from lakecleaner.core.table import TableRef
    from lakecleaner.spark.forget import read_audit

    cfg, run, _ = events
    ref = TableRef.parse(FORGET, cfg.catalog.name)
    spark.sql(f"REFRESH TABLE {ref.sql()}")
    keys = sorted(r["key"] for r in spark.table(ref.sql()).collect())
    assert keys == ["k0", "k1", "k2", "k3", "k4"]  # one record per key after the setup's compaction; ERASED gone
    (audit,) = read_audit(spark, cfg, FORGET)
    assert audit["removed_records"] == 1 and audit["key_hash"] and ERASED not in json.dumps(audit, default=str)
    assert (audit["status"], audit["requested_by"], audit["reason"], audit["dag_run_id"]) == (
        "forgotten", "dpo@example.org", "ticket", run["run_id"])
    spark.sql(f"REFRESH TABLE {requests_table(cfg)}")
    (request,) = [r.asDict() for r in spark.table(requests_table(cfg)).collect()]
    assert request["status"] == "done" and request["key"] is None and request["processed_by"] == run["run_id"]


def test_the_erased_key_is_in_no_xcom_or_rendered_field_of_the_run(events):
    """Airflow keeps XComs and rendered fields (the spark-submit arguments among them) with the run,
    shown to anyone who may read it: they carry the request's id, never its key."""
    from sqlalchemy import select

    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    _, run, _ = events
    with create_session() as session:
        xcoms = session.execute(select(XComModel.task_id, XComModel.value)
                                .where(XComModel.run_id == run["run_id"])).all()
        rendered = session.execute(select(RenderedTaskInstanceFields.task_id, RenderedTaskInstanceFields.rendered_fields)
                                   .where(RenderedTaskInstanceFields.run_id == run["run_id"])).all()
    forget_xcom = [json.dumps(v, default=str) for task, v in xcoms if task == "forget_requests"]
    assert forget_xcom and "dpo-ol" in forget_xcom[0]  # the request went through XCom by its id
    assert rendered  # the run's rendered fields are there to search
    for task, value in [*xcoms, *rendered]:
        assert ERASED not in json.dumps(value, default=str), task


def test_an_iceberg_asset_converts_to_the_identifier_the_datasets_carry(events):
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset
    from airflow.sdk import Asset

    cfg, _, got = events
    (event,) = _complete(got, "clean")
    uri = f"iceberg://localhost{cfg.catalog.warehouse}/l/orders"
    converted = translate_airflow_asset(Asset(uri), None)
    links = event["outputs"][0]["facets"]["symlinks"]["identifiers"]
    assert {"namespace": converted.namespace, "name": converted.name, "type": "TABLE"} in links


def test_only_committed_compactions_are_reported_and_an_unreadable_table_keeps_its_default_name(tmp_path):
    from lakecleaner.airflow.lineage import COMPACTION_FACET, compaction_lineage

    config = tmp_path / "lake.yaml"
    config.write_text(f"catalog:\n  name: nolake\n  type: hadoop\n  warehouse: {tmp_path / 'wh'}\n")
    compact = {"status": "committed", "records_read": 9, "records_kept": 3, "checkpoint": {"0": 8}}
    outcomes = [{"table": "a.done", "status": "ok", "steps": {"compact": compact}},
                {"table": "a.dry", "status": "ok", "steps": {"compact": {**compact, "status": "dry_run"}}},
                {"table": "a.invalid", "status": "failed", "steps": {"compact": compact}}]
    got = compaction_lineage(load_config(config), outcomes)
    assert [(d.namespace, d.name) for d in got.outputs] == [("file", f"{tmp_path / 'wh'}/a/done")]  # no metadata
    assert [(t.table, t.records_read, t.records_kept) for t in got.run_facets[COMPACTION_FACET].tables] == [
        ("a.done", 9, 3)]
    assert compaction_lineage(load_config(config), outcomes[1:]).run_facets == {}
