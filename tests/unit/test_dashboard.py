"""The Lake Cleaner UI's view model (lakecleaner.airflow.dashboard) on hand-made inputs: no Spark, no Airflow."""
import pytest

from lakecleaner.core.config import LONG_MAX
from lakecleaner.airflow.dashboard import (FRESHNESS_RULE, MAX_PAGE_SIZE, TABLE_HISTORY_ROWS, Page, PageError, build_overview, build_table, run_point, valid_table_name, validation_point)


def _ev(table, **kw):
    return {"table": table, "status": "eligible", "reason": "r", "strategy": "offset", "dirty_ratio": 0.6,
            "must_clean_ratio": 0.0, "max_compaction_delay_ms": 0, "min_cleanable_dirty_ratio": 0.5,
            "max_compaction_lag_ms": LONG_MAX, **kw}


def _run(table, run_id, now_ms, **kw):
    return {"run_id": run_id, "table_name": table, "status": "committed", "dry_run": False, "now_ms": now_ms,
            "records_read": 10, "dirty_records_in_run": 4, "removed_superseded": 3, "removed_expired_tombstones": 1,
            "quarantined": 0, "bytes_read": 100, "bytes_written": 10, "duration_ms": 1000, **kw}


def test_table_names_are_namespace_dot_table_of_identifiers():
    assert valid_table_name("shop.orders") and valid_table_name("_a.b_2")
    for bad in ("shop", "a.b.c", "shop.or-ders", "../etc.passwd", "shop.orders/x", "1a.b", "a.", ".b", "a.b\n", "",
                None, "a.b\u0661", "\u00e9t\u00e9.b"):
        assert not valid_table_name(bad), bad
    # the names the cleaner cleans (config.IDENT), long ones too: the page used to cap each part at 128
    assert valid_table_name("a" * 129 + ".b")


def test_run_point_derives_totals_and_the_dirty_share_proxy():
    p = run_point(_run("t.a", "r1", 0))
    assert p["removed_total"] == 4 and p["dirty_share_read"] == 0.4 and p["at"] == "1970-01-01 00:00:00 UTC"
    failed = run_point({"run_id": "r2", "status": "failed", "error": "boom", "now_ms": 5})
    assert failed["removed_total"] == 0 and failed["dirty_share_read"] is None


def test_validation_point_reads_the_freshness_delay():
    ok = validation_point({"run_name": "x", "now_ms": 1, "success": True,
                           "rules": [{"rule": FRESHNESS_RULE.name, "success": True, "offending": []}]})
    assert ok["delay_ms"] == 0 and ok["failed"] == []
    late = validation_point({"run_name": "y", "now_ms": 1, "success": False, "rules": [
        {"rule": FRESHNESS_RULE.name, "success": False, "severity": "fail", "description": "d",
         "offending": [{"max_compaction_delay_ms": 1234}]}]}, "validations/a/b/y/t/p.html")
    assert late["delay_ms"] == 1234 and late["failed"][0]["rule"] == FRESHNESS_RULE.name
    assert late["docs_page"] == "validations/a/b/y/t/p.html"
    assert validation_point({"rules": []})["delay_ms"] is None  # no freshness rule: nothing to chart


def test_overview_takes_each_tables_newest_run_and_validation():
    history = [_run("t.a", "new", 2), _run("t.b", "b1", 2), _run("t.a", "old", 1)]  # newest first
    results = [{"table": "t.a", "run_name": "v2", "now_ms": 2, "success": False, "rules": []},
               {"table": "t.a", "run_name": "v1", "now_ms": 1, "success": True, "rules": []}]
    rows = build_overview([_ev("t.b"), _ev("t.a", max_compaction_lag_ms=60_000, max_compaction_delay_ms=5)],
                          history, results, {"t.a": {"uncleanable": True, "consecutive_failures": 3}},
                          {"t.a": {"v2": "validations/t/a/v2/x/p.html"}})
    a, b = rows  # sorted by table
    assert a["table"] == "t.a" and a["last_run"]["run_id"] == "new" and a["quality"]["run_name"] == "v2"
    assert a["quality"]["docs_page"] == "validations/t/a/v2/x/p.html"
    assert a["uncleanable"] and a["consecutive_failures"] == 3
    assert a["max_compaction_lag_ms"] == 60_000 and not a["within_bound"]
    assert b["quality"] is None and b["max_compaction_lag_ms"] is None and b["within_bound"]


def test_table_view_charts_runs_oldest_first_without_dry_runs():
    history = [_run("t.a", "r3", 3), _run("t.a", "r2", 2, status="dry_run", dry_run=True), _run("t.a", "r1", 1)]
    view = build_table(_ev("t.a"), history, [], {}, {})
    assert [r["run_id"] for r in view["runs"]] == ["r3", "r2", "r1"]  # the listed page: newest first
    assert [r["run_id"] for r in view["charted_runs"]] == ["r1", "r3"]
    assert view["last_run"]["run_id"] == "r3" and view["validations"] == []


def test_table_view_lists_one_page_of_runs_and_charts_the_newest():
    history = [_run("t.a", f"r{i}", i) for i in range(TABLE_HISTORY_ROWS + 10, 0, -1)]  # newest first
    view = build_table(_ev("t.a"), history, [], {}, {}, Page(2, 4, len(history)))
    assert [r["run_id"] for r in view["runs"]] == [f"r{i}" for i in range(TABLE_HISTORY_ROWS + 6, TABLE_HISTORY_ROWS + 2, -1)]
    assert view["runs_page"] == {"page": 2, "size": 4, "total": TABLE_HISTORY_ROWS + 10, "pages": 53,
                                 "previous": 1, "next": 3}
    assert len(view["charted_runs"]) == TABLE_HISTORY_ROWS and view["charted_runs"][-1]["run_id"] == history[0]["run_id"]
    assert view["last_run"]["run_id"] == history[0]["run_id"]  # whichever page is listed


def test_pages_cover_every_item_once_and_say_where_they_lead():
    items = list(range(7))
    pages = [Page(n, 3, len(items)) for n in (1, 2, 3)]
    assert [p.items(items) for p in pages] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [(p.previous, p.next, p.pages) for p in pages] == [(None, 2, 3), (1, 3, 3), (2, None, 3)]
    exact = Page(2, 3, 6)  # the last page is full: no next
    assert exact.items(items[:6]) == [3, 4, 5] and exact.next is None and exact.pages == 2
    past = Page(9, 3, len(items))  # past the end: empty, and its previous link leads to the last page
    assert past.items(items) == [] and past.previous == 3 and past.next is None
    empty = Page(1, 50, 0)
    assert empty.items([]) == [] and empty.pages == 1 and (empty.previous, empty.next) == (None, None)
    assert Page(1, MAX_PAGE_SIZE, 1).size == MAX_PAGE_SIZE
    for number, size in ((0, 3), (-1, 3), (1, 0), (1, MAX_PAGE_SIZE + 1)):
        with pytest.raises(PageError, match=f"page={number}, size={size}"):
            Page(number, size, 7)


def _cfg(tmp_path):
    from lakecleaner.core.config import CatalogConfig, LakecleanerConfig

    return LakecleanerConfig(catalog=CatalogConfig(name="lake", type="hadoop", warehouse=str(tmp_path / "warehouse")))


def _evaluation(table, **kw):
    from lakecleaner.core.evaluate import Evaluation

    return Evaluation(table, kw.pop("status", "eligible"), kw.pop("reason", "dirty"), strategy="offset", **kw)


def test_pages_present_the_recorded_evaluation_without_reading_any_table(tmp_path):
    """No table of this evaluation exists in the (empty) warehouse: the pages still show what the
    evaluate task recorded, and say when it was evaluated."""
    from lakecleaner.airflow.dashboard import UnknownTable, load_overview, load_table
    from lakecleaner.core.scheduler import record_evaluation

    cfg = _cfg(tmp_path)
    assert load_overview(cfg)["tables"] == [] and load_overview(cfg)["evaluation"]["at"] is None
    with pytest.raises(UnknownTable, match="unknown table t.a: .*none is recorded yet"):
        load_table(cfg, "t.a")
    record_evaluation(cfg, [_evaluation(f"t.n{i}", dirty_ratio=i / 10) for i in range(5)], now_ms=86_400_000)
    first = load_overview(cfg, page=1, size=2)
    assert [r["table"] for r in first["tables"]] == ["t.n0", "t.n1"]
    assert first["page"] == {"page": 1, "size": 2, "total": 5, "pages": 3, "previous": None, "next": 2}
    assert first["evaluation"]["at"] == "1970-01-02 00:00:00 UTC"
    assert [r["table"] for r in load_overview(cfg, page=3, size=2)["tables"]] == ["t.n4"]
    assert load_overview(cfg, page=4, size=2)["tables"] == []
    view = load_table(cfg, "t.n3")
    assert view["status"] == "eligible" and view["dirty_ratio"] == 0.3 and view["runs"] == []
    assert view["evaluated"]["now_ms"] == 86_400_000
    with pytest.raises(UnknownTable, match=r"unknown table t.other: not a compacted table of the last evaluation "
                                           r"\(1970-01-02 00:00:00 UTC\)"):
        load_table(cfg, "t.other")


def test_a_recorded_evaluation_this_cleaner_did_not_write_is_an_error_naming_it(tmp_path):
    from lakecleaner.airflow.dashboard import load_overview
    from lakecleaner.core.scheduler import EVALUATION_DOCUMENT
    from lakecleaner.core.state import write_document

    cfg = _cfg(tmp_path)
    write_document(cfg, EVALUATION_DOCUMENT, {"now_ms": 1, "tables": [{"status": "eligible"}]})
    with pytest.raises(ValueError, match=f"recorded evaluation .*{EVALUATION_DOCUMENT} is not one this cleaner wrote"):
        load_overview(cfg)


def test_the_delete_figures_appear_beside_the_dirty_ratio_and_old_records_show_none(tmp_path):
    """The index line and the table's page carry the evaluation's delete files, their bytes and
    deleted-record share (with maintenance's threshold); an evaluation recorded before them has none."""
    from lakecleaner.airflow.dashboard import build_row, load_overview, load_table
    from lakecleaner.core.deletefiles import REWRITE_DELETE_RATIO
    from lakecleaner.core.scheduler import record_evaluation

    cfg = _cfg(tmp_path)
    record_evaluation(cfg, [_evaluation("t.v3", delete_files=3, delete_bytes=126, delete_ratio=0.25)], now_ms=1)
    [row] = load_overview(cfg)["tables"]
    assert (row["dirty_ratio"], row["delete_files"], row["delete_bytes"], row["delete_ratio"]) == (0.0, 3, 126, 0.25)
    view = load_table(cfg, "t.v3")
    assert (view["delete_files"], view["delete_bytes"], view["rewrite_delete_ratio"]) == (3, 126, REWRITE_DELETE_RATIO)
    old = build_row(_ev("t.old"), None, None, None)
    assert (old["delete_files"], old["delete_bytes"], old["delete_ratio"]) == (None, None, None)
