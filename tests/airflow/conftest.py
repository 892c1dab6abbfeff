"""Airflow for the DAG tests: a throwaway AIRFLOW_HOME with a SQLite database, the repo's dags/ as
DAG folder, the spark_default connection on a local master, the lakecleaner pool.

Airflow reads its configuration when it is first imported, so the environment is set when this
file is loaded, before any test module of this directory imports Airflow.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from lakecleaner_dev.airflow_template import migrated_sqlite

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="lakecleaner-airflow-test-"))
atexit.register(shutil.rmtree, AIRFLOW_HOME, True)

os.environ.update({
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME}/airflow.db",
    "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
    "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type":"spark","host":"local[2]"}',
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_PYTHON": sys.executable,
    # spark-submit (pip's pyspark) lives next to this interpreter
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
})
os.environ.pop("AIRFLOW__LAKECLEANER__SCHEDULE", None)
# Airflow's logging config sends INFO to stdout; py4j's connection chatter (also at interpreter exit,
# after pytest closed the stream) is noise.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The metadata database (SQLite in the throwaway AIRFLOW_HOME), as ``airflow db migrate`` leaves
    it: a copy of the machine's migrated one (lakecleaner_dev.airflow_template)."""
    return migrated_sqlite(dict(os.environ))


@pytest.fixture(scope="session")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))
