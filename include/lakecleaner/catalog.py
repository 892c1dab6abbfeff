"""The table and its catalog: naming a table, loading its settings, its current snapshot and
lineage (what happened since the run's pinned snapshot), and creating what the cleaner owns. Every
failure names the table (CompactionError)."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from .config import IDENT, ConfigError, LakecleanerConfig, TableConfig, is_compacted, resolve_table

# Table properties the MERGE relies on. Merge-on-read keeps files (and append times) intact and
# makes a run's writes proportional to what it removes; snapshot isolation lets appenders commit
# while a run is in flight (a run deletes only rows of its pinned snapshot: the offset-map run
# first checks that no file appended since may hold an offset inside its range).
LAYOUT_PROPERTIES = {
    "format-version": "2",
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



def load_table_config(spark, cfg: LakecleanerConfig, ref: TableRef) -> tuple[TableConfig, dict[str, str]]:
    try:
        iceberg_table(spark, ref)  # refreshed: the checkpoint and the snapshot read next must agree
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql()}").collect()}
    except Exception as exc:  # noqa: BLE001 - any failure to load is reported with the table's name
        raise CompactionError(ref.short, f"cannot load table: {first_line(exc)}") from exc
    if not is_compacted(props):
        raise ConfigError(ref.short, "cleanup.policy", props.get("cleanup.policy"), "not a compacted table (needs compact)")
    columns = {f.name: f.dataType.simpleString() for f in spark.table(ref.sql()).schema.fields}
    return resolve_table(ref.short, props, columns, cfg.defaults), props


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


def current_snapshot(spark, ref: TableRef, refresh: bool = True) -> int | None:
    snap = iceberg_table(spark, ref, refresh).currentSnapshot()
    return None if snap is None else snap.snapshotId()


def snapshot_summary(spark, ref: TableRef) -> dict[str, str]:
    """The refreshed table's current snapshot summary (Iceberg's running totals: total-records,
    total-position-deletes, total-files-size, ...); {} for a table without snapshots. No Spark job."""
    snap = iceberg_table(spark, ref).currentSnapshot()
    return {} if snap is None else {str(k): str(v) for k, v in snap.summary().items()}


def iceberg_table(spark, ref: TableRef, refresh: bool = True):
    """The table's Iceberg (Java) object, refreshed from the catalog. Spark's Iceberg catalog caches
    tables (cache-enabled, 30 s) and hands this same object to later reads, so without the refresh a
    commit by another process could stay unseen by the checks before our commit. One catalog call
    also costs less than querying the refs and snapshots metadata tables (0.2 s of a run)."""
    table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, ref.sql())
    if refresh:
        table.refresh()
    return table


def fail_point(name: str) -> None:
    """Crash injection for tests: LAKECLEANER_FAIL_AT=<name> makes the run fail at that point;
    LAKECLEANER_FAIL_AT=kill:<name> kills the whole process there (SIGKILL: nothing runs after)."""
    wanted = os.environ.get("LAKECLEANER_FAIL_AT")
    if wanted == name:
        raise RuntimeError(f"injected failure at {name}")
    if wanted == f"kill:{name}":
        os.kill(os.getpid(), signal.SIGKILL)


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
        return "Iceberg format-version 1 has no row-level deletes; upgrade to 2"
    mode = props.get("write.merge.mode", LAYOUT_PROPERTIES["write.merge.mode"])
    if mode.strip().lower() != LAYOUT_PROPERTIES["write.merge.mode"]:
        return (f"write.merge.mode={mode!r}: the cleaner's MERGE needs merge-on-read (a rewrite would re-date "
                f"the records it copies); set it to merge-on-read or unset it")
    return None


def set_layout_defaults(spark, ref: TableRef, props: dict[str, str]) -> None:
    """Set the write modes the MERGE relies on, where the table does not choose otherwise (unset,
    Iceberg's MERGE copies on write). Callers refuse a table's own contrary choice first
    (layout_problem)."""
    from .strategies import sql_string

    missing = {k: v for k, v in LAYOUT_PROPERTIES.items() if k not in props}
    missing.pop("format-version", None)
    if missing:
        assignments = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in missing.items())
        spark.sql(f"ALTER TABLE {ref.sql()} SET TBLPROPERTIES ({assignments})")


def check_no_concurrent_cleaner(spark, ref: TableRef, snapshot: int) -> tuple[int | None, list[int]]:
    """Since the pinned snapshot, only appends may have happened; anything else (another cleaner, a
    user's DELETE) means our decisions may be stale: stop before committing anything. Returns the
    current snapshot and the appends since the pinned one."""
    current, since, reached = lineage_since(spark, ref, snapshot)
    if not reached:
        raise ConcurrentCommitError(ref.short, f"snapshot {snapshot}, which the run read, is no longer on the table's "
                                         f"current lineage (rolled back or expired); nothing committed, the next "
                                         f"run starts over")
    for row in since:
        if row["operation"] != "append":
            raise ConcurrentCommitError(ref.short, f"table changed by a concurrent {row['operation']} (snapshot "
                                             f"{row['snapshot_id']}) since snapshot {snapshot}; nothing committed, "
                                             f"the next run starts over")
    return current, [row["snapshot_id"] for row in since]


def committed_snapshot(spark, ref: TableRef, since: int) -> dict | None:
    """Our MERGE's snapshot: the first non-append on the current lineage after ``since`` (the
    table as it was checked just before the MERGE), whatever may have been committed after it."""
    _, after, _ = lineage_since(spark, ref, since)
    ours = next((row for row in reversed(after) if row["operation"] != "append"), None)
    return {"snapshot_id": ours["snapshot_id"], "summary": ours["summary"], "committed_ms": ours["committed_ms"]} \
        if ours else None


def lineage_since(spark, ref: TableRef, snapshot: int) -> tuple[int | None, list, bool]:
    """The current snapshot, the snapshots on its lineage after ``snapshot`` (newest first), and
    whether the walk reached ``snapshot``. Walked on one refreshed view of the table's metadata, so
    the current snapshot and its ancestors are consistent."""
    table = iceberg_table(spark, ref)
    node = table.currentSnapshot()
    current = None if node is None else node.snapshotId()
    lineage = []
    while node is not None and node.snapshotId() != snapshot:
        operation = node.operation()
        # a summary is only needed of what is not an append: our commit, or what stops the run
        summary = {} if operation == "append" else {str(k): str(v) for k, v in node.summary().items()}
        lineage.append({"snapshot_id": node.snapshotId(), "operation": operation, "summary": summary,
                        "committed_ms": node.timestampMillis()})
        parent = node.parentId()
        node = None if parent is None else table.snapshot(parent)
    return current, lineage, node is not None


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
