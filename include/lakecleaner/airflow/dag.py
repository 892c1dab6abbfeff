"""The lakecleaner DAG factory. A deployment's DAG file is three lines::

    from lakecleaner.airflow import lakecleaner_dag

    dag = lakecleaner_dag(dag_id="lakecleaner_lake", config="/opt/airflow/lakecleaner/lake.yaml")

Each call builds one DAG on one config (its catalog, its state root), so a deployment runs as many
as it has lakes. Every interval the DAG evaluates every compacted Iceberg table from metadata, then
cleans the eligible ones, filthiest first, packed into at most ``cleaner.threads`` Spark
applications that each take the whole chain (compact -> maintain -> validate) for their tables::

    forget_requests ──> forget (mapped) ──> evaluate ──> clean (mapped: one spark-submit per application) ──> summary
                                                                                                        └─> announce

Parsing does no I/O: the config, the connections, the warehouse and the Iceberg jar are read by the
tasks when the run starts. What the factory does not get as an argument comes from the ``[lakecleaner]``
section of airflow.cfg (lakecleaner.airflow.provider.OPTIONS), read when the DAG file is parsed
(``schedule``, ``pool``, ``spark_conn_id``) or when a task runs (``config``, ``catalog_conn_id``,
``code_uri``, ``config_uri``).

- The catalog may come from an Airflow connection (``catalog_conn_id``), merged over the YAML's catalog
  section by every task (lakecleaner.airflow.catalog); the Spark applications get it, with the secret
  Spark settings, in a private properties file (lakecleaner.airflow.operators), never as arguments.
- The Spark connection's master and deploy mode decide each submission: in client mode each
  ``clean``/``forget`` task builds the package Spark needs (``--py-files``) itself, in its own scratch
  space, when it runs (lakecleaner.airflow.shipping: the mapped arguments name no file of the machine
  that computed them); cluster mode on YARN or Kubernetes names only what the cluster reads
  (``code_uri``, ``config_uri``: lakecleaner.core.cluster).

- The run's "now" is its data interval end (a backfill re-applies the policy as of each interval; a
  manual run without an interval uses its logical date, else run_after).
- Packing: tables are dealt in plan order (must-clean ratio, then dirty ratio) to the application
  with the least expected work; an application starts no new table once ``cleaner.application_budget_s``
  (or the interval) is spent. At most ``cleaner.threads`` applications per run and one run at a
  time: that is the cleaner's concurrency, with or without a pool.
- A failing table ends only its own chain: the application records it and goes on; its task then
  fails, and ``summary`` (all_done) fails the run, naming every failed table.
- Observability: Kafka's cleaner metrics through Airflow's Stats (lakecleaner.airflow.metrics),
  alerts through the YAML's notifiers (lakecleaner.airflow.notify), an asset event per compacted
  table through the alias ``lakecleaner-compacted`` (lakecleaner.airflow.assets).
- An application that dies (killed, out of memory) fails its task; its failure callback counts the
  tables it was cleaning, as the application would have.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import replace
import logging
import os
from typing import Any

from airflow.sdk import AssetAlias, Param, TriggerRule, dag, task
from airflow.sdk.exceptions import AirflowFailException

from lakecleaner.airflow import assets, metrics, notify
from lakecleaner.airflow.operators import LakecleanerSubmitOperator
from lakecleaner.airflow.provider import DEFAULT_DAG_ID, OPTION_DEFAULTS, SECTION
from lakecleaner.core import scheduler
from lakecleaner.core.config import ConfigError, LakecleanerConfig, load_config
from lakecleaner.core.evaluate import Evaluation
from lakecleaner.core.housekeeping import prune_documents
from lakecleaner.core.records import ApplicationPlan, RunVerdict
from lakecleaner.core.submit import job_path, operator_options

log = logging.getLogger("lakecleaner")

TAG = "lakecleaner"  # every lakecleaner DAG carries it: the Lake Cleaner page lists the DAGs by it
_UNSET: Any = object()


def setting(name: str) -> str:
    """An option of the [lakecleaner] section (environment: AIRFLOW__LAKECLEANER__<NAME>), else its default."""
    from airflow.configuration import conf

    return conf.get(SECTION, name, fallback=OPTION_DEFAULTS[name])


def config_path(config: str | os.PathLike | None) -> str:
    """The YAML a DAG runs on: the factory's ``config``, else [lakecleaner] config. Resolved when a task
    runs (and by the Lake Cleaner page), never at parse time."""
    path = os.fspath(config) if config else setting("config")
    if not path:
        raise ConfigError(None, "config", None, "no lakecleaner config: pass config= to lakecleaner_dag() or set "
                                                "[lakecleaner] config (AIRFLOW__LAKECLEANER__CONFIG)")
    return path


def catalog_conn(catalog_conn_id: str | None) -> str | None:
    """The catalog connection a DAG runs on: the factory's ``catalog_conn_id``, else [lakecleaner]
    catalog_conn_id, else none (the YAML's catalog alone). Resolved when a task runs."""
    return catalog_conn_id or setting("catalog_conn_id") or None


def catalog_and_config(config: str | None, catalog_conn_id: str | None = None):
    """The connection's catalog settings (None without one) and the config with them merged over the
    YAML's catalog section: what every task (and the Lake Cleaner page) works on."""
    from lakecleaner.airflow.catalog import catalog_properties, mask_catalog_secrets

    given = catalog_properties(catalog_conn(catalog_conn_id))
    cfg = load_config(config_path(config)).with_catalog(given)
    if given is not None:
        mask_catalog_secrets(cfg)
    return given, cfg


def _load(config: str | None, catalog_conn_id: str | None = None) -> LakecleanerConfig:
    return catalog_and_config(config, catalog_conn_id)[1]


def _now_ms(context) -> int:
    when = context.get("data_interval_end") or context.get("logical_date") or context["dag_run"].run_after
    return int(when.timestamp() * 1000)


def _interval_ms(schedule: str | None, context) -> int:
    return scheduler.schedule_interval_ms(schedule, context.get("data_interval_start"), context.get("data_interval_end"))


# ---------------------------------------------------------------- callbacks (run on the worker)
def on_clean_failure(config: str | None, context, catalog_conn_id: str | None = None) -> None:
    """An application's task failed. If the application died while cleaning tables (its report
    names tables in progress), count their failures and alert, as the application would have; a
    table that merely failed was already recorded by the application. The report is named by the
    task's own run id and map index, not read from XCom."""
    ti = context["ti"]
    if (context.get("params") or {}).get("dry_run"):  # it cleaned nothing: no failure of a table to count
        return
    if ti.map_index < 0:
        log.error("lakecleaner: cannot tell which application task %s ran (not a mapped instance)", ti.task_id)
        return
    cfg = _load(config, catalog_conn_id)
    report = scheduler.read_report(cfg, ti.run_id, ti.map_index)
    if report is None or report.finished:
        return
    for table in report.in_progress:
        error = f"table {table}: the Spark application died while cleaning it: {context.get('exception')}"
        outcome = scheduler.record_outcome(cfg, table, False, error, _now_ms(context))
        scheduler.alert(table, replace(outcome, error=error))


PARAMS = {
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
}


# ---------------------------------------------------------------- the factory
def lakecleaner_dag(dag_id: str = DEFAULT_DAG_ID, config: str | os.PathLike | None = None, *,
                    schedule: str | None = _UNSET, pool: str | None = None, spark_conn_id: str | None = None,
                    catalog_conn_id: str | None = None, code_uri: str | None = None, config_uri: str | None = None,
                    tags: tuple[str, ...] = (), **dag_kwargs):
    """One lakecleaner DAG on ``config`` (the YAML; default [lakecleaner] config).

    ``schedule``: a cron expression or preset, or None for triggered runs only (default [lakecleaner]
    schedule, every 15 minutes; "none" there). ``pool``: an existing Airflow pool for the Spark
    applications, shared across DAGs (default [lakecleaner] pool, else Airflow's default pool).
    ``spark_conn_id``: the Spark connection (default [lakecleaner] spark_conn_id: spark_default).
    ``catalog_conn_id``: an Airflow connection (the Iceberg provider's iceberg type) whose catalog
    settings are merged over the YAML's catalog section when a task runs (default [lakecleaner]
    catalog_conn_id; none: the YAML's catalog alone). ``code_uri`` and ``config_uri``: where a driver
    in cluster deploy mode (the Spark connection's deploy-mode, on YARN or Kubernetes) reads the code
    and the config (default [lakecleaner] code_uri and config_uri; no config_uri: the config goes
    inline; lakecleaner.core.cluster).
    Other keyword arguments go to Airflow's ``dag`` (start_date, default_args, access_control...).
    """
    if schedule is _UNSET:
        schedule = setting("schedule")
    if isinstance(schedule, str) and schedule.strip().lower() in ("", "none"):
        schedule = None
    config = os.fspath(config) if config else None
    pool = pool or setting("pool") or None
    conn_id = spark_conn_id or setting("spark_conn_id")
    submit = {"conn_id": conn_id, "map_index_template": "{{ task.name }}", **({"pool": pool} if pool else {}),
              "lakecleaner_config": config, "catalog_conn_id": catalog_conn_id}
    on = {"config": config, "catalog_conn_id": catalog_conn_id}  # what every task loads
    # what the tasks that build the spark-submits need besides (read when they run)
    to = {"spark_conn_id": conn_id, "code_uri": code_uri, "config_uri": config_uri}

    @dag(dag_id=dag_id, schedule=schedule, catchup=False, max_active_runs=1, doc_md=__doc__,
         tags=[TAG, "iceberg", "spark", *tags], default_args=dag_kwargs.pop("default_args", {"retries": 0}),
         params=copy.deepcopy(PARAMS), **dag_kwargs)  # each DAG its own Param objects
    def lakecleaner():
        # the application, like the rest of the submission, is the mapped arguments': it depends on the deploy
        # mode. The operator writes the private properties file and, in client mode, builds the package it ships.
        forget = LakecleanerSubmitOperator.partial(task_id="forget", **submit)
        clean = LakecleanerSubmitOperator.partial(
            task_id="clean", **submit,
            on_failure_callback=functools.partial(on_clean_failure, config, catalog_conn_id=catalog_conn_id))
        summary_task = task(trigger_rule=TriggerRule.ALL_DONE)(summary)
        announce_task = task(trigger_rule=TriggerRule.ALL_DONE, outlets=[AssetAlias(assets.ALIAS)])(announce)
        evaluated = task(trigger_rule=TriggerRule.ALL_DONE)(evaluate)(**on, **to, schedule=schedule)
        forget.expand_kwargs(task(forget_requests)(**on, **to, schedule=schedule)) >> evaluated
        # Beside summary, not after it: summary must stay a leaf (it fails the run), and a failed
        # task's asset events are dropped.
        clean.expand_kwargs(evaluated) >> [summary_task(**on), announce_task(**on)]

    return lakecleaner()


# ---------------------------------------------------------------- the tasks
def forget_requests(config: str | None, schedule: str | None, params=None, catalog_conn_id: str | None = None,
                    spark_conn_id: str | None = None, code_uri: str | None = None, config_uri: str | None = None,
                    **context) -> list[dict]:
    """The pending erasure requests (those named by the `forget` param, else all) as one Spark
    application; none pending: the mapped `forget` is skipped. Read without Spark and without their
    keys: XCom, the rendered arguments and the logs carry request ids only. It runs before
    `evaluate`, so within a run erasures and compactions never overlap; `dry_run` counts what would go."""
    from lakecleaner.core.erasure_requests import (list_pending, not_pending, request_statuses, requests_ref,
                                                   unmatched_requests)

    given, cfg = catalog_and_config(config, catalog_conn_id)
    pending = list_pending(cfg, params["forget"])
    missing = not_pending((i for i in params["forget"] if isinstance(i, str)), pending)  # (an old conf: objects)
    unmatched, table = unmatched_requests(missing, request_statuses(cfg, missing)), requests_ref(cfg).short
    for u in unmatched:  # summary fails the run for an unknown id; the rest of the run goes on
        (log.error if u.fails_the_run else log.warning)("lakecleaner: %s", u.message(table))
    context["ti"].xcom_push(key="unknown_requests", value=[u.message(table) for u in unmatched if u.fails_the_run])
    if not pending:
        return []
    log.info("lakecleaner: %d pending erasure request(s): %s", len(pending),
             ", ".join(f"{p.request_id} ({p.table}, {p.keys} key(s))" for p in pending))
    run = context["dag_run"]
    # now: the wall clock, as an erasure deadline is about real time. Values people chose (request
    # ids, user names) as --opt=value: one starting with '-' is a value, not an option.
    options, config_arg = _submission(cfg, given, "forget.py", spark_conn_id, code_uri, config_uri)
    args = ["--config", config_arg, "--interval-ms", str(_interval_ms(schedule, context)),
            f"--dag-run-id={run.run_id}", *(f"--request-id={p.request_id}" for p in pending)]
    args += [f"--triggered-by={run.triggering_user_name}"] if getattr(run, "triggering_user_name", None) else []
    args += ["--dry-run"] if params["dry_run"] else []
    return [{"name": "forget", **options, "application_args": args}]


def evaluate(config: str | None, schedule: str | None, params=None, catalog_conn_id: str | None = None,
             spark_conn_id: str | None = None, code_uri: str | None = None, config_uri: str | None = None,
             **context) -> list[dict]:
    """Every compacted table evaluated from metadata, the eligible ones planned and packed: one
    mapped `clean` per application."""
    given, cfg = catalog_and_config(config, catalog_conn_id)
    notify.load_notifiers(cfg.notifiers)  # a bad notifiers: entry fails the run here, naming it
    run = scheduler.plan_run(cfg, _now_ms(context), tables=params["tables"], force=params["force"],
                             clear_uncleanable=params["clear_uncleanable"], dry_run=params["dry_run"])
    ti = context["ti"]
    ti.xcom_push(key="evaluations", value=[e.as_dict() for e in run.evaluations])
    figures = metrics.evaluation_metrics(run.evaluations)  # Kafka's cleaner gauges
    try:
        metrics.emit(figures)
    except Exception as exc:  # noqa: BLE001 - metrics are a courtesy; cleaning goes on
        log.warning("lakecleaner: cannot send the evaluation metrics: %s", exc)
    ti.xcom_push(key="metrics", value=metrics.overall(figures))
    # ids and figures only: the late tasks derive every path they open (report_name, the config)
    ti.xcom_push(key="applications", value=[a.to_dict() for a in run.planned()])
    if not run.applications:
        return []
    shared, config_arg = _submission(cfg, given, "clean.py", spark_conn_id, code_uri, config_uri)
    return _application_kwargs(cfg, run.applications, run.now_ms, schedule, params, context, shared, config_arg)


def _submission(cfg: LakecleanerConfig, given, job: str, spark_conn_id: str | None, code_uri: str | None,
                config_uri: str | None) -> tuple[dict, str]:
    """The SparkSubmitOperator arguments of ``job`` (all but its application arguments) and its --config
    argument, for the Spark connection's master and deploy mode: client mode names the config and the
    job by their paths in the deployment and no package (the submitting task builds the one it ships:
    lakecleaner.airflow.shipping); cluster mode (YARN, Kubernetes) names only what the cluster reads
    (lakecleaner.core.cluster)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from lakecleaner.core.cluster import SparkTarget, SubmitError, cluster_options, config_reference

    connection = SparkSubmitHook(conn_id=spark_conn_id or setting("spark_conn_id"))._connection
    try:
        target = SparkTarget(connection["master"], connection["deploy_mode"]).check()
        if not target.cluster:
            return ({"application": job_path(job), **operator_options(cfg), "deploy_mode": "client"},
                    # absolute, symlinks kept: a Kubernetes ConfigMap or Secret volume links each file
                    # through ..data into a directory named for this pod's mount, which no other pod has
                    os.path.abspath(cfg.source))
        options, needed = cluster_options(cfg, code_uri or setting("code_uri") or None, job, given)
        config_arg = config_reference(cfg, config_uri or setting("config_uri") or None)
    except SubmitError as exc:
        raise AirflowFailException(f"lakecleaner: {exc}") from None
    if needed:
        log.info("lakecleaner: cluster deploy mode: the driver reads the catalog connection's secret properties from "
                 "its environment variables %s (give them by the cluster's means, e.g. "
                 "spark.kubernetes.driver.secretKeyRef.<NAME>)", ", ".join(needed))
    return options, config_arg


def _application_kwargs(cfg: LakecleanerConfig, apps, now_ms: int, schedule: str | None, params, context,
                        shared: dict, config: str) -> list[dict]:
    """The mapped `clean` task's arguments: one spark-submit of clean.py per application."""
    run_id = context["dag_run"].run_id
    run_name = (context.get("logical_date") or context["dag_run"].run_after).isoformat()
    interval_ms = _interval_ms(schedule, context)
    budget_s = scheduler.application_budget_s(cfg, interval_ms)
    for a in apps:
        log.info("lakecleaner: application %d (%.1f MB expected): %s", a.index, a.work_bytes / 2**20, ", ".join(a.tables))
    return [{"name": a.label, **shared, "application_args": scheduler.clean_args(
                a, config, now_ms, run_name=run_name, interval_ms=interval_ms, budget_s=budget_s,
                report=scheduler.report_name(run_id, a.index), dry_run=params["dry_run"])} for a in apps]


def _planned(ti) -> list[ApplicationPlan]:
    """The applications evaluate planned (XCom: ids and figures, no path)."""
    return [ApplicationPlan.from_dict(a) for a in ti.xcom_pull(task_ids="evaluate", key="applications") or []]


def summary(config: str | None, catalog_conn_id: str | None = None, **context) -> None:
    """The run's report, metrics and alerts; fails the run when a table, an application, an alert
    or an erasure request failed."""
    ti = context["ti"]
    if ti.xcom_pull(task_ids="evaluate") is None:
        raise AirflowFailException("lakecleaner: evaluate did not finish; nothing was cleaned")
    evaluations = scheduler.evaluations_of(ti.xcom_pull(task_ids="evaluate", key="evaluations") or [])
    apps = _planned(ti)
    states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id], task_ids=["clean"]).get(ti.run_id, {})
    cfg = _load(config, catalog_conn_id)  # as evaluate's: XCom names no path
    now_ms = _now_ms(context)
    verdict = scheduler.finish_run(cfg, ti.run_id, evaluations, apps, states, now_ms)
    log.info(verdict.text)
    for row in verdict.not_run:
        log.warning("lakecleaner: %s not run (%s): %s", row.table, row.status, row.reason)
    ti.xcom_push(key="report", value=verdict.to_dict())
    notify_errors = _after_the_run(cfg, evaluations, verdict, now_ms, context) if apps or evaluations else []
    forget_failed = [k for k, s in ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id], task_ids=[
        "forget_requests", "forget"]).get(ti.run_id, {}).items() if s in ("failed", "upstream_failed")]
    if forget_failed:  # its log names each table and why; the tables were cleaned all the same
        raise AirflowFailException(f"lakecleaner: erasure request(s) failed ({', '.join(forget_failed)}); "
                                   "see the forget task's log")
    # a typo in the forget param erased nothing: said and failed, the tables cleaned all the same
    unknown = ti.xcom_pull(task_ids="forget_requests", key="unknown_requests") or []
    failures = [f for f in (verdict.failure(notify_errors),) if f] + [f"lakecleaner: {m}" for m in unknown]
    if failures:
        raise AirflowFailException("; ".join(failures))


def _after_the_run(cfg: LakecleanerConfig, evaluations: list[Evaluation], verdict: RunVerdict, now_ms: int,
                   context) -> list[str]:
    """Metrics, alerts and housekeeping after a run; the alerts that could not be sent."""
    ti = context["ti"]
    listed = scheduler.listed_tables(evaluations)
    table_states = scheduler.table_states(cfg, listed)
    figures = metrics.run_metrics(verdict, {t: s.last_success_ms for t, s in table_states.items()}, now_ms)
    ti.xcom_push(key="metrics", value=metrics.overall(figures))
    try:
        log.info("lakecleaner: sent %d cleaner metrics: %s", metrics.emit(figures), metrics.overall(figures))
    except Exception as exc:  # noqa: BLE001 - metrics are a courtesy; the outcomes decide the run
        log.warning("lakecleaner: cannot send cleaner metrics: %s", exc)
    alerts = notify.run_alerts(evaluations, verdict, {t: s.marked_at_ms for t, s in table_states.items()}, now_ms)
    for alert in alerts:
        log.warning("lakecleaner: alert %s", alert.message)
    notify_errors = []
    try:
        notifiers = notify.load_notifiers(cfg.notifiers)
    except ConfigError as exc:  # the config changed since evaluate checked it
        notifiers, notify_errors = (), [str(exc)]
    notify_errors += notify.send(notifiers, alerts, context)
    try:  # the cleaner's own files, bounded like any table's
        log.info("lakecleaner: removed old documents: %s", prune_documents(cfg, now_ms, listed))
    except Exception as exc:  # noqa: BLE001 - housekeeping never decides the run
        log.warning("lakecleaner: cannot prune old documents: %s", exc)
    return notify_errors


def announce(config: str | None, catalog_conn_id: str | None = None, **context) -> list[str]:
    """An asset event per table compacted this run, through one alias."""
    ti = context["ti"]
    apps = _planned(ti)
    if not apps:
        return []
    cfg = _load(config, catalog_conn_id)  # as summary: reports named from the run id
    reports = scheduler.read_reports(cfg, ti.run_id, apps).values()
    outcomes = [o.to_dict() for r in reports if r is not None for o in r.outcomes]
    events = assets.compaction_events(cfg.catalog, outcomes, _now_ms(context))
    assets.add_events(context["outlet_events"], events)
    return [e.uri for e in events]
