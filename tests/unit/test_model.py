"""The reference model on the hand-worked cases (synthetic append times, no Spark)."""
import pytest

from cases import CASES, DAY, SCHEMA_COLUMNS, E, r, resolve_now
from lakecleaner.config import resolve_table
from lakecleaner.model import compact
from lakecleaner.rules import Checkpoint
from lakecleaner.tables import record_from_row

BASE_MS = 1_700_000_000_000


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_model_on_hand_worked_case(case):
    tc = resolve_table("t.case", case.props, SCHEMA_COLUMNS)
    records, batch_times, run_nows, ckpt, appended = [], [], [], Checkpoint(), 0
    for i, run in enumerate(case.runs):
        last = len(case.batches) - 1 if run.after_batch is None else run.after_batch
        while appended <= last:
            batch_times.append(BASE_MS + appended * 10_000)
            records += [record_from_row(row, tc, batch_times[-1]) for row in case.batches[appended]]
            appended += 1
        now = resolve_now(run.now, batch_times, run_nows)
        run_nows.append(now)
        outcome = compact(records, ckpt, tc, now)
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
