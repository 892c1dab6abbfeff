"""Configuration: the YAML file (catalog, Spark, cleaner-wide defaults) and the per-table settings.

Per-table settings are Iceberg table properties with Kafka's topic-config names. The YAML's
``defaults`` section plays the role of Kafka's broker-level ``log.cleaner.*`` settings: a table
property, when present, overrides it. Every setting is declared once, in ``TABLE_SETTINGS``; the
Spark job, the scheduler, validation and the UI all resolve a table through ``resolve_table``.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit
from typing import Annotated, Any, Callable, Mapping, Optional, get_args, get_origin

import yaml
from pydantic import (BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, WithJsonSchema,
                      model_validator)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.json_schema import SkipJsonSchema

from lakecleaner.core.defaults import DEFAULT_INTERVAL_MS  # noqa: F401 - read from here by the Spark jobs and the CLI

LONG_MAX = 2**63 - 1
CONFIG_ENV = "LAKECLEANER_CONFIG"
# The shipped default: the embedded lakehouse (a Hadoop catalog in ./warehouse), and a reference of every section.
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[1] / "resources" / "lakecleaner.yaml"
CLEANUP_POLICY = "cleanup.policy"
CHECKPOINT_PROPERTY = "lakecleaner.checkpoint"
# A namespace, table or catalog name part (fullmatch: "$" would accept a trailing newline). Names
# become SQL identifiers and file names under the state root, so nothing else is accepted.
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ConfigError(ValueError):
    """A configuration value is invalid. Always names where it was found and what is wrong, and the
    value too unless it may be a secret: ``hide_value``, or by default a path of the YAML file under
    ``SECRET_PATHS``. A hidden value is not kept either (``value`` is None, ``hidden`` True)."""

    def __init__(self, table: str | None, prop: str, value: Any, problem: str, *, hide_value: bool | None = None):
        hidden = (table is None and is_secret_path(prop)) if hide_value is None else hide_value
        self.table, self.prop, self.problem, self.hidden = table, prop, problem, hidden
        self.value = None if hidden else value
        self.problems: tuple[ConfigError, ...] = (self,)  # every mistake found with this one (load_config)
        where = f"table {table}: " if table else "lakecleaner config: "
        super().__init__(f"{where}{prop}: {problem}" if hidden else f"{where}{prop}={value!r} is invalid: {problem}")


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
    from lakecleaner.core.strategies import strategy_names  # the registry; it imports this module

    text = str(raw).strip().lower()
    if text not in strategy_names():
        raise ValueError(f"must be one of {', '.join(strategy_names())}")
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
FLOATING_TYPES = ("double", "float")  # a version of these types may be NaN: no version (strategies.Strategy)
ORDERABLE_TYPES = INTEGRAL_TYPES + ("timestamp", "timestamp_ntz", "date") + FLOATING_TYPES
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
    version_type: str | None = None  # the version column's Spark type, where a column is the version

    @property
    def versioned(self) -> bool:
        """Strategies that order by (has version, version, offset)."""
        from lakecleaner.core.strategies import strategy_class  # the registry; it imports this module

        return strategy_class(self.strategy).versioned


@dataclass(frozen=True)
class StrategyRoles:
    """What a strategy reads of a table (its class's ``resolve``): the effective strategy and the
    columns its version comes from."""

    strategy: str
    version_column: str  # the compaction.strategy.column setting (checked by the column strategy only)
    timestamp_column: str | None = None
    headers_column: str | None = None
    version_type: str | None = None  # the Spark type of the column the version is read from, if any


@dataclass(frozen=True)
class TableSchema:
    """A table's parsed settings over its schema, as resolve_table checks them: handed to the
    table's strategy so that each strategy checks the settings it reads, with the same errors."""

    table: str
    values: Mapping[str, Any]  # every per-table setting, parsed
    explicit: frozenset[str]  # the settings the table's own properties give
    columns: Mapping[str, str]  # name -> Spark simple type string

    @functools.cached_property
    def types(self) -> dict[str, str]:
        """Type by lower-cased name: config names columns case-insensitively, as Spark does."""
        return {name.lower(): t.lower().replace(" ", "") for name, t in self.columns.items()}

    @functools.cached_property
    def spelling(self) -> dict[str, str]:
        """The schema's own spelling by lower-cased name (what Iceberg's metrics and SQL text get)."""
        return {name.lower(): name for name in self.columns}

    def column(self, prop: str, required: bool, allowed: tuple[str, ...] | None = None) -> str | None:
        """The column a setting names, checked (None: absent and neither required nor set explicitly)."""
        name = self.values[prop]
        if name.lower() not in self.types:
            if required or prop in self.explicit:
                raise ConfigError(self.table, prop, name, f"no such column (columns: {', '.join(self.columns)})")
            return None
        if allowed and self.types[name.lower()] not in allowed:
            raise ConfigError(self.table, prop, name,
                              f"column has type {self.types[name.lower()]}, expected one of {', '.join(allowed)}")
        return self.safe(prop, self.spelling[name.lower()])

    def safe(self, prop: str, name: str) -> str:
        return _sql_safe(self.table, prop, name)


def raw_setting(prop: str, properties: Mapping[str, str], defaults: Mapping[str, Any] | None = None) -> Any:
    """A setting's unparsed value by the one precedence: table property > YAML default > Kafka default."""
    if prop in properties:
        return properties[prop]
    if defaults and prop in defaults:
        return defaults[prop]
    return TABLE_SETTINGS[prop].default


CLEANUP_POLICIES = ("compact", "delete")  # Kafka's values of cleanup.policy, a list, lower case


def is_compacted(properties: Mapping[str, str]) -> bool:
    return "compact" in [p.strip() for p in properties.get(CLEANUP_POLICY, "").split(",")]


def cleanup_policy_error(table: str, properties: Mapping[str, str]) -> ConfigError | None:
    """What is wrong with a table's cleanup.policy, if anything: a value Kafka would refuse
    ("Compact", "compacted") must not leave the table uncleaned without a word."""
    if CLEANUP_POLICY not in properties:
        return None
    unknown = [p.strip() for p in properties[CLEANUP_POLICY].split(",") if p.strip() not in CLEANUP_POLICIES]
    if not unknown:
        return None
    return ConfigError(table, CLEANUP_POLICY, properties[CLEANUP_POLICY], f"{', '.join(map(repr, unknown))} is not "
                                                                         f"one of {', '.join(CLEANUP_POLICIES)} "
                                                                         "(Kafka's values, lower case)")


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
    set, or history.expire.min-snapshots-to-keep > 1, or a sum past the longest time Iceberg keeps:
    the audit row's bigint would not hold it)."""
    max_age, keep = tc.snapshot_retention
    if keep > 1 or tc.max_compaction_lag_ms >= LONG_MAX:
        return None
    kept = max_age if max_age is not None and max_age > tc.min_compaction_lag_ms else tc.min_compaction_lag_ms
    deadline = removed_at_ms + tc.max_compaction_lag_ms + interval_ms + kept
    return deadline if deadline <= LONG_MAX else None


def read_split(table: str, properties: Mapping[str, str]) -> tuple[int, int]:
    """The table's Iceberg (read.split.open-file-cost, read.split.target-size)."""
    return tuple(setting.default if properties.get(prop) is None else _parsed(table, setting, properties[prop])
                 for prop, setting in READ_SPLIT_SETTINGS.items())


def _check_lags(table: str | None, values: Mapping[str, Any]) -> None:
    """KIP-354: the bound on how long dirty data may wait is no shorter than the wait itself."""
    if values["max.compaction.lag.ms"] < values["min.compaction.lag.ms"]:
        raise ConfigError(table, "max.compaction.lag.ms", values["max.compaction.lag.ms"],
                          f"must be >= min.compaction.lag.ms ({values['min.compaction.lag.ms']})")


def _holds_a_map(spark_type: str) -> bool:
    """A Spark simpleString (or pyiceberg's spelling) that is or holds a map: map<...> as the whole
    type, an element's or a struct field's."""
    return re.search(r"(^|[<,:]\s*)map<", spark_type) is not None


def resolve_table(
    table: str,
    properties: Mapping[str, str],
    columns: Mapping[str, str],
    defaults: Mapping[str, Any] | None = None,
) -> TableConfig:
    """Resolve settings (table property > YAML default > Kafka default) and check them against the
    schema (``columns``: name -> Spark simple type string). Raises ConfigError naming the table."""
    from lakecleaner.core.strategies import strategy_class  # the registry; it imports this module

    defaults = defaults or {}
    if error := cleanup_policy_error(table, properties):
        raise error
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

    _check_lags(table, values)
    schema = TableSchema(table, values, frozenset(explicit), columns)
    for key in values["compaction.key.columns"]:
        if key.lower() not in schema.types:
            raise ConfigError(table, "compaction.key.columns", ",".join(values["compaction.key.columns"]),
                              f"no such column {key!r}")
    keys = tuple(schema.safe("compaction.key.columns", schema.spelling[k.lower()])
                 for k in values["compaction.key.columns"])
    if len({k.lower() for k in keys}) < len(keys):  # Spark names columns case-insensitively
        raise ConfigError(table, "compaction.key.columns", ",".join(values["compaction.key.columns"]),
                          "a column is named twice")
    for key in keys:
        if _holds_a_map(schema.types[key.lower()]):  # Spark cannot group records by it: every run failed
            raise ConfigError(table, "compaction.key.columns", ",".join(values["compaction.key.columns"]),
                              f"column {key!r} is a {schema.types[key.lower()]}: a map (or a type holding one) "
                              "has no order Spark can group records by; key on its fields instead")
    offset = schema.column("compaction.offset.column", True, INTEGRAL_TYPES)
    partition = schema.column("compaction.partition.column", False, INTEGRAL_TYPES)
    tombstone = schema.column("compaction.tombstone.column", False, ("boolean",))
    value = schema.column("compaction.value.column", False)
    roles = strategy_class(values["compaction.strategy"]).resolve(schema)

    return TableConfig(
        table=table,
        strategy=roles.strategy,
        version_header=values["compaction.strategy.header"],
        version_column=roles.version_column,
        delete_retention_ms=values["delete.retention.ms"],
        min_compaction_lag_ms=values["min.compaction.lag.ms"],
        max_compaction_lag_ms=values["max.compaction.lag.ms"],
        min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
        retain_log_end_record=values["compaction.retain.log.end.record"],
        max_records_per_run=values["compaction.max.records.per.run"],
        key_columns=keys,
        offset_column=offset,
        partition_column=partition,
        timestamp_column=roles.timestamp_column,
        headers_column=roles.headers_column,
        tombstone_column=tombstone,
        value_column=value,
        read_split=read_split(table, properties),
        snapshot_retention=snapshot_retention(table, properties),
        version_type=roles.version_type,
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
# The file is a typed model: each section a frozen pydantic dataclass, so a file, a document handed to
# another process and a config built in Python are checked by one definition, and ``lakecleaner
# config schema`` prints it as JSON Schema. Every mistake is a ConfigError naming the setting's path.
CATALOG_TYPES = ("hadoop", "rest", "sql", "hive", "glue")
RUNTIME_AUTO, RUNTIME_PROVIDED = "auto", "provided"  # spark.iceberg_runtime's two words (else a Maven coordinate)
SECTIONS = ("catalog", "spark", "cleaner", "defaults", "quality", "notifiers", "erasure")
# Paths whose values an error never shows: catalog properties hold tokens and JDBC passwords, Spark
# settings S3 keys, a notifier's kwargs webhooks; an error's text reaches logs, the CLI's stderr and
# the plugin's HTTP answers (a typo'd key is refused with its value, so the whole section is hidden).
SECRET_PATHS = ("catalog", "spark.conf", "notifiers")


def is_secret_path(path: str) -> bool:
    """Whether a value at ``path`` (catalog.properties.token, notifiers[0].kwargs...) may be a secret."""
    return any(path == p or path.startswith((p + ".", p + "[")) for p in SECRET_PATHS)


_UNSET = object()


class _Invalid(ValueError):
    """A value's problem, raised inside the model's validators; ``at`` extends the path pydantic
    reports (an entry of a mapping) and ``value`` is that entry's value."""

    def __init__(self, problem: str, at: tuple = (), value: Any = _UNSET):
        super().__init__(problem)
        self.problem, self.at, self.value = problem, at, value

    def inside(self, key: Any, value: Any) -> "_Invalid":
        return _Invalid(self.problem, (key, *self.at), value if self.value is _UNSET else self.value)


def _kind(value: Any) -> str:
    """A YAML value's kind, for 'expected a mapping, got a list'."""
    if value is None:
        return "null"
    for types, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                        (Mapping, "a mapping"), ((list, tuple), "a list")):
        if isinstance(value, types):
            return name
    return f"a {type(value).__name__}"


def _entry(key: Any, check: Callable[[Any], Any], value: Any) -> Any:
    """``check`` of one entry of a mapping or list, its problem reported at the entry."""
    try:
        return check(value)
    except _Invalid as exc:
        raise exc.inside(key, value) from None


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, got {_kind(value)}")
    return value


def _matching(pattern: re.Pattern, problem: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not _string(value) or not pattern.fullmatch(value):
            raise _Invalid(problem)
        return value

    return check


def _mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Invalid(f"expected a mapping, got {_kind(value)}")
    for key in value:
        if not isinstance(key, str):
            raise _Invalid(f"expected names as keys, got {_kind(key)}")
    return value


def _list(value: Any) -> list:
    if not isinstance(value, (list, tuple)):
        raise _Invalid(f"expected a list, got {_kind(value)}")
    return list(value)


def _text(value: Any) -> str:
    """A property's value: both engines take strings (a YAML number or boolean is written as one)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise _Invalid(f"expected a string, number or boolean, got {_kind(value)}")


def _properties(value: Any) -> dict[str, str]:
    return {key: _entry(key, _text, v) for key, v in _mapping(value).items()}


def _number(problem: str, integer: bool, ok: Callable[[float], bool]) -> Callable[[Any], Any]:
    """A number; a string of one too (what an environment variable gives), never a boolean."""
    def check(value: Any) -> Any:
        if isinstance(value, str) and (_INTEGER if integer else _DECIMAL).fullmatch(value.strip()):
            value = int(value) if integer else float(value)
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) or not ok(value):
            raise _Invalid(problem)
        return value

    return check


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices or not isinstance(value, str):
            raise _Invalid(f"must be one of {', '.join(choices)}")
        return value

    return check


def _names(problem: str) -> Callable[[Any], tuple[str, ...]]:
    def check(value: Any) -> tuple[str, ...]:
        if not isinstance(value, (list, tuple)):
            raise _Invalid(problem)
        if not all(isinstance(n, str) and IDENT.fullmatch(n) for n in value):
            raise _Invalid(problem, value=tuple(value))
        return tuple(value)

    return check


# Spark's own lists of jars and packages: the cleaner writes them (the Iceberg runtime's, then the
# extras), so spark.conf may not. As a conf key, spark.jars replaced the runtime's jar instead of
# joining it; merging would make the key mean something else than Spark's, and a config written for
# the old behaviour (the runtime's path copied in) would load two Iceberg runtimes. Refused, loudly.
_SPARK_LISTS = {"spark.jars": "spark.extra_jars", "spark.jars.packages": "spark.extra_packages"}


def _spark_conf(value: Any) -> dict[str, str]:
    out = {}
    for key, v in _mapping(value).items():
        if not key.startswith("spark."):
            raise _Invalid("not a Spark setting (Spark's settings start with spark.)", (key,), v)
        if key in _SPARK_LISTS:
            raise _Invalid(f"lakecleaner writes {key} itself (the Iceberg runtime's, then yours): list yours in "
                           f"{_SPARK_LISTS[key]}", (key,), v)
        out[key] = _entry(key, _text, v)
    return out


def _each(check: Callable[[Any], Any]) -> Callable[[Any], tuple]:
    """A YAML list whose every entry passes ``check`` (a problem named by the entry's index)."""
    def each(value: Any) -> tuple:
        return tuple(_entry(i, check, v) for i, v in enumerate(_list(value)))

    return each


def _defaults(value: Any) -> dict[str, Any]:
    """The per-table settings' cleaner-wide defaults, each checked by its own Kafka parser; a YAML
    list (compaction.key.columns: [id, region]) is the comma list."""
    out, parsed = {}, {prop: setting.default for prop, setting in TABLE_SETTINGS.items()}
    for prop, v in _mapping(value).items():
        if prop not in TABLE_SETTINGS:
            raise _Invalid("unknown per-table setting", (prop,), v)
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        elif v is None or isinstance(v, Mapping):
            raise _Invalid(f"expected a string, number or boolean, got {_kind(v)}", (prop,), v)
        try:
            parsed[prop] = TABLE_SETTINGS[prop].parse(v)
        except ValueError as exc:
            raise _Invalid(str(exc), (prop,), v) from None
        out[prop] = v
    try:  # a pair no table could take unless it overrides one of them
        _check_lags(None, parsed)
    except ConfigError as exc:
        raise _Invalid(exc.problem, (exc.prop,), exc.value) from None
    return out


def _severity(value: Any) -> dict[str, str]:
    from lakecleaner.core.quality_rules import SEVERITIES, rule_names  # it imports this module

    for rule, level in _mapping(value).items():
        if rule not in rule_names():
            raise _Invalid(f"unknown rule (rules: {'; '.join(rule_names())})", (rule,), level)
        if level not in SEVERITIES:
            raise _Invalid(f"must be {' or '.join(SEVERITIES)}", (rule,), level)
    return dict(value)


class _SeveritySchema:
    """quality.severity in the JSON Schema: one property per rule of the registry (read when the
    schema is made: the registry imports this module)."""

    def __get_pydantic_json_schema__(self, core_schema, handler) -> dict:
        from lakecleaner.core.quality_rules import SEVERITIES, rules

        return {"type": "object", "additionalProperties": False,
                "properties": {r.name: {"enum": list(SEVERITIES), "description": r.doc} for r in rules()}}


def _defaults_schema() -> dict:
    def one(s: Setting) -> dict:
        if isinstance(s.default, bool):
            types: Any = ["boolean", "string"]
        elif isinstance(s.default, (int, float)):
            types = ["integer" if isinstance(s.default, int) else "number", "string"]
        elif isinstance(s.default, tuple):
            return {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                    "default": ",".join(s.default), "description": s.doc}
        else:
            types = "string"
        return {"type": types, "default": s.default, "description": s.doc}

    return {"type": "object", "additionalProperties": False,
            "properties": {prop: one(s) for prop, s in TABLE_SETTINGS.items()}}


_MEMORY = re.compile(r"[0-9]+([kKmMgGtTpP][bB]?|[bB])?")  # what Spark reads as spark.driver.memory
_MASTER = re.compile(r"\S+")
_MAVEN = re.compile(r"[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.+-]+")  # group:artifact:version
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_SUFFIX = re.compile(r"[A-Za-z0-9_]+")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")  # a URI's (two letters at least: C: is a Windows drive)


def is_local_location(location: str) -> bool:
    """A path (absolute or relative) or a file: URI without a host (file:/x, file:///x): a location
    the local file system reads, as the Hadoop catalog's table listing must."""
    scheme = _SCHEME.match(location)
    if not scheme:
        return True
    rest = location[scheme.end():]
    return scheme.group(0).lower() == "file:" and (not rest.startswith("//") or rest.startswith("///"))


def _shown_location(location: str) -> str:
    """A location as an error may show it: no user or password, no query (where credentials go)."""
    parts = urlsplit(location)
    user, at, host = parts.netloc.rpartition("@")
    return urlunsplit((parts.scheme, ("***@" if at else "") + host, parts.path, "", ""))


def _typed(base: Any, check: Callable[[Any], Any], schema: Mapping[str, Any] | None = None) -> Any:
    """``base`` checked by ``check`` (which raises _Invalid with the product's wording), shown in the
    JSON Schema as ``schema`` when given."""
    extra = (WithJsonSchema(dict(schema)),) if schema is not None else ()
    return Annotated[base, BeforeValidator(check), *extra]


def _pattern(regex: re.Pattern) -> dict:
    return {"type": "string", "pattern": f"^({regex.pattern})$"}


# The file's value types: each checked with the product's wording, each shown in the JSON Schema.
_Name = _typed(str, _matching(IDENT, "must be a name of letters, digits and _"), _pattern(IDENT))
_Location = _typed(str, _string)
_Properties = _typed(Mapping[str, str], _properties,
                     {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}})
_PositiveInt = _typed(int, _number("must be a positive integer", True, lambda v: v >= 1),
                      {"type": "integer", "minimum": 1})
_CatalogType = _typed(str, _one_of(CATALOG_TYPES), {"enum": list(CATALOG_TYPES)})
_Master = _typed(str, _matching(_MASTER, "must be a Spark master without spaces: local[2], spark://host:7077, "
                                         "yarn, k8s://..."), _pattern(_MASTER))
_RUNTIME = re.compile(f"{RUNTIME_AUTO}|{RUNTIME_PROVIDED}|{_MAVEN.pattern}")
_Runtime = _typed(str, _matching(_RUNTIME, "must be auto, provided or a Maven coordinate group:artifact:version"),
                  _pattern(_RUNTIME))
_JAR = re.compile(r"[^,]+")  # spark.jars is a comma list
_Jars = _typed(tuple[str, ...], _each(_matching(_JAR, "one jar per entry: a path or URL without commas")),
               {"type": "array", "items": _pattern(_JAR)})
_Packages = _typed(tuple[str, ...], _each(_matching(_MAVEN, "must be a Maven coordinate group:artifact:version")),
                   {"type": "array", "items": _pattern(_MAVEN)})
_Memory = _typed(str, _matching(_MEMORY, "must be a JVM memory size such as 2g or 512m"), _pattern(_MEMORY))
_SparkConf = _typed(Mapping[str, str], _spark_conf,
                    {"type": "object", "propertyNames": {"pattern": r"^spark\.", "not": {"enum": list(_SPARK_LISTS)}},
                     "additionalProperties": {"type": ["string", "number", "boolean"]}})
_Suffix = _typed(str, _matching(_SUFFIX, "must be a non-empty suffix of letters, digits and _ (the quarantine "
                                         "table is <table><suffix>)"), _pattern(_SUFFIX))
_Namespaces = _typed(tuple[str, ...], _names("must be a list of namespace names"),
                     {"type": "array", "items": _pattern(IDENT)})
_Seconds = _typed(float, _number("must be a positive number of seconds", False, lambda v: 0 < v < float("inf")),
                  {"type": "number", "exclusiveMinimum": 0})
_Share = _typed(float, _number("must be between 0 and 1", False, lambda v: 0 <= v <= 1),
                {"type": "number", "minimum": 0, "maximum": 1})
# The Iceberg format versions the cleaner runs on: both have row-level deletes (v2 position-delete
# files; v3 deletion vectors in Puffin files, which a merge-on-read MERGE on a v3 table writes).
FORMAT_VERSIONS = (2, 3)
_FormatVersion = _typed(int, _number(f"must be an Iceberg format version the cleaner runs on: "
                                     f"{' or '.join(map(str, FORMAT_VERSIONS))}", True, lambda v: v in FORMAT_VERSIONS),
                        {"enum": list(FORMAT_VERSIONS)})
_EnvName = _typed(str, _matching(IDENT, "must be an environment variable's name (letters, digits and _)"),
                  _pattern(IDENT))
_Severity = Annotated[Mapping[str, str], BeforeValidator(_severity), _SeveritySchema()]
_Defaults = Annotated[Mapping[str, Any], BeforeValidator(_defaults), WithJsonSchema(_defaults_schema())]
_MODEL = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


def _section(path: str) -> Callable[[type], type]:
    """A section of the file as a frozen pydantic dataclass: built from YAML or in Python (keywords,
    positions, dataclasses.replace), each mistake is a ConfigError at ``path`` (never pydantic's own
    error, whose text quotes every value)."""
    def wrap(cls: type) -> type:
        cls = pydantic_dataclass(frozen=True, config=_MODEL)(cls)
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            try:
                init(self, *args, **kwargs)
            except ValidationError as exc:
                raise _config_error(exc, cls, path) from None

        cls.__init__ = __init__
        return cls

    return wrap


@_section("catalog")
class CatalogConfig:
    """One catalog for both engines: Spark's spark.sql.catalog.<name>.* and pyiceberg's catalog."""
    name: _Name = Field("lake", description="the catalog's name in Spark SQL and pyiceberg")
    type: _CatalogType = Field("hadoop", description="hadoop (a local directory, no server) | rest | sql (JDBC) "
                                                     "| hive | glue")
    warehouse: _Location = Field("warehouse", description="the warehouse location; a relative path is relative "
                                                          "to the config file")
    properties: _Properties = Field(default_factory=dict, description="passed to both Spark and pyiceberg")
    spark_properties: _Properties = Field(default_factory=dict, description="Spark only (e.g. a JDBC uri)")
    pyiceberg_properties: _Properties = Field(default_factory=dict, description="pyiceberg only")

    @model_validator(mode="after")
    def _hadoop_is_local(self) -> "CatalogConfig":
        """A Hadoop catalog's tables are found by listing its warehouse directory (pyiceberg has no
        Hadoop catalog: lakecleaner.core.metadata walks it), which only a local file system allows.
        On object storage or HDFS it listed nothing, without an error, so nothing was ever cleaned."""
        if self.type == "hadoop" and not is_local_location(self.warehouse):
            raise _Invalid(f"the hadoop catalog {self.name}'s warehouse {_shown_location(self.warehouse)} is not "
                           "local: lakecleaner lists a Hadoop catalog's tables by walking its warehouse directory "
                           "on the local file system (pyiceberg has no Hadoop catalog); use a local path or a "
                           "file:/// URI, or a catalog with a server (rest, sql, hive, glue) for this warehouse",
                           ("warehouse",), self.warehouse)
        return self

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
        """pyiceberg's catalog properties. A sql catalog whose uri is a JDBC URL (what Spark's
        JdbcCatalog takes, e.g. from a connection) gets the SQLAlchemy URL pyiceberg's SqlCatalog
        takes, built from it, jdbc.user and jdbc.password (sql_alchemy_url)."""
        props = {"type": self.type, **{k: str(v) for k, v in self.properties.items()}}
        props.update({k: str(v) for k, v in self.pyiceberg_properties.items()})
        if self.warehouse:
            props.setdefault("warehouse", self.warehouse)
        if self.type == "sql" and props.get("uri", "").startswith("jdbc:"):
            given = {**self.properties, **self.spark_properties, **self.pyiceberg_properties}
            props["uri"] = sql_alchemy_url(props["uri"], given.get("jdbc.user"), given.get("jdbc.password"))
        return props


def sql_alchemy_url(jdbc_url: str, user: str | None, password: str | None) -> str:
    """The SQLAlchemy URL of a JDBC catalog database, for pyiceberg's SqlCatalog (whose extras bring
    the PostgreSQL and SQLite drivers): jdbc:postgresql://host:port/db?params with its user and
    password, or jdbc:sqlite:path. Any other database: a ConfigError asking for pyiceberg's own uri."""
    from urllib.parse import quote

    if jdbc_url.startswith("jdbc:postgresql://"):
        rest = jdbc_url[len("jdbc:postgresql://"):]
        auth = quote(user or "", safe="") + (":" + quote(password, safe="") if password else "")
        return f"postgresql+psycopg2://{auth + '@' if auth else ''}{rest}"
    if jdbc_url.startswith("jdbc:sqlite:"):
        return "sqlite:///" + jdbc_url[len("jdbc:sqlite:"):]
    raise ConfigError(None, "catalog.uri", None, "pyiceberg reaches a JDBC catalog on PostgreSQL or SQLite only "
                      "(jdbc:postgresql://... or jdbc:sqlite:...); for another database give pyiceberg_properties.uri, "
                      "a SQLAlchemy URL", hide_value=True)


@_section("catalog")
class CatalogProperties:
    """A catalog's settings from outside the YAML (an Airflow connection: lakecleaner.core.catalog_connection),
    merged over the YAML's catalog section (``over``): ``type`` and ``warehouse``, when given, replace
    the file's; each property given replaces the file's property of that name in every map (a
    connection's uri wins over the file's spark_properties.uri too). Never the catalog's name: Spark
    SQL, pyiceberg and the cleaner's own records know the catalog by the file's name."""
    type: Optional[_CatalogType] = Field(None, description="replaces catalog.type")
    warehouse: Optional[_Location] = Field(None, description="replaces catalog.warehouse")
    properties: _Properties = Field(default_factory=dict, description="both engines")
    spark_properties: _Properties = Field(default_factory=dict, description="Spark only")
    pyiceberg_properties: _Properties = Field(default_factory=dict, description="pyiceberg only")

    def over(self, catalog: CatalogConfig) -> CatalogConfig:
        """``catalog`` with these settings merged over it (checked again: a hadoop catalog stays local)."""
        given = set(self.properties)

        def kept(own: Mapping[str, str]) -> dict[str, str]:
            return {k: v for k, v in own.items() if k not in given}

        return CatalogConfig(
            name=catalog.name, type=self.type or catalog.type,
            warehouse=self.warehouse if self.warehouse is not None else catalog.warehouse,
            properties={**catalog.properties, **self.properties},
            spark_properties={**kept(catalog.spark_properties), **self.spark_properties},
            pyiceberg_properties={**kept(catalog.pyiceberg_properties), **self.pyiceberg_properties})

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "warehouse": self.warehouse, "properties": dict(self.properties),
                "spark_properties": dict(self.spark_properties),
                "pyiceberg_properties": dict(self.pyiceberg_properties)}


@_section("spark")
class SparkConfig:
    master: _Master = Field("local[2]", description="the CLI's master (the DAG's comes from its Airflow connection)")
    # "auto": the Iceberg runtime jar shipped in the pinned PyPI package; "provided": the cluster
    # brings Iceberg (no jar, no package); otherwise a Maven coordinate passed as spark.jars.packages,
    # for deployments that reach Maven. lakecleaner.core.sparkconf renders it.
    iceberg_runtime: _Runtime = Field(RUNTIME_AUTO, description="auto: the jar inside the pinned PyPI package; "
                                                                "provided: the cluster brings Iceberg; or a Maven "
                                                                "coordinate")
    driver_memory: _Memory = Field("2g", description="spark.driver.memory")
    conf: _SparkConf = Field(default_factory=dict, description="any Spark setting but spark.jars and "
                                                               "spark.jars.packages; overrides the cleaner's own")
    extra_jars: _Jars = Field((), description="jars added to the Iceberg runtime's (spark.jars), e.g. a JDBC driver")
    extra_packages: _Packages = Field((), description="Maven coordinates added to spark.jars.packages")


@_section("cleaner")
class CleanerConfig:
    threads: _PositiveInt = Field(1, description="Kafka's log.cleaner.threads: how many Spark jobs run at once")
    meta_namespace: _Name = Field("lakecleaner", description="run history lives here, in the same catalog")
    quarantine_suffix: _Suffix = Field("__quarantine", description="the quarantine table of <table> is "
                                                                   "<table><suffix>")
    namespaces: _Namespaces = Field((), description="the namespaces cleaned; empty: every namespace")
    state_location: _Location = Field("", description="where failure counts and uncleanable marks live; empty: "
                                                      "<warehouse>/_lakecleaner")
    uncleanable_after_failures: _PositiveInt = Field(
        3, description="consecutive failed runs before a table is marked uncleanable")
    # An application starts no new table after this many seconds (nor after one schedule interval);
    # the tables it did not reach are left, still ranked, to the next run.
    application_budget_s: _Seconds = Field(600.0, description="an application starts no new table after this "
                                                              "(nor after one schedule interval)")
    # Tables one application cleans side by side (Kafka's cleaner threads, inside one application): a
    # small table's chain waits mostly on the driver (planning, catalog calls, commits), so two in
    # flight keep the cores busy. Validations still run one at a time.
    application_threads: _PositiveInt = Field(2, description="tables one application cleans side by side")
    # The cleaner's own records (run history rows, metrics, reports, data-quality results, Data
    # Docs pages) older than this are deleted (lakecleaner.core.housekeeping); each table's newest
    # data-quality result is kept whatever its age.
    own_files_retention_days: _PositiveInt = Field(30, description="the cleaner's own records older than this go")
    # The format version the cleaner's own tables (run history, forget audit, erasure requests,
    # data-quality results) are created with; a table that exists keeps its own. Quarantine tables
    # take their source table's version instead.
    own_tables_format_version: _FormatVersion = Field(2, description="the Iceberg format version (2 or 3) the "
                                                                     "cleaner's own tables are created with")


@_section("quality")
class QualityConfig:
    # Per rule (by its name in lakecleaner.core.quality_rules): "fail" fails the validation task, "warn" logs.
    severity: _Severity = Field(default_factory=dict, description="per rule: fail (the validation fails) or warn "
                                                                 "(logged); default fail")
    anomalous_share_max: _Share = Field(0.05, description="header/column strategies: the share of records without "
                                                          "a valid version allowed")


@_section("erasure")
class ErasureConfig:
    # The environment variable carrying the deployment's key-hash secret (lakecleaner.core.keyhash): erased
    # keys and offending rows are named by HMAC-SHA256 under it. Unset or empty: an unkeyed SHA-256,
    # which is pseudonymous only (a low-entropy key is recovered by guessing), and results say so.
    key_hash_secret_env: _EnvName = Field("LAKECLEANER_KEY_HASH_SECRET",
                                          description="the environment variable holding the key-hash secret")


# What the DAG alerts on (lakecleaner.airflow.notify): a table newly marked uncleanable, a data-quality rule
# at fail severity that failed, a table still past max.compaction.lag.ms after the run.
ALERT_KINDS = ("uncleanable", "quality_failed", "compaction_lag")


def _alerts(value: Any) -> tuple[str, ...]:
    alerts = _list(value)
    if not alerts:
        raise _Invalid(f"must be a non-empty list of: {', '.join(ALERT_KINDS)}")
    return tuple(_entry(i, _one_of(ALERT_KINDS), a) for i, a in enumerate(alerts))


_ClassPath = _typed(str, _matching(_DOTTED, "must be an importable dotted path, e.g. "
                                            "airflow.providers.smtp.notifications.smtp.SmtpNotifier"), _pattern(_DOTTED))
_Kwargs = _typed(Mapping[str, Any], _mapping)
_Alerts = _typed(tuple[str, ...], _alerts, {"type": "array", "minItems": 1, "items": {"enum": list(ALERT_KINDS)}})


@_section("notifiers")
class NotifierSpec:
    """One entry of the YAML's ``notifiers:`` list: an Airflow notifier class (a BaseNotifier, e.g.
    the SMTP or Slack provider's), the keyword arguments it is built with (templated fields see the
    alert as ``alert``), and the alert kinds it gets. Imported only where alerts are sent (Airflow)."""
    class_path: _ClassPath = Field(alias="class", description="an Airflow notifier class (airflow.sdk.BaseNotifier)")
    kwargs: _Kwargs = Field(default_factory=dict, description="the keyword arguments it is built with; templated "
                                                              "fields see the alert as alert")
    alerts: _Alerts = Field(ALERT_KINDS, description="the alert kinds it gets")


def parse_notifiers(raw: Any, source: str | None = None) -> tuple[NotifierSpec, ...]:
    """The ``notifiers:`` section: a list of {class, kwargs, alerts}; each mistake named by its index."""
    if raw is None:
        return ()
    try:
        return _NOTIFIERS.validate_python(raw)
    except ValidationError as exc:
        raise _config_error(exc, tuple[NotifierSpec, ...], "notifiers", source) from None


@_section("")
class LakecleanerConfig:
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    cleaner: CleanerConfig = Field(default_factory=CleanerConfig)
    defaults: _Defaults = Field(
        default_factory=dict, description="cleaner-wide defaults of the per-table settings (Kafka's "
                                          "log.cleaner.* role); a table property of the same name overrides them")
    quality: QualityConfig = Field(default_factory=QualityConfig)
    notifiers: tuple[NotifierSpec, ...] = Field((), description="where alerts go (Airflow notifiers)")
    erasure: ErasureConfig = Field(default_factory=ErasureConfig)
    source: SkipJsonSchema[_Location] = "<built-in>"  # the file it came from

    @property
    def state_root(self) -> str:
        """Where the cleaner keeps its own files (failure counts, metrics, data-quality results)."""
        return (self.cleaner.state_location or f"{self.catalog.warehouse.rstrip('/')}/_lakecleaner").rstrip("/")

    @property
    def history_table(self) -> str:
        return f"{self.catalog.name}.{self.cleaner.meta_namespace}.run_history"

    def with_catalog(self, given: CatalogProperties | None) -> "LakecleanerConfig":
        """This config with ``given`` (a connection's catalog settings) merged over its catalog section."""
        if given is None:
            return self
        return dataclasses.replace(self, catalog=given.over(self.catalog))


_CONFIG = TypeAdapter(LakecleanerConfig)
_NOTIFIERS = TypeAdapter(tuple[NotifierSpec, ...])


# ---------------------------------------------------------------- pydantic's errors as ConfigErrors
_MAPPING_ERRORS = ("dataclass_type", "dataclass_args_type", "dict_type", "model_type", "model_attributes_type",
                   "mapping_type")
_LIST_ERRORS = ("list_type", "tuple_type", "iterable_type", "sequence_str")


def _path(root: str, loc: tuple) -> str:
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _fields(tp: Any) -> dict[str, str]:
    """A section type's keys as the file spells them (an alias, else the name), by field name."""
    return {name: f.alias or name for name, f in getattr(tp, "__pydantic_fields__", {}).items()}


def _known_keys(tp: Any, loc: tuple) -> list[str]:
    """The keys the file may write at ``loc`` under the section type ``tp``."""
    for part in loc:
        if get_origin(tp) is tuple:
            tp = get_args(tp)[0]
        if not isinstance(part, int):
            fields = getattr(tp, "__pydantic_fields__", {})
            name = next((n for n, spelled in _fields(tp).items() if part in (n, spelled)), None)
            tp = fields[name].annotation if name else None
    if get_origin(tp) is tuple:
        tp = get_args(tp)[0]
    return sorted(spelled for name, spelled in _fields(tp).items() if name != "source")


def _problem(error: Mapping[str, Any], tp: Any, root: str, source: str | None) -> ConfigError:
    loc, value = tuple(error["loc"]), error.get("input")
    cause = (error.get("ctx") or {}).get("error")
    kind = error["type"]
    if isinstance(cause, _Invalid):
        loc, problem = loc + cause.at, cause.problem
        value = value if cause.value is _UNSET else cause.value
    elif kind in ("unexpected_keyword_argument", "extra_forbidden"):
        problem = f"unknown key (known: {', '.join(_known_keys(tp, loc[:-1]))})"
    elif kind in ("missing", "missing_argument", "missing_keyword_only_argument"):
        problem = "missing (required)"
    elif kind in _MAPPING_ERRORS:
        problem = f"expected a mapping, got {_kind(value)}"
    elif kind in _LIST_ERRORS:
        problem = f"expected a list, got {_kind(value)}"
    else:
        problem = error["msg"]  # pydantic's message never quotes the value (its error's str does)
    return ConfigError(None, _path(root, loc), value, problem + (f" (in {source})" if source else ""))


def _config_error(exc: ValidationError, tp: Any, root: str, source: str | None = None) -> ConfigError:
    """The first of pydantic's errors as a ConfigError; every one of them in its ``problems``."""
    problems = tuple(_problem(e, tp, root, source) for e in exc.errors(include_url=False))
    problems[0].problems = problems
    return problems[0]


# ---------------------------------------------------------------- the JSON Schema
# What an editor should allow where a value is a ${NAME} reference (the value comes at load time).
_REFERENCE_SCHEMA = {"type": "string", "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*\}"}


def _referable(schema: Any) -> Any:
    """``schema`` with every constrained value (a number, a boolean, an enum, a pattern) allowing a
    ${NAME} reference too. Names (property names, keys) are never references."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in ("properties", "$defs"):
        if key in out:
            out[key] = {name: _referable(sub) for name, sub in out[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _referable(out[key])
    if "anyOf" in out:
        out["anyOf"] = [_referable(sub) for sub in out["anyOf"]]
    types = out.get("type")
    types = set(types) if isinstance(types, list) else {types}
    constrained = "enum" in out or "pattern" in out or (types & {"integer", "number", "boolean"} and
                                                         "string" not in types)
    if "$ref" in out or "anyOf" in out or not constrained:
        return out
    meta = {key: out.pop(key) for key in ("title", "description", "default") if key in out}
    return {**meta, "anyOf": [out, _REFERENCE_SCHEMA]}


def config_schema() -> dict[str, Any]:
    """The config file as JSON Schema (draft 2020-12), for editors and CI (``lakecleaner config schema``)."""
    schema = _referable(_CONFIG.json_schema())
    schema.pop("title", None)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "lakecleaner configuration",
            "description": "lakecleaner's YAML config (lakecleaner.core.config). A value may be ${NAME}, the "
                           "environment variable's value at load time ($${ is a literal ${).", **schema}


# ---------------------------------------------------------------- loading
def config_document(cfg: LakecleanerConfig, **sections: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg``'s catalog and Spark sections as the YAML ``load_config`` reads, plus ``sections``: for
    code that hands a configuration built in Python to another process (spark-submit, the CLI, Airflow).
    Its values are literal (a ${ is written $${): what the other process loads is what was built."""
    c, s = cfg.catalog, cfg.spark
    return _escaped({
        "catalog": {"name": c.name, "type": c.type, "warehouse": c.warehouse, "properties": dict(c.properties),
                    "spark_properties": dict(c.spark_properties), "pyiceberg_properties": dict(c.pyiceberg_properties)},
        "spark": {"master": s.master, "iceberg_runtime": s.iceberg_runtime, "driver_memory": s.driver_memory,
                  "conf": dict(s.conf), "extra_jars": list(s.extra_jars), "extra_packages": list(s.extra_packages)},
        **sections})


# ${NAME} is the environment variable's value; $${ is a literal ${. Anything else after ${ is refused
# rather than kept (${VAR:-default} is a shell's, not ours).
_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)(\}?)")


def _interpolate(value: Any, path: str, env: Mapping[str, str], source: str) -> Any:
    """Every string value of the document with its ${NAME} references replaced (keys are names, kept)."""
    if isinstance(value, Mapping):
        return {k: _interpolate(v, _path(path, (k,)), env, source) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, _path(path, (i,)), env, source) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group(1)
        if not match.group(2) or not IDENT.fullmatch(name):
            raise ConfigError(None, path, value, "a malformed ${...}: write ${NAME} (letters, digits and _), or $${ "
                                                 f"for a literal ${{ (in {source})")
        if name not in env:
            raise ConfigError(None, path, value, f"environment variable {name} is not set (in {source})")
        return env[name]

    return _REFERENCE.sub(substitute, value)


def _escaped(value: Any) -> Any:
    """``value`` as a document says it literally: each ${ written $${ (the reverse of _interpolate)."""
    if isinstance(value, Mapping):
        return {k: _escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value.replace("${", "$${") if isinstance(value, str) else value


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML requires a mapping's keys to be unique; PyYAML keeps the last of a repeated key silently
    (a second ``catalog:`` replaced the first). A repeated key is an error at its line."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)):  # a complex key: nothing of ours, left to the schema
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _read(path: Path, text: str | None = None) -> dict[str, Any]:
    """The file's sections (or ``text``'s, an inline document), each None one left out (the built-in default)."""
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(None, "<file>", str(path), f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                                                         f"position {exc.start})") from None
        except OSError as exc:
            raise ConfigError(None, "<file>", str(path), f"cannot be read: {exc.strerror or type(exc).__name__}") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:  # its own text quotes the offending line, which may hold a credential
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(None, "<file>", str(path), f"not valid YAML: {getattr(exc, 'problem', None) or 'unreadable'}"
                                                     f"{where}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise ConfigError(None, "<file>", str(path), "top level must be a mapping")
    unknown = sorted(str(k) for k in raw if k not in SECTIONS)
    if unknown:
        raise ConfigError(None, unknown[0], None, f"unknown section (known: {', '.join(SECTIONS)}; in {path})",
                          hide_value=True)
    return {k: v for k, v in raw.items() if v is not None}


# A config handed over whole, as one argument (a data: URI of its JSON text): what a Spark driver in
# cluster mode gets when it has no file of its own (lakecleaner.core.cluster.inline_config).
INLINE_PREFIX = "data:application/json,"
INLINE_SOURCE = "<inline config>"


def raw_config(path: str | os.PathLike) -> dict[str, Any]:
    """The file's sections as written: nothing interpolated (its ${NAME} references kept), nothing checked."""
    return _read(Path(_local_path(os.fspath(path))))


def inline_config(doc: Mapping[str, Any]) -> str:
    """``doc`` (sections as a file holds them) as one argument ``load_config`` reads back: a data: URI
    of its JSON text, %-encoded where a URI needs it."""
    import json
    from urllib.parse import quote

    return INLINE_PREFIX + quote(json.dumps(doc, sort_keys=True, separators=(",", ":")), safe="{}[]\":,._-/$@*+=!~")


def _local_path(where: str) -> str:
    """A path, or a file: or local: URI (Spark's name for a file already on the machine) as a path."""
    for scheme in ("local://", "file://"):
        if where.startswith(scheme):
            return where[len(scheme):]
    return where


def load_config(path: str | os.PathLike | None = None) -> LakecleanerConfig:
    """Load the YAML config: explicit path (or file:// or local:// URI, or an inline document:
    INLINE_PREFIX), else $LAKECLEANER_CONFIG, else the shipped default. Each
    ${NAME} in a value is the environment variable's value ($${ a literal ${). A
    relative warehouse path of a hadoop catalog is resolved against the config file's directory; the
    shipped default's (a file inside the installed package) against the working directory. Every
    mistake is a ConfigError naming its path (its ``problems``: all of them)."""
    where = os.fspath(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)
    if where.startswith(INLINE_PREFIX):  # a document handed over whole (cluster mode: lakecleaner.core.cluster)
        path = Path(INLINE_SOURCE)
        doc = _interpolate(_read(path, unquote(where[len(INLINE_PREFIX):])), "", os.environ, INLINE_SOURCE)
    else:
        path = Path(_local_path(where))
        if not path.exists():
            raise ConfigError(None, CONFIG_ENV, str(path), "config file not found")
        doc = _interpolate(_read(path), "", os.environ, str(path))
    catalog = doc.get("catalog", {})
    if isinstance(catalog, Mapping) and catalog.get("type", "hadoop") == "hadoop":
        warehouse = catalog.get("warehouse", "warehouse")
        if isinstance(warehouse, str) and warehouse and not _SCHEME.match(warehouse):
            base = Path.cwd() if path == Path(INLINE_SOURCE) or path.resolve() == DEFAULT_CONFIG_PATH \
                else path.resolve().parent
            doc["catalog"] = {**catalog, "warehouse": str((base / warehouse).resolve())}
    try:
        return _CONFIG.validate_python({**doc, "source": str(path)})
    except ValidationError as exc:
        raise _config_error(exc, LakecleanerConfig, "", str(path)) from None
