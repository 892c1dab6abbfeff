"""What the scheduler does each interval, as plain functions: evaluate every compacted table from
metadata, pick and order the ones to clean, record each job's outcome (failure counts and the
uncleanable mark), and summarise. The Airflow DAG only wires these together; the CLI calls them too.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, fields, replace
from typing import Collection, Iterable, Mapping

from lakecleaner.core.config import (DEFAULT_INTERVAL_MS, ConfigError, LakecleanerConfig, cleanup_policy_error,
                                     is_compacted)
from lakecleaner.core.evaluate import Evaluation, cleaning_order, evaluate_table
from lakecleaner.core.records import (FAILS_THE_RUN, LEFT_FOR_NEXT_RUN, NOTEWORTHY, ApplicationPlan, ApplicationReport,
                                      EvaluationStatus, NotRun, RecordedOutcome, RunFigures, RunVerdict, Step,
                                      TableStatus, TableVerdict)
from lakecleaner.core.state import NAME_MAX, StateError, StateStore, TableState, shortened, write_document
from lakecleaner.core.table import NoSuchTableError, TableRef

log = logging.getLogger("lakecleaner")


def evaluate_all(cfg: LakecleanerConfig, tables: Iterable[str] | None = None, now_ms: int | None = None,
                 namespaces: Iterable[str] = (), ignore_marks: Collection[str] = ()) -> list[Evaluation]:
    """One row per compacted table (of ``namespaces``, each of which must exist: ConfigError; default
    cleaner.namespaces or all). A table whose metadata, checkpoint or state cannot be read or whose
    config is invalid gets a row saying so; the others are still evaluated. ``ignore_marks``: tables
    evaluated as if their uncleanable mark were cleared (a dry run's clear_uncleanable, which clears
    nothing)."""
    # here, not at the top: pyiceberg reads its .pyiceberg.yaml as it is imported, and the DAG file,
    # which the DAG processor parses every 30 s, imports this module
    from lakecleaner.core.metadata import ManifestStatsCache, MetadataReader

    namespaces = tuple(namespaces)
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    reader, store = MetadataReader(cfg, ManifestStatsCache(cfg)), StateStore(cfg)
    out, asked, requested = [], list(tables or []), []
    for name in asked:  # as every command takes a name: [catalog.]namespace.table, checked first
        try:
            requested.append(TableRef.parse(name, cfg.catalog.name).short)
        except ConfigError as exc:
            out.append(Evaluation(name, EvaluationStatus.INVALID_CONFIG, str(exc)))
    if asked and not requested:
        return out
    missing = sorted(set(namespaces) - set(reader.namespaces())) if namespaces and not requested else []
    if missing:  # asked for by name: a typo would otherwise list nothing, as an empty namespace does
        raise ConfigError(None, "namespace", ", ".join(missing), f"not in catalog {cfg.catalog.name}")
    names = requested or reader.list_tables(namespaces)
    for name in names:
        if not requested and _own_or_quarantine(cfg, name):
            continue
        try:
            meta = reader.read(name)
        except NoSuchTableError as exc:
            out.append(Evaluation(name, EvaluationStatus.UNREADABLE, str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - one unreadable table must not stop the others
            out.append(Evaluation(name, EvaluationStatus.UNREADABLE,
                                  f"table {name}: cannot read metadata: {type(exc).__name__}: {exc}"))
            continue
        error = cleanup_policy_error(name, meta.properties)
        if error or not is_compacted(meta.properties):
            if requested or error:
                out.append(Evaluation(name, EvaluationStatus.INVALID_CONFIG,
                                      str(error or f"table {name}: cleanup.policy is not compact")))
            continue
        try:
            uncleanable = None if name in ignore_marks else store.uncleanable_reason(name)
        except Exception as exc:  # noqa: BLE001 - its uncleanable mark is unknown: not cleaned, said so
            out.append(Evaluation(name, EvaluationStatus.UNREADABLE, str(exc) if str(exc).startswith(f"table {name}")
                                  else f"table {name}: cannot read cleaner state: {type(exc).__name__}: {exc}"))
            continue
        out.append(_evaluated(meta, now_ms, cfg, uncleanable))
    for ev in out:
        if ev.max_compaction_lag_ms is not None and ev.max_compaction_delay_ms > 0:
            log.warning("lakecleaner: table %s is %d ms past max.compaction.lag.ms", ev.table, ev.max_compaction_delay_ms)
    return out


def _evaluated(meta, now_ms: int, cfg: LakecleanerConfig, uncleanable: str | None) -> Evaluation:
    """``evaluate_table``, whatever its table holds: a failure is that table's unreadable row (an
    invalid checkpoint already is its own), never the end of the evaluation of every table."""
    try:
        return evaluate_table(meta, now_ms, cfg.defaults, uncleanable)
    except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the others
        from lakecleaner.core.table import first_line

        return Evaluation(meta.table, EvaluationStatus.UNREADABLE,
                          f"table {meta.table}: cannot evaluate: {type(exc).__name__}: {first_line(exc)[:300]}")


EVALUATION_DOCUMENT = "evaluations/last.json"  # under the cleaner's state root, rewritten by each evaluate task


@dataclass(frozen=True)
class RecordedEvaluation:
    """The scheduler's last evaluation of every compacted table, as its evaluate task recorded it:
    what the UI presents, so a page never re-reads every table's metadata."""
    now_ms: int  # the run's now, the clock the figures were computed on
    recorded_at_ms: int  # wall clock when the evaluate task wrote it
    tables: tuple[dict, ...]  # Evaluation.as_dict() rows, by table name

    def row(self, table: str) -> dict | None:
        return next((r for r in self.tables if r["table"] == table), None)


def record_evaluation(cfg: LakecleanerConfig, evaluations: Iterable[Evaluation], now_ms: int) -> str | None:
    """Keep this evaluation as the last one (one document, replaced whole); returns its location.
    A backfill's evaluation, as of an earlier now than the one kept, leaves it: the UI shows the
    tables as of the latest time any run has seen them. (None: not kept.)"""
    try:
        kept = last_evaluation(cfg)
    except ValueError:  # unreadable: replaced
        kept = None
    if kept is not None and kept.now_ms > now_ms:
        return None
    rows = sorted((e.as_dict() for e in evaluations), key=lambda r: r["table"])
    return write_document(cfg, EVALUATION_DOCUMENT, {"now_ms": int(now_ms), "recorded_at_ms": int(time.time() * 1000),
                                                     "tables": rows})


def last_evaluation(cfg: LakecleanerConfig) -> RecordedEvaluation | None:
    """The last recorded evaluation; None before the first evaluate task. A document this cleaner
    did not write is a ValueError naming it."""
    from lakecleaner.core.state import read_document

    doc = read_document(cfg, EVALUATION_DOCUMENT)
    if doc is None:
        return None
    try:
        tables = tuple(dict(r) for r in doc["tables"])
        if not all(isinstance(r.get("table"), str) and isinstance(r.get("status"), str) for r in tables):
            raise TypeError("a row without table or status")
        return RecordedEvaluation(int(doc["now_ms"]), int(doc["recorded_at_ms"]), tables)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"recorded evaluation {cfg.state_root}/{EVALUATION_DOCUMENT} is not one this cleaner "
                         f"wrote ({type(exc).__name__}: {exc}); the next evaluate task rewrites it") from None


# What one table's chain costs beyond the bytes it scans (catalog calls, commits, maintenance, the
# suites): about 1.5 s, which the engine scans about this many bytes in. Only used to balance
# applications, so a fleet of tiny tables is spread as evenly as one of large tables.
TABLE_OVERHEAD_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Job:
    table: str
    priority: int  # 1 = filthiest
    reason: str
    work_bytes: int = TABLE_OVERHEAD_BYTES  # expected work: see expected_work


def expected_work(e: Evaluation) -> int:
    """A table's expected cleaning work in bytes: the run reads its dirty part and its MERGE scans
    the table once (clean + cleanable bytes), plus the fixed per-table cost."""
    return TABLE_OVERHEAD_BYTES + e.clean_bytes + e.cleanable_bytes


@dataclass(frozen=True)
class Application:
    """One Spark application of a scheduler run: its tables in plan order (Kafka's cleaner thread)."""

    index: int
    jobs: tuple[Job, ...]

    @property
    def tables(self) -> list[str]:
        return [j.table for j in self.jobs]

    @property
    def work_bytes(self) -> int:
        return sum(j.work_bytes for j in self.jobs)

    @property
    def label(self) -> str:
        """How Airflow names the application's task instance: its tables, shortened past LABEL_MAX."""
        return table_label(self.tables)

    def planned(self, now_ms: int) -> ApplicationPlan:
        """What the late tasks are told of it (XCom): ids and figures, no path."""
        return ApplicationPlan(index=self.index, tables=tuple(self.tables), priorities=tuple(j.priority for j in self.jobs),
                               work_bytes=self.work_bytes, now_ms=now_ms)


LABEL_MAX = 200  # Airflow keeps 250 characters of a rendered map index


def table_label(tables: list[str]) -> str:
    shown: list[str] = []
    for i, table in enumerate(tables):
        rest = len(tables) - i - 1
        candidate = ", ".join([*shown, table]) + (f" +{rest} more" if rest else "")
        if shown and len(candidate) > LABEL_MAX:
            return ", ".join(shown) + f" +{len(tables) - len(shown)} more"
        shown.append(table)
    return ", ".join(shown)


def pack(jobs: list[Job], threads: int) -> list[Application]:
    """The plan's jobs packed into at most ``threads`` applications (the pool runs them at once).
    Jobs are dealt in plan order, each to the application with the least expected work so far: the
    filthiest tables start first, one per application, each application runs its tables in plan
    order, and expected work is balanced (greedy list scheduling, within the largest job of optimal)."""
    count = min(max(1, threads), len(jobs))
    members: list[list[Job]] = [[] for _ in range(count)]
    loads = [0] * count
    for job in jobs:
        i = min(range(count), key=lambda k: (loads[k], k))
        members[i].append(job)
        loads[i] += job.work_bytes
    return [Application(i, tuple(m)) for i, m in enumerate(members)]


def plan(evaluations: list[Evaluation], only: Iterable[str] | None = None, force: bool = False) -> list[Job]:
    """The tables to clean this interval, filthiest first: of ``only`` (None: of every table; an
    empty list: none). ``force`` cleans the requested (or all readable, validly configured, not
    uncleanable) tables whether or not they are eligible."""
    only = None if only is None else set(only)
    pool = [e for e in evaluations if only is None or e.table in only]
    chosen = cleaning_order(pool)
    if force:
        extra = [e for e in pool if e.status == EvaluationStatus.NOT_ELIGIBLE]
        chosen += sorted(extra, key=lambda e: (-e.must_clean_ratio, -e.dirty_ratio, e.table))
    return [Job(e.table, i + 1, e.reason if e.eligible else "forced", expected_work(e)) for i, e in enumerate(chosen)]


def plan_rows(evaluations: list[Evaluation]) -> list[dict]:
    """``evaluate --json``: every row with its ``plan_rank`` (the order the DAG cleans in, 1 first;
    None if not planned), planned rows first in that order, then the others as listed."""
    ranks = {job.table: job.priority for job in plan(evaluations)}
    rows = [{**e.as_dict(), "plan_rank": ranks.get(e.table)} for e in evaluations]
    return sorted(rows, key=lambda r: (r["plan_rank"] is None, r["plan_rank"] or 0))


def record_outcome(cfg: LakecleanerConfig, table: str, ok: bool, error: str, now_ms: int) -> RecordedOutcome:
    """After each job: reset or count failures; the Nth failure in a row marks the table uncleanable.
    ``now_ms`` is the run's now (its interval end), the clock every figure of the run is read on."""
    store = StateStore(cfg)
    state = store.record_success(table, now_ms) if ok else store.record_failure(
        table, error or "the compaction job failed", now_ms)
    if state.uncleanable and not ok:
        log.error("lakecleaner: table %s marked uncleanable after %d failures in a row: %s",
                  table, state.consecutive_failures, state.last_error)
    return RecordedOutcome(table=table, ok=ok, consecutive_failures=state.consecutive_failures,
                           uncleanable=state.uncleanable)


def alert(table: str, outcome: RecordedOutcome) -> None:
    """The log line of a table's counted cleaning failure (in the cleaning application, or by the DAG
    when an application died). ``outcome`` is ``record_outcome``'s, with the ``error``. The
    notifications go out from the DAG's summary (lakecleaner.airflow.notify), which has Airflow and reads
    the same recorded facts, so an application that died alerts as well."""
    level = logging.ERROR if outcome.uncleanable else logging.WARNING
    log.log(level, "lakecleaner: cleaning of %s failed (%d in a row%s): %s", table, outcome.consecutive_failures,
            ", now marked uncleanable" if outcome.uncleanable else "", outcome.error or "")


# ---------------------------------------------------------------- what the Airflow DAG needs (no Airflow here)
# (its SparkSubmitOperator arguments: lakecleaner.core.submit)
def report_name(run_id: str, index: int) -> str:
    """Where application ``index`` of a DAG run keeps its report (under the cleaner's state root).
    The DAG's late tasks derive it from their run id and the application's index, never read a
    path back from XCom: users with XCom edit rights can change XCom."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"application index {index!r} is not a non-negative integer")
    return f"batches/{run_directory(run_id)}/app-{index}.json"


def run_directory(run_id: str) -> str:
    """A DAG run's id as one directory name under batches/: Airflow's ids (``scheduled__2026-11-26
    T07:00:00+00:00``) with every character but letters, digits, '.', '_' and '-' as '_', a long one
    shortened. A run id no Airflow run has (empty, only dots, with a path separator or a control
    character) is refused: it would name a directory outside batches/, or no directory at all."""
    if not isinstance(run_id, str) or not run_id.strip("."):
        raise ValueError(f"run id {run_id!r}: not a name for a run's directory (empty or only dots)")
    if re.search(r"[/\\\x00-\x1f\x7f]", run_id):
        raise ValueError(f"run id {run_id!r}: holds a path separator or a control character")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return name if len(name) <= NAME_MAX else shortened(name)


def planned_applications(apps: list[Application], now_ms: int) -> list[ApplicationPlan]:
    """What ``evaluate`` tells the late tasks (XCom) about each application: ids and figures, no
    path (they take the config from the environment and the reports from ``report_name``)."""
    return [a.planned(now_ms) for a in apps]


def read_report(cfg: LakecleanerConfig, run_id: str, index: int) -> ApplicationReport | None:
    """Application ``index``'s report in this run (None: it wrote none), named from the run id."""
    from lakecleaner.core.state import read_document

    doc = read_document(cfg, report_name(run_id, index))
    return None if doc is None else ApplicationReport.from_dict(doc)


def clean_args(app: Application, config_path: str, now_ms: int, *, run_name: str, interval_ms: int,
               budget_s: float, report: str, dry_run: bool = False) -> list[str]:
    """Arguments of jobs/clean.py for one application: results kept under the run's logical date
    (run_name), a tombstone may outlive its horizon by one schedule interval, outcomes recorded."""
    return ["--config", str(config_path), "--now-ms", str(int(now_ms)), "--run-name", run_name,
            "--interval-ms", str(int(interval_ms)), "--budget-s", f"{budget_s:g}", "--report", report,
            "--record-outcomes", *(["--dry-run"] if dry_run else []), *app.tables]


def schedule_interval_ms(schedule: str | None, start, end) -> int:
    """The time from this run to the next, which the guarantees count in (a tombstone may outlive its
    horizon by one interval; an erasure's deadline adds one): the data interval's length where the
    timetable gives one; from the cron expression where it does not (Airflow 3's cron timetable
    gives each run a zero-length interval, start = end = the scheduled time); else the default."""
    if start is not None and end is not None and end > start:
        return int((end - start).total_seconds() * 1000)
    if schedule and end is not None:
        from croniter import croniter

        try:
            following = croniter(schedule, end).get_next(type(end))
        except (ValueError, KeyError):  # not a cron expression (a preset croniter does not know)
            return DEFAULT_INTERVAL_MS
        return max(1, int((following - end).total_seconds() * 1000))
    return DEFAULT_INTERVAL_MS


def application_budget_s(cfg: LakecleanerConfig, interval_ms: int) -> float:
    """An application starts no new table after cleaner.application_budget_s, nor after one
    schedule interval: a run does not outlive its interval by more than one table's work."""
    return float(min(cfg.cleaner.application_budget_s, interval_ms / 1000))


def run_history(cfg: LakecleanerConfig, now_ms: int | None = None, tables: Iterable[str] | None = None) -> list[dict]:
    """This interval's runs of these tables, oldest first (see lakecleaner.core.history)."""
    from lakecleaner.core.history import read_history

    return read_history(cfg, None, None, now_ms=now_ms, tables=tables, newest_first=False)


def table_outcomes(app: ApplicationPlan, report: ApplicationReport | None,
                   task_state: str | None) -> list[TableVerdict]:
    """Each table of one application as its report says: ok, failed or deferred; the table it was
    cleaning when it died failed; tables it never reached were not run."""
    report = report or ApplicationReport()
    died = task_state not in (None, "success") and not report.finished
    out = []
    for table, priority in zip(app.tables, app.priorities):
        row = TableVerdict(table=table, status=TableStatus.NOT_RUN, priority=priority, application=app.index)
        done = report.outcome(table)
        if done is not None:
            row = replace(row, status=done.status, failed_step=done.failed_step, error=done.error)
        elif died and table in report.in_progress:
            row = replace(row, status=TableStatus.FAILED, failed_step=Step.APPLICATION,
                          error=f"table {table}: the Spark application died while cleaning it (task {task_state})")
        else:
            reason = ("the Spark application ended before reaching it" if died or task_state
                      else "the Spark application did not run")
            row = replace(row, error=f"{reason} (task {task_state or 'not started'})")
        out.append(row)
    return out


def summarize(evaluations: list[Evaluation], applications: list[ApplicationPlan],
              reports: Mapping[int, ApplicationReport | None], states: Mapping[str, str | None],
              history: list[dict] = ()) -> RunVerdict:
    """What one scheduler run did, per planned table (its application, outcome and run-history
    figures), plus the tables not run for a reason an operator must see. ``states`` maps
    "clean_<i>" to the task state of application i. ``failed`` lists every table whose chain failed;
    ``failed_applications`` every application that did not end well (one that never started fails
    the run although none of its tables failed)."""
    latest = {r["table_name"]: RunFigures.of_history(r) for r in history}  # oldest first: the last row wins
    tables = sorted((replace(row, figures=latest.get(row.table))
                     for app in applications for row in table_outcomes(app, reports.get(app.index), states.get(app.task))),
                    key=lambda r: r.priority)
    # A corrupt checkpoint is a failure of that table (nothing can clean it until an operator
    # looks), not a config choice, and a name in the run's params that is no table it cleans an
    # operator's mistake: each fails the run as a failed chain does.
    failed = [r.table for r in tables if r.status == TableStatus.FAILED] + [
        e.table for e in evaluations if e.status in FAILS_THE_RUN]
    verdict = RunVerdict(
        tables=tuple(tables), failed=tuple(failed),
        not_run=tuple(NotRun(table=e.table, status=e.status, reason=e.reason) for e in evaluations
                      if e.status in NOTEWORTHY),
        deferred=tuple(r.table for r in tables if r.status in LEFT_FOR_NEXT_RUN),
        failed_applications=tuple(a.index for a in applications if states.get(a.task) != "success"))
    return replace(verdict, text=_account(verdict, len(applications)))


def _account(verdict: RunVerdict, applications: int) -> str:
    """The run's verdict as the summary task logs it: one line per planned table, then the not run."""
    lines = [f"lakecleaner: {len(verdict.tables)} table(s) planned in {applications} application(s), "
             f"{len(verdict.failed)} failed, {len(verdict.deferred)} left for the next run"]
    for row in verdict.tables:
        f = row.figures
        figures = "" if f is None else (f" run={f.run} read={f.records_read} kept={f.records_kept}"
                                        f" superseded={f.removed_superseded} tombstones={f.removed_expired_tombstones}")
        error = f" {row.failed_step or ''}: {row.error}" if row.status != TableStatus.OK and row.error else ""
        lines.append(f"  #{row.priority} {row.table} (application {row.application}): {row.status}{figures}{error}")
    lines += [f"  not run: {n.table} ({n.status}): {n.reason}" for n in verdict.not_run]
    return "\n".join(lines)


def evaluations_of(rows: Iterable[Mapping]) -> list[Evaluation]:
    """Evaluation.as_dict rows (the evaluate task's XCom) as Evaluations again."""
    names = {f.name for f in fields(Evaluation)}
    return [Evaluation(**{k: v for k, v in row.items() if k in names}) for row in rows]


# ---------------------------------------------------------------- one run, as the DAG's tasks call it
@dataclass(frozen=True)
class RunPlan:
    """What the evaluate task decided: every table's evaluation, the jobs in plan order, and the
    applications they are packed into."""
    now_ms: int
    evaluations: tuple[Evaluation, ...]
    jobs: tuple[Job, ...]
    applications: tuple[Application, ...]

    def planned(self) -> list[ApplicationPlan]:
        return planned_applications(list(self.applications), self.now_ms)


def plan_run(cfg: LakecleanerConfig, now_ms: int, *, tables: Iterable[str] = (), force: bool = False,
             clear_uncleanable: Iterable[str] = (), dry_run: bool = False) -> RunPlan:
    """One run's evaluate step: clear the marks an operator asked to, evaluate every compacted
    table, record the evaluation for the UI, and plan and pack the tables to clean. A dry run
    commits nothing, the marks included: it evaluates those tables as if cleared."""
    from lakecleaner.core.evaluate import format_table

    tables, clear_uncleanable = list(tables), list(clear_uncleanable)
    cleared = clear_marks(cfg, clear_uncleanable, dry_run=dry_run)
    for mark in cleared:
        (log.info if mark.ok else log.error)("lakecleaner: clear_uncleanable: %s", mark.message)
    previewed = {_short(cfg, m.table) for m in cleared if m.ok} if dry_run else set()
    found = evaluate_all(cfg, None, now_ms, ignore_marks=previewed)
    not_found = _not_found(cfg, {"tables": tables, "clear_uncleanable": clear_uncleanable}, found, now_ms)
    evaluations = found + not_found
    log.info("lakecleaner: evaluation at now_ms=%d\n%s", now_ms, format_table(evaluations))
    jobs = plan(evaluations, [_short(cfg, t) or t for t in tables] if tables else None, force)
    apps = pack(jobs, cfg.cleaner.threads)
    log.info("lakecleaner: %d table(s) to clean in %d application(s), in this order: %s", len(jobs), len(apps),
             ", ".join(j.table for j in jobs))
    try:  # what the Lake Cleaner page presents (it never re-evaluates on a request)
        record_evaluation(cfg, found, now_ms)
    except Exception as exc:  # noqa: BLE001 - the page then says how old its evaluation is; cleaning goes on
        log.warning("lakecleaner: cannot record the evaluation for the UI: %s", exc)
    return RunPlan(now_ms, tuple(evaluations), tuple(jobs), tuple(apps))


def listed_tables(evaluations: Iterable[Evaluation]) -> list[str]:
    """The tables a run's evaluation listed (what housekeeping and the run's states read): not the
    names a param gave that are no table (NOT_FOUND), or a typo would keep a dropped table's state."""
    return [e.table for e in evaluations if e.status != EvaluationStatus.NOT_FOUND]


def _short(cfg: LakecleanerConfig, name: str) -> str | None:
    """A name as the evaluations have it (namespace.table), however it was given; None if invalid."""
    try:
        return TableRef.parse(name, cfg.catalog.name).short
    except ConfigError:
        return None


def _not_found(cfg: LakecleanerConfig, params: Mapping[str, list[str]], found: list[Evaluation],
               now_ms: int) -> list[Evaluation]:
    """A row for each name in the run's params that is no table the run evaluated, saying why (an
    invalid name, no such table, not compacted, or outside cleaner.namespaces): it fails the run,
    where a mistyped name used to clean nothing and pass."""
    known = {e.table for e in found}
    asked: dict[str, str] = {}
    for param, names in params.items():
        for short in (_short(cfg, name) or name for name in names):
            if short not in known:
                asked.setdefault(short, param)
    if not asked:
        return []
    outside = [n for n in asked if _short(cfg, n) and not _listed(cfg, n)]  # found or not, never taken
    why = {n: f"table {n}: not among the tables this DAG cleans (cleaner.namespaces "
              f"{', '.join(cfg.cleaner.namespaces) or 'all'}; never a quarantine or the cleaner's own tables)"
           for n in outside}
    rest = [n for n in asked if n not in why]
    for e in evaluate_all(cfg, rest, now_ms) if rest else []:  # invalid, no such table, not compacted
        why[e.table] = e.reason if e.status in NOTEWORTHY else f"table {e.table}: not listed by the catalog"
    return [Evaluation(name, EvaluationStatus.NOT_FOUND, f"{why.get(name, f'table {name}: not found')} "
                                                         f"(asked for in {param})") for name, param in asked.items()]


def _listed(cfg: LakecleanerConfig, table: str) -> bool:
    """Whether a run's listing takes a table of this name (namespace.table): of cleaner.namespaces (all
    if none), neither a quarantine nor one of the cleaner's own tables."""
    namespace = table.split(".")[0]
    return ((not cfg.cleaner.namespaces or namespace in cfg.cleaner.namespaces)
            and not _own_or_quarantine(cfg, table))


def _own_or_quarantine(cfg: LakecleanerConfig, table: str) -> bool:
    return table.endswith(cfg.cleaner.quarantine_suffix) or table.split(".")[0] == cfg.cleaner.meta_namespace


@dataclass(frozen=True)
class ClearedMark:
    """What clear_marks did for one name."""
    table: str
    ok: bool
    message: str


def clear_marks(cfg: LakecleanerConfig, tables: Iterable[str], dry_run: bool = False) -> list[ClearedMark]:
    """An operator's word that tables are fixed (the CLI's clear-uncleanable, a run's clear_uncleanable
    param): each table's failures counted so far forgiven. A name is parsed as every command parses
    it; one with nothing counted (a typo, a healthy table) is said to have nothing to clear. A dry
    run checks each name the same way and clears nothing."""
    store, out, cleared = StateStore(cfg), [], set()
    for name in tables:
        try:
            table = TableRef.parse(name, cfg.catalog.name).short
            if table in cleared:  # named twice (lake.ns.t and ns.t): cleared once
                continue
            try:
                state = store.get(table)
            except StateError:  # unreadable: clear repairs it; its mark is unknown, as evaluate says
                state = None
            if state is not None and not state.uncleanable and not state.consecutive_failures:
                out.append(ClearedMark(name, False, f"table {table}: no failed run is counted and it is not marked "
                                                    "uncleanable: nothing to clear (is the name right?)"))
                continue
            cleared.add(table)
            if dry_run:
                out.append(ClearedMark(name, True, f"{table}: dry run, its mark and failed runs stay; evaluated as if "
                                                   "cleared"))
                continue
            was_marked = state is None or state.uncleanable
            store.clear(table)
        except (ValueError, StateError, OSError) as exc:  # a bad name, or state it cannot write: named, the rest go on
            out.append(ClearedMark(name, False, str(exc) if str(exc).startswith("table ") else
                                   f"table {name}: cannot clear: {type(exc).__name__}: {exc}"))
            continue
        out.append(ClearedMark(name, True, f"{table} is no longer marked uncleanable; the next evaluation includes it"
                               if was_marked else f"{table}: its failed runs counted so far are forgiven (it was "
                                                  "not marked uncleanable yet)"))
    return out


def finish_run(cfg: LakecleanerConfig, run_id: str, evaluations: list[Evaluation], applications: list[ApplicationPlan],
               states: Mapping[str, str | None], now_ms: int) -> RunVerdict:
    """One run's summary step: each planned table's outcome from its application's report (named
    from the run id and the application's index, never a path from XCom) and task state, with its
    run-history figures of this interval."""
    history: list[dict] = []
    if applications:
        try:
            history = run_history(cfg, now_ms, [t for a in applications for t in a.tables])
        except Exception as exc:  # noqa: BLE001 - figures are a courtesy; the reports decide
            log.warning("lakecleaner: cannot read run history: %s", exc)
    return summarize(evaluations, applications, read_reports(cfg, run_id, applications), states, history)


def read_reports(cfg: LakecleanerConfig, run_id: str,
                 applications: Iterable[ApplicationPlan]) -> dict[int, ApplicationReport | None]:
    """Each application's report, by index; an unreadable one is left out, said so."""
    reports = {}
    for app in applications:
        try:
            reports[app.index] = read_report(cfg, run_id, app.index)
        except Exception as exc:  # noqa: BLE001 - the application's tables then show as not run
            log.warning("lakecleaner: cannot read an application's report: %s", exc)
    return reports


def table_states(cfg: LakecleanerConfig, tables: Iterable[str]) -> dict[str, TableState]:
    """Each table's cleaner state (last success, uncleanable mark) for the run's metrics and alerts;
    an unreadable one is logged and read as empty, the others are still read."""
    store, out = StateStore(cfg), {}
    for table in tables:
        try:
            out[table] = store.get(table)
        except ValueError as exc:  # that table's figures say nothing; the others are still reported
            log.warning("lakecleaner: %s", exc)
            out[table] = TableState(last_error=str(exc))
    return out
