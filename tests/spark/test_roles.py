"""The record roles each strategy reads (version, whether it has one, tombstone) are written once in
strategies.py, in Python for the reference model and in SQL for the engine, the quality suite and
the view. Here both renderings read the same generated rows and must agree, header bytes included."""
import struct

import pytest
from hypothesis import given

from hypothesis_profiles import examples
from hypothesis import strategies as st

from lakecleaner.core.config import resolve_table
from lakecleaner.core.strategies import Strategy, encode_version_header
from lakecleaner.spark.frames import local_frame
from lakecleaner_dev.tables import KAFKA_SCHEMA

pytestmark = pytest.mark.spark
SCHEMA = KAFKA_SCHEMA + ", `ver` bigint, `dver` double"
COLUMNS = {"key": "string", "offset": "bigint", "partition": "int", "timestamp": "bigint",
           "headers": "array<struct<key:string,value:binary>>", "tombstone": "boolean", "value": "string",
           "ver": "bigint", "dver": "double"}
STRATEGIES = {
    "offset": {"compaction.strategy": "offset"},
    "timestamp": {"compaction.strategy": "timestamp"},
    "header": {"compaction.strategy": "header", "compaction.strategy.header": "v"},
    "column": {"compaction.strategy": "column", "compaction.strategy.column": "ver"},
    "column_double": {"compaction.strategy": "column", "compaction.strategy.column": "dver"},  # NaN: no version
}

header_value = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1).map(encode_version_header),
    st.sampled_from([b"\x80" + b"\x00" * 7, b"\x7f" + b"\xff" * 7, b"\xff" * 8]),
    st.binary(min_size=0, max_size=9),  # mostly malformed: wrong length
)
row = st.fixed_dictionaries({
    "headers": st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["v", "V", "v ", "other"]), header_value),
                                             max_size=4)),
    "tombstone": st.sampled_from([None, True, False]),
    "value": st.sampled_from([None, "x"]),
    "timestamp": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    "ver": st.one_of(st.none(), st.integers(-3, 3)),
    "dver": st.one_of(st.none(), st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 1.5])),
})


@examples(25)
@given(st.lists(row, min_size=1, max_size=25))
def test_the_python_and_sql_renderings_of_each_role_agree(spark, rows):
    table_rows = [{**r, "key": "k", "offset": i, "partition": 0,
                   "headers": None if r["headers"] is None else [{"key": k, "value": v} for k, v in r["headers"]]}
                  for i, r in enumerate(rows)]
    df = local_frame(spark, [tuple(r[c] for c in COLUMNS) for r in table_rows], SCHEMA)
    strategies = {name: Strategy(resolve_table("t", props, COLUMNS)) for name, props in STRATEGIES.items()}
    exprs = [f"{sql} AS `{name}_{role}`" for name, s in strategies.items()
             for role, sql in (("ver", s.version_sql), ("has", s.has_version_sql), ("tomb", s.tombstone_sql))]
    got = df.orderBy("offset").selectExpr(*exprs).collect()
    for r, g in zip(table_rows, got):
        for name, s in strategies.items():
            version, anomalous = s.version_of(r)
            assert (g[f"{name}_has"], g[f"{name}_tomb"]) == (not anomalous, s.tombstone_of(r)), (name, r)
            if name != "offset":  # the offset strategy's SQL version is a constant nobody reads
                assert g[f"{name}_ver"] == version, (name, r)


def test_a_header_decodes_as_kafkas_long_serializer_in_both(spark):
    s = Strategy(resolve_table("t", STRATEGIES["header"], COLUMNS))
    raw = struct.pack(">q", -(2**63) + 5)
    df = local_frame(spark, [("k", 0, 0, 0, [{"key": "v", "value": raw}], None, "x", None, None)], SCHEMA)
    assert df.selectExpr(s.version_sql).collect()[0][0] == -(2**63) + 5
    assert s.version_of({"headers": [{"key": "v", "value": raw}]}) == (-(2**63) + 5, False)
