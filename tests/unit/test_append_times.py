"""Commit times kept for expired snapshots that still add live files (lakecleaner.append_times)."""
from pathlib import Path

import pytest

from lakecleaner.append_times import read_append_times, record_append_times
from lakecleaner.config import CatalogConfig, LakecleanerConfig


@pytest.fixture
def cfg(tmp_path):
    return LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")))


def test_times_come_from_the_table_or_the_record_and_only_live_ids_are_kept(cfg):
    assert record_append_times(cfg, "ns.t", [1, 2], {1: 100, 2: 200, 3: 300}) == {1: 100, 2: 200}
    # snapshot 1 has since been expired: its time comes from the record; 2 no longer adds a file
    assert record_append_times(cfg, "ns.t", [1, 4], {4: 400}) == {1: 100, 4: 400}
    assert read_append_times(cfg, "ns.t") == {1: 100, 4: 400}
    assert read_append_times(cfg, "ns.other") == {}


def test_an_unreadable_record_is_said_and_read_as_none(cfg, caplog):
    path = Path(cfg.state_root.removeprefix("file:")) / "append_times" / "ns.t.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"1": "not a time"')
    assert read_append_times(cfg, "ns.t") == {}
    assert "ns.t: unreadable append times" in caplog.text
    assert record_append_times(cfg, "ns.t", [5], {5: 500}) == {5: 500}  # rewritten whole
    assert read_append_times(cfg, "ns.t") == {5: 500}


def test_a_table_name_never_becomes_a_path(cfg):
    with pytest.raises(ValueError, match="invalid table name"):
        record_append_times(cfg, "../../etc", [1], {1: 1})
