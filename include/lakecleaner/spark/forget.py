"""Erasure on request: remove every record of some keys from a compacted table and its quarantine
table, make the removal physical through the cleaner's own maintenance, judge from the files
themselves whether it is, and keep an audit record that names each key only by its keyed hash
(lakecleaner.core.keyhash). Requests arrive through the request table (lakecleaner.spark.erasure_requests).

- **What goes.** The records of the keys in the snapshot the request reads ("older than the
  request"), deleted by identity (partition, offset, key; null-safe, so a keyed record with a null
  offset or partition goes too). A record of the same key appended after that snapshot is new
  data and stays. The audit keeps each partition's highest offset at the request, which is how the
  quality suite tells an old record that came back (a failure) from new data.
- **Serialized with compactions.** The deletes are a non-append commit, so a compaction that read
  the table before them stops at its pre-commit check (guards.before_commit) and can
  never write back what the request removed; a compaction that committed after the request read
  the table is found by the same check before our MERGE (or fails the MERGE's own validation),
  and the request is read and counted again on the new snapshot.
- **Audited as it happens.** The audit row is written as soon as the delete commits (status
  ``deleted``) and completed after maintenance (``forgotten``); a request that fails in between is
  resumed from its audit row, without deleting again.
- **Physical, judged on disk.** maintain_table with a forced rewrite, whether or not the key still
  had a live row; then every data file any snapshot or ref reaches whose column bounds may hold a
  key is read with deletes ignored. Only when none holds a record of the key at or below the
  request's offsets is the erasure physical; else the deadline is the README's bound
  (config.physical_deletion_deadline), or none when a tag or branch keeps such a file.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import logging
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from pyspark.sql import functions as F
from pyspark.sql.types import _parse_datatype_string, StringType, StructField, StructType

from lakecleaner.spark import catalog, guards
from lakecleaner.core.table import CompactionError, TableRef, first_line, layout_problem
from lakecleaner.spark.catalog import iceberg_table, load_table_config, table_exists
from lakecleaner.core.config import (DEFAULT_INTERVAL_MS, LakecleanerConfig, TableConfig, physical_deletion_bound, physical_deletion_deadline)
from lakecleaner.spark.engine import check_quarantine, quarantine_table
from lakecleaner.core.keyhash import UNKEYED, KeyHasher, hash_sql, key_hasher, pads_join
from lakecleaner.spark.frames import SameValues, local_frame, merge_delete, register_pads
from lakecleaner.spark.iceberg_ops import purge_deleted
from lakecleaner.spark.maintenance import maintain_table
from lakecleaner.core.strategies import Strategy, ident, key_message_sql, sql_string

log = logging.getLogger(__name__)

AUDIT_TABLE = "forget_audit"
AUDIT_SCHEMA = (
    "request_id string, table_name string, requested_at timestamp, requested_ms bigint, key_hash string, "
    "removed_records bigint, removed_quarantined bigint, request_offsets map<bigint,bigint>, "
    "committed_snapshot_id bigint, physically_removed boolean, deadline_ms bigint, deadline_note string, "
    "status string, hash_scheme string, requested_by string, reason string, dag_run_id string, "
    "triggered_by string, completed_at timestamp, request_sequence bigint"
)
DELETED, FORGOTTEN = "deleted", "forgotten"  # an audit row's status: the delete committed; all done
COMMIT_ATTEMPTS = 3
REWRITE_REASON = "erasure on request (lakecleaner forget)"


class ForgetError(CompactionError):
    """A request that cannot be carried out; nothing was deleted unless the message says so.
    ``rejected``: the request itself is wrong (a bad key, a refused table), so retrying cannot help."""

    def __init__(self, table: str, problem: str, rejected: bool = False):
        super().__init__(table, problem)
        self.rejected = rejected


@dataclass(frozen=True)
class ForgetRequest:
    table: str
    keys: tuple  # each a mapping {key column: value}: the one syntax for a key (JSON objects)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    requested_by: str | None = None
    reason: str | None = None
    requested_ms: int | None = None  # when it was asked for (the request table's requested_at)


@dataclass(frozen=True)
class Attribution:
    """Who and what carried a request out, for the audit: the DAG run (or none, from the CLI) and
    the user who triggered it."""
    dag_run_id: str | None = None
    triggered_by: str | None = None


@dataclass
class ForgetResult:
    table: str
    request_id: str
    requested_ms: int
    keys: int
    removed_records: int
    removed_quarantined: int
    request_offsets: dict  # engine partition (0: unpartitioned) -> highest offset at the request
    physically_removed: bool  # no file any snapshot or ref reaches holds a removed record any more
    deadline_ms: int | None  # by when that holds (the request itself when already true); None: no bound
    deadline_note: str
    hash_scheme: str = UNKEYED
    key_hashes: list = field(default_factory=list)
    # the request snapshot's data sequence number: every file at or below it existed at the request
    request_sequence: int | None = None
    maintenance: dict = field(default_factory=dict)
    status: str = FORGOTTEN  # or "dry run": what would go, nothing changed

    def as_dict(self) -> dict:
        return asdict(self)


def audit_table(cfg: LakecleanerConfig) -> str:
    return f"{ident(cfg.catalog.name)}.{ident(cfg.cleaner.meta_namespace)}.{ident(AUDIT_TABLE)}"


def audit_relation(cfg: LakecleanerConfig, table: str, scheme: str) -> str:
    """SQL relation of a table's erasure requests hashed under ``scheme``, as the quality suite's
    rule joins them: (lc_forgotten_hash, lc_forgotten_offsets). Rows audited before schemes were
    recorded are unkeyed SHA-256."""
    return (f"(SELECT key_hash AS lc_forgotten_hash, request_offsets AS lc_forgotten_offsets "
            f"FROM {audit_table(cfg)} WHERE table_name = {sql_string(table)} "
            f"AND coalesce(hash_scheme, {sql_string(UNKEYED)}) = {sql_string(scheme)})")


def audit_schemes(spark, cfg: LakecleanerConfig, table: str) -> list[str]:
    """The hash schemes the table's audit rows were written under ([] when nothing was forgotten)."""
    if not spark.catalog.tableExists(audit_table(cfg).replace("`", "")):
        return []
    ensure_audit_table(spark, cfg)
    return sorted(r[0] for r in spark.sql(
        f"SELECT DISTINCT coalesce(hash_scheme, {sql_string(UNKEYED)}) FROM {audit_table(cfg)} "
        f"WHERE table_name = {sql_string(table)}").collect())


# ---------------------------------------------------------------- keys
def parse_key(table: str, spec: Any, key_columns: tuple[str, ...]) -> dict[str, str]:
    """One key, a mapping {key column: value}, as {key column: raw text}. Errors name the table and
    the key columns, never a value nor a name the request gave (an erasure request must not copy
    the key into logs or the request table's note)."""
    if not isinstance(spec, Mapping):
        raise ForgetError(table, f"a key must be an object {{column: value}} naming every key column "
                                 f"({', '.join(key_columns)}), got {type(spec).__name__}", rejected=True)
    names = [str(k) for k in spec]
    problems = []
    unknown = set(names) - set(key_columns)
    if unknown:  # counted, not named: a name that is no key column may be a value put in its place
        problems.append(f"{len(unknown)} name(s) that are no key column")
    missing = [c for c in key_columns if c not in names]
    if missing:
        problems.append(f"missing key column(s) {', '.join(missing)}")
    if any(v is None for v in spec.values()):
        problems.append("a key value is null (a keyless record has no key to forget)")
    if any(isinstance(v, (Mapping, list)) for v in spec.values()):
        problems.append("a key value is an object or a list")
    if problems:
        raise ForgetError(table, f"bad key: {'; '.join(problems)}; the key is ({', '.join(key_columns)})", rejected=True)
    return {c: as_text(spec[c]) for c in key_columns}


def typed_keys(spark, ref: TableRef, tc: TableConfig, specs: Iterable[Any]):
    """The keys as a DataFrame with the key columns' own types (Spark's strict try_cast), deduplicated.
    Raises ForgetError, before anything is deleted, when a value does not convert."""
    table = ref.short
    raw = [parse_key(table, s, tc.key_columns) for s in specs]
    if not raw:
        raise ForgetError(table, "no key given", rejected=True)
    types = {f.name: f.dataType for f in spark.table(ref.sql()).schema.fields}
    strings = local_frame(spark, [tuple(r[c] for c in tc.key_columns) for r in raw],
                          StructType([StructField(c, StringType()) for c in tc.key_columns]))
    cast = strings.select(*[F.expr(f"try_cast({ident(c)} AS {types[c].simpleString()})").alias(c)
                            for c in tc.key_columns])
    rows = cast.collect()
    for i, row in enumerate(rows):
        bad = [c for c in tc.key_columns if row[c] is None]
        if bad:
            raise ForgetError(table, f"key {i + 1} of {len(rows)}: the value for {', '.join(bad)} does not convert "
                                     f"to {', '.join(types[c].simpleString() for c in bad)}; nothing deleted",
                              rejected=True)
    schema = StructType([StructField(c, types[c]) for c in tc.key_columns])
    return local_frame(spark, rows, schema).distinct()


def as_text(value: Any) -> str:
    """A key value as text, as the request table keeps it (Spark's try_cast converts it to the
    column's type)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def scrub(text: str, request: ForgetRequest) -> str:
    """An error's text with every key value of the request, as a whole word, replaced: a Spark error
    may quote one (the cleaner's own errors never do, and are not scrubbed)."""
    values = sorted({as_text(v) for key in request.keys for v in key.values() if as_text(v)}, key=len, reverse=True)
    for value in values:
        text = re.sub(rf"(?<!\w){re.escape(value)}(?!\w)", "<key>", text)
    return text


# ---------------------------------------------------------------- the request
@dataclass(frozen=True)
class _Prepared:
    """A validated request: its table, config and typed keys with their hashes (cached)."""
    ref: TableRef
    tc: TableConfig
    keys: Any  # DataFrame: the key columns, lc_key_hash
    hashes: list[str]
    hasher: KeyHasher
    props: dict[str, str]


def forget(spark, cfg: LakecleanerConfig, request: ForgetRequest, now_ms: int | None = None,
           interval_ms: int = DEFAULT_INTERVAL_MS, by: Attribution = Attribution(),
           dry_run: bool = False) -> ForgetResult:
    """Carry out one request: delete, audit, make physical, judge, complete the audit. See the
    module docstring. ``dry_run``: count what would go and change nothing."""
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    job = _prepare(spark, cfg, request)
    try:
        if dry_run:
            return _dry_run(spark, cfg, request, job, now_ms)
        return _carry_out(spark, cfg, request, job, now_ms, interval_ms, by)
    finally:
        job.keys.unpersist()


def _prepare(spark, cfg: LakecleanerConfig, request: ForgetRequest) -> _Prepared:
    ref = TableRef.parse(request.table, cfg.catalog.name)
    tc, props = load_table_config(spark, cfg, ref)
    # The table's own problems leave the request waiting (an operator fixes the table; an erasure
    # obligation is not dropped): only a request that can never be carried out is rejected.
    if problem := layout_problem(props):
        raise ForgetError(ref.short, f"{problem}; nothing deleted")
    try:
        check_quarantine(spark, quarantine_table(cfg, ref), ref)
    except CompactionError as exc:
        raise ForgetError(ref.short, f"{exc.problem}; nothing deleted") from None
    hasher = key_hasher(cfg)
    register_pads(spark, hasher)
    view = f"lc_forget_keys_{uuid.uuid4().hex}"
    typed_keys(spark, ref, tc, request.keys).createOrReplaceTempView(view)
    try:
        keys = spark.sql(f"SELECT {', '.join(ident(c) for c in tc.key_columns)}, "
                         f"{hash_sql(hasher, key_message_sql(tc))} AS lc_key_hash FROM {view}{pads_join(hasher)}").cache()
        keys.count()
    finally:
        spark.catalog.dropTempView(view)
    hashes = sorted(r["lc_key_hash"] for r in keys.select("lc_key_hash").collect())
    return _Prepared(ref, tc, keys, hashes, hasher, props)


def _carry_out(spark, cfg, request: ForgetRequest, job: _Prepared, now_ms: int, interval_ms: int,
               by: Attribution) -> ForgetResult:
    """Delete the keys not deleted yet (a key whose delete committed in an earlier attempt is
    resumed from its audit row), then quarantine, maintenance, the on-disk verdict, the audit."""
    ref, tc = job.ref, job.tc
    audited = _audited(spark, cfg, request, job.hashes)
    result = ForgetResult(ref.short, request.request_id, now_ms, len(job.hashes),
                          sum(r["removed_records"] or 0 for r in audited.values()),
                          sum(r["removed_quarantined"] or 0 for r in audited.values()),
                          dict(next(iter(audited.values()))["request_offsets"] or {}) if audited else {}, False, None, "",
                          job.hasher.scheme, job.hashes)
    fresh = [h for h in job.hashes if h not in audited]
    sequences = {h: r["request_sequence"] for h, r in audited.items()}
    if fresh:
        catalog.set_layout_defaults(spark, ref, job.props)  # once the request is valid
        deleted = _forget_in_table(spark, ref, tc, job.keys.where(job.keys["lc_key_hash"].isin(fresh)))
        result.removed_records += sum(deleted.counts.values())
        result.request_offsets = deleted.offsets
        _audit_deleted(spark, cfg, request, result, fresh, deleted, by)
        sequences.update({h: deleted.request_sequence for h in fresh})
    try:
        quarantined = _forget_in_quarantine(spark, cfg, ref, tc, job.keys, resumed=bool(audited))
        if quarantined:
            _audit_quarantined(spark, cfg, request, result, quarantined)
            result.removed_quarantined += sum(quarantined.values())
        result.maintenance = maintain_table(spark, cfg, ref.short, now_ms, rewrite_reason=REWRITE_REASON)
        result.request_sequence = max((q for q in sequences.values() if q is not None), default=None)
        holding = Holding()
        for sequence in set(sequences.values()):  # one request snapshot per attempt that deleted
            group = [h for h, q in sequences.items() if q == sequence]
            holding |= _files_still_holding(spark, ref, tc, job.keys.where(job.keys["lc_key_hash"].isin(group)),
                                            sequence)
        holding |= _files_still_holding(spark, quarantine_table(cfg, ref), tc, job.keys, None)
        result.physically_removed = not holding
        result.deadline_ms, result.deadline_note = _deadline(spark, cfg, ref, tc, now_ms, interval_ms, holding)
        _audit_complete(spark, cfg, request, result)
    except Exception as exc:
        raise ForgetError(ref.short, f"the delete committed (request {request.request_id}, "
                                     f"{result.removed_records} record(s) removed from the table), but the request "
                                     f"failed after it: {scrub(first_line(exc), request)}; the audit says "
                                     "'deleted' and the next attempt resumes from there") from exc
    return result


def _dry_run(spark, cfg, request: ForgetRequest, job: _Prepared, now_ms: int) -> ForgetResult:
    """What the request would remove from the table and its quarantine, nothing changed."""
    ref, tc = job.ref, job.tc
    in_table = spark.table(ref.sql()).join(job.keys, list(tc.key_columns), "left_semi").count()
    qref = quarantine_table(cfg, ref)
    in_quarantine = (spark.table(qref.sql()).join(job.keys, list(tc.key_columns), "left_semi").count()
                     if table_exists(spark, qref) else 0)
    return ForgetResult(ref.short, request.request_id, now_ms, len(job.hashes), in_table, in_quarantine, {}, False,
                        None, "dry run: nothing deleted", job.hasher.scheme, job.hashes, status="dry run")


@dataclass(frozen=True)
class TableDelete:
    """What a request's delete did: records per key hash, each partition's highest live offset at
    the request, our commit's snapshot, and the request snapshot's data sequence number."""
    counts: Mapping[str, int]  # key hash -> records deleted
    offsets: Mapping[int, int]  # engine partition (0: unpartitioned) -> highest offset at the request
    snapshot_id: int | None
    request_sequence: int | None


def _forget_in_table(spark, ref: TableRef, tc: TableConfig, keys) -> TableDelete:
    """Delete the keys' records of one snapshot by identity; retried on a concurrent cleaner's commit
    (a cleaner committed first: read again, delete again)."""
    try:
        return guards.retry_on_conflict(ref, lambda: _delete_once(spark, ref, tc, keys), COMMIT_ATTEMPTS)
    except guards.GaveUp as exc:
        raise ForgetError(ref.short, f"{exc}; nothing deleted") from None


def _delete_once(spark, ref: TableRef, tc: TableConfig, keys) -> TableDelete:
    """One attempt: the keys' records of the current snapshot, deleted by identity (null-safe)."""
    table = iceberg_table(spark, ref)
    current = table.currentSnapshot()
    if current is None:
        return TableDelete({}, {}, None, None)
    snapshot, sequence = current.snapshotId(), current.sequenceNumber()
    base = spark.read.option("snapshot-id", snapshot).table(ref.sql())
    st = Strategy(tc)
    offsets = {int(r["p"]): int(r["o"]) for r in base.groupBy(F.expr(st.partition_sql).alias("p"))
               .agg(F.max(F.expr(st.offset_sql)).alias("o")).collect() if r["p"] is not None and r["o"] is not None}
    ident_cols = [c for c in (tc.partition_column, tc.offset_column) if c] + list(tc.key_columns)
    doomed = base.join(F.broadcast(keys), list(tc.key_columns))
    counts = {r["lc_key_hash"]: r["n"] for r in doomed.groupBy("lc_key_hash").agg(F.count("*").alias("n")).collect()}
    if not counts:
        return TableDelete({}, offsets, None, sequence)
    on = " AND ".join(f"t.{ident(c)} <=> s.{ident(c)}" for c in ident_cols)  # null-safe: by identity
    # The MERGE plans on the table as it is, and Iceberg validates from there, not from the snapshot
    # counted: a cleaner's commit since (appends are new data) would make the counts and the
    # committed snapshot the audit keeps another commit's. Read again instead (retry_on_conflict).
    guards.check_no_concurrent_cleaner(spark, ref, snapshot)
    merge_delete(spark, ref, doomed.select(*ident_cols).distinct(), on, name=f"lakecleaner_forget_{uuid.uuid4().hex}")
    ours = catalog.committed_snapshot(spark, ref, snapshot)
    return TableDelete(counts, offsets, ours and ours["snapshot_id"], sequence)


def _forget_in_quarantine(spark, cfg: LakecleanerConfig, ref: TableRef, tc: TableConfig, keys,
                          resumed: bool = False) -> dict:
    """Delete the keys' records from <table>__quarantine (records with a full key but a null offset
    or partition land there) and expire its older snapshots: the quarantine is the cleaner's own,
    and a table of that name the cleaner did not create is refused (engine.check_quarantine).
    ``resumed``: an earlier attempt deleted from the table, and may have deleted here too and died
    before the purge, so the purge runs even when no live record of the keys is left.

    A compaction quarantining concurrently copies the bad records of the snapshot it read. Keyless
    records (the usual bad record) cannot match a key. A keyed record with a null offset/partition
    can: such a compaction either checks the table after our delete committed (and stops before
    copying anything) or checked before it, and then its copy may land after this delete; the
    table is deleted from first to keep that window to one compaction's check-to-copy time."""
    qref = quarantine_table(cfg, ref)
    if not check_quarantine(spark, qref, ref):
        return {}
    qtable = iceberg_table(spark, qref)
    current = qtable.currentSnapshot()
    if current is None:
        return {}
    base = spark.read.option("snapshot-id", current.snapshotId()).table(qref.sql())
    doomed = base.join(F.broadcast(keys), list(tc.key_columns))
    counts = {r["lc_key_hash"]: r["n"] for r in doomed.groupBy("lc_key_hash").agg(F.count("*").alias("n")).collect()}
    if not counts:
        if resumed:
            purge_deleted(spark, qref)
        return {}
    # by values, not a MERGE: a MERGE does not resolve against the quarantine's accept-any-schema
    merge_delete(spark, qref, keys.select(*tc.key_columns), SameValues(tuple(tc.key_columns)), name="lc_forget")
    purge_deleted(spark, qref)
    return counts


# ---------------------------------------------------------------- on disk
@dataclass(frozen=True)
class Candidate:
    """A file whose bounds may hold a key: its format, and whether it is an equality delete."""
    file_format: str
    equality_delete: bool


@dataclass(frozen=True)
class Holding:
    """The files that still hold a record of the keys; among them, the equality-delete files
    (another writer's: the cleaner writes none), which hold key values and which Iceberg drops only
    once no older data file of their partition is live, a file no delete touches included."""
    files: frozenset[str] = frozenset()
    equality_deletes: frozenset[str] = frozenset()

    def __or__(self, other: "Holding") -> "Holding":
        return Holding(self.files | other.files, self.equality_deletes | other.equality_deletes)

    def __bool__(self) -> bool:
        return bool(self.files)


def _files_still_holding(spark, ref: TableRef, tc: TableConfig, keys, max_sequence: int | None) -> Holding:
    """The files any snapshot or ref of the table reaches that still hold a record of the keys,
    among those that existed at the request (data sequence number at most ``max_sequence``: a file
    written since holds new data, or what a rewrite kept, which the delete had already masked out;
    None: every file), read from the files themselves with deletes ignored: a position delete or
    deletion vector masks a record, it does not remove it. Data and equality-delete files whose
    key bounds admit a key are read (key, partition and offset columns) by Iceberg field id, so a
    renamed column still matches; a file written without field ids (imported by add_files or
    migrate) is read by name. A file that is not Parquet cannot be read so and counts as holding."""
    if not table_exists(spark, ref):
        return Holding()
    candidates = _candidate_files(spark, ref, tc, keys, max_sequence)
    found = _found_holding(spark, ref, tc, keys, candidates)
    return Holding(frozenset(found), frozenset(p for p in found if candidates[p].equality_delete))


def _found_holding(spark, ref: TableRef, tc: TableConfig, keys, candidates: Mapping[str, Candidate]) -> set[str]:
    unreadable = {path for path, c in candidates.items() if c.file_format.upper() != "PARQUET"}
    parquet = sorted(set(candidates) - unreadable)
    if not parquet:
        return unreadable
    try:  # Iceberg's writers always write field ids: read every file by them
        return unreadable | _holding(spark, ref, tc, keys, parquet, [])
    except Exception as exc:  # noqa: BLE001 - an imported file (add_files, migrate) has none
        if "field id" not in str(exc).lower():
            raise
    without = [path for path in parquet if not _has_field_ids(spark, path)]
    return unreadable | _holding(spark, ref, tc, keys, [p for p in parquet if p not in without], without)


def _holding(spark, ref: TableRef, tc: TableConfig, keys, by_id: list[str], by_name: list[str]) -> set[str]:
    """The files among these holding a record of the keys: ``by_id`` read by Iceberg field id,
    ``by_name`` (files without field ids) by the table's column names."""
    found = set()
    for paths, ids in ((by_id, True), (by_name, False)):
        if paths:
            with _parquet_field_ids(spark, ids):
                rows = (_read_columns(spark, ref, tc, paths, ids).join(F.broadcast(keys), list(tc.key_columns),
                                                                       "left_semi").select("lc_file").distinct().collect())
            found |= {file_path(r[0]) for r in rows}
    return found


def _candidate_files(spark, ref: TableRef, tc: TableConfig, keys, max_sequence: int | None) -> dict[str, Candidate]:
    """{file path: Candidate} of every data or equality-delete file a snapshot reaches (all_entries:
    tags' and branches' snapshots included) that existed at the request and whose bounds may hold
    one of the keys (no bounds: may)."""
    entries = spark.table(ref.meta("all_entries")).where("status < 2 AND data_file.content IN (0, 2)")
    if max_sequence is not None:
        entries = entries.where(F.col("sequence_number") <= F.lit(max_sequence))
    cond = F.lit(True)
    for k in tc.key_columns:
        m = F.col(f"readable_metrics.{k}")
        lo, hi = m.getField("lower_bound"), m.getField("upper_bound")
        cond = cond & (lo.isNull() | (lo <= F.col(f"lc_k.{k}"))) & (hi.isNull() | (hi >= F.col(f"lc_k.{k}")))
    keyed = keys.select(F.struct(*tc.key_columns).alias("lc_k"))
    hits = (entries.join(F.broadcast(keyed), cond)
            .select(F.col("data_file.file_path").alias("p"), F.col("data_file.file_format").alias("f"),
                    F.col("data_file.content").alias("c")).distinct())
    return {file_path(r["p"]): Candidate(r["f"], r["c"] == 2) for r in hits.collect()}


def file_path(location: str) -> str:
    """One spelling of a file's location: metadata says /x or file:/x, Spark's input_file_name
    file:///x, URL-encoded (a space as %20)."""
    from urllib.parse import unquote

    if location.startswith("file:"):
        return unquote("/" + location[len("file:"):].lstrip("/"))
    return unquote(location) if "://" in location else location


@contextlib.contextmanager
def _parquet_field_ids(spark, enabled: bool):
    """Parquet columns matched by Iceberg field id (or by name) for what runs inside."""
    previous = spark.conf.get("spark.sql.parquet.fieldId.read.enabled", "false")
    spark.conf.set("spark.sql.parquet.fieldId.read.enabled", str(enabled).lower())
    try:
        yield
    finally:
        spark.conf.set("spark.sql.parquet.fieldId.read.enabled", previous)


def _read_columns(spark, ref: TableRef, tc: TableConfig, paths: list[str], by_id: bool):
    """The key, partition and offset columns of files, deletes not applied; plus lc_file. Its
    actions run inside _parquet_field_ids(by_id)."""
    names = list(dict.fromkeys([*tc.key_columns, *(c for c in (tc.partition_column, tc.offset_column) if c)]))
    schema = iceberg_table(spark, ref, refresh=False).schema()
    types = {f.name: f.dataType for f in spark.table(ref.sql()).schema.fields}
    meta = (lambda n: {"parquet.field.id": schema.findField(n).fieldId()}) if by_id else (lambda n: {})  # noqa: E731
    read = StructType([StructField(n, types[n], True, meta(n)) for n in names])
    return spark.read.schema(read).parquet(*paths).withColumn("lc_file", F.input_file_name())


def _has_field_ids(spark, path: str) -> bool:
    """Whether a Parquet file's schema carries field ids (Iceberg's writers always write them),
    read from its footer through Hadoop's file system."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
        jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(hpath, conf))
    try:
        fields = reader.getFooter().getFileMetaData().getSchema().getFields()
        return all(fields.get(i).getId() is not None for i in range(fields.size()))
    finally:
        reader.close()


def _kept_beyond_main(spark, cfg: LakecleanerConfig, ref: TableRef, tc: TableConfig, holding: frozenset[str],
                      now_ms: int) -> list[str]:
    """The tags and branches that keep a holding file that main's own retention does not explain
    (main's current snapshot and its ancestors younger than what maintenance keeps): snapshot expiry
    never removes what a ref keeps, so while it exists no bound in time holds. A branch keeps its
    ancestors that still exist (its own retention). Files listed per snapshot id."""
    max_age, _ = tc.snapshot_retention
    kept_ms = max_age if max_age is not None and max_age > tc.min_compaction_lag_ms else tc.min_compaction_lag_ms
    table = iceberg_table(spark, ref)
    main = _lineage(table, table.currentSnapshot(), stop_before_ms=now_ms - kept_ms)
    unexplained = holding - _files_of(spark, ref, main)
    if not unexplained:
        return []
    names = []
    for r in spark.sql(f"SELECT name, type, snapshot_id FROM {ref.meta('refs')} WHERE name <> 'main'").collect():
        snapshots = [r["snapshot_id"]] if r["type"] == "TAG" else _lineage(table, table.snapshot(r["snapshot_id"]))
        if _files_of(spark, ref, snapshots) & unexplained:
            names.append(f"{r['type'].lower()} {r['name']!r}")
    return sorted(names) or ["a snapshot kept beyond main's retention (by no tag or branch found)"]


def _lineage(table, snapshot, stop_before_ms: int | None = None) -> list[int]:
    """A snapshot and its ancestors still in the table's metadata (the first one older than
    ``stop_before_ms`` included: it is the state main's retention keeps at its edge)."""
    out = []
    while snapshot is not None:
        out.append(snapshot.snapshotId())
        if stop_before_ms is not None and snapshot.timestampMillis() < stop_before_ms:
            break
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
    return out


def _files_of(spark, ref: TableRef, snapshots: list[int]) -> set[str]:
    out = set()
    for snapshot in snapshots:
        out |= {file_path(f[0]) for f in spark.sql(
            f"SELECT file_path FROM {ref.meta('files')} VERSION AS OF {int(snapshot)}").collect()}
    return out


def _deadline(spark, cfg: LakecleanerConfig, ref: TableRef, tc: TableConfig, now_ms: int, interval_ms: int,
              holding: Holding) -> tuple[int | None, str]:
    if not holding:
        return now_ms, ("physically removed: no data file any snapshot or ref reaches holds a record of the keys "
                        "(read from the files, deletes ignored)")
    refs = _kept_beyond_main(spark, cfg, ref, tc, holding.files, now_ms)
    if refs:
        return None, (f"{', '.join(refs)} keeps data file(s) holding records of the keys: no bound in time while it "
                      "exists (snapshot expiry never removes what a ref keeps); drop or move it")
    if holding.equality_deletes:
        return None, (f"{len(holding.equality_deletes)} equality-delete file(s) another writer committed hold key "
                      "values: Iceberg drops one only once no older data file of its partition is live, and a data "
                      "file no delete touches is never rewritten, so no bound in time holds; rewriting every data "
                      "file of that partition (rewrite_data_files with rewrite-all and remove-dangling-deletes) "
                      "removes it")
    deadline = physical_deletion_deadline(tc, now_ms, interval_ms)
    bound = physical_deletion_bound(tc)
    if deadline is None:
        return None, (bound or "max.compaction.lag.ms is not set: no bound in time on physical deletion of "
                               "records above the checkpoint; set it for erasure deadlines")
    return deadline, (f"{len(holding.files)} data file(s) above the checkpoint hold some: gone after the run that cleans "
                      "them and its maintenance, at the latest request + max.compaction.lag.ms + interval + "
                      + ("max-snapshot-age" if bound else "min.compaction.lag.ms"))


# ---------------------------------------------------------------- the audit record
def ensure_audit_table(spark, cfg: LakecleanerConfig) -> None:
    """Create the audit table, or add the columns one from an earlier version lacks."""
    catalog.create_own_table(spark, cfg, audit_table(cfg), AUDIT_SCHEMA)
    have = {f.name for f in spark.table(audit_table(cfg)).schema.fields}
    added = [f"{f.name} {f.dataType.simpleString()}" for f in _parse_datatype_string(AUDIT_SCHEMA).fields
             if f.name not in have]
    if added:
        spark.sql(f"ALTER TABLE {audit_table(cfg)} ADD COLUMNS ({', '.join(added)})")


def utc(ms: int) -> dt.datetime:
    """An aware UTC datetime: Spark stores its instant whatever the driver's time zone."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def _audit_deleted(spark, cfg: LakecleanerConfig, request: ForgetRequest, result: ForgetResult, hashes: list[str],
                   deleted: TableDelete, by: Attribution) -> None:
    """One row per key as soon as its delete committed: when, which table, who asked and why, the
    key's hash and scheme, records removed, the partitions' highest offsets. Never the key."""
    ensure_audit_table(spark, cfg)
    at = utc(request.requested_ms if request.requested_ms is not None else result.requested_ms)
    rows = [(result.request_id, result.table, at, int(at.timestamp() * 1000), h, int(deleted.counts.get(h, 0)), 0,
             dict(deleted.offsets), deleted.snapshot_id, False, None, "the delete committed; maintenance pending",
             DELETED, result.hash_scheme, request.requested_by, request.reason, by.dag_run_id, by.triggered_by, None,
             deleted.request_sequence)
            for h in hashes]
    local_frame(spark, rows, AUDIT_SCHEMA).writeTo(audit_table(cfg)).append()


def _audited(spark, cfg: LakecleanerConfig, request: ForgetRequest, hashes: list[str]) -> dict[str, dict]:
    """This request's audit rows of these keys, by key hash: a key whose delete committed in an
    earlier attempt is not deleted again (records of it appended since are new data). Another
    request under the same id (ids are people's: a ticket asked again for the same key) was
    requested at another instant, so its rows are not these."""
    if not hashes or not spark.catalog.tableExists(audit_table(cfg).replace("`", "")):
        return {}
    ensure_audit_table(spark, cfg)
    return {r["key_hash"]: r.asDict() for r in spark.sql(
        f"SELECT * FROM {audit_table(cfg)} WHERE {_rows_of(cfg, request, hashes)}").collect()}


def _rows_of(cfg: LakecleanerConfig, request: ForgetRequest, hashes: list[str]) -> str:
    """SQL: the audit rows of one request's keys. A request read from the request table is one
    instant's (its requested_at, which every attempt at it reads again); one built in code without
    that instant is known by its id alone."""
    short = TableRef.parse(request.table, cfg.catalog.name).short
    at = "" if request.requested_ms is None else f" AND requested_ms = {int(request.requested_ms)}"
    return (f"request_id = {sql_string(request.request_id)} AND table_name = {sql_string(short)}{at} "
            f"AND key_hash IN ({', '.join(sql_string(h) for h in hashes)})")


def _audit_quarantined(spark, cfg: LakecleanerConfig, request: ForgetRequest, result: ForgetResult,
                       quarantined: dict) -> None:
    """Add the records removed from quarantine to the request's rows (a resumed request adds its own)."""
    per_key = " ".join(f"WHEN {sql_string(h)} THEN {int(n)}" for h, n in quarantined.items())
    spark.sql(f"UPDATE {audit_table(cfg)} SET removed_quarantined = coalesce(removed_quarantined, 0) + "
              f"CASE key_hash {per_key} ELSE 0 END WHERE {_rows_of(cfg, request, result.key_hashes)}")


def _audit_complete(spark, cfg: LakecleanerConfig, request: ForgetRequest, result: ForgetResult) -> None:
    """Complete the request's rows: whether the removal is physical, and the deadline."""
    deadline = "NULL" if result.deadline_ms is None else str(int(result.deadline_ms))
    spark.sql(f"UPDATE {audit_table(cfg)} SET status = {sql_string(FORGOTTEN)}, "
              f"physically_removed = {str(result.physically_removed).upper()}, deadline_ms = {deadline}, "
              f"deadline_note = {sql_string(result.deadline_note)}, completed_at = current_timestamp() "
              f"WHERE {_rows_of(cfg, request, result.key_hashes)}")


def read_audit(spark, cfg: LakecleanerConfig, table: str | None = None) -> list[dict]:
    if not spark.catalog.tableExists(audit_table(cfg).replace("`", "")):
        return []
    where = f" WHERE table_name = {sql_string(table)}" if table else ""
    return [r.asDict(recursive=True) for r in spark.sql(f"SELECT * FROM {audit_table(cfg)}{where}").collect()]
