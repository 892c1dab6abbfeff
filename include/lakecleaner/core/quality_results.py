"""Reading the kept data-quality results and where the Data Docs site is, without Spark or great
expectations: for the CLI and the Airflow UI. The suites that write them: lakecleaner.spark.quality."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from lakecleaner.core.config import LakecleanerConfig

log = logging.getLogger(__name__)


def quality_root(cfg: LakecleanerConfig) -> Path:
    base = cfg.state_root
    if "://" in base and not base.startswith("file:"):
        raise ValueError(f"data-quality results need a local directory; set cleaner.state_location (got {base})")
    return Path(base.removeprefix("file:")) / "quality"


def docs_dir(cfg: LakecleanerConfig) -> Path:
    return quality_root(cfg) / "gx" / "uncommitted" / "data_docs" / "local_site"


def list_results(cfg: LakecleanerConfig, table: str | None = None, per_table: int | None = None) -> list[dict]:
    """Kept validation summaries, newest first (for the CLI and the Airflow UI); ``per_table``: only
    each table's newest that many files are read (a page reads a bounded amount)."""
    root = quality_root(cfg) / "results"
    dirs = [root / table] if table else (sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else [])
    paths = []
    for d in dirs:
        files = sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if d.is_dir() else []
        paths += files[:per_table] if per_table else files
    out = []
    for path in paths:
        try:
            result = json.loads(path.read_text())
            int(result["now_ms"])
        except (OSError, ValueError, TypeError, KeyError) as exc:  # that run's result only, said so
            log.warning("lakecleaner: table %s: unreadable data-quality result %s (%s)", path.parent.name, path, exc)
            continue
        out.append(result)
    return sorted(out, key=lambda r: r["now_ms"], reverse=True)
