"""Erasure on request (lakecleaner.spark.forget): the key's records leave the table and its quarantine,
physically, judged from the files themselves; the audit is written as the delete commits and keeps
a (keyed) hash, never the key; the quality suite catches an old record that came back and lets new
data of the key be; a compaction that raced the request stops; requests travel through the request
table, never argv."""
import getpass
import hashlib
import hmac
import json
import re
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from lakecleaner.spark import catalog, guards
from lakecleaner.core.table import CompactionError
from lakecleaner.spark.engine import compact_table, quarantine_table
from lakecleaner.spark import forget as forget_module
from lakecleaner.spark.erasure_requests import carry_out, enqueue, pending_requests, purge_closed_keys
from lakecleaner.core.erasure_requests import requests_ref, requests_table
from lakecleaner.spark.forget import Attribution, ForgetError, ForgetRequest, audit_table, forget, read_audit
from lakecleaner.spark.frames import local_frame
from lakecleaner.core.keyhash import KeyHasher
from lakecleaner.spark.quality import validate_table
from lakecleaner_dev.tables import append, create_compacted_table

pytestmark = pytest.mark.spark

INTERVAL = 15 * 60_000


def _reachable_rows(spark, ref) -> list[dict]:
    """Every row of every data file any snapshot of the table can reach, read raw from the files."""
    rows = []
    for r in spark.sql(f"SELECT DISTINCT file_path FROM {ref.meta('all_data_files')}").collect():
        rows += pq.read_table(r["file_path"].replace("file:", "")).to_pylist()
    return rows


def _delete_file_formats(spark, ref) -> set[str]:
    """The formats of the delete files any snapshot reaches: PUFFIN deletion vectors on v3."""
    return {r[0] for r in spark.sql(f"SELECT file_format FROM {ref.meta('all_delete_files')}").collect()}


def _filled(spark, cfg, table, format_version=2):
    ref = create_compacted_table(spark, cfg, table, {"delete.retention.ms": "0"}, format_version=format_version)
    append(spark, ref, [{"key": "alice", "offset": 0, "partition": 0, "value": "alice's old address"},
                        {"key": "bob", "offset": 1, "partition": 0, "value": "bob v1"},
                        {"key": "alice", "offset": 2, "partition": 0, "value": "alice's address"},
                        {"key": "alice", "offset": None, "partition": 1, "value": "alice, no offset"},
                        {"key": "carol", "offset": 0, "partition": 1, "value": "carol"},
                        {"key": "bob", "offset": 3, "partition": 0, "value": "bob v2"}])
    return ref


@pytest.mark.parametrize("format_version", [2, 3])
def test_forget_removes_the_key_from_table_and_quarantine_physically(spark, lake_config, table_name, format_version):
    """On v3 the compaction masks alice's old address with a deletion vector, and the quarantine is
    v3 too: the reachability check reads the data files whatever masks their rows."""
    ref = _filled(spark, lake_config, table_name, format_version)
    compact_table(spark, lake_config, table_name)  # alice's keyed, offsetless record goes to quarantine
    qref = quarantine_table(lake_config, ref)
    assert [r["value"] for r in spark.table(qref.sql()).collect()] == ["alice, no offset"]
    assert any(r["value"] == "alice's old address" for r in _reachable_rows(spark, ref))  # masked, not gone
    assert _delete_file_formats(spark, ref) == {"PUFFIN" if format_version == 3 else "PARQUET"}
    assert catalog.format_version(spark, qref) == format_version
    now = int(time.time() * 1000)
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)), now_ms=now, interval_ms=INTERVAL)
    assert (result.removed_records, result.removed_quarantined) == (1, 1)
    assert sorted(r["key"] for r in spark.table(ref.sql()).collect()) == ["bob", "carol"]
    assert spark.table(qref.sql()).count() == 0
    for reachable in (_reachable_rows(spark, ref), _reachable_rows(spark, qref)):
        assert not [r for r in reachable if r["key"] == "alice"]
    assert {r["value"] for r in _reachable_rows(spark, ref)} >= {"bob v2", "carol"}
    assert result.physically_removed and result.deadline_ms == now
    assert result.request_offsets == {0: 3, 1: 0}
    [audit] = read_audit(spark, lake_config, table_name)
    assert audit["key_hash"] == hashlib.sha256(json.dumps(["alice"]).encode()).hexdigest()  # no secret set
    assert (audit["status"], audit["hash_scheme"]) == ("forgotten", "sha256")
    assert (audit["removed_records"], audit["removed_quarantined"], audit["deadline_ms"]) == (1, 1, now)
    assert audit["request_offsets"] == {0: 3, 1: 0} and audit["physically_removed"]
    assert "alice" not in json.dumps(audit, default=str)


def test_deadline_is_the_readme_bound_when_the_key_is_in_the_dirty_part(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "60000",
                                                                   "min.compaction.lag.ms": "1000"})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "x"},
                        {"key": "b", "offset": 1, "partition": 0, "value": "y"}])
    now = int(time.time() * 1000)
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "a"},)), now_ms=now, interval_ms=INTERVAL)
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
    ({"tenant": 7, "idx": 42}, "1 name(s) that are no key column; missing key column(s) id"),
    ({"tenant": 7}, "missing key column(s) id"),
    ({"tenant": 7, "id": "forty-two"}, "the value for id does not convert to bigint"),
    ({"tenant": 7, "id": "42.5"}, "the value for id does not convert to bigint"),
    ("tenant=7,id=42", "a key must be an object"),
])
def test_a_bad_key_is_a_clear_error_and_nothing_is_deleted(spark, lake_config, table_name, spec, problem):
    ref = _composite(spark, lake_config, table_name)
    with pytest.raises(ForgetError, match=rf"table {table_name}: .*{re.escape(problem)}"):
        forget(spark, lake_config, ForgetRequest(table_name, ({"tenant": 8, "id": 42}, spec)))
    assert spark.table(ref.sql()).count() == 3
    assert read_audit(spark, lake_config, table_name) == []


def test_a_copy_on_write_table_is_refused_with_nothing_deleted(spark, lake_config, table_name):
    """As the cleaner refuses it (catalog.layout_problem): a copy-on-write delete would rewrite the
    erased key's files, re-dating every dirty record it copies (their append time, rule 3)."""
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('write.merge.mode' = 'copy-on-write')")
    with pytest.raises(ForgetError, match=rf"table {table_name}: write.merge.mode='copy-on-write'.*nothing deleted"):
        forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)))
    assert spark.table(ref.sql()).where("key = 'alice'").count() == 3
    assert read_audit(spark, lake_config, table_name) == []


def test_a_table_that_never_chose_a_merge_mode_is_forgotten_with_position_deletes(spark, lake_config, table_name):
    """Unset, write.merge.mode is Iceberg's default, copy-on-write; a table the cleaner has not run
    on yet may leave it so. The request sets merge-on-read first, as the cleaner's first run does."""
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} UNSET TBLPROPERTIES ('write.merge.mode')")
    forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)), interval_ms=INTERVAL)
    [audit] = read_audit(spark, lake_config, table_name)
    summary = spark.sql(f"SELECT summary FROM {ref.meta('snapshots')} "
                        f"WHERE snapshot_id = {audit['committed_snapshot_id']}").collect()[0]["summary"]
    assert summary.get("added-position-delete-files") and not summary.get("deleted-data-files"), summary
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}
    assert props["write.merge.mode"] == "merge-on-read"


def test_a_composite_key_is_converted_to_its_columns_types(spark, lake_config, table_name):
    ref = _composite(spark, lake_config, table_name)
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"tenant": "7", "id": "42"}, {"id": 42, "tenant": 8})))
    assert result.removed_records == 2 and result.keys == 2
    assert [(r["tenant"], r["id"]) for r in spark.table(ref.sql()).collect()] == [(7, 43)]


def _forgotten_rule(summary) -> dict:
    return next(r for r in summary["rules"] if r["rule"] == "forgotten keys stay forgotten")


def test_quality_catches_an_old_record_put_back_and_keeps_new_data(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    compact_table(spark, lake_config, table_name)
    forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)))
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
    original = guards.check_no_concurrent_cleaner
    state = {"done": False}

    def forget_commits_first(spark_, ref_, snapshot):
        if not state["done"]:
            state["done"] = True
            forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)))
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", forget_commits_first)
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


def test_a_cleaner_commit_after_the_request_read_the_table_is_read_again(spark, lake_config, table_name,
                                                                         monkeypatch):
    """A compaction that removes a superseded record of the key after the request counted the key's
    records, before its MERGE: the request counts again, so the audit names what it removed and
    its own commit, not the compaction's."""
    ref = _filled(spark, lake_config, table_name)
    check = guards.check_no_concurrent_cleaner
    raced = []

    def a_cleaner_commits_first(spark_, ref_, snapshot):
        if not raced:
            spark.sql(f"DELETE FROM {ref.sql()} WHERE key = 'alice' AND offset = 0")  # alice's superseded record
            raced.append(catalog.iceberg_table(spark, ref).currentSnapshot().snapshotId())
        return check(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", a_cleaner_commits_first)
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)))
    assert raced and result.removed_records == 2  # offset 2 and the offsetless record: not the raced one
    [audit] = read_audit(spark, lake_config, table_name)
    assert audit["committed_snapshot_id"] not in (None, raced[0])  # ours, not the compaction's
    assert audit["removed_records"] == 2 and not spark.table(ref.sql()).where("key = 'alice'").count()


def test_the_cli_forgets_through_spark_submit_with_the_keys_never_on_argv(spark, lake_config, config_file, table_name,
                                                                         tmp_path):
    ref = _composite(spark, lake_config, table_name)
    keys = tmp_path / "keys.jsonl"
    keys.write_text('{"tenant": 7, "id": 42}\n{"tenant": 8, "id": 42}\n')
    cli = [sys.executable, "-m", "lakecleaner.cli", "--config", str(config_file), "forget", table_name]
    proc = subprocess.run([*cli, "--keys", str(keys), "--reason=-urgent"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert line["status"] == "forgotten" and line["removed_records"] == 2 and line["deadline_ms"] is None
    spark.sql(f"REFRESH TABLE {ref.sql()}")  # this session's catalog caches the table (30 s); another JVM deleted
    assert [(r["tenant"], r["id"]) for r in spark.table(ref.sql()).collect()] == [(7, 43)]
    spark.sql(f"REFRESH TABLE {audit_table(lake_config)}")
    audit = read_audit(spark, lake_config, table_name)
    assert {(a["reason"], a["requested_by"], a["status"]) for a in audit} == {("-urgent", getpass.getuser(), "forgotten")}
    requests = _requests(spark, lake_config, table_name)
    assert sorted(r["status"] for r in requests) == ["done", "done"] and not any(r["key"] for r in requests)
    # keys from stdin, read before any Spark: a line that is not JSON stops the command (exit 2), named
    # by its number, never its text. (A bad key the application rejects: the next test.)
    proc = subprocess.run([*cli, "--keys", "-"], input='{"tenant": 7, "id": 42}\ntenant=8\n', capture_output=True,
                          text=True)
    assert proc.returncode == 2 and f"forget {table_name}: stdin: line 2 is not JSON" in proc.stderr
    assert "tenant=8" not in proc.stderr + proc.stdout
    rows = lambda found: sorted((r["request_id"], r["status"]) for r in found)  # noqa: E731
    assert rows(_requests(spark, lake_config, table_name)) == rows(requests)  # nothing enqueued


def test_a_request_with_a_bad_key_is_rejected_named_and_its_keys_leave_the_request_table(spark, lake_config,
                                                                                         table_name):
    """What the forget application does with a request the CLI enqueued: a bad key can never be
    carried out, so the request is closed as rejected (not given back), and its keys purged."""
    ref = _composite(spark, lake_config, table_name)
    # the second key's map written value first: map('alice@corp.com', 'id') where map('id', ...) was meant
    request = ForgetRequest(table_name, ({"tenant": 8, "id": 42}, {"tenant": 7, "alice@corp.com": "id"}))
    now = int(time.time() * 1000)
    enqueue(spark, lake_config, request, now)
    [pending] = [r for r in pending_requests(spark, lake_config) if r.request_id == request.request_id]
    line = carry_out(spark, lake_config, pending, now, INTERVAL, Attribution("run-1"), False)
    assert line["status"] == "failed" and line["rejected"]
    assert line["error"].startswith(f"table {table_name}: bad key: 1 name(s) that are no key column")
    purge_closed_keys(spark, lake_config)  # what the application does once, after its requests
    rows = _requests(spark, lake_config, table_name)
    assert [r["status"] for r in rows] == ["rejected", "rejected"] and not any(r["key"] for r in rows)
    assert "alice" not in line["error"] and not [r for r in rows if "alice" in r["note"]]  # the note is kept
    assert spark.table(ref.sql()).count() == 3  # nothing deleted, not even the good key's record
    # what the DAG's forget_requests reads of a named id that is no pending request (pyiceberg, no key)
    from lakecleaner.core.erasure_requests import list_pending, not_pending, request_statuses, unmatched_requests

    named = [request.request_id, "no-such-request"]
    missing = not_pending(named, list_pending(lake_config, named))
    statuses = request_statuses(lake_config, missing)
    assert statuses == {request.request_id: "rejected"}
    unmatched = unmatched_requests(missing, statuses)
    assert [(u.request_id, u.fails_the_run) for u in unmatched] == [(request.request_id, False), ("no-such-request", True)]


def _requests(spark, cfg, table):
    spark.sql(f"REFRESH TABLE {requests_table(cfg)}")
    return [r.asDict() for r in spark.table(requests_table(cfg)).where(f"table_name = '{table}'").collect()]


def test_a_key_is_taken_literally_even_when_it_looks_like_a_spec_or_an_option(spark, lake_config, table_name):
    """One syntax (a JSON object): 'key=alice' is that text, not 'alice'; '-x' is a key like any other."""
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, [{"key": k, "offset": i, "partition": 0, "value": "v"}
                        for i, k in enumerate(["alice", "key=alice", "-x", "z"])])
    forget(spark, lake_config, ForgetRequest(table_name, ({"key": "key=alice"}, {"key": "-x"})))
    assert sorted(r["key"] for r in spark.table(ref.sql()).collect()) == ["alice", "z"]


# ---------------------------------------------------------------- what is on disk (item: "physically removed")
def test_a_key_with_no_live_row_is_judged_on_disk_and_its_files_still_rewritten(spark, lake_config, table_name):
    """A user's DELETE masked alice's records earlier: no live row, but the data files still hold
    them. The request's maintenance runs all the same, and the verdict reads the files."""
    ref = _filled(spark, lake_config, table_name)
    compact_table(spark, lake_config, table_name)
    spark.sql(f"DELETE FROM {ref.sql()} WHERE key = 'alice'")
    assert any(r["key"] == "alice" for r in _reachable_rows(spark, ref))  # masked, not gone
    now = int(time.time() * 1000)
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)), now_ms=now, interval_ms=INTERVAL)
    assert result.removed_records == 0 and result.maintenance  # nothing live to delete; maintenance ran
    assert not [r for r in _reachable_rows(spark, ref) if r["key"] == "alice"]
    assert result.physically_removed and result.deadline_ms == now


@pytest.mark.parametrize("format_version", [2, 3])
def test_records_masked_in_a_dirty_file_are_not_reported_physically_removed(spark, lake_config, table_name,
                                                                             format_version):
    """Never compacted: the file is above the checkpoint, so maintenance does not rewrite it and the
    masked record stays in it (on v3 under a deletion vector). The request says so, with the
    README's bound, not 'removed now'."""
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "60000"},
                                 format_version=format_version)
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "x"},
                        {"key": "b", "offset": 1, "partition": 0, "value": "y"}])
    spark.sql(f"DELETE FROM {ref.sql()} WHERE key = 'a'")  # no live row of a any more
    assert _delete_file_formats(spark, ref) == {"PUFFIN" if format_version == 3 else "PARQUET"}
    now = int(time.time() * 1000)
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "a"},)), now_ms=now, interval_ms=INTERVAL)
    assert any(r["key"] == "a" for r in _reachable_rows(spark, ref))
    assert not result.physically_removed and result.deadline_ms == now + 60000 + INTERVAL
    assert "1 data file(s) above the checkpoint" in result.deadline_note
    [audit] = read_audit(spark, lake_config, table_name)
    assert not audit["physically_removed"] and audit["deadline_ms"] == result.deadline_ms


def test_a_renamed_key_column_is_still_read_from_old_files(spark, lake_config, table_name):
    """Files written before a rename carry the old column name; they are matched by field id."""
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "60000"})
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "x"},
                        {"key": "b", "offset": 1, "partition": 0, "value": "y"}])  # a file DELETE cannot drop whole
    spark.sql(f"DELETE FROM {ref.sql()} WHERE key = 'a'")
    spark.sql(f"ALTER TABLE {ref.sql()} RENAME COLUMN key TO id")
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('compaction.key.columns' = 'id')")
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"id": "a"},)), interval_ms=INTERVAL)
    assert not result.physically_removed


def _forgotten_under_a_ref(spark, cfg, table, ref_ddl: str):
    """alice forgotten from a cleaned, bounded table whose files a ref (``ref_ddl``) keeps."""
    ref = _filled(spark, cfg, table)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('max.compaction.lag.ms' = '60000')")
    compact_table(spark, cfg, table)
    spark.sql(f"ALTER TABLE {ref.sql()} {ref_ddl}")
    result = forget(spark, cfg, ForgetRequest(table, ({"key": "alice"},)), interval_ms=INTERVAL)
    assert not result.physically_removed and result.deadline_ms is None
    return ref, result


def test_a_tag_that_keeps_the_record_voids_the_deadline_and_is_named(spark, lake_config, table_name):
    ref, result = _forgotten_under_a_ref(spark, lake_config, table_name, "CREATE TAG `audit_2026`")
    assert "tag 'audit_2026' keeps" in result.deadline_note
    spark.sql(f"ALTER TABLE {ref.sql()} DROP TAG `audit_2026`")
    again = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)), interval_ms=INTERVAL)
    assert again.physically_removed  # the tag gone, the same maintenance reaches the files


# ---------------------------------------------------------------- the audit
def test_a_failure_after_the_delete_leaves_an_audit_row_and_the_retry_resumes(spark, lake_config, table_name,
                                                                               monkeypatch):
    ref = _filled(spark, lake_config, table_name)
    compact_table(spark, lake_config, table_name)
    request = ForgetRequest(table_name, ({"key": "alice"},))

    def conflict(*args, **kwargs):
        raise RuntimeError("maintenance conflicted")

    monkeypatch.setattr(forget_module, "maintain_table", conflict)
    with pytest.raises(ForgetError, match=rf"table {table_name}: the delete committed .*maintenance conflicted"):
        forget(spark, lake_config, request)
    [audit] = read_audit(spark, lake_config, table_name)
    assert (audit["status"], audit["removed_records"]) == ("deleted", 1) and not audit["physically_removed"]
    assert not spark.table(ref.sql()).where("key = 'alice'").count()
    monkeypatch.undo()
    result = forget(spark, lake_config, request)  # the same request: resumed, nothing deleted twice
    assert (result.removed_records, result.removed_quarantined, result.physically_removed) == (1, 1, True)
    [audit] = read_audit(spark, lake_config, table_name)
    assert (audit["status"], audit["removed_records"], audit["removed_quarantined"]) == ("forgotten", 1, 1)


def test_a_request_that_died_before_the_quarantines_purge_purges_it_when_resumed(spark, lake_config, table_name,
                                                                                 monkeypatch):
    ref = _filled(spark, lake_config, table_name)
    compact_table(spark, lake_config, table_name)  # alice's offsetless record goes to quarantine
    request = ForgetRequest(table_name, ({"key": "alice"},))
    purge = forget_module.purge_deleted

    def dies_after_the_delete(spark, qref):
        raise RuntimeError("driver lost")

    monkeypatch.setattr(forget_module, "purge_deleted", dies_after_the_delete)
    with pytest.raises(ForgetError, match="the delete committed .*driver lost"):
        forget(spark, lake_config, request)
    qref = quarantine_table(lake_config, ref)
    assert not spark.table(qref.sql()).count() and [r for r in _reachable_rows(spark, qref) if r["key"] == "alice"]
    monkeypatch.setattr(forget_module, "purge_deleted", purge)
    result = forget(spark, lake_config, request)  # resumed: no live record left in quarantine to delete
    assert result.physically_removed, result.deadline_note
    assert not [r for r in _reachable_rows(spark, qref) if r["key"] == "alice"]


def test_the_audit_keeps_its_instants_whatever_the_drivers_time_zone(spark, lake_config, table_name, monkeypatch):
    ref = _filled(spark, lake_config, table_name)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        forget(spark, lake_config, ForgetRequest(table_name, ({"key": "bob"},)))
    finally:
        monkeypatch.undo()
        time.tzset()
    [row] = spark.sql(f"SELECT unix_millis(requested_at) - requested_ms AS shift FROM {audit_table(lake_config)} "
                      f"WHERE table_name = '{table_name}'").collect()
    assert abs(row["shift"]) < 1000, row  # a naive datetime read in local time moved it by hours
    assert spark.table(ref.sql()).where("key = 'bob'").count() == 0


def test_a_dry_run_deletes_nothing_and_the_audit_says_who_asked(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    request = ForgetRequest(table_name, ({"key": "alice"},), requested_by="dpo@example.org", reason="ticket 7")
    dry = forget(spark, lake_config, request, dry_run=True)
    assert (dry.status, dry.removed_records) == ("dry run", 3)
    assert spark.table(ref.sql()).where("key = 'alice'").count() == 3 and read_audit(spark, lake_config, table_name) == []
    forget(spark, lake_config, request, by=Attribution("scheduled__2026-11-26T07:00:00+00:00", "ops"))
    [audit] = read_audit(spark, lake_config, table_name)
    assert (audit["requested_by"], audit["reason"], audit["dag_run_id"], audit["triggered_by"]) == (
        "dpo@example.org", "ticket 7", "scheduled__2026-11-26T07:00:00+00:00", "ops")


SECRET = "a-deployment-secret-of-32-bytes!"


def test_a_keyed_hash_names_the_key_and_old_unkeyed_requests_are_still_checked(spark, lake_config, table_name,
                                                                                monkeypatch):
    ref = _filled(spark, lake_config, table_name)
    compact_table(spark, lake_config, table_name)
    forget(spark, lake_config, ForgetRequest(table_name, ({"key": "bob"},)))  # before the deployment had a secret
    monkeypatch.setenv("LAKECLEANER_KEY_HASH_SECRET", SECRET)
    forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)))
    audit = {a["hash_scheme"]: a for a in read_audit(spark, lake_config, table_name)}
    keyed = KeyHasher.from_environment(environ={"LAKECLEANER_KEY_HASH_SECRET": SECRET})
    assert set(audit) == {"sha256", keyed.scheme}
    assert audit[keyed.scheme]["key_hash"] == hmac.new(SECRET.encode(), b'["alice"]', hashlib.sha256).hexdigest()
    # both old records put back are caught, each under its own scheme
    append(spark, ref, [{"key": "alice", "offset": 2, "partition": 0, "value": "alice's address"},
                        {"key": "bob", "offset": 3, "partition": 0, "value": "bob v2"}])
    rule = _forgotten_rule(validate_table(spark, lake_config, table_name, raise_on_failure=False))
    assert not rule["success"]
    assert sorted((o["offset_id"], o["key_hash"]) for o in rule["offending"]) == [
        (2, audit[keyed.scheme]["key_hash"]), (3, audit["sha256"]["key_hash"])]


def test_offending_rows_name_keys_by_their_keyed_hash(spark, lake_config, table_name, monkeypatch):
    monkeypatch.setenv("LAKECLEANER_KEY_HASH_SECRET", SECRET)
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, [{"key": "alice@example.org", "offset": i, "partition": 0, "value": "v"} for i in range(3)])
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('lakecleaner.checkpoint' = '{{\"offsets\": {{\"0\": 2}}}}')")
    summary = validate_table(spark, lake_config, table_name, raise_on_failure=False)
    failed = [r for r in summary["rules"] if not r["success"]]
    assert {r["rule"] for r in failed} >= {"one record per key", "the winner is right (offset strategy)"}
    keyed = KeyHasher.from_environment(environ={"LAKECLEANER_KEY_HASH_SECRET": SECRET})
    for rule in failed:
        assert "alice" not in json.dumps(rule)
        assert all(o["key_hash"] == keyed.digest('["alice@example.org"]') for o in rule["offending"]), rule


def test_a_table_someone_else_created_under_the_quarantine_name_is_refused(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    qref = quarantine_table(lake_config, ref)
    spark.sql(f"CREATE TABLE {qref.sql()} (key string, note string) USING iceberg")
    spark.sql(f"INSERT INTO {qref.sql()} VALUES ('alice', 'not the cleaner''s')")
    with pytest.raises(ForgetError, match=rf"table {table_name}: {qref.short} exists but is not the cleaner's "
                                          r"quarantine.*nothing deleted"):
        forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},)))
    with pytest.raises(CompactionError, match=rf"{qref.short} exists but is not the cleaner's quarantine"):
        compact_table(spark, lake_config, table_name)  # alice's offsetless record would go there
    assert spark.table(qref.sql()).count() == 1 and spark.table(ref.sql()).count() == 6


def test_a_done_request_keeps_no_key_in_any_file_of_the_request_table(spark, lake_config, table_name):
    _filled(spark, lake_config, table_name)
    request = ForgetRequest(table_name, ({"key": "carol"},), requested_by="dpo")
    enqueue(spark, lake_config, request, int(time.time() * 1000))
    [pending] = [r for r in pending_requests(spark, lake_config) if r.request_id == request.request_id]
    assert pending.keys == ({"key": "carol"},) and pending.requested_by == "dpo"
    line = carry_out(spark, lake_config, pending, int(time.time() * 1000), INTERVAL, Attribution("run-1"), False)
    assert line["status"] == "forgotten" and line["removed_records"] == 1
    [row] = [r for r in _requests(spark, lake_config, table_name) if r["request_id"] == request.request_id]
    assert (row["status"], row["key"], row["processed_by"]) == ("done", None, "run-1")
    purge_closed_keys(spark, lake_config)  # what the application does once, after its requests
    rows = _reachable_rows(spark, requests_ref(lake_config))
    assert not [r for r in rows if r["request_id"] == request.request_id and r["key"]]


def test_spark_computes_the_same_hmac_as_python_and_no_plan_shows_the_secret(spark):
    from lakecleaner.core.keyhash import hash_sql, pads_join
    from lakecleaner.spark.frames import register_pads

    hasher = KeyHasher.from_environment(environ={"LAKECLEANER_KEY_HASH_SECRET": SECRET})
    register_pads(spark, hasher)
    messages = ["", "alice", '["tenant","7"]', "é😀\u0000\n", "x" * 1000]
    local_frame(spark, [(m,) for m in messages], "m string").createOrReplaceTempView("lc_test_messages")
    query = f"SELECT m, {hash_sql(hasher, 'm')} AS h FROM lc_test_messages{pads_join(hasher)}"
    df = spark.sql(query)
    assert {r["m"]: r["h"] for r in df.collect()} == {m: hasher.digest(m) for m in messages}
    plans = df._jdf.queryExecution().toString()  # parsed, analyzed, optimized and physical plans
    ipad, opad = hasher.pads()
    for secret in (SECRET, SECRET.encode().hex(), ipad.hex(), opad.hex()):
        assert secret.lower() not in plans.lower() and secret not in query


def test_a_table_problem_leaves_the_request_waiting_until_the_table_is_fixed(spark, lake_config, table_name):
    """An erasure obligation is not dropped because an operator must fix the table first: only a
    request that can never be carried out (a bad key, no such table) is rejected."""
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('write.merge.mode' = 'copy-on-write')")
    request = ForgetRequest(table_name, ({"key": "alice"},))
    now = int(time.time() * 1000)
    enqueue(spark, lake_config, request, now)

    def attempt():
        [pending] = [r for r in pending_requests(spark, lake_config) if r.request_id == request.request_id]
        return carry_out(spark, lake_config, pending, now, INTERVAL, Attribution("run-1"), False)

    line = attempt()
    assert line["status"] == "failed" and not line["rejected"] and "copy-on-write" in line["error"]
    [row] = [r for r in _requests(spark, lake_config, table_name) if r["request_id"] == request.request_id]
    assert row["status"] == "pending" and row["key"] == {"key": "alice"} and "copy-on-write" in row["note"]
    spark.sql(f"ALTER TABLE {ref.sql()} UNSET TBLPROPERTIES ('write.merge.mode')")
    assert attempt()["status"] == "forgotten" and not spark.table(ref.sql()).where("key = 'alice'").count()


# ---------------------------------------------------------------- found in review: what the verdict must see
def test_a_masked_record_at_its_partitions_log_end_still_counts_as_on_disk(spark, lake_config, table_name):
    """The key's record was its partition's highest offset when a user's DELETE masked it: the live
    offsets at the request stop below it, and an offset filter took it for new data."""
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "60000"})
    append(spark, ref, [{"key": "b", "offset": 0, "partition": 0, "value": "y"},
                        {"key": "a", "offset": 1, "partition": 0, "value": "a's address"},
                        {"key": "a", "offset": 0, "partition": 1, "value": "a, alone in its partition"}])
    spark.sql(f"DELETE FROM {ref.sql()} WHERE key = 'a'")
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "a"},)), interval_ms=INTERVAL)
    assert any(r["key"] == "a" for r in _reachable_rows(spark, ref))
    assert not result.physically_removed and result.deadline_ms is not None


def test_a_reused_request_id_never_rewrites_another_requests_verdict(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('max.compaction.lag.ms' = '60000')")
    compact_table(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} CREATE TAG `legal_hold`")
    first = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "alice"},), request_id="dpo-118"))
    assert not first.physically_removed and first.deadline_ms is None
    spark.sql(f"ALTER TABLE {ref.sql()} DROP TAG `legal_hold`")
    append(spark, ref, [{"key": "zed", "offset": 9, "partition": 0, "value": "z"}])
    second = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "zed"},), request_id="dpo-118"))
    assert second.removed_records == 1
    by_hash = {a["key_hash"]: a for a in read_audit(spark, lake_config, table_name)}
    assert by_hash[first.key_hashes[0]]["deadline_ms"] is None  # alice's verdict stays alice's
    assert not by_hash[first.key_hashes[0]]["physically_removed"]


def test_a_ticket_asked_again_for_the_same_key_erases_what_came_back(spark, lake_config, table_name):
    """A request id is a person's ticket: asked again for the same key after the first request was
    done, it is another request (another instant), not a resumption of the first: the key's
    records appended since go, and the first request's audit row keeps its own figures."""
    ref = _filled(spark, lake_config, table_name)
    compact_table(spark, lake_config, table_name)
    now = int(time.time() * 1000)
    first = _carried_out(spark, lake_config, table_name, "dpo-118", now)
    assert first["removed_records"] == 1 and first["physically_removed"], first
    append(spark, ref, [{"key": "alice", "offset": 7, "partition": 0, "value": "alice again"}])
    again = _carried_out(spark, lake_config, table_name, "dpo-118", now + 60_000)
    assert again["status"] == "forgotten" and again["removed_records"] == 1, again
    assert not spark.table(ref.sql()).where("key = 'alice'").count()
    audits = sorted(read_audit(spark, lake_config, table_name), key=lambda a: a["requested_ms"])
    assert [(a["requested_ms"], a["removed_records"], a["status"]) for a in audits] == [
        (now, 1, "forgotten"), (now + 60_000, 1, "forgotten")]


def _carried_out(spark, cfg, table, request_id, now) -> dict:
    """One request for alice through the request table, as the DAG's forget task carries it out."""
    enqueue(spark, cfg, ForgetRequest(table, ({"key": "alice"},), request_id=request_id), now)
    [pending] = [r for r in pending_requests(spark, cfg, [request_id], now) if r.table == table]
    return carry_out(spark, cfg, pending, now, INTERVAL, Attribution("run-1"), False)


def test_a_key_added_under_a_claimed_request_waits_for_the_next_run(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    request = ForgetRequest(table_name, ({"key": "alice"},), request_id=f"late-{table_name}")
    now = int(time.time() * 1000)
    enqueue(spark, lake_config, request, now)
    [listed] = [r for r in pending_requests(spark, lake_config) if r.request_id == request.request_id]
    enqueue(spark, lake_config, ForgetRequest(table_name, ({"key": "bob"},), request_id=request.request_id), now)
    line = carry_out(spark, lake_config, listed, now, INTERVAL, Attribution("run-1"), False)
    assert line["status"] == "forgotten" and line["keys"] == 2  # the claim took both rows: both erased
    assert not spark.table(ref.sql()).where("key IN ('alice', 'bob')").count()
    rows = [r for r in _requests(spark, lake_config, table_name) if r["request_id"] == request.request_id]
    assert sorted(r["status"] for r in rows) == ["done", "done"] and not any(r["key"] for r in rows)


def test_a_branch_on_a_partitioned_table_is_named_and_the_request_completes(spark, lake_config, table_name):
    _, result = _forgotten_under_a_ref(spark, lake_config, table_name, "CREATE BRANCH `staging`")
    assert "branch 'staging' keeps" in result.deadline_note
    [audit] = read_audit(spark, lake_config, table_name)
    assert audit["status"] == "forgotten"


def test_an_invalid_table_setting_leaves_the_request_waiting(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('delete.retention.ms' = 'soon')")
    request = ForgetRequest(table_name, ({"key": "alice"},))
    now = int(time.time() * 1000)
    enqueue(spark, lake_config, request, now)
    [pending] = [r for r in pending_requests(spark, lake_config) if r.request_id == request.request_id]
    line = carry_out(spark, lake_config, pending, now, INTERVAL, Attribution("run-1"), False)
    assert line["status"] == "failed" and not line["rejected"] and "delete.retention.ms" in line["error"]
    [row] = [r for r in _requests(spark, lake_config, table_name) if r["request_id"] == request.request_id]
    assert row["status"] == "pending" and row["key"] == {"key": "alice"}
    unknown = ForgetRequest("t.no_such_table_here!", ({"key": "alice"},))
    line = carry_out(spark, lake_config, unknown, now, INTERVAL, Attribution("run-1"), True)
    assert line["status"] == "failed" and line["rejected"]  # a name that is no table's: rejected
    missing = ForgetRequest("t.no_table_of_this_name", ({"key": "alice"},))  # a well-formed name of no table
    enqueue(spark, lake_config, missing, now)
    [pending] = [r for r in pending_requests(spark, lake_config) if r.request_id == missing.request_id]
    line = carry_out(spark, lake_config, pending, now, INTERVAL, Attribution("run-1"), False)
    assert line["status"] == "failed" and line["rejected"] and "no such table" in line["error"], line
    [row] = [r for r in _requests(spark, lake_config, missing.table) if r["request_id"] == missing.request_id]
    assert row["status"] == "rejected" and row["key"] is None  # never retried, its key not kept


def test_a_file_imported_without_field_ids_is_read_by_name(spark, lake_config, table_name, tmp_path):
    ref = create_compacted_table(spark, lake_config, table_name, {"max.compaction.lag.ms": "60000"})
    plain = str(tmp_path / "plain")
    local_frame(spark, [("a", 0, 0, "x"), ("b", 1, 0, "y")], "key string, offset bigint, partition int, value string") \
        .select("key", "offset", "partition", F.lit(None).cast("bigint").alias("timestamp"),
                F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
                F.lit(None).cast("boolean").alias("tombstone"), "value") \
        .coalesce(1).write.partitionBy("partition").parquet(plain)
    spark.sql(f"CALL `{ref.catalog}`.system.add_files(table => '{ref.short}', source_table => '`parquet`.`{plain}`')")
    spark.sql(f"DELETE FROM {ref.sql()} WHERE key = 'a'")
    result = forget(spark, lake_config, ForgetRequest(table_name, ({"key": "a"},)), interval_ms=INTERVAL)
    assert not result.physically_removed  # the masked record is still in the imported file: seen by name
