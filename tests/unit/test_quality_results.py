"""Data-quality results are rows of an Iceberg table read through pyiceberg, and the Data Docs site
lives under the state root, written and read through pyiceberg's FileIO: nothing needs a local disk
another process shares (lakecleaner.core.quality_results). The table here is written by pyiceberg
on an SQL catalog (SQLite), as the Spark application writes it on any catalog."""
from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from lakecleaner.core import quality_results as qr
from lakecleaner.core.config import CatalogConfig, CleanerConfig, LakecleanerConfig
from lakecleaner.core.state import read_document, write_document

MEMORY_IO = {"py-io-impl": "memory_fileio.MemoryFileIO"}  # tests/memory_fileio.py


@pytest.fixture
def sql_cfg(tmp_path):
    return LakecleanerConfig(catalog=CatalogConfig(
        name="lake", type="sql", warehouse=f"file://{tmp_path / 'wh'}",
        pyiceberg_properties={"uri": f"sqlite:///{tmp_path / 'catalog.db'}"}))


def _results_table(cfg):
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(cfg.catalog.name, **cfg.catalog.pyiceberg_properties_resolved())
    catalog.create_namespace(cfg.cleaner.meta_namespace)
    schema = pa.schema([("table_name", pa.string()), ("run_name", pa.string()), ("now_ms", pa.int64()),
                        ("success", pa.bool_()), ("warnings", pa.int32()), ("rules", pa.string()),
                        ("docs_page", pa.string()), ("run_history_docs_page", pa.string()),
                        ("recorded_at", pa.timestamp("us", tz="UTC"))])
    tbl = catalog.create_table(f"{cfg.cleaner.meta_namespace}.{qr.RESULTS_TABLE}", schema=schema)

    def append(*rows):
        tbl.append(pa.Table.from_pylist([{
            "table_name": t, "run_name": run, "now_ms": now, "success": True, "warnings": 0,
            "rules": rules if rules is not None else json.dumps([{"rule": "r", "success": True}]),
            "docs_page": f"validations/{t.replace('.', '/')}/{run}/x/b.html", "run_history_docs_page": None,
            "recorded_at": dt.datetime(2026, 11, 26, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=at)}
            for t, run, now, at, rules in rows], schema=schema))
    return append


def test_no_results_table_yet_is_no_results(sql_cfg):
    assert qr.list_results(sql_cfg) == [] and qr.list_results(sql_cfg, "a.t", per_table=1) == []


def test_results_are_read_newest_first_each_tables_newest_only_when_bounded(sql_cfg):
    append = _results_table(sql_cfg)
    append(*[("a.t", f"r{i}", i, i, None) for i in range(5)])
    append(("b.t", "r0", 7, 9, None))
    assert [(r["table"], r["now_ms"]) for r in qr.list_results(sql_cfg)] == [
        ("b.t", 7), ("a.t", 4), ("a.t", 3), ("a.t", 2), ("a.t", 1), ("a.t", 0)]
    assert [r["now_ms"] for r in qr.list_results(sql_cfg, per_table=1)] == [7, 4]
    assert [r["now_ms"] for r in qr.list_results(sql_cfg, "a.t", per_table=2)] == [4, 3]
    assert [r["now_ms"] for r in qr.list_results(sql_cfg, tables=["a.t", "c.t"], per_table=1)] == [4]
    assert qr.list_results(sql_cfg, tables=[]) == []
    newest = qr.list_results(sql_cfg, "a.t", per_table=1)[0]
    assert newest["rules"] == [{"rule": "r", "success": True}] and newest["success"] is True
    assert newest["docs_page"] == "validations/a/t/r4/x/b.html"
    assert newest["docs"] == f"{sql_cfg.state_root}/quality/docs/validations/a/t/r4/x/b.html"


def test_a_rerun_under_the_same_run_name_replaces_the_earlier_result(sql_cfg):
    append = _results_table(sql_cfg)
    append(("a.t", "r1", 1, 1, json.dumps([{"rule": "first"}])), ("a.t", "r1", 1, 5, json.dumps([{"rule": "rerun"}])))
    append(("a.t", "r0", 0, 0, None))
    assert [(r["run_name"], r["rules"][0]["rule"]) for r in qr.list_results(sql_cfg, "a.t")] == [
        ("r1", "rerun"), ("r0", "r")]
    assert [r["rules"][0]["rule"] for r in qr.list_results(sql_cfg, "a.t", per_table=1)] == ["rerun"]


def test_one_unreadable_result_hides_only_that_validation(sql_cfg):
    append = _results_table(sql_cfg)
    append(("a.t", "r1", 1, 1, ""), ("a.t", "r2", 2, 2, "{ half"), ("b.t", "r1", 3, 3, None))
    append(("a.t", "r0", 0, 0, None))
    assert [(r["table"], r["now_ms"]) for r in qr.list_results(sql_cfg)] == [("b.t", 3), ("a.t", 0)]


def test_a_bounded_read_reads_in_full_only_the_rows_it_returns(sql_cfg, monkeypatch):
    """The keys of every matching result, then only the chosen rows (a validation's rules may be
    kilobytes; a table keeps a month of them)."""
    from pyiceberg.table import Table

    append = _results_table(sql_cfg)
    for i in range(6):  # a file per validation, as the application appends them
        append(("a.t", f"r{i}", i, i, json.dumps([{"rule": "x" * 100}])))
    scans = []
    original = Table.scan

    def scan(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        scans.append((kwargs.get("selected_fields"), result.to_arrow().num_rows))
        return result

    monkeypatch.setattr(Table, "scan", scan)
    assert [r["now_ms"] for r in qr.list_results(sql_cfg, "a.t", per_table=2)] == [5, 4]
    assert scans == [(qr.KEY_FIELDS, 6), (None, 2)]


# ---------------------------------------------------------------- the Data Docs site under the state root
def _site(tmp_path):
    site = tmp_path / "scratch" / "local_site"
    for rel, text in {"index.html": "this application's index", "static/styles/a.css": "css",
                      "expectations/a/t.html": "suite", "validations/a/t/r1/t1/b.html": "<html>page</html>"}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return site


@pytest.fixture(params=["local", "object store"])
def docs_cfg(request, tmp_path):
    """A state root on local disk, or on a store reached only through FileIO (no listing, no path)."""
    if request.param == "local":
        return LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")))
    from memory_fileio import STORE

    STORE.clear()
    return LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh"), pyiceberg_properties=MEMORY_IO),
                             cleaner=CleanerConfig(state_location="mem://bucket/lake/_lakecleaner"))


def test_a_site_built_in_scratch_space_is_published_under_the_state_root(docs_cfg, tmp_path):
    site = _site(tmp_path)
    assert qr.publish_docs(docs_cfg, site) == 3  # not the index: it lists one application's validations
    assert qr.read_docs_file(docs_cfg, "validations/a/t/r1/t1/b.html") == b"<html>page</html>"
    assert qr.read_docs_file(docs_cfg, "expectations/a/t.html") == b"suite"
    assert qr.read_docs_file(docs_cfg, "index.html") is None
    (site / "expectations" / "a" / "t.html").write_text("suite, rebuilt")
    assert qr.publish_docs(docs_cfg, site) == 2  # GX's static files are written once (same size: kept)
    assert qr.read_docs_file(docs_cfg, "expectations/a/t.html") == b"suite, rebuilt"
    assert qr.read_docs_file(docs_cfg, "validations/a/t/../t/r1/t1/b.html") == b"<html>page</html>"
    # documents share the state root and reach it the same way
    write_document(docs_cfg, "state/a.t.json", {"failed_runs": 1})
    assert read_document(docs_cfg, "state/a.t.json") == {"failed_runs": 1}


def test_no_path_leads_out_of_the_site(docs_cfg, tmp_path):
    from lakecleaner.core.state import put_file

    qr.publish_docs(docs_cfg, _site(tmp_path))
    put_file(docs_cfg, "quality/secret.txt", b"outside the Data Docs")
    put_file(docs_cfg, "state/a.t.json", b"{}")
    for path in ("../secret.txt", "validations/../../secret.txt", "/etc/passwd", "//etc/passwd", "..",
                 "a\\..\\..\\secret.txt", "index.html\x00", "", ".", "../../state/a.t.json",
                 "validations/a/t/r1/t1/../../../../../../secret.txt", "nope.html"):
        assert qr.read_docs_file(docs_cfg, path) is None, path
    assert qr.docs_page_name("validations/../index.html") == qr.DOCS_INDEX


def test_a_symbolic_link_out_of_a_local_site_is_no_file_of_it(tmp_path):
    cfg = LakecleanerConfig(catalog=CatalogConfig(warehouse=str(tmp_path / "wh")))
    qr.publish_docs(cfg, _site(tmp_path))
    root = tmp_path / "wh" / "_lakecleaner" / "quality" / "docs"
    (tmp_path / "secret.txt").write_text("outside the Data Docs")
    (root / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (root / "escape_dir").symlink_to(tmp_path, target_is_directory=True)
    for path in ("escape.txt", "escape_dir/secret.txt"):
        assert qr.read_docs_file(cfg, path) is None, path
    assert os.path.islink(root / "escape.txt")


def test_the_site_is_located_under_any_state_root():
    cfg = LakecleanerConfig(catalog=CatalogConfig(type="rest", warehouse="s3://bucket/wh"))
    assert qr.docs_location(cfg, "validations/a/t/r/x/b.html") == \
        "s3://bucket/wh/_lakecleaner/quality/docs/validations/a/t/r/x/b.html"
    assert qr.results_table(cfg) == "lake.lakecleaner.quality_results"
