"""Reading the run history (<catalog>.<meta namespace>.run_history) without Spark, for the UI."""
from __future__ import annotations

from .config import LakecleanerConfig
from .metadata import MetadataReader


def read_history(cfg: LakecleanerConfig, table: str | None = None, limit: int = 500) -> list[dict]:
    """Runs, newest first; [] before the first run. A small table, read with pyiceberg."""
    name = f"{cfg.cleaner.meta_namespace}.run_history"
    try:
        tbl = MetadataReader(cfg).load(name)
    except (FileNotFoundError, OSError, ValueError, LookupError):
        return []
    if tbl.current_snapshot() is None:
        return []
    scan = tbl.scan(row_filter=f"table_name == '{table}'") if table else tbl.scan()
    rows = scan.to_arrow().to_pylist()
    rows.sort(key=lambda r: (r["now_ms"] or 0, str(r["started_at"])), reverse=True)
    return rows[:limit]
