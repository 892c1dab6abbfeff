"""Two tiny lakehouses with everything the Lake Cleaner UI shows, and a real Airflow API server
with the project's plugin serving both, for tests/airflow/test_plugin_api.py and
tests/airflow/test_browser.py.

Registered as a pytest plugin by those modules (``pytest_plugins = ["ui_lake"]``) so its session
fixtures are built once per run, whichever of the two modules runs first. (PYTEST_DONT_REWRITE: the
modules also import its constants before pytest registers it; its asserts carry their own messages.)

The shop lake (its own catalog ``uilake`` and warehouse, so other tests' tables never show up):

- ``shop.orders``: offset strategy, three committed runs with new records between them, each
  followed by a data-quality validation (Data Docs built);
- ``shop.prices``: timestamp strategy, two committed runs and one dry run, validated once;
- ``shop.payments``: a data file deleted under it, so its run fails (recorded in run history) and
  the cleaner state marks it uncleanable;
- ``shop.broken``: an invalid ``compaction.strategy`` (``invalid config``);

the fleet lake (catalog ``fleetlake``, another warehouse, so another state root):

- ``shop.orders`` again, another table of the same name: one committed run, one validation;
- ``fleet.trucks``: appended to, never cleaned;

and in each the evaluation of its tables recorded as the DAG's evaluate task records it.

The API server's DAG folder holds one file of lakecleaner_dag() calls: SHOP_DAG on the shop lake's
config (``config=``), FLEET_DAG on the fleet lake's (no ``config=``: ``[lakecleaner] config``),
NOWHERE_DAG on a config file that does not exist, RETIRED_DAG (marked stale, as the dag-processor
marks a DAG its file no longer defines); and a plain DAG (PLAIN_DAG) tagged otherwise. The DAGs are
serialized by ``airflow dags reserialize``, and SHOP_DAG gets one finished run whose mapped ``clean``
instances carry the rendered map indexes the task runner would record (LABELS), without running Spark.
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

from lakecleaner_dev.airflow_template import migrated_sqlite

REPO = Path(__file__).resolve().parents[1]
CATALOG = "uilake"
ORDERS, PRICES, PAYMENTS, BROKEN = "shop.orders", "shop.prices", "shop.payments", "shop.broken"
TABLES = (ORDERS, PRICES, PAYMENTS, BROKEN)
FLEET_CATALOG = "fleetlake"
TRUCKS = "fleet.trucks"
FLEET_TABLES = (ORDERS, TRUCKS)
JWT_SECRET = "lakecleaner-ui-tests-only-" + "0123456789abcdef" * 4  # >= 64 bytes for HS512
SHOP_DAG, FLEET_DAG = "lakecleaner_shop", "lakecleaner_fleet"
NOWHERE_DAG, RETIRED_DAG, PLAIN_DAG = "lakecleaner_nowhere", "lakecleaner_retired", "not_lakecleaner"
# Users besides SimpleAuthManager's admin and viewer (both read every DAG): shop_viewer may read
# SHOP_DAG only, nobody no DAG at all (tests/ui_auth.py).
DAG_ACCESS = {"shop_viewer": (SHOP_DAG,), "nobody": ()}
# SHOP_DAG's mapped "clean" instances 0..3 in its one run, each an application whose report names its
# tables: one table each, a name that is no table of the lake, several tables (two the lake does not
# know), rendered as scheduler.table_label does (the tab reads the report, not the label).
APPLICATIONS = ((ORDERS,), (PRICES,), ("nowhere.gone",), (ORDERS, PRICES, "shop.gone_a", "shop.gone_b"))
LABELS = (ORDERS, PRICES, "nowhere.gone", f"{ORDERS}, {PRICES} +2 more")

DAGS_FILE = """
from lakecleaner.airflow import lakecleaner_dag

shop = lakecleaner_dag(dag_id={shop!r}, config={shop_config!r}, schedule=None)
fleet = lakecleaner_dag(dag_id={fleet!r}, schedule=None)  # [lakecleaner] config
nowhere = lakecleaner_dag(dag_id={nowhere!r}, config={nowhere_config!r}, schedule=None)
retired = lakecleaner_dag(dag_id={retired!r}, config={shop_config!r}, schedule=None)
"""
PLAIN_FILE = f"""
from airflow.sdk import dag, task


@dag(dag_id="{PLAIN_DAG}", schedule=None, tags=["lakecleaner-like"])
def plain():
    @task
    def evaluate(config=None):
        return config

    evaluate(config="elsewhere.yaml")


plain()
"""
# Run in the API server's environment: Airflow's own CLI commands in one interpreter (as the
# `airflow` executable runs them), then the records a run of SHOP_DAG leaves, through Airflow's models.
SETUP = f"""
import contextlib, datetime as dt, importlib.metadata, io, json
from sqlalchemy import select, update
from airflow.cli import cli_parser

def airflow(*argv):
    args = cli_parser.get_parser().parse_args(list(argv))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        args.func(args)
    return out.getvalue()

airflow("dags", "reserialize")
plugins = json.loads(airflow("plugins", "-o", "json"))

from airflow.models.dag import DagModel
from airflow.models.serialized_dag import SerializedDagModel
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState, TaskInstanceState
from airflow.utils.types import DagRunType, DagRunTriggeredByType

with create_session() as session:
    session.execute(update(DagModel).where(DagModel.dag_id == {RETIRED_DAG!r}).values(is_stale=True))
    dag = SerializedDagModel.get_dag({SHOP_DAG!r}, session=session)
    now = dt.datetime.now(dt.timezone.utc)
    run = dag.create_dagrun(run_id="manual__ui_tests", logical_date=now, data_interval=(now, now), run_after=now,
                            run_type=DagRunType.MANUAL, triggered_by=DagRunTriggeredByType.TEST,
                            state=DagRunState.SUCCESS, session=session)
    session.flush()
    unexpanded = session.scalars(select(TaskInstance).where(
        TaskInstance.dag_id == {SHOP_DAG!r}, TaskInstance.run_id == run.run_id, TaskInstance.task_id == "clean")).one()
    version = unexpanded.dag_version_id
    session.delete(unexpanded)
    session.flush()
    for index, label in enumerate({list(LABELS)!r}):
        ti = TaskInstance(dag.get_task("clean"), run_id=run.run_id, map_index=index, dag_version_id=version,
                          state=TaskInstanceState.SUCCESS)
        ti._rendered_map_index = label  # what the task runner records from the task's map_index_template
        session.add(ti)
    run_id = run.run_id

import sys
from lakecleaner.core.config import load_config
from lakecleaner.core.records import ApplicationReport
from lakecleaner.core.scheduler import report_name
from lakecleaner.core.state import write_document

shop = load_config(sys.argv[1])
for index, tables in enumerate({[list(a) for a in APPLICATIONS]!r}):
    write_document(shop, report_name(run_id, index), ApplicationReport(tables=tuple(tables), finished=True).to_dict())
distributions = [str(getattr(d, "_path", d)) for d in importlib.metadata.distributions()
                 if (d.metadata["Name"] or "").lower() == "lakecleaner"
                 and any(e.group == "airflow.plugins" for e in d.entry_points)]
print("UI-SETUP " + json.dumps({{"run_id": run_id, "plugins": plugins, "distributions": distributions}}))
"""


def _rows(start: int, n: int, keys: int = 6, partitions: int = 2, **extra) -> list[dict]:
    """Kafka records: every 9th a tombstone (null value, no flag)."""
    return [{"key": f"k{i % keys}", "offset": i, "partition": i % partitions, "timestamp": 1_700_000_000_000 + i,
             "value": None if i % 9 == 0 else f"v{i}", **extra} for i in range(start, start + n)]


def build_lake(spark, base: Path) -> Path:
    """Builds the shop lake under ``base``; returns the YAML config describing it."""
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


def build_fleet_lake(spark, base: Path) -> Path:
    """Builds the fleet lake under ``base`` (another catalog, warehouse and state root); returns its
    YAML config."""
    from lakecleaner.core.config import load_config
    from lakecleaner.spark.engine import compact_table
    from lakecleaner.spark.quality import validate_table
    from lakecleaner.core.scheduler import evaluate_all, record_evaluation
    from lakecleaner_dev.tables import append, create_compacted_table

    path = base / "fleet.yaml"
    path.write_text(f"catalog:\n  name: {FLEET_CATALOG}\n  type: hadoop\n  warehouse: {base / 'warehouse'}\n"
                    "spark:\n  master: local[2]\n  driver_memory: 1g\n")
    cfg = load_config(path)
    for key, value in cfg.catalog.spark_conf().items():
        spark.conf.set(key, value)
    ref = create_compacted_table(spark, cfg, ORDERS)
    append(spark, ref, _rows(0, 30, keys=3))
    compact_table(spark, cfg, ORDERS)
    validate_table(spark, cfg, ORDERS, run_name="fleet-run-1", interval_ms=0, raise_on_failure=False)
    ref = create_compacted_table(spark, cfg, TRUCKS)
    append(spark, ref, _rows(0, 10))
    record_evaluation(cfg, evaluate_all(cfg), int(time.time() * 1000))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiServer:
    """``airflow api-server`` on 127.0.0.1 with the plugin from the package's entry point (no plugins
    folder), a throwaway AIRFLOW_HOME (SQLite) whose DAG folder holds the lakecleaner DAGs (see the
    module's docstring), SimpleAuthManager users admin (admin), viewer (viewer) and the viewers of
    DAG_ACCESS, each restricted to their DAGs (tests/ui_auth.py)."""

    def __init__(self, home: Path, shop_config: Path, fleet_config: Path):
        self.home = home
        self.configs = {SHOP_DAG: shop_config, FLEET_DAG: fleet_config, NOWHERE_DAG: home / "nowhere.yaml"}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / "api-server.log"
        dags = home / "dags"
        dags.mkdir(parents=True, exist_ok=True)
        (dags / "lakes.py").write_text(DAGS_FILE.format(
            shop=SHOP_DAG, fleet=FLEET_DAG, nowhere=NOWHERE_DAG, retired=RETIRED_DAG, shop_config=str(shop_config),
            nowhere_config=str(self.configs[NOWHERE_DAG])))
        (dags / "plain.py").write_text(PLAIN_FILE)
        self.link_run_id: str | None = None
        self.plugins: list[dict] = []  # `airflow plugins -o json` in this environment
        self.distributions: list[str] = []  # lakecleaner distributions with the plugin's entry point
        users = ",".join(["admin:admin", "viewer:viewer", *(f"{u}:viewer" for u in DAG_ACCESS)])
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            # the test auth manager's module, besides the package (include/, see tests/conftest.py)
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "tests"), os.environ.get("PYTHONPATH")) if p),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__AUTH_MANAGER": "ui_auth.PerDagAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": users,
            "LAKECLEANER_TEST_DAG_ACCESS": ";".join(f"{u}={','.join(d)}" for u, d in DAG_ACCESS.items()),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
            "AIRFLOW__LAKECLEANER__CONFIG": str(fleet_config),  # FLEET_DAG's: it names none
            "GX_ANALYTICS_ENABLED": "false",
        }
        self.env.pop("LAKECLEANER_CONFIG", None)  # the plugin never reads it
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> "ApiServer":
        airflow = [sys.executable, "-m", "airflow"]
        migrated_sqlite(self.env)  # what airflow db migrate leaves
        setup = subprocess.run([sys.executable, "-c", SETUP, str(self.configs[SHOP_DAG])], env=self.env, capture_output=True, text=True)
        marked = [line for line in setup.stdout.splitlines() if line.startswith("UI-SETUP ")]
        assert setup.returncode == 0 and marked, setup.stdout[-3000:] + setup.stderr[-3000:]
        facts = json.loads(marked[-1].removeprefix("UI-SETUP "))
        self.link_run_id, self.plugins, self.distributions = facts["run_id"], facts["plugins"], facts["distributions"]
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
    """The shop lake's YAML config path."""
    return build_lake(spark, tmp_path_factory.mktemp("ui_lake"))


@pytest.fixture(scope="session")
def fleet_lake(spark, tmp_path_factory) -> Path:
    """The fleet lake's YAML config path."""
    return build_fleet_lake(spark, tmp_path_factory.mktemp("fleet_lake"))


@pytest.fixture(scope="session")
def api_server(ui_lake, fleet_lake):
    home = Path(tempfile.mkdtemp(prefix="lakecleaner-ui-airflow-"))
    server = ApiServer(home, ui_lake, fleet_lake)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
