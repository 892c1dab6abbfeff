"""Creating and filling compacted tables with the contract's default column names (demo, tests,
benchmarks), and reading a table back as reference-model records and its checkpoint."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from lakecleaner.core.config import CHECKPOINT_PROPERTY, LakecleanerConfig, TableConfig
from lakecleaner.core.table import LAYOUT_PROPERTIES, TableRef
from lakecleaner.spark.catalog import commit_times, load_table_config
from lakecleaner.spark.frames import local_frame
from lakecleaner.core.model import Record
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.strategies import Strategy, ident, sql_string

# Kafka's record fields, as an Iceberg table. `timestamp` is epoch milliseconds, like Kafka's.
KAFKA_SCHEMA = (
    "`key` string, `offset` bigint, `partition` int, `timestamp` bigint, "
    "`headers` array<struct<key:string,value:binary>>, `tombstone` boolean, `value` string"
)


def create_compacted_table(spark, cfg: LakecleanerConfig, table: str, properties: Mapping[str, Any] | None = None,
                           schema: str = KAFKA_SCHEMA, partition_by: str | None = "partition",
                           replace: bool = True, format_version: int = 2) -> TableRef:
    """A compacted table with the layout the cleaner relies on, in Iceberg format ``format_version``
    (2: position-delete files; 3: deletion vectors). ``properties`` override both."""
    ref = TableRef.parse(table, cfg.catalog.name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{ref.catalog}`.`{ref.namespace}`")
    if replace:
        spark.sql(f"DROP TABLE IF EXISTS {ref.sql()} PURGE")
    props = {"cleanup.policy": "compact", "format-version": str(format_version), **LAYOUT_PROPERTIES,
             **{k: str(v) for k, v in (properties or {}).items()}}
    tblprops = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in props.items())
    partitioning = f"PARTITIONED BY ({ident(partition_by)})" if partition_by else ""
    spark.sql(f"CREATE TABLE {ref.sql()} ({schema}) USING iceberg {partitioning} TBLPROPERTIES ({tblprops})")
    return ref


def append(spark, ref: TableRef, rows: Iterable[Mapping[str, Any]], schema: str = KAFKA_SCHEMA) -> None:
    """One append = one Iceberg snapshot, as one batch from a landing job."""
    from pyspark.sql.types import _parse_datatype_string

    struct = _parse_datatype_string(schema)
    data = [tuple(r.get(f.name) for f in struct.fields) for r in rows]
    if data:
        local_frame(spark, data, struct).writeTo(ref.sql()).append()


def record_from_row(row: Mapping[str, Any], tc: TableConfig, appended_at_ms: int) -> Record:
    """A table row as the reference model sees it, interpreted with the shared rules."""
    keys = tuple(row.get(k) for k in tc.key_columns)
    strategy = Strategy(tc)
    version, anomalous = strategy.version_of(row)
    return Record(
        partition=row.get(tc.partition_column) if tc.partition_column else None,
        offset=row.get(tc.offset_column),
        key=None if any(k is None for k in keys) else keys,
        appended_at_ms=appended_at_ms,
        tombstone=strategy.tombstone_of(row),
        version=version,
        anomalous=anomalous,
    )


def record_ids(spark, table: TableRef | str) -> list[tuple[int, int]]:
    """The table's records as the model names them, (partition, offset), sorted: what a run kept."""
    name = table.sql() if isinstance(table, TableRef) else table
    return sorted((r["partition"], r["offset"]) for r in spark.table(name).select("partition", "offset").collect())


def stored_checkpoint(spark, table: TableRef | str) -> Checkpoint:
    """The cleaner's checkpoint as the table's properties hold it now (empty if it has none)."""
    name = table.sql() if isinstance(table, TableRef) else table
    rows = spark.sql(f"SHOW TBLPROPERTIES {name}").where(f"key = '{CHECKPOINT_PROPERTY}'").collect()
    return Checkpoint.from_json(rows[0]["value"] if rows else None)


def read_model_records(spark, cfg: LakecleanerConfig, table: str) -> tuple[list[Record], TableConfig]:
    """The table's current rows as model records, with each row's append time from Iceberg metadata."""
    from pyspark.sql import functions as F

    ref = TableRef.parse(table, cfg.catalog.name)
    tc, _ = load_table_config(spark, cfg, ref)
    added_by = {r["p"]: r["s"] for r in spark.sql(
        f"SELECT data_file.file_path AS p, snapshot_id AS s FROM {ref.meta('entries')} WHERE status < 2").collect()}
    times = commit_times(spark, ref, added_by.values())
    rows = spark.table(ref.sql()).select("*", F.col("_file")).collect()
    return [record_from_row(r.asDict(recursive=True), tc, times.get(added_by.get(r["_file"]), 0)) for r in rows], tc
