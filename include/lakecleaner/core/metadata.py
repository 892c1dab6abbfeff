"""Reading what evaluation needs from Iceberg metadata with pyiceberg: table properties, schema,
per data file its size, record count, offset bounds, Kafka partition and append time, and per
delete file (position deletes, deletion vectors, equality deletes) its kind, bytes and record
count (core.deletefiles). No data or delete file is opened.

pyiceberg has no Hadoop catalog, so for the embedded catalog tables are found by walking the
warehouse and read through their current metadata file (metadata/version-hint.text names it).
Every other catalog type goes through pyiceberg's own catalog.
"""
from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Callable, Iterator

from pyiceberg import types as T
from pyiceberg.avro.file import META_SCHEMA, AvroFile, AvroFileHeader
from pyiceberg.avro.resolver import construct_reader, resolve_reader
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import NoSuchTableError as PyicebergNoSuchTable
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION, MANIFEST_ENTRY_SCHEMAS, MANIFEST_LIST_FILE_SCHEMAS, DataFile as IcebergDataFile, DataFileContent,
    FileFormat, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile, PartitionFieldSummary)
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from lakecleaner.core.config import INTEGRAL_TYPES, LakecleanerConfig, raw_setting
from lakecleaner.core.datafiles import Bounds, DataFile
from lakecleaner.core.deletefiles import DeleteFile, DeleteKind
from lakecleaner.core.evaluate import RefSnapshot, TableMetadata
from lakecleaner.core.table import NoSuchTableError

log = logging.getLogger(__name__)


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


def _hadoop_tables(warehouse: str, namespaces: tuple[str, ...]) -> Iterator[str]:
    """namespace.table for every table under a Hadoop warehouse: a directory with a version hint.
    The hint is not read here: one table's unreadable hint is that table's problem (load says so),
    not the end of every table's evaluation."""
    root = Path(warehouse.removeprefix("file:"))
    if not root.is_dir():
        return
    for ns in sorted(p for p in root.iterdir() if p.is_dir()):
        if namespaces and ns.name not in namespaces:
            continue
        for tdir in sorted(p for p in ns.iterdir() if p.is_dir()):
            if (tdir / "metadata" / "version-hint.text").is_file():
                yield f"{ns.name}.{tdir.name}"


def _hadoop_metadata_file(metadata_dir: Path) -> str:
    """The current metadata file its version hint names; a hint that names no version is an error
    naming the file."""
    hint = metadata_dir / "version-hint.text"
    version = hint.read_bytes().strip()
    if not version.isdigit():
        raise ValueError(f"{hint} names no metadata version: {version[:40]!r}")
    return str(metadata_dir / f"v{int(version)}.metadata.json")


class MetadataReader:
    """Reads tables' metadata; with ``cache`` (evaluation's), each manifest's file statistics are
    read once and kept, so a run reads only the manifests added since the previous one."""

    def __init__(self, cfg: LakecleanerConfig, cache: "ManifestStatsCache | None" = None):
        self.cfg = cfg
        self.cache = cache
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
            return list(_hadoop_tables(self.cfg.catalog.warehouse, namespaces))
        out = []
        for ns in self.catalog().list_namespaces():
            if namespaces and ns[-1] not in namespaces:
                continue
            out += [".".join(ident[-2:]) for ident in self.catalog().list_tables(ns)]
        return sorted(out)

    def namespaces(self) -> list[str]:
        """The catalog's namespaces (their last level, as list_tables filters them)."""
        if self.cfg.catalog.type == "hadoop":
            root = Path(self.cfg.catalog.warehouse.removeprefix("file:"))
            return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        return sorted(ns[-1] for ns in self.catalog().list_namespaces())

    def load(self, table: str):
        """The table through pyiceberg; NoSuchTableError when the catalog has no such table (a table
        directory without its metadata is another matter: unreadable, as pyiceberg says)."""
        if self.cfg.catalog.type == "hadoop":
            from pyiceberg.table import StaticTable

            ns, name = table.split(".")
            tdir = Path(self.cfg.catalog.warehouse.removeprefix("file:")) / ns / name / "metadata"
            if not tdir.parent.is_dir():
                raise NoSuchTableError(table, f"no such table in catalog {self.cfg.catalog.name}")
            return StaticTable.from_metadata(_hadoop_metadata_file(tdir))
        try:
            return self.catalog().load_table(table)
        except PyicebergNoSuchTable:
            raise NoSuchTableError(table, f"no such table in catalog {self.cfg.catalog.name}") from None

    def read(self, table: str) -> TableMetadata:
        from lakecleaner.core.append_times import read_append_times

        tbl = self.load(table)
        return table_metadata(table, tbl, self.cfg.defaults, self.cache, lambda: read_append_times(self.cfg, table))


def own_table(cfg: LakecleanerConfig, name: str):
    """One of the cleaner's own tables in its meta namespace (run history, erasure requests) through
    pyiceberg, or None while it does not exist or holds no snapshot yet."""
    try:
        tbl = MetadataReader(cfg).load(f"{cfg.cleaner.meta_namespace}.{name}")
    except (FileNotFoundError, OSError) as exc:
        log.info("lakecleaner: no %s table yet (%s)", name, exc)
        return None
    except Exception as exc:  # noqa: BLE001 - pyiceberg's NoSuchTableError and friends
        if type(exc).__name__.startswith("NoSuch"):
            return None
        raise
    return tbl if tbl.current_snapshot() is not None else None


def _refs(tbl) -> tuple[RefSnapshot, ...]:
    """Every tag and branch but main, with its snapshot's commit time (0 if that snapshot is gone)."""
    times = {s.snapshot_id: s.timestamp_ms for s in tbl.metadata.snapshots}
    return tuple(RefSnapshot(name, str(ref.snapshot_ref_type.value).lower(), ref.snapshot_id,
                             times.get(ref.snapshot_id, 0))
                 for name, ref in sorted(tbl.metadata.refs.items()) if name != "main")


def table_metadata(table: str, tbl, defaults=None, cache: "ManifestStatsCache | None" = None,
                   expired_times: Callable[[], dict[int, int]] | None = None) -> TableMetadata:
    """``expired_times``: commit times of expired snapshots that still add live files (see
    append_times), read only when a live file's snapshot is gone."""
    props = dict(tbl.properties)
    schema = tbl.schema()
    columns = {f.name: spark_type(f.field_type) for f in schema.fields}
    meta = TableMetadata(table, props, columns, snapshots=len(tbl.metadata.snapshots), refs=_refs(tbl))
    snapshot = tbl.current_snapshot()
    if snapshot is None:
        return meta
    offset_name = str(raw_setting("compaction.offset.column", props, defaults)).strip()
    part_name = str(raw_setting("compaction.partition.column", props, defaults)).strip()
    # bounds only of integral columns: another type is the setting's mistake, which evaluation names
    offset_field = _integral_field(schema, offset_name)
    part_field = _integral_field(schema, part_name)
    part_index = None
    if part_field is not None:
        for i, pf in enumerate(tbl.spec().fields):
            if pf.source_id == part_field.field_id and str(pf.transform) == "identity":
                part_index = i
    # What a manifest's statistics depend on besides the manifest itself (immutable).
    layout = [getattr(offset_field, "field_id", None), getattr(part_field, "field_id", None), part_index, _ROWS]
    known = cache.load(table, layout) if cache else {}
    read: dict[str, list[tuple]] = {}
    deletes: dict[str, list[tuple]] = {}
    for manifest in read_manifest_list(tbl.io, snapshot.manifest_list):
        stats = known.get(manifest.manifest_path)
        if manifest.content == ManifestContent.DELETES:
            deletes[manifest.manifest_path] = stats if stats is not None else _delete_stats(tbl.io, manifest)
            continue
        if stats is None:
            stats = _manifest_stats(tbl.io, manifest, offset_field, part_field, part_index)
        read[manifest.manifest_path] = stats
    if cache and (read.keys() | deletes.keys()) != known.keys() and (known or len(read) >= CACHED_FROM_MANIFESTS):
        cache.save(table, layout, read, deletes)
    times = {s.snapshot_id: s.timestamp_ms for s in tbl.metadata.snapshots}
    if expired_times and any(stat[3] not in times for stats in read.values() for stat in stats):
        times = {**expired_times(), **times}
    for stats in read.values():
        meta.files += [DataFile(size=size, offsets=Bounds(lo, hi), partitions=_partition_bounds(partition),
                                appended_at_ms=times.get(snapshot_id, 0), snapshot_id=snapshot_id, records=records)
                       for size, lo, hi, snapshot_id, partition, records in stats]
    meta.deletes = [DeleteFile(DeleteKind(kind), size, records) for rows in deletes.values() for kind, size, records in rows]
    return meta


def _partition_bounds(partition) -> Bounds:
    """A file's partition bounds from a manifest statistics row: its one partition, [lower, upper]
    where it may hold several, or None (no partition column, or a null partition: unknown)."""
    if isinstance(partition, (list, tuple)):
        return Bounds(*partition)
    return Bounds() if partition is None else Bounds(partition, partition)


# The statistics rows' form, part of the cache's layout: a cache written before the rows kept a
# file's partition bounds ("mixed" for a file of several), its record count and the delete
# manifests' rows is read again once, not misread.
_ROWS = "partition-bounds+records+deletes"
# Below this many data manifests, reading them costs less than creating the cache's file (about
# 1 ms on a local disk): a table whose manifests maintenance merged is not cached.
CACHED_FROM_MANIFESTS = 4


def _manifest_stats(io, manifest: ManifestFile, offset_field, part_field, part_index) -> list[tuple]:
    """(size, offset lower and upper bound, adding snapshot, partition: see _partition_bounds,
    record count) of each live data file."""
    out = []
    for entry in read_live_entries(io, manifest):
        df = entry.data_file
        if df.content != DataFileContent.DATA:
            continue
        out.append((df.file_size_in_bytes, _bound(df.lower_bounds, offset_field), _bound(df.upper_bounds, offset_field),
                    entry.snapshot_id, _partition(df, part_field, part_index), df.record_count))
    return out


def _delete_stats(io, manifest: ManifestFile) -> list[tuple]:
    """(kind, bytes, record count: see core.deletefiles) of each live entry of a delete manifest."""
    out = []
    for entry in read_live_entries(io, manifest):
        df = entry.data_file
        if df.content == DataFileContent.EQUALITY_DELETES:
            out.append((DeleteKind.EQUALITY.value, df.file_size_in_bytes, df.record_count))
        elif df.file_format == FileFormat.PUFFIN:  # a deletion vector: its blob, not the shared Puffin file
            out.append((DeleteKind.DELETION_VECTOR.value, df[_CONTENT_SIZE], df.record_count))
        elif df.content == DataFileContent.POSITION_DELETES:
            out.append((DeleteKind.POSITION.value, df.file_size_in_bytes, df.record_count))
    return out


class ManifestStatsCache:
    """Evaluation's memory of what each manifest said, one document per table under the cleaner's
    state root (evaluation/<table>.json). Manifests never change once written, so an entry is never
    stale; the document keeps only the current snapshot's manifests, so it is as small as the
    table's manifest list. It is a cache: an unreadable or foreign document is ignored and
    rewritten (with a warning), and the evaluate task is its only writer."""

    def __init__(self, cfg: LakecleanerConfig):
        self.cfg = cfg

    @staticmethod
    def _name(table: str) -> str:
        from lakecleaner.core.state import document_name

        return f"evaluation/{document_name(table)}"

    def load(self, table: str, layout: list) -> dict[str, list[tuple]]:
        from lakecleaner.core.state import read_document

        try:
            doc = read_document(self.cfg, self._name(table))
            if doc is None or doc.get("layout") != layout:
                return {}
            return {path: [tuple(row) for row in rows] for path, rows in doc["manifests"].items()}
        except Exception as exc:  # noqa: BLE001 - a cache: read the manifests instead
            log.warning("lakecleaner: table %s: ignoring its evaluation cache (%s: %s)", table, type(exc).__name__, exc)
            return {}

    def save(self, table: str, layout: list, manifests: dict[str, list[tuple]],
             delete_manifests: dict[str, list[tuple]] | None = None) -> None:
        """``manifests``: data manifests' rows; ``delete_manifests``: delete manifests' (kept in the
        same map: a manifest's path says which it is)."""
        from lakecleaner.core.state import write_document

        if any(not isinstance(row[4], (int, list, type(None))) for rows in manifests.values() for row in rows):
            return  # a partition value JSON would not give back as it was: no cache for this table
        try:
            write_document(self.cfg, self._name(table),
                           {"layout": layout, "manifests": {**manifests, **(delete_manifests or {})}})
        except Exception as exc:  # noqa: BLE001 - a cache: the next run reads the manifests again
            log.warning("lakecleaner: table %s: cannot write its evaluation cache (%s: %s)", table,
                        type(exc).__name__, exc)


# Reading manifests: pyiceberg's own ``ManifestFile.fetch_manifest_entry`` and ``read_manifest_list``
# rebuild the Avro reader tree from each file's header schema (JSON -> Iceberg schema -> resolved
# reader): about 4 ms per manifest, 87% of evaluating a table with a manifest per append. Every
# manifest a table's writers produce with one partition spec carries the same header schema, so the
# reader tree is built once per distinct schema and kept (a bounded cache, shared by all tables and
# threads; readers hold no per-file state). The records and the inheritance rules are pyiceberg's.

_READER_CACHE_SIZE = 256
_readers: dict[tuple, object] = {}
_readers_lock = threading.Lock()
_HEADER_READER = construct_reader(META_SCHEMA, {-1: AvroFileHeader})
_MANIFEST_LIST = (MANIFEST_LIST_FILE_SCHEMAS[DEFAULT_READ_VERSION], {-1: ManifestFile, 508: PartitionFieldSummary},
                  {517: ManifestContent})
_MANIFEST = (MANIFEST_ENTRY_SCHEMAS[DEFAULT_READ_VERSION], {-1: ManifestEntry, 2: IcebergDataFile},
             {0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent})
# Delete manifests are read with the v3 schema, whose content_size_in_bytes is a deletion vector's
# blob size (absent from a v2 manifest: None, and a v2 table has no DV).
_DELETE_MANIFEST = (MANIFEST_ENTRY_SCHEMAS[3], *_MANIFEST[1:])
_CONTENT_SIZE = [f.name for f in MANIFEST_ENTRY_SCHEMAS[3].find_field("data_file").field_type.fields].index(
    "content_size_in_bytes")


class _CachedReaderAvroFile(AvroFile):
    """pyiceberg's AvroFile with the header read and the reader tree taken from the cache."""

    def __enter__(self):
        from pyiceberg.avro.decoder import new_decoder

        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = _HEADER_READER.read(self.decoder)
        schema_json = self.header.meta.get("avro.schema")
        if schema_json is None:
            raise ValueError(f"no schema in the Avro header of {self.input_file.location}")
        key = (schema_json, id(self.read_schema))
        cached = _readers.get(key)
        if cached is None:
            schema = AvroSchemaConversion().avro_to_iceberg(json.loads(schema_json))
            cached = (schema, resolve_reader(schema, self.read_schema, self.read_types, self.read_enums))
            with _readers_lock:
                if len(_readers) >= _READER_CACHE_SIZE:
                    _readers.clear()
                _readers[key] = cached
        self.schema, self.reader = cached
        return self


class _LocalInput:
    """A local file for AvroFile: opening it through pyiceberg's PyArrow FileIO costs more than
    reading a small manifest does."""

    def __init__(self, path: str):
        self.location = path

    def open(self):
        return open(self.location, "rb")


def _input(io, location: str):
    from lakecleaner.core.state import local_path

    path = local_path(location)
    return _LocalInput(path) if path is not None else io.new_input(location)


def read_manifest_list(io, manifest_list: str) -> list[ManifestFile]:
    read_schema, types, enums = _MANIFEST_LIST
    with _CachedReaderAvroFile(_input(io, manifest_list), read_schema, types, enums) as reader:
        return list(reader)


def read_live_entries(io, manifest: ManifestFile) -> list[ManifestEntry]:
    """The manifest's entries that are not deleted (a delete manifest's with its v3 fields), with
    the snapshot id a v2 ADDED entry leaves to its manifest filled in (the spec's inheritance, as
    pyiceberg applies it)."""
    read_schema, types, enums = _DELETE_MANIFEST if manifest.content == ManifestContent.DELETES else _MANIFEST
    with _CachedReaderAvroFile(_input(io, manifest.manifest_path), read_schema, types, enums) as reader:
        entries = [e for e in reader if e.status != ManifestEntryStatus.DELETED]
    for entry in entries:
        if entry.snapshot_id is None:
            entry.snapshot_id = manifest.added_snapshot_id
    return entries


def _field(schema, name: str):
    try:
        return schema.find_field(name, case_sensitive=False)
    except ValueError:
        return None


def _integral_field(schema, name: str):
    field = _field(schema, name)
    return field if field is not None and spark_type(field.field_type) in INTEGRAL_TYPES else None


def _bound(bounds, field):
    if field is None or not bounds or field.field_id not in bounds:
        return None
    return int(from_bytes(field.field_type, bounds[field.field_id]))


def _partition(df, part_field, part_index):
    """A file's partition as _partition_bounds reads it: from the partition spec (identity on the
    partition column), else from the column's bounds."""
    if part_field is None:
        return None
    if part_index is not None:
        return df.partition[part_index]
    bounds = Bounds(_bound(df.lower_bounds, part_field), _bound(df.upper_bounds, part_field))
    return bounds.single if bounds.single is not None else [bounds.lower, bounds.upper]
