"""What the Lake Cleaner UI (plugins/lakecleaner_plugin.py) shows, as plain data: no Airflow, no
FastAPI, no HTML here.

The ``build_*`` functions are pure: they assemble the view model from what the package already
records (``scheduler.evaluate_all``, ``history.read_history``, ``quality.list_results``,
``state.StateStore``). The ``load_*`` functions read those sources for one request.

Figures and what they mean (the charts say the same in their captions):

- ``dirty_share_read``: per run, dirty records the run took / records it read
  (``dirty_records_in_run / records_read``). The run reads its dirty part plus the cleaned records
  of the keys it touches, so this is a *proxy* for the dirty ratio before the run, not Kafka's
  byte ratio; the exact byte ratio is known only now, from metadata (``evaluation.dirty_ratio``).
  After a committed run the part it took is clean (ratio 0 for that part); dirt younger than
  ``min.compaction.lag.ms`` or past the run's record budget stays dirty until the next run.
- ``delay_ms`` per validation: the freshness rule's max compaction delay at that validation (how
  long dirty data had been waiting beyond ``max.compaction.lag.ms``; 0 = within the bound).
"""
from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from .config import LONG_MAX, LakecleanerConfig

# namespace.table, each part as the engine accepts it (lakecleaner.engine.IDENT)
TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\.[A-Za-z_][A-Za-z0-9_]{0,127}")  # fullmatch: no trailing newline
REMOVED = ("removed_superseded", "removed_expired_tombstones", "quarantined")
FRESHNESS_RULE = "freshness (max.compaction.lag.ms)"
INDEX_HISTORY_ROWS = 5000  # the index reads this many newest runs to find each table's last run
TABLE_HISTORY_ROWS = 200  # runs charted on a table's page
TABLE_RESULTS = 50  # validations listed on a table's page
INDEX_WINDOW_MS = 7 * 86_400_000  # the index shows each table's last run of the past week


def valid_table_name(name: str) -> bool:
    return isinstance(name, str) and bool(TABLE_NAME.fullmatch(name))


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _int(value: Any) -> int:
    return int(value or 0)


def run_point(row: Mapping[str, Any]) -> dict:
    """One run-history row as the table page charts it."""
    read = row.get("records_read")
    dirty = row.get("dirty_records_in_run")
    started = row.get("started_at")
    return {
        "run_id": row.get("run_id"),
        "status": row.get("status"),
        "dry_run": bool(row.get("dry_run")),
        "now_ms": row.get("now_ms"),
        "at": iso(row.get("now_ms")),
        "started_at": started.isoformat() if hasattr(started, "isoformat") else started,
        "error": row.get("error"),
        "records_read": read,
        "records_kept": row.get("records_kept"),
        "dirty_records_in_run": dirty,
        **{k: row.get(k) for k in REMOVED},
        "removed_total": sum(_int(row.get(k)) for k in REMOVED),
        "anomalous": row.get("anomalous"),
        "bytes_read": row.get("bytes_read"),
        "bytes_written": row.get("bytes_written"),
        "duration_ms": row.get("duration_ms"),
        "dirty_share_read": round(dirty / read, 6) if read and dirty is not None else None,
    }


def validation_point(result: Mapping[str, Any], docs_page: str | None = None) -> dict:
    """One kept validation summary: outcome, failed rules with their offending rows, the freshness
    rule's max compaction delay, and its Data Docs page (relative to the Data Docs site)."""
    rules = list(result.get("rules") or [])
    delay = None
    for rule in rules:
        if rule.get("rule") == FRESHNESS_RULE:
            offending = rule.get("offending") or []
            delay = int(offending[0].get("max_compaction_delay_ms", 0)) if offending and not rule.get("success") else 0
    return {
        "run_name": result.get("run_name"),
        "now_ms": result.get("now_ms"),
        "at": iso(result.get("now_ms")),
        "success": bool(result.get("success")),
        "warnings": _int(result.get("warnings")),
        "rules": len(rules),
        "failed": [{"rule": r.get("rule"), "severity": r.get("severity"), "description": r.get("description"),
                    "offending": r.get("offending") or []} for r in rules if not r.get("success")],
        "delay_ms": delay,
        "docs_page": docs_page,
    }


def _bound(ev: Mapping[str, Any]) -> int | None:
    lag = ev.get("max_compaction_lag_ms")
    return None if lag is None or lag >= LONG_MAX else int(lag)


def build_row(ev: Mapping[str, Any], last_run: Mapping[str, Any] | None, last_validation: Mapping[str, Any] | None,
              state: Mapping[str, Any] | None, docs_page: str | None = None) -> dict:
    """The index line of one compacted table."""
    state = dict(state or {})
    return {
        "table": ev["table"],
        "status": ev["status"],
        "reason": ev.get("reason", ""),
        "strategy": ev.get("strategy"),
        "dirty_ratio": ev.get("dirty_ratio"),
        "min_cleanable_dirty_ratio": ev.get("min_cleanable_dirty_ratio"),
        "must_clean_ratio": ev.get("must_clean_ratio"),
        "max_compaction_delay_ms": ev.get("max_compaction_delay_ms"),
        "max_compaction_lag_ms": _bound(ev),  # None: no bound (Long.MAX)
        "within_bound": not ev.get("max_compaction_delay_ms"),
        "physical_deletion": ev.get("physical_deletion"),
        "last_run": run_point(last_run) if last_run else None,
        "quality": validation_point(last_validation, docs_page) if last_validation else None,
        "uncleanable": bool(state.get("uncleanable")) or ev["status"] == "uncleanable",
        "consecutive_failures": _int(state.get("consecutive_failures")),
        "last_error": state.get("last_error"),
    }


def build_overview(evaluations: Iterable[Mapping[str, Any]], history: Iterable[Mapping[str, Any]],
                   results: Iterable[Mapping[str, Any]], states: Mapping[str, Mapping[str, Any]],
                   docs_pages: Mapping[str, Mapping[str, str]] | None = None) -> list[dict]:
    """One row per evaluated table, by name. ``history`` and ``results`` newest first (as read);
    ``docs_pages``: table -> run_name -> Data Docs page."""
    docs_pages = docs_pages or {}
    last_run: dict[str, Mapping] = {}
    for row in history:
        last_run.setdefault(row.get("table_name"), row)
    last_validation: dict[str, Mapping] = {}
    for res in results:
        last_validation.setdefault(res.get("table"), res)
    rows = []
    for ev in evaluations:
        name, validation = ev["table"], last_validation.get(ev["table"])
        page = docs_pages.get(name, {}).get(validation.get("run_name")) if validation else None
        rows.append(build_row(ev, last_run.get(name), validation, states.get(name), page))
    return sorted(rows, key=lambda r: r["table"])


def build_table(ev: Mapping[str, Any], history: Iterable[Mapping[str, Any]], results: Iterable[Mapping[str, Any]],
                state: Mapping[str, Any] | None, docs_pages: Mapping[str, str] | None = None) -> dict:
    """A table's page: its index line, every run oldest first (what the charts draw), and its
    validations newest first with their Data Docs pages (``docs_pages``: run_name -> page)."""
    history, results = list(history), list(results)
    docs_pages = docs_pages or {}
    row = build_row(ev, history[0] if history else None, results[0] if results else None, state)
    runs = [run_point(r) for r in reversed(history)]
    return {
        **row,
        "evaluation": dict(ev),
        "state": dict(state or {}),
        "runs": runs,
        "charted_runs": [r for r in runs if not r["dry_run"] and r["status"] != "dry_run"],
        "validations": [validation_point(r, docs_pages.get(r.get("run_name"))) for r in results],
    }


# ---------------------------------------------------------------- reading the sources (one request)
def _states(cfg: LakecleanerConfig, tables: Iterable[str]) -> dict[str, dict]:
    from dataclasses import asdict

    from .state import StateStore

    store, out = StateStore(cfg), {}
    for table in tables:
        try:
            out[table] = asdict(store.get(table))
        except Exception:  # noqa: BLE001 - a missing or unreadable state is no state
            out[table] = {}
    return out


def load_overview(cfg: LakecleanerConfig, now_ms: int | None = None) -> list[dict]:
    from .history import read_history
    from .quality import docs_dir, list_results
    from .scheduler import evaluate_all

    evaluations = [e.as_dict() for e in evaluate_all(cfg, None, now_ms)]
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    history = read_history(cfg, None, limit=INDEX_HISTORY_ROWS, since_ms=now_ms - INDEX_WINDOW_MS)
    tables = [e["table"] for e in evaluations]
    try:
        results = list_results(cfg, per_table=1)
        root = docs_dir(cfg)
        pages = {t: docs_pages(root, t) for t in tables if valid_table_name(t)}
    except ValueError:  # quality results need a local directory; none configured
        results, pages = [], {}
    return build_overview(evaluations, history, results, _states(cfg, tables), pages)


def known_table(cfg: LakecleanerConfig, table: str) -> bool:
    """A compacted table of the catalog (what the index lists), by metadata alone."""
    from .config import is_compacted
    from .metadata import MetadataReader

    if not valid_table_name(table):
        return False
    if table.endswith(cfg.cleaner.quarantine_suffix) or table.split(".")[0] == cfg.cleaner.meta_namespace:
        return False
    reader = MetadataReader(cfg)
    if table not in reader.list_tables():
        return False
    try:
        return is_compacted(reader.read(table).properties)
    except Exception:  # noqa: BLE001 - listed but unreadable: still a table to show (status "unreadable")
        return True


def docs_pages(docs_root: Path, table: str) -> dict[str, str]:
    """run_name -> the newest Data Docs validation page of ``table`` for that run, relative to the
    Data Docs site (GX writes validations/<namespace>/<table>/<run_name>/<run_time>/<batch>.html)."""
    ns, name = table.split(".")
    base = docs_root / "validations" / ns / name
    out: dict[str, str] = {}
    if not base.is_dir():
        return out
    for run_dir in base.iterdir():
        pages = sorted(run_dir.glob("*/*.html")) if run_dir.is_dir() else []
        if pages:
            out[run_dir.name] = pages[-1].relative_to(docs_root).as_posix()
    return out


def load_table(cfg: LakecleanerConfig, table: str, now_ms: int | None = None) -> dict | None:
    """The table's page, or None if ``table`` is not a compacted table of the catalog."""
    from .history import read_history
    from .quality import docs_dir, list_results
    from .scheduler import evaluate_all

    if not known_table(cfg, table):
        return None
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    ev = evaluate_all(cfg, [table], now_ms)[0].as_dict()
    history = read_history(cfg, table, limit=TABLE_HISTORY_ROWS,
                           since_ms=now_ms - cfg.cleaner.own_files_retention_days * 86_400_000)
    try:
        results = list_results(cfg, table, per_table=TABLE_RESULTS)
        pages = docs_pages(docs_dir(cfg), table)
    except ValueError:  # quality results need a local directory; none configured
        results, pages = [], {}
    return build_table(ev, history, results, _states(cfg, [table])[table], pages)
