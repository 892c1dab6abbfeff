"""The cleaner's own files and tables, kept to a bounded size like any table it cleans.

Without this, every interval adds an application report per application, a run-history row and a
data-quality result (small data files, a snapshot each) and a Data Docs page per table: they grow
without end, and so do the pages that read them. Everything older than
``cleaner.own_files_retention_days`` goes: documents here (``prune_documents``, after each run), the
run history and the data-quality results once a day with the Data Docs pages of the results that go,
except each table's newest result (lakecleaner.spark.housekeeping): old rows deleted, small files
rewritten, old snapshots expired.
"""
from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Iterable

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.state import document_name, local_path, read_document, write_document

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
HISTORY_MAINTENANCE = "housekeeping/run_history.json"  # when the run history was last maintained
UNLISTED_TABLES = "housekeeping/unlisted_tables.json"  # since when each table with state is unlisted


def retention_cutoff_ms(cfg: LakecleanerConfig, now_ms: int) -> int:
    return now_ms - cfg.cleaner.own_files_retention_days * DAY_MS


def prune_documents(cfg: LakecleanerConfig, now_ms: int, listed_tables: Iterable[str] | None = None) -> dict[str, int]:
    """Delete the cleaner's documents older than the retention (by modification time): the per-run
    metrics documents earlier versions wrote (metrics now go to Airflow's Stats), application
    reports, the data-quality results earlier versions kept as files (results are rows of the
    quality_results table now, which lakecleaner.spark.housekeeping keeps bounded, with their Data
    Docs pages), the GX store and Data Docs pages earlier versions kept under ``quality/gx`` and, given
    the run's full listing of compacted tables, the state of tables of this deployment's namespaces
    no longer in it. Returns how many of each went. A symbolic link below the state root is neither
    followed nor removed: what it points at is not the cleaner's. Object-store state roots are left
    to the store's lifecycle rules (FileIO lists no directory)."""
    root = local_path(cfg.state_root)
    if root is None:
        return {}
    cutoff_s = retention_cutoff_ms(cfg, now_ms) / 1000
    base = Path(root)
    gx = base / "quality" / "gx"
    removed = {
        "metrics": _remove_older(base, base / "metrics", "*.json", cutoff_s),
        "application_reports": _remove_older(base, base / "batches", "*", cutoff_s),
        "validations": _remove_older(base, gx / "uncommitted" / "validations", "**/*.json", cutoff_s),
        "data_docs_pages": _remove_older(base, gx / "uncommitted" / "data_docs" / "local_site" / "validations",
                                         "**/*.html", cutoff_s),
        "quality_results": _remove_older(base, base / "quality" / "results", "*/*.json", cutoff_s),
    }
    try:  # last, and on its own: a fault here must not stop the pruning above, run after run
        removed["state_of_unlisted_tables"] = _remove_unlisted_state(cfg, base, listed_tables, now_ms)
    except Exception as exc:  # noqa: BLE001 - housekeeping never decides a run
        log.warning("lakecleaner: cannot prune the state of unlisted tables: %s", exc)
        removed["state_of_unlisted_tables"] = 0
    return removed


def _remove_unlisted_state(cfg: LakecleanerConfig, base: Path, listed_tables: Iterable[str] | None,
                           now_ms: int) -> int:
    """The failure counts and uncleanable mark of a table the catalog no longer lists as compacted
    (dropped, or its cleanup.policy changed) go once it has been missing from every listing for
    the retention and its documents are as old: a table recreated under the same name later starts
    clean, not marked, while one a listing missed once (a catalog hiccup) keeps its state. When
    each table went missing is kept in UNLISTED_TABLES. Nothing happens on an empty listing,
    likelier a catalog fault than a catalog emptied. Only tables of this deployment's namespaces
    (cleaner.namespaces; every namespace when it names none) are considered: another deployment
    sharing the state root lists its own."""
    listed = set(listed_tables or ())
    if not listed:
        return 0
    listed_documents = _document_names(listed)
    documents: dict[str, list[Path]] = {}
    for path in _entries(base, base / "state", "*.json"):
        table = _state_table(path.name)
        if table is not None and path.name not in listed_documents and _ours(cfg, table):
            documents.setdefault(table, []).append(path)
    try:
        doc = read_document(cfg, UNLISTED_TABLES)
    except Exception as exc:  # noqa: BLE001 - unreadable: every unlisted table's absence counts from now
        log.warning("lakecleaner: %s unreadable (%s); counting from now", UNLISTED_TABLES, exc)
        doc = None
    since = doc.get("first_unlisted_ms") if isinstance(doc, dict) else None
    since = since if isinstance(since, dict) else {}
    others = {t: at for t, at in since.items() if not _ours(cfg, t)}  # another deployment's clocks
    # A backfill's now is its interval's end, in the past: a table it finds missing is missing
    # from now on, not since then (or the next run would count the whole gap as absence).
    now_ms = max(now_ms, int(time.time() * 1000))
    cutoff_ms = retention_cutoff_ms(cfg, now_ms)
    still_missing, count = dict(others), 0
    for table, paths in documents.items():
        first = since.get(table)
        first = first if isinstance(first, int) and not isinstance(first, bool) else now_ms
        if first <= cutoff_ms and all(_mtime(p) < cutoff_ms / 1000 for p in paths):
            for path in paths:
                path.unlink(missing_ok=True)
            count += 1
        else:
            still_missing[table] = first
    if still_missing != since:
        write_document(cfg, UNLISTED_TABLES, {"first_unlisted_ms": still_missing})
    return count


def _ours(cfg: LakecleanerConfig, table: str) -> bool:
    """The table (as _state_table names it) is in a namespace this deployment cleans. A shortened
    name whose prefix ends inside the namespace cannot say which: it is not ours to remove."""
    namespaces = cfg.cleaner.namespaces
    namespace, dot, _ = table.partition(".")
    return not namespaces or (bool(dot) and "~" not in namespace and namespace in namespaces)


def _document_names(tables: Iterable[str]) -> set[str]:
    """The state documents' names of these tables (a long name's is shortened: state.document_name)."""
    names = set()
    for table in tables:
        try:
            names.update(document_name(table, suffix) for suffix in ("", ".clear"))
        except ValueError:  # not a table name: it has no state
            continue
    return names


def _state_table(file_name: str) -> str | None:
    """The table a state document belongs to: ``ns.t.json`` or ``ns.t.clear.json`` (state.document_name;
    names hold no dots of their own, so ``ns.clear.json`` is table ns.clear's). For a shortened name,
    its readable prefix and hash stand for the table."""
    if file_name.startswith(".") or not file_name.endswith(".json"):
        return None  # a write's temporary file
    parts = file_name.removesuffix(".json").split(".")
    if len(parts) == 3 and parts[2] == "clear":
        parts = parts[:2]
    return ".".join(parts) if len(parts) == 2 else None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")  # gone meanwhile: nothing to remove


def _unlinked(base: Path, path: Path) -> bool:
    """No symbolic link on the way from the state root to ``path``, ``path`` included."""
    current = base
    for part in path.relative_to(base).parts:
        current = current / part
        if current.is_symlink():
            return False
    return True


def _entries(base: Path, directory: Path, pattern: str) -> list[Path]:
    """``directory.glob(pattern)`` without a path that is or passes through a symbolic link."""
    if not _unlinked(base, directory) or not directory.is_dir():
        return []
    return [path for path in directory.glob(pattern) if _unlinked(base, path)]


def _remove_older(base: Path, directory: Path, pattern: str, cutoff_s: float) -> int:
    count = 0
    for path in _entries(base, directory, pattern):
        inside = list(path.rglob("*")) if path.is_dir() else []
        if any(f.is_symlink() for f in inside):
            continue  # removing the directory would remove a link: left to whoever made it
        newest = max((_mtime(f) for f in inside if f.is_file()), default=0.0) if path.is_dir() else _mtime(path)
        if newest >= cutoff_s:  # a directory (a run's reports) goes when its newest file is old
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        count += 1
    return count


def run_history_due(cfg: LakecleanerConfig, now_ms: int) -> bool:
    try:
        last = (read_document(cfg, HISTORY_MAINTENANCE) or {}).get("last_ms")
    except ValueError:  # unreadable: maintain it again, which rewrites the document
        last = None
    return not isinstance(last, int) or now_ms - last >= DAY_MS


