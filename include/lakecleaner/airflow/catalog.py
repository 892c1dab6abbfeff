"""A DAG's catalog from an Airflow connection (``lakecleaner_dag(catalog_conn_id=...)``, else
``[lakecleaner] catalog_conn_id``): looked up here, through whatever secrets backend the deployment
uses, and handed to the core as the typed record it merges over the YAML's catalog section
(lakecleaner.core.catalog_connection). The lookup is all this module does."""
from __future__ import annotations

import sys

from lakecleaner.core.catalog_connection import from_connection
from lakecleaner.core.config import CatalogProperties, ConfigError


def _in_task() -> bool:
    """Whether this process runs a task (its connections come through the task SDK's supervisor), as
    Airflow's own Connection model tells."""
    return hasattr(sys.modules.get("airflow.sdk.execution_time.task_runner"), "SUPERVISOR_COMMS")


def _connection(conn_id: str):
    """The connection: in a task through the task SDK (which masks its password and extra in the
    task's log); elsewhere (the API server, the airflow command) through the model's lookup:
    environment, secrets backends, then the metadata database."""
    from airflow.exceptions import AirflowNotFoundException

    try:
        if _in_task():
            from airflow.sdk import Connection

            return Connection.get(conn_id)
        from airflow.models.connection import Connection

        return Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        raise ConfigError(None, "catalog_conn_id", conn_id, "no such Airflow connection (define it in a secrets "
                          "backend, as AIRFLOW_CONN_..., or with airflow connections add)", hide_value=False) from None


def catalog_properties(conn_id: str | None) -> CatalogProperties | None:
    """The catalog settings of connection ``conn_id`` (None: none, the YAML's catalog alone)."""
    if not conn_id:
        return None
    conn = _connection(conn_id)
    return from_connection(conn_id, conn.host, conn.login, conn.password, conn.extra_dejson)


def mask_catalog_secrets(cfg) -> None:
    """Have the task's log mask the secrets derived from the connection's (a REST credential, a JDBC
    catalog's SQLAlchemy URL with its password encoded in it), as the task SDK masks the connection's own."""
    from airflow.sdk.log import mask_secret

    from lakecleaner.core.catalog_connection import is_secret_property

    for props in (cfg.catalog.spark_conf(), cfg.catalog.pyiceberg_properties_resolved()):
        for key, value in props.items():
            if is_secret_property(key, value):
                mask_secret(value)
