"""What happens when things go wrong: concurrent writers and cleaners, crashes between the run's
commits, a killed job, bad configuration, a table that breaks mid-run. Each must lose no data and
say clearly what happened."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lakecleaner.spark import guards
from lakecleaner.core.config import CHECKPOINT_PROPERTY, ConfigError
from lakecleaner.core.table import CompactionError, ConcurrentCommitError, TableRef
from lakecleaner.spark.catalog import current_snapshot
from lakecleaner.spark.frames import local_frame
from lakecleaner.spark.engine import compact_table
from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.submit import RESULT_MARKER
from lakecleaner_dev.tables import KAFKA_SCHEMA, append, create_compacted_table, read_model_records, record_ids

pytestmark = pytest.mark.spark


def _rows(start, n, keys=5, partitions=2, null_key_every=0):
    rows = []
    for i in range(start, start + n):
        key = None if null_key_every and i % null_key_every == 0 else f"k{i % keys}"
        rows.append({"key": key, "offset": i, "partition": i % partitions, "value": None if i % 7 == 0 else f"v{i}"})
    return rows


def _props(spark, ref):
    return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}


def _filled(spark, cfg, table, props=None, batches=3, per_batch=20, **kw):
    ref = create_compacted_table(spark, cfg, table, {"compaction.retain.log.end.record": "false", **(props or {})})
    for b in range(batches):
        append(spark, ref, _rows(b * per_batch, per_batch, **kw))
    return ref


def _expected(spark, cfg, table, now):
    records, tc = read_model_records(spark, cfg, table)
    props = _props(spark, TableRef.parse(table, "lake"))
    outcome = compact(records, Checkpoint.from_json(props.get(CHECKPOINT_PROPERTY)), tc, now)
    return sorted(r.id for r in outcome.survivors(records)), outcome


def test_an_appender_during_a_run_loses_nothing(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    now = int(time.time() * 1000)
    expected, _ = _expected(spark, lake_config, table_name, now)
    appended, stop = [], threading.Event()

    def appender():
        offset = 10_000
        while not stop.is_set() and offset < 10_040:
            append(spark, ref, _rows(offset, 2))
            appended.extend([(offset % 2, offset), ((offset + 1) % 2, offset + 1)])
            offset += 2

    thread = threading.Thread(target=appender)
    thread.start()
    try:
        # An append landing at each of Iceberg's commit retries makes the run yield (nothing committed,
        # nothing lost): seen once on a loaded machine, where this thread's appends share the run's
        # table object. The run as of the same now is tried again, as the next interval's would be.
        stats = None
        for _ in range(3):
            with contextlib.suppress(ConcurrentCommitError):
                stats = compact_table(spark, lake_config, table_name, now_ms=now)
                break
    finally:
        stop.set()
        thread.join()
    assert stats and stats["status"] == "committed" and stats["removed_superseded"] > 0
    assert appended, "the appender never committed during the run"
    assert record_ids(spark, ref) == sorted(expected + appended)


def test_a_concurrent_cleaner_makes_the_later_run_yield_cleanly(spark, lake_config, table_name, monkeypatch):
    ref = _filled(spark, lake_config, table_name)
    now = int(time.time() * 1000)
    expected, _ = _expected(spark, lake_config, table_name, now)
    original = guards.check_no_concurrent_cleaner
    state = {"nested": False}

    def other_cleaner_commits_first(spark_, ref_, snapshot):
        if not state["nested"]:
            state["nested"] = True
            compact_table(spark, lake_config, table_name, now_ms=now)  # the other run wins the race
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", other_cleaner_commits_first)
    with pytest.raises(ConcurrentCommitError, match=rf"table {table_name}: table changed by a concurrent delete"):
        compact_table(spark, lake_config, table_name, now_ms=now)
    assert record_ids(spark, ref) == expected
    history = spark.table(lake_config.history_table).where(f"table_name = '{table_name}'").collect()
    assert sorted(r["status"] for r in history) == ["committed", "yielded"]  # beaten to the commit: not a failure


def test_a_rollback_during_a_run_makes_it_fail_cleanly(spark, lake_config, table_name, monkeypatch):
    """The run's snapshot is rolled back away while it decides: its decisions are stale, so it must
    stop before committing, whatever the lineage walk finds."""
    ref = _filled(spark, lake_config, table_name)
    before = spark.sql(f"SELECT snapshot_id FROM {ref.meta('history')} ORDER BY made_current_at").collect()[-2][0]
    original = guards.check_no_concurrent_cleaner

    def user_rolls_back_first(spark_, ref_, snapshot):
        spark.sql(f"CALL lake.system.rollback_to_snapshot('{ref.short}', {before})")
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", user_rolls_back_first)
    with pytest.raises(CompactionError, match=rf"table {table_name}: snapshot \d+, which the run read, is no longer "
                                              rf"on the table's current lineage"):
        compact_table(spark, lake_config, table_name, now_ms=int(time.time() * 1000))
    assert current_snapshot(spark, ref) == before  # nothing committed after the rollback
    assert CHECKPOINT_PROPERTY not in _props(spark, ref)
    assert len(record_ids(spark, ref)) == 40  # the two batches before the last one, untouched


@pytest.mark.parametrize("fail_at", ["after_quarantine", "after_merge"])
def test_a_crash_between_commits_is_safe_to_repeat(spark, lake_config, table_name, monkeypatch, fail_at):
    ref = _filled(spark, lake_config, table_name, null_key_every=9)
    now = int(time.time() * 1000)
    expected, outcome = _expected(spark, lake_config, table_name, now)
    keyless = spark.table(ref.sql()).where("key IS NULL").count()
    assert keyless > 0
    monkeypatch.setenv("LAKECLEANER_FAIL_AT", fail_at)
    with pytest.raises(CompactionError, match=f"table {table_name}: .*injected failure at {fail_at}") as err:
        compact_table(spark, lake_config, table_name, now_ms=now)
    assert CHECKPOINT_PROPERTY not in _props(spark, ref)  # the checkpoint was never recorded
    run = spark.table(lake_config.history_table).where(f"table_name = '{table_name}' AND now_ms = {now}").collect()
    assert len(run) == 1
    if fail_at == "after_merge":  # the MERGE committed: said so, and recorded with what it removed
        assert "the run committed (snapshot " in str(err.value) and "checkpoint was not advanced" in str(err.value)
        assert run[0]["status"] == "committed" and run[0]["committed_snapshot_id"] is not None
        assert run[0]["removed_superseded"] > 0 and "injected failure" in run[0]["error"]
    else:
        assert run[0]["status"] == "failed" and run[0]["committed_snapshot_id"] is None
    monkeypatch.delenv("LAKECLEANER_FAIL_AT")
    compact_table(spark, lake_config, table_name, now_ms=now)
    assert record_ids(spark, ref) == expected
    stored = Checkpoint.from_json(_props(spark, ref)[CHECKPOINT_PROPERTY])
    assert stored.offsets == outcome.checkpoint.offsets
    quarantine = spark.table(ref.sql("__quarantine"))
    # quarantine first, then delete from the source: a crash in between duplicates, never loses;
    # a crash after the MERGE has nothing left to quarantine again
    assert quarantine.count() == (2 if fail_at == "after_quarantine" else 1) * keyless
    assert quarantine.select("partition", "offset").distinct().count() == keyless


@pytest.mark.parametrize("fail_at", ["after_quarantine", "after_merge"])
def test_a_crash_never_loses_a_keyless_log_end(spark, lake_config, table_name, monkeypatch, fail_at):
    """A keyless log end stays in the table (rule 6), copied to quarantine once. A crash before the
    checkpoint says it was copied makes the next run copy it again (a duplicate, as for any crash
    after the copy), never lose it; once a later record arrives it goes, without another copy."""
    ref = create_compacted_table(spark, lake_config, table_name)  # retains the log end
    append(spark, ref, [{"key": "a", "offset": 0, "partition": 0, "value": "x"},
                        {"key": "a", "offset": 1, "partition": 0, "value": "y"},
                        {"key": None, "offset": 2, "partition": 0, "value": "orphan"}])
    monkeypatch.setenv("LAKECLEANER_FAIL_AT", fail_at)
    with pytest.raises(CompactionError, match=f"injected failure at {fail_at}"):
        compact_table(spark, lake_config, table_name)
    monkeypatch.delenv("LAKECLEANER_FAIL_AT")
    assert compact_table(spark, lake_config, table_name)["quarantined"] == 1  # the checkpoint never said so
    assert compact_table(spark, lake_config, table_name)["quarantined"] == 0
    assert record_ids(spark, ref) == [(0, 1), (0, 2)]
    append(spark, ref, [{"key": "b", "offset": 3, "partition": 0, "value": "z"}])
    assert compact_table(spark, lake_config, table_name)["quarantined"] == 0
    assert record_ids(spark, ref) == [(0, 1), (0, 3)]
    copies = spark.table(ref.sql("__quarantine")).select("offset").collect()
    assert [r["offset"] for r in copies] == [2, 2]


def test_a_job_killed_between_its_merge_and_its_checkpoint_stops_a_run_here_and_the_next_run_is_correct(
        spark, lake_config, config_file, table_name, monkeypatch):
    """SIGKILL of the CLI's application (nothing runs after: no finally, no abort) at the run's most
    delicate point, on the embedded default catalog: its MERGE committed, its checkpoint not written.
    test_chaos kills cleaning applications at each named point and at random moments (PostgreSQL).

    It runs while a run in this process decides: Spark's Iceberg catalog caches the table this
    process loaded, and the other JVM's commit must still stop that run (the check refreshes the
    table), not slip past until the cache expires. A run from the checkpoint another process wrote:
    tests/spark/test_postgres_catalog.py."""
    ref = _filled(spark, lake_config, table_name, batches=4, per_batch=50, keys=20)
    now = int(time.time() * 1000)
    expected, _ = _expected(spark, lake_config, table_name, now)
    before = current_snapshot(spark, ref)
    original, killed = guards.check_no_concurrent_cleaner, {}

    def other_process_merges_first(spark_, ref_, snapshot):
        proc = subprocess.Popen([sys.executable, "-m", "lakecleaner.cli", "--config", str(config_file), "compact",
                                 table_name, "--now-ms", str(now)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env={**os.environ, "LAKECLEANER_FAIL_AT": "kill:after_merge"},
                                start_new_session=True)
        try:
            killed["out"], _ = proc.communicate(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the application's JVM too, had it outlived its driver
        killed["returncode"] = proc.returncode
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", other_process_merges_first)
    with pytest.raises(CompactionError, match=rf"table {table_name}: table changed by a concurrent delete"):
        compact_table(spark, lake_config, table_name, now_ms=now)
    monkeypatch.undo()
    assert killed["returncode"] != 0  # the CLI reports the job's death for the table
    assert f"table {table_name}: the Spark job died without a result (exit {128 + signal.SIGKILL})" in \
        json.loads(killed["out"])["error"]
    spark.catalog.refreshTable(ref.sql().replace("`", ""))
    assert current_snapshot(spark, ref) != before and CHECKPOINT_PROPERTY not in _props(spark, ref)  # killed there
    assert record_ids(spark, ref) == expected  # the killed MERGE's work, nothing of the run it stopped here
    compact_table(spark, lake_config, table_name, now_ms=now)
    assert record_ids(spark, ref) == expected


def test_invalid_config_names_table_property_and_value_and_touches_nothing(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name, props={"max.compaction.lag.ms": "10", "min.compaction.lag.ms": "20"})
    before_snapshot, before_props, before_ids = current_snapshot(spark, ref), _props(spark, ref), record_ids(spark, ref)
    with pytest.raises(ConfigError) as err:
        compact_table(spark, lake_config, table_name)
    assert str(err.value).startswith(f"table {table_name}: max.compaction.lag.ms=10 is invalid")
    assert current_snapshot(spark, ref) == before_snapshot and _props(spark, ref) == before_props
    assert record_ids(spark, ref) == before_ids


def test_bad_identifier_is_rejected_before_any_work(spark, lake_config):
    with pytest.raises(ConfigError, match="table db.bad-name: table='db.bad-name' is invalid"):
        compact_table(spark, lake_config, "db.bad-name")
    with pytest.raises(ConfigError, match="catalog 'other' is not the configured 'lake'"):
        compact_table(spark, lake_config, "other.db.t")
    with pytest.raises(ConfigError, match="letters/digits/_ only"):
        compact_table(spark, lake_config, "db.t\n")  # a trailing newline is not part of a name


def test_not_a_compacted_table_is_refused(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('cleanup.policy' = 'delete')")
    with pytest.raises(ConfigError, match=f"table {table_name}: cleanup.policy='delete' is invalid: not a compacted"):
        compact_table(spark, lake_config, table_name)


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry run"])
def test_a_copy_on_write_table_is_refused_before_any_work(spark, lake_config, table_name, dry_run):
    ref = _filled(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('write.merge.mode' = 'copy-on-write')")
    before_snapshot, before_ids = current_snapshot(spark, ref), record_ids(spark, ref)
    with pytest.raises(CompactionError, match=f"table {table_name}: write.merge.mode='copy-on-write': the cleaner's "
                                              f"MERGE needs merge-on-read"):
        compact_table(spark, lake_config, table_name, dry_run=dry_run)
    assert current_snapshot(spark, ref) == before_snapshot and record_ids(spark, ref) == before_ids


@pytest.mark.parametrize("props,null_key_every", [({}, 11), ({}, 0), ({"compaction.strategy": "timestamp"}, 0)],
                         ids=["offset, with bad rows", "offset", "timestamp"])
def test_dry_run_reports_the_same_figures_and_commits_nothing(spark, lake_config, table_name, props, null_key_every):
    ref = _filled(spark, lake_config, table_name, props, null_key_every=null_key_every)
    now = int(time.time() * 1000)
    before = (current_snapshot(spark, ref), _props(spark, ref), record_ids(spark, ref))
    dry = compact_table(spark, lake_config, table_name, now_ms=now, dry_run=True)
    assert (current_snapshot(spark, ref), _props(spark, ref), record_ids(spark, ref)) == before
    assert not spark.catalog.tableExists(ref.sql("__quarantine").replace("`", ""))
    real = compact_table(spark, lake_config, table_name, now_ms=now)
    figures = ["records_read", "records_kept", "removed_superseded", "removed_expired_tombstones", "quarantined",
               "anomalous", "dirty_records_in_run", "checkpoint", "bytes_read"]
    assert {f: dry[f] for f in figures} == {f: real[f] for f in figures}
    assert dry["status"] == "dry_run" and real["status"] == "committed" and real["committed_snapshot_id"]


def test_a_table_that_breaks_mid_run_fails_loudly_with_its_name(spark, lake_config, table_name):
    ref = _filled(spark, lake_config, table_name)
    victim = spark.sql(f"SELECT file_path FROM {ref.meta('files')} LIMIT 1").collect()[0][0]
    Path(victim.replace("file:", "")).unlink()  # a data file vanishes under the table
    before = current_snapshot(spark, ref)
    with pytest.raises(CompactionError, match=f"^table {table_name}: "):
        compact_table(spark, lake_config, table_name)
    assert current_snapshot(spark, ref) == before
    failed = spark.table(lake_config.history_table).where(f"table_name = '{table_name}' AND status = 'failed'")
    assert failed.count() == 1 and table_name in failed.collect()[0]["error"]


def test_cli_submits_one_application_for_several_tables_and_prints_one_json_line_each(config_file, spark, lake_config,
                                                                                      table_name):
    """`lakecleaner compact` over several tables, a missing one among them: one line per table in the
    order given, the missing one's naming it (exit 1), the others' figures as the model's."""
    tables = [f"{table_name}_a", f"{table_name}_missing", f"{table_name}_b"]
    refs = {tables[0]: _filled(spark, lake_config, tables[0], {"compaction.strategy": "timestamp"}),
            tables[2]: _filled(spark, lake_config, tables[2])}
    now = int(time.time() * 1000)  # after the appends: records appended after a run's now wait for the next
    out = subprocess.run([sys.executable, "-m", "lakecleaner.cli", "--config", str(config_file), "compact", *tables,
                          "--dry-run", "--now-ms", str(now)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]  # the missing table failed
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 3 and not any(line.startswith(RESULT_MARKER) for line in lines)
    results = [json.loads(line) for line in lines]
    assert [(r["table"], r["status"]) for r in results] == [
        (tables[0], "dry_run"), (tables[1], "failed"), (tables[2], "dry_run")]
    assert results[1]["error"].startswith(f"table {tables[1]}: cannot load table")
    for stats in results[0], results[2]:
        for figure in ("records_read", "records_kept", "removed_superseded", "removed_expired_tombstones", "quarantined",
                       "anomalous", "bytes_read", "bytes_written", "files_rewritten", "duration_ms", "checkpoint"):
            assert figure in stats
        _, model = _expected(spark, lake_config, stats["table"], now)
        assert stats["removed_superseded"] == model.stats["removed_superseded"] > 0
        assert CHECKPOINT_PROPERTY not in _props(spark, refs[stats["table"]])  # a dry run commits nothing


def test_a_late_arrival_inside_the_run_range_stops_an_offset_map_run(spark, lake_config, table_name, monkeypatch):
    """The offset map's MERGE reads the table as it is at commit time: a record landing meanwhile
    at an offset the run covers was never examined, so the run must not remove it unseen."""
    ref = _filled(spark, lake_config, table_name)
    before = record_ids(spark, ref)
    original = guards.check_no_concurrent_cleaner

    def late_arrival_first(spark_, ref_, snapshot):
        # partition 0 holds even offsets only: 1 is free there, and below the run's end
        append(spark, ref, [{"key": "k1", "offset": 1, "partition": 0, "value": "late"}])
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", late_arrival_first)
    with pytest.raises(CompactionError, match=rf"table {table_name}: 1 data file\(s\) appended during the run may "
                                              rf"hold offsets inside the run's range.*nothing committed"):
        compact_table(spark, lake_config, table_name, now_ms=int(time.time() * 1000))
    assert record_ids(spark, ref) == sorted(before + [(0, 1)])
    assert CHECKPOINT_PROPERTY not in _props(spark, ref)

    monkeypatch.undo()
    now = int(time.time() * 1000) + 1
    expected, _ = _expected(spark, lake_config, table_name, now)
    compact_table(spark, lake_config, table_name, now_ms=now)
    assert record_ids(spark, ref) == expected


def test_a_checkpoint_past_the_log_end_is_reset_and_the_partition_cleaned_from_its_start(spark, lake_config,
                                                                                          table_name):
    """Partition 0 is truncated and its topic recreated (offsets from 0 again): the checkpoint
    claims it cleaned through offset 58. The run resets partition 0, as Kafka resets a cleaner
    offset past the log end, and compacts it from its start; partition 1 keeps its checkpoint."""
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 60))
    compact_table(spark, lake_config, table_name)
    spark.sql(f"DELETE FROM {ref.sql()} WHERE `partition` = 0")
    append(spark, ref, [r for r in _rows(0, 20) if r["partition"] == 0])
    now = int(time.time() * 1000)
    records, tc = read_model_records(spark, lake_config, table_name)
    stored = Checkpoint.from_json(_props(spark, ref)[CHECKPOINT_PROPERTY])
    assert stored.offsets[0] == 58 and stored.offsets[1] == 59
    outcome = compact(records, Checkpoint(offsets={1: 59}, history=[(at, {1: o[1]}, n) for at, o, n in stored.history]),
                      tc, now)
    stats = compact_table(spark, lake_config, table_name, now_ms=now)
    assert stats["checkpoint_reset"] == [0] and stats["status"] == "committed"
    assert record_ids(spark, ref) == sorted(r.id for r in outcome.survivors(records))
    assert len([i for i in record_ids(spark, ref) if i[0] == 0]) == 5  # the five keys of the refilled partition
    assert Checkpoint.from_json(_props(spark, ref)[CHECKPOINT_PROPERTY]).offsets == {0: 18, 1: 59}


def test_columns_named_in_another_case_are_read_by_their_schema_spelling(spark, lake_config, table_name):
    """compaction.offset.column=OFFSET for a column `offset`: Iceberg's metrics are keyed by the
    schema's spelling, so a run that looked them up as configured saw no offset bounds at all."""
    props = {"compaction.offset.column": "OFFSET", "compaction.key.columns": "KEY",
             "compaction.partition.column": "Partition"}
    ref = create_compacted_table(spark, lake_config, table_name, props)
    append(spark, ref, _rows(0, 30))
    compact_table(spark, lake_config, table_name)
    append(spark, ref, _rows(30, 30))
    now = int(time.time() * 1000)
    expected, _ = _expected(spark, lake_config, table_name, now)
    stats = compact_table(spark, lake_config, table_name, now_ms=now)
    assert stats["status"] == "committed" and record_ids(spark, ref) == expected
    assert stats["files_rewritten"] + stats["delete_files_written"] > 0 and stats["records_read"] < 60


def test_the_quarantine_follows_the_sources_schema(spark, lake_config, table_name):
    """A source column added after the quarantine table was created: later bad rows carry it into
    quarantine instead of failing every run that has bad rows."""
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 10, null_key_every=5))
    compact_table(spark, lake_config, table_name)
    spark.sql(f"ALTER TABLE {ref.sql()} ADD COLUMN region string")
    schema = spark.table(ref.sql()).schema
    new = [{"key": None, "offset": 10, "partition": 0, "value": "v", "region": "eu"},
           {"key": "k1", "offset": 11, "partition": 1, "value": "w", "region": "us"}]
    local_frame(spark, [tuple(r.get(f.name) for f in schema.fields) for r in new], schema).writeTo(ref.sql()).append()
    now = int(time.time() * 1000)
    expected, _ = _expected(spark, lake_config, table_name, now)
    stats = compact_table(spark, lake_config, table_name, now_ms=now)
    assert stats["status"] == "committed" and stats["quarantined"] == 1 and record_ids(spark, ref) == expected
    quarantine = spark.table(ref.sql("__quarantine"))
    assert "region" in quarantine.columns
    assert [r["region"] for r in quarantine.where("offset = 10").collect()] == ["eu"]
    assert quarantine.where("region IS NULL").count() == 2  # the earlier rows, from before the column


def test_a_quarantine_created_by_another_cleaner_meanwhile_keeps_its_rows(spark, lake_config, table_name,
                                                                          monkeypatch):
    """Two cleaners on a shared catalog may both find the quarantine missing; the one that creates it
    second must append to it, never replace it (which emptied the rows the first had just copied)."""
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 10, null_key_every=5))
    assert compact_table(spark, lake_config, table_name)["quarantined"] == 2
    append(spark, ref, _rows(10, 10, null_key_every=5))
    # the other cleaner's create lands between this run's look and its create
    monkeypatch.setattr(spark.catalog, "tableExists", lambda *args, **kwargs: False)
    stats = compact_table(spark, lake_config, table_name)
    assert stats["status"] == "committed" and stats["quarantined"] == 2
    quarantined = sorted(r["offset"] for r in spark.table(ref.sql("__quarantine")).select("offset").collect())
    assert quarantined == [0, 5, 10, 15]


def test_a_null_offset_record_appended_during_a_run_is_not_removed_unseen(spark, lake_config, table_name,
                                                                           monkeypatch):
    """A bad record with a null offset leaves by (partition, key, null offset): another record of
    that key with a null offset, appended while the run decides, would match too and be removed
    without ever being copied to quarantine. The run stops instead, though the appended file's
    offset bounds lie past the run's range; the next run quarantines both."""
    ref = _filled(spark, lake_config, table_name, batches=1, per_batch=6)
    append(spark, ref, [{"key": "k1", "offset": None, "partition": 0, "value": "early"}])
    original = guards.check_no_concurrent_cleaner

    def late_null_offset_first(spark_, ref_, snapshot):
        append(spark, ref, [{"key": "k1", "offset": None, "partition": 0, "value": "late"},
                            {"key": "k9", "offset": 1000, "partition": 0, "value": "past the run"}])
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", late_null_offset_first)
    with pytest.raises(CompactionError, match=rf"table {table_name}: 1 data file\(s\) appended during the run may "
                                              rf"hold records with a null offset.*nothing committed"):
        compact_table(spark, lake_config, table_name, now_ms=int(time.time() * 1000))
    spark.sql(f"REFRESH TABLE {ref.sql()}")
    assert sorted(r["value"] for r in spark.table(ref.sql()).where("offset IS NULL").collect()) == ["early", "late"]

    monkeypatch.undo()
    assert compact_table(spark, lake_config, table_name, now_ms=int(time.time() * 1000) + 1)["quarantined"] == 2
    quarantined = spark.table(ref.sql("__quarantine")).where("offset IS NULL").collect()
    assert sorted(r["value"] for r in quarantined) == ["early", "late"]
    assert spark.table(ref.sql()).where("offset IS NULL").count() == 0


def test_a_checkpoint_written_before_the_table_was_partitioned_is_reset(spark, lake_config, table_name):
    """The table was cleaned as one log (it has no column named by compaction.partition.column),
    then set to be cleaned per partition (``part``). The old checkpoint's "-" entry counts offsets
    of a log that no longer exists: read as a bound on every partition, records past a partition's
    own checkpoint could be taken as clean and dirty at once, and a retained "-" as partition 0's.
    It is reset, and the table cleaned per partition from its start, as the reference model does
    from no checkpoint."""
    schema = KAFKA_SCHEMA.replace("`partition` int", "`part` int")
    rows = lambda start, n: [{**{k: v for k, v in r.items() if k != "partition"}, "part": r["partition"]}  # noqa: E731
                             for r in _rows(start, n)]
    ref = create_compacted_table(spark, lake_config, table_name, schema=schema, partition_by=None)
    append(spark, ref, rows(0, 40), schema)
    compact_table(spark, lake_config, table_name)
    assert set(Checkpoint.from_json(_props(spark, ref)[CHECKPOINT_PROPERTY]).offsets) == {None}
    spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('compaction.partition.column' = 'part')")
    append(spark, ref, rows(40, 60), schema)
    now = int(time.time() * 1000)
    records, tc = read_model_records(spark, lake_config, table_name)
    assert tc.partition_column == "part"
    outcome = compact(records, Checkpoint(), tc, now)
    stats = compact_table(spark, lake_config, table_name, now_ms=now)
    assert stats["checkpoint_reset"] == ["-"] and stats["status"] == "committed"
    survivors = sorted((r["part"], r["offset"]) for r in spark.table(ref.sql()).select("part", "offset").collect())
    assert survivors == sorted(r.id for r in outcome.survivors(records))
    assert stats["removed_superseded"] == outcome.stats["removed_superseded"]
    assert set(Checkpoint.from_json(_props(spark, ref)[CHECKPOINT_PROPERTY]).offsets) == {0, 1}
