"""The latest-per-key view for readers: between runs a table's dirty head still holds superseded
records; this view shows one record per (partition, key), its winner under the table's own strategy
(strategies.Strategy, the rule the engine and the quality suite use), tombstones and bad records
hidden. Rendered from metadata only (pyiceberg, no Spark); registering it (lakecleaner.spark.view) needs a
catalog with views.
"""
from __future__ import annotations

from dataclasses import dataclass

from lakecleaner.core.table import NoSuchTableError, TableRef, first_line
from lakecleaner.core.config import ConfigError, LakecleanerConfig, is_compacted, resolve_table
from lakecleaner.core.strategies import Strategy

VIEW_SUFFIX = "__latest"


class ViewError(RuntimeError):
    """The view could not be rendered or registered; the message names the table or the catalog."""


@dataclass(frozen=True)
class LatestView:
    """A table's latest-per-key view: where it is registered and its SQL (runnable by Spark as is)."""

    table: TableRef
    view: TableRef
    sql: str


def view_ref(table: TableRef, name: str | None) -> TableRef:
    """``<table>__latest`` in the table's namespace; ``name`` (view or namespace.view) overrides it."""
    if not name:
        return TableRef(table.catalog, table.namespace, table.name + VIEW_SUFFIX)
    return TableRef.parse(name if "." in name else f"{table.namespace}.{name}", table.catalog)


def latest_view(cfg: LakecleanerConfig, table: str, name: str | None = None) -> LatestView:
    """The table's view, from its properties and schema as the catalog has them now (no Spark)."""
    from lakecleaner.core.metadata import MetadataReader, spark_type

    ref = TableRef.parse(table, cfg.catalog.name)
    try:
        tbl = MetadataReader(cfg).load(ref.short)
    except Exception as exc:  # noqa: BLE001 - any failure to load is reported with the table's name
        detail = exc.problem if isinstance(exc, NoSuchTableError) else first_line(exc)
        raise ViewError(f"table {ref.short}: cannot load table: {detail}") from exc
    props = dict(tbl.properties)
    if not is_compacted(props):
        raise ConfigError(ref.short, "cleanup.policy", props.get("cleanup.policy"), "not a compacted table (needs compact)")
    columns = {f.name: spark_type(f.field_type) for f in tbl.schema().fields}
    for column in columns:  # Spark substitutes ${...} even inside backquotes, in every reader's session
        if "${" in column:
            raise ConfigError(ref.short, "column", column, "a view cannot name a column with '${' (Spark reads ${...} "
                                                           "in SQL text as a variable); rename the column")
    tc = resolve_table(ref.short, props, columns, cfg.defaults)
    return LatestView(ref, view_ref(ref, name), Strategy(tc).latest_per_key_sql(ref.sql(), list(columns)))


# Iceberg catalogs without views (Iceberg's HadoopCatalog implements no ViewCatalog): refused before
# a Spark session is started. Any other catalog is asked, and its refusal reported the same way.
CATALOG_TYPES_WITHOUT_VIEWS = ("hadoop",)


def check_views_supported(cfg: LakecleanerConfig, view: LatestView) -> None:
    catalog = cfg.catalog
    if catalog.type in CATALOG_TYPES_WITHOUT_VIEWS:
        raise ViewError(f"catalog {catalog.name} ({catalog.type}) does not support views: cannot register "
                        f"{view.view.short}; run the printed SQL, or use a catalog with views (e.g. Iceberg's "
                        f"JDBC catalog with jdbc.schema-version=V1, REST)")


