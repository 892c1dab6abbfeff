"""Strategies as classes registered by name (lakecleaner.core.strategies): a new strategy is one
class in one module. A toy strategy registered here is taken by the config, the renderings, the
reference model and the quality vocabulary without a change anywhere else."""
from __future__ import annotations

import pytest

from lakecleaner.core.config import INTEGRAL_TYPES, ConfigError, StrategyRoles, TableSchema, resolve_table
from lakecleaner.core.model import Record, compact
from lakecleaner.core.quality_rules import rule_names, winner_is_right
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.strategies import (ColumnStrategy, HeaderStrategy, OffsetStrategy, Strategy, TimestampStrategy,
                                         strategy_class, strategy_names, unregister)

COLUMNS = {"key": "string", "offset": "bigint", "partition": "int", "value": "string", "epoch": "bigint"}
EPOCH = {"compaction.strategy": "epoch"}


@pytest.fixture
def epoch():
    """A toy strategy, registered for one test: the version is the column ``epoch``."""

    class EpochStrategy(Strategy, name="epoch"):
        @classmethod
        def resolve(cls, schema: TableSchema) -> StrategyRoles:
            if schema.types.get("epoch") not in INTEGRAL_TYPES:
                raise ConfigError(schema.table, "compaction.strategy", "epoch", "needs an integral column epoch")
            return super().resolve(schema)

        @property
        def version_column(self) -> str | None:
            return "epoch"

    try:
        yield EpochStrategy
    finally:
        unregister("epoch")


def test_the_registry_holds_the_four_strategies_in_order():
    assert strategy_names() == ("offset", "timestamp", "header", "column")
    assert [strategy_class(n) for n in strategy_names()] == [OffsetStrategy, TimestampStrategy, HeaderStrategy,
                                                             ColumnStrategy]
    with pytest.raises(ValueError, match="no such strategy 'bogus'"):
        strategy_class("bogus")


def test_strategy_of_a_table_is_its_registered_class():
    tc = resolve_table("t.t", {"compaction.strategy": "header", "compaction.strategy.header": "v"},
                       {**COLUMNS, "headers": "array<struct<key:string,value:binary>>"})
    assert type(Strategy(tc)) is HeaderStrategy and Strategy(tc) == HeaderStrategy(tc)


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="strategy 'offset' is registered already"):
        type("Again", (Strategy,), {}, name="offset")
    assert strategy_class("offset") is OffsetStrategy


def test_a_strategy_is_one_class(epoch):
    """Registered, the toy is a value compaction.strategy takes; its class checks its settings; the
    renderings, the reference model and the quality rules use it."""
    assert "epoch" in strategy_names()
    tc = resolve_table("t.t", EPOCH, COLUMNS)
    assert tc.strategy == "epoch" and tc.versioned
    with pytest.raises(ConfigError, match="needs an integral column epoch"):
        resolve_table("t.t", EPOCH, {**COLUMNS, "epoch": "string"})

    strategy = Strategy(tc)
    assert isinstance(strategy, epoch)
    assert strategy.version_sql == "`epoch`" and strategy.has_version_sql == "(`epoch` IS NOT NULL)"
    assert strategy.version_of({"epoch": 3}) == (3, False)
    view = strategy.latest_per_key_sql("t", list(COLUMNS))
    assert "ORDER BY ((`epoch` IS NOT NULL)) DESC, (`epoch`) DESC, (CAST(`offset` AS BIGINT)) DESC" in view

    # the reference model keeps a's higher epoch, not its higher offset (b's record is the log end)
    records = [Record(0, 0, ("a",), 0, version=2), Record(0, 1, ("a",), 0, version=1), Record(0, 2, ("b",), 0)]
    assert list(compact(records, Checkpoint(), tc, now_ms=10).removed) == [(0, 1)]
    assert winner_is_right("epoch").name in rule_names()
    from lakecleaner.spark.quality import build_rules

    built = build_rules(tc, Checkpoint(offsets={0: 9}), 10**12, 1, 5, 0.05)
    assert winner_is_right("epoch") in {r.rule for r in built}


def test_an_unregistered_strategy_is_refused_by_name(epoch):
    unregister("epoch")
    with pytest.raises(ConfigError, match="must be one of offset, timestamp, header, column"):
        resolve_table("t.t", EPOCH, COLUMNS)
    type("EpochAgain", (Strategy,), {}, name="epoch")  # for the fixture to unregister
