"""Backfills beside scheduled runs: a run whose now lies behind the table's last run takes nothing and
says why; a run that another cleaner beat to the commit yields, uncounted; an erasure request is
carried out by one run at a time. (The horizon counted from the real clean: tests/cases.py.)"""
import time

import pytest

from lakecleaner.spark import guards
from lakecleaner.spark.batch import BatchRequest, clean_tables
from lakecleaner.spark.engine import compact_table
from lakecleaner.core.erasure_requests import IN_PROGRESS, requests_table
from lakecleaner.spark.erasure_requests import carry_out, claim, enqueue, pending_requests
from lakecleaner.spark.forget import Attribution, ForgetRequest
from lakecleaner.core.history import read_history
from lakecleaner.core.state import StateStore
from lakecleaner_dev.tables import append, create_compacted_table, stored_checkpoint

pytestmark = pytest.mark.spark


def _rows(start, n, keys=3):
    return [{"key": f"k{i % keys}", "offset": i, "partition": 0, "value": f"v{i}"} for i in range(start, start + n)]


def test_a_run_behind_the_tables_last_now_takes_nothing_and_says_why(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name, {"compaction.max.records.per.run": "3"})
    append(spark, ref, _rows(0, 6))
    now = int(time.time() * 1000)
    first = compact_table(spark, lake_config, table_name, now_ms=now)  # the budget: half of it
    assert first["status"] == "committed" and stored_checkpoint(spark, ref).as_of_ms == now
    before = sorted(r["offset"] for r in spark.table(ref.sql()).collect())
    late = compact_table(spark, lake_config, table_name, now_ms=now - 60_000)  # a backfill's earlier interval
    assert late["status"] == "skipped" and "already cleaned as of a later time" in late["reason"]
    assert sorted(r["offset"] for r in spark.table(ref.sql()).collect()) == before
    assert len(stored_checkpoint(spark, ref).history) == 1  # no older entry added
    [outcome] = clean_tables(spark, lake_config, BatchRequest((table_name,), now - 60_000, record_outcomes=True))
    assert outcome.status == "skipped" and "later time" in outcome.error and "maintain" not in outcome.steps
    assert StateStore(lake_config).get(table_name).consecutive_failures == 0


def test_a_now_before_1970_is_refused_before_anything_is_removed(spark, lake_config, table_name):
    """Its checkpoint would be one the cleaner refuses to read: the table would fail every later run."""
    from lakecleaner.core.table import CompactionError

    ref = create_compacted_table(spark, lake_config, table_name, {"compaction.retain.log.end.record": "false"})
    append(spark, ref, _rows(0, 6))
    with pytest.raises(CompactionError, match=f"table {table_name}: now -1 is before 1970"):
        compact_table(spark, lake_config, table_name, now_ms=-1)
    assert stored_checkpoint(spark, ref).as_of_ms is None and spark.table(ref.sql()).count() == 6


@pytest.mark.parametrize("removes", [False, True])
def test_a_checkpoint_another_run_moved_since_the_run_read_it_is_never_written_over(spark, lake_config, table_name,
                                                                                  monkeypatch, removes):
    """Another run (the scheduled one beside a backfill) that removed nothing moves the checkpoint
    and commits no snapshot, so no pre-commit check sees it: this run's checkpoint, read before,
    must not be written over it, which would move it back. This run's commit stands (whether its
    MERGE removed anything or not), the other's checkpoint is kept and reported."""
    from lakecleaner.core.config import CHECKPOINT_PROPERTY
    from lakecleaner.core.rules import Checkpoint

    ref = create_compacted_table(spark, lake_config, table_name, {"compaction.retain.log.end.record": "false"})
    append(spark, ref, _rows(0, 6, keys=3 if removes else 6))
    now = int(time.time() * 1000)  # the backfill's now, after the appends
    theirs = Checkpoint().advanced(now + 50, {0: 4}, {}, 86_400_000, committed_ms=now + 50)  # cut short at offset 4
    original = guards.check_no_concurrent_cleaner

    def another_run_writes_its_checkpoint(spark_, ref_, snapshot):
        spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ('{CHECKPOINT_PROPERTY}' = '{theirs.to_json()}')")
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", another_run_writes_its_checkpoint)
    time.sleep(0.1)
    [outcome] = clean_tables(spark, lake_config, BatchRequest((table_name,), now, steps=("compact",)))
    monkeypatch.undo()
    assert stored_checkpoint(spark, ref).to_json() == theirs.to_json()  # not moved back to the backfill's now
    assert outcome.status == "ok" and outcome.steps["compact"]["removed_superseded"] == (3 if removes else 0)
    assert outcome.steps["compact"]["checkpoint"] == {"0": 4}  # the checkpoint kept, as reported


def test_a_run_that_committed_nothing_yields_to_a_checkpoint_moved_since_it_read_it(monkeypatch):
    """The ranked path commits no MERGE when it removes nothing: then the other run's checkpoint
    is all that changed, and this run yields, as when another cleaner beats it to a commit."""
    from types import SimpleNamespace

    from lakecleaner.core.rules import Checkpoint
    from lakecleaner.core.table import ConcurrentCommitError, TableRef
    from lakecleaner.spark import engine

    monkeypatch.setattr(engine, "swap_property", lambda *args: False)
    start = SimpleNamespace(ref=TableRef("lake", "t", "x"), ckpt_property=None)
    with pytest.raises(ConcurrentCommitError, match="another run moved the checkpoint.*nothing committed"):
        engine._write_checkpoint(None, start, Checkpoint(offsets={0: 1}), False, None)


def test_a_run_another_cleaner_beat_to_the_commit_yields_and_is_not_counted(spark, lake_config, table_name,
                                                                           monkeypatch):
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 6))
    original = guards.check_no_concurrent_cleaner
    state = {"done": False}

    def another_run_commits_first(spark_, ref_, snapshot):
        if not state["done"]:
            state["done"] = True
            compact_table(spark, lake_config, table_name)  # a scheduled run beside the backfill's
        return original(spark_, ref_, snapshot)

    monkeypatch.setattr(guards, "check_no_concurrent_cleaner", another_run_commits_first)
    request = BatchRequest((table_name,), int(time.time() * 1000), record_outcomes=True)
    [outcome] = clean_tables(spark, lake_config, request)
    monkeypatch.undo()
    assert outcome.status == "yielded" and outcome.failed_step == "compact", outcome
    assert "nothing committed" in outcome.error
    assert StateStore(lake_config).get(table_name).consecutive_failures == 0  # not towards uncleanable
    statuses = [r["status"] for r in read_history(lake_config, table_name, newest_first=False)]
    assert statuses[-2:] == ["committed", "yielded"]
    assert sorted(r["key"] for r in spark.table(ref.sql()).collect()) == ["k0", "k1", "k2"]  # cleaned once


def test_one_erasure_request_is_carried_out_by_one_run_and_a_dead_claim_is_taken_over(spark, lake_config, table_name):
    ref = create_compacted_table(spark, lake_config, table_name)
    append(spark, ref, _rows(0, 6))
    now = int(time.time() * 1000)
    request = ForgetRequest(table_name, ({"key": "k1"},))
    enqueue(spark, lake_config, request, now)
    [pending] = [r for r in pending_requests(spark, lake_config, now_ms=now) if r.request_id == request.request_id]
    assert claim(spark, lake_config, pending.request_id, pending.table, Attribution("scheduled__a"), now)  # a scheduled run has it
    other = carry_out(spark, lake_config, pending, now, 60_000, Attribution("backfill__b"), False)
    assert other["status"] == "yielded" and spark.table(ref.sql()).where("key = 'k1'").count() == 2
    assert not [r for r in pending_requests(spark, lake_config, now_ms=now) if r.request_id == request.request_id]
    # the claimer died: once its lease has passed, the next run takes the request over
    spark.sql(f"UPDATE {requests_table(lake_config)} SET processed_at = TIMESTAMP '2000-01-01 00:00:00' "
              f"WHERE request_id = '{request.request_id}' AND status = '{IN_PROGRESS}'")
    [again] = [r for r in pending_requests(spark, lake_config, now_ms=now) if r.request_id == request.request_id]
    done = carry_out(spark, lake_config, again, now, 60_000, Attribution("backfill__b"), False)
    assert done["status"] == "forgotten" and spark.table(ref.sql()).where("key = 'k1'").count() == 0
