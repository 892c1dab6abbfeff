"""Airflow Assets for compacted tables, so a consumer DAG can be scheduled on "this table was
compacted" (``schedule=[Asset("iceberg://polaris.example.com:8181/api/catalog/demo/orders")]``).

The tables are known only at run time, so the DAG declares one ``AssetAlias`` as its outlet and
adds an event per table through it (``outlet_events[alias].add(Asset(uri), extra=...)``); Airflow
then records an event for each table's own asset. The URI names the catalog by its own address, not
by the config's local alias, then the namespace and table: ``iceberg://<catalog id>/<namespace>/<table>``
(lakecleaner.core.lineage.catalog_id: a REST catalog's URI without its scheme, a metastore's or JDBC
database's ``host:port[/database]``, ``glue.<region>.amazonaws.com/<account>``, a Hadoop warehouse's
``localhost/<path>``). Earlier versions named the alias (``iceberg://lake/<namespace>/<table>``):
README "Assets" says what a consumer scheduled on it changes. The provider registers the ``iceberg``
scheme with ``normalize_table_uri`` and an OpenLineage converter (lakecleaner.airflow.provider), so
a consumer's URI of another shape is refused where it is declared instead of never matching, and an
asset and the compaction's lineage name the table alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import SplitResult

from lakecleaner.core import lineage
from lakecleaner.core.config import CatalogConfig
from lakecleaner.core.records import FIGURES

ALIAS = "lakecleaner-compacted"  # the DAG's outlet; events for every compacted table go through it
SCHEME = lineage.SCHEME
EXTRA_FIGURES = FIGURES  # what an event's extra carries: the run's figures (records.RunFigures)


def table_uri(catalog: CatalogConfig, table: str) -> str:
    """``iceberg://<catalog id>/<namespace>/<table>`` for ``namespace.table`` of ``catalog`` (the one
    rule: lakecleaner.core.lineage.table_uri)."""
    return lineage.table_uri(catalog, table)


def normalize_table_uri(parts: SplitResult) -> SplitResult:
    """Airflow's URI handler for ``iceberg://``: a catalog id (an authority, perhaps a path), a
    namespace and a table, nothing else."""
    path = [p for p in parts.path.split("/") if p]
    if not parts.netloc or len(path) < 2 or parts.query or parts.fragment:
        raise ValueError(f"{parts.geturl()!r}: an iceberg asset URI is iceberg://<catalog id>/<namespace>/<table>")
    return parts._replace(path="/" + "/".join(path))


@dataclass(frozen=True)
class CompactionEvent:
    """One table's asset event: its URI and the run's figures (the event's ``extra``)."""
    uri: str
    extra: dict[str, Any]


def committed(outcomes: Iterable[Mapping]) -> list[tuple[str, Mapping]]:
    """(table, its compaction step's figures) of each outcome whose chain ended ok with a committed
    compaction, from the applications' report documents: what an asset event and the lineage
    announce (a dry run, a failed compaction or a failed validation announces nothing)."""
    out = []
    for outcome in outcomes:
        compact = (outcome.get("steps") or {}).get("compact") or {}
        if outcome.get("status") == "ok" and compact.get("status") == "committed":
            out.append((outcome["table"], compact))
    return out


def compaction_events(catalog: CatalogConfig, outcomes: Iterable[Mapping], now_ms: int) -> list[CompactionEvent]:
    """An event for each table compacted (``committed``), with its figures; ``catalog`` in the
    extra stays the config's name for the catalog, as before."""
    out = []
    for table, compact in committed(outcomes):
        extra = {"table": table, "catalog": catalog.name, "now_ms": now_ms,
                 **{k: compact[k] for k in EXTRA_FIGURES if compact.get(k) is not None}}
        out.append(CompactionEvent(table_uri(catalog, table), extra))
    return out


def add_events(outlet_events, events: list[CompactionEvent]) -> None:
    """Add the events to the task's outlet events through the DAG's alias (Airflow only here)."""
    from airflow.sdk import Asset, AssetAlias

    alias = outlet_events[AssetAlias(ALIAS)]
    for event in events:
        alias.add(Asset(event.uri), extra=event.extra)
