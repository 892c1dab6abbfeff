"""Every fact that crosses a process, XCom or document boundary, as a typed record: the run's
statistics (Kafka's CleanerStats, and the run-history columns derived from it), the application
plan the evaluate task hands to the late tasks, the report a Spark application keeps, each table's
outcome in it and in the run's verdict. Each record is a frozen pydantic dataclass whose
``to_dict``/``from_dict`` keep the shapes (key names included) that earlier versions persisted, so
old documents and XComs still read. Each status vocabulary is a str-valued Enum: a persisted
document keeps its strings, and a record compares equal to the literal it was read from.
"""
from __future__ import annotations

import dataclasses
import functools
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Self

from pydantic import ConfigDict, Field, Strict, TypeAdapter
from pydantic.dataclasses import dataclass

_RECORD = ConfigDict(extra="ignore")  # a document may carry keys a later (or an edited) version added


# ---------------------------------------------------------------- the vocabularies
class EvaluationStatus(StrEnum):
    """What the scheduler made of a table from its metadata (core.evaluate)."""
    ELIGIBLE = "eligible"
    NOT_ELIGIBLE = "not eligible"
    INVALID_CONFIG = "invalid config"
    INVALID_CHECKPOINT = "invalid checkpoint"
    UNREADABLE = "unreadable"
    UNCLEANABLE = "uncleanable"
    NOT_FOUND = "not found"  # named in a run's params (tables, clear_uncleanable), not a table the run cleans


# Not cleaned for a reason an operator must see (the run's verdict lists them).
NOTEWORTHY = (EvaluationStatus.INVALID_CONFIG, EvaluationStatus.INVALID_CHECKPOINT, EvaluationStatus.UNREADABLE,
              EvaluationStatus.UNCLEANABLE, EvaluationStatus.NOT_FOUND)
# An operator's mistake or a table nothing can clean: the run fails, naming the table.
FAILS_THE_RUN = (EvaluationStatus.INVALID_CHECKPOINT, EvaluationStatus.NOT_FOUND)
# Nothing cleans them until an operator looks (Kafka's uncleanable-partitions-count).
UNCLEANABLE = (EvaluationStatus.UNCLEANABLE, EvaluationStatus.INVALID_CHECKPOINT)
# No figures at all: the evaluation says why.
WITHOUT_FIGURES = (EvaluationStatus.UNREADABLE, EvaluationStatus.INVALID_CONFIG, EvaluationStatus.NOT_FOUND)


class TableStatus(StrEnum):
    """One table's chain in an application (and in the run's verdict)."""
    OK = "ok"
    FAILED = "failed"
    DEFERRED = "deferred"  # the budget was spent or the application stopped: the next run takes it
    YIELDED = "yielded"  # another writer committed first; nothing committed
    SKIPPED = "skipped"  # already cleaned as of a later now: a backfill takes nothing
    NOT_RUN = "not run"  # the application died or never started before reaching it (verdict only)


# Neither the table's failure nor its success: its failure count is left as it is.
NOT_COUNTED = (TableStatus.DEFERRED, TableStatus.YIELDED, TableStatus.SKIPPED)
LEFT_FOR_NEXT_RUN = (TableStatus.DEFERRED, TableStatus.NOT_RUN)


class RunStatus(StrEnum):
    """How one compaction run ended (the run history's ``status``)."""
    COMMITTED = "committed"
    DRY_RUN = "dry_run"
    FAILED = "failed"
    YIELDED = "yielded"
    SKIPPED = "skipped"


class QualityStatus(StrEnum):
    """A data-quality validation's result, as a job's result line says it."""
    PASSED = "passed"
    FAILED = "failed"

    @classmethod
    def of(cls, success: bool) -> "QualityStatus":
        return cls.PASSED if success else cls.FAILED


class Step(StrEnum):
    """A step of a table's chain; ``application`` names a failure of the whole application."""
    COMPACT = "compact"
    MAINTAIN = "maintain"
    VALIDATE = "validate"
    APPLICATION = "application"


CLEANING_STEPS = (Step.COMPACT, Step.MAINTAIN)  # a failure here counts towards the uncleanable mark


@functools.cache
def _adapter(cls) -> TypeAdapter:
    return TypeAdapter(cls)


class _Record:
    """to_dict/from_dict through the record's TypeAdapter: JSON-ready values, enums as their strings."""

    def to_dict(self) -> dict:
        return _adapter(type(self)).dump_python(self, mode="json")

    @classmethod
    def from_dict(cls, d: dict) -> Self:
        return _adapter(cls).validate_python(d)


# ---------------------------------------------------------------- the run's statistics
_SPARK_TYPES = {"str": "string", "int": "bigint", "bool": "boolean", "RunStatus": "string"}  # a field's first type


def _history(column: str | None = None, stored: bool = True):
    """A field's place in the run history: its column name (default the field's) or none."""
    return {"history": stored, "column": column}


@dataclass(frozen=True, config=_RECORD)
class CleanerStats(_Record):
    """One compaction run's figures (Kafka's CleanerStats): returned by the engine, kept in the
    application's report, and one row of the run history, whose columns are this record's fields
    in this order (``HISTORY_COLUMNS``). A run that failed before reading the table knows no figure:
    they are None, as its history row says."""
    run_id: str
    table: str = dataclasses.field(metadata=_history("table_name"))
    status: RunStatus | None = None
    error: str | None = None
    dry_run: bool = False
    now_ms: int | None = None
    strategy: str | None = None
    records_read: int | None = None
    records_kept: int | None = None
    removed_superseded: int | None = None
    removed_expired_tombstones: int | None = None
    quarantined: int | None = None
    anomalous: int | None = None
    dirty_records_in_run: int | None = None
    bytes_read: int | None = None
    bytes_written: int | None = None
    files_rewritten: int | None = None
    delete_files_written: int | None = None
    duration_ms: int | None = None
    snapshot_id: int | None = None
    committed_snapshot_id: int | None = None
    checkpoint: dict[str, int] | None = dataclasses.field(default=None, metadata={"history": True, "json": True})
    delete_retention_ms: int | None = None
    expired_tombstone_latest_cleaned_ms: int | None = None
    # the run's own: not in the history
    reason: str | None = dataclasses.field(default=None, metadata=_history(stored=False))
    cleaned_at_ms: int | None = dataclasses.field(default=None, metadata=_history(stored=False))
    checkpoint_reset: tuple[int | str, ...] | None = dataclasses.field(default=None, metadata=_history(stored=False))
    phases: dict[str, float] | None = dataclasses.field(default=None, metadata=_history(stored=False))

    OPTIONAL: ClassVar[tuple[str, ...]] = ("reason", "cleaned_at_ms", "checkpoint_reset", "phases", "error")

    def as_result(self) -> dict:
        """What compact_table returns (and the report keeps): the figures a run knows, without the
        optional notes it did not make (as the dict the engine built before)."""
        return {k: v for k, v in self.to_dict().items() if v is not None or k not in self.OPTIONAL}

    def with_figures(self, read: int, superseded: int, expired: int, bad_removed: int,
                     phases: dict[str, float]) -> "CleanerStats":
        """The records read and what of them the run removed: kept is what is left."""
        return dataclasses.replace(self, records_read=read, records_kept=read - superseded - expired - bad_removed,
                                   removed_superseded=superseded, removed_expired_tombstones=expired,
                                   phases=dict(phases))

    def history_row(self) -> dict:
        """This run as a run-history row (started_at is the writer's)."""
        import json

        row: dict[str, Any] = {}
        values = self.to_dict()
        for f in dataclasses.fields(self):
            if f.metadata.get("history", True):
                value = values[f.name]
                if f.metadata.get("json"):
                    value = json.dumps(value) if value is not None else None
                row[f.metadata.get("column") or f.name] = value
        return row


def _history_columns() -> tuple[tuple[str, str], ...]:
    """The run-history columns from CleanerStats' fields, started_at after now_ms (its place since
    the first version: a table's columns keep their order)."""
    out = []
    for f in dataclasses.fields(CleanerStats):
        if not f.metadata.get("history", True):
            continue
        kind = "string" if f.metadata.get("json") else _SPARK_TYPES[str(f.type).split(" | ")[0]]
        out.append((f.metadata.get("column") or f.name, kind))
        if f.name == "now_ms":
            out.append(("started_at", "timestamp"))
    return tuple(out)


HISTORY_COLUMNS = _history_columns()
HISTORY_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in HISTORY_COLUMNS)


# ---------------------------------------------------------------- the plan (XCom: evaluate -> the late tasks)
@dataclass(frozen=True, config=_RECORD)
class ApplicationPlan(_Record):
    """One Spark application of a run as the evaluate task tells the late tasks: ids and figures,
    no path (they derive the report's from the run id and ``index``)."""
    index: Annotated[int, Strict(), Field(ge=0)]  # only an index names a report (XCom can be edited)
    tables: tuple[str, ...]
    priorities: tuple[int, ...]
    work_bytes: int = 0
    now_ms: int | None = None

    @property
    def task(self) -> str:
        """The id Airflow's task states are keyed by for this application."""
        return f"clean_{self.index}"


# ---------------------------------------------------------------- the application's report (a document)
@dataclass(frozen=True, config=_RECORD)
class TableOutcome(_Record):
    """One table's result in an application: ok, failed (at ``failed_step``), deferred, yielded or
    skipped, with what each step returned and how long it took."""
    table: str
    status: TableStatus
    failed_step: Step | None = None
    error: str | None = None
    steps: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # step -> its result document
    step_ms: dict[str, int] = dataclasses.field(default_factory=dict)
    duration_ms: int = 0

    def to_dict(self) -> dict:
        """The report's entry: each step's result as the step returned it (the document's writer
        renders what JSON lacks, as it always has)."""
        return {**_adapter(TableOutcome).dump_python(self, mode="json", exclude={"steps"}),
                "steps": {step: dict(result) for step, result in self.steps.items()}}

    def as_dict(self) -> dict:
        return self.to_dict()

    @property
    def cleaned(self) -> bool:
        """The cleaning itself (compaction and maintenance) succeeded; validation may still fail."""
        return self.status == TableStatus.OK or self.failed_step not in CLEANING_STEPS


@dataclass(frozen=True, config=_RECORD)
class ApplicationReport(_Record):
    """The document an application keeps under the state root (rewritten as each table starts and
    ends): what the DAG's summary, its failure callback and the plugin learn the tables from."""
    tables: tuple[str, ...] = ()
    now_ms: int | None = None
    in_progress: tuple[str, ...] = ()
    finished: bool = False
    outcomes: tuple[TableOutcome, ...] = ()

    def outcome(self, table: str) -> TableOutcome | None:
        return next((o for o in self.outcomes if o.table == table), None)


# ---------------------------------------------------------------- the failure count (state store -> callers)
@dataclass(frozen=True, config=_RECORD)
class RecordedOutcome(_Record):
    """A table's failure count after a job (record_outcome): the Nth failure in a row marks it uncleanable."""
    table: str
    ok: bool
    consecutive_failures: int
    uncleanable: bool
    error: str | None = None


# ---------------------------------------------------------------- the run's verdict (XCom: summary)
@dataclass(frozen=True, config=_RECORD)
class RunFigures(_Record):
    """A table's latest run-history figures in this interval (the verdict shows them)."""
    run: RunStatus | None = None
    records_read: int | None = None
    records_kept: int | None = None
    removed_superseded: int | None = None
    removed_expired_tombstones: int | None = None
    quarantined: int | None = None
    bytes_read: int | None = None
    bytes_written: int | None = None
    duration_ms: int | None = None

    @classmethod
    def of_history(cls, row: dict) -> "RunFigures":
        return cls.from_dict({**row, "run": row.get("status")})


FIGURES = tuple(f.name for f in dataclasses.fields(RunFigures) if f.name != "run")


@dataclass(frozen=True, config=_RECORD)
class TableVerdict(_Record):
    """One planned table in the run's verdict: its application, outcome and run figures."""
    table: str
    status: TableStatus
    priority: int
    application: int
    failed_step: Step | None = None
    error: str | None = None
    figures: RunFigures | None = None  # None: no run-history row this interval

    def to_dict(self) -> dict:
        """Flat, as the summary's XCom has always had it (the figures' keys beside the outcome's)."""
        row = {"table": self.table, "status": self.status.value,
               "failed_step": self.failed_step.value if self.failed_step else None, "error": self.error,
               "priority": self.priority, "application": self.application}
        return {**row, **(self.figures.to_dict() if self.figures else {})}

    @classmethod
    def from_dict(cls, d: dict) -> "TableVerdict":
        figures = RunFigures.from_dict(d) if "run" in d else None
        return cls(table=d["table"], status=d["status"], priority=d["priority"], application=d["application"],
                   failed_step=d.get("failed_step"), error=d.get("error"), figures=figures)


@dataclass(frozen=True, config=_RECORD)
class NotRun(_Record):
    """A table the run did not plan for a reason an operator must see."""
    table: str
    status: EvaluationStatus
    reason: str


@dataclass(frozen=True, config=_RECORD)
class RunVerdict(_Record):
    """What one scheduler run did (core.scheduler.summarize): every planned table in plan order, the
    tables not run, and whether the run failed. ``text`` is the log's account of it."""
    tables: tuple[TableVerdict, ...] = ()
    not_run: tuple[NotRun, ...] = ()
    failed: tuple[str, ...] = ()
    deferred: tuple[str, ...] = ()
    failed_applications: tuple[int, ...] = ()
    text: str = ""

    def to_dict(self) -> dict:
        """The summary task's XCom ``report`` (without the text, which its log has)."""
        return {"tables": [t.to_dict() for t in self.tables], "not_run": [n.to_dict() for n in self.not_run],
                "failed": list(self.failed), "deferred": list(self.deferred),
                "failed_applications": list(self.failed_applications)}

    @classmethod
    def from_dict(cls, d: dict) -> "RunVerdict":
        return cls(tables=tuple(TableVerdict.from_dict(t) for t in d.get("tables", ())),
                   not_run=tuple(NotRun.from_dict(n) for n in d.get("not_run", ())),
                   failed=tuple(d.get("failed", ())), deferred=tuple(d.get("deferred", ())),
                   failed_applications=tuple(d.get("failed_applications", ())), text=d.get("text", ""))

    @property
    def ok(self) -> bool:
        return not self.failed and not self.failed_applications

    def failure(self, notify_errors: list[str] = ()) -> str | None:
        """Why the run fails (None: it does not): its failed tables and applications, unsent alerts."""
        if self.ok and not notify_errors:
            return None
        return (f"lakecleaner: {len(self.failed)} table(s) failed: {', '.join(self.failed) or 'none'}"
                + (f"; application(s) {list(self.failed_applications)} did not end well"
                   if self.failed_applications else "")
                + (f"; {len(notify_errors)} alert(s) not sent: {notify_errors[0]}" if notify_errors else ""))
