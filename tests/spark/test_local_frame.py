"""Python rows as a local relation (spark.frames.local_frame): the same rows as PySpark's own
createDataFrame, but read by the JVM directly instead of re-pickled in Python workers."""
from __future__ import annotations

import datetime as dt
import decimal
import math

import pytest

from lakecleaner.core.sparkconf import ARROW_ENABLED
from lakecleaner.spark.frames import local_frame

pytestmark = pytest.mark.spark

SCHEMA = ("a bigint, b int, c boolean, d decimal(20,3), e date, f binary, "
          "g array<struct<key:string,value:binary>>, h map<string,bigint>, j timestamp, k string, n timestamp_ntz")
UTC = dt.timezone.utc
ROWS = [
    (2**63 - 1, 2**31 - 1, True, decimal.Decimal("12345678901234567.125"), dt.date(1, 1, 1), bytearray(b"\x00\xff"),
     [{"key": None, "value": None}, {"key": "v", "value": b"\x01"}], {"x": None, "y": -1},
     dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "é\x00", dt.datetime(1970, 1, 1)),
    (-2**63, None, None, None, None, None, None, None, None, None, None),
    (9007199254740993, -1, False, decimal.Decimal("-0.001"), dt.date(2024, 2, 29), b"", [], {},
     dt.datetime(2024, 3, 1, tzinfo=dt.timezone(dt.timedelta(hours=5))), "", dt.datetime(1969, 12, 31, 23, 59, 59, 1)),
]


def plan_of(df) -> str:
    return df._jdf.queryExecution().executedPlan().getClass().getSimpleName()


def test_rows_arrive_exactly_as_a_local_relation(spark):
    assert spark.conf.get(ARROW_ENABLED) == "true"  # lakecleaner's sessions (core.sparkconf) turn Arrow on
    df = local_frame(spark, ROWS, SCHEMA)
    assert plan_of(df) == "LocalTableScanExec"  # a list through PySpark is a scan of an RDD pickled by workers
    assert plan_of(spark.createDataFrame(ROWS, SCHEMA)) != "LocalTableScanExec"
    assert df.collect() == spark.createDataFrame(ROWS, SCHEMA).collect()


@pytest.mark.parametrize("nan_at", ["field", "array"])
def test_floating_point_keeps_nan(spark, nan_at):
    """pandas reads NaN as missing: rows holding a NaN, at any depth, take PySpark's own path."""
    nan = float("nan")
    rows = [(1, nan if nan_at == "field" else 1.5, [nan] if nan_at == "array" else []), (2, None, None), (3, -0.0, [])]
    got = local_frame(spark, rows, "i int, x double, y array<float>").orderBy("i").collect()
    assert math.isnan(got[0].x) if nan_at == "field" else math.isnan(got[0].y[0])
    assert got[1].x is None and got[1].y is None and math.copysign(1, got[2].x) == -1


def test_floating_point_without_nan_is_a_local_relation(spark):
    """Doubles and floats without a NaN arrive exactly through Arrow: extremes, -0.0, float32 rounding."""
    rows = [(1, 1.7976931348623157e308, [3.4028234663852886e38, 1e-45]), (2, None, None), (3, -0.0, [0.1]),
            (4, 5e-324, [-1.5])]
    df = local_frame(spark, rows, "i int, x double, y array<float>")
    assert plan_of(df) == "LocalTableScanExec"
    got, want = df.orderBy("i").collect(), spark.createDataFrame(rows, "i int, x double, y array<float>").orderBy("i").collect()
    assert got == want and math.copysign(1, got[2].x) == -1


def test_a_session_without_arrow_gets_the_same_rows(spark):
    spark.conf.set(ARROW_ENABLED, "false")
    try:
        df = local_frame(spark, ROWS, SCHEMA)
        assert plan_of(df) != "LocalTableScanExec"
        assert df.collect() == spark.createDataFrame(ROWS, SCHEMA).collect()
    finally:
        spark.conf.set(ARROW_ENABLED, "true")
    assert local_frame(spark, [], "a int").count() == 0
