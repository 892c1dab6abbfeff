"""The lakecleaner scheduler: every interval, evaluate every compacted Iceberg table from metadata,
then clean the eligible ones, filthiest first, packed into at most ``cleaner.threads`` Spark
applications that each take the whole chain (compact -> maintain -> validate) for their tables.

Wiring only. Nothing here reads the config, the warehouse or the Iceberg jar at parse time: the
``evaluate`` task does all of that when the run starts. The logic is in ``lakecleaner.scheduler``
(planning, packing, the summary) and ``lakecleaner.batch`` (the application).

    evaluate ──> clean (mapped: one spark-submit of jobs/clean.py per application, pool "lakecleaner") ──> summary
                                                                                                    └─> announce

- The run's "now" is its data interval end (a backfill re-applies the policy as of each interval;
  a manual run without an interval uses its logical date, else run_after).
- Packing: tables are dealt in plan order (must-clean ratio, then dirty ratio) to the application
  with the least expected work (bytes from evaluate), so the filthiest start first and the
  applications are balanced; each application's task instance is named by its tables. An
  application starts no new table once ``cleaner.application_budget_s`` (or the interval) is spent:
  the rest are left, still ranked, to the next run.
- A failing table ends only its own chain: the application records it (run history, failure
  count, the Nth in a row marks it uncleanable: ``cleaner.uncleanable_after_failures``) and goes
  on; its task then fails, and ``summary`` (all_done) fails the run, naming every failed table.
  Each table has its own delimited section in the task log.
- Observability: ``evaluate`` and ``summary`` send Kafka's cleaner metrics through Airflow's Stats
  (``lakecleaner.metrics``); ``summary`` sends the run's alerts through the YAML's notifiers
  (``lakecleaner.notify``); ``announce`` (all_done, beside summary) adds an asset event per compacted table
  through the alias ``lakecleaner-compacted`` (``lakecleaner.assets``).
- An application that dies (killed, out of memory) fails its task; its failure callback counts
  the table it was cleaning, as the application would have.
- Environment: ``LAKECLEANER_CONFIG`` (the YAML), ``LAKECLEANER_SCHEDULE`` (cron, default every 15
  min; ``none`` for triggered runs only), ``LAKECLEANER_PACKAGE_DIR`` (where the --py-files zip is built; must be visible to the
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
from airflow.sdk import AssetAlias, Param, TriggerRule, dag, task
from airflow.sdk.exceptions import AirflowFailException

from lakecleaner import assets, metrics, notify, scheduler
from lakecleaner.config import ConfigError, load_config
from lakecleaner.housekeeping import prune_documents
from lakecleaner.state import read_document
from lakecleaner.submit import jobs_dir, operator_options

log = logging.getLogger("lakecleaner")

DAG_ID = "lakecleaner"
POOL = "lakecleaner"  # sized by cleaner.threads: see lakecleaner.airflow_setup
SPARK_CONN_ID = "spark_default"
# "none": runs are only triggered (by hand, the API, another scheduler); each then cleans as of its start
SCHEDULE = os.environ.get("LAKECLEANER_SCHEDULE", "*/15 * * * *")
SCHEDULE = None if SCHEDULE.strip().lower() == "none" else SCHEDULE


# ---------------------------------------------------------------- callbacks (run on the worker)
def on_clean_failure(context) -> None:
    """An application's task failed. If the application died while cleaning tables (its report
    names tables in progress), count their failures and alert, as the application would have; a
    table that merely failed was already recorded by the application. The config and the report
    come from the environment and the task's own run id and map index, not from XCom."""
    ti = context["ti"]
    if ti.map_index < 0:
        log.error("lakecleaner: cannot tell which application task %s ran (not a mapped instance)", ti.task_id)
        return
    cfg = load_config()
    report = read_document(cfg, scheduler.report_name(ti.run_id, ti.map_index))
    if report is None or report.get("finished"):
        return
    for table in report.get("in_progress") or []:
        error = f"table {table}: the Spark application died while cleaning it: {context.get('exception')}"
        outcome = scheduler.record_outcome(cfg, table, False, error, _now_ms(context))
        scheduler.alert(table, {**outcome, "error": error})


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
        "forget": Param([], type="array", items={"type": "string"}, title="Forget (erasure request ids)",
                        description="ids of pending requests in the forget_requests table to carry out (empty: "
                                    "every pending one). Never keys: write them to the request table "
                                    "(lakecleaner forget, or SQL)"),
    },
)
def lakecleaner():
    @task
    def forget_requests(params=None, **context) -> list[dict]:
        """The pending erasure requests (those named by the `forget` param, else all) as one Spark
        application; none pending: the mapped `forget` is skipped. Read without Spark and without
        their keys: XCom, the rendered arguments and the logs carry request ids only. It runs before
        `evaluate`, so within a run erasures and compactions never overlap; `dry_run` counts what
        would go."""
        from lakecleaner.erasure_requests import list_pending

        cfg = load_config()
        pending = list_pending(cfg, params["forget"])
        if not pending:
            return []
        log.info("lakecleaner: %d pending erasure request(s): %s", len(pending),
                 ", ".join(f"{p.request_id} ({p.table}, {p.keys} key(s))" for p in pending))
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        interval_ms = scheduler.schedule_interval_ms(SCHEDULE, start, end)
        run = context["dag_run"]
        # now: the wall clock, as an erasure deadline is about real time. Values people chose (request
        # ids, user names) as --opt=value: one starting with '-' is a value, not an option.
        args = ["--config", str(Path(cfg.source).resolve()), "--interval-ms", str(interval_ms),
                f"--dag-run-id={run.run_id}", *(f"--request-id={p.request_id}" for p in pending)]
        args += [f"--triggered-by={run.triggering_user_name}"] if getattr(run, "triggering_user_name", None) else []
        args += ["--dry-run"] if params["dry_run"] else []
        return [{"name": "forget", **operator_options(cfg, _package_dir()), "application_args": args}]

    forget = SparkSubmitOperator.partial(task_id="forget", conn_id=SPARK_CONN_ID, pool=POOL,
                                         application=str(jobs_dir() / "forget.py"), map_index_template="{{ task.name }}")

    @task(trigger_rule=TriggerRule.ALL_DONE)  # after forget, whatever it did: a bad request stops no table
    def evaluate(params=None, **context) -> list[dict]:
        from lakecleaner.evaluate import format_table
        from lakecleaner.state import StateStore

        cfg = load_config()  # honours LAKECLEANER_CONFIG
        notify.load_notifiers(cfg.notifiers)  # a bad notifiers: entry fails the run here, naming it
        for table in params["clear_uncleanable"]:
            try:
                StateStore(cfg).clear(table)
            except ValueError as exc:  # a bad name in the param: said, and the run goes on
                log.error("lakecleaner: clear_uncleanable: %s", exc)
                continue
            log.info("lakecleaner: %s is no longer marked uncleanable", table)
        now_ms = _now_ms(context)
        evaluations = scheduler.evaluate_all(cfg, None, now_ms)
        log.info("lakecleaner: evaluation at now_ms=%d\n%s", now_ms, format_table(evaluations))
        unknown = set(params["tables"]) - {e.table for e in evaluations}
        if unknown:
            log.warning("lakecleaner: requested tables not found among compacted tables: %s", ", ".join(sorted(unknown)))
        jobs = scheduler.plan(evaluations, params["tables"], params["force"])
        apps = scheduler.pack(jobs, cfg.cleaner.threads)
        log.info("lakecleaner: %d table(s) to clean in %d application(s), in this order: %s", len(jobs), len(apps),
                 ", ".join(j.table for j in jobs))
        context["ti"].xcom_push(key="evaluations", value=[e.as_dict() for e in evaluations])
        figures = metrics.evaluation_metrics(e.as_dict() for e in evaluations)  # Kafka's cleaner gauges
        try:
            metrics.emit(figures)
        except Exception as exc:  # noqa: BLE001 - metrics are a courtesy; cleaning goes on
            log.warning("lakecleaner: cannot send the evaluation metrics: %s", exc)
        context["ti"].xcom_push(key="metrics", value=metrics.overall(figures))
        try:  # what the Lake Cleaner page presents (it never re-evaluates on a request)
            scheduler.record_evaluation(cfg, evaluations, now_ms)
        except Exception as exc:  # noqa: BLE001 - the page then says how old its evaluation is; cleaning goes on
            log.warning("lakecleaner: cannot record the evaluation for the UI: %s", exc)
        config_path = str(Path(cfg.source).resolve())
        run_id = context["dag_run"].run_id
        # ids and figures only: the late tasks derive every path they open (report_name, load_config)
        context["ti"].xcom_push(key="applications", value=scheduler.planned_applications(apps, now_ms))
        if not apps:
            return []
        shared = operator_options(cfg, _package_dir())
        run_name = (context.get("logical_date") or context["dag_run"].run_after).isoformat()
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        interval_ms = scheduler.schedule_interval_ms(SCHEDULE, start, end)
        budget_s = scheduler.application_budget_s(cfg, interval_ms)
        for a in apps:
            log.info("lakecleaner: application %d (%.1f MB expected): %s", a.index, a.work_bytes / 2**20,
                     ", ".join(a.tables))
        return [{"name": a.label, **shared, "application_args": scheduler.clean_args(
                    a, config_path, now_ms, run_name=run_name, interval_ms=interval_ms, budget_s=budget_s,
                    report=scheduler.report_name(run_id, a.index), dry_run=params["dry_run"])} for a in apps]

    # One Spark application per packed group of tables; the UI names each instance by its tables.
    clean = SparkSubmitOperator.partial(
        task_id="clean", conn_id=SPARK_CONN_ID, pool=POOL, application=str(jobs_dir() / "clean.py"),
        map_index_template="{{ task.name }}", on_failure_callback=on_clean_failure)

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def summary(**context) -> None:
        ti = context["ti"]
        if ti.xcom_pull(task_ids="evaluate") is None:
            raise AirflowFailException("lakecleaner: evaluate did not finish; nothing was cleaned")
        evaluations = ti.xcom_pull(task_ids="evaluate", key="evaluations") or []
        apps = ti.xcom_pull(task_ids="evaluate", key="applications") or []
        states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id], task_ids=["clean"]).get(ti.run_id, {})
        cfg = load_config()  # the DAG's (LAKECLEANER_CONFIG), as evaluate's: XCom names no path
        now_ms = _now_ms(context)
        reports, history = {}, []
        for app in apps:
            try:
                reports[app["index"]] = read_document(cfg, scheduler.report_name(ti.run_id, app["index"]))
            except Exception as exc:  # noqa: BLE001 - the application's tables then show as not run
                log.warning("lakecleaner: cannot read an application's report: %s", exc)
        if apps:
            try:
                history = scheduler.run_history(cfg, now_ms, [t for a in apps for t in a["tables"]])
            except Exception as exc:  # noqa: BLE001 - figures are a courtesy; the reports decide
                log.warning("lakecleaner: cannot read run history: %s", exc)
        report = scheduler.summarize(evaluations, apps, reports, states, history)
        log.info(report["text"])
        for row in report["not_run"]:
            log.warning("lakecleaner: %s not run (%s): %s", row["table"], row["status"], row["reason"])
        ti.xcom_push(key="report", value={k: v for k, v in report.items() if k != "text"})
        notify_errors = []
        if apps or evaluations:
            table_states = scheduler.table_states(cfg, [e["table"] for e in evaluations])
            figures = metrics.run_metrics(report, {t: s.last_success_ms for t, s in table_states.items()}, now_ms)
            ti.xcom_push(key="metrics", value=metrics.overall(figures))
            try:
                log.info("lakecleaner: sent %d cleaner metrics: %s", metrics.emit(figures), metrics.overall(figures))
            except Exception as exc:  # noqa: BLE001 - metrics are a courtesy; the outcomes decide the run
                log.warning("lakecleaner: cannot send cleaner metrics: %s", exc)
            alerts = notify.run_alerts(evaluations, report, {t: s.marked_at_ms for t, s in table_states.items()},
                                       now_ms)
            for alert in alerts:
                log.warning("lakecleaner: alert %s", alert.message)
            try:
                notifiers = notify.load_notifiers(cfg.notifiers)
            except ConfigError as exc:  # the config changed since evaluate checked it
                notifiers, notify_errors = (), [str(exc)]
            notify_errors += notify.send(notifiers, alerts, context)
            try:  # the cleaner's own files, bounded like any table's
                log.info("lakecleaner: removed old documents: %s", prune_documents(cfg, now_ms, [e["table"] for e in evaluations]))
            except Exception as exc:  # noqa: BLE001 - housekeeping never decides the run
                log.warning("lakecleaner: cannot prune old documents: %s", exc)
        forget_failed = [k for k, s in ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id], task_ids=[
            "forget_requests", "forget"]).get(ti.run_id, {}).items() if s in ("failed", "upstream_failed")]
        if forget_failed:  # its log names each table and why; the tables were cleaned all the same
            raise AirflowFailException(f"lakecleaner: erasure request(s) failed ({', '.join(forget_failed)}); "
                                       "see the forget task's log")
        if report["failed"] or report["failed_applications"] or notify_errors:
            raise AirflowFailException(
                f"lakecleaner: {len(report['failed'])} table(s) failed: {', '.join(report['failed']) or 'none'}"
                + (f"; application(s) {report['failed_applications']} did not end well"
                   if report["failed_applications"] else "")
                + (f"; {len(notify_errors)} alert(s) not sent: {notify_errors[0]}" if notify_errors else ""))

    # Beside summary, not after it: summary must stay a leaf (it fails the run), and a failed task's
    # asset events are dropped. An event per table compacted this run, through one alias.
    @task(trigger_rule=TriggerRule.ALL_DONE, outlets=[AssetAlias(assets.ALIAS)])
    def announce(**context) -> list[str]:
        ti = context["ti"]
        apps = ti.xcom_pull(task_ids="evaluate", key="applications") or []
        if not apps:
            return []
        cfg = load_config()  # as summary: the environment's config, reports named from the run id
        outcomes = []
        for app in apps:
            try:
                outcomes += (read_document(cfg, scheduler.report_name(ti.run_id, app["index"])) or {}).get("outcomes", [])
            except Exception as exc:  # noqa: BLE001 - that application's tables announce nothing; summary says why
                log.warning("lakecleaner: cannot read an application's report: %s", exc)
        events = assets.compaction_events(cfg.catalog.name, outcomes, _now_ms(context))
        assets.add_events(context["outlet_events"], events)
        return [e.uri for e in events]

    evaluated = evaluate()
    forget.expand_kwargs(forget_requests()) >> evaluated
    clean.expand_kwargs(evaluated) >> [summary(), announce()]


lakecleaner()
