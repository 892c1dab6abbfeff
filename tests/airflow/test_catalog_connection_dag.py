"""A DAG whose catalog comes from an Airflow connection (``lakecleaner_dag(catalog_conn_id=...)``): the
JDBC catalog on a real PostgreSQL whose password is only in ``AIRFLOW_CONN_...`` (the YAML names the
catalog and nothing else of it). One ``dag.test`` run cleans a table through a real spark-submit,
and the password appears in no XCom, no rendered field, no task log and no process's argv seen
while the run went on: it reached the Spark driver through the submitting task's private
properties file (0600, gone after the run), and pyiceberg in the tasks through the connection."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from lakecleaner.core.config import CHECKPOINT_PROPERTY, LakecleanerConfig, SparkConfig
from lakecleaner_dev.localpg import JDBC_JAR, jdbc_catalog
from lakecleaner_dev.tables import append, create_compacted_table

pytestmark = [pytest.mark.airflow, pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")]

CATALOG, CONN_ID, TABLE = "conn_lake", "conn_lake_catalog", "conn.orders"


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is ``ancestor`` or one of its descendants."""
    try:
        return pid == ancestor or ancestor in {p.pid for p in psutil.Process(pid).parents()}
    except psutil.Error:  # gone meanwhile
        return False


class ArgvWatch(threading.Thread):
    """The command line of every process started while the run goes on, polled (one
    running before it, such as a JVM an earlier test's process leaves as it exits, is none of the
    run's); and each private properties file a spark-submit of this test's run was given (a process
    started by this one: the suite's other workers submit their own), as it was while it existed."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: set[tuple[str, ...]] = set()
        self.files: dict[str, tuple[int, str]] = {}  # path -> (mode, text)
        self.done = threading.Event()
        # a process by pid and start time (a pid alone may be used again)
        self.before = {(p.pid, p.info["create_time"]) for p in psutil.process_iter(["create_time"])}

    def run(self):
        while not self.done.is_set():
            # psutil leaves out a process gone meanwhile; one not ours to read has no cmdline (None)
            for proc in psutil.process_iter(["cmdline", "create_time"]):
                if (proc.pid, proc.info["create_time"]) in self.before or not proc.info["cmdline"]:
                    continue
                argv = tuple(proc.info["cmdline"])
                self.seen.add(argv)
                if "--properties-file" in argv[:-1] and _descends_from(proc.pid, os.getpid()):
                    path = argv[argv.index("--properties-file") + 1]
                    if path not in self.files:
                        try:
                            self.files[path] = (os.stat(path).st_mode & 0o777, Path(path).read_text())
                        except OSError:
                            pass
            time.sleep(0.05)


@pytest.fixture(scope="module")
def lake(postgres, spark, tmp_path_factory, airflow_db):
    """A compacted table with dirty data on the JDBC catalog, a YAML that names the catalog only, the
    connection holding its URI, user, password and warehouse; the repo's DAG on both, through the
    [lakecleaner] options config and catalog_conn_id (read when the tasks run)."""
    base = tmp_path_factory.mktemp("conn_lake")
    warehouse = base / "warehouse"
    own = LakecleanerConfig(catalog=jdbc_catalog(postgres, warehouse, CATALOG),
                            spark=SparkConfig(master="local[2]", driver_memory="1g", extra_jars=(JDBC_JAR,)))
    for key, value in own.catalog.spark_conf().items():  # this test's own session: to build the table
        spark.conf.set(key, value)
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
    ref = create_compacted_table(spark, own, TABLE, {"compaction.retain.log.end.record": "false"})
    for b in range(2):
        append(spark, ref, [{"key": f"k{i % 5}", "offset": i, "partition": i % 2, "value": f"v{i}"}
                            for i in range(b * 20, b * 20 + 20)])
    config = base / "lakecleaner.yaml"
    config.write_text(f"catalog:\n  name: {CATALOG}\n  type: sql\n  spark_properties: {{jdbc.schema-version: V1}}\n"
                      f"spark:\n  master: local[2]\n  driver_memory: 1g\n  extra_jars: [{JDBC_JAR}]\n"
                      "cleaner:\n  threads: 1\n  namespaces: [conn]\n")
    assert postgres.password not in config.read_text()
    env = {f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps({"conn_type": "iceberg", "extra": {
               "type": "sql", "uri": postgres.jdbc_url("iceberg"), "jdbc.user": postgres.user,
               "jdbc.password": postgres.password, "warehouse": f"file://{warehouse}"}}),
           "AIRFLOW__LAKECLEANER__CONFIG": str(config), "AIRFLOW__LAKECLEANER__CATALOG_CONN_ID": CONN_ID}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield {"own": own, "password": postgres.password}
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class Records(logging.Handler):
    """Every log event of the run as emitted, before Airflow's secrets masker could hide a secret in
    it: structlog's (the tasks' and their hooks' logs, which dag.test writes to no file) and the
    standard library's."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"{record.name}: {record.getMessage()}")

    def __call__(self, logger, method, event_dict):  # a structlog processor, put first
        self.lines.append(repr(event_dict))
        return event_dict

    @contextlib.contextmanager
    def recording(self):
        import structlog

        processors = structlog.get_config()["processors"]
        loggers = [logging.getLogger(), logging.getLogger("airflow.task")]
        structlog.configure(processors=[self, *processors])
        for logger in loggers:
            logger.addHandler(self)
        try:
            yield self
        finally:
            structlog.configure(processors=processors)
            for logger in loggers:
                logger.removeHandler(self)


def _rows(model, dr, *columns):
    from sqlalchemy import select

    from airflow.utils.session import create_session

    with create_session() as session:
        return [tuple(getattr(r, c) for c in columns) for r in session.scalars(
            select(model).where(model.dag_id == dr.dag_id, model.run_id == dr.run_id)).all()]


def test_a_run_on_a_catalog_from_a_connection_keeps_its_password_out_of_sight(lake, dagbag, capfd):
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.models.xcom import XComModel

    from lakecleaner.core.metadata import MetadataReader

    password = lake["password"]
    watch, records = ArgvWatch(), Records()
    watch.start()
    try:
        with records.recording():
            dr = dagbag.dags["lakecleaner"].test(run_conf={"tables": [], "force": False, "dry_run": False,
                                                  "clear_uncleanable": []})
    finally:
        watch.done.set()
        watch.join()
    out, err = capfd.readouterr()
    states = {(t, i): s for t, i, s in _rows(__import__("airflow.models.taskinstance", fromlist=["TaskInstance"])
                                              .TaskInstance, dr, "task_id", "map_index", "state")}
    assert dr.state == "success", (states, (out + err)[-4000:])
    assert states[("clean", 0)] == "success"

    # the table was cleaned, by the driver on the connection's catalog (its warehouse, its database)
    merged = lake["own"]  # the same catalog, as this test built it
    assert CHECKPOINT_PROPERTY in MetadataReader(merged).read(TABLE).properties

    # the password went to spark-submit in a private properties file, and only there
    (path, (mode, text)), *more = watch.files.items()
    assert not more and mode == 0o600 and password in text and not Path(path).exists()
    submits = [a for a in watch.seen if any(x.endswith("spark-submit") or x == "org.apache.spark.deploy.SparkSubmit"
                                            for x in a)]
    assert submits and any("clean.py" in x for a in submits for x in a)  # the watch saw the submission
    assert not [a for a in watch.seen if any(password in x for x in a)]

    xcoms = _rows(XComModel, dr, "task_id", "key", "value")
    assert xcoms and password not in json.dumps([str(v) for v in xcoms])
    rendered = _rows(RTIF, dr, "task_id", "rendered_fields")
    assert rendered and password not in json.dumps(rendered, default=str)
    assert any("application_args" in (r[1] or {}) for r in rendered)  # the clean task's fields were recorded
    logs = [p.read_text(errors="replace") for p in Path(os.environ["AIRFLOW_HOME"], "logs").rglob("*") if p.is_file()]
    task_log = "\n".join([out, err, *logs, *records.lines])
    # the task's log was captured: the command (the file's path in it) and the driver's output
    assert "Spark-Submit cmd:" in task_log and path in task_log and "LAKECLEANER_RESULT" in task_log
    assert password not in task_log
