"""The latest-per-key view (lakecleaner.core.view) against the reference model, on uncompacted tables:
its SQL, run by Spark as printed, returns exactly what one run of the model would keep (no
checkpoint, every record old enough, nothing kept as a log end, tombstones not yet expired) minus
the tombstones. Registering it: on Iceberg's JDBC catalog (PostgreSQL) it becomes a view; on the
Hadoop catalog it is refused, naming the catalog, with the SQL still printed."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given

from hypothesis_profiles import examples
from hypothesis import strategies as st

from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.strategies import encode_version_header, sql_string
from lakecleaner_dev.tables import KAFKA_SCHEMA, append, create_compacted_table, read_model_records
from lakecleaner.core.view import latest_view
from lakecleaner.spark.frames import local_frame

pytestmark = pytest.mark.spark
ODD = "odd `col` x"  # a column whose name needs quoting; the view must still select it by name
SCHEMA = KAFKA_SCHEMA + ", `ver` bigint, `odd ``col`` x` string"
HEADER = "v'x"  # a header name that needs escaping
STRATEGIES = ("offset", "timestamp", "header", "column")
NOW = 10**13  # every record old enough for the model's run
EXPECTED_COLUMNS = ["key", "offset", "partition", "timestamp", "headers", "tombstone", "value", "ver", ODD]

header_value = st.one_of(st.integers(-3, 3).map(encode_version_header), st.binary(max_size=9))  # some malformed
record = st.fixed_dictionaries({
    "key": st.sampled_from(["a", "b", "c", None]),  # None: a keyless row
    "partition": st.integers(0, 1),
    "timestamp": st.one_of(st.none(), st.integers(0, 3)),
    "headers": st.one_of(st.none(), st.lists(st.tuples(st.sampled_from([HEADER, "v", "other"]), header_value),
                                             max_size=3)),
    "tombstone": st.sampled_from([None, True, False]),
    "value": st.sampled_from([None, "x", "y"]),
    "ver": st.one_of(st.none(), st.integers(0, 3)),
})


def _props(strategy: str) -> dict:
    return {"compaction.strategy": strategy,
            "compaction.strategy.column": "ver" if strategy == "column" else "",
            "compaction.retain.log.end.record": "false", "delete.retention.ms": 10**12}


def _fill(spark, cfg, table: str, strategy: str, batches: list[list[dict]], format_version: int = 2):
    """The table, uncompacted: each batch one snapshot; offsets in arrival order per partition,
    unless a record brings its own (a null one)."""
    ref = create_compacted_table(spark, cfg, table, _props(strategy), schema=SCHEMA, format_version=format_version)
    if strategy == "header":  # create_compacted_table does not quote property values
        spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('compaction.strategy.header' = {sql_string(HEADER)})")
    next_offset = {}
    for batch in batches:
        rows = []
        for rec in batch:
            p = rec["partition"]
            offset = rec["offset"] if "offset" in rec else next_offset.setdefault(p, 0)
            if "offset" not in rec:
                next_offset[p] += 1
            headers = None if rec.get("headers") is None else [{"key": k, "value": v} for k, v in rec["headers"]]
            rows.append({**rec, "offset": offset, "headers": headers, ODD: f"odd{offset}"})
        append(spark, ref, rows, SCHEMA)
    return ref


def _check_view_against_model(spark, cfg, table: str, strategy: str, batches) -> None:
    _fill(spark, cfg, table, strategy, batches)
    _check_view(spark, cfg, table, strategy, batches)


def _check_view(spark, cfg, table: str, strategy: str, batches) -> None:
    """The view over the table's rows as they are is the model's survivors of them, tombstones out."""
    view = latest_view(cfg, table)
    result = spark.sql(view.sql)
    assert result.columns == EXPECTED_COLUMNS
    actual = sorted((r["partition"], r["offset"]) for r in result.collect())
    records, tc = read_model_records(spark, cfg, table)
    run = compact(records, Checkpoint(), tc, NOW)
    expected = sorted(r.id for r in run.survivors(records) if not r.tombstone)
    assert actual == expected, f"{strategy}: {batches}\n{view.sql}"
    spark.sql(f"DROP TABLE IF EXISTS {view.table.sql()} PURGE")


def rec(key, partition=0, value="x", tombstone=None, ts=None, ver=None, header=None, **extra):
    headers = None if header is None else [(HEADER, header)]
    return {"key": key, "partition": partition, "value": value, "tombstone": tombstone, "timestamp": ts,
            "ver": ver, "headers": headers, **extra}


V = encode_version_header
# Per strategy: superseded records, a higher-offset record losing to a higher version, versionless
# (anomalous) records, a winning tombstone (flag and null value), put(k, null) with tombstone=false
# (live), keyless rows, a null offset and a null partition.
CASES = {
    "offset": [[rec("a"), rec("b"), rec("a", value=None), rec(None), rec("c", tombstone=True)],
               [rec("b", value=None, tombstone=False), rec("c"), rec("a"), rec("a", partition=1),
                rec("d", offset=None), rec("e", partition=None, offset=9), rec("f", value=None),
                rec("g", tombstone=True)]],
    "timestamp": [[rec("a", ts=5), rec("a", ts=3), rec("b", ts=None), rec("b", ts=1), rec("c", ts=2, value=None)],
                  [rec("a", ts=5, value="y"), rec("b", ts=None), rec(None, ts=9), rec("c", ts=1),
                   rec("d", ts=None), rec("d", ts=None, partition=1), rec("e", ts=1, offset=None)]],
    "header": [[rec("a", header=V(5)), rec("a", header=V(-1)), rec("b", header=b"\x01"), rec("b", header=V(0)),
                rec("c", header=V(2), tombstone=True)],
               [rec("a", header=V(2**63 - 1)), rec("b"), rec(None, header=V(9)), rec("c", header=V(1)),
                rec("d", header=V(1), partition=None, offset=4)]],
    "column": [[rec("a", ver=2), rec("a", ver=1), rec("b", ver=None), rec("c", ver=3, value=None)],
               [rec("a", ver=2, value="y"), rec("b", ver=None), rec("b", ver=0), rec(None, ver=5),
                rec("c", ver=2), rec("d", ver=None, offset=None)]],
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_view_over_an_uncompacted_table_is_the_models_survivors_without_tombstones(spark, lake_config, table_name,
                                                                                   strategy):
    _check_view_against_model(spark, lake_config, table_name, strategy, CASES[strategy])


def test_view_over_a_v3_table_honours_its_deletion_vectors(spark, lake_config, table_name):
    """A v3 table whose DELETE masked a key's winner with a deletion vector: the view (rendered from
    metadata by pyiceberg) runs over the rows left, and returns the model's survivors of them."""
    ref = _fill(spark, lake_config, table_name, "column", CASES["column"], format_version=3)
    spark.sql(f"DELETE FROM {ref.sql()} WHERE key = 'a' AND value = 'y'")  # a's winner: a's ver 2 'x' wins now
    formats = {r[0] for r in spark.sql(f"SELECT file_format FROM {ref.meta('delete_files')}").collect()}
    assert formats == {"PUFFIN"}
    _check_view(spark, lake_config, table_name, "column", CASES["column"])


def test_a_column_named_with_a_dollar_is_refused_naming_the_table_and_the_column(spark, lake_config, table_name):
    """Spark substitutes ${...} anywhere in a statement's text, inside backquotes too, and a view is
    SQL text read again by every reader's session: such a name cannot be written in it."""
    from lakecleaner.core.table import TableRef
    from lakecleaner.core.config import ConfigError

    ref = TableRef.parse(table_name, lake_config.catalog.name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{ref.catalog}`.`{ref.namespace}`")
    rows = local_frame(spark, [("k", 0, 0, "v", "n")], "key string, offset bigint, partition int, value string, x string")
    rows.withColumnRenamed("x", "note${x}").writeTo(ref.sql()).tableProperty("cleanup.policy", "compact").create()
    with pytest.raises(ConfigError, match=rf"{table_name}.*note\$\{{x\}}.*rename"):
        latest_view(lake_config, table_name)


@examples(6)
@given(strategy=st.sampled_from(STRATEGIES),
       batches=st.lists(st.lists(record, min_size=1, max_size=6), min_size=1, max_size=3))
def test_view_matches_the_model_on_generated_logs(spark, lake_config, strategy, batches):
    table = f"t.view_{abs(hash((strategy, str(batches)))) % 10**9}"
    _check_view_against_model(spark, lake_config, table, strategy, batches)


def _cli(config, *args) -> subprocess.CompletedProcess:
    """The CLI in its own process, which must not have loaded pyspark unless it registers."""
    code = ("import json, sys; from lakecleaner.cli import main; rc = main(sys.argv[1:]); "
            "print(json.dumps('pyspark' in sys.modules), file=sys.stderr); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, "--config", str(config), *args], capture_output=True, text=True)


def test_register_on_the_hadoop_catalog_is_refused_naming_the_catalog(spark, lake_config, config_file, table_name):
    ref = _fill(spark, lake_config, table_name, "offset", CASES["offset"])
    expected_sql = latest_view(lake_config, table_name).sql
    printed = _cli(config_file, "view", table_name)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == expected_sql + "\n"
    assert printed.stderr.splitlines()[-1] == "false"  # printing the SQL starts no Spark
    refused = _cli(config_file, "view", table_name, "--register")
    assert refused.returncode == 1
    assert refused.stdout == expected_sql + "\n"  # still printed
    assert f"catalog lake (hadoop) does not support views: cannot register {ref.short}__latest" in refused.stderr
    missing = _cli(config_file, "view", "t.no_such_table")
    assert missing.returncode == 1 and "table t.no_such_table: cannot load table" in missing.stderr
    spark.sql(f"DROP TABLE IF EXISTS {ref.sql()} PURGE")


def test_register_on_the_jdbc_catalog_creates_the_view(spark, pg_config, tmp_path, monkeypatch, capsys):
    import yaml

    from lakecleaner.cli import main
    from lakecleaner.core.config import config_document

    config = tmp_path / "pg.yaml"
    config.write_text(yaml.safe_dump(config_document(pg_config)))
    monkeypatch.setenv("LAKECLEANER_CONFIG", str(config))
    table = "pgview.orders"
    ref = _fill(spark, pg_config, table, "column", CASES["column"])
    assert main(["--config", str(config), "view", table, "--register"]) == 0
    out, err = capsys.readouterr()
    sql = out.strip()
    assert "registered view `pglake`.`pgview`.`orders__latest`" in err
    rows = lambda q: sorted(tuple(json.dumps(v, default=str) for v in r) for r in spark.sql(q).collect())  # noqa: E731
    view_rows = rows("SELECT * FROM `pglake`.`pgview`.`orders__latest`")
    assert view_rows == rows(sql) and 0 < len(view_rows) < spark.table(ref.sql()).count()
    # a view, not a copy: a newer version shows at once; --name registers it elsewhere
    append(spark, ref, [{"key": "a", "offset": 100, "partition": 0, "value": "newest", "ver": 3}], SCHEMA)
    assert main(["--config", str(config), "view", table, "--register", "--name", "readers_orders"]) == 0
    for view in ("`orders__latest`", "`readers_orders`"):
        values = [r["value"] for r in spark.sql(f"SELECT * FROM `pglake`.`pgview`.{view} WHERE key = 'a'").collect()]
        assert values == ["newest"], view
    for view in ("orders__latest", "readers_orders"):
        spark.sql(f"DROP VIEW `pglake`.`pgview`.`{view}`")
    spark.sql(f"DROP TABLE {ref.sql()} PURGE")
