"""One compaction run of one Iceberg table, on Spark: the log cleaner's two phases as set operations.

Phase 1: read only the dirty part of the table (records past the checkpoint, pruned by Iceberg
file statistics) and find the run's range (old enough, within the budget, a prefix of each
partition in offset order). Phase 2 has two forms:
- the key map, for every strategy: Kafka's own cleaner. A map of the run's keys to the record each
  keeps (KIP-280's keep rule, strategies.Strategy), and one MERGE deleting every other record of
  those keys up to the key's highest offset in the run. Under the offset strategy a run's record
  always beats the cleaned ones, so the MERGE's scan is the only read of the clean part; under a
  versioned one the map is built over the run's records and, in the same aggregation, the cleaned
  record of each key that may lose (a late lower version loses to its cleaned winner), read once
  from the clean part. When the whole dirty part is the run (nothing too young, within budget),
  phase 1 builds the map directly;
  Bad records to move to quarantine (rule 7) join the same MERGE by their exact identity;
- the ranked path, only where a run must re-examine a log end an earlier run kept (rule 6). It
  looks the run's keys up in the clean part, ranks every candidate, and deletes the losers,
  expired tombstones and bad records with one MERGE.
Nothing is held in driver memory but per-partition figures and, below BROADCAST_ROWS_MAX rows, the
broadcast side of a join; joins, aggregations and windows spill, so memory is bounded.

The table is read at one pinned snapshot. The MERGE writes position deletes (merge-on-read), so
clean data files are never rewritten and every record keeps the data file its append created: the
commit time of that append is the record's exact append time (rule 3).
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Mapping

from pyspark.sql import Column, DataFrame, functions as F, Window

from lakecleaner.spark import guards, plans
from lakecleaner.core.append_times import read_append_times
from lakecleaner.core.table import (CompactionError, ConcurrentCommitError, TableRef, check_layout, first_line, create_unless_exists)
from lakecleaner.spark.catalog import (current_snapshot, fail_point, format_version, load_table_config, committed_snapshot, iceberg_table, set_layout_defaults, swap_property, table_exists)
from lakecleaner.core.config import CHECKPOINT_PROPERTY, ConfigError, LakecleanerConfig, TableConfig
from lakecleaner.core.records import CleanerStats, RunStatus
from lakecleaner.spark.files import (bytes_scanned, clean_version_ceiling, data_files, dirty_records_bound, dirty_version_floors)
from lakecleaner.spark.frames import Frames, at_positions, clean_pred, dirty_scan, local_frame, partition_pred, small_df
from lakecleaner.spark.history import record_history
from lakecleaner.core.rules import (NO_PARTITION, Checkpoint, CheckpointError, Partition, allot_budget, bad_records_at_log_end, check_now_ms, first_clean_time, partition_value, run_ends)
from lakecleaner.core.datafiles import file_log_ends
from lakecleaner.spark.phases import (BadRecords, CleanPart, CleanRivals, DataFiles, Held, KeyMap, Offsets, RunRange,
                                      RunStart)
from lakecleaner.spark.plans import Plan, RunContext, bad_figures, key_map, key_map_sums
from lakecleaner.core.strategies import sql_string

log = logging.getLogger(__name__)


def compact_table(spark, cfg: LakecleanerConfig, table: str, now_ms: int | None = None, dry_run: bool = False,
                  run_id: str | None = None) -> dict[str, Any]:
    """Run one compaction of ``table``; returns the run's statistics (also written to run history)."""
    ref = TableRef.parse(table, cfg.catalog.name)
    run_id = run_id or uuid.uuid4().hex[:12]
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    started = time.time()
    stats = CleanerStats(run_id=run_id, table=ref.short, now_ms=now_ms, dry_run=dry_run)
    try:
        try:
            check_now_ms(now_ms)
        except ValueError as exc:
            raise CompactionError(ref.short, str(exc)) from None
        stats = _compact(spark, cfg, ref, now_ms, dry_run, stats)
        stats = replace(stats, status=stats.status or (RunStatus.DRY_RUN if dry_run else RunStatus.COMMITTED))
    except Exception as exc:  # noqa: BLE001 - record the failure, then fail loudly
        if isinstance(exc, CommittedRunError):  # the history shows the commit and what it removed
            stats = exc.stats
        stats = replace(stats, status=RunStatus.COMMITTED if isinstance(exc, CommittedRunError)
                        else RunStatus.YIELDED if isinstance(exc, ConcurrentCommitError) else RunStatus.FAILED,
                        error=str(exc) if isinstance(exc, (CompactionError, ConfigError))
                        else f"table {ref.short}: {type(exc).__name__}: {first_line(exc)}",
                        duration_ms=int((time.time() - started) * 1000))
        record_history(spark, cfg, stats)
        if isinstance(exc, (CompactionError, ConfigError)):
            raise
        raise CompactionError(ref.short, f"{type(exc).__name__}: {first_line(exc)}") from exc
    stats = replace(stats, duration_ms=int((time.time() - started) * 1000))
    record_history(spark, cfg, stats)
    return stats.as_result()


def _compact(spark, cfg: LakecleanerConfig, ref: TableRef, now_ms: int, dry_run: bool,
             stats: CleanerStats) -> CleanerStats:
    """Kafka's Cleaner.doClean, step by step: start at the pinned snapshot; find the bad records
    and the run's range (phase 1); look at the clean side; decide (phase 2); commit. Each phase
    hands the run's statistics on, with its figures added."""
    phase = _Phases()
    start, stats = _start(spark, cfg, ref, now_ms, dry_run, stats)
    if start is None:
        return stats
    phase("setup_s")
    held = Held()
    try:
        bad = _bad_records(start, held)
        phase("bad_rows_s")
        key_map_run = not start.retained
        clean = _clean_part(start, held)
        rng = _run_range(spark, start, held, key_map_run, clean.rivals)
        phase("dirty_s")
        ctx, kept_bad = _clean_side(spark, start, held, rng, bad, clean)
        # Phase 2. Kafka's own algorithm: a map of the run's keys, and one MERGE that reads the table
        # once (a versioned map has read the clean part's rivals of its late keys while it was
        # built); bad records to quarantine are matched by the same MERGE. A log end kept by an
        # earlier run takes the ranked path instead.
        bad_rows = bad.rows.where(~at_positions(start.fr.p, start.fr.o, kept_bad)) if bad.n else None
        removed_bad = bad.n - len(kept_bad)
        if key_map_run:
            plan = plans.key_map_plan(ctx, rng.key_map, bad_rows, removed_bad)
            bytes_read = sum(f.size for f in start.files)  # its MERGE reads every file (keys and offsets)
        else:
            plan = plans.ranked_plan(ctx, bad_rows, removed_bad)
            bytes_read = bytes_scanned(start.files, start.ckpt_offsets, start.unpartitioned)
        phase("plan_s")
        move = CheckpointMove(start.external(ctx.ends), start.external({**plan.new_retained, **kept_bad}),
                              plan.new_tombstones)
        new_ckpt = move.applied(start)  # dated at the commit, if the run commits (_commit)
        stats = replace(
            stats, quarantined=bad.quarantined, expired_tombstone_latest_cleaned_ms=_latest_cleaned(start, plan),
            anomalous=rng.anomalous, dirty_records_in_run=rng.n_run, bytes_read=bytes_read,
            checkpoint=_ckpt_summary(new_ckpt))
        if dry_run:
            superseded, read = plan.figures(None)
            return stats.with_figures(read + bad.n, superseded, plan.expired, removed_bad, phase.times)
        return _commit(spark, cfg, start, bad, removed_bad, plan, move, stats, phase)
    finally:
        held.release()


@dataclass(frozen=True)
class CheckpointMove:
    """How far a run moves the checkpoint (external partitions), applied once its commit time is
    known: its history entry is dated first_clean_time(now, commit)."""
    ends: Mapping[Partition, int]
    retained: Mapping[Partition, int]
    new_tombstones: int

    def applied(self, start: RunStart, committed_ms: int | None = None) -> Checkpoint:
        return start.ckpt.advanced(start.now_ms, self.ends, self.retained, start.tc.delete_retention_ms,
                                   self.new_tombstones, committed_ms)


def _start(spark, cfg: LakecleanerConfig, ref: TableRef, now_ms: int, dry_run: bool,
           stats: CleanerStats) -> tuple[RunStart | None, CleanerStats]:
    """Load the settings and checkpoint, pin the snapshot they came from, and list its files."""
    tc, props = load_table_config(spark, cfg, ref)
    check_layout(ref, props)  # a dry run refuses what the run would refuse
    if not dry_run:
        set_layout_defaults(spark, ref, props)
    snapshot = current_snapshot(spark, ref, refresh=False)  # the version the properties came from
    try:
        ckpt = Checkpoint.from_json(props.get(CHECKPOINT_PROPERTY))
    except CheckpointError as exc:
        raise CompactionError(ref.short, f"{exc} ({CHECKPOINT_PROPERTY}; fix or unset it to clean the table from "
                                         f"its start); nothing committed") from None
    stats = replace(stats, strategy=tc.strategy, delete_retention_ms=tc.delete_retention_ms, records_read=0,
                    records_kept=0, removed_superseded=0, removed_expired_tombstones=0, quarantined=0, anomalous=0,
                    dirty_records_in_run=0, bytes_read=0, bytes_written=0, files_rewritten=0, delete_files_written=0,
                    expired_tombstone_latest_cleaned_ms=None, snapshot_id=snapshot, committed_snapshot_id=None,
                    checkpoint=_ckpt_summary(ckpt))
    if ckpt.later_than(now_ms):  # a backfill behind the table's last run: undo nothing, repeat nothing
        return None, replace(stats, status=RunStatus.SKIPPED, reason=(
            f"already cleaned as of a later time (now {ckpt.as_of_ms} > {now_ms}): a run of an earlier "
            "interval takes nothing"))
    if snapshot is None:
        return None, stats
    files = data_files(spark, ref, tc, snapshot, read_append_times(cfg, ref.short))
    ckpt, reset = _reset_checkpoint(ref, tc, ckpt, files)
    stats = replace(stats, checkpoint_reset=reset)
    start = RunStart(ref=ref, tc=tc, fr=Frames(tc), snapshot=snapshot, ckpt=ckpt,
                     ckpt_property=props.get(CHECKPOINT_PROPERTY),
                     retained=RunStart.internal(ckpt.retained), files=files,
                     base=spark.read.option("snapshot-id", snapshot).table(ref.sql()), now_ms=now_ms)
    return start, stats


def _bad_records(start: RunStart, hold: Held) -> BadRecords:
    """Rule 7: bad records, anywhere. Iceberg's null counts say where none can be: no scan then."""
    fr = start.fr
    rows = hold(start.base.where(fr.bad).select("*", fr.bad_reason.alias("quarantine_reason")))
    maybe_bad = any(f.may_hold_bad_records for f in start.files)
    figures = bad_figures(fr, rows, start.retained) if maybe_bad else ()
    n = sum(r.n for r in figures)
    return BadRecords(rows=rows, n=n, quarantined=n - sum(r.copied_before for r in figures),
                      ends={r.p: r.end for r in figures if r.p is not None and r.end is not None})


def _dirty_records(spark, start: RunStart) -> tuple[DataFrame, Column, bool]:
    """The dirty part (past the checkpoint, pushed down to Iceberg so clean files are skipped), in
    the rules' columns. Records are dated by their data file only when some file is young enough
    for the lag to matter. Not persisted: Iceberg prunes a rescan to the dirty files, which costs
    less than caching."""
    fr, cutoff = start.fr, start.now_ms - start.tc.min_compaction_lag_ms
    records = dirty_scan(spark, start.ref, start.snapshot, fr, start.ckpt_offsets, start.files)
    any_young = any(f.appended_at_ms > cutoff for f in start.files)
    if any_young:
        file_times = local_frame(spark, [(f.path, f.appended_at_ms) for f in start.files],
                                 "_file string, appended_at bigint")
        dirty = (fr.narrow(records.select("*", "_file"), extra=[F.col("_file")])
                 .join(F.broadcast(file_times), "_file", "left").drop("_file"))
        young = F.coalesce(F.col("appended_at"), F.lit(0)) > cutoff
    else:
        dirty, young = fr.narrow(records), F.lit(False)
    return dirty, young, any_young


def _run_range(spark, start: RunStart, hold: Held, key_map_run: bool, rivals: CleanRivals | None) -> RunRange:
    """Phase 1: per partition, stop at the first record younger than the lag (rule 3); then share
    the budget (compaction.max.records.per.run) between partitions."""
    tc = start.tc
    dirty, young, any_young = _dirty_records(spark, start)
    anom = F.sum((~F.col("has_ver")).cast("int")).alias("anom")
    # The common run: no record is younger than the lag, so the run is the whole dirty part unless
    # it is over budget. Its key map is then built straight from the dirty part, and summing the map
    # per partition gives the figures the run needs: one aggregation of the dirty part, not two.
    kmap, per_p = None, None
    # A versioned map also reads the clean part: built here only where the metadata says the dirty
    # part fits the budget, so that an over-budget run does not read the clean part for nothing.
    if key_map_run and not any_young and (rivals is None or rivals.late_bound <= tc.max_records_per_run):
        frame = hold(key_map(dirty, start.fr.strategy, start.rank_bounds, rivals))
        kmap = KeyMap(frame, key_map_sums(frame, start.ref, start.rank_bounds))
        if sum(r.n for r in kmap.sums) > tc.max_records_per_run:
            frame.unpersist()  # a partial run: its map is built from its range below
            kmap = None
        else:  # nothing young
            per_p = [{"p": r.p, "end": r.end, "n": r.n, "anom": r.anom, "young_min": None} for r in kmap.sums]
    if per_p is None:
        per_p = dirty.groupBy("p").agg(F.min(F.when(young, F.col("o"))).alias("young_min"),
                                       F.max("o").alias("end"), F.count("*").alias("n"), anom).collect()
    young_min = {r["p"]: r["young_min"] for r in per_p if r["young_min"] is not None}
    eligible, by_p = dirty, per_p
    if young_min:
        eligible = hold(dirty.join(F.broadcast(small_df(spark, young_min, "young_min")), "p", "left").where(
            F.col("young_min").isNull() | (F.col("o") < F.col("young_min"))).drop("young_min"))
        by_p = eligible.groupBy("p").agg(F.max("o").alias("end"), F.count("*").alias("n"), anom).collect()
    counts = {r["p"]: int(r["n"]) for r in by_p if r["n"]}
    share = allot_budget(counts, tc.max_records_per_run)
    taken = [p for p, n in share.items() if n > 0]
    cut = {p: n for p, n in share.items() if 0 < n < counts[p]}
    ends = {r["p"]: r["end"] for r in by_p if r["p"] in taken and r["p"] not in cut}
    anomalous = sum(int(r["anom"] or 0) for r in by_p if r["p"] in taken and r["p"] not in cut)
    in_run = eligible
    if cut:  # the budget ends inside these partitions: find the offset it ends at
        ranked = (eligible.where(F.col("p").isin(list(cut))).select("p", "o")
                  .withColumn("rn", F.row_number().over(Window.partitionBy("p").orderBy("o"))))
        cut_rows = ranked.join(F.broadcast(small_df(spark, cut, "rn")), ["p", "rn"]).collect()
        ends.update({r["p"]: r["o"] for r in cut_rows})
        in_run = in_run.join(F.broadcast(small_df(spark, {p: ends[p] for p in cut}, "cut_end")), "p", "left").where(
            F.col("cut_end").isNull() | (F.col("o") <= F.col("cut_end"))).drop("cut_end")
    if len(taken) < len(counts):
        in_run = in_run.where(F.col("p").isin(list(taken)))
    if cut or len(taken) < len(counts):
        in_run = hold(in_run)
    if cut:
        anomalous += int(in_run.where(F.col("p").isin(list(cut))).agg(anom).collect()[0]["anom"] or 0)
    return RunRange(in_run=in_run.drop("appended_at"), n_run=sum(share.values()), ends=ends,
                    log_end={r["p"]: r["end"] for r in per_p}, dirty_partitions=frozenset(r["p"] for r in per_p),
                    young_min=young_min, cut=cut, taken=frozenset(taken), anomalous=anomalous, key_map=kmap)


def _clean_part(start: RunStart, hold: Held) -> CleanPart:
    tc, fr, ckpt = start.tc, start.fr, start.ckpt
    in_clean = clean_pred(tc, start.ckpt_offsets) & ~fr.bad
    clean = fr.narrow(start.base.where(in_clean), with_tomb=False)
    expired_through: dict[int, int] = {}
    for p in start.ckpt_offsets:
        h = ckpt.expired_through(p, start.now_ms, tc.delete_retention_ms)
        if h is not None:
            expired_through[partition_value(p)] = h
    # Clean tombstones past their horizon, from a scan Iceberg prunes by null counts / flag bounds.
    expired_clean = None
    if expired_through:
        expired_pred = partition_pred("p", "o", expired_through, "<=", False)
        expired_clean = hold(fr.narrow(start.base.where(in_clean & fr.tomb_pushdown))
                             .where(F.col("tomb") & expired_pred))
    rivals = None
    if fr.strategy.versioned and start.ckpt_offsets:
        unpartitioned = tc.partition_column is None
        ceiling = clean_version_ceiling(start.files, start.ckpt_offsets, unpartitioned)
        rivals = CleanRivals(clean=clean, expired_clean=expired_clean, ceiling=ceiling,
                             floors=dirty_version_floors(start.files, start.ckpt_offsets, unpartitioned, ceiling),
                             late_bound=dirty_records_bound(start.files, start.ckpt_offsets, unpartitioned))
    return CleanPart(clean=clean, expired_clean=expired_clean, expired_through=expired_through, rivals=rivals)


def _clean_side(spark, start: RunStart, hold: Held, rng: RunRange, bad: BadRecords,
                part: CleanPart) -> tuple[RunContext, Offsets]:
    """Each partition's log end (rule 6), including bad records that are one, and where the run
    ends. Returns the plans' context and the bad records kept as their partition's log end."""
    tc, clean, expired_through = start.tc, part.clean, part.expired_through
    # Log end of partitions with no dirty record (only needed where something there may go), then
    # of every partition with bad records: those count too (rule 6 holds for a keyless record).
    log_end = dict(rng.log_end)
    idle = (set(start.retained) | set(expired_through) | set(bad.ends)) - set(log_end)
    if idle and tc.retain_log_end_record:
        for r in clean.where(F.col("p").isin(list(idle))).groupBy("p").agg(F.max("o").alias("m")).collect():
            log_end[r["p"]] = r["m"]
    for p, end in bad.ends.items():
        log_end[p] = max(end, log_end.get(p, end))
    kept_bad = bad_records_at_log_end(bad.ends, log_end, tc.retain_log_end_record)
    ends = run_ends(rng.ends, kept_bad, {p for p in kept_bad if p not in rng.young_min and p not in rng.cut
                                         and (p in rng.taken or p not in rng.dirty_partitions)})
    ctx = RunContext(spark=spark, start=start, run=rng, part=part, hold=hold, ends=ends, log_end=log_end)
    return ctx, kept_bad


def _latest_cleaned(start: RunStart, plan: Plan) -> int | None:
    """See the run history's expired_tombstone_latest_cleaned_ms."""
    if not plan.expired_by_partition:
        return None
    unpartitioned = start.tc.partition_column is None
    return max(start.ckpt.first_cleaned_at(None if unpartitioned else p, o) for p, o in plan.expired_by_partition.items())


def _commit(spark, cfg: LakecleanerConfig, start: RunStart, bad: BadRecords, removed_bad: int, plan: Plan,
            move: CheckpointMove, stats: CleanerStats, phase: "_Phases") -> CleanerStats:
    """Stop if another writer did more than append; quarantine; MERGE; then the checkpoint.
    Returns the run's statistics with the commit's figures."""
    ref, fr, run_id = start.ref, start.fr, stats.run_id
    current = guards.before_commit(spark, ref, start.tc, start.snapshot, plan.deletes_by_key_through, bool(removed_bad))
    if bad.quarantined:  # not those an earlier run copied and kept as the log end
        _quarantine(spark, cfg, ref, bad.rows.where(~at_positions(fr.p, fr.o, start.retained)), run_id, start.now_ms)
    fail_point("after_quarantine")
    phase("pre_merge_s")
    with guards.yielding(ref):
        merged = plan.commit(run_id)
    try:  # past the MERGE: a failure must say it committed, and the run is recorded as such
        commit = merged and committed_snapshot(spark, ref, current)
        phase("merge_s")
        superseded, read = plan.figures(commit["summary"] if commit else {})
        if commit:
            summary = commit["summary"]
            stats = replace(stats, committed_snapshot_id=commit["snapshot_id"],
                            bytes_written=int(summary.get("added-files-size", 0)),
                            files_rewritten=int(summary.get("deleted-data-files", 0)),
                            delete_files_written=int(summary.get("added-delete-files", 0)))
        stats = stats.with_figures(read + bad.n, superseded, plan.expired, removed_bad, phase.times)
        fail_point("after_merge")
        committed_ms = commit["committed_ms"] if commit else int(time.time() * 1000)
        new_ckpt = move.applied(start, committed_ms)
        # what dates the tombstones this run cleaned first: the model takes the same time (tests)
        stats = replace(stats, checkpoint=_ckpt_summary(new_ckpt),
                        cleaned_at_ms=first_clean_time(start.now_ms, committed_ms))
        if new_ckpt.to_json() != start.ckpt.to_json():
            stats = _write_checkpoint(spark, start, new_ckpt, merged, stats)
        phase("checkpoint_s")
    except Exception as exc:
        if not merged:
            raise
        raise CommittedRunError(ref.short, stats, exc) from exc
    return replace(stats, phases=dict(phase.times))


def _write_checkpoint(spark, start: RunStart, new_ckpt: Checkpoint, merged: bool, stats: CleanerStats) -> CleanerStats:
    """The run's checkpoint, unless another run moved it since this one read it (a backfill beside
    the scheduled run, neither of whose MERGEs the other's pre-commit check saw: one removed
    nothing). Writing over it could move it backwards; leaving it makes the next run re-examine
    what this one cleaned (and date later, never earlier, the tombstones it cleaned first)."""
    ref = start.ref
    if swap_property(spark, ref, CHECKPOINT_PROPERTY, start.ckpt_property, new_ckpt.to_json()):
        return stats
    if not merged:
        raise ConcurrentCommitError(ref.short, "another run moved the checkpoint since this run read it; nothing "
                                               "committed, the next run starts over")
    log.warning("lakecleaner: table %s: another run moved the checkpoint since this run read it; its checkpoint is "
                "kept (the next run re-examines what this one cleaned)", ref.short)
    kept = Checkpoint.from_json(iceberg_table(spark, ref).properties().get(CHECKPOINT_PROPERTY))
    return replace(stats, checkpoint=_ckpt_summary(kept))


class CommittedRunError(CompactionError):
    """A step after the run's MERGE committed failed (finding its snapshot, writing the checkpoint).
    The table is cleaned as the run decided; only the checkpoint did not move, so the next run
    re-examines the same records (removing nothing twice). ``stats`` holds the run's figures, so
    the history records the commit and the tombstone audit sees what it removed."""

    def __init__(self, table: str, stats: CleanerStats, cause: BaseException):
        self.stats = stats
        snapshot = stats.committed_snapshot_id
        super().__init__(table, f"the run committed (snapshot {snapshot or 'not found'}) but a later step failed: "
                                f"{type(cause).__name__}: {first_line(cause)}; the checkpoint was not advanced, "
                                f"the next run re-examines the same records")


class _Phases:
    """Seconds spent per phase of a run, reported with its statistics (where the time goes)."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self._last = time.time()

    def __call__(self, name: str) -> None:
        now = time.time()
        self.times[name] = round(now - self._last, 3)
        self._last = now


def _ckpt_summary(ckpt: Checkpoint) -> dict:
    return {(NO_PARTITION if p is None else str(p)): o for p, o in sorted(ckpt.offsets.items(), key=lambda kv: str(kv[0]))}


def _reset_checkpoint(ref: TableRef, tc: TableConfig, ckpt: Checkpoint,
                      files: DataFiles) -> tuple[Checkpoint, tuple | None]:
    """The checkpoint as far as it vouches for the table (Checkpoint.vouched), and the partitions it
    reset (None: none), each warned about and listed in the run's statistics (checkpoint_reset),
    then cleaned from its start."""
    partitioned = tc.partition_column is not None
    ckpt, other, past = ckpt.vouched(partitioned, file_log_ends(files, partitioned) if tc.retain_log_end_record else None)
    if other:
        log.warning("lakecleaner: table %s: checkpoint entries %s were written while the table was %s "
                    "(compaction.partition.column changed): reset, partitions without an entry of their own are cleaned "
                    "from their start", ref.short,
                    _shown_partitions(other), "unpartitioned" if partitioned else "partitioned")
    if past:
        log.warning("lakecleaner: table %s: checkpoint past the log end of partition(s) %s (truncated or recreated?): "
                    "reset, those partitions are cleaned from their start", ref.short, _shown_partitions(past))
    return ckpt, (tuple(_shown_partitions(other + past)) if other or past else None)


def _shown_partitions(partitions: list) -> list:
    return [NO_PARTITION if p is None else p for p in partitions]


def quarantine_table(cfg: LakecleanerConfig, ref: TableRef) -> TableRef:
    return TableRef(ref.catalog, ref.namespace, ref.name + cfg.cleaner.quarantine_suffix)


QUARANTINE_OF = "lakecleaner.quarantine-of"  # set on a quarantine table at creation: whose it is
QUARANTINE_COLUMNS = ("quarantine_reason", "quarantine_run_id", "quarantined_at")


def check_quarantine(spark, qref: TableRef, source: TableRef) -> bool:
    """Whether the source table's quarantine exists. A table of that name that the cleaner did not
    create for this source (no or another QUARANTINE_OF) is refused: the cleaner would merge its
    schema and expire its snapshots. One an earlier version created (unmarked, with the cleaner's
    columns) is marked and adopted."""
    if not table_exists(spark, qref):
        return False
    mark = iceberg_table(spark, qref).properties().get(QUARANTINE_OF)
    if mark == source.short:
        return True
    if mark is None and set(QUARANTINE_COLUMNS) <= set(spark.table(qref.sql()).columns):
        spark.sql(f"ALTER TABLE {qref.sql()} SET TBLPROPERTIES ({sql_string(QUARANTINE_OF)} = {sql_string(source.short)})")
        return True
    raise CompactionError(source.short, f"{qref.short} exists but is not the cleaner's quarantine of this table "
                                        f"({QUARANTINE_OF} is {'unset' if mark is None else 'another table'}); "
                                        "rename that table or set cleaner.quarantine_suffix")


def _quarantine(spark, cfg: LakecleanerConfig, ref: TableRef, bad_rows, run_id: str, now_ms: int) -> None:
    """Copy bad records to <table>__quarantine first; the MERGE removes them from the source after.
    A crash in between leaves a duplicate in quarantine, never a loss. The quarantine follows the
    source's schema (Iceberg's schema merge on write: added columns are added, dropped ones left
    null), so a source schema change does not fail every later run with bad rows."""
    qref = quarantine_table(cfg, ref)
    rows = bad_rows.withColumn("quarantine_run_id", F.lit(run_id)).withColumn(
        "quarantined_at", F.lit(now_ms).cast("bigint"))
    created = not check_quarantine(spark, qref, ref) and create_unless_exists(
        lambda: rows.limit(0).writeTo(qref.sql()).using("iceberg").tableProperty("format-version", str(format_version(spark, ref)))
        .tableProperty(ACCEPT_ANY_SCHEMA, "true").tableProperty(QUARANTINE_OF, ref.short).create())
    if not created and iceberg_table(spark, qref).properties().get(ACCEPT_ANY_SCHEMA) != "true":  # an older one
        spark.sql(f"ALTER TABLE {qref.sql()} SET TBLPROPERTIES ('{ACCEPT_ANY_SCHEMA}' = 'true')")
    rows.writeTo(qref.sql()).option("merge-schema", "true").option("check-ordering", "false").append()


ACCEPT_ANY_SCHEMA = "write.spark.accept-any-schema"
