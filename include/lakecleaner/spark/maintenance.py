"""Making deletes physical (KIP-354's GDPR motive), after each compaction.

A compaction only masks removed records: merge-on-read position deletes hide them, but the data
file still holds them, and older snapshots still reach that file. A record is gone for good only
when no retained snapshot references a file that holds it. So, per table, after its compaction:

1. rewrite the clean data files that carry deletes: every time for a table with a finite
   max.compaction.lag.ms (the bound is the point of that setting), otherwise once deleted rows
   pass ``REWRITE_DELETE_RATIO`` of the table (the small-file and delete-file clean-up), judged on
   the figures evaluation shows (core.deletefiles, read from the current snapshot's delete manifests);
2. expire every snapshot older than the rewrite, except those younger than min.compaction.lag.ms:
   the compaction reads append times from them (rule 3), and dropping them early would make young
   records look old; the times of expired snapshots that still add live files are kept aside
   (append_times), so records appended during the run keep their max.compaction.lag.ms clock;
3. merge manifests once there are more than ``MAX_DATA_MANIFESTS`` (metadata only);
4. remove orphan files (left by failed writes) at most once per ``ORPHAN_CADENCE_MS``, and only
   files older than ``ORPHAN_MIN_AGE_MS`` so that no in-flight write loses its files.

Guarantee (README): with max.compaction.lag.ms = L, schedule interval I and min.compaction.lag.ms
= M, a record superseded by a replacement appended at t is in no file reachable from any snapshot
after t + L + I + M (M = 0 by default).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Mapping

from lakecleaner.core.append_times import record_append_times
from lakecleaner.core.config import (CHECKPOINT_PROPERTY, LONG_MAX, LakecleanerConfig, TableConfig, physical_deletion_bound)
from lakecleaner.core.table import TableRef
from lakecleaner.spark.catalog import iceberg_table, load_table_config
from lakecleaner.spark.iceberg_ops import DANGLING_DELETES_OUT, DELETES_OUT, Expiry, Rewrite, older_than_newest_at, rewrite_and_expire
from lakecleaner.core.datafiles import DataFile, judge
from lakecleaner.core.deletefiles import REWRITE_DELETE_RATIO, DeleteFigures, DeleteFile, DeleteKind, delete_figures
from lakecleaner.core.rules import Checkpoint, Partition
from lakecleaner.core.strategies import checkpoint_sql, ident
from lakecleaner.core.state import StateStore

ORPHAN_CADENCE_MS = 86_400_000
ORPHAN_MIN_AGE_MS = 3 * 86_400_000
# Each append adds a manifest; evaluation reads every live manifest of every table, so past this
# many they are merged (Iceberg's rewrite_manifests) to keep per-table evaluation cost flat.
MAX_DATA_MANIFESTS = 8
# The clean part's files carrying deletes, each rewritten alone if need be (iceberg_ops.DELETES_OUT).
CLEAN_PART_DELETES_OUT = {**DELETES_OUT, "min-input-files": "1"}

log = logging.getLogger(__name__)


def clean_rewrite_cuts(checkpoint_offsets: Mapping[Partition, int], files: Iterable[DataFile],
                       partitioned: bool) -> dict[Partition, int] | None:
    """Per partition, the offset up to which the clean-part rewrite may select files.

    rewrite_data_files selects every file that *may* hold a matching row and rewrites it whole, so
    a file straddling the checkpoint (a run cut by compaction.max.records.per.run, a late arrival)
    would have its dirty records rewritten into the rewrite's snapshot: their append time, from
    which min.compaction.lag.ms and max.compaction.lag.ms are counted, would restart. Each cut is
    the checkpoint lowered below the first offset of every file that may be dirty (datafiles.judge),
    in every partition of the checkpoint it may hold, so only files wholly at or below the
    checkpoint can match; those skipped now are rewritten by a later maintenance, once the
    checkpoint has passed them. None: no safe cut (a file that may be dirty has no offset metrics)."""
    cuts = {p: o for p, o in checkpoint_offsets.items() if (p is not None) == partitioned}
    for f in files:
        judged = judge(f, checkpoint_offsets, partitioned)
        if not judged.may_be_dirty:
            continue
        if judged.through and f.offsets.lower is None:
            return None
        for p in judged.through:
            cuts[p] = min(cuts[p], f.offsets.lower - 1)
    return cuts


def _clean_part_sql(tc: TableConfig, cuts: Mapping[Partition, int]) -> str | None:
    """SQL filter for the clean part's rewrite: the checkpoint predicate (strategies.checkpoint_sql)
    at the cuts."""
    p = ident(tc.partition_column) if tc.partition_column else None
    return checkpoint_sql(p, ident(tc.offset_column), dict(sorted(cuts.items(), key=lambda kv: kv[0] or 0)), "<=")


def _clean_rewrite_filter(spark, ref: TableRef, tc: TableConfig, ckpt: Checkpoint) -> str | None:
    from lakecleaner.spark.files import data_files

    if not ckpt.offsets:
        return None
    current = iceberg_table(spark, ref).currentSnapshot()
    if current is None:
        return None
    files = data_files(spark, ref, tc, current.snapshotId())
    cuts = clean_rewrite_cuts(ckpt.offsets, files, tc.partition_column is not None)
    if cuts is None:
        log.warning("lakecleaner: table %s: a data file without offset metrics may hold dirty records; "
                    "the clean part is not rewritten (it would re-date them)", ref.short)
        return None
    return _clean_part_sql(tc, cuts)


def maintain_table(spark, cfg: LakecleanerConfig, table: str, now_ms: int | None = None,
                   rewrite_reason: str | None = None) -> dict[str, Any]:
    """``rewrite_reason``: rewrite the clean files carrying deletes whatever the table's settings
    (an erasure on request must be made physical now, not at the next 20% of deleted rows)."""
    ref = TableRef.parse(table, cfg.catalog.name)
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    tc, props = load_table_config(spark, cfg, ref)
    ckpt = Checkpoint.from_json(props.get(CHECKPOINT_PROPERTY))
    out: dict[str, Any] = {"table": ref.short, "now_ms": now_ms, "rewritten_data_files": 0,
                           "snapshots_expired": 0, "orphan_files_removed": 0}
    deletes = table_deletes(spark, iceberg_table(spark, ref))
    out.update(delete_files=deletes.files, delete_bytes=deletes.bytes, delete_ratio=deletes.ratio)
    gdpr = tc.max_compaction_lag_ms < LONG_MAX
    wanted = deletes.masks_records and (rewrite_reason or gdpr or deletes.rewrite_due)
    where = _clean_rewrite_filter(spark, ref, tc, ckpt) if wanted else None
    done = rewrite_and_expire(spark, ref, Rewrite(rewrite_options(deletes), where) if where else None,
                              _expiry(spark, cfg, ref, tc), fail_at="maintenance_after_rewrite")
    if where:
        out["rewritten_data_files"] = done.files_rewritten
        out["rewrite_reason"] = rewrite_reason or ("max.compaction.lag.ms is finite" if gdpr
                                                    else f"delete ratio >= {REWRITE_DELETE_RATIO}")
    out["snapshots_expired"] = done.snapshots_expired
    bound = physical_deletion_bound(tc)
    if bound:
        out["physical_deletion"] = bound
    table_obj = iceberg_table(spark, ref)
    current = table_obj.currentSnapshot()
    manifests = 0 if current is None else current.dataManifests(table_obj.io()).size()
    out["data_manifests"] = manifests
    if manifests > MAX_DATA_MANIFESTS:
        res = spark.sql(f"CALL `{ref.catalog}`.system.rewrite_manifests(table => '{ref.short}')").collect()
        out["data_manifests"] = int(res[0]["added_manifests_count"]) if res else manifests
    store = StateStore(cfg)
    try:
        last_sweep = store.get(ref.short).last_orphan_cleanup_ms
    except ValueError as exc:  # unreadable state: sweep now; recording the sweep rewrites it
        log.warning("lakecleaner: %s", exc)
        last_sweep = None
    if last_sweep is None or now_ms - last_sweep >= ORPHAN_CADENCE_MS:
        cutoff = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((now_ms - ORPHAN_MIN_AGE_MS) / 1000))
        res = spark.sql(f"CALL `{ref.catalog}`.system.remove_orphan_files(table => '{ref.short}', "
                        f"older_than => TIMESTAMP '{cutoff}')").collect()
        out["orphan_files_removed"] = len(res)
        store.record_orphan_cleanup(ref.short, now_ms)
    return out


def rewrite_options(deletes: DeleteFigures) -> Mapping[str, str]:
    """The clean part's rewrite, with Iceberg's dangling-delete pass where an equality-delete file
    (another writer's: the cleaner writes none) is live: it holds key values, which an erasure must
    see gone once it no longer applies (iceberg_ops.DELETES_OUT)."""
    return {**CLEAN_PART_DELETES_OUT, **DANGLING_DELETES_OUT} if deletes.equality_files else CLEAN_PART_DELETES_OUT


def table_deletes(spark, table) -> DeleteFigures:
    """The current snapshot's delete figures (core.deletefiles), from the refreshed Java table's
    delete manifests in the driver rather than a metadata-table query: each of those is a Spark
    job, and a batch of small tables pays for every one. Live records: the summary's total-records
    (Iceberg's running sum of the live data files' record counts)."""
    current = table.currentSnapshot()
    if current is None:
        return DeleteFigures()
    manifest_files = spark._jvm.org.apache.iceberg.ManifestFiles
    found = []
    for manifest in current.deleteManifests(table.io()):
        reader = manifest_files.readDeleteManifest(manifest, table.io(), table.specs())
        try:
            live = reader.iterator()  # live entries only
            while live.hasNext():
                found.append(_delete_file(live.next()))
        finally:
            reader.close()
    return delete_figures(found, int(current.summary().get("total-records") or 0))


def _delete_file(f) -> DeleteFile:
    """A Java DeleteFile as core.deletefiles counts it (Iceberg's ScanTaskUtil.contentSizeInBytes)."""
    if f.content().name() == "EQUALITY_DELETES":
        return DeleteFile(DeleteKind.EQUALITY, f.fileSizeInBytes(), f.recordCount())
    if f.format().name() == "PUFFIN":
        return DeleteFile(DeleteKind.DELETION_VECTOR, f.contentSizeInBytes(), f.recordCount())
    return DeleteFile(DeleteKind.POSITION, f.fileSizeInBytes(), f.recordCount())


def _expiry(spark, cfg: LakecleanerConfig, ref: TableRef, tc: TableConfig) -> Expiry:
    """Expire every snapshot older than the newest one committed at least min.compaction.lag.ms ago
    (younger snapshots carry the append times of records not yet old enough), keeping the current
    one. Commit times are wall-clock facts (the run's now may be an interval end in the past, and
    the rewrite before committed after it), so the cut is taken on the wall clock when the expiry
    runs, in epoch ms. A table's own history.expire.* properties keep more when they ask for more.
    The commit times of expired snapshots that still add live files are kept first (append_times)."""
    max_age, keep_last = tc.snapshot_retention

    def keep_after() -> int:
        now = int(time.time() * 1000)
        return min(now - tc.min_compaction_lag_ms, now - max_age if max_age is not None else now)

    return Expiry(older_than_newest_at(keep_after), retain_last=keep_last,
                  before=lambda table, times: _keep_append_times(spark, cfg, ref, table, times))


def _keep_append_times(spark, cfg: LakecleanerConfig, ref: TableRef, table, times: dict[int, int]) -> None:
    """Before snapshots go, keep the commit times of those still adding live files (records an
    ingest appended during the run among them): see append_times. The files are read at the
    snapshot current when ``times`` was listed; anything committed later is newer than the cut."""
    current = table.currentSnapshot().snapshotId()
    adding = [r["snapshot_id"] for r in spark.read.option("snapshot-id", current).table(ref.meta("entries"))
              .where("status < 2 AND data_file.content = 0").select("snapshot_id").distinct().collect()]
    record_append_times(cfg, ref.short, adding, times)
