"""What the scheduler does each interval, as plain functions: evaluate every compacted table from
metadata, pick and order the ones to clean, record each job's outcome (failure counts and the
uncleanable mark), and summarise. The Airflow DAG only wires these together; the CLI calls them too.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .config import LakecleanerConfig, is_compacted
from .evaluate import Evaluation, cleaning_order, evaluate_table
from .metadata import MetadataReader
from .state import StateStore

log = logging.getLogger("lakecleaner")


def evaluate_all(cfg: LakecleanerConfig, tables: Iterable[str] | None = None, now_ms: int | None = None,
                 namespaces: Iterable[str] = ()) -> list[Evaluation]:
    """One row per compacted table (of ``namespaces``, default cleaner.namespaces or all). A table
    whose metadata cannot be read or whose config is invalid gets a row saying so; the others are
    still evaluated."""
    now_ms = int(now_ms if now_ms is not None else time.time() * 1000)
    reader, store = MetadataReader(cfg), StateStore(cfg)
    requested = list(tables or [])
    names = requested or reader.list_tables(tuple(namespaces))
    quarantine = cfg.cleaner.quarantine_suffix
    out = []
    for name in names:
        if not requested and (name.endswith(quarantine) or name.split(".")[0] == cfg.cleaner.meta_namespace):
            continue
        try:
            meta = reader.read(name)
        except Exception as exc:  # noqa: BLE001 - one unreadable table must not stop the others
            out.append(Evaluation(name, "unreadable", f"table {name}: cannot read metadata: {type(exc).__name__}: {exc}"))
            continue
        if not is_compacted(meta.properties):
            if requested:
                out.append(Evaluation(name, "invalid config", f"table {name}: cleanup.policy is not compact"))
            continue
        try:
            uncleanable = store.uncleanable_reason(name)
        except Exception as exc:  # noqa: BLE001
            uncleanable = None
            log.warning("lakecleaner: cannot read cleaner state of %s: %s", name, exc)
        out.append(evaluate_table(meta, now_ms, cfg.defaults, uncleanable))
    for ev in out:
        if ev.max_compaction_lag_ms is not None and ev.max_compaction_delay_ms > 0:
            log.warning("lakecleaner: table %s is %d ms past max.compaction.lag.ms", ev.table, ev.max_compaction_delay_ms)
    return out


@dataclass(frozen=True)
class Job:
    table: str
    priority: int  # 1 = filthiest
    reason: str


def plan(evaluations: list[Evaluation], only: Iterable[str] = (), force: bool = False) -> list[Job]:
    """The tables to clean this interval, filthiest first. ``force`` cleans the requested (or all
    readable, validly configured, not uncleanable) tables whether or not they are eligible."""
    only = set(only or [])
    pool = [e for e in evaluations if not only or e.table in only]
    chosen = cleaning_order(pool)
    if force:
        extra = [e for e in pool if e.status == "not eligible"]
        chosen += sorted(extra, key=lambda e: (-e.must_clean_ratio, -e.dirty_ratio, e.table))
    return [Job(e.table, i + 1, e.reason if e.eligible else "forced") for i, e in enumerate(chosen)]


def record_outcome(cfg: LakecleanerConfig, table: str, ok: bool, error: str = "") -> dict:
    """After each job: reset or count failures; the Nth failure in a row marks the table uncleanable."""
    store = StateStore(cfg)
    state = store.record_success(table) if ok else store.record_failure(
        table, error or "the compaction job failed", cfg.cleaner.uncleanable_after_failures)
    if state.uncleanable and not ok:
        log.error("lakecleaner: table %s marked uncleanable after %d failures in a row: %s",
                  table, state.consecutive_failures, state.last_error)
    return {"table": table, "ok": ok, "consecutive_failures": state.consecutive_failures,
            "uncleanable": state.uncleanable}


# ---------------------------------------------------------------- what the Airflow DAG needs (no Airflow here)
def ship_package(dest_dir: str | os.PathLike) -> str:
    """The lakecleaner package as a --py-files zip in ``dest_dir``, named after its content
    (``lakecleaner-<sha>.zip``) and moved into place atomically: a job already submitted with an older
    zip keeps reading it, and concurrent runs never see a half-written file."""
    from .spark import package_zip

    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".build-") as tmp:
        built = Path(package_zip(tmp))
        digest = hashlib.sha256(built.read_bytes()).hexdigest()[:16]
        final = dest / f"lakecleaner-{digest}.zip"
        if not final.exists():
            os.replace(built, final)
    return str(final)


def submit_options(cfg: LakecleanerConfig, package_dir: str | os.PathLike) -> dict:
    """SparkSubmitOperator arguments shared by every lakecleaner job, resolved at run time: the package
    zip (--py-files), the Iceberg runtime (--jars, or --packages for a Maven coordinate) and the rest
    of the Spark conf. spark.driver.memory stays in the conf: spark-submit's launcher reads it from
    --conf in client mode, and cluster managers honour it in cluster mode. The master is not here: it
    comes from the Airflow connection (spark_default), not from the YAML's spark.master."""
    from .spark import spark_conf

    conf = spark_conf(cfg)
    return {"py_files": ship_package(package_dir), "jars": conf.pop("spark.jars", None),
            "packages": conf.pop("spark.jars.packages", None), "conf": conf,
            # the driver's Python must have the package's dependencies (pyspark, pyyaml): default to ours
            "env_vars": {"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable}}


def job_args(table: str, config_path: str, now_ms: int, dry_run: bool = False) -> list[str]:
    """Arguments of jobs/compact.py and jobs/maintain.py for one table."""
    return [table, "--config", str(config_path), "--now-ms", str(int(now_ms))] + (["--dry-run"] if dry_run else [])


def validate_args(table: str, config_path: str, now_ms: int, run_name: str, interval_ms: int) -> list[str]:
    """Arguments of jobs/validate.py: results are kept under the run's logical date (run_name), and a
    tombstone may outlive its horizon by one schedule interval."""
    return job_args(table, config_path, now_ms) + ["--run-name", run_name, "--interval-ms", str(int(interval_ms))]


def run_history(cfg: LakecleanerConfig, now_ms: int | None = None, tables: Iterable[str] | None = None) -> list[dict]:
    """This interval's runs of these tables, oldest first (see lakecleaner.history)."""
    from .history import read_history

    return read_history(cfg, None, None, now_ms=now_ms, tables=tables, newest_first=False)


def failure_reason(cfg: LakecleanerConfig, table: str, now_ms: int, fallback: str) -> str:
    """The error a failed job recorded in run history for this run, else ``fallback`` (the job died
    before recording anything, e.g. the JVM could not start)."""
    try:
        failed = [r for r in run_history(cfg, now_ms, [table]) if r["status"] == "failed" and r["error"]]
    except Exception as exc:  # noqa: BLE001 - the reason is a courtesy; the failure is counted anyway
        log.warning("lakecleaner: cannot read run history for %s: %s", table, exc)
        failed = []
    return failed[-1]["error"] if failed else fallback


NOTEWORTHY = ("invalid config", "unreadable", "uncleanable")
OK_STATES = {"compact": ("success",), "maintain": ("success", "skipped"), "validate": ("success",)}
DOWNSTREAM = ("maintain", "validate")  # upstream_failed there is the compaction's failure, already counted


def summarize(evaluations: list[dict], jobs: list[dict], states: dict[str, str | None],
              history: list[dict] = ()) -> dict:
    """What one scheduler run did, per planned table: the final state of its compact and maintain
    tasks (``states`` maps "compact_<i>"/"maintain_<i>"/"validate_<i>" to a task state, i = the job's
    position) and its run-history figures; plus the tables that were not run for a reason an operator
    must see. ``failed`` lists every table whose compact, maintain or validate task did not end well
    (a failed data-quality rule fails the run)."""
    latest = {r["table_name"]: r for r in history}  # oldest first, so the last row of a table wins
    tables, failed = [], []
    for i, job in enumerate(jobs):
        row = {"table": job["table"], "priority": job["priority"], "reason": job.get("reason", ""),
               **{task: states.get(f"{task}_{i}") for task in OK_STATES}}
        hist = latest.get(job["table"])
        if hist:
            row.update({k: hist.get(k) for k in ("status", "error", "records_read", "records_kept", "removed_superseded",
                                                 "removed_expired_tombstones", "quarantined", "duration_ms")})
        if row["compact"] not in OK_STATES["compact"] or any(
                row[task] not in OK_STATES[task] and row[task] != "upstream_failed" for task in DOWNSTREAM):
            failed.append(job["table"])
        tables.append(row)
    not_run = [{"table": e["table"], "status": e["status"], "reason": e["reason"]}
               for e in evaluations or [] if e["status"] in NOTEWORTHY]
    lines = [f"lakecleaner: {len(jobs)} table(s) planned, {len(failed)} failed"]
    for row in tables:
        figures = "" if "status" not in row else (
            f" run={row['status']} read={row['records_read']} kept={row['records_kept']}"
            f" superseded={row['removed_superseded']} tombstones={row['removed_expired_tombstones']}"
            + (f" error={row['error']}" if row.get("error") else ""))
        lines.append(f"  #{row['priority']} {row['table']}: compact={row['compact']} maintain={row['maintain']} "
                     f"validate={row['validate']}{figures}")
    for row in not_run:
        lines.append(f"  not run: {row['table']} ({row['status']}): {row['reason']}")
    return {"tables": tables, "not_run": not_run, "failed": failed, "text": "\n".join(lines)}


def cleaner_metrics(cfg: LakecleanerConfig, evaluations: list[dict], report: dict, now_ms: int) -> dict:
    """Kafka's cleaner metrics for one scheduler run, per table and overall (max dirty percent, max
    compaction delay, time since last successful run, uncleanable count, last run's statistics),
    written next to the cleaner state under metrics/<now_ms>.json and returned."""
    import json

    from pyiceberg.io import load_file_io

    store = StateStore(cfg)
    last_runs = {row["table"]: row for row in report.get("tables", [])}
    tables = {}
    for e in evaluations:
        state = store.get(e["table"])
        tables[e["table"]] = {
            "status": e["status"], "dirty_percent": round(100 * e.get("dirty_ratio", 0.0), 2),
            "max_compaction_delay_ms": e.get("max_compaction_delay_ms", 0),
            "time_since_last_success_ms": (now_ms - state.last_success_ms) if state.last_success_ms else None,
            "consecutive_failures": state.consecutive_failures,
            "last_run": {k: v for k, v in last_runs.get(e["table"], {}).items() if k != "table"} or None}
    overall = {
        "tables": len(tables),
        "max_dirty_percent": max((t["dirty_percent"] for t in tables.values()), default=0.0),
        "max_compaction_delay_ms": max((t["max_compaction_delay_ms"] for t in tables.values()), default=0),
        "uncleanable_count": sum(t["status"] == "uncleanable" for t in tables.values()),
        "failed_this_run": len(report.get("failed", [])),
    }
    metrics = {"now_ms": now_ms, "overall": overall, "tables": tables}
    io = load_file_io(cfg.catalog.pyiceberg_properties_resolved(), store.base)
    path = f"{cfg.state_root}/metrics/{now_ms}.json"
    with io.new_output(path).create(overwrite=True) as fh:
        fh.write(json.dumps(metrics, sort_keys=True, default=str).encode())
    metrics["path"] = path
    return metrics
