"""The spark-submit command Airflow builds from the DAG's SparkSubmitOperator arguments carries the
same Spark conf, jars and package as the one the CLI runs (both rendered by lakecleaner.core.submit).
Airflow's own operator and hook build the command; nothing is submitted."""
from __future__ import annotations

import pytest
from submit_argv import argv_options, zip_content

from lakecleaner.core import submit
from lakecleaner.core.config import LakecleanerConfig, SparkConfig

pytestmark = pytest.mark.airflow


def test_airflow_submits_what_the_cli_submits(tmp_path):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    cfg = LakecleanerConfig(spark=SparkConfig(driver_memory="3g", conf={"spark.sql.shuffle.partitions": 4}))
    application = submit.job_path("clean.py")
    args = ["--config", "/etc/lakecleaner.yaml", "a.t"]
    operator = SparkSubmitOperator(task_id="clean", conn_id="spark_default", application=application, name="a.t",
                                   application_args=args, **submit.operator_options(cfg, tmp_path / "dag"))
    built = operator._get_hook()._build_spark_submit_command(application)
    airflow_flags, airflow_conf, airflow_rest = argv_options(built)
    cli_flags, cli_conf, cli_rest = argv_options(
        submit.submit_command(cfg, "/etc/lakecleaner.yaml", "clean.py", ["a.t"], str(tmp_path / "cli")))

    assert airflow_conf == cli_conf and airflow_conf["spark.driver.memory"] == "3g"
    assert airflow_flags["--jars"] == cli_flags["--jars"] and "--packages" not in airflow_flags
    assert zip_content(airflow_flags["--py-files"]) == zip_content(cli_flags["--py-files"])
    assert airflow_rest == cli_rest == [application, *args]
    assert airflow_flags["--master"] == "local[2]"  # the connection's (tests/airflow/conftest.py), not the YAML's
