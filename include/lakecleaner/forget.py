"""Erasure on request (`lakecleaner forget TABLE --key K`): remove every record of some keys from a
compacted table and its quarantine table, make the removal physical through the cleaner's own
maintenance, and keep an audit record that names the key only by its hash.

- **What goes.** The records of the keys in the snapshot the request reads ("older than the
  request"), deleted by identity (partition, offset, key; null-safe, so a keyed record with a null
  offset or partition goes too). A record of the same key appended after that snapshot is new
  data and stays. The audit keeps each partition's highest offset at the request, which is how the
  quality suite tells an old record that came back (a failure) from new data.
- **Serialized with compactions.** The deletes are a non-append commit, so a compaction that read
  the table before them stops at its pre-commit check (catalog.check_no_concurrent_cleaner:
  "table changed by a concurrent delete; nothing committed") and can never write back what the
  request removed; a compaction that committed first makes our MERGE's own validation fail, and
  the request is retried on the new snapshot. Within a DAG run the `forget` task runs before
  `evaluate`, and `max_active_runs=1`.
- **Physical.** maintain_table with a forced rewrite: clean files carrying deletes are rewritten and
  older snapshots expired, so a key in the cleaned part is gone at once (M = 0). Files above the
  checkpoint are not rewritten (that would re-date their dirty records): the README's bound
  (config.physical_deletion_deadline) is the deadline then.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from . import catalog
from .catalog import CompactionError, TableRef, conflict_error, create_unless_exists, iceberg_table, load_table_config
from .config import LakecleanerConfig, TableConfig, physical_deletion_bound, physical_deletion_deadline
from .engine import quarantine_table
from .maintenance import maintain_table
from .strategies import Strategy, ident, key_hash_sql

log = logging.getLogger(__name__)

AUDIT_TABLE = "forget_audit"
AUDIT_SCHEMA = (
    "request_id string, table_name string, requested_at timestamp, requested_ms bigint, key_hash string, "
    "removed_records bigint, removed_quarantined bigint, request_offsets map<bigint,bigint>, "
    "committed_snapshot_id bigint, physically_removed boolean, deadline_ms bigint, deadline_note string"
)
COMMIT_ATTEMPTS = 3
REWRITE_REASON = "erasure on request (lakecleaner forget)"


class ForgetError(CompactionError):
    """A request that cannot be carried out; nothing was deleted unless the message says so."""


@dataclass(frozen=True)
class ForgetRequest:
    table: str
    keys: tuple  # each a spec "col=value[,col=value]" (a bare value for a one-column key) or a mapping


@dataclass
class ForgetResult:
    table: str
    request_id: str
    requested_ms: int
    keys: int
    removed_records: int
    removed_quarantined: int
    request_offsets: dict  # engine partition (0: unpartitioned) -> highest offset at the request
    physically_removed: bool  # no file any snapshot reaches holds a removed record any more
    deadline_ms: int | None  # by when that holds (the request itself when already true); None: no bound
    deadline_note: str
    key_hashes: list = field(default_factory=list)
    maintenance: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {**asdict(self), "status": "forgotten"}


def audit_table(cfg: LakecleanerConfig) -> str:
    return f"{ident(cfg.catalog.name)}.{ident(cfg.cleaner.meta_namespace)}.{ident(AUDIT_TABLE)}"


def audit_relation(cfg: LakecleanerConfig, table: str) -> str:
    """SQL relation of a table's erasure requests, as the quality suite's rule joins them:
    (lc_forgotten_hash, lc_forgotten_offsets)."""
    from .strategies import sql_string

    return (f"(SELECT key_hash AS lc_forgotten_hash, request_offsets AS lc_forgotten_offsets "
            f"FROM {audit_table(cfg)} WHERE table_name = {sql_string(table)})")


# ---------------------------------------------------------------- key specs
def parse_key(table: str, spec: Any, key_columns: tuple[str, ...]) -> dict[str, str]:
    """One key spec as {key column: raw value}. Errors name the table and the columns, never a value
    (an erasure request should not copy the key into logs)."""
    if isinstance(spec, Mapping):
        pairs = [(str(k), v) for k, v in spec.items()]
    elif not isinstance(spec, str):
        raise ForgetError(table, f"a key must be 'column=value[,column=value]' or an object, got {type(spec).__name__}")
    elif len(key_columns) == 1:  # the whole text is the value: it may hold commas and '='
        col = key_columns[0]
        pairs = [(col, spec[len(col) + 1:] if spec.startswith(f"{col}=") else spec)]
    else:
        pairs = []
        for part in spec.split(","):
            name, eq, value = part.partition("=")
            if not eq:
                raise ForgetError(table, f"key spec part {len(pairs) + 1} is not column=value; the key is "
                                         f"({', '.join(key_columns)})")
            pairs.append((name.strip(), value))
    names = [n for n, _ in pairs]
    problems = []
    if len(set(names)) != len(names):
        problems.append("a key column is given twice")
    unknown = sorted(set(names) - set(key_columns))
    if unknown:
        problems.append(f"unknown key column(s) {', '.join(unknown)}")
    missing = [c for c in key_columns if c not in names]
    if missing:
        problems.append(f"missing key column(s) {', '.join(missing)}")
    if any(v is None for _, v in pairs):
        problems.append("a key value is null (a keyless record has no key to forget)")
    if problems:
        raise ForgetError(table, f"bad key: {'; '.join(problems)}; the key is ({', '.join(key_columns)})")
    values = dict(pairs)
    return {c: v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v) for c, v in
            ((c, values[c]) for c in key_columns)}


def typed_keys(spark, ref: TableRef, tc: TableConfig, specs: Iterable[Any]):
    """The keys as a DataFrame with the key columns' own types (Spark's strict try_cast), deduplicated.
    Raises ForgetError, before anything is deleted, when a value does not convert."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    table = ref.short
    raw = [parse_key(table, s, tc.key_columns) for s in specs]
    if not raw:
        raise ForgetError(table, "no key given")
    types = {f.name: f.dataType for f in spark.table(ref.sql()).schema.fields}
    strings = spark.createDataFrame([tuple(r[c] for c in tc.key_columns) for r in raw],
                                    StructType([StructField(c, StringType()) for c in tc.key_columns]))
    cast = strings.select(*[F.expr(f"try_cast({ident(c)} AS {types[c].simpleString()})").alias(c)
                            for c in tc.key_columns])
    rows = cast.collect()
    for i, row in enumerate(rows):
        bad = [c for c in tc.key_columns if row[c] is None]
        if bad:
            raise ForgetError(table, f"key {i + 1} of {len(rows)}: the value for {', '.join(bad)} does not convert "
                                     f"to {', '.join(types[c].simpleString() for c in bad)}; nothing deleted")
    schema = StructType([StructField(c, types[c]) for c in tc.key_columns])
    return spark.createDataFrame([tuple(r) for r in rows], schema).distinct()


# ---------------------------------------------------------------- the request
def forget(spark, cfg: LakecleanerConfig, request: ForgetRequest, now_ms: int | None = None,
           interval_ms: int = 15 * 60_000) -> ForgetResult:
    """Carry out one request: delete, make physical, audit. See the module docstring."""
    from pyspark.sql import functions as F

    ref = TableRef.parse(request.table, cfg.catalog.name)
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    tc, props = load_table_config(spark, cfg, ref)
    if problem := catalog.layout_problem(props):
        raise ForgetError(ref.short, f"{problem}; nothing deleted")
    keys = typed_keys(spark, ref, tc, request.keys).withColumn("lc_key_hash", F.expr(key_hash_sql(tc)))
    catalog.set_layout_defaults(spark, ref, props)  # once the request is valid
    keys.cache()
    request_id = uuid.uuid4().hex
    removed, offsets, files, snapshot_id = _forget_in_table(spark, ref, tc, keys)
    quarantined, q_files = _forget_in_quarantine(spark, cfg, ref, tc, keys)
    maintenance = maintain_table(spark, cfg, ref.short, now_ms, rewrite_reason=REWRITE_REASON) if files else {}
    gone = not _still_reachable(spark, ref, files) and not _still_reachable(spark, quarantine_table(cfg, ref), q_files)
    deadline, note = _deadline(tc, now_ms, interval_ms, gone)
    hashes = sorted(r["lc_key_hash"] for r in keys.select("lc_key_hash").collect())
    result = ForgetResult(ref.short, request_id, now_ms, len(hashes), sum(removed.values()),
                          sum(quarantined.values()), offsets, gone, deadline, note, hashes, maintenance)
    _audit(spark, cfg, result, removed, quarantined, snapshot_id)
    keys.unpersist()
    return result


def _forget_in_table(spark, ref: TableRef, tc: TableConfig, keys) -> tuple[dict, dict, set, int | None]:
    """Delete the keys' records of one snapshot by identity; retried on a concurrent cleaner's commit.
    Returns (records per key hash, highest offset per partition at the request, the data files that
    held them, our commit's snapshot)."""
    from pyspark.sql import functions as F

    last = None
    for _ in range(COMMIT_ATTEMPTS):
        snapshot = catalog.current_snapshot(spark, ref)
        if snapshot is None:
            return {}, {}, set(), None
        base = spark.read.option("snapshot-id", snapshot).table(ref.sql())
        st = Strategy(tc)
        offsets = {int(r["p"]): int(r["o"]) for r in base.groupBy(F.expr(st.partition_sql).alias("p"))
                   .agg(F.max(F.expr(st.offset_sql)).alias("o")).collect() if r["p"] is not None and r["o"] is not None}
        ident_cols = [c for c in (tc.partition_column, tc.offset_column) if c] + list(tc.key_columns)
        doomed = base.select("*", F.col("_file")).join(F.broadcast(keys), list(tc.key_columns))
        counts = {r["lc_key_hash"]: r["n"] for r in doomed.groupBy("lc_key_hash").agg(F.count("*").alias("n")).collect()}
        if not counts:
            return {}, offsets, set(), None
        files = {r["_file"] for r in doomed.select("_file").distinct().collect()}
        view = f"lc_forget_{uuid.uuid4().hex}"
        doomed.select(*ident_cols).distinct().createOrReplaceTempView(view)
        on = " AND ".join(f"t.{ident(c)} <=> s.{ident(c)}" for c in ident_cols)
        try:
            spark.sql(f"MERGE INTO {ref.sql()} t USING {view} s ON {on} WHEN MATCHED THEN DELETE")
        except Exception as exc:  # noqa: BLE001 - a cleaner committed first: read again, delete again
            last = conflict_error(ref, exc)
            if last is None:
                raise
            log.warning("lakecleaner: forget on %s: %s; retrying", ref.short, last)
            continue
        finally:
            spark.catalog.dropTempView(view)
        ours = catalog.committed_snapshot(spark, ref, snapshot)
        return counts, offsets, files, ours and ours["snapshot_id"]
    raise ForgetError(ref.short, f"gave up after {COMMIT_ATTEMPTS} concurrent commits: {last}; nothing deleted")


def _forget_in_quarantine(spark, cfg: LakecleanerConfig, ref: TableRef, tc: TableConfig, keys) -> tuple[dict, set]:
    """Delete the keys' records from <table>__quarantine (records with a full key but a null offset
    or partition land there) and expire its older snapshots: the quarantine is the cleaner's own.

    A compaction quarantining concurrently copies the bad records of the snapshot it read. Keyless
    records (the usual bad record) cannot match a key. A keyed record with a null offset/partition
    can: such a compaction either checks the table after our delete committed (and stops before
    copying anything) or checked before it, and then its copy may land after this delete; the
    table is deleted from first to keep that window to one compaction's check-to-copy time."""
    from pyspark.sql import functions as F

    qref = quarantine_table(cfg, ref)
    if not spark.catalog.tableExists(qref.sql().replace("`", "")):
        return {}, set()
    qtable = iceberg_table(spark, qref)
    current = qtable.currentSnapshot()
    if current is None:
        return {}, set()
    base = spark.read.option("snapshot-id", current.snapshotId()).table(qref.sql())
    doomed = base.select("*", F.col("_file")).join(F.broadcast(keys), list(tc.key_columns))
    counts = {r["lc_key_hash"]: r["n"] for r in doomed.groupBy("lc_key_hash").agg(F.count("*").alias("n")).collect()}
    if not counts:
        return {}, set()
    files = {r["_file"] for r in doomed.select("_file").distinct().collect()}
    view = f"lc_forget_{uuid.uuid4().hex}"
    keys.select(*tc.key_columns).createOrReplaceTempView(view)
    cols = ", ".join(ident(c) for c in tc.key_columns)
    try:  # a DELETE: a MERGE does not resolve against the quarantine's accept-any-schema
        spark.sql(f"DELETE FROM {qref.sql()} WHERE ({cols}) IN (SELECT {cols} FROM {view})")
    finally:
        spark.catalog.dropTempView(view)
    # Position deletes (a quarantine set to merge-on-read) leave the rows in their files: rewrite them.
    spark.sql(f"CALL {ident(qref.catalog)}.system.rewrite_data_files(table => '{qref.short}', "
              "options => map('delete-file-threshold', '1', 'remove-dangling-deletes', 'true'))").collect()
    qtable = iceberg_table(spark, qref)
    newest = qtable.currentSnapshot()
    qtable.expireSnapshots().expireOlderThan(newest.timestampMillis()).retainLast(1).commit()
    return counts, files


def _still_reachable(spark, ref: TableRef, files: set) -> bool:
    """Whether any snapshot still reaches one of the files that held the removed records (their
    rows are then readable by time travel or from the file itself)."""
    if not files:
        return False
    reachable = {r["file_path"] for r in spark.sql(f"SELECT DISTINCT file_path FROM {ref.meta('all_data_files')}")
                 .collect()}
    return bool(reachable & files)


def _deadline(tc: TableConfig, now_ms: int, interval_ms: int, gone: bool) -> tuple[int | None, str]:
    if gone:
        return now_ms, "physically removed by the request's maintenance: no snapshot reaches a file that held them"
    deadline = physical_deletion_deadline(tc, now_ms, interval_ms)
    bound = physical_deletion_bound(tc)
    if deadline is None:
        return None, (bound or "max.compaction.lag.ms is not set: no bound in time on physical deletion of "
                               "records above the checkpoint; set it for erasure deadlines")
    return deadline, ("files above the checkpoint hold some: gone after the run that cleans them and its "
                      "maintenance, at the latest request + max.compaction.lag.ms + interval + "
                      + ("max-snapshot-age" if bound else "min.compaction.lag.ms"))


# ---------------------------------------------------------------- the audit record
def ensure_audit_table(spark, cfg: LakecleanerConfig) -> None:
    create_unless_exists(lambda: spark.sql(
        f"CREATE NAMESPACE IF NOT EXISTS {ident(cfg.catalog.name)}.{ident(cfg.cleaner.meta_namespace)}"))
    create_unless_exists(lambda: spark.sql(f"CREATE TABLE IF NOT EXISTS {audit_table(cfg)} ({AUDIT_SCHEMA}) USING iceberg"))


def _audit(spark, cfg: LakecleanerConfig, result: ForgetResult, removed: dict, quarantined: dict,
           snapshot_id: int | None) -> None:
    """One row per key: when, which table, how many records (table, quarantine), the key's hash,
    the partitions' highest offsets at the request, and the deadline. Never the key."""
    from pyspark.sql.types import _parse_datatype_string

    ensure_audit_table(spark, cfg)
    at = dt.datetime.fromtimestamp(result.requested_ms / 1000, dt.timezone.utc).replace(tzinfo=None)
    rows = [(result.request_id, result.table, at, result.requested_ms, h, int(removed.get(h, 0)),
             int(quarantined.get(h, 0)), dict(result.request_offsets), snapshot_id, result.physically_removed,
             result.deadline_ms, result.deadline_note) for h in result.key_hashes]
    spark.createDataFrame(rows, _parse_datatype_string(AUDIT_SCHEMA)).writeTo(audit_table(cfg)).append()


def read_audit(spark, cfg: LakecleanerConfig, table: str | None = None) -> list[dict]:
    from .strategies import sql_string

    if not spark.catalog.tableExists(audit_table(cfg).replace("`", "")):
        return []
    where = f" WHERE table_name = {sql_string(table)}" if table else ""
    return [r.asDict(recursive=True) for r in spark.sql(f"SELECT * FROM {audit_table(cfg)}{where}").collect()]


# ---------------------------------------------------------------- the Spark application (jobs/forget.py)
def requests_from(table: str | None, keys: list[str] | None, requests_json: str | None) -> list[ForgetRequest]:
    """The CLI's TABLE --key K..., or the DAG's param: a JSON list of {"table": ..., "keys": [...]}."""
    import json

    out = [ForgetRequest(table, tuple(keys or ()))] if table else []
    for item in json.loads(requests_json) if requests_json else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("table"), str):
            raise ValueError(f"forget: each request needs a 'table' and 'keys', got {item!r:.200}")
        keys_ = item.get("keys")
        out.append(ForgetRequest(item["table"], tuple(keys_ if isinstance(keys_, list) else [keys_])))
    return out


def job_main(argv: list[str] | None = None) -> int:
    """One application for every request; one result line per request (the table's error for a bad
    one, which never stops the others); exit 1 if any failed."""
    import argparse

    from .catalog import first_line
    from .config import ConfigError, load_config
    from .spark import get_spark
    from .submit import format_result

    p = argparse.ArgumentParser(prog="jobs/forget.py")
    p.add_argument("table", nargs="?")
    p.add_argument("--key", action="append", default=[])
    p.add_argument("--requests", help="JSON list of {table, keys}")
    p.add_argument("--config")
    p.add_argument("--now-ms", type=int)
    p.add_argument("--interval-ms", type=int, default=15 * 60_000)
    args = p.parse_args(argv)
    requests = requests_from(args.table, args.key, args.requests)
    cfg = load_config(args.config)
    spark = get_spark(cfg, "lakecleaner-forget", set_master=False)
    failed = 0
    try:
        for request in requests:
            try:
                line = forget(spark, cfg, request, args.now_ms, args.interval_ms).as_dict()
            except Exception as exc:  # noqa: BLE001 - this request's failure, named; the others go on
                failed += 1
                text = str(exc) if isinstance(exc, (CompactionError, ConfigError)) else f"table {request.table}: {first_line(exc)}"
                line = {"table": request.table, "status": "failed", "error": text}
            print(format_result(line), flush=True)
    finally:
        spark.stop()
    return 1 if failed else 0
