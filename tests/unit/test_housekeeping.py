"""The cleaner's own documents are pruned past their retention (the data-quality results, rows of
their table now, are pruned by the Spark application: tests/spark/test_run_history_maintenance.py)."""
import os
import time
from pathlib import Path

from lakecleaner.core.config import CatalogConfig, CleanerConfig, LakecleanerConfig
from lakecleaner.core.housekeeping import DAY_MS, prune_documents
from lakecleaner.core.state import write_document


def _aged(cfg, name: str, days: float, doc: dict) -> Path:
    path = Path(write_document(cfg, name, doc).removeprefix("file:"))
    stamp = time.time() - days * 86_400
    os.utime(path, (stamp, stamp))
    return path


def test_old_documents_go(tmp_path):
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")),
                            cleaner=CleanerConfig(own_files_retention_days=30))
    old_metrics = _aged(cfg, "metrics/1.json", 40, {"now_ms": 1})
    new_metrics = _aged(cfg, "metrics/2.json", 1, {"now_ms": 2})
    old_report = _aged(cfg, "batches/run1/app-0.json", 40, {})
    # results earlier versions kept as files: no longer read, so none is kept for being a table's newest
    legacy = [_aged(cfg, f"quality/results/{name}", days, {"table": "a.t", "now_ms": 1})
              for name, days in (("a.t/r1.json", 50), ("a.t/r2.json", 45), ("b.t/r1.json", 40), ("b.t/r2.json", 2))]
    removed = prune_documents(cfg, int(time.time() * 1000))
    assert not old_metrics.exists() and new_metrics.exists() and not old_report.exists()
    assert [p.exists() for p in legacy] == [False, False, False, True]
    assert removed["metrics"] == 1 and removed["quality_results"] == 3 and removed["application_reports"] >= 1
    assert DAY_MS == 86_400_000


def test_state_of_a_table_unlisted_for_the_retention_goes(tmp_path):
    """Failure counts and uncleanable marks of a dropped table go once it has been missing from every
    listing for the retention (so a table recreated under its name starts clean); a listed table's
    stay however old, and so do those of a table a listing missed for less than that."""
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")),
                            cleaner=CleanerConfig(own_files_retention_days=30))
    dropped = [_aged(cfg, "state/a.dropped.json", 40, {"failed_runs": 3}),
               _aged(cfg, "state/a.dropped.clear.json", 35, {"failed_runs_forgiven": 0})]
    listed = _aged(cfg, "state/a.listed.json", 400, {"failed_runs": 3})  # uncleanable: never rewritten
    flaky = _aged(cfg, "state/a.flaky.json", 400, {"failed_runs": 3})  # missed by a listing now and then
    named_clear = _aged(cfg, "state/a.clear.json", 40, {})  # table a.clear's, not a clear document
    now = int(time.time() * 1000)
    everything = [*dropped, listed, flaky, named_clear]
    for listing in (None, []):
        assert prune_documents(cfg, now, listing)["state_of_unlisted_tables"] == 0
    assert prune_documents(cfg, now, ["a.listed", "a.clear"])["state_of_unlisted_tables"] == 0  # missing since now
    assert prune_documents(cfg, now + 20 * DAY_MS, ["a.listed", "a.clear", "a.flaky"])["state_of_unlisted_tables"] == 0
    assert all(p.exists() for p in everything)
    assert prune_documents(cfg, now + 31 * DAY_MS, ["a.listed", "a.clear"])["state_of_unlisted_tables"] == 1
    assert not any(p.exists() for p in dropped)
    assert all(p.exists() for p in [listed, flaky, named_clear])  # flaky: missing for 11 days only
    assert prune_documents(cfg, now + 62 * DAY_MS, ["a.listed"])["state_of_unlisted_tables"] == 1
    assert not flaky.exists() and named_clear.exists() and listed.exists()  # a.clear: missing since day 31


def test_a_backfill_or_a_bad_absence_record_never_hastens_a_state_removal(tmp_path):
    """A backfill's now lies in the past: the absence it sees starts now, not then. An absence
    record that is not this cleaner's restarts every clock and stops no other pruning."""
    from lakecleaner.core.housekeeping import UNLISTED_TABLES

    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")),
                            cleaner=CleanerConfig(own_files_retention_days=30))
    marked = _aged(cfg, "state/a.marked.json", 400, {"failed_runs": 3})
    now = int(time.time() * 1000)
    assert prune_documents(cfg, now - 40 * DAY_MS, ["a.other"])["state_of_unlisted_tables"] == 0  # a backfill
    assert prune_documents(cfg, now, ["a.other"])["state_of_unlisted_tables"] == 0
    assert marked.exists()
    record = Path(write_document(cfg, UNLISTED_TABLES, {}).removeprefix("file:"))
    record.write_text("[1]")
    old_metrics = _aged(cfg, "metrics/1.json", 40, {"now_ms": 1})
    removed = prune_documents(cfg, now + 31 * DAY_MS, ["a.other"])
    assert removed["state_of_unlisted_tables"] == 0 and marked.exists() and not old_metrics.exists()
    assert prune_documents(cfg, now + 62 * DAY_MS, ["a.other"])["state_of_unlisted_tables"] == 1


def test_a_long_listed_tables_state_stays_and_an_unlisted_ones_goes(tmp_path):
    """A table name too long for a file has its state under a shortened name (state.document_name):
    the name it is listed under still finds it."""
    from lakecleaner.core.state import StateStore, document_name

    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")),
                            cleaner=CleanerConfig(own_files_retention_days=30))
    listed, dropped = "a." + "t" * 240 + "1", "a." + "t" * 240 + "2"
    for table in (listed, dropped):
        StateStore(cfg).clear(table)
    state = Path(cfg.state_root) / "state"
    for path in state.iterdir():
        os.utime(path, (time.time() - 400 * 86_400,) * 2)
    now = int(time.time() * 1000)
    assert prune_documents(cfg, now, [listed])["state_of_unlisted_tables"] == 0
    assert prune_documents(cfg, now + 31 * DAY_MS, [listed])["state_of_unlisted_tables"] == 1
    assert [p.name for p in state.iterdir()] == [document_name(listed, ".clear")]


def test_state_of_another_deployments_namespaces_is_never_pruned(tmp_path):
    """Two deployments share a state root, each cleaning its own namespaces: neither prunes the
    other's uncleanable marks, nor restarts the other's absence clocks."""
    from lakecleaner.core.state import StateStore

    root = str(tmp_path / "shared")
    ours, theirs = (LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / name)),
                                      cleaner=CleanerConfig(own_files_retention_days=30, state_location=root,
                                                            namespaces=namespaces, uncleanable_after_failures=1))
                    for name, namespaces in (("wa", ("a",)), ("wb", ("b", "c"))))
    for table in ("a.dropped", "b.marked", "c.dropped"):
        StateStore(ours).record_failure(table, "boom", now_ms=1)
    state = Path(root) / "state"
    for path in state.iterdir():
        os.utime(path, (time.time() - 400 * 86_400,) * 2)
    now = int(time.time() * 1000)
    assert prune_documents(ours, now, ["a.listed"])["state_of_unlisted_tables"] == 0
    assert prune_documents(theirs, now + 10 * DAY_MS, ["b.marked"])["state_of_unlisted_tables"] == 0
    assert prune_documents(ours, now + 31 * DAY_MS, ["a.listed"])["state_of_unlisted_tables"] == 1
    assert sorted(p.name for p in state.iterdir()) == ["b.marked.json", "c.dropped.json"]
    assert StateStore(theirs).get("b.marked").uncleanable
    assert prune_documents(theirs, now + 41 * DAY_MS, ["b.marked"])["state_of_unlisted_tables"] == 1
    assert sorted(p.name for p in state.iterdir()) == ["b.marked.json"]


def test_pruning_never_follows_nor_removes_a_symbolic_link(tmp_path):
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")),
                            cleaner=CleanerConfig(own_files_retention_days=30))
    outside = tmp_path / "outside"
    for name in ("r1.json", "r2.json", "state.json", "report.json"):
        (outside / "dir").mkdir(parents=True, exist_ok=True)
        (outside / "dir" / name).write_text("{}")
    old = time.time() - 400 * 86_400
    for path in (outside / "dir").iterdir():
        os.utime(path, (old, old))
    base = Path(cfg.state_root)
    links = {base / "quality" / "results" / "a.t": outside / "dir", base / "metrics": outside / "dir",
             base / "batches" / "run-link": outside / "dir", base / "state" / "a.gone.json": outside / "dir" / "state.json",
             base / "batches" / "run-real" / "escape": outside / "dir"}
    for link, target in links.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    stale = _aged(cfg, "batches/run-old/app-0.json", 40, {})
    _aged(cfg, "batches/run-real/app-0.json", 40, {})
    now = int(time.time() * 1000)
    for later in (0, 31, 62):
        prune_documents(cfg, now + later * DAY_MS, ["a.listed"])
    assert not stale.exists() and all(link.is_symlink() for link in links)
    assert sorted(p.name for p in (outside / "dir").iterdir()) == ["r1.json", "r2.json", "report.json", "state.json"]
