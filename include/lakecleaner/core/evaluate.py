"""Which tables need cleaning, from metadata alone (Kafka's "filthiest log first", plus KIP-354).

Pure: works on ``TableMetadata`` (data-file sizes, offset and partition bounds, append times,
properties; a file is judged dirty or clean by datafiles.judge, as the run judges it), which
``lakecleaner.core.metadata`` reads with pyiceberg without opening a data file. Every figure follows
Kafka's definitions on bytes:

- clean bytes: data at or below the checkpoint; cleanable bytes: dirty data appended at least
  min.compaction.lag.ms ago; uncleanable bytes: younger dirty data (left out of the ratio);
- dirty ratio = cleanable / (clean + cleanable);
- must-clean ratio (KIP-354) = dirty bytes appended more than max.compaction.lag.ms ago / (clean + cleanable);
- max compaction delay = max(0, now - earliest dirty append - max.compaction.lag.ms);
- eligible = must-clean ratio > 0, or a tombstone is past its horizon, or dirty ratio > min.cleanable.dirty.ratio;
  eligible tables are ordered by must-clean ratio, then dirty ratio.

Beside them, the table's delete files, their bytes and the share of records they delete
(core.deletefiles: the figure maintenance decides its rewrite on); they do not make a table eligible.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from lakecleaner.core.config import (LONG_MAX, CHECKPOINT_PROPERTY, ConfigError, TableConfig, physical_deletion_bound, resolve_table)
from lakecleaner.core.datafiles import DataFile, file_log_ends, judge
from lakecleaner.core.deletefiles import DeleteFigures, DeleteFile, delete_figures
from lakecleaner.core.records import EvaluationStatus
from lakecleaner.core.rules import Checkpoint, CheckpointError


@dataclass(frozen=True)
class RefSnapshot:
    """A tag or branch other than main, and the commit time of the snapshot it keeps."""
    name: str
    kind: str  # "tag" or "branch"
    snapshot_id: int
    snapshot_ms: int


@dataclass
class TableMetadata:
    table: str
    properties: Mapping[str, str]
    columns: Mapping[str, str]  # name -> Spark simple type
    files: list[DataFile] = field(default_factory=list)
    snapshots: int = 0
    refs: tuple[RefSnapshot, ...] = ()  # every ref but main
    deletes: list[DeleteFile] = field(default_factory=list)  # live delete files of the current snapshot

    @property
    def delete_figures(self) -> DeleteFigures:
        return delete_figures(self.deletes, sum(f.records for f in self.files))


@dataclass
class Evaluation:
    table: str
    status: EvaluationStatus
    reason: str
    strategy: str | None = None
    clean_bytes: int = 0
    cleanable_bytes: int = 0
    uncleanable_bytes: int = 0
    must_clean_bytes: int = 0
    dirty_ratio: float = 0.0
    must_clean_ratio: float = 0.0
    max_compaction_delay_ms: int = 0
    tombstones_due: bool = False
    min_cleanable_dirty_ratio: float | None = None
    max_compaction_lag_ms: int | None = None
    # Set when the table's own snapshot-retention properties make physical deletion take longer than
    # the README's bound (config.physical_deletion_bound): the bound that then holds.
    physical_deletion: str | None = None
    # core.deletefiles' figures (an evaluation recorded before them reads as none)
    delete_files: int = 0
    delete_bytes: int = 0
    delete_ratio: float = 0.0  # deleted records / live records; maintenance rewrites past REWRITE_DELETE_RATIO

    @property
    def eligible(self) -> bool:
        return self.status == EvaluationStatus.ELIGIBLE

    def as_dict(self) -> dict:
        return {**asdict(self), "eligible": self.eligible}


def _physical_deletion(tc: TableConfig, refs: Iterable[RefSnapshot], now_ms: int) -> str | None:
    """What bounds physical deletion when the README's bound does not hold: the table's snapshot
    retention (config.physical_deletion_bound), and each tag or branch keeping a snapshot older than
    the bound's max.compaction.lag.ms + min.compaction.lag.ms: snapshot expiry never removes what a
    ref keeps, so records removed (or erased) since that snapshot stay reachable while it exists."""
    notes = [physical_deletion_bound(tc)]
    if tc.max_compaction_lag_ms < LONG_MAX:
        older = now_ms - tc.max_compaction_lag_ms - tc.min_compaction_lag_ms
        notes += [f"{r.kind} {r.name!r} keeps snapshot {r.snapshot_id} ({(now_ms - r.snapshot_ms) // 1000} s old): "
                  "records removed since stay reachable while it exists (no bound in time)"
                  for r in refs if r.snapshot_ms < older]
    return "; ".join(n for n in notes if n) or None


def _deletes(meta: TableMetadata) -> dict[str, Any]:
    """Evaluation's delete-file fields, from the one figure (core.deletefiles)."""
    d = meta.delete_figures
    return {"delete_files": d.files, "delete_bytes": d.bytes, "delete_ratio": d.ratio}


def evaluate_table(meta: TableMetadata, now_ms: int, defaults: Mapping[str, Any] | None = None,
                   uncleanable_reason: str | None = None) -> Evaluation:
    if uncleanable_reason:
        return Evaluation(meta.table, EvaluationStatus.UNCLEANABLE, uncleanable_reason, **_deletes(meta))
    try:
        tc: TableConfig = resolve_table(meta.table, meta.properties, meta.columns, defaults)
        ckpt = Checkpoint.from_json(meta.properties.get(CHECKPOINT_PROPERTY))
    except ConfigError as exc:
        return Evaluation(meta.table, EvaluationStatus.INVALID_CONFIG, str(exc))
    except CheckpointError as exc:
        return Evaluation(meta.table, EvaluationStatus.INVALID_CHECKPOINT, f"table {meta.table}: {exc} ({CHECKPOINT_PROPERTY}; "
                                                             "fix or unset it to clean the table from its start)",
                          **_deletes(meta))
    if ckpt.later_than(now_ms):  # a backfill of an earlier interval: the engine would take nothing
        return Evaluation(meta.table, EvaluationStatus.NOT_ELIGIBLE, f"already cleaned as of a later time (a run at now "
                                                      f"{ckpt.as_of_ms}): a run of an earlier interval takes nothing",
                          strategy=tc.strategy, min_cleanable_dirty_ratio=tc.min_cleanable_dirty_ratio,
                          max_compaction_lag_ms=tc.max_compaction_lag_ms, **_deletes(meta))
    partitioned = tc.partition_column is not None
    ends = file_log_ends(meta.files, partitioned) if tc.retain_log_end_record else None
    ckpt, other_layout, reset = ckpt.vouched(partitioned, ends)  # as the run does (engine._reset_checkpoint)
    clean = cleanable = uncleanable = must = 0.0
    earliest_dirty = None
    for f in meta.files:
        dirty = f.size * judge(f, ckpt.offsets, partitioned).dirty_fraction
        clean += f.size - dirty
        if dirty <= 0:
            continue
        earliest_dirty = f.appended_at_ms if earliest_dirty is None else min(earliest_dirty, f.appended_at_ms)
        if now_ms - f.appended_at_ms >= tc.min_compaction_lag_ms:
            cleanable += dirty
        else:
            uncleanable += dirty
        if now_ms - f.appended_at_ms > tc.max_compaction_lag_ms:
            must += dirty
    base = clean + cleanable
    ev = Evaluation(
        meta.table, EvaluationStatus.NOT_ELIGIBLE, "", strategy=tc.strategy,
        clean_bytes=int(clean), cleanable_bytes=int(cleanable), uncleanable_bytes=int(uncleanable),
        must_clean_bytes=int(must),
        dirty_ratio=round(cleanable / base, 6) if base else 0.0,
        must_clean_ratio=round(must / base, 6) if base else 0.0,
        max_compaction_delay_ms=max(0, now_ms - earliest_dirty - tc.max_compaction_lag_ms) if earliest_dirty is not None else 0,
        tombstones_due=ckpt.tombstones_due(now_ms, tc.delete_retention_ms),
        min_cleanable_dirty_ratio=tc.min_cleanable_dirty_ratio, max_compaction_lag_ms=tc.max_compaction_lag_ms,
        physical_deletion=_physical_deletion(tc, meta.refs, now_ms), **_deletes(meta))
    reasons = [_reset_reason(reset)] if reset else []
    if other_layout:
        reasons.insert(0, f"checkpoint written while the table was {'un' if partitioned else ''}partitioned "
                          f"(compaction.partition.column changed): those entries reset")
    if ev.must_clean_ratio > 0:
        reasons.append(f"must clean: {ev.must_clean_ratio:.1%} of the data is dirty for longer than max.compaction.lag.ms")
    if ev.tombstones_due:
        reasons.append("tombstones past delete.retention.ms")
    if ev.dirty_ratio > tc.min_cleanable_dirty_ratio:
        reasons.append(f"dirty ratio {ev.dirty_ratio:.2f} > min.cleanable.dirty.ratio {tc.min_cleanable_dirty_ratio}")
    if reasons:
        ev.status, ev.reason = EvaluationStatus.ELIGIBLE, "; ".join(reasons)
    elif cleanable == 0 and uncleanable > 0:
        ev.reason = "dirty data is younger than min.compaction.lag.ms"
    elif cleanable == 0:
        ev.reason = "clean"
    else:
        ev.reason = f"dirty ratio {ev.dirty_ratio:.2f} <= min.cleanable.dirty.ratio {tc.min_cleanable_dirty_ratio}"
    return ev


def _reset_reason(partitions: list) -> str:
    shown = ", ".join("the log" if p is None else str(p) for p in partitions)
    return f"checkpoint past the log end of partition(s) {shown}: reset, cleaned from the start again"


def cleaning_order(evaluations: Iterable[Evaluation]) -> list[Evaluation]:
    """Eligible tables, filthiest first: must-clean ratio, then dirty ratio (KIP-354)."""
    return sorted((e for e in evaluations if e.eligible),
                  key=lambda e: (-e.must_clean_ratio, -e.dirty_ratio, e.table))



def format_table(evaluations: list[Evaluation]) -> str:
    """The readable form of `lakecleaner evaluate`."""
    header = ("table", "status", "strategy", "dirty", "must-clean", "delay s", "clean MB", "cleanable MB",
              "young MB", "deletes", "delete MB", "reason")
    rows = [header]
    for e in evaluations:
        rows.append((e.table, e.status, e.strategy or "-", f"{e.dirty_ratio:.2f}", f"{e.must_clean_ratio:.2f}",
                     f"{e.max_compaction_delay_ms // 1000}", f"{e.clean_bytes / 2**20:.2f}",
                     f"{e.cleanable_bytes / 2**20:.2f}", f"{e.uncleanable_bytes / 2**20:.2f}", f"{e.delete_files}",
                     f"{e.delete_bytes / 2**20:.2f}", e.reason))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header) - 1)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
    return "\n".join(lines)
