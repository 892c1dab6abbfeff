"""The kept data-quality results and their Data Docs, read without Spark or great expectations: for
the CLI, the DAG and the Airflow UI.

Every validation is one row of the Iceberg table ``<catalog>.<meta namespace>.quality_results``,
next to the run history, written by the Spark application that validated (lakecleaner.spark.quality)
and read here through pyiceberg, as lakecleaner.core.history reads the run history. Its Data Docs
pages are files under ``<state root>/quality/docs/``: great expectations builds its site in the
application's scratch space, and ``publish_docs`` copies it there through pyiceberg's FileIO, from
where the Lake Cleaner page serves it (``read_docs_file``). Nothing here needs a local disk shared
with another process: only the catalog and the state root.

Results kept by earlier versions as JSON files under ``<state root>/quality/results/`` are not read;
lakecleaner.core.housekeeping removes them once they are older than the retention.
"""
from __future__ import annotations

import json
import logging
import os
import posixpath
from pathlib import Path

from lakecleaner.core.config import LakecleanerConfig

log = logging.getLogger(__name__)

RESULTS_TABLE = "quality_results"  # in cleaner.meta_namespace, beside run_history
RESULTS_SCHEMA = (
    "table_name string, run_name string, now_ms bigint, success boolean, warnings int, rules string, "
    "docs_page string, run_history_docs_page string, recorded_at timestamp"
)
DOCS = "quality/docs"  # the Data Docs site, under the state root
DOCS_INDEX = "index.html"  # not published: an application's site indexes its own validations only
KEY_FIELDS = ("table_name", "run_name", "now_ms", "recorded_at")


def results_table(cfg: LakecleanerConfig) -> str:
    return f"{cfg.catalog.name}.{cfg.cleaner.meta_namespace}.{RESULTS_TABLE}"


def docs_location(cfg: LakecleanerConfig, page: str = "") -> str:
    """Where a page of the Data Docs site (relative to the site) lives: under the state root."""
    return f"{cfg.state_root}/{DOCS}/{page}".rstrip("/")


# ---------------------------------------------------------------- reading the results
def list_results(cfg: LakecleanerConfig, table: str | None = None, per_table: int | None = None, *,
                 tables: list[str] | tuple[str, ...] | None = None) -> list[dict]:
    """Kept validation summaries (as the validation returned them), newest first; [] while none is
    recorded. ``table`` or ``tables`` filter (a filter Iceberg prunes files by); ``per_table``: only
    each table's newest that many are read in full (a page reads a bounded amount: their keys
    first, then those rows). A validation rerun under the same run name replaces the earlier one,
    as its file did."""
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo, In

    from lakecleaner.core.metadata import own_table

    tbl = own_table(cfg, RESULTS_TABLE)
    if tbl is None:
        return []
    where = AlwaysTrue()
    if table is not None:
        where = And(where, EqualTo("table_name", table))
    if tables is not None:
        if not tables:
            return []
        where = And(where, In("table_name", tuple(tables)))
    keys = tbl.scan(row_filter=where, selected_fields=KEY_FIELDS).to_arrow().to_pylist()
    chosen = _newest(keys, per_table)
    if not chosen:
        return []
    rows = tbl.scan(row_filter=And(where, In("now_ms", tuple({k[2] for k in chosen})))).to_arrow().to_pylist()
    out = []
    for row in rows:
        if tuple(row[f] for f in KEY_FIELDS) not in chosen:
            continue
        try:
            out.append(_summary(cfg, row))
        except (ValueError, TypeError) as exc:  # that validation's result only, said so
            log.warning("lakecleaner: table %s: unreadable data-quality result of %s (%s)", row["table_name"],
                        row["run_name"], exc)
    return sorted(out, key=lambda r: (r["now_ms"], r["recorded_at"]), reverse=True)


def _newest(keys: list[dict], per_table: int | None) -> set[tuple]:
    """The keys of each table's newest ``per_table`` validations (all with None), one per run name."""
    latest: dict[tuple, dict] = {}
    for k in keys:
        seen = latest.get((k["table_name"], k["run_name"]))
        if seen is None or k["recorded_at"] > seen["recorded_at"]:
            latest[(k["table_name"], k["run_name"])] = k
    by_table: dict[str, list[dict]] = {}
    for k in latest.values():
        by_table.setdefault(k["table_name"], []).append(k)
    chosen = set()
    for rows in by_table.values():
        rows.sort(key=lambda k: (k["now_ms"], k["recorded_at"]), reverse=True)
        chosen.update(tuple(k[f] for f in KEY_FIELDS) for k in rows[:per_table])
    return chosen


def _summary(cfg: LakecleanerConfig, row: dict) -> dict:
    rules = json.loads(row["rules"])
    if not isinstance(rules, list):
        raise ValueError("its rules are not a list")
    page = row["docs_page"]
    return {"table": row["table_name"], "run_name": row["run_name"], "now_ms": int(row["now_ms"]),
            "success": bool(row["success"]), "warnings": int(row["warnings"] or 0), "rules": rules,
            "docs_page": page, "docs": docs_location(cfg, page) if page else None, "recorded_at": row["recorded_at"]}


# ---------------------------------------------------------------- the Data Docs site
def publish_docs(cfg: LakecleanerConfig, site_dir: str | os.PathLike) -> int:
    """Copy a Data Docs site built on local disk (an application's scratch space) to the state root,
    through pyiceberg's FileIO; returns how many files were written. Validation pages have names of
    their own (suite, run name, run time); suite pages are replaced; GX's static files (styles,
    fonts, images: 4 MB) are written only where missing or of another size. The site's index is not
    copied: it lists this application's validations only (the Lake Cleaner page is the index)."""
    from lakecleaner.core.state import file_size, put_file

    root = Path(site_dir)
    written = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if rel == DOCS_INDEX:
            continue
        name = f"{DOCS}/{rel}"
        if rel.startswith("static/") and file_size(cfg, name) == path.stat().st_size:
            continue
        put_file(cfg, name, path.read_bytes())
        written += 1
    return written


def docs_page_name(path: str) -> str | None:
    """A path of the Data Docs site as a request names it, normalised (``a/../b`` is ``b``), or None
    when it is no file inside the site: empty, absolute, NUL, a backslash, or leading out by dot
    segments."""
    if not isinstance(path, str) or not path or "\x00" in path or "\\" in path or path.startswith("/"):
        return None
    norm = posixpath.normpath(path)
    if norm in (".", "..") or norm.startswith("../") or norm.startswith("/"):
        return None
    return norm


def read_docs_file(cfg: LakecleanerConfig, page: str) -> bytes | None:
    """A file of the Data Docs site under the state root, read through FileIO; None when ``page`` is
    no file inside the site (docs_page_name) or there is none. Under a local state root a symbolic
    link leading out of the site is no file of it either."""
    from lakecleaner.core.state import get_file, local_path

    name = docs_page_name(page)
    if name is None:
        return None
    local = local_path(docs_location(cfg))
    if local is not None:
        root = Path(local).resolve()
        target = (root / name).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            return None
    return get_file(cfg, f"{DOCS}/{name}")
