"""No shared local disk (issue 35, item 3): a DAG run in which every task runs as in a pod of its own
(its own HOME, TMPDIR and working directory, JVM temporary files and Spark's scratch space there,
all deleted when the task ends; Airflow reached through its Execution API only) cleans and validates
its tables, and writes nothing outside the warehouse with the state root, those per-task directories
and Airflow's own home (its metadata database and logs, the scheduler's and the API server's).

The run (tests/airflow/isolated_dag_run.py) happens in a private mount namespace whose /tmp, /var/tmp,
/dev/shm and $HOME are empty file systems of its own, so that the listing before and after shows
what this run wrote there and nothing another process of the machine did; it needs root or
unprivileged user namespaces (``unshare``). The lake is built beforehand by this test's Spark session
(isolated_dag_run.build_lake) and bound into the namespace, writable, at the same path.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from isolated_dag_run import build_lake
from lakecleaner_dev.jvm_archive import archive_in

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "isolated_dag_run.py"
MARKER = "LAKECLEANER_ISOLATION_REPORT "
# Fresh, empty file systems on the shared temporary directories and on $HOME. What the run reads
# under them (the Python installation pyenv keeps under $HOME; a checkout or its venv under /tmp, as a
# CI clone may be) is bound back read-only from the directory as it was: each hidden directory is
# held open (fds 3-6) before it is covered, and its kept parts are bound from /proc/self/fd/N/...
# (--no-canonicalize: mount would otherwise resolve that path to the covered one's name). A line
# ``rw fd relative-path`` is bound writable: the lake, which the run cleans.
HIDDEN = ("/tmp", "/var/tmp", "/dev/shm")  # then $HOME: fds 3, 4, 5, 6
MOUNTS = """set -e
exec 3</tmp 4</var/tmp 5</dev/shm 6<"$LAKECLEANER_ISOLATION_REAL_HOME"
for d in /tmp /var/tmp /dev/shm; do mount -t tmpfs -o mode=1777,size=4g tmpfs "$d"; done
mount -t tmpfs -o mode=0700,size=1g tmpfs "$LAKECLEANER_ISOLATION_REAL_HOME"
while IFS= read -r keep; do
  [ -n "$keep" ] || continue
  case $keep in "rw "*) keep=${keep#rw }; mode=rw;; *) mode=ro;; esac
  fd=${keep%% *}; rel=${keep#* }
  case $fd in 3) cover=/tmp;; 4) cover=/var/tmp;; 5) cover=/dev/shm;; *) cover=$LAKECLEANER_ISOLATION_REAL_HOME;; esac
  mkdir -p "$cover/$rel"
  mount --no-canonicalize --bind "/proc/self/fd/$fd/$rel" "$cover/$rel"
  [ "$mode" = rw ] || mount -o remount,bind,ro "$cover/$rel" || true
done <<KEEP
$LAKECLEANER_ISOLATION_KEEP
KEEP
exec 3<&- 4<&- 5<&- 6<&-
exec "$@"
"""


def _kept(home: Path, lake: Path) -> list[str]:
    """What the run reads under a directory the namespace covers, as ``fd relative-path`` lines (fd:
    the covered directory held open, MOUNTS): the Python installation and environment, this checkout;
    and the lake it cleans, as an ``rw`` line."""
    hidden = [*(Path(d).resolve() for d in HIDDEN), home]
    wanted = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), HERE.parents[1].resolve()}
    archive = archive_in(os.environ.get("SPARK_SUBMIT_OPTS", ""))
    if archive and archive.exists():  # the tests' class archive (tests/conftest.py), read only
        wanted.add(archive.resolve().parent)
    kept = []
    for path in sorted(wanted):
        if any(path != other and path.is_relative_to(other) for other in wanted):
            continue  # inside another kept path
        kept += _bound(path, hidden)
    return kept + [f"rw {line}" for line in _bound(lake.resolve(), hidden)]


def _bound(path: Path, hidden: list[Path]) -> list[str]:
    """``fd relative-path`` of ``path`` under the innermost covered directory holding it, if any."""
    under = [h for h in hidden if path.is_relative_to(h)]
    if not under:
        return []
    cover = max(under, key=lambda h: len(h.parts))
    return [f"{3 + hidden.index(cover)} {path.relative_to(cover)}"]


def _namespace() -> list[str] | None:
    """The unshare command that gives a private mount namespace here (as root, or as a user through
    a user namespace), or None."""
    if shutil.which("unshare") is None:
        return None
    # A PID namespace too: when the run ends or is stopped, every process it started goes with it.
    private = ["--fork", "--pid", "--kill-child", "--mount-proc", "--mount", "--propagation", "private"]
    for prefix in (["unshare", *private], ["unshare", "--user", "--map-root-user", *private]):
        probe = subprocess.run([*prefix, "/bin/sh", "-c", "mount -t tmpfs tmpfs /tmp"], capture_output=True)
        if probe.returncode == 0:
            return prefix
    return None


@pytest.fixture(scope="module")
def report(spark, tmp_path_factory):
    prefix = _namespace()
    if prefix is None:
        pytest.fail("this test needs a private mount namespace: run it as root, or where `unshare --user "
                    "--map-root-user --mount` works (unprivileged user namespaces)")
    include = os.environ.get("LAKECLEANER_ISOLATION_INCLUDE", str(HERE.parents[1] / "include"))
    # SPARK_SUBMIT_OPTS: the JVM options of every test's JVMs (C1, the class archive; tests/conftest.py)
    env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "JAVA_HOME", "TZ", "SPARK_SUBMIT_OPTS")
           if k in os.environ}
    home = Path(os.path.expanduser("~")).resolve()
    lake = tmp_path_factory.mktemp("isolation_lake")
    build_lake(spark, lake)
    env.update({"LAKECLEANER_ISOLATION_REAL_HOME": str(home), "LAKECLEANER_ISOLATION_INCLUDE": include,
                "LAKECLEANER_ISOLATION_KEEP": "\n".join(_kept(home, lake)), "LAKECLEANER_ISOLATION_LAKE": str(lake),
                "PYTHONPATH": include})
    proc = subprocess.run([*prefix, "/bin/sh", "-c", MOUNTS, "sh", sys.executable, str(DRIVER)], env=env,
                          capture_output=True, text=True, timeout=840)  # pytest's own timeout is 900 s
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and lines, (proc.returncode, proc.stdout[-4000:], proc.stderr[-8000:])
    found = json.loads(lines[-1][len(MARKER):])
    print(f"\nno-shared-disk run: timings (s) {found['timings_s']}; tasks {found['tasks']}; "
          f"changes {found['changes']}; {found['files_listed']} paths listed under {found['listed']}")
    return found


def test_every_task_in_a_pod_of_its_own_and_the_run_succeeds(report):
    assert report["dag_run"] == "success", (report["task_states"], report["failed_task_logs"])
    states = report["task_states"]
    assert states["evaluate[-1]"] == states["clean[0]"] == states["summary[-1]"] == "success", states
    assert not [t for t, s in states.items() if s not in ("success", "skipped")], states
    ran = {t["task"].split(".")[0] for t in report["tasks"]}
    assert {"forget_requests", "evaluate", "clean", "summary", "announce"} <= ran
    assert all(t["exit"] == 0 and t["files"] > 0 for t in report["tasks"]), report["tasks"]
    assert report["task_dirs_left"] == []  # each task's HOME, TMPDIR and working directory went with it


def test_the_tables_are_cleaned_and_validated_with_docs_under_the_state_root(report):
    for table, seen in report["lake"].items():
        assert seen["kept_as_model"], (table, seen)
        assert "committed" in seen["history"], (table, seen)
        assert seen["quality"] and all(ok for _, ok in seen["quality"]), (table, seen)
        assert seen["docs_page_served"], (table, seen)
    assert any(p.startswith("quality/docs/validations/") for p in report["state_root_files"])


def test_nothing_is_written_outside_the_warehouse_the_task_scratch_and_airflows_home(report):
    assert report["outside_count"] == 0, report["outside"]
    assert report["changes"]["warehouse and state root"] > 0
