"""Unit tests for lakecleaner.core.rules: which record wins, tombstones, the run budget, the checkpoint.

Pure Python: no Spark, no Airflow.
"""
from __future__ import annotations

import json
import sqlite3
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypothesis_profiles import examples
from lakecleaner.core.strategies import decode_version_header, encode_version_header, is_tombstone, order_key
from lakecleaner.core.rules import (MAX_CHECKPOINT_CHARS, MAX_HISTORY_ENTRIES, NO_PARTITION, Checkpoint, CheckpointError, allot_budget, log_ends, tombstone_expired, tombstone_expired_sql)

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
FAST = examples(50)  # keeps the file well under a second in the ci profile


def winner(versioned: bool, records: list[tuple[int, object]]) -> tuple[int, object]:
    """The (offset, version) record that wins among ``records``."""
    return max(records, key=lambda r: order_key(versioned, r[0], r[1]))


# ================================================================ order_key
def test_offset_strategy_orders_by_offset_only():
    assert order_key(False, 7, None) == (7,)
    assert order_key(False, 7, 123) == (7,)
    # the version is ignored: the higher offset wins even with a lower (or no) version
    assert winner(False, [(1, 100), (2, 1)]) == (2, 1)
    assert winner(False, [(1, 100), (2, None)]) == (2, None)


def test_versioned_record_with_a_version_beats_one_without():
    assert winner(True, [(10, None), (1, 5)]) == (1, 5)
    assert winner(True, [(10, None), (1, -100)]) == (1, -100)  # even a negative version
    assert winner(True, [(10, None), (1, 0)]) == (1, 0)  # version 0 is a version
    assert order_key(True, 10, None) < order_key(True, 1, LONG_MIN)


def test_versioned_higher_version_wins_regardless_of_offset():
    assert winner(True, [(1, 20), (9, 10), (5, 15)]) == (1, 20)
    assert winner(True, [(1, -1), (9, -2)]) == (1, -1)


def test_versioned_equal_versions_tie_break_on_higher_offset():
    assert winner(True, [(3, 7), (8, 7), (5, 7)]) == (8, 7)


def test_versioned_neither_has_a_version_higher_offset_wins():
    assert winner(True, [(3, None), (8, None), (5, None)]) == (8, None)


def test_versioned_order_key_shape():
    assert order_key(True, 4, 9) == (True, 9, 4)
    assert order_key(True, 4, None) == (False, 0, 4)


@FAST
@given(st.lists(st.tuples(st.integers(0, 10**6), st.one_of(st.none(), st.integers(LONG_MIN, LONG_MAX))),
                min_size=1, max_size=20, unique_by=lambda r: r[0]))
def test_versioned_winner_matches_the_rule(records):
    offset, version = winner(True, records)
    with_version = [r for r in records if r[1] is not None]
    if with_version:
        best = max(v for _, v in with_version)
        assert version == best
        assert offset == max(o for o, v in with_version if v == best)
    else:
        assert (offset, version) == (max(o for o, _ in records), None)


# ================================================================ decode_version_header
def enc(v: int) -> bytes:
    return struct.pack(">q", v)


def test_decode_single_header():
    assert decode_version_header([("version", enc(42))], "version") == (42, False)


def test_decode_last_occurrence_wins():
    headers = [("version", enc(1)), ("other", enc(99)), ("version", enc(2)), ("x", b"")]
    assert decode_version_header(headers, "version") == (2, False)


def test_decode_last_occurrence_wins_even_when_malformed():
    assert decode_version_header([("version", enc(1)), ("version", b"\x01")], "version") == (None, True)
    assert decode_version_header([("version", enc(1)), ("version", None)], "version") == (None, True)
    assert decode_version_header([("version", b"\x01"), ("version", enc(3))], "version") == (3, False)


@pytest.mark.parametrize("key", ["Version", "VERSION", "version ", " version", "versions", "ver"])
def test_decode_exact_name_match_only(key):
    assert decode_version_header([(key, enc(5))], "version") == (None, True)


def test_decode_is_case_sensitive_both_ways():
    headers = [("Version", enc(1)), ("version", enc(2))]
    assert decode_version_header(headers, "Version") == (1, False)
    assert decode_version_header(headers, "version") == (2, False)


@pytest.mark.parametrize("value", [0, 1, -1, 255, 256, -256, 2**31, -(2**31) - 1, 2**56, LONG_MIN, LONG_MAX,
                                   LONG_MIN + 1, LONG_MAX - 1])
def test_decode_big_endian_signed_long(value):
    raw = struct.pack(">q", value)
    assert decode_version_header([("v", raw)], "v") == (value, False)
    assert encode_version_header(value) == raw


def test_decode_is_big_endian_and_signed_on_raw_bytes():
    assert decode_version_header([("v", b"\x00" * 7 + b"\x01")], "v") == (1, False)
    assert decode_version_header([("v", b"\x01" + b"\x00" * 7)], "v") == (2**56, False)
    assert decode_version_header([("v", b"\xff" * 8)], "v") == (-1, False)
    assert decode_version_header([("v", b"\x80" + b"\x00" * 7)], "v") == (LONG_MIN, False)
    assert decode_version_header([("v", b"\x7f" + b"\xff" * 7)], "v") == (LONG_MAX, False)


def test_decode_accepts_bytearray_and_memoryview():
    # Spark hands binary values to Python as bytearray
    assert decode_version_header([("v", bytearray(enc(-7)))], "v") == (-7, False)
    assert decode_version_header([("v", memoryview(enc(9)))], "v") == (9, False)


@pytest.mark.parametrize("raw", [b"", b"\x01", b"\x00" * 4, b"\x00" * 7, b"\x00" * 9, b"\x00" * 16,
                                 b"12345678x"])
def test_decode_wrong_length_is_anomalous(raw):
    assert decode_version_header([("v", raw)], "v") == (None, True)


def test_decode_null_value_is_anomalous():
    assert decode_version_header([("v", None)], "v") == (None, True)


@pytest.mark.parametrize("headers", [None, [], (), [("other", enc(1))]])
def test_decode_missing_header_is_anomalous(headers):
    assert decode_version_header(headers, "v") == (None, True)


@FAST
@given(st.integers(LONG_MIN, LONG_MAX))
def test_encode_decode_round_trip(value):
    assert decode_version_header([("v", encode_version_header(value))], "v") == (value, False)


@pytest.mark.parametrize("value", [LONG_MAX + 1, LONG_MIN - 1])
def test_encode_out_of_range_raises(value):
    with pytest.raises(struct.error):
        encode_version_header(value)


# ================================================================ is_tombstone (KIP-87)
@pytest.mark.parametrize("value_is_null,flag,expected", [
    (True, True, True),      # flag decides
    (False, True, True),     # flag decides: a tombstone may carry a value
    (True, False, False),    # flag decides: a null value with flag False is NOT a tombstone
    (False, False, False),
    (True, None, True),      # no flag: a null value is a delete
    (False, None, False),
])
def test_is_tombstone_truth_table(value_is_null, flag, expected):
    assert is_tombstone(value_is_null, flag) is expected


# ================================================================ allot_budget
def test_under_budget_returns_everything():
    eligible = {0: 3, 1: 4, None: 2}
    share = allot_budget(eligible, 100)
    assert share == eligible
    share[0] = 0
    assert eligible[0] == 3  # a copy


def test_exactly_at_budget_returns_everything():
    assert allot_budget({0: 3, 1: 4}, 7) == {0: 3, 1: 4}


def test_empty():
    assert allot_budget({}, 10) == {}
    assert allot_budget({}, 0) == {}


def test_water_filling_small_partitions_take_all_big_ones_share():
    # r = 6: 6 + 2 + 6 = 14 <= 15, r = 7 would be 16; one left goes to the first unexhausted partition
    assert allot_budget({0: 10, 1: 2, 2: 10}, 15) == {0: 7, 1: 2, 2: 6}


def test_water_filling_equal_shares():
    assert allot_budget({0: 100, 1: 100, 2: 100, 3: 100}, 40) == {0: 10, 1: 10, 2: 10, 3: 10}


def test_remainder_goes_in_partition_order_not_insertion_order():
    assert allot_budget({2: 5, 0: 5, 1: 5}, 5) == {0: 2, 1: 2, 2: 1}
    assert allot_budget({10: 9, -1: 9, 3: 9}, 4) == {-1: 2, 3: 1, 10: 1}


def test_remainder_skips_exhausted_partitions():
    # r = 1 (1 + 1 + 1 = 3 <= 4, r = 2 gives 5), partition 0 has nothing more, so 1 gets the extra one
    assert allot_budget({0: 1, 1: 5, 2: 5}, 4) == {0: 1, 1: 2, 2: 1}


def test_none_partition_sorts_first():
    assert allot_budget({1: 5, None: 5, 0: 5}, 4) == {None: 2, 0: 1, 1: 1}


def test_single_none_partition():
    assert allot_budget({None: 100}, 10) == {None: 10}


def test_zero_budget():
    assert allot_budget({0: 5, None: 3}, 0) == {0: 0, None: 0}


def test_partitions_with_nothing_eligible_get_nothing():
    assert allot_budget({0: 0, 1: 10, 2: 0}, 3) == {0: 0, 1: 3, 2: 0}


def test_result_does_not_depend_on_dict_order():
    a = allot_budget({0: 7, 1: 3, 2: 9, None: 4}, 13)
    b = allot_budget({None: 4, 2: 9, 1: 3, 0: 7}, 13)
    assert a == b
    assert list(a) == [None, 0, 1, 2]  # keyed in partition order when over budget


def _order(p):
    return (p is not None, p if p is not None else 0)


eligible_maps = st.dictionaries(st.one_of(st.none(), st.integers(-3, 40)), st.integers(0, 300), max_size=12)


@FAST
@given(eligible_maps, st.integers(0, 3000))
def test_allot_budget_invariants(eligible, budget):
    share = allot_budget(eligible, budget)
    total = sum(eligible.values())
    assert set(share) == set(eligible)
    assert sum(share.values()) == min(total, budget)  # never exceeds the budget, never wastes it
    for p, s in share.items():
        assert 0 <= s <= eligible[p]
    open_ = [p for p in share if share[p] < eligible[p]]  # not exhausted
    if open_:
        shares = [share[p] for p in open_]
        assert max(shares) - min(shares) <= 1
        # water-filling: nobody got more than one above any partition that still wanted more
        assert max(share.values()) <= min(shares) + 1
        # the remainder went in partition order: among the unexhausted, shares never increase
        ordered = [share[p] for p in sorted(open_, key=_order)]
        assert ordered == sorted(ordered, reverse=True)


@FAST
@given(eligible_maps, st.integers(0, 3000), st.randoms(use_true_random=False))
def test_allot_budget_is_deterministic(eligible, budget, rnd):
    items = list(eligible.items())
    rnd.shuffle(items)
    assert allot_budget(dict(items), budget) == allot_budget(eligible, budget)


# ================================================================ Checkpoint: JSON
DAY = 86_400_000


def test_empty_checkpoint_from_missing_json():
    assert Checkpoint.from_json(None) == Checkpoint()
    assert Checkpoint.from_json("") == Checkpoint()
    assert Checkpoint.from_json("{}") == Checkpoint()


def test_json_round_trip_with_none_partition():
    ck = Checkpoint(
        offsets={None: 10, 0: 5, 3: 7},
        history=[(1000, {None: 4, 0: 5}, 2), (2000, {None: 10, 0: 5, 3: 7}, 0)],
        retained={None: 10, 3: 7},
    )
    text = ck.to_json()
    data = json.loads(text)
    assert data["offsets"] == {NO_PARTITION: 10, "0": 5, "3": 7}
    assert data["history"] == [[1000, {NO_PARTITION: 4, "0": 5}, 2], [2000, {NO_PARTITION: 10, "0": 5, "3": 7}, 0]]
    assert data["retained"] == {NO_PARTITION: 10, "3": 7}
    back = Checkpoint.from_json(text)
    assert back == ck
    assert None in back.offsets and 0 in back.offsets and "0" not in back.offsets
    assert back.to_json() == text


def test_json_is_compact_and_deterministic():
    a = Checkpoint(offsets={1: 1, 0: 0, None: 2})
    b = Checkpoint(offsets={None: 2, 0: 0, 1: 1})
    assert a.to_json() == b.to_json()
    assert " " not in a.to_json()


partition_st = st.one_of(st.none(), st.integers(-5, 1000))
offsets_st = st.dictionaries(partition_st, st.integers(0, 2**62), max_size=6)


@st.composite
def checkpoint_parts(draw):
    """Offsets, a history whose entries stay within them (what `advanced` writes), and retained offsets."""
    offsets = draw(offsets_st)
    partitions = sorted(offsets, key=lambda p: -1 if p is None else p)
    entry_st = st.lists(st.sampled_from(partitions), unique=True).flatmap(
        lambda ps: st.fixed_dictionaries({p: st.integers(0, offsets[p]) for p in ps})) if partitions else st.just({})
    history = draw(st.lists(st.tuples(st.integers(0, 2**50), entry_st, st.integers(0, 2**40)), max_size=5))
    return offsets, history, draw(offsets_st)


@FAST
@given(checkpoint_parts())
def test_json_round_trip_property(parts):
    offsets, history, retained = parts
    ck = Checkpoint(offsets=offsets, history=history, retained=retained)
    text = ck.to_json()
    assert Checkpoint.from_json(text) == ck
    assert [h[2] for h in json.loads(text)["history"]] == [n for _, _, n in history]  # counts are written


@FAST
@given(checkpoint_parts())
def test_json_legacy_two_element_entries_property(parts):
    """A checkpoint written before the counts existed reads back with every count 0."""
    offsets, history, retained = parts
    data = json.loads(Checkpoint(offsets=offsets, history=history, retained=retained).to_json())
    data["history"] = [h[:2] for h in data["history"]]
    back = Checkpoint.from_json(json.dumps(data))
    assert back == Checkpoint(offsets=offsets, history=[(at, o, 0) for at, o, _ in history], retained=retained)
    assert not back.tombstones_due(2**62, 0)


def test_json_history_entries_carry_the_tombstone_count():
    ck = Checkpoint().advanced(1000, {0: 10}, {}, DAY, new_tombstones=3).advanced(2000, {0: 20, None: 1}, {}, DAY)
    text = ck.to_json()
    assert json.loads(text)["history"] == [[1000, {"0": 10}, 3], [2000, {NO_PARTITION: 1, "0": 20}, 0]]
    back = Checkpoint.from_json(text)
    assert back.history == [(1000, {0: 10}, 3), (2000, {0: 20, None: 1}, 0)]
    assert back == ck
    assert back.tombstones_due(1000 + DAY, DAY) and not back.tombstones_due(1000 + DAY - 1, DAY)


def test_from_json_accepts_legacy_two_element_entries():
    legacy = ('{"history":[[1000,{"0":5}],[2000,{"-":3,"0":7}]],'
              '"offsets":{"-":3,"0":7},"retained":{"0":7}}')
    ck = Checkpoint.from_json(legacy)
    assert ck.offsets == {0: 7, None: 3}
    assert ck.history == [(1000, {0: 5}, 0), (2000, {0: 7, None: 3}, 0)]
    assert ck.retained == {0: 7}
    assert not ck.tombstones_due(10**12, 0)  # unknown counts: never claimed due from metadata
    assert ck.first_cleaned_at(0, 6) == 2000 and ck.expired_through(None, 2101, 100) == 3
    # written back in the new shape
    assert json.loads(ck.to_json())["history"] == [[1000, {"0": 5}, 0], [2000, {NO_PARTITION: 3, "0": 7}, 0]]


@pytest.mark.parametrize(("text", "problem"), [
    ('{"offsets":{"0":7},"history":[[1000,{"0":9},0]]}', "history[0] offsets: partition 0 cleaned through 9, past the offsets' 7"),
    ('{"offsets":{"0":7},"history":[[1000,{"0":7},0],[2000,{"-":3},1]]}',
     "history[1] offsets: partition - cleaned through 3, past the offsets' none"),
    ('{"offsets":{},"history":[[1000,{"0":-1},0]]}', "history[0] offsets: partition 0 cleaned through -1, past the offsets' none"),
])
def test_from_json_refuses_a_history_past_its_offsets(text, problem):
    """No run writes an entry its offsets do not cover (offsets only grow; a reset drops a partition
    from both): such a checkpoint was edited by hand or by another tool, and its history would date
    records the checkpoint does not call clean."""
    with pytest.raises(CheckpointError) as err:
        Checkpoint.from_json(text)
    assert str(err.value) == f"invalid checkpoint: {problem}"


def test_from_json_accepts_mixed_legacy_and_new_entries():
    ck = Checkpoint.from_json('{"history":[[1000,{"0":5}],[2000,{"0":7},4]],"offsets":{"0":7}}')
    assert ck.history == [(1000, {0: 5}, 0), (2000, {0: 7}, 4)]
    assert ck.retained == {}


# ================================================================ Checkpoint: advanced


def test_first_run():
    ck = Checkpoint().advanced(1000, {0: 10, None: 5}, {0: 10}, DAY)
    assert ck.offsets == {0: 10, None: 5}
    assert ck.history == [(1000, {0: 10, None: 5}, 0)]  # no tombstones by default
    assert ck.retained == {0: 10}
    assert ck.cleaned_through(0) == 10 and ck.cleaned_through(None) == 5 and ck.cleaned_through(1) is None


def test_advanced_does_not_mutate_the_original():
    ck = Checkpoint(offsets={0: 5}, history=[(1, {0: 5}, 3)], retained={0: 5})
    new = ck.advanced(2, {0: 9}, {}, DAY)
    assert ck == Checkpoint(offsets={0: 5}, history=[(1, {0: 5}, 3)], retained={0: 5})
    assert new.offsets == {0: 9}
    new.history[-1][1][0] = 999
    assert new.offsets == {0: 9}  # history entries are snapshots, not the live dict
    # zeroing expired counts does not touch the original either
    later = ck.advanced(2 + DAY, {}, {}, DAY)
    assert later.history == [(1, {0: 5}, 0)]
    assert ck.history == [(1, {0: 5}, 3)]


def test_offsets_only_move_forward():
    ck = Checkpoint().advanced(1000, {0: 10, 1: 10}, {}, DAY)
    after = ck.advanced(2000, {0: 5, 1: 10}, {}, DAY)  # one backwards, one equal
    assert after.offsets == {0: 10, 1: 10}
    assert after.history == ck.history  # nothing moved: no entry


def test_an_entry_records_only_the_partitions_its_run_moved():
    ck = Checkpoint().advanced(1000, {0: 10, 1: 10}, {}, DAY)
    after = ck.advanced(2000, {0: 3, 1: 20}, {}, DAY)
    assert after.offsets == {0: 10, 1: 20}
    assert after.history == [(1000, {0: 10, 1: 10}, 0), (2000, {1: 20}, 0)]
    assert after.first_cleaned_at(0, 10) == 1000 and after.first_cleaned_at(1, 15) == 2000


def test_pruning_folds_what_older_entries_cleaned_into_the_oldest_kept():
    ck = Checkpoint().advanced(0, {0: 10}, {}, 100).advanced(50, {1: 5}, {}, 100).advanced(300, {1: 9}, {}, 100)
    assert ck.history == [(50, {0: 10, 1: 5}, 0), (300, {1: 9}, 0)]
    assert ck.expired_through(0, 300, 100) == 10 and ck.expired_through(1, 300, 100) == 5


def test_a_checkpoint_stays_small_with_many_partitions_and_an_endless_retention():
    """100 partitions, a run every 15 minutes for 30 days, tombstones kept forever: the history is
    bounded (merged entries date their offsets later, so tombstones expire later, never early)."""
    ck, reference, runs = Checkpoint(), [], 30 * 96
    for i in range(runs):
        now = i * 900_000
        ends = {p: i * 10 + p % 3 for p in range(100) if (i + p) % 7 == 0}
        ck = ck.advanced(now, ends, {}, LONG_MAX)
        if ends:
            reference.append((now, dict(ends)))
    assert len(ck.history) <= MAX_HISTORY_ENTRIES and len(ck.to_json()) < 200_000
    for p, offset in ((0, 5), (3, 700), (42, 20_000), (99, ck.offsets[99])):
        truth = next(at for at, ends in reference if ends.get(p, -1) >= offset)
        assert ck.first_cleaned_at(p, offset) >= truth


def test_new_partition_counts_as_moved():
    ck = Checkpoint().advanced(1000, {0: 10}, {}, DAY).advanced(2000, {None: 0}, {}, DAY)
    assert ck.offsets == {0: 10, None: 0}
    assert [at for at, _, _ in ck.history] == [1000, 2000]


def test_empty_ends_moves_nothing():
    ck = Checkpoint().advanced(1000, {}, {}, DAY)
    assert ck == Checkpoint()


def test_retained_is_replaced_each_run():
    ck = Checkpoint().advanced(1000, {0: 10, 1: 10}, {0: 10, 1: 10}, DAY)
    ck = ck.advanced(2000, {0: 20}, {0: 20}, DAY)
    assert ck.retained == {0: 20}
    ck = ck.advanced(3000, {}, {}, DAY)
    assert ck.retained == {}


def times(ck: Checkpoint) -> list[int]:
    return [at for at, _, _ in ck.history]


def counts(ck: Checkpoint) -> list[int]:
    return [n for _, _, n in ck.history]


def test_history_pruned_to_window_plus_newest_older_entry():
    hist = [(0, {0: 1}, 0), (50, {0: 2}, 0), (200, {0: 3}, 0), (260, {0: 4}, 0)]
    ck = Checkpoint(offsets={0: 4}, history=hist)
    # at 300 with retention 100: 0, 50 and 200 (exactly 100 old: at its horizon) have expired
    assert times(ck.advanced(300, {0: 5}, {}, 100)) == [200, 260, 300]
    assert times(ck.advanced(299, {0: 5}, {}, 100)) == [50, 200, 260, 299]
    # pruning happens even when nothing moved
    assert times(ck.advanced(300, {0: 4}, {}, 100)) == [200, 260]


def test_history_pruning_boundary_is_the_tombstone_horizon():
    """An entry is folded exactly when its tombstones expire (KIP-534), never while one may be retained."""
    ck = Checkpoint(offsets={0: 3}, history=[(0, {0: 1}, 0), (50, {0: 2}, 0), (100, {0: 3}, 0)])
    assert times(ck.advanced(149, {}, {}, 100)) == [0, 50, 100]  # only 0 expired: the newest expired one
    assert times(ck.advanced(150, {}, {}, 100)) == [50, 100]  # 50 is exactly 100 old: expired
    assert times(ck.advanced(199, {}, {}, 100)) == [50, 100]  # 100 is one ms short of its horizon
    assert times(ck.advanced(200, {}, {}, 100)) == [100]


def test_history_all_old_keeps_only_the_newest():
    ck = Checkpoint(offsets={0: 2}, history=[(0, {0: 1}, 0), (10, {0: 2}, 0)])
    assert ck.advanced(10_000, {}, {}, 100).history == [(10, {0: 2}, 0)]
    assert ck.advanced(10_000, {0: 3}, {}, 100).history == [(10, {0: 2}, 0), (10_000, {0: 3}, 0)]


def test_history_within_window_kept_entirely():
    ck = Checkpoint()
    for t in range(0, 1000, 100):
        ck = ck.advanced(t, {0: t}, {}, DAY)
    assert times(ck) == list(range(0, 1000, 100))


# ================================================================ Checkpoint: tombstone counts
def test_advanced_records_the_new_tombstone_count():
    ck = Checkpoint().advanced(1000, {0: 10}, {}, DAY, new_tombstones=4)
    assert ck.history == [(1000, {0: 10}, 4)]
    ck = ck.advanced(2000, {0: 20}, {}, DAY, new_tombstones=1).advanced(3000, {0: 30}, {}, DAY)
    assert ck.history == [(1000, {0: 10}, 4), (2000, {0: 20}, 1), (3000, {0: 30}, 0)]  # all within the window


def test_advanced_that_moves_nothing_records_no_count():
    ck = Checkpoint().advanced(1000, {0: 10}, {}, DAY, new_tombstones=2)
    after = ck.advanced(2000, {0: 10}, {}, DAY, new_tombstones=7)  # no entry to carry it
    assert after.history == [(1000, {0: 10}, 2)]


def test_advanced_zeroes_counts_past_the_horizon_only():
    ck = Checkpoint(offsets={0: 3}, history=[(0, {0: 1}, 1), (50, {0: 2}, 2), (200, {0: 3}, 4)])
    # at 149: 0 is past (149 >= 100), 50 is one ms short of its horizon (kept, count kept)
    after = ck.advanced(149, {}, {}, 100)
    assert after.history == [(0, {0: 1}, 0), (50, {0: 2}, 2), (200, {0: 3}, 4)]
    # at 150: 50 reaches its horizon; 0 is pruned, 50 kept (newest expired entry) with its count zeroed
    after = ck.advanced(150, {}, {}, 100)
    assert after.history == [(50, {0: 2}, 0), (200, {0: 3}, 4)]
    # a run that moves zeroes the expired counts too, and its own entry carries its count
    after = ck.advanced(300, {0: 9}, {}, 100, new_tombstones=5)
    assert after.history == [(200, {0: 3}, 0), (300, {0: 9}, 5)]


def test_a_run_does_not_zero_the_count_it_records():
    # retention 0: Kafka's horizon is the first cleaning itself, so a second run at the same now
    # removes the first run's tombstones, but not those it cleans first itself
    ck = Checkpoint().advanced(1000, {0: 10}, {}, 0, new_tombstones=2)
    assert counts(ck) == [2]
    again = ck.advanced(1000, {0: 20}, {}, 0, new_tombstones=3)
    assert again.history == [(1000, {0: 10}, 0), (1000, {0: 20}, 3)]
    assert counts(again.advanced(1000, {}, {}, 0)) == [0]  # both expired: zeroed, the newest kept
    assert counts(again.advanced(1001, {}, {}, 0)) == [0]


def test_tombstones_due_false_without_counts():
    assert not Checkpoint().tombstones_due(0, 0)
    assert not Checkpoint().tombstones_due(10**12, 0)
    ck = Checkpoint().advanced(1000, {0: 10}, {}, 100).advanced(2000, {0: 20}, {}, 100)
    assert counts(ck) == [0, 0]
    assert ck.expired_through(0, 10**9, 100) == 20  # offsets are past the horizon ...
    assert not ck.tombstones_due(10**9, 100)  # ... but no tombstone was recorded


def test_tombstones_due_at_the_kip534_horizon():
    ck = Checkpoint().advanced(1000, {0: 10}, {}, 100, new_tombstones=3)
    assert not ck.tombstones_due(1000, 100)
    assert not ck.tombstones_due(1099, 100)  # one ms short of first clean + retention: retained
    assert ck.tombstones_due(1100, 100)  # now >= deleteHorizonMs: due, as Kafka
    assert ck.tombstones_due(10**9, 100)
    # consistent with the horizon
    assert ck.expired_through(0, 1099, 100) is None and ck.expired_through(0, 1100, 100) == 10
    # retention 0: the horizon is the first cleaning itself
    assert not ck.tombstones_due(999, 0)
    assert ck.tombstones_due(1000, 0)


def test_tombstones_due_any_entry():
    ck = Checkpoint(offsets={0: 30},
                    history=[(100, {0: 10}, 0), (200, {0: 20}, 2), (300, {0: 30}, 0)])
    assert not ck.tombstones_due(299, 100)  # 100 is past but has none; 200 is one ms short
    assert ck.tombstones_due(300, 100)
    assert ck.tombstones_due(400, 100)


def test_tombstones_due_cleared_by_a_run_past_the_horizon():
    r = 100
    ck = Checkpoint().advanced(1000, {0: 10}, {}, r, new_tombstones=3)
    # a run one ms before the horizon removes nothing: the count stays and is due later
    early = ck.advanced(1099, {}, {}, r)
    assert early == ck
    assert early.tombstones_due(1100, r)
    # a run at the horizon removed them: no longer due, now or ever
    cleared = ck.advanced(1100, {}, {}, r)
    assert cleared.history == [(1000, {0: 10}, 0)]
    assert not cleared.tombstones_due(1100, r)
    assert not cleared.tombstones_due(10**9, r)
    assert ck.tombstones_due(1100, r)  # the original is unchanged
    # same when the run also moves: its own tombstones become due a retention later
    moved = ck.advanced(1100, {0: 20}, {}, r, new_tombstones=2)
    assert moved.history == [(1000, {0: 10}, 0), (1100, {0: 20}, 2)]
    assert not moved.tombstones_due(1199, r)
    assert moved.tombstones_due(1200, r)
    assert not moved.advanced(1200, {}, {}, r).tombstones_due(10**9, r)


# ================================================================ Checkpoint: first_cleaned_at
def steps_checkpoint() -> Checkpoint:
    return Checkpoint(offsets={0: 30, None: 8},
                      history=[(100, {0: 10}, 1), (200, {0: 20, None: 8}, 0), (300, {0: 30, None: 8}, 2)])


@pytest.mark.parametrize("offset,expected", [(0, 100), (5, 100), (10, 100), (11, 200), (20, 200), (21, 300),
                                             (30, 300), (31, None)])
def test_first_cleaned_at_is_the_earliest_covering_run(offset, expected):
    assert steps_checkpoint().first_cleaned_at(0, offset) == expected


def test_first_cleaned_at_partition_first_seen_later_and_none_partition():
    ck = steps_checkpoint()
    assert ck.first_cleaned_at(None, 3) == 200
    assert ck.first_cleaned_at(None, 9) is None


def test_first_cleaned_at_unknown_partition():
    assert steps_checkpoint().first_cleaned_at(7, 0) is None
    assert Checkpoint().first_cleaned_at(0, 0) is None
    assert Checkpoint().first_cleaned_at(None, 0) is None


def test_first_cleaned_at_after_pruning_is_the_oldest_kept_entry():
    ck = Checkpoint()
    for t, end in [(0, 10), (1000, 20), (2000, 30), (3000, 40)]:
        ck = ck.advanced(t, {0: end}, {}, 1500)
    assert times(ck) == [1000, 2000, 3000]
    assert ck.first_cleaned_at(0, 5) == 1000  # really cleaned at 0, which was pruned
    assert ck.first_cleaned_at(0, 15) == 1000
    assert ck.first_cleaned_at(0, 25) == 2000


def test_first_cleaned_at_without_covering_history():
    # cleaned, but no history entry covers it: before the oldest entry kept (0 if none)
    assert Checkpoint(offsets={0: 10}).first_cleaned_at(0, 5) == 0
    assert Checkpoint(offsets={0: 10}, history=[(500, {1: 3}, 0)]).first_cleaned_at(0, 5) == 500


# ================================================================ Checkpoint: expired_through
def test_expired_through_at_the_kip534_horizon():
    ck = Checkpoint().advanced(1000, {0: 10}, {}, 100)
    assert ck.expired_through(0, 1000, 100) is None
    assert ck.expired_through(0, 1099, 100) is None  # now < first clean + retention: still visible
    assert ck.expired_through(0, 1100, 100) == 10  # now >= deleteHorizonMs: expired, as Kafka


def test_expired_through_takes_the_highest_expired_entry():
    ck = steps_checkpoint()
    assert ck.expired_through(0, 350, 100) == 20
    assert ck.expired_through(0, 299, 100) == 10  # 299 - 200 < 100
    assert ck.expired_through(0, 300, 100) == 20  # 300 - 200 == 100: at its horizon
    assert ck.expired_through(0, 10_000, 100) == 30
    assert ck.expired_through(0, 99, 0) is None
    assert ck.expired_through(0, 100, 0) == 10  # retention 0: the horizon is the first cleaning


def test_expired_through_unknown_or_young_partition():
    ck = steps_checkpoint()
    assert ck.expired_through(7, 10_000, 100) is None
    assert ck.expired_through(None, 299, 100) is None  # None first appears in the entry at 200
    assert ck.expired_through(None, 300, 100) == 8


def test_tombstone_expired_is_kafkas_delete_horizon():
    """KIP-534: retained while now < first clean + delete.retention.ms (deleteHorizonMs)."""
    assert not tombstone_expired(1000, 1099, 100)
    assert tombstone_expired(1000, 1100, 100)
    assert tombstone_expired(1000, 1000, 0) and not tombstone_expired(1000, 999, 0)
    assert not tombstone_expired(0, LONG_MAX - 1, LONG_MAX)  # an endless retention
    assert tombstone_expired(0, LONG_MAX, LONG_MAX)


@pytest.mark.parametrize("first, now, retention", [(1000, 1099, 100), (1000, 1100, 100), (1000, 1101, 100),
                                                   (5, 5, 0), (5, 4, 0), (0, LONG_MAX, LONG_MAX),
                                                   (1, LONG_MAX, LONG_MAX)])
def test_tombstone_expired_sql_says_the_same(first, now, retention):
    """The SQL rendering (used by the data-quality suites) agrees with the Python rule, also under NOT,
    and never adds first + retention (a bigint overflow for an endless retention)."""
    con = sqlite3.connect(":memory:")
    cond = tombstone_expired_sql("f", "n", "r")
    row = con.execute(f"SELECT {cond}, NOT {cond} FROM (SELECT ? AS f, ? AS n, ? AS r)", (first, now, retention))
    expired = tombstone_expired(first, now, retention)
    assert row.fetchone() == (int(expired), int(not expired))
    assert "+" not in cond


def test_repeating_a_run_at_the_same_now_changes_nothing():
    r = 100
    ck = Checkpoint().advanced(1000, {0: 10}, {}, r, new_tombstones=2)
    now = 1099  # tombstones cleaned at 1000 are one ms short of their horizon
    before = ck.expired_through(0, now, r)
    assert before is None
    assert not ck.tombstones_due(now, r)
    again = ck.advanced(now, {0: 10}, {}, r)  # the run finds nothing new to clean
    assert again == ck
    assert again.expired_through(0, now, r) == before
    assert again.advanced(now, {0: 10}, {}, r) == again
    # at the horizon: the first repeat zeroes the count, the next is a no-op
    later = ck.advanced(now + 1, {0: 10}, {}, r)
    assert later != ck and later.advanced(now + 1, {0: 10}, {}, r) == later


def test_a_run_does_not_expire_what_it_cleans():
    r = 100
    ck = Checkpoint().advanced(1000, {0: 10}, {}, r).advanced(1200, {0: 20}, {}, r)
    assert ck.expired_through(0, 1200, r) == 10
    assert ck.first_cleaned_at(0, 15) == 1200
    assert ck.expired_through(0, 1299, r) == 10
    assert ck.expired_through(0, 1300, r) == 20


runs_st = st.lists(
    st.tuples(st.integers(0, 300),  # time since the previous run
              st.dictionaries(st.sampled_from([None, 0, 1]), st.integers(0, 60), max_size=3),
              st.integers(0, 5)),  # winning tombstones the run cleaned first
    min_size=1, max_size=8,
)


@FAST
@given(runs_st, st.integers(0, 400), st.integers(0, 500))
def test_horizon_agrees_with_first_cleaned_at(runs, retention, wait):
    """A cleaned offset is past the tombstone horizon exactly when its first cleaning is at least
    delete.retention.ms ago (KIP-534), also after history pruning."""
    ck, now = Checkpoint(), 0
    for gap, ends, n in runs:
        now += gap
        prev = ck
        ck = ck.advanced(now, ends, {}, retention, new_tombstones=n)
        for p, end in prev.offsets.items():  # offsets never move back
            assert ck.offsets[p] >= end
        assert ck.history == sorted(ck.history, key=lambda e: e[0])
        moved = {p: e for p, e in ends.items() if prev.offsets.get(p) is None or e > prev.offsets[p]}
        if moved:
            assert ck.history[-1] == (now, moved, n)  # the newest entry is what this run moved
    query = now + wait
    for p in (None, 0, 1, 2):
        horizon = ck.expired_through(p, query, retention)
        through = ck.cleaned_through(p)
        for offset in range(0, 62):
            first = ck.first_cleaned_at(p, offset)
            assert (first is None) == (through is None or offset > through)
            expired = first is not None and query - first >= retention
            assert expired == (horizon is not None and offset <= horizon)
        # and repeating the last run at the same now is a no-op for the horizon
        assert ck.advanced(query, {}, {}, retention).expired_through(p, query, retention) == horizon
    # a run at the query time leaves no tombstone due at that time
    assert not ck.advanced(query, {}, {}, retention).tombstones_due(query, retention)


@FAST
@given(runs_st, st.integers(0, 400), st.integers(0, 500))
def test_tombstone_counts_follow_the_runs(runs, retention, wait):
    """Each run that moves records its count; a run zeroes (and only zeroes) the counts past the
    horizon; tombstones_due agrees with a model that never prunes."""
    ck, now = Checkpoint(), 0
    model: list[tuple[int, int]] = []  # (run time, tombstones still there), unpruned
    for gap, ends, n in runs:
        now += gap
        prev = ck
        ck = ck.advanced(now, ends, {}, retention, new_tombstones=n)
        moved = any(prev.offsets.get(p) is None or end > prev.offsets[p] for p, end in ends.items())
        model = [(at, 0 if now - at >= retention else c) for at, c in model]
        if moved:
            model.append((now, n))
            assert ck.history[-1][0] == now and ck.history[-1][2] == n
        else:
            assert len(ck.history) <= len(prev.history)
        for i, (at, _, c) in enumerate(ck.history):
            assert c >= 0
            if now - at >= retention and not (moved and i == len(ck.history) - 1):
                assert c == 0  # this run removed them (not those it cleaned first itself)
        # entries still inside the window keep their count
        kept = {(at, tuple(sorted(o.items(), key=lambda kv: _order(kv[0])))): c for at, o, c in prev.history
                if now - at < retention}
        for at, o, c in ck.history:
            key = (at, tuple(sorted(o.items(), key=lambda kv: _order(kv[0]))))
            if key in kept:
                assert c == kept[key]
        # nothing is due right after a run, but with retention 0 its own (the horizon is now)
        assert ck.tombstones_due(now, retention) == (retention == 0 and moved and n > 0)
        # pruning only ever drops entries whose count was already zero
        assert sum(c for _, _, c in ck.history) == sum(c for _, c in model)
        assert Checkpoint.from_json(ck.to_json()) == ck
    for query in (now, now + wait, now + retention - 1, now + retention, now + retention + 1):
        expected = any(c > 0 and query - at >= retention for at, c in model)
        assert ck.tombstones_due(query, retention) == expected
    assert not ck.advanced(now + wait, {}, {}, retention).tombstones_due(now + wait, retention)


@pytest.mark.parametrize("text, problem", [
    ("null", "expected an object"), ("[]", "expected an object"), ('"x"', "expected an object"),
    ("{bad", "not JSON"), ('{"history": [[1]]}', "history[0]: expected [run time, offsets, tombstones]"),
    ('{"history": {"a": 1}}', "history: expected a list"), ('{"offsets": []}', "offsets: expected an object"),
    ('{"offsets": {"0": "5"}}', "offsets[0]: expected an integer"), ('{"offsets": {"0": true}}', "expected an integer"),
    ('{"offsets": {"0": 1.5}}', "expected an integer"), ('{"offsets": {"zero": 5}}', "partition 'zero'"),
    ('{"history": [[-1, {}, 0]]}', "run time: expected an integer from 0 to 9223372036854775807"),
    ('{"history": [[1, {"0": 2}, -3]]}', "tombstones: expected an integer from 0 to"),
    # past an Iceberg long: Spark failed on the literal, or the partition was clean for ever
    ('{"offsets": {"0": 3}, "retained": {"0": 100000000000000000000000}}', "retained[0]: expected an integer from -"),
    ('{"offsets": {"0": 9223372036854775808}}', "offsets[0]: expected an integer"),
    ('{"as_of_ms": 100000000000000000000000}', "as_of_ms: expected an integer from 0 to"),
    ('{"offsets": {"9223372036854775808": 1}}', "offsets: partition: expected an integer"),
    ('{"offsets": {"1_0": 5}}', "partition '1_0'"), ('{"offsets": {"' + "1" * 5000 + '": 5}}', "is not an integer"), ('{"offsets": {"\u0661": 5}}', "is not an integer"),
    # one partition written two ways: either entry would win silently
    ('{"offsets": {"1": 5, "01": 500}}', "partition '01'"), ('{"offsets": {"-0": 5}}', "partition '-0'"),
    ('{"offsets": {"+1": 5}}', "partition '+1'"),
    ('{"history": [[1, null]]}', "history[0] offsets"), ('{"retained": {"0": null}}', "retained[0]"),
    ('{"offset": {}}', "unknown field(s) 'offset'"),
    # a name given twice: json keeps the last silently (partition 0 clean through 100, not 5)
    ('{"offsets": {"0": 5, "0": 100}}', 'not JSON (the name "0" is given twice in one object'),
    ('{"offsets": {}, "offsets": {"0": 9}}', 'the name "offsets" is given twice'),
])
def test_a_checkpoint_not_written_by_the_cleaner_is_a_named_error(text, problem):
    with pytest.raises(CheckpointError) as err:
        Checkpoint.from_json(text)
    assert str(err.value).startswith("invalid checkpoint: ") and problem in str(err.value)


HOSTILE = "[" * 3000 + "]" * 3000  # 6 KB of nested brackets: json.loads raises RecursionError


@pytest.mark.parametrize("text, problem", [
    (HOSTILE, "nested too deeply"), ('{"history": ' + HOSTILE + "}", "nested too deeply"),
    ("[" * 5000, "nested too deeply"),
    ('{"offsets": {' + '"0": 1, ' * (MAX_CHECKPOINT_CHARS // 8) + '"1": 2}}', f"more than the {MAX_CHECKPOINT_CHARS}"),
])
def test_a_hostile_or_oversized_checkpoint_is_a_named_error_that_never_shows_the_value(text, problem):
    with pytest.raises(CheckpointError) as err:
        Checkpoint.from_json(text)
    assert str(err.value).startswith("invalid checkpoint: ") and problem in str(err.value)
    assert len(str(err.value)) < 200 and "[[[" not in str(err.value)


def test_the_checkpoint_cap_holds_a_thousand_partitions_with_a_full_history():
    offsets = {p: 10**12 + p for p in range(1000)}
    ck = Checkpoint(offsets, [(1_800_000_000_000 + i, dict(offsets), 5) for i in range(MAX_HISTORY_ENTRIES)], offsets)
    text = ck.to_json()
    assert 2 * len(text) <= MAX_CHECKPOINT_CHARS and Checkpoint.from_json(text) == ck


def test_checkpoint_past_the_log_end_is_reset_for_that_partition_only():
    ck = Checkpoint(offsets={0: 50, 1: 9}, history=[(1, {0: 50, 1: 9}, 2)], retained={0: 50})
    same, reset = ck.reset_past_log_end({0: 60, 1: 9})
    assert same is ck and reset == []
    back, reset = ck.reset_past_log_end({0: 20, 1: 30})
    assert reset == [0] and back == Checkpoint(offsets={1: 9}, history=[(1, {1: 9}, 2)], retained={})
    assert ck.reset_past_log_end(None) == (ck, [])  # metrics cannot say: leave it


def test_checkpoint_entries_of_the_other_layout_are_reset():
    """compaction.partition.column set or unset since the checkpoint was written: the entries of
    the other layout count another log's offsets (and a retained "-" must not become partition 0's)."""
    ck = Checkpoint(offsets={None: 50, 0: 9}, history=[(1, {None: 50}, 2), (2, {0: 9}, 0)], retained={None: 50})
    part, reset = ck.reset_other_layout(partitioned=True)
    assert reset == [None] and part == Checkpoint(offsets={0: 9}, history=[(1, {}, 2), (2, {0: 9}, 0)], retained={})
    whole, reset = ck.reset_other_layout(partitioned=False)
    assert reset == [0] and whole == Checkpoint(offsets={None: 50}, history=[(1, {None: 50}, 2), (2, {}, 0)],
                                                retained={None: 50})
    assert part.reset_other_layout(partitioned=True) == (part, [])


def test_a_checkpoint_vouches_only_for_its_own_layout_and_up_to_each_log_end():
    ck = Checkpoint(offsets={None: 70, 0: 50, 1: 9})
    assert ck.vouched(True, {0: 20, 1: 30}) == (Checkpoint(offsets={1: 9}), [None], [0])
    assert ck.vouched(True, None) == (Checkpoint(offsets={0: 50, 1: 9}), [None], [])  # log ends unknown
    assert ck.vouched(False, {None: 60}) == (Checkpoint(), [0, 1], [None])


def test_log_ends_from_file_metrics():
    assert log_ends([(0, 5), (0, 9), (1, 3)], partitioned=True) == {0: 9, 1: 3}
    assert log_ends([(None, 5), (None, 9)], partitioned=False) == {None: 9}
    assert log_ends([(0, 5), (None, 9)], partitioned=True) is None  # a file of several partitions
    assert log_ends([(0, None)], partitioned=True) is None  # no offset metrics
    assert log_ends([], partitioned=True) == {}


# ================================================================ a table row's roles, in Python
def _strategy(props, columns=None):
    from lakecleaner.core.config import resolve_table
    from lakecleaner.core.strategies import Strategy

    columns = columns or {"key": "string", "offset": "bigint", "timestamp": "bigint", "tombstone": "boolean",
                          "value": "string", "headers": "array<struct<key:string,value:binary>>", "ver": "bigint"}
    return Strategy(resolve_table("t", props, columns))


def test_a_rows_version_per_strategy():
    row = {"timestamp": 7, "ver": 3, "headers": [{"key": "v", "value": enc(9)}, ("v", enc(11))]}
    assert _strategy({"compaction.strategy": "offset"}).version_of(row) == (None, False)
    assert _strategy({"compaction.strategy": "timestamp"}).version_of(row) == (7, False)
    assert _strategy({"compaction.strategy": "column", "compaction.strategy.column": "ver"}).version_of(row) == (3, False)
    header = _strategy({"compaction.strategy": "header", "compaction.strategy.header": "v"})
    assert header.version_of(row) == (11, False)  # the last occurrence; a header as a struct or a pair
    assert header.version_of({"headers": None}) == (None, True)
    assert _strategy({"compaction.strategy": "timestamp"}).version_of({"timestamp": None}) == (None, True)


@pytest.mark.parametrize("strategy", ["timestamp", "column"])
@pytest.mark.parametrize("kind", ["double", "float"])
def test_a_nan_version_is_no_version_and_loses_to_any_version(strategy, kind):
    """Spark orders NaN above every number: read as a version, one NaN would win over every later
    update of its key for ever. It is no version, in Python and SQL alike (tests/spark/test_roles.py
    checks the two agree on a double column)."""
    from lakecleaner.core.model import Record, compact

    column = "timestamp" if strategy == "timestamp" else "ver"
    s = _strategy({"compaction.strategy": strategy, "compaction.strategy.column": "ver" if strategy == "column" else "",
                   "compaction.retain.log.end.record": "false"},
                  {"key": "string", "offset": "bigint", "value": "string", column: kind})
    assert s.version_of({column: float("nan")}) == (None, True)
    assert s.version_of({column: float("inf")}) == (float("inf"), False)
    assert s.version_of({column: -0.0}) == (0.0, False)
    assert s.version_sql == f"CASE WHEN isnan(`{column}`) THEN NULL ELSE `{column}` END"
    assert s.has_version_sql == f"({s.version_sql} IS NOT NULL)"
    # the reference model: the versioned record wins wherever the NaN ones stand, and NaNs count anomalous
    for versions in ([float("nan"), 1.0, float("nan")], [1.0, float("nan"), float("nan")]):
        rows = [s.version_of({column: v}) for v in versions]
        records = [Record(0, o, ("a",), 0, version=v, anomalous=anomalous) for o, (v, anomalous) in enumerate(rows)]
        out = compact(records, Checkpoint(), s.tc, now_ms=10)
        assert [r.version for r in out.survivors(records)] == [1.0], versions
        assert out.stats["anomalous"] == 2


def test_a_rows_tombstone_follows_the_flag_then_the_value():
    s = _strategy({})
    assert s.tombstone_of({"tombstone": None, "value": None}) is True
    assert s.tombstone_of({"tombstone": False, "value": None}) is False
    assert s.tombstone_of({"tombstone": True, "value": "x"}) is True
    no_flag = _strategy({}, {"key": "string", "offset": "bigint", "value": "string"})
    assert no_flag.tombstone_of({"value": "x"}) is False and no_flag.tombstone_of({"value": None}) is True


def test_a_runs_entry_is_dated_by_its_commit_when_its_now_lags_behind():
    """A backfill's now lies in the past: the tombstones it cleans first count their
    delete.retention.ms from the commit, as Kafka counts from the clean that really happened."""
    from lakecleaner.core.rules import first_clean_time

    ck = Checkpoint().advanced(1_000, {0: 5}, {}, 100, new_tombstones=1, committed_ms=9_000)
    assert ck.history == [(9_000, {0: 5}, 1)] and ck.as_of_ms == 1_000
    assert first_clean_time(1_000, 9_000) == 9_000 and first_clean_time(9_000, 1_000) == 9_000
    assert not ck.tombstones_due(1_000 + 100, 100)  # a retention after the run's now: not yet
    assert ck.tombstones_due(9_000 + 100, 100)  # a retention after its commit: due
    assert ck.expired_through(0, 9_099, 100) is None and ck.expired_through(0, 9_100, 100) == 5
    assert Checkpoint.from_json(ck.to_json()) == ck


def test_the_as_of_now_moves_with_the_checkpoint_only():
    ck = Checkpoint().advanced(1_000, {0: 5}, {}, 100)
    assert ck.as_of_ms == 1_000 and not ck.later_than(1_000) and ck.later_than(999)
    idle = ck.advanced(2_000, {0: 5}, {}, 10**9)  # nothing moved: no property write, no new as-of
    assert idle == ck and idle.to_json() == ck.to_json()
    assert ck.advanced(3_000, {0: 6}, {}, 10**9).as_of_ms == 3_000
    assert Checkpoint.from_json('{"offsets": {"0": 5}}').as_of_ms is None  # written before as-of existed


def test_the_tombstone_check_judges_as_of_the_last_runs_now_which_folded_what_it_removed():
    """Runs every interval, each committing d after its interval's end: the entry a run folds what
    it removed into is dated within the last interval before the horizon, so judged one interval
    before now, nothing had expired and the check would check nothing."""
    from lakecleaner.core.rules import tombstone_check_ms

    retention, interval, d = 86_400_000, 900_000, 30_000
    ckpt = Checkpoint()
    for k in range(1, 200):
        ckpt = ckpt.advanced(k * interval, {0: k * 10}, {}, retention, new_tombstones=1, committed_ms=k * interval + d)
    now = ckpt.as_of_ms
    assert ckpt.expired_through(0, now - interval, retention) is None  # what the check used to ask
    check = tombstone_check_ms(ckpt.as_of_ms, now, interval)
    assert check == now and ckpt.expired_through(0, check, retention) == 1020  # what the last run removed through
    assert tombstone_check_ms(ckpt.as_of_ms, now + 5 * interval, interval) == now + 4 * interval  # no run since
    assert tombstone_check_ms(None, now, interval) == now - interval
