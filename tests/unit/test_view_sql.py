"""Rendering the latest-per-key view's SQL (lakecleaner.core.view; Spark runs it in tests/spark/test_view.py)."""
from __future__ import annotations

import pytest

from lakecleaner.core.table import TableRef
from lakecleaner.core.config import ConfigError, resolve_table
from lakecleaner.core.strategies import Strategy
from lakecleaner.core.view import view_ref

COLUMNS = {"key": "string", "offset": "bigint", "partition": "int", "timestamp": "bigint",
           "headers": "array<struct<key:string,value:binary>>", "tombstone": "boolean", "value": "string"}
TABLE = "`lake`.`t`.`orders`"


def render(props: dict, columns: dict = COLUMNS) -> str:
    return Strategy(resolve_table("t.orders", props, columns)).latest_per_key_sql(TABLE, list(columns))


def test_every_column_is_selected_by_name_and_odd_names_are_quoted():
    columns = {**COLUMNS, "odd `col` name": "string", "lakecleaner_rank": "int"}
    sql = render({}, columns)
    assert sql.startswith("SELECT `key`, `offset`, `partition`, `timestamp`, `headers`, `tombstone`, `value`, "
                          "`odd ``col`` name`, `lakecleaner_rank`\n")
    # the rank column does not take the name of a table column
    assert "AS `lakecleaner_rank_`" in sql and "WHERE `lakecleaner_rank_` = 1" in sql
    assert f"FROM {TABLE}\n" in sql


def test_header_name_with_a_quote_is_escaped():
    sql = render({"compaction.strategy": "header", "compaction.strategy.header": "it's \\ v"})
    assert "h.key = 'it\\'s \\\\ v'" in sql


@pytest.mark.parametrize("strategy, order", [
    ("offset", "ORDER BY (CAST(`offset` AS BIGINT)) DESC)"),
    ("timestamp", "ORDER BY ((`timestamp` IS NOT NULL)) DESC, (`timestamp`) DESC, (CAST(`offset` AS BIGINT)) DESC)"),
])
def test_the_winner_order_is_the_strategys(strategy, order):
    sql = render({"compaction.strategy": strategy})
    assert order in sql
    assert "PARTITION BY CAST(`partition` AS BIGINT), `key`" in sql


def test_bad_records_and_tombstones_are_hidden():
    sql = render({})
    assert "WHERE NOT (`offset` IS NULL OR `partition` IS NULL OR (`key` IS NULL))" in sql
    assert sql.endswith("AND NOT (coalesce(`tombstone`, `value` IS NULL))")
    unpartitioned = {k: v for k, v in COLUMNS.items() if k not in ("partition", "tombstone")}
    sql = render({"compaction.key.columns": "key,timestamp"}, unpartitioned)
    assert "WHERE NOT (`offset` IS NULL OR (`key` IS NULL OR `timestamp` IS NULL))" in sql
    assert "PARTITION BY CAST(0 AS BIGINT), `key`, `timestamp`" in sql
    assert sql.endswith("AND NOT ((`value` IS NULL))")


def test_view_name_defaults_beside_the_table():
    table = TableRef("lake", "t", "orders")
    assert view_ref(table, None) == TableRef("lake", "t", "orders__latest")
    assert view_ref(table, "current") == TableRef("lake", "t", "current")
    assert view_ref(table, "readers.orders") == TableRef("lake", "readers", "orders")
    with pytest.raises(ConfigError, match="bad-name"):
        view_ref(table, "bad-name")
