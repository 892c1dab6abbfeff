"""lakecleaner as a user installs it: the wheel built from this checkout, installed with its
``airflow`` extra into a fresh virtualenv outside the checkout (the lock as constraints), then used
the way a deployment uses it: a fresh AIRFLOW_HOME whose dags folder holds only the three-line DAG
file, no plugins folder, no PYTHONPATH, a working directory outside the checkout.

Airflow must find the provider, its ``[lakecleaner]`` section and the Lake Cleaner plugin by their
entry points alone; the DAG must parse; the ``lakecleaner`` console script must evaluate a lake; and
one ``airflow dags test`` run (in-process, a real spark-submit of the installed package's job file)
must clean a compacted table to exactly what the reference model keeps.

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
from lakecleaner.core.config import load_config
from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint
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
    })
    return env


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
            "--quiet", f"lakecleaner[airflow] @ {wheel.as_uri()}", "--constraint", str(LOCK)], timeout=900)
        home, cwd = base / "airflow_home", base / "cwd"
        (home / "dags").mkdir(parents=True)
        cwd.mkdir()
        d = Deployment(wheel, venv, home, cwd, user_env(venv, home), timings)
        _timed(timings, "db migrate", d.run, "airflow", "db", "migrate")
        yield d
    finally:
        print(f"\ntest_installed_wheel timings (s): {timings}")
        shutil.rmtree(venv_parent, ignore_errors=True)


@pytest.fixture(scope="module")
def lake(deployment, spark):
    """A compacted table in its own warehouse, built by this process; the YAML that names the
    warehouse; the three-line DAG file on it, alone in the dags folder. Returns the config, what the
    reference model keeps as of the run's now (the next 15-minute tick: the DAG's default schedule,
    whose runs have zero-length data intervals), and what the console script said before the run."""
    base = deployment.home.parent / "lake"
    base.mkdir()
    yaml_path = base / "lake.yaml"
    yaml_path.write_text(f"catalog:\n  name: {CATALOG}\n  type: hadoop\n  warehouse: {base / 'warehouse'}\n"
                         "spark:\n  master: local[2]\n  driver_memory: 1g\n")
    cfg = load_config(yaml_path)
    for key, value in cfg.catalog.spark_conf().items():
        spark.conf.set(key, value)
    spark.conf.set(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")  # the DAG's job commits from another JVM
    ref = create_compacted_table(spark, cfg, TABLE, {"compaction.retain.log.end.record": "false"})
    for batch in range(3):  # 5 keys, 2 partitions, every 7th record a tombstone
        append(spark, ref, [{"key": f"k{i % 5}", "offset": i, "partition": i % 2,
                             "value": None if i % 7 == 0 else f"v{i}"} for i in range(batch * 20, batch * 20 + 20)])
    tick = next_tick(dt.datetime.now(dt.timezone.utc))
    now_ms = int(tick.timestamp() * 1000)
    records, tc = read_model_records(spark, cfg, TABLE)
    expected = sorted(r.id for r in compact(records, Checkpoint(), tc, now_ms).survivors(records))
    assert len(expected) < len(records)  # the run has something to remove
    (deployment.home / "dags" / "lakecleaner_lake.py").write_text(
        "from lakecleaner.airflow import lakecleaner_dag\n\n"
        f"dag = lakecleaner_dag(dag_id={DAG_ID!r}, config={str(yaml_path)!r})\n")
    evaluated = _timed(deployment.timings, "lakecleaner evaluate", deployment.run,
                       "lakecleaner", "--config", str(yaml_path), "evaluate", "--json", "--now-ms", str(now_ms))
    return {"cfg": cfg, "yaml": yaml_path, "tick": tick, "expected": expected, "records": len(records),
            "evaluated": json.loads(evaluated.splitlines()[-1])}


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
    check = subprocess.run([str(d.venv / "bin" / "airflow"), "lakecleaner", "check", "--config", str(lake["yaml"])],
                           cwd=d.cwd, env=d.env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and f"catalog {CATALOG} (hadoop)" in check.stdout, check.stdout + check.stderr
    assert "lakecleaner: warning" not in check.stderr, check.stderr
    # parsed as the dag-processor parses it, into the metadata database
    _timed(d.timings, "dags reserialize", d.run, "airflow", "dags", "reserialize")
    assert [x["dag_id"] for x in d.json("airflow", "dags", "list", "-o", "json")] == [DAG_ID]
    assert d.json("airflow", "dags", "list-import-errors", "-o", "json") == []


def test_the_console_script_evaluates_the_lake(lake):
    rows = {r["table"]: r for r in lake["evaluated"]}
    assert set(rows) == {TABLE}
    assert rows[TABLE]["status"] == "eligible" and rows[TABLE]["plan_rank"] == 1, rows[TABLE]


def test_one_dags_test_run_cleans_the_table_to_what_the_model_keeps(deployment, lake, spark):
    d, tick = deployment, lake["tick"]
    _timed(d.timings, "dags test", d.run, "airflow", "dags", "test", DAG_ID, tick.isoformat(), timeout=900)
    with sqlite3.connect(d.home / "airflow.db") as db:  # the default metadata database of the fresh AIRFLOW_HOME
        runs = db.execute("SELECT state, data_interval_end FROM dag_run WHERE dag_id = ?", (DAG_ID,)).fetchall()
        clean = db.execute("SELECT map_index, state FROM task_instance WHERE dag_id = ? AND task_id = 'clean'",
                           (DAG_ID,)).fetchall()
    assert len(runs) == 1 and runs[0][0] == "success", (runs, clean)
    assert dt.datetime.fromisoformat(runs[0][1]).replace(tzinfo=dt.timezone.utc) == tick  # the run's now
    assert clean == [(0, "success")]
    assert record_ids(spark, f"{CATALOG}.{TABLE}") == lake["expected"]
    # the package shipped to Spark (--py-files) was built by the clean task in its own scratch space
    # and removed with it: nothing of it is left where earlier versions kept it
    assert not (d.home / "lakecleaner").exists()
