"""Shared fixtures: one local SparkSession for the whole run, on a throwaway warehouse."""
import itertools
import sys
import os
from pathlib import Path

import pytest

from lakecleaner.core.config import CatalogConfig, LakecleanerConfig, SparkConfig
from lakecleaner_dev.jvm_archive import TEST_JVM_OPTIONS, ensure as ensure_archive
from lakecleaner_dev.localpg import JDBC_JAR as PG_JAR, jdbc_catalog

# pytest keeps each test module's assertion-rewritten byte-code in __pycache__ and reads it back on the
# next run, unless PYTHONDONTWRITEBYTECODE is set (as on these machines): then every worker rewrote
# every module again each run (collecting: 6.0 CPU s a process against 3.5). The test modules only;
# processes the tests start keep the variable.
sys.dont_write_bytecode = False
sys.path.insert(0, str(Path(__file__).parent))  # tests/cases.py, shared by unit and Spark tests
import module_scheduling  # noqa: E402 - tests/, on the path just above
# The development tools (include/lakecleaner_dev) are not installed: pytest puts include/ on its own
# path (pyproject's pythonpath); processes the tests start (python -m lakecleaner_dev.localpg) get it too.
REPO = Path(__file__).resolve().parents[1]
INCLUDE = str(REPO / "include")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (INCLUDE, os.environ.get("PYTHONPATH")) if p)
# The JVMs the tests start (every spark-submit of a CLI, DAG or chaos test, and the session's own)
# work on a few MB: with C2 they spend more CPU compiling than running (test_failures' three
# spark-submits: 101 -> 64 CPU s; the session JVM, jvm_archive.TEST_JVM_OPTIONS). spark-submit's
# launcher, and PySpark's for the session, put SPARK_SUBMIT_OPTS on the JVM's command line. Tests
# only: the cleaner's JVM options are sparkconf's.
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)
# ... and they map Spark's and Iceberg's classes from a class-data-sharing archive made once per
# machine (lakecleaner_dev.jvm_archive; LAKECLEANER_TEST_JVM_ARCHIVE=0 turns it off): pytest_configure.
_names = itertools.count()


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


def _jars() -> tuple[str, ...]:
    """The session's jars beside Iceberg's: PostgreSQL's JDBC driver for the tests on the JDBC catalog
    (a JVM's classpath is fixed at start, so the one shared session carries it from the start)."""
    return (PG_JAR,) if os.path.exists(PG_JAR) else ()


@pytest.fixture(scope="session")
def lake_config(warehouse, tmp_path_factory) -> LakecleanerConfig:
    return LakecleanerConfig(catalog=CatalogConfig(name="lake", type="hadoop", warehouse=str(warehouse)),
                             spark=SparkConfig(master="local[2]", driver_memory="1g", extra_jars=_jars()))


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL cluster (lakecleaner_dev.localpg) with a database ``iceberg``."""
    from lakecleaner_dev import localpg

    if not localpg.available():
        pytest.fail(localpg.MISSING)
    with localpg.local_postgres() as server:
        yield server


def pg_catalog_config(server, warehouse: Path, name: str = "pglake") -> LakecleanerConfig:
    return LakecleanerConfig(catalog=jdbc_catalog(server, warehouse, name),
                             spark=SparkConfig(master="local[2]", driver_memory="1g", extra_jars=_jars()))


@pytest.fixture(scope="session")
def pg_config(postgres, spark, tmp_path_factory) -> LakecleanerConfig:
    """The JDBC catalog, registered in the shared session (a catalog is loaded on first use)."""
    cfg = pg_catalog_config(postgres, tmp_path_factory.mktemp("pg-warehouse"))
    for key, value in cfg.catalog.spark_conf().items():
        spark.conf.set(key, value)
    return cfg


@pytest.fixture(scope="session")
def config_file(lake_config, tmp_path_factory) -> Path:
    """The same catalog as a YAML file, for code that runs in another process (spark-submit, CLI)."""
    path = tmp_path_factory.mktemp("config") / "lakecleaner.yaml"
    path.write_text(f"catalog:\n  name: lake\n  type: hadoop\n  warehouse: {lake_config.catalog.warehouse}\n"
                    "spark:\n  master: local[2]\n  driver_memory: 1g\n")
    return path


_LARGE_TABLE_CONF: dict[str, str | None] = {}  # what the session started with, where SMALL_TABLE_CONF differs


@pytest.fixture(scope="session")
def spark(lake_config):
    from lakecleaner.spark.batch import SMALL_TABLE_CONF, set_session_conf
    from lakecleaner.spark.session import get_spark

    # started with SPARK_SUBMIT_OPTS like every spark-submit: C1 only, the class archive
    session = get_spark(lake_config, "lakecleaner-tests")
    # The tests' tables are small, and the session runs them as an application of small tables
    # does (lakecleaner.spark.batch: code generation and adaptive execution off and 2 shuffle
    # partitions below SMALL_TABLE_BYTES); compiling each new plan's code was a seventh of the session's CPU
    # (test_engine_vs_model alone: 257 -> 221 CPU s). The tests that stand in for large tables ask
    # for ``codegen``, which puts back what the session started with.
    _LARGE_TABLE_CONF.update(set_session_conf(session, SMALL_TABLE_CONF))
    _no_checksum_files(session)
    yield session
    session.stop()


def _no_checksum_files(session) -> None:
    """The session's local file system (Hadoop's, which every Iceberg table of the tests is on) writes
    no ``.crc`` file beside each file. Without Hadoop's native library (pip's pyspark has none) it forks
    ``chmod`` for each file it creates and again to set each one's permission: four forks a file with
    its checksum file, two without. Tests only (the cleaner's applications keep Hadoop's default); a
    file written elsewhere keeps its checksum, which is still verified when read. The main property of
    test_engine_vs_model: 65 and 67 -> 62 and 62 busy core-s (57.6 s against 60.5 to 61.7)."""
    local = session._jvm.org.apache.hadoop.fs.FileSystem.getLocal(session._jsc.hadoopConfiguration())
    local.setWriteChecksum(False)  # the instance Iceberg's HadoopFileIO gets: FileSystem's cache is per scheme and user


@pytest.fixture
def codegen(spark):
    """The session with Spark's code generation and adaptive execution on and its 8 shuffle
    partitions, as an application runs a table above SMALL_TABLE_BYTES."""
    from lakecleaner.spark.batch import SMALL_TABLE_CONF, restore_session_conf, set_session_conf

    restore_session_conf(spark, _LARGE_TABLE_CONF)
    yield spark
    set_session_conf(spark, SMALL_TABLE_CONF)


@pytest.fixture
def table_name(request) -> str:
    """A fresh table name per test, readable in the warehouse."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name)[:40].lower()
    return f"t.{base}_{next(_names)}"


@pytest.fixture(autouse=True)
def _no_fail_points(monkeypatch):
    monkeypatch.delenv("LAKECLEANER_FAIL_AT", raising=False)
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """A real Spark standalone cluster on loopback: one master, one worker (pip's pyspark has no
    sbin scripts; spark-class starts the daemons). Yields the master URL and its web UI. Stopped
    with the module that used it (their heartbeats otherwise cost CPU for the rest of the run)."""
    import json
    import subprocess
    import time
    import urllib.request

    import pyspark

    home = Path(pyspark.__file__).parent
    logs = tmp_path_factory.mktemp("spark-cluster")
    port, ui = _free_port(), _free_port()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_WORKER_DIR": str(logs / "work"),
           # the master's, the worker's and the executors' JVMs (the worker's children) on C1 as well: the
           # executor of the DAG's run on the cluster took 20 CPU s with C2
           "JAVA_TOOL_OPTIONS": TEST_JVM_OPTIONS}
    master = subprocess.Popen([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                              env=env, stdout=open(logs / "master.log", "w"), stderr=subprocess.STDOUT)
    url = f"spark://127.0.0.1:{port}"
    worker = subprocess.Popen([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", url,
                               "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
                               "--webui-port", str(_free_port())],
                              env=env, stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 90
        while True:
            try:
                state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2))
                if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                    break
            except OSError:
                pass
            if time.time() > deadline or master.poll() is not None or worker.poll() is not None:
                raise RuntimeError(f"Spark standalone cluster did not come up; logs in {logs}")
            time.sleep(1)
        yield {"url": url, "ui": f"http://127.0.0.1:{ui}"}
    finally:
        for proc in (worker, master):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def pytest_configure(config):
    """Before any worker starts, and only for a run that starts processes of its own (not for the
    unit tests alone: make quick): the checkout byte-compiled, and the JVM archive (the workers
    inherit SPARK_SUBMIT_OPTS)."""
    if hasattr(config, "workerinput") or _unit_tests_only(config):
        return
    _compile_checkout()
    os.environ["SPARK_SUBMIT_OPTS"], problem = ensure_archive()
    if problem:
        config.issue_config_time_warning(pytest.PytestConfigWarning(problem), stacklevel=2)


def _compile_checkout() -> None:
    """Byte-code for the checkout's modules, as pip compiles an installed package's. Where
    PYTHONDONTWRITEBYTECODE is set (as on these machines), every Python process a test starts (an
    Airflow task, DAG parse or CLI call, a test's helper: about 120 a run, besides the Spark drivers,
    which import the package zip they are given) otherwise compiles the modules it imports from
    source again: importing the DAG's module 2.60 -> 2.48 CPU s. compileall skips what is up to date
    and writes what is not, whatever that variable says; a module edited later is compiled anew (its
    source's time is in the byte-code)."""
    import compileall

    for folder in ("include", "dags", "jobs", "plugins", "tests"):
        compileall.compile_dir(str(REPO / folder), quiet=1)


def _unit_tests_only(config) -> bool:
    unit = Path(__file__).parent / "unit"
    args = [Path(a.split("::")[0]).resolve() for a in config.args]
    return bool(args) and all(a == unit or unit in a.parents for a in args)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown where it is not installed
def pytest_xdist_make_scheduler(config, log):
    return module_scheduling.make_scheduler(config, log)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: module_scheduling.heaviness(item.nodeid))  # stable: modules keep their order
