"""`make airflow-pg` end to end: Airflow (standalone: scheduler, dag-processor, api-server, LocalExecutor)
with its metadata database on a local PostgreSQL, running the lakecleaner DAG on tables of Iceberg's
JDBC catalog on PostgreSQL. The pool's two slots (cleaner.threads: 2) run the two packed Spark
applications at the same time, and each table ends exactly as the reference model says."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from lakecleaner.config import config_document
from lakecleaner.localpg import free_port, kept_password, stop_group
from lakecleaner.model import compact
from lakecleaner.rules import Checkpoint
from lakecleaner.tables import append, create_compacted_table, read_model_records

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = f"dagpg{int(time.time()) % 10**6}"  # the DAG evaluates this namespace only
TABLES = (f"{NAMESPACE}.orders", f"{NAMESPACE}.users")


def _rows(start, n, keys=6):
    return [{"key": f"k{i % keys}", "offset": i, "partition": i % 2, "value": None if i % 9 == 0 else f"v{i}"}
            for i in range(start, start + n)]


def _config(pg_config, path: Path) -> Path:
    doc = config_document(pg_config, cleaner={"threads": 2, "namespaces": [NAMESPACE]})
    doc["spark"].update(master="local[1]", driver_memory="1g")
    path.write_text(yaml.safe_dump(doc))
    return path


class AirflowPg:
    """`make airflow-pg` in its own session, with a throwaway AIRFLOW_HOME and fixed ports."""

    def __init__(self, config: Path):
        # under /tmp and traversable: the PostgreSQL cluster inside it belongs to user postgres
        self.home = Path(tempfile.mkdtemp(prefix="lakecleaner-airflow-pg-", dir="/tmp"))
        os.chmod(self.home, 0o755)
        self.pg_port, api_port = free_port(), free_port()
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
                    "LAKECLEANER_CONFIG": str(config), "LAKECLEANER_SCHEDULE": "none",
                    "AIRFLOW__API__PORT": str(api_port), "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
                    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False", "AIRFLOW__API__WORKERS": "1",
                    "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False", "GX_ANALYTICS_ENABLED": "false"}
        self.log = self.home / "make-airflow-pg.log"
        self.proc: subprocess.Popen | None = None
        self.leftovers: list[str] = []

    def start(self) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["make", "--no-print-directory", "airflow-pg", f"AIRFLOW_HOME_DIR={self.home}",
                                          f"AIRFLOW_PG_PORT={self.pg_port}"], cwd=REPO, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def db_url(self) -> str:
        """Airflow's database, with the password localpg generated (known once it made the cluster)."""
        from urllib.parse import quote

        password = quote(kept_password(self.home / "postgres"), safe="")
        return f"postgresql+psycopg2://postgres:{password}@127.0.0.1:{self.pg_port}/airflow"

    def query(self, sql: str, *args) -> list[tuple]:
        import psycopg2

        with psycopg2.connect(host="127.0.0.1", port=self.pg_port, user="postgres", dbname="airflow",
                              password=kept_password(self.home / "postgres")) as db:
            with db.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall()

    def wait(self, what: str, check, timeout: float = 600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"make airflow-pg exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                found = check()
            except Exception:  # noqa: BLE001 - the database or its tables are not there yet
                found = None
            if found:
                return found
            time.sleep(2)
        raise AssertionError(f"timed out waiting for {what}:\n{self.tail()}")

    def airflow(self, *args: str) -> str:
        env = {**self.env, "AIRFLOW_HOME": str(self.home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url,
               "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags")}
        done = subprocess.run([sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    def tail(self, n: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM reaches localpg's runner, which stops Airflow's process group, then the database."""
        if self.proc is not None:
            stop_group(self.proc, grace_s=90)
        self.leftovers = _kill_processes_of(self.home)
        data = self.home / "postgres" / "data"
        if (data / "postmaster.pid").exists():  # the runner was killed before it could stop it
            pg_ctl = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1]
            as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
            subprocess.run([*as_owner, str(pg_ctl), "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


def _kill_processes_of(home: Path) -> list[str]:
    """SIGKILL the processes still running with AIRFLOW_HOME=home; their command lines."""
    import signal

    mark, found = f"AIRFLOW_HOME={home}".encode(), []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip())
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:  # gone meanwhile (ProcessLookupError), or not ours to read
            continue
    return found


def test_make_airflow_pg_runs_two_applications_at_once_on_the_jdbc_catalog(spark, pg_config, tmp_path):
    for i, table in enumerate(TABLES):
        ref = create_compacted_table(spark, pg_config, table)
        append(spark, ref, _rows(0, 40 + 10 * i))
        append(spark, ref, _rows(40 + 10 * i, 30))
    airflow = AirflowPg(_config(pg_config, tmp_path / "lakecleaner.yaml"))
    try:
        airflow.start()
        airflow.wait("the DAG in the metadata database", lambda: airflow.query(
            "SELECT dag_id FROM dag WHERE dag_id = 'lakecleaner' AND NOT is_paused"))
        expected = {}
        now = int(time.time() * 1000)
        for table in TABLES:
            records, tc = read_model_records(spark, pg_config, table)
            expected[table] = sorted(r.id for r in compact(records, Checkpoint(), tc, now).survivors(records))
        run_id = f"manual__pg_{now}"
        airflow.airflow("dags", "trigger", "lakecleaner", "--run-id", run_id)
        state = airflow.wait("the DAG run to end", lambda: airflow.query(
            "SELECT state FROM dag_run WHERE run_id = %s AND state IN ('success', 'failed')", run_id), timeout=900)
        clean = airflow.query("SELECT map_index, state, start_date, end_date, rendered_map_index FROM task_instance "
                              "WHERE dag_id = 'lakecleaner' AND run_id = %s AND task_id = 'clean' ORDER BY map_index",
                              run_id)
        assert state == [("success",)], (clean, airflow.tail())
        assert [row[1] for row in clean] == ["success", "success"], clean
        assert sorted(row[4] for row in clean) == sorted(TABLES)  # one application per table, named by it
        # the pool's two slots: both applications ran at the same time
        assert max(row[2] for row in clean) < min(row[3] for row in clean), clean
        assert airflow.query("SELECT slots FROM slot_pool WHERE pool = 'lakecleaner'") == [(2,)]
    finally:
        airflow.stop()
    assert airflow.leftovers == [], "processes of this Airflow outlived its stop (killed now)"
    for table in TABLES:
        spark.catalog.refreshTable(f"{pg_config.catalog.name}.{table}")
        kept = sorted((r["partition"], r["offset"]) for r in
                      spark.table(f"{pg_config.catalog.name}.{table}").select("partition", "offset").collect())
        assert kept == expected[table], table
