"""Commit times kept for expired snapshots that still add live files (lakecleaner.core.append_times)."""
from pathlib import Path

import pytest

from lakecleaner.core.append_times import AppendTimesError, read_append_times, record_append_times
from lakecleaner.core.config import CatalogConfig, LakecleanerConfig


@pytest.fixture
def cfg(tmp_path):
    return LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")))


def test_times_come_from_the_table_or_the_record_and_only_live_ids_are_kept(cfg):
    assert record_append_times(cfg, "ns.t", [1, 2], {1: 100, 2: 200, 3: 300}) == {1: 100, 2: 200}
    # snapshot 1 has since been expired: its time comes from the record; 2 no longer adds a file
    assert record_append_times(cfg, "ns.t", [1, 4], {4: 400}) == {1: 100, 4: 400}
    assert read_append_times(cfg, "ns.t") == {1: 100, 4: 400}
    assert read_append_times(cfg, "ns.other") == {}


@pytest.mark.parametrize("content", ['{"1": "not a time"', "", "[1, 2]", '{"1": "100"}', '{"x": 100}', '{"1": true}'])
def test_a_corrupt_record_is_moved_aside_and_fails_the_tables_maintenance_loudly(cfg, caplog, content):
    """Never replaced: its times are kept next to it for an operator, the table's maintenance fails
    naming the table and the document (before it expires a snapshot), the other tables go on."""
    directory = Path(cfg.state_root) / "append_times"
    record_append_times(cfg, "ns.other", [1], {1: 100})
    (directory / "ns.t.json").write_text(content)
    assert read_append_times(cfg, "ns.t") == {}  # a reader says so and goes on
    assert "ns.t: unreadable append times" in caplog.text
    with pytest.raises(AppendTimesError, match=r"^table ns\.t: append times \S*append_times/ns\.t\.json are corrupt"
                       ) as err:
        record_append_times(cfg, "ns.t", [5], {5: 500})
    kept = [p for p in directory.iterdir() if p.name.startswith("ns.t.json.corrupt-")]
    assert len(kept) == 1 and kept[0].read_text() == content and str(kept[0]) in str(err.value)
    assert not (directory / "ns.t.json").exists()  # nothing replaced it
    assert record_append_times(cfg, "ns.other", [1, 2], {2: 200}) == {1: 100, 2: 200}
    assert record_append_times(cfg, "ns.t", [5], {5: 500}) == {5: 500}  # the next maintenance starts anew
    assert kept[0].read_text() == content


def test_a_record_that_cannot_be_read_at_all_stays_where_it_is(cfg, monkeypatch):
    from lakecleaner.core import append_times

    record_append_times(cfg, "ns.t", [1], {1: 100})

    def unreachable(cfg, name):
        raise OSError("the object store is unreachable")

    monkeypatch.setattr(append_times, "read_document", unreachable)
    with pytest.raises(AppendTimesError, match=r"^table ns\.t: append times .* cannot be read \(OSError"):
        record_append_times(cfg, "ns.t", [1], {})
    monkeypatch.undo()
    assert read_append_times(cfg, "ns.t") == {1: 100}


def test_a_table_name_never_becomes_a_path(cfg):
    with pytest.raises(ValueError, match="invalid table name"):
        record_append_times(cfg, "../../etc", [1], {1: 1})


def test_two_maintenances_of_one_table_keep_each_others_times(cfg, monkeypatch):
    """A backfill's maintenance read the document before a scheduled run's maintenance saved the
    time of a snapshot it then expired: writing back what it read would drop that time."""
    import lakecleaner.core.append_times as at

    record_append_times(cfg, "ns.t", [1], {1: 100})  # what the first reader sees
    stale = at._recorded_to_write(cfg, "ns.t")
    record_append_times(cfg, "ns.t", [1, 2], {1: 100, 2: 200})  # the other run saves 2, then expires it
    reads = iter([stale])
    real = at._recorded_to_write
    monkeypatch.setattr(at, "_recorded_to_write", lambda c, t: next(reads, None) or real(c, t))
    assert record_append_times(cfg, "ns.t", [1, 2, 3], {1: 100, 3: 300}) == {1: 100, 2: 200, 3: 300}
    assert read_append_times(cfg, "ns.t") == {1: 100, 2: 200, 3: 300}
