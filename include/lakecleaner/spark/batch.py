"""Many tables in one Spark application, as Kafka's cleaner threads clean many logs: the start-up
(JVM, SparkContext, Iceberg catalog, great-expectations context) is paid once per application, not
once per table and step.

Per table, in the order given (the plan's: must-clean ratio, then dirty ratio), the chain
compact -> maintain (deletes made physical) -> validate runs with the same isolation as separate
jobs had: a failure of one table (invalid config, unreadable metadata, a broken file, a failed
rule) ends that table's chain, is recorded for that table, and the application goes on with the
next. Cached data is released between tables, so driver memory does not grow with their number.

A time budget bounds the application: once it is spent, no new table is started and the rest are
left, still in plan order, to the next interval ("deferred"), as Kafka's cleaner leaves the logs it
did not reach. The first table always runs, so every application makes progress.

The scheduler's chain (``record_outcomes``) also counts each table's cleaning failures (the Nth in
a row marks it uncleanable) and calls the alert hook, and keeps a report document under the state
root, rewritten as each table starts and ends, from which the DAG's summary (and its failure
callback, should the application die) learns every table's outcome. A dry run commits nothing, so
it skips maintenance and validation and records no outcome: it cleans nothing, so it neither
resets a table's failures nor counts one (nor fails a must-clean table on freshness).
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable

from lakecleaner.core.config import DEFAULT_INTERVAL_MS, ConfigError, LakecleanerConfig
from lakecleaner.core.records import (CLEANING_STEPS, NOT_COUNTED, ApplicationReport, QualityStatus, RunStatus, Step,
                                      TableOutcome, TableStatus)
from lakecleaner.core.sparkconf import SHUFFLE_PARTITIONS
from lakecleaner.core.table import first_line
from lakecleaner.core.submit import format_result

__all__ = ["CLEANING_STEPS", "STEPS", "BatchRequest", "TableOutcome", "clean_tables", "job_main", "result_line"]

STEPS = (Step.COMPACT, Step.MAINTAIN, Step.VALIDATE)
SECTION = "=" * 12


@dataclass(frozen=True)
class BatchRequest:
    """What one application is asked to do."""

    tables: tuple[str, ...]
    now_ms: int
    steps: tuple[str, ...] = STEPS
    dry_run: bool = False
    run_name: str | None = None  # the key validation results are kept under (the DAG run's date)
    interval_ms: int = DEFAULT_INTERVAL_MS  # a tombstone may outlive its horizon by one schedule interval
    budget_s: float | None = None  # no new table is started after this many seconds
    record_outcomes: bool = False  # count failures, mark uncleanable, alert (the scheduler's chain)
    report: str | None = None  # document (under the state root) kept up to date as tables finish


def clean_tables(spark, cfg: LakecleanerConfig, request: BatchRequest,
                 emit: Callable[[str], None] = print, workers: int | None = None) -> list[TableOutcome]:
    """Run the request's steps for each table, ``workers`` tables at once (default
    cleaner.application_threads), starting them in order; never raises for one table's failure.
    Returns the outcomes in the request's order."""
    from lakecleaner.spark.history import ensure_history_table

    run = _BatchRun(cfg, request, emit)
    suites = _SuitesOnDemand(cfg) if "validate" in request.steps else None
    if "compact" in request.steps:
        try:
            ensure_history_table(spark, cfg)  # once, before tables race to create it
        except Exception as exc:  # noqa: BLE001 - history is secondary (record_history): the tables go on
            emit(f"lakecleaner: the run history table {cfg.history_table} cannot be prepared, so the runs of this "
                 f"application may go unrecorded there: {first_line(exc)}")
    replaced = _choose_small_table_conf(spark, cfg, request.tables, emit)
    workers = max(1, min(workers or cfg.cleaner.application_threads, len(request.tables)))
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="lakecleaner-table") as pool:
            for future in [pool.submit(run.work, spark, suites) for _ in range(workers)]:
                future.result()
    finally:
        if suites is not None:
            try:
                suites.close()
            except Exception as exc:  # noqa: BLE001 - the tables' outcomes (and validation summaries) are reported
                emit(f"lakecleaner: could not keep the data-quality results or publish Data Docs: "
                     f"{type(exc).__name__}: {exc}")
        run.finish()
        restore_session_conf(spark, replaced)  # leave the caller's session as it was
    return run.ordered()


# Spark compiles Java code (Janino) for every new query plan: whole stages, and each projection,
# predicate and ordering an operator builds, in every task. On small tables that costs more than it
# saves: a 20K-record table's whole chain, warm, took 8.8 s with whole-stage code generation and
# 7.0 s without (medians of six tables, one at a time), and a profile of the rest still found 40% of
# the tasks' CPU in code generation and its compiler. A large table needs both (its scans and joins
# run several times faster), so an application turns them off only when every table it takes is
# below SMALL_TABLE_BYTES. ``spark.sql.codegen.factoryMode=NO_CODEGEN`` is an internal setting of
# Spark's: it takes the interpreted projections and predicates Spark itself falls back to whenever
# generated code cannot be compiled; an unknown setting would be ignored, not fail.
# Such an application also shuffles into SMALL_TABLE_SHUFFLE_PARTITIONS, not sparkconf's
# SHUFFLE_PARTITIONS_DEFAULT (8). Adaptive execution coalesces a small shuffle's partitions on its
# own, but not those of a cached plan (spark.sql.optimizer.canChangeCachedPlanOutputPartitioning is
# off in Spark 3.5, and turning it on changed nothing measurable): the run's key map kept 8
# partitions, a task each in every job that reads it. A warm run of a 60-record table: 1.28 -> 1.12
# CPU s (offset strategy) and 1.07 -> 0.94 (timestamp), medians of 13 alternating in one session;
# 1 partition saved a little more but runs a 32 MB table's reduce on one core.
# And it runs without adaptive execution: what it changes at run time (coalescing partitions, a join
# turned into a broadcast once a side's size is known, skew splits) pays off on large shuffles, and
# on two small partitions there is nothing to gain, while re-planning every query at each stage
# boundary costs on every run: a warm run of a 60-record table 0.84 -> 0.76 CPU s (offset) and
# 1.00 -> 0.89 (timestamp), medians of 13 alternating in one session; bench_fleet.py's 20,000-record
# tables 2.80 -> 2.53 s per additional table. Without it Spark plans joins from the scans' estimates,
# which Iceberg gives from its metadata.
SMALL_TABLE_BYTES = 32 * 2**20
SMALL_TABLE_SHUFFLE_PARTITIONS = 2


CODEGEN = "spark.sql.codegen.wholeStage"
ADAPTIVE = "spark.sql.adaptive.enabled"
SMALL_TABLE_CONF = {CODEGEN: "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                    SHUFFLE_PARTITIONS: str(SMALL_TABLE_SHUFFLE_PARTITIONS), ADAPTIVE: "false"}


def set_session_conf(spark, conf: dict[str, str]) -> dict[str, str | None]:
    """Set ``conf`` in the session; returns what it replaced (None: not set), for restore_session_conf."""
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    return previous


def restore_session_conf(spark, previous: dict[str, str | None]) -> None:
    """Put back what set_session_conf replaced: a key set at the session's start (sparkconf's shuffle
    partitions) gets its value back, where unsetting it would give Spark's default instead."""
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _choose_small_table_conf(spark, cfg: LakecleanerConfig, tables: tuple[str, ...],
                             emit) -> dict[str, str | None]:
    """Run an application of small tables with SMALL_TABLE_CONF, but for the settings the operator
    gave (cfg.spark.conf); returns what it replaced (nothing if a table is larger, or the operator
    set code generation)."""
    from lakecleaner.core.table import TableRef
    from lakecleaner.spark.catalog import snapshot_summary

    if CODEGEN in cfg.spark.conf or spark.conf.get(CODEGEN, "true").lower() != "true":
        return {}  # the operator decided
    largest = 0
    for table in tables:
        try:
            summary = snapshot_summary(spark, TableRef.parse(table, cfg.catalog.name))
        except Exception:  # noqa: BLE001 - the table's own run reports why it cannot be loaded
            continue
        largest = max(largest, int(summary.get("total-files-size", 0)))
    if largest > SMALL_TABLE_BYTES:
        return {}
    replaced = set_session_conf(spark, {key: value for key, value in SMALL_TABLE_CONF.items()
                                        if key not in cfg.spark.conf})  # the operator's own settings stay
    emit(f"lakecleaner: every table is at most {SMALL_TABLE_BYTES // 2**20} MB: code generation off, "
         f"{spark.conf.get(SHUFFLE_PARTITIONS)} shuffle partitions, adaptive execution "
         f"{'on' if spark.conf.get(ADAPTIVE, 'true').lower() == 'true' else 'off'}")
    return replaced


class _SuitesOnDemand:
    """The application's great-expectations context, opened by its first validation (whose step time
    then includes it). An application that validates nothing (each of its tables failed, yielded or
    was skipped before validation, or it was killed before one) need not import GX and open a file
    context: a spark-submit of clean.py whose one table is missing took 18.3 CPU s with them and 10.6
    without. A context that cannot be opened fails each validation with the reason; compaction and
    maintenance are unaffected."""

    def __init__(self, cfg: LakecleanerConfig):
        self.cfg = cfg
        self.lock = threading.Lock()  # tables validated side by side open one context
        self.opened = None  # QualitySuites, or _NoSuites with the reason

    def _suites(self):
        from lakecleaner.spark.quality import QualitySuites

        with self.lock:
            if self.opened is None:
                try:
                    self.opened = QualitySuites(self.cfg)
                except Exception as exc:  # noqa: BLE001 - each validation fails with the reason
                    self.opened = _NoSuites(f"the data-quality context cannot be opened: {type(exc).__name__}: {exc}")
            return self.opened

    def validate(self, spark, table: str, *args) -> dict:
        return self._suites().validate(spark, table, *args)

    def close(self) -> None:
        with self.lock:
            opened = self.opened
        if opened is not None:
            opened.close()


class _NoSuites:
    """Stands in for a great-expectations context that could not be opened: each table's validation
    fails with the reason, and the other steps are unaffected."""

    def __init__(self, reason: str):
        self.reason = reason

    def validate(self, spark, table: str, *args) -> dict:
        raise RuntimeError(f"table {table}: {self.reason}")

    def close(self) -> None:
        pass


class _BatchRun:
    """The shared state of one application's workers: which table comes next, which are in flight,
    the outcomes so far (and the report document that mirrors them)."""

    def __init__(self, cfg: LakecleanerConfig, request: BatchRequest, emit: Callable[[str], None]):
        self.cfg, self.request, self.emit = cfg, request, emit
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.next = 0
        self.in_flight: list[str] = []
        self.outcomes: dict[str, TableOutcome] = {}
        self.stopped: str | None = None  # why no further table is started

    def work(self, spark, suites) -> None:
        # The JVM keeps the active session per thread, and a worker's JVM thread starts with none:
        # Iceberg would then resolve `catalog`.`ns`.`table` against spark_catalog.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        while (table := self._take()) is not None:
            outcome = _clean_one(spark, self.cfg, table, self.request, suites)
            if self.request.record_outcomes and not self.request.dry_run:  # a dry run cleans nothing
                _record(self.cfg, outcome, self.request.now_ms, self.emit)
            alive = outcome.status == TableStatus.OK or _spark_alive(spark)
            self._done(outcome, alive)

    def _take(self) -> str | None:
        with self.lock:
            if self.stopped is None and self._budget_spent():
                self.stopped = (f"the application's budget of {self.request.budget_s:g} s was spent after "
                                f"{self.next} table(s) were started; left, in plan order, to the next run")
            if self.stopped is not None or self.next >= len(self.request.tables):
                return None
            table = self.request.tables[self.next]
            self.next += 1
            self.in_flight.append(table)
            self._report()
            self.emit(started_line(table, self.next, len(self.request.tables)))
            return table

    def _budget_spent(self) -> bool:
        """The first table always starts, so every application makes progress."""
        budget = self.request.budget_s
        return budget is not None and self.next > 0 and time.monotonic() - self.started >= budget

    def _done(self, outcome: TableOutcome, alive: bool) -> None:
        with self.lock:
            self.in_flight.remove(outcome.table)
            self.outcomes[outcome.table] = outcome
            if not alive and self.stopped is None:
                self.stopped = f"the Spark application is no longer usable after {outcome.table} failed"
            self._report()
            position = self.request.tables.index(outcome.table) + 1
            self.emit(_section(outcome, position, len(self.request.tables)))

    def finish(self) -> None:
        with self.lock:
            rest = [t for t in self.request.tables if t not in self.outcomes and t not in self.in_flight]
            if rest:
                reason = self.stopped or "the application stopped before reaching it"
                self.emit(f"lakecleaner: {reason}: {', '.join(rest)}")
                self.outcomes.update({t: TableOutcome(table=t, status=TableStatus.DEFERRED, error=reason)
                                      for t in rest})
            self._report()

    def ordered(self) -> list[TableOutcome]:
        return [self.outcomes[t] for t in self.request.tables if t in self.outcomes]

    def _report(self) -> None:
        if self.request.report is None:
            return
        from lakecleaner.core.state import write_document

        try:
            write_document(self.cfg, self.request.report, self._report_document())
        except Exception as exc:  # noqa: BLE001 - the tables' own outcomes are recorded and printed anyway
            self.emit(f"lakecleaner: cannot write the application's report {self.request.report}: "
                      f"{type(exc).__name__}: {exc}")

    def _report_document(self) -> dict:
        return ApplicationReport(
            tables=self.request.tables, now_ms=self.request.now_ms, in_progress=tuple(self.in_flight),
            finished=not self.in_flight and (self.next >= len(self.request.tables) or self.stopped is not None),
            outcomes=tuple(self.ordered())).to_dict()


def started_line(table: str, position: int, total: int) -> str:
    """The task log's mark that a table's chain began (its section follows when it is done)."""
    return f"lakecleaner: {table} ({position} of {total}): started"


def _section(outcome: TableOutcome, position: int, total: int) -> str:
    """One table's clearly delimited block of the task log, written at once when the table is done
    (tables run side by side, so a block written line by line would interleave)."""
    lines = [f"{SECTION} lakecleaner: {outcome.table} ({position} of {total}) {SECTION}"]
    for step, ms in outcome.step_ms.items():
        result = outcome.steps.get(step)
        if result is None:
            lines.append(f"  {step}: FAILED after {ms / 1000:.1f} s: {outcome.error}")
            continue
        figures = {k: result[k] for k in STEP_FIGURES.get(step, ()) if k in result}
        lines.append(f"  {step}: {result.get('status', 'ok' if result.get('success', True) else 'failed')} "
                     f"in {ms / 1000:.1f} s {json.dumps(figures, sort_keys=True, default=str)}")
    lines.append(f"{SECTION} lakecleaner: {outcome.table}: {outcome.status.upper()} "
                 f"({outcome.duration_ms / 1000:.1f} s) {SECTION}")
    return "\n".join(lines)


STEP_FIGURES = {
    "compact": ("records_read", "records_kept", "removed_superseded", "removed_expired_tombstones", "quarantined",
                "committed_snapshot_id"),
    "maintain": ("rewritten_data_files", "snapshots_expired", "orphan_files_removed", "data_manifests"),
    "validate": ("warnings", "docs"),
}


def _clean_one(spark, cfg: LakecleanerConfig, table: str, request: BatchRequest, suites) -> TableOutcome:
    """The chain for one table: each step runs only if the ones before it succeeded."""
    from lakecleaner.core.table import ConcurrentCommitError, TableRef, conflict_error
    from lakecleaner.spark.engine import compact_table
    from lakecleaner.spark.maintenance import maintain_table

    started = time.monotonic()
    try:
        ref = TableRef.parse(table, cfg.catalog.name)
    except ConfigError as exc:  # a name no table can have (a typo): this table fails, the others go on
        return TableOutcome(table=table, status=TableStatus.FAILED, failed_step=request.steps[0], error=str(exc),
                            duration_ms=int((time.monotonic() - started) * 1000))
    status, failed_step, error = TableStatus.OK, None, None
    steps: dict[str, dict] = {}
    step_ms: dict[str, int] = {}
    for step in request.steps:
        step_started = time.monotonic()
        try:
            if step == Step.COMPACT:
                result = compact_table(spark, cfg, table, now_ms=request.now_ms, dry_run=request.dry_run)
            elif request.dry_run:  # nothing changed: no maintenance, and nothing to validate as of this run
                result = {"table": table, "status": "skipped", "reason": "dry run"}
            elif step == Step.MAINTAIN:
                result = maintain_table(spark, cfg, table, now_ms=request.now_ms)
            else:
                result = suites.validate(spark, table, request.now_ms, request.run_name, request.interval_ms)
        except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the others
            yielded = exc if isinstance(exc, ConcurrentCommitError) else conflict_error(ref, exc)
            if yielded is not None:  # another run has the table (a maintenance's rewrite too): not a failure
                status, failed_step, error = TableStatus.YIELDED, step, str(yielded)[:2000]
            else:
                status, failed_step, error = TableStatus.FAILED, step, failure_message(table, step, exc)
            break
        finally:
            step_ms[step] = int((time.monotonic() - step_started) * 1000)
        steps[step] = result
        if step == Step.COMPACT and result.get("status") == RunStatus.SKIPPED:  # the rest would judge an earlier time
            status, error = TableStatus.SKIPPED, result.get("reason")
            break
    return TableOutcome(table=table, status=status, failed_step=failed_step, error=error, steps=steps, step_ms=step_ms,
                        duration_ms=int((time.monotonic() - started) * 1000))


def failure_message(table: str, step: str, exc: BaseException) -> str:
    """The error as its own message when it already names the table (CompactionError, ConfigError,
    QualityError), else the table, the step and the root cause."""
    from lakecleaner.core.table import first_line

    text = str(exc)
    if isinstance(exc, ValueError | RuntimeError) and text.startswith("table "):
        return text[:2000]
    return f"table {table}: {step} failed: {type(exc).__name__}: {first_line(exc)}"


def _record(cfg: LakecleanerConfig, outcome: TableOutcome, now_ms: int, emit) -> None:
    """Count the table's cleaning failure (or reset the count), and alert on a failure."""
    from lakecleaner.core.scheduler import alert, record_outcome

    if outcome.status in NOT_COUNTED:  # not this table's failure, nor a success
        return
    try:
        recorded = record_outcome(cfg, outcome.table, outcome.cleaned, "" if outcome.cleaned else outcome.error, now_ms)
    except Exception as exc:  # noqa: BLE001 - the state store failing must not hide the table's outcome
        emit(f"lakecleaner: could not record the outcome of {outcome.table}: {type(exc).__name__}: {exc}")
        return
    if not outcome.cleaned:
        alert(outcome.table, replace(recorded, error=outcome.error))


def _spark_alive(spark) -> bool:
    try:
        spark._jvm.java.lang.System.currentTimeMillis()
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - a dead gateway raises anything
        return False


def result_line(outcome: TableOutcome, steps: tuple[str, ...]) -> dict:
    """What a job prints for a table: a single step's own result (today's output of `lakecleaner
    compact` / `validate`), else the whole outcome."""
    if len(steps) == 1 and outcome.status in (TableStatus.OK, TableStatus.SKIPPED):  # skipped: its result says why
        result = {**outcome.steps[steps[0]], "table": outcome.table}
        if steps[0] == Step.VALIDATE:
            result["status"] = QualityStatus.of(bool(result.get("success")))
        return result
    line = {"table": outcome.table, "status": outcome.status, "error": outcome.error}
    if len(steps) == 1:
        return {**line, "success": False} if steps[0] == Step.VALIDATE else line
    return {**line, "failed_step": outcome.failed_step, "duration_ms": outcome.duration_ms,
            "step_ms": outcome.step_ms, **outcome.steps}


# ---------------------------------------------------------------- the Spark applications in jobs/
def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("tables", nargs="+", help="namespace.table, in the order to clean them")
    p.add_argument("--config")
    p.add_argument("--now-ms", type=int)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--run-name")
    p.add_argument("--interval-ms", type=int, default=DEFAULT_INTERVAL_MS)
    p.add_argument("--budget-s", type=float)
    p.add_argument("--record-outcomes", action="store_true")
    p.add_argument("--report")
    return p


def _maintain_own_tables(spark, cfg: LakecleanerConfig, now_ms: int, emit) -> None:
    """Once a day, the scheduler's application that ends first maintains the run history and the
    data-quality results (with their Data Docs pages)."""
    from lakecleaner.spark.housekeeping import maintain_quality_results, maintain_run_history
    from lakecleaner.core.housekeeping import run_history_due

    if not run_history_due(cfg, now_ms):
        return
    for what, maintain in (("data-quality results", maintain_quality_results), ("run history", maintain_run_history)):
        try:  # the run history last: it records that the day's maintenance was done
            emit(f"lakecleaner: {what} maintained: {maintain(spark, cfg, now_ms)}")
        except Exception as exc:  # noqa: BLE001 - another application may be at it; tomorrow again
            emit(f"lakecleaner: could not maintain the {what}: {type(exc).__name__}: {str(exc)[:300]}")


def job_main(steps: tuple[str, ...], argv: list[str] | None = None) -> int:
    """Entry point of jobs/*.py: one application, one JSON result line per table (in the order
    run), exit 1 if any table failed."""
    from lakecleaner.spark.session import get_spark, job_config

    args = parser(f"jobs/{'clean' if len(steps) > 1 else steps[0]}.py").parse_args(argv)
    try:
        cfg = job_config(args.config)
    except ConfigError as exc:
        for table in args.tables:
            print(format_result({"table": table, "status": TableStatus.FAILED, "error": str(exc)}), flush=True)
        return 2
    request = BatchRequest(tuple(args.tables), int(args.now_ms if args.now_ms is not None else time.time() * 1000),
                           steps, args.dry_run, args.run_name, args.interval_ms, args.budget_s,
                           args.record_outcomes, args.report)
    spark = get_spark(cfg, f"lakecleaner-{'clean' if len(steps) > 1 else steps[0]}", set_master=False)
    emit = lambda line: print(line, flush=True)  # noqa: E731 - spark-submit's stdout is the task log
    try:
        outcomes = clean_tables(spark, cfg, request, emit)
        for outcome in outcomes:
            emit(format_result(result_line(outcome, steps)))
        if request.record_outcomes and not request.dry_run:
            _maintain_own_tables(spark, cfg, request.now_ms, emit)
    finally:
        spark.stop()
    return 1 if any(o.status == TableStatus.FAILED for o in outcomes) else 0

