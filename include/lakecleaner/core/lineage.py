"""How OpenLineage and Airflow's assets name an Iceberg table of a catalog: pure naming, no I/O.

Three names, each for a reader that already has its own convention:

- **the dataset** (``table_dataset``): the table's physical location, named by OpenLineage's naming
  spec for file systems and object stores (``file`` + path, ``s3://<bucket>`` + key, ...). It is what
  openlineage-spark names an Iceberg table by, so a compaction joins the lineage graph of the Spark
  jobs that write the table.
- **the catalog's table identifier** (``spark_identifier``): the TABLE symlink openlineage-spark
  puts beside it, per catalog type: the REST catalog's URI, ``hive://<host>:<port>`` of the
  metastore, the JDBC database (``postgres://<host>:<port>``, name ``<database>.<ns>.<table>``),
  Glue's ``arn:aws:glue:<region>:<account>`` (name ``table/<ns>/<table>``), a Hadoop catalog's
  warehouse (``file:/<path>``). None where the catalog's properties do not say enough.
- **the asset** (``table_uri``, ``asset_dataset``): ``iceberg://<catalog id>/<ns>/<table>``, where the
  catalog id is the catalog's own address (``catalog_id``), never the config's local alias; as an
  OpenLineage identifier, namespace ``iceberg://<catalog id>`` and name ``<ns>.<table>``. It is the
  second symlink of every dataset lakecleaner reports, and what the provider's asset converter makes
  of an asset, so a consumer's ``Asset`` and the compaction's lineage name the table alike.

No name carries a secret: user and password of a URI, its query (JDBC passwords travel there) and
fragment are dropped (``public_uri``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Mapping
from urllib.parse import SplitResult, urlsplit

from lakecleaner.core.config import CatalogConfig

SCHEME = "iceberg"  # the asset URI's, registered by the provider (lakecleaner.airflow.provider)
TABLE = "TABLE"  # the symlinks facet's identifier type
_OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}  # spec: s3://, gs://
_PG_PORT = "5432"
LOCALHOST = "localhost"  # a local catalog's (a Hadoop warehouse, a SQLite file) authority, as file://localhost/


@dataclass(frozen=True)
class DatasetName:
    """An OpenLineage dataset's identity."""
    namespace: str
    name: str


def split_table(table: str) -> tuple[str, str]:
    """``namespace.table`` as its two parts; anything else is refused (lakecleaner's tables are two-level)."""
    namespace, _, name = table.partition(".")
    if not namespace or not name or "." in name:
        raise ValueError(f"table {table!r}: expected namespace.table")
    return namespace, name


# ---------------------------------------------------------------- URIs without secrets
def public_uri(uri: str) -> SplitResult:
    """``uri`` parsed, without user, password, query and fragment (where JDBC URLs carry credentials),
    nor SQL Server's ``;name=value`` properties (a password among them)."""
    parts = urlsplit(uri.strip())
    parts = parts._replace(netloc=parts.netloc.split(";", 1)[0], path=parts.path.split(";", 1)[0])
    try:
        port = parts.port
    except ValueError:  # its message quotes the rest of the address, which may hold a secret
        raise ValueError("the URI's port is not a number") from None
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{port}" if port else "")
    return parts._replace(netloc=netloc, query="", fragment="", path=parts.path.rstrip("/") or "")


def _properties(catalog: CatalogConfig) -> dict[str, str]:
    """The catalog's properties as Iceberg's Spark catalog sees them (openlineage-spark reads those),
    pyiceberg's only where Spark has none."""
    return {**{k: str(v) for k, v in catalog.pyiceberg_properties.items()},
            **{k: str(v) for k, v in {**catalog.properties, **catalog.spark_properties}.items()}}


def _local_path(location: str) -> str | None:
    """The absolute path of a local location (a path or a file: URI without a host), else None."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file") and not parts.netloc:
        path = parts.path if parts.scheme else location
        return str(PurePosixPath("/", path)).rstrip("/") or "/"
    return None


# ---------------------------------------------------------------- the dataset: the table's location
def location_dataset(location: str) -> DatasetName:
    """OpenLineage's name of a file-system or object-store location: ``file`` + path,
    ``s3://<bucket>`` + key (s3a and s3n are S3), ``gs://<bucket>`` + key, ``<scheme>://<authority>`` + path."""
    local = _local_path(location)
    if local is not None:
        return DatasetName("file", local)
    parts = public_uri(location)
    if parts.scheme == "file":
        return DatasetName(f"file://{parts.netloc}", parts.path or "/")
    store = _OBJECT_STORES.get(parts.scheme)
    if store:
        return DatasetName(f"{store}://{parts.netloc}", parts.path.lstrip("/") or "/")
    return DatasetName(f"{parts.scheme}://{parts.netloc}", parts.path or "/")


def default_location(catalog: CatalogConfig, table: str) -> str:
    """Where Iceberg puts a table by default (``<warehouse>/<ns>/<table>``): a Hadoop catalog's
    table is always there; for the others, the location when the catalog cannot be asked."""
    namespace, name = split_table(table)
    return f"{catalog.warehouse.rstrip('/')}/{namespace}/{name}"


def table_dataset(location: str) -> DatasetName:
    """The table's dataset: its location's name (openlineage-spark's identity of an Iceberg table)."""
    return location_dataset(location)


# ---------------------------------------------------------------- the catalog's own identifier
def _first_uri(props: Mapping[str, str]) -> str | None:
    uri = (props.get("uri") or "").split(",")[0].strip()  # a metastore list: the first
    return uri or None


def _glue_region(props: Mapping[str, str]) -> str | None:
    return props.get("glue.region") or props.get("client.region") or props.get("region_name")


def _glue_arn(props: Mapping[str, str]) -> str | None:
    region = _glue_region(props)
    account = props.get("glue.id") or props.get("glue.account-id")
    return f"arn:aws:glue:{region}:{account}" if region and account else None


def _jdbc(uri: str) -> SplitResult:
    """A JDBC URL (jdbc:postgresql://..., jdbc:sqlite:...) or pyiceberg's SQLAlchemy URL
    (postgresql+psycopg2://..., sqlite:///...) as one parsed, secret-free URI: postgres or sqlite."""
    parts = public_uri(uri.removeprefix("jdbc:"))
    scheme = parts.scheme.split("+")[0]
    if scheme in ("postgresql", "postgres"):
        return parts._replace(scheme="postgres", netloc=parts.netloc if parts.port else f"{parts.netloc}:{_PG_PORT}")
    if scheme == "sqlite":
        return parts._replace(path=str(PurePosixPath("/", parts.path)), netloc="")
    return parts


def spark_identifier(catalog: CatalogConfig, table: str) -> DatasetName | None:
    """The TABLE symlink openlineage-spark gives a table of this catalog (its IcebergHandler's
    catalog type handlers), or None where the catalog's properties do not say enough."""
    props, namespace = _properties(catalog), split_table(table)[0]
    uri = _first_uri(props)
    if catalog.type == "hadoop":
        return DatasetName("file:" + (_local_path(catalog.warehouse) or catalog.warehouse), table)
    if catalog.type == "glue":
        arn = _glue_arn(props)
        return DatasetName(arn, f"table/{namespace}/{split_table(table)[1]}") if arn else None
    if uri is None:
        return None
    if catalog.type == "rest":
        return DatasetName(public_uri(uri).geturl(), table)
    if catalog.type == "hive":
        return DatasetName(f"hive://{public_uri(uri).netloc}", table)
    parts = _jdbc(uri)  # sql
    if parts.scheme == "postgres" and parts.path.strip("/"):
        return DatasetName(f"postgres://{parts.netloc}", f"{parts.path.strip('/')}.{table}")
    return DatasetName(f"{parts.scheme}:{parts.path}" if not parts.netloc else f"{parts.scheme}://{parts.netloc}",
                       table)


def catalog_uri(catalog: CatalogConfig) -> str | None:
    """The catalog's ``uri`` property without credentials (a JDBC URL stays one), None without one."""
    uri = _first_uri(_properties(catalog))
    if uri is None:
        return None
    jdbc = uri.startswith("jdbc:")
    return ("jdbc:" if jdbc else "") + public_uri(uri.removeprefix("jdbc:")).geturl()


def public_warehouse(catalog: CatalogConfig) -> str | None:
    """The catalog's warehouse without credentials: a location (a local one as ``file:/<path>``),
    or a REST catalog's warehouse name as given."""
    local = _local_path(catalog.warehouse) if catalog.type == "hadoop" else None
    if local:
        return "file:" + local
    return public_uri(catalog.warehouse).geturl() if "://" in catalog.warehouse else catalog.warehouse or None


# ---------------------------------------------------------------- the asset
def catalog_id(catalog: CatalogConfig) -> str:
    """What identifies the catalog wherever it is used (the asset URI's authority and path, no
    scheme, no secret): a REST catalog's URI, a metastore's ``host:port``, a JDBC catalog's
    ``host:port/database`` (a SQLite file's ``localhost/<path>``), Glue's
    ``glue.<region>.amazonaws.com/<account>``, a Hadoop catalog's ``localhost/<warehouse path>``."""
    props = _properties(catalog)
    uri = _first_uri(props)
    if catalog.type == "hadoop":  # always local (config: a hadoop catalog's warehouse is checked so)
        return LOCALHOST + (_local_path(catalog.warehouse) or catalog.warehouse)
    if catalog.type == "glue":
        region, account = _glue_region(props), props.get("glue.id") or props.get("glue.account-id")
        host = f"glue.{region}.amazonaws.com" if region else "glue.amazonaws.com"
        return f"{host}/{account}" if account else host
    if uri is None:
        raise ValueError(f"catalog {catalog.name}: a {catalog.type} catalog without a uri property names no catalog")
    parts = _jdbc(uri) if catalog.type == "sql" else public_uri(uri)
    return (parts.netloc or LOCALHOST) + parts.path


def table_uri(catalog: CatalogConfig, table: str) -> str:
    """``iceberg://<catalog id>/<namespace>/<table>``: the table's Airflow asset."""
    namespace, name = split_table(table)
    return f"{SCHEME}://{catalog_id(catalog).rstrip('/')}/{namespace}/{name}"


def asset_dataset(uri: str) -> DatasetName:
    """The OpenLineage identity of an ``iceberg://`` asset: namespace ``iceberg://<catalog id>``,
    name ``<namespace>.<table>`` (the last two path segments)."""
    parts = urlsplit(uri)
    segments = [p for p in parts.path.split("/") if p]
    if parts.scheme != SCHEME or not parts.netloc or len(segments) < 2 or parts.query or parts.fragment:
        raise ValueError(f"{uri!r}: an iceberg asset URI is iceberg://<catalog id>/<namespace>/<table>")
    return DatasetName(f"{SCHEME}://" + "/".join([parts.netloc, *segments[:-2]]), f"{segments[-2]}.{segments[-1]}")


def symlinks(catalog: CatalogConfig, table: str) -> tuple[DatasetName, ...]:
    """The table identifiers a dataset of this table carries: openlineage-spark's (where known),
    then the asset's."""
    spark = spark_identifier(catalog, table)
    return (*((spark,) if spark else ()), asset_dataset(table_uri(catalog, table)))
