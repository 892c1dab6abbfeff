"""Metrics, alerts and asset events from a real DAG run (``dag.test``, a real spark-submit of the
cleaning application on a throwaway Hadoop warehouse):

- Airflow's StatsD client (``[metrics] statsd_on``, tags as InfluxDB-style ``statsd_influxdb_enabled``)
  sends Kafka's cleaner metrics to a UDP socket this test listens on;
- a real notifier class configured in the YAML (``recording_notifier.RecordingNotifier``) gets a
  new uncleanable mark, a failed fail-severity quality rule and a table still past its lag;
- the compacted table gets an asset event (read back from Airflow's database) through the alias;
- the evaluate task records the evaluation the UI pages present.

A pending erasure request carried out by a DAG run (audited by hash, the key in no XCom or rendered
field of the run): tests/airflow/test_openlineage_dag.py's run, which has one.
"""
from __future__ import annotations

from argparse import Namespace

import datetime as dt
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from lakecleaner.core.config import load_config
from lakecleaner.spark.engine import compact_table
from lakecleaner_dev.schedule import next_tick
from lakecleaner_dev.tables import append, create_compacted_table

pytestmark = [pytest.mark.airflow, pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")]

CATALOG = "obstest"  # its own catalog and warehouse
GOOD, FAILING, DUPES = "o.good", "o.failing_late", "o.dupes"


def _rows(start, n, keys=5):
    return [{"key": f"k{i % keys}", "offset": i, "partition": 0, "value": f"v{i}"} for i in range(start, start + n)]


class StatsdListener:
    """A StatsD server as far as the test needs: every datagram on a loopback UDP port, kept."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self):
        while not self._stop.is_set():
            try:
                data, _ = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            self.lines += data.decode().splitlines()

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()

    def metrics(self, prefix: str) -> dict[tuple[str, str | None], list[tuple[float, str]]]:
        """(name, table tag) -> [(value, type)] of the lines whose name starts with ``prefix``."""
        out: dict = {}
        for line in self.lines:
            name, _, rest = line.partition(":")
            if not name.startswith(prefix):
                continue
            name, *tags = name.split(",")
            table = dict(t.split("=", 1) for t in tags).get("table")
            value, kind = rest.split("|")[:2]
            out.setdefault((name, table), []).append((float(value), kind))
        return out


@pytest.fixture(scope="module")
def statsd():
    """Airflow's [metrics] pointed at the listener; the task SDK's Stats initialized from that config,
    as each task process does when it starts (task_runner.main); dag.test runs tasks in this process."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    listener = StatsdListener()
    env = {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(listener.port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
           "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"}
    os.environ.update(env)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    yield listener
    for key in env:
        os.environ.pop(key, None)
    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    listener.close()


@pytest.fixture(scope="module")
def obs_config(tmp_path_factory, airflow_db):
    base = tmp_path_factory.mktemp("obs_lake")
    path = base / "lakecleaner.yaml"
    alerts = base / "alerts.jsonl"
    path.write_text(
        f"catalog:\n  name: {CATALOG}\n  type: hadoop\n  warehouse: {base / 'warehouse'}\n"
        "spark:\n  master: local[2]\n  driver_memory: 1g\n"
        "cleaner:\n  threads: 1\n  uncleanable_after_failures: 1\n"
        "notifiers:\n"
        "  - class: recording_notifier.RecordingNotifier\n"
        f"    kwargs: {{path: '{alerts}', message: '{{{{ alert.subject }}}} in {{{{ dag.dag_id }}}}'}}\n")
    old = os.environ.get("AIRFLOW__LAKECLEANER__CONFIG")
    os.environ["AIRFLOW__LAKECLEANER__CONFIG"] = str(path)
    yield load_config(path), alerts
    if old is None:
        os.environ.pop("AIRFLOW__LAKECLEANER__CONFIG", None)
    else:
        os.environ["AIRFLOW__LAKECLEANER__CONFIG"] = old


@pytest.fixture(scope="module")
def run(spark, obs_config, statsd, dagbag):
    """Three tables: one to compact, one past max.compaction.lag.ms whose data file is gone (its
    compaction fails: uncleanable at once), one whose records break Kafka's one-record-per-offset
    contract (compacted, then its data-quality suite fails); one DAG run over them."""
    from airflow.models.pool import Pool

    from lakecleaner.airflow.commands import DEFAULT_POOL as POOL, create_pool

    cfg, alerts = obs_config
    for key, value in cfg.catalog.spark_conf().items():
        spark.conf.set(key, value)
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
    create_pool(Namespace(config=str(cfg.source), pool=POOL))
    assert Pool.get_pool(POOL) is not None
    props = {"compaction.retain.log.end.record": "false"}

    ref = create_compacted_table(spark, cfg, GOOD, props)
    append(spark, ref, _rows(0, 20))
    append(spark, ref, _rows(20, 20))

    ref = create_compacted_table(spark, cfg, FAILING, {**props, "max.compaction.lag.ms": "1",
                                                       "min.cleanable.dirty.ratio": "0.99"})
    append(spark, ref, _rows(0, 20))
    compact_table(spark, cfg, FAILING, now_ms=int(time.time() * 1000))
    append(spark, ref, _rows(20, 2))  # dirty past its lag: must clean
    victim = spark.sql(f"SELECT file_path FROM {ref.meta('files')} LIMIT 1").collect()[0][0]
    Path(victim.replace("file:", "")).unlink()

    ref = create_compacted_table(spark, cfg, DUPES, props)
    append(spark, ref, _rows(0, 10) + [{"key": "other", "offset": 9, "partition": 0, "value": "x"}])  # 2 winners at 9


    tick = next_tick(dt.datetime.now(dt.timezone.utc))
    dr = dagbag.dags["lakecleaner"].test(logical_date=tick, run_conf={
        "tables": [], "force": False, "dry_run": False, "clear_uncleanable": [], "forget": []})
    time.sleep(0.5)  # the last datagrams
    return dr, int(tick.timestamp() * 1000), alerts


def test_kafkas_cleaner_metrics_reach_statsd_with_the_table_as_tag(run, statsd):
    dr, _, _ = run
    got = statsd.metrics("airflow.lakecleaner.")
    assert got, statsd.lines[-20:]

    def one(name, table=None):
        (value,) = got[(f"airflow.lakecleaner.{name}", table)]
        return value

    assert one("dirty-percent", GOOD) == (100.0, "g")  # never cleaned: all dirty
    assert one("max-dirty-percent") == (100.0, "g")
    assert one("compaction-delay-secs", FAILING)[0] > 0 and one("compaction-delay-secs", GOOD) == (0.0, "g")
    assert one("max-compaction-delay-secs")[0] == one("compaction-delay-secs", FAILING)[0]
    assert one("uncleanable-partitions-count") == (0.0, "g")  # marked by this run: counted from the next
    removed, kind = one("records-removed", GOOD)
    assert kind == "c" and removed == 35  # 40 records of 5 keys: all but the 5 winners
    assert one("bytes-read", GOOD)[0] > 0 and one("bytes-written", GOOD)[1] == "c"
    duration, kind = one("run-duration-ms", GOOD)
    assert kind == "ms" and 0 < duration < 600_000
    assert one("time-since-last-run-ms", GOOD) == (0.0, "g")  # cleaned by this run, on the run's clock
    assert one("failed-tables-count") == (2.0, "g")
    assert ("airflow.lakecleaner.records-removed", FAILING) not in got  # its compaction failed


def test_each_alert_goes_through_the_configured_notifier(run):
    dr, _, alerts = run
    got = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert {(g["alert"]["kind"], g["alert"]["table"]) for g in got} == {
        ("uncleanable", FAILING), ("compaction_lag", FAILING), ("quality_failed", DUPES)}
    assert all(g["run_id"] == dr.run_id for g in got)
    by_kind = {g["alert"]["kind"]: g for g in got}
    assert by_kind["uncleanable"]["message"] == f"lakecleaner: uncleanable: {FAILING} in lakecleaner"  # rendered
    assert "offsets unique per partition" in by_kind["quality_failed"]["alert"]["message"]
    assert by_kind["compaction_lag"]["alert"]["details"]["max_compaction_lag_ms"] == 1


def test_the_compacted_table_gets_an_asset_event_with_the_runs_figures(run, obs_config):
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    dr, now_ms, _ = run
    assert dr.state == "failed"  # two tables failed; announcing the third does not hide that
    with create_session() as session:
        events = session.execute(select(AssetModel.uri, AssetEvent.extra, AssetEvent.source_task_id)
                                 .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                                 .where(AssetEvent.source_run_id == dr.run_id)).all()
    warehouse = obs_config[0].catalog.warehouse  # the catalog's own address: its warehouse, not the alias
    assert [(uri, task) for uri, _, task in events] == [(f"iceberg://localhost{warehouse}/o/good", "announce")]
    extra = events[0][1]
    assert extra["table"] == GOOD and extra["catalog"] == CATALOG and extra["now_ms"] == now_ms
    assert extra["removed_superseded"] == 35 and extra["records_read"] == 40


def test_the_evaluate_task_records_the_evaluation_the_pages_present(run, obs_config):
    from lakecleaner.core.scheduler import last_evaluation

    cfg, _ = obs_config
    _, now_ms, _ = run
    recorded = last_evaluation(cfg)
    assert recorded is not None and recorded.now_ms == now_ms
    assert {r["table"] for r in recorded.tables} == {GOOD, FAILING, DUPES}
