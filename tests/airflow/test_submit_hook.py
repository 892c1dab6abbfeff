"""The spark-submit command Airflow builds from the DAG's SparkSubmitOperator arguments carries the
same Spark conf, jars and package as the one the CLI runs (both rendered by lakecleaner.core.submit).
Airflow's own operator and hook build the command; nothing is submitted.

The package (--py-files) is built by the task that submits, in its own scratch space, when it runs:
the arguments evaluate hands the mapped task (XCom) name no file, since that task may run on
another machine, and nothing already on disk is trusted."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from submit_argv import argv_options, zip_content

from lakecleaner.core import submit
from lakecleaner.core.config import LakecleanerConfig, SparkConfig

pytestmark = pytest.mark.airflow


def _submitted(operator, monkeypatch, seen: dict):
    """Run ``operator.execute`` with the hook's submit replaced: the command it would run, and what
    the package's directory looked like while it ran."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    def submit_(hook, application):
        seen["argv"] = hook._build_spark_submit_command(application)
        package = Path(argv_options(seen["argv"])[0]["--py-files"].split(",")[-1])
        seen["package"], seen["content"] = package, zip_content(str(package))
        seen["mode"] = stat.S_IMODE(package.parent.stat().st_mode)

    monkeypatch.setattr(SparkSubmitHook, "submit", submit_)
    operator.execute({})


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """This task's own TMPDIR (tempfile reads it once: forget what it read)."""
    path = tmp_path / "task-scratch"
    path.mkdir()
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return path


def test_airflow_submits_what_the_cli_submits(tmp_path, scratch, monkeypatch):
    from lakecleaner.airflow.shipping import PackageShippingSparkSubmitOperator

    cfg = LakecleanerConfig(spark=SparkConfig(driver_memory="3g", conf={"spark.sql.shuffle.partitions": 4}))
    application = submit.job_path("clean.py")
    args = ["--config", "/etc/lakecleaner.yaml", "a.t"]
    kwargs = submit.operator_options(cfg)
    assert "py_files" not in kwargs  # evaluate's XCom names no file: the submitting task builds it
    operator = PackageShippingSparkSubmitOperator(task_id="clean", conn_id="spark_default", application=application,
                                                  name="a.t", application_args=args, **kwargs)
    seen = {}
    _submitted(operator, monkeypatch, seen)
    airflow_flags, airflow_conf, airflow_rest = argv_options(seen["argv"])
    cli_flags, cli_conf, cli_rest = argv_options(
        submit.submit_command(cfg, "/etc/lakecleaner.yaml", "clean.py", ["a.t"], str(tmp_path / "cli")))

    assert airflow_conf == cli_conf and airflow_conf["spark.driver.memory"] == "3g"
    assert airflow_flags["--jars"] == cli_flags["--jars"] and "--packages" not in airflow_flags
    assert seen["content"] == zip_content(cli_flags["--py-files"]) and airflow_flags["--py-files"] == str(seen["package"])
    assert airflow_rest == cli_rest == [application, *args]
    assert airflow_flags["--master"] == "local[2]"  # the connection's (tests/airflow/conftest.py), not the YAML's


def test_the_submitting_task_builds_the_package_in_its_own_scratch_space(scratch, monkeypatch):
    """Built while the task runs, in a private directory (0700) of the task's own TMPDIR, removed
    when spark-submit returns; a zip planted where earlier versions kept theirs is not looked at."""
    from lakecleaner.airflow.shipping import PackageShippingSparkSubmitOperator

    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    planted = Path(tempfile.gettempdir()) / "lakecleaner"
    planted.mkdir()
    for name in ("lakecleaner.zip", "lakecleaner-0000000000000000.zip"):
        (planted / name).write_bytes(b"not the package")
    operator = PackageShippingSparkSubmitOperator(task_id="clean", conn_id="spark_default",
                                                  application=submit.job_path("clean.py"), py_files="/opt/extra.py",
                                                  **submit.operator_options(LakecleanerConfig()))
    seen = {}
    _submitted(operator, monkeypatch, seen)
    assert seen["package"].is_relative_to(scratch) and seen["package"].parent != planted
    assert seen["mode"] == 0o700
    assert "lakecleaner/core/scheduler.py" in seen["content"] and "lakecleaner/spark/jobs/clean.py" in seen["content"]
    assert not [n for n in seen["content"] if n.startswith("lakecleaner/airflow/")]
    assert operator.py_files.split(",")[0] == "/opt/extra.py"  # the operator's own files are kept
    assert not seen["package"].parent.exists()  # gone with the task
    assert sorted(os.listdir(scratch)) == ["lakecleaner"]  # only what was planted


def test_the_dag_hands_its_mapped_tasks_no_package_path(tmp_path, monkeypatch):
    """What evaluate and forget_requests return (the mapped tasks' arguments, XCom) names no file of
    the machine they ran on."""
    import datetime as dt
    from types import SimpleNamespace

    from lakecleaner.airflow import dag as dag_module
    from lakecleaner.core.scheduler import Application, Job

    config = tmp_path / "lake.yaml"
    config.write_text(f"catalog:\n  name: lake\n  type: hadoop\n  warehouse: {tmp_path / 'wh'}\n")
    cfg = dag_module._load(str(config))
    now = dt.datetime(2026, 11, 26, tzinfo=dt.timezone.utc)
    context = {"dag_run": SimpleNamespace(run_id="manual__x", run_after=now), "logical_date": now,
               "data_interval_start": now, "data_interval_end": now}
    apps = [Application(0, (Job("a.t", 1, "dirty"),))]
    kwargs = dag_module._application_kwargs(cfg, apps, 1, None, {"dry_run": False}, context)
    assert kwargs and all("py_files" not in k for k in kwargs)
    assert str(tmp_path / "wh") not in repr(kwargs).replace(str(config), "")
