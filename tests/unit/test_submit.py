"""spark-submit of the jobs/ applications (lakecleaner.core.submit): the CLI's command line and the DAG's
SparkSubmitOperator arguments are one rendering; a job's result line is read back as printed.
No Airflow, no Spark (tests/airflow/test_submit_hook.py renders the DAG's arguments through Airflow)."""
import datetime as dt
import json
import os
import re
import zipfile

import pytest
from submit_argv import argv_options, zip_content

from lakecleaner.core import submit
from lakecleaner.core.config import CatalogConfig, LakecleanerConfig, SparkConfig


CONFIGS = {
    "bundled jar": LakecleanerConfig(spark=SparkConfig(driver_memory="3g", conf={"spark.sql.shuffle.partitions": 4})),
    "maven coordinate": LakecleanerConfig(spark=SparkConfig(
        iceberg_runtime="org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2", conf={"spark.x.y": "z"})),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_the_cli_command_and_the_dag_operator_options_are_one_rendering(name, tmp_path):
    """Every conf key and value, the jars or packages and the shipped package are the same whether
    the CLI submits a job or the DAG's SparkSubmitOperator does."""
    cfg = CONFIGS[name]
    argv = submit.submit_command(cfg, "/etc/lakecleaner.yaml", "clean.py", ["a.t", "--now-ms", "1"],
                                 str(tmp_path / "cli"))
    dag = submit.operator_options(cfg)
    flags, conf, rest = argv_options(argv)

    assert conf == dag["conf"] and conf  # spark.driver.memory included: the DAG passes it as --conf
    assert conf["spark.driver.memory"] == cfg.spark.driver_memory
    assert flags.get("--jars") == dag["jars"] and flags.get("--packages") == dag["packages"]
    assert (dag["jars"] is None) != (dag["packages"] is None)  # the Iceberg runtime, one way or the other
    assert zip_content(flags["--py-files"])["lakecleaner/spark/jobs/clean.py"]  # the DAG's: built by its task
    assert rest == [submit.job_path("clean.py"), "--config", "/etc/lakecleaner.yaml", "a.t", "--now-ms", "1"]
    assert flags["--master"] == cfg.spark.master  # the DAG's master is the Airflow connection's
    assert set(dag) == {"jars", "packages", "conf", "env_vars"}


def test_catalog_secrets_stay_out_of_argv_and_xcom(tmp_path):
    """Catalog properties (tokens, JDBC passwords) never reach a spark-submit command line or the
    DAG's mapped arguments (stored as XCom): the job sets the catalog's conf from its config file."""
    from lakecleaner.core.sparkconf import REDACTION, spark_conf

    cfg = LakecleanerConfig(catalog=CatalogConfig(
        type="rest", warehouse="s3://bucket/wh", properties={"uri": "http://cat", "token": "s3cr3t-token"},
        spark_properties={"jdbc.password": "s3cr3t-pw", "credential": "id:s3cr3t-cred"}))
    assert "s3cr3t-token" in json.dumps(spark_conf(cfg))  # the job's own session still gets them
    shared = submit.operator_options(cfg)
    argv = submit.submit_command(cfg, "/etc/lakecleaner.yaml", "clean.py", ["a.t"], str(tmp_path))
    for exposed in (json.dumps(shared), " ".join(argv)):
        assert "s3cr3t" not in exposed and "spark.sql.catalog.lake" not in exposed
    assert all(re.search(REDACTION, key) for key in ("spark.sql.catalog.lake.token", "x.credential", "jdbc.password"))


def test_the_package_is_built_privately_and_removed_afterwards(tmp_path, monkeypatch):
    import stat
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with submit.built_package() as first:
        assert stat.S_IMODE(os.stat(os.path.dirname(first)).st_mode) == 0o700
        with zipfile.ZipFile(first) as zf:
            names = zf.namelist()
    assert first.startswith(str(tmp_path)) and os.listdir(tmp_path) == []  # no leftovers
    # what executors run (the core and the Spark layer), never the Airflow face
    assert {"lakecleaner/__init__.py", "lakecleaner/core/scheduler.py", "lakecleaner/spark/engine.py",
            "lakecleaner/spark/jobs/clean.py"} <= set(names)
    assert not [n for n in names if n.startswith("lakecleaner/airflow/") or n == "lakecleaner/cli.py"]


def test_a_result_line_round_trips_among_other_output():
    result = {"table": "a.t", "status": "committed", "records_read": 3, "checkpoint": {"0": 7}, "error": None,
              "at": dt.datetime(2026, 11, 23, 7, tzinfo=dt.timezone.utc)}
    line = submit.format_result(result)
    assert "\n" not in line and line.startswith(submit.RESULT_MARKER)
    stdout = "\n".join(["Spark says hello", line, "lakecleaner: a.t (1 of 1): started",
                        submit.format_result({"table": "a.u", "status": "failed", "error": "table a.u: x\ny"}), ""])
    assert submit.parse_results(stdout) == [{**result, "at": "2026-11-23 07:00:00+00:00"},
                                            {"table": "a.u", "status": "failed", "error": "table a.u: x\ny"}]
    assert submit.parse_result("Spark says hello") is None


def test_a_job_that_cannot_read_its_config_still_reports_each_table(tmp_path, capsys):
    """The job's own printing (lakecleaner.spark.batch) is what the CLI reads: a line per table, naming it."""
    from lakecleaner.spark.batch import job_main

    assert job_main(("compact",), ["a.t", "a.u", "--config", str(tmp_path / "missing.yaml")]) == 2
    results = submit.parse_results(capsys.readouterr().out)
    assert [r["table"] for r in results] == ["a.t", "a.u"]
    assert all(r["status"] == "failed" and "config file not found" in r["error"] for r in results)


def test_secret_spark_settings_stay_out_of_argv_and_xcom(tmp_path):
    """Every spark.conf key Spark's redaction (sparkconf.REDACTION) matches, by key or by value, as
    Spark matches them: never on a spark-submit command line nor in the DAG's mapped arguments. The
    job's own session still sets them (the CLI), or the DAG's submitting task hands them over in a
    private properties file (lakecleaner.airflow.operators)."""
    from lakecleaner.core.sparkconf import REDACTION, spark_conf

    secret = {"spark.hadoop.fs.s3a.secret.key": "s3cr3t-key", "spark.hadoop.fs.s3a.access.key": "AKIAs3cr3t",
              "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "s3cr3t-azure",
              "spark.hadoop.fs.azure.sas.box.acct.blob.core.windows.net": "sv=s3cr3t-sas",
              "spark.executorEnv.DB_URL": "jdbc:postgresql://db/x?password=s3cr3t-url"}
    cfg = LakecleanerConfig(spark=SparkConfig(conf={**secret, "spark.sql.shuffle.partitions": 4}))
    assert all(k in spark_conf(cfg) for k in secret)  # the job's own session gets them
    shared = submit.operator_options(cfg)
    argv = submit.submit_command(cfg, "/etc/lakecleaner.yaml", "clean.py", ["a.t"], str(tmp_path))
    for exposed in (json.dumps(shared), " ".join(argv)):
        assert "s3cr3t" not in exposed and "AKIA" not in exposed
    flags, conf, _ = argv_options(argv)
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.redaction.regex"] == REDACTION  # its value matches itself, and is no secret
    assert submit.secret_conf(cfg) == secret


def test_death_reason_names_the_drivers_exception_before_the_jvms_shutdown_lines():
    """A dead application's stderr: the driver's traceback, then the JVM's shutdown lines. The tail
    alone (what the CLI showed) had lost the exception."""
    import subprocess
    import sys

    raised = subprocess.run([sys.executable, "-c", "def job():\n    raise RuntimeError('catalog lake: "
                             "connection refused')\njob()"], capture_output=True, text=True).stderr
    shutdown = "".join(f"26/11/28 17:30:{i:02d} WARN ShutdownHookManager: line {i}\n" for i in range(40))
    reason = submit.death_reason(raised + shutdown)
    assert reason.startswith("RuntimeError: catalog lake: connection refused\n"), reason
    assert reason.endswith("line 39") and len(reason) < 2_100
    assert submit.death_reason(raised) == raised.strip()  # the exception already in the tail: once
    assert submit.death_reason(shutdown) == shutdown.strip()[-submit.DEATH_TAIL_CHARS:]  # no traceback: the tail
    py4j = ("Traceback (most recent call last):\n  File \"clean.py\", line 9, in <module>\n"
            "py4j.protocol.Py4JJavaError: An error occurred while calling o42.sql.\n"
            ": org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: t.x\n"
            "\tat org.apache.iceberg.BaseMetastoreCatalog.loadTable(BaseMetastoreCatalog.java:1)\n")
    assert submit.death_reason(py4j + shutdown).startswith(
        "py4j.protocol.Py4JJavaError: An error occurred while calling o42.sql. "
        "org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: t.x\n")
