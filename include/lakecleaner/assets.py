"""Airflow Assets for compacted tables, so a consumer DAG can be scheduled on "this table was
compacted" (``schedule=[Asset("iceberg://lake/demo/orders")]``).

The tables are known only at run time, so the DAG declares one ``AssetAlias`` as its outlet and
adds an event per table through it (``outlet_events[alias].add(Asset(uri), extra=...)``); Airflow
then records an event for each table's own asset. The URI names the catalog, namespace and table:
``iceberg://<catalog>/<namespace>/<table>``. Airflow 3 keeps a URI whose scheme no provider
registers as it is (lower-case scheme, no trailing slash), so the URI is stable across runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

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
