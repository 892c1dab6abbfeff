"""A pure-Python reference model of one compaction run (rules 1-8 of the table contract).

Written for clarity, not speed: it reads the rules literally over a list of records. The Spark job
(``lakecleaner.spark.engine``) implements the same rules with joins and windows over Iceberg tables; the
property-based tests run both on generated logs and require the same outcome.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable

from lakecleaner.core.config import TableConfig
from lakecleaner.core.strategies import Strategy
from lakecleaner.core.rules import (QUARANTINE_NULL_KEY, QUARANTINE_NULL_OFFSET, QUARANTINE_NULL_PARTITION, REASON_EXPIRED_TOMBSTONE, REASON_QUARANTINED, REASON_SUPERSEDED, Checkpoint, Partition, allot_budget, bad_records_at_log_end, run_ends, tombstone_expired)


@dataclass(frozen=True)
class Record:
    """A record as the rules see it: version and tombstone already interpreted (rules 1, 2)."""

    partition: Partition
    offset: int | None
    key: tuple | None  # None when any key column is null
    appended_at_ms: int  # commit time of the snapshot that appended it
    tombstone: bool = False
    version: Any = None  # the strategy's version; None when missing or malformed
    anomalous: bool = False
    rid: Hashable = None  # identity for the comparison; defaults to (partition, offset)

    @property
    def id(self) -> Hashable:
        return self.rid if self.rid is not None else (self.partition, self.offset)


@dataclass
class RunOutcome:
    removed: dict[Hashable, str] = field(default_factory=dict)  # record id -> reason
    quarantined: dict[Hashable, str] = field(default_factory=dict)  # record id -> reason: copied by this run
    log_end_kept: set[Hashable] = field(default_factory=set)  # bad records left in the table as the log end
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    stats: dict[str, int | None] = field(default_factory=dict)

    def survivors(self, records: Iterable[Record]) -> list[Record]:
        return [r for r in records if r.id not in self.removed
                and (r.id not in self.quarantined or r.id in self.log_end_kept)]


def in_a_log(record: Record, partitioned: bool) -> bool:
    """Whether the record has a position in a partition's log (and so may be its log end)."""
    return record.offset is not None and (record.partition is not None or not partitioned)


def bad_record_reason(record: Record, partitioned: bool) -> str | None:
    if record.offset is None:
        return QUARANTINE_NULL_OFFSET
    if partitioned and record.partition is None:
        return QUARANTINE_NULL_PARTITION
    if record.key is None:
        return QUARANTINE_NULL_KEY
    return None


def compact(records: list[Record], checkpoint: Checkpoint, cfg: TableConfig, now_ms: int,
            committed_ms: int | None = None) -> RunOutcome:
    """One run at ``now_ms`` whose commit lands at ``committed_ms`` (None: at its now); the commit
    time dates the tombstones this run cleans first (rules.first_clean_time)."""
    out = RunOutcome()
    if checkpoint.later_than(now_ms):  # cleaned as of a later now already: nothing to take
        out.checkpoint = checkpoint
        out.stats = {"skipped": True}
        return out
    cutoff = now_ms - cfg.min_compaction_lag_ms  # appended at or before this: old enough (rule 3)
    partitioned = cfg.partition_column is not None

    good = [r for r in records if bad_record_reason(r, partitioned) is None]
    by_partition: dict[Partition, list[Record]] = defaultdict(list)
    for r in good:
        by_partition[r.partition].append(r)
    log_end = _log_ends(records, partitioned)  # rule 6: bad records count too
    retained = quarantine(records, checkpoint, cfg, log_end, out)  # rule 7; superseded ones join below

    def is_clean(r: Record) -> bool:
        through = checkpoint.cleaned_through(r.partition)
        return through is not None and r.offset <= through

    # Rule 3: per partition, the dirty prefix that is old enough, then the run's budget.
    eligible: dict[Partition, list[Record]] = {}
    for p, rs in by_partition.items():
        dirty = sorted((r for r in rs if not is_clean(r)), key=lambda r: r.offset)
        young = [r.offset for r in dirty if r.appended_at_ms > cutoff]
        stop = min(young) if young else None
        taken = [r for r in dirty if stop is None or r.offset < stop]
        if taken:
            eligible[p] = taken
    share = allot_budget({p: len(rs) for p, rs in eligible.items()}, cfg.max_records_per_run)
    in_run = {p: eligible[p][: share[p]] for p in eligible if share[p] > 0}
    run_ids = {r.id for rs in in_run.values() for r in rs}
    dirty_counts = {p: sum(not is_clean(r) for r in rs) for p, rs in by_partition.items()}
    fully_taken = {p for p in log_end if len(in_run.get(p, ())) == dirty_counts.get(p, 0)}
    ends = run_ends({p: rs[-1].offset for p, rs in in_run.items()}, retained, fully_taken)

    # Rule 4: keys with a record in this run (plus keys of records kept only as the log end).
    clean = [r for r in good if is_clean(r)]
    keys = {(r.partition, r.key) for rs in in_run.values() for r in rs}
    keys |= {(r.partition, r.key) for r in clean if checkpoint.retained.get(r.partition) == r.offset}
    groups: dict[tuple, list[Record]] = defaultdict(list)
    for r in clean:
        groups[(r.partition, r.key)].append(r)
    for rs in in_run.values():
        for r in rs:
            groups[(r.partition, r.key)].append(r)

    def protected(r: Record) -> bool:  # rule 6
        return cfg.retain_log_end_record and r.offset == log_end[r.partition]

    keep = Strategy(cfg)  # the table's keep rule
    new_tombstones = 0
    expired_cleaned_at: list[int] = []
    bad = len(records) - len(good)
    read = len(run_ids) + bad
    for (p, key), rs in groups.items():
        rs.sort(key=lambda r: keep.order_key(r.offset, r.version), reverse=True)
        winner = rs[0]
        examined = (p, key) in keys
        if examined:
            read += sum(1 for r in rs if r.id not in run_ids)
            for r in rs[1:]:
                if protected(r):
                    retained[p] = r.offset
                else:
                    out.removed[r.id] = REASON_SUPERSEDED
        if winner.tombstone and winner.id in run_ids:
            new_tombstones += 1  # first cleaned now; its horizon starts here
        # Rule 5: a winning tombstone goes once delete.retention.ms has passed since its first cleaning (KIP-534).
        if winner.tombstone and winner.id not in run_ids:
            first = checkpoint.first_cleaned_at(p, winner.offset)
            if first is not None and tombstone_expired(first, now_ms, cfg.delete_retention_ms):
                if not examined:
                    read += 1
                if not protected(winner):
                    out.removed[winner.id] = REASON_EXPIRED_TOMBSTONE
                    expired_cleaned_at.append(first)

    out.checkpoint = checkpoint.advanced(now_ms, ends, retained, cfg.delete_retention_ms, new_tombstones, committed_ms)
    superseded = sum(1 for v in out.removed.values() if v == REASON_SUPERSEDED)
    expired = sum(1 for v in out.removed.values() if v == REASON_EXPIRED_TOMBSTONE)
    out.stats = {
        "records_read": read,
        "records_kept": read - superseded - expired - (bad - len(out.log_end_kept)),
        "removed_superseded": superseded,
        "removed_expired_tombstones": expired,
        "quarantined": len(out.quarantined),
        "anomalous": sum(1 for rs in in_run.values() for r in rs if r.anomalous),
        "dirty_records_in_run": len(run_ids),
        "expired_tombstone_latest_cleaned_ms": max(expired_cleaned_at, default=None),
    }
    return out


def _log_ends(records: Iterable[Record], partitioned: bool) -> dict[Partition, int]:
    """Each partition's highest offset, over every record with a position in its log."""
    ends: dict[Partition, int] = {}
    for r in records:
        if in_a_log(r, partitioned):
            ends[r.partition] = max(r.offset, ends.get(r.partition, r.offset))
    return ends


def quarantine(records: list[Record], checkpoint: Checkpoint, cfg: TableConfig, log_end: dict[Partition, int],
               out: RunOutcome) -> dict[Partition, int]:
    """Rule 7: records that cannot take part are copied to quarantine and removed. Not subject to the
    lag: a record with no key or offset can never be compacted, so waiting would only delay its
    report. Rule 6 first: a bad record at its partition's log end stays until a later record
    arrives, remembered in the checkpoint as retained, so that it is copied once. Returns those."""
    partitioned = cfg.partition_column is not None
    bad = [(r, reason) for r in records if (reason := bad_record_reason(r, partitioned)) is not None]
    bad_ends = _log_ends((r for r, _ in bad), partitioned)
    kept = bad_records_at_log_end(bad_ends, log_end, cfg.retain_log_end_record)
    for r, reason in bad:
        placed = in_a_log(r, partitioned)
        copied_before = placed and checkpoint.retained.get(r.partition) == r.offset
        if not copied_before:
            out.quarantined[r.id] = reason
        if placed and kept.get(r.partition) == r.offset:
            out.log_end_kept.add(r.id)
        elif copied_before:
            out.removed[r.id] = REASON_QUARANTINED
    return kept
