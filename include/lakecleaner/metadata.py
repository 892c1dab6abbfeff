"""Reading what evaluation needs from Iceberg metadata with pyiceberg: table properties, schema, and
per data file its size, offset bounds, Kafka partition and append time. No data file is opened.

pyiceberg has no Hadoop catalog, so for the embedded catalog tables are found by walking the
warehouse and read through their current metadata file (metadata/version-hint.text names it).
Every other catalog type goes through pyiceberg's own catalog.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from pyiceberg import types as T
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFileContent, ManifestContent

from .config import LakecleanerConfig, raw_setting
from .evaluate import MIXED, FileStat, TableMetadata


def spark_type(t: T.IcebergType) -> str:
    """Iceberg type -> the Spark simpleString that config validation speaks."""
    simple = {T.LongType: "bigint", T.IntegerType: "int", T.StringType: "string", T.BooleanType: "boolean",
              T.TimestampType: "timestamp_ntz", T.TimestamptzType: "timestamp", T.BinaryType: "binary",
              T.DoubleType: "double", T.FloatType: "float", T.DateType: "date"}
    for cls, name in simple.items():
        if isinstance(t, cls):
            return name
    if isinstance(t, T.ListType):
        return f"array<{spark_type(t.element_type)}>"
    if isinstance(t, T.StructType):
        return "struct<" + ",".join(f"{f.name}:{spark_type(f.field_type)}" for f in t.fields) + ">"
    return str(t)


def _hadoop_tables(warehouse: str, namespaces: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    """(namespace.table, current metadata file) for every table under a Hadoop warehouse."""
    root = Path(warehouse.removeprefix("file:"))
    if not root.is_dir():
        return
    for ns in sorted(p for p in root.iterdir() if p.is_dir()):
        if namespaces and ns.name not in namespaces:
            continue
        for tdir in sorted(p for p in ns.iterdir() if p.is_dir()):
            hint = tdir / "metadata" / "version-hint.text"
            if hint.is_file():
                yield f"{ns.name}.{tdir.name}", str(tdir / "metadata" / f"v{hint.read_text().strip()}.metadata.json")


class MetadataReader:
    def __init__(self, cfg: LakecleanerConfig):
        self.cfg = cfg
        self._catalog = None

    def catalog(self):
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            self._catalog = load_catalog(self.cfg.catalog.name, **self.cfg.catalog.pyiceberg_properties_resolved())
        return self._catalog

    def list_tables(self, namespaces: tuple[str, ...] = ()) -> list[str]:
        """Every table in the catalog (filtered by namespace); the caller keeps cleanup.policy=compact."""
        namespaces = namespaces or self.cfg.cleaner.namespaces
        if self.cfg.catalog.type == "hadoop":
            return [name for name, _ in _hadoop_tables(self.cfg.catalog.warehouse, namespaces)]
        out = []
        for ns in self.catalog().list_namespaces():
            if namespaces and ns[-1] not in namespaces:
                continue
            out += [".".join(ident[-2:]) for ident in self.catalog().list_tables(ns)]
        return sorted(out)

    def load(self, table: str):
        if self.cfg.catalog.type == "hadoop":
            from pyiceberg.table import StaticTable

            ns, name = table.split(".")
            tdir = Path(self.cfg.catalog.warehouse.removeprefix("file:")) / ns / name / "metadata"
            version = (tdir / "version-hint.text").read_text().strip()
            return StaticTable.from_metadata(str(tdir / f"v{version}.metadata.json"))
        return self.catalog().load_table(table)

    def read(self, table: str) -> TableMetadata:
        tbl = self.load(table)
        return table_metadata(table, tbl, self.cfg.defaults)


def table_metadata(table: str, tbl, defaults=None) -> TableMetadata:
    props = dict(tbl.properties)
    schema = tbl.schema()
    columns = {f.name: spark_type(f.field_type) for f in schema.fields}
    meta = TableMetadata(table, props, columns, snapshots=len(tbl.metadata.snapshots))
    snapshot = tbl.current_snapshot()
    if snapshot is None:
        return meta
    offset_name = str(raw_setting("compaction.offset.column", props, defaults)).strip()
    part_name = str(raw_setting("compaction.partition.column", props, defaults)).strip()
    offset_field = _field(schema, offset_name)
    part_field = _field(schema, part_name)
    part_index = None
    if part_field is not None:
        for i, pf in enumerate(tbl.spec().fields):
            if pf.source_id == part_field.field_id and str(pf.transform) == "identity":
                part_index = i
    times = {s.snapshot_id: s.timestamp_ms for s in tbl.metadata.snapshots}
    for manifest in snapshot.manifests(tbl.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            df = entry.data_file
            if df.content != DataFileContent.DATA:
                continue
            meta.files.append(FileStat(
                size=df.file_size_in_bytes,
                offset_lower=_bound(df.lower_bounds, offset_field),
                offset_upper=_bound(df.upper_bounds, offset_field),
                added_at_ms=times.get(entry.snapshot_id, 0),
                partition=_partition(df, part_field, part_index)))
    return meta


def _field(schema, name: str):
    try:
        return schema.find_field(name, case_sensitive=False)
    except ValueError:
        return None


def _bound(bounds, field):
    if field is None or not bounds or field.field_id not in bounds:
        return None
    return int(from_bytes(field.field_type, bounds[field.field_id]))


def _partition(df, part_field, part_index):
    if part_field is None:
        return None
    if part_index is not None:
        return df.partition[part_index]
    lo, hi = _bound(df.lower_bounds, part_field), _bound(df.upper_bounds, part_field)
    return lo if lo is not None and lo == hi else MIXED


def warehouse_exists(cfg: LakecleanerConfig) -> bool:
    return cfg.catalog.type != "hadoop" or os.path.isdir(cfg.catalog.warehouse.removeprefix("file:"))
