"""Erasure on request (lakecleaner.forget): the key's records leave the table and its quarantine,
physically; the audit keeps a hash, never the key; the quality suite catches an old record that came
back and lets new data of the key be; a compaction that raced the request stops."""
import hashlib
import json
import re
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from lakecleaner import catalog
from lakecleaner.catalog import CompactionError
from lakecleaner.engine import compact_table, quarantine_table
from lakecleaner.forget import ForgetError, ForgetRequest, forget, read_audit
from lakecleaner.quality import validate_table
from lakecleaner.tables import append, create_compacted_table

pytestmark = pytest.mark.spark

INTERVAL = 15 * 60_000


def _reachable_rows(spark, ref) -> list[dict]:
    """Every row of every data file any snapshot of the table can reach, read raw from the files."""
    rows = []
    for r in spark.sql(f"SELECT DISTINCT file_path FROM {ref.meta('all_data_files')}").collect():
        rows += pq.read_table(r["file_path"].replace("file:", "")).to_pylist()
    return rows


def _filled(spark, cfg, table):
    ref = create_compacted_table(spark, cfg, table, {"delete.retention.ms": "0"})
    append(spark, ref, [{"key": "alice", "offset": 0, "partition": 0, "value": "alice's old address"},
                        {"key": "bob", "offset": 1, "partition": 0, "value": "bob v1"},
                        {"key": "alice", "offset": 2, "partition": 0, "value": "alice's address"},
                        {"key": "alice", "offset": None, "partition": 1, "value": "alice, no offset"},
                        {"key": "carol", "offset": 0, "partition": 1, "value": "carol"},
                        {"key": "bob", "offset": 3, "partition": 0, "value": "bob v2"}])
    return ref


def test_forget_removes_the_key_from_table_and_quarantine_physically(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    compact_table(spark, lake_config, table_name)  # alice's keyed, offsetless record goes to quarantine
    qref = quarantine_table(lake_config, ref)
    assert [r["value"] for r in spark.table(qref.sql()).collect()] == ["alice, no offset"]
    assert any(r["value"] == "alice's old address" for r in _reachable_rows(spark, ref))  # masked, not gone
    now = int(time.time() * 1000)
    result = forget(spark, lake_config, ForgetRequest(table_name, ("alice",)), now_ms=now, interval_ms=INTERVAL)
    assert (result.removed_records, result.removed_quarantined) == (1, 1)
    assert sorted(r["key"] for r in spark.table(ref.sql()).collect()) == ["bob", "carol"]
    assert spark.table(qref.sql()).count() == 0
    for reachable in (_reachable_rows(spark, ref), _reachable_rows(spark, qref)):
        assert not [r for r in reachable if r["key"] == "alice"]
    assert {r["value"] for r in _reachable_rows(spark, ref)} >= {"bob v2", "carol"}
    assert result.physically_removed and result.deadline_ms == now
    assert result.request_offsets == {0: 3, 1: 0}
    [audit] = read_audit(spark, lake_config, table_name)
    assert audit["key_hash"] == hashlib.sha256(json.dumps(["alice"]).encode()).hexdigest()
    assert (audit["removed_records"], audit["removed_quarantined"], audit["deadline_ms"]) == (1, 1, now)
    assert audit["request_offsets"] == {0: 3, 1: 0} and audit["physically_removed"]
    assert "alice" not in json.dumps(audit, default=str)


def test_deadline_is_the_readme_bound_when_the_key_is_in_the_dirty_part(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "60000",
                                                                   "min.compaction.lag.ms": "1000"})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "x"},
                        {"key": "b", "offset": 1, "partition": 0, "value": "y"}])
    now = int(time.time() * 1000)
    result = forget(spark, lake_config, ForgetRequest(table_name, ("key=a",)), now_ms=now, interval_ms=INTERVAL)
    assert result.removed_records == 1 and [r["key"] for r in spark.table(ref.sql()).collect()] == ["b"]
    assert not result.physically_removed  # never compacted: its file is dirty, not rewritten now
    assert result.deadline_ms == now + 60000 + INTERVAL + 1000


def _composite(spark, cfg, table):
    schema = "`tenant` int, `id` bigint, `offset` bigint, `partition` int, `value` string"
    ref = create_compacted_table(spark, cfg, table, {"compaction.key.columns": "tenant,id"}, schema=schema)
    append(spark, ref, [{"tenant": 7, "id": 42, "offset": 0, "partition": 0, "value": "x"},
                        {"tenant": 7, "id": 43, "offset": 1, "partition": 0, "value": "y"},
                        {"tenant": 8, "id": 42, "offset": 2, "partition": 0, "value": "z"}], schema)
    return ref


@pytest.mark.parametrize("spec, problem", [
    ("tenant=7,idx=42", "unknown key column(s) idx"),
    ("tenant=7", "missing key column(s) id"),
    ("tenant=7,id=forty-two", "the value for id does not convert to bigint"),
    ("tenant=7,id=42.5", "the value for id does not convert to bigint"),
    ("7", "key spec part 1 is not column=value"),
])
def test_a_bad_key_is_a_clear_error_and_nothing_is_deleted(spark, lake_config, table_name, spec, problem):
    ref = _composite(spark, lake_config, table_name)
    with pytest.raises(ForgetError, match=rf"table {table_name}: .*{re.escape(problem)}"):
        forget(spark, lake_config, ForgetRequest(table_name, ("tenant=8,id=42", spec)))
    assert spark.table(ref.sql()).count() == 3
    assert read_audit(spark, lake_config, table_name) == []


def test_a_copy_on_write_table_is_refused_with_nothing_deleted(spark, lake_config, table_name):
    """As the cleaner refuses it (catalog.layout_problem): a copy-on-write delete would rewrite the
    erased key's files, re-dating every dirty record it copies (their append time, rule 3)."""
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('write.merge.mode' = 'copy-on-write')")
    with pytest.raises(ForgetError, match=rf"table {table_name}: write.merge.mode='copy-on-write'.*nothing deleted"):
        forget(spark, lake_config, ForgetRequest(table_name, ("alice",)))
    assert spark.table(ref.sql()).where("key = 'alice'").count() == 3
    assert read_audit(spark, lake_config, table_name) == []


def test_a_table_that_never_chose_a_merge_mode_is_forgotten_with_position_deletes(spark, lake_config, table_name):
    """Unset, write.merge.mode is Iceberg's default, copy-on-write; a table the cleaner has not run
    on yet may leave it so. The request sets merge-on-read first, as the cleaner's first run does."""
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} UNSET TBLPROPERTIES ('write.merge.mode')")
    forget(spark, lake_config, ForgetRequest(table_name, ("alice",)), interval_ms=INTERVAL)
    [audit] = read_audit(spark, lake_config, table_name)
    summary = spark.sql(f"SELECT summary FROM {ref.meta('snapshots')} "
                        f"WHERE snapshot_id = {audit['committed_snapshot_id']}").collect()[0]["summary"]
    assert summary.get("added-position-delete-files") and not summary.get("deleted-data-files"), summary
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}
    assert props["write.merge.mode"] == "merge-on-read"


def test_a_composite_key_is_converted_to_its_columns_types(spark, lake_config, table_name):
    ref = _composite(spark, lake_config, table_name)
    result = forget(spark, lake_config, ForgetRequest(table_name, ("tenant=7,id=42", {"id": 42, "tenant": 8})))
    assert result.removed_records == 2 and result.keys == 2
    assert [(r["tenant"], r["id"]) for r in spark.table(ref.sql()).collect()] == [(7, 43)]


def _forgotten_rule(summary) -> dict:
    return next(r for r in summary["rules"] if r["rule"] == "forgotten keys stay forgotten")


def test_quality_catches_an_old_record_put_back_and_keeps_new_data(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    compact_table(spark, lake_config, table_name)
    forget(spark, lake_config, ForgetRequest(table_name, ("alice",)))
    # a later record of the key is new data: it stays, and the rule passes
    append(spark, ref, [{"key": "alice", "offset": 4, "partition": 0, "value": "alice again"}])
    summary = validate_table(spark, lake_config, table_name, raise_on_failure=False)
    assert _forgotten_rule(summary)["success"]
    assert [r["offset"] for r in spark.table(ref.sql()).where("key = 'alice'").collect()] == [4]
    # an old record of the key put back (an offset at or below the request's log end) fails it
    append(spark, ref, [{"key": "alice", "offset": 2, "partition": 0, "value": "alice's address"}])
    rule = _forgotten_rule(validate_table(spark, lake_config, table_name, raise_on_failure=False))
    assert not rule["success"]
    assert [(o["partition_id"], o["offset_id"]) for o in rule["offending"]] == [(0, 2)]
    assert "alice" not in json.dumps(rule["offending"])  # named by its hash only


def test_a_compaction_raced_by_a_forget_stops_and_the_key_stays_gone(spark, lake_config, table_name, monkeypatch):
    ref = _filled(spark, lake_config, table_name)
    original = catalog.check_no_concurrent_cleaner
    state = {"done": False}

    def forget_commits_first(spark_, ref_, snapshot):
        if not state["done"]:
            state["done"] = True
            forget(spark, lake_config, ForgetRequest(table_name, ("alice",)))
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(catalog, "check_no_concurrent_cleaner", forget_commits_first)
    with pytest.raises(CompactionError, match=rf"table {table_name}: .*nothing committed"):
        compact_table(spark, lake_config, table_name)
    monkeypatch.undo()
    assert not spark.table(ref.sql()).where("key = 'alice'").count()
    [audit] = read_audit(spark, lake_config, table_name)
    assert audit["removed_records"] == 3  # offsets 0 and 2, and the offsetless one (by identity, null-safe)
    compact_table(spark, lake_config, table_name)  # the next run starts over without the key
    assert sorted(r["key"] for r in spark.table(ref.sql()).collect()) == ["bob", "carol"]
    # the offsetless record went with the key, so nothing was left to quarantine
    assert not spark.catalog.tableExists(quarantine_table(lake_config, ref).sql().replace("`", ""))


def test_the_cli_forgets_through_spark_submit(spark, lake_config, config_file, table_name):
    ref = _composite(spark, lake_config, table_name)
    proc = subprocess.run([sys.executable, "-m", "lakecleaner.cli", "--config", str(config_file), "forget", table_name,
                           "--key", "tenant=7,id=42", "--key", "tenant=8,id=42"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert line["status"] == "forgotten" and line["removed_records"] == 2 and line["deadline_ms"] is None
    spark.sql(f"REFRESH TABLE {ref.sql()}")  # this session's catalog caches the table (30 s); another JVM deleted
    assert [(r["tenant"], r["id"]) for r in spark.table(ref.sql()).collect()] == [(7, 43)]
    proc = subprocess.run([sys.executable, "-m", "lakecleaner.cli", "--config", str(config_file), "forget", table_name,
                           "--key", "tenant=7,nope=1"], capture_output=True, text=True)
    assert proc.returncode == 1 and f"table {table_name}: bad key: unknown key column(s) nope" in proc.stdout
