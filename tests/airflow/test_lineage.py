"""What the clean task tells Airflow's OpenLineage provider, from an application's outcomes: only
committed compactions are datasets, and a table whose metadata cannot be read keeps its default name.
The events of a real run (``airflow dags test`` of the installed wheel, with the provider's file
transport) are read in tests/test_installed_wheel.py. Skipped where the provider is not installed."""
from __future__ import annotations

import pytest

from lakecleaner.core.config import load_config

pytest.importorskip("airflow.providers.openlineage")

pytestmark = pytest.mark.airflow


def test_only_committed_compactions_are_reported_and_an_unreadable_table_keeps_its_default_name(tmp_path):
    from lakecleaner.airflow.lineage import COMPACTION_FACET, compaction_lineage

    config = tmp_path / "lake.yaml"
    config.write_text(f"catalog:\n  name: nolake\n  type: hadoop\n  warehouse: {tmp_path / 'wh'}\n")
    compact = {"status": "committed", "records_read": 9, "records_kept": 3, "checkpoint": {"0": 8}}
    outcomes = [{"table": "a.done", "status": "ok", "steps": {"compact": compact}},
                {"table": "a.dry", "status": "ok", "steps": {"compact": {**compact, "status": "dry_run"}}},
                {"table": "a.invalid", "status": "failed", "steps": {"compact": compact}}]
    got = compaction_lineage(load_config(config), outcomes)
    assert [(d.namespace, d.name) for d in got.outputs] == [("file", f"{tmp_path / 'wh'}/a/done")]  # no metadata
    assert [(t.table, t.records_read, t.records_kept) for t in got.run_facets[COMPACTION_FACET].tables] == [
        ("a.done", 9, 3)]
    assert compaction_lineage(load_config(config), outcomes[1:]).run_facets == {}
