"""Shared fixtures: one local SparkSession for the whole run, on a throwaway warehouse."""
import itertools
import sys
import os
from pathlib import Path

import pytest

from lakecleaner.config import CatalogConfig, LakecleanerConfig, SparkConfig

sys.path.insert(0, str(Path(__file__).parent))  # tests/cases.py, shared by unit and Spark tests
_names = itertools.count()


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def lake_config(warehouse, tmp_path_factory) -> LakecleanerConfig:
    return LakecleanerConfig(catalog=CatalogConfig(name="lake", type="hadoop", warehouse=str(warehouse)),
                             spark=SparkConfig(master="local[2]", driver_memory="1g"))


@pytest.fixture(scope="session")
def config_file(lake_config, tmp_path_factory) -> Path:
    """The same catalog as a YAML file, for code that runs in another process (spark-submit, CLI)."""
    path = tmp_path_factory.mktemp("config") / "lakecleaner.yaml"
    path.write_text(f"catalog:\n  name: lake\n  type: hadoop\n  warehouse: {lake_config.catalog.warehouse}\n"
                    "spark:\n  master: local[2]\n  driver_memory: 1g\n")
    return path


@pytest.fixture(scope="session")
def spark(lake_config):
    from lakecleaner.spark import get_spark

    session = get_spark(lake_config, "lakecleaner-tests")
    yield session
    session.stop()


@pytest.fixture
def table_name(request) -> str:
    """A fresh table name per test, readable in the warehouse."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name)[:40].lower()
    return f"t.{base}_{next(_names)}"


@pytest.fixture(autouse=True)
def _no_fail_points(monkeypatch):
    monkeypatch.delenv("LAKECLEANER_FAIL_AT", raising=False)
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
