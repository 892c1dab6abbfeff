"""What the Lake Cleaner UI (lakecleaner.airflow.plugin) shows, as plain data: no Airflow, no
FastAPI, no HTML here.

The ``build_*`` functions are pure: they assemble the view model from what the package already
records (the evaluate task's last evaluation, ``scheduler.last_evaluation``; ``history.read_history``,
``quality_results.list_results``, ``state.StateStore``). The ``load_*`` functions read those records for one
request, one page at a time: a request never evaluates a table nor reads a table's metadata.

Figures and what they mean (the charts say the same in their captions):

- ``dirty_share_read``: per run, dirty records the run took / records it read
  (``dirty_records_in_run / records_read``). The run reads its dirty part plus the cleaned records
  of the keys it touches, so this is a *proxy* for the dirty ratio before the run, not Kafka's
  byte ratio; the exact byte ratio is known only now, from metadata (``evaluation.dirty_ratio``).
  After a committed run the part it took is clean (ratio 0 for that part); dirt younger than
  ``min.compaction.lag.ms`` or past the run's record budget stays dirty until the next run.
- ``delete_files``, ``delete_bytes``, ``delete_ratio``: the table's live delete files (position
  deletes on v2, deletion vectors on v3, equality deletes), their bytes as Iceberg counts them, and
  deleted records / live records, from metadata at the last evaluation (core.deletefiles: the same
  figure maintenance rewrites on, past REWRITE_DELETE_RATIO). None: recorded before evaluation
  kept them.
- ``delay_ms`` per validation: the freshness rule's max compaction delay at that validation (how
  long dirty data had been waiting beyond ``max.compaction.lag.ms``; 0 = within the bound).
"""
from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from lakecleaner.core.config import IDENT, LONG_MAX, LakecleanerConfig
from lakecleaner.core.deletefiles import REWRITE_DELETE_RATIO
from lakecleaner.core.quality_rules import FRESHNESS, rule_named

REMOVED = ("removed_superseded", "removed_expired_tombstones", "quarantined")
FRESHNESS_RULE = FRESHNESS  # the rule whose figure the page shows as the table's freshness
INDEX_HISTORY_ROWS = 5000  # the index reads at most this many newest runs of its page's tables
TABLE_HISTORY_ROWS = 200  # runs charted on a table's page
TABLE_RESULTS = 50  # validations listed on a table's page
INDEX_WINDOW_MS = 7 * 86_400_000  # the index shows each table's last run of the past week
TABLES_PER_PAGE = 50  # index rows per page, unless the request asks for another size
RUNS_PER_PAGE = 25  # run-history rows per page of a table's page
MAX_PAGE_SIZE = 200


class PageError(ValueError):
    """A page number or size out of bounds."""


@dataclass(frozen=True)
class Page:
    """One page of a listing: 1-based ``number`` of ``size`` items out of ``total``. A number past
    the last page is an empty page (the links lead back)."""
    number: int
    size: int
    total: int

    def __post_init__(self):
        if self.number < 1 or not 1 <= self.size <= MAX_PAGE_SIZE:
            raise PageError(f"page={self.number}, size={self.size}: page must be >= 1 and size 1..{MAX_PAGE_SIZE}")

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    def items(self, seq: list) -> list:
        return seq[self.offset:self.offset + self.size]

    @property
    def previous(self) -> int | None:
        return min(self.number - 1, self.pages) if self.number > 1 else None

    @property
    def next(self) -> int | None:
        return self.number + 1 if self.number < self.pages else None

    def as_dict(self) -> dict:
        return {"page": self.number, "size": self.size, "total": self.total, "pages": self.pages,
                "previous": self.previous, "next": self.next}


def valid_table_name(name: str) -> bool:
    """namespace.table, each part an identifier as every command takes it (config.IDENT): the page
    links every table the cleaner cleans, and nothing else."""
    parts = name.split(".") if isinstance(name, str) else []
    return len(parts) == 2 and all(IDENT.fullmatch(part) for part in parts)


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
        if rule_named(rule.get("rule")) is FRESHNESS_RULE:
            offending = rule.get("offending") or []
            delay = int(offending[0].get(FRESHNESS_RULE.figure, 0)) if offending and not rule.get("success") else 0
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
        "delete_files": ev.get("delete_files"),
        "delete_bytes": ev.get("delete_bytes"),
        "delete_ratio": ev.get("delete_ratio"),
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
                state: Mapping[str, Any] | None, docs_pages: Mapping[str, str] | None = None,
                page: Page | None = None) -> dict:
    """A table's page: its index line, one page of its runs newest first (``runs``, ``runs_page``),
    the newest TABLE_HISTORY_ROWS runs oldest first without dry runs (what the charts draw), and its
    validations newest first with their Data Docs pages (``docs_pages``: run_name -> page).
    ``history`` newest first."""
    history, results = list(history), list(results)
    page = page or Page(1, RUNS_PER_PAGE, len(history))
    docs_pages = docs_pages or {}
    row = build_row(ev, history[0] if history else None, results[0] if results else None, state)
    charted = [run_point(r) for r in reversed(history[:TABLE_HISTORY_ROWS])]
    return {
        **row,
        "evaluation": dict(ev),
        "rewrite_delete_ratio": REWRITE_DELETE_RATIO,  # maintenance's threshold on delete_ratio
        "state": dict(state or {}),
        "runs": [run_point(r) for r in page.items(history)],
        "runs_page": page.as_dict(),
        "charted_runs": [r for r in charted if not r["dry_run"] and r["status"] != "dry_run"],
        "validations": [validation_point(r, docs_pages.get(r.get("run_name"))) for r in results],
    }


# ---------------------------------------------------------------- reading the records (one request)
def _states(cfg: LakecleanerConfig, tables: Iterable[str]) -> dict[str, dict]:
    from dataclasses import asdict

    from lakecleaner.core.state import StateStore

    store, out = StateStore(cfg), {}
    for table in tables:
        try:
            out[table] = asdict(store.get(table))
        except Exception:  # noqa: BLE001 - a missing or unreadable state is no state
            out[table] = {}
    return out


def evaluated(rec) -> dict:
    """When the figures shown were computed: the evaluate task's now and when it recorded them."""
    if rec is None:
        return {"now_ms": None, "at": None, "recorded_at": None}
    return {"now_ms": rec.now_ms, "at": iso(rec.now_ms), "recorded_at": iso(rec.recorded_at_ms)}


def _quality(cfg: LakecleanerConfig, tables: list[str], per_table: int) -> tuple[list[dict], dict[str, dict]]:
    """The tables' newest validations (one bounded read of the results table) and, per table, each
    validation's Data Docs page (run_name -> page, relative to the site)."""
    from lakecleaner.core.quality_results import list_results

    results = list_results(cfg, tables=tables, per_table=per_table) if tables else []
    pages: dict[str, dict[str, str]] = {t: {} for t in tables}
    for r in reversed(results):  # newest last: a run name validated twice shows its newest page
        if r.get("docs_page"):
            pages.setdefault(r["table"], {})[r["run_name"]] = r["docs_page"]
    return results, pages


def load_overview(cfg: LakecleanerConfig, page: int = 1, size: int | None = None,
                  now_ms: int | None = None) -> dict:
    """One page of the index, from the last recorded evaluation: records are read for that page's
    tables only."""
    from lakecleaner.core.history import read_history
    from lakecleaner.core.scheduler import last_evaluation

    rec = last_evaluation(cfg)
    rows = list(rec.tables) if rec else []
    pg = Page(page, TABLES_PER_PAGE if size is None else size, len(rows))
    shown = pg.items(rows)
    tables = [e["table"] for e in shown]
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    history = read_history(cfg, None, limit=INDEX_HISTORY_ROWS, tables=tables,
                           since_ms=now_ms - INDEX_WINDOW_MS) if tables else []
    results, pages = _quality(cfg, tables, 1)
    return {"evaluation": evaluated(rec), "page": pg.as_dict(),
            "tables": build_overview(shown, history, results, _states(cfg, tables), pages)}


class UnknownTable(LookupError):
    """Not a compacted table of the last recorded evaluation; the message says which and when."""


def load_table(cfg: LakecleanerConfig, table: str, page: int = 1, size: int | None = None,
               now_ms: int | None = None) -> dict:
    """A table's page from its row of the last recorded evaluation and its recorded runs (within
    cleaner.own_files_retention_days, one page listed). Raises UnknownTable."""
    from lakecleaner.core.history import read_history
    from lakecleaner.core.scheduler import last_evaluation

    rec = last_evaluation(cfg)
    ev = rec.row(table) if rec else None
    if ev is None:
        when = f"the last evaluation ({iso(rec.now_ms)})" if rec else "any evaluation: none is recorded yet"
        raise UnknownTable(f"unknown table {table}: not a compacted table of {when}")
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    history = read_history(cfg, table, limit=None, since_ms=now_ms - cfg.cleaner.own_files_retention_days * 86_400_000)
    pg = Page(page, RUNS_PER_PAGE if size is None else size, len(history))
    results, pages = _quality(cfg, [table], TABLE_RESULTS)
    return {**build_table(ev, history, results, _states(cfg, [table])[table], pages.get(table), pg),
            "evaluated": evaluated(rec)}


def evaluated_tables(cfg: LakecleanerConfig) -> set[str]:
    """The compacted tables of the last recorded evaluation (what the index lists)."""
    from lakecleaner.core.scheduler import last_evaluation

    rec = last_evaluation(cfg)
    return {r["table"] for r in rec.tables} if rec else set()
