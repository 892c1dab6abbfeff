"""The DAG's late tasks (summary, announce) open only paths they derive: the config the DAG was
configured with ([lakecleaner] config) and each application's report, named from the run id and the
application's index. XCom, which users with XCom edit rights can change, carries ids and counts: a
config path and a report path planted in it are never opened.

A real DAG run in Airflow's database (``dag.test``, every task marked done), XComs written as an
XCom editor would, then the late tasks run through ``airflow tasks test`` in this process, where an
audit hook sees every file they open."""
from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import pytest

from lakecleaner.core import scheduler
from lakecleaner.core.config import load_config
from lakecleaner.core.state import write_document

pytestmark = [pytest.mark.airflow, pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")]

COMPACTED = {"status": "committed", "records_read": 20, "records_kept": 11, "removed_superseded": 9,
             "removed_expired_tombstones": 0, "quarantined": 0, "bytes_read": 1000, "bytes_written": 200,
             "duration_ms": 1500}


class _Opens:
    """The paths ``open`` was called with while switched on (an audit hook cannot be removed)."""

    def __init__(self):
        self.on, self.paths = False, []

    def __call__(self, event, args):
        if self.on and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            self.paths.append(os.fsdecode(args[0]))


_opens = _Opens()
sys.addaudithook(_opens)


def _config(base: Path, catalog: str) -> Path:
    base.mkdir()
    path = base / "lakecleaner.yaml"
    path.write_text(f"catalog:\n  name: {catalog}\n  type: hadoop\n  warehouse: {base / 'warehouse'}\n")
    return path


def _report(table: str) -> dict:
    return {"finished": True, "in_progress": [], "outcomes": [
        {"table": table, "status": "ok", "steps": {"compact": COMPACTED, "validate": {"success": True}}}]}


@pytest.fixture
def dag_config(tmp_path, monkeypatch, airflow_db):
    path = _config(tmp_path / "dag", "latetest")
    monkeypatch.setenv("AIRFLOW__LAKECLEANER__CONFIG", str(path))
    return path


def _run_task(task_id: str, run_id: str) -> None:
    from airflow.cli import cli_parser

    args = cli_parser.get_parser().parse_args(["tasks", "test", "lakecleaner", task_id, run_id])
    args.func(args)


def _xcom(run_id: str, task_id: str, key: str = "return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run_id, dag_ids="lakecleaner", task_ids=task_id,
                                                 key=key)).first()
        return XComModel.deserialize_value(row) if row is not None else None


def test_the_late_tasks_open_no_path_taken_from_xcom(dagbag, dag_config, tmp_path):
    from airflow.models.xcom import XComModel

    tick = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.timezone.utc)
    dr = dagbag.dags["lakecleaner"].test(logical_date=tick, mark_success_pattern=".*")
    honest = load_config(dag_config)
    derived = write_document(honest, scheduler.report_name(dr.run_id, 0), _report("t.honest"))
    planted_config = _config(tmp_path / "planted", "planted")
    planted = load_config(planted_config)
    planted_report = write_document(planted, "elsewhere/app-0.json", _report("t.planted"))
    now_ms = int(tick.timestamp() * 1000)
    edited = {  # what a user with XCom edit rights leaves for the late tasks
        "return_value": [{"name": "t.honest"}], "evaluations": [],
        "applications": [{"index": 0, "tables": ["t.honest"], "priorities": [1], "work_bytes": 1, "now_ms": now_ms,
                          "config": str(planted_config), "report": "elsewhere/app-0.json"}]}
    for key, value in edited.items():
        XComModel.set(key, value, dag_id="lakecleaner", task_id="evaluate", run_id=dr.run_id,
                      serialize=False)  # stored as the task SDK stores a push (plain JSON)

    _opens.paths.clear()
    _opens.on = True
    try:
        _run_task("announce", dr.run_id)
        _run_task("summary", dr.run_id)
    finally:
        _opens.on = False
    opened = {str(Path(p).resolve()) for p in _opens.paths}
    assert str(planted_config.resolve()) not in opened and str(Path(planted_report).resolve()) not in opened
    assert str(dag_config.resolve()) in opened and str(Path(derived).resolve()) in opened
    # from the derived report; named by the DAG config's catalog (its warehouse), not the planted one's
    assert _xcom(dr.run_id, "announce") == [f"iceberg://localhost{honest.catalog.warehouse}/t/honest"]
    summary = _xcom(dr.run_id, "summary", "report")
    assert [(row["table"], row["status"]) for row in summary["tables"]] == [("t.honest", "ok")]
