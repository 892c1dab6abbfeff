"""Unit tests for lakecleaner.core.config: per-table setting resolution/validation and the YAML file.

Pure Python: no Spark, no Airflow. Every ConfigError is checked to name the table (when there is
one), the property and the offending value, which is the product requirement.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from lakecleaner.core.config import (CATALOG_TYPES, CONFIG_ENV, DEFAULT_CONFIG_PATH, HEADERS_TYPE, INTEGRAL_TYPES, LONG_MAX, ORDERABLE_TYPES, TABLE_SETTINGS, CatalogConfig, CleanerConfig, ConfigError, LakecleanerConfig, SparkConfig, TableConfig, is_compacted, is_secret_path, load_config, resolve_table)

TABLE = "lake.db.events"

ALL_COLUMNS = {
    "key": "string",
    "offset": "bigint",
    "partition": "int",
    "timestamp": "bigint",
    "headers": "array<struct<key:string,value:binary>>",
    "tombstone": "boolean",
    "value": "string",
}
MINIMAL_COLUMNS = {"key": "string", "offset": "bigint"}


def cols(**changes) -> dict[str, str]:
    """ALL_COLUMNS with some changed; a value of None drops the column."""
    out = dict(ALL_COLUMNS)
    for name, type_ in changes.items():
        if type_ is None:
            out.pop(name, None)
        else:
            out[name] = type_
    return out


def check_error(exc: ConfigError, table: str | None, prop: str, value, problem: str | None = None) -> None:
    """The error names the table, the property and the value (and, optionally, the problem); under
    catalog, spark.conf and notifiers of the file, never the value (it may be a credential)."""
    msg = str(exc)
    assert exc.table == table
    assert exc.prop == prop
    if table:
        assert msg.startswith(f"table {table}: "), msg
    else:
        assert msg.startswith("lakecleaner config: "), msg
    if table is None and is_secret_path(prop):
        assert exc.value is None and exc.hidden and msg.startswith(f"lakecleaner config: {prop}: "), msg
        assert repr(value) not in msg, msg
    else:
        assert exc.value == value
        assert f"{prop}={value!r}" in msg, msg
    if problem is not None:
        assert problem in msg, msg
    assert isinstance(exc, ValueError)


def resolve_error(properties=None, columns=None, defaults=None, table=TABLE) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        resolve_table(table, properties or {}, ALL_COLUMNS if columns is None else columns, defaults)
    return info.value


# ================================================================ ConfigError itself
def test_config_error_message_format():
    err = ConfigError("t.x", "delete.retention.ms", "-1", "must be between 0 and 9")
    assert str(err) == "table t.x: delete.retention.ms='-1' is invalid: must be between 0 and 9"
    err = ConfigError(None, "cleaner.meta_namespace", "a-b", "bad")
    assert str(err) == "lakecleaner config: cleaner.meta_namespace='a-b' is invalid: bad"
    assert (err.table, err.prop, err.value, err.problem) == (None, "cleaner.meta_namespace", "a-b", "bad")
    err = ConfigError(None, "catalog.type", "nessie", "bad")  # under catalog: the path, never the value
    assert str(err) == "lakecleaner config: catalog.type: bad"
    assert (err.table, err.prop, err.value, err.problem) == (None, "catalog.type", None, "bad")


# ================================================================ precedence
def test_builtin_kafka_defaults():
    cfg = resolve_table(TABLE, {}, ALL_COLUMNS)
    assert isinstance(cfg, TableConfig)
    assert cfg.table == TABLE
    assert cfg.strategy == "offset" and not cfg.versioned
    assert cfg.version_header == "" and cfg.version_column == ""
    assert cfg.delete_retention_ms == 86_400_000 == TABLE_SETTINGS["delete.retention.ms"].default
    assert cfg.min_compaction_lag_ms == 0
    assert cfg.max_compaction_lag_ms == LONG_MAX
    assert cfg.min_cleanable_dirty_ratio == 0.5
    assert cfg.retain_log_end_record is True
    assert cfg.max_records_per_run == 50_000_000
    assert cfg.key_columns == ("key",)
    assert cfg.offset_column == "offset"
    assert cfg.partition_column == "partition"
    assert cfg.tombstone_column == "tombstone"
    assert cfg.value_column == "value"
    # only resolved for the strategies that need them
    assert cfg.timestamp_column is None
    assert cfg.headers_column is None


def test_none_and_empty_defaults_are_the_same():
    assert resolve_table(TABLE, {}, ALL_COLUMNS, None) == resolve_table(TABLE, {}, ALL_COLUMNS, {})


# prop, yaml default (YAML-native type), table property (string), attribute, builtin, from-default, from-property
PRECEDENCE = [
    ("delete.retention.ms", 1000, "2000", "delete_retention_ms", 86_400_000, 1000, 2000),
    ("min.compaction.lag.ms", 10, "20", "min_compaction_lag_ms", 0, 10, 20),
    ("max.compaction.lag.ms", 500, "600", "max_compaction_lag_ms", LONG_MAX, 500, 600),
    ("min.cleanable.dirty.ratio", 0.1, "0.9", "min_cleanable_dirty_ratio", 0.5, 0.1, 0.9),
    ("compaction.retain.log.end.record", False, "true", "retain_log_end_record", True, False, True),
    ("compaction.max.records.per.run", 100, "7", "max_records_per_run", 50_000_000, 100, 7),
    ("compaction.key.columns", "value", "key,value", "key_columns", ("key",), ("value",), ("key", "value")),
    ("compaction.strategy", "timestamp", "offset", "strategy", "offset", "timestamp", "offset"),
    ("compaction.partition.column", "offset", "partition", "partition_column", "partition", "offset", "partition"),
]


@pytest.mark.parametrize("prop,default,prop_value,attr,builtin,from_default,from_property", PRECEDENCE)
def test_precedence_property_over_yaml_default_over_builtin(prop, default, prop_value, attr, builtin,
                                                            from_default, from_property):
    assert getattr(resolve_table(TABLE, {}, ALL_COLUMNS), attr) == builtin
    assert getattr(resolve_table(TABLE, {}, ALL_COLUMNS, {prop: default}), attr) == from_default
    assert getattr(resolve_table(TABLE, {prop: prop_value}, ALL_COLUMNS, {prop: default}), attr) == from_property
    assert getattr(resolve_table(TABLE, {prop: prop_value}, ALL_COLUMNS), attr) == from_property


def test_table_property_wins_even_when_the_default_would_be_invalid_for_it():
    # the default is never parsed when the table overrides it
    cfg = resolve_table(TABLE, {"delete.retention.ms": "5"}, ALL_COLUMNS, {"delete.retention.ms": "garbage"})
    assert cfg.delete_retention_ms == 5


def test_unrelated_properties_are_ignored():
    cfg = resolve_table(TABLE, {"cleanup.policy": "compact", "write.format.default": "parquet"}, ALL_COLUMNS)
    assert cfg == resolve_table(TABLE, {}, ALL_COLUMNS)


def test_values_are_trimmed_and_case_folded():
    cfg = resolve_table(TABLE, {
        "compaction.strategy": "  TimeStamp ",
        "compaction.retain.log.end.record": " FALSE ",
        "delete.retention.ms": " 42 ",
        "min.cleanable.dirty.ratio": " 0.25 ",
        "compaction.key.columns": " key , value ",
    }, ALL_COLUMNS)
    assert cfg.strategy == "timestamp"
    assert cfg.retain_log_end_record is False
    assert cfg.delete_retention_ms == 42
    assert cfg.min_cleanable_dirty_ratio == 0.25
    assert cfg.key_columns == ("key", "value")


@pytest.mark.parametrize("prop,value,attr", [
    ("delete.retention.ms", "0", "delete_retention_ms"),
    ("delete.retention.ms", str(LONG_MAX), "delete_retention_ms"),
    ("min.compaction.lag.ms", "0", "min_compaction_lag_ms"),
    ("max.compaction.lag.ms", str(LONG_MAX), "max_compaction_lag_ms"),
    ("compaction.max.records.per.run", "1", "max_records_per_run"),
    ("compaction.max.records.per.run", str(LONG_MAX), "max_records_per_run"),
    ("min.cleanable.dirty.ratio", "0", "min_cleanable_dirty_ratio"),
    ("min.cleanable.dirty.ratio", "1", "min_cleanable_dirty_ratio"),
    ("min.cleanable.dirty.ratio", "1.0", "min_cleanable_dirty_ratio"),
])
def test_boundary_values_are_accepted(prop, value, attr):
    cfg = resolve_table(TABLE, {prop: value}, ALL_COLUMNS)
    assert getattr(cfg, attr) == (float(value) if "ratio" in prop else int(value))


def test_max_compaction_lag_of_one_with_zero_min_lag_is_accepted():
    cfg = resolve_table(TABLE, {"max.compaction.lag.ms": "1"}, ALL_COLUMNS)
    assert cfg.max_compaction_lag_ms == 1


def test_max_lag_equal_to_min_lag_is_accepted():
    cfg = resolve_table(TABLE, {"min.compaction.lag.ms": "500", "max.compaction.lag.ms": "500"}, ALL_COLUMNS)
    assert cfg.min_compaction_lag_ms == cfg.max_compaction_lag_ms == 500


# ================================================================ value validation errors
BAD_VALUES = [
    # strategy
    ("compaction.strategy", "latest", "must be one of offset, timestamp, header, column"),
    ("compaction.strategy", "", "must be one of"),
    ("compaction.strategy", "offset,timestamp", "must be one of"),
    # longs >= 0
    ("delete.retention.ms", "abc", "not an integer"),
    ("delete.retention.ms", "1.5", "not an integer"),
    ("delete.retention.ms", "", "not an integer"),
    ("delete.retention.ms", "1e3", "not an integer"),
    ("delete.retention.ms", "-1", f"must be between 0 and {LONG_MAX}"),
    ("delete.retention.ms", str(LONG_MAX + 1), f"must be between 0 and {LONG_MAX}"),
    ("min.compaction.lag.ms", "soon", "not an integer"),
    ("min.compaction.lag.ms", "-5", f"must be between 0 and {LONG_MAX}"),
    ("min.compaction.lag.ms", str(LONG_MAX + 1), f"must be between 0 and {LONG_MAX}"),
    # longs >= 1
    ("max.compaction.lag.ms", "forever", "not an integer"),
    ("max.compaction.lag.ms", "0", f"must be between 1 and {LONG_MAX}"),
    ("max.compaction.lag.ms", "-1", f"must be between 1 and {LONG_MAX}"),
    ("max.compaction.lag.ms", str(LONG_MAX + 1), f"must be between 1 and {LONG_MAX}"),
    ("compaction.max.records.per.run", "lots", "not an integer"),
    ("compaction.max.records.per.run", "0", f"must be between 1 and {LONG_MAX}"),
    ("compaction.max.records.per.run", "-3", f"must be between 1 and {LONG_MAX}"),
    ("compaction.max.records.per.run", str(LONG_MAX + 1), f"must be between 1 and {LONG_MAX}"),
    # ratio
    ("min.cleanable.dirty.ratio", "half", "not a number"),
    ("min.cleanable.dirty.ratio", "", "not a number"),
    ("min.cleanable.dirty.ratio", "1.5", "must be between 0 and 1"),
    ("min.cleanable.dirty.ratio", "-0.1", "must be between 0 and 1"),
    ("min.cleanable.dirty.ratio", "nan", "not a number"),
    ("min.cleanable.dirty.ratio", "inf", "not a number"),
    # boolean
    ("compaction.retain.log.end.record", "yes", "must be true or false"),
    ("compaction.retain.log.end.record", "1", "must be true or false"),
    ("compaction.retain.log.end.record", "", "must be true or false"),
    # key columns: empty / blank entries
    ("compaction.key.columns", "", "must be a comma-separated list of column names"),
    ("compaction.key.columns", "   ", "must be a comma-separated list of column names"),
    ("compaction.key.columns", "key,,value", "must be a comma-separated list of column names"),
    ("compaction.key.columns", "key,", "must be a comma-separated list of column names"),
    ("compaction.key.columns", ",key", "must be a comma-separated list of column names"),
    ("compaction.key.columns", "key, ,value", "must be a comma-separated list of column names"),
    # one column twice (Spark's names are case-insensitive): a forget's key join failed confusingly
    ("compaction.key.columns", "key,KEY", "a column is named twice"),
]


@pytest.mark.parametrize("prop,raw,problem", BAD_VALUES)
def test_bad_table_property_names_table_property_and_value(prop, raw, problem):
    err = resolve_error({prop: raw})
    check_error(err, TABLE, prop, raw, problem)


@pytest.mark.parametrize("prop,raw,problem", BAD_VALUES)
def test_bad_default_passed_to_resolve_table_still_names_the_table(prop, raw, problem):
    err = resolve_error(defaults={prop: raw})
    check_error(err, TABLE, prop, raw, problem)


def test_max_lag_below_min_lag():
    err = resolve_error({"min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "999"})
    check_error(err, TABLE, "max.compaction.lag.ms", 999, "must be >= min.compaction.lag.ms (1000)")


def test_max_lag_below_min_lag_across_sources():
    # min from the table, max from the YAML defaults: still checked on the resolved values
    err = resolve_error({"min.compaction.lag.ms": "60000"}, defaults={"max.compaction.lag.ms": 1000})
    check_error(err, TABLE, "max.compaction.lag.ms", 1000, "(60000)")


# ================================================================ columns against the schema
def test_column_names_are_case_insensitive_and_types_normalised():
    columns = {"KEY": "STRING", "Offset": "BIGINT", "Headers": "ARRAY<STRUCT<key: string, value: binary>>"}
    cfg = resolve_table(TABLE, {"compaction.strategy": "header", "compaction.strategy.header": "v"}, columns)
    assert cfg.key_columns == ("KEY",)  # the schema's spelling: Iceberg's metrics are keyed by it
    assert cfg.offset_column == "Offset"
    assert cfg.headers_column == "Headers"
    assert cfg.partition_column is None and cfg.tombstone_column is None and cfg.value_column is None


def test_missing_key_column():
    err = resolve_error(columns=cols(key=None))
    check_error(err, TABLE, "compaction.key.columns", "key", "no such column 'key'")


def test_missing_one_of_composite_key_columns():
    err = resolve_error({"compaction.key.columns": "key, region"})
    check_error(err, TABLE, "compaction.key.columns", "key,region", "no such column 'region'")


def test_composite_key_columns_resolve():
    cfg = resolve_table(TABLE, {"compaction.key.columns": "tenant,id"}, {**MINIMAL_COLUMNS, "tenant": "string", "id": "int"})
    assert cfg.key_columns == ("tenant", "id")


@pytest.mark.parametrize("key_type", ["map<string,string>", "MAP<STRING, STRING>", "array<map<string,int>>",
                                      "struct<a:int,m:map<string,string>>", "struct<a: int, m: map<string, int>>"])
def test_a_key_column_holding_a_map_is_refused(key_type):
    """Spark cannot group by a map: every run failed on GROUP_EXPRESSION_TYPE_IS_NOT_ORDERABLE."""
    err = resolve_error({"compaction.key.columns": "m"}, {**MINIMAL_COLUMNS, "m": key_type})
    check_error(err, TABLE, "compaction.key.columns", "m", "column 'm' is a ")
    assert "has no order Spark can group records by" in str(err)


@pytest.mark.parametrize("key_type", ["binary", "array<string>", "struct<a:int,b:string>", "struct<map:int>"])
def test_a_key_column_of_a_type_spark_groups_by_resolves(key_type):
    assert resolve_table(TABLE, {"compaction.key.columns": "m"}, {**MINIMAL_COLUMNS, "m": key_type}).key_columns == ("m",)


def test_missing_offset_column_by_default():
    err = resolve_error(columns=cols(offset=None))
    check_error(err, TABLE, "compaction.offset.column", "offset", "no such column")
    assert "columns: key, partition" in str(err)  # the available columns are listed


def test_missing_explicit_offset_column():
    err = resolve_error({"compaction.offset.column": "seq"})
    check_error(err, TABLE, "compaction.offset.column", "seq", "no such column")


def test_blank_offset_column():
    err = resolve_error({"compaction.offset.column": "  "})
    check_error(err, TABLE, "compaction.offset.column", "", "no such column")


@pytest.mark.parametrize("type_", ["string", "double", "timestamp", "decimal(20,0)", "boolean"])
def test_wrongly_typed_offset_column(type_):
    err = resolve_error(columns=cols(offset=type_))
    check_error(err, TABLE, "compaction.offset.column", "offset", f"column has type {type_}, expected one of bigint")


@pytest.mark.parametrize("type_", INTEGRAL_TYPES)
def test_integral_offset_types_are_accepted(type_):
    assert resolve_table(TABLE, {}, cols(offset=type_)).offset_column == "offset"


def test_custom_offset_column():
    cfg = resolve_table(TABLE, {"compaction.offset.column": "seq"}, {"key": "string", "seq": "bigint"})
    assert cfg.offset_column == "seq"


# --- optional columns: partition, tombstone, value
OPTIONAL = [
    ("compaction.partition.column", "partition", "partition_column"),
    ("compaction.tombstone.column", "tombstone", "tombstone_column"),
    ("compaction.value.column", "value", "value_column"),
]


@pytest.mark.parametrize("prop,default_name,attr", OPTIONAL)
def test_absent_default_optional_column_is_silently_none(prop, default_name, attr):
    cfg = resolve_table(TABLE, {}, cols(**{default_name: None}))
    assert getattr(cfg, attr) is None


@pytest.mark.parametrize("prop,default_name,attr", OPTIONAL)
def test_explicit_but_missing_optional_column_is_an_error(prop, default_name, attr):
    err = resolve_error({prop: "nope"})
    check_error(err, TABLE, prop, "nope", "no such column")


@pytest.mark.parametrize("prop,default_name,attr", OPTIONAL)
def test_explicitly_set_to_default_name_but_missing_is_an_error(prop, default_name, attr):
    err = resolve_error({prop: default_name}, columns=cols(**{default_name: None}))
    check_error(err, TABLE, prop, default_name, "no such column")


@pytest.mark.parametrize("prop,default_name,attr", OPTIONAL)
def test_optional_column_named_by_yaml_default_but_absent_is_none(prop, default_name, attr):
    # YAML defaults are cleaner-wide: a table without that column just does not use it
    cfg = resolve_table(TABLE, {}, cols(**{default_name: None}), {prop: "elsewhere"})
    assert getattr(cfg, attr) is None


@pytest.mark.parametrize("prop,default_name,attr", OPTIONAL)
def test_custom_optional_column(prop, default_name, attr):
    type_ = ALL_COLUMNS[default_name]
    cfg = resolve_table(TABLE, {prop: "custom"}, {**MINIMAL_COLUMNS, "custom": type_})
    assert getattr(cfg, attr) == "custom"


@pytest.mark.parametrize("type_", ["string", "float", "double"])
def test_wrongly_typed_partition_column(type_):
    err = resolve_error(columns=cols(partition=type_))
    check_error(err, TABLE, "compaction.partition.column", "partition", f"column has type {type_}")


@pytest.mark.parametrize("type_", ["string", "int", "binary"])
def test_wrongly_typed_tombstone_column(type_):
    err = resolve_error(columns=cols(tombstone=type_))
    check_error(err, TABLE, "compaction.tombstone.column", "tombstone", f"column has type {type_}, expected one of boolean")


def test_wrongly_typed_explicit_tombstone_column():
    err = resolve_error({"compaction.tombstone.column": "deleted"}, columns=cols(deleted="string"))
    check_error(err, TABLE, "compaction.tombstone.column", "deleted", "expected one of boolean")


@pytest.mark.parametrize("type_", ["string", "binary", "struct<a:int>", "map<string,string>"])
def test_value_column_of_any_type(type_):
    assert resolve_table(TABLE, {}, cols(value=type_)).value_column == "value"


# --- timestamp strategy
def test_timestamp_strategy():
    cfg = resolve_table(TABLE, {"compaction.strategy": "timestamp"}, ALL_COLUMNS)
    assert cfg.strategy == "timestamp" and cfg.versioned
    assert cfg.timestamp_column == "timestamp"
    assert cfg.headers_column is None


def test_timestamp_strategy_without_timestamp_column():
    err = resolve_error({"compaction.strategy": "timestamp"}, columns=cols(timestamp=None))
    check_error(err, TABLE, "compaction.timestamp.column", "timestamp", "no such column")


def test_timestamp_strategy_with_missing_custom_timestamp_column():
    err = resolve_error({"compaction.strategy": "timestamp", "compaction.timestamp.column": "ts"})
    check_error(err, TABLE, "compaction.timestamp.column", "ts", "no such column")


def test_timestamp_strategy_with_wrongly_typed_timestamp_column():
    err = resolve_error({"compaction.strategy": "timestamp"}, columns=cols(timestamp="string"))
    check_error(err, TABLE, "compaction.timestamp.column", "timestamp", "column has type string")


@pytest.mark.parametrize("type_", ORDERABLE_TYPES)
def test_timestamp_strategy_orderable_types(type_):
    cfg = resolve_table(TABLE, {"compaction.strategy": "timestamp", "compaction.timestamp.column": "ts"},
                        {**MINIMAL_COLUMNS, "ts": type_})
    assert cfg.timestamp_column == "ts"


def test_missing_timestamp_column_is_fine_for_other_strategies():
    cfg = resolve_table(TABLE, {}, cols(timestamp=None))
    assert cfg.timestamp_column is None


# --- header strategy
def test_header_strategy():
    cfg = resolve_table(TABLE, {"compaction.strategy": "header", "compaction.strategy.header": "version"}, ALL_COLUMNS)
    assert cfg.strategy == "header" and cfg.versioned
    assert cfg.version_header == "version"
    # a Kafka header key is matched exactly: " version " is another header
    spaced = resolve_table(TABLE, {"compaction.strategy": "header", "compaction.strategy.header": " version "}, ALL_COLUMNS)
    assert spaced.version_header == " version "
    assert cfg.headers_column == "headers"
    assert cfg.timestamp_column is None


def test_header_strategy_without_headers_column():
    err = resolve_error({"compaction.strategy": "header", "compaction.strategy.header": "v"}, columns=cols(headers=None))
    check_error(err, TABLE, "compaction.headers.column", "headers", "no such column")


def test_header_strategy_with_missing_custom_headers_column():
    err = resolve_error({"compaction.strategy": "header", "compaction.strategy.header": "v",
                         "compaction.headers.column": "hdrs"})
    check_error(err, TABLE, "compaction.headers.column", "hdrs", "no such column")


@pytest.mark.parametrize("type_", [
    "map<string,binary>",
    "array<struct<key:string,value:string>>",
    "array<struct<k:string,v:binary>>",
    "binary",
])
def test_header_strategy_with_wrongly_typed_headers_column(type_):
    err = resolve_error({"compaction.strategy": "header", "compaction.strategy.header": "v"}, columns=cols(headers=type_))
    check_error(err, TABLE, "compaction.headers.column", "headers", f"expected one of {HEADERS_TYPE}")


@pytest.mark.parametrize("blank", ["", "   "])
def test_header_strategy_with_blank_header_name_falls_back_to_offset(blank):
    # KIP-280: a blank header name means the offset strategy; no headers column is then needed
    cfg = resolve_table(TABLE, {"compaction.strategy": "header", "compaction.strategy.header": blank},
                        cols(headers=None))
    assert cfg.strategy == "offset" and not cfg.versioned
    assert cfg.headers_column is None


def test_header_strategy_without_header_name_falls_back_to_offset():
    cfg = resolve_table(TABLE, {"compaction.strategy": "header"}, ALL_COLUMNS)
    assert cfg.strategy == "offset"
    assert cfg.headers_column is None


def test_missing_headers_column_is_fine_for_other_strategies():
    cfg = resolve_table(TABLE, {"compaction.strategy.header": "v"}, cols(headers=None))
    assert cfg.strategy == "offset" and cfg.headers_column is None


# --- column strategy
@pytest.mark.parametrize("type_", ORDERABLE_TYPES)
def test_column_strategy(type_):
    cfg = resolve_table(TABLE, {"compaction.strategy": "column", "compaction.strategy.column": " ver "},
                        {**ALL_COLUMNS, "ver": type_})
    assert cfg.strategy == "column" and cfg.versioned
    assert cfg.version_column == "ver"


@pytest.mark.parametrize("props", [
    {"compaction.strategy": "column"},
    {"compaction.strategy": "column", "compaction.strategy.column": ""},
    {"compaction.strategy": "column", "compaction.strategy.column": "   "},
])
def test_column_strategy_without_version_column_name(props):
    err = resolve_error(props)
    check_error(err, TABLE, "compaction.strategy.column", "", "strategy=column needs the name of the version column")


def test_column_strategy_with_absent_version_column():
    err = resolve_error({"compaction.strategy": "column", "compaction.strategy.column": "ver"})
    check_error(err, TABLE, "compaction.strategy.column", "ver", "no such column")


@pytest.mark.parametrize("type_", ["string", "binary", "boolean", "array<int>", "decimal(10,2)"])
def test_column_strategy_with_non_orderable_version_column(type_):
    err = resolve_error({"compaction.strategy": "column", "compaction.strategy.column": "ver"},
                        columns={**ALL_COLUMNS, "ver": type_})
    check_error(err, TABLE, "compaction.strategy.column", "ver", f"column has type {type_}, expected one of bigint")


def test_version_column_is_not_checked_for_other_strategies():
    cfg = resolve_table(TABLE, {"compaction.strategy.column": "nope"}, ALL_COLUMNS)
    assert cfg.strategy == "offset"


# ================================================================ is_compacted
@pytest.mark.parametrize("props,expected", [
    ({"cleanup.policy": "compact"}, True),
    ({"cleanup.policy": "compact,delete"}, True),
    ({"cleanup.policy": "delete, compact"}, True),
    ({"cleanup.policy": " compact "}, True),
    ({"cleanup.policy": "delete"}, False),
    ({"cleanup.policy": ""}, False),
    ({"cleanup.policy": "compacted"}, False),
    ({"cleanup.policy": "nocompact"}, False),
    ({}, False),
    ({"compact": "true"}, False),
])
def test_is_compacted(props, expected):
    assert is_compacted(props) is expected


@pytest.mark.parametrize("policy", ["Compact", "compact,Delete", "compact,gone"])
def test_a_cleanup_policy_kafka_refuses_is_a_config_error_of_the_table(policy):
    """resolve_table, which the engine, the view and evaluation all go through: "compact,Delete" is
    compacted to is_compacted, but Kafka refuses it, and so does the cleaner, naming the table."""
    with pytest.raises(ConfigError, match=f"table {TABLE}: cleanup.policy='{policy}' is invalid: .* is not one of "
                                          "compact, delete"):
        resolve_table(TABLE, {"cleanup.policy": policy}, ALL_COLUMNS)
    assert resolve_table(TABLE, {"cleanup.policy": "delete, compact"}, ALL_COLUMNS).table == TABLE


# ================================================================ CatalogConfig
@pytest.mark.parametrize("type_,spark_type,warehouse", [
    ("hadoop", "hadoop", "file:///data/wh"),  # a Hadoop catalog's warehouse is local (test_config_typed.py)
    ("rest", "rest", "s3://bucket/wh"), ("sql", "jdbc", "s3://bucket/wh"), ("glue", "glue", "s3://bucket/wh"),
    ("hive", "hive", "s3://bucket/wh"),
])
def test_spark_conf_catalog_types(type_, spark_type, warehouse):
    conf = CatalogConfig(name="lake", type=type_, warehouse=warehouse).spark_conf()
    assert conf == {
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.type": spark_type,
        "spark.sql.catalog.lake.warehouse": warehouse,
    }


def test_spark_conf_properties_and_spark_only_properties():
    catalog = CatalogConfig(
        name="cat", type="sql", warehouse="",
        properties={"uri": "postgresql+psycopg2://h/db", "s3.endpoint": "http://minio:9000", "jdbc.retries": 3},
        spark_properties={"uri": "jdbc:postgresql://h/db"},
        pyiceberg_properties={"py.only": "x"},
    )
    assert catalog.spark_conf() == {
        "spark.sql.catalog.cat": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.cat.type": "jdbc",
        "spark.sql.catalog.cat.uri": "jdbc:postgresql://h/db",  # spark_properties win
        "spark.sql.catalog.cat.s3.endpoint": "http://minio:9000",
        "spark.sql.catalog.cat.jdbc.retries": "3",  # stringified
    }  # no warehouse key when the warehouse is empty; no pyiceberg-only property


def test_spark_conf_defaults():
    conf = CatalogConfig().spark_conf()
    assert conf["spark.sql.catalog.lake.type"] == "hadoop"
    assert conf["spark.sql.catalog.lake.warehouse"] == "warehouse"


def test_pyiceberg_properties_resolved():
    catalog = CatalogConfig(
        name="cat", type="sql", warehouse="/data/wh",
        properties={"uri": "jdbc:should-be-overridden", "s3.endpoint": "http://minio:9000", "n": 1},
        spark_properties={"spark.only": "x"},
        pyiceberg_properties={"uri": "postgresql+psycopg2://h/db"},
    )
    assert catalog.pyiceberg_properties_resolved() == {
        "type": "sql",
        "uri": "postgresql+psycopg2://h/db",
        "s3.endpoint": "http://minio:9000",
        "n": "1",
        "warehouse": "/data/wh",
    }


def test_pyiceberg_properties_explicit_warehouse_wins_and_empty_is_omitted():
    assert CatalogConfig(type="rest", warehouse="wh",
                         properties={"warehouse": "from-props"}).pyiceberg_properties_resolved()["warehouse"] == "from-props"
    assert CatalogConfig(type="rest", warehouse="wh",
                         pyiceberg_properties={"warehouse": "py"}).pyiceberg_properties_resolved()["warehouse"] == "py"
    assert CatalogConfig(type="rest", warehouse="").pyiceberg_properties_resolved() == {"type": "rest"}


# ================================================================ load_config
def write(tmp_path, text: str, name: str = "lakecleaner.yaml"):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load_error(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch):
    monkeypatch.delenv(CONFIG_ENV, raising=False)


def test_load_full_config(tmp_path):
    path = write(tmp_path, """
catalog:
  name: cat
  type: rest
  warehouse: s3://bucket/wh
  properties: {uri: "http://rest:8181"}
spark:
  master: local[4]
  driver_memory: 4g
  conf: {spark.sql.shuffle.partitions: "8"}
cleaner:
  threads: 3
  meta_namespace: meta
  namespaces: [a, b]
defaults:
  delete.retention.ms: 1000
  min.cleanable.dirty.ratio: 0.2
  compaction.retain.log.end.record: false
  compaction.key.columns: [tenant, id]
""")
    cfg = load_config(path)
    assert cfg.source == str(path)
    assert cfg.catalog == CatalogConfig(name="cat", type="rest", warehouse="s3://bucket/wh",
                                        properties={"uri": "http://rest:8181"})
    assert cfg.spark == SparkConfig(master="local[4]", driver_memory="4g", conf={"spark.sql.shuffle.partitions": "8"})
    assert cfg.cleaner == CleanerConfig(threads=3, meta_namespace="meta", namespaces=("a", "b"))
    assert cfg.history_table == "cat.meta.run_history"
    assert cfg.defaults == {"delete.retention.ms": 1000, "min.cleanable.dirty.ratio": 0.2,
                            "compaction.retain.log.end.record": False, "compaction.key.columns": "tenant,id"}
    # the loaded defaults feed resolve_table
    table = resolve_table(TABLE, {"delete.retention.ms": "7"},
                          {"tenant": "string", "id": "int", "offset": "bigint"}, cfg.defaults)
    assert table.delete_retention_ms == 7
    assert table.min_cleanable_dirty_ratio == 0.2
    assert table.retain_log_end_record is False
    assert table.key_columns == ("tenant", "id")


def test_load_empty_file_gives_builtin_defaults(tmp_path):
    path = write(tmp_path, "")
    cfg = load_config(path)
    assert cfg.spark == SparkConfig() and cfg.cleaner == CleanerConfig() and cfg.defaults == {}
    assert cfg.catalog.type == "hadoop" and cfg.catalog.name == "lake"
    assert cfg.catalog.warehouse == str((tmp_path / "warehouse").resolve())
    assert cfg.history_table == "lake.lakecleaner.run_history"


def test_load_null_sections_are_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "catalog:\nspark:\ncleaner:\ndefaults:\n"))
    assert cfg.spark == SparkConfig() and cfg.cleaner == CleanerConfig() and cfg.defaults == {}


def test_builtin_lakecleaner_config_default():
    assert LakecleanerConfig().source == "<built-in>"
    assert LakecleanerConfig().history_table == "lake.lakecleaner.run_history"


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    check_error(load_error(path), None, CONFIG_ENV, str(path), "config file not found")


def test_env_var_is_honoured(tmp_path, monkeypatch):
    path = write(tmp_path, "cleaner:\n  threads: 5\n", "from-env.yaml")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    cfg = load_config()
    assert cfg.source == str(path)
    assert cfg.cleaner.threads == 5


def test_explicit_path_beats_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, str(write(tmp_path, "cleaner:\n  threads: 5\n", "env.yaml")))
    explicit = write(tmp_path, "cleaner:\n  threads: 2\n", "explicit.yaml")
    assert load_config(explicit).cleaner.threads == 2
    assert load_config(str(explicit)).source == str(explicit)


def test_env_var_pointing_to_missing_file(tmp_path, monkeypatch):
    missing = tmp_path / "missing.yaml"
    monkeypatch.setenv(CONFIG_ENV, str(missing))
    check_error(load_error(None), None, CONFIG_ENV, str(missing), "config file not found")


def test_shipped_default_config_loads_without_env():
    cfg = load_config()
    assert cfg.source == str(DEFAULT_CONFIG_PATH)
    assert cfg.catalog.type == "hadoop"
    # inside the installed package: "warehouse" is the working directory's
    assert cfg.catalog.warehouse == str(Path.cwd() / "warehouse")
    resolve_table(TABLE, {}, ALL_COLUMNS, cfg.defaults)  # the shipped defaults are valid


def test_top_level_must_be_a_mapping(tmp_path):
    path = write(tmp_path, "- catalog\n- spark\n")
    check_error(load_error(path), None, "<file>", str(path), "top level must be a mapping")


def test_unknown_section(tmp_path):
    path = write(tmp_path, "catalogue:\n  type: rest\n")
    err = load_error(path)
    assert err.table is None and err.prop == "catalogue"
    # a misspelt section may hold what the real one would (credentials): named, never shown
    assert str(err).startswith("lakecleaner config: catalogue: unknown section (known: catalog, spark, ")
    assert str(path) in str(err) and "rest" not in str(err)


@pytest.mark.parametrize("section,key,value", [
    ("catalog", "uri", "http://x"),
    ("spark", "executor_memory", "4g"),
    ("cleaner", "thread", 2),
])
def test_unknown_key_inside_a_section(tmp_path, section, key, value):
    path = write(tmp_path, f"{section}:\n  {key}: {value}\n")
    err = load_error(path)
    check_error(err, None, f"{section}.{key}", value, "unknown key (known: ")
    assert str(path) in str(err)


@pytest.mark.parametrize("section", ["catalog", "spark", "cleaner"])
def test_section_must_be_a_mapping(tmp_path, section):
    path = write(tmp_path, f"{section}: oops\n")
    check_error(load_error(path), None, section, "oops", "expected a mapping, got a string")


@pytest.mark.parametrize("type_", ["nessie", "jdbc", "Hadoop", ""])
def test_bad_catalog_type(tmp_path, type_):
    path = write(tmp_path, f"catalog:\n  type: '{type_}'\n")
    check_error(load_error(path), None, "catalog.type", type_, f"must be one of {', '.join(CATALOG_TYPES)}")


@pytest.mark.parametrize("type_", CATALOG_TYPES)
def test_every_catalog_type_loads(tmp_path, type_):
    assert load_config(write(tmp_path, f"catalog:\n  type: {type_}\n")).catalog.type == type_


def test_relative_hadoop_warehouse_resolved_against_config_directory(tmp_path, monkeypatch):
    path = write(tmp_path / "conf", "catalog:\n  warehouse: ../wh\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory does not matter
    assert load_config(path).catalog.warehouse == str((tmp_path / "wh").resolve())
    path = write(tmp_path / "conf", "catalog:\n  warehouse: data/wh\n")
    assert load_config(path).catalog.warehouse == str((tmp_path / "conf" / "data" / "wh").resolve())


def test_relative_config_path_with_relative_warehouse(tmp_path, monkeypatch):
    write(tmp_path / "conf", "catalog:\n  warehouse: wh\n")
    monkeypatch.chdir(tmp_path)
    assert load_config("conf/lakecleaner.yaml").catalog.warehouse == str((tmp_path / "conf" / "wh").resolve())


@pytest.mark.parametrize("warehouse", ["/abs/wh", "file:///tmp/wh", "file:/tmp/wh"])  # a URI elsewhere is refused
def test_absolute_or_file_uri_hadoop_warehouse_kept(tmp_path, warehouse):
    path = write(tmp_path, f"catalog:\n  type: hadoop\n  warehouse: '{warehouse}'\n")
    assert load_config(path).catalog.warehouse == warehouse


@pytest.mark.parametrize("type_", ["rest", "sql", "hive", "glue"])
def test_relative_warehouse_of_other_catalogs_kept(tmp_path, type_):
    path = write(tmp_path, f"catalog:\n  type: {type_}\n  warehouse: wh\n")
    assert load_config(path).catalog.warehouse == "wh"


def test_empty_hadoop_warehouse_kept_empty(tmp_path):
    assert load_config(write(tmp_path, "catalog:\n  warehouse: ''\n")).catalog.warehouse == ""


@pytest.mark.parametrize("prop,yaml_value,value,problem", [
    ("delete.retention.ms", "-1", -1, "must be between 0"),
    ("delete.retention.ms", "'abc'", "abc", "not an integer"),
    ("delete.retention.ms", "1.5", 1.5, "not an integer"),
    ("min.compaction.lag.ms", "-5", -5, "must be between 0"),
    ("max.compaction.lag.ms", "0", 0, "must be between 1"),
    ("compaction.max.records.per.run", "0", 0, "must be between 1"),
    ("min.cleanable.dirty.ratio", "2", 2, "must be between 0 and 1"),
    ("min.cleanable.dirty.ratio", "'half'", "half", "not a number"),
    ("compaction.retain.log.end.record", "'maybe'", "maybe", "must be true or false"),
    ("compaction.retain.log.end.record", "1", 1, "must be true or false"),
    ("compaction.strategy", "latest", "latest", "must be one of"),
    ("compaction.key.columns", "'a,,b'", "a,,b", "comma-separated list"),
    ("compaction.key.columns", "[a, '']", "a,", "comma-separated list"),
    ("compaction.key.columns", "[]", "", "comma-separated list"),
])
def test_bad_defaults_value(tmp_path, prop, yaml_value, value, problem):
    path = write(tmp_path, f"defaults:\n  {prop}: {yaml_value}\n")
    check_error(load_error(path), None, f"defaults.{prop}", value, problem)


def test_unknown_defaults_key(tmp_path):
    path = write(tmp_path, "defaults:\n  log.cleaner.threads: 2\n")
    check_error(load_error(path), None, "defaults.log.cleaner.threads", 2, "unknown per-table setting")


def test_defaults_must_be_a_mapping(tmp_path):
    path = write(tmp_path, "defaults:\n  - delete.retention.ms\n")
    check_error(load_error(path), None, "defaults", ["delete.retention.ms"], "expected a mapping, got a list")


@pytest.mark.parametrize("yaml_value,value", [("0", 0), ("-2", -2), ("'two'", "two"), ("1.5", 1.5), ("true", True)])
def test_cleaner_threads_must_be_positive_integer(tmp_path, yaml_value, value):
    path = write(tmp_path, f"cleaner:\n  threads: {yaml_value}\n")
    check_error(load_error(path), None, "cleaner.threads", value, "must be a positive integer")


@pytest.mark.parametrize("yaml_value,value", [("0", 0), ("-1", -1), ("'two'", "two"), ("true", True)])
def test_cleaner_application_threads_must_be_positive_integer(tmp_path, yaml_value, value):
    path = write(tmp_path, f"cleaner:\n  application_threads: {yaml_value}\n")
    check_error(load_error(path), None, "cleaner.application_threads", value, "must be a positive integer")


@pytest.mark.parametrize("yaml_value,value", [("0", 0), ("-5", -5), ("'ten'", "ten"), (".inf", float("inf")),
                                              ("false", False)])
def test_cleaner_application_budget_must_be_positive_seconds(tmp_path, yaml_value, value):
    path = write(tmp_path, f"cleaner:\n  application_budget_s: {yaml_value}\n")
    check_error(load_error(path), None, "cleaner.application_budget_s", value, "must be a positive number of seconds")


def test_cleaner_application_settings_load(tmp_path):
    cfg = load_config(write(tmp_path, "cleaner:\n  application_threads: 3\n  application_budget_s: 90.5\n"))
    assert (cfg.cleaner.application_threads, cfg.cleaner.application_budget_s) == (3, 90.5)
    assert (CleanerConfig().application_threads, CleanerConfig().application_budget_s) == (2, 600.0)


def test_spark_conf_jvm_options_driver_and_executors_and_overridable():
    from lakecleaner.core.sparkconf import JVM_OPTIONS, spark_conf

    conf = spark_conf(LakecleanerConfig())
    assert conf["spark.driver.extraJavaOptions"].endswith(JVM_OPTIONS)
    assert "-Dlog4j2.configurationFile=" in conf["spark.driver.extraJavaOptions"]
    assert conf["spark.executor.extraJavaOptions"] == JVM_OPTIONS
    custom = LakecleanerConfig(spark=SparkConfig(conf={"spark.executor.extraJavaOptions": "-Xss4m"}))
    assert spark_conf(custom)["spark.executor.extraJavaOptions"] == "-Xss4m"


# ================================================================ settings that used to slip through
@pytest.mark.parametrize("yaml_value,value", [("0", 0), ("-1", -1), ("'abc'", "abc"), ("true", True)])
def test_uncleanable_after_failures_must_be_a_positive_integer(tmp_path, yaml_value, value):
    path = write(tmp_path, f"cleaner:\n  uncleanable_after_failures: {yaml_value}\n")
    check_error(load_error(path), None, "cleaner.uncleanable_after_failures", value, "must be a positive integer")


@pytest.mark.parametrize("yaml, prop, value, problem", [
    ("cleaner:\n  quarantine_suffix: ''\n", "cleaner.quarantine_suffix", "", "non-empty suffix"),
    ("cleaner:\n  quarantine_suffix: '-q'\n", "cleaner.quarantine_suffix", "-q", "non-empty suffix"),
    ("cleaner:\n  namespaces: shop\n", "cleaner.namespaces", "shop", "must be a list"),
    ("cleaner:\n  namespaces: [shop, 'a`b']\n", "cleaner.namespaces", ("shop", "a`b"), "must be a list"),
    ("cleaner:\n  meta_namespace: 'lake`cleaner'\n", "cleaner.meta_namespace", "lake`cleaner", "letters, digits"),
    ("catalog:\n  name: 'la`ke'\n", "catalog.name", "la`ke", "letters, digits"),
    ("quality:\n  anomalous_share_max: true\n", "quality.anomalous_share_max", True, "between 0 and 1"),
    ("quality:\n  severity:\n    one record per kee: warn\n", "quality.severity.one record per kee", "warn",
     "unknown rule"),
])
def test_yaml_settings_are_typed_and_checked(tmp_path, yaml, prop, value, problem):
    check_error(load_error(write(tmp_path, yaml)), None, prop, value, problem)


def test_known_quality_rule_names_load(tmp_path):
    cfg = load_config(write(tmp_path, "quality:\n  severity:\n    freshness (max.compaction.lag.ms): warn\n"))
    assert cfg.quality.severity == {"freshness (max.compaction.lag.ms)": "warn"}


def test_the_rules_the_suites_build_are_the_registry():
    """The registry (lakecleaner.core.quality_rules) names every rule the suites build and no other:
    quality.severity, results and the UI speak one vocabulary."""
    from lakecleaner.core.quality_rules import FORGOTTEN_STAY_FORGOTTEN, QualityRule, Suite, rule_names
    from lakecleaner.spark.quality import Forgotten, Rule, build_history_rules, build_rules
    from lakecleaner.core.rules import Checkpoint

    ckpt = Checkpoint(offsets={0: 9}, history=[(0, {0: 9}, 1)])
    built = set()
    for _strategy, props in (("offset", {}), ("timestamp", {"compaction.strategy": "timestamp"}),
                            ("header", {"compaction.strategy": "header", "compaction.strategy.header": "v"}),
                            ("column", {"compaction.strategy": "column", "compaction.strategy.column": "ver"})):
        tc = resolve_table(TABLE, props, {**ALL_COLUMNS, "ver": "bigint"})
        rules = build_rules(tc, ckpt, 10**12, 1, 5, 0.05, forgotten=(Forgotten("(SELECT 1)", "sha2('', 256)"),))
        names = {r.name for r in rules} | {r.name for r in build_history_rules(tc)}
        assert FORGOTTEN_STAY_FORGOTTEN.name in names
        built |= names
    assert built == set(rule_names()) and len(rule_names()) == len(set(rule_names()))
    with pytest.raises(ValueError, match="not in lakecleaner.core.quality_rules"):
        Rule(QualityRule("one record per kee", Suite.TABLE, ""), "", "SELECT 1")


def test_quality_severity_accepts_every_rule_of_the_registry(tmp_path):
    from lakecleaner.core.quality_rules import rule_names

    text = "quality:\n  severity:\n" + "".join(f"    '{name}': warn\n" for name in rule_names())
    assert load_config(write(tmp_path, text)).quality.severity == {name: "warn" for name in rule_names()}


@pytest.mark.parametrize("raw", ["1_000", "1e3", "0x10", "١٢"])
def test_integers_are_what_kafka_accepts(raw):
    with pytest.raises(ConfigError, match="not an integer"):
        resolve_table(TABLE, {"delete.retention.ms": raw}, ALL_COLUMNS)


@pytest.mark.parametrize("name", ["k`x", "o'x", 'q"x', "b\\x", "${x}", "a{0}"])
def test_columns_with_quote_characters_are_refused_naming_the_setting(name):
    with pytest.raises(ConfigError) as err:
        resolve_table(TABLE, {"compaction.key.columns": name}, {**ALL_COLUMNS, name: "string"})
    check_error(err.value, TABLE, "compaction.key.columns", name, "not supported")


def test_a_config_document_loads_back_as_the_same_config(tmp_path):
    """config_document hands a configuration built in Python to another process (spark-submit, the
    CLI, Airflow): what that process loads is what was built."""
    import yaml

    from lakecleaner.core.config import CatalogConfig, LakecleanerConfig, SparkConfig, config_document, load_config

    cfg = LakecleanerConfig(
        catalog=CatalogConfig(name="pglake", type="sql", warehouse="file:///tmp/wh",
                              spark_properties={"uri": "jdbc:postgresql://127.0.0.1:5/iceberg", "jdbc.user": "u"},
                              pyiceberg_properties={"uri": "postgresql+psycopg2://u@127.0.0.1:5/iceberg"}),
        spark=SparkConfig(master="local[1]", driver_memory="1g", extra_jars=("/a.jar",)))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config_document(cfg, cleaner={"threads": 2})))
    loaded = load_config(path)
    assert loaded.catalog == cfg.catalog and loaded.spark == cfg.spark and loaded.cleaner.threads == 2
