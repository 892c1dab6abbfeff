"""Registering a table's latest-per-key view in its catalog (rendering it needs no Spark:
lakecleaner.core.view)."""
from __future__ import annotations

from pyspark.sql import SparkSession

from lakecleaner.core.config import LakecleanerConfig
from lakecleaner.core.table import first_line
from lakecleaner.core.view import LatestView, ViewError, check_views_supported


def register_view(spark, cfg: LakecleanerConfig, view: LatestView) -> None:
    """CREATE OR REPLACE the view in the catalog (the table's schema or strategy may have changed)."""
    catalog = cfg.catalog
    check_views_supported(cfg, view)
    try:
        spark.sql(f"CREATE OR REPLACE VIEW {view.view.sql()} AS {view.sql}")
    except Exception as exc:  # noqa: BLE001 - Spark's or Iceberg's refusal, via Py4J
        raise ViewError(f"catalog {catalog.name} ({catalog.type}): cannot register view {view.view.short} of table "
                        f"{view.table.short}: {first_line(exc)}") from exc


def register_with_own_session(cfg: LakecleanerConfig, view: LatestView) -> None:
    """Register from the CLI: a Spark session in this process (only for catalogs that may have
    views), stopped afterwards unless it was already running."""
    check_views_supported(cfg, view)

    from lakecleaner.spark.session import get_spark

    running = SparkSession.getActiveSession()
    spark = get_spark(cfg, "lakecleaner-view")
    try:
        register_view(spark, cfg, view)
    finally:
        if running is None:
            spark.stop()
