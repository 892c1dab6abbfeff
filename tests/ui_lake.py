"""A tiny lakehouse with everything the Lake Cleaner UI shows, and a real Airflow API server with
the project's plugin, for tests/airflow/test_plugin_api.py and tests/airflow/test_browser.py.

Registered as a pytest plugin by those modules (``pytest_plugins = ["ui_lake"]``) so its session
fixtures are built once per run, whichever of the two modules runs first. (PYTEST_DONT_REWRITE: the
modules also import its constants before pytest registers it; its asserts carry their own messages.)

The lake (its own catalog ``uilake`` and warehouse, so other tests' tables never show up):

- ``shop.orders``: offset strategy, three committed runs with new records between them, each
  followed by a data-quality validation (Data Docs built);
- ``shop.prices``: timestamp strategy, two committed runs and one dry run, validated once;
- ``shop.payments``: a data file deleted under it, so its run fails (recorded in run history) and
  the cleaner state marks it uncleanable;
- ``shop.broken``: an invalid ``compaction.strategy`` (``invalid config``);

and the evaluation of the four recorded as the DAG's evaluate task records it.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CATALOG = "uilake"
ORDERS, PRICES, PAYMENTS, BROKEN = "shop.orders", "shop.prices", "shop.payments", "shop.broken"
TABLES = (ORDERS, PRICES, PAYMENTS, BROKEN)
JWT_SECRET = "lakecleaner-ui-tests-only-" + "0123456789abcdef" * 4  # >= 64 bytes for HS512
LINK_DAG_ID = "lakecleaner_ui_link"
# A mapped DAG like the scheduler's: one "compact" instance per table, its map index rendered as the table
# name. `airflow dags test` runs it once, so the task-instance view has real task instances to link from.
LINK_DAG = f"""
from airflow.sdk import dag, get_current_context, task


@dag(dag_id="{LINK_DAG_ID}", schedule=None, catchup=False)
def link_dag():
    @task(map_index_template="{{{{ table }}}}")
    def compact(table: str):
        get_current_context()["table"] = table

    compact.expand(table=["{ORDERS}", "{PRICES}", "nowhere.gone", "{ORDERS}, {PRICES} +2 more"])


link_dag()
"""


def _rows(start: int, n: int, keys: int = 6, partitions: int = 2, **extra) -> list[dict]:
    """Kafka records: every 9th a tombstone (null value, no flag)."""
    return [{"key": f"k{i % keys}", "offset": i, "partition": i % partitions, "timestamp": 1_700_000_000_000 + i,
             "value": None if i % 9 == 0 else f"v{i}", **extra} for i in range(start, start + n)]


def build_lake(spark, base: Path) -> Path:
    """Builds the lake under ``base``; returns the YAML config (LAKECLEANER_CONFIG) describing it."""
    from lakecleaner.core.config import load_config
    from lakecleaner.core.table import CompactionError
    from lakecleaner.spark.engine import compact_table
    from lakecleaner.spark.quality import validate_table
    from lakecleaner.core.scheduler import evaluate_all, record_evaluation
    from lakecleaner.core.state import StateStore
    from lakecleaner_dev.tables import append, create_compacted_table

    path = base / "lakecleaner.yaml"
    path.write_text(f"catalog:\n  name: {CATALOG}\n  type: hadoop\n  warehouse: {base / 'warehouse'}\n"
                    "spark:\n  master: local[2]\n  driver_memory: 1g\n"
                    "cleaner:\n  threads: 1\n  uncleanable_after_failures: 1\n")
    cfg = load_config(path)
    for key, value in cfg.catalog.spark_conf().items():
        spark.conf.set(key, value)

    ref = create_compacted_table(spark, cfg, ORDERS, {"delete.retention.ms": "0"})
    for i, (start, n) in enumerate([(0, 40), (40, 25), (65, 30)]):
        append(spark, ref, _rows(start, n))
        compact_table(spark, cfg, ORDERS)  # "now" is the real time: a run only takes records appended before it
        validate_table(spark, cfg, ORDERS, run_name=f"orders-run-{i + 1}", interval_ms=0, raise_on_failure=False)
    append(spark, ref, _rows(95, 12))  # some dirt since the last run

    ref = create_compacted_table(spark, cfg, PRICES, {"compaction.strategy": "timestamp",
                                                      "max.compaction.lag.ms": "1"})
    append(spark, ref, _rows(0, 30, keys=4))
    compact_table(spark, cfg, PRICES)
    append(spark, ref, _rows(30, 20, keys=4))
    compact_table(spark, cfg, PRICES, dry_run=True)
    compact_table(spark, cfg, PRICES)
    append(spark, ref, _rows(50, 10, keys=4))  # dirty for longer than max.compaction.lag.ms: freshness fails
    time.sleep(0.05)
    validate_table(spark, cfg, PRICES, run_name="prices-run-1", interval_ms=0, raise_on_failure=False)

    ref = create_compacted_table(spark, cfg, PAYMENTS)
    append(spark, ref, _rows(0, 20))
    append(spark, ref, _rows(20, 20))
    victim = spark.sql(f"SELECT file_path FROM {ref.meta('files')} LIMIT 1").collect()[0][0]
    Path(victim.removeprefix("file:")).unlink()
    try:
        compact_table(spark, cfg, PAYMENTS)
    except CompactionError as exc:
        StateStore(cfg).record_failure(PAYMENTS, str(exc), now_ms=int(time.time() * 1000))
    else:  # pragma: no cover - the missing file must fail the run
        raise AssertionError("the run on a table with a missing data file did not fail")

    ref = create_compacted_table(spark, cfg, BROKEN, {"compaction.strategy": "bogus"})
    append(spark, ref, _rows(0, 5))
    # What the DAG's evaluate task records, and the pages present.
    record_evaluation(cfg, evaluate_all(cfg), int(time.time() * 1000))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiServer:
    """``airflow api-server`` on 127.0.0.1 with the project's plugins folder, a throwaway
    AIRFLOW_HOME (SQLite), SimpleAuthManager users admin (admin) and viewer (viewer)."""

    def __init__(self, home: Path, config: Path):
        self.home, self.config = home, config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / "api-server.log"
        dags = home / "dags"
        dags.mkdir(parents=True, exist_ok=True)
        (dags / "link_dag.py").write_text(LINK_DAG)
        self.link_run_id: str | None = None
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
            "LAKECLEANER_CONFIG": str(config),
            "GX_ANALYTICS_ENABLED": "false",
        }
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> "ApiServer":
        airflow = [sys.executable, "-m", "airflow"]
        migrate = subprocess.run([*airflow, "db", "migrate"], env=self.env, capture_output=True, text=True)
        assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
        test = subprocess.run([*airflow, "dags", "test", LINK_DAG_ID], env=self.env, capture_output=True, text=True)
        assert test.returncode == 0, test.stdout[-3000:] + test.stderr[-3000:]
        import sqlite3

        with sqlite3.connect(self.home / "airflow.db") as db:
            self.link_run_id = db.execute("SELECT run_id FROM dag_run WHERE dag_id = ?", (LINK_DAG_ID,)).fetchone()[0]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([*airflow, "api-server", "--host", "127.0.0.1", "--port", str(self.port),
                                          "--workers", "1"], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airflow api-server exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/version", timeout=5) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1)
        raise RuntimeError(f"airflow api-server did not answer within {timeout} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def password(self, user: str = "admin") -> str:
        """The password SimpleAuthManager generated for ``user`` (written when the server started)."""
        return json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())[user]

    def token(self, user: str = "admin") -> str:
        """A JWT from the server's own login endpoint, as the UI and API clients get one."""
        body = json.dumps({"username": user, "password": self.password(user)}).encode()
        req = urllib.request.Request(f"{self.url}/auth/token", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["access_token"]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        import signal

        os.killpg(self.proc.pid, signal.SIGTERM)  # the server and its uvicorn worker, nothing else
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def ui_lake(spark, tmp_path_factory) -> Path:
    """The lake's YAML config path."""
    return build_lake(spark, tmp_path_factory.mktemp("ui_lake"))


@pytest.fixture(scope="session")
def api_server(ui_lake):
    home = Path(tempfile.mkdtemp(prefix="lakecleaner-ui-airflow-"))
    server = ApiServer(home, ui_lake)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
