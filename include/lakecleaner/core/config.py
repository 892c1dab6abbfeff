"""Configuration: the YAML file (catalog, Spark, cleaner-wide defaults) and the per-table settings.

Per-table settings are Iceberg table properties with Kafka's topic-config names. The YAML's
``defaults`` section plays the role of Kafka's broker-level ``log.cleaner.*`` settings: a table
property, when present, overrides it. Every setting is declared once, in ``TABLE_SETTINGS``; the
Spark job, the scheduler, validation and the UI all resolve a table through ``resolve_table``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

LONG_MAX = 2**63 - 1
CONFIG_ENV = "LAKECLEANER_CONFIG"
# The shipped default: the embedded lakehouse (a Hadoop catalog in ./warehouse), and a reference of every section.
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[1] / "resources" / "lakecleaner.yaml"
CLEANUP_POLICY = "cleanup.policy"
CHECKPOINT_PROPERTY = "lakecleaner.checkpoint"
# A run's schedule interval where none can be read (a triggered-only DAG, the CLI): the guarantees
# count one interval (a tombstone may outlive its horizon by one; an erasure deadline adds one).
DEFAULT_INTERVAL_MS = 15 * 60_000
STRATEGIES = ("offset", "timestamp", "header", "column")
# A namespace, table or catalog name part (fullmatch: "$" would accept a trailing newline). Names
# become SQL identifiers and file names under the state root, so nothing else is accepted.
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ConfigError(ValueError):
    """A configuration value is invalid. Always names where it was found and what is wrong."""

    def __init__(self, table: str | None, prop: str, value: Any, problem: str):
        self.table, self.prop, self.value, self.problem = table, prop, value, problem
        where = f"table {table}: " if table else "lakecleaner config: "
        super().__init__(f"{where}{prop}={value!r} is invalid: {problem}")


# ---------------------------------------------------------------- value parsers
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Kafka's (Java's) Long.parseLong takes: no 1_000, no 1e3
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _long(lo: int = 0) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        text = str(raw).strip()
        if isinstance(raw, bool) or not _INTEGER.fullmatch(text):
            raise ValueError("not an integer")
        value = int(text)
        if not lo <= value <= LONG_MAX:
            raise ValueError(f"must be between {lo} and {LONG_MAX}")
        return value

    return parse


def _ratio(raw: str) -> float:
    text = str(raw).strip()
    if isinstance(raw, bool) or not _DECIMAL.fullmatch(text):
        raise ValueError("not a number")
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _bool(raw: str) -> bool:
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("must be true or false")
    return text == "true"


def _positive_bytes(raw: str) -> int:
    try:
        return _long(1)(raw)
    except ValueError:
        raise ValueError("must be a positive number of bytes") from None


def _strategy(raw: str) -> str:
    text = str(raw).strip().lower()
    if text not in STRATEGIES:
        raise ValueError(f"must be one of {', '.join(STRATEGIES)}")
    return text


def _name(raw: str) -> str:
    return str(raw).strip()


def _header_name(raw: str) -> str:
    """A Kafka header key is matched exactly (" v" is not "v"); a blank one means no header."""
    text = str(raw)
    return "" if not text.strip() else text


def _names(raw: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in str(raw).split(","))
    if not names or any(not n for n in names):
        raise ValueError("must be a comma-separated list of column names")
    return names


@dataclass(frozen=True)
class Setting:
    prop: str
    default: Any
    parse: Callable[[str], Any]
    doc: str


# The one definition of every per-table setting: Kafka's name, Kafka's default, how to parse it.
TABLE_SETTINGS: dict[str, Setting] = {
    s.prop: s
    for s in (
        Setting("compaction.strategy", "offset", _strategy, "which record wins per key (KIP-280)"),
        Setting("compaction.strategy.header", "", _header_name, "header carrying the version, for strategy=header"),
        Setting("compaction.strategy.column", "", _name, "column carrying the version, for strategy=column"),
        Setting("delete.retention.ms", 86_400_000, _long(), "how long a cleaned tombstone stays visible"),
        Setting("min.compaction.lag.ms", 0, _long(), "records younger than this are not touched"),
        Setting("max.compaction.lag.ms", LONG_MAX, _long(1), "dirty data older than this must be cleaned (KIP-354)"),
        Setting("min.cleanable.dirty.ratio", 0.5, _ratio, "clean when dirty/(clean+dirty) exceeds this"),
        Setting("compaction.retain.log.end.record", True, _bool, "never remove a partition's highest offset"),
        Setting("compaction.max.records.per.run", 50_000_000, _long(1), "dirty records one run may take (dedupe-buffer bound)"),
        Setting("compaction.key.columns", ("key",), _names, "key columns (comma list for composite CDC keys)"),
        Setting("compaction.offset.column", "offset", _name, "arrival order within a partition"),
        Setting("compaction.partition.column", "partition", _name, "Kafka partition (optional)"),
        Setting("compaction.timestamp.column", "timestamp", _name, "record timestamp, for strategy=timestamp"),
        Setting("compaction.headers.column", "headers", _name, "array<struct<key string, value binary>>"),
        Setting("compaction.tombstone.column", "tombstone", _name, "explicit tombstone flag (KIP-87, optional)"),
        Setting("compaction.value.column", "value", _name, "a null value is a tombstone where there is no flag"),
    )
}

# Iceberg's own read-split properties, with Iceberg's defaults. The cleaner reads them (it sizes the
# dirty scan's splits from them) but never sets them, and they are not YAML defaults: they are
# Iceberg's settings, checked here with the others so that a bad one stops the run before it starts.
READ_SPLIT_SETTINGS: dict[str, Setting] = {
    s.prop: s
    for s in (
        Setting("read.split.open-file-cost", 4 * 2**20, _positive_bytes, "Iceberg: what opening a file weighs in a split"),
        Setting("read.split.target-size", 128 * 2**20, _positive_bytes, "Iceberg: the target size of a read split"),
    )
}

INTEGRAL_TYPES = ("bigint", "int", "smallint", "tinyint")
ORDERABLE_TYPES = INTEGRAL_TYPES + ("timestamp", "timestamp_ntz", "date", "double", "float")
HEADERS_TYPE = "array<struct<key:string,value:binary>>"


@dataclass(frozen=True)
class TableConfig:
    """A table's resolved settings, checked against its schema."""

    table: str
    strategy: str  # effective strategy (header with a blank header name falls back to offset)
    version_header: str
    version_column: str
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    retain_log_end_record: bool
    max_records_per_run: int
    key_columns: tuple[str, ...]
    offset_column: str
    partition_column: str | None
    timestamp_column: str | None
    headers_column: str | None
    tombstone_column: str | None
    value_column: str | None
    read_split: tuple[int, int]  # Iceberg's (read.split.open-file-cost, read.split.target-size)
    snapshot_retention: tuple[int | None, int] = (None, 1)  # see snapshot_retention()

    @property
    def versioned(self) -> bool:
        """Strategies that order by (has version, version, offset)."""
        return self.strategy != "offset"


def raw_setting(prop: str, properties: Mapping[str, str], defaults: Mapping[str, Any] | None = None) -> Any:
    """A setting's unparsed value by the one precedence: table property > YAML default > Kafka default."""
    if prop in properties:
        return properties[prop]
    if defaults and prop in defaults:
        return defaults[prop]
    return TABLE_SETTINGS[prop].default


def is_compacted(properties: Mapping[str, str]) -> bool:
    return "compact" in [p.strip() for p in properties.get(CLEANUP_POLICY, "").split(",")]


def _parsed(table: str, setting: Setting, raw: Any) -> Any:
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise ConfigError(table, setting.prop, raw, str(exc)) from None


# Iceberg's snapshot-expiry properties. Maintenance expires snapshots as soon as the lag rule allows
# (that is what bounds physical deletion), unless the table sets these: then it keeps what they ask
# for, and the deletion bound is the longer one (see physical_deletion_bound).
HISTORY_SETTINGS: dict[str, Setting] = {
    s.prop: s
    for s in (
        Setting("history.expire.max-snapshot-age-ms", None, _long(0), "Iceberg: keep snapshots younger than this"),
        Setting("history.expire.min-snapshots-to-keep", 1, _long(1), "Iceberg: keep at least this many snapshots"),
    )
}


def snapshot_retention(table: str, properties: Mapping[str, str]) -> tuple[int | None, int]:
    """The table's own (history.expire.max-snapshot-age-ms or None, history.expire.min-snapshots-to-keep)."""
    return tuple(setting.default if properties.get(prop) is None else _parsed(table, setting, properties[prop])
                 for prop, setting in HISTORY_SETTINGS.items())


def physical_deletion_bound(tc: "TableConfig") -> str | None:
    """What bounds physical deletion when the table's snapshot-retention properties ask for more than
    maintenance would keep (None: the README's bound, max.compaction.lag.ms + interval +
    min.compaction.lag.ms, holds)."""
    max_age, keep = tc.snapshot_retention
    if keep > 1:
        return (f"history.expire.min-snapshots-to-keep={keep} keeps the last {keep} snapshots however old: removed "
                f"records stay reachable until {keep - 1} more snapshot(s) are committed after the maintenance that "
                "removed them (not bounded in time)")
    if max_age is not None and max_age > tc.min_compaction_lag_ms:
        return (f"history.expire.max-snapshot-age-ms={max_age} keeps younger snapshots: removed records stay "
                f"reachable up to max.compaction.lag.ms + one interval + {max_age} ms (not + min.compaction.lag.ms)")
    return None


def physical_deletion_deadline(tc: "TableConfig", removed_at_ms: int, interval_ms: int) -> int | None:
    """The README's bound as a time: a record removed (superseded, expired, or erased on request) at
    ``removed_at_ms`` is in no data file any snapshot reaches after removed_at + max.compaction.lag.ms
    + one schedule interval + min.compaction.lag.ms (+ max-snapshot-age instead, when the table keeps
    older snapshots; see physical_deletion_bound). None: no bound in time (max.compaction.lag.ms not
    set, or history.expire.min-snapshots-to-keep > 1)."""
    max_age, keep = tc.snapshot_retention
    if keep > 1 or tc.max_compaction_lag_ms >= LONG_MAX:
        return None
    kept = max_age if max_age is not None and max_age > tc.min_compaction_lag_ms else tc.min_compaction_lag_ms
    return removed_at_ms + tc.max_compaction_lag_ms + interval_ms + kept


def read_split(table: str, properties: Mapping[str, str]) -> tuple[int, int]:
    """The table's Iceberg (read.split.open-file-cost, read.split.target-size)."""
    return tuple(setting.default if properties.get(prop) is None else _parsed(table, setting, properties[prop])
                 for prop, setting in READ_SPLIT_SETTINGS.items())


def resolve_table(
    table: str,
    properties: Mapping[str, str],
    columns: Mapping[str, str],
    defaults: Mapping[str, Any] | None = None,
) -> TableConfig:
    """Resolve settings (table property > YAML default > Kafka default) and check them against the
    schema (``columns``: name -> Spark simple type string). Raises ConfigError naming the table."""
    defaults = defaults or {}
    values: dict[str, Any] = {}
    explicit: set[str] = set()
    for prop, setting in TABLE_SETTINGS.items():
        if prop not in properties and prop not in defaults:
            values[prop] = setting.default
            continue
        raw = raw_setting(prop, properties, defaults)
        values[prop] = _parsed(table, setting, raw)
        if prop in properties:
            explicit.add(prop)

    if values["max.compaction.lag.ms"] < values["min.compaction.lag.ms"]:
        raise ConfigError(
            table, "max.compaction.lag.ms", values["max.compaction.lag.ms"],
            f"must be >= min.compaction.lag.ms ({values['min.compaction.lag.ms']})",
        )

    types = {name.lower(): t.lower().replace(" ", "") for name, t in columns.items()}
    # Config names columns case-insensitively, as Spark does; everything downstream (Iceberg's
    # metrics, SQL text) gets the schema's own spelling.
    spelling = {name.lower(): name for name in columns}

    def column(prop: str, required: bool, allowed: tuple[str, ...] | None = None) -> str | None:
        name = values[prop]
        if name.lower() not in types:
            if required or prop in explicit:
                raise ConfigError(table, prop, name, f"no such column (columns: {', '.join(columns)})")
            return None
        if allowed and types[name.lower()] not in allowed:
            raise ConfigError(table, prop, name, f"column has type {types[name.lower()]}, expected one of {', '.join(allowed)}")
        return _sql_safe(table, prop, spelling[name.lower()])

    for key in values["compaction.key.columns"]:
        if key.lower() not in types:
            raise ConfigError(table, "compaction.key.columns", ",".join(values["compaction.key.columns"]),
                              f"no such column {key!r}")
    keys = tuple(_sql_safe(table, "compaction.key.columns", spelling[k.lower()]) for k in values["compaction.key.columns"])
    offset = column("compaction.offset.column", True, INTEGRAL_TYPES)
    partition = column("compaction.partition.column", False, INTEGRAL_TYPES)
    tombstone = column("compaction.tombstone.column", False, ("boolean",))
    value = column("compaction.value.column", False)

    strategy = values["compaction.strategy"]
    header = values["compaction.strategy.header"]
    version_column = values["compaction.strategy.column"]
    timestamp = headers = None
    if strategy == "header" and not header:
        strategy = "offset"  # KIP-280: a blank header name means the offset strategy
    if strategy == "timestamp":
        timestamp = column("compaction.timestamp.column", True, ORDERABLE_TYPES)
    elif strategy == "header":
        headers = column("compaction.headers.column", True, (HEADERS_TYPE,))
    elif strategy == "column":
        if not version_column:
            raise ConfigError(table, "compaction.strategy.column", version_column,
                              "strategy=column needs the name of the version column")
        if version_column.lower() not in types:
            raise ConfigError(table, "compaction.strategy.column", version_column, "no such column")
        if types[version_column.lower()] not in ORDERABLE_TYPES:
            raise ConfigError(table, "compaction.strategy.column", version_column,
                              f"column has type {types[version_column.lower()]}, expected one of {', '.join(ORDERABLE_TYPES)}")
        version_column = _sql_safe(table, "compaction.strategy.column", spelling[version_column.lower()])

    return TableConfig(
        table=table,
        strategy=strategy,
        version_header=header,
        version_column=version_column,
        delete_retention_ms=values["delete.retention.ms"],
        min_compaction_lag_ms=values["min.compaction.lag.ms"],
        max_compaction_lag_ms=values["max.compaction.lag.ms"],
        min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
        retain_log_end_record=values["compaction.retain.log.end.record"],
        max_records_per_run=values["compaction.max.records.per.run"],
        key_columns=keys,
        offset_column=offset,
        partition_column=partition,
        timestamp_column=timestamp,
        headers_column=headers,
        tombstone_column=tombstone,
        value_column=value,
        read_split=read_split(table, properties),
        snapshot_retention=snapshot_retention(table, properties),
    )


def _sql_safe(table: str, prop: str, name: str) -> str:
    """A column the cleaner names in SQL text: quote characters are refused here, with the
    setting named, rather than escaped in every statement that quotes it; so are braces: Spark
    substitutes ${...} even inside backquotes, and GX formats its queries with str.format."""
    if any(ch in name for ch in "`'\"\\{}") or not name.isprintable():
        raise ConfigError(table, prop, name, "column names with quotes, backslashes, braces or control "
                                             "characters are not supported; rename the column")
    return name


# ---------------------------------------------------------------- the YAML file
CATALOG_TYPES = ("hadoop", "rest", "sql", "hive", "glue")


@dataclass(frozen=True)
class CatalogConfig:
    name: str = "lake"
    type: str = "hadoop"
    warehouse: str = "warehouse"
    properties: Mapping[str, str] = field(default_factory=dict)  # passed to both Spark and pyiceberg
    spark_properties: Mapping[str, str] = field(default_factory=dict)  # Spark only (e.g. a JDBC uri)
    pyiceberg_properties: Mapping[str, str] = field(default_factory=dict)  # pyiceberg only

    def spark_conf(self) -> dict[str, str]:
        """spark.sql.catalog.<name>.* for Iceberg's SparkCatalog."""
        prefix = f"spark.sql.catalog.{self.name}"
        conf = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
        if self.type == "sql":
            conf[f"{prefix}.type"] = "jdbc"  # Iceberg's JdbcCatalog is pyiceberg's SqlCatalog
        elif self.type == "glue":
            conf[f"{prefix}.type"] = "glue"
        else:
            conf[f"{prefix}.type"] = self.type
        if self.warehouse:
            conf[f"{prefix}.warehouse"] = self.warehouse
        for key, value in {**self.properties, **self.spark_properties}.items():
            conf[f"{prefix}.{key}"] = str(value)
        return conf

    def pyiceberg_properties_resolved(self) -> dict[str, str]:
        props = {"type": self.type, **{k: str(v) for k, v in self.properties.items()}}
        props.update({k: str(v) for k, v in self.pyiceberg_properties.items()})
        if self.warehouse:
            props.setdefault("warehouse", self.warehouse)
        return props


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[2]"
    # "auto": the Iceberg runtime jar shipped in the pinned PyPI package. Otherwise a Maven
    # coordinate passed as spark.jars.packages, for deployments that reach Maven.
    iceberg_runtime: str = "auto"
    driver_memory: str = "2g"
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CleanerConfig:
    threads: int = 1  # Kafka's log.cleaner.threads: how many Spark jobs run at once
    meta_namespace: str = "lakecleaner"  # run history lives here, in the same catalog
    quarantine_suffix: str = "__quarantine"
    namespaces: tuple[str, ...] = ()  # empty = every namespace
    state_location: str = ""  # where failure counts and uncleanable marks live; "" = <warehouse>/_lakecleaner
    uncleanable_after_failures: int = 3  # consecutive failed runs before a table is marked uncleanable
    # An application starts no new table after this many seconds (nor after one schedule interval);
    # the tables it did not reach are left, still ranked, to the next run.
    application_budget_s: float = 600.0
    # Tables one application cleans side by side (Kafka's cleaner threads, inside one application): a
    # small table's chain waits mostly on the driver (planning, catalog calls, commits), so two in
    # flight keep the cores busy. Validations still run one at a time.
    application_threads: int = 2
    # The cleaner's own records (run history rows, metrics, reports, data-quality results, Data
    # Docs pages) older than this are deleted (lakecleaner.core.housekeeping); each table's newest
    # data-quality result is kept whatever its age.
    own_files_retention_days: int = 30


@dataclass(frozen=True)
class QualityConfig:
    # Per rule (by its name in lakecleaner.spark.quality): "fail" fails the validation task, "warn" logs.
    severity: Mapping[str, str] = field(default_factory=dict)
    anomalous_share_max: float = 0.05  # header/column strategies: share of records without a valid version


@dataclass(frozen=True)
class ErasureConfig:
    # The environment variable carrying the deployment's key-hash secret (lakecleaner.core.keyhash): erased
    # keys and offending rows are named by HMAC-SHA256 under it. Unset or empty: an unkeyed SHA-256,
    # which is pseudonymous only (a low-entropy key is recovered by guessing), and results say so.
    key_hash_secret_env: str = "LAKECLEANER_KEY_HASH_SECRET"


# What the DAG alerts on (lakecleaner.airflow.notify): a table newly marked uncleanable, a data-quality rule
# at fail severity that failed, a table still past max.compaction.lag.ms after the run.
ALERT_KINDS = ("uncleanable", "quality_failed", "compaction_lag")


@dataclass(frozen=True)
class NotifierSpec:
    """One entry of the YAML's ``notifiers:`` list: an Airflow notifier class (a BaseNotifier, e.g.
    the SMTP or Slack provider's), the keyword arguments it is built with (templated fields see the
    alert as ``alert``), and the alert kinds it gets. Imported only where alerts are sent (Airflow)."""
    class_path: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    alerts: tuple[str, ...] = ALERT_KINDS


def parse_notifiers(raw: Any, source: str = "<config>") -> tuple[NotifierSpec, ...]:
    """The ``notifiers:`` section: a list of {class, kwargs, alerts}; each mistake named by its index."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(None, "notifiers", raw, f"must be a list of {{class, kwargs, alerts}} (in {source})")
    specs = []
    for i, entry in enumerate(raw):
        where = f"notifiers[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(None, where, entry, "must be a mapping with class (and optionally kwargs, alerts)")
        unknown = set(entry) - {"class", "kwargs", "alerts"}
        if unknown:
            raise ConfigError(None, f"{where}.{sorted(unknown)[0]}", entry[sorted(unknown)[0]],
                              "unknown key (known: alerts, class, kwargs)")
        path = entry.get("class")
        if not isinstance(path, str) or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+", path):
            raise ConfigError(None, f"{where}.class", path, "must be an importable dotted path, e.g. "
                                                            "airflow.providers.smtp.notifications.smtp.SmtpNotifier")
        kwargs = entry.get("kwargs") or {}
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise ConfigError(None, f"{where}.kwargs", kwargs, "must be a mapping of argument name to value")
        alerts = entry.get("alerts", list(ALERT_KINDS))
        if not isinstance(alerts, list) or not alerts or any(a not in ALERT_KINDS for a in alerts):
            raise ConfigError(None, f"{where}.alerts", alerts, f"must be a non-empty list of: {', '.join(ALERT_KINDS)}")
        specs.append(NotifierSpec(path, dict(kwargs), tuple(alerts)))
    return tuple(specs)


@dataclass(frozen=True)
class LakecleanerConfig:
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    quality: QualityConfig = field(default_factory=QualityConfig)
    notifiers: tuple[NotifierSpec, ...] = ()
    erasure: ErasureConfig = field(default_factory=ErasureConfig)
    source: str = "<built-in>"

    @property
    def state_root(self) -> str:
        """Where the cleaner keeps its own files (failure counts, metrics, data-quality results)."""
        return (self.cleaner.state_location or f"{self.catalog.warehouse.rstrip('/')}/_lakecleaner").rstrip("/")

    @property
    def history_table(self) -> str:
        return f"{self.catalog.name}.{self.cleaner.meta_namespace}.run_history"


def _section(raw: Mapping[str, Any], name: str, cls: type, source: str) -> Any:
    data = raw.get(name) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(None, name, data, f"must be a mapping (in {source})")
    known = set(cls.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ConfigError(None, f"{name}.{sorted(unknown)[0]}", data[sorted(unknown)[0]],
                          f"unknown key (known: {', '.join(sorted(known))}; in {source})")
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()})


def _check_cleaner(cleaner: CleanerConfig) -> None:
    """The cleaner section's names and counts: each becomes an identifier, a file name or a bound."""
    for name in ("meta_namespace",):
        value = getattr(cleaner, name)
        if not isinstance(value, str) or not IDENT.fullmatch(value):
            raise ConfigError(None, f"cleaner.{name}", value, "must be a name of letters, digits and _")
    suffix = cleaner.quarantine_suffix
    if not isinstance(suffix, str) or not re.fullmatch(r"[A-Za-z0-9_]+", suffix):
        raise ConfigError(None, "cleaner.quarantine_suffix", suffix,
                          "must be a non-empty suffix of letters, digits and _ (the quarantine table is <table><suffix>)")
    namespaces = cleaner.namespaces
    if not isinstance(namespaces, tuple) or not all(isinstance(n, str) and IDENT.fullmatch(n) for n in namespaces):
        raise ConfigError(None, "cleaner.namespaces", namespaces, "must be a list of namespace names")
    for name in ("uncleanable_after_failures", "own_files_retention_days"):
        value = getattr(cleaner, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(None, f"cleaner.{name}", value, "must be a positive integer")
    if not isinstance(cleaner.state_location, str):
        raise ConfigError(None, "cleaner.state_location", cleaner.state_location, "must be a location string")


def config_document(cfg: LakecleanerConfig, **sections: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg``'s catalog and Spark sections as the YAML ``load_config`` reads, plus ``sections``: for
    code that hands a configuration built in Python to another process (spark-submit, the CLI, Airflow)."""
    c, s = cfg.catalog, cfg.spark
    return {"catalog": {"name": c.name, "type": c.type, "warehouse": c.warehouse, "properties": dict(c.properties),
                        "spark_properties": dict(c.spark_properties),
                        "pyiceberg_properties": dict(c.pyiceberg_properties)},
            "spark": {"master": s.master, "iceberg_runtime": s.iceberg_runtime, "driver_memory": s.driver_memory,
                      "conf": dict(s.conf)},
            **sections}


def load_config(path: str | os.PathLike | None = None) -> LakecleanerConfig:
    """Load the YAML config: explicit path, else $LAKECLEANER_CONFIG, else the shipped default. A
    relative warehouse path of a hadoop catalog is resolved against the config file's directory; the
    shipped default's (a file inside the installed package) against the working directory."""
    path = Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)
    if not path.exists():
        raise ConfigError(None, CONFIG_ENV, str(path), "config file not found")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(None, "<file>", str(path), "top level must be a mapping")
    unknown = set(raw) - {"catalog", "spark", "cleaner", "defaults", "quality", "notifiers", "erasure"}
    if unknown:
        raise ConfigError(None, sorted(unknown)[0], "...", f"unknown section in {path}")
    catalog = _section(raw, "catalog", CatalogConfig, str(path))
    if catalog.type not in CATALOG_TYPES:
        raise ConfigError(None, "catalog.type", catalog.type, f"must be one of {', '.join(CATALOG_TYPES)}")
    if catalog.type == "hadoop" and catalog.warehouse and "://" not in catalog.warehouse:
        base = Path.cwd() if path.resolve() == DEFAULT_CONFIG_PATH else path.resolve().parent
        catalog = CatalogConfig(**{**catalog.__dict__, "warehouse": str((base / catalog.warehouse).resolve())})
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise ConfigError(None, "defaults", defaults, f"must be a mapping (in {path})")
    # A YAML list (e.g. compaction.key.columns: [id, region]) is the comma list; validate that form.
    defaults = {k: (",".join(str(x) for x in v) if isinstance(v, list) else v) for k, v in defaults.items()}
    for prop, value in defaults.items():
        if prop not in TABLE_SETTINGS:
            raise ConfigError(None, f"defaults.{prop}", value, "unknown per-table setting")
        try:
            TABLE_SETTINGS[prop].parse(value)
        except ValueError as exc:
            raise ConfigError(None, f"defaults.{prop}", value, str(exc)) from None
    if not isinstance(catalog.name, str) or not IDENT.fullmatch(catalog.name):
        raise ConfigError(None, "catalog.name", catalog.name, "must be a name of letters, digits and _")
    cleaner = _section(raw, "cleaner", CleanerConfig, str(path))
    _check_cleaner(cleaner)
    for name in ("threads", "application_threads"):
        value = getattr(cleaner, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(None, f"cleaner.{name}", value, "must be a positive integer")
    budget = cleaner.application_budget_s
    if not isinstance(budget, (int, float)) or isinstance(budget, bool) or not 0 < budget < float("inf"):
        raise ConfigError(None, "cleaner.application_budget_s", budget, "must be a positive number of seconds")
    from lakecleaner.core.quality_rules import QUALITY_RULES  # it imports this module

    quality = _section(raw, "quality", QualityConfig, str(path))
    if not isinstance(quality.severity, Mapping):
        raise ConfigError(None, "quality.severity", quality.severity, "must be a mapping of rule name to fail or warn")
    for rule, level in dict(quality.severity).items():
        if rule not in QUALITY_RULES:
            raise ConfigError(None, f"quality.severity.{rule}", level,
                              f"unknown rule (rules: {'; '.join(QUALITY_RULES)})")
        if level not in ("fail", "warn"):
            raise ConfigError(None, f"quality.severity.{rule}", level, "must be fail or warn")
    share = quality.anomalous_share_max
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ConfigError(None, "quality.anomalous_share_max", quality.anomalous_share_max, "must be between 0 and 1")
    erasure = _section(raw, "erasure", ErasureConfig, str(path))
    if not isinstance(erasure.key_hash_secret_env, str) or not IDENT.fullmatch(erasure.key_hash_secret_env):
        raise ConfigError(None, "erasure.key_hash_secret_env", erasure.key_hash_secret_env,
                          "must be an environment variable's name (letters, digits and _)")
    return LakecleanerConfig(
        catalog=catalog,
        quality=quality,
        erasure=erasure,
        spark=_section(raw, "spark", SparkConfig, str(path)),
        cleaner=cleaner,
        defaults=defaults,
        notifiers=parse_notifiers(raw.get("notifiers"), str(path)),
        source=str(path),
    )
