"""Data-quality suites (great-expectations 1.x on Spark) built from each table's own config.

A compacted table is a promise; each expectation checks one rule of it and names that rule. The
batch GX validates is the table plus the engine's own derived columns (`lc_p`, `lc_o`, `lc_key`,
`lc_tomb`, `lc_ver`, `lc_has_ver`: the same expressions the compaction uses), so the suites restate
no rule: they query it. Every query is selective (LIMIT), since GX collects unexpected rows.

Each validation's summary is a row of the Iceberg table ``<catalog>.<meta namespace>.quality_results``
(lakecleaner.core.quality_results reads it through pyiceberg: the CLI, the DAG, the Airflow UI). Great
expectations runs in a file-backed context in the application's scratch space (a private directory
of the driver's $TMPDIR). ``close`` appends the application's results in one commit, builds the Data
Docs site once and copies it to ``<state root>/quality/docs/`` through pyiceberg's FileIO; the
scratch directory then goes. Nothing is kept on a disk another process would have to share.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F

from lakecleaner.core.config import CHECKPOINT_PROPERTY, DEFAULT_INTERVAL_MS, LakecleanerConfig, TableConfig
from lakecleaner.core.table import TableRef
from lakecleaner.spark.catalog import load_table_config
from lakecleaner.spark.frames import Frames, detached, local_frame
from lakecleaner.spark.history import ensure_history_table, ensure_own_table
from lakecleaner.core.rules import Checkpoint, tombstone_check_ms, tombstone_expired_sql
from lakecleaner.core.quality_results import RESULTS_SCHEMA, docs_location, publish_docs, results_table
from lakecleaner.core.quality_rules import (ANOMALOUS_VERSIONS, FORGOTTEN_STAY_FORGOTTEN, FRESHNESS, NO_NULL_KEYS,
                                           OFFSETS_UNIQUE, ONE_RECORD_PER_KEY, TOMBSTONE_EXPIRY, TOMBSTONE_NOT_EARLY,
                                           QualityRule, Severity, rule_named, winner_is_right)
from lakecleaner.core.keyhash import UNKEYED, UNKEYED_HASHER, KeyHasher, hash_sql, key_hasher, pads_join
from lakecleaner.spark.frames import register_pads
from lakecleaner.core.strategies import Strategy, checkpoint_sql, ident, key_message_sql

log = logging.getLogger(__name__)

OFFENDING_ROWS = 5


class QualityError(RuntimeError):
    """A fail-severity expectation failed; the message names the rule and shows offending keys."""


@dataclass(frozen=True)
class Forgotten:
    """A table's erasure requests hashed under one scheme (forget.audit_relation) and the SQL of that
    scheme's hash over the batch (a column the batch carries, for a keyed scheme)."""
    relation: str
    hash_sql: str
    join: str = ""  # what hash_sql needs joined to the batch (the pads of a keyed hash)


@dataclass(frozen=True)
class Rule:
    rule: QualityRule  # the rule it guards, shown in the UI and in errors by its name
    description: str
    query: str  # over {batch}

    def __post_init__(self):
        if rule_named(self.rule.name) != self.rule:  # results, alerts and quality.severity speak the registry's
            raise ValueError(f"rule {self.rule.name!r} is not in lakecleaner.core.quality_rules")

    @property
    def name(self) -> str:
        return self.rule.name


def _by_partition(offsets: dict, op: str) -> str | None:
    """Records whose offset is ``op`` their partition's entry, over the batch's derived columns."""
    return checkpoint_sql("lc_p", "lc_o", offsets, op)


def _expired_pred(ckpt: Checkpoint, now_ms: int, retention_ms: int) -> str | None:
    horizons = {p: ckpt.expired_through(p, now_ms, retention_ms) for p in ckpt.offsets}
    return _by_partition({p: h for p, h in horizons.items() if h is not None}, "<=")


def _not_kept_as_log_end(ckpt: Checkpoint) -> str:
    """Neither its partition's log end now nor a record the last run kept as the log end (the
    checkpoint's ``retained``): ingest may have appended behind that one since, and the next run
    removes it."""
    kept = _by_partition(ckpt.retained, "=")
    return f"(lc_o < lc_log_end AND NOT ({kept}))" if kept else "lc_o < lc_log_end"


def _named_by_hash(tc: TableConfig, hasher: KeyHasher, columns: str, inner: str) -> str:
    """An offending-rows query whose rows name the key by its (keyed) hash, computed for the few
    rows left after ``inner``'s LIMIT, never by the key: results are kept and shown."""
    return (f"SELECT {hash_sql(hasher, 'lc_msg')} AS key_hash, {columns} FROM ("
            f"SELECT {key_message_sql(tc)} AS lc_msg, {inner} LIMIT {OFFENDING_ROWS}){pads_join(hasher)}")


def build_rules(tc: TableConfig, ckpt: Checkpoint, now_ms: int, interval_ms: int, max_delay_ms: int,
                anomalous_share_max: float, forgotten: tuple[Forgotten, ...] = (),
                hasher: KeyHasher = UNKEYED_HASHER) -> list[Rule]:
    """``forgotten``: the table's erasure requests, one relation per hash scheme (_forgotten);
    ``hasher``: how offending rows name their keys (its pads registered in the session)."""
    keys = ", ".join(ident(k) for k in tc.key_columns)
    strategy = Strategy(tc)
    winner_order = strategy.winner_order_sql("lc_has_ver", "lc_ver", "lc_o")
    with_log_end = "(SELECT *, max(lc_o) OVER (PARTITION BY lc_p) AS lc_log_end FROM {batch})"
    not_log_end = _not_kept_as_log_end(ckpt) if tc.retain_log_end_record else "TRUE"
    rules = []
    expired = _expired_pred(ckpt, tombstone_check_ms(ckpt.as_of_ms, now_ms, interval_ms), tc.delete_retention_ms)
    if expired:
        rules.append(Rule(
            TOMBSTONE_EXPIRY,
            f"no tombstone is still here that had passed its horizon (delete.retention.ms={tc.delete_retention_ms} "
            f"after the run that first cleaned it) by the last run's now, or one schedule interval ago",
            _named_by_hash(tc, hasher, "partition_id, offset_id",
                           f"lc_p AS partition_id, lc_o AS offset_id FROM {with_log_end} "
                           f"WHERE lc_tomb AND ({expired}) AND {not_log_end}")))
    clean = _by_partition(ckpt.offsets, "<=")
    if clean:
        rules.append(Rule(
            ONE_RECORD_PER_KEY,
            "the cleaned part holds one record per key (per partition), except each partition's log end",
            _named_by_hash(tc, hasher, "partition_id, records",
                           f"lc_p AS partition_id, count(*) AS records FROM {with_log_end} "
                           f"WHERE ({clean}) AND {not_log_end} GROUP BY lc_p, {keys} HAVING count(*) > 1")))
        rules.append(Rule(
            winner_is_right(tc.strategy),
            "no cleaned record is beaten under the table's strategy by another cleaned record of its key",
            _named_by_hash(tc, hasher, "partition_id, offset_id",
                           f"lc_p AS partition_id, lc_o AS offset_id FROM ("
                           f"SELECT *, row_number() OVER (PARTITION BY lc_p, lc_key ORDER BY {winner_order})"
                           f" AS lc_rank FROM {with_log_end} WHERE ({clean})) WHERE lc_rank > 1 AND {not_log_end}")))
        # Only the cleaned part: a keyless record an ingest appended since is dirty, the next run's to move.
        # A partition's log end stays, though copied to quarantine (rule 6: its highest offset never goes).
        null_key = strategy.null_key_sql
        rules.append(Rule(NO_NULL_KEYS,
                          "cleaned keyless records are moved to the quarantine table, except each partition's log end",
                          f"SELECT lc_p AS partition_id, lc_o AS offset_id FROM {with_log_end} WHERE ({null_key}) "
                          f"AND ({clean}) AND {not_log_end} LIMIT {OFFENDING_ROWS}"))
    if forgotten:  # offending rows name the key by the hash the audit holds
        joins = " UNION ALL ".join(
            f"SELECT f.lc_forgotten_hash AS key_hash, b.lc_p AS partition_id, b.lc_o AS offset_id "
            f"FROM {{batch}} b{f.join} JOIN {f.relation} f ON {f.hash_sql} = f.lc_forgotten_hash "
            f"WHERE b.lc_o <= try_element_at(f.lc_forgotten_offsets, b.lc_p)" for f in forgotten)
        rules.append(Rule(
            FORGOTTEN_STAY_FORGOTTEN,
            "no record of a key erased on request (lakecleaner forget) at or below its partition's highest "
            "offset at the request; later records of the key are new data",
            f"SELECT * FROM ({joins}) LIMIT {OFFENDING_ROWS}"))
    rules.append(Rule(OFFSETS_UNIQUE, "Kafka's contract: one record per (partition, offset)",
                      f"SELECT lc_p AS partition_id, lc_o AS offset_id, count(*) AS records FROM {{batch}} "
                      f"GROUP BY lc_p, lc_o HAVING count(*) > 1 LIMIT {OFFENDING_ROWS}"))
    if strategy.bounds_anomalous_share:
        rules.append(Rule(
            ANOMALOUS_VERSIONS,
            f"at most {anomalous_share_max:.1%} of records lack a valid version ({tc.strategy} strategy)",
            f"SELECT share FROM (SELECT avg(CASE WHEN lc_has_ver THEN 0.0 ELSE 1.0 END) AS share FROM {{batch}}) "
            f"WHERE share > {anomalous_share_max}"))
    rules.append(Rule(
        FRESHNESS,
        f"max compaction delay {max_delay_ms} ms: dirty data is cleaned within max.compaction.lag.ms",
        f"SELECT {max_delay_ms} AS {FRESHNESS.figure} FROM {{batch}} WHERE {max_delay_ms} > 0 LIMIT 1"))
    return rules



def build_history_rules(tc: TableConfig) -> list[Rule]:
    """Rules over the table's run history: what a run removed is gone from the table, so the
    evidence is what the run recorded (when its newest expired tombstone was first cleaned, taken
    from the checkpoint by offset, independently of the horizon that chose the tombstones)."""
    retention = f"coalesce(delete_retention_ms, {tc.delete_retention_ms})"
    return [Rule(
        TOMBSTONE_NOT_EARLY,
        "every tombstone a run removed as expired had been in the cleaned table for at least the "
        f"delete.retention.ms in force at that run (now {tc.delete_retention_ms}), as Kafka (KIP-534)",
        "SELECT run_id, now_ms, expired_tombstone_latest_cleaned_ms AS first_cleaned_ms, "
        f"{retention} AS delete_retention_ms, removed_expired_tombstones FROM {{batch}} "
        "WHERE status = 'committed' AND removed_expired_tombstones > 0 AND NOT "
        f"{tombstone_expired_sql('expired_tombstone_latest_cleaned_ms', 'now_ms', retention)} LIMIT {OFFENDING_ROWS}")]


def _quiet_gx() -> None:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    for name in ("great_expectations", "great_expectations.core", "great_expectations.data_context"):
        logging.getLogger(name).setLevel(logging.WARNING)


class QualitySuites:
    """One great-expectations context for an application's validations (opening a file context and
    its Spark data source costs about a second, so a batch of tables opens it once), in the
    application's scratch space. What costs a Spark job or an Iceberg commit happens once per
    application, not per table (each would add about 0.3 to 0.5 s to every table of a fleet): the
    results table is created if missing and read for the tables' previous validations once (per
    now), and ``close`` appends every result in one commit, then builds and publishes Data Docs. An
    application that dies before ``close`` keeps no result of its validations (the next run's
    validation then answers for their runs too)."""

    def __init__(self, cfg: LakecleanerConfig):
        _quiet_gx()
        import great_expectations as gx

        self.cfg = cfg
        self.scratch: str | None = tempfile.mkdtemp(prefix="lakecleaner-gx-")  # 0700, removed by close
        try:
            self.ctx = gx.get_context(mode="file", project_root_dir=self.scratch)
            self.ctx.variables.progress_bars = {"globally": False}
            self.source = self.ctx.data_sources.add_or_update_spark(cfg.catalog.name)
            self.site = _local_path(self.ctx.get_docs_sites_urls(only_if_exists=False)[0]["site_url"]).rsplit("/", 1)[0]
        except BaseException:
            self._remove_scratch()
            raise
        self.pending_docs = False
        self.pending_results: list[tuple[dict, str | None]] = []  # (summary, run_history suite's page)
        self.previous: dict[int, dict[str, int]] = {}  # now_ms -> table -> newest earlier validation's now
        self.spark = None
        # GX registers every batch under one fixed temp view name and its context is not thread-safe:
        # tables cleaned side by side in one application are validated one at a time.
        self.lock = threading.Lock()

    def __enter__(self) -> "QualitySuites":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Append this application's results to the results table, build Data Docs for its
        validations and copy them to the state root (once per application); the scratch space goes
        either way."""
        try:
            unrecorded = None
            if self.pending_results:
                results, self.pending_results = self.pending_results, []
                try:
                    record_results(self.spark, self.cfg, results)
                except Exception as exc:  # noqa: BLE001 - raised below: the pages are published first
                    unrecorded = exc
            if self.pending_docs and self.scratch is not None:
                self.ctx.build_data_docs()
                self.pending_docs = False
                publish_docs(self.cfg, self.site)
            if unrecorded is not None:
                raise unrecorded
        finally:
            self._remove_scratch()

    def _remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def validate(self, spark, table: str, now_ms: int | None = None, run_name: str | None = None,
                 interval_ms: int = DEFAULT_INTERVAL_MS, raise_on_failure: bool = True) -> dict:
        """Run the table's suites and keep the result; raise QualityError on a failed rule whose
        severity is 'fail'."""
        from lakecleaner.core.evaluate import evaluate_table
        from lakecleaner.core.metadata import MetadataReader

        cfg = self.cfg
        ref = TableRef.parse(table, cfg.catalog.name)
        now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
        run_name = run_name or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ms / 1000))
        tc, props = load_table_config(spark, cfg, ref)
        ckpt = Checkpoint.from_json(props.get(CHECKPOINT_PROPERTY))
        delay = evaluate_table(MetadataReader(cfg).read(ref.short), now_ms, cfg.defaults).max_compaction_delay_ms
        severity = dict(cfg.quality.severity)
        hasher = key_hasher(cfg)
        register_pads(spark, hasher)
        rules = build_rules(tc, ckpt, now_ms, interval_ms, delay, cfg.quality.anomalous_share_max,
                            _forgotten(spark, cfg, ref, tc, hasher), hasher)

        fr = Frames(tc)
        batch_df = spark.table(ref.sql()).select(
            "*", fr.p.alias("lc_p"), fr.o.alias("lc_o"), fr.key.alias("lc_key"), fr.tomb.alias("lc_tomb"),
            fr.version.alias("lc_ver"), fr.has_version.alias("lc_has_ver"))

        # The runs this validation answers for: those since the previous validation of the table (all
        # runs, the first time), so each run's removals are judged once and a rerun judges the same ones.
        previous = self._previous(spark, ref.short, now_ms)
        ensure_history_table(spark, cfg)
        # Other tables' runs append to the history table while this one is validated (a packed
        # application): the batch of runs is a copy, which their writes do not recache under GX's feet.
        runs_df = detached(spark.table(cfg.history_table).where(
            (F.col("table_name") == ref.short) & (F.col("now_ms") <= now_ms)
            & (F.col("now_ms") > previous if previous is not None else F.lit(True))))

        outcome, pages = [], []
        with self.lock:
            try:
                for name, suite_rules, df in ((ref.short, rules, batch_df),
                                              (f"{ref.short}.run_history", build_history_rules(tc), runs_df)):
                    results, page = _run_suite(self.ctx, self.source, name, suite_rules, df, run_name, severity)
                    outcome += results
                    pages.append(_relative(page, self.site))
            finally:  # GX's Spark engine caches each batch it validates and keeps the last one
                batch_df.unpersist()
                runs_df.unpersist()
            self.pending_docs = True
        failed = [o for o in outcome if not o["success"] and o["severity"] == Severity.FAIL]
        warned = [o for o in outcome if not o["success"] and o["severity"] != Severity.FAIL]
        summary = {"table": ref.short, "run_name": run_name, "now_ms": now_ms, "success": not failed,
                   "warnings": len(warned), "rules": outcome, "docs_page": pages[0],
                   "docs": docs_location(cfg, pages[0]) if pages[0] else None}
        with self.lock:
            self.spark = spark
            self.pending_results.append((summary, pages[1]))
        if failed and raise_on_failure:
            first = failed[0]
            raise QualityError(f"table {ref.short}: data-quality rule failed: {first['rule']}: {first['description']}; "
                               f"offending rows: {first['offending']}"
                               + (f" (and {len(failed) - 1} more failed rules)" if len(failed) > 1 else ""))
        return summary


    def _previous(self, spark, table: str, now_ms: int) -> int | None:
        """The now of the table's newest validation before ``now_ms``: kept in the results table (read
        once per application and now) or validated earlier by this application."""
        with self.lock:
            if now_ms not in self.previous:
                ensure_results_table(spark, self.cfg)
                rows = (spark.table(results_table(self.cfg)).where(F.col("now_ms") < now_ms)
                        .groupBy("table_name").agg(F.max("now_ms").alias("newest")).collect())
                self.previous[now_ms] = {r["table_name"]: r["newest"] for r in rows}
            earlier = [s["now_ms"] for s, _ in self.pending_results if s["table"] == table and s["now_ms"] < now_ms]
            return max([*earlier, *([self.previous[now_ms][table]] if table in self.previous[now_ms] else [])],
                       default=None)


def ensure_results_table(spark, cfg: LakecleanerConfig) -> None:
    ensure_own_table(spark, cfg, results_table(cfg), RESULTS_SCHEMA)


def record_result(spark, cfg: LakecleanerConfig, summary: dict, run_history_page: str | None) -> None:
    """Append a validation's summary to <catalog>.<meta namespace>.quality_results."""
    record_results(spark, cfg, [(summary, run_history_page)])


def record_results(spark, cfg: LakecleanerConfig, results: list[tuple[dict, str | None]]) -> None:
    """Append validations' summaries (with their run-history suite's Data Docs page) to
    <catalog>.<meta namespace>.quality_results in one commit: what the CLI, the DAG and the UI read,
    and the next validation of each table starts from."""
    import datetime as dt

    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(RESULTS_SCHEMA)
    recorded_at = dt.datetime.now(dt.timezone.utc)  # aware: PySpark reads a naive one as the driver's local time
    rows = []
    for summary, run_history_page in results:
        row = {"table_name": summary["table"], "run_name": summary["run_name"], "now_ms": summary["now_ms"],
               "success": summary["success"], "warnings": summary["warnings"],
               "rules": json.dumps(summary["rules"], sort_keys=True, default=str), "docs_page": summary["docs_page"],
               "run_history_docs_page": run_history_page, "recorded_at": recorded_at}
        rows.append(tuple(row[f.name] for f in schema.fields))
    ensure_results_table(spark, cfg)
    local_frame(spark, rows, schema).writeTo(results_table(cfg)).append()


def _local_path(url: str) -> str:
    """A file: URL of great expectations' site as a path."""
    return urllib.parse.unquote(urllib.parse.urlparse(url).path)


def _relative(page_url: str | None, site: str) -> str | None:
    """A Data Docs page's URL as a path relative to the site (what the state root's copy is named by)."""
    if not page_url:
        return None
    rel = os.path.relpath(_local_path(page_url), site)
    return None if rel.startswith("..") else rel.replace(os.sep, "/")


def _forgotten(spark, cfg: LakecleanerConfig, ref: TableRef, tc: TableConfig,
               hasher: KeyHasher) -> tuple[Forgotten, ...]:
    """The table's erasure requests per hash scheme the suite can compute: the unkeyed SHA-256 (rows
    audited before a secret was set) and the deployment's keyed one. Rows hashed under another
    secret (rotated away) cannot be checked, and are logged as such."""
    from lakecleaner.spark.forget import audit_relation, audit_schemes

    out = []
    for scheme in audit_schemes(spark, cfg, ref.short):
        if scheme in (UNKEYED, hasher.scheme):
            under = hasher if scheme == hasher.scheme else UNKEYED_HASHER
            out.append(Forgotten(audit_relation(cfg, ref.short, scheme), hash_sql(under, key_message_sql(tc)),
                                 pads_join(under)))
        else:
            log.warning("lakecleaner: table %s: erasure requests hashed under %s (another secret) cannot be checked",
                        ref.short, scheme)
    return tuple(out)


def validate_table(spark, cfg: LakecleanerConfig, table: str, now_ms: int | None = None,
                   run_name: str | None = None, interval_ms: int = DEFAULT_INTERVAL_MS, raise_on_failure: bool = True) -> dict:
    """One table's suites in a context of its own, Data Docs rebuilt (see ``QualitySuites``)."""
    with QualitySuites(cfg) as suites:
        return suites.validate(spark, table, now_ms, run_name, interval_ms, raise_on_failure)


_EXPECTATION = None


def _offending_rows_expectation():
    """GX's UnexpectedRowsExpectation with one query per rule instead of two. GX runs each rule's
    query twice, for the rows and again as SELECT COUNT(*) around it; our queries carry a LIMIT, so
    the count says nothing the rows do not, and on a batch of small tables the second Spark job per
    rule was a third of validation's time. Defined on first use: importing GX is slow."""
    global _EXPECTATION
    if _EXPECTATION is None:
        from great_expectations.expectations import UnexpectedRowsExpectation

        class ExpectNoOffendingRows(UnexpectedRowsExpectation):
            """No row of the rule's query (at most its LIMIT are listed)."""
            metric_dependencies = ("unexpected_rows_query.table",)

            def _validate(self, metrics, runtime_configuration=None, execution_engine=None):
                rows = metrics["unexpected_rows_query.table"]
                metrics = {**metrics, "unexpected_rows_query.row_count": len(rows)}
                return super()._validate(metrics, runtime_configuration, execution_engine)

        _EXPECTATION = ExpectNoOffendingRows
    return _EXPECTATION


def _run_suite(ctx, source, name: str, rules: list[Rule], df, run_name: str,
               severity: dict) -> tuple[list[dict], str | None]:
    """One GX suite over one batch (a dataframe asset named ``name``): each rule's outcome, and the
    URL its Data Docs page will have once ``QualitySuites.close`` builds the site from the context's
    store. A rule's fail/warn is GX's
    own expectation ``severity`` (critical/warning: what GX's renderers and actions read), and is
    read back from each result's expectation configuration."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.expectations.metadata_types import FailureSeverity

    to_gx = {Severity.FAIL: FailureSeverity.CRITICAL, Severity.WARN: FailureSeverity.WARNING}

    asset = next((a for a in source.assets if a.name == name), None) or source.add_dataframe_asset(name)
    batch = next(iter(asset.batch_definitions), None) or asset.add_batch_definition_whole_dataframe("whole table")
    suite = gx.ExpectationSuite(name=name)
    for rule in rules:
        suite.add_expectation(_offending_rows_expectation()(
            unexpected_rows_query=rule.query, description=f"{rule.name}: {rule.description}",
            meta={"rule": rule.name}, severity=to_gx[Severity(severity.get(rule.name, Severity.FAIL))]))
    suite = ctx.suites.add_or_update(suite)
    vd = ctx.validation_definitions.add_or_update(gx.ValidationDefinition(data=batch, suite=suite, name=name))
    checkpoint = ctx.checkpoints.add_or_update(gx.Checkpoint(
        name=name, validation_definitions=[vd], actions=[],
        result_format={"result_format": "COMPLETE"}))  # COMPLETE: the offending rows (queries carry a LIMIT)
    run = checkpoint.run(batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=run_name))
    by_name = {r.name: r for r in rules}
    outcome = []
    ((identifier, validation),) = run.run_results.items()
    page = next(iter(ctx.get_docs_sites_urls(resource_identifier=identifier, only_if_exists=False)), {}).get("site_url")
    for res in validation.results:
        meta = res.expectation_config.meta or {}
        rows = (res.result or {}).get("details", {}).get("unexpected_rows") or []
        level = Severity.FAIL if res.expectation_config.severity == FailureSeverity.CRITICAL else Severity.WARN
        outcome.append({"rule": meta.get("rule"), "severity": level.value, "success": bool(res.success),
                        "description": by_name[meta.get("rule")].description,
                        "offending": [_plain(r) for r in rows[:OFFENDING_ROWS]]})
    return outcome, page


def _plain(row: Any) -> Any:
    if isinstance(row, dict):
        return {k: _plain(v) for k, v in row.items()}
    if hasattr(row, "asDict"):
        return _plain(row.asDict(recursive=True))
    return row if isinstance(row, (int, float, str, bool, type(None))) else str(row)


