"""`make airflow-pg` end to end: Airflow (standalone: scheduler, dag-processor, api-server, LocalExecutor)
with its metadata database on a local PostgreSQL, running the lakecleaner DAG on tables of Iceberg's
JDBC catalog on PostgreSQL. One live Airflow (the suite's most expensive set-up) serves three tests:

- `airflow backfill create` over two past intervals of a scheduled DAG: each run cleans as of its
  own interval's end, and the table ends as the reference model says given those nows and the commit
  times the runs recorded; the Lake Cleaner page lists the runs;
- the last interval's run has a second table to clean, filled within that interval only: its two
  packed Spark applications (cleaner.threads: 2) run at the same time, in Airflow's default pool (a
  lakecleaner DAG needs no pool of its own), and that table ends exactly as the reference model says;
- Airflow marks the backfill complete.

The backfill needs a periodic schedule and intervals whose ends fall after the test's appends, so the
DAG fires at two moments 20 s apart that the test picks (one append batch before each), and nowhere
else that day: a six-field cron expression, whose last field is the second (croniter's, which Airflow's
cron timetables use; whole minutes cost the set-up minutes of waiting). Two intervals are an earlier
and a later one, which is all the proof needs: a third cost one more DAG run (a clean application,
about 50 core-s on a slow machine) and proved nothing the second does not. It is paused
at creation, so no scheduled run takes those intervals (catch-up is off: once unpaused, the scheduler
would at once run the latest one, as of a later now than the backfill's, and leave the backfill
nothing to clean). The backfill is created while it is paused (its runs wait, as
Airflow starts no run of a paused DAG), then the DAG is unpaused: the scheduler finds the latest
interval's run already there, and the backfill runs, oldest first."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from lakecleaner.core.config import config_document
from lakecleaner_dev.localpg import free_port, kept_password, stop_group
from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint
from lakecleaner_dev.tables import append, create_compacted_table, read_model_records, stored_checkpoint, record_ids

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
_SUFFIX = int(time.time()) % 10**6
NAMESPACE = f"dagbf{_SUFFIX}"  # the namespace the DAG evaluates
BF_TABLE = f"{NAMESPACE}.events"  # cleaned by every run of the backfill
# Empty until the last interval: its run's second application (an empty table is clean, and rows
# appended after a run's now are too young for it)
LATE_TABLE = f"{NAMESPACE}.orders"
# Short enough that a horizon counted from a backfill's now (FIRE_GAP apart) or from the wall clock (the
# two runs' commits are a whole clean application apart: tens of seconds) would remove batch 1's
# tombstones; counted from the real clean it never passes during the backfill, whose nows all lie
# before its first commit.
BF_PROPERTIES = {"delete.retention.ms": "5000", "min.cleanable.dirty.ratio": "0.01"}
FIRE_GAP = dt.timedelta(seconds=20)  # between the DAG's fire times: room for a batch (and the late table's)
FIRES = 2  # the backfill's intervals: one append batch before each fire time


def _late_rows(n=50, keys=6):
    return [{"key": f"k{i % keys}", "offset": i, "partition": i % 2, "value": None if i % 9 == 0 else f"v{i}"}
            for i in range(n)]


def _bf_batches() -> list[list[dict]]:
    """Two appends. Batch 1: six keys, the last of k4 (partition 0) and k5 (partition 1) tombstones;
    batch 2: k0..k3 only, so those tombstones stay their keys' winners, below the log end."""
    def rows(lo, hi, keys, tombstones=()):
        return [{"key": f"k{i % keys}", "offset": i, "partition": i % 2, "value": None if i in tombstones else f"v{i}"}
                for i in range(lo, hi)]
    return [rows(0, 24, 6, tombstones=(22, 23)), rows(24, 40, 4)]


def _config(pg_config, path: Path) -> Path:
    doc = config_document(pg_config, cleaner={"threads": 2, "namespaces": [NAMESPACE]})
    doc["spark"].update(master="local[1]", driver_memory="1g")
    path.write_text(yaml.safe_dump(doc))
    return path


def _ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


def _fire_times(after: float) -> list[dt.datetime]:
    """FIRES times on whole seconds, FIRE_GAP apart within one minute, the first at least 5 s after
    ``after`` (epoch seconds): one minute and hour, so one cron expression names exactly these."""
    first = dt.datetime.fromtimestamp(after + 6, dt.timezone.utc).replace(microsecond=0)
    if first.second + (FIRES - 1) * FIRE_GAP.seconds > 59:  # the last would fall in the next minute
        first = first.replace(second=0) + dt.timedelta(minutes=1)
    return [first + i * FIRE_GAP for i in range(FIRES)]


def _cron(fires: list[dt.datetime]) -> str:
    """Six fields, croniter's (minute hour day month weekday second): these times, next on the next day."""
    return f"{fires[0].minute} {fires[0].hour} * * * {','.join(str(f.second) for f in fires)}"


class AirflowPg:
    """`make airflow-pg` in its own session, with a throwaway AIRFLOW_HOME and fixed ports."""

    def __init__(self, config: Path, schedule: str = "none", paused_at_creation: bool = False):
        # under /tmp and traversable: the PostgreSQL cluster inside it belongs to user postgres
        self.home = Path(tempfile.mkdtemp(prefix="lakecleaner-airflow-pg-", dir="/tmp"))
        os.chmod(self.home, 0o755)
        self.pg_port, api_port = free_port(), free_port()
        self.api_url = f"http://127.0.0.1:{api_port}"
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
                    "AIRFLOW__LAKECLEANER__CONFIG": str(config), "AIRFLOW__LAKECLEANER__SCHEDULE": schedule,
                    "AIRFLOW__API__PORT": str(api_port), "AIRFLOW__API__BASE_URL": self.api_url,
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
                    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(paused_at_creation),
                    "AIRFLOW__API__WORKERS": "1",
                    # parsed once: the DAG file does not change while the test runs, and each
                    # re-parse (every 30 s by default) took about a second of CPU
                    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
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

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        """A request to the api-server as standalone's admin (the password it generated), as the UI
        makes it: no `airflow` process to start (each took about 4 CPU s)."""
        import httpx

        password = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        with httpx.Client(base_url=self.api_url, timeout=60) as client:
            token = client.post("/auth/token", json={"username": "admin", "password": password})
            token.raise_for_status()
            resp = client.request(method, path, json=body,
                                  headers={"Authorization": f"Bearer {token.json()['access_token']}"})
            assert resp.status_code == 200, (path, resp.status_code, resp.text[:500])
            return resp.json()

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


@dataclass
class Live:
    """The running Airflow and what the backfill was set up with."""
    airflow: AirflowPg
    fires: list[dt.datetime]  # the DAG's scheduled times: the backfill's intervals (their ends)
    batches: list[list[dict]]
    records: list = field(default_factory=list)  # the backfill table's records before any run (model input)
    tc: object = None
    late: tuple = ()  # the late table's records and table config before the run that cleans it
    backfill_id: int | None = None
    _runs: list[tuple] | None = None

    def backfill_runs(self) -> list[tuple]:
        """(run_id, state, run_type, data interval end) of the backfill's runs, oldest first, once all ended."""
        def ended():
            rows = self.airflow.query("SELECT run_id, state, run_type, data_interval_end FROM dag_run "
                                      "WHERE backfill_id = %s ORDER BY logical_date", self.backfill_id)
            return rows if len(rows) == len(self.fires) and all(r[1] in ("success", "failed") for r in rows) else None

        if self._runs is None:
            self._runs = self.airflow.wait("the backfill's runs to end", ended, timeout=600)
        return self._runs


@pytest.fixture(scope="module")
def live(spark, pg_config, tmp_path_factory):
    """Airflow with the DAG scheduled at two coming moments, paused; one append batch before each of
    them, the late table's rows before the last; then `airflow backfill create` over the two
    intervals (the command the README shows) and the DAG unpaused (the UI's toggle, through the REST API)."""
    ref = create_compacted_table(spark, pg_config, BF_TABLE, BF_PROPERTIES)
    late = create_compacted_table(spark, pg_config, LATE_TABLE)
    batches = _bf_batches()
    append(spark, ref, batches[0])
    fires = _fire_times(time.time())
    schedule = _cron(fires)
    airflow = AirflowPg(_config(pg_config, tmp_path_factory.mktemp("airflow-pg") / "lakecleaner.yaml"),
                        schedule=schedule, paused_at_creation=True)
    try:
        airflow.start()
        for fire, batch in zip(fires, batches[1:]):  # each batch committed after the interval before it ends
            airflow.wait(f"{fire:%H:%M:%S}", lambda fire=fire: time.time() >= fire.timestamp() + 1)
            append(spark, ref, batch)
        append(spark, late, _late_rows())  # within the last interval, after the batch before it
        airflow.wait(f"{fires[-1]:%H:%M:%S}", lambda: time.time() >= fires[-1].timestamp() + 1)
        records, tc = read_model_records(spark, pg_config, BF_TABLE)
        airflow.wait("the scheduled DAG in the metadata database", lambda: airflow.query(
            "SELECT dag_id FROM dag WHERE dag_id = 'lakecleaner' AND is_paused AND timetable_summary = %s",
            schedule), timeout=300)
        airflow.airflow("backfill", "create", "--dag-id", "lakecleaner", "--from-date", fires[0].isoformat(),
                        "--to-date", fires[-1].isoformat(), "--max-active-runs", "1")
        [(backfill_id,)] = airflow.query("SELECT id FROM backfill WHERE dag_id = 'lakecleaner'")
        held = time.time() + 10  # Airflow starts no run of a paused DAG, a backfill's included
        while time.time() < held:
            assert {s for (s,) in airflow.query("SELECT state FROM dag_run WHERE backfill_id = %s", backfill_id)} == {
                "queued"}
            time.sleep(2)
        # the UI's pause toggle
        assert airflow.api("PATCH", "/api/v2/dags/lakecleaner", {"is_paused": False})["is_paused"] is False
        yield Live(airflow, fires, batches, records, tc, read_model_records(spark, pg_config, LATE_TABLE),
                   backfill_id)
    finally:
        airflow.stop()
    assert airflow.leftovers == [], "processes of this Airflow outlived its stop (killed now)"


def _replay(records, tc, runs) -> tuple[list, list[dict]]:
    """The reference model over ``runs`` (now_ms, committed_ms): the surviving ids and each run's figures."""
    ckpt, stats = Checkpoint(), []
    for now_ms, committed_ms in runs:
        out = compact(records, ckpt, tc, now_ms, committed_ms)
        records, ckpt = out.survivors(records), out.checkpoint
        stats.append(out.stats)
    return sorted(r.id for r in records), stats


FIGURES = ("dirty_records_in_run", "removed_superseded", "removed_expired_tombstones")


def test_airflow_backfill_create_cleans_each_interval_as_of_its_end(spark, pg_config, live):
    from lakecleaner.core.history import read_history

    ends = [_ms(f) for f in live.fires]
    appended = {r.id: r.appended_at_ms for r in live.records}
    for i, batch in enumerate(live.batches):  # the set-up: one batch inside each interval, before its end
        [at] = {appended[(row["partition"], row["offset"])] for row in batch}
        assert (ends[i - 1] if i else 0) < at < ends[i], (i, at, ends)
    runs = live.backfill_runs()
    assert [(r[1], r[2]) for r in runs] == [("success", "backfill")] * FIRES, (runs, live.airflow.tail())
    assert [_ms(r[3]) for r in runs] == ends  # one run per interval, oldest first
    # the scheduler made no run of its own for those intervals (nor any other)
    assert live.airflow.query("SELECT run_id FROM dag_run WHERE run_type = 'scheduled'") == []

    history = [h for h in read_history(pg_config, BF_TABLE, newest_first=False) if not h["dry_run"]]
    assert [(h["status"], h["now_ms"]) for h in history] == [("committed", e) for e in ends], history
    # each interval took its own batch: the later one was younger than its end (wall-clock nows
    # would have taken both in the first run)
    assert [h["dirty_records_in_run"] for h in history] == [len(b) for b in live.batches]

    # Each run's commit time, as the table's checkpoint dates its clean (rules.first_clean_time: the
    # later of its now and its MERGE's commit; maintenance expires those snapshots right after): each
    # within its own run's `clean` task, so after every backfill now. The checkpoint is as of the last now.
    ref = f"{pg_config.catalog.name}.{BF_TABLE}"
    spark.catalog.refreshTable(ref)
    ckpt = stored_checkpoint(spark, ref)
    commits = [at for at, _, _ in ckpt.history]
    windows = [live.airflow.query("SELECT start_date, end_date FROM task_instance WHERE run_id = %s AND "
                                  "task_id = 'clean' AND rendered_map_index = %s", r[0], BF_TABLE) for r in runs]
    assert len(commits) == FIRES and ckpt.as_of_ms == ends[-1], ckpt
    assert all(_ms(start) <= c <= _ms(end) for c, [(start, end)] in zip(commits, windows)), (commits, windows)

    expected, figures = _replay(live.records, live.tc, list(zip(ends, commits)))
    kept = record_ids(spark, ref)
    assert kept == expected
    assert [{k: h[k] for k in FIGURES} for h in history] == [{k: s[k] for k in FIGURES} for s in figures]
    # batch 1's tombstones stay: their horizon counts from run 1's commit, after every backfill now
    assert {(0, 22), (1, 23)} <= set(kept)
    # ... which the scenario tells apart from nows on the wall clock, and from horizons counted from the nows
    assert expected != _replay(live.records, live.tc, [(c, c) for c in commits])[0]
    assert expected != _replay(live.records, live.tc, [(e, None) for e in ends])[0]

    # the Lake Cleaner page lists the backfill's runs
    view = live.airflow.api("GET", f"/lakecleaner/api/dags/lakecleaner/tables/{BF_TABLE}")
    assert sorted((r["now_ms"], r["status"]) for r in view["runs"]) == [(e, "committed") for e in ends], view["runs"]


def test_the_last_intervals_run_cleans_two_tables_in_two_applications_at_once(spark, pg_config, live):
    """The late table, filled within the last interval only, is that run's second application."""
    runs = live.backfill_runs()
    assert [(r[1], r[2]) for r in runs] == [("success", "backfill")] * FIRES, (runs, live.airflow.tail())
    clean = {run_id: live.airflow.query(
        "SELECT map_index, state, start_date, end_date, rendered_map_index, pool FROM task_instance "
        "WHERE dag_id = 'lakecleaner' AND run_id = %s AND task_id = 'clean' ORDER BY map_index", run_id)
        for run_id, *_ in runs}
    # one application per table, named by it: the late table's rows were too young for the earlier nows
    assert [[row[4] for row in clean[r[0]]] for r in runs[:-1]] == [[BF_TABLE]] * (FIRES - 1), clean
    last = clean[runs[-1][0]]
    assert sorted(row[4] for row in last) == sorted((BF_TABLE, LATE_TABLE)), last
    assert [row[1] for row in last] == ["success", "success"], last
    # both applications ran at the same time, with no pool of their own
    assert max(row[2] for row in last) < min(row[3] for row in last), last
    assert {row[5] for rows in clean.values() for row in rows} == {"default_pool"}

    records, tc = live.late
    end = _ms(live.fires[-1])
    assert all(_ms(live.fires[-2]) < r.appended_at_ms < end for r in records)  # the set-up: inside the interval
    ref = f"{pg_config.catalog.name}.{LATE_TABLE}"
    spark.catalog.refreshTable(ref)
    ckpt = stored_checkpoint(spark, ref)
    [(committed, _, _)] = ckpt.history
    assert ckpt.as_of_ms == end, ckpt
    out = compact(records, Checkpoint(), tc, end, committed)
    kept = record_ids(spark, ref)
    assert out.stats["removed_superseded"] > 0 and kept == sorted(r.id for r in out.survivors(records))


def test_airflow_marks_the_backfill_complete(live):
    """Its scheduler looks every 30 s (a fixed interval of Airflow 3's scheduler loop): checked last,
    after the other tests' checks, instead of waiting for it right after the backfill."""
    live.backfill_runs()
    live.airflow.wait("the backfill to be marked complete", lambda: live.airflow.query(
        "SELECT completed_at FROM backfill WHERE id = %s AND completed_at IS NOT NULL", live.backfill_id), timeout=120)
