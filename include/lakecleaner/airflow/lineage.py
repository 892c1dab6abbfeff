"""OpenLineage for the cleaning and forget applications, emitted from the Airflow side: the Airflow
OpenLineage provider asks each ``clean``/``forget`` task for its lineage when it ends
(``LakecleanerSubmitOperator.get_openlineage_facets_on_complete``), and sends it with the task's
own run event through whatever transport the deployment configured. (openlineage-spark, the listener
inside the Spark application, is a Maven jar; the Airflow side needs nothing but the provider.)

What a task reports, for each table its application changed (a committed compaction whose chain
ended ok, ``assets.committed``; a request carried out, for ``forget``):

- the table as input and output dataset, named as openlineage-spark names an Iceberg table: its
  location (lakecleaner.core.lineage.table_dataset), with a ``symlinks`` facet (the catalog's TABLE
  identifier as openlineage-spark gives it, and the asset's, so an ``iceberg://`` asset names the
  same table), a ``catalog`` facet (type, name, URI and warehouse, without credentials) and, from
  the run's figures, ``inputStatistics`` and ``outputStatistics``;
- a run facet, ``lakecleaner_compaction`` (each table's figures, the report's names) or
  ``lakecleaner_forget`` (each request carried out).

Imported only where the provider is installed (the operator imports it inside its method, the
provider info names ``iceberg_asset_to_openlineage`` by path). Never fails a task: the provider
logs and drops what a lineage method raises.
"""
from __future__ import annotations

import logging
import os
from typing import Iterable, Mapping

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset, InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    RunFacet,
    catalog_dataset,
    input_statistics_input_dataset,
    output_statistics_output_dataset,
    symlinks_dataset,
)
from openlineage.client.utils import RedactMixin

from lakecleaner.airflow.assets import committed
from lakecleaner.core import lineage
from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.records import FIGURES

PRODUCER = "https://github.com/lakecleaner/lakecleaner"
# The custom facets' JSON schemas ship in the package (resources/<Facet>.json) and are published with the source.
SCHEMA_URL = PRODUCER + "/blob/main/include/lakecleaner/resources/{0}.json#/$defs/{0}"
COMPACTION_FACET, FORGET_FACET = "lakecleaner_compaction", "lakecleaner_forget"

log = logging.getLogger("lakecleaner")


# ---------------------------------------------------------------- the run facets (custom facets)
# One table's compaction figures: the run's figures (records.FIGURES, as the report, the asset event and
# the run history name them), built from that one list rather than written again.
TableCompaction = attr.make_class(
    "TableCompaction", {"table": attr.ib(type=str), **{name: attr.ib(default=None) for name in FIGURES}},
    bases=(RedactMixin,))


@attr.define
class CompactionRunFacet(RunFacet):
    """The tables a ``clean`` application compacted, each with its figures."""
    tables: list[TableCompaction] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL.format("LakecleanerCompactionRunFacet")


@attr.define
class ErasureRequest(RedactMixin):
    """A request a ``forget`` application carried out (never its keys)."""
    request_id: str
    table: str
    status: str


@attr.define
class ForgetRunFacet(RunFacet):
    """The erasure requests a ``forget`` application carried out."""
    requests: list[ErasureRequest] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL.format("LakecleanerForgetRunFacet")


# ---------------------------------------------------------------- the datasets
def _catalog_facet(cfg: LakecleanerConfig) -> catalog_dataset.CatalogDatasetFacet:
    """The catalog as OpenLineage's catalog facet has it (openlineage-spark's fields), secret-free."""
    catalog = cfg.catalog
    uri = lineage.catalog_uri(catalog)
    return catalog_dataset.CatalogDatasetFacet(
        framework="iceberg", type="jdbc" if catalog.type == "sql" else catalog.type, name=catalog.name,
        metadataUri=uri, warehouseUri=lineage.public_warehouse(catalog), source="lakecleaner", producer=PRODUCER)


def _facets(cfg: LakecleanerConfig, table: str) -> dict:
    links = [symlinks_dataset.Identifier(namespace=s.namespace, name=s.name, type=lineage.TABLE)
             for s in lineage.symlinks(cfg.catalog, table)]
    return {"symlinks": symlinks_dataset.SymlinksDatasetFacet(identifiers=links, producer=PRODUCER),
            "catalog": _catalog_facet(cfg)}


def table_locations(cfg: LakecleanerConfig, tables: Iterable[str]) -> dict[str, str]:
    """Each table's location, from its metadata (pyiceberg, one catalog for all); Iceberg's default
    location (what Spark would name) for a table whose metadata cannot be read."""
    from lakecleaner.core.metadata import MetadataReader

    reader, out = MetadataReader(cfg), {}
    for table in tables:
        try:
            out[table] = reader.load(table).location()
        except Exception as exc:  # noqa: BLE001 - a name is still worth reporting
            log.warning("lakecleaner: lineage: cannot read %s's location (%s); naming its default location", table, exc)
            out[table] = lineage.default_location(cfg.catalog, table)
    return out


def datasets(cfg: LakecleanerConfig, table: str, location: str,
             figures: Mapping | None = None) -> tuple[InputDataset, OutputDataset]:
    """The table as the application's input and output, with its facets and, given ``figures`` (a
    compaction's), what it read and wrote."""
    name, facets, figures = lineage.table_dataset(location), _facets(cfg, table), figures or {}
    read = input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
        rowCount=figures.get("records_read"), size=figures.get("bytes_read"), producer=PRODUCER)
    written = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
        rowCount=figures.get("records_kept"), size=figures.get("bytes_written"), producer=PRODUCER)
    return (InputDataset(namespace=name.namespace, name=name.name, facets=facets,
                         inputFacets={"inputStatistics": read} if figures else {}),
            OutputDataset(namespace=name.namespace, name=name.name, facets=facets,
                          outputFacets={"outputStatistics": written} if figures else {}))


def _lineage(pairs: Iterable[tuple[InputDataset, OutputDataset]], run_facets: dict) -> OperatorLineage:
    pairs = list(pairs)
    return OperatorLineage(inputs=[i for i, _ in pairs], outputs=[o for _, o in pairs], run_facets=run_facets)


# ---------------------------------------------------------------- what a task reports
def compaction_lineage(cfg: LakecleanerConfig, outcomes: Iterable[Mapping]) -> OperatorLineage:
    """A ``clean`` application's lineage from its report's outcomes: each table compacted."""
    done = committed(outcomes)
    fields = attr.fields_dict(TableCompaction)
    tables = [TableCompaction(table=t, **{k: v for k, v in c.items() if k in fields and k != "table"})
              for t, c in done]
    where = table_locations(cfg, [t for t, _ in done])
    return _lineage((datasets(cfg, t, where[t], c) for t, c in done), {COMPACTION_FACET: CompactionRunFacet(
        tables=tables, producer=PRODUCER)} if done else {})


def carried_out(cfg: LakecleanerConfig, request_ids: Iterable[str], dag_run_id: str) -> list[ErasureRequest]:
    """The named requests this DAG run closed as done, read from the request table (pyiceberg)."""
    from pyiceberg.expressions import And, EqualTo, In

    from lakecleaner.core.erasure_requests import DONE, REQUESTS_TABLE
    from lakecleaner.core.metadata import own_table

    ids = tuple(request_ids)
    tbl = own_table(cfg, REQUESTS_TABLE) if ids else None
    if tbl is None:
        return []
    rows = tbl.scan(row_filter=And(In("request_id", ids), EqualTo("processed_by", dag_run_id), EqualTo("status", DONE)),
                    selected_fields=("request_id", "table_name", "status")).to_arrow().to_pylist()
    done = {(r["table_name"], r["request_id"]): r["status"] for r in rows}  # a row per key: one per request
    return [ErasureRequest(request_id=rid, table=table, status=status) for (table, rid), status in sorted(done.items())]


def forget_lineage(cfg: LakecleanerConfig, requests: list[ErasureRequest]) -> OperatorLineage:
    """A ``forget`` application's lineage: each table a request was carried out on."""
    where = table_locations(cfg, sorted({r.table for r in requests}))
    return _lineage((datasets(cfg, t, location) for t, location in where.items()),
                    {FORGET_FACET: ForgetRunFacet(requests=requests, producer=PRODUCER)} if requests else {})


def _option(args: Iterable[str], name: str) -> list[str]:
    return [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]


def operator_lineage(operator, task_instance) -> OperatorLineage:
    """The lineage of a ``clean`` or ``forget`` task that ran (the operator's rendered arguments, the
    task instance's run id and map index name the report and the requests; XCom is never read)."""
    from lakecleaner.airflow.dag import catalog_and_config
    from lakecleaner.core import scheduler

    job = os.path.basename(operator.application or "")
    _, cfg = catalog_and_config(operator.lakecleaner_config, operator.catalog_conn_id)
    if job == "clean.py" and task_instance.map_index >= 0:
        # the typed report, as announce reads it: one reader of the document, checked
        report = scheduler.read_report(cfg, task_instance.run_id, task_instance.map_index)
        return compaction_lineage(cfg, [o.to_dict() for o in report.outcomes] if report else [])
    if job == "forget.py":
        args = [str(a) for a in operator.application_args or []]
        return forget_lineage(cfg, carried_out(cfg, _option(args, "request-id"), task_instance.run_id))
    return OperatorLineage()


# ---------------------------------------------------------------- the asset converter
def iceberg_asset_to_openlineage(asset, lineage_context) -> Dataset:
    """The provider info's ``to_openlineage_converter`` for ``iceberg://``: an asset as the dataset
    identifier every table lakecleaner reports carries as a symlink (lakecleaner.core.lineage.asset_dataset)."""
    name = lineage.asset_dataset(asset.uri)
    return Dataset(namespace=name.namespace, name=name.name)
