"""The clean task's failure callback (lakecleaner.airflow.dag.on_clean_failure): an application that
died while cleaning tables has them counted, as it would have itself, unless the run was a dry run,
which cleans nothing and so has no table's failure to count."""
from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from lakecleaner.airflow.dag import on_clean_failure
from lakecleaner.core import scheduler
from lakecleaner.core.config import load_config
from lakecleaner.core.records import ApplicationReport
from lakecleaner.core.state import StateStore, write_document

pytestmark = pytest.mark.airflow


def test_a_dead_application_has_its_table_counted_unless_the_run_was_dry(tmp_path):
    config = tmp_path / "lake.yaml"
    config.write_text(f"catalog:\n  name: lake\n  type: hadoop\n  warehouse: {tmp_path / 'warehouse'}\n")
    cfg = load_config(config)
    write_document(cfg, scheduler.report_name("run-1", 0),
                   ApplicationReport(tables=("t.a",), now_ms=1, in_progress=("t.a",)).to_dict())
    context = {"ti": SimpleNamespace(map_index=0, run_id="run-1", task_id="clean"), "exception": "SIGKILL",
               "data_interval_end": dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc), "params": {"dry_run": True}}
    on_clean_failure(str(config), context)
    assert StateStore(cfg).get("t.a").consecutive_failures == 0
    on_clean_failure(str(config), {**context, "params": {"dry_run": False}})
    state = StateStore(cfg).get("t.a")
    assert state.consecutive_failures == 1 and "died while cleaning it" in state.last_error
