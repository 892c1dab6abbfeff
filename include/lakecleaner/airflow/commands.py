"""``airflow lakecleaner ...``: the provider's commands, run where Airflow's database is reachable
(a scheduler or API server pod, an admin's shell), since a task on an Airflow 3 worker has none.

- ``airflow lakecleaner create-pool [--config FILE] [--pool NAME]``: a pool sized by ``cleaner.threads``
  (Kafka's log.cleaner.threads), for teams that share one pool across DAGs (``lakecleaner_dag(pool=...)``);
  idempotent, it resizes an existing pool. A DAG needs no pool: a run never submits more than
  ``cleaner.threads`` applications at once.
- ``airflow lakecleaner check [--config FILE] [--catalog-conn-id ID]``: the config loads (notifiers and the
  catalog connection included), and what would
  send the Spark applications to the wrong place (no Spark connection: SparkSubmitHook falls back to
  YARN; no spark-submit on this machine's PATH).
"""
from __future__ import annotations

import shutil
import sys

from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand

from lakecleaner.airflow.provider import DEFAULT_POOL
ARG_CONFIG = Arg(("--config",), help="the lakecleaner YAML (default: [lakecleaner] config)")
ARG_CATALOG_CONN = Arg(("--catalog-conn-id",), help="the catalog connection merged over the YAML's catalog "
                                                     "(default: [lakecleaner] catalog_conn_id)")
ARG_POOL = Arg(("--pool",), default=DEFAULT_POOL, help=f"the pool's name (default: {DEFAULT_POOL})")


def create_pool(args) -> None:
    from airflow.models.pool import Pool

    from lakecleaner.airflow.dag import config_path
    from lakecleaner.core.config import load_config

    cfg = load_config(config_path(args.config))
    threads = cfg.cleaner.threads
    Pool.create_or_update_pool(args.pool, threads, f"lakecleaner Spark applications (cleaner.threads={threads})",
                               include_deferred=False)
    print(f"lakecleaner: pool {args.pool} has {threads} slot(s) (cleaner.threads in {cfg.source})")


def problems(conn_id: str) -> list[str]:
    """What would make the DAG's Spark applications fail or go to the wrong place."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    out = []
    try:  # the model's lookup: environment, secrets backends, then the metadata database (the SDK's
        # BaseHook, outside a task, does not read the database)
        Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        out.append(f"no Airflow connection {conn_id!r}: SparkSubmitHook would fall back to master yarn. Define it "
                   "(airflow connections add, a secrets backend, or AIRFLOW_CONN_...), e.g. host local[*] for Spark "
                   "inside the worker")
    if shutil.which("spark-submit") is None:
        out.append("spark-submit is not on this machine's PATH (pip's pyspark puts it in the venv's bin directory)")
    return out


def check(args) -> None:
    from lakecleaner.airflow.catalog import catalog_properties
    from lakecleaner.airflow.dag import catalog_conn, config_path, setting
    from lakecleaner.airflow.notify import load_notifiers
    from lakecleaner.core.config import load_config

    conn_id = catalog_conn(args.catalog_conn_id)
    cfg = load_config(config_path(args.config)).with_catalog(catalog_properties(conn_id))
    load_notifiers(cfg.notifiers)  # a bad notifiers: entry is said now, not at the first run
    print(f"lakecleaner: {cfg.source} loads: catalog {cfg.catalog.name} ({cfg.catalog.type}"
          f"{f', from connection {conn_id}' if conn_id else ''}), cleaner.threads={cfg.cleaner.threads}")
    for problem in problems(setting("spark_conn_id")):
        print(f"lakecleaner: warning: {problem}", file=sys.stderr)


def get_cli_commands() -> list[GroupCommand]:
    return [GroupCommand(name="lakecleaner", help="set up and check lakecleaner DAGs", subcommands=[
        ActionCommand(name="create-pool", help="create or resize a pool sized by cleaner.threads",
                      func=create_pool, args=(ARG_CONFIG, ARG_POOL)),
        ActionCommand(name="check", help="check a lakecleaner config and the Spark connection", func=check,
                      args=(ARG_CONFIG, ARG_CATALOG_CONN)),
    ])]
