"""The lakecleaner scheduler: every interval, evaluate every compacted Iceberg table from metadata,
then compact the eligible ones, filthiest first, one Spark job per table, and maintain each after
its compaction.

Wiring only. Nothing here reads the config, the warehouse or the Iceberg jar at parse time: the
``evaluate`` task does all of that when the run starts. The logic is in ``lakecleaner.scheduler``.

    evaluate ──> [compact ──> maintain ──> validate] per planned table (mapped, pool "lakecleaner") ──> summary

- The run's "now" is its data interval end (a backfill re-applies the policy as of each interval;
  a manual run without an interval uses its logical date, else run_after).
- Order: mapped instances are numbered in evaluate's order (filthiest first) and the scheduler
  queues equal-weight instances by map index, so with a full pool the filthiest table goes first;
  compactions outrank maintenance (more downstream weight).
- A failing table fails only its own mapped instance; ``summary`` (all_done) then fails the run.
- Each compaction's outcome is recorded (``scheduler.record_outcome``): failures in a row are
  counted and the Nth (``cleaner.uncleanable_after_failures``) marks the table uncleanable; later
  runs skip it until an operator clears it (``clear_uncleanable`` param, or
  ``lakecleaner clear-uncleanable``).
- Environment: ``LAKECLEANER_CONFIG`` (the YAML), ``LAKECLEANER_SCHEDULE`` (cron, default every 15
  min), ``LAKECLEANER_PACKAGE_DIR`` (where the --py-files zip is built; must be visible to the
  worker that runs spark-submit; default $AIRFLOW_HOME/lakecleaner), and an Airflow connection ``spark_default`` naming the Spark master
  (without it SparkSubmitHook falls back to YARN), e.g. for the embedded setup
  ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[*]"}'``.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, TriggerRule, dag, task, task_group
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from lakecleaner import scheduler
from lakecleaner.cli import jobs_dir
from lakecleaner.config import load_config

log = logging.getLogger("lakecleaner")

DAG_ID = "lakecleaner"
POOL = "lakecleaner"  # sized by cleaner.threads: see lakecleaner.airflow_setup
SPARK_CONN_ID = "spark_default"
SCHEDULE = os.environ.get("LAKECLEANER_SCHEDULE", "*/15 * * * *")


# ---------------------------------------------------------------- callbacks (run on the worker)
def alert(table: str, outcome: dict, context) -> None:
    """THE ALERTING HOOK: called after a table's compaction failed and the failure was counted.

    ``outcome`` is ``scheduler.record_outcome``'s result: ``consecutive_failures``, ``uncleanable``
    (True once the table was just marked) and ``error``. Replace this function (or append a notifier,
    e.g. ``SlackNotifier``, to ``on_failure_callback`` of the compact task) to page someone; by
    default it only logs.
    """
    level = logging.ERROR if outcome.get("uncleanable") else logging.WARNING
    log.log(level, "lakecleaner: compaction of %s failed (%d in a row%s): %s", table,
            outcome.get("consecutive_failures", 0), ", now marked uncleanable" if outcome.get("uncleanable") else "",
            outcome.get("error", ""))


def _job(context) -> dict | None:
    """The planned job (evaluate's list entry) of this mapped task instance."""
    ti = context["ti"]
    jobs = ti.xcom_pull(task_ids="evaluate") or []
    return jobs[ti.map_index] if 0 <= ti.map_index < len(jobs) else None


def _record(context, ok: bool) -> dict | None:
    job = _job(context)
    if job is None:
        log.error("lakecleaner: cannot tell which table task %s (map index %s) compacted; outcome not recorded",
                  context["ti"].task_id, context["ti"].map_index)
        return None
    cfg = load_config(job["config"])
    error = ""
    if not ok:
        exc = context.get("exception")
        error = scheduler.failure_reason(cfg, job["table"], job["now_ms"],
                                         f"table {job['table']}: the compaction job failed: {exc}")
    outcome = scheduler.record_outcome(cfg, job["table"], ok, error)
    return {**outcome, "error": error}


def on_compact_success(context) -> None:
    """Resets the table's failure count."""
    _record(context, ok=True)


def on_compact_failure(context) -> None:
    """Counts the failure (the Nth in a row marks the table uncleanable), then calls ``alert``."""
    outcome = _record(context, ok=False)
    if outcome is not None:
        alert(outcome["table"], outcome, context)


def _skip_on_dry_run(context) -> None:
    if context["params"]["dry_run"]:
        raise AirflowSkipException("dry run: no maintenance")


def _now_ms(context) -> int:
    when = context.get("data_interval_end") or context.get("logical_date") or context["dag_run"].run_after
    return int(when.timestamp() * 1000)


def _package_dir() -> Path:
    base = os.environ.get("LAKECLEANER_PACKAGE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("AIRFLOW_HOME") or tempfile.gettempdir()) / "lakecleaner"


# ---------------------------------------------------------------- the DAG
@dag(
    dag_id=DAG_ID,
    schedule=SCHEDULE,
    catchup=False,
    max_active_runs=1,
    tags=["lakecleaner", "iceberg", "spark"],
    doc_md=__doc__,
    default_args={"retries": 0},
    params={
        "tables": Param([], type="array", items={"type": "string"}, title="Tables",
                        description="namespace.table to consider (empty: every compacted table)"),
        "force": Param(False, type="boolean", title="Force",
                       description="clean the tables (requested or all) even if not eligible"),
        "dry_run": Param(False, type="boolean", title="Dry run",
                         description="compute every figure, commit nothing, skip maintenance"),
        "clear_uncleanable": Param([], type="array", items={"type": "string"}, title="Clear uncleanable",
                                   description="tables an operator has fixed: clear their uncleanable mark first"),
    },
)
def lakecleaner():
    @task
    def evaluate(params=None, **context) -> list[dict]:
        from lakecleaner.evaluate import format_table
        from lakecleaner.state import StateStore

        cfg = load_config()  # honours LAKECLEANER_CONFIG
        for table in params["clear_uncleanable"]:
            StateStore(cfg).clear(table)
            log.info("lakecleaner: %s is no longer marked uncleanable", table)
        now_ms = _now_ms(context)
        evaluations = scheduler.evaluate_all(cfg, None, now_ms)
        log.info("lakecleaner: evaluation at now_ms=%d\n%s", now_ms, format_table(evaluations))
        unknown = set(params["tables"]) - {e.table for e in evaluations}
        if unknown:
            log.warning("lakecleaner: requested tables not found among compacted tables: %s", ", ".join(sorted(unknown)))
        jobs = scheduler.plan(evaluations, params["tables"], params["force"])
        log.info("lakecleaner: %d table(s) to clean, in this order: %s", len(jobs), ", ".join(j.table for j in jobs))
        context["ti"].xcom_push(key="evaluations", value=[e.as_dict() for e in evaluations])
        if not jobs:
            return []
        config_path = str(Path(cfg.source).resolve())
        shared = scheduler.submit_options(cfg, _package_dir())
        run_name = (context.get("logical_date") or context["dag_run"].run_after).isoformat()
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        interval_ms = int((end - start).total_seconds() * 1000) if start and end and end > start else 15 * 60_000
        return [{"table": j.table, "priority": j.priority, "reason": j.reason, "now_ms": now_ms, "config": config_path,
                 "compact_args": scheduler.job_args(j.table, config_path, now_ms, params["dry_run"]),
                 "maintain_args": scheduler.job_args(j.table, config_path, now_ms),
                 "validate_args": scheduler.validate_args(j.table, config_path, now_ms, run_name, interval_ms),
                 **shared} for j in jobs]

    # One instance per planned table; prefix_group_id=False keeps the task ids "compact"/"maintain".
    @task_group(group_id="clean_table", prefix_group_id=False)
    def clean_table(table, priority, reason, now_ms, config, compact_args, maintain_args, validate_args,
                    py_files, jars, packages, conf, env_vars):
        submit = dict(conn_id=SPARK_CONN_ID, pool=POOL, py_files=py_files, jars=jars, packages=packages, conf=conf,
                      env_vars=env_vars, map_index_template="{{ task.application_args[0] }}")
        compact = SparkSubmitOperator(
            task_id="compact", application=str(jobs_dir() / "compact.py"), application_args=compact_args,
            name="lakecleaner-compact", on_success_callback=on_compact_success, on_failure_callback=on_compact_failure,
            **submit)
        maintain = SparkSubmitOperator(
            task_id="maintain", application=str(jobs_dir() / "maintain.py"), application_args=maintain_args,
            name="lakecleaner-maintain", pre_execute=_skip_on_dry_run, **submit)
        # Data quality: the table's great-expectations suite; a failed rule fails this task (and the
        # run), with the rule and offending keys in its log. Runs after a skipped (dry-run) maintain.
        validate = SparkSubmitOperator(
            task_id="validate", application=str(jobs_dir() / "validate.py"), application_args=validate_args,
            name="lakecleaner-validate", trigger_rule=TriggerRule.NONE_FAILED, **submit)
        compact >> maintain >> validate

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def summary(**context) -> None:
        ti = context["ti"]
        jobs = ti.xcom_pull(task_ids="evaluate")
        if jobs is None:
            raise AirflowFailException("lakecleaner: evaluate did not finish; nothing was cleaned")
        evaluations = ti.xcom_pull(task_ids="evaluate", key="evaluations") or []
        states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id],
                                    task_ids=["compact", "maintain", "validate"]).get(ti.run_id, {})
        history = []
        if jobs:
            try:
                history = scheduler.run_history(load_config(jobs[0]["config"]), jobs[0]["now_ms"],
                                                [j["table"] for j in jobs])
            except Exception as exc:  # noqa: BLE001 - figures are a courtesy; states decide
                log.warning("lakecleaner: cannot read run history: %s", exc)
        report = scheduler.summarize(evaluations, jobs, states, history)
        log.info(report["text"])
        for row in report["not_run"]:
            log.warning("lakecleaner: %s not run (%s): %s", row["table"], row["status"], row["reason"])
        ti.xcom_push(key="report", value={k: v for k, v in report.items() if k != "text"})
        if jobs or evaluations:  # Kafka's cleaner metrics, kept next to the cleaner state
            try:
                cfg = load_config(jobs[0]["config"]) if jobs else load_config()
                now_ms = jobs[0]["now_ms"] if jobs else _now_ms(context)
                metrics = scheduler.cleaner_metrics(cfg, evaluations, report, now_ms)
                log.info("lakecleaner: cleaner metrics %s (%s)", metrics["overall"], metrics["path"])
                ti.xcom_push(key="metrics", value=metrics["overall"])
            except Exception as exc:  # noqa: BLE001 - metrics are a courtesy; the states decide the run
                log.warning("lakecleaner: cannot write cleaner metrics: %s", exc)
        if report["failed"]:
            raise AirflowFailException(f"lakecleaner: {len(report['failed'])} table(s) failed: "
                                       + ", ".join(report["failed"]))

    jobs = evaluate()
    clean_table.expand_kwargs(jobs) >> summary()


lakecleaner()
