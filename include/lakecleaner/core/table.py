"""Naming a table (TableRef), the errors that name it, and the table layout the cleaner relies on.
Pure: the scheduler, the readers and the Spark side share them."""
from __future__ import annotations

from dataclasses import dataclass

from lakecleaner.core.config import FORMAT_VERSIONS, IDENT, ConfigError


# Table properties the MERGE relies on. Merge-on-read keeps files (and append times) intact and
# makes a run's writes proportional to what it removes; snapshot isolation lets appenders commit
# while a run is in flight (a run deletes only rows of its pinned snapshot: the offset-map run
# first checks that no file appended since may hold an offset inside its range). The format
# version is chosen when a table is created, not set here: any of FORMAT_VERSIONS does (v2 masks
# removed rows with position-delete files, v3 with deletion vectors).
LAYOUT_PROPERTIES = {
    "write.delete.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.isolation-level": "snapshot",
}


class CompactionError(RuntimeError):
    """A run could not proceed. The message names the table and the reason; nothing was committed
    unless the message says so."""

    def __init__(self, table: str, problem: str):
        self.table = table
        self.problem = problem
        super().__init__(f"table {table}: {problem}")


class NoSuchTableError(CompactionError):
    """The catalog answered that the table does not exist (not that it could not be asked)."""


class ConcurrentCommitError(CompactionError):
    """Another writer committed first and this run committed nothing: it yields the table (a run
    of another DAG run, a backfill, a user's DELETE). Not a failure of the table: it is not counted
    towards cleaner.uncleanable_after_failures, and the next run starts over."""


@dataclass(frozen=True)
class TableRef:
    catalog: str
    namespace: str
    name: str

    @classmethod
    def parse(cls, table: str, default_catalog: str) -> "TableRef":
        parts = table.split(".")
        if len(parts) == 2:
            parts = [default_catalog, *parts]
        if len(parts) != 3 or not all(IDENT.fullmatch(p) for p in parts):
            raise ConfigError(table, "table", table,
                              "expected namespace.table or catalog.namespace.table, letters/digits/_ only")
        if parts[0] != default_catalog:
            raise ConfigError(table, "table", table, f"catalog {parts[0]!r} is not the configured {default_catalog!r}")
        return cls(*parts)

    @property
    def short(self) -> str:
        return f"{self.namespace}.{self.name}"

    def sql(self, suffix: str = "") -> str:
        name = self.name + suffix
        return f"`{self.catalog}`.`{self.namespace}`.`{name}`"

    def meta(self, metadata_table: str) -> str:
        return f"{self.sql()}.`{metadata_table}`"


def first_line(exc: BaseException) -> str:
    """A one-line reason. For a Spark (Java) failure, the root cause: py4j's own first line only
    says which call failed ('An error occurred while calling o223.collectToPython')."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            while java.getCause() is not None and java.getCause() != java:
                java = java.getCause()
            return str(java.toString()).splitlines()[0][:500]
        except Exception:  # noqa: BLE001 - fall back to the Python text
            pass
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]


# Iceberg refused the commit: another writer's commit conflicts with what the run read. Its metadata
# swap never happened (unlike CommitStateUnknownException, which is not matched here). A
# CommitFailedException is always that; a ValidationException only with the messages Iceberg's
# commit validation gives a concurrent change (MergingSnapshotProducer, BaseRowDelta, BaseOverwriteFiles,
# BaseRewriteFiles): it is also raised for lasting problems (a partition spec that no longer resolves,
# a schema mismatch), which are the table's failures, not a yield.
COMMIT_FAILED = "org.apache.iceberg.exceptions.CommitFailedException"


VALIDATION = "org.apache.iceberg.exceptions.ValidationException"


CONCURRENT_VALIDATIONS = ("conflicting", "missing required files to delete", "found new", "concurrent",
                          "cannot commit, found", "deleted data files that were", "no longer exists")


def conflict_error(ref: TableRef, exc: BaseException) -> ConcurrentCommitError | None:
    """The commit conflict ``exc`` is, as this run's yield; None for any other failure."""
    text = str(exc)
    for name in (COMMIT_FAILED, VALIDATION):
        if name in text:
            detail = text[text.index(name) + len(name):].lstrip(": ").splitlines()[0][:300]
            if name == COMMIT_FAILED or any(m in detail.lower() for m in CONCURRENT_VALIDATIONS):
                return ConcurrentCommitError(ref.short, f"a concurrent commit conflicts with this run (another "
                                                        f"cleaner or writer: {name.rsplit('.', 1)[1]}: {detail}); "
                                                        "nothing committed, the next run starts over")
    return None


def check_layout(ref: TableRef, props: dict[str, str]) -> None:
    """Refuse a table whose own settings would make the MERGE rewrite files (layout_problem)."""
    problem = layout_problem(props)
    if problem:
        raise CompactionError(ref.short, f"{problem}; nothing committed")


def layout_problem(props: dict[str, str]) -> str | None:
    """Why a table's settings rule out the cleaner's row-level deletes, if they do: copy-on-write
    copies every record that shares a file with a removed one into a new file, so those records
    would take the commit's time as their append time (rule 3), and dirty records past the run
    would be rewritten by a run that never read them. The runs and erasure requests both refuse."""
    if props.get("format-version") == "1":
        return (f"Iceberg format-version 1 has no row-level deletes; upgrade to "
                f"{' or '.join(map(str, FORMAT_VERSIONS))}")
    mode = props.get("write.merge.mode", LAYOUT_PROPERTIES["write.merge.mode"])
    if mode.strip().lower() != LAYOUT_PROPERTIES["write.merge.mode"]:
        return (f"write.merge.mode={mode!r}: the cleaner's MERGE needs merge-on-read (a rewrite would re-date "
                f"the records it copies); set it to merge-on-read or unset it")
    return None


def create_unless_exists(create) -> bool:
    """Create a table or namespace the cleaner owns; False when it exists already. No check-then-create:
    two cleaners (or a cleaner and an operator) on a shared catalog may both find it missing, and the
    catalog's atomic create decides. Never create-or-replace, which would empty a quarantine that
    another process has just filled."""
    try:
        create()
        return True
    except Exception as exc:  # noqa: BLE001 - Spark's TableAlreadyExists or Iceberg's AlreadyExists via Py4J
        if already_exists(exc):
            return False
        raise


def already_exists(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(m in text for m in ("AlreadyExistsException", "TABLE_OR_VIEW_ALREADY_EXISTS",
                                   "SCHEMA_ALREADY_EXISTS", "already exists"))
