"""A table's record roles and KIP-280's keep rule, defined once and rendered for every place that
decides a winner: Python for the reference model, Spark SQL text for the engine (parsed with
``F.expr``, so Catalyst sees the same expressions as if written with the DataFrame API), the quality
suite's queries and the latest-per-key view. Change how a record wins here, nowhere else.

The rule (KIP-280, keep-highest): under ``offset`` the higher offset wins. Under ``timestamp``,
``header`` and ``column`` a record with a version beats one without (the other is anomalous), then
the higher version wins, and a tie goes to the higher offset.

Each strategy is one class registered by its name (``class X(Strategy, name="x")``): where its
version comes from, as SQL and in Python, and which settings of the table it reads and checks
(``resolve``). The config's ``compaction.strategy`` accepts the registered names, ``Strategy(tc)`` is
the table's own strategy's class, and the quality suite asks the class; a new strategy is one class
here (tests/unit/test_strategies.py registers one).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Mapping, Sequence

from lakecleaner.core.config import (FLOATING_TYPES, HEADERS_TYPE, INTEGRAL_TYPES, ORDERABLE_TYPES, ConfigError,
                                     StrategyRoles, TableConfig, TableSchema)
from lakecleaner.core.rules import (NO_PARTITION_VALUE, QUARANTINE_NULL_KEY, QUARANTINE_NULL_OFFSET,
                                    QUARANTINE_NULL_PARTITION)

# The derived columns every Spark-side consumer names the roles by (engine frames, quality batch).
OFFSET, VER, HAS_VER = "o", "ver", "has_ver"
TWO_TO_63, TWO_TO_64 = 2**63, 2**64
HEADER_VERSION_BYTES = 8  # a version header's value: a big-endian signed long (Kafka's LongSerializer)


def order_key(versioned: bool, offset: int, version) -> tuple:
    """Python (the reference model): the sort key, highest wins."""
    if not versioned:
        return (offset,)
    return (version is not None, version if version is not None else 0, offset)


def decode_version_header(headers: Sequence[tuple[str, bytes | None]] | None, name: str) -> tuple[int | None, bool]:
    """Python (the reference model): (version, anomalous) from Kafka-style headers, as
    Strategy.version_sql reads them in SQL. The last occurrence of the exactly-named header counts;
    its value must be an 8-byte big-endian signed long (Kafka's LongSerializer). A missing or
    malformed header gives no version and counts as anomalous (KIP-280: 'the other is anomalous')."""
    value = None
    found = False
    for key, raw in headers or ():
        if key == name:
            value, found = raw, True
    if not found or value is None or len(value) != HEADER_VERSION_BYTES:
        return None, True
    return struct.unpack(">q", bytes(value))[0], False


def encode_version_header(version: int) -> bytes:
    return struct.pack(">q", version)


def is_tombstone(value_is_null: bool, flag: bool | None) -> bool:
    """Python (the reference model), as Strategy.tombstone_sql: KIP-87, where a tombstone flag is
    present (not null) it decides; otherwise a null value is a delete."""
    return bool(flag) if flag is not None else value_is_null


def ident(name: str) -> str:
    """A column or table name as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal (backslash escapes: spark.sql.parser.escapedStringLiterals off).
    A '$' goes in as the escape \\u0024: Spark substitutes ``${...}`` anywhere in a statement's text,
    literals included, before parsing (spark.sql.variable.substitute), so '${x}' would read ''."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("$", "\\u0024") + "'"


def checkpoint_sql(p: str | None, o: str, offsets: dict, op: str) -> str | None:
    """Records whose offset is ``op`` their partition's entry in ``offsets`` (key None: an
    unpartitioned table, ``p`` None), as one SQL condition; None when there is no entry. With
    ``op`` '<=' and the checkpoint's offsets: the record is cleaned."""
    terms = [f"{o} {op} {off}" if part is None or p is None else f"({p} = {part} AND {o} {op} {off})"
             for part, off in offsets.items()]
    return " OR ".join(terms) or None


# The registry: each strategy's class by its name, in the order they were defined.
_REGISTRY: dict[str, type["Strategy"]] = {}


def strategy_names() -> tuple[str, ...]:
    """What ``compaction.strategy`` accepts: the registered strategies' names."""
    return tuple(_REGISTRY)


def strategy_class(name: str) -> type["Strategy"]:
    """The class registered as ``name``; ValueError naming the known ones where none is."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"no such strategy {name!r} (strategies: {', '.join(_REGISTRY)})") from None


def unregister(name: str) -> None:
    """Take a strategy out of the registry again (a test's own strategy)."""
    del _REGISTRY[name]


@dataclass(frozen=True)
class Strategy:
    """The table's roles (partition, offset, key, tombstone, version) as SQL over its own columns,
    and the keep rule over the derived columns. ``Strategy(tc)`` builds the class registered under
    ``tc.strategy``; a subclass registers with ``class X(Strategy, name="x")`` and says where the
    version comes from (by default: a column, ``version_column``, null where there is none)."""

    tc: TableConfig

    name: ClassVar[str] = ""
    # Whether records are ordered by (has version, version, offset), not by offset alone.
    versioned: ClassVar[bool] = True
    # Whether the quality suite bounds the share of records without a valid version
    # (quality.anomalous_share_max): where producers write the version, not where Kafka sets it.
    bounds_anomalous_share: ClassVar[bool] = False

    def __init_subclass__(cls, *, name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name is not None:
            if name in _REGISTRY:
                raise ValueError(f"strategy {name!r} is registered already ({_REGISTRY[name].__qualname__})")
            cls.name = name
            _REGISTRY[name] = cls

    def __new__(cls, tc: TableConfig | None = None) -> "Strategy":
        # Strategy(tc): the table's own strategy's class (tc None: copy and pickle make it bare).
        if cls is Strategy and tc is not None:
            cls = strategy_class(tc.strategy)
        return super().__new__(cls)

    @classmethod
    def resolve(cls, schema: TableSchema) -> StrategyRoles:
        """The strategy's roles in a table's schema (config.resolve_table), each setting it reads
        checked: a ConfigError names the table, the setting and its value."""
        return StrategyRoles(cls.name, schema.values["compaction.strategy.column"])

    # ---------------------------------------------------------------- roles, over the table's columns
    @property
    def partition_sql(self) -> str:
        """The partition as bigint; an unpartitioned table is rules.NO_PARTITION_VALUE inside the engine."""
        return (f"CAST({ident(self.tc.partition_column)} AS BIGINT)" if self.tc.partition_column
                else f"CAST({NO_PARTITION_VALUE} AS BIGINT)")

    @property
    def offset_sql(self) -> str:
        return f"CAST({ident(self.tc.offset_column)} AS BIGINT)"

    @property
    def tombstone_sql(self) -> str:
        """KIP-87: where the tombstone flag is present (not null) it decides; otherwise a null value."""
        value_null = f"{ident(self.tc.value_column)} IS NULL" if self.tc.value_column else "FALSE"
        if self.tc.tombstone_column:
            return f"coalesce({ident(self.tc.tombstone_column)}, {value_null})"
        return f"({value_null})"

    @property
    def tombstone_pushdown_sql(self) -> str:
        """The same condition as a plain boolean filter Iceberg can prune files by (no coalesce)."""
        if not self.tc.tombstone_column:
            return self.tombstone_sql
        flag = ident(self.tc.tombstone_column)
        value_null = f"{ident(self.tc.value_column)} IS NULL" if self.tc.value_column else "FALSE"
        return f"({flag} OR ({flag} IS NULL AND {value_null}))"

    @property
    def version_column(self) -> str | None:
        """The column the version is read from as it is (so Iceberg keeps bounds of it), if any."""
        return None

    @property
    def version_sql(self) -> str:
        """The record's version (null: none). A NaN is none: Spark orders NaN above every number, so
        a record with one would win over every later update of its key for ever."""
        column = ident(self.version_column)
        if self.tc.version_type in FLOATING_TYPES:
            return f"CASE WHEN isnan({column}) THEN NULL ELSE {column} END"
        return column

    @property
    def has_version_sql(self) -> str:
        return f"({self.version_sql} IS NOT NULL)"

    def version_of(self, row: Mapping[str, Any]) -> tuple[Any, bool]:
        """Python (the reference model): a table row's (version, anomalous), as version_sql and
        has_version_sql give them; the row is a dict of the table's columns."""
        version = row.get(self.version_column)
        if isinstance(version, float) and math.isnan(version):  # as version_sql: no version
            version = None
        return version, version is None

    def tombstone_of(self, row: Mapping[str, Any]) -> bool:
        """Python (the reference model): whether a table row is a tombstone, as tombstone_sql."""
        flag = row.get(self.tc.tombstone_column) if self.tc.tombstone_column else None
        return is_tombstone(row.get(self.tc.value_column) is None if self.tc.value_column else False, flag)

    @property
    def null_key_sql(self) -> str:
        return self.null_key_of("")

    def null_key_of(self, qualifier: str) -> str:
        """SQL: the key is null (rule 7), over the key columns prefixed with ``qualifier``."""
        return " OR ".join(f"{qualifier}{ident(k)} IS NULL" for k in self.tc.key_columns)

    @property
    def bad_conditions(self) -> list[tuple[str, str]]:
        """Rule 7, records no log can hold: (SQL condition, quarantine reason), in the order the
        reason is given: null offset, null partition (partitioned tables), null key."""
        terms = [(f"{ident(self.tc.offset_column)} IS NULL", QUARANTINE_NULL_OFFSET)]
        if self.tc.partition_column:
            terms.append((f"{ident(self.tc.partition_column)} IS NULL", QUARANTINE_NULL_PARTITION))
        return [*terms, (f"({self.null_key_sql})", QUARANTINE_NULL_KEY)]

    @property
    def bad_sql(self) -> str:
        """SQL: a bad record (rule 7), which goes to quarantine."""
        return " OR ".join(cond for cond, _ in self.bad_conditions)

    def latest_per_key_sql(self, table_sql: str, columns: list[str]) -> str:
        """SQL: per (partition, key) its winner under the keep rule, bad records and winning
        tombstones left out; every one of ``columns`` by name. What readers see between runs as if
        the table were compacted and its tombstones expired (lakecleaner.core.view)."""
        rank = "lakecleaner_rank"
        while rank.lower() in {c.lower() for c in columns}:
            rank += "_"
        order = self.winner_order_sql(f"({self.has_version_sql})", f"({self.version_sql})", f"({self.offset_sql})")
        keys = ", ".join(ident(k) for k in self.tc.key_columns)
        return (f"SELECT {', '.join(ident(c) for c in columns)}\n"
                f"FROM (\n  SELECT *, row_number() OVER (\n"
                f"    PARTITION BY {self.partition_sql}, {keys}\n    ORDER BY {order}) AS {ident(rank)}\n"
                f"  FROM {table_sql}\n  WHERE NOT ({self.bad_sql})\n)\n"
                f"WHERE {ident(rank)} = 1 AND NOT ({self.tombstone_sql})")

    # ---------------------------------------------------------------- the keep rule
    def order_key(self, offset: int, version) -> tuple:
        """Python: the sort key of the reference model, highest wins."""
        return order_key(self.versioned, offset, version)

    def winner_order(self, has_ver: str = HAS_VER, ver: str = VER, o: str = OFFSET) -> list[str]:
        """The columns a key's records are ordered by, descending, winner first."""
        return [has_ver, ver, o] if self.versioned else [o]

    def winner_order_sql(self, has_ver: str = HAS_VER, ver: str = VER, o: str = OFFSET) -> str:
        """SQL: an ORDER BY putting each key's winner first (row_number() = 1 is the winner)."""
        return ", ".join(f"{c} DESC" for c in self.winner_order(has_ver, ver, o))

    def packed_rank_sql(self, bounds: RankBounds, version_type: str) -> tuple[str, str] | None:
        """SQL over the derived columns: (winner_rank_sql as one bigint, in the same order for every
        record inside ``bounds``; the record is inside them). Spark aggregates a bigint's max in a
        hash table but a struct's only by sorting. None where the version has no exact long or the
        ranks would not fit."""
        version = version_as_long_sql(VER, version_type)
        if not self.versioned or version is None or not bounds.fits_a_long:
            return None
        o_min, o_max, v_min, v_max, span = (f"{n}L" for n in (bounds.o_min, bounds.o_max, bounds.v_min,
                                                              bounds.v_max, bounds.o_span))
        place = f"CASE WHEN {HAS_VER} THEN {version} - {v_min} + 1L ELSE 0L END"
        inside = f"({OFFSET} BETWEEN {o_min} AND {o_max} AND (NOT {HAS_VER} OR {version} BETWEEN {v_min} AND {v_max}))"
        # Computed inside the bounds only: outside them the product may overflow, which under ANSI
        # mode (Spark 4's default) raises instead of wrapping, before key_map_sums counts the record.
        return f"CASE WHEN {inside} THEN ({place}) * {span} + ({OFFSET} - {o_min}) END", inside

    def unpacked_rank_sql(self, packed: str, bounds: RankBounds, version_type: str) -> str:
        """SQL: winner_rank_sql's struct again from a packed rank alone (the version is its place
        above the bounds' lowest, in the column's own type), so the aggregation need not carry the
        winner's version beside it."""
        span = f"{bounds.o_span}L"
        version = long_as_version_sql(f"{packed} div {span} - 1L + {bounds.v_min}L", version_type)
        return (f"named_struct('has_ver', {packed} >= {span}, 'ver', CASE WHEN {packed} >= {span} THEN {version} END, "
                f"'o', {packed} % {span} + {bounds.o_min}L)")

    def winner_rank_sql(self, has_ver: str = HAS_VER, ver: str = VER, o: str = OFFSET) -> str:
        """SQL: a value whose max over a key's records is its winner's (structs compare field by
        field), for an aggregation instead of a window. Offsets are unique per partition, so the
        offset, its last field, names the winner."""
        return f"named_struct('has_ver', {has_ver}, 'ver', {ver}, 'o', {o})" if self.versioned \
            else f"named_struct('o', {o})"


class OffsetStrategy(Strategy, name="offset"):
    """Kafka's default: the higher offset wins; no version."""
    versioned = False

    @property
    def version_sql(self) -> str:
        return "CAST(0 AS BIGINT)"

    @property
    def has_version_sql(self) -> str:
        return "TRUE"

    def version_of(self, row: Mapping[str, Any]) -> tuple[Any, bool]:
        return None, False


class TimestampStrategy(Strategy, name="timestamp"):
    """KIP-280: the record's timestamp column is its version."""

    @classmethod
    def resolve(cls, schema: TableSchema) -> StrategyRoles:
        timestamp = schema.column("compaction.timestamp.column", True, ORDERABLE_TYPES)
        return replace(super().resolve(schema), timestamp_column=timestamp, version_type=schema.types[timestamp.lower()])

    @property
    def version_column(self) -> str | None:
        return self.tc.timestamp_column


class HeaderStrategy(Strategy, name="header"):
    """KIP-280: the version is the last occurrence of the exactly-named header, an 8-byte
    big-endian signed long (Kafka's LongSerializer); a blank header name means the offset strategy."""
    bounds_anomalous_share = True

    @classmethod
    def resolve(cls, schema: TableSchema) -> StrategyRoles:
        if not schema.values["compaction.strategy.header"]:
            return OffsetStrategy.resolve(schema)  # KIP-280: a blank header name means the offset strategy
        headers = schema.column("compaction.headers.column", True, (HEADERS_TYPE,))
        return replace(super().resolve(schema), headers_column=headers)

    @property
    def version_sql(self) -> str:
        # Spark has no binary-to-long cast: two's complement by hand.
        raw = self._header_raw
        unsigned = f"CAST(conv(hex({raw}), 16, 10) AS DECIMAL(20,0))"
        signed = (f"CASE WHEN {unsigned} >= CAST('{TWO_TO_63}' AS DECIMAL(20,0)) "
                  f"THEN {unsigned} - CAST('{TWO_TO_64}' AS DECIMAL(21,0)) ELSE {unsigned} END")
        return f"CASE WHEN {self.has_version_sql} THEN CAST({signed} AS BIGINT) END"

    @property
    def has_version_sql(self) -> str:
        return f"({self._header_raw} IS NOT NULL AND length({self._header_raw}) = {HEADER_VERSION_BYTES})"

    def version_of(self, row: Mapping[str, Any]) -> tuple[Any, bool]:
        headers = [(h["key"], h["value"]) if isinstance(h, Mapping) else (h[0], h[1])
                   for h in row.get(self.tc.headers_column) or []]
        return decode_version_header(headers, self.tc.version_header)

    @property
    def _header_raw(self) -> str:
        matching = f"filter({ident(self.tc.headers_column)}, h -> h.key = {sql_string(self.tc.version_header)})"
        return f"try_element_at({matching}, -1).value"


class ColumnStrategy(Strategy, name="column"):
    """A column the producer writes (a CDC log sequence number, say) is the version."""
    bounds_anomalous_share = True

    @classmethod
    def resolve(cls, schema: TableSchema) -> StrategyRoles:
        prop = "compaction.strategy.column"
        name = schema.values[prop]
        if not name:
            raise ConfigError(schema.table, prop, name, "strategy=column needs the name of the version column")
        if name.lower() not in schema.types:
            raise ConfigError(schema.table, prop, name, "no such column")
        if schema.types[name.lower()] not in ORDERABLE_TYPES:
            raise ConfigError(schema.table, prop, name, f"column has type {schema.types[name.lower()]}, expected "
                                                        f"one of {', '.join(ORDERABLE_TYPES)}")
        return StrategyRoles(cls.name, schema.safe(prop, schema.spelling[name.lower()]),
                             version_type=schema.types[name.lower()])

    @property
    def version_column(self) -> str | None:
        return self.tc.version_column

@dataclass(frozen=True)
class RankBounds:
    """Where a run's offsets and versions (as version_as_long_sql renders them) lie, from Iceberg's
    metrics of the files the dirty scan opens."""
    o_min: int
    o_max: int
    v_min: int
    v_max: int

    @property
    def o_span(self) -> int:
        return self.o_max - self.o_min + 1

    @property
    def fits_a_long(self) -> bool:
        """Whether every rank inside the bounds packs into one bigint: versions 1.. (0: none) times
        the offset span, plus the offset's place in it."""
        return (self.v_max - self.v_min + 2) * self.o_span <= 2**63 - 1


# The versions that are longs in their own order, one to one: (to the long, back to the type).
_LONG_FUNCTIONS = {"date": ("unix_date", "date_from_unix_date"), "timestamp": ("unix_micros", "timestamp_micros")}


def version_as_long_sql(expr: str, type_name: str) -> str | None:
    """SQL: the version ``expr`` (of Spark type ``type_name``) as a bigint in the same order, one to
    one, so versions compare as longs, and with the bounds Iceberg's metrics keep, turned the same
    way. None where there is no such long: float and double (NaN sorts above every bound, and
    Iceberg's bounds leave NaN out), timestamp_ntz (only through a time zone, not one to one)."""
    if type_name in INTEGRAL_TYPES:
        return f"CAST({expr} AS BIGINT)"
    if type_name in _LONG_FUNCTIONS:
        return f"{_LONG_FUNCTIONS[type_name][0]}({expr})"
    return None


def long_as_version_sql(value: int | str, type_name: str) -> str:
    """SQL: the version of ``type_name`` that version_as_long_sql turns into ``value`` (an integer,
    or SQL for a bigint): a literal for a predicate on the version column itself, which Iceberg can
    push down to its files' bounds, or a packed rank's version back in its own type."""
    value = str(int(value)) if isinstance(value, int) else value
    if type_name in INTEGRAL_TYPES:
        return f"CAST({value} AS {type_name.upper()})"
    if type_name in _LONG_FUNCTIONS:
        to_type = _LONG_FUNCTIONS[type_name][1]
        return f"{to_type}(CAST({value} AS INT))" if type_name == "date" else f"{to_type}({value})"
    raise ValueError(f"no version of type {type_name} is a long")


def key_message_sql(tc: TableConfig) -> str:
    """SQL: the key's canonical rendering, a JSON array of the key columns cast to string in key
    order: what an erasure request records and checks by its hash (lakecleaner.core.keyhash) instead of
    the key itself. The forget hashes it over its typed keys, the quality suite over the table, so
    the two always agree."""
    cols = ", ".join(f"CAST({ident(k)} AS STRING)" for k in tc.key_columns)
    return f"to_json(array({cols}))"
