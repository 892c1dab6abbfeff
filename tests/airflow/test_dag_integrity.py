"""The DAG file: imports cleanly in a DagBag, has the expected shape, and does no I/O at parse time
(the DAG processor parses it every 30 s, on machines that may not even see the warehouse)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest


pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DAG_FILE = DAGS / "lakecleaner_dag.py"
PACKAGE = REPO / "include" / "lakecleaner"
# What a parse may do: read Python code (and Airflow's own files), nothing else.
SPAWN_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork")
PATH_EVENTS = ("open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.remove", "shutil.copyfile",
               "shutil.make_archive", "os.chmod", "os.utime")


class _Recorder:
    def __init__(self):
        self.on, self.events = False, []

    def __call__(self, event, args):
        if self.on and (event in PATH_EVENTS or event in SPAWN_EVENTS):
            self.events.append((event, args))


_recorder = _Recorder()
sys.addaudithook(_recorder)  # audit hooks cannot be removed; this one records only while switched on


def _parse():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS), known_pools={"default_pool", "lakecleaner"})


@pytest.fixture
def parsed(tmp_path, monkeypatch):
    """The DAG file parsed with a config file that does not exist."""
    missing = tmp_path / "nowhere" / "lakecleaner.yaml"
    monkeypatch.setenv("AIRFLOW__LAKECLEANER__CONFIG", str(missing))
    import airflow.dag_processing.dagbag  # noqa: F401 - Airflow's own start-up is not the DAG file's parse

    _recorder.events.clear()
    _recorder.on = True
    try:
        bag = _parse()
    finally:
        _recorder.on = False
    return bag, list(_recorder.events), tmp_path


def _path(args) -> str:
    first = args[0] if args else None
    if isinstance(first, bytes):
        return first.decode(errors="replace")
    if isinstance(first, (str, os.PathLike)):
        return os.fspath(first)
    return ""  # a file descriptor


def test_the_dag_file_imports_without_errors(parsed):
    bag, _, _ = parsed
    assert bag.import_errors == {}
    assert "lakecleaner" in bag.dag_ids
    assert not any(DAG_FILE.name in w for warnings in bag.captured_warnings.values() for w in warnings)


def test_parsing_does_no_io(parsed):
    bag, events, tmp_path = parsed
    assert bag.import_errors == {}  # so load_config (which would fail on the missing file) was never called
    assert [e for e, _ in events if e in SPAWN_EVENTS] == []  # no spark-submit, no airflow CLI
    touched = [(e, _path(a)) for e, a in events if e in PATH_EVENTS]
    suspicious = [(e, p) for e, p in touched
                  if p.startswith(str(tmp_path))  # the (missing) config
                  or p.endswith((".jar", ".zip", ".yaml", ".yml", ".json"))
                  or Path(p).resolve() in (REPO / "warehouse", REPO / "jobs", REPO / "include" / "lakecleaner.yaml")
                  or "warehouse" in Path(p).parts]
    assert suspicious == []
    writes = [(e, p) for e, p in touched if e != "open" and e not in ("os.listdir", "os.scandir")
              and "__pycache__" not in p]
    assert writes == []
    assert not (tmp_path / "nowhere").exists()


def test_the_dag_has_the_expected_shape(parsed):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from lakecleaner.airflow.operators import LakecleanerSubmitOperator
    from lakecleaner.airflow.shipping import ShipsPackage

    bag, _, _ = parsed
    dag = bag.dags["lakecleaner"]
    assert dag.dag_id == "lakecleaner"
    assert set(dag.task_dict) == {"forget_requests", "forget", "evaluate", "clean", "summary", "announce"}
    assert type(dag.timetable).__name__ == "CronTriggerTimetable" and dag.timetable.expression == "*/15 * * * *"
    assert dag.catchup is False and dag.max_active_runs == 1

    params = {name: dag.params.get_param(name) for name in ("tables", "force", "dry_run", "clear_uncleanable",
                                                           "forget")}
    assert set(dag.params.keys()) == set(params)
    assert params["tables"].value == [] and params["tables"].schema["type"] == "array"
    assert params["tables"].schema["items"] == {"type": "string"}
    assert params["clear_uncleanable"].value == [] and params["clear_uncleanable"].schema["items"] == {"type": "string"}
    assert params["force"].value is False and params["force"].schema["type"] == "boolean"
    assert params["dry_run"].value is False and params["dry_run"].schema["type"] == "boolean"
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        params["tables"].resolve("t.not_a_list")
    assert all(p.description for p in params.values())  # shown in the trigger form

    evaluate, clean, summary = (dag.task_dict[t] for t in ("evaluate", "clean", "summary"))
    # one mapped spark-submit of jobs/clean.py per packed application, named by its tables: the
    # provider's operator, with lakecleaner's private properties file (lakecleaner.airflow.operators)
    # and, in client mode, the package it builds itself when it runs (lakecleaner.airflow.shipping)
    assert clean.operator_class is LakecleanerSubmitOperator and issubclass(clean.operator_class, SparkSubmitOperator)
    assert issubclass(clean.operator_class, ShipsPackage) and "py_files" not in clean.partial_kwargs
    assert clean.partial_kwargs["lakecleaner_config"] is None and clean.partial_kwargs["catalog_conn_id"] is None
    assert clean.upstream_task_ids == {"evaluate"} and clean.downstream_task_ids == {"summary", "announce"}
    # no pool of its own: at most cleaner.threads applications per run, one run at a time
    assert clean.partial_kwargs["conn_id"] == "spark_default" and clean.pool == "default_pool" and clean.retries == 0
    # the application is each mapped instance's, as the deploy mode decides (tests/airflow/test_submit_hook.py)
    assert "application" not in clean.partial_kwargs
    for task_id in ("evaluate", "forget_requests"):  # they build the submissions, for the connection's master
        assert dag.task_dict[task_id].op_kwargs["spark_conn_id"] == "spark_default"
        assert dag.task_dict[task_id].op_kwargs["code_uri"] is None and dag.task_dict[task_id].op_kwargs["config_uri"] is None
    assert clean.map_index_template == "{{ task.name }}"
    # erasure requests (the forget param) run before evaluate; evaluate runs whatever they did
    forget = dag.task_dict["forget"]
    assert forget.operator_class is LakecleanerSubmitOperator and forget.upstream_task_ids == {"forget_requests"}
    assert "application" not in forget.partial_kwargs and "py_files" not in forget.partial_kwargs
    assert evaluate.upstream_task_ids == {"forget"} and evaluate.trigger_rule == "all_done"
    assert params["forget"].value == [] and params["forget"].schema["items"] == {"type": "string"}  # request ids
    assert clean.partial_kwargs["on_failure_callback"]
    assert summary.upstream_task_ids == {"clean"} and summary.trigger_rule == "all_done"
    # asset events for tables known only at run time: one alias as the outlet, beside summary (a
    # leaf after it would decide the run's state; a failed summary would drop its events)
    announce = dag.task_dict["announce"]
    assert announce.upstream_task_ids == {"clean"} and announce.trigger_rule == "all_done"
    assert {t.task_id for t in dag.leaves} == {"summary", "announce"}
    assert [type(o).__name__ for o in announce.outlets] == ["AssetAlias"]
    assert announce.outlets[0].name == "lakecleaner-compacted"


def test_the_schedule_comes_from_the_lakecleaner_section(monkeypatch):
    monkeypatch.setenv("AIRFLOW__LAKECLEANER__SCHEDULE", "0 * * * *")
    dag = _parse().dags["lakecleaner"]
    assert dag.timetable.expression == "0 * * * *"
    monkeypatch.setenv("AIRFLOW__LAKECLEANER__SCHEDULE", "none")  # triggered runs only (another scheduler, the API)
    assert type(_parse().dags["lakecleaner"].timetable).__name__ == "NullTimetable"


def test_one_file_builds_several_dags_each_on_its_own_config_pool_and_connection(tmp_path, monkeypatch):
    """The factory's keyword arguments (names scripts rely on) override the [lakecleaner] section."""
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "lakes.py").write_text(
        "from lakecleaner.airflow import lakecleaner_dag\n\n"
        "sales = lakecleaner_dag(dag_id='lakecleaner_sales', config='/etc/lake/sales.yaml', schedule='0 * * * *',\n"
        "                        pool='shared_spark', spark_conn_id='spark_cluster', catalog_conn_id='sales_catalog',\n"
        "                        code_uri='local:///opt/lakecleaner', config_uri='local:///etc/lake/sales.yaml')\n"
        "crm = lakecleaner_dag(dag_id='lakecleaner_crm', config='/etc/lake/crm.yaml', schedule=None)\n"
        "default = lakecleaner_dag(dag_id='lakecleaner_default')\n")
    monkeypatch.setenv("AIRFLOW__LAKECLEANER__SCHEDULE", "30 2 * * *")
    monkeypatch.setenv("AIRFLOW__LAKECLEANER__SPARK_CONN_ID", "spark_from_section")
    bag = DagBag(dag_folder=str(tmp_path), known_pools={"default_pool", "shared_spark"})
    assert bag.import_errors == {}
    sales, crm, default = (bag.dags[f"lakecleaner_{n}"] for n in ("sales", "crm", "default"))
    assert sales.timetable.expression == "0 * * * *" and type(crm.timetable).__name__ == "NullTimetable"
    assert default.timetable.expression == "30 2 * * *"
    for d, pool, conn in ((sales, "shared_spark", "spark_cluster"), (crm, "default_pool", "spark_from_section"),
                          (default, "default_pool", "spark_from_section")):
        for task_id in ("clean", "forget"):
            assert (d.task_dict[task_id].pool, d.task_dict[task_id].partial_kwargs["conn_id"]) == (pool, conn), d.dag_id
        assert "lakecleaner" in d.tags  # how the Lake Cleaner page finds them
    # the config each DAG's tasks (and the page) resolve: the factory's, else [lakecleaner] config at run time
    assert sales.task_dict["evaluate"].op_kwargs["config"] == "/etc/lake/sales.yaml"
    assert default.task_dict["evaluate"].op_kwargs["config"] is None
    # the catalog connection every task (and the page) merges over the YAML's catalog: the factory's,
    # else [lakecleaner] catalog_conn_id at run time
    for task_id in ("forget_requests", "evaluate", "summary", "announce"):
        assert sales.task_dict[task_id].op_kwargs["catalog_conn_id"] == "sales_catalog", task_id
        assert default.task_dict[task_id].op_kwargs["catalog_conn_id"] is None, task_id
    for task_id in ("forget_requests", "evaluate"):  # where a cluster-mode driver reads the code and the config
        assert sales.task_dict[task_id].op_kwargs["spark_conn_id"] == "spark_cluster"
        assert sales.task_dict[task_id].op_kwargs["code_uri"] == "local:///opt/lakecleaner"
        assert sales.task_dict[task_id].op_kwargs["config_uri"] == "local:///etc/lake/sales.yaml"
        assert default.task_dict[task_id].op_kwargs["code_uri"] is None  # [lakecleaner] code_uri at run time
    for task_id in ("clean", "forget"):
        assert sales.task_dict[task_id].partial_kwargs["catalog_conn_id"] == "sales_catalog"
        assert sales.task_dict[task_id].partial_kwargs["lakecleaner_config"] == "/etc/lake/sales.yaml"


def test_a_dag_without_a_config_says_where_to_set_one(monkeypatch):
    from lakecleaner.airflow.dag import config_path
    from lakecleaner.core.config import ConfigError

    monkeypatch.delenv("AIRFLOW__LAKECLEANER__CONFIG", raising=False)
    with pytest.raises(ConfigError, match=r"pass config= to lakecleaner_dag\(\) or set \[lakecleaner\] config"):
        config_path(None)
    monkeypatch.setenv("AIRFLOW__LAKECLEANER__CONFIG", "/etc/lake/a.yaml")
    assert config_path(None) == "/etc/lake/a.yaml" and config_path("/x.yaml") == "/x.yaml"


def test_the_check_command_finds_a_spark_connection_kept_in_the_metadata_database(airflow_db, monkeypatch):
    """`airflow connections add` writes to the database, where `airflow lakecleaner check` must look."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from lakecleaner.airflow.commands import problems

    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == "spark_in_db").delete()
        session.add(Connection(conn_id="spark_in_db", conn_type="spark", host="local[2]"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    assert problems("spark_in_db") == []
    [missing] = problems("no_such_spark_connection")
    assert "no Airflow connection 'no_such_spark_connection'" in missing


def test_the_lake_cleaner_page_merges_a_dags_catalog_connection(tmp_path, monkeypatch):
    """The API server resolves a DAG's catalog connection through its own secrets backends (here the
    environment), as the tasks do; one it cannot use is said with the DAG and the connection, never a value."""
    import json

    from lakecleaner.airflow.deployment import LakeDag, Unconfigured, catalog_conn_value

    config = tmp_path / "a.yaml"
    config.write_text("catalog:\n  name: a\n  type: sql\n  spark_properties: {jdbc.schema-version: V1}\n")
    monkeypatch.setenv("AIRFLOW_CONN_A_CATALOG", json.dumps({"conn_type": "iceberg", "extra": {
        "type": "sql", "uri": "jdbc:postgresql://db:5432/iceberg", "jdbc.user": "u", "jdbc.password": "s3cr3t",
        "warehouse": "s3://lake/wh"}}))
    cfg = LakeDag("lake_a", str(config), None, "a_catalog").load()
    assert cfg.catalog.warehouse == "s3://lake/wh" and cfg.state_root == "s3://lake/wh/_lakecleaner"
    assert cfg.catalog.pyiceberg_properties_resolved()["uri"] == "postgresql+psycopg2://u:s3cr3t@db:5432/iceberg"
    assert cfg.catalog.spark_conf()["spark.sql.catalog.a.jdbc.schema-version"] == "V1"
    monkeypatch.setenv("AIRFLOW_CONN_B_CATALOG", json.dumps({"conn_type": "iceberg", "login": "client",
                                                              "extra": {"type": "rest", "token": "s3cr3t"}}))
    for conn_id, said in (("no_such_catalog", "catalog_conn_id='no_such_catalog' is invalid: no such Airflow "
                                              "connection"),
                          ("b_catalog", "Airflow connection 'b_catalog': login/password: a REST catalog's OAuth")):
        with pytest.raises(Unconfigured, match=f"lakecleaner DAG lake_a: its catalog connection {conn_id} ") as exc:
            LakeDag("lake_a", str(config), None, conn_id).load()
        assert said in str(exc.value) and "s3cr3t" not in str(exc.value)

    class Task:
        op_kwargs = {"config": None, "catalog_conn_id": "a_catalog"}

    assert catalog_conn_value(type("Dag", (), {"task_dict": {"evaluate": Task}})) == "a_catalog"
    assert catalog_conn_value(type("Dag", (), {"task_dict": {}})) is None


def test_a_fresh_parse_reads_no_catalog_credentials_file(tmp_path):
    """pyiceberg reads ``.pyiceberg.yaml`` (where its users keep catalog credentials) as it is
    imported: a parse in a fresh interpreter, as a DAG processor's, must not import it."""
    import subprocess

    home = tmp_path / "pyiceberg-home"
    home.mkdir()
    (home / ".pyiceberg.yaml").write_text("catalog:\n  default:\n    uri: http://nowhere\n")
    script = (
        "import os, sys, runpy\n"
        "opened = []\n"
        "sys.addaudithook(lambda e, a: opened.append(str(a[0])) if e == 'open' and a and isinstance(a[0], str) else None)\n"
        f"runpy.run_path({str(DAG_FILE)!r})\n"
        "print('PYICEBERG', 'pyiceberg' in sys.modules, [p for p in opened if p.endswith('.pyiceberg.yaml')])\n")
    env = {**os.environ, "PYICEBERG_HOME": str(home), "AIRFLOW__LAKECLEANER__CONFIG": str(tmp_path / "missing.yaml"),
           "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    [line] = [line for line in done.stdout.splitlines() if line.startswith("PYICEBERG ")] or [done.stderr[-3000:]]
    assert line == "PYICEBERG False []", line
