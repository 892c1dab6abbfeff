"""Evaluation rules on synthetic metadata (no Spark, no files)."""
import pytest

from lakecleaner.core.config import LONG_MAX
from lakecleaner.core.datafiles import Bounds, DataFile
from lakecleaner.core.evaluate import TableMetadata, cleaning_order, evaluate_table, format_table
from lakecleaner.core.rules import Checkpoint
from lakecleaner.core.scheduler import plan

COLUMNS = {"key": "string", "offset": "bigint", "partition": "int", "value": "string", "tombstone": "boolean"}
NOW = 10_000_000


def meta(files, props=None, ckpt=None, table="t.x"):
    properties = {"cleanup.policy": "compact", **(props or {})}
    if ckpt is not None:
        properties["lakecleaner.checkpoint"] = ckpt.to_json()
    return TableMetadata(table, properties, COLUMNS, files)


def f(size, lo, hi, added, p=0):
    """A data file of partition ``p``, or of partitions p[0] to p[1]."""
    partitions = Bounds(*p) if isinstance(p, tuple) else Bounds(p, p)
    return DataFile(size=size, offsets=Bounds(lo, hi), partitions=partitions, appended_at_ms=added)


def test_never_cleaned_table_is_all_dirty():
    ev = evaluate_table(meta([f(100, 0, 9, 0)]), NOW)
    assert (ev.clean_bytes, ev.cleanable_bytes, ev.dirty_ratio, ev.eligible) == (0, 100, 1.0, True)


def test_dirty_ratio_against_min_cleanable_dirty_ratio():
    ck = Checkpoint(offsets={0: 9})
    files = [f(300, 0, 9, 0), f(100, 10, 19, 0)]
    ev = evaluate_table(meta(files, ckpt=ck), NOW)
    assert ev.clean_bytes == 300 and ev.cleanable_bytes == 100 and ev.dirty_ratio == 0.25
    assert not ev.eligible and "0.25 <= min.cleanable.dirty.ratio 0.5" in ev.reason
    ev = evaluate_table(meta(files, {"min.cleanable.dirty.ratio": "0.2"}, ck), NOW)
    assert ev.eligible and "dirty ratio 0.25 > min.cleanable.dirty.ratio 0.2" in ev.reason


def test_lag_boundary_young_data_is_uncleanable_and_out_of_the_ratio():
    ck = Checkpoint(offsets={0: 9})
    props = {"min.compaction.lag.ms": "1000"}
    at_lag = evaluate_table(meta([f(100, 0, 9, 0), f(100, 10, 19, NOW - 1000)], props, ck), NOW)
    assert at_lag.cleanable_bytes == 100 and at_lag.uncleanable_bytes == 0  # exactly the lag: old enough
    young = evaluate_table(meta([f(100, 0, 9, 0), f(100, 10, 19, NOW - 999)], props, ck), NOW)
    assert young.cleanable_bytes == 0 and young.uncleanable_bytes == 100 and young.dirty_ratio == 0
    assert young.reason == "dirty data is younger than min.compaction.lag.ms"


def test_must_clean_ratio_and_compaction_delay_kip354():
    ck = Checkpoint(offsets={0: 9})
    props = {"max.compaction.lag.ms": "5000", "min.cleanable.dirty.ratio": "0.99"}
    files = [f(900, 0, 9, 0), f(50, 10, 14, NOW - 7000), f(50, 15, 19, NOW - 5000)]
    ev = evaluate_table(meta(files, props, ck), NOW)
    assert ev.must_clean_bytes == 50  # exactly max lag is not past it
    assert ev.must_clean_ratio == pytest.approx(50 / 1000)
    assert ev.max_compaction_delay_ms == 2000
    assert ev.eligible and ev.reason.startswith("must clean")
    none = evaluate_table(meta(files, {"min.cleanable.dirty.ratio": "0.99"}, ck), NOW)
    assert none.max_compaction_lag_ms == LONG_MAX and none.must_clean_ratio == 0 and not none.eligible


def test_straddling_file_is_prorated_and_partitions_are_separate():
    ck = Checkpoint(offsets={0: 4, 1: 9})
    files = [f(100, 0, 9, 0, p=0), f(100, 0, 9, 0, p=1), f(100, 0, 9, 0, p=2)]
    ev = evaluate_table(meta(files, ckpt=ck), NOW)
    assert ev.clean_bytes == 50 + 100 and ev.cleanable_bytes == 50 + 100  # p2 never cleaned


def test_mixed_partition_file_uses_the_least_cleaned_partition():
    ck = Checkpoint(offsets={0: 4, 1: 9})
    ev = evaluate_table(meta([f(100, 0, 9, 0, p=(0, 1))], ckpt=ck), NOW)
    assert ev.cleanable_bytes == 50
    # bounds unknown: it may hold a partition the checkpoint has not seen, wholly dirty
    unknown = evaluate_table(meta([f(100, 0, 9, 0, p=None)], ckpt=ck), NOW)
    assert unknown.cleanable_bytes == 100


def test_tombstones_due_make_a_clean_table_eligible():
    ck = Checkpoint(offsets={0: 9}, history=[(NOW - 2000, {0: 9}, 3)])
    files = [f(100, 0, 9, 0)]
    ev = evaluate_table(meta(files, {"delete.retention.ms": "1000"}, ck), NOW)
    assert ev.tombstones_due and ev.eligible and ev.dirty_ratio == 0
    # KIP-534: due once now >= first clean + delete.retention.ms, so at exactly the horizon too
    at_horizon = evaluate_table(meta(files, {"delete.retention.ms": "2000"}, ck), NOW)
    assert at_horizon.tombstones_due and at_horizon.reason == "tombstones past delete.retention.ms"
    not_yet = evaluate_table(meta(files, {"delete.retention.ms": "2001"}, ck), NOW)
    assert not not_yet.tombstones_due and not not_yet.eligible and not_yet.reason == "clean"


def test_invalid_config_and_uncleanable_rows():
    bad = evaluate_table(meta([], {"compaction.strategy": "bogus"}), NOW)
    assert bad.status == "invalid config" and "table t.x: compaction.strategy='bogus' is invalid" in bad.reason
    marked = evaluate_table(meta([f(100, 0, 9, 0)]), NOW, uncleanable_reason="uncleanable after 3 failed runs")
    assert marked.status == "uncleanable" and not marked.eligible


def test_order_must_clean_first_then_dirty_ratio():
    ck = Checkpoint(offsets={0: 9})
    a = evaluate_table(meta([f(100, 0, 9, 0), f(300, 10, 19, NOW)], ckpt=ck, table="t.a"), NOW)  # ratio .75
    b = evaluate_table(meta([f(100, 0, 9, 0), f(100, 10, 19, 0)], {"max.compaction.lag.ms": "10",
                                                                   "min.cleanable.dirty.ratio": "0.9"},
                            ck, table="t.b"), NOW)  # ratio .5 but must clean
    c = evaluate_table(meta([f(100, 0, 9, 0), f(900, 10, 19, NOW)], ckpt=ck, table="t.c"), NOW)  # ratio .9
    assert [e.table for e in cleaning_order([a, b, c])] == ["t.b", "t.c", "t.a"]
    d = evaluate_table(meta([f(100, 0, 9, 0)], ckpt=ck, table="t.d"), NOW)  # clean
    jobs = plan([a, b, c, d])
    assert [(j.table, j.priority) for j in jobs] == [("t.b", 1), ("t.c", 2), ("t.a", 3)]
    assert [j.table for j in plan([a, b, c, d], only=["t.a", "t.d"])] == ["t.a"]
    assert [j.table for j in plan([a, b, c, d], only=["t.a", "t.d"], force=True)] == ["t.a", "t.d"]
    assert "t.b" in format_table([a, b, c, d]) and "must clean" in format_table([b])


@pytest.mark.parametrize("stored", ["null", "[]", '{"history":[[1]]}', '{"offsets":{"0":"x"}}'])
def test_corrupt_checkpoint_is_that_tables_row_and_the_others_are_evaluated(stored):
    bad = TableMetadata("t.bad", {"cleanup.policy": "compact", "lakecleaner.checkpoint": stored}, COLUMNS,
                        [f(100, 0, 9, 0)])
    ev = evaluate_table(bad, NOW)
    assert ev.status == "invalid checkpoint" and ev.reason.startswith("table t.bad: invalid checkpoint: ")
    assert evaluate_table(meta([f(100, 0, 9, 0)]), NOW).eligible


def test_checkpoint_past_the_log_end_is_reset_and_the_partition_is_dirty_again():
    # partition 0 was truncated and refilled from offset 0; partition 1 is as the checkpoint says
    ck = Checkpoint(offsets={0: 500, 1: 9})
    files = [f(100, 0, 40, 0, p=0), f(100, 0, 9, 0, p=1)]
    ev = evaluate_table(meta(files, ckpt=ck), NOW)
    assert ev.eligible and ev.reason.startswith("checkpoint past the log end of partition(s) 0: reset")
    assert (ev.clean_bytes, ev.cleanable_bytes) == (100, 100)
    # a file of several partitions hides each partition's end: nothing is reset
    mixed = evaluate_table(meta([f(100, 0, 40, 0, p=(0, 1)), *files], ckpt=ck), NOW)
    assert "reset" not in mixed.reason
    # without retain_log_end_record the log end may legitimately be gone: nothing is reset
    free = evaluate_table(meta(files, {"compaction.retain.log.end.record": "false"}, ck), NOW)
    assert "reset" not in free.reason and free.cleanable_bytes == 0


def test_checkpoint_entries_of_the_other_layout_are_reset_as_the_run_resets_them():
    # cleaned as one log through offset 5, then per partition through 40: the "-" entry is stale
    ck = Checkpoint(offsets={None: 5, 0: 40, 1: 40})
    files = [f(100, 0, 40, 0, p=(0, 1)), f(100, 41, 50, 0, p=0)]
    ev = evaluate_table(meta(files, ckpt=ck), NOW)
    assert (ev.clean_bytes, ev.cleanable_bytes) == (100, 100)  # the mixed file is clean by 0's and 1's
    assert ev.eligible and ev.reason.startswith("checkpoint written while the table was unpartitioned")


def test_a_tables_snapshot_retention_that_outlasts_the_bound_is_said_with_the_bound_that_holds():
    plain = evaluate_table(meta([f(100, 0, 9, 0)], {"max.compaction.lag.ms": "3600000"}), NOW)
    assert plain.physical_deletion is None
    aged = evaluate_table(meta([f(100, 0, 9, 0)], {"max.compaction.lag.ms": "3600000",
                                                   "history.expire.max-snapshot-age-ms": "432000000"}), NOW)
    assert "history.expire.max-snapshot-age-ms=432000000" in aged.physical_deletion
    kept = evaluate_table(meta([f(100, 0, 9, 0)], {"history.expire.min-snapshots-to-keep": "5"}), NOW)
    assert "not bounded in time" in kept.physical_deletion
    bad = evaluate_table(meta([f(100, 0, 9, 0)], {"history.expire.min-snapshots-to-keep": "0"}), NOW)
    assert bad.status == "invalid config" and "history.expire.min-snapshots-to-keep" in bad.reason


def test_a_tag_or_branch_older_than_the_bound_is_named_in_the_physical_deletion_note():
    from lakecleaner.core.evaluate import RefSnapshot

    props = {"max.compaction.lag.ms": "60000", "min.compaction.lag.ms": "1000"}
    old = RefSnapshot("audit_2026", "tag", 7, NOW - 61_001)
    young = RefSnapshot("release", "branch", 8, NOW - 60_000)
    ev = evaluate_table(TableMetadata("t.x", {"cleanup.policy": "compact", **props}, COLUMNS, [f(1, 0, 0, 0)],
                                      refs=(old, young)), NOW)
    assert ev.physical_deletion == ("tag 'audit_2026' keeps snapshot 7 (61 s old): records removed since stay "
                                    "reachable while it exists (no bound in time)")
    unbounded = evaluate_table(TableMetadata("t.x", {"cleanup.policy": "compact"}, COLUMNS, [], refs=(old,)), NOW)
    assert unbounded.physical_deletion is None  # no max.compaction.lag.ms: no bound to void


def test_a_table_cleaned_as_of_a_later_now_is_not_eligible_for_an_earlier_interval():
    ck = Checkpoint(offsets={0: 9}, as_of_ms=NOW)
    files = [f(100, 0, 9, 0), f(900, 10, 99, 0)]  # mostly dirty: eligible at NOW
    assert evaluate_table(meta(files, ckpt=ck), NOW).eligible
    late = evaluate_table(meta(files, ckpt=ck), NOW - 1)  # a backfill of the interval before
    assert not late.eligible and "already cleaned as of a later time" in late.reason


# ---------------------------------------------------------------- delete files (issue 37 item 2)
def _delete_entry(version, content, fmt, path, size, records, blob=None):
    from pyiceberg.manifest import DataFile as IcebergDataFile, ManifestEntry, ManifestEntryStatus

    extra = {"content_offset": 4, "content_size_in_bytes": blob} if version == 3 else {}
    df = IcebergDataFile.from_args(_table_format_version=version, content=content, file_path=path, file_format=fmt,
                                   record_count=records, file_size_in_bytes=size, **extra)
    return ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=1, data_file=df)


def _read_deletes(monkeypatch, entries):
    """The delete-file rows evaluation keeps of a delete manifest holding ``entries``."""
    from lakecleaner.core import metadata

    monkeypatch.setattr(metadata, "read_live_entries", lambda io, manifest: entries)
    from lakecleaner.core.deletefiles import DeleteFile, DeleteKind

    return [DeleteFile(DeleteKind(kind), size, records) for kind, size, records in metadata._delete_stats(None, None)]


def test_v2_position_delete_files_count_with_their_whole_size(monkeypatch):
    from pyiceberg.manifest import DataFileContent as C, FileFormat as F

    deletes = _read_deletes(monkeypatch, [_delete_entry(2, C.POSITION_DELETES, F.PARQUET, "a.parquet", 1500, 3),
                                          _delete_entry(2, C.POSITION_DELETES, F.PARQUET, "b.parquet", 1700, 5),
                                          _delete_entry(2, C.EQUALITY_DELETES, F.PARQUET, "c.parquet", 900, 7)])
    files = [DataFile(size=100, offsets=Bounds(0, 9), appended_at_ms=0, records=40)]
    ev = evaluate_table(TableMetadata("t.x", {"cleanup.policy": "compact"}, COLUMNS, files, deletes=deletes), NOW)
    # three delete files (equality deletes count), 4100 bytes; 8 of 40 records deleted (equality rows are not records)
    assert (ev.delete_files, ev.delete_bytes, ev.delete_ratio) == (3, 4100, 0.2)
    assert ev.as_dict()["delete_files"] == 3 and "deletes" in format_table([ev])


def test_v3_deletion_vectors_count_one_each_with_their_blobs_bytes(monkeypatch):
    """Three DVs in one Puffin file are three delete files (Iceberg's total-delete-files), of their
    blobs' bytes (ScanTaskUtil.contentSizeInBytes), not three times the Puffin file's."""
    from pyiceberg.manifest import DataFileContent as C, FileFormat as F

    puffin = [_delete_entry(3, C.POSITION_DELETES, F.PUFFIN, "d.puffin", 1000, n, blob=40 + n) for n in (1, 2, 3)]
    deletes = _read_deletes(monkeypatch, puffin)
    files = [DataFile(size=100, offsets=Bounds(0, 9), appended_at_ms=0, records=60)]
    ev = evaluate_table(TableMetadata("t.x", {"cleanup.policy": "compact"}, COLUMNS, files, deletes=deletes), NOW)
    assert (ev.delete_files, ev.delete_bytes, ev.delete_ratio) == (3, 126, 0.1)


def test_the_rewrite_figure_is_maintenances_ratio_and_threshold():
    from lakecleaner.core.deletefiles import REWRITE_DELETE_RATIO, DeleteFile, DeleteKind, delete_figures

    dv = DeleteFile(DeleteKind.DELETION_VECTOR, 10, 1)
    assert delete_figures([dv] * 2, 10).rewrite_due and delete_figures([dv] * 2, 10).ratio == REWRITE_DELETE_RATIO
    assert not delete_figures([dv], 10).rewrite_due
    assert not delete_figures([DeleteFile(DeleteKind.EQUALITY, 10, 5)], 10).rewrite_due  # no record is counted
    # but it masks records: an erasure's or a finite max.compaction.lag.ms's rewrite has work
    assert delete_figures([DeleteFile(DeleteKind.EQUALITY, 10, 5)], 10).masks_records
    assert delete_figures([dv], 10).masks_records and not delete_figures([], 10).masks_records
    assert delete_figures([dv, DeleteFile(DeleteKind.EQUALITY, 10, 5)], 10).equality_files == 1  # maintenance's pass
    assert delete_figures([dv] * 2, 10).equality_files == 0
    assert delete_figures([], 0).ratio == 0.0


def test_an_evaluation_recorded_before_the_delete_figures_still_reads():
    from lakecleaner.core.scheduler import evaluations_of

    old = {"table": "t.x", "status": "eligible", "reason": "r", "dirty_ratio": 0.5, "eligible": True}
    [ev] = evaluations_of([old])
    assert (ev.delete_files, ev.delete_bytes, ev.delete_ratio) == (0, 0, 0.0)
