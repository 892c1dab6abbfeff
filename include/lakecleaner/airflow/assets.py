"""Airflow Assets for compacted tables, so a consumer DAG can be scheduled on "this table was
compacted" (``schedule=[Asset("iceberg://lake/demo/orders")]``).

The tables are known only at run time, so the DAG declares one ``AssetAlias`` as its outlet and
adds an event per table through it (``outlet_events[alias].add(Asset(uri), extra=...)``); Airflow
then records an event for each table's own asset. The URI names the catalog, namespace and table:
``iceberg://<catalog>/<namespace>/<table>``. The provider registers the ``iceberg`` scheme with
``normalize_table_uri`` (lakecleaner.airflow.provider), so a consumer's URI of another shape is refused
where it is declared instead of never matching.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import SplitResult

ALIAS = "lakecleaner-compacted"  # the DAG's outlet; events for every compacted table go through it
SCHEME = "iceberg"
EXTRA_FIGURES = ("records_read", "records_kept", "removed_superseded", "removed_expired_tombstones", "quarantined",
                 "bytes_read", "bytes_written", "duration_ms")


def table_uri(catalog: str, table: str) -> str:
    """``iceberg://<catalog>/<namespace>/<table>`` for ``namespace.table`` of ``catalog``."""
    namespace, _, name = table.partition(".")
    if not namespace or not name or "." in name:
        raise ValueError(f"table {table!r}: expected namespace.table for its asset URI")
    return f"{SCHEME}://{catalog}/{namespace}/{name}"


def normalize_table_uri(parts: SplitResult) -> SplitResult:
    """Airflow's URI handler for ``iceberg://``: a catalog, a namespace and a table, nothing else."""
    path = [p for p in parts.path.split("/") if p]
    if not parts.netloc or len(path) != 2 or parts.query or parts.fragment:
        raise ValueError(f"{parts.geturl()!r}: an iceberg asset URI is iceberg://<catalog>/<namespace>/<table>")
    return parts._replace(path="/" + "/".join(path))


@dataclass(frozen=True)
class CompactionEvent:
    """One table's asset event: its URI and the run's figures (the event's ``extra``)."""
    uri: str
    extra: dict[str, Any]


def compaction_events(catalog: str, outcomes: Iterable[Mapping], now_ms: int) -> list[CompactionEvent]:
    """An event for each table whose chain ended ok with a committed compaction, from the
    applications' outcomes (their report documents): a dry run, a failed compaction or a failed
    validation announces nothing."""
    out = []
    for outcome in outcomes:
        compact = (outcome.get("steps") or {}).get("compact") or {}
        if outcome.get("status") != "ok" or compact.get("status") != "committed":
            continue
        extra = {"table": outcome["table"], "catalog": catalog, "now_ms": now_ms,
                 **{k: compact[k] for k in EXTRA_FIGURES if compact.get(k) is not None}}
        out.append(CompactionEvent(table_uri(catalog, outcome["table"]), extra))
    return out


def add_events(outlet_events, events: list[CompactionEvent]) -> None:
    """Add the events to the task's outlet events through the DAG's alias (Airflow only here)."""
    from airflow.sdk import Asset, AssetAlias

    alias = outlet_events[AssetAlias(ALIAS)]
    for event in events:
        alias.add(Asset(event.uri), extra=event.extra)
