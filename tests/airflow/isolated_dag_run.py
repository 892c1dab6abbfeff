"""One lakecleaner DAG run with no shared local disk, and what it wrote where.

Run by tests/airflow/test_no_shared_disk.py inside a private mount namespace in which /tmp, /var/tmp,
/dev/shm and $HOME are fresh, empty file systems that only this run's processes see: whatever any of
them writes there shows in the listing, and nothing another process on the machine writes does.

- The lake: a Hadoop catalog whose warehouse (and the state root under it) stands for the shared
  storage; two compacted tables with records to remove, built beforehand by the test's own Spark
  session (:func:`build_lake`) and bound into the namespace at the same path
  (LAKECLEANER_ISOLATION_LAKE: the warehouse and what the reference model keeps).
- Airflow's own side (Airflow's, not lakecleaner's): its metadata database and logs under one
  AIRFLOW_HOME, the Execution API (``airflow api-server --apps execution``), and the scheduler loop
  of ``dag.test(use_executor=True)`` in this process.
- Every task instance runs through isolated_executor.IsolatedTaskExecutor: a new process with its own
  HOME, TMPDIR and working directory (JVMs: java.io.tmpdir, spark.local.dir, -XX:-UsePerfData),
  talking to Airflow through the Execution API only, all of it deleted when the task ends.

The file system is listed before and after the run (the namespace's /tmp, /var/tmp, /dev/shm and
HOME, the checkout's DAG folder and package, the Python environment, Spark); every change is put under what may change
(the warehouse with the state root, Airflow's own home, this harness's files) or reported as a write
outside them. The report is one JSON line on stdout (REPORT_MARKER).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the package's code: this checkout's, or another's to run the same scenario against it
INCLUDE = Path(os.environ.get("LAKECLEANER_ISOLATION_INCLUDE", REPO / "include"))
REPORT_MARKER = "LAKECLEANER_ISOLATION_REPORT "
CATALOG, TABLES = "isolated", ("t.orders", "t.prices")
JWT_SECRET = "lakecleaner-isolation-test-secret-" + "x" * 32


def _rows(start: int, n: int) -> list[dict]:
    """5 keys over 2 partitions, every 7th record a tombstone (tests/airflow/test_dag_end_to_end.py's)."""
    return [{"key": f"k{i % 5}", "offset": i, "partition": i % 2, "value": None if i % 7 == 0 else f"v{i}"}
            for i in range(start, start + n)]


# ---------------------------------------------------------------- the lake (the test's session)
def build_lake(spark, lake: Path) -> None:
    """The deployment's config file (``lake``/lakecleaner.yaml: a mounted, read-only file in a pod) and
    the tables, built with ``spark`` (the test's session) in ``lake``/warehouse; in ``lake``/expected.json
    the tick the run is for (the first after the last append, so the run sees every record) and what
    the reference model keeps of each as of it."""
    from lakecleaner.core.config import load_config
    from lakecleaner.core.model import compact
    from lakecleaner.core.rules import Checkpoint
    from lakecleaner_dev.schedule import next_tick
    from lakecleaner_dev.tables import append, create_compacted_table, read_model_records

    config = lake / "lakecleaner.yaml"
    config.write_text(f"catalog:\n  name: {CATALOG}\n  type: hadoop\n  warehouse: {lake / 'warehouse'}\n"
                      "spark:\n  master: local[2]\n  driver_memory: 1g\n"
                      "cleaner:\n  threads: 1\n")
    cfg = load_config(config)
    for key, value in cfg.catalog.spark_conf().items():
        spark.conf.set(key, value)
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")  # the run commits from other JVMs
    for table in TABLES:
        ref = create_compacted_table(spark, cfg, table, {"compaction.retain.log.end.record": "false"})
        for batch in range(3):
            append(spark, ref, _rows(batch * 20, 20))
    tick_ms = int(next_tick(dt.datetime.now(dt.timezone.utc)).timestamp() * 1000)
    expected = {}
    for table in TABLES:
        records, tc = read_model_records(spark, cfg, table)
        expected[table] = sorted(r.id for r in compact(records, Checkpoint(), tc, tick_ms).survivors(records))
        assert len(expected[table]) < len(records)
    (lake / "expected.json").write_text(json.dumps({"tick_ms": tick_ms, "expected": expected}))


# ---------------------------------------------------------------- listing the file system
def listing(roots: list[Path]) -> dict[str, tuple]:
    """path -> (kind, size, mtime_ns) of everything under ``roots`` (symbolic links not followed;
    Python's bytecode caches left out: Python writes them where it can and carries on where it
    cannot, so they are no dependency on a writable disk)."""
    out: dict[str, tuple] = {}
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not (Path(dirpath) / d).is_symlink()]
            out[dirpath] = ("dir", 0, 0)
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                out[path] = ("file", st.st_size, st.st_mtime_ns)
    return out


def changes(before: dict, after: dict) -> list[tuple[str, str]]:
    found = [("created", p) for p in after.keys() - before.keys()]
    found += [("deleted", p) for p in before.keys() - after.keys()]
    found += [("modified", p) for p in after.keys() & before.keys() if after[p] != before[p] and after[p][0] == "file"]
    return sorted(found, key=lambda c: c[1])


def classify(found: list[tuple[str, str]], allowed: dict[str, Path]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """How many changes fall under each allowed place; the rest, each named."""
    counted = {name: 0 for name in allowed}
    outside = []
    for change, path in found:
        where = next((name for name, root in allowed.items() if Path(path).is_relative_to(root)), None)
        if where is None:
            outside.append((change, path))
        else:
            counted[where] += 1
    return counted, outside


# ---------------------------------------------------------------- the run
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen, log: Path, seconds: float = 180) -> None:
    import urllib.error
    import urllib.request

    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the API server exited ({proc.returncode}): {log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"the API server did not answer {url}: {log.read_text()[-3000:]}")


def main() -> None:
    lake = Path(os.environ["LAKECLEANER_ISOLATION_LAKE"])  # build_lake's
    config, warehouse = lake / "lakecleaner.yaml", lake / "warehouse"
    lake_made = json.loads((lake / "expected.json").read_text())  # the tick and the model's survivors
    base = Path(tempfile.mkdtemp(prefix="lakecleaner-isolation-"))
    airflow_home, tasks, harness = (base / d for d in ("airflow", "tasks", "harness"))
    for d in (airflow_home, tasks, harness):
        d.mkdir()
    state_root = warehouse / "_lakecleaner"
    pythonpath = os.pathsep.join([str(INCLUDE), str(Path(__file__).parent)])
    deployment = {  # what every Airflow process of the deployment is configured with
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LAKECLEANER__CONFIG": str(config),
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type":"spark","host":"local[2]"}',
        "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False", "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": pythonpath,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        # the test run's JVM options, if any (C1 and the class archive: tests/conftest.py)
        **{k: os.environ[k] for k in ("SPARK_SUBMIT_OPTS",) if k in os.environ},
    }
    port = _free_port()
    airflow_side = {**deployment, "AIRFLOW_HOME": str(airflow_home), "HOME": str(airflow_home / "home"),
                    "TMPDIR": str(airflow_home / "tmp"),
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home}/airflow.db",
                    "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                    "AIRFLOW__CORE__EXECUTOR": "isolated_executor.IsolatedTaskExecutor",
                    "LAKECLEANER_ISOLATION_TASKS": str(tasks),
                    "LAKECLEANER_ISOLATION_RECORD": str(harness / "tasks.jsonl"),
                    "LAKECLEANER_ISOLATION_TASK_ENV": json.dumps({
                        **deployment, "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/"})}
    for d in ("home", "tmp"):
        (airflow_home / d).mkdir()
    timings: dict[str, float] = {}

    def timed(name, fn, *a, **kw):
        started = time.monotonic()
        try:
            return fn(*a, **kw)
        finally:
            timings[name] = round(time.monotonic() - started, 1)

    tick = dt.datetime.fromtimestamp(lake_made["tick_ms"] / 1000, dt.timezone.utc)
    os.environ.update(airflow_side)  # this process is Airflow's scheduler side from here on
    timed("airflow db migrate", subprocess.run, [sys.executable, "-m", "airflow", "db", "migrate"], check=True,
          cwd=airflow_home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api_log = airflow_home / "api-server.log"
    api = subprocess.Popen([sys.executable, "-m", "airflow", "api-server", "--apps", "execution", "--host",
                            "127.0.0.1", "--port", str(port), "--workers", "1"], cwd=airflow_home,
                           stdout=open(api_log, "w"), stderr=subprocess.STDOUT)
    try:
        timed("api-server start", _wait_for, f"http://127.0.0.1:{port}/execution/health", api, api_log)
        shared = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]
        real_home = Path(os.environ.get("LAKECLEANER_ISOLATION_REAL_HOME", "/nonexistent"))
        code = [REPO / "dags", INCLUDE, Path(sys.prefix).resolve()]  # what the processes run
        import pyspark

        code.append(Path(pyspark.__file__).resolve().parent)
        roots = [*shared, real_home, *code]
        before = timed("listing before", listing, roots)

        from airflow.dag_processing.dagbag import DagBag

        dag = DagBag(dag_folder=str(REPO / "dags")).dags["lakecleaner"]
        dr = timed("dag run", dag.test, logical_date=tick, use_executor=True)
        after = timed("listing after", listing, roots)
    finally:
        api.terminate()
        try:
            api.wait(timeout=30)
        except subprocess.TimeoutExpired:
            api.kill()

    found = changes(before, after)
    allowed = {"warehouse and state root": warehouse, "per-task scratch": tasks,
               "Airflow's own home (metadata database, logs, API server)": airflow_home, "this harness": harness}
    counted, outside = classify(found, allowed)

    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session

    with create_session() as session:
        states = {f"{ti.task_id}[{ti.map_index}]": ti.state for ti in session.scalars(
            select(TI).where(TI.dag_id == dr.dag_id, TI.run_id == dr.run_id))}

    from lakecleaner.core.config import load_config
    from lakecleaner.core.history import read_history
    from lakecleaner.core.metadata import MetadataReader

    cfg = load_config(config)
    expected = lake_made["expected"]
    lake = {}
    for table in TABLES:
        seen = lake[table] = {}
        try:  # each check on its own: the report says what failed, whatever the code under test lacks
            rows = MetadataReader(cfg).load(table).scan(selected_fields=("partition", "offset")).to_arrow().to_pylist()
            seen["kept_as_model"] = sorted([r["partition"], r["offset"]] for r in rows) == expected[table]
            seen["history"] = [r["status"] for r in read_history(cfg, table)]
            from lakecleaner.core.quality_results import list_results, read_docs_file

            results = list_results(cfg, table)
            seen["quality"] = [(r["run_name"], r["success"]) for r in results]
            page = results[0]["docs_page"] if results else None
            seen["docs_page_served"] = bool(page and b"Great Expectations" in (read_docs_file(cfg, page) or b""))
        except Exception as exc:  # noqa: BLE001 - reported
            seen["error"] = f"{type(exc).__name__}: {exc}"
    records = [json.loads(line) for line in (harness / "tasks.jsonl").read_text().splitlines()]
    report = {
        "dag_run": dr.state, "task_states": states, "lake": lake, "timings_s": timings,
        "state_root": str(state_root), "changes": counted, "outside": outside[:200], "outside_count": len(outside),
        "listed": [str(r) for r in roots], "files_listed": len(after),
        "tasks": [{k: v for k, v in r.items() if k != "log_tail"} for r in records],
        "failed_task_logs": {r["task"]: r["log_tail"] for r in records
                             if r["exit"] != 0 or os.environ.get("LAKECLEANER_ISOLATION_ALL_LOGS")},
        "task_dirs_left": sorted(p.name for p in tasks.iterdir()),
        "state_root_files": sorted(str(p.relative_to(state_root)) for p in state_root.rglob("*") if p.is_file())[:400],
    }
    print(REPORT_MARKER + json.dumps(report, default=str), flush=True)


if __name__ == "__main__":
    main()
