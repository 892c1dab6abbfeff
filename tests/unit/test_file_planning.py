"""How the engine sizes and bounds its dirty scan, from Iceberg file statistics alone."""
import pytest

from lakecleaner.core.config import READ_SPLIT_SETTINGS, ConfigError, read_split, resolve_table
from lakecleaner.core.datafiles import Bounds, DataFile, judge
from lakecleaner.spark.files import (SPLIT_SIZE_MIN, bytes_scanned, clean_version_ceiling, dirty_records_bound, dirty_split_size, dirty_version_floors)
from lakecleaner.core.strategies import version_as_long_sql

MB = 2**20
SPLIT_SIZE_DEFAULT = READ_SPLIT_SETTINGS["read.split.target-size"].default
DEFAULTS = (READ_SPLIT_SETTINGS["read.split.open-file-cost"].default, SPLIT_SIZE_DEFAULT)


def _file(p, o_lo, o_hi, size, p_hi=None, v_hi=None, v_lo=None, v_nulls=0, records=10):
    return DataFile(size=size, offsets=Bounds(o_lo, o_hi), partitions=Bounds(p, p if p_hi is None else p_hi),
                    versions=Bounds(v_lo, v_hi), version_nulls=v_nulls, records=records)


def test_a_file_is_dirty_or_clean_by_its_partition_checkpoint():
    ckpt = {0: 99, 1: 49}

    def scans(f, offsets=ckpt, partitioned=True):
        j = judge(f, offsets, partitioned)
        return j.may_be_dirty, j.may_be_clean

    assert scans(_file(0, 0, 99, MB)) == (False, True)
    assert scans(_file(0, 100, 120, MB)) == (True, False)
    assert scans(_file(1, 40, 60, MB)) == (True, True)
    assert scans(_file(2, 0, 1, MB)) == (True, False)  # a partition the checkpoint has not seen
    assert scans(_file(0, 0, 10, MB, p_hi=1), {0: 99}) == (True, True)  # 1 is unseen: wholly dirty
    assert scans(_file(0, 0, 10, MB, p_hi=1)) == (False, True)  # both seen and clean through 10
    assert scans(_file(0, None, None, MB)) == (True, True)
    assert scans(_file(None, 5, 9, MB), {None: 4}, False) == (True, False)
    assert scans(_file(None, 5, 9, MB), {None: 9}, False) == (False, True)


def test_bytes_scanned_counts_each_file_once():
    files = [_file(0, 0, 99, 3 * MB), _file(0, 100, 200, MB), _file(0, 50, 150, 2 * MB)]
    assert bytes_scanned(files, {0: 99}, False) == 6 * MB


def test_a_few_small_dirty_files_get_a_split_each():
    # 4 dirty files of 1.7 MB weigh 4 MB each (Iceberg's open cost): two splits per core on 2 cores
    files = [_file(p, 0, 99, 14 * MB) for p in range(4)] + [_file(p, 100, 200, int(1.7 * MB)) for p in range(4)]
    size = dirty_split_size(files, {p: 99 for p in range(4)}, False, DEFAULTS, 2)
    assert size == 4 * MB  # the clean files are not weighed


def test_a_large_dirty_part_keeps_the_tables_split_size():
    files = [_file(0, 100 * i, 100 * i + 99, 512 * MB) for i in range(1, 9)]
    assert dirty_split_size(files, {0: 99}, False, DEFAULTS, 2) == SPLIT_SIZE_DEFAULT
    assert dirty_split_size(files, {0: 99}, False, (4 * MB, 64 * MB), 2) == 64 * MB


def test_a_tiny_dirty_part_is_not_split_below_the_minimum():
    assert dirty_split_size([], {0: 99}, False, (1, SPLIT_SIZE_DEFAULT), 2) == SPLIT_SIZE_MIN
    assert dirty_split_size([_file(0, 100, 101, 10)], {0: 99}, False, (1, SPLIT_SIZE_DEFAULT), 8) == SPLIT_SIZE_MIN


def test_split_properties_take_the_tables_values_or_icebergs_defaults():
    assert read_split("db.t", {}) == DEFAULTS
    assert read_split("db.t", {"read.split.open-file-cost": "1024", "read.split.target-size": "2048"}) == (1024, 2048)


@pytest.mark.parametrize("prop,value", [("read.split.target-size", "abc"), ("read.split.target-size", "0"),
                                        ("read.split.open-file-cost", "-1")])
def test_an_invalid_split_property_names_table_property_and_value(prop, value):
    with pytest.raises(ConfigError, match=f"table db.t: {prop}='{value}' is invalid: must be a positive number"):
        read_split("db.t", {prop: value})


def test_an_invalid_split_property_stops_the_table_at_resolve_time():
    with pytest.raises(ConfigError, match="table db.t: read.split.target-size='0' is invalid"):
        resolve_table("db.t", {"read.split.target-size": "0"}, {"key": "string", "offset": "bigint"})
    tc = resolve_table("db.t", {"read.split.open-file-cost": "1024"}, {"key": "string", "offset": "bigint"})
    assert tc.read_split == (1024, SPLIT_SIZE_DEFAULT)


def test_the_clean_version_ceiling_is_the_highest_bound_of_the_files_the_clean_scan_opens():
    ckpt = {0: 99}
    clean, straddling, dirty = _file(0, 0, 49, MB, v_hi=70), _file(0, 50, 120, MB, v_hi=90), _file(0, 121, 200, MB, v_hi=500)
    assert clean_version_ceiling([clean, straddling, dirty], ckpt, False) == 90  # the dirty file's 500 is no clean record's
    assert clean_version_ceiling([clean], ckpt, False) == 70


def test_an_unknown_bound_or_no_clean_file_gives_no_ceiling():
    ckpt = {0: 99}
    assert clean_version_ceiling([_file(0, 0, 49, MB, v_hi=70), _file(0, 50, 99, MB, v_hi=None)], ckpt, False) is None
    assert clean_version_ceiling([_file(0, 121, 200, MB, v_hi=500)], ckpt, False) is None
    assert clean_version_ceiling([], ckpt, False) is None


@pytest.mark.parametrize("type_name", ["bigint", "int", "smallint", "tinyint", "date", "timestamp"])
def test_versions_of_exact_types_compare_as_longs(type_name):
    assert version_as_long_sql("v", type_name) is not None


@pytest.mark.parametrize("type_name", ["double", "float", "timestamp_ntz", "string"])
def test_versions_without_an_exact_long_get_none(type_name):
    assert version_as_long_sql("v", type_name) is None


def test_each_partitions_version_floor_is_the_lowest_bound_of_its_dirty_files():
    ckpt = {0: 99, 1: 99, 2: 99}
    files = [_file(0, 0, 99, MB, v_lo=1, v_hi=50),  # clean: not a floor
             _file(0, 100, 120, MB, v_lo=40, v_hi=80), _file(0, 121, 130, MB, v_lo=30, v_hi=90),
             _file(1, 100, 120, MB, v_lo=60, v_hi=70),  # above the ceiling: no record of it can lose
             _file(2, 100, 120, MB, v_lo=10, v_hi=20, v_nulls=1)]  # a record without a version loses to any
    assert dirty_version_floors(files, ckpt, False, 55) == {0: 30, 2: None}
    assert dirty_version_floors(files, ckpt, False, None) == {0: 30, 1: 60, 2: None}  # no ceiling: all may lose
    assert dirty_version_floors(files[:2], ckpt, False, 55) == {0: 40}
    assert dirty_version_floors(files[:1], ckpt, False, 55) == {}  # nothing dirty: no look-up at all


def test_an_unknown_bound_reads_the_partition_whole_and_a_file_across_partitions_every_one():
    ckpt = {0: 99}
    assert dirty_version_floors([_file(0, 100, 120, MB, v_lo=None)], ckpt, False, 55) == {0: None}
    assert dirty_version_floors([_file(0, 100, 120, MB, v_lo=5, v_nulls=None)], ckpt, False, 55) == {0: None}
    assert dirty_version_floors([_file(0, 100, 120, MB, p_hi=1, v_lo=5)], ckpt, False, 55) is None
    assert dirty_version_floors([_file(None, 100, 120, MB, v_lo=5)], {None: 99}, True, 55) == {0: 5}


def test_the_dirty_records_bound_counts_the_files_the_dirty_scan_opens():
    files = [_file(0, 0, 99, MB, records=100), _file(0, 50, 150, MB, records=7), _file(1, 0, 3, MB, records=4)]
    assert dirty_records_bound(files, {0: 99, 1: 3}, False) == 7
