"""lakecleaner as a user installs it: the wheel built from this checkout, installed with its
``openlineage`` extra (which brings the ``airflow`` one) into a fresh virtualenv outside the checkout
(the lock as constraints), then used the way a deployment uses it: a fresh AIRFLOW_HOME whose dags
folder holds only the three-line DAG file, no plugins folder, no PYTHONPATH, a working directory
outside the checkout, OpenLineage's file transport as the deployment's lineage backend.

Airflow must find the provider, its ``[lakecleaner]`` section and the Lake Cleaner plugin by their
entry points alone; the DAG must parse; the ``lakecleaner`` console script must evaluate a lake; and
one ``airflow dags test`` run (in-process, real spark-submits of the installed package's job files)
must carry out a pending erasure request and clean a compacted table to exactly what the reference
model keeps, and its OpenLineage events name what the clean and forget tasks changed:

- the ``clean`` task's COMPLETE event has the compacted table as input and output, named by its
  location (``file`` + path, as openlineage-spark names it), with the symlinks facet (the Hadoop
  warehouse's identifier, and the asset's), the catalog facet, input/output statistics and the
  ``lakecleaner_compaction`` run facet with the run's figures; a table not compacted is not in it;
- the ``forget`` task's COMPLETE event names the table a request was carried out on; the request
  erased the key before evaluation, audited by its hash, and the key is in no XCom or rendered
  field of the run;
- an ``iceberg://`` asset converts to the identifier the datasets carry as a symlink.

The provider decides whether it is enabled when Airflow first loads it, so only the deployment's
own processes (here, ``airflow dags test``) have a transport; the DAG tests under tests/airflow run
with the provider installed and none.

Installing is the cost (about 1.3 GB unpacked). Dependencies come from pip's cache, warm after
``make test`` installed the repository's venv; ``--no-compile`` skips byte-compiling every module of
pyspark, pyarrow, GX and Airflow (Python compiles what it imports, on first import).
"""
from __future__ import annotations

import configparser
import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from lakecleaner.airflow.provider import OPTION_DEFAULTS
from lakecleaner.core.config import LakecleanerConfig, load_config
from lakecleaner.core.erasure_requests import requests_table
from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint
from lakecleaner.spark.engine import compact_table
from lakecleaner.spark.erasure_requests import ensure_requests_table
from lakecleaner.spark.forget import read_audit
from lakecleaner_dev.jvm_archive import TEST_JVM_OPTIONS
from lakecleaner_dev.schedule import next_tick
from lakecleaner_dev.tables import append, create_compacted_table, read_model_records, record_ids

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"
VERSION = "0.1.0"
DAG_ID = "lakecleaner_lake"
CATALOG = "wheellake"  # its own catalog in the session's Spark: no other test's tables are evaluated here
TABLE = "w.orders"
# Not cleaned by the run (compacted before it, below their dirty ratio); the second holds a key a
# pending erasure request names, carried out by the run's forget task.
CLEAN, FORGET = "w.clean", "w.forget_me"
ERASED = "erase-me-0l"
LINEAGE_NAMESPACE = "lakes"

# What the wheel must carry beside the modules: Airflow finds these by name or path at run time.
ENTRY_POINTS = {
    "console_scripts": {"lakecleaner": "lakecleaner.cli:main"},
    "apache_airflow_provider": {"provider_info": "lakecleaner.airflow.provider:get_provider_info"},
    "airflow.plugins": {"lakecleaner": "lakecleaner.airflow.plugin:LakeCleanerPlugin"},
}
DATA_FILES = [
    *(f"lakecleaner/spark/jobs/{job}.py" for job in ("clean", "compact", "maintain", "validate", "forget")),
    *(f"lakecleaner/airflow/templates/lakecleaner/{page}.html"
      for page in ("base", "index", "macros", "message", "table")),
    "lakecleaner/resources/lakecleaner.yaml",
    "lakecleaner/resources/log4j2.properties",
    *(f"lakecleaner/resources/{facet}.json" for facet in ("LakecleanerCompactionRunFacet", "LakecleanerForgetRunFacet")),
]


@dataclass
class Deployment:
    wheel: Path
    venv: Path
    home: Path  # AIRFLOW_HOME
    cwd: Path  # outside the checkout
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def run(self, *argv: str, timeout: int = 600) -> str:
        """A command of the fresh venv (``airflow``, ``lakecleaner``, ``python``...), as a user runs it; its stdout."""
        proc = subprocess.run([str(self.venv / "bin" / argv[0]), *argv[1:]], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, (f"{' '.join(argv)}: exit {proc.returncode}\n"
                                      f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        return proc.stdout

    def json(self, *argv: str):
        """The JSON document an ``airflow ... -o json`` prints (Airflow's log lines share its stdout)."""
        out = self.run(*argv)
        lines = [line for line in out.splitlines() if line.startswith(("[", "{"))]
        assert lines, f"{' '.join(argv)} printed no JSON:\n{out[-3000:]}"
        return json.loads(lines[-1])


def _timed(timings: dict, name: str, fn, *args, **kwargs):
    start = time.monotonic()
    try:
        return fn(*args, **kwargs)
    finally:
        timings[name] = round(time.monotonic() - start, 1)


def _check(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}: exit {proc.returncode}\n{proc.stdout[-4000:]}\n" \
                                 f"{proc.stderr[-4000:]}"
    return proc


def checkout_files() -> list[str]:
    """The checkout as a commit of it would hold it: tracked files and new ones git does not ignore
    (never build/, *.egg-info, a venv or a warehouse, whose stale files a build could pick up)."""
    out = _check(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO).stdout
    return sorted({p for p in out.split("\0") if p and (REPO / p).is_file() and not (REPO / p).is_symlink()})


def build_wheel(dest: Path) -> Path:
    """``pip wheel --no-deps`` of a clean copy of the checkout (the build backend runs isolated, as for any user)."""
    src = dest / "src"
    for rel in checkout_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    _check([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dest / "dist"), str(src)],
           cwd=dest, timeout=600)
    (wheel,) = (dest / "dist").glob("lakecleaner-*.whl")
    return wheel


def user_env(venv: Path, home: Path) -> dict[str, str]:
    """This environment without anything that points Python, Airflow, Spark or lakecleaner at the
    checkout or the test's own venv (tests/conftest.py puts include/ on PYTHONPATH; tests/airflow's
    conftest sets AIRFLOW_* for its own Airflow); the fresh venv's bin first on PATH (spark-submit)."""
    dropped = ("AIRFLOW", "LAKECLEANER_", "PYTHON", "PYSPARK_", "SPARK_", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    mine = (str(REPO), str(Path(sys.prefix)), str(Path(sys.prefix).resolve()))
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not any(p == m or p.startswith(m + os.sep) for m in mine)]
    env.update({
        "PATH": os.pathsep.join([str(venv / "bin"), *path]),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # the deployment's Spark connection: Spark inside the worker (here, the dags test process)
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type":"spark","host":"local[2]"}',
        "SPARK_LOCAL_IP": "127.0.0.1",  # this machine's hostname need not resolve
        # the tests' JIT choice for short-lived JVMs (C1 only; tests/conftest.py), nothing of the checkout:
        # with C2 this test's spark-submit took 32 CPU s, the suite's others 15 to 20
        "SPARK_SUBMIT_OPTS": TEST_JVM_OPTIONS,
        # the deployment's lineage backend: OpenLineage's file transport, beside the Airflow home
        "AIRFLOW__OPENLINEAGE__NAMESPACE": LINEAGE_NAMESPACE,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage_log(home)),
                                                       "append": True}),
    })
    return env


def lineage_log(home: Path) -> Path:
    return home.parent / "openlineage.jsonl"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    base = tmp_path_factory.mktemp("installed")
    timings: dict[str, float] = {}
    wheel = _timed(timings, "wheel build", build_wheel, base / "wheel")
    venv_parent = Path(tempfile.mkdtemp(prefix="lakecleaner-wheel-venv-"))  # 1.3 GB: removed afterwards
    venv = venv_parent / "venv"
    try:
        # the test's own pip, pointed at the new interpreter (--python): no ensurepip in the new venv
        _timed(timings, "venv", _check, [sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
        _timed(timings, "install", _check, [
            sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-compile",
            "--quiet", f"lakecleaner[openlineage] @ {wheel.as_uri()}", "--constraint", str(LOCK)], timeout=900)
        home, cwd = base / "airflow_home", base / "cwd"
        (home / "dags").mkdir(parents=True)
        cwd.mkdir()
        d = Deployment(wheel, venv, home, cwd, user_env(venv, home), timings)
        _timed(timings, "db migrate", d.run, "airflow", "db", "migrate")
        yield d
    finally:
        print(f"\ntest_installed_wheel timings (s): {timings}")
        shutil.rmtree(venv_parent, ignore_errors=True)


@dataclass(frozen=True)
class Lake:
    """The lake the run cleans, and what was known of it before the run."""
    cfg: LakecleanerConfig
    yaml: Path
    tick: dt.datetime  # the run's now
    expected: list  # the compacted table's record ids the reference model keeps as of the tick
    record_count: int  # the compacted table's records before the run
    figures: dict  # the model's figures for that run
    evaluated: list[dict]  # what `lakecleaner evaluate --json` printed before the run


@pytest.fixture(scope="module")
def lake(deployment, spark) -> Lake:
    """A compacted table in its own warehouse, built by this process, two tables already clean, one
    with a key a pending erasure request names; the YAML that names the warehouse; the three-line DAG
    file on it, alone in the dags folder. Returns the config, what the reference model keeps as of the
    run's now (the next 15-minute tick: the DAG's default schedule, whose runs have zero-length data
    intervals) and its figures, and what the console script said before the run (Lake)."""
    base = deployment.home.parent / "lake"
    base.mkdir()
    yaml_path = base / "lake.yaml"
    yaml_path.write_text(f"catalog:\n  name: {CATALOG}\n  type: hadoop\n  warehouse: {base / 'warehouse'}\n"
                         "spark:\n  master: local[2]\n  driver_memory: 1g\ncleaner:\n  threads: 1\n")
    cfg = load_config(yaml_path)
    for key, value in cfg.catalog.spark_conf().items():
        spark.conf.set(key, value)
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")  # the DAG's job commits from another JVM
    props = {"compaction.retain.log.end.record": "false"}
    ref = create_compacted_table(spark, cfg, TABLE, props)
    for batch in range(3):  # 5 keys, 2 partitions, every 7th record a tombstone
        append(spark, ref, [{"key": f"k{i % 5}", "offset": i, "partition": i % 2,
                             "value": None if i % 7 == 0 else f"v{i}"} for i in range(batch * 20, batch * 20 + 20)])
    tick = next_tick(dt.datetime.now(dt.timezone.utc))
    now_ms = int(tick.timestamp() * 1000)
    for table in (CLEAN, FORGET):
        ref = create_compacted_table(spark, cfg, table, {**props, "min.cleanable.dirty.ratio": "0.99"})
        append(spark, ref, [{"key": f"k{i % 5}", "offset": i, "partition": 0, "value": f"v{i}"} for i in range(10)]
               + ([{"key": ERASED, "offset": 10, "partition": 0, "value": "x"}] if table == FORGET else []))
        compact_table(spark, cfg, table, now_ms=int(time.time() * 1000))  # nothing left to compact
    ensure_requests_table(spark, cfg)
    spark.sql(f"INSERT INTO {requests_table(cfg)} VALUES ('dpo-ol', '{FORGET}', map('key', '{ERASED}'), "
              "current_timestamp(), 'dpo@example.org', 'ticket', 'pending', NULL, NULL, NULL)")
    records, tc = read_model_records(spark, cfg, TABLE)
    model = compact(records, Checkpoint(), tc, now_ms)
    expected = sorted(r.id for r in model.survivors(records))
    assert len(expected) < len(records)  # the run has something to remove
    (deployment.home / "dags" / "lakecleaner_lake.py").write_text(
        "from lakecleaner.airflow import lakecleaner_dag\n\n"
        f"dag = lakecleaner_dag(dag_id={DAG_ID!r}, config={str(yaml_path)!r})\n")
    evaluated = _timed(deployment.timings, "lakecleaner evaluate", deployment.run,
                       "lakecleaner", "--config", str(yaml_path), "evaluate", "--json", "--now-ms", str(now_ms))
    return Lake(cfg, yaml_path, tick, expected, len(records), model.stats, json.loads(evaluated.splitlines()[-1]))


@dataclass
class DagRun:
    """The one ``airflow dags test`` run, as its metadata database and lineage file recorded it."""
    run_id: str
    state: str
    interval_end: str
    clean: list[tuple]  # (map_index, state) of the clean task's instances
    xcoms: list[tuple]  # (task_id, value)
    rendered: list[tuple]  # (task_id, rendered_fields)
    events: list[dict]  # every OpenLineage event of the run


@pytest.fixture(scope="module")
def dag_run(deployment, lake) -> DagRun:
    d = deployment
    _timed(d.timings, "dags test", d.run, "airflow", "dags", "test", DAG_ID, lake.tick.isoformat(), timeout=900)
    with sqlite3.connect(d.home / "airflow.db") as db:  # the default metadata database of the fresh AIRFLOW_HOME
        runs = db.execute("SELECT run_id, state, data_interval_end FROM dag_run WHERE dag_id = ?", (DAG_ID,)).fetchall()
        assert len(runs) == 1, runs
        (run_id, state, end), = runs
        clean = db.execute("SELECT map_index, state FROM task_instance WHERE dag_id = ? AND task_id = 'clean'",
                           (DAG_ID,)).fetchall()
        xcoms = db.execute("SELECT task_id, value FROM xcom WHERE run_id = ?", (run_id,)).fetchall()
        rendered = db.execute("SELECT task_id, rendered_fields FROM rendered_task_instance_fields WHERE run_id = ?",
                              (run_id,)).fetchall()
    log = lineage_log(d.home)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return DagRun(run_id, state, end, clean, xcoms, rendered, events)


# ---------------------------------------------------------------- the wheel itself
def test_the_wheel_holds_the_package_with_its_data_and_nothing_of_the_checkout_else(deployment):
    with zipfile.ZipFile(deployment.wheel) as whl:
        names = set(whl.namelist())
        dist_info = f"lakecleaner-{VERSION}.dist-info"
        entry_points = configparser.ConfigParser(delimiters=("=",))
        entry_points.optionxform = str
        entry_points.read_string(whl.read(f"{dist_info}/entry_points.txt").decode())
    assert {n.split("/")[0] for n in names} == {"lakecleaner", dist_info}, "only the package and its metadata"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    missing = [f for f in DATA_FILES if f not in names]
    assert not missing, f"package data missing from the wheel: {missing}"
    # every file of the package in the checkout is in the wheel, and nothing else: a new template or
    # resource not declared as package data fails here
    package = {p[len("include/"):] for p in checkout_files() if p.startswith("include/lakecleaner/")}
    assert {n for n in names if n.startswith("lakecleaner/")} == package
    assert {s: dict(entry_points[s]) for s in entry_points.sections()} == ENTRY_POINTS


def test_the_install_is_the_lock_and_uses_nothing_of_the_checkout(deployment):
    lock = {}
    for line in LOCK.read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, _, version = line.split("#")[0].strip().partition("==")
            lock[canonicalize_name(name)] = version
    installed = deployment.json("python", "-c", "import importlib.metadata as m, json; print(json.dumps("
                                "{d.metadata['Name']: d.version for d in m.distributions()}))")
    off_lock = {n: v for n, v in installed.items() if canonicalize_name(n) != "lakecleaner"
                and lock.get(canonicalize_name(n)) != v}
    assert not off_lock, f"installed but not as the lock pins them: {off_lock}"
    assert installed["lakecleaner"] == VERSION
    _check([sys.executable, "-m", "pip", "--python", str(deployment.venv / "bin" / "python"), "check"])
    where = deployment.json("python", "-c", "import json, sys, importlib.util as u, lakecleaner; print(json.dumps("
                            "{'file': lakecleaner.__file__, 'path': sys.path, 'dev': u.find_spec('lakecleaner_dev')"
                            " is not None}))")
    assert Path(where["file"]).is_relative_to(deployment.venv), where["file"]
    assert not [p for p in where["path"] if p and Path(p).resolve().is_relative_to(REPO)], where["path"]
    assert not where["dev"], "lakecleaner_dev is importable from the installed venv"


def test_the_installed_package_finds_its_own_data(deployment):
    """As the code looks them up: the page's templates, the shipped default config (a warehouse in
    the working directory), the driver's log4j file and the job files spark-submit runs by path."""
    found = deployment.json("python", "-c", """if True:
        import json, os
        from lakecleaner.airflow.plugin import ENV
        from lakecleaner.core.config import load_config
        from lakecleaner.core.sparkconf import LOG4J_PROPERTIES
        from lakecleaner.core.submit import job_path
        pages = [ENV.get_template(f"lakecleaner/{p}.html").filename
                 for p in ("base", "index", "macros", "message", "table")]
        jobs = [job_path(j + ".py") for j in ("clean", "compact", "maintain", "validate", "forget")]
        cfg = load_config()
        print(json.dumps({"files": [*pages, *jobs, str(LOG4J_PROPERTIES), cfg.source],
                          "all_there": all(map(os.path.isfile, [*pages, *jobs, str(LOG4J_PROPERTIES)])),
                          "warehouse": cfg.catalog.warehouse}))""")
    assert found["all_there"], found["files"]
    assert all(Path(f).is_relative_to(deployment.venv) for f in found["files"]), found["files"]
    assert found["warehouse"] == str(deployment.cwd / "warehouse")


# ---------------------------------------------------------------- Airflow finds it by entry points alone
def test_airflow_finds_the_provider_its_section_the_plugin_and_the_dag(deployment, lake):
    d = deployment
    providers = {p["package_name"]: p for p in d.json("airflow", "providers", "list", "-o", "json")}
    assert "lakecleaner" in providers, f"Airflow lists no lakecleaner provider: {sorted(providers)}"
    assert providers["lakecleaner"]["version"] == VERSION
    plugins = [p for p in d.json("airflow", "plugins", "-o", "json") if p["name"] == "lakecleaner"]
    assert len(plugins) == 1, plugins  # registered once: by the airflow.plugins entry point
    assert "group='airflow.plugins'" in plugins[0]["source"], plugins[0]["source"]
    assert [a["url_prefix"] for a in plugins[0]["fastapi_apps"]] == ["/lakecleaner"]
    assert d.run("airflow", "config", "get-value", "lakecleaner", "schedule").strip() == OPTION_DEFAULTS["schedule"]
    # the provider's CLI group: the config loads, the connection and spark-submit are there (no warning)
    check = subprocess.run([str(d.venv / "bin" / "airflow"), "lakecleaner", "check", "--config", str(lake.yaml)],
                           cwd=d.cwd, env=d.env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and f"catalog {CATALOG} (hadoop)" in check.stdout, check.stdout + check.stderr
    assert "lakecleaner: warning" not in check.stderr, check.stderr
    # parsed as the dag-processor parses it, into the metadata database
    _timed(d.timings, "dags reserialize", d.run, "airflow", "dags", "reserialize")
    assert [x["dag_id"] for x in d.json("airflow", "dags", "list", "-o", "json")] == [DAG_ID]
    assert d.json("airflow", "dags", "list-import-errors", "-o", "json") == []


def test_the_console_script_evaluates_the_lake(lake):
    rows = {r["table"]: r for r in lake.evaluated}
    assert set(rows) == {TABLE, CLEAN, FORGET}
    assert rows[TABLE]["status"] == "eligible" and rows[TABLE]["plan_rank"] == 1, rows[TABLE]
    assert rows[CLEAN]["status"] != "eligible" and rows[FORGET]["status"] != "eligible", rows


# ---------------------------------------------------------------- one run, as the deployment runs it
def test_one_dags_test_run_cleans_the_table_to_what_the_model_keeps(deployment, lake, dag_run, spark):
    assert dag_run.state == "success", (dag_run, deployment.home)
    assert dt.datetime.fromisoformat(dag_run.interval_end).replace(tzinfo=dt.timezone.utc) == lake.tick  # its now
    assert dag_run.clean == [(0, "success")]
    assert record_ids(spark, f"{CATALOG}.{TABLE}") == lake.expected
    # the package shipped to Spark (--py-files) was built by the clean task in its own scratch space
    # and removed with it: nothing of it is left where earlier versions kept it
    assert not (deployment.home / "lakecleaner").exists()


def _complete(events, task: str) -> list[dict]:
    return [e for e in events if e.get("eventType") == "COMPLETE" and e["job"]["name"] == f"{DAG_ID}.{task}"]


def test_the_clean_tasks_complete_event_names_the_compacted_table_with_its_figures(lake, dag_run):
    cfg = lake.cfg
    (event,) = _complete(dag_run.events, "clean")
    location = f"{cfg.catalog.warehouse}/w/orders"
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("file", location)]  # not the clean ones
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", location)]
    (table,) = event["outputs"]
    links = [(i["namespace"], i["name"], i["type"]) for i in table["facets"]["symlinks"]["identifiers"]]
    assert links == [(f"file:{cfg.catalog.warehouse}", TABLE, "TABLE"),
                     (f"iceberg://localhost{cfg.catalog.warehouse}", TABLE, "TABLE")]
    catalog = table["facets"]["catalog"]
    assert (catalog["framework"], catalog["type"], catalog["name"]) == ("iceberg", "hadoop", CATALOG)
    assert catalog["warehouseUri"] == f"file:{cfg.catalog.warehouse}"
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == len(lake.expected)
    assert event["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == lake.record_count
    facet = event["run"]["facets"]["lakecleaner_compaction"]
    assert facet["_producer"] and facet["_schemaURL"].endswith("#/$defs/LakecleanerCompactionRunFacet")
    (figures,) = facet["tables"]
    assert figures["table"] == TABLE and figures["records_read"] == lake.record_count
    assert figures["removed_superseded"] == lake.figures["removed_superseded"] > 0
    assert figures["bytes_written"] > 0 and figures["duration_ms"] > 0


def test_the_forget_tasks_complete_event_names_the_table_a_request_was_carried_out_on(lake, dag_run):
    (event,) = _complete(dag_run.events, "forget")
    location = f"{lake.cfg.catalog.warehouse}/w/forget_me"
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", location)]
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("file", location)]
    assert event["run"]["facets"]["lakecleaner_forget"]["requests"] == [
        {"request_id": "dpo-ol", "table": FORGET, "status": "done"}]
    assert ERASED not in json.dumps(dag_run.events)  # never a key


def test_a_pending_request_erases_the_key_before_evaluation_and_audits_its_hash(lake, dag_run, spark):
    cfg = lake.cfg
    ref = f"{CATALOG}.{FORGET}"
    spark.sql(f"REFRESH TABLE {ref}")
    keys = sorted(r["key"] for r in spark.table(ref).collect())
    assert keys == ["k0", "k1", "k2", "k3", "k4"]  # one record per key after the setup's compaction; ERASED gone
    (audit,) = read_audit(spark, cfg, FORGET)
    assert audit["removed_records"] == 1 and audit["key_hash"] and ERASED not in json.dumps(audit, default=str)
    assert (audit["status"], audit["requested_by"], audit["reason"], audit["dag_run_id"]) == (
        "forgotten", "dpo@example.org", "ticket", dag_run.run_id)
    spark.sql(f"REFRESH TABLE {requests_table(cfg)}")
    (request,) = [r.asDict() for r in spark.table(requests_table(cfg)).collect()]
    assert request["status"] == "done" and request["key"] is None and request["processed_by"] == dag_run.run_id


def test_the_erased_key_is_in_no_xcom_or_rendered_field_of_the_run(dag_run):
    """Airflow keeps XComs and rendered fields (the spark-submit arguments among them) with the run,
    shown to anyone who may read it: they carry the request's id, never its key."""
    forget_xcom = [str(value) for task, value in dag_run.xcoms if task == "forget_requests"]
    # the request went through XCom by its id (its return value; beside it, the unknown ids named: none)
    assert any("dpo-ol" in value for value in forget_xcom), forget_xcom
    assert dag_run.rendered  # the run's rendered fields are there to search
    for task, value in [*dag_run.xcoms, *dag_run.rendered]:
        assert ERASED not in str(value), task


def test_an_iceberg_asset_converts_to_the_identifier_the_datasets_carry(deployment, lake, dag_run):
    """As the installed provider converts an asset the DAG's users may name the table by."""
    (event,) = _complete(dag_run.events, "clean")
    uri = f"iceberg://localhost{lake.cfg.catalog.warehouse}/w/orders"
    converted = deployment.json("python", "-c", f"""if True:
        import json
        from airflow.providers.openlineage.utils.utils import translate_airflow_asset
        from airflow.sdk import Asset
        converted = translate_airflow_asset(Asset({uri!r}), None)
        print(json.dumps({{"namespace": converted.namespace, "name": converted.name, "type": "TABLE"}}))""")
    assert converted in event["outputs"][0]["facets"]["symlinks"]["identifiers"]
