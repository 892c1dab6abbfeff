"""One answer to "is this data file dirty?" (datafiles.judge), and its three callers agreeing:
evaluation's dirty ratio, the run's planner, maintenance's clean-part rewrite."""
import pytest

from lakecleaner.core.datafiles import Bounds, DataFile, Verdict, file_log_ends, judge
from lakecleaner.core.evaluate import TableMetadata, evaluate_table
from lakecleaner.core.rules import Checkpoint
from lakecleaner.spark.files import bytes_scanned, clean_version_ceiling, dirty_records_bound
from lakecleaner.spark.maintenance import clean_rewrite_cuts

COLUMNS = {"key": "string", "offset": "bigint", "partition": "int", "value": "string"}
NOW = 10_000_000


def _file(p_lo, p_hi, o_lo, o_hi, size=100) -> DataFile:
    return DataFile(size=size, offsets=Bounds(o_lo, o_hi), partitions=Bounds(p_lo, p_hi), records=10,
                    versions=Bounds(1, 7), version_nulls=0)


def test_each_partition_the_file_may_hold_gets_a_verdict():
    j = judge(_file(0, 2, 5, 15), {0: 20, 1: 10, 2: 4, 7: 99}, partitioned=True)
    assert j.verdicts == {0: Verdict.CLEAN, 1: Verdict.STRADDLING, 2: Verdict.DIRTY}
    assert not j.unseen and j.may_be_dirty and j.may_be_clean


def test_a_partition_the_checkpoint_has_not_seen_is_wholly_dirty():
    j = judge(_file(0, 2, 5, 15), {0: 20, 2: 20}, partitioned=True)
    assert j.unseen and j.may_be_dirty and j.may_be_clean and j.dirty_fraction == 1.0
    alone = judge(_file(3, 3, 0, 1), {0: 20}, partitioned=True)
    assert alone.unseen and alone.may_be_dirty and not alone.may_be_clean


def test_a_file_is_clean_only_if_every_partition_it_may_hold_is_covered_through_its_upper_offset():
    assert not judge(_file(0, 1, 5, 15), {0: 20, 1: 15}, True).may_be_dirty
    assert judge(_file(0, 1, 5, 15), {0: 20, 1: 14}, True).may_be_dirty
    assert judge(_file(None, None, 5, 15), {0: 20, 1: 20}, True).may_be_dirty  # bounds unknown: any partition
    assert judge(_file(0, 0, 5, None), {0: 20}, True).may_be_dirty  # no upper offset


def test_an_unpartitioned_file_is_judged_against_the_one_log():
    f = _file(None, None, 5, 15)
    assert judge(f, {None: 15}, False).verdicts == {None: Verdict.CLEAN}
    assert judge(f, {None: 9}, False).dirty_fraction == pytest.approx(6 / 11)
    assert judge(f, {}, False).dirty_fraction == 1.0
    # checkpoint entries of the other layout vouch for nothing (Checkpoint.reset_other_layout)
    assert judge(f, {0: 99}, False).unseen and judge(_file(0, 0, 5, 15), {None: 99}, True).unseen


def test_the_dirty_fraction_is_that_of_the_dirtiest_partition_the_file_may_hold():
    assert judge(_file(0, 1, 0, 9), {0: 4, 1: 9}, True).dirty_fraction == 0.5
    assert judge(_file(0, 0, 0, 9), {0: 9}, True).dirty_fraction == 0.0
    assert judge(_file(0, 0, None, 9), {0: 9}, True).dirty_fraction == 1.0  # unknown: all of it


def test_the_one_partition_a_file_holds():
    assert Bounds(3, 3).single == 3 and Bounds(3, 4).single is None and Bounds(None, None).single is None
    assert file_log_ends([_file(0, 0, 0, 9), _file(0, 0, 10, 12), _file(1, 1, 0, 3)], True) == {0: 12, 1: 3}
    assert file_log_ends([_file(0, 1, 0, 9)], True) is None  # spans partitions: no end known
    assert file_log_ends([_file(None, None, 0, 9)], False) == {None: 9}


def test_a_late_file_may_hold_offsets_inside_a_run_range():
    assert _file(0, 0, 5, 9).may_hold_offsets_through({0: 5}) and not _file(0, 0, 6, 9).may_hold_offsets_through({0: 5})
    assert not _file(1, 2, 0, 9).may_hold_offsets_through({0: 5})
    assert _file(None, None, 6, 9).may_hold_offsets_through({3: 6})  # unknown partitions: any


# ---------------------------------------------------------------- the callers agree
CKPT = {0: 20, 1: 20, 3: 20}
SPANS_AN_UNSEEN = _file(1, 3, 5, 6)  # may hold partition 2, which the checkpoint has not seen
SPANS_SEEN_CLEAN = _file(0, 1, 5, 6)  # both partitions cleaned past its offsets


def _evaluation_dirty_bytes(f: DataFile) -> int:
    ev = evaluate_table(TableMetadata("t.x", {"cleanup.policy": "compact",
                                              "lakecleaner.checkpoint": Checkpoint(offsets=CKPT).to_json()},
                                      COLUMNS, [f]), NOW)
    return ev.cleanable_bytes + ev.uncleanable_bytes


def _rewrite_may_select(f: DataFile) -> bool:
    """Whether Iceberg's metrics let the clean-part rewrite (OR of partition = p AND offset <= cut)
    select the file."""
    cuts = clean_rewrite_cuts(CKPT, [f], partitioned=True)
    return any(f.partitions.lower <= p <= f.partitions.upper and f.offsets.lower <= cut for p, cut in cuts.items())


@pytest.mark.parametrize("f,dirty", [(SPANS_AN_UNSEEN, True), (SPANS_SEEN_CLEAN, False)])
def test_evaluation_the_planner_and_maintenance_agree_on_a_file_spanning_partitions(f, dirty):
    assert judge(f, CKPT, partitioned=True).may_be_dirty == dirty
    assert _evaluation_dirty_bytes(f) == (f.size if dirty else 0)  # a dirty file of an unseen partition: all of it
    assert (dirty_records_bound([f], CKPT, unpartitioned=False) > 0) == dirty  # the planner's dirty scan
    assert bytes_scanned([f], CKPT, unpartitioned=False) == f.size  # clean records in 0, 1 or 3 either way
    assert clean_version_ceiling([f], CKPT, unpartitioned=False) == 7
    assert _rewrite_may_select(f) == (not dirty)  # maintenance re-dates no dirty record
