"""Concurrency guards, in one place: what a commit checks against the writers that committed since
the snapshot it read, and how a commit conflict Iceberg raises is told and retried.

- A compaction commits only if the table changed by appends alone since its pinned snapshot (any
  other commit, another cleaner's or a user's DELETE, makes its decisions stale), and only if none
  of those appends may hold a record its MERGE would delete unseen (``before_commit``).
- A commit that loses the race inside Iceberg (CommitFailedException, a concurrent validation)
  becomes the run's ConcurrentCommitError: the run yields (``yielding``), or an erasure reads the
  table again and retries (``retry_on_conflict``).
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, TypeVar

from pyspark.sql import Row

from lakecleaner.core.config import TableConfig
from lakecleaner.core.table import CompactionError, ConcurrentCommitError, TableRef, conflict_error
from lakecleaner.spark.catalog import lineage_since
from lakecleaner.spark.files import data_files, may_hold_run_offsets
from lakecleaner.spark.phases import Offsets

log = logging.getLogger(__name__)
T = TypeVar("T")


def check_no_concurrent_cleaner(spark, ref: TableRef, snapshot: int) -> tuple[int | None, list[int]]:
    """Since the pinned snapshot, only appends may have happened; anything else (another cleaner, a
    user's DELETE) means our decisions may be stale: stop before committing anything. Returns the
    current snapshot and the appends since the pinned one."""
    current, since, reached = lineage_since(spark, ref, snapshot)
    if not reached:
        raise ConcurrentCommitError(ref.short, f"snapshot {snapshot}, which the run read, is no longer on the table's "
                                               f"current lineage (rolled back or expired); nothing committed, the next "
                                               f"run starts over")
    for row in since:
        if row["operation"] != "append":
            raise ConcurrentCommitError(ref.short, f"table changed by a concurrent {row['operation']} (snapshot "
                                                   f"{row['snapshot_id']}) since snapshot {snapshot}; nothing "
                                                   f"committed, the next run starts over")
    return current, [row["snapshot_id"] for row in since]


def before_commit(spark, ref: TableRef, tc: TableConfig, snapshot: int, deletes_by_key_through: Offsets,
                  removes_bad: bool) -> int | None:
    """Every check a run makes before its commit; raises to stop it, else returns the current
    snapshot. ``deletes_by_key_through``: per partition, the offset up to which the commit deletes
    records by key rather than by identity ({}: none); ``removes_bad``: it removes bad records."""
    current, appends = check_no_concurrent_cleaner(spark, ref, snapshot)
    added = set(appends)  # the files appended since the pinned snapshot, listed once (none: no listing)
    appended = [f for f in data_files(spark, ref, tc, current) if f.snapshot_id in added] if added else []
    refuse_late_arrivals(ref, appended, deletes_by_key_through)
    if removes_bad:
        refuse_null_offsets(ref, appended)
    return current


def refuse_late_arrivals(ref: TableRef, appended: Sequence[Row], through: Offsets) -> None:
    """Records appended during the run at offsets inside its range (late arrivals) were never
    examined, and a MERGE by key reads the table as it is: it would remove them unseen. Stop.
    Deleting by exact identity, nothing appended meanwhile can be matched (null offsets aside)."""
    late = [f.path for f in appended if may_hold_run_offsets(f, through)]
    if late:
        raise CompactionError(ref.short, f"{len(late)} data file(s) appended during the run may hold offsets "
                                         f"inside the run's range (late arrivals, e.g. {late[0]}); nothing "
                                         f"committed, the next run includes them")


def refuse_null_offsets(ref: TableRef, appended: Sequence[Row]) -> None:
    """Bad records leave by their identity, and a null offset does not tell two records of one key
    apart: a record with a null offset appended during the run would be removed with the one the run
    copied to quarantine, never copied itself. Stop if an appended file may hold one (whatever its
    other offsets: refuse_late_arrivals looks at offset bounds, which leave nulls out)."""
    late = [f.path for f in appended if f.offset_nulls is None or f.offset_nulls > 0]
    if late:
        raise CompactionError(ref.short, f"{len(late)} data file(s) appended during the run may hold records "
                                         f"with a null offset (e.g. {late[0]}), which the run's removal of bad "
                                         f"records would match unseen; nothing committed, the next run "
                                         f"includes them")


@contextmanager
def yielding(ref: TableRef) -> Iterator[None]:
    """A commit conflict raised inside becomes the table's ConcurrentCommitError (the run yields);
    any other failure passes unchanged."""
    try:
        yield
    except Exception as exc:
        conflict = conflict_error(ref, exc)
        if conflict is None:
            raise
        raise conflict from exc


class GaveUp(Exception):
    """``retry_on_conflict`` lost the race on every attempt; ``last`` is the last conflict."""

    def __init__(self, attempts: int, last: ConcurrentCommitError):
        super().__init__(f"gave up after {attempts} concurrent commits: {last}")
        self.attempts, self.last = attempts, last


def retry_on_conflict(ref: TableRef, attempt: Callable[[], T], attempts: int) -> T:
    """``attempt()`` again (it reads the table anew) while its commit loses a race inside Iceberg,
    up to ``attempts`` times; then GaveUp. Any other failure passes unchanged."""
    last = None
    for _ in range(attempts):
        try:
            return attempt()
        except Exception as exc:
            last = exc if isinstance(exc, ConcurrentCommitError) else conflict_error(ref, exc)
            if last is None:
                raise
            log.warning("lakecleaner: %s: %s; retrying", ref.short, last)
    raise GaveUp(attempts, last)
