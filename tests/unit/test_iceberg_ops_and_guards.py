"""The shared Iceberg operations and concurrency guards, without a Spark session: the expiry every
caller shares, the guards' verdicts on appended files, the conflict retry, and the key map's MERGE
source schema named once."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest
from lakecleaner.core.config import resolve_table
from lakecleaner.core.datafiles import Bounds, DataFile
from lakecleaner.core.table import CompactionError, TableRef
from lakecleaner.spark import guards, iceberg_ops
from lakecleaner.spark.frames import SameValues
from lakecleaner.spark.iceberg_ops import Expiry, expire_snapshots, older_than, older_than_current, older_than_newest_at
from lakecleaner.spark.plans import KeyMapSource

REF = TableRef("lake", "ns", "t")
CONFLICT = "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale metadata"


class _Snapshot:
    def __init__(self, sid: int, ms: int):
        self.sid, self.ms = sid, ms

    def snapshotId(self) -> int:  # noqa: N802 - Iceberg's Java names
        return self.sid

    def timestampMillis(self) -> int:  # noqa: N802
        return self.ms


class _Table:
    """Iceberg's Table as the expiry calls it: snapshots, the current one, an expiry builder."""

    def __init__(self, times: dict[int, int], current: int):
        self.snaps = [_Snapshot(s, t) for s, t in times.items()]
        self.current, self.calls = current, []

    def snapshots(self):
        return list(self.snaps)

    def currentSnapshot(self):  # noqa: N802
        return next(s for s in self.snaps if s.sid == self.current)

    def expireSnapshots(self):  # noqa: N802
        return self

    def expireOlderThan(self, ms: int):  # noqa: N802
        self.calls.append(("older_than", ms))
        return self

    def retainLast(self, n: int):  # noqa: N802
        self.calls.append(("retain_last", n))
        return self

    def commit(self) -> None:
        cut = dict(self.calls)["older_than"]
        self.snaps = [s for s in self.snaps if s.ms >= cut or s.sid == self.current]
        self.calls.append(("commit", None))

    def refresh(self) -> None:
        pass


@pytest.fixture
def table(monkeypatch):
    t = _Table({1: 100, 2: 200, 3: 300}, current=3)
    monkeypatch.setattr(iceberg_ops, "iceberg_table", lambda spark, ref: t)
    return t


def test_expiry_cuts_as_each_caller_takes_them(table):
    times = {1: 100, 2: 200, 3: 300}
    assert older_than(lambda: 250)(table, times) == 250  # housekeeping: a day ago, as it is
    assert older_than_newest_at(lambda: 250)(table, times) == 200  # maintenance: the table as it was then
    assert older_than_newest_at(lambda: 50)(table, times) is None
    assert older_than_current(table, times) == 300  # a quarantine, the request table: only the current stays


def test_expiry_keeps_what_would_be_lost_first_and_counts_what_went(table):
    seen = []
    expired = expire_snapshots(None, REF, Expiry(older_than_newest_at(lambda: 250), retain_last=2,
                                                 before=lambda t, times: seen.append(dict(times))))
    assert expired == 1 and seen == [{1: 100, 2: 200, 3: 300}]
    assert table.calls == [("older_than", 200), ("retain_last", 2), ("commit", None)]


def test_no_expiry_commit_when_nothing_is_older_than_the_cut(table):
    called = []
    assert expire_snapshots(None, REF, Expiry(older_than(lambda: 100), before=lambda t, s: called.append(1))) == 0
    assert table.calls == [] and called == []


def _file(path: str, p_lo: int | None, p_hi: int | None, o_lo: int | None, o_nulls: int | None) -> DataFile:
    return DataFile(path=path, size=1, partitions=Bounds(p_lo, p_hi), offsets=Bounds(o_lo, None), offset_nulls=o_nulls)


def test_guards_stop_on_late_arrivals_and_null_offsets_only():
    past_run, inside = _file("past.parquet", 0, 0, 11, 0), _file("inside.parquet", 0, 0, 5, 0)
    guards.refuse_late_arrivals(REF, [past_run], {0: 10})
    guards.refuse_late_arrivals(REF, [inside], {})  # deleting by identity: nothing appended can match
    with pytest.raises(CompactionError, match=r"1 data file\(s\) appended .*late arrivals, e\.g\. inside\.parquet"):
        guards.refuse_late_arrivals(REF, [past_run, inside], {0: 10})
    guards.refuse_null_offsets(REF, [past_run])
    for unknown in (_file("n.parquet", 0, 0, 11, 1), _file("n.parquet", 0, 0, 11, None)):
        with pytest.raises(CompactionError, match="null offset"):
            guards.refuse_null_offsets(REF, [unknown])


def test_a_lost_commit_race_is_retried_then_given_up_and_anything_else_passes():
    attempts = []

    def loses_once():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError(CONFLICT)
        return "done"

    assert guards.retry_on_conflict(REF, loses_once, 3) == "done" and len(attempts) == 2
    with pytest.raises(guards.GaveUp, match="gave up after 3 concurrent commits: table ns.t: a concurrent commit"):
        guards.retry_on_conflict(REF, lambda: (_ for _ in ()).throw(RuntimeError(CONFLICT)), 3)
    with pytest.raises(ValueError):
        guards.retry_on_conflict(REF, lambda: (_ for _ in ()).throw(ValueError("no")), 3)
    with pytest.raises(guards.ConcurrentCommitError):
        with guards.yielding(REF):
            raise RuntimeError(CONFLICT)


def test_the_key_maps_merge_reads_only_columns_its_source_has():
    columns = {"tenant": "string", "id": "bigint", "offset": "bigint", "partition": "int", "value": "string"}
    partitioned = resolve_table("lake.db.events", {"compaction.key.columns": "tenant,id"}, columns)
    for tc in (partitioned, replace(partitioned, partition_column=None, key_columns=("id",))):
        schema = KeyMapSource.of(tc)
        has = {*schema.identity, schema.FROM, schema.THROUGH, schema.KEEP, schema.PROTECT, schema.HASH}
        assert set(re.findall(r"\bs\.(\w+)", schema.merge_on(tc))) == has
        assert schema.identity == (["lc_p"] if tc.partition_column else []) + [
            f"lc_k{i}" for i in range(len(tc.key_columns))]


def test_a_delete_by_values_names_the_columns_on_both_sides():
    sql = SameValues(("tenant", "id")).delete_sql("`lake`.`ns`.`t__quarantine`", "v")
    assert sql == "DELETE FROM `lake`.`ns`.`t__quarantine` WHERE (`tenant`, `id`) IN (SELECT `tenant`, `id` FROM v)"
