"""Hand-worked compaction cases from the seeds (KIP-280, KIP-87, KIP-354, the log cleaner), with the
outcome worked out by hand. The same cases run on the reference model (tests/unit/test_model.py,
synthetic append times) and on the Spark job (tests/spark/test_cases_on_spark.py, real commits).

Time is relative: a run's ``now`` is ("batch", i, delta) = append time of batch i + delta,
("run", k, delta) = the now of run k + delta, or ("clean", k, delta) = when run k really cleaned +
delta: the later of its now and its commit (rules.first_clean_time), from which a tombstone's
delete.retention.ms counts. A run commits after its now (seconds on Spark, COMMIT_LAG_MS in the
model), so ("run", k, retention) is still inside the horizon of a tombstone run k cleaned first.
``expect`` per run: the surviving (partition, offset) pairs, and optionally removals by reason and
the offsets the run copies to quarantine.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lakecleaner.core.strategies import encode_version_header


def H(*pairs):
    """Kafka headers: H(("v", 5), ("v", b"\\x01")) -- ints are encoded as 8-byte longs."""
    return [{"key": k, "value": encode_version_header(v) if isinstance(v, int) else v} for k, v in pairs]


def r(offset, key, value="v", partition=0, timestamp=None, headers=None, tombstone=None, ver=None):
    return dict(offset=offset, key=key, value=value, partition=partition, timestamp=timestamp,
                headers=headers, tombstone=tombstone, ver=ver)


@dataclass
class Run:
    now: tuple
    survivors: set
    removed: dict = field(default_factory=dict)  # (p, o) -> reason, for the removals this run
    quarantined: set = field(default_factory=set)
    after_batch: int | None = None  # append batches up to this index before the run (default: all)


@dataclass
class Case:
    name: str
    props: dict
    batches: list
    runs: list


S, E, Q = "superseded", "expired_tombstone", "quarantined"  # Q: copied to quarantine by an earlier run
DAY = 86_400_000

CASES = [
    Case("kip280_offset_keeps_arrival_order",
         {"compaction.retain.log.end.record": "false"},
         # P1 sends <K1,V1> (ts 1), P2 sends <K1,V2> (ts 2); the broker receives V2 first.
         [[r(0, "K1", "V2", timestamp=2), r(1, "K1", "V1", timestamp=1)]],
         [Run(("batch", 0, 1), {(0, 1)}, {(0, 0): S})]),
    Case("kip280_timestamp_keeps_producer_order",
         {"compaction.strategy": "timestamp", "compaction.retain.log.end.record": "false"},
         [[r(0, "K1", "V2", timestamp=2), r(1, "K1", "V1", timestamp=1)]],
         [Run(("batch", 0, 1), {(0, 0)}, {(0, 1): S})]),
    Case("log_end_record_is_retained_then_removed_once_not_last",
         {"compaction.strategy": "timestamp"},
         [[r(0, "K1", "V2", timestamp=2), r(1, "K1", "V1", timestamp=1)],
          [r(2, "K2", "x", timestamp=1)]],
         [Run(("batch", 0, 1), {(0, 0), (0, 1)}, {}, after_batch=0),
          # offset 1 lost to offset 0 but was the log end; now offset 2 is, so 1 goes.
          Run(("batch", 1, 1), {(0, 0), (0, 2)}, {(0, 1): S})]),
    Case("timestamp_ties_and_missing_timestamps",
         {"compaction.strategy": "timestamp", "compaction.retain.log.end.record": "false"},
         [[r(0, "a", timestamp=5), r(1, "a", timestamp=5), r(2, "a", timestamp=None),
           r(3, "b", timestamp=None), r(4, "b", timestamp=None)]],
         [Run(("batch", 0, 1), {(0, 1), (0, 4)}, {(0, 0): S, (0, 2): S, (0, 3): S})]),
    Case("header_last_occurrence_malformed_and_missing",
         {"compaction.strategy": "header", "compaction.strategy.header": "v", "compaction.retain.log.end.record": "false"},
         [[r(0, "a", headers=H(("v", 9), ("v", 1))),  # repeated: the last (1) counts
           r(1, "a", headers=H(("v", 2))),
           r(2, "a", headers=H(("v", b"\x00\x01"))),  # malformed: no version, anomalous
           r(3, "a", headers=H(("V", 99))),  # names match exactly: no version
           r(4, "b", headers=None), r(5, "b", headers=None),  # neither: highest offset
           r(6, "c", headers=H(("v", -1))), r(7, "c", headers=H(("v", -2)))]],  # signed longs
         [Run(("batch", 0, 1), {(0, 1), (0, 5), (0, 6)},
              {(0, 0): S, (0, 2): S, (0, 3): S, (0, 4): S, (0, 7): S})]),
    Case("blank_header_name_falls_back_to_offset",
         {"compaction.strategy": "header", "compaction.strategy.header": " ", "compaction.retain.log.end.record": "false"},
         [[r(0, "a", headers=H(("v", 9))), r(1, "a", headers=H(("v", 1)))]],
         [Run(("batch", 0, 1), {(0, 1)}, {(0, 0): S})]),
    Case("kip87_null_value_with_flag_false_is_a_live_record",
         {"delete.retention.ms": "0", "compaction.retain.log.end.record": "false"},
         [[r(0, "a", "x"), r(1, "a", None, tombstone=False),  # put(a, null): live
           r(2, "b", "x"), r(3, "b", "still here", tombstone=True),  # flagged delete with a value
           r(4, "c", "x"), r(5, "c", None, tombstone=None)],  # no flag: null value deletes
          [r(6, "z", "x")]],
         [Run(("batch", 0, 1), {(0, 1), (0, 3), (0, 5)}, {(0, 0): S, (0, 2): S, (0, 4): S}, after_batch=0),
          # next run: the two tombstones (3, 5) are past delete.retention.ms=0; the null value is not a delete
          Run(("clean", 0, 1), {(0, 1), (0, 6)}, {(0, 3): E, (0, 5): E})]),
    Case("tombstone_goes_at_the_kip534_horizon_and_outlives_a_late_lower_version",
         {"compaction.strategy": "timestamp", "delete.retention.ms": str(DAY), "compaction.retain.log.end.record": "false"},
         [[r(0, "a", "x", timestamp=1), r(1, "a", None, timestamp=5)],
          [r(2, "a", "late", timestamp=3)]],  # a late, lower-versioned write after the delete
         [Run(("batch", 0, 1), {(0, 1)}, {(0, 0): S}, after_batch=0),
          # one ms short of first clean + retention: the tombstone still wins and stays; the late
          # record is superseded
          Run(("clean", 0, DAY - 1), {(0, 1)}, {(0, 2): S}),
          Run(("clean", 0, DAY - 1), {(0, 1)}, {}),  # same now again: nothing changes
          # now = first clean + delete.retention.ms (Kafka's deleteHorizonMs): gone
          Run(("clean", 0, DAY), set(), {(0, 1): E})]),
    Case("a_runs_now_behind_its_commit_dates_the_tombstone_at_the_commit",
         {"delete.retention.ms": str(DAY), "compaction.retain.log.end.record": "false"},
         # a backfill's now lies behind the wall clock: the tombstone's horizon counts from the commit
         [[r(0, "a", "x"), r(1, "a", None), r(2, "b", "y")]],
         [Run(("batch", 0, 1), {(0, 1), (0, 2)}, {(0, 0): S}),
          Run(("run", 0, DAY), {(0, 1), (0, 2)}, {}),  # a day after the run's now, not after its clean: kept
          Run(("clean", 0, DAY), {(0, 2)}, {(0, 1): E})]),
    Case("a_run_behind_the_tables_last_now_takes_nothing",
         {"compaction.max.records.per.run": "2", "compaction.retain.log.end.record": "false"},
         [[r(0, "a"), r(1, "b"), r(2, "a"), r(3, "b")]],
         [Run(("batch", 0, 10), {(0, 0), (0, 1), (0, 2), (0, 3)}, {}),  # the budget: offsets 0, 1
          Run(("run", 0, -5), {(0, 0), (0, 1), (0, 2), (0, 3)}, {}),  # an earlier interval: takes nothing
          Run(("run", 0, 0), {(0, 2), (0, 3)}, {(0, 0): S, (0, 1): S})]),  # the same now: not earlier, it cleans
    Case("tombstone_with_zero_retention_goes_at_the_next_run_even_in_the_same_ms",
         {"delete.retention.ms": "0", "compaction.retain.log.end.record": "false"},
         [[r(0, "a", "x"), r(1, "a", None), r(2, "b", "y")]],
         [Run(("batch", 0, 1), {(0, 1), (0, 2)}, {(0, 0): S}),  # the run that first cleans it keeps it
          Run(("clean", 0, 0), {(0, 2)}, {(0, 1): E})]),  # KIP-534: horizon = first clean + 0
    Case("tombstone_at_the_log_end_waits_until_it_is_not_last",
         {"delete.retention.ms": "0"},
         [[r(0, "a", "x"), r(1, "a", None)], [r(2, "b", "y")]],
         [Run(("batch", 0, 1), {(0, 1)}, {(0, 0): S}, after_batch=0),
          Run(("clean", 0, 10), {(0, 1)}, {}, after_batch=0),  # expired, but it is the log end
          Run(("batch", 1, 1), {(0, 2)}, {(0, 1): E})]),
    Case("young_records_neither_removed_nor_used_to_remove",
         {"min.compaction.lag.ms": str(DAY), "compaction.retain.log.end.record": "false"},
         [[r(0, "a", "old")], [r(1, "a", "new")]],
         [Run(("batch", 1, DAY - 1), {(0, 0), (0, 1)}, {}),  # batch 1 is one ms too young
          Run(("batch", 1, DAY), {(0, 1)}, {(0, 0): S})]),  # exactly the lag: old enough
    Case("budget_takes_an_offset_prefix_and_earlier_winner_beats_late_dirty",
         {"compaction.strategy": "column", "compaction.strategy.column": "ver",
          "compaction.max.records.per.run": "2", "compaction.retain.log.end.record": "false"},
         [[r(0, "a", ver=5), r(1, "b", ver=1), r(2, "a", ver=3), r(3, "b", ver=2), r(4, "c", ver=None)]],
         [Run(("batch", 0, 1), {(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)}, {}),  # offsets 0,1: distinct keys
          Run(("run", 0, 1), {(0, 0), (0, 3), (0, 4)}, {(0, 2): S, (0, 1): S}),  # 2 loses to cleaned 0
          Run(("run", 1, 1), {(0, 0), (0, 3), (0, 4)}, {})]),
    Case("partitions_are_separate_logs_and_share_the_budget",
         {"compaction.max.records.per.run": "3", "compaction.retain.log.end.record": "false"},
         [[r(0, "a", partition=0), r(1, "a", partition=0), r(2, "a", partition=0),
           r(0, "a", partition=1), r(1, "a", partition=1)]],
         # budget 3 over partitions with 3 and 2 eligible: shares 2 and 1 (water-filling, then partition order)
         [Run(("batch", 0, 1), {(0, 1), (0, 2), (1, 0), (1, 1)}, {(0, 0): S}),
          Run(("run", 0, 1), {(0, 2), (1, 1)}, {(0, 1): S, (1, 0): S})]),
    Case("keyless_rows_are_quarantined_not_dropped",
         {"compaction.retain.log.end.record": "false"},
         [[r(0, None, "orphan"), r(1, "a"), r(2, "a")]],
         [Run(("batch", 0, 1), {(0, 2)}, {(0, 1): S}, quarantined={(0, 0)})]),
    Case("keyless_log_end_record_is_quarantined_once_kept_then_removed_once_not_last",
         {},
         [[r(0, "a"), r(1, "a"), r(2, None, "orphan"),
           r(0, None, "orphan", partition=1), r(1, "c", partition=1)],  # keyless, but not the log end
          [r(3, "b")]],
         # the keyless offset 2 is partition 0's log end: copied to quarantine, and kept
         [Run(("batch", 0, 1), {(0, 1), (0, 2), (1, 1)}, {(0, 0): S}, quarantined={(0, 2), (1, 0)}, after_batch=0),
          Run(("run", 0, 1), {(0, 1), (0, 2), (1, 1)}, {}, after_batch=0),  # still the log end: no second copy
          # offset 3 is the log end now: the keyless record goes, and is not copied again
          Run(("batch", 1, 1), {(0, 1), (0, 3), (1, 1)}, {(0, 2): Q})]),
]


SCHEMA_COLUMNS = {"key": "string", "offset": "bigint", "partition": "int", "timestamp": "bigint",
                  "headers": "array<struct<key:string,value:binary>>", "tombstone": "boolean", "value": "string",
                  "ver": "bigint"}


COMMIT_LAG_MS = 5_000  # how long after its now a run commits, in the model (Spark: really)


def resolve_now(spec: tuple, batch_times: list[int], run_nows: list[int], clean_times: list[int | None]) -> int:
    kind, index, delta = spec
    times = {"batch": batch_times, "run": run_nows, "clean": clean_times}[kind]
    assert times[index] is not None, f"{kind} {index} has no such time (the run moved no checkpoint)"
    return times[index] + delta


def expected_reason_counts(run: Run) -> dict[str, int]:
    return {"removed_superseded": sum(1 for v in run.removed.values() if v == S),
            "removed_expired_tombstones": sum(1 for v in run.removed.values() if v == E),
            "quarantined": len(run.quarantined)}

# The cases that also run on Iceberg format v3 tables (deletion vectors instead of position-delete
# files), few for the suite's time (tests/spark/test_engine_vs_model.py runs every strategy on v3):
# a quarantine, and data files losing records in two runs (v3 replaces the file's deletion vector
# by a merged one, where v2 adds a second position-delete file).
FORMAT_V3_CASES = [c for c in CASES if c.name in {
    "header_last_occurrence_malformed_and_missing",
    "kip87_null_value_with_flag_false_is_a_live_record",
    "budget_takes_an_offset_prefix_and_earlier_winner_beats_late_dirty",
    "keyless_log_end_record_is_quarantined_once_kept_then_removed_once_not_last"}]
