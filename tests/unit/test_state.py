"""The cleaner's state documents: one writer each, written whole, an unreadable one named."""
import json
import os
import threading
from pathlib import Path

import pytest

from lakecleaner.core import scheduler
from lakecleaner.core.config import CatalogConfig, CleanerConfig, LakecleanerConfig
from lakecleaner.core.state import StateError, StateStore, write_document


@pytest.fixture
def cfg(tmp_path):
    return LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")),
                             cleaner=CleanerConfig(uncleanable_after_failures=2))


def _state_dir(cfg) -> Path:
    return Path(cfg.state_root.removeprefix("file:")) / "state"


def test_failures_mark_and_a_clear_forgives_them(cfg):
    store = StateStore(cfg)
    assert store.record_failure("a.t", "boom 1", now_ms=10).consecutive_failures == 1
    marked = store.record_failure("a.t", "boom 2", now_ms=20)
    assert marked.uncleanable and marked.marked_at_ms == 20 and "boom 2" in store.uncleanable_reason("a.t")
    cleared = store.clear("a.t")
    assert not cleared.uncleanable and cleared.consecutive_failures == 0
    assert store.record_failure("a.t", "boom 3", now_ms=30).consecutive_failures == 1  # counted from zero
    assert store.record_success("a.t", now_ms=40).consecutive_failures == 0


def test_a_clear_landing_inside_an_applications_record_loses_neither(cfg):
    """The application records a failure (read, count, write); the operator's clear lands between
    its read and its write. The application and the operator write different documents, so the
    clear survives and the new failure counts once after it."""
    app, operator = StateStore(cfg), StateStore(cfg)
    app.record_failure("a.t", "boom 1", now_ms=10)
    app.record_failure("a.t", "boom 2", now_ms=20)
    assert app.get("a.t").uncleanable
    write = app._write

    def clear_then_write(table, outcomes):
        operator.clear(table)
        write(table, outcomes)

    app._write = clear_then_write
    app.record_failure("a.t", "boom 3", now_ms=30)
    state = StateStore(cfg).get("a.t")
    assert state.consecutive_failures == 1 and not state.uncleanable and state.last_error == "boom 3"


def test_concurrent_writers_never_leave_a_half_written_document(cfg):
    stop, errors = threading.Event(), []

    def write():
        big = {"x": "y" * 200_000}
        while not stop.is_set():
            write_document(cfg, "state/a.t.json", big)

    def read():
        while not stop.is_set():
            try:
                text = (_state_dir(cfg) / "a.t.json").read_text()
                json.loads(text)
            except FileNotFoundError:
                pass
            except ValueError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=write), threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    threading.Event().wait(1.0)
    stop.set()
    for t in threads:
        t.join()
    assert errors == [] and not [p for p in _state_dir(cfg).iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("content", ["", "{ half", "[]", '{"failed_runs": "x", "surprise": 1}'])
def test_an_unreadable_state_is_that_tables_error_and_a_clear_repairs_it(cfg, content):
    store = StateStore(cfg)
    store.record_failure("a.t", "boom", now_ms=10)
    (_state_dir(cfg) / "a.t.json").write_text(content)
    with pytest.raises(StateError, match=r"^table a\.t: cleaner state "):
        store.get("a.t")
    assert store.record_failure("a.t", "again", now_ms=20).consecutive_failures == 1  # replaced, loudly
    (_state_dir(cfg) / "a.t.json").write_text(content)
    store.clear("a.t")
    assert store.get("a.t").consecutive_failures == 0


def test_a_table_name_never_becomes_a_path(cfg, tmp_path):
    for bad in ("../../../outside/owned", "a/b.c", "a.b.c", "a..b", "", "a.b\n"):
        with pytest.raises(ValueError, match="invalid table name"):
            StateStore(cfg).clear(bad)
    assert not (tmp_path / "outside").exists() and not any(tmp_path.rglob("owned*"))


def test_time_since_last_success_is_read_on_the_runs_clock(cfg):
    """Success is stamped with the run's now (its interval end, before the wall clock), as the
    metrics read it: a table cleaned in this run is 0 ms old, never negative."""
    now_ms = 1_000_000
    scheduler.record_outcome(cfg, "a.t", True, "", now_ms)
    from lakecleaner.airflow import metrics

    states = scheduler.table_states(cfg, ["a.t"])
    from lakecleaner.core.records import RunVerdict

    figures = metrics.run_metrics(RunVerdict(), {t: st.last_success_ms for t, st in states.items()}, now_ms)
    assert metrics.Metric(metrics.TIME_SINCE_LAST_RUN_MS, metrics.GAUGE, 0, "a.t") in figures
    scheduler.record_outcome(cfg, "a.t", True, "", now_ms - 500)  # a backfill's older interval
    assert StateStore(cfg).get("a.t").last_success_ms == now_ms


def test_a_state_written_before_the_split_reads_as_it_was(cfg):
    _state_dir(cfg).mkdir(parents=True)
    (_state_dir(cfg) / "a.t.json").write_text(json.dumps(
        {"consecutive_failures": 3, "uncleanable": True, "marked_at_ms": 5, "last_error": "old", "last_failure_ms": 5,
         "last_success_ms": None, "last_orphan_cleanup_ms": 7}))
    state = StateStore(cfg).get("a.t")
    assert state.consecutive_failures == 3 and state.uncleanable and state.last_orphan_cleanup_ms == 7
    assert os.path.exists(_state_dir(cfg) / "a.t.json")


@pytest.mark.parametrize("length", [200, 220, 240, 255])
def test_a_table_name_near_the_limit_has_its_state_written_and_read(cfg, length):
    """Each document's name and its temporary name fit a file name (255 bytes); a long name keeps
    a readable prefix and a hash, so two long names that share a prefix keep separate state."""
    from lakecleaner.core.state import NAME_MAX, document_name

    table, twin = "ns." + "t" * (length - 4) + "a", "ns." + "t" * (length - 4) + "b"
    store = StateStore(cfg)
    store.record_failure(table, "boom", now_ms=10)
    store.clear(twin)
    store.record_failure(twin, "bang", now_ms=20)
    assert store.get(table).last_error == "boom" and store.get(twin).last_error == "bang"
    assert store.get(table).consecutive_failures == store.get(twin).consecutive_failures == 1
    names = [p.name for p in _state_dir(cfg).iterdir()]
    assert len(names) == 3 and all(len(n.encode()) <= NAME_MAX for n in names)
    assert all(n.startswith("ns.tttt") for n in names)
    assert document_name("a.t") == "a.t.json" and document_name("a.t", ".clear") == "a.t.clear.json"


def test_a_document_name_never_leaves_the_state_root(cfg, tmp_path):
    for bad in ("../outside.json", "batches/../../outside.json", "/outside.json", "batches//x.json", "a\0.json"):
        with pytest.raises(ValueError, match="not a relative path under the state root"):
            write_document(cfg, bad, {})
    assert not (tmp_path / "outside.json").exists() and not Path("/outside.json").exists()


def test_a_clear_moves_an_unreadable_state_aside_even_a_directory(cfg):
    """evaluate's advice for an unreadable state is `clear-uncleanable`: it must work for whatever is
    in the way (a directory failed with IsADirectoryError), keeping what was there beside it."""
    store = StateStore(cfg)
    store.record_failure("a.t", "boom", now_ms=10)
    (_state_dir(cfg) / "a.t.json").unlink()
    (_state_dir(cfg) / "a.t.json").mkdir()
    with pytest.raises(StateError):
        store.get("a.t")
    assert store.clear("a.t").consecutive_failures == 0
    assert [p.is_dir() for p in _state_dir(cfg).glob("a.t.json.corrupt-*")] == [True]  # kept, renamed
