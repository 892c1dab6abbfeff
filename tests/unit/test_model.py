"""The reference model on the hand-worked cases (synthetic append times, no Spark)."""
import pytest

from cases import CASES, COMMIT_LAG_MS, DAY, SCHEMA_COLUMNS, E, r, resolve_now
from lakecleaner.core.config import resolve_table
from lakecleaner.core.model import compact
from lakecleaner.core.rules import Checkpoint, first_clean_time
from lakecleaner_dev.tables import record_from_row

BASE_MS = 1_700_000_000_000


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_model_on_hand_worked_case(case):
    tc = resolve_table("t.case", case.props, SCHEMA_COLUMNS)
    records, batch_times, run_nows, clean_times, ckpt, appended = [], [], [], [], Checkpoint(), 0
    for i, run in enumerate(case.runs):
        last = len(case.batches) - 1 if run.after_batch is None else run.after_batch
        while appended <= last:
            batch_times.append(BASE_MS + appended * 10_000)
            records += [record_from_row(row, tc, batch_times[-1]) for row in case.batches[appended]]
            appended += 1
        now = resolve_now(run.now, batch_times, run_nows, clean_times)
        run_nows.append(now)
        outcome = compact(records, ckpt, tc, now, now + COMMIT_LAG_MS)
        clean_times.append(None if outcome.stats.get("skipped") else first_clean_time(now, now + COMMIT_LAG_MS))
        assert outcome.removed == run.removed, f"run {i}"
        assert set(outcome.quarantined) == run.quarantined, f"run {i}"
        records = outcome.survivors(records)
        assert {x.id for x in records} == run.survivors, f"run {i}"
        ckpt = outcome.checkpoint


def test_anomalous_versions_are_counted():
    case = next(c for c in CASES if c.name == "header_last_occurrence_malformed_and_missing")
    tc = resolve_table("t.case", case.props, SCHEMA_COLUMNS)
    records = [record_from_row(row, tc, BASE_MS) for row in case.batches[0]]
    assert compact(records, Checkpoint(), tc, BASE_MS + 1).stats["anomalous"] == 4  # offsets 2, 3, 4, 5


def test_rerunning_a_run_without_its_checkpoint_gives_the_same_table():
    """Rule 8: a run that committed but failed to record its checkpoint is safe to repeat."""
    case = next(c for c in CASES if c.name == "kip87_null_value_with_flag_false_is_a_live_record")
    tc = resolve_table("t.case", case.props, SCHEMA_COLUMNS)
    records = [record_from_row(row, tc, BASE_MS) for row in case.batches[0]]
    first = compact(records, Checkpoint(), tc, BASE_MS + 1)
    survivors = first.survivors(records)
    again = compact(survivors, Checkpoint(), tc, BASE_MS + 1)  # checkpoint lost: all dirty again
    assert again.removed == {} and again.quarantined == {}
    assert again.checkpoint.offsets == first.checkpoint.offsets


@pytest.mark.parametrize("wait, gone", [(DAY - 1, False), (DAY, True)])
def test_model_removes_a_tombstone_at_the_kip534_horizon(wait, gone):
    """Kafka retains a cleaned tombstone while now < first clean + delete.retention.ms (deleteHorizonMs)."""
    tc = resolve_table("t.case", {"delete.retention.ms": str(DAY), "compaction.retain.log.end.record": "false"},
                       SCHEMA_COLUMNS)
    records = [record_from_row(row, tc, BASE_MS) for row in (r(0, "a", "x"), r(1, "a", None), r(2, "b", "y"))]
    first = compact(records, Checkpoint(), tc, BASE_MS + 1)  # cleans the tombstone first
    assert set(first.removed) == {(0, 0)}
    now = BASE_MS + 1 + wait
    later = compact(first.survivors(records), first.checkpoint, tc, now)
    assert later.removed == ({(0, 1): E} if gone else {})
    assert later.stats["removed_expired_tombstones"] == int(gone)
    assert first.checkpoint.tombstones_due(now, tc.delete_retention_ms) is gone  # the scheduler agrees


def test_a_record_with_no_place_in_a_log_is_never_kept_as_its_log_end():
    """Rule 6 keeps a keyless log end; a null offset or (partitioned) a null partition puts a record
    at no position of any partition's log, so it is quarantined and removed, and ends no log."""
    tc = resolve_table("t.case", {}, SCHEMA_COLUMNS)
    rows = [r(0, "a"), r(1, "a"), r(None, "b"), r(9, "c", partition=None), r(0, None, partition=1)]
    records = [record_from_row(row, tc, BASE_MS) for row in rows]
    out = compact(records, Checkpoint(), tc, BASE_MS + 1)
    assert set(out.quarantined) == {(0, None), (None, 9), (1, 0)}
    assert out.removed == {(0, 0): "superseded"}
    assert {x.id for x in out.survivors(records)} == {(0, 1), (1, 0)}  # (1, 0): partition 1's log end
    assert out.checkpoint.retained == {1: 0}


def test_a_kept_keyless_log_end_is_inside_the_checkpoint_unless_a_dirty_record_below_waits():
    """The run copies the keyless log end to quarantine and keeps it; its checkpoint covers it, or the
    partition would read as dirty for ever. A record below it that the run could not take (younger
    than min.compaction.lag.ms) keeps the checkpoint below both."""
    from lakecleaner.core.model import Record

    tc = resolve_table("t.t", {"min.compaction.lag.ms": "1000"}, SCHEMA_COLUMNS)
    old, young = 0, 10_000
    recs = [Record(0, 0, ("a",), old), Record(0, 1, ("a",), old), Record(0, 2, None, old)]
    out = compact(recs, Checkpoint(), tc, now_ms=5_000)
    assert out.checkpoint.offsets == {0: 2} and (0, 2) in out.quarantined
    assert [r.id for r in out.survivors(recs)] == [(0, 1), (0, 2)]
    waiting = [*recs[:2], Record(0, 2, ("b",), young), Record(0, 3, None, old)]
    out = compact(waiting, Checkpoint(), tc, now_ms=5_000)
    assert out.checkpoint.offsets == {0: 1}  # offset 2 is too young to take: not past it
